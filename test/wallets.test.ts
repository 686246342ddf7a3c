// Wallets and private keys through @turnkey/sdk-server, as a user's backend creates and reads them;
// derived addresses are checked against the chains' own libraries.
import fs from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mnemonicToAccount, privateKeyToAddress } from "viem/accounts";
import crypto from "node:crypto";
import { p256 } from "@noble/curves/nist.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { decryptExportBundle, generateP256KeyPair } from "@turnkey/crypto";
import { refusedLeavingOnlyItsActivity, signerPublicKeyOf, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";
import { deriveKeyPair, keyPairFromPrivateKey, mnemonicToSeed } from "../src/crypto/hd.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import { mnemonicIdentity } from "../src/operations/wallets/wallets.js";
import { privateKeyIdentity } from "../src/operations/wallets/private-keys.js";

let h: Harness;
let org: TestOrganization;
let client: ReturnType<Harness["sdk"]>;

const ETH = {
  curve: "CURVE_SECP256K1",
  pathFormat: "PATH_FORMAT_BIP32",
  path: "m/44'/60'/0'/0/0",
  addressFormat: "ADDRESS_FORMAT_ETHEREUM",
} as const;
const SOL = {
  curve: "CURVE_ED25519",
  pathFormat: "PATH_FORMAT_BIP32",
  path: "m/44'/501'/0'/0'",
  addressFormat: "ADDRESS_FORMAT_SOLANA",
} as const;
const BTC = {
  curve: "CURVE_SECP256K1",
  pathFormat: "PATH_FORMAT_BIP32",
  path: "m/84'/0'/0'/0/0",
  addressFormat: "ADDRESS_FORMAT_BITCOIN_MAINNET_P2WPKH",
} as const;
// What the product's SDK asks for when an app signs JWTs with a wallet key (tkhq/sdk jwtSigning()).
const P256_COMPRESSED = {
  curve: "CURVE_P256",
  pathFormat: "PATH_FORMAT_BIP32",
  path: "m/44'/1'/0'/0/0",
  addressFormat: "ADDRESS_FORMAT_COMPRESSED",
} as const;
const ethAt = (i: number) => ({ ...ETH, path: `m/44'/60'/0'/0/${i}` });

/** The server's own keyring, read from its data directory, to look at what it stored. */
const keyring = () => loadKeyring(h.config.masterKey).keyring;

async function storedMnemonic(walletId: string) {
  const row = await h.server.store.db.selectFrom("wallets").selectAll().where("id", "=", walletId).executeTakeFirstOrThrow();
  return keyring().open(row.sealed_mnemonic, mnemonicIdentity(row)).toString("utf8");
}

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Wallets Inc");
  client = h.sdk(org, org.key);
});
afterAll(() => h.close());

describe("wallets", () => {
  it("creates a wallet whose accounts are the standard derivations of its mnemonic", async () => {
    const created = await client.createWallet({ walletName: "treasury", accounts: [ETH, SOL, BTC] });
    expect(created.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(created.addresses).toHaveLength(3);
    const mnemonic = await storedMnemonic(created.walletId);
    expect(mnemonic.split(" ")).toHaveLength(12);
    // Ethereum: viem derives the same account from the same mnemonic and path.
    expect(created.addresses[0]).toBe(mnemonicToAccount(mnemonic, { path: ETH.path }).address);
    expect(created.addresses[1]).toMatch(/^[1-9A-HJ-NP-Za-km-z]{32,44}$/);
    expect(created.addresses[2]).toMatch(/^bc1q[02-9ac-hj-np-z]{38}$/);

    const { wallet } = await client.getWallet({ walletId: created.walletId });
    expect(wallet).toMatchObject({ walletId: created.walletId, walletName: "treasury", exported: false, imported: false });
    expect((await client.getWallets({})).wallets.map((w) => w.walletName)).toContain("treasury");
  });

  it("mnemonicLength picks the number of words; anything but 12, 15, 18, 21, 24 is refused", async () => {
    const created = await client.createWallet({ walletName: "long", accounts: [], mnemonicLength: 24 });
    expect((await storedMnemonic(created.walletId)).split(" ")).toHaveLength(24);
    await expect(client.createWallet({ walletName: "odd", accounts: [], mnemonicLength: 13 })).rejects.toMatchObject({
      code: 3,
      message: expect.stringContaining("mnemonicLength"),
    });
  });

  it("derives more accounts; the same path again returns the same account, persist: false stores nothing", async () => {
    const { walletId, addresses } = await client.createWallet({ walletName: "accounts", accounts: [ethAt(0)] });
    const more = await client.createWalletAccounts({ walletId, accounts: [ethAt(0), ethAt(1)] });
    expect(more.addresses[0]).toBe(addresses[0]);
    const mnemonic = await storedMnemonic(walletId);
    expect(more.addresses[1]).toBe(mnemonicToAccount(mnemonic, { path: ethAt(1).path as `m/44'/60'/${string}` }).address);
    const listed = await client.getWalletAccounts({ walletId });
    expect(listed.accounts.map((a) => a.path)).toEqual([ethAt(0).path, ethAt(1).path]);

    const preview = await client.createWalletAccounts({ walletId, accounts: [ethAt(7)], persist: false } as any);
    expect(preview.addresses[0]).toBe(mnemonicToAccount(mnemonic, { path: ethAt(7).path as `m/44'/60'/${string}` }).address);
    expect((await client.getWalletAccounts({ walletId })).accounts).toHaveLength(2);
  });

  it("reads one account by address or by path, and pages through accounts", async () => {
    const { walletId } = await client.createWallet({ walletName: "pages", accounts: Array.from({ length: 5 }, (_, i) => ethAt(i)) });
    const { accounts } = await client.getWalletAccounts({ walletId, paginationOptions: { limit: "2" } });
    expect(accounts.map((a) => a.path)).toEqual([ethAt(0).path, ethAt(1).path]);
    const next = await client.getWalletAccounts({ walletId, paginationOptions: { limit: "2", after: accounts[1]!.walletAccountId } });
    expect(next.accounts.map((a) => a.path)).toEqual([ethAt(2).path, ethAt(3).path]);
    const back = await client.getWalletAccounts({ walletId, paginationOptions: { limit: "2", before: next.accounts[0]!.walletAccountId } });
    expect(back.accounts.map((a) => a.path)).toEqual([ethAt(0).path, ethAt(1).path]);

    const byPath = await client.getWalletAccount({ walletId, path: ethAt(3).path });
    const byAddress = await client.getWalletAccount({ walletId, address: byPath.account.address });
    expect(byAddress.account).toMatchObject({
      walletAccountId: byPath.account.walletAccountId,
      curve: "CURVE_SECP256K1",
      addressFormat: "ADDRESS_FORMAT_ETHEREUM",
      pathFormat: "PATH_FORMAT_BIP32",
    });
    expect(byAddress.account.publicKey).toMatch(/^0[23][0-9a-f]{64}$/);
    const withDetails = await client.getWalletAccounts({ walletId, includeWalletDetails: true, paginationOptions: { limit: "1" } });
    expect(withDetails.accounts[0]!.walletDetails).toMatchObject({ walletId, walletName: "pages" });
  });

  it("renames a wallet; names are unique in an organization", async () => {
    const { walletId } = await client.createWallet({ walletName: "old name", accounts: [] });
    await client.updateWallet({ walletId, walletName: "new name" });
    expect((await client.getWallet({ walletId })).wallet.walletName).toBe("new name");
    await expect(client.createWallet({ walletName: "new name", accounts: [] })).rejects.toMatchObject({ code: 6 });
  });

  it("refuses to delete a wallet never exported unless deleteWithoutExport, then deletes it and its accounts", async () => {
    const { walletId } = await client.createWallet({ walletName: "doomed", accounts: [ETH] });
    const before = JSON.parse(await h.snapshot());
    await expect(client.deleteWallets({ walletIds: [walletId] })).rejects.toMatchObject({
      code: 9,
      message: expect.stringContaining("never been exported"),
    });
    const after = JSON.parse(await h.snapshot());
    expect(after.wallets).toEqual(before.wallets);
    expect(after.wallet_accounts).toEqual(before.wallet_accounts);
    await client.deleteWallets({ walletIds: [walletId], deleteWithoutExport: true });
    await expect(client.getWallet({ walletId })).rejects.toMatchObject({ code: 5 });
    expect(await h.server.store.db.selectFrom("wallet_accounts").select("id").where("wallet_id", "=", walletId).execute()).toEqual([]);
  });

  it("refuses an address format the curve cannot have, a malformed path, and a non-hardened ed25519 path; nothing is stored", async () => {
    const before = JSON.parse(await h.snapshot());
    await expect(
      client.createWallet({ walletName: "bad1", accounts: [{ ...ETH, curve: "CURVE_ED25519", path: "m/44'/60'/0'/0'/0'" }] }),
    ).rejects.toMatchObject({ code: 3, details: [expect.objectContaining({ turnkeyErrorCode: "UNSUPPORTED_ADDRESS_FORMAT" })] });
    await expect(client.createWallet({ walletName: "bad2", accounts: [{ ...ETH, path: "44/60/0" }] })).rejects.toMatchObject({
      code: 3,
      details: [expect.objectContaining({ turnkeyErrorCode: "INVALID_DERIVATION_PATH" })],
    });
    await expect(client.createWallet({ walletName: "bad3", accounts: [{ ...SOL, path: "m/44'/501'/0'/0" }] })).rejects.toMatchObject({
      code: 3,
      message: expect.stringContaining("hardened"),
    });
    const after = JSON.parse(await h.snapshot());
    for (const table of ["wallets", "wallet_accounts"]) expect(after[table], table).toEqual(before[table]);
  });

  it("a wallet made while its request waits for approvals: nothing made ahead (mnemonic, keys) is stored with the waiting activity; the approval makes the wallet", async () => {
    const { org: held, root, members } = await organizationWith(h, ["alice"]);
    await root.createPolicy({
      policyName: "alice creates wallets with the root's approval",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${held.userId}')`,
      condition: "activity.type == 'ACTIVITY_TYPE_CREATE_WALLET'",
      notes: "",
    });
    const pending = await members.alice!.client.createWallet({ walletName: "held", accounts: [ETH] });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    // create_wallet's precheck made a mnemonic and derived its account before the lock
    // (wallets.ts, walletAhead): kept in memory only, never in the waiting activity's row.
    const row = await h.server.store.db
      .selectFrom("activities")
      .select("prepared")
      .where("fingerprint", "=", pending.activity.fingerprint)
      .executeTakeFirstOrThrow();
    expect(row.prepared).toBe("{}");
    const approved = await root.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const { walletId, addresses } = approved.activity.result.createWalletResult!;
    expect(addresses).toHaveLength(1);
    const accounts = await root.getWalletAccounts({ walletId });
    expect(accounts.accounts.map((a) => a.address)).toEqual(addresses);
  });

  it("does not show or touch another organization's wallet", async () => {
    const { walletId } = await client.createWallet({ walletName: "mine", accounts: [ETH] });
    const other = await h.organization("Other");
    const stranger = h.sdk(other, other.key);
    await expect(stranger.getWallet({ walletId })).rejects.toMatchObject({ code: 5 });
    await expect(stranger.createWalletAccounts({ walletId, accounts: [ethAt(1)] })).rejects.toMatchObject({ code: 5 });
    await expect(stranger.deleteWallets({ walletIds: [walletId], deleteWithoutExport: true })).rejects.toMatchObject({ code: 5 });
    expect((await client.getWallet({ walletId })).wallet.walletName).toBe("mine");
  });
});

describe("private keys", () => {
  it("keys generated before the lock (create_private_keys' precheck) are the keys stored: on every curve the public key and address are the sealed key's", async () => {
    const created = await client.createPrivateKeys({
      privateKeys: [
        { privateKeyName: "ahead k1", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] },
        { privateKeyName: "ahead p256", curve: "CURVE_P256", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_COMPRESSED"] },
        { privateKeyName: "ahead ed", curve: "CURVE_ED25519", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_SOLANA"] },
      ],
    });
    const publicKeys = new Set<string>();
    for (const [i, curve] of (["CURVE_SECP256K1", "CURVE_P256", "CURVE_ED25519"] as const).entries()) {
      const key = created.privateKeys[i]!;
      const row = await h.server.store.db
        .selectFrom("private_keys")
        .selectAll()
        .where("id", "=", key.privateKeyId!)
        .executeTakeFirstOrThrow();
      const secret = keyring().open(row.sealed_private_key, privateKeyIdentity(row));
      expect(row.public_key, curve).toBe(Buffer.from(keyPairFromPrivateKey(curve, secret).publicKey).toString("hex"));
      if (curve === "CURVE_SECP256K1") expect(key.addresses![0]!.address).toBe(privateKeyToAddress(`0x${secret.toString("hex")}`));
      publicKeys.add(row.public_key);
    }
    expect(publicKeys.size).toBe(3);
  });

  it("keys of a request waiting for approvals: nothing generated ahead is stored with the waiting activity; the approval makes the keys", async () => {
    const { org: held, root, members } = await organizationWith(h, ["bob"]);
    await root.createPolicy({
      policyName: "bob creates keys with the root's approval",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${held.userId}')`,
      condition: "activity.type == 'ACTIVITY_TYPE_CREATE_PRIVATE_KEYS_V2'",
      notes: "",
    });
    const pending = await members.bob!.client.createPrivateKeys({
      privateKeys: [{ privateKeyName: "held", curve: "CURVE_P256", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_COMPRESSED"] }],
    });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const row = await h.server.store.db
      .selectFrom("activities")
      .select("prepared")
      .where("fingerprint", "=", pending.activity.fingerprint)
      .executeTakeFirstOrThrow();
    expect(row.prepared).toBe("{}");
    const approved = await root.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const [made] = approved.activity.result.createPrivateKeysResultV2!.privateKeys!;
    const stored = await h.server.store.db
      .selectFrom("private_keys")
      .selectAll()
      .where("id", "=", made!.privateKeyId!)
      .executeTakeFirstOrThrow();
    const secret = keyring().open(stored.sealed_private_key, privateKeyIdentity(stored));
    expect(made!.addresses![0]!.address).toBe(Buffer.from(keyPairFromPrivateKey("CURVE_P256", secret).publicKey).toString("hex"));
  });

  it("creates keys (V2 answers with addresses), reads and lists them; the Ethereum address is the key's", async () => {
    const created = await client.createPrivateKeys({
      privateKeys: [
        {
          privateKeyName: "hot key",
          curve: "CURVE_SECP256K1",
          privateKeyTags: [],
          addressFormats: ["ADDRESS_FORMAT_ETHEREUM", "ADDRESS_FORMAT_COMPRESSED"],
        },
      ],
    });
    expect(created.activity.type).toBe("ACTIVITY_TYPE_CREATE_PRIVATE_KEYS_V2");
    const [key] = created.privateKeys;
    expect(key!.addresses!.map((a) => a.format)).toEqual(["ADDRESS_FORMAT_ETHEREUM", "ADDRESS_FORMAT_COMPRESSED"]);
    const row = await h.server.store.db
      .selectFrom("private_keys")
      .selectAll()
      .where("id", "=", key!.privateKeyId!)
      .executeTakeFirstOrThrow();
    const secret = keyring().open(row.sealed_private_key, privateKeyIdentity(row));
    expect(key!.addresses![0]!.address).toBe(privateKeyToAddress(`0x${secret.toString("hex")}`));

    const { privateKey } = await client.getPrivateKey({ privateKeyId: key!.privateKeyId! });
    expect(privateKey).toMatchObject({
      privateKeyName: "hot key",
      curve: "CURVE_SECP256K1",
      exported: false,
      imported: false,
      privateKeyTags: [],
    });
    expect(privateKey.publicKey).toBe(key!.addresses![1]!.address);
    expect((await client.getPrivateKeys({})).privateKeys.map((k) => k.privateKeyName)).toContain("hot key");
  });

  it("tags private keys, and deletes keys only when exported or forced", async () => {
    const created = await client.createPrivateKeys({
      privateKeys: [{ privateKeyName: "tagged", curve: "CURVE_ED25519", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_SOLANA"] }],
    });
    const id = created.privateKeys[0]!.privateKeyId!;
    const { privateKeyTagId } = await client.createPrivateKeyTag({ privateKeyTagName: "signers", privateKeyIds: [id] });
    expect((await client.getPrivateKey({ privateKeyId: id })).privateKey.privateKeyTags).toEqual([privateKeyTagId]);
    expect((await client.listPrivateKeyTags({})).privateKeyTags).toEqual([
      expect.objectContaining({ tagId: privateKeyTagId, tagName: "signers", tagType: "TAG_TYPE_PRIVATE_KEY" }),
    ]);
    await client.updatePrivateKeyTag({
      privateKeyTagId,
      newPrivateKeyTagName: "cold signers",
      addPrivateKeyIds: [],
      removePrivateKeyIds: [id],
    });
    expect((await client.getPrivateKey({ privateKeyId: id })).privateKey.privateKeyTags).toEqual([]);
    const deletedTags = await client.deletePrivateKeyTags({ privateKeyTagIds: [privateKeyTagId] });
    expect(deletedTags.privateKeyTagIds).toEqual([privateKeyTagId]);

    await expect(client.deletePrivateKeys({ privateKeyIds: [id] })).rejects.toMatchObject({ code: 9 });
    await client.deletePrivateKeys({ privateKeyIds: [id], deleteWithoutExport: true });
    await expect(client.getPrivateKey({ privateKeyId: id })).rejects.toMatchObject({ code: 5 });
  });

  it("refuses an address format the curve cannot have and a duplicate name, storing nothing", async () => {
    const before = JSON.parse(await h.snapshot());
    await expect(
      client.createPrivateKeys({
        privateKeys: [
          { privateKeyName: "eth on ed", curve: "CURVE_ED25519", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] },
        ],
      }),
    ).rejects.toMatchObject({ code: 3 });
    await expect(
      client.createPrivateKeys({
        privateKeys: [
          { privateKeyName: "twin", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: [] },
          { privateKeyName: "twin", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: [] },
        ],
      }),
    ).rejects.toMatchObject({ code: 6 });
    expect(JSON.parse(await h.snapshot()).private_keys).toEqual(before.private_keys);
  });
});

describe("P-256 wallet accounts (SLIP-10 nist256p1)", () => {
  const slip10 = (mnemonic: string, path: string) => deriveKeyPair(mnemonicToSeed(mnemonic), "CURVE_P256", path).publicKey;
  const uncompressed = (compressed: Uint8Array) => p256.Point.fromBytes(compressed).toBytes(false);

  it("creates them at the SDK's jwtSigning path, compressed and uncompressed, as the mnemonic's SLIP-10 keys", async () => {
    const created = await client.createWallet({
      walletName: "jwt signer",
      accounts: [P256_COMPRESSED, { ...P256_COMPRESSED, addressFormat: "ADDRESS_FORMAT_UNCOMPRESSED" }],
    });
    const mnemonic = await storedMnemonic(created.walletId);
    const expected = slip10(mnemonic, P256_COMPRESSED.path);
    expect(created.addresses).toEqual([Buffer.from(expected).toString("hex"), Buffer.from(uncompressed(expected)).toString("hex")]);
    // OpenSSL agrees the uncompressed address is the same point.
    expect(crypto.ECDH.convertKey(created.addresses[1]!, "prime256v1", "hex", "hex", "compressed")).toBe(created.addresses[0]);
    const { account } = await client.getWalletAccount({ walletId: created.walletId, address: created.addresses[0]! });
    expect(account).toMatchObject({
      curve: "CURVE_P256",
      pathFormat: "PATH_FORMAT_BIP32",
      path: P256_COMPRESSED.path,
      publicKey: created.addresses[0],
    });

    const more = await client.createWalletAccounts({
      walletId: created.walletId,
      accounts: [{ ...P256_COMPRESSED, path: "m/44'/1'/0'/0/1" }],
    });
    expect(more.addresses).toEqual([Buffer.from(slip10(mnemonic, "m/44'/1'/0'/0/1")).toString("hex")]);
    expect((await client.getWalletAccounts({ walletId: created.walletId })).accounts).toHaveLength(3);
  });

  it("sign_raw_payload with a P-256 account verifies with node:crypto and noble p256", async () => {
    const { addresses } = await client.createWallet({ walletName: "p256 signer", accounts: [P256_COMPRESSED] });
    const message = Buffer.from('{"sub":"sigil","iat":1}');
    for (const signWith of addresses) {
      const { r, s } = await client.signRawPayload({
        signWith,
        payload: message.toString("hex"),
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_SHA256",
      });
      const signature = Buffer.from(r.padStart(64, "0") + s.padStart(64, "0"), "hex");
      const publicKey = Buffer.from(addresses[0]!, "hex");
      expect(p256.verify(signature, sha256(message), publicKey, { prehash: false })).toBe(true);
      const spki = crypto.createPublicKey({
        key: { kty: "EC", crv: "P-256", ...jwkCoordinates(p256.Point.fromBytes(publicKey).toBytes(false)) },
        format: "jwk",
      });
      expect(crypto.verify("sha256", message, { key: spki, dsaEncoding: "ieee-p1363" }, signature)).toBe(true);
      expect(crypto.verify("sha256", Buffer.from("another message"), { key: spki, dsaEncoding: "ieee-p1363" }, signature)).toBe(false);
    }
  });

  it("export_wallet's mnemonic re-derives the same P-256 key", async () => {
    const wallet = await client.createWallet({ walletName: "p256 export", accounts: [P256_COMPRESSED] });
    const target = generateP256KeyPair();
    const { exportBundle } = await client.exportWallet({ walletId: wallet.walletId, targetPublicKey: target.publicKeyUncompressed });
    const mnemonic = await decryptExportBundle({
      exportBundle,
      embeddedKey: target.privateKey,
      organizationId: org.organizationId,
      returnMnemonic: true,
      dangerouslyOverrideSignerPublicKey: await signerPublicKeyOf(h.url),
    });
    expect(Buffer.from(slip10(mnemonic, P256_COMPRESSED.path)).toString("hex")).toBe(wallet.addresses[0]);
  });

  it("refuses a P-256 account with an address format of another curve; nothing but the failed activity is stored", async () => {
    const { walletId } = await client.createWallet({ walletName: "p256 refusals", accounts: [] });
    for (const addressFormat of ["ADDRESS_FORMAT_ETHEREUM", "ADDRESS_FORMAT_SOLANA"] as const) {
      const { failure } = await refusedLeavingOnlyItsActivity(
        h,
        () => client.createWallet({ walletName: `p256 as ${addressFormat}`, accounts: [{ ...P256_COMPRESSED, addressFormat }] }),
        { code: 3, details: [expect.objectContaining({ turnkeyErrorCode: "UNSUPPORTED_ADDRESS_FORMAT" })] },
      );
      expect(JSON.stringify(failure)).toMatch(new RegExp(`${addressFormat} needs CURVE_\\w+`));
      await refusedLeavingOnlyItsActivity(
        h,
        () => client.createWalletAccounts({ walletId, accounts: [{ ...P256_COMPRESSED, addressFormat }] }),
        {
          code: 3,
          message: expect.stringContaining(`${addressFormat} needs`),
        },
      );
    }
  });
});

/** x and y of an uncompressed SEC 1 point, base64url, for a JWK. */
function jwkCoordinates(point: Uint8Array) {
  return { x: Buffer.from(point.subarray(1, 33)).toString("base64url"), y: Buffer.from(point.subarray(33)).toString("base64url") };
}

describe("secrets at rest", () => {
  it("no mnemonic or private key appears in the database files or the server's log", async () => {
    const { walletId } = await client.createWallet({ walletName: "secret keeper", accounts: [ETH] });
    const created = await client.createPrivateKeys({
      privateKeys: [{ privateKeyName: "secret key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: [] }],
    });
    const mnemonic = await storedMnemonic(walletId);
    const row = await h.server.store.db
      .selectFrom("private_keys")
      .selectAll()
      .where("id", "=", created.privateKeys[0]!.privateKeyId!)
      .executeTakeFirstOrThrow();
    const secret = keyring().open(row.sealed_private_key, privateKeyIdentity(row));
    const needles = [mnemonic, mnemonic.split(" ").slice(0, 4).join(" "), secret.toString("hex"), secret.toString("base64")];
    const haystacks = [h.logLines.join("\n"), await h.snapshot()];
    if (!h.database.databaseUrl) {
      for (const file of fs.readdirSync(h.database.dataDir)) {
        if (file.startsWith("sigil.db")) haystacks.push(fs.readFileSync(path.join(h.database.dataDir, file)).toString("latin1"));
      }
    }
    for (const haystack of haystacks) for (const needle of needles) expect(haystack.includes(needle)).toBe(false);
  });
});
