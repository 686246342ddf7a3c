// Backups that restore (docs/backups.md). On SQLite: `sigil backup` (the built CLI, a child process)
// copies the database while the server signs and creates users for the official client; `sigil restore`
// writes it into a new data directory and `sigil serve` starts on it with the deployment's master key:
// every activity acknowledged before the backup began is there, as it was, the wallets sign as before and
// the stored secrets export to the same plaintext. Any other key is refused at start, naming the setting
// it came from. A truncated, altered or foreign file, a non-empty directory and a newer Sigil's database
// are refused by restore with nothing written; backup never replaces a file. On PostgreSQL: `sigil backup`
// writes nothing and prints the pg_dump / pg_restore commands (no password); the test runs them as
// printed, under the same load, and a server started on the restored database has everything.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile, spawn } from "node:child_process";
import { promisify } from "node:util";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { Turnkey } from "@turnkey/sdk-server";
import { decryptSecretBundle, encryptSecretToBundle, generateP256KeyPair } from "@turnkey/crypto";
import BetterSqlite3 from "better-sqlite3";
import pg from "pg";
import { backend } from "./helpers/backend.js";
import { signerPublicKeyOf, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { freePort } from "./helpers/processes.js";
import { openStore } from "../src/store/database.js";
import { keyIdOf } from "../src/crypto/envelope.js";
import { parseMasterKey } from "../src/crypto/master-key.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
const SUITE = "TRANSPORT_ENCRYPTION_SUITE_ENCLAVE_ENCRYPT_V1" as const;
const PASSWORD = "pw-never-shown";
const SECRET = "the stored secret a restore must bring back";
const ETHEREUM_ACCOUNT = (index: number) => ({
  curve: "CURVE_SECP256K1" as const,
  pathFormat: "PATH_FORMAT_BIP32" as const,
  path: `m/44'/60'/0'/0/${index}`,
  addressFormat: "ADDRESS_FORMAT_ETHEREUM" as const,
});

type Client = ReturnType<Harness["sdk"]>;

const temporary: string[] = [];
function tempDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-backups-"));
  temporary.push(dir);
  return dir;
}
afterAll(() => {
  for (const dir of temporary) fs.rmSync(dir, { recursive: true, force: true });
});

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The environment of a command run by an operator: no setting of the test process leaks in. */
function operatorEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, SIGIL_LOG_LEVEL: "warn" };
  for (const name of Object.keys(env)) if (name.startsWith("SIGIL_") && name !== "SIGIL_LOG_LEVEL") delete env[name];
  return { ...env, ...extra };
}

async function sigil(args: string[], env: NodeJS.ProcessEnv = operatorEnv()): Promise<Outcome> {
  return run(process.execPath, [CLI, ...args], { env, timeout: 60_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number | string | null; stdout: string; stderr: string }) => ({
      code: typeof error.code === "number" ? error.code : null,
      stdout: error.stdout,
      stderr: error.stderr,
    }),
  );
}

interface Served {
  url: string;
  stop(): Promise<void>;
}

/** `sigil serve` in a child process: running (once /health answers), or the exit status and stderr of a start that failed. */
async function serve(dataDir: string, env: NodeJS.ProcessEnv): Promise<Served | Outcome> {
  const port = await freePort();
  const child = spawn(process.execPath, [CLI, "serve", "--port", String(port), "--data-dir", dataDir], {
    env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let stderr = "";
  child.stderr!.on("data", (chunk) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  const url = `http://127.0.0.1:${port}`;
  for (;;) {
    const state = await Promise.race([exited.then((code) => ({ code })), new Promise((r) => setTimeout(r, 100)).then(() => null)]);
    if (state) return { code: state.code, stdout: "", stderr };
    const healthy = await fetch(`${url}/health`).then(
      (r) => r.ok,
      () => false,
    );
    if (healthy)
      return {
        url,
        async stop() {
          child.kill("SIGTERM");
          await exited;
        },
      };
  }
}

const clientAt = (url: string, org: TestOrganization): Client =>
  new Turnkey({
    apiBaseUrl: url,
    apiPublicKey: org.key.publicKey,
    apiPrivateKey: org.key.privateKey,
    defaultOrganizationId: org.organizationId,
  }).apiClient();

/** What a restore must bring back: an organization with a wallet that signs and a stored secret. */
interface Deployment {
  org: TestOrganization;
  walletId: string;
  signWith: string;
  secretId: string;
  signerPublicKey: string;
}

async function populate(h: Harness): Promise<Deployment> {
  const org = await h.organization("backed up");
  const client = h.sdk(org, org.key);
  const wallet = await client.createWallet({ walletName: "treasury", accounts: [ETHEREUM_ACCOUNT(0)] });
  const signerPublicKey = await signerPublicKeyOf(h.url);
  // import_secrets, as the product's SDK does it: a signed target, the secret encrypted to it.
  const { enclaveTargetMessages } = await client.command<unknown, { enclaveTargetMessages: string[] }>(
    "/public/v1/submit/init_import_secrets",
    {
      type: "ACTIVITY_TYPE_INIT_IMPORT_SECRETS",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { encryptionSuite: SUITE, numSecrets: 1 },
    },
    "initImportSecretsResult",
  );
  const { secretPayload, targetPublicKey } = await encryptSecretToBundle({
    plaintext: SECRET,
    ingressTargetBundle: enclaveTargetMessages[0]!,
    organizationId: org.organizationId,
    dangerouslyOverrideSignerPublicKey: signerPublicKey,
  });
  const { secretIds } = await client.importSecrets({
    organizationId: org.organizationId,
    secrets: [{ name: "kept", secretPayload, targetPublicKey, encryptionSuite: SUITE, staticProperties: [] }],
  });
  return { org, walletId: wallet.walletId, signWith: wallet.addresses[0]!, secretId: secretIds[0]!, signerPublicKey };
}

async function exportSecret(client: Client, d: Deployment, signerPublicKey: string): Promise<string> {
  const target = generateP256KeyPair();
  const { secretPayloads } = await client.exportSecrets({
    organizationId: d.org.organizationId,
    secrets: [{ secretId: d.secretId, targetPublicKey: target.publicKeyUncompressed, encryptionSuite: SUITE }],
  });
  return decryptSecretBundle({
    secretPayload: secretPayloads[0]!,
    embeddedPrivateKey: target.privateKey,
    organizationId: d.org.organizationId,
    dangerouslyOverrideSignerPublicKey: signerPublicKey,
  });
}

const signature = (client: Client, signWith: string, payload: string) =>
  client
    .signRawPayload({ signWith, payload, encoding: "PAYLOAD_ENCODING_TEXT_UTF8", hashFunction: "HASH_FUNCTION_KECCAK256" })
    .then(({ r, s, v }) => ({ r, s, v }));

/**
 * Writes through the official client until stopped: three workers signing (shared transactions) and one
 * creating users (exclusive ones). `acknowledged` lists each activity's id once its answer has arrived.
 */
function writeLoad(client: Client, signWith: string) {
  const acknowledged: string[] = [];
  let stopping = false;
  let n = 0;
  const worker = async (kind: "sign" | "users") => {
    while (!stopping) {
      const i = n++;
      const { activity } =
        kind === "sign"
          ? await client.signRawPayload({
              signWith,
              payload: `load ${i}`,
              encoding: "PAYLOAD_ENCODING_TEXT_UTF8",
              hashFunction: "HASH_FUNCTION_KECCAK256",
            })
          : await client.createUsers({
              users: [{ userName: `load user ${i}`, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
            });
      expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      acknowledged.push(activity.id);
    }
  };
  const workers = [worker("sign"), worker("sign"), worker("sign"), worker("users")];
  return {
    acknowledged,
    /** Resolves once `count` more activities have been acknowledged. */
    async more(count: number) {
      const target = acknowledged.length + count;
      while (acknowledged.length < target) await new Promise((r) => setTimeout(r, 5));
    },
    async stop() {
      stopping = true;
      await Promise.all(workers);
    },
  };
}

/** The activity rows with these ids, keyed by id, read without writing. */
async function activityRows(where: { dataDir: string; databaseUrl: string | null }, ids: string[]) {
  const store = await openStore({ ...where, mode: "read-only" });
  try {
    const rows = await store.db.selectFrom("activities").selectAll().where("id", "in", ids).execute();
    return new Map(rows.map((row) => [row.id, row]));
  } finally {
    await store.close();
  }
}

/** Runs `work` on the items four at a time (each is a child process), in order. */
async function inBatches<T, R>(items: T[], work: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += 4) results.push(...(await Promise.all(items.slice(i, i + 4).map(work))));
  return results;
}

/** Every file under `dir` (relative paths), or null where there is no `dir`. */
function listing(dir: string): string[] | null {
  if (!fs.existsSync(dir)) return null;
  return (fs.readdirSync(dir, { recursive: true }) as string[]).sort();
}

/** A backup file of the documented format around `database`, with a correct checksum. */
function craftBackup(file: string, database: Buffer, manifest: Record<string, unknown>): void {
  const header = Buffer.from(`SIGIL BACKUP 1\n${JSON.stringify({ ...manifest, databaseBytes: database.length })}\n`);
  const sha256 = crypto.createHash("sha256").update(header).update(database).digest("hex");
  fs.writeFileSync(file, Buffer.concat([header, database, Buffer.from(`sha256 ${sha256}\n`)]));
}

/** The restored server's answers are the original's: the activities, a signature, a new account, the secret. */
async function expectSameDeployment(originalUrl: string, restoredUrl: string, d: Deployment, acknowledged: string[]) {
  const original = clientAt(originalUrl, d.org);
  const restored = clientAt(restoredUrl, d.org);
  // The first and the last activity acknowledged before the backup began, as the client reads them.
  for (const activityId of [acknowledged[0]!, acknowledged.at(-1)!])
    expect((await restored.getActivity({ activityId })).activity).toEqual((await original.getActivity({ activityId })).activity);
  // The account's key opens and signs (RFC 6979: the same payload, the same signature).
  expect(await signature(restored, d.signWith, "after the restore")).toEqual(await signature(original, d.signWith, "after the restore"));
  // The wallet's seed opens: the next account derived on each is the same address.
  const next = async (client: Client) =>
    (await client.createWalletAccounts({ walletId: d.walletId, accounts: [ETHEREUM_ACCOUNT(1)] })).addresses;
  expect(await next(restored)).toEqual(await next(original));
  // The stored secret opens, sealed to the same deployment keys.
  expect(await signerPublicKeyOf(restoredUrl)).toBe(d.signerPublicKey);
  expect(await exportSecret(restored, d, d.signerPublicKey)).toBe(SECRET);
}

if (backend === "sqlite") {
  describe("sigil backup and sigil restore (SQLite)", () => {
    let h: Harness;
    let d: Deployment;
    let backupFile: string;
    /** Activities acknowledged before `sigil backup` started, and by the time it had finished. */
    let before: string[];
    let byTheEnd: string[];
    let printed: { file: string; bytes: number; sha256: string; createdAt: string; masterKeyIds: string[] };

    beforeAll(async () => {
      // The write load runs as fast as the server answers for as long as the backup takes (longer on a
      // busy machine): the rate limits, which would refuse part of it, are not what this tests.
      h = await startHarness({ SIGIL_LOG_LEVEL: "warn", SIGIL_RATE_LIMITS: "false" });
      d = await populate(h);
      const load = writeLoad(h.sdk(d.org, d.org.key), d.signWith);
      await load.more(20);
      before = [...load.acknowledged];
      backupFile = path.join(tempDir(), "sigil.backup");
      const outcome = await sigil(["backup", "--out", backupFile, "--data-dir", h.database.dataDir]);
      byTheEnd = [...load.acknowledged];
      await load.more(5);
      await load.stop();
      expect(outcome, outcome.stderr).toMatchObject({ code: 0, stderr: "" });
      printed = JSON.parse(outcome.stdout);
    }, 120_000);
    afterAll(() => h?.close());

    it("writes one file, readable by its owner only, whose manifest and checksum say what it holds", () => {
      // The server was writing while the backup ran.
      expect(byTheEnd.length).toBeGreaterThan(before.length);
      const bytes = fs.readFileSync(backupFile);
      expect(fs.statSync(backupFile).mode & 0o777).toBe(0o600);
      expect(printed).toEqual({
        file: backupFile,
        bytes: bytes.length,
        sha256: crypto.createHash("sha256").update(bytes.subarray(0, -72)).digest("hex"),
        createdAt: expect.any(String),
        masterKeyIds: [keyIdOf(parseMasterKey(fs.readFileSync(h.config.masterKey.file, "utf8"), "master.key"))],
      });
      expect(bytes.subarray(-72).toString()).toBe(`sha256 ${printed.sha256}\n`);
      const [magic, manifest] = bytes
        .subarray(0, 64 * 1024)
        .toString("latin1")
        .split("\n");
      expect(magic).toBe("SIGIL BACKUP 1");
      expect(JSON.parse(manifest!)).toMatchObject({ format: 1, source: path.join(h.database.dataDir, "sigil.db") });
      // Nothing but the backup was left beside it.
      expect(fs.readdirSync(path.dirname(backupFile))).toEqual(["sigil.backup"]);
      // The master key is not in it.
      const key = fs.readFileSync(h.config.masterKey.file, "utf8").trim();
      expect(bytes.includes(Buffer.from(key))).toBe(false);
      expect(bytes.includes(Buffer.from(key, "hex"))).toBe(false);
    });

    it("restores into a new data directory; with the original master key every activity acknowledged before the backup is there, wallets sign and secrets open", async () => {
      const dataDir = path.join(tempDir(), "restored");
      const restored = await sigil(["restore", "--from", backupFile, "--data-dir", dataDir]);
      expect(restored.code, restored.stderr).toBe(0);
      expect(JSON.parse(restored.stdout)).toEqual({
        database: path.join(dataDir, "sigil.db"),
        createdAt: printed.createdAt,
        masterKeyIds: printed.masterKeyIds,
      });
      expect(restored.stderr).toContain("SIGIL_MASTER_KEY_FILE");
      expect(listing(dataDir)).toEqual(["sigil.db"]);
      expect(fs.statSync(dataDir).mode & 0o777).toBe(0o700);

      // Every activity acknowledged before the backup began, exactly as the original holds it; nothing
      // the load did not send.
      const sent = await activityRows(h.database, byTheEnd);
      const kept = await activityRows({ dataDir, databaseUrl: null }, byTheEnd);
      for (const id of before) expect(kept.get(id), id).toEqual(sent.get(id));
      const sqlite = new BetterSqlite3(path.join(dataDir, "sigil.db"), { readonly: true });
      const ids = sqlite
        .prepare("select id from activities where organization_id = ?")
        .all(d.org.organizationId)
        .map((row) => (row as { id: string }).id);
      sqlite.close();
      const original = await activityRows(h.database, ids);
      expect(ids.filter((id) => !original.has(id))).toEqual([]);

      // The deployment's key, copied into the directory as docs/backups.md says.
      fs.copyFileSync(h.config.masterKey.file, path.join(dataDir, "master.key"));
      const server = await serve(dataDir, operatorEnv());
      if (!("url" in server)) throw new Error(`the restored server did not start: ${server.stderr}`);
      try {
        await expectSameDeployment(h.url, server.url, d, before);
      } finally {
        await server.stop();
      }
    }, 120_000); // a server process started through the CLI: slow on a loaded 2-core machine

    it("a restored server given another master key refuses to start, naming the setting the key came from, and keeps no key", async () => {
      const dataDir = path.join(tempDir(), "restored");
      expect((await sigil(["restore", "--from", backupFile, "--data-dir", dataDir])).code).toBe(0);
      const otherKey = path.join(tempDir(), "other.key");
      fs.writeFileSync(otherKey, crypto.randomBytes(32).toString("hex") + "\n", { mode: 0o600 });
      const sealedUnder = `sealed under master key ${printed.masterKeyIds[0]}`;
      const cases: { env: NodeJS.ProcessEnv; names: string[] }[] = [
        // No key in the restored directory: the default file would be a new key, which opens nothing.
        { env: operatorEnv(), names: [path.join(dataDir, "master.key"), "--data-dir", "SIGIL_MASTER_KEY_FILE", "SIGIL_MASTER_KEY"] },
        { env: operatorEnv({ SIGIL_MASTER_KEY_FILE: otherKey }), names: ["SIGIL_MASTER_KEY_FILE", otherKey] },
        { env: operatorEnv({ SIGIL_MASTER_KEY: fs.readFileSync(otherKey, "utf8").trim() }), names: ["comes from SIGIL_MASTER_KEY"] },
      ];
      for (const { env, names } of cases) {
        const refused = await serve(dataDir, env);
        expect("url" in refused, "the server started").toBe(false);
        const { code, stderr } = refused as Outcome;
        expect(code).toBe(1);
        expect(stderr).toContain(sealedUnder);
        for (const name of names) expect(stderr, name).toContain(name);
        expect(stderr).not.toContain(fs.readFileSync(otherKey, "utf8").trim());
        expect(listing(dataDir)).toEqual(["sigil.db"]);
      }
    }, 120_000); // three server starts through the CLI

    it("a truncated backup is refused by restore, naming it, with nothing written", async () => {
      const whole = fs.readFileSync(backupFile);
      const headerEnd = whole.indexOf(0x0a, 15) + 1;
      const cuts = { empty: 0, "inside the first line": 9, "inside the manifest": 40, "after the manifest": headerEnd };
      Object.assign(cuts, {
        "inside the database": headerEnd + 4096,
        "without its checksum": whole.length - 72,
        "inside the checksum": whole.length - 1,
      });
      const absent = path.join(tempDir(), "never");
      const empty = tempDir();
      const runs = Object.entries(cuts).flatMap(([where, length]) => {
        const file = path.join(tempDir(), "cut.backup");
        fs.writeFileSync(file, whole.subarray(0, length));
        return [absent, empty].map((dataDir) => ({ where, file, dataDir }));
      });
      const outcomes = await inBatches(runs, ({ file, dataDir }) => sigil(["restore", "--from", file, "--data-dir", dataDir]));
      outcomes.forEach((outcome, i) => {
        const { where, file } = runs[i]!;
        expect(outcome.code, where).toBe(1);
        expect(outcome.stdout).toBe("");
        expect(outcome.stderr, where).toContain(`sigil restore: ${file} is truncated`);
        expect(outcome.stderr).toContain("nothing was restored");
      });
      expect(listing(absent)).toBeNull();
      expect(listing(empty)).toEqual([]);
    }, 90_000); // fourteen CLI processes

    it("an altered backup — a byte of its database, its manifest or its checksum, or a byte added — is refused with nothing written", async () => {
      const whole = fs.readFileSync(backupFile);
      const headerEnd = whole.indexOf(0x0a, 15) + 1;
      const flip = (at: number) => {
        const copy = Buffer.from(whole);
        copy[at] = copy[at]! ^ 0x01;
        return copy;
      };
      // A digit of createdAt: the manifest still parses, but is not what was written.
      const dateDigit = whole.indexOf(Buffer.from(printed.createdAt.slice(0, 4))) + 3;
      const trailerDigit = whole.length - 2;
      const alterations: [string, Buffer, RegExp][] = [
        [
          "a byte of the database",
          flip(headerEnd + 100),
          /does not match its SHA-256 checksum .*: it was altered or damaged after `sigil backup` wrote it/,
        ],
        ["the last byte of the database", flip(whole.length - 73), /does not match its SHA-256 checksum/],
        ["the manifest's date", flip(dateDigit), /does not match its SHA-256 checksum/],
        [
          "the checksum",
          flip(trailerDigit),
          /does not match its SHA-256 checksum|is damaged \(its last line is not its SHA-256 checksum\)/,
        ],
        ["the manifest's JSON", flip(16), /is damaged \(its manifest \(the second line\) is not one `sigil backup` writes\)/],
        ["a byte added", Buffer.concat([whole, Buffer.from("\n")]), /is damaged \(it holds 1 bytes more than its manifest makes it/],
      ];
      const dataDir = path.join(tempDir(), "never");
      const files = alterations.map(([, bytes]) => {
        const file = path.join(tempDir(), "altered.backup");
        fs.writeFileSync(file, bytes);
        return file;
      });
      const outcomes = await inBatches(files, (file) => sigil(["restore", "--from", file, "--data-dir", dataDir]));
      outcomes.forEach((outcome, i) => {
        const [what, , message] = alterations[i]!;
        expect(outcome.code, what).toBe(1);
        expect(outcome.stderr, what).toMatch(message);
        expect(outcome.stderr).toContain("nothing was restored");
      });
      expect(listing(dataDir)).toBeNull();
    }, 90_000);

    it("refuses what is not a backup of this Sigil: a database file, another file, a checksummed non-database, a newer Sigil's database", async () => {
      const whole = fs.readFileSync(backupFile);
      const headerEnd = whole.indexOf(0x0a, 15) + 1;
      const manifest = JSON.parse(whole.subarray(15, headerEnd - 1).toString());
      const dir = tempDir();
      const files = {
        database: path.join(h.database.dataDir, "sigil.db"),
        text: path.join(dir, "notes.txt"),
        later: path.join(dir, "later-format.backup"),
        garbage: path.join(dir, "garbage.backup"),
        corrupt: path.join(dir, "corrupt.backup"),
        newer: path.join(dir, "newer.backup"),
        missing: path.join(dir, "missing.backup"),
      };
      fs.writeFileSync(files.text, "hello\n");
      fs.writeFileSync(files.later, "SIGIL BACKUP 2\n{}\n");
      craftBackup(files.garbage, crypto.randomBytes(8192), manifest);
      // The backup's own database with a page of its tables overwritten, checksummed anew.
      const database = Buffer.from(whole.subarray(headerEnd, whole.length - 72));
      const pageSize = database.readUInt16BE(16);
      crypto.randomFillSync(database, pageSize, pageSize);
      craftBackup(files.corrupt, database, manifest);
      // The backup's own database, as a later Sigil would have migrated it.
      const image = path.join(dir, "image.db");
      fs.writeFileSync(image, whole.subarray(headerEnd, whole.length - 72));
      const sqlite = new BetterSqlite3(image);
      sqlite.prepare("insert into sigil_migrations (name, timestamp) values ('9999_from_the_future', 'now')").run();
      sqlite.close();
      craftBackup(files.newer, fs.readFileSync(image), manifest);
      const expected: Record<keyof typeof files, string> = {
        database: "is an SQLite database file, not a backup written by `sigil backup`",
        text: 'is not a Sigil backup: it does not begin with "SIGIL BACKUP 1"',
        later: "is a backup of format 2; this version of Sigil reads format 1 only",
        garbage: "matches its checksum, but the database in it is not an SQLite database: it was not written by `sigil backup`",
        corrupt: "matches its checksum, but the database in it fails SQLite's integrity check",
        newer: "was taken of a database a newer Sigil migrated (migrations 9999_from_the_future)",
        missing: "there is no file",
      };
      // A data directory per case: restores running at once into one directory would see each other's
      // temporary files and rightly refuse it as not empty.
      const parent = tempDir();
      const cases = Object.entries(files);
      const outcomes = await inBatches(cases, ([name, file]) => sigil(["restore", "--from", file, "--data-dir", path.join(parent, name)]));
      outcomes.forEach((outcome, i) => {
        const name = cases[i]![0] as keyof typeof files;
        expect(outcome.code, name).toBe(1);
        expect(outcome.stderr, name).toContain(expected[name]);
        expect(outcome.stderr, name).toContain("nothing was restored");
      });
      // Also those that got as far as writing the database: it is gone, with the directory restore made.
      expect(listing(parent)).toEqual([]);
    }, 90_000);

    it("restores only into an empty or absent directory: a non-empty one, a file, is refused and left as it was", async () => {
      const withNotes = tempDir();
      fs.writeFileSync(path.join(withNotes, "notes.txt"), "mine\n");
      const withDatabase = tempDir();
      fs.copyFileSync(path.join(h.database.dataDir, "sigil.db"), path.join(withDatabase, "sigil.db"));
      const withKeyOnly = tempDir();
      fs.copyFileSync(h.config.masterKey.file, path.join(withKeyOnly, "master.key"));
      const aFile = path.join(tempDir(), "a-file");
      fs.writeFileSync(aFile, "not a directory\n");
      const targets: [string, RegExp][] = [
        [withNotes, /is not empty \(notes\.txt\): restore writes only into an empty \(or absent\) data directory/],
        [withDatabase, /is not empty \(sigil\.db\)/],
        [withKeyOnly, /is not empty \(master\.key\)/],
        [aFile, /is not a directory/],
      ];
      for (const [target, message] of targets) {
        const before = fs.statSync(target).isDirectory()
          ? Object.fromEntries(fs.readdirSync(target).map((f) => [f, fs.readFileSync(path.join(target, f)).toString("hex")]))
          : fs.readFileSync(target, "utf8");
        const outcome = await sigil(["restore", "--from", backupFile, "--data-dir", target]);
        expect(outcome.code, target).toBe(1);
        expect(outcome.stderr, target).toMatch(message);
        const after = fs.statSync(target).isDirectory()
          ? Object.fromEntries(fs.readdirSync(target).map((f) => [f, fs.readFileSync(path.join(target, f)).toString("hex")]))
          : fs.readFileSync(target, "utf8");
        expect(after, target).toEqual(before);
      }
      // With SIGIL_DATABASE_URL set, restore (SQLite backups only) refuses before opening anything.
      const dataDir = path.join(tempDir(), "never");
      const url = `postgres://sigil:${PASSWORD}@127.0.0.1:1/sigil`;
      const outcome = await sigil(["restore", "--from", backupFile, "--data-dir", dataDir], operatorEnv({ SIGIL_DATABASE_URL: url }));
      expect(outcome.code).toBe(1);
      expect(outcome.stderr).toContain("SIGIL_DATABASE_URL is set, and restore writes SQLite backups into a data directory");
      expect(outcome.stderr).not.toContain(PASSWORD);
      expect(listing(dataDir)).toBeNull();
    }, 90_000);

    it("backup never replaces a file or writes through a link, and writes nothing where there is no database", async () => {
      const kept = fs.readFileSync(backupFile);
      const again = await sigil(["backup", "--out", backupFile, "--data-dir", h.database.dataDir]);
      expect(again.code).toBe(1);
      expect(again.stderr).toContain(`${backupFile} already exists: backup never overwrites a file`);
      expect(fs.readFileSync(backupFile).equals(kept)).toBe(true);

      const dir = tempDir();
      const link = path.join(dir, "link.backup");
      fs.symlinkSync(path.join(dir, "target.backup"), link);
      const throughLink = await sigil(["backup", "--out", link, "--data-dir", h.database.dataDir]);
      expect(throughLink.code).toBe(1);
      expect(throughLink.stderr).toContain("already exists");

      const nowhere = await sigil(["backup", "--out", path.join(dir, "missing", "x.backup"), "--data-dir", h.database.dataDir]);
      expect(nowhere.code).toBe(1);
      expect(nowhere.stderr).toContain(`the directory ${path.join(dir, "missing")} does not exist`);

      const noDatabase = path.join(dir, "no-data");
      const empty = await sigil(["backup", "--out", path.join(dir, "empty.backup"), "--data-dir", noDatabase]);
      expect(empty.code).toBe(1);
      expect(empty.stderr).toContain(
        `no Sigil database at ${path.join(noDatabase, "sigil.db")} (the file does not exist): nothing was written`,
      );
      expect(fs.existsSync(noDatabase)).toBe(false);
      expect(fs.readdirSync(dir)).toEqual(["link.backup"]);
    }, 90_000);
  });
}

if (backend === "postgres") {
  describe("PostgreSQL: sigil backup prints the pg_dump drill; run as printed, it restores a deployment", () => {
    let h: Harness;
    let d: Deployment;
    let restoredDatabase: string | undefined;
    const admin = process.env.TEST_DATABASE_URL!;

    beforeAll(async () => {
      // The write load runs as fast as the server answers for as long as the backup takes (longer on a
      // busy machine): the rate limits, which would refuse part of it, are not what this tests.
      h = await startHarness({ SIGIL_LOG_LEVEL: "warn", SIGIL_RATE_LIMITS: "false" });
      d = await populate(h);
    });
    afterAll(async () => {
      if (restoredDatabase) {
        const client = new pg.Client({ connectionString: admin });
        await client.connect();
        await client.query(`DROP DATABASE IF EXISTS "${restoredDatabase}" WITH (FORCE)`);
        await client.end();
      }
      await h?.close();
    });

    it("pg_dump and pg_restore of the server's major version or newer are installed (.ci/run installs postgresql-client)", async () => {
      const client = new pg.Client({ connectionString: admin });
      await client.connect();
      const serverMajor = Math.floor(Number((await client.query("show server_version_num")).rows[0].server_version_num) / 10_000);
      await client.end();
      for (const tool of ["pg_dump", "pg_restore"]) {
        const { stdout } = await run(tool, ["--version"]);
        expect(Number(/\(PostgreSQL\) (\d+)/.exec(stdout)?.[1]), `${tool}: ${stdout}`).toBeGreaterThanOrEqual(serverMajor);
      }
    });

    it("writes nothing, exits 3, and prints the commands without the password; run as printed under a write load, the restored database serves everything acknowledged before", async () => {
      const dir = tempDir();
      const dump = path.join(dir, "sigil.dump");
      const url = new URL(h.database.databaseUrl!);
      url.password = PASSWORD;
      const outcome = await sigil(["backup", "--out", dump], operatorEnv({ SIGIL_DATABASE_URL: url.toString() }));
      expect(outcome.code).toBe(3);
      expect(outcome.stderr).toContain("nothing was written (exit status 3)");
      expect(outcome.stdout + outcome.stderr).not.toContain(PASSWORD);
      expect(outcome.stdout).toContain("point-in-time recovery");
      expect(outcome.stdout).toContain("docs/backups.md");
      expect(fs.readdirSync(dir)).toEqual([]);
      const database = url.pathname.slice(1);
      restoredDatabase = `${database}_restored`;
      const command = (name: string) => {
        const lines = outcome.stdout.split("\n").filter((line) => line.startsWith(`  ${name} `));
        expect(lines, name).toHaveLength(1);
        return lines[0]!.trim();
      };
      const flags = `-h ${url.hostname} -p ${url.port} -U ${decodeURIComponent(url.username)}`;
      expect(command("pg_dump")).toBe(`pg_dump --format=custom --file ${dump} ${flags} ${database}`);
      expect(command("createdb")).toBe(`createdb ${flags} ${restoredDatabase}`);
      expect(command("pg_restore")).toBe(
        `pg_restore --exit-on-error --single-transaction --no-owner ${flags} --dbname ${restoredDatabase} ${dump}`,
      );

      // The drill, as docs/backups.md has it: dump while the server writes, restore into a new database.
      const shell = (line: string) => run("sh", ["-c", line], { env: { ...process.env, PGPASSWORD: PASSWORD }, timeout: 120_000 });
      const load = writeLoad(h.sdk(d.org, d.org.key), d.signWith);
      await load.more(20);
      const before = [...load.acknowledged];
      await shell(command("pg_dump"));
      const byTheEnd = [...load.acknowledged];
      await load.more(5);
      await load.stop();
      expect(byTheEnd.length).toBeGreaterThan(before.length);
      await shell(command("createdb"));
      await shell(command("pg_restore"));

      const restoredUrl = new URL(h.database.databaseUrl!);
      restoredUrl.pathname = `/${restoredDatabase}`;
      const sent = await activityRows(h.database, byTheEnd);
      const kept = await activityRows({ dataDir: h.database.dataDir, databaseUrl: restoredUrl.toString() }, byTheEnd);
      for (const id of before) expect(kept.get(id), id).toEqual(sent.get(id));

      // The same master key, from a file of its own: it is not in the dump.
      const keyFile = path.join(tempDir(), "deployment.key");
      fs.copyFileSync(h.config.masterKey.file, keyFile);
      const server = await serve(tempDir(), operatorEnv({ SIGIL_DATABASE_URL: restoredUrl.toString(), SIGIL_MASTER_KEY_FILE: keyFile }));
      if (!("url" in server)) throw new Error(`the restored server did not start: ${server.stderr}`);
      try {
        await expectSameDeployment(h.url, server.url, d, before);
      } finally {
        await server.stop();
      }

      // Another key is refused at start, naming the setting.
      const otherKey = path.join(tempDir(), "other.key");
      fs.writeFileSync(otherKey, crypto.randomBytes(32).toString("hex") + "\n", { mode: 0o600 });
      const refused = await serve(tempDir(), operatorEnv({ SIGIL_DATABASE_URL: restoredUrl.toString(), SIGIL_MASTER_KEY_FILE: otherKey }));
      expect("url" in refused).toBe(false);
      expect((refused as Outcome).stderr).toContain("sealed under master key");
      expect((refused as Outcome).stderr).toContain(`SIGIL_MASTER_KEY_FILE names, ${otherKey}`);
    }, 180_000); // pg_dump, pg_restore and two server processes under a write load
  });
}
