// `bitcoin.tx` in policies, driven as users drive it: a root user writes the policies, a NON-root user
// (the root quorum bypasses policies) signs PSBTs built with @scure/btc-signer through
// @turnkey/sdk-server's signTransaction (TRANSACTION_TYPE_BITCOIN), and every signature that comes
// back is verified and the PSBT finalized.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import * as btc from "@scure/btc-signer";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { organizationWith, type Member } from "./helpers/organizations.js";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness } from "./helpers/harness.js";

type Client = ReturnType<Harness["sdk"]>;
type Network = typeof btc.NETWORK;

const REGTEST: Network = { ...btc.TEST_NETWORK, bech32: "bcrt" };
const NETWORKS: Record<"MAINNET" | "TESTNET" | "REGTEST", Network> = { MAINNET: btc.NETWORK, TESTNET: btc.TEST_NETWORK, REGTEST };
const SIGN = "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'";

/** A fixed public key per byte (so addresses, and failures, read the same every run). */
const keyOf = (byte: number) => secp256k1.getPublicKey(new Uint8Array(32).fill(byte), true);
const PAYEE = btc.p2wpkh(keyOf(0x11), btc.TEST_NETWORK);
const STRANGER = btc.p2wpkh(keyOf(0x22), btc.TEST_NETWORK);
const OP_RETURN = btc.Script.encode(["RETURN", Buffer.from("sigil")]);

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

/** A wallet account (made by the root user) of the given Bitcoin address format, and its output script. */
async function accountOf(root: Client, addressFormat: string, path = "m/84'/1'/0'/0/0") {
  const { walletId, addresses } = await root.createWallet({
    walletName: addressFormat,
    accounts: [
      {
        curve: "CURVE_SECP256K1",
        pathFormat: "PATH_FORMAT_BIP32",
        path,
        addressFormat: addressFormat as "ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH",
      },
    ],
  });
  const address = addresses[0]!;
  const { account } = await root.getWalletAccount({ walletId, address });
  const network = NETWORKS[/_(MAINNET|TESTNET|REGTEST)_/.exec(addressFormat)![1] as keyof typeof NETWORKS];
  return { address, publicKey: Buffer.from(account.publicKey!, "hex"), script: btc.OutScript.encode(btc.Address(network).decode(address)) };
}

interface Spend {
  /** Outputs: an address (read in `network`, testnet unless said) or a raw script, and its value in satoshis. */
  outputs: [string | Uint8Array, bigint][];
  network?: Network;
}

const INPUT_VALUE = 100_000n;

/** An unsigned PSBT (hex) spending one P2WPKH output of `from`, worth INPUT_VALUE sats. */
function psbtFrom(from: Uint8Array, { outputs, network = btc.TEST_NETWORK }: Spend, more?: (tx: btc.Transaction) => void): string {
  const tx = new btc.Transaction({ allowUnknownOutputs: true });
  tx.addInput({ txid: Buffer.alloc(32, 7), index: 0, witnessUtxo: { script: from, amount: INPUT_VALUE } });
  for (const [to, value] of outputs) {
    if (typeof to === "string") tx.addOutputAddress(to, value, network);
    else tx.addOutput({ script: to, amount: value });
  }
  more?.(tx);
  return Buffer.from(tx.toPSBT()).toString("hex");
}

/** Signs as `member` and checks the P2WPKH input's ECDSA signature against the account's key; the PSBT finalizes. */
async function signsPsbt(member: Member, account: { address: string; publicKey: Buffer }, unsignedTransaction: string) {
  const { signedTransaction, activity } = await sign(member, account.address, unsignedTransaction);
  expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  const signed = btc.Transaction.fromPSBT(Buffer.from(signedTransaction, "hex"));
  const [[key, signature]] = signed.getInput(0).partialSig! as [Uint8Array, Uint8Array][];
  expect(Buffer.from(key!)).toEqual(account.publicKey);
  const preimage = signed.preimageWitnessV0(0, btc.p2pkh(account.publicKey).script, btc.SigHash.ALL, INPUT_VALUE);
  expect(secp256k1.verify(signature!.subarray(0, -1), preimage, account.publicKey, { format: "der", prehash: false })).toBe(true);
  signed.finalize();
}

const sign = (member: Member, signWith: string, unsignedTransaction: string) =>
  member.client.signTransaction({ signWith, unsignedTransaction, type: "TRANSACTION_TYPE_BITCOIN" });

/** An unsigned PSBT paying `outputs` (testnet addresses or scripts) from the account's one P2WPKH output. */
const paying = (account: { script: Uint8Array }, ...outputs: [string | Uint8Array, bigint][]) => psbtFrom(account.script, { outputs });

/** A policy denial (403 PermissionDenied, POLICY_DENIED, the outcome in the message) that changed nothing else. */
async function expectDenied(attempt: () => Promise<unknown>, outcome: "OUTCOME_DENY_IMPLICIT" | "OUTCOME_DENY_EXPLICIT") {
  const { id, failure } = await refusedLeavingOnlyItsActivity(h, attempt, { code: 7, message: expect.stringContaining(outcome) });
  const details = [expect.objectContaining({ turnkeyErrorCode: "POLICY_DENIED" })];
  expect(failure).toMatchObject({ code: 7, message: expect.stringContaining(outcome), details });
  return id;
}

/** A malformed request (InvalidArgument), refused by the activity itself, that changed nothing else. */
async function expectInvalid(attempt: () => Promise<unknown>, message: string) {
  const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, { code: 3, message: expect.stringContaining(message) });
  expect(failure).toMatchObject({ code: 3, message: expect.stringContaining(message) });
}

async function allowFor(root: Client, member: Member, condition: string) {
  const consensus = `approvers.any(u, u.id == '${member.userId}')`;
  const { policyId } = await root.createPolicy({
    policyName: `allow: ${condition}`.slice(0, 256),
    effect: "EFFECT_ALLOW",
    consensus,
    condition,
    notes: "",
  });
  return policyId;
}

/** An organization whose non-root spender has a testnet P2WPKH account and an allow policy with this condition. */
async function spenderWith(condition: string) {
  const { root, members } = await organizationWith(h, ["spender"]);
  const spender = members.spender!;
  const account = await accountOf(root, "ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH");
  const policyId = await allowFor(root, spender, condition);
  return { root, spender, account, policyId };
}

describe("policies naming bitcoin.tx are type-checked when stored", () => {
  it("accepts the product's documented Bitcoin policies", async () => {
    const { root } = await organizationWith(h, []);
    const documented = [
      `bitcoin.tx.outputs.all(o, o.address == '${PAYEE.address}')`,
      "bitcoin.tx.outputs.all(o, o.value < 200000)",
      `bitcoin.tx.inputs.all(i, i.tx_id == '${"ab".repeat(32)}' && i.vout == 0)`,
      "bitcoin.tx.fee <= 10000",
      "bitcoin.tx.fee > 50000",
      // The product's SDK example (examples/chain-integrations/with-bitcoin): a payee and the change.
      `bitcoin.tx.outputs.count() == 2 && bitcoin.tx.outputs.all(o, o.address in ['${PAYEE.address}', '${STRANGER.address}'])`,
      `bitcoin.tx.outputs.any(o, o.address == '${PAYEE.address}' && o.value < 1000)`,
      "bitcoin.tx.version == '2' && bitcoin.tx.locktime.type == 'Blocks' && bitcoin.tx.locktime.amount < 900000",
      "bitcoin.tx.inputs.all(i, i.sequence == 4294967295) && bitcoin.tx.outputs.all(o, o.address_type == 'P2WPKH' && o.script_pubkey != '')",
    ];
    for (const condition of documented) {
      const { policyId } = await root.createPolicy({ policyName: condition, effect: "EFFECT_ALLOW", condition, notes: "" });
      expect((await root.getPolicy({ policyId })).policy.condition).toBe(condition);
    }
  });

  it.each([
    [
      "bitcoin.tx.outputs.all(o, o.amount < 5)",
      'BitcoinTxOutput has no field "amount" (fields: value, script_pubkey, address, address_type)',
    ],
    ["bitcoin.tx.inputs.all(i, i.txid == 'x')", 'BitcoinTxInput has no field "txid"'],
    ["bitcoin.tx.fees > 1", 'BitcoinTransaction has no field "fees"'],
    ["bitcoin.tx.fee > '1'", '">" compares two numbers or two timestamps, not int and string'],
    ["bitcoin.tx.version == 2", "cannot compare string with int"],
    ["bitcoin.tx.locktime > 5", "compares two numbers or two timestamps"],
  ])("refuses %j with POLICY_INVALID, storing nothing", async (condition, message) => {
    const { root } = await organizationWith(h, []);
    const create = () => root.createPolicy({ policyName: "bad", effect: "EFFECT_ALLOW", condition, notes: "" });
    const refusal = { code: 3, message: expect.stringContaining("condition is not a valid policy expression: line 1, column") };
    const { failure } = await refusedLeavingOnlyItsActivity(h, create, refusal);
    const details = [expect.objectContaining({ turnkeyErrorCode: "POLICY_INVALID" })];
    expect(failure).toMatchObject({ code: 3, message: expect.stringContaining(message), details });
  });
});

describe("an allow on the payee and a ceiling on the value", () => {
  const condition = `bitcoin.tx.outputs.all(o, o.address == '${PAYEE.address}' && o.value <= 50000)`;

  it("signs a payment within it; one over the ceiling, to another address, or with a stray output is denied", async () => {
    const { root, spender, account, policyId } = await spenderWith(condition);
    await signsPsbt(spender, account, paying(account, [PAYEE.address!, 40_000n]));
    // The ceiling is inclusive, and exact: one satoshi over is over.
    await signsPsbt(spender, account, paying(account, [PAYEE.address!, 50_000n]));
    const overId = await expectDenied(
      () => sign(spender, account.address, paying(account, [PAYEE.address!, 50_001n])),
      "OUTCOME_DENY_IMPLICIT",
    );
    const { policyEvaluations } = await root.getPolicyEvaluations({ activityId: overId });
    expect(policyEvaluations[0]!.policyEvaluations).toEqual([{ policyId, outcome: "OUTCOME_DENY_IMPLICIT" }]);
    await expectDenied(() => sign(spender, account.address, paying(account, [STRANGER.address!, 1_000n])), "OUTCOME_DENY_IMPLICIT");
    await expectDenied(
      () => sign(spender, account.address, paying(account, [PAYEE.address!, 1_000n], [STRANGER.address!, 1n])),
      "OUTCOME_DENY_IMPLICIT",
    );
    // An output with no address (OP_RETURN data) is not the payee either.
    await expectDenied(() => sign(spender, account.address, paying(account, [OP_RETURN, 0n])), "OUTCOME_DENY_IMPLICIT");
  });

  it("the same policy does not allow signing anything else: a raw payload is still implicitly denied", async () => {
    const { spender, account } = await spenderWith(condition);
    const payload = Buffer.alloc(32, 1).toString("hex");
    const signDigest = () =>
      spender.client.signRawPayload({
        signWith: account.address,
        payload,
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_NO_OP",
      });
    await expectDenied(signDigest, "OUTCOME_DENY_IMPLICIT");
  });
});

describe("an explicit deny on an address", () => {
  it("holds beside an allow on every signature, wherever the denied output sits", async () => {
    const { root, spender, account } = await spenderWith(SIGN);
    const condition = `bitcoin.tx.outputs.any(o, o.address == '${STRANGER.address}')`;
    const { policyId: denyId } = await root.createPolicy({
      policyName: "never pay the stranger",
      effect: "EFFECT_DENY",
      condition,
      notes: "",
    });
    await signsPsbt(spender, account, paying(account, [PAYEE.address!, 90_000n]));
    const denied: [string | Uint8Array, bigint][][] = [
      [[STRANGER.address!, 90_000n]],
      [
        [PAYEE.address!, 50_000n],
        [STRANGER.address!, 1n],
      ],
      [
        [OP_RETURN, 0n],
        [STRANGER.address!, 546n],
        [PAYEE.address!, 1n],
      ],
      // Built from the script rather than the address: the same output, denied the same.
      [[STRANGER.script, 5_000n]],
    ];
    for (const outputs of denied) {
      const deniedId = await expectDenied(() => sign(spender, account.address, paying(account, ...outputs)), "OUTCOME_DENY_EXPLICIT");
      const { policyEvaluations } = await root.getPolicyEvaluations({ activityId: deniedId });
      expect(policyEvaluations[0]!.policyEvaluations).toContainEqual({ policyId: denyId, outcome: "OUTCOME_DENY_EXPLICIT" });
    }
  });

  it("a deny on the fee holds, computed exactly from the inputs' and outputs' satoshis", async () => {
    const { root, spender, account } = await spenderWith(SIGN);
    await root.createPolicy({ policyName: "fee cap", effect: "EFFECT_DENY", condition: "bitcoin.tx.fee > 50000", notes: "" });
    // 100 000 in: 50 000 out is a fee of exactly 50 000 (allowed), 49 999 out one satoshi more.
    await signsPsbt(spender, account, paying(account, [PAYEE.address!, 30_000n], [account.address, 20_000n]));
    await expectDenied(
      () => sign(spender, account.address, paying(account, [PAYEE.address!, 29_999n], [account.address, 20_000n])),
      "OUTCOME_DENY_EXPLICIT",
    );
  });
});

describe("what the product's BitcoinTransaction names is what policies read", () => {
  it("inputs (tx_id as explorers show it, vout, sequence), version, locktime, fee, and each output's script, address and type", async () => {
    const { root, members } = await organizationWith(h, ["spender"]);
    const spender = members.spender!;
    // A legacy (P2PKH) account: its input carries the whole previous transaction, whose id is checked.
    const account = await accountOf(root, "ADDRESS_FORMAT_BITCOIN_TESTNET_P2PKH", "m/44'/1'/0'/0/0");
    const previous = new btc.Transaction();
    previous.addInput({ txid: Buffer.alloc(32, 5), index: 0 });
    previous.addOutput({ script: STRANGER.script, amount: 1n });
    previous.addOutput({ script: account.script, amount: 70_000n });
    const raw = previous.unsignedTx;
    // A txid is the double SHA-256 of the transaction, shown byte-reversed.
    const txId = Buffer.from(sha256(sha256(raw)))
      .reverse()
      .toString("hex");
    const taprootPayee = btc.p2tr(keyOf(0x33).subarray(1), undefined, btc.TEST_NETWORK);
    const spend = (vout: number, lockTime: number) => {
      const tx = new btc.Transaction({ lockTime, allowUnknownOutputs: true });
      tx.addInput({ txid: txId, index: vout, nonWitnessUtxo: raw, sequence: 0xfffffffd });
      tx.addOutputAddress(taprootPayee.address!, 60_000n, btc.TEST_NETWORK);
      tx.addOutput({ script: OP_RETURN, amount: 0n });
      return Buffer.from(tx.toPSBT()).toString("hex");
    };
    await allowFor(
      root,
      spender,
      [
        "bitcoin.tx.version == '2' && bitcoin.tx.fee == 10000",
        "bitcoin.tx.locktime.amount == 850000 && bitcoin.tx.locktime.type == 'Blocks'",
        "bitcoin.tx.inputs.count() == 1",
        `bitcoin.tx.inputs.all(i, i.tx_id == '${txId}' && i.vout == 1 && i.sequence == 4294967293)`,
        `bitcoin.tx.outputs[0].address == '${taprootPayee.address}' && bitcoin.tx.outputs[0].address_type == 'P2TR'`,
        `bitcoin.tx.outputs[0].value == 60000 && bitcoin.tx.outputs[0].script_pubkey == '${Buffer.from(taprootPayee.script).toString("hex")}'`,
        // An OP_RETURN output has no address: it shows its script, and empty address and type.
        `bitcoin.tx.outputs[1].script_pubkey == '${Buffer.from(OP_RETURN).toString("hex")}' && bitcoin.tx.outputs[1].value == 0`,
        "bitcoin.tx.outputs[1].address == '' && bitcoin.tx.outputs[1].address_type == ''",
      ].join(" && "),
    );
    const { signedTransaction } = await sign(spender, account.address, spend(1, 850_000));
    const signed = btc.Transaction.fromPSBT(Buffer.from(signedTransaction, "hex"));
    const [[, signature]] = signed.getInput(0).partialSig! as [Uint8Array, Uint8Array][];
    // @scure/btc-signer computes the legacy sighash for its own signing; its type hides the method.
    const legacy = signed as unknown as { preimageLegacy(idx: number, prevOutScript: Uint8Array, hashType: number): Uint8Array };
    const preimage = legacy.preimageLegacy(0, account.script, btc.SigHash.ALL);
    expect(secp256k1.verify(signature!.subarray(0, -1), preimage, account.publicKey, { format: "der", prehash: false })).toBe(true);
    signed.finalize();

    // Another outpoint of the same transaction, or a locktime that is a time, reads differently.
    await expectDenied(() => sign(spender, account.address, spend(0, 850_000)), "OUTCOME_DENY_IMPLICIT");
    await expectDenied(() => sign(spender, account.address, spend(1, 1_700_000_000)), "OUTCOME_DENY_IMPLICIT");
    await allowFor(root, spender, "bitcoin.tx.locktime.type == 'Seconds' && bitcoin.tx.locktime.amount == 1700000000");
    expect((await sign(spender, account.address, spend(1, 1_700_000_000))).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });
});

describe("output addresses are written for the network of the signing address", () => {
  it("one payee script reads as a mainnet, testnet or regtest address, by the account that signs", async () => {
    const { root, members } = await organizationWith(h, ["spender"]);
    const spender = members.spender!;
    const accounts = {
      MAINNET: await accountOf(root, "ADDRESS_FORMAT_BITCOIN_MAINNET_P2WPKH", "m/84'/0'/0'/0/0"),
      TESTNET: await accountOf(root, "ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH"),
      REGTEST: await accountOf(root, "ADDRESS_FORMAT_BITCOIN_REGTEST_P2WPKH"),
    };
    const payee = (network: Network) => btc.p2tr(keyOf(0x33).subarray(1), undefined, network).address!;
    expect([payee(btc.NETWORK), payee(btc.TEST_NETWORK), payee(REGTEST)].map((a) => a.slice(0, a.indexOf("1") + 2))).toEqual([
      "bc1p",
      "tb1p",
      "bcrt1p",
    ]);
    for (const [name, network] of Object.entries(NETWORKS)) {
      const policyId = await allowFor(root, spender, `bitcoin.tx.outputs.all(o, o.address == '${payee(network)}')`);
      for (const [other, account] of Object.entries(accounts)) {
        const unsigned = psbtFrom(account.script, { outputs: [[payee(network), 1_000n]], network });
        if (other === name) await signsPsbt(spender, account, unsigned);
        else await expectDenied(() => sign(spender, account.address, unsigned), "OUTCOME_DENY_IMPLICIT");
      }
      await root.deletePolicy({ policyId });
    }
  });

  it("a key named by its id reads its own network; one whose addresses span networks must be named by an address", async () => {
    const { root, members } = await organizationWith(h, ["spender"]);
    const spender = members.spender!;
    await allowFor(root, spender, `bitcoin.tx.outputs.all(o, o.address == '${PAYEE.address}')`);
    type Formats = (
      | "ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH"
      | "ADDRESS_FORMAT_BITCOIN_SIGNET_P2TR"
      | "ADDRESS_FORMAT_BITCOIN_MAINNET_P2WPKH"
    )[];
    const keyWith = async (privateKeyName: string, addressFormats: Formats) => {
      const { privateKeys } = await root.createPrivateKeys({
        privateKeys: [{ privateKeyName, curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats }],
      });
      const { privateKeyId, addresses } = privateKeys[0]! as { privateKeyId: string; addresses: { address: string; format: string }[] };
      const testnet = addresses.find((a) => a.format === "ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH")!.address;
      const script = btc.OutScript.encode(btc.Address(btc.TEST_NETWORK).decode(testnet));
      return { privateKeyId, testnet, unsigned: paying({ script }, [PAYEE.address!, 1_000n]) };
    };
    // Testnet and signet addresses are written alike: one network.
    const mine = await keyWith("testnet", ["ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH", "ADDRESS_FORMAT_BITCOIN_SIGNET_P2TR"]);
    expect((await sign(spender, mine.privateKeyId, mine.unsigned)).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const ambiguous = await keyWith("both", ["ADDRESS_FORMAT_BITCOIN_MAINNET_P2WPKH", "ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH"]);
    // Allowed by a policy that reads no bitcoin.tx, the request reaches the activity, which refuses it.
    await allowFor(root, spender, `private_key.id == '${ambiguous.privateKeyId}'`);
    const message = "has Bitcoin addresses of several networks (MAINNET, TESTNET): name the key by the address whose inputs it signs";
    await expectInvalid(() => sign(spender, ambiguous.privateKeyId, ambiguous.unsigned), message);
    expect((await sign(spender, ambiguous.testnet, ambiguous.unsigned)).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });
});

describe("a PSBT whose contents policies cannot be shown is refused, not signed", () => {
  it("an input of unknown value, a previous transaction that is not the input's, a sighash that leaves outputs unsigned", async () => {
    const { spender, account } = await spenderWith(SIGN);
    const payment = { outputs: [[PAYEE.address!, 1_000n]] as [string, bigint][] };
    // A second input states no previous output: the fee policies see would be a guess.
    const unknownInput = psbtFrom(account.script, payment, (tx) => tx.addInput({ txid: Buffer.alloc(32, 8), index: 1 }));
    await expectInvalid(() => sign(spender, account.address, unknownInput), "input 1 states neither its previous output");
    // SIGHASH_NONE would sign no output at all, whatever policies were shown.
    await expectInvalid(
      () =>
        sign(
          spender,
          account.address,
          psbtFrom(account.script, payment, (tx) => tx.updateInput(0, { sighashType: btc.SigHash.NONE })),
        ),
      "input 0 asks for SIGHASH_NONE: only SIGHASH_ALL is signed",
    );
    // A previous transaction that does not hash to the input's txid: the amount it states proves
    // nothing. The PSBT is made honest, then the previous transaction's amount is edited in place.
    const previous = (amount: bigint) => {
      const tx = new btc.Transaction();
      tx.addInput({ txid: Buffer.alloc(32, 5), index: 0 });
      tx.addOutput({ script: account.script, amount });
      return tx;
    };
    const honest = new btc.Transaction();
    honest.addInput({ txid: previous(100_000n).id, index: 0, nonWitnessUtxo: previous(100_000n).unsignedTx });
    honest.addOutputAddress(PAYEE.address!, 1_000n, btc.TEST_NETWORK);
    const honestHex = Buffer.from(honest.toPSBT()).toString("hex");
    const [real, inflated] = [previous(100_000n), previous(900_000n)].map((tx) => Buffer.from(tx.unsignedTx).toString("hex"));
    expect(honestHex).toContain(real);
    await expectInvalid(
      () => sign(spender, account.address, honestHex.replace(real!, inflated!)),
      "an input's nonWitnessUtxo (the previous transaction) does not hash to the txid the input spends",
    );
    expect((await sign(spender, account.address, honestHex)).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    await expectInvalid(() => sign(spender, account.address, "00"), "unsignedTransaction is not a PSBT");
  });
});
