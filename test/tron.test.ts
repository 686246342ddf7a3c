// Tron transactions: built by tronweb (the official JavaScript SDK, from JSON as a node returns it,
// serialized by its compiled copy of java-tron's protos), signed through @turnkey/sdk-server with
// TRANSACTION_TYPE_TRON as the product's examples/with-tron does, and checked by tronweb: the signed
// transaction decodes with its protos and its signature recovers (Trx.ecRecover) to the account's
// Tron address. Policies see `tron.tx` with the product's field names (features/policies/language.mdx).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TronWeb, Trx, utils } from "tronweb";
import { encodeFunctionData, erc20Abi } from "viem";
import { parseTronTransaction, TronError } from "../src/chains/tron.js";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { organizationWith, type Member } from "./helpers/organizations.js";

// Loaded by importing tronweb: its google-protobuf classes for java-tron's messages.
const Proto = (globalThis as unknown as { TronWebProto: Record<string, any> }).TronWebProto;

const PAYEE = "TY1jfzP3s94oSzYECC89EFn17iA8S4imVZ"; // the recipient of the product's with-tron example
const USDT_NILE = "TXYZopYRdj2D9XRtbG411XZZ3kM5VkAeBf"; // Tether on Nile, from the product's Tron policy examples
const hexAddress = (base58: string) => TronWeb.address.toHex(base58) as string;

interface TronJson {
  txID: string;
  raw_data: Record<string, unknown>;
  raw_data_hex: string;
  visible: boolean;
}

/** A transaction as a node's wallet/createtransaction answers it, with raw_data_hex and txID made by tronweb. */
function transaction(type: string, value: Record<string, unknown>, extra: Record<string, unknown> = {}, permissionId?: number): TronJson {
  const tx: TronJson = {
    visible: false,
    txID: "",
    raw_data_hex: "",
    raw_data: {
      contract: [
        {
          parameter: { value, type_url: `type.googleapis.com/protocol.${type}` },
          type,
          ...(permissionId !== undefined ? { Permission_id: permissionId } : {}),
        },
      ],
      ref_block_bytes: "4a5b",
      ref_block_hash: "0f1e2d3c4b5a6978",
      expiration: 1_760_000_060_000,
      timestamp: 1_760_000_000_000,
      ...extra,
    },
  };
  const pb = utils.transaction.txJsonToPb(tx);
  tx.raw_data_hex = utils.transaction.txPbToRawDataHex(pb);
  tx.txID = utils.transaction.txPbToTxID(pb).replace(/^0x/, "");
  return tx;
}

const transfer = (owner: string, amount: number) =>
  transaction("TransferContract", { owner_address: hexAddress(owner), to_address: hexAddress(PAYEE), amount });

const trc20Data = (to: string, amount: bigint) =>
  encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [`0x${hexAddress(to).slice(2)}`, amount] }).slice(2);

const trc20 = (owner: string, to: string, amount: bigint) =>
  transaction(
    "TriggerSmartContract",
    { owner_address: hexAddress(owner), contract_address: hexAddress(USDT_NILE), data: trc20Data(to, amount) },
    { fee_limit: 100_000_000 },
  );

/** Checks a signed transaction with tronweb: same raw_data, one 65-byte signature recovering to `address`. */
function expectSignedBy(signedHex: string, unsigned: TronJson, address: string) {
  const decoded = Proto.Transaction.deserializeBinary(Buffer.from(signedHex, "hex"));
  expect(Buffer.from(decoded.getRawData().serializeBinary()).toString("hex")).toBe(unsigned.raw_data_hex.toLowerCase());
  const signatures = decoded.getSignatureList_asU8() as Uint8Array[];
  expect(signatures).toHaveLength(1);
  expect(signatures[0]!).toHaveLength(65);
  expect([27, 28]).toContain(signatures[0]![64]);
  expect(Trx.ecRecover({ ...unsigned, signature: [Buffer.from(signatures[0]!).toString("hex")] } as never)).toBe(address);
}

let h: Harness;
let org: TestOrganization;
let client: ReturnType<Harness["sdk"]>;
let tronAddress: string;
let solanaAddress: string;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Tron");
  client = h.sdk(org, org.key);
  const wallet = await client.createWallet({
    walletName: "tron",
    accounts: [
      // The product's default Tron account (tkhq/sdk turnkey-helpers defaultTronAccountAtIndex(0)).
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/195'/0'/0/0", addressFormat: "ADDRESS_FORMAT_TRON" },
      { curve: "CURVE_ED25519", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/501'/0'/0'", addressFormat: "ADDRESS_FORMAT_SOLANA" },
    ],
  });
  [tronAddress, solanaAddress] = wallet.addresses as [string, string];
});
afterAll(() => h.close());

describe("what policies see (tron.tx), read from tronweb-built transactions", () => {
  const OWNER = "TMVQGm1qAQYVdetCeGRRkTWYYrLXuHK2HC"; // the address of private key 1
  const contractOf = (tx: TronJson) => (parseTronTransaction(tx.raw_data_hex).keyword.contract as Record<string, unknown>[])[0]!;

  it("the transaction fields, and a TRX transfer", () => {
    const tx = transfer(OWNER, 1_000_000);
    const parsed = parseTronTransaction(tx.raw_data_hex);
    expect(Buffer.from(parsed.digest).toString("hex")).toBe(tx.txID);
    expect(parsed.keyword).toMatchObject({
      ref_block_bytes: "4a5b",
      ref_block_hash: "0f1e2d3c4b5a6978",
      expiration: 1_760_000_060_000n,
      timestamp: 1_760_000_000_000n,
      data: "",
      fee_limit: 0n,
    });
    expect(contractOf(tx)).toMatchObject({
      type: "TransferContract",
      permission_id: 0n,
      owner_address: OWNER,
      to_address: PAYEE,
      amount: 1_000_000n,
    });
    // The memo, as tronweb sends it (hex of its bytes).
    const memo = transaction(
      "TransferContract",
      { owner_address: hexAddress(OWNER), to_address: hexAddress(PAYEE), amount: 1 },
      { data: "68656c6c6f" },
    );
    expect(parseTronTransaction(memo.raw_data_hex).keyword.data).toBe("68656c6c6f");
  });

  it("a TRC-20 transfer (TriggerSmartContract)", () => {
    const tx = trc20(OWNER, PAYEE, 5_000_000n);
    expect(parseTronTransaction(tx.raw_data_hex).keyword.fee_limit).toBe(100_000_000n);
    expect(contractOf(tx)).toMatchObject({
      type: "TriggerSmartContract",
      owner_address: OWNER,
      contract_address: USDT_NILE,
      call_value: 0n,
      data: trc20Data(PAYEE, 5_000_000n),
      to_address: "",
      amount: 0n,
    });
    expect((contractOf(tx).data as string).slice(0, 8)).toBe("a9059cbb");
  });

  it("staking and resource delegation", () => {
    const owner = hexAddress(OWNER);
    expect(
      contractOf(transaction("FreezeBalanceV2Contract", { owner_address: owner, frozen_balance: 7_000_000, resource: "ENERGY" })),
    ).toMatchObject({
      type: "FreezeBalanceV2Contract",
      frozen_balance: 7_000_000n,
      resource: "ENERGY",
    });
    expect(
      contractOf(transaction("UnfreezeBalanceV2Contract", { owner_address: owner, unfreeze_balance: 3, resource: "BANDWIDTH" })),
    ).toMatchObject({
      type: "UnfreezeBalanceV2Contract",
      unfreeze_balance: 3n,
      resource: "BANDWIDTH",
    });
    const delegate = {
      owner_address: owner,
      receiver_address: hexAddress(PAYEE),
      balance: 9_000_000,
      resource: "ENERGY",
      lock: true,
      lock_period: 86400,
    };
    expect(contractOf(transaction("DelegateResourceContract", delegate))).toMatchObject({
      type: "DelegateResourceContract",
      owner_address: OWNER,
      receiver_address: PAYEE,
      balance: 9_000_000n,
      resource: "ENERGY",
      lock: true,
      lock_period: 86400n,
    });
    const undelegate = { owner_address: owner, receiver_address: hexAddress(PAYEE), balance: 1, resource: "BANDWIDTH" };
    expect(contractOf(transaction("UnDelegateResourceContract", undelegate))).toMatchObject({
      type: "UnDelegateResourceContract",
      receiver_address: PAYEE,
      balance: 1n,
      resource: "BANDWIDTH",
      lock: false,
    });
  });

  it("an account permission update (multisig), with a permission id on the contract", () => {
    const owner = hexAddress(OWNER);
    const operations = "7fff1fc0037e0000000000000000000000000000000000000000000000000000";
    const value = {
      owner_address: owner,
      owner: {
        type: 0,
        permission_name: "owner",
        threshold: 2,
        keys: [
          { address: owner, weight: 1 },
          { address: hexAddress(PAYEE), weight: 1 },
        ],
      },
      actives: [
        { type: 2, id: 2, permission_name: "active0", threshold: 1, operations, keys: [{ address: hexAddress(PAYEE), weight: 1 }] },
      ],
    };
    const contract = contractOf(transaction("AccountPermissionUpdateContract", value, {}, 2));
    expect(contract).toMatchObject({
      type: "AccountPermissionUpdateContract",
      permission_id: 2n,
      owner: {
        type: "Owner",
        id: 0n,
        permission_name: "owner",
        threshold: 2n,
        operations: "",
        keys: [
          { address: OWNER, weight: 1n },
          { address: PAYEE, weight: 1n },
        ],
      },
      witness: { type: "", id: 0n, keys: [] },
      actives: [{ type: "Active", id: 2n, permission_name: "active0", threshold: 1n, operations, keys: [{ address: PAYEE, weight: 1n }] }],
    });
  });

  it("another contract type is signed with its type and permission shown, its fields at zero", () => {
    const tx = transaction("WithdrawBalanceContract", { owner_address: hexAddress(OWNER) });
    expect(contractOf(tx)).toMatchObject({ type: "WithdrawBalanceContract", owner_address: "", amount: 0n });
  });

  it("refuses what it cannot show whole", () => {
    const tx = transfer(OWNER, 1);
    const refusals: [string, RegExp][] = [
      ["zz", /must be the hex of a Tron transaction's raw_data/],
      ["", /must be the hex/],
      ["00", /not a protobuf TransactionRaw/],
      // A field java-tron's raw does not have (field 15, varint 1): it would be signed unseen.
      [`${tx.raw_data_hex}7801`, /holds fields or encodings this server does not read/],
      // The same field twice (ref_block_bytes again): decoders keep the last, so two readings exist.
      [`${tx.raw_data_hex}0a020000`, /holds fields or encodings/],
    ];
    for (const [hexText, message] of refusals) expect(() => parseTronTransaction(hexText), hexText).toThrow(message);
    expect(() => parseTronTransaction(tx.raw_data_hex)).not.toThrow();
  });

  it("refuses a transaction with no contract or two, a parameter typed for another contract, and a malformed address", () => {
    const pb = utils.transaction.txJsonToPb(transfer(OWNER, 1));
    const raw = pb.getRawData();
    const contract = raw.getContractList()[0];
    raw.addContract(Proto.Transaction.Contract.deserializeBinary(contract.serializeBinary()));
    expect(() => parseTronTransaction(Buffer.from(raw.serializeBinary()).toString("hex"))).toThrow(TronError);
    expect(() => parseTronTransaction(Buffer.from(raw.serializeBinary()).toString("hex"))).toThrow(/exactly one contract, this one has 2/);
    raw.setContractList([]);
    expect(() => parseTronTransaction(Buffer.from(raw.serializeBinary()).toString("hex"))).toThrow(/exactly one contract, this one has 0/);

    const mislabeled = utils.transaction.txJsonToPb(transfer(OWNER, 1)).getRawData();
    mislabeled.getContractList()[0].setType(Proto.Transaction.Contract.ContractType.TRIGGERSMARTCONTRACT);
    expect(() => parseTronTransaction(Buffer.from(mislabeled.serializeBinary()).toString("hex"))).toThrow(
      /is a TriggerSmartContract whose parameter is typed "type.googleapis.com\/protocol.TransferContract"/,
    );

    const short = transaction("TransferContract", {
      owner_address: hexAddress(OWNER).slice(0, 40),
      to_address: hexAddress(PAYEE),
      amount: 1,
    });
    expect(() => parseTronTransaction(short.raw_data_hex)).toThrow(/owner_address is not a Tron address \(21 bytes beginning 0x41\)/);
  });
});

describe("sign_transaction with TRANSACTION_TYPE_TRON through @turnkey/sdk-server", () => {
  it("signs a TRX transfer as the product's with-tron example sends it, and tronweb recovers the account's address", async () => {
    const tx = transfer(tronAddress, 100);
    const { signedTransaction, activity } = await client.signTransaction({
      signWith: tronAddress,
      unsignedTransaction: tx.raw_data_hex,
      type: "TRANSACTION_TYPE_TRON",
    });
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(signedTransaction).toMatch(/^([0-9a-f]{2})+$/);
    expectSignedBy(signedTransaction, tx, tronAddress);
    // Deterministic (RFC 6979): the same transaction signs to the same bytes.
    const again = await client.signTransaction({
      signWith: tronAddress,
      unsignedTransaction: tx.raw_data_hex,
      type: "TRANSACTION_TYPE_TRON",
    });
    expect(again.signedTransaction).toBe(signedTransaction);
  });

  it("signs a TRC-20 transfer, and with a private key named by id or by its Tron address", async () => {
    const tx = trc20(tronAddress, PAYEE, 1_000n);
    expectSignedBy(
      (await client.signTransaction({ signWith: tronAddress, unsignedTransaction: tx.raw_data_hex, type: "TRANSACTION_TYPE_TRON" }))
        .signedTransaction,
      tx,
      tronAddress,
    );
    const { privateKeys } = await client.createPrivateKeys({
      privateKeys: [{ privateKeyName: "tron key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_TRON"] }],
    });
    const key = privateKeys[0]!;
    const keyAddress = key.addresses![0]!.address!;
    const fromKey = transfer(keyAddress, 5);
    for (const signWith of [key.privateKeyId!, keyAddress]) {
      const { signedTransaction } = await client.signTransaction({
        signWith,
        unsignedTransaction: fromKey.raw_data_hex,
        type: "TRANSACTION_TYPE_TRON",
      });
      expectSignedBy(signedTransaction, fromKey, keyAddress);
    }
  });

  it("refuses malformed transactions and ed25519 keys, recording only the failed activity", async () => {
    const tx = transfer(tronAddress, 1);
    const cases: [string, string, string][] = [
      [tronAddress, "not hex", "unsignedTransaction: unsignedTransaction must be the hex of a Tron transaction's raw_data"],
      [tronAddress, "00", "not a protobuf TransactionRaw"],
      [tronAddress, `${tx.raw_data_hex}7801`, "holds fields or encodings this server does not read"],
      [solanaAddress, tx.raw_data_hex, `Tron transactions are signed with secp256k1 keys, and ${solanaAddress} is CURVE_ED25519`],
    ];
    for (const [signWith, unsignedTransaction, message] of cases) {
      const { failure } = await refusedLeavingOnlyItsActivity(
        h,
        () => client.signTransaction({ signWith, unsignedTransaction, type: "TRANSACTION_TYPE_TRON" }),
        { code: 3, message: expect.stringContaining(message) },
      );
      expect(failure).toMatchObject({ code: 3, message: expect.stringContaining(message) });
    }
  });
});

describe("tron.tx policies", () => {
  async function spender(condition: string) {
    const { root, members } = await organizationWith(h, ["spender"]);
    const member = members.spender!;
    const { addresses } = await root.createWallet({
      walletName: "tron",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/195'/0'/0/0", addressFormat: "ADDRESS_FORMAT_TRON" },
      ],
    });
    await root.createPolicy({
      policyName: condition.slice(0, 200),
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${member.userId}')`,
      condition,
      notes: "",
    });
    return { member, address: addresses[0]! };
  }
  const sign = (member: Member, signWith: string, tx: TronJson) =>
    member.client.signTransaction({ signWith, unsignedTransaction: tx.raw_data_hex, type: "TRANSACTION_TYPE_TRON" });

  async function expectDenied(attempt: () => Promise<unknown>) {
    const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, {
      code: 7,
      message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
    });
    expect(failure.details).toEqual([expect.objectContaining({ turnkeyErrorCode: "POLICY_DENIED" })]);
  }

  it("the product's SDK example: at most 100 sun (examples/with-tron transferTRXPolicy.ts)", async () => {
    const { member, address } = await spender("tron.tx.contract[0].amount <= 100");
    const allowed = transfer(address, 100);
    expectSignedBy((await sign(member, address, allowed)).signedTransaction, allowed, address);
    await expectDenied(() => sign(member, address, transfer(address, 101)));
  });

  it("the docs' Tether-on-Nile policy: contract address and the transfer selector", async () => {
    const { member, address } = await spender(
      `tron.tx.contract[0].contract_address == '${USDT_NILE}' && tron.tx.contract[0].data[0..8] == 'a9059cbb'`,
    );
    const allowed = trc20(address, PAYEE, 10n);
    expectSignedBy((await sign(member, address, allowed)).signedTransaction, allowed, address);
    await expectDenied(() => sign(member, address, transfer(address, 1)));
  });

  it("the docs' TransferContract policy, and a malformed transaction is refused rather than judged", async () => {
    const { member, address } = await spender(
      "tron.tx.contract[0].type == 'TransferContract' && tron.tx.contract[0].to_address == '" + PAYEE + "'",
    );
    const allowed = transfer(address, 123);
    expectSignedBy((await sign(member, address, allowed)).signedTransaction, allowed, address);
    await expectDenied(() => sign(member, address, trc20(address, PAYEE, 1n)));
    // tron.tx is not available for bytes that do not parse: the policy errors, so nothing allows it.
    await expectDenied(() =>
      member.client.signTransaction({ signWith: address, unsignedTransaction: "00", type: "TRANSACTION_TYPE_TRON" }),
    );
  });

  it("policies naming tron.tx are type-checked when stored", async () => {
    const { root } = await organizationWith(h, []);
    await expect(
      root.createPolicy({ policyName: "typo", effect: "EFFECT_ALLOW", condition: "tron.tx.contract[0].amout < 5", notes: "" }),
    ).rejects.toMatchObject({ message: expect.stringContaining('TronContract has no field "amout"') });
    const ok =
      "tron.tx.contract.all(c, c.owner.keys.all(k, k.weight == 1) && c.actives.count() == 0 && c.lock == false) && tron.tx.fee_limit < 10";
    await expect(root.createPolicy({ policyName: "ok", effect: "EFFECT_ALLOW", condition: ok, notes: "" })).resolves.toMatchObject({});
  });
});
