// Tempo transactions (type 0x76) signed through @turnkey/viem, which sends them with
// TRANSACTION_TYPE_TEMPO as it does against the product, serialized by viem's Tempo chain serializer;
// viem then reads the signed transaction back and recovers its sender. Policies see `tempo.tx` with
// the product's field names (features/policies/language.mdx, examples/tempo.mdx).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAccount } from "@turnkey/viem";
import { serializeTransaction, type Hex } from "viem";
import { tempoModerato } from "viem/chains";
import { Transaction } from "viem/tempo";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";

const ALPHA_USD = "0x20C0000000000000000000000000000000000001"; // the product's with-tempo example fee token
const RECIPIENT = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const transferData = `0xa9059cbb000000000000000000000000${RECIPIENT.slice(2).toLowerCase()}${1000n.toString(16).padStart(64, "0")}` as Hex;
const serializer = tempoModerato.serializers!.transaction as (tx: unknown, signature?: unknown) => Promise<Hex>;

const tempoTransaction = (calls: { to: Hex; data?: Hex }[], extra: Record<string, unknown> = {}) => ({
  type: "tempo" as const,
  chainId: tempoModerato.id,
  nonce: 4,
  gas: 120_000n,
  maxFeePerGas: 20_000_000_000n,
  maxPriorityFeePerGas: 1_000_000_000n,
  feeToken: ALPHA_USD,
  calls,
  ...extra,
});

let h: Harness;
let org: TestOrganization;
let client: ReturnType<Harness["sdk"]>;
let ethAddress: string;
let solanaAddress: string;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Tempo");
  client = h.sdk(org, org.key);
  const wallet = await client.createWallet({
    walletName: "tempo",
    accounts: [
      // The product's with-tempo example: an Ethereum account (features/networks/tempo.mdx).
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      { curve: "CURVE_ED25519", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/501'/0'/0'", addressFormat: "ADDRESS_FORMAT_SOLANA" },
    ],
  });
  [ethAddress, solanaAddress] = wallet.addresses as [string, string];
});
afterAll(() => h.close());

async function signWith(member: { client: ReturnType<Harness["sdk"]> }, organizationId: string, address: string, tx: unknown) {
  const account = await createAccount({ client: member.client as never, organizationId, signWith: address });
  return account.signTransaction(tx as never, { serializer: serializer as never });
}

describe("sign_transaction with TRANSACTION_TYPE_TEMPO through @turnkey/viem", () => {
  it("signs single and batched calls; viem reads them back and recovers the sender", async () => {
    const batched = tempoTransaction([
      { to: ALPHA_USD, data: transferData },
      { to: "0x20C0000000000000000000000000000000000002", data: transferData },
    ]);
    for (const tx of [tempoTransaction([{ to: ALPHA_USD, data: transferData }]), batched]) {
      const signed = await signWith({ client }, org.organizationId, ethAddress, tx);
      expect(signed.startsWith("0x76")).toBe(true);
      const read = Transaction.deserialize(signed as `0x76${string}`) as Record<string, any>;
      expect(read.from.toLowerCase()).toBe(ethAddress.toLowerCase());
      expect(read.calls).toHaveLength(tx.calls.length);
      expect(read.calls[0].data).toBe(transferData);
      expect(read.nonce).toBe(4);
      // The signature is the sender's secp256k1 one, and the signed bytes are the unsigned ones plus it.
      expect(read.signature.type).toBe("secp256k1");
      expect(await serializer({ ...read, signature: undefined, from: undefined })).toBe(await serializer(tx));
    }
  });

  it("refuses an Ethereum transaction sent as Tempo, a signed one, and an ed25519 key, recording only the failed activity", async () => {
    const unsigned = (await serializer(tempoTransaction([{ to: ALPHA_USD, data: transferData }]))).slice(2);
    const ethereum = serializeTransaction({
      to: RECIPIENT,
      chainId: 1,
      nonce: 0,
      gas: 21000n,
      maxFeePerGas: 1n,
      maxPriorityFeePerGas: 1n,
      type: "eip1559",
    });
    const signed = (await signWith({ client }, org.organizationId, ethAddress, tempoTransaction([{ to: ALPHA_USD }]))).slice(2);
    const cases: [string, string, string][] = [
      [ethAddress, ethereum.slice(2), "must be the hex of a Tempo transaction (type 0x76)"],
      [ethAddress, "76c0", "is not a valid Tempo transaction: its RLP list does not hold a Tempo transaction's fields"],
      [ethAddress, signed, "already signed"],
      // A trailing byte after the RLP list: not the encoding of the transaction policies would see.
      [ethAddress, `${unsigned}00`, "is not in the canonical encoding of the transaction it describes"],
      [solanaAddress, unsigned, `Tempo transactions are signed with secp256k1 keys, and ${solanaAddress} is CURVE_ED25519`],
    ];
    for (const [signWith, unsignedTransaction, message] of cases) {
      const { failure } = await refusedLeavingOnlyItsActivity(
        h,
        () => client.signTransaction({ signWith, unsignedTransaction, type: "TRANSACTION_TYPE_TEMPO" }),
        { code: 3, message: expect.stringContaining(message) },
      );
      expect(failure.code).toBe(3);
    }
  });
});

describe("tempo.tx policies", () => {
  async function spender(condition: string) {
    const { org: spenderOrg, root, members } = await organizationWith(h, ["spender"]);
    const { addresses } = await root.createWallet({
      walletName: "tempo",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    const member = members.spender!;
    await root.createPolicy({
      policyName: condition.slice(0, 200),
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${member.userId}')`,
      condition,
      notes: "",
    });
    return { member, address: addresses[0]!, organizationId: spenderOrg.organizationId };
  }

  async function expectDenied(attempt: () => Promise<unknown>) {
    const before = JSON.parse(await h.snapshot());
    await expect(attempt()).rejects.toThrow(/OUTCOME_DENY_IMPLICIT/);
    const after = JSON.parse(await h.snapshot());
    for (const table of ["wallets", "wallet_accounts", "private_keys", "policies", "users"])
      expect(after[table], table).toEqual(before[table]);
  }

  it("the docs' examples: chain, fee token, every call's destination, the selector and a calldata slice", async () => {
    const condition =
      `tempo.tx.chain_id == 42431 && tempo.tx.fee_token == '${ALPHA_USD}' && tempo.tx.calls.all(call, call.to == '${ALPHA_USD}') && ` +
      `tempo.tx.calls[0].function_signature == '0xa9059cbb' && tempo.tx.calls[0].input[34..74] == '${RECIPIENT.slice(2).toLowerCase()}' && ` +
      "tempo.tx.gas_limit <= 200000 && tempo.tx.max_fee_per_gas <= 20000000000 && tempo.tx.valid_before == 0 && tempo.tx.nonce == 4";
    const { member, address, organizationId } = await spender(condition);
    const allowed = tempoTransaction([{ to: ALPHA_USD, data: transferData }]);
    const signed = await signWith(member, organizationId, address, allowed);
    expect((Transaction.deserialize(signed as `0x76${string}`) as { from: string }).from.toLowerCase()).toBe(address.toLowerCase());
    // A second call elsewhere, another fee cap, another recipient in the calldata: each is refused.
    await expectDenied(() =>
      signWith(member, organizationId, address, tempoTransaction([{ to: ALPHA_USD, data: transferData }, { to: RECIPIENT }])),
    );
    await expectDenied(() => signWith(member, organizationId, address, { ...allowed, maxFeePerGas: 20_000_000_001n }));
    const otherRecipient = transferData.replace(RECIPIENT.slice(2).toLowerCase(), "11".repeat(20)) as Hex;
    await expectDenied(() => signWith(member, organizationId, address, tempoTransaction([{ to: ALPHA_USD, data: otherRecipient }])));
  });

  it("from is the signer, and policies naming tempo.tx are type-checked when stored", async () => {
    const { member, address, organizationId } = await spender("tempo.tx.from != '' && tempo.tx.calls.count() == 1");
    await expect(signWith(member, organizationId, address, tempoTransaction([{ to: ALPHA_USD }]))).resolves.toMatch(/^0x76/);
    const { root } = await organizationWith(h, []);
    await expect(
      root.createPolicy({ policyName: "typo", effect: "EFFECT_ALLOW", condition: "tempo.tx.calls[0].value > 1", notes: "" }),
    ).rejects.toMatchObject({ message: expect.stringContaining('TempoCall has no field "value"') });
  });
});
