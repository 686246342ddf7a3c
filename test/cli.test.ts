// The commands users run, as child processes of the built CLI (npm test builds it first): `sigil
// keygen`, `sigil serve`, `sigil bootstrap` while a server runs on the same data; --help and --version;
// the refusal of every kind of bad command line, with the command or option a slip most likely meant;
// the commands that must create no database; a start that fails leaving no directory; which master key
// `info` reports; keygen's key file; the README's quickstart; and, on PostgreSQL, a database that does
// not exist.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { promisify } from "node:util";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import BetterSqlite3 from "better-sqlite3";
import pg from "pg";
import { Turnkey } from "@turnkey/sdk-server";
import { freePort } from "./helpers/processes.js";
import { backend, createTestDatabase, type TestDatabase } from "./helpers/backend.js";
import { newKeyPair } from "./helpers/harness.js";
import { openStore } from "../src/store/database.js";
import { migrations } from "../src/store/migrations.js";
import { commands as declarations } from "../src/cli/main.js";
import { keyIdOf } from "../src/crypto/envelope.js";
import { parseMasterKey } from "../src/crypto/master-key.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
const COMMANDS = [
  "serve",
  "keygen",
  "bootstrap",
  "rotate-master-key",
  "info",
  "outbox",
  "remove-ip-allowlist",
  "webhooks",
  "backup",
  "restore",
  "policy test",
  "policy replay",
];
const READ_ONLY = ["info", "outbox", "webhooks"];
const PASSWORD = "pw-never-shown";

let database: TestDatabase;
let server: ChildProcess;
let baseUrl: string;
let env: NodeJS.ProcessEnv;
const temporary: string[] = [];

/** A new empty directory, removed after the file's tests. */
function emptyDir(): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-cli-"));
  temporary.push(dir);
  return dir;
}

interface Outcome {
  /** The exit status; null when the process was killed (it ran past the time limit). */
  code: number | null;
  stdout: string;
  stderr: string;
}

async function sigil(args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}): Promise<Outcome> {
  return run(process.execPath, [CLI, ...args], { env: options.env ?? env, cwd: options.cwd, timeout: 30_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number | string | null; stdout: string; stderr: string }) => ({
      code: typeof error.code === "number" ? error.code : null,
      stdout: error.stdout,
      stderr: error.stderr,
    }),
  );
}

/**
 * Every row of every table of the test database, read without writing (as harness.snapshot does). The
 * server runs in its own process, whose transparency log sequencer appends final activities after their
 * commit, whenever it runs (services/log-sequencer.ts): as in harness.snapshot, the log's tables are left
 * out, so two snapshots differ only by what the commands between them did.
 */
async function snapshot(): Promise<string> {
  const store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir, mode: "read-only" });
  try {
    const tables = (await store.db.introspection.getTables())
      .map((t) => t.name)
      .filter((name) => !name.startsWith("transparency_log_"))
      .sort();
    const out: Record<string, string[]> = {};
    for (const table of tables)
      out[table] = (
        await store.db
          .selectFrom(table as "users")
          .selectAll()
          .execute()
      )
        .map((r) => JSON.stringify(r))
        .sort();
    return JSON.stringify(out);
  } finally {
    await store.close();
  }
}

/**
 * Where this backend keeps a deployment with no Sigil database yet: on SQLite a data directory that
 * does not exist; on PostgreSQL a new, empty database (its URL carrying a password that must never be
 * printed) and a data directory that does not exist either.
 */
async function noSigilDatabase() {
  const dataDir = path.join(emptyDir(), "data");
  const childEnv: NodeJS.ProcessEnv = { ...env };
  delete childEnv.SIGIL_DATABASE_URL;
  if (backend === "sqlite") {
    const file = path.join(dataDir, "sigil.db");
    return {
      env: childEnv,
      dataDir,
      /** What messages and `"database"` name. */
      location: file,
      async tables(): Promise<string[]> {
        if (!fs.existsSync(file)) return [];
        const sqlite = new BetterSqlite3(file, { readonly: true });
        try {
          return sqlite
            .prepare("select name from sqlite_master where type = 'table' order by name")
            .all()
            .map((r) => (r as { name: string }).name);
        } finally {
          sqlite.close();
        }
      },
      /** Runs one statement on the database (a new SQLite file, in an existing directory, if there is none). */
      async sql(statement: string): Promise<unknown[]> {
        const sqlite = new BetterSqlite3(file);
        try {
          const prepared = sqlite.prepare(statement);
          if (prepared.reader) return prepared.all();
          prepared.run();
          return [];
        } finally {
          sqlite.close();
        }
      },
      drop: async () => undefined,
    };
  }
  const fresh = await createTestDatabase();
  const url = new URL(fresh.databaseUrl!);
  url.password = PASSWORD;
  childEnv.SIGIL_DATABASE_URL = url.toString();
  const query = async (statement: string): Promise<unknown[]> => {
    const client = new pg.Client({ connectionString: fresh.databaseUrl! });
    await client.connect();
    try {
      return (await client.query(statement)).rows;
    } finally {
      await client.end();
    }
  };
  return {
    env: childEnv,
    dataDir,
    location: `${url.protocol}//${url.username}:***@${url.host}${url.pathname}`,
    async tables(): Promise<string[]> {
      const rows = await query(
        "select table_name from information_schema.tables where table_schema = current_schema() order by table_name",
      );
      return rows.map((r) => (r as { table_name: string }).table_name);
    },
    sql: query,
    drop: () => fresh.drop(),
  };
}

/** Runs at most four processes at a time (the machine's cores are shared). */
async function inBatches<T, R>(items: T[], work: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += 4) results.push(...(await Promise.all(items.slice(i, i + 4).map((item, j) => work(item, i + j)))));
  return results;
}

beforeAll(async () => {
  database = await createTestDatabase();
  env = { ...process.env, SIGIL_LOG_LEVEL: "warn" };
  delete env.SIGIL_DATABASE_URL;
  delete env.SIGIL_DATA_DIR;
  delete env.SIGIL_MASTER_KEY;
  if (database.databaseUrl) env.SIGIL_DATABASE_URL = database.databaseUrl;
  const port = await freePort();
  baseUrl = `http://127.0.0.1:${port}`;
  server = spawn(process.execPath, [CLI, "serve", "--port", String(port), "--data-dir", database.dataDir], { env, stdio: "ignore" });
  for (let i = 0; i < 100; i++) {
    const ok = await fetch(`${baseUrl}/health`).then(
      (r) => r.status === 200,
      () => false,
    );
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("sigil serve did not answer /health");
});

afterAll(async () => {
  server?.kill("SIGTERM");
  await new Promise((r) => server?.once("exit", r));
  await database.drop();
  for (const dir of temporary) fs.rmSync(dir, { recursive: true, force: true });
});

describe("sigil CLI", () => {
  it("keygen prints one JSON line with a usable P-256 key pair", async () => {
    const { stdout } = await run(process.execPath, [CLI, "keygen"]);
    expect(stdout.trim().split("\n")).toHaveLength(1);
    const pair = JSON.parse(stdout);
    expect(pair.publicKey).toMatch(/^0[23][0-9a-f]{64}$/);
    expect(pair.privateKey).toMatch(/^[0-9a-f]{64}$/);
    const ecdh = crypto.createECDH("prime256v1");
    ecdh.setPrivateKey(Buffer.from(pair.privateKey, "hex"));
    expect(ecdh.getPublicKey("hex", "compressed")).toBe(pair.publicKey);
  });

  it("serve answers /health", async () => {
    const res = await fetch(`${baseUrl}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  it("bootstrap creates an organization while the server runs, says in which database, and the official client can use it", async () => {
    const { stdout: keyJson } = await run(process.execPath, [CLI, "keygen"]);
    const key = JSON.parse(keyJson);
    const { stdout, stderr } = await run(
      process.execPath,
      [
        CLI,
        "bootstrap",
        "--data-dir",
        database.dataDir,
        "--org-name",
        "Acme",
        "--user-name",
        "alice",
        "--user-email",
        "alice@example.com",
      ].concat(["--api-public-key", key.publicKey, "--api-key-name", "ops"]),
      { env },
    );
    expect(stdout.trim().split("\n")).toHaveLength(1);
    const created = JSON.parse(stdout);
    expect(Object.keys(created).sort()).toEqual(["apiKeyId", "database", "organizationId", "userId"]);
    const url = database.databaseUrl ? new URL(database.databaseUrl) : null;
    expect(created.database).toBe(
      url ? `${url.protocol}//${url.username}@${url.host}${url.pathname}` : path.join(database.dataDir, "sigil.db"),
    );
    expect(stderr).not.toMatch(/created a new/);

    const credentials = { apiPublicKey: key.publicKey, apiPrivateKey: key.privateKey };
    const turnkey = new Turnkey({ apiBaseUrl: baseUrl, ...credentials, defaultOrganizationId: created.organizationId });
    const client = turnkey.apiClient();
    const { user } = await client.getUser({ userId: created.userId });
    expect(user).toMatchObject({
      userName: "alice",
      userEmail: "alice@example.com",
      apiKeys: [expect.objectContaining({ apiKeyId: created.apiKeyId, apiKeyName: "ops" })],
    });
    const { userIds } = await client.createUsers({
      users: [{ userName: "bob", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
    });
    expect(userIds).toHaveLength(1);
  });

  it("bootstrap refuses a value the organization cannot take as a usage error naming its option, before any database is opened", async () => {
    const before = await snapshot();
    const key = newKeyPair();
    const cases: Array<[string, string[], RegExp]> = [
      [
        "not a P-256 point",
        ["--api-public-key", "02" + "ff".repeat(32)],
        /^sigil bootstrap: --api-public-key: public key is not a valid point on P256/,
      ],
      ["not hex", ["--api-public-key", "zz"], /^sigil bootstrap: --api-public-key: public key must be hex/],
      ["uncompressed", ["--api-public-key", "04" + "11".repeat(64)], /^sigil bootstrap: --api-public-key: public key must be 33 bytes/],
      ["a blank organization name", ["--org-name", "  "], /^sigil bootstrap: --org-name: must not be empty/],
      ["a blank user name", ["--user-name", " "], /^sigil bootstrap: --user-name: must not be empty/],
    ];
    const good = { "--org-name": "X", "--user-name": "x", "--api-public-key": key.publicKey };
    const line = (change: string[]) => Object.entries({ ...good, [change[0]!]: change[1]! }).flat();
    // On the servers' database, and with --create where there is none yet: nothing is opened or made.
    const fresh = await createTestDatabase();
    try {
      const freshEnv = { ...env, ...(fresh.databaseUrl ? { SIGIL_DATABASE_URL: fresh.databaseUrl } : {}) };
      for (const [label, change, message] of cases) {
        for (const outcome of [
          await sigil(["bootstrap", "--data-dir", database.dataDir, ...line(change)]),
          await sigil(["bootstrap", "--create", "--data-dir", fresh.dataDir, ...line(change)], { env: freshEnv }),
        ]) {
          expect(outcome.code, label).toBe(2);
          expect(outcome.stderr, label).toMatch(message);
          expect(outcome.stderr, label).toContain("usage: sigil bootstrap");
          expect(outcome.stdout, label).toBe("");
        }
      }
      expect(fs.readdirSync(fresh.dataDir)).toEqual([]);
      if (fresh.databaseUrl) {
        const client = new pg.Client({ connectionString: fresh.databaseUrl });
        await client.connect();
        try {
          expect((await client.query("select 1 from pg_tables where schemaname = 'public'")).rowCount).toBe(0);
        } finally {
          await client.end();
        }
      }
    } finally {
      await fresh.drop();
    }
    expect(await snapshot()).toBe(before);
  });

  it("info reads the running deployment's keys", async () => {
    const { code, stdout } = await sigil(["info", "--data-dir", database.dataDir]);
    expect(code).toBe(0);
    const line = JSON.parse(stdout);
    expect(line.signerPublicKey).toMatch(/^[0-9a-f]{66,130}$/);
    const published = (await (await fetch(`${baseUrl}/.well-known/sigil.json`)).json()) as {
      signerPublicKey: string;
      tlsFetcherEncryptPublicKey: string;
    };
    expect(line.signerPublicKey).toBe(published.signerPublicKey);
    // The server's key, made in its data directory on first start, which opens what the database holds.
    const file = path.join(database.dataDir, "master.key");
    const keyId = keyIdOf(parseMasterKey(fs.readFileSync(file, "utf8"), file));
    expect(line.masterKey).toEqual({ source: file, keyId, opensDatabase: true });
    expect(line.databaseKeyIds).toEqual([keyId]);
    // What clients encrypt OAuth 2.0 client secrets to (encryptOauth2ClientSecret).
    expect(line.tlsFetcherEncryptPublicKey).toMatch(/^04[0-9a-f]{128}$/);
    expect(line.tlsFetcherEncryptPublicKey).toBe(published.tlsFetcherEncryptPublicKey);
    // The signature libraries: libsecp256k1's prebuilt binary loads on this platform (linux-x64).
    expect(line.signatures).toEqual({
      secp256k1: "libsecp256k1 (native)",
      ed25519: "node:crypto (OpenSSL)",
      p256: "@noble/curves",
      bip340: "@noble/curves",
    });
  });

  it("the README's quickstart program runs as the README says, with the key and organization its commands make", async () => {
    const readme = fs.readFileSync("README.md", "utf8");
    const section = readme.slice(readme.indexOf("## Quickstart with the official client"), readme.indexOf("## Configuration"));
    // What the README tells the reader to do, which the steps below follow.
    for (const step of [
      "npx sigil keygen --out ../sigil-quickstart/root-key.json",
      "npm install @turnkey/sdk-server",
      "as `quickstart.mjs`",
      "ORGANIZATION_ID=<organizationId from bootstrap> node quickstart.mjs",
    ])
      expect(section).toContain(step);
    const program = section.match(/```js\n([\s\S]*?)```/)![1]!;
    expect(program.split("http://127.0.0.1:8080")).toHaveLength(2);
    // Inside the checkout, so that `@turnkey/sdk-server` resolves to the installed package.
    const dir = fs.mkdtempSync(path.resolve(".vitest-quickstart-"));
    temporary.push(dir);
    expect((await sigil(["keygen", "--out", path.join(dir, "root-key.json")])).code).toBe(0);
    const { publicKey } = JSON.parse(fs.readFileSync(path.join(dir, "root-key.json"), "utf8"));
    const boot = await sigil([
      "bootstrap",
      "--data-dir",
      database.dataDir,
      "--org-name",
      "Acme",
      "--user-name",
      "ops",
      "--api-public-key",
      publicKey,
    ]);
    expect(boot.code).toBe(0);
    fs.writeFileSync(path.join(dir, "quickstart.mjs"), program.replace("http://127.0.0.1:8080", baseUrl));
    const { organizationId } = JSON.parse(boot.stdout);
    const { stdout, stderr } = await run(process.execPath, ["quickstart.mjs"], {
      cwd: dir,
      env: { ...env, ORGANIZATION_ID: organizationId },
    });
    // Node 20.10+ reads `with { type: "json" }` without a warning.
    expect(stderr).toBe("");
    expect(stdout).toMatch(
      /^\[ '[0-9a-f-]{36}' \] \{\n {2}userId: '[0-9a-f-]{36}',\n {2}userName: 'alice',\n {2}userEmail: 'alice@example\.com',/,
    );
  });

  it("info names the secp256k1 library SIGIL_SECP256K1 forces", async () => {
    for (const [choice, name] of [
      ["wasm", "libsecp256k1 (wasm)"],
      ["noble", "@noble/curves"],
    ]) {
      const { code, stdout } = await sigil(["info", "--data-dir", database.dataDir], { env: { ...env, SIGIL_SECP256K1: choice } });
      expect(code).toBe(0);
      expect(JSON.parse(stdout).signatures.secp256k1).toBe(name);
    }
  });
});

describe("--help and --version", () => {
  it("every command answers --help, -h and `sigil help <command>` with its usage and options, exit 0, and does nothing else", async () => {
    const cwd = emptyDir(); // the default data directory, ./data, would appear here
    const runs = COMMANDS.flatMap((command) => [
      [command, "--help"],
      [command, "-h"],
      ["help", command],
    ]);
    // A command line that would otherwise start a server, or miss its required options.
    runs.push(["serve", "--port", String(await freePort()), "--help"], ["bootstrap", "--create", "--help"]);
    const outcomes = await inBatches(runs, (args) => sigil(args, { cwd }));
    outcomes.forEach((outcome, i) => {
      const command = runs[i]![0] === "help" ? runs[i]![1]! : runs[i]![0]!;
      expect(outcome, runs[i]!.join(" ")).toMatchObject({ code: 0, stderr: "" });
      expect(outcome.stdout, runs[i]!.join(" ")).toMatch(new RegExp(`^usage: sigil ${command}( |\\n)`));
      expect(outcome.stdout).toContain("\noptions:\n");
      expect(outcome.stdout).toContain("-h, --help");
    });
    expect(outcomes.find((o) => o.stdout.startsWith("usage: sigil webhooks"))!.stdout).toContain("--limit N");
    expect(fs.readdirSync(cwd)).toEqual([]);
  });

  it("sigil --help lists every command, exactly as docs/cli.md shows it; --version prints package.json's version", async () => {
    const help = await sigil(["--help"]);
    expect(help).toMatchObject({ code: 0, stderr: "" });
    for (const command of COMMANDS) expect(help.stdout).toContain(`\n  sigil ${command}`);
    expect(fs.readFileSync("docs/cli.md", "utf8")).toContain("```text\n" + help.stdout + "```");
    for (const alias of [["help"], ["-h"]]) expect(await sigil(alias), alias[0]).toEqual(help);
    const { version } = JSON.parse(fs.readFileSync("package.json", "utf8")) as { version: string };
    expect(await sigil(["--version"])).toEqual({ code: 0, stdout: `${version}\n`, stderr: "" });
    expect(await sigil(["-v"])).toEqual({ code: 0, stdout: `${version}\n`, stderr: "" });
  });

  it("each command's --help says what it does with the master key when SIGIL_DATABASE_URL is set", async () => {
    const note = {
      serve: "--data-dir then only locates the master key.",
      bootstrap: "this command reads no master key, so --data-dir then plays no part.",
      info: "--data-dir then only locates the master key, which this command reports (masterKey) but does not need.",
      webhooks: "this command reads no master key, so --data-dir then plays no part.",
    };
    for (const [command, text] of Object.entries(note)) {
      const { stdout } = await sigil(["help", command]);
      expect(stdout.replace(/\n/g, " "), command).toContain(text);
    }
  });
});

describe("a command line that is not right is refused: exit 2, the reason and the usage on stderr, nothing done", () => {
  it("unknown options, missing values, extra arguments, bad numbers and choices, missing required options", async () => {
    const key = newKeyPair();
    // With these, bootstrap would create an organization in the test database: each case spoils them once.
    const boot = ["bootstrap", "--data-dir", "<db>", "--org-name", "A", "--user-name", "u", "--api-public-key", key.publicKey];
    const cases: { args: string[]; message: RegExp; env?: NodeJS.ProcessEnv }[] = [
      { args: [], message: /^sigil: no command given\n/ },
      { args: ["frobnicate"], message: /^sigil: unknown command "frobnicate"\n/ },
      {
        args: ["policy", "frob"],
        message: /^sigil: unknown command "policy frob": the policy commands are "policy test", "policy replay"\n/,
      },
      { args: ["policy test"], message: /^sigil policy test: CASES_FILE is required\n/ },
      { args: ["policy test", "cases.json", "more.json"], message: /^sigil policy test: unexpected argument "more.json"/ },
      { args: ["policy replay", "--policies", "p.json"], message: /^sigil policy replay: --organization is required\n/ },
      // A slip gets the command or option it most likely meant; a word close to none gets nothing (above).
      { args: ["serv"], message: /^sigil: unknown command "serv"; did you mean serve\?\n/ },
      { args: ["sevre", "--port", "8080"], message: /^sigil: unknown command "sevre"; did you mean serve\?\n/ },
      { args: ["boostrap"], message: /^sigil: unknown command "boostrap"; did you mean bootstrap\?\n/ },
      { args: ["rotate"], message: /^sigil: unknown command "rotate"; did you mean rotate-master-key\?\n/ },
      { args: ["help", "webhook"], message: /^sigil: unknown command "webhook"; did you mean webhooks\?\n/ },
      { args: ["--verison"], message: /^sigil: unknown option --verison; did you mean --version\?\n/ },
      { args: ["serve", "--prot", "9000"], message: /^sigil serve: unknown option --prot; did you mean --port\?\n/ },
      { args: ["info", "--data-dr", "<db>"], message: /^sigil info: unknown option --data-dr; did you mean --data-dir\?\n/ },
      { args: ["info", "--hlep"], message: /^sigil info: unknown option --hlep; did you mean --help\?\n/ },
      { args: ["serve", "--port", "abc"], message: /^sigil serve: --port must be a whole number from 1 to 65535, got "abc"\n/ },
      { args: ["serve", "--workers", "0"], message: /^sigil serve: --workers must be a whole number from 1 to 64, or auto, got "0"\n/ },
      {
        args: ["serve", "--workers", "aut"],
        message: /--workers must be a whole number from 1 to 64, or auto, got "aut"; did you mean auto\?\n/,
      },
      {
        args: ["webhooks", "--status", "faild"],
        message: /--status must be one of pending, delivered, failed, cancelled, got "faild"; did you mean failed\?\n/,
      },
      { args: ["--frobnicate"], message: /^sigil: unknown option --frobnicate\n/ },
      { args: ["--version", "now"], message: /^sigil: unexpected argument "now"\n/ },
      { args: ["help", "frobnicate"], message: /^sigil: unknown command "frobnicate"\n/ },
      { args: ["help", "info", "now"], message: /^sigil: unexpected argument "now"\n/ },
      { args: ["serve", "--bogus"], message: /^sigil serve: unknown option --bogus\n/ },
      { args: ["serve", "-x"], message: /^sigil serve: unknown option -x\n/ },
      { args: ["serve", "--port"], message: /^sigil serve: --port needs a value \(P\)\n/ },
      { args: ["serve", "--port", "--host", "127.0.0.1"], message: /^sigil serve: --port needs a value/ },
      { args: ["serve", "--port", "0"], message: /^sigil serve: --port must be a whole number from 1 to 65535, got "0"\n/ },
      { args: ["serve", "--port", "65536"], message: /--port must be a whole number from 1 to 65535, got "65536"/ },
      { args: ["serve", "--port", "80a"], message: /--port must be a whole number from 1 to 65535, got "80a"/ },
      { args: ["serve", "--port=0x50"], message: /--port must be a whole number from 1 to 65535, got "0x50"/ },
      { args: ["serve", "now"], message: /^sigil serve: unexpected argument "now"/ },
      { args: ["serve", "--data-dir="], message: /^sigil serve: --data-dir must not be empty\n/ },
      { args: ["webhooks", "--limit", "0"], message: /^sigil webhooks: --limit must be a whole number from 1 to 10000, got "0"\n/ },
      { args: ["webhooks", "--limit", "10001"], message: /--limit must be a whole number from 1 to 10000, got "10001"/ },
      { args: ["webhooks", "--limit", "-3"], message: /--limit must be a whole number from 1 to 10000, got "-3"/ },
      { args: ["webhooks", "--limit", "1.5"], message: /--limit must be a whole number from 1 to 10000, got "1.5"/ },
      { args: ["webhooks", "--limit", "1e3"], message: /--limit must be a whole number from 1 to 10000, got "1e3"/ },
      {
        args: ["webhooks", "--status", "lost"],
        message: /^sigil webhooks: --status must be one of pending, delivered, failed, cancelled, got "lost"\n/,
      },
      { args: ["info", "now"], message: /^sigil info: unexpected argument "now"/ },
      { args: ["info", "--", "now"], message: /^sigil info: unexpected argument "now"/ },
      { args: ["info", "--data-dir"], message: /^sigil info: --data-dir needs a value \(D\)\n/ },
      { args: ["info", "--help=1"], message: /^sigil info: --help takes no value\n/ },
      { args: ["outbox", "--organization"], message: /^sigil outbox: --organization needs a value \(ID\)\n/ },
      { args: ["keygen", "--out", "key.json", "now"], message: /^sigil keygen: unexpected argument "now"/ },
      { args: ["keygen", "--force"], message: /^sigil keygen: unknown option --force\n/ },
      { args: ["rotate-master-key", "--new-key-file"], message: /^sigil rotate-master-key: --new-key-file needs a value \(F\)\n/ },
      {
        args: ["rotate-master-key", "--data-dir", "<db>"],
        env: { ...env, SIGIL_MASTER_KEY: crypto.randomBytes(32).toString("hex") },
        message: /^sigil rotate-master-key: SIGIL_MASTER_KEY is set: give the new key with --new-key-file F\n/,
      },
      { args: ["bootstrap", "--data-dir", "<db>"], message: /^sigil bootstrap: --org-name, --user-name, --api-public-key are required\n/ },
      { args: boot.slice(0, -2), message: /^sigil bootstrap: --api-public-key is required\n/ },
      { args: [...boot, "--org-name", "B"], message: /^sigil bootstrap: --org-name is given twice\n/ },
      { args: [...boot, "--create=yes"], message: /^sigil bootstrap: --create takes no value\n/ },
      { args: [...boot, "Corp"], message: /^sigil bootstrap: unexpected argument "Corp"/ },
      { args: [...boot, "--user-email"], message: /^sigil bootstrap: --user-email needs a value \(E\)\n/ },
      { args: [...boot, "--api-key-name="], message: /^sigil bootstrap: --api-key-name must not be empty\n/ },
      { args: [...boot, "--verbose"], message: /^sigil bootstrap: unknown option --verbose\n/ },
      {
        args: [...boot.slice(0, 3), "--org", "A", ...boot.slice(5)],
        message: /^sigil bootstrap: unknown option --org; did you mean --org-name\?\n/,
      },
    ];
    const before = await snapshot();
    const cwd = emptyDir(); // ./data (the default data directory) and keygen's key.json would appear here
    const outcomes = await inBatches(cases, (c) =>
      sigil(
        c.args.map((a) => (a === "<db>" ? database.dataDir : a)),
        { cwd, env: c.env },
      ),
    );
    outcomes.forEach((outcome, i) => {
      const { args, message } = cases[i]!;
      const label = args.join(" ");
      expect(outcome.code, label).toBe(2);
      expect(outcome.stdout, label).toBe("");
      expect(outcome.stderr, label).toMatch(message);
      const command = COMMANDS.includes(args[0]!) ? args[0] : null;
      // The command's usage line, or the list of all commands when no command was recognized.
      expect(outcome.stderr, label).toContain(command ? `\n\nusage: sigil ${command}` : "\n\nusage:\n  sigil serve [--host H]");
    });
    expect(fs.readdirSync(cwd)).toEqual([]);
    expect(await snapshot()).toBe(before);
  });
});

describe("every option that takes a number or one of a list refuses any other value, as its declaration says", () => {
  // From the declarations in src/cli/main.ts, so that an option added later is checked too.
  const cases = Object.entries(declarations).flatMap(([command, spec]) =>
    Object.entries(spec.options).flatMap(([option, o]) => {
      const bad = o.range ? [String(o.range[0] - 1), String(o.range[1] + 1), "abc", `${o.range[0]}.5`, `-${o.range[1]}`] : [];
      if (o.choices) bad.push(`not-${o.choices[0]}`);
      return bad.map((value) => ({ command, option, value, spec: o }));
    }),
  );

  it("the options checked are the ones this file knows", () => {
    expect([...new Set(cases.map((c) => `${c.command} --${c.option}`))]).toEqual([
      "serve --port",
      "serve --workers",
      "rotate-master-key --to",
      "webhooks --status",
      "webhooks --limit",
      "audit verify --threads",
      "policy replay --last",
    ]);
  });

  it("names the option, the values it takes and the value given, shows the command's usage, exits 2 and does nothing", async () => {
    const before = await snapshot();
    const cwd = emptyDir();
    const outcomes = await inBatches(cases, (c) => sigil([c.command, `--${c.option}`, c.value, "--data-dir", database.dataDir], { cwd }));
    outcomes.forEach((outcome, i) => {
      const { command, option, value, spec } = cases[i]!;
      const label = `${command} --${option} ${value}`;
      const takes = spec.range
        ? `a whole number from ${spec.range[0]} to ${spec.range[1]}${spec.choices ? `, or ${spec.choices.join(", ")}` : ""}`
        : `one of ${spec.choices!.join(", ")}`;
      expect(outcome.code, label).toBe(2);
      expect(outcome.stdout, label).toBe("");
      expect(outcome.stderr, label).toMatch(
        new RegExp(`^sigil ${command}: --${option} must be ${takes}, got "${value}"\n\nusage: sigil ${command} `),
      );
      expect(outcome.stderr, label).toContain(`(\`sigil ${command} --help\` describes it)`);
    });
    expect(fs.readdirSync(cwd)).toEqual([]);
    expect(await snapshot()).toBe(before);
  });
});

describe("commands that find no Sigil database create none", () => {
  it("remove-ip-allowlist fails naming the file or URL, and creates no directory, file or table", async () => {
    const empty = await noSigilDatabase();
    try {
      const outcome = await sigil(["remove-ip-allowlist", "--organization", "any", "--data-dir", empty.dataDir], { env: empty.env });
      expect(outcome.code).toBe(1);
      expect(outcome.stdout).toBe("");
      expect(outcome.stderr).toContain(`no Sigil database at ${empty.location} (`);
      expect(outcome.stderr).toContain("nothing was created");
      expect(outcome.stderr).not.toContain(PASSWORD);
      expect(fs.existsSync(empty.dataDir)).toBe(false);
      expect(await empty.tables()).toEqual([]);
    } finally {
      await empty.drop();
    }
  });

  it("info, outbox and webhooks fail naming the file or URL (never its password), and create no directory, file or table", async () => {
    const empty = await noSigilDatabase();
    try {
      const outcomes = await inBatches(READ_ONLY, (command) => sigil([command, "--data-dir", empty.dataDir], { env: empty.env }));
      outcomes.forEach((outcome, i) => {
        expect(outcome.code, READ_ONLY[i]).toBe(1);
        expect(outcome.stdout).toBe("");
        expect(outcome.stderr).toContain(`no Sigil database at ${empty.location} (`);
        expect(outcome.stderr).toContain("nothing was created");
        expect(outcome.stderr).not.toContain(PASSWORD);
      });
      expect(fs.existsSync(empty.dataDir)).toBe(false);
      expect(await empty.tables()).toEqual([]);
    } finally {
      await empty.drop();
    }
  });

  it("they refuse an existing SQLite file or PostgreSQL database without Sigil's tables, and leave it as it was", async () => {
    const empty = await noSigilDatabase();
    try {
      if (backend === "sqlite") fs.mkdirSync(empty.dataDir);
      await empty.sql("create table unrelated (id integer)");
      const outcomes = await inBatches(READ_ONLY, (command) => sigil([command, "--data-dir", empty.dataDir], { env: empty.env }));
      for (const outcome of outcomes) {
        expect(outcome.code).toBe(1);
        expect(outcome.stderr).toMatch(/holds no Sigil tables/);
      }
      expect(await empty.tables()).toEqual(["unrelated"]);
    } finally {
      await empty.drop();
    }
  });

  it("bootstrap refuses where there is no database, creating nothing; with --create it makes one and says where", async () => {
    const empty = await noSigilDatabase();
    const key = newKeyPair();
    const args = ["bootstrap", "--data-dir", empty.dataDir, "--org-name", "Acme", "--user-name", "ops", "--api-public-key", key.publicKey];
    try {
      const refused = await sigil(args, { env: empty.env });
      expect(refused.code).toBe(1);
      expect(refused.stdout).toBe("");
      expect(refused.stderr).toContain(`no Sigil database at ${empty.location} (`);
      expect(refused.stderr).toContain("--create");
      expect(refused.stderr).not.toContain(PASSWORD);
      expect(fs.existsSync(empty.dataDir)).toBe(false);
      expect(await empty.tables()).toEqual([]);

      const created = await sigil([...args, "--create"], { env: empty.env });
      expect(created.code).toBe(0);
      expect(JSON.parse(created.stdout)).toMatchObject({ organizationId: expect.any(String), database: empty.location });
      expect(created.stderr).toBe(`created a new Sigil database at ${empty.location}\n`);
      expect(await empty.tables()).toContain("organizations");

      // The database now exists: no --create needed, and none reported.
      const again = await sigil([...args.slice(0, 4), "Beta", ...args.slice(5)], { env: empty.env });
      expect(again.code).toBe(0);
      expect(again.stderr).toBe("");
      const info = await sigil(["info", "--data-dir", empty.dataDir], { env: empty.env });
      expect(info.code).toBe(0);
      expect(JSON.parse(info.stdout)).toMatchObject({ database: empty.location, signerPublicKey: null });
    } finally {
      await empty.drop();
    }
  });

  it("read-only commands do not migrate: an older or a newer schema is refused and left as it was", async () => {
    const empty = await noSigilDatabase();
    try {
      const key = newKeyPair();
      const args = [
        "bootstrap",
        "--create",
        "--data-dir",
        empty.dataDir,
        "--org-name",
        "A",
        "--user-name",
        "u",
        "--api-public-key",
        key.publicKey,
      ];
      const created = await sigil(args, { env: empty.env });
      expect(created.code).toBe(0);
      const latest = Object.keys(migrations).sort().at(-1)!;
      await empty.sql(`delete from sigil_migrations where name = '${latest}'`);
      const applied = async () =>
        (await empty.sql("select name from sigil_migrations order by name")).map((r) => (r as { name: string }).name);
      await empty.sql(`delete from sigil_migrations where name = '${latest}'`);
      const before = await applied();
      const older = await inBatches(READ_ONLY, (command) => sigil([command, "--data-dir", empty.dataDir], { env: empty.env }));
      for (const outcome of older) {
        expect(outcome.code).toBe(1);
        expect(outcome.stderr).toContain(`the database at ${empty.location} has an older schema (migrations ${latest} not applied)`);
      }
      expect(await applied()).toEqual(before);

      await empty.sql(
        `insert into sigil_migrations (name, timestamp) values ('${latest}', '2030-01-01T00:00:00Z'), ('9999_later', '2031-01-01T00:00:00Z')`,
      );
      const newer = await inBatches(READ_ONLY, (command) => sigil([command, "--data-dir", empty.dataDir], { env: empty.env }));
      for (const outcome of newer) {
        expect(outcome.code).toBe(1);
        expect(outcome.stderr).toContain(`the database at ${empty.location} was migrated by a newer Sigil (migrations 9999_later)`);
      }
      expect(await applied()).toEqual([...before, latest, "9999_later"].sort());
    } finally {
      await empty.drop();
    }
  });

  it("rotate-master-key refuses where there is no master key or no database, creating neither", async () => {
    const empty = await noSigilDatabase();
    try {
      const noKey = await sigil(["rotate-master-key", "--data-dir", empty.dataDir], { env: empty.env });
      expect(noKey.code).toBe(1);
      expect(noKey.stderr).toContain(`no master key at ${path.join(empty.dataDir, "master.key")}: nothing to rotate`);
      expect(fs.existsSync(empty.dataDir)).toBe(false);

      fs.mkdirSync(empty.dataDir);
      const key = crypto.randomBytes(32).toString("hex") + "\n";
      fs.writeFileSync(path.join(empty.dataDir, "master.key"), key, { mode: 0o600 });
      const noDatabase = await sigil(["rotate-master-key", "--data-dir", empty.dataDir], { env: empty.env });
      expect(noDatabase.code).toBe(1);
      expect(noDatabase.stderr).toContain(`no Sigil database at ${empty.location} (`);
      expect(noDatabase.stderr).not.toContain(PASSWORD);
      expect(fs.readdirSync(empty.dataDir)).toEqual(["master.key"]);
      expect(fs.readFileSync(path.join(empty.dataDir, "master.key"), "utf8")).toBe(key);
      expect(await empty.tables()).toEqual([]);
    } finally {
      await empty.drop();
    }
  });
});

describe("which master key info reports; bootstrap reads none", () => {
  const serversKey = () => {
    const file = path.join(database.dataDir, "master.key");
    return keyIdOf(parseMasterKey(fs.readFileSync(file, "utf8"), file));
  };

  it("info with no --data-dir and no SIGIL_DATA_DIR: on PostgreSQL it names the ./data key it looked for and finds none, making none; on SQLite ./data is where it looks for the database", async () => {
    const cwd = emptyDir();
    const outcome = await sigil(["info"], { cwd });
    if (backend === "sqlite") {
      expect(outcome.code).toBe(1);
      expect(outcome.stderr).toContain(`no Sigil database at ${path.join(cwd, "data", "sigil.db")} (`);
    } else {
      expect(outcome.code).toBe(0);
      const line = JSON.parse(outcome.stdout);
      expect(line.masterKey).toBeNull();
      expect(line.databaseKeyIds).toEqual([serversKey()]);
      expect(line.signerPublicKey).toMatch(/^[0-9a-f]{66,130}$/);
      expect(outcome.stderr).toContain(
        `no master key at ${path.join(cwd, "data", "master.key")} (the default data directory ./data: no --data-dir, no SIGIL_DATA_DIR): ` +
          `info needs none, but the servers need the key the database's secrets are sealed under (${serversKey()})\n`,
      );
    }
    expect(fs.readdirSync(cwd)).toEqual([]);
  });

  it("info names the key SIGIL_DATA_DIR, SIGIL_MASTER_KEY_FILE or SIGIL_MASTER_KEY give, and says when it does not open the database", async () => {
    const elsewhere = emptyDir();
    const otherKey = crypto.randomBytes(32);
    fs.writeFileSync(path.join(elsewhere, "master.key"), `${otherKey.toString("hex")}\n`, { mode: 0o600 });
    const missingFile = path.join(elsewhere, "missing.key");
    const runs = [
      // The servers' own key, through SIGIL_DATA_DIR (on SQLite the database is found there too).
      { env: { ...env, SIGIL_DATA_DIR: database.dataDir }, args: [] as string[] },
      // On PostgreSQL, another data directory: its key is not the deployment's.
      ...(backend === "postgres" ? [{ env: { ...env, SIGIL_DATA_DIR: elsewhere }, args: [] as string[] }] : []),
      { env: { ...env, SIGIL_MASTER_KEY_FILE: path.join(elsewhere, "master.key") }, args: ["--data-dir", database.dataDir] },
      { env: { ...env, SIGIL_MASTER_KEY: otherKey.toString("hex") }, args: ["--data-dir", database.dataDir] },
      { env: { ...env, SIGIL_MASTER_KEY_FILE: missingFile }, args: ["--data-dir", database.dataDir] },
    ];
    const outcomes = await inBatches(runs, (r) => sigil(["info", ...r.args], { env: r.env }));
    for (const outcome of outcomes) expect(outcome.code).toBe(0);
    const [own, ...others] = outcomes.map((o) => ({ line: JSON.parse(o.stdout), stderr: o.stderr }));
    const servers = serversKey();
    const other = keyIdOf(otherKey);
    expect(own!.line.masterKey).toEqual({ source: path.join(database.dataDir, "master.key"), keyId: servers, opensDatabase: true });
    expect(own!.stderr).not.toContain("master key");
    const expected = [
      ...(backend === "postgres"
        ? [
            {
              masterKey: { source: path.join(elsewhere, "master.key"), keyId: other, opensDatabase: false },
              stderr: `the master key at ${path.join(elsewhere, "master.key")} (SIGIL_DATA_DIR), key id ${other}, does not open this database`,
            },
          ]
        : []),
      {
        masterKey: { source: path.join(elsewhere, "master.key"), keyId: other, opensDatabase: false },
        stderr: `the master key at ${path.join(elsewhere, "master.key")} (SIGIL_MASTER_KEY_FILE), key id ${other}, does not open this database`,
      },
      {
        masterKey: { source: "SIGIL_MASTER_KEY", keyId: other, opensDatabase: false },
        stderr: `the master key at SIGIL_MASTER_KEY, key id ${other}, does not open this database`,
      },
      { masterKey: null, stderr: `no master key at ${missingFile} (SIGIL_MASTER_KEY_FILE): info needs none` },
    ];
    others.forEach((outcome, i) => {
      expect(outcome.line.masterKey).toEqual(expected[i]!.masterKey);
      expect(outcome.line.databaseKeyIds).toEqual([servers]);
      expect(outcome.stderr).toContain(expected[i]!.stderr);
      expect(outcome.stderr).toContain(`the key the database's secrets are sealed under (${servers})\n`);
      expect(outcome.stderr).not.toContain(otherKey.toString("hex"));
    });
    // Read, never made: no key file appeared.
    expect(fs.readdirSync(elsewhere)).toEqual(["master.key"]);
  });

  it("bootstrap with no --data-dir and no SIGIL_DATA_DIR: on PostgreSQL it reads no ./data and no key; on SQLite ./data is where it looks for the database", async () => {
    const cwd = emptyDir();
    const key = newKeyPair();
    const before = await snapshot();
    const outcome = await sigil(["bootstrap", "--org-name", "Nodir", "--user-name", "ops", "--api-public-key", key.publicKey], { cwd });
    if (backend === "sqlite") {
      expect(outcome.code).toBe(1);
      expect(outcome.stderr).toContain(`no Sigil database at ${path.join(cwd, "data", "sigil.db")} (`);
      expect(await snapshot()).toBe(before);
    } else {
      expect(outcome.code).toBe(0);
      expect(outcome.stderr).toBe("");
      const created = JSON.parse(outcome.stdout);
      const { user } = await new Turnkey({
        apiBaseUrl: baseUrl,
        apiPublicKey: key.publicKey,
        apiPrivateKey: key.privateKey,
        defaultOrganizationId: created.organizationId,
      })
        .apiClient()
        .getUser({ userId: created.userId });
      expect(user.userName).toBe("ops");
    }
    expect(fs.readdirSync(cwd)).toEqual([]);
  });
});

describe("sigil serve that fails to start leaves nothing behind", () => {
  /** Starts `serve` on a database it cannot open, with a data directory two levels below missing directories. */
  async function failedStart(databaseUrl: string, workers: number) {
    const parent = emptyDir();
    const dataDir = path.join(parent, "a", "b", "data");
    const kept = emptyDir(); // a data directory that exists already stays, empty as it was
    const runs = [dataDir, kept].map(async (dir) =>
      sigil(["serve", "--port", String(await freePort()), "--workers", String(workers), "--data-dir", dir], {
        env: { ...env, SIGIL_DATABASE_URL: databaseUrl },
      }),
    );
    const outcomes = await Promise.all(runs);
    return { outcomes, parent, kept };
  }

  it("a PostgreSQL port nobody listens on: no master key and no directory it made, with one process or several", async () => {
    const closed = await freePort();
    for (const workers of [1, 2]) {
      const { outcomes, parent, kept } = await failedStart(`postgres://sigil:${PASSWORD}@127.0.0.1:${closed}/sigil`, workers);
      for (const outcome of outcomes) {
        expect(outcome.code, `--workers ${workers}`).toBe(1);
        expect(outcome.stderr).toContain(`cannot open PostgreSQL database postgres://sigil:***@127.0.0.1:${closed}/sigil: `);
        expect(outcome.stderr).not.toContain(PASSWORD);
      }
      expect(fs.readdirSync(parent), `--workers ${workers}`).toEqual([]);
      expect(fs.readdirSync(kept)).toEqual([]);
    }
  });

  if (backend === "postgres") {
    it("a PostgreSQL database that does not exist: no master key and no directory it made, with one process or several", async () => {
      const url = new URL(process.env.TEST_DATABASE_URL!);
      url.pathname = `/sigil_no_such_db_${crypto.randomBytes(6).toString("hex")}`;
      for (const workers of [1, 2]) {
        const { outcomes, parent, kept } = await failedStart(url.toString(), workers);
        for (const outcome of outcomes) {
          expect(outcome.code, `--workers ${workers}`).toBe(1);
          expect(outcome.stderr).toContain(`PostgreSQL database "${url.pathname.slice(1)}" does not exist`);
        }
        expect(fs.readdirSync(parent), `--workers ${workers}`).toEqual([]);
        expect(fs.readdirSync(kept)).toEqual([]);
      }
    });
  }
});

describe("keygen --out", () => {
  it("writes the key pair to a new file readable by its owner only, and prints the public key and the file", async () => {
    const dir = emptyDir();
    const file = path.join(dir, "root-key.json");
    const outcome = await sigil(["keygen", "--out", "root-key.json"], { cwd: dir });
    expect(outcome).toMatchObject({ code: 0, stderr: "" });
    const pair = JSON.parse(fs.readFileSync(file, "utf8"));
    expect(JSON.parse(outcome.stdout)).toEqual({ publicKey: pair.publicKey, file });
    expect(outcome.stdout).not.toContain(pair.privateKey);
    expect(fs.statSync(file).mode & 0o777).toBe(0o600);
    const ecdh = crypto.createECDH("prime256v1");
    ecdh.setPrivateKey(Buffer.from(pair.privateKey, "hex"));
    expect(ecdh.getPublicKey("hex", "compressed")).toBe(pair.publicKey);
  });

  it("never overwrites a file, nor writes through a link at that name, nor into a missing directory", async () => {
    const dir = emptyDir();
    const existing = path.join(dir, "key.json");
    fs.writeFileSync(existing, "the key pair in use\n", { mode: 0o644 });
    const overwrite = await sigil(["keygen", "--out", existing]);
    expect(overwrite.code).toBe(1);
    expect(overwrite.stdout).toBe("");
    expect(overwrite.stderr).toContain(`${existing} already exists: keygen never overwrites a file`);
    expect(fs.readFileSync(existing, "utf8")).toBe("the key pair in use\n");
    expect(fs.statSync(existing).mode & 0o777).toBe(0o644);

    const link = path.join(dir, "link.json");
    fs.symlinkSync(path.join(dir, "target.json"), link);
    const throughLink = await sigil(["keygen", "--out", link]);
    expect(throughLink.code).toBe(1);
    expect(throughLink.stderr).toContain("already exists");
    expect(fs.existsSync(path.join(dir, "target.json"))).toBe(false);

    const nowhere = await sigil(["keygen", "--out", path.join(dir, "missing", "key.json")]);
    expect(nowhere.code).toBe(1);
    expect(nowhere.stderr).toMatch(/cannot create .*missing\/key\.json: ENOENT/);
    expect(fs.readdirSync(dir).sort()).toEqual(["key.json", "link.json"]);
  });
});

describe("SIGIL_DATABASE_URL", () => {
  it("anything but postgres:// or postgresql:// is refused at start by every command, by name and without its password", async () => {
    const dataDir = path.join(emptyDir(), "data");
    const key = newKeyPair();
    const commands = [
      ["serve", "--port", String(await freePort())],
      ["bootstrap", "--create", "--org-name", "A", "--user-name", "u", "--api-public-key", key.publicKey],
      ["rotate-master-key"],
      ...READ_ONLY.map((command) => [command]),
    ];
    for (const url of [`mysql://root:${PASSWORD}@127.0.0.1:3306/sigil`, `sqlite://${PASSWORD}@/tmp/sigil.db`, `${PASSWORD} is not a URL`]) {
      const outcomes = await inBatches(commands, (args) =>
        sigil([...args, "--data-dir", dataDir], { env: { ...env, SIGIL_DATABASE_URL: url } }),
      );
      outcomes.forEach((outcome, i) => {
        const label = `${commands[i]![0]} with ${url}`;
        expect(outcome.code, label).toBe(1);
        expect(outcome.stderr, label).toMatch(
          /^SIGIL_DATABASE_URL (must be a postgres:\/\/ or postgresql:\/\/ URL, not \w+:\/\/|is not a URL)/,
        );
        expect(outcome.stderr, label).not.toContain(PASSWORD);
      });
    }
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  if (backend === "postgres") {
    it("a PostgreSQL database that does not exist stops every command at start with how to create it, and is not created", async () => {
      const name = `sigil_missing_${crypto.randomBytes(6).toString("hex")}`;
      const url = new URL(process.env.TEST_DATABASE_URL!);
      url.pathname = `/${name}`;
      url.password = PASSWORD;
      const key = newKeyPair();
      const commands = [
        ["serve", "--port", String(await freePort())],
        ["bootstrap", "--create", "--org-name", "A", "--user-name", "u", "--api-public-key", key.publicKey],
        ...READ_ONLY.map((command) => [command]),
      ];
      const missingEnv = { ...env, SIGIL_DATABASE_URL: url.toString() };
      const dataDirs = commands.map(() => emptyDir());
      const outcomes = await inBatches(commands, (args, i) => sigil([...args, "--data-dir", dataDirs[i]!], { env: missingEnv }));
      const createdb = `\`createdb -h ${url.hostname}${url.port ? ` -p ${url.port}` : ""}${url.username ? ` -U ${url.username}` : ""} ${name}\``;
      outcomes.forEach((outcome, i) => {
        const label = commands[i]![0];
        expect(outcome.code, label).toBe(1);
        expect(outcome.stderr, label).toContain(`PostgreSQL database "${name}" does not exist`);
        expect(outcome.stderr, label).toContain(createdb);
        expect(outcome.stderr, label).toContain(`CREATE DATABASE "${name}";`);
        expect(outcome.stderr, label).not.toContain(PASSWORD);
        // No master key is left behind for a database that was never opened.
        expect(fs.existsSync(path.join(dataDirs[i]!, "master.key")), label).toBe(false);
      });
      const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
      await admin.connect();
      try {
        expect((await admin.query("select 1 from pg_database where datname = $1", [name])).rowCount).toBe(0);
      } finally {
        await admin.end();
      }
    });
  }
});
