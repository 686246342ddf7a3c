// Import through the official clients: init_import_* hands out a signed target, @turnkey/crypto's
// encryptWalletToBundle / encryptPrivateKeyToBundle encrypt to it, import_* stores the secret; the
// imported keys then sign and the chain library verifies. And every way an import can be wrong.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import fs from "node:fs";
import path from "node:path";
import { decryptExportBundle, encryptPrivateKeyToBundle, encryptWalletToBundle, generateP256KeyPair } from "@turnkey/crypto";
import { english, generateMnemonic as viemMnemonic, mnemonicToAccount, privateKeyToAccount, generatePrivateKey } from "viem/accounts";
import { recoverAddress, keccak256, toHex, type Hex } from "viem";
import { generateMnemonic as scureMnemonic, validateMnemonic } from "@scure/bip39";
import { wordlist as japanese } from "@scure/bip39/wordlists/japanese.js";
import { wordlist } from "@scure/bip39/wordlists/english.js";
import { startHarness, signedRequest, signerPublicKeyOf, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { backend } from "./helpers/backend.js";

let h: Harness;
let org: TestOrganization;
let sdk: ReturnType<Harness["sdk"]>;
let signerPublicKey: string;

const eth = {
  curve: "CURVE_SECP256K1" as const,
  pathFormat: "PATH_FORMAT_BIP32" as const,
  path: "m/44'/60'/0'/0/0",
  addressFormat: "ADDRESS_FORMAT_ETHEREUM" as const,
};

beforeAll(async () => {
  h = await startHarness({ SIGIL_IMPORT_TARGET_TTL_SECONDS: "600" });
  org = await h.organization("Importer");
  sdk = h.sdk(org, org.key, fastPoller);
  signerPublicKey = await signerPublicKeyOf(h.url);
});
afterAll(() => h.close());

async function walletBundle(mnemonic: string, organization = org, client = sdk) {
  const { importBundle } = await client.initImportWallet({ userId: organization.userId });
  return encryptWalletToBundle({
    mnemonic,
    importBundle,
    userId: organization.userId,
    organizationId: organization.organizationId,
    dangerouslyOverrideSignerPublicKey: signerPublicKey,
  });
}

async function keyBundle(privateKey: string) {
  const { importBundle } = await sdk.initImportPrivateKey({ userId: org.userId });
  return encryptPrivateKeyToBundle({
    privateKey,
    keyFormat: "HEXADECIMAL",
    importBundle,
    userId: org.userId,
    organizationId: org.organizationId,
    dangerouslyOverrideSignerPublicKey: signerPublicKey,
  });
}

const recovered = (message: string, r: { r: string; s: string; v: string }) =>
  recoverAddress({ hash: keccak256(toHex(message)), signature: `0x${r.r}${r.s}${r.v === "00" ? "1b" : "1c"}` as Hex });

describe("import through the official clients", () => {
  it("imports a mnemonic: its accounts are the reference derivation, and they sign", async () => {
    const mnemonic = viemMnemonic(english);
    const encryptedBundle = await walletBundle(mnemonic);
    const imported = await sdk.importWallet({ userId: org.userId, walletName: "imported", encryptedBundle, accounts: [eth] });
    expect(imported.addresses[0]).toBe(mnemonicToAccount(mnemonic).address);
    const { wallet } = await sdk.getWallet({ walletId: imported.walletId });
    expect(wallet.imported).toBe(true);
    const signed = await sdk.signRawPayload({
      signWith: imported.addresses[0]!,
      payload: toHex("imported").slice(2),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    });
    expect(await recovered("imported", signed)).toBe(imported.addresses[0]);
    // And back out again: the export of the imported wallet is the mnemonic that went in.
    const target = generateP256KeyPair();
    const { exportBundle } = await sdk.exportWallet({ walletId: imported.walletId, targetPublicKey: target.publicKeyUncompressed });
    expect(
      await decryptExportBundle({
        exportBundle,
        embeddedKey: target.privateKey,
        organizationId: org.organizationId,
        returnMnemonic: true,
        dangerouslyOverrideSignerPublicKey: signerPublicKey,
      }),
    ).toBe(mnemonic);
  });

  it("imports a 24-word Japanese mnemonic: the same seed as the reference derivation", async () => {
    const mnemonic = scureMnemonic(japanese, 256);
    expect(mnemonic.split(/[\s\u3000]+/u)).toHaveLength(24);
    const imported = await sdk.importWallet({
      userId: org.userId,
      walletName: "japanese",
      encryptedBundle: await walletBundle(mnemonic),
      accounts: [eth],
    });
    expect(imported.addresses[0]).toBe(mnemonicToAccount(mnemonic).address);
  });

  it("imports a private key: its address is the key's, and it signs", async () => {
    const key = generatePrivateKey();
    const encryptedBundle = await keyBundle(key);
    const imported = await sdk.importPrivateKey({
      userId: org.userId,
      privateKeyName: "imported key",
      encryptedBundle,
      curve: "CURVE_SECP256K1",
      addressFormats: ["ADDRESS_FORMAT_ETHEREUM"],
    });
    const address = privateKeyToAccount(key).address;
    expect(imported.addresses[0]!.address).toBe(address);
    expect((await sdk.getPrivateKey({ privateKeyId: imported.privateKeyId })).privateKey.imported).toBe(true);
    const signed = await sdk.signRawPayload({
      signWith: imported.privateKeyId,
      payload: toHex("key").slice(2),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    });
    expect(await recovered("key", signed)).toBe(address);
  });

  it("refuses each way an import can be wrong, with its own error, and stores nothing", async () => {
    const before = await h.snapshot();
    const mnemonic = viemMnemonic(english);
    let sequence = 0;
    const post = (operation: string, type: string, parameters: Record<string, unknown>) => {
      const request = signedRequest(
        { type, organizationId: org.organizationId, timestampMs: String(Date.now() + sequence++), parameters },
        org.key,
      );
      return h.post(`/public/v1/submit/${operation}`, request.body, request.headers);
    };
    const importWallet = (encryptedBundle: string, userId = org.userId) =>
      post("import_wallet", "ACTIVITY_TYPE_IMPORT_WALLET", { userId, walletName: `w-${Math.random()}`, encryptedBundle, accounts: [eth] });
    const code = (res: { json: any }) => res.json.details?.[0]?.turnkeyErrorCode;

    // A target for another user of the organization is refused at init and at import.
    expect(code(await post("init_import_wallet", "ACTIVITY_TYPE_INIT_IMPORT_WALLET", { userId: "someone-else" }))).toBe(
      "IMPORT_USER_MISMATCH",
    );
    const good = await walletBundle(mnemonic);
    expect(code(await importWallet(good, "someone-else"))).toBe("IMPORT_USER_MISMATCH");
    // A corrupted ciphertext; then not JSON at all.
    const parsed = JSON.parse(good);
    const corrupted = JSON.stringify({ ...parsed, ciphertext: (parsed.ciphertext[0] === "0" ? "1" : "0") + parsed.ciphertext.slice(1) });
    expect(code(await importWallet(corrupted))).toBe("INVALID_IMPORT_BUNDLE");
    expect(code(await importWallet("not a bundle"))).toBe("INVALID_IMPORT_BUNDLE");
    // Encrypted to another organization's target: it does not open with ours (a live one).
    await sdk.initImportWallet({ userId: org.userId });
    const other = await h.organization("Other importer");
    const foreign = await walletBundle(mnemonic, other, h.sdk(other, other.key, fastPoller));
    expect(code(await importWallet(foreign))).toBe("INVALID_IMPORT_BUNDLE");
    // A newer init replaces the target the bundle was encrypted to.
    await sdk.initImportWallet({ userId: org.userId });
    expect(code(await importWallet(good))).toBe("INVALID_IMPORT_BUNDLE");
    // A mnemonic whose checksum fails.
    const words = mnemonic.split(" ");
    const badChecksum = wordlist
      .map((last) => [...words.slice(0, 11), last].join(" "))
      .find((phrase) => !validateMnemonic(phrase, wordlist))!;
    expect(code(await importWallet(await walletBundle(badChecksum)))).toBe("INVALID_MNEMONIC");
    // A key that is not a secp256k1 scalar (zero), and a replayed bundle after a successful import.
    const zero = await keyBundle(`0x${"00".repeat(32)}`);
    expect(
      code(
        await post("import_private_key", "ACTIVITY_TYPE_IMPORT_PRIVATE_KEY", {
          userId: org.userId,
          privateKeyName: "zero",
          encryptedBundle: zero,
          curve: "CURVE_SECP256K1",
          addressFormats: ["ADDRESS_FORMAT_ETHEREUM"],
        }),
      ),
    ).toBe("INVALID_PRIVATE_KEY");
    const after = JSON.parse(await h.snapshot());
    for (const table of ["wallets", "wallet_accounts", "private_keys", "private_key_addresses"])
      expect(after[table], table).toEqual(JSON.parse(before)[table]);

    const once = await walletBundle(viemMnemonic(english));
    expect((await importWallet(once)).status).toBe(200);
    expect(code(await importWallet(once))).toBe("IMPORT_TARGET_NOT_FOUND");
    // A failed attempt uses the target up too: after a refused wallet name, the bundle is spent.
    const taken = await walletBundle(viemMnemonic(english));
    const name = `dup-${Date.now()}`;
    await sdk.createWallet({ walletName: name, accounts: [eth] });
    expect(
      code(
        await post("import_wallet", "ACTIVITY_TYPE_IMPORT_WALLET", {
          userId: org.userId,
          walletName: name,
          encryptedBundle: taken,
          accounts: [eth],
        }),
      ),
    ).toBe("WALLET_ALREADY_EXISTS");
    expect(
      code(
        await post("import_wallet", "ACTIVITY_TYPE_IMPORT_WALLET", {
          userId: org.userId,
          walletName: `${name}-2`,
          encryptedBundle: taken,
          accounts: [eth],
        }),
      ),
    ).toBe("IMPORT_TARGET_NOT_FOUND");
  });

  it("refuses an expired target", async () => {
    let now = Date.now();
    const timed = await startHarness({ SIGIL_IMPORT_TARGET_TTL_SECONDS: "60" }, { clock: () => now });
    try {
      const organization = await timed.organization("Expiry");
      const client = timed.sdk(organization, organization.key, fastPoller);
      const key = await signerPublicKeyOf(timed.url);
      const { importBundle } = await client.initImportWallet({ userId: organization.userId });
      const encryptedBundle = await encryptWalletToBundle({
        mnemonic: viemMnemonic(english),
        importBundle,
        userId: organization.userId,
        organizationId: organization.organizationId,
        dangerouslyOverrideSignerPublicKey: key,
      });
      now += 61_000;
      await expect(
        client.importWallet({
          userId: organization.userId,
          walletName: "late",
          encryptedBundle,
          accounts: [eth],
          timestampMs: String(now),
        } as any),
      ).rejects.toThrow(/IMPORT_TARGET_EXPIRED|expired/);
    } finally {
      await timed.close();
    }
  });

  it("keeps imported secrets out of the database file, the audit log and the logs", async () => {
    const mnemonic = viemMnemonic(english);
    const encryptedBundle = await walletBundle(mnemonic);
    const imported = await sdk.importWallet({ userId: org.userId, walletName: "scanned import", encryptedBundle, accounts: [eth] });
    const activity = await h.server.store.db
      .selectFrom("activities")
      .select("intent")
      .where("type", "=", "ACTIVITY_TYPE_IMPORT_WALLET")
      .orderBy("created_at", "desc")
      .executeTakeFirstOrThrow();
    expect(activity.intent).not.toContain(JSON.parse(encryptedBundle).ciphertext);
    expect(h.logLines.some((line) => line.includes(mnemonic))).toBe(false);
    if (backend === "sqlite") {
      for (const file of fs.readdirSync(h.config.dataDir).filter((f) => f.startsWith("sigil.db"))) {
        expect(fs.readFileSync(path.join(h.config.dataDir, file)).toString("latin1").includes(mnemonic), file).toBe(false);
      }
    }
    expect(imported.addresses).toHaveLength(1);
  });
});
