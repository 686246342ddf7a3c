// The master key in a PKCS#11 token (docs/hsm.md), against SoftHSM2 through pkcs11js: a server starts
// on the token, signs, restarts and signs again; every bad setting is refused at start naming the
// setting, writing nothing; nothing of the key reaches the database or the log; and
// `sigil rotate-master-key` moves every secret from a key file to the token and back in one transaction.
import fs from "node:fs";
import path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql, type Kysely } from "kysely";
import { Turnkey } from "@turnkey/sdk-server";
import { decryptExportBundle, generateP256KeyPair } from "@turnkey/crypto";
import { recoverAddress } from "viem";
import { mnemonicToAccount } from "viem/accounts";
import { loadConfig, type Config } from "../src/config.js";
import { startServer, type RunningServer } from "../src/http/server.js";
import { createOrganization } from "../src/operations/organizations/organizations.js";
import { Keyring } from "../src/crypto/envelope.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import { SECRET_COLUMNS } from "../src/services/sealed-secrets.js";
import { mnemonicIdentity } from "../src/operations/wallets/wallets.js";
import { readDataKeyRow, tokenKeyring, unwrapDataKey } from "../src/services/token-keyring.js";
import { backend, createTestDatabase, type TestDatabase } from "./helpers/backend.js";
import { newKeyPair, type ApiKeyPair } from "./helpers/harness.js";
import { freePort } from "./helpers/processes.js";
import { createSoftToken, type SoftToken } from "./helpers/softhsm.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
const HASH = `0x${"ab".repeat(32)}` as const;
/** A real shared library that is not a PKCS#11 module (no C_GetFunctionList). */
const NOT_A_MODULE = path.resolve("node_modules/better-sqlite3/build/Release/better_sqlite3.node");

let token: SoftToken;
beforeAll(() => {
  token = createSoftToken();
  token.addKey("another-key");
  token.addKey("not-aes", { generic: true });
  token.addKey("readable-key", { readable: true });
});
afterAll(() => token.remove());

/** One deployment's database, and servers started and stopped on it in this process. */
class Deployment {
  logLines: string[] = [];
  server: RunningServer | null = null;
  org!: { organizationId: string; key: ApiKeyPair };
  constructor(readonly database: TestDatabase) {}

  config(env: Record<string, string>): Config {
    const config = loadConfig(
      { SIGIL_LOG_LEVEL: "info", ...env, ...(this.database.databaseUrl ? { SIGIL_DATABASE_URL: this.database.databaseUrl } : {}) },
      { host: "127.0.0.1", dataDir: this.database.dataDir },
    );
    config.port = 0;
    return config;
  }

  async start(env: Record<string, string>): Promise<RunningServer> {
    const logger = pino({ level: "info" }, { write: (line: string) => void this.logLines.push(line) });
    this.server = await startServer(this.config(env), logger);
    return this.server;
  }

  async stop() {
    await this.server?.close();
    this.server = null;
  }

  sdk() {
    return new Turnkey({
      apiBaseUrl: this.server!.url,
      apiPublicKey: this.org.key.publicKey,
      apiPrivateKey: this.org.key.privateKey,
      defaultOrganizationId: this.org.organizationId,
    }).apiClient();
  }

  /** Runs `work` on the database: the running server's handle, or a store opened for it and closed after. */
  async withDb<T>(work: (db: Kysely<any>) => Promise<T>): Promise<T> {
    if (this.server) return work(this.server.store.db as unknown as Kysely<any>);
    const { openStore } = await import("../src/store/database.js");
    const store = await openStore({ ...this.config({}), mode: "existing" });
    try {
      return await work(store.db as unknown as Kysely<any>);
    } finally {
      await store.close();
    }
  }

  /** Every row of every table but Kysely's and the rate limiter's. A running server's transparency log
   * sequencer appends what it committed first (it would, any moment: services/log-sequencer.ts), so two
   * snapshots differ only by what happened between them. */
  async snapshot(): Promise<string> {
    await this.server?.logSequencer.flush();
    return this.withDb(async (db) => {
      const tables = (await db.introspection.getTables())
        .map((t) => t.name)
        .filter((name) => !name.startsWith("kysely_") && name !== "rate_limit_buckets")
        .sort();
      const out: Record<string, string[]> = {};
      for (const table of tables) {
        const rows = await db.selectFrom(table).selectAll().execute();
        out[table] = rows.map((r) => JSON.stringify(r)).sort();
      }
      return JSON.stringify(out);
    });
  }

  /** The CLI on this deployment's database, with `env` besides the machine's (and no master key of its own). */
  async cli(args: string[], env: Record<string, string>) {
    const full: NodeJS.ProcessEnv = { ...process.env, SIGIL_LOG_LEVEL: "warn", ...env };
    if (!env.SIGIL_MASTER_KEY) delete full.SIGIL_MASTER_KEY;
    delete full.SIGIL_DATABASE_URL;
    if (this.database.databaseUrl) full.SIGIL_DATABASE_URL = this.database.databaseUrl;
    return run(process.execPath, [CLI, ...args, "--data-dir", this.database.dataDir], { env: full }).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
    );
  }
}

async function signature(d: Deployment, signWith: string) {
  const { r, s, v } = await d.sdk().signRawPayload({
    signWith,
    payload: HASH,
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_NO_OP",
  });
  const signature = `0x${r}${s}${v === "00" ? "1b" : "1c"}` as const;
  expect((await recoverAddress({ hash: HASH, signature })).toLowerCase()).toBe(signWith.toLowerCase());
  return signature;
}

async function exportedMnemonic(d: Deployment, walletId: string) {
  const { signerPublicKey } = (await (await fetch(`${d.server!.url}/.well-known/sigil.json`)).json()) as { signerPublicKey: string };
  const target = generateP256KeyPair();
  const { exportBundle } = await d.sdk().exportWallet({ walletId, targetPublicKey: target.publicKeyUncompressed });
  return decryptExportBundle({
    exportBundle,
    embeddedKey: target.privateKey,
    organizationId: d.org.organizationId,
    returnMnemonic: true,
    dangerouslyOverrideSignerPublicKey: signerPublicKey,
  });
}

/** The bytes of the database as stored: the SQLite files, or every row of the PostgreSQL database as text. */
async function storedBytes(d: Deployment): Promise<Buffer> {
  if (!d.database.databaseUrl) {
    if (d.server) await sql`pragma wal_checkpoint(TRUNCATE)`.execute(d.server.store.db);
    return Buffer.concat(
      fs
        .readdirSync(d.database.dataDir)
        .filter((f) => f.startsWith("sigil.db"))
        .map((f) => fs.readFileSync(path.join(d.database.dataDir, f))),
    );
  }
  return Buffer.from(await d.snapshot());
}

describe("a server whose master key is in a PKCS#11 token", () => {
  let d: Deployment;
  let pinFile: string;
  let env: Record<string, string>;
  beforeAll(async () => {
    d = new Deployment(await createTestDatabase());
    // The PIN from a file, readable by its owner only.
    pinFile = path.join(token.dir, "pin");
    fs.writeFileSync(pinFile, `${token.config.pin}\n`, { mode: 0o600 });
    env = { ...token.env, SIGIL_PKCS11_PIN: "", SIGIL_PKCS11_PIN_FILE: pinFile };
  });
  afterAll(async () => {
    await d.stop();
    await d.database.drop();
  });

  it("starts on a new database, signs, restarts and signs again; nothing of the key reaches the database or the log", async () => {
    await d.start(env);
    const created = await createOrganization(d.server!.store.db, {
      organizationName: "hsm",
      userName: "root",
      apiPublicKey: (d.org = { organizationId: "", key: newKeyPair() }).key.publicKey,
      apiKeyName: "root key",
    });
    d.org.organizationId = created.organizationId;
    const wallet = await d.sdk().createWallet({
      walletName: "in the token",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    const address = wallet.addresses[0]!;
    const first = await signature(d, address);
    const row = (await readDataKeyRow(d.server!.store.db))!;
    expect(row).toMatchObject({ token_label: token.config.tokenLabel, key_label: "sigil-master" });
    // The wallet is sealed under the data key the token wrapped.
    const sealed = await d.server!.store.db.selectFrom("wallets").select("sealed_mnemonic").executeTakeFirstOrThrow();
    expect(Keyring.keyIdOf(sealed.sealed_mnemonic)).toBe(row.key_id);
    expect(fs.existsSync(path.join(d.database.dataDir, "master.key"))).toBe(false);

    await d.stop();
    await d.start(env);
    expect(await signature(d, address)).toBe(first);
    expect((await fetch(`${d.server!.url}/ready`)).status).toBe(200);
    // The same data key: the restart unwrapped the one stored, it made none.
    expect((await readDataKeyRow(d.server!.store.db))!.key_id).toBe(row.key_id);

    const dataKey = unwrapDataKey(token.config, row);
    const stored = await storedBytes(d);
    const log = d.logLines.join("\n");
    for (const form of [dataKey.toString("hex"), dataKey.toString("base64"), dataKey.toString("base64url")]) {
      expect(stored.includes(form)).toBe(false);
      expect(log.includes(form)).toBe(false);
    }
    expect(stored.includes(dataKey)).toBe(false);
    expect(stored.includes(token.config.pin!)).toBe(false);
    expect(log).not.toContain(token.config.pin!);
    expect(log).toContain(`data key id ${row.key_id}`);
    expect(log).toContain("made the data key and stored it wrapped by the token's key");
  });

  it("refuses to start, naming the setting and writing nothing, on a wrong PIN, token, key or module, or a PIN file others may read", async () => {
    const before = await d.snapshot();
    const otherPinFile = path.join(token.dir, "pin-0644");
    fs.writeFileSync(otherPinFile, `${token.config.pin}\n`, { mode: 0o644 });
    fs.chmodSync(otherPinFile, 0o644);
    const refusals: [Record<string, string>, RegExp][] = [
      [
        { SIGIL_PKCS11_PIN_FILE: "", SIGIL_PKCS11_PIN: "0000" },
        /^SIGIL_PKCS11_PIN: token "sigil-test" refused the PIN \(CKR_PIN_INCORRECT\)/,
      ],
      [
        { SIGIL_PKCS11_TOKEN_LABEL: "no-such-token" },
        /^SIGIL_PKCS11_TOKEN_LABEL: there is no token labelled "no-such-token" in .*its tokens are "sigil-test"/,
      ],
      [{ SIGIL_PKCS11_KEY_LABEL: "no-such-key" }, /^SIGIL_PKCS11_KEY_LABEL: token "sigil-test" holds no secret key labelled "no-such-key"/],
      // A key of the token that did not wrap this database's data key.
      [
        { SIGIL_PKCS11_KEY_LABEL: "another-key" },
        /was wrapped by key "sigil-master" of token "sigil-test", and does not open under key "another-key".*SIGIL_PKCS11_KEY_LABEL/,
      ],
      [
        { SIGIL_PKCS11_KEY_LABEL: "not-aes" },
        /^SIGIL_PKCS11_KEY_LABEL: the key labelled "not-aes" in token "sigil-test" must be an AES key allowed to encrypt and decrypt/,
      ],
      [
        { SIGIL_PKCS11_MODULE: NOT_A_MODULE },
        /^SIGIL_PKCS11_MODULE names .*better_sqlite3\.node, which is not a PKCS#11 module: it has no C_GetFunctionList/,
      ],
      [{ SIGIL_PKCS11_MODULE: path.join(token.dir, "missing.so") }, /^SIGIL_PKCS11_MODULE names .*missing\.so, which does not exist/],
      [
        { SIGIL_PKCS11_PIN_FILE: otherPinFile },
        /^SIGIL_PKCS11_PIN_FILE .*pin-0644 may be read or written by others than its owner \(mode 644\): .*chmod 600/,
      ],
      [{ SIGIL_PKCS11_PIN_FILE: path.join(token.dir, "no-pin") }, /^SIGIL_PKCS11_PIN_FILE names .*no-pin, which does not exist/],
    ];
    for (const [change, message] of refusals) {
      await expect(d.start({ ...env, ...change }), JSON.stringify(change)).rejects.toThrow(message);
      for (const line of d.logLines) expect(line).not.toContain(token.config.pin!);
    }
    expect(await d.snapshot()).toBe(before);

    // The same, on a data directory with no database yet: none is made.
    const fresh = new Deployment(await createTestDatabase());
    try {
      await expect(fresh.start({ ...token.env, SIGIL_PKCS11_TOKEN_LABEL: "no-such-token" })).rejects.toThrow(/^SIGIL_PKCS11_TOKEN_LABEL/);
      await expect(fresh.start({ ...token.env, SIGIL_PKCS11_PIN: "0000" })).rejects.toThrow(
        /SIGIL_PKCS11_PIN: token "sigil-test" refused the PIN/,
      );
      await expect(fresh.start({ ...token.env, SIGIL_PKCS11_KEY_LABEL: "no-such-key" })).rejects.toThrow(/^SIGIL_PKCS11_KEY_LABEL/);
      expect(fs.readdirSync(fresh.database.dataDir)).toEqual([]);
      if (fresh.database.databaseUrl) {
        const pg = await import("pg");
        const client = new pg.default.Client({ connectionString: fresh.database.databaseUrl });
        await client.connect();
        const { rows } = await client.query("select count(*)::int as n from information_schema.tables where table_schema = 'public'");
        await client.end();
        expect(rows[0].n).toBe(0);
      }
    } finally {
      await fresh.database.drop();
    }
  });

  it("refuses settings that name half a token, two PINs, or a key file beside the token, before anything starts", () => {
    const refusals: [Record<string, string>, RegExp][] = [
      [
        { ...env, SIGIL_MASTER_KEY_FILE: "/srv/master.key" },
        /SIGIL_PKCS11_MODULE and SIGIL_MASTER_KEY_FILE are both set: the master key is either in a token or in a file/,
      ],
      [{ ...env, SIGIL_MASTER_KEY: "11".repeat(32) }, /SIGIL_PKCS11_MODULE and SIGIL_MASTER_KEY are both set/],
      [{ ...env, SIGIL_PKCS11_KEY_LABEL: "" }, /needs SIGIL_PKCS11_MODULE, .*: SIGIL_PKCS11_KEY_LABEL is not set/],
      [{ ...env, SIGIL_PKCS11_PIN_FILE: "" }, /SIGIL_PKCS11_PIN or SIGIL_PKCS11_PIN_FILE is not set/],
      [{ ...env, SIGIL_PKCS11_PIN: "1234" }, /SIGIL_PKCS11_PIN and SIGIL_PKCS11_PIN_FILE are both set/],
      [{ SIGIL_PKCS11_PIN: "1234" }, /SIGIL_PKCS11_MODULE, SIGIL_PKCS11_TOKEN_LABEL, SIGIL_PKCS11_KEY_LABEL are not set/],
      [
        { ...env, SIGIL_PKCS11_TOKEN_LABEL: "a token label longer than 32 bytes" },
        /SIGIL_PKCS11_TOKEN_LABEL must be text of 1 to 32 bytes/,
      ],
    ];
    for (const [settings, message] of refusals) {
      expect(() => d.config(settings), JSON.stringify(settings)).toThrow(message);
      try {
        d.config(settings);
      } catch (error) {
        expect((error as Error).message).not.toContain("1234");
        expect((error as Error).message).not.toContain(token.config.pin!);
      }
    }
  });

  it("servers starting at once on a new PostgreSQL database all take the one data key stored, and sign each other's wallets", async () => {
    const a = new Deployment(await createTestDatabase());
    const b = new Deployment(a.database);
    try {
      // Several processes share a PostgreSQL database; an SQLite database is served by one process
      // (docs/running.md#sqlite), and two servers on its file in one test process block each other.
      const servers = backend === "postgres" ? [a, b] : [a];
      await Promise.all(servers.map((server) => server.start(token.env)));
      const rows = await a.withDb((db) => db.selectFrom("token_data_keys").selectAll().execute());
      expect(rows).toHaveLength(1);
      for (const server of servers) expect(server.logLines.join("\n")).toContain(`data key id ${rows[0].key_id}`);
      const created = await createOrganization(a.server!.store.db, {
        organizationName: "two servers",
        userName: "root",
        apiPublicKey: (a.org = { organizationId: "", key: newKeyPair() }).key.publicKey,
        apiKeyName: "root key",
      });
      a.org.organizationId = created.organizationId;
      b.org = a.org;
      const wallet = await a.sdk().createWallet({
        walletName: "made on a",
        accounts: [
          { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
        ],
      });
      const signatures = await Promise.all(servers.map((server) => signature(server, wallet.addresses[0]!)));
      expect(new Set(signatures).size).toBe(1);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
      await a.database.drop();
    }
  });

  it("serves with a key whose value can be read out of the token, warning at each start that it can", async () => {
    const readable = new Deployment(await createTestDatabase());
    try {
      await readable.start({ ...token.env, SIGIL_PKCS11_KEY_LABEL: "readable-key" });
      const warnings = readable.logLines.map((line) => JSON.parse(line)).filter((line) => line.level === 40);
      expect(warnings.map((line) => line.msg)).toEqual([
        "master key: the key is extractable (CKA_EXTRACTABLE): it can be exported from the token",
        "master key: the key is not sensitive (CKA_SENSITIVE false): its value can be read from the token",
      ]);
      expect((await fetch(`${readable.server!.url}/ready`)).status).toBe(200);
    } finally {
      await readable.stop();
      await readable.database.drop();
    }
  });

  it("sigil info reports the token's key and whether its data key opens the database", async () => {
    const { code, stdout, stderr } = await d.cli(["info"], env);
    expect(code).toBe(0);
    const row = (await d.withDb((db) => readDataKeyRow(db)))!;
    expect(JSON.parse(stdout).masterKey).toEqual({
      source: `key "sigil-master" of PKCS#11 token "sigil-test" (${token.config.module})`,
      keyId: row.key_id,
      opensDatabase: true,
    });
    expect(stdout + stderr).not.toContain(token.config.pin!);
  });

  it("sigil serve exits non-zero on a wrong PIN, saying which setting, without the PIN", async () => {
    const wrongPin = "7777-wrong";
    const result = await d.cli(["serve", "--port", String(await freePort())], { ...token.env, SIGIL_PKCS11_PIN: wrongPin });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain('SIGIL_PKCS11_PIN: token "sigil-test" refused the PIN');
    expect(result.stderr + result.stdout).not.toContain(wrongPin);
  });
});

describe("sigil rotate-master-key between a key file and the token", () => {
  let d: Deployment;
  let walletId: string;
  let address: string;
  let privateKeyAddress: string;
  beforeAll(async () => {
    d = new Deployment(await createTestDatabase());
  });
  afterAll(async () => {
    await d.stop();
    await d.database.drop();
  });

  /** Every sealed value of every kind, opened with `keyring`: what each rotation must leave openable. */
  async function openEverySecret(keyring: Keyring) {
    return d.withDb(async (db) => {
      const keyIds = new Set<string>();
      let opened = 0;
      for (const { table, column, kind } of SECRET_COLUMNS) {
        const rows = await db
          .selectFrom(table)
          .select(["id", "organization_id", `${column} as sealed`])
          .where(column, "is not", null)
          .execute();
        for (const row of rows) {
          keyring.open(row.sealed, { organizationId: row.organization_id, kind, resourceId: row.id });
          keyIds.add(Keyring.keyIdOf(row.sealed)!);
          opened += 1;
        }
      }
      return { keyIds: [...keyIds], opened };
    });
  }

  it("moves every secret from the key file to the token and back; each rotation is one transaction", async () => {
    // A deployment on the default key file, with a wallet, a private key and the service keys.
    await d.start({});
    const created = await createOrganization(d.server!.store.db, {
      organizationName: "rotated",
      userName: "root",
      apiPublicKey: (d.org = { organizationId: "", key: newKeyPair() }).key.publicKey,
      apiKeyName: "root key",
    });
    d.org.organizationId = created.organizationId;
    const wallet = await d.sdk().createWallet({
      walletName: "moved",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    walletId = wallet.walletId;
    address = wallet.addresses[0]!;
    const { privateKeys } = await d.sdk().createPrivateKeys({
      privateKeys: [
        { privateKeyName: "moved key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] },
      ],
    });
    privateKeyAddress = privateKeys[0]!.addresses![0]!.address!;
    const signatures = { wallet: await signature(d, address), privateKey: await signature(d, privateKeyAddress) };
    const mnemonic = await exportedMnemonic(d, walletId);
    expect(mnemonicToAccount(mnemonic).address).toBe(address);
    const fileKey = loadKeyring(d.config({}).masterKey).keyring;
    await d.stop();

    // A rotation that fails part-way (a private key whose sealed value no longer opens, after the
    // wallets were re-sealed) changes nothing: neither the secrets nor the token's data key.
    const original = await d.withDb(async (db) => {
      const row = await db.selectFrom("private_keys").select(["id", "sealed_private_key"]).executeTakeFirstOrThrow();
      const [format, keyId, payload] = row.sealed_private_key.split(".");
      const broken = `${format}.${keyId}.${payload.slice(0, 20)}${payload[20] === "A" ? "B" : "A"}${payload.slice(21)}`;
      await db.updateTable("private_keys").set({ sealed_private_key: broken }).where("id", "=", row.id).execute();
      return row;
    });
    const beforeFailure = await d.snapshot();
    const failed = await d.cli(["rotate-master-key", "--to", "token"], token.env);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(/sealed secret of private_key .* does not open/);
    expect(await d.snapshot()).toBe(beforeFailure);
    await d.withDb((db) =>
      db.updateTable("private_keys").set({ sealed_private_key: original.sealed_private_key }).where("id", "=", original.id).execute(),
    );

    // A server given the token before the secrets moved refuses, writing nothing, and says how to move them.
    const beforeRefusal = await d.snapshot();
    await expect(d.start(token.env)).rejects.toThrow(/no data key wrapped by a token.*sigil rotate-master-key --to token/);
    expect(await d.snapshot()).toBe(beforeRefusal);

    // File → token: the default key file beside the token settings.
    const toToken = await d.cli(["rotate-master-key", "--to", "token"], token.env);
    expect(toToken.stderr).not.toContain(token.config.pin!);
    expect(toToken.code).toBe(0);
    const moved = JSON.parse(toToken.stdout);
    expect(moved).toMatchObject({ from: fileKey.currentKeyId, toKind: "token" });
    expect(moved.resealed).toBeGreaterThanOrEqual(8);

    await d.start(token.env);
    const row = (await readDataKeyRow(d.server!.store.db))!;
    expect(row.key_id).toBe(moved.to);
    const { keyring: tokenKeys } = await tokenKeyring(d.server!.store, d.config(token.env).masterKey, false);
    const underToken = await openEverySecret(tokenKeys);
    expect(underToken.keyIds).toEqual([moved.to]);
    expect(underToken.opened).toBe(moved.resealed);
    expect(await signature(d, address)).toBe(signatures.wallet);
    expect(await signature(d, privateKeyAddress)).toBe(signatures.privateKey);
    expect(await exportedMnemonic(d, walletId)).toBe(mnemonic);
    expect((await fetch(`${d.server!.url}/ready`)).status).toBe(200);
    // The key file opens nothing any more.
    await expect(openEverySecret(fileKey)).rejects.toThrow(/which this server does not hold/);
    await d.stop();

    // A server left running on the old key file after the rotation sealed one more secret under it: a
    // server on the token refuses to start, writing nothing, and a second rotation (which opens with
    // every key at hand) brings it under the token too.
    await d.withDb(async (db) => {
      const row = await db.selectFrom("wallets").select(["id", "organization_id", "sealed_mnemonic"]).executeTakeFirstOrThrow();
      const plain = tokenKeys.open(row.sealed_mnemonic, mnemonicIdentity(row));
      await db
        .updateTable("wallets")
        .set({ sealed_mnemonic: fileKey.seal(plain, mnemonicIdentity(row)) })
        .where("id", "=", row.id)
        .execute();
    });
    const beforeStray = await d.snapshot();
    await expect(d.start(token.env)).rejects.toThrow(
      new RegExp(`sealed under master key ${fileKey.currentKeyId}.*data key wrapped by key "sigil-master".*rotate-master-key --to token`),
    );
    expect(await d.snapshot()).toBe(beforeStray);
    const again = await d.cli(["rotate-master-key", "--to", "token"], token.env);
    expect(again.code).toBe(0);
    const movedAgain = JSON.parse(again.stdout);
    expect(movedAgain.sealedBefore).toEqual({ [moved.to]: moved.resealed - 1, [fileKey.currentKeyId]: 1 });

    // Token → file: a new master.key; the old one is kept aside, the token's data key row goes.
    const toFile = await d.cli(["rotate-master-key", "--to", "file"], token.env);
    expect(toFile.code).toBe(0);
    const back = JSON.parse(toFile.stdout);
    expect(back).toMatchObject({ from: movedAgain.to, toKind: "file", resealed: moved.resealed });
    expect(fs.existsSync(path.join(d.database.dataDir, `master.key.previous-${fileKey.currentKeyId}`))).toBe(true);
    await d.start({});
    expect(await readDataKeyRow(d.server!.store.db)).toBeUndefined();
    const newFileKey = loadKeyring(d.config({}).masterKey).keyring;
    expect(newFileKey.currentKeyId).toBe(back.to);
    expect(
      (await openEverySecret(new Keyring(Buffer.from(fs.readFileSync(path.join(d.database.dataDir, "master.key"), "utf8").trim(), "hex"))))
        .keyIds,
    ).toEqual([back.to]);
    expect(await signature(d, address)).toBe(signatures.wallet);
    expect(await signature(d, privateKeyAddress)).toBe(signatures.privateKey);
    expect(await exportedMnemonic(d, walletId)).toBe(mnemonic);
    // The token's data key opens nothing any more.
    await expect(openEverySecret(tokenKeys)).rejects.toThrow(/which this server does not hold/);
    await d.stop();
  });

  it("refuses a rotation whose direction is unclear or whose target is not configured, changing nothing", async () => {
    const before = await d.snapshot();
    const both = await d.cli(["rotate-master-key"], { ...token.env, SIGIL_MASTER_KEY_FILE: path.join(d.database.dataDir, "master.key") });
    expect(both.code).toBe(2);
    expect(both.stderr).toContain("say where the secrets move to, with --to token or --to file");
    const noToken = await d.cli(["rotate-master-key", "--to", "token"], {});
    expect(noToken.code).toBe(2);
    expect(noToken.stderr).toContain("--to token needs the token: set SIGIL_PKCS11_MODULE");
    const wrongPin = await d.cli(["rotate-master-key", "--to", "token"], { ...token.env, SIGIL_PKCS11_PIN: "0000" });
    expect(wrongPin.code).toBe(1);
    expect(wrongPin.stderr).toContain('SIGIL_PKCS11_PIN: token "sigil-test" refused the PIN');
    expect(await d.snapshot()).toBe(before);
  });
});
