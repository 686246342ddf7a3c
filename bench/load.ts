// HTTP load against a started server (the built CLI in a child process), on SQLite and, when
// BENCH_DATABASE_URL or TEST_DATABASE_URL names a PostgreSQL server, on a fresh PostgreSQL database
// per run (one server process, then BENCH_PG_WORKERS more). sign_raw_payload is compared, in the same
// run, with two references: the crypto ceiling (the request's unavoidable crypto on one core, with
// the fastest signer here) and the bare floor (bench/floor-server.ts: a minimal Fastify server that
// verifies and signs, no database, no policy), loaded by the same generator just before or after
// Sigil at each concurrency. Prints one JSON summary, then a table.
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { spawn, spawnSync } from "node:child_process";
import pg from "pg";
import { sql } from "kysely";
import { serializeTransaction } from "viem";
import { loadConfig } from "../src/config.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import { openStore } from "../src/store/database.js";
import { type Ceiling, compareSigners, measureCeiling, measureSignupCeiling, type SignupCeiling, signupParameters } from "./ceiling.js";
import { generateP256KeyPair } from "../src/crypto/keys.js";
import { apiKey, Client, type Key, load, type RunResult, type Scenario, signRawPayloadParameters } from "./generator.js";
import type { RecoverableSigner } from "./signers.js";
import { noisyNeighbour } from "./neighbours.js";
import { insertAccounts } from "./accounts.js";
import { MILLION_ENV, millionEndUsers, SUB_ORGANIZATIONS } from "./million.js";

/** BENCH_CLI=/other/checkout/bin/sigil.js loads another build (another commit's, to compare two in the
 * same way); the references and ceilings are still this checkout's. */
const CLI = path.resolve(process.env.BENCH_CLI ?? "bin/sigil.js");
const FLOOR = path.resolve("bench/floor-server.ts");
const SECONDS_PER_RUN = Number(process.env.BENCH_SECONDS ?? 3);
/** BENCH_RUNS=3 (the default): each measurement is repeated, and reported as median, min and max. */
const RUNS = Math.max(1, Number(process.env.BENCH_RUNS ?? 3));
const ACCOUNTS = Number(process.env.BENCH_ACCOUNTS ?? 100_000);
/** BENCH_ONLY=sign_raw_payload,get_wallet runs just those scenarios (for profiling one path). */
const ONLY = process.env.BENCH_ONLY?.split(",").filter(Boolean);
/** BENCH_SERVER_NODE_ARGS="--cpu-prof --cpu-prof-dir=/tmp/prof" profiles the servers (Sigil and the floor alike). */
const SERVER_NODE_ARGS = process.env.BENCH_SERVER_NODE_ARGS?.split(" ").filter(Boolean) ?? [];
const selected = (scenario: string) => !ONLY || ONLY.includes(scenario);
/** BENCH_CONCURRENCY=1,32,128 (the default): sign_raw_payload runs at each; the other scenarios at the first two. */
const LEVELS = (process.env.BENCH_CONCURRENCY ?? "1,32,128").split(",").filter(Boolean).map(Number);
if (LEVELS.length === 0 || LEVELS.some((c) => !Number.isInteger(c) || c < 1))
  throw new Error("BENCH_CONCURRENCY: positive integers, e.g. 1,32,128");
const OTHER_LEVELS = LEVELS.slice(0, 2);
/** BENCH_SIGNUP_CONCURRENCY=1,16,64 (the default): the levels the signup scenario runs at. */
const SIGNUP_LEVELS = (process.env.BENCH_SIGNUP_CONCURRENCY ?? "1,16,64").split(",").filter(Boolean).map(Number);
if (SIGNUP_LEVELS.length === 0 || SIGNUP_LEVELS.some((c) => !Number.isInteger(c) || c < 1))
  throw new Error("BENCH_SIGNUP_CONCURRENCY: positive integers, e.g. 1,16,64");
/** BENCH_SCRAPE_MS=1000 (the default): how often metrics_cost scrapes /metrics of the server that collects them
 * (Prometheus's usual interval is 15 s: this is harsher). */
const SCRAPE_MS = Number(process.env.BENCH_SCRAPE_MS ?? 1000);
/** BENCH_BACKENDS=sqlite,postgres (the default): the backends to run (PostgreSQL only with a URL). */
const BACKENDS = (process.env.BENCH_BACKENDS ?? "sqlite,postgres").split(",").filter(Boolean);
/** BENCH_PG_WORKERS=1,2 (the default): the PostgreSQL runs, by server processes (`sigil serve --workers N` above 1). */
const PG_WORKERS = (process.env.BENCH_PG_WORKERS ?? "1,2").split(",").filter(Boolean).map(Number);
/** Before its first measurement each server is loaded briefly at the highest concurrency: the code is
 * compiled and every connection the generator will use is open, for Sigil and the floor alike. */
const WARM_UP_SECONDS = 1;
const WARM_UP_CONCURRENCY = Math.max(...LEVELS);
const CORES = os.cpus().length;

const round = (n: number, places = 2) => Math.round(n * 10 ** places) / 10 ** places;

/** A figure over the BENCH_RUNS repetitions. */
interface Spread {
  median: number;
  min: number;
  max: number;
}

function spread(values: number[]): Spread {
  const sorted = [...values].sort((a, b) => a - b);
  const middle = sorted.length >> 1;
  const median = sorted.length % 2 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2;
  return { median: round(median), min: round(sorted[0]!), max: round(sorted[sorted.length - 1]!) };
}

/** The median of the values measured, or undefined when none was (no probe). */
const medianOf = (values: Array<number | undefined>) => {
  const measured = values.filter((v): v is number => v !== undefined);
  return measured.length ? spread(measured).median : undefined;
};

/** One concurrency level's measurements over the repetitions. */
function figures(results: RunResult[]) {
  return {
    requestsPerSecond: spread(results.map((r) => r.requestsPerSecond)),
    p50Ms: spread(results.map((r) => r.p50Ms)),
    p99Ms: spread(results.map((r) => r.p99Ms)),
    p99ToP50: spread(results.map((r) => r.p99Ms / r.p50Ms)),
    requests: results.reduce((sum, r) => sum + r.requests, 0),
    generatorCpuUsPerRequest: spread(results.map((r) => r.generatorCpuUsPerRequest)).median,
    serverCpuUsPerRequest: medianOf(results.map((r) => r.serverCpuUsPerRequest)),
    databaseCpuUsPerRequest: medianOf(results.map((r) => r.databaseCpuUsPerRequest)),
    generatorCoresAtMost: Math.max(...results.map((r) => r.generatorCores)),
    stampedDuringRun: results.reduce((sum, r) => sum + r.stampedDuringRun, 0),
  };
}
type Figures = ReturnType<typeof figures>;

/**
 * How many requests to stamp before a run: for a scenario's first run, what the machine could serve
 * (every core doing nothing but the ceiling's crypto); then twice the fastest rate seen for it, or
 * eight times at a level not yet seen (concurrency 32 serves several times concurrency 1). Unsent
 * requests stay in the pool for the next run, so a generous pool costs little; a short one costs
 * stamping while the clock runs, which the results count (stampedDuringRun).
 */
class StampSizer {
  private readonly seen = new Map<string, number[]>();
  constructor(private readonly machineBound: number) {}
  ahead(scenario: string, level: number): number {
    const here = this.seen.has(`${scenario}@${level}`);
    const rates = [...this.seen.entries()].filter(([k]) => k.startsWith(`${scenario}@`)).flatMap(([, v]) => v);
    const rate = rates.length === 0 ? this.machineBound : (here ? 2 : 8) * Math.max(...rates);
    return Math.ceil(Math.min(rate, 2 * this.machineBound) * SECONDS_PER_RUN * 1.1);
  }
  note(scenario: string, level: number, result: RunResult) {
    const key = `${scenario}@${level}`;
    this.seen.set(key, [...(this.seen.get(key) ?? []), result.requestsPerSecond]);
  }
}

async function measured(sizer: StampSizer, key: string, client: Client, level: number, scenario: Scenario) {
  const result = await load(client, level, scenario, SECONDS_PER_RUN, sizer.ahead(key, level));
  sizer.note(key, level, result);
  return result;
}

/** The process and its descendants (node:cluster workers are children of the primary). */
function processTree(pid: number): number[] {
  let children: number[] = [];
  try {
    for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
      const listed = fs.readFileSync(`/proc/${pid}/task/${task}/children`, "utf8").trim();
      if (listed) children = children.concat(listed.split(/\s+/).map(Number));
    }
  } catch {
    return [];
  }
  return [pid, ...children.flatMap(processTree)];
}

const CLOCK_TICK_US = 10_000; // /proc reports CPU time in clock ticks of 1/100 s (USER_HZ on Linux)

/** CPU time (µs) of one process: user + system, plus that of its children it has waited for. */
function processCpuUs(pid: number): number {
  try {
    const fields = fs
      .readFileSync(`/proc/${pid}/stat`, "utf8")
      .replace(/^.*\) /, "")
      .split(" ");
    // After "pid (comm) ": state is field 3, so utime/stime/cutime/cstime (14–17) are at 11–14 here.
    return (Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * CLOCK_TICK_US;
  } catch {
    return 0; // exited since it was listed
  }
}

/** CPU time (µs) of a server: its process and its descendants (a cluster's workers). */
const serverCpuUs = (pid: number) => () => processTree(pid).reduce((sum, p) => sum + processCpuUs(p), 0);

/** CPU time (µs) of every PostgreSQL process on this machine (backends that exited count in their
 * parent's children's time): the database's share of a run, when PostgreSQL is local and readable. */
function postgresCpuUs(): number {
  let total = 0;
  for (const entry of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (fs.readFileSync(`/proc/${entry}/comm`, "utf8").trim() === "postgres") total += processCpuUs(Number(entry));
    } catch {
      // gone since listed
    }
  }
  return total;
}

/** Peak resident memory (VmHWM) of a server: the sum over its processes, read before it stops. */
function peakRss(pid: number) {
  const processes = processTree(pid).flatMap((p) => {
    let status: string;
    try {
      status = fs.readFileSync(`/proc/${p}/status`, "utf8");
    } catch {
      return []; // exited since it was listed
    }
    return [{ pid: p, mb: Math.round(Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) / 1024) }];
  });
  return { totalMb: processes.reduce((sum, p) => sum + p.mb, 0), processes };
}

const healthy = (url: string) => answers(`${url}/health`);

/** Whether GET `url` answers 200. */
function answers(url: string): Promise<boolean> {
  return new Promise((resolve) => {
    // A connection of its own (agent: false), closed after: it must not linger next to the generator's.
    const request = http.get(url, { agent: false }, (response) => {
      response.resume();
      resolve(response.statusCode === 200);
    });
    request.on("error", () => resolve(false));
  });
}

interface Started {
  pid: number;
  url: string;
  /** Stops the server and any processes it started (cluster workers), and waits for it to exit. */
  stop: () => Promise<void>;
}

/**
 * Starts a server process on a random loopback port; resolves once it answers /health and, when
 * `readyLog` names a file, once its log there says it accepts requests: a cluster's primary says so
 * only when every worker listens (before that, connections opened by the generator would all go to
 * the first worker). The log goes to a file, not through the generator.
 */
async function startProcess(args: (port: number) => string[], env: NodeJS.ProcessEnv, processes = 1, readyLog?: string): Promise<Started> {
  const port = 20000 + Math.floor(Math.random() * 20000);
  const stdout = readyLog ? fs.openSync(readyLog, "w") : "ignore";
  const child = spawn(process.execPath, [...SERVER_NODE_ARGS, ...args(port)], { env, stdio: ["ignore", stdout, "pipe"] });
  if (typeof stdout === "number") fs.closeSync(stdout);
  const saysReady = () => !readyLog || fs.readFileSync(readyLog, "utf8").includes('"msg":"sigil is accepting requests"');
  let stderr = "";
  child.stderr!.on("data", (chunk: Buffer) => {
    process.stderr.write(chunk);
    stderr = (stderr + chunk.toString("utf8")).slice(-2000);
  });
  let exited: number | null | undefined;
  child.on("exit", (code) => (exited = code));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 300 && exited === undefined; i++) {
    if (await healthy(url)) {
      // Several processes: wait for all of them, so that none starts in the middle of a run.
      for (let j = 0; j < 600 && (processTree(child.pid!).length < processes || !saysReady()); j++)
        await new Promise((r) => setTimeout(r, 100));
      const stop = async () => {
        const gone = new Promise<void>((resolve) => (exited !== undefined ? resolve() : child.once("exit", () => resolve())));
        for (const pid of processTree(child.pid!).reverse()) {
          try {
            process.kill(pid, "SIGTERM");
          } catch {
            // already gone
          }
        }
        await Promise.race([gone, new Promise((r) => setTimeout(r, 10_000))]);
      };
      return { pid: child.pid!, url, stop };
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  child.kill();
  throw new Error(
    `the server did not start${exited !== undefined ? ` (exit code ${exited})` : ""}: ${stderr.trim().split("\n").slice(-3).join(" | ")}`,
  );
}

/** Whether the built CLI's `serve` takes --workers (added by the clustering work; absent before). */
function serveTakesWorkers(): boolean {
  const help = spawnSync(process.execPath, [CLI, "serve", "--help"], { encoding: "utf8" });
  return /--workers\b/.test(help.stdout ?? "");
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
    await insertAccounts(store.db, keyring, organizationId, walletId, target, existing);
    // What autovacuum / a periodic ANALYZE does in production after a bulk load: fresh statistics.
    if (store.dialect === "postgres") await sql`analyze wallet_accounts`.execute(store.db);
  } finally {
    await store.close();
  }
}

/** The references sign_raw_payload is compared with: the floor server and the crypto ceiling's signer. */
interface References {
  floor: { client: Client; scenario: Scenario };
  signer: RecoverableSigner;
  sizer: StampSizer;
}

/**
 * sign_raw_payload on Sigil against the floor, alternating at each level (floor first in odd runs,
 * Sigil first in even ones, so that a drift of the machine's speed favours neither), with the
 * ceiling measured before the first run and after each: a run's ratio to the ceiling uses the mean
 * of the ceilings on either side of it.
 */
async function signingAgainstReferences(label: string, client: Client, scenario: Scenario, refs: References) {
  await load(client, WARM_UP_CONCURRENCY, scenario, WARM_UP_SECONDS, refs.sizer.ahead(`${label}/warm-up`, WARM_UP_CONCURRENCY));
  const ceilings: Ceiling[] = [measureCeiling(refs.signer)];
  const runs: Array<Record<number, { sigil: RunResult; floor: RunResult }>> = [];
  for (let run = 0; run < RUNS; run++) {
    const levels: Record<number, { sigil: RunResult; floor: RunResult }> = {};
    for (const level of LEVELS) {
      const measureSigil = () => measured(refs.sizer, label, client, level, scenario);
      const measureFloor = () => measured(refs.sizer, "floor", refs.floor.client, level, refs.floor.scenario);
      if (run % 2 === 0) {
        const floor = await measureFloor();
        levels[level] = { floor, sigil: await measureSigil() };
      } else {
        const sigil = await measureSigil();
        levels[level] = { sigil, floor: await measureFloor() };
      }
    }
    runs.push(levels);
    ceilings.push(measureCeiling(refs.signer));
  }
  const ceilingOfRun = (run: number) => (ceilings[run]!.singleCoreRequestsPerSecond + ceilings[run + 1]!.singleCoreRequestsPerSecond) / 2;
  const levelRatios = (at: Array<{ sigil: RunResult; floor: RunResult }>) => ({
    sigil: figures(at.map((m) => m.sigil)),
    floor: figures(at.map((m) => m.floor)),
    // Requests per second over the references' (higher is better; 1 would be no cost at all)…
    sigilToFloor: spread(at.map((m) => m.sigil.requestsPerSecond / m.floor.requestsPerSecond)),
    sigilToCeiling: spread(at.map((m, run) => m.sigil.requestsPerSecond / ceilingOfRun(run))),
    floorToCeiling: spread(at.map((m, run) => m.floor.requestsPerSecond / ceilingOfRun(run))),
    // …and latencies over the floor's (lower is better), and the median over the ceiling's time per
    // request (at concurrency 1, how many times its unavoidable crypto a request takes).
    p50ToFloor: spread(at.map((m) => m.sigil.p50Ms / m.floor.p50Ms)),
    p99ToFloor: spread(at.map((m) => m.sigil.p99Ms / m.floor.p99Ms)),
    p50ToCeilingTime: spread(at.map((m, run) => (m.sigil.p50Ms / 1000) * ceilingOfRun(run))),
  });
  const byLevel: Record<string, ReturnType<typeof levelRatios>> = {};
  for (const level of LEVELS) byLevel[`c${level}`] = levelRatios(runs.map((r) => r[level]!));
  return {
    ...byLevel,
    ceiling: {
      signer: refs.signer.name,
      singleCoreRequestsPerSecond: spread(ceilings.map((c) => c.singleCoreRequestsPerSecond)),
    },
  };
}

/** A server of its own for a comparison: its own organization (bootstrapped into `dataDir`, or into
 * the same PostgreSQL database), a wallet with one Ethereum account, and a client at its URL. */
async function comparisonServer(env: NodeJS.ProcessEnv, dataDir: string, name: string) {
  const key: Key = apiKey();
  const boot = spawnSync(
    process.execPath,
    [CLI, "bootstrap", "--create", "--data-dir", dataDir, "--org-name", name, "--user-name", name, "--api-public-key", key.publicKey],
    { env, encoding: "utf8" },
  );
  if (boot.status !== 0) throw new Error(`bootstrap failed: ${boot.stderr}`);
  const { organizationId } = JSON.parse(boot.stdout);
  const server = await startProcess(
    (port) => [CLI, "serve", "--port", String(port), "--data-dir", dataDir],
    env,
    1,
    path.join(dataDir, `${name}.log`),
  );
  const client = new Client(server.url, key, organizationId, Math.max(...LEVELS));
  client.cpuProbes = { server: serverCpuUs(server.pid), ...(env.SIGIL_DATABASE_URL ? { database: postgresCpuUs } : {}) };
  const eth = {
    curve: "CURVE_SECP256K1",
    pathFormat: "PATH_FORMAT_BIP32",
    path: "m/44'/60'/0'/0/0",
    addressFormat: "ADDRESS_FORMAT_ETHEREUM",
  };
  const created = await client.submit("create_wallet", "ACTIVITY_TYPE_CREATE_WALLET", () => ({ walletName: name, accounts: [eth] }));
  const signWith = created.activity.result.createWalletResult.addresses[0] as string;
  const signing: Scenario = {
    fresh: true,
    make: () => client.submitBody("sign_raw_payload", "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", (n) => signRawPayloadParameters(signWith, n)),
  };
  return { server, client, signing };
}

/** GET `url` on a connection of its own; resolves with the body's length (0 on failure). */
function scrapeOnce(url: string): Promise<number> {
  return new Promise((resolve) => {
    const request = http.get(url, { agent: false }, (response) => {
      let length = 0;
      response.on("data", (chunk: Buffer) => (length += chunk.length));
      response.on("end", () => resolve(response.statusCode === 200 ? length : 0));
    });
    request.on("error", () => resolve(0));
  });
}

/**
 * metrics_cost: sign_raw_payload on four servers started alike, fresh processes on the same backend:
 * two collecting metrics (SIGIL_METRICS=on, each scraped every SCRAPE_MS meanwhile) and two not (off),
 * made in the order on, off, off, on, and loaded at the same time by the same generator, each at the
 * same concurrency. Whatever else the machine does then weighs on all alike (one after the other, the
 * shared 2-core machine's speed drifted by more than the few per cent being measured), the cores they
 * share go to those that need less of them per request, and whatever favours a server for its place
 * in the order (measured: two identical servers side by side differed by up to a tenth) cancels out
 * between the pairs. on ÷ off (the two collecting over the two not, per run) is what collecting costs
 * in throughput; on ÷ on and off ÷ off, between identical servers, show the noise it is read against.
 */
async function metricsCost(label: string, env: NodeJS.ProcessEnv, dataDir: (name: string) => string, sizer: StampSizer) {
  const servers: Array<Awaited<ReturnType<typeof comparisonServer>> & { collects: boolean }> = [];
  const scrapes: number[] = [];
  try {
    for (const [name, collects] of [
      ["metrics-on-1", true],
      ["metrics-off-1", false],
      ["metrics-off-2", false],
      ["metrics-on-2", true],
    ] as const)
      servers.push({ ...(await comparisonServer({ ...env, SIGIL_METRICS: collects ? "on" : "off" }, dataDir(name), name)), collects });
    for (const side of servers)
      await load(side.client, WARM_UP_CONCURRENCY, side.signing, WARM_UP_SECONDS, sizer.ahead(`${label}/warm-up`, WARM_UP_CONCURRENCY));
    const runs: Array<Record<number, RunResult[]>> = [];
    for (let run = 0; run < RUNS; run++) {
      const levels: Record<number, RunResult[]> = {};
      for (const level of LEVELS) {
        const scraper = setInterval(() => {
          for (const side of servers) if (side.collects) void scrapeOnce(`${side.server.url}/metrics`).then((n) => scrapes.push(n));
        }, SCRAPE_MS);
        try {
          levels[level] = await Promise.all(
            servers.map((side, i) => measured(sizer, `${label}/metrics-${i}`, side.client, level, side.signing)),
          );
        } finally {
          clearInterval(scraper);
        }
      }
      runs.push(levels);
    }
    const [on1, off1, off2, on2] = [0, 1, 2, 3];
    const byLevel: Record<string, unknown> = {};
    for (const level of LEVELS) {
      const at = runs.map((r) => r[level]!);
      const rate = (m: RunResult[], i: number) => m[i]!.requestsPerSecond;
      byLevel[`c${level}`] = {
        on: figures(at.flatMap((m) => [m[on1]!, m[on2]!])),
        off: figures(at.flatMap((m) => [m[off1]!, m[off2]!])),
        // Requests per second of the two collecting over the two not, per run (1: no cost at all).
        onToOff: spread(at.map((m) => (rate(m, on1) + rate(m, on2)) / (rate(m, off1) + rate(m, off2)))),
        // Between identical servers: the noise the above is read against.
        onToOn: spread(at.map((m) => rate(m, on1) / rate(m, on2))),
        offToOff: spread(at.map((m) => rate(m, off1) / rate(m, off2))),
      };
    }
    const answered = scrapes.filter((n) => n > 0);
    return {
      scrapeEveryMs: SCRAPE_MS,
      scrapes: { made: scrapes.length, answered: answered.length, medianBytes: answered.length ? spread(answered).median : 0 },
      ...byLevel,
    };
  } finally {
    for (const side of servers) {
      side.client.close();
      await side.server.stop();
    }
  }
}

/** Each scenario at each of `levels`, the whole set repeated RUNS times, as figures per level. */
async function repeated(sizer: StampSizer, label: string, client: Client, scenario: Scenario, levels: number[]) {
  const results: Record<number, RunResult[]> = {};
  for (let run = 0; run < RUNS; run++)
    for (const level of levels) (results[level] ??= []).push(await measured(sizer, label, client, level, scenario));
  return Object.fromEntries(levels.map((level) => [`c${level}`, figures(results[level]!)]));
}

/**
 * signup: create_sub_organization with a root user holding a new API key and a wallet with one
 * Ethereum account — an app's sign-up — at each of SIGNUP_LEVELS, against its own crypto ceiling
 * (bench/ceiling.ts, measureSignupCeiling), measured before the first run and after each: a run's
 * ratio uses the mean of the ceilings on either side of it. Its own stamp sizer: a sign-up costs
 * some twenty signatures.
 */
async function signup(label: string, client: Client) {
  const scenario: Scenario = {
    fresh: true,
    make: () =>
      client.submitBody("create_sub_organization", "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V7", (n) =>
        signupParameters(n, generateP256KeyPair().publicKey),
      ),
  };
  const ceilings: SignupCeiling[] = [measureSignupCeiling()];
  const sizer = new StampSizer(CORES * ceilings[0]!.singleCoreSignupsPerSecond);
  await load(
    client,
    Math.max(...SIGNUP_LEVELS),
    scenario,
    WARM_UP_SECONDS,
    sizer.ahead(`${label}/signup-warm-up`, Math.max(...SIGNUP_LEVELS)),
  );
  const runs: Array<Record<number, RunResult>> = [];
  for (let run = 0; run < RUNS; run++) {
    const levels: Record<number, RunResult> = {};
    for (const level of SIGNUP_LEVELS) levels[level] = await measured(sizer, `${label}/signup`, client, level, scenario);
    runs.push(levels);
    ceilings.push(measureSignupCeiling());
  }
  const ceilingOfRun = (run: number) => (ceilings[run]!.singleCoreSignupsPerSecond + ceilings[run + 1]!.singleCoreSignupsPerSecond) / 2;
  const byLevel: Record<string, unknown> = {};
  for (const level of SIGNUP_LEVELS) {
    const at = runs.map((r) => r[level]!);
    byLevel[`c${level}`] = {
      ...figures(at),
      // Sign-ups per second over one core's crypto ceiling (1: a server doing nothing but that crypto on one core).
      toCeiling: spread(at.map((m, run) => m.requestsPerSecond / ceilingOfRun(run))),
    };
  }
  const parts = Object.keys(ceilings[0]!.microseconds) as Array<keyof SignupCeiling["microseconds"]>;
  return {
    ...byLevel,
    ceiling: {
      singleCoreSignupsPerSecond: spread(ceilings.map((c) => c.singleCoreSignupsPerSecond)),
      microsecondsPerSignup: spread(ceilings.map((c) => c.microsecondsPerSignup)),
      microseconds: Object.fromEntries(parts.map((p) => [p, spread(ceilings.map((c) => c.microseconds[p])).median])),
    },
  };
}

/** The request rate limits stay on, as operators run them (each request counted: one statement more
 * on PostgreSQL), but no bucket empties: the generator is one key of one organization sending
 * thousands of requests a second, which the defaults would refuse (docs/rate-limits.md). */
const UNREACHED_RATE_LIMITS = Object.fromEntries(
  ["KEY", "SUB_ORGANIZATION", "ORGANIZATION"].flatMap((level) =>
    ["ACTIVITIES", "QUERIES"].map((kind) => [`SIGIL_RATE_LIMIT_${level}_${kind}`, "1000000/1000000"]),
  ),
);

async function backendRun(backend: "sqlite" | "postgres", workers: number, refs: References, databaseUrl?: string) {
  const label = `${backend}×${workers}`;
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-bench-"));
  // The generator is one address holding up to max(BENCH_CONCURRENCY) connections: no per-address cap.
  // The default log level (info: one line per activity), as operators run it; the log goes to a file.
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    SIGIL_LOG_LEVEL: "info",
    SIGIL_MAX_CONNECTIONS_PER_ADDRESS: "0",
    ...UNREACHED_RATE_LIMITS,
    ...(selected("million") ? MILLION_ENV : {}),
  };
  delete env.SIGIL_MASTER_KEY;
  delete env.SIGIL_DATABASE_URL;
  delete env.SIGIL_WORKERS; // the number of processes is this run's to choose (--workers)
  if (databaseUrl) env.SIGIL_DATABASE_URL = databaseUrl;
  const key: Key = apiKey();
  const boot = spawnSync(
    process.execPath,
    [CLI, "bootstrap", "--create", "--data-dir", dataDir, "--org-name", "bench", "--user-name", "bench", "--api-public-key", key.publicKey],
    { env, encoding: "utf8" },
  );
  if (boot.status !== 0) throw new Error(`bootstrap failed: ${boot.stderr}`);
  const { organizationId } = JSON.parse(boot.stdout);
  let server: Started;
  const serve = (port: number) => [
    CLI,
    "serve",
    "--port",
    String(port),
    "--data-dir",
    dataDir,
    ...(workers > 1 ? ["--workers", String(workers)] : []),
  ];
  try {
    server = await startProcess(serve, env, workers > 1 ? workers + 1 : 1, path.join(dataDir, "server.log"));
  } catch (error) {
    fs.rmSync(dataDir, { recursive: true, force: true });
    if (workers > 1) return { backend, workers, skipped: (error as Error).message };
    throw error;
  }
  const client = new Client(server.url, key, organizationId, Math.max(...LEVELS));
  client.cpuProbes = { server: serverCpuUs(server.pid), ...(databaseUrl ? { database: postgresCpuUs } : {}) };
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

    const results: Record<string, unknown> = {};
    if (selected("signup")) results.signup = await signup(label, client);
    if (selected("sign_raw_payload")) {
      const signing: Scenario = {
        fresh: true,
        make: () =>
          client.submitBody("sign_raw_payload", "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", (n) => signRawPayloadParameters(signWith, n)),
      };
      results.sign_raw_payload = await signingAgainstReferences(label, client, signing, refs);
    }
    const others: Record<string, Scenario> = {
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
    for (const [name, scenario] of Object.entries(others))
      if (selected(name)) results[name] = await repeated(refs.sizer, `${label}/${name}`, client, scenario, OTHER_LEVELS);

    // One organization's long exclusive activities beside another's signatures (bench/neighbours.ts).
    if (selected("noisy_neighbour") && workers === 1) {
      const attackerKey: Key = apiKey();
      const second = spawnSync(
        process.execPath,
        [
          CLI,
          "bootstrap",
          "--data-dir",
          dataDir,
          "--org-name",
          "attacker",
          "--user-name",
          "attacker",
          "--api-public-key",
          attackerKey.publicKey,
        ],
        { env, encoding: "utf8" },
      );
      if (second.status !== 0) throw new Error(`bootstrap of the second organization failed: ${second.stderr}`);
      const attacker = new Client(server.url, attackerKey, JSON.parse(second.stdout).organizationId, 16);
      try {
        const wallet = await attacker.submit("create_wallet", "ACTIVITY_TYPE_CREATE_WALLET", () => ({
          walletName: "attacker",
          accounts: [eth],
        }));
        const { walletId, addresses } = wallet.activity.result.createWalletResult;
        results.noisy_neighbour = await noisyNeighbour({
          victim: { client, signWith },
          attacker: { client: attacker, walletId, signWith: addresses[0] },
          seconds: SECONDS_PER_RUN,
          runs: RUNS,
          ahead: refs.sizer.ahead(`${label}/noisy_neighbour`, 4),
        });
      } finally {
        attacker.close();
      }
    }

    // What collecting metrics costs signing: two more servers, metrics on and off (bench/load.ts, metricsCost).
    if (selected("metrics_cost") && workers === 1) {
      // SQLite: a data directory each (inside this run's, removed with it); PostgreSQL: the same
      // database and master key, an organization each.
      const dirFor = (name: string) => (databaseUrl ? dataDir : path.join(dataDir, name));
      results.metrics_cost = await metricsCost(label, env, dirFor, refs.sizer);
    }

    // Reads at 1,000 accounts, then at ACCOUNTS: flat means the same latency. Their cost is in the
    // SQL, not in the number of server processes: measured with one.
    const readsSelected = selected("get_wallet") || selected("list_wallet_accounts");
    if (readsSelected && workers > 1) results.reads = "measured with one server process only";
    if (readsSelected && workers === 1) {
      // A query is not an activity: the same stamped body may be sent again and again.
      const reads: Record<string, Scenario> = {
        get_wallet: { fresh: false, make: () => client.queryBody("get_wallet", { walletId }) },
        list_wallet_accounts: {
          fresh: false,
          make: () => client.queryBody("list_wallet_accounts", { walletId, paginationOptions: { limit: "10" } }),
        },
      };
      const chosen = Object.entries(reads).filter(([name]) => selected(name));
      await fillAccounts(env, dataDir, organizationId, walletId, 1000, 1);
      const small: Record<string, Record<string, Figures>> = {};
      for (const [name, scenario] of chosen) small[name] = await repeated(refs.sizer, `${label}/${name}`, client, scenario, OTHER_LEVELS);
      await fillAccounts(env, dataDir, organizationId, walletId, ACCOUNTS, 1000);
      for (const [name, scenario] of chosen) {
        const large = await repeated(refs.sizer, `${label}/${name}`, client, scenario, OTHER_LEVELS);
        const c = `c${OTHER_LEVELS[0]}`;
        results[name] = {
          [`at${1000}`]: small[name],
          [`at${ACCOUNTS}`]: large,
          p50RatioLargeToSmall: round(large[c]!.p50Ms.median / small[name]![c]!.p50Ms.median),
        };
      }
    }
    // An app's end users at scale, last: it leaves a large database and restarts the server
    // (bench/million.ts). One server process: the cost measured is in the SQL.
    if (selected("million") && workers > 1) results.million = "measured with one server process only";
    if (selected("million") && workers === 1) {
      const appKey = generateP256KeyPair();
      const app = spawnSync(
        process.execPath,
        [CLI, "bootstrap", "--data-dir", dataDir, "--org-name", "app", "--user-name", "app", "--api-public-key", appKey.publicKey],
        { env, encoding: "utf8" },
      );
      if (app.status !== 0) throw new Error(`bootstrap of the app's organization failed: ${app.stderr}`);
      // The small side's database: on PostgreSQL a fresh one in the same cluster, dropped after.
      const onSmallDatabase = <T>(run: (url?: string) => Promise<T>) => (databaseUrl ? withFreshPostgres(databaseUrl, run) : run());
      results.million = await onSmallDatabase(async (smallDatabaseUrl) => {
        const small = await millionSmallSide(env, dataDir, smallDatabaseUrl);
        try {
          return await millionEndUsers({
            large: { url: server.url, parent: { organizationId: JSON.parse(app.stdout).organizationId, key: appKey }, env, dataDir },
            small: small.side,
            restart: async () => {
              await server.stop();
              const start = performance.now();
              server = await startProcess(serve, env, 1, path.join(dataDir, "server-restarted.log"));
              while (!(await answers(`${server.url}/ready`))) await new Promise((r) => setTimeout(r, 10));
              return { url: server.url, readyMs: Math.round(performance.now() - start) };
            },
          });
        } finally {
          await small.stop();
        }
      });
    }
    return { backend, workers, ...results, peakRss: peakRss(server.pid) };
  } finally {
    client.close();
    await server.stop();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

/**
 * `million`'s small side: a server of its own on a database of its own, beside the run's (a data
 * directory inside the run's; on PostgreSQL `databaseUrl`, a database the caller made for it), with an
 * app's organization as the parent of its end users.
 */
async function millionSmallSide(env: NodeJS.ProcessEnv, runDataDir: string, databaseUrl?: string) {
  const dataDir = path.join(runDataDir, "million-small");
  fs.mkdirSync(dataDir);
  const sideEnv: NodeJS.ProcessEnv = { ...env, ...(databaseUrl ? { SIGIL_DATABASE_URL: databaseUrl } : {}) };
  const key = generateP256KeyPair();
  const boot = spawnSync(
    process.execPath,
    [CLI, "bootstrap", "--create", "--data-dir", dataDir, "--org-name", "app", "--user-name", "app", "--api-public-key", key.publicKey],
    { env: sideEnv, encoding: "utf8" },
  );
  if (boot.status !== 0) throw new Error(`bootstrap of the small side's organization failed: ${boot.stderr}`);
  const server = await startProcess(
    (port) => [CLI, "serve", "--port", String(port), "--data-dir", dataDir],
    sideEnv,
    1,
    path.join(dataDir, "server.log"),
  );
  return {
    side: { url: server.url, parent: { organizationId: JSON.parse(boot.stdout).organizationId as string, key }, env: sideEnv, dataDir },
    stop: () => server.stop(),
  };
}

async function withFreshPostgres<T>(adminUrl: string, run: (url: string) => Promise<T>): Promise<T> {
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  const name = `sigil_bench_${crypto.randomBytes(4).toString("hex")}`;
  await admin.query(`CREATE DATABASE ${name}`);
  try {
    const url = new URL(adminUrl);
    url.pathname = `/${name}`;
    return await run(url.toString());
  } finally {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
}

export async function runLoad() {
  const loadAverage = os.loadavg().map((l) => round(l));
  const signers = await compareSigners();
  const single = signers.fastest.ceiling.singleCoreRequestsPerSecond;
  const sizer = new StampSizer(CORES * single);

  const floorKey = apiKey();
  const floorServer = await startProcess(
    (port) => [
      "--import",
      "tsx",
      FLOOR,
      "--port",
      String(port),
      "--public-key",
      floorKey.publicKey,
      "--signer",
      signers.fastest.signer.name,
    ],
    { ...process.env },
  );
  const floorClient = new Client(floorServer.url, floorKey, crypto.randomUUID(), Math.max(...LEVELS));
  floorClient.cpuProbes = { server: serverCpuUs(floorServer.pid) };
  const floorScenario: Scenario = {
    fresh: true,
    make: () =>
      floorClient.submitBody("sign_raw_payload", "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", (n) =>
        signRawPayloadParameters(`0x${"ab".repeat(20)}`, n),
      ),
  };
  const refs: References = { floor: { client: floorClient, scenario: floorScenario }, signer: signers.fastest.signer, sizer };
  const backends: unknown[] = [];
  let floorPeakRss: ReturnType<typeof peakRss>;
  try {
    await load(floorClient, WARM_UP_CONCURRENCY, floorScenario, WARM_UP_SECONDS, sizer.ahead("floor/warm-up", WARM_UP_CONCURRENCY));
    if (!BACKENDS.includes("sqlite")) backends.push({ backend: "sqlite", workers: 1, skipped: "BENCH_BACKENDS names no sqlite" });
    else backends.push(await backendRun("sqlite", 1, refs));
    const pgUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
    if (pgUrl && BACKENDS.includes("postgres")) {
      const takesWorkers = serveTakesWorkers();
      for (const workers of PG_WORKERS) {
        if (workers > 1 && !takesWorkers) {
          backends.push({ backend: "postgres", workers, skipped: "`sigil serve --help` lists no --workers option on this build" });
          continue;
        }
        backends.push(await withFreshPostgres(pgUrl, (url) => backendRun("postgres", workers, refs, url)));
      }
    }
  } finally {
    floorPeakRss = peakRss(floorServer.pid);
    floorClient.close();
    await floorServer.stop();
  }
  for (const run of backends as Array<{ peakRss?: { totalMb: number }; peakRssToFloor?: number }>)
    if (run.peakRss) run.peakRssToFloor = round(run.peakRss.totalMb / floorPeakRss.totalMb);
  const summary = {
    // Other work on the machine (its 1, 5 and 15 minute load averages) weighs on every figure.
    machine: { cpus: CORES, node: process.version, loadAverageAtStart: loadAverage, loadAverageAtEnd: os.loadavg().map((l) => round(l)) },
    secondsPerRun: SECONDS_PER_RUN,
    runs: RUNS,
    concurrency: LEVELS,
    references: {
      ceiling: {
        signer: signers.fastest.signer.library,
        microsecondsPerRequest: signers.fastest.ceiling.microsecondsPerRequest,
        singleCoreRequestsPerSecond: single,
        // No server here can sign faster than every core doing nothing but this crypto; the
        // generator, the database and the kernel's loopback take their share of the same cores.
        machineBoundRequestsPerSecond: CORES * single,
        bySigner: signers.bySigner,
        unavailable: signers.unavailable,
      },
      floor: { server: "bench/floor-server.ts", signer: signers.fastest.signer.name, peakRssMb: floorPeakRss.totalMb },
    },
    backends,
  };
  console.log(JSON.stringify(summary, null, 2));
  console.log(table(summary));
  return summary;
}

// ---- the table printed after the JSON ----

const n = (x: number) => (x >= 100 ? Math.round(x).toLocaleString("en-US") : String(round(x, x >= 10 ? 1 : 2)));
const withSpread = (s: Spread) => (s.min === s.max ? n(s.median) : `${n(s.median)} (${n(s.min)}–${n(s.max)})`);

function table(summary: { runs: number; references: any; backends: any[] }): string {
  const ceiling = summary.references.ceiling;
  const lines = [
    "",
    `crypto ceiling: ${ceiling.signer}, ${ceiling.microsecondsPerRequest} µs per request (stamp verify + keccak + signature) = ` +
      `${n(ceiling.singleCoreRequestsPerSecond)}/s on one core; ${CORES} cores bound any server here to ${n(ceiling.machineBoundRequestsPerSecond)}/s`,
    `figures: median of ${summary.runs} run(s) (min–max); ÷floor and ÷ceiling are per run, floor measured next to Sigil`,
    "",
  ];
  const header = [
    "sign_raw_payload",
    "c",
    "req/s",
    "p50 ms",
    "p99 ms",
    "p99÷p50",
    "req/s ÷floor",
    "÷ceiling",
    "p50 ÷floor",
    "p99 ÷floor",
    "server µs/req",
    "db µs/req",
    "gen µs/req",
    "gen cores",
  ];
  const rows: string[][] = [header];
  for (const run of summary.backends) {
    const name = `${run.backend} ×${run.workers}`;
    if (run.skipped) {
      rows.push([name, "", `skipped: ${run.skipped}`]);
      continue;
    }
    const signing = run.sign_raw_payload;
    if (!signing) continue;
    for (const level of LEVELS) {
      const at = signing[`c${level}`];
      for (const [who, f] of [
        [name, at.sigil],
        ["  floor", at.floor],
      ] as const)
        rows.push([
          who,
          String(level),
          withSpread(f.requestsPerSecond),
          withSpread(f.p50Ms),
          withSpread(f.p99Ms),
          n(f.p99ToP50.median),
          who === name ? withSpread(at.sigilToFloor) : "",
          withSpread(who === name ? at.sigilToCeiling : at.floorToCeiling),
          who === name ? withSpread(at.p50ToFloor) : "",
          who === name ? withSpread(at.p99ToFloor) : "",
          f.serverCpuUsPerRequest === undefined ? "" : n(f.serverCpuUsPerRequest),
          f.databaseCpuUsPerRequest === undefined ? "" : n(f.databaseCpuUsPerRequest),
          n(f.generatorCpuUsPerRequest),
          n(f.generatorCoresAtMost),
        ]);
    }
    const rss = run.peakRss;
    rows.push([
      "",
      "",
      `peak RSS ${rss.totalMb} MB${rss.processes.length > 1 ? ` (${rss.processes.map((p: { mb: number }) => p.mb).join(" + ")})` : ""}, ${run.peakRssToFloor}× the floor's ${summary.references.floor.peakRssMb} MB`,
    ]);
  }
  lines.push(...align(rows), "");
  const busiest = Math.max(
    ...summary.backends.flatMap((run) =>
      run.sign_raw_payload ? LEVELS.map((c) => run.sign_raw_payload[`c${c}`].floor.generatorCoresAtMost) : [],
    ),
  );
  if (busiest > 0.8)
    lines.push(
      `the generator used ${n(busiest)} of a core against the floor: it may have been the floor's limit, and the ratios flatter Sigil`,
      "",
    );
  const other: string[][] = [["scenario", "backend", ...OTHER_LEVELS.flatMap((c) => [`c${c} req/s`, `c${c} p50 / p99 ms`])]];
  for (const run of summary.backends) {
    if (run.skipped) continue;
    for (const [scenario, levels] of Object.entries(run) as [string, any][]) {
      if (!["sign_transaction", "create_wallet", "get_wallet", "list_wallet_accounts"].includes(scenario)) continue;
      const sets: [string, any][] = levels[`at${ACCOUNTS}`]
        ? [
            [`${scenario} at 1,000`, levels.at1000],
            [`${scenario} at ${ACCOUNTS.toLocaleString("en-US")}`, levels[`at${ACCOUNTS}`]],
          ]
        : [[scenario, levels]];
      for (const [title, f] of sets)
        other.push([
          title,
          `${run.backend} ×${run.workers}`,
          ...OTHER_LEVELS.flatMap((c) => [
            withSpread(f[`c${c}`].requestsPerSecond),
            `${n(f[`c${c}`].p50Ms.median)} / ${n(f[`c${c}`].p99Ms.median)}`,
          ]),
        ]);
    }
  }
  if (other.length > 1) lines.push(...align(other), "");
  const signups: string[][] = [
    ["signup", "backend", "c", "sign-ups/s", "÷ceiling", "p50 ms", "p99 ms", "p99÷p50", "server µs/req", "db µs/req"],
  ];
  for (const run of summary.backends) {
    const su = run.signup;
    if (!su) continue;
    for (const level of SIGNUP_LEVELS) {
      const f = su[`c${level}`];
      signups.push([
        `ceiling ${n(su.ceiling.singleCoreSignupsPerSecond.median)}/s`,
        `${run.backend} ×${run.workers}`,
        String(level),
        withSpread(f.requestsPerSecond),
        withSpread(f.toCeiling),
        withSpread(f.p50Ms),
        withSpread(f.p99Ms),
        withSpread(f.p99ToP50),
        f.serverCpuUsPerRequest === undefined ? "" : n(f.serverCpuUsPerRequest),
        f.databaseCpuUsPerRequest === undefined ? "" : n(f.databaseCpuUsPerRequest),
      ]);
    }
  }
  if (signups.length > 1) lines.push(...align(signups), "");
  const neighbours: string[][] = [
    [
      "noisy neighbour: victim's sign_raw_payload",
      "backend",
      "alone req/s",
      "p50 / p99 ms",
      "beside req/s",
      "p50 / p99 ms",
      "p50 ×",
      "p99 ×",
      "req/s ×",
    ],
  ];
  for (const run of summary.backends) {
    const nn = run.noisy_neighbour;
    if (!nn) continue;
    neighbours.push([
      `c${nn.shape.victimConcurrency}, attacker: ${nn.shape.attackerAccountLoops}× ${nn.shape.accountsPerActivity} accounts + ${nn.shape.attackerSigners} signers`,
      `${run.backend} ×${run.workers}`,
      n(nn.victimAlone.requestsPerSecond),
      `${n(nn.victimAlone.p50Ms)} / ${n(nn.victimAlone.p99Ms)}`,
      n(nn.victimBeside.requestsPerSecond),
      `${n(nn.victimBeside.p50Ms)} / ${n(nn.victimBeside.p99Ms)}`,
      n(nn.p50BesideToAlone),
      n(nn.p99BesideToAlone),
      n(nn.requestsPerSecondBesideToAlone),
    ]);
  }
  if (neighbours.length > 1) lines.push(...align(neighbours), "");
  const cost: string[][] = [
    [
      "metrics_cost: sign_raw_payload",
      "backend",
      "c",
      "on req/s",
      "off req/s",
      "on ÷ off",
      "on ÷ on",
      "off ÷ off",
      "on / off server µs/req",
    ],
  ];
  for (const run of summary.backends) {
    const mc = run.metrics_cost;
    if (!mc) continue;
    for (const level of LEVELS) {
      const at = mc[`c${level}`];
      cost.push([
        `scraped every ${mc.scrapeEveryMs} ms`,
        `${run.backend} ×${run.workers}`,
        String(level),
        withSpread(at.on.requestsPerSecond),
        withSpread(at.off.requestsPerSecond),
        withSpread(at.onToOff),
        withSpread(at.onToOn),
        withSpread(at.offToOff),
        `${at.on.serverCpuUsPerRequest === undefined ? "" : n(at.on.serverCpuUsPerRequest)} / ${at.off.serverCpuUsPerRequest === undefined ? "" : n(at.off.serverCpuUsPerRequest)}`,
      ]);
    }
  }
  if (cost.length > 1) lines.push(...align(cost), "");
  const million: string[][] = [
    ["million: one request at a time", "backend", "p50 ms at 1,000", `p50 ms at ${SUB_ORGANIZATIONS.toLocaleString("en-US")}`, "ratio"],
  ];
  const notes: string[] = [];
  for (const run of summary.backends) {
    const m = run.million;
    if (!m || typeof m === "string") continue;
    const [small, large] = [m.p50Ms[`at${m.subOrganizations.small}`], m.p50Ms[`at${m.subOrganizations.large}`]];
    for (const op of Object.keys(small))
      million.push([op, `${run.backend} ×${run.workers}`, n(small[op]), n(large[op]), n(m.p50RatioLargeToSmall[op])]);
    notes.push(
      `million, ${run.backend}: ${m.subOrganizations.counted.toLocaleString("en-US")} sub-organizations, filled at ${n(m.fill.perSecond)}/s, the log caught up ${n(m.fill.logCaughtUpSeconds)} s after; ` +
        `${n(m.storage.bytesPerSubOrganization)} bytes per sub-organization (${n(m.storage.marginalBytesPerSubOrganization)} each past 1,000): ` +
        m.storage.byTable
          .slice(0, 8)
          .map(
            (t: { table: string; tableBytesPerSubOrganization: number; indexBytesPerSubOrganization: number }) =>
              `${t.table} ${t.tableBytesPerSubOrganization}+${t.indexBytesPerSubOrganization}`,
          )
          .join(", ") +
        ` (rows+indexes); restart to /ready ${n(m.restartToReadyMs)} ms`,
    );
  }
  if (million.length > 1) lines.push(...align(million), ...notes, "");
  return lines.join("\n");
}

function align(rows: string[][]): string[] {
  const widths: number[] = [];
  // A row of fewer cells (a note) does not widen the columns.
  for (const row of rows) if (row.length > 3) row.forEach((cell, i) => (widths[i] = Math.max(widths[i] ?? 0, cell.length)));
  return rows.map((row) =>
    row
      .map((cell, i) => (i < row.length - 1 ? cell.padEnd(widths[i] ?? 0) : cell))
      .join("  ")
      .trimEnd(),
  );
}

if (import.meta.url === `file://${process.argv[1]}`) await runLoad();
