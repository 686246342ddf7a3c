// Secrets at rest: the keyring (AES-256-GCM bound to the record), where the master key comes from,
// and `sigil rotate-master-key` re-sealing every stored secret (run as the built CLI).
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { encryptOauth2ClientSecret } from "@turnkey/crypto";
import { Keyring, SecretError, keyIdOf } from "../src/crypto/envelope.js";
import { loadKeyring, parseMasterKey } from "../src/crypto/master-key.js";
import { loadConfig } from "../src/config.js";
import { startHarness, type Harness } from "./helpers/harness.js";
import { mnemonicIdentity } from "../src/operations/wallets/wallets.js";
import { privateKeyIdentity } from "../src/operations/wallets/private-keys.js";
import { assertKeyringOpensStore } from "../src/services/sealed-secrets.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
const identity = { organizationId: "org-1", kind: "private_key", resourceId: "key-1" };

describe("keyring", () => {
  const key = crypto.randomBytes(32);

  it("opens what it sealed, and only for the same record", () => {
    const keyring = new Keyring(key);
    const sealed = keyring.seal("a secret", identity);
    expect(sealed.startsWith(`v1.${keyIdOf(key)}.`)).toBe(true);
    expect(sealed.includes("a secret")).toBe(false);
    expect(keyring.open(sealed, identity).toString()).toBe("a secret");
    for (const other of [
      { ...identity, organizationId: "org-2" },
      { ...identity, resourceId: "key-2" },
      { ...identity, kind: "wallet.mnemonic" },
    ]) {
      expect(() => keyring.open(sealed, other)).toThrow(/does not open/);
    }
  });

  it("refuses a tampered value, a truncated one, and one sealed under a key it does not hold", () => {
    const keyring = new Keyring(key);
    const sealed = keyring.seal("a secret", identity);
    const [format, kid, payload] = sealed.split(".");
    const flipped = Buffer.from(payload!, "base64url");
    flipped[14]! ^= 1;
    expect(() => keyring.open(`${format}.${kid}.${flipped.toString("base64url")}`, identity)).toThrow(SecretError);
    expect(() => keyring.open(`${format}.${kid}.AAAA`, identity)).toThrow(/truncated/);
    const stranger = new Keyring(crypto.randomBytes(32));
    expect(() => stranger.open(sealed, identity)).toThrow(new RegExp(`master key ${kid}`));
  });

  it("opens values sealed under an earlier key it still holds, and seals under the current one", () => {
    const old = new Keyring(key);
    const sealed = old.seal("kept", identity);
    const next = crypto.randomBytes(32);
    const rotated = new Keyring(next, [key]);
    expect(rotated.open(sealed, identity).toString()).toBe("kept");
    expect(Keyring.keyIdOf(rotated.seal("new", identity))).toBe(keyIdOf(next));
  });

  it("reads a master key as hex or base64 and refuses anything else", () => {
    expect(parseMasterKey(key.toString("hex"), "k")).toEqual(key);
    expect(parseMasterKey(key.toString("base64") + "\n", "k")).toEqual(key);
    for (const bad of ["", "abc", key.toString("hex").slice(2), crypto.randomBytes(16).toString("base64"), "!".repeat(44)]) {
      expect(() => parseMasterKey(bad, "SIGIL_MASTER_KEY")).toThrow(/32-byte key/);
    }
  });
});

describe("where the master key comes from", () => {
  const dirs: string[] = [];
  const tempDir = () => {
    const dir = fs.mkdtempSync(path.join(fs.realpathSync("/tmp"), "sigil-key-"));
    dirs.push(dir);
    return dir;
  };
  afterAll(() => dirs.forEach((d) => fs.rmSync(d, { recursive: true, force: true })));

  it("creates <data dir>/master.key, readable by its owner only, on first start, and reuses it after", () => {
    const dataDir = tempDir();
    const config = loadConfig({}, { dataDir });
    const first = loadKeyring(config.masterKey);
    expect(first.created).toBe(true);
    expect(fs.statSync(path.join(dataDir, "master.key")).mode & 0o777).toBe(0o600);
    const second = loadKeyring(config.masterKey);
    expect(second.created).toBe(false);
    expect(second.keyring.currentKeyId).toBe(first.keyring.currentKeyId);
    expect(second.source).not.toContain(fs.readFileSync(path.join(dataDir, "master.key"), "utf8").trim());
  });

  it("takes SIGIL_MASTER_KEY over the file, and refuses a missing SIGIL_MASTER_KEY_FILE", () => {
    const key = crypto.randomBytes(32);
    const fromEnv = loadKeyring(loadConfig({ SIGIL_MASTER_KEY: key.toString("hex") }, { dataDir: tempDir() }).masterKey);
    expect(fromEnv.keyring.currentKeyId).toBe(keyIdOf(key));
    expect(() => loadKeyring(loadConfig({ SIGIL_MASTER_KEY_FILE: "/nonexistent/master.key" }, { dataDir: tempDir() }).masterKey)).toThrow(
      /does not exist/,
    );
  });
});

describe("sigil rotate-master-key", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(() => h.close());

  it("a server refuses to start with a master key that cannot open the stored secrets, and leaves no new key behind", async () => {
    const org = await h.organization();
    await h.sdk(org, org.key).createWallet({ walletName: "guarded", accounts: [] });
    await expect(assertKeyringOpensStore(h.server.store.db, new Keyring(crypto.randomBytes(32)))).rejects.toThrow(
      /sealed under master key/,
    );
    await assertKeyringOpensStore(h.server.store.db, loadKeyring(h.config.masterKey).keyring);

    // The CLI, started on the same database with the key file gone (a wrong directory, a lost volume).
    const elsewhere = fs.mkdtempSync(path.join(fs.realpathSync("/tmp"), "sigil-nokey-"));
    const env: NodeJS.ProcessEnv = { ...process.env, SIGIL_MASTER_KEY_FILE: "", SIGIL_LOG_LEVEL: "warn" };
    delete env.SIGIL_MASTER_KEY;
    delete env.SIGIL_DATABASE_URL;
    if (h.database.databaseUrl) env.SIGIL_DATABASE_URL = h.database.databaseUrl;
    else {
      await sql`pragma wal_checkpoint(TRUNCATE)`.execute(h.server.store.db);
      fs.copyFileSync(path.join(h.database.dataDir, "sigil.db"), path.join(elsewhere, "sigil.db"));
    }
    const port = String(20000 + Math.floor(Math.random() * 20000));
    const started = await run(process.execPath, [CLI, "serve", "--port", port, "--data-dir", elsewhere], { env, timeout: 20_000 }).then(
      () => ({ ok: true, stderr: "" }),
      (error: { stderr: string }) => ({ ok: false, stderr: error.stderr }),
    );
    expect(started.ok).toBe(false);
    expect(started.stderr).toContain("sealed under master key");
    expect(fs.existsSync(path.join(elsewhere, "master.key"))).toBe(false);
    fs.rmSync(elsewhere, { recursive: true, force: true });
  });

  it("re-seals every stored secret under a new key in one go; the old key is kept beside it", async () => {
    const org = await h.organization();
    const client = h.sdk(org, org.key);
    const { walletId } = await client.createWallet({ walletName: "rotated", accounts: [] });
    const { privateKeys } = await client.createPrivateKeys({
      privateKeys: [{ privateKeyName: "rotated key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: [] }],
    });
    // An OAuth 2.0 client secret, encrypted to the deployment's published key as a client does it.
    const { tlsFetcherEncryptPublicKey } = (await (await fetch(`${h.url}/.well-known/sigil.json`)).json()) as {
      tlsFetcherEncryptPublicKey: string;
    };
    const { oauth2CredentialId } = await client.createOauth2Credential({
      provider: "OAUTH2_PROVIDER_DISCORD",
      clientId: "rotated-client",
      encryptedClientSecret: await encryptOauth2ClientSecret("rotated-client-secret", tlsFetcherEncryptPublicKey),
    });
    const db = h.server.store.db;
    const read = async () => ({
      wallet: await db.selectFrom("wallets").selectAll().where("id", "=", walletId).executeTakeFirstOrThrow(),
      key: await db.selectFrom("private_keys").selectAll().where("id", "=", privateKeys[0]!.privateKeyId!).executeTakeFirstOrThrow(),
      credential: await db.selectFrom("oauth2_credentials").selectAll().where("id", "=", oauth2CredentialId).executeTakeFirstOrThrow(),
    });
    const credentialIdentity = (row: { id: string; organization_id: string }) => ({
      organizationId: row.organization_id,
      kind: "oauth2_client_secret",
      resourceId: row.id,
    });
    const before = await read();
    const oldKeyring = loadKeyring(h.config.masterKey).keyring;
    const mnemonic = oldKeyring.open(before.wallet.sealed_mnemonic, mnemonicIdentity(before.wallet)).toString();
    const secret = oldKeyring.open(before.key.sealed_private_key, privateKeyIdentity(before.key)).toString("hex");

    const env: NodeJS.ProcessEnv = { ...process.env };
    delete env.SIGIL_MASTER_KEY;
    delete env.SIGIL_DATABASE_URL;
    if (h.database.databaseUrl) env.SIGIL_DATABASE_URL = h.database.databaseUrl;
    const { stdout } = await run(process.execPath, [CLI, "rotate-master-key", "--data-dir", h.config.dataDir], { env });
    const report = JSON.parse(stdout);
    expect(report).toMatchObject({ from: oldKeyring.currentKeyId });
    expect(report.resealed).toBeGreaterThanOrEqual(3);
    expect(report.to).not.toBe(report.from);
    expect(stdout).not.toContain(secret);

    const after = await read();
    const newKeyring = loadKeyring(h.config.masterKey).keyring;
    expect(newKeyring.currentKeyId).toBe(report.to);
    expect(Keyring.keyIdOf(after.wallet.sealed_mnemonic)).toBe(report.to);
    expect(Keyring.keyIdOf(after.key.sealed_private_key)).toBe(report.to);
    expect(newKeyring.open(after.wallet.sealed_mnemonic, mnemonicIdentity(after.wallet)).toString()).toBe(mnemonic);
    expect(newKeyring.open(after.key.sealed_private_key, privateKeyIdentity(after.key)).toString("hex")).toBe(secret);
    expect(Keyring.keyIdOf(after.credential.sealed_client_secret)).toBe(report.to);
    expect(newKeyring.open(after.credential.sealed_client_secret, credentialIdentity(after.credential)).toString()).toBe(
      "rotated-client-secret",
    );
    // The new key alone opens them: nothing is left under the old one.
    const onlyNew = new Keyring(parseMasterKey(fs.readFileSync(h.config.masterKey.file, "utf8"), "master.key"));
    expect(onlyNew.open(after.key.sealed_private_key, privateKeyIdentity(after.key)).toString("hex")).toBe(secret);
    expect(fs.existsSync(`${h.config.masterKey.file}.previous-${report.from}`)).toBe(true);
    expect(fs.existsSync(`${h.config.masterKey.file}.next`)).toBe(false);
  });
});
