// HTTP load against a started server (the built CLI in a child process), on SQLite and, when
// BENCH_DATABASE_URL or TEST_DATABASE_URL names a PostgreSQL server, on a fresh PostgreSQL database.
// Prints one JSON summary: requests/s and p50/p99 latency at concurrency 1 and 32, the server's peak
// RSS, and, for sign_raw_payload, the in-process ceiling (stamp verification + one signature on one
// core, measured just before and after the run) with the share of it achieved.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import pg from "pg";
import { sql } from "kysely";
import { serializeTransaction } from "viem";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { parseApiKeyStamp, verifyApiKeyStamp } from "../src/auth/stamps.js";
import { generateP256KeyPair, decompressP256 } from "../src/crypto/keys.js";
import { loadConfig } from "../src/config.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import { openStore } from "../src/store/database.js";
import { measure } from "./measure.js";

const CLI = path.resolve("bin/sigil.js");
const SECONDS_PER_RUN = Number(process.env.BENCH_SECONDS ?? 3);
const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 100_000);
/** BENCH_ONLY=sign_raw_payload,get_wallet runs just those scenarios (for profiling one path). */
const ONLY = process.env.BENCH_ONLY?.split(",").filter(Boolean);
/** BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the server process. */
const SERVER_NODE_ARGS = process.env.BENCH_SERVER_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
const selected = (scenario: string) => !ONLY || ONLY.includes(scenario);
/** BENCH_CONCURRENCY=1,32 (the default): the concurrency levels each scenario runs at. */
const [LOW, HIGH] = (process.env.BENCH_CONCURRENCY ?? "1,32").split(",").map(Number) as [number, number];

interface Key {
  publicKey: string;
  privateKey: crypto.KeyObject;
}

function apiKey(): Key {
  const pair = generateP256KeyPair();
  const point = decompressP256(pair.publicKey);
  const privateKey = crypto.createPrivateKey({
    key: {
      kty: "EC",
      crv: "P-256",
      d: Buffer.from(pair.privateKey, "hex").toString("base64url"),
      x: point.subarray(1, 33).toString("base64url"),
      y: point.subarray(33).toString("base64url"),
    },
    format: "jwk",
  });
  return { publicKey: pair.publicKey, privateKey };
}

function stamp(body: string, key: Key): string {
  const signature = crypto.sign("sha256", Buffer.from(body), { key: key.privateKey, dsaEncoding: "der" }).toString("hex");
  return Buffer.from(JSON.stringify({ publicKey: key.publicKey, scheme: "SIGNATURE_SCHEME_TK_API_P256", signature })).toString("base64url");
}

/** A request ready to send: its body and the stamp over it. */
interface Stamped {
  path: string;
  body: string;
  stamp: string;
}

/**
 * The load generator shares the machine's two cores with the server, so it does as little as it can
 * while the clock runs: requests are stamped ahead of time (each body is unique: the fingerprint is
 * the idempotency key) and sent over kept-alive sockets with node:http.
 */
class Client {
  private counter = 0;
  private readonly agent: http.Agent;
  private readonly target: URL;
  constructor(
    url: string,
    private readonly key: Key,
    readonly organizationId: string,
  ) {
    this.target = new URL(url);
    this.agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  }

  stamped(kind: "submit" | "query", operation: string, body: Record<string, unknown>): Stamped {
    const text = JSON.stringify(body);
    return { path: `/public/v1/${kind}/${operation}`, body: text, stamp: stamp(text, this.key) };
  }

  submitBody(operation: string, type: string, parameters: (unique: number) => Record<string, unknown>): Stamped {
    return this.stamped("submit", operation, {
      type,
      organizationId: this.organizationId,
      timestampMs: String(Date.now()),
      parameters: parameters(++this.counter),
    });
  }

  queryBody(operation: string, body: Record<string, unknown>): Stamped {
    return this.stamped("query", operation, { organizationId: this.organizationId, ...body });
  }

  send(request: Stamped): Promise<any> {
    return new Promise((resolve, reject) => {
      const outgoing = http.request(
        {
          host: this.target.hostname,
          port: this.target.port,
          path: request.path,
          method: "POST",
          agent: this.agent,
          headers: { "content-type": "application/json", "content-length": Buffer.byteLength(request.body), "X-Stamp": request.stamp },
        },
        (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            if (response.statusCode !== 200) reject(new Error(`${request.path}: ${response.statusCode} ${text}`));
            else resolve(JSON.parse(text));
          });
          response.on("error", reject);
        },
      );
      outgoing.on("error", reject);
      outgoing.end(request.body);
    });
  }

  submit(operation: string, type: string, parameters: (unique: number) => Record<string, unknown>) {
    return this.send(this.submitBody(operation, type, parameters));
  }

  query(operation: string, body: Record<string, unknown>) {
    return this.send(this.queryBody(operation, body));
  }

  close() {
    this.agent.destroy();
  }
}

/** How a scenario makes its next request; `fresh` says each request needs a new body and stamp. */
interface Scenario {
  make: () => Stamped;
  fresh: boolean;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;

interface RunResult {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
}

/** Requests stamped before a run: enough for the fastest rate this machine could plausibly serve. */
const STAMPED_AHEAD_PER_SECOND = 2500;

async function load(client: Client, concurrency: number, scenario: Scenario): Promise<RunResult> {
  const ready: Stamped[] = [];
  const one = scenario.fresh ? undefined : scenario.make();
  if (scenario.fresh) for (let i = 0; i < SECONDS_PER_RUN * STAMPED_AHEAD_PER_SECOND; i++) ready.push(scenario.make());
  const next = () => one ?? ready.pop() ?? scenario.make();
  const latencies: number[] = [];
  const activities = new Set<string>();
  const deadline = Date.now() + SECONDS_PER_RUN * 1000;
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < deadline) {
        const request = next();
        const t0 = process.hrtime.bigint();
        const answer = await client.send(request);
        latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
        if (scenario.fresh) activities.add(answer.activity.id);
      }
    }),
  );
  const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  // A measurement of retries answered from the audit log would flatter the server: refuse it.
  if (scenario.fresh && activities.size !== latencies.length)
    throw new Error(
      `${latencies.length - activities.size} requests were answered as retries of earlier ones: their bodies were not unique`,
    );
  latencies.sort((a, b) => a - b);
  const round = (n: number) => Math.round(n * 100) / 100;
  return {
    requestsPerSecond: round(latencies.length / elapsed),
    p50Ms: round(percentile(latencies, 50)),
    p99Ms: round(percentile(latencies, 99)),
    requests: latencies.length,
  };
}

function peakRssMb(child: ChildProcess): number {
  const status = fs.readFileSync(`/proc/${child.pid}/status`, "utf8");
  const kb = Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0);
  return Math.round(kb / 1024);
}

async function startServer(env: NodeJS.ProcessEnv, dataDir: string) {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const child = spawn(process.execPath, [...SERVER_NODE_ARGS, CLI, "serve", "--port", String(port), "--data-dir", dataDir], {
    env,
    stdio: ["ignore", "ignore", "inherit"],
  });
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    if (
      await fetch(`${url}/health`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return { child, url };
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill();
  throw new Error("the server did not start");
}

/** Adds accounts straight into the store (sealed like real ones), to measure reads at scale. */
async function fillAccounts(
  env: NodeJS.ProcessEnv,
  dataDir: string,
  organizationId: string,
  walletId: string,
  target: number,
  existing: number,
) {
  const config = loadConfig(env, { dataDir });
  const { keyring } = loadKeyring(config.masterKey);
  const store = await openStore(config);
  try {
    const now = Date.now();
    for (let start = existing; start < target; start += 1000) {
      const rows = Array.from({ length: Math.min(1000, target - start) }, (_, i) => {
        const id = crypto.randomUUID();
        return {
          id,
          organization_id: organizationId,
          wallet_id: walletId,
          curve: "CURVE_SECP256K1",
          path_format: "PATH_FORMAT_BIP32",
          path: `m/44'/60'/0'/0/${start + i + 1}`,
          address_format: "ADDRESS_FORMAT_ETHEREUM",
          address: `0x${crypto.randomBytes(20).toString("hex")}`,
          public_key: `02${crypto.randomBytes(32).toString("hex")}`,
          sealed_private_key: keyring.seal(crypto.randomBytes(32), { organizationId, kind: "wallet_account.private_key", resourceId: id }),
          name: null,
          created_at: now + start + i,
          updated_at: now + start + i,
        };
      });
      await store.db.transaction().execute((trx) => trx.insertInto("wallet_accounts").values(rows).execute());
    }
    // What autovacuum / a periodic ANALYZE does in production after a bulk load: fresh statistics.
    if (store.dialect === "postgres") await sql`analyze wallet_accounts`.execute(store.db);
  } finally {
    await store.close();
  }
}

async function backendRun(backend: "sqlite" | "postgres", databaseUrl?: string) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-bench-"));
  const env: NodeJS.ProcessEnv = { ...process.env, SIGIL_LOG_LEVEL: "warn" };
  delete env.SIGIL_MASTER_KEY;
  delete env.SIGIL_DATABASE_URL;
  if (databaseUrl) env.SIGIL_DATABASE_URL = databaseUrl;
  const key = apiKey();
  const boot = spawnSync(
    process.execPath,
    [CLI, "bootstrap", "--create", "--data-dir", dataDir, "--org-name", "bench", "--user-name", "bench", "--api-public-key", key.publicKey],
    { env, encoding: "utf8" },
  );
  if (boot.status !== 0) throw new Error(`bootstrap failed: ${boot.stderr}`);
  const { organizationId } = JSON.parse(boot.stdout);
  const { child, url } = await startServer(env, dataDir);
  const client = new Client(url, key, organizationId);
  try {
    const eth = {
      curve: "CURVE_SECP256K1",
      pathFormat: "PATH_FORMAT_BIP32",
      path: "m/44'/60'/0'/0/0",
      addressFormat: "ADDRESS_FORMAT_ETHEREUM",
    };
    const created = await client.submit("create_wallet", "ACTIVITY_TYPE_CREATE_WALLET", () => ({ walletName: "bench", accounts: [eth] }));
    const walletId = created.activity.result.createWalletResult.walletId as string;
    const signWith = created.activity.result.createWalletResult.addresses[0] as string;
    // Each request a different transaction (by nonce): identical bodies would be answered as retries.
    const unsigned = (nonce: number) =>
      serializeTransaction({
        type: "eip1559",
        chainId: 1,
        nonce,
        to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
        value: 1n,
        gas: 21000n,
        maxFeePerGas: 2n,
        maxPriorityFeePerGas: 1n,
      }).slice(2);

    const scenarios: Record<string, Scenario> = {
      sign_raw_payload: {
        fresh: true,
        make: () =>
          client.submitBody("sign_raw_payload", "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", (n) => ({
            signWith,
            payload: Buffer.from(`payload ${n}`).toString("hex"),
            encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
            hashFunction: "HASH_FUNCTION_KECCAK256",
          })),
      },
      sign_transaction: {
        fresh: true,
        make: () =>
          client.submitBody("sign_transaction", "ACTIVITY_TYPE_SIGN_TRANSACTION_V2", (n) => ({
            signWith,
            unsignedTransaction: unsigned(n),
            type: "TRANSACTION_TYPE_ETHEREUM",
          })),
      },
      create_wallet: {
        fresh: true,
        make: () =>
          client.submitBody("create_wallet", "ACTIVITY_TYPE_CREATE_WALLET", (n) => ({
            walletName: `w-${n}-${crypto.randomUUID()}`,
            accounts: [eth],
          })),
      },
    };
    const results: Record<string, unknown> = {};
    for (const [name, request] of Object.entries(scenarios)) {
      if (!selected(name)) continue;
      const c1 = await load(client, LOW, request);
      if (name !== "sign_raw_payload") {
        results[name] = { c1, c32: await load(client, HIGH, request) };
        continue;
      }
      // The machine's speed drifts (shared cores): the ceiling is measured right before and right
      // after the run it is compared with, and the ratio uses their mean.
      const before = ceiling();
      const c32 = await load(client, HIGH, request);
      const after = ceiling();
      const perSecond = (before.singleCoreRequestsPerSecond + after.singleCoreRequestsPerSecond) / 2;
      results[name] = {
        c1,
        c32,
        ceilingRequestsPerSecond: { before: before.singleCoreRequestsPerSecond, after: after.singleCoreRequestsPerSecond },
        shareOfCeiling: Math.round((c32.requestsPerSecond / perSecond) * 100) / 100,
      };
    }
    if (!selected("get_wallet") && !selected("list_wallet_accounts")) return { backend, ...results, peakRssMb: peakRssMb(child) };

    // Reads at 1,000 accounts, then at ACCOUNTS: flat means the same latency.
    // A query is not an activity: the same stamped body may be sent again and again.
    const reads: Record<string, Scenario> = {
      get_wallet: { fresh: false, make: () => client.queryBody("get_wallet", { walletId }) },
      list_wallet_accounts: {
        fresh: false,
        make: () => client.queryBody("list_wallet_accounts", { walletId, paginationOptions: { limit: "10" } }),
      },
    };
    await fillAccounts(env, dataDir, organizationId, walletId, 1000, 1);
    const small: Record<string, { c1: RunResult; c32: RunResult }> = {};
    for (const [name, request] of Object.entries(reads))
      small[name] = { c1: await load(client, LOW, request), c32: await load(client, HIGH, request) };
    await fillAccounts(env, dataDir, organizationId, walletId, ACCOUNTS, 1000);
    for (const [name, request] of Object.entries(reads)) {
      const large = { c1: await load(client, LOW, request), c32: await load(client, HIGH, request) };
      results[name] = {
        [`at${1000}`]: small[name],
        [`at${ACCOUNTS}`]: large,
        p50RatioLargeToSmall: Math.round((large.c1.p50Ms / small[name]!.c1.p50Ms) * 100) / 100,
      };
    }
    return { backend, ...results, peakRssMb: peakRssMb(child) };
  } finally {
    client.close();
    child.kill();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The work no server can avoid for one signing request, in this process: the ceiling. */
function ceiling() {
  const key = apiKey();
  const body = JSON.stringify({
    type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
    organizationId: crypto.randomUUID(),
    timestampMs: String(Date.now()),
    parameters: { payload: "00" },
  });
  const header = stamp(body, key);
  const secret = secp256k1.utils.randomSecretKey();
  const nsPerOp = measure("ceiling: stamp verify + keccak + secp256k1 signature", 3000, () => {
    if (!verifyApiKeyStamp(parseApiKeyStamp(header), Buffer.from(body))) throw new Error("stamp did not verify");
    secp256k1.sign(keccak_256(Buffer.from(body)), secret, { prehash: false, format: "recovered" });
  });
  return { microsecondsPerRequest: Math.round(nsPerOp / 10) / 100, singleCoreRequestsPerSecond: Math.round(1e9 / nsPerOp) };
}

export async function runLoad() {
  const runs = [await backendRun("sqlite")];
  const pgUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
  if (pgUrl) {
    const admin = new pg.Client({ connectionString: pgUrl });
    await admin.connect();
    const name = `sigil_bench_${crypto.randomBytes(4).toString("hex")}`;
    await admin.query(`CREATE DATABASE ${name}`);
    try {
      const url = new URL(pgUrl);
      url.pathname = `/${name}`;
      runs.push(await backendRun("postgres", url.toString()));
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    }
  }
  const summary = {
    machine: { cpus: os.cpus().length, node: process.version },
    secondsPerRun: SECONDS_PER_RUN,
    concurrency: [LOW, HIGH],
    runs,
  };
  console.log(JSON.stringify(summary, null, 2));
  return summary;
}

if (import.meta.url === `file://${process.argv[1]}`) await runLoad();
