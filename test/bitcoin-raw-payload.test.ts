// Bitcoin spends signed through sign_raw_payload(s), as @turnkey/bitcoin's signer does it: the caller
// computes the sighash, sends it with HASH_FUNCTION_NO_OP and signWith = the address, and puts r || s
// into the transaction. For a P2TR address that is a BIP-340 signature by the BIP-86 output key
// (the product tweaks at signing time); for the other formats an ECDSA signature by the account key.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Address, OutScript, SigHash, TEST_NETWORK, Transaction, p2tr, p2wpkh } from "@scure/btc-signer";
import { schnorr, secp256k1 } from "@noble/curves/secp256k1.js";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { SignatureThreads } from "../src/crypto/signature-threads.js";

let h: Harness;
let org: TestOrganization;
let client: ReturnType<Harness["sdk"]>;
let taprootAddress: string;
let taprootPublicKey: Uint8Array;
let segwitAddress: string;
let segwitPublicKey: Uint8Array;
let privateKeyId: string;
let privateKeyTaprootAddress: string;
let privateKeyPublicKey: Uint8Array;

const PREVIOUS_TXID = "a".repeat(64);
const bytes = (hex: string) => Uint8Array.from(Buffer.from(hex, "hex"));
/** sign_raw_payload's parameters for a sighash sent as @turnkey/bitcoin sends it. */
const sighashPayload = (signWith: string, sighash: Uint8Array) =>
  ({
    signWith,
    payload: Buffer.from(sighash).toString("hex"),
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_NO_OP",
  }) as const;

/** A transaction spending one or two outputs of `address` to a fixed regtest address. */
function spend(address: string, inputs: number) {
  const script = OutScript.encode(Address(TEST_NETWORK).decode(address));
  const transaction = new Transaction();
  for (let i = 0; i < inputs; i++) transaction.addInput({ txid: PREVIOUS_TXID, index: i, witnessUtxo: { script, amount: 50_000n } });
  transaction.addOutputAddress("tb1q9pvjqz5u5sdgpatg3wn0ce438u5cyv85lly0pc", BigInt(40_000 * inputs), TEST_NETWORK);
  return { transaction, script, amounts: Array.from({ length: inputs }, () => 50_000n) };
}

/** The 32-byte x-only output key a P2TR address pays to. */
const outputKeyOf = (address: string) => OutScript.encode(Address(TEST_NETWORK).decode(address)).subarray(2);

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Bitcoin raw payloads");
  client = h.sdk(org, org.key);
  const wallet = await client.createWallet({
    walletName: "bitcoin",
    accounts: [
      {
        curve: "CURVE_SECP256K1",
        pathFormat: "PATH_FORMAT_BIP32",
        path: "m/86'/1'/0'/0/0",
        addressFormat: "ADDRESS_FORMAT_BITCOIN_TESTNET_P2TR",
      },
      {
        curve: "CURVE_SECP256K1",
        pathFormat: "PATH_FORMAT_BIP32",
        path: "m/84'/1'/0'/0/0",
        addressFormat: "ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH",
      },
    ],
  });
  [taprootAddress, segwitAddress] = wallet.addresses as [string, string];
  const { accounts } = await client.getWalletAccounts({ walletId: wallet.walletId });
  const publicKeyOf = (address: string) => secp256k1.Point.fromHex(accounts.find((a) => a.address === address)!.publicKey!).toBytes(true);
  taprootPublicKey = publicKeyOf(taprootAddress);
  segwitPublicKey = publicKeyOf(segwitAddress);
  const keys = await client.createPrivateKeys({
    privateKeys: [
      { privateKeyName: "btc key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_BITCOIN_TESTNET_P2TR"] },
    ],
  });
  privateKeyId = keys.privateKeys[0]!.privateKeyId!;
  privateKeyTaprootAddress = keys.privateKeys[0]!.addresses![0]!.address!;
  const { privateKey } = await client.getPrivateKey({ privateKeyId });
  privateKeyPublicKey = secp256k1.Point.fromHex(privateKey.publicKey!).toBytes(true);
});
afterAll(() => h.close());

describe("sign_raw_payload for Bitcoin addresses", () => {
  it("the P2TR address is the BIP-86 output key of the account's key (what the signature must verify against)", () => {
    expect(Buffer.from(outputKeyOf(taprootAddress))).toEqual(
      Buffer.from(p2tr(taprootPublicKey.subarray(1), undefined, TEST_NETWORK).tweakedPubkey),
    );
  });

  it("a P2TR key-path spend signed with signWith = the P2TR account address finalizes and verifies", async () => {
    const { transaction, script, amounts } = spend(taprootAddress, 1);
    const sighash = transaction.preimageWitnessV1(0, [script], SigHash.DEFAULT, amounts);
    const { r, s, v } = await client.signRawPayload(sighashPayload(taprootAddress, sighash));
    expect([r.length, s.length, v]).toEqual([64, 64, "00"]);
    const signature = bytes(r + s);
    expect(schnorr.verify(signature, sighash, outputKeyOf(taprootAddress))).toBe(true);
    // By the tweaked key, not the account's own (internal) key: that one cannot spend the output.
    expect(schnorr.verify(signature, sighash, taprootPublicKey.subarray(1))).toBe(false);
    transaction.updateInput(0, { tapKeySig: signature });
    transaction.finalize();
    const signed = Transaction.fromRaw(transaction.extract());
    expect(signed.getInput(0).finalScriptWitness).toEqual([signature]);
    expect(schnorr.verify(signed.getInput(0).finalScriptWitness![0]!, sighash, outputKeyOf(taprootAddress))).toBe(true);
  });

  it("sign_raw_payloads signs each input of a P2TR spend the same way", async () => {
    const { transaction, script, amounts } = spend(taprootAddress, 2);
    const sighashes = [0, 1].map((i) => transaction.preimageWitnessV1(i, [script, script], SigHash.DEFAULT, amounts));
    const { signatures } = await client.signRawPayloads({
      signWith: taprootAddress,
      payloads: sighashes.map((sighash) => Buffer.from(sighash).toString("hex")),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });
    signatures!.forEach((signature, i) => {
      const sig = bytes(signature.r + signature.s);
      expect(schnorr.verify(sig, sighashes[i]!, outputKeyOf(taprootAddress))).toBe(true);
      transaction.updateInput(i, { tapKeySig: sig });
    });
    transaction.finalize();
    expect(transaction.isFinal).toBe(true);
  });

  it("a private key named by its P2TR address signs by that address's output key; named by its id, ECDSA by the key itself", async () => {
    const { transaction, script, amounts } = spend(privateKeyTaprootAddress, 1);
    const sighash = transaction.preimageWitnessV1(0, [script], SigHash.DEFAULT, amounts);
    const payload = {
      payload: Buffer.from(sighash).toString("hex"),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_NO_OP",
    } as const;
    const byAddress = await client.signRawPayload({ signWith: privateKeyTaprootAddress, ...payload });
    expect(schnorr.verify(bytes(byAddress.r + byAddress.s), sighash, outputKeyOf(privateKeyTaprootAddress))).toBe(true);
    // A key id implies no address format, so the key signs as a plain secp256k1 key.
    const byId = await client.signRawPayload({ signWith: privateKeyId, ...payload });
    expect(secp256k1.verify(bytes(byId.r + byId.s), sighash, privateKeyPublicKey, { prehash: false })).toBe(true);
  });

  it("a P2WPKH spend is still ECDSA by the account key: DER signature and sighash byte finalize and verify", async () => {
    const { transaction, amounts } = spend(segwitAddress, 1);
    // BIP-143 signs over the P2PKH script of the key's hash (scriptCode) for a P2WPKH input.
    const scriptCode = OutScript.encode({ type: "pkh", hash: p2wpkh(segwitPublicKey, TEST_NETWORK).hash });
    const sighash = transaction.preimageWitnessV0(0, scriptCode, SigHash.ALL, amounts[0]!);
    const { r, s, v } = await client.signRawPayload(sighashPayload(segwitAddress, sighash));
    expect(["00", "01"]).toContain(v);
    expect(secp256k1.verify(bytes(r + s), sighash, segwitPublicKey, { prehash: false })).toBe(true);
    const der = secp256k1.Signature.fromBytes(bytes(r + s), "compact").toBytes("der");
    transaction.updateInput(0, { partialSig: [[segwitPublicKey, Uint8Array.from([...der, SigHash.ALL])]] });
    transaction.finalize();
    const witness = Transaction.fromRaw(transaction.extract()).getInput(0).finalScriptWitness!;
    expect(Buffer.from(witness[1]!)).toEqual(Buffer.from(segwitPublicKey));
    expect(secp256k1.verify(witness[0]!.subarray(0, -1), sighash, segwitPublicKey, { prehash: false, format: "der" })).toBe(true);
  });
});

describe("sign_raw_payload for a P2TR address: refusals", () => {
  it("an EIP-712 or EIP-7702 payload (an Ethereum ECDSA signature) is refused for a Taproot address, and nothing but the failed activity is stored", async () => {
    const typedData = JSON.stringify({
      types: { Mail: [{ name: "contents", type: "string" }] },
      primaryType: "Mail",
      domain: { name: "Sigil", version: "1", chainId: 1 },
      message: { contents: "hello" },
    });
    const authorization = JSON.stringify({ address: "0x000000000000000000000000000000000000dEaD", chainId: "1", nonce: "0" });
    for (const [encoding, payload] of [
      ["PAYLOAD_ENCODING_EIP712", typedData],
      ["PAYLOAD_ENCODING_EIP7702_AUTHORIZATION", authorization],
    ] as const) {
      const attempt = () => client.signRawPayload({ signWith: taprootAddress, payload, encoding, hashFunction: "HASH_FUNCTION_NO_OP" });
      await refusedLeavingOnlyItsActivity(h, attempt, { code: 3, message: expect.stringContaining("is a Taproot (P2TR) address") });
    }
    // Named by its id, the same key signs typed data as an Ethereum key does (ECDSA with a recovery id).
    const signed = await client.signRawPayload({
      signWith: privateKeyId,
      payload: typedData,
      encoding: "PAYLOAD_ENCODING_EIP712",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });
    expect(signed.v).toMatch(/^0[01]$/);
  });

  it("a payload that is not a 32-byte sighash is refused as InvalidArgument, and nothing but the failed activity is stored", async () => {
    const attempt = () => client.signRawPayload(sighashPayload(taprootAddress, new Uint8Array(20).fill(0xab)));
    const message = "a Taproot (BIP-340) signature is over a 32-byte sighash, got 20 bytes";
    await refusedLeavingOnlyItsActivity(h, attempt, { code: 3, message: expect.stringContaining(message) });
  });
});

describe("SignatureThreads.signTaprootKeyPath", () => {
  it("signs by the output key alike inline and on a thread (which gets a copy of the key), leaving the caller's key intact", async () => {
    const internal = secp256k1.utils.randomSecretKey();
    const kept = Uint8Array.from(internal);
    const outputKey = p2tr(schnorr.getPublicKey(internal)).tweakedPubkey;
    const digest = Uint8Array.from({ length: 32 }, (_, i) => i);
    for (const threads of [new SignatureThreads(0), new SignatureThreads(1)]) {
      const { r, s, v } = await threads.signTaprootKeyPath(internal, digest);
      expect(v).toBe("00");
      expect(schnorr.verify(bytes(r + s), digest, outputKey)).toBe(true);
      await threads.close();
    }
    expect(internal).toEqual(kept);
  });
});
