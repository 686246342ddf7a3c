// Export through the official clients: @turnkey/sdk-server asks for the bundle, @turnkey/crypto's
// decryptExportBundle opens it with the client's own key and Sigil's published signer key, and the
// chain libraries confirm the secret is the one behind the wallet's addresses. Plus the HPKE layer
// against RFC 9180's known answers, and bad input.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import fs from "node:fs";
import path from "node:path";
import { decryptExportBundle, generateP256KeyPair } from "@turnkey/crypto";
import { mnemonicToAccount, privateKeyToAccount } from "viem/accounts";
import { CipherSuite, DhkemP256HkdfSha256, HkdfSha256, Aes128Gcm } from "@hpke/core";
import { startHarness, signedRequest, newKeyPair, signerPublicKeyOf, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { openWith, sealTo, uncompressedP256 } from "../src/crypto/hpke.js";
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
  h = await startHarness();
  org = await h.organization("Exporter");
  sdk = h.sdk(org, org.key, fastPoller);
  signerPublicKey = await signerPublicKeyOf(h.url);
});
afterAll(() => h.close());

describe("export through the official clients", () => {
  it("publishes the bundle signer's public key, uncompressed", () => {
    expect(signerPublicKey).toMatch(/^04[0-9a-f]{128}$/);
  });

  it("export_wallet: decryptExportBundle gives back the mnemonic behind the wallet's address, and the wallet is marked exported", async () => {
    const wallet = await sdk.createWallet({ walletName: "to export", accounts: [eth] });
    const target = generateP256KeyPair();
    const { exportBundle } = await sdk.exportWallet({ walletId: wallet.walletId, targetPublicKey: target.publicKeyUncompressed });
    const mnemonic = await decryptExportBundle({
      exportBundle,
      embeddedKey: target.privateKey,
      organizationId: org.organizationId,
      returnMnemonic: true,
      dangerouslyOverrideSignerPublicKey: signerPublicKey,
    });
    expect(mnemonic.split(" ")).toHaveLength(12);
    expect(mnemonicToAccount(mnemonic).address).toBe(wallet.addresses[0]);
    const { wallet: stored } = await sdk.getWallet({ walletId: wallet.walletId });
    expect(stored.exported).toBe(true);
    // Exported, so it may now be deleted without deleteWithoutExport.
    await sdk.deleteWallets({ walletIds: [wallet.walletId] });
  });

  it("export_private_key and export_wallet_account: the 32-byte key behind the address", async () => {
    const keys = await sdk.createPrivateKeys({
      privateKeys: [
        { privateKeyName: "exportable", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] },
      ],
    });
    const created = keys.privateKeys[0]!;
    const target = generateP256KeyPair();
    const exported = await sdk.exportPrivateKey({ privateKeyId: created.privateKeyId!, targetPublicKey: target.publicKeyUncompressed });
    const keyHex = await decryptExportBundle({
      exportBundle: exported.exportBundle,
      embeddedKey: target.privateKey,
      organizationId: org.organizationId,
      returnMnemonic: false,
      dangerouslyOverrideSignerPublicKey: signerPublicKey,
    });
    expect(privateKeyToAccount(`0x${keyHex}`).address).toBe(created.addresses![0]!.address);
    expect((await sdk.getPrivateKey({ privateKeyId: created.privateKeyId! })).privateKey.exported).toBe(true);

    const wallet = await sdk.createWallet({ walletName: "account export", accounts: [eth] });
    const accountTarget = generateP256KeyPair();
    // A compressed target key is accepted too.
    const account = await sdk.exportWalletAccount({ address: wallet.addresses[0]!, targetPublicKey: accountTarget.publicKey });
    const accountKey = await decryptExportBundle({
      exportBundle: account.exportBundle,
      embeddedKey: accountTarget.privateKey,
      organizationId: org.organizationId,
      returnMnemonic: false,
      dangerouslyOverrideSignerPublicKey: signerPublicKey,
    });
    expect(privateKeyToAccount(`0x${accountKey}`).address).toBe(wallet.addresses[0]);
    expect((await sdk.getWallet({ walletId: wallet.walletId })).wallet.exported).toBe(false);
  });

  it("exports a Solana account in the client's SOLANA key format", async () => {
    const wallet = await sdk.createWallet({
      walletName: "sol export",
      accounts: [
        { curve: "CURVE_ED25519", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/501'/0'/0'", addressFormat: "ADDRESS_FORMAT_SOLANA" },
      ],
    });
    const target = generateP256KeyPair();
    const { exportBundle } = await sdk.exportWalletAccount({
      address: wallet.addresses[0]!,
      targetPublicKey: target.publicKeyUncompressed,
    });
    const solanaKey = await decryptExportBundle({
      exportBundle,
      embeddedKey: target.privateKey,
      organizationId: org.organizationId,
      returnMnemonic: false,
      keyFormat: "SOLANA",
      dangerouslyOverrideSignerPublicKey: signerPublicKey,
    });
    const { getBase58Decoder, getBase58Encoder } = await import("@solana/kit");
    const bytes = getBase58Encoder().encode(solanaKey);
    expect(bytes).toHaveLength(64);
    expect(getBase58Decoder().decode(bytes.slice(32))).toBe(wallet.addresses[0]);
  });

  it("a bundle does not open for another organization, with another key, or under another signer key", async () => {
    const wallet = await sdk.createWallet({ walletName: "guarded", accounts: [eth] });
    const target = generateP256KeyPair();
    const { exportBundle } = await sdk.exportWallet({ walletId: wallet.walletId, targetPublicKey: target.publicKeyUncompressed });
    const open = (over: Record<string, unknown>) =>
      decryptExportBundle({
        exportBundle,
        embeddedKey: target.privateKey,
        organizationId: org.organizationId,
        returnMnemonic: true,
        dangerouslyOverrideSignerPublicKey: signerPublicKey,
        ...over,
      } as any);
    await expect(open({ organizationId: "another-organization" })).rejects.toThrow();
    await expect(open({ embeddedKey: generateP256KeyPair().privateKey })).rejects.toThrow();
    await expect(open({ dangerouslyOverrideSignerPublicKey: generateP256KeyPair().publicKeyUncompressed })).rejects.toThrow();
    await expect(
      open({
        exportBundle: exportBundle.replace(/"data":"(..)/, (_m: string, first: string) => `"data":"${first === "7b" ? "7c" : "7b"}`),
      }),
    ).rejects.toThrow();
  });

  it("refuses a bad target key, a missing or foreign wallet, another language, and a non-root user without a policy; nothing is marked exported", async () => {
    const wallet = await sdk.createWallet({ walletName: "refusals", accounts: [eth] });
    const other = await h.organization("Other exporter");
    const foreign = await h.sdk(other, other.key, fastPoller).createWallet({ walletName: "theirs", accounts: [eth] });
    const target = generateP256KeyPair().publicKeyUncompressed;
    const before = await h.snapshot();
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ["export_wallet", { walletId: wallet.walletId, targetPublicKey: "04abcd" }, "INVALID_TARGET_PUBLIC_KEY"],
      ["export_wallet", { walletId: wallet.walletId, targetPublicKey: `04${"11".repeat(64)}` }, "INVALID_TARGET_PUBLIC_KEY"],
      ["export_wallet", { walletId: foreign.walletId, targetPublicKey: target }, "WALLET_NOT_FOUND"],
      [
        "export_wallet",
        { walletId: wallet.walletId, targetPublicKey: target, language: "MNEMONIC_LANGUAGE_JAPANESE" },
        "MNEMONIC_LANGUAGE_MISMATCH",
      ],
      ["export_private_key", { privateKeyId: "00000000-0000-0000-0000-000000000000", targetPublicKey: target }, "PRIVATE_KEY_NOT_FOUND"],
      ["export_wallet_account", { address: foreign.addresses[0], targetPublicKey: target }, "SIGNER_NOT_FOUND"],
    ];
    const types: Record<string, string> = {
      export_wallet: "ACTIVITY_TYPE_EXPORT_WALLET",
      export_private_key: "ACTIVITY_TYPE_EXPORT_PRIVATE_KEY",
      export_wallet_account: "ACTIVITY_TYPE_EXPORT_WALLET_ACCOUNT",
    };
    for (const [operation, parameters, code] of cases) {
      const request = signedRequest(
        { type: types[operation], organizationId: org.organizationId, timestampMs: String(Date.now()), parameters },
        org.key,
      );
      const res = await h.post(`/public/v1/submit/${operation}`, request.body, request.headers);
      expect(res.status, code).toBeGreaterThanOrEqual(400);
      expect(res.json.details[0].turnkeyErrorCode, JSON.stringify(parameters)).toBe(code);
    }
    // A member who is not root, with no policy allowing EXPORT, is denied.
    const member = newKeyPair();
    const users = await sdk.createUsers({
      users: [
        {
          userName: "member",
          apiKeys: [{ apiKeyName: "m", publicKey: member.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    await expect(h.sdk(org, member, fastPoller).exportWallet({ walletId: wallet.walletId, targetPublicKey: target })).rejects.toThrow(
      /POLICY_DENIED|denied/i,
    );
    const after = JSON.parse(await h.snapshot());
    for (const table of ["wallets", "wallet_accounts", "private_keys"]) expect(after[table], table).toEqual(JSON.parse(before)[table]);
    void users;
  });

  it("never stores an exported secret in the clear (the database file holds no mnemonic word run)", async () => {
    if (backend !== "sqlite") return;
    const wallet = await sdk.createWallet({ walletName: "scanned", accounts: [eth] });
    const target = generateP256KeyPair();
    const { exportBundle } = await sdk.exportWallet({ walletId: wallet.walletId, targetPublicKey: target.publicKeyUncompressed });
    const mnemonic = await decryptExportBundle({
      exportBundle,
      embeddedKey: target.privateKey,
      organizationId: org.organizationId,
      returnMnemonic: true,
      dangerouslyOverrideSignerPublicKey: signerPublicKey,
    });
    const files = fs
      .readdirSync(h.config.dataDir)
      .filter((f) => f.startsWith("sigil.db"))
      .map((f) => fs.readFileSync(path.join(h.config.dataDir, f)).toString("latin1"));
    for (const content of files) expect(content.includes(mnemonic)).toBe(false);
    expect(h.logLines.some((line) => line.includes(mnemonic))).toBe(false);
  });
});

describe("the HPKE layer", () => {
  it("matches RFC 9180's known answers for DHKEM(P-256, HKDF-SHA256) and HKDF-SHA256 (A.3.1, base mode)", async () => {
    const hex = (s: string) => Uint8Array.from(Buffer.from(s, "hex"));
    // The suite with AES-128-GCM (A.3): same KEM and KDF as the service's, whose AES-256 has no printed vector.
    const suite = new CipherSuite({ kem: new DhkemP256HkdfSha256(), kdf: new HkdfSha256(), aead: new Aes128Gcm() });
    const pkR = await suite.kem.deserializePublicKey(
      hex(
        "04fe8c19ce0905191ebc298a9245792531f26f0cece2460639e8bc39cb7f706a826a779b4cf969b8a0e539c7f62fb3d30ad6aa8f80e30f1d128aafd68a2ce72ea0",
      ),
    );
    const sender = await suite.createSenderContext({
      recipientPublicKey: pkR,
      info: hex("4f6465206f6e2061204772656369616e2055726e"),
      ekm: hex("4270e54ffd08d79d5928020af4686d8f6b7d35dbe470265f1f5aa22816ce860e"),
    });
    expect(Buffer.from(sender.enc).toString("hex")).toBe(
      "04a92719c6195d5085104f469a8b9814d5838ff72b60501e2c4466e5e67b325ac98536d7b61a1af4b78e5b7f951c0900be863c403ce65c9bfcb9382657222d18c4",
    );
    const ct = await sender.seal(hex("4265617574792069732074727574682c20747275746820626561757479"), hex("436f756e742d30"));
    expect(Buffer.from(ct).toString("hex")).toBe(
      "5ad590bb8baa577f8619db35a36311226a896e7342a6d836d8b7bcd2f20b6c7f9076ac232e3ab2523f39513434",
    );
  });

  it("opens what it seals to a key pair, and refuses a corrupted ciphertext or another key", async () => {
    const pair = generateP256KeyPair();
    const publicKey = uncompressedP256(pair.publicKeyUncompressed, "key");
    const privateKey = Buffer.from(pair.privateKey, "hex");
    const sealed = await sealTo(publicKey, Buffer.from("a secret"));
    expect(Buffer.from(await openWith(privateKey, publicKey, sealed)).toString()).toBe("a secret");
    const flipped = { ...sealed, ciphertext: (sealed.ciphertext[0] === "0" ? "1" : "0") + sealed.ciphertext.slice(1) };
    await expect(openWith(privateKey, publicKey, flipped)).rejects.toThrow(/does not decrypt/);
    const other = generateP256KeyPair();
    await expect(
      openWith(Buffer.from(other.privateKey, "hex"), uncompressedP256(other.publicKeyUncompressed, "key"), sealed),
    ).rejects.toThrow(/does not decrypt/);
  });
});
