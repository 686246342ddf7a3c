// TON and Spark wallet accounts through @turnkey/sdk-server: created at the product's default paths,
// read back, each address checked against an independent derivation from the public key Sigil
// reports (@ton/ton's wallet contracts; the Spark SDK's address layout, bech32m via @scure/base), and
// the keys signing raw payloads as the product's examples use them. Pairs that cannot be served
// (a TON wallet on secp256k1, Spark on ed25519, P-256 HD accounts) are refused and change nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { bech32m, hex } from "@scure/base";
import { ed25519 } from "@noble/curves/ed25519.js";
import { schnorr, secp256k1 } from "@noble/curves/secp256k1.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { Address as TonAddress, beginCell } from "@ton/core";
import { WalletContractV3R2, WalletContractV4, WalletContractV5R1 } from "@ton/ton";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";

const TON_PATH = "m/44'/607'/0'/0'/0'"; // tkhq/sdk turnkey-helpers defaultTonV3r2AccountAtIndex(0)
const SPARK_IDENTITY_PATH = "m/8797555'/0'/0'"; // features/networks/spark.mdx: the IDENTITY key
const TON_WALLETS = {
  ADDRESS_FORMAT_TON_V3R2: (publicKey: Buffer) => WalletContractV3R2.create({ workchain: 0, publicKey }),
  ADDRESS_FORMAT_TON_V4R2: (publicKey: Buffer) => WalletContractV4.create({ workchain: 0, publicKey }),
  ADDRESS_FORMAT_TON_V5R1: (publicKey: Buffer) => WalletContractV5R1.create({ workchain: 0, publicKey }),
} as const;

let h: Harness;
let org: TestOrganization;
let client: ReturnType<Harness["sdk"]>;
let walletId: string;
let accounts: Record<string, { address: string; publicKey: string; path: string; curve: string }>;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("TON and Spark");
  client = h.sdk(org, org.key);
  const created = await client.createWallet({
    walletName: "ton and spark",
    accounts: [
      ...Object.keys(TON_WALLETS).map((addressFormat) => ({
        curve: "CURVE_ED25519" as const,
        pathFormat: "PATH_FORMAT_BIP32" as const,
        path: TON_PATH,
        addressFormat: addressFormat as keyof typeof TON_WALLETS,
      })),
      ...(["ADDRESS_FORMAT_SPARK_MAINNET", "ADDRESS_FORMAT_SPARK_REGTEST"] as const).map((addressFormat) => ({
        curve: "CURVE_SECP256K1" as const,
        pathFormat: "PATH_FORMAT_BIP32" as const,
        path: SPARK_IDENTITY_PATH,
        addressFormat,
      })),
    ],
  });
  walletId = created.walletId;
  expect(created.addresses).toHaveLength(5);
  const { accounts: read } = await client.getWalletAccounts({ walletId });
  accounts = Object.fromEntries(
    read.map((a) => [a.addressFormat, { address: a.address, publicKey: a.publicKey!, path: a.path, curve: a.curve }]),
  );
  expect(read.map((a) => a.address).sort()).toEqual([...created.addresses].sort());
});
afterAll(() => h.close());

describe("TON accounts", () => {
  it.each(Object.keys(TON_WALLETS))("%s is the wallet contract @ton/ton builds for the account's key, spelled UQ…", (format) => {
    const account = accounts[format]!;
    expect(account).toMatchObject({ path: TON_PATH, curve: "CURVE_ED25519" });
    const contract = TON_WALLETS[format as keyof typeof TON_WALLETS](Buffer.from(account.publicKey, "hex"));
    expect(account.address).toBe(contract.address.toString({ bounceable: false, urlSafe: true, testOnly: false }));
    expect(TonAddress.parse(account.address).equals(contract.address)).toBe(true);
  });

  it("the three versions are three addresses of one key", () => {
    const keys = new Set(Object.keys(TON_WALLETS).map((f) => accounts[f]!.publicKey));
    const addresses = new Set(Object.keys(TON_WALLETS).map((f) => accounts[f]!.address));
    expect([keys.size, addresses.size]).toEqual([1, 3]);
  });

  it("reads back by address, and signs a wallet transfer's cell hash as the product's with-ton example does", async () => {
    const account = accounts.ADDRESS_FORMAT_TON_V4R2!;
    const { account: byAddress } = await client.getWalletAccount({ walletId, address: account.address });
    expect(byAddress.addressFormat).toBe("ADDRESS_FORMAT_TON_V4R2");
    // examples/with-ton: signRawPayload of the signing message's cell hash, HASH_FUNCTION_NOT_APPLICABLE, r || s.
    const signingMessage = beginCell().storeUint(698983191, 32).storeUint(0xffffffff, 32).storeUint(0, 32).storeUint(0, 8).endCell();
    const payload = signingMessage.hash();
    const { r, s } = await client.signRawPayload({
      signWith: account.address,
      payload: payload.toString("hex"),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_NOT_APPLICABLE",
    });
    expect(ed25519.verify(hex.decode(r + s), payload, hex.decode(account.publicKey))).toBe(true);
  });
});

describe("Spark accounts", () => {
  it.each([
    ["ADDRESS_FORMAT_SPARK_MAINNET", "spark"],
    ["ADDRESS_FORMAT_SPARK_REGTEST", "sparkrt"],
  ])("%s is bech32m (%s) of the SparkAddress protobuf holding the identity key", (format, prefix) => {
    const account = accounts[format]!;
    expect(account).toMatchObject({ path: SPARK_IDENTITY_PATH, curve: "CURVE_SECP256K1" });
    const decoded = bech32m.decode(account.address as `${string}1${string}`, 200);
    expect(decoded.prefix).toBe(prefix);
    expect(hex.encode(bech32m.fromWords(decoded.words))).toBe(`0a21${account.publicKey}`);
    expect(account.address.startsWith(`${prefix}1p`)).toBe(true); // as the Spark SDK's own tests expect
  });

  it("signs raw payloads with plain BIP-340 Schnorr by the identity key, no Taproot tweak (spark.mdx)", async () => {
    const account = accounts.ADDRESS_FORMAT_SPARK_REGTEST!;
    const message = Buffer.from("spark token transaction hash");
    const digest = sha256(message);
    for (const [payload, hashFunction] of [
      [Buffer.from(digest).toString("hex"), "HASH_FUNCTION_NO_OP"],
      [message.toString("hex"), "HASH_FUNCTION_SHA256"],
    ] as const) {
      const { r, s, v } = await client.signRawPayload({
        signWith: account.address,
        payload,
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction,
      });
      expect(v).toBe("00");
      const xOnly = hex.decode(account.publicKey).subarray(1);
      expect(schnorr.verify(hex.decode(r + s), digest, xOnly)).toBe(true);
    }
  });

  it("is refused for EIP-712 payloads, which are ECDSA, recording only the failed activity", async () => {
    const account = accounts.ADDRESS_FORMAT_SPARK_MAINNET!;
    const typed = JSON.stringify({
      types: { EIP712Domain: [{ name: "name", type: "string" }], Note: [{ name: "text", type: "string" }] },
      primaryType: "Note",
      domain: { name: "x" },
      message: { text: "hi" },
    });
    await refusedLeavingOnlyItsActivity(
      h,
      () =>
        client.signRawPayload({
          signWith: account.address,
          payload: typed,
          encoding: "PAYLOAD_ENCODING_EIP712",
          hashFunction: "HASH_FUNCTION_NO_OP",
        }),
      { code: 3, message: expect.stringContaining(`${account.address} is a Spark address, which signs BIP-340 Schnorr`) },
    );
  });

  it("a key named by id signs ECDSA, as for any secp256k1 key", async () => {
    const { privateKeys } = await client.createPrivateKeys({
      privateKeys: [
        { privateKeyName: "spark key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_SPARK_MAINNET"] },
      ],
    });
    const key = privateKeys[0]!;
    expect(key.addresses![0]!.address).toMatch(/^spark1p/);
    const { privateKey } = await client.getPrivateKey({ privateKeyId: key.privateKeyId! });
    const digest = sha256(Buffer.from("ecdsa"));
    const { r, s } = await client.signRawPayload({
      signWith: key.privateKeyId!,
      payload: hex.encode(digest),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_NO_OP",
    });
    expect(secp256k1.verify(hex.decode(r + s), digest, hex.decode(privateKey.publicKey), { prehash: false })).toBe(true);
  });
});

describe("pairs that cannot be served are refused, and change nothing", () => {
  const account = (curve: "CURVE_SECP256K1" | "CURVE_ED25519" | "CURVE_P256", path: string, addressFormat: string) => ({
    curve,
    pathFormat: "PATH_FORMAT_BIP32" as const,
    path,
    addressFormat: addressFormat as "ADDRESS_FORMAT_COMPRESSED",
  });

  it.each([
    [
      account("CURVE_SECP256K1", "m/44'/607'/0'/0/0", "ADDRESS_FORMAT_TON_V4R2"),
      "ADDRESS_FORMAT_TON_V4R2 needs CURVE_ED25519. CURVE_SECP256K1 supports: ",
    ],
    [
      account("CURVE_ED25519", "m/8797555'/0'/0'", "ADDRESS_FORMAT_SPARK_MAINNET"),
      "ADDRESS_FORMAT_SPARK_MAINNET needs CURVE_SECP256K1. CURVE_ED25519 supports: ",
    ],
    // P-256 accounts derive (SLIP-10 nist256p1), but only to COMPRESSED / UNCOMPRESSED addresses.
    [
      account("CURVE_P256", "m/8797555'/0'/0'", "ADDRESS_FORMAT_SPARK_REGTEST"),
      "ADDRESS_FORMAT_SPARK_REGTEST needs CURVE_SECP256K1. CURVE_P256 supports: ",
    ],
    [
      account("CURVE_P256", "m/44'/607'/0'/0/0", "ADDRESS_FORMAT_TON_V4R2"),
      "ADDRESS_FORMAT_TON_V4R2 needs CURVE_ED25519. CURVE_P256 supports: ",
    ],
  ])("%o", async (params, message) => {
    const { failure } = await refusedLeavingOnlyItsActivity(h, () => client.createWalletAccounts({ walletId, accounts: [params] }), {
      code: 3,
      message: expect.stringContaining(message),
    });
    expect(failure.message).toContain(message);
  });

  it("a new wallet with a P-256 account in a Spark format is not made at all; P-256 keys and accounts are", async () => {
    await refusedLeavingOnlyItsActivity(
      h,
      () => client.createWallet({ walletName: "p256", accounts: [account("CURVE_P256", "m/0'/0", "ADDRESS_FORMAT_SPARK_MAINNET")] }),
      { code: 3, message: expect.stringContaining("ADDRESS_FORMAT_SPARK_MAINNET needs CURVE_SECP256K1") },
    );
    const wallet = await client.createWallet({
      walletName: "p256",
      accounts: [account("CURVE_P256", "m/0'/0", "ADDRESS_FORMAT_COMPRESSED")],
    });
    expect(wallet.addresses[0]).toMatch(/^0[23][0-9a-f]{64}$/);
    const { privateKeys } = await client.createPrivateKeys({
      privateKeys: [{ privateKeyName: "p256", curve: "CURVE_P256", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_COMPRESSED"] }],
    });
    expect(privateKeys[0]!.addresses![0]!.address).toMatch(/^0[23][0-9a-f]{64}$/);
  });
});
