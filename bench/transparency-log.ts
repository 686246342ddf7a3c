// The transparency log's costs (docs/benchmarks.md#the-transparency-log), as ratios measured in the
// same run where a ratio is the question:
//  - commit: an activity's transaction (the organization's lock, the activity's row) while the log's
//    sequencer (services/log-sequencer.ts) appends each committed activity, as a server's does, over
//    the same transactions with no sequencer, alternating the two; one at a time (exclusive, as most
//    activities) and 32 at once (shared, as signatures, in batches);
//  - a log of BENCH_LOG_ENTRIES entries (default 1,000,000; its activities written directly, then
//    appended by the sequencer's transactions: their rate is measured): `sigil audit verify`'s check
//    of the whole log (seconds, entries a second), and the reads of an inclusion proof (the rows
//    get_inclusion_proof reads: p50 and p99 in ms), against reading the activity itself.
// SQLite always; PostgreSQL on a fresh database when BENCH_DATABASE_URL or TEST_DATABASE_URL is set.
// BENCH_TLOG_SCALE_ONLY=1: the log at scale only, without the commit cost.
//   node --import tsx bench/transparency-log.ts
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { openStore, lockOrganization, type Store } from "../src/store/database.js";
import { createOrganization } from "../src/operations/organizations/organizations.js";
import { insertActivity } from "../src/operations/activities/records.js";
import pino from "pino";
import { leafOfActivity, readHead, readProof, sequenceLog } from "../src/store/transparency-log.js";
import { BATCH as SEQUENCER_BATCH, LogSequencer } from "../src/services/log-sequencer.js";
import { planInclusion } from "../src/store/merkle.js";
import { defaultVerifyThreads, verifyStoredLog } from "../src/services/log-audit.js";
import { PAGE_LEAVES } from "../src/services/log-audit-leaves.js";
import { generateP256KeyPair } from "../src/crypto/keys.js";
import { newId } from "../src/store/ids.js";
import type { ActivitiesTable } from "../src/store/schema.js";

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const RUNS = Number(process.env.BENCH_RUNS ?? 3);
const ENTRIES = Number(process.env.BENCH_LOG_ENTRIES ?? 1_000_000);
const PROOFS = 1_000;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const round = (x: number, digits = 2) => Math.round(x * 10 ** digits) / 10 ** digits;

function activityRow(organizationId: string, userId: string, n: number): ActivitiesTable {
  const id = newId();
  const now = Date.now();
  return {
    id,
    organization_id: organizationId,
    type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
    status: "ACTIVITY_STATUS_COMPLETED",
    intent: JSON.stringify({
      signWith: "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
      payload: n.toString(16),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    }),
    result: JSON.stringify({ r: "ab".repeat(32), s: "cd".repeat(32), v: "00" }),
    failure: null,
    votes: JSON.stringify([
      {
        id: newId(),
        userId,
        user: { userId, userName: "bench" },
        activityId: id,
        selection: "VOTE_SELECTION_APPROVED",
        message: `{"n":${n}}`,
        publicKey: "02".padEnd(66, "1"),
        signature: "30".padEnd(140, "2"),
        scheme: "SIGNATURE_SCHEME_TK_API_P256",
        createdAt: now,
        credentialId: "k",
        credentialType: "CREDENTIAL_TYPE_API_KEY_P256",
      },
    ]),
    fingerprint: crypto.randomBytes(32).toString("hex"),
    timestamp_ms: String(now),
    user_id: userId,
    created_at: now,
    updated_at: now,
    prepared: null,
    request_id: null,
  };
}

async function freshPostgres(): Promise<{ url: string; drop: () => Promise<void> } | null> {
  const adminUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
  if (!adminUrl) return null;
  const name = `sigil_bench_tlog_${crypto.randomBytes(4).toString("hex")}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    drop: async () => {
      const c = new pg.Client({ connectionString: adminUrl });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/** Transactions per second and their median latency, `concurrency` at once, for SECONDS. */
async function rate(
  store: Store,
  organizationId: string,
  userId: string,
  withLog: boolean,
  mode: "exclusive" | "shared",
  concurrency: number,
) {
  const latencies: number[] = [];
  const sequencer = withLog ? new LogSequencer(store, pino({ level: "silent" })) : null;
  const until = performance.now() + SECONDS * 1000;
  let n = 0;
  const loop = async () => {
    while (performance.now() < until) {
      const row = activityRow(organizationId, userId, n++);
      const started = performance.now();
      await store.transact(mode, async (trx) => {
        await lockOrganization(trx, store.dialect, organizationId, mode);
        await insertActivity(trx, row);
      });
      sequencer?.notify();
      latencies.push(performance.now() - started);
    }
  };
  const started = performance.now();
  await Promise.all(Array.from({ length: concurrency }, loop));
  const elapsed = performance.now() - started;
  await sequencer?.flush();
  await sequencer?.close();
  return { perSecond: latencies.length / (elapsed / 1000), p50Ms: median(latencies) };
}

async function commitCost(store: Store, organizationId: string, userId: string) {
  const out: Record<string, unknown> = {};
  for (const [label, mode, concurrency] of [
    ["exclusive, one at a time", "exclusive", 1],
    ["shared, 32 at once", "shared", 32],
  ] as const) {
    await rate(store, organizationId, userId, true, mode, concurrency); // warm-up
    const rateRatios: number[] = [];
    const p50Ratios: number[] = [];
    for (let i = 0; i < RUNS; i++) {
      const without = await rate(store, organizationId, userId, false, mode, concurrency);
      const withLog = await rate(store, organizationId, userId, true, mode, concurrency);
      rateRatios.push(withLog.perSecond / without.perSecond);
      p50Ratios.push(withLog.p50Ms / without.p50Ms);
      out[`${label} run ${i + 1}`] = { without, withLog };
    }
    out[label] = { perSecondWithOverWithout: rateRatios.map((r) => round(r)), p50WithOverWithout: p50Ratios.map((r) => round(r)) };
  }
  return out;
}

/** An organization with ENTRIES final activities written directly, then appended by the sequencer's
 * transactions (as a server's sequencer would after a backlog): the rate of those is measured. */
async function fill(store: Store, organizationId: string, userId: string) {
  const started = performance.now();
  if ((await readHead(store.db, organizationId)).size > 0) throw new Error("fill expects an empty log");
  const BATCH = 500;
  let ids: string[] = [];
  for (let from = 0; from < ENTRIES; from += BATCH) {
    const rows = Array.from({ length: Math.min(BATCH, ENTRIES - from) }, (_, i) => activityRow(organizationId, userId, from + i));
    if (from % 100_000 < BATCH) ids = [...ids, ...rows.slice(0, 2).map((r) => r.id)];
    await store.transact("exclusive", (trx) => trx.insertInto("activities").values(rows).execute());
  }
  const sequencing = performance.now();
  let appended = 0;
  for (;;) {
    const n = await store.transact("exclusive", (trx) => sequenceLog(trx, store.dialect, organizationId, SEQUENCER_BATCH, Date.now()));
    appended += n;
    if (n < SEQUENCER_BATCH) break;
  }
  const sequencingSeconds = (performance.now() - sequencing) / 1000;
  if (appended !== ENTRIES) throw new Error(`the sequencer appended ${appended} of ${ENTRIES}`);
  return {
    seconds: round((performance.now() - started) / 1000, 1),
    sequencedPerSecond: Math.round(appended / sequencingSeconds),
    sample: ids,
  };
}

const percentile = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))]!;

async function atScale(store: Store, organizationId: string, userId: string) {
  const filled = await fill(store, organizationId, userId);
  // As `sigil audit verify` runs it: on one snapshot (cli/main.ts), with its default threads.
  const snapshot = <T>(work: (trx: Parameters<Parameters<Store["readSnapshot"]>[0]>[0]) => Promise<T>) =>
    store.dialect === "postgres" ? store.readSnapshot(work) : store.reader.transaction().execute(work);
  const verifyStarted = performance.now();
  const verified = await snapshot((trx) => verifyStoredLog(trx, organizationId, null));
  const verifySeconds = (performance.now() - verifyStarted) / 1000;
  if (verified.problem || verified.size !== ENTRIES) throw new Error(`the filled log does not verify: ${JSON.stringify(verified)}`);
  // Inclusion proofs of entries all over the log, against reading the activity itself: the reads
  // get_inclusion_proof makes (the activity, its leaf, the head, the proof's subtrees; a stored
  // checkpoint is read as the head is), and of those the leaf and the subtrees alone.
  const leaves = await store.reader
    .selectFrom("transparency_log_leaves")
    .select(["activity_id"])
    .where("organization_id", "=", organizationId)
    .where(
      "leaf_index",
      "in",
      Array.from({ length: PROOFS }, () => Math.floor(Math.random() * ENTRIES)),
    )
    .execute();
  const requestMs: number[] = [];
  const proofMs: number[] = [];
  const activityMs: number[] = [];
  for (const { activity_id } of leaves) {
    const started = performance.now();
    await store.reader
      .selectFrom("activities")
      .selectAll()
      .where("organization_id", "=", organizationId)
      .where("id", "=", activity_id)
      .executeTakeFirstOrThrow();
    activityMs.push(performance.now() - started);
    const leafStarted = performance.now();
    const leaf = (await leafOfActivity(store.reader, organizationId, activity_id))!;
    const head = await readHead(store.reader, organizationId);
    const proof = await readProof(store.reader, organizationId, planInclusion(leaf.leafIndex, head.size));
    const ended = performance.now();
    requestMs.push(ended - started);
    proofMs.push(ended - leafStarted);
    if (proof.length === 0 || proof.length > Math.ceil(Math.log2(ENTRIES))) throw new Error(`a proof of ${proof.length} hashes`);
  }
  return {
    entries: ENTRIES,
    fillSeconds: filled.seconds,
    sequencedPerSecond: filled.sequencedPerSecond,
    verifySeconds: round(verifySeconds, 1),
    verifiedPerSecond: Math.round(ENTRIES / verifySeconds),
    verifyThreads: ENTRIES >= 4 * PAGE_LEAVES ? defaultVerifyThreads() : 0,
    inclusionProofReadsP50Ms: round(median(requestMs), 3),
    inclusionProofReadsP99Ms: round(percentile(requestMs, 0.99), 3),
    leafAndSubtreesP50Ms: round(median(proofMs), 3),
    leafAndSubtreesP99Ms: round(percentile(proofMs, 0.99), 3),
    activityReadP50Ms: round(median(activityMs), 3),
    proofReadsOverActivityRead: round(median(requestMs) / median(activityMs)),
  };
}

async function backend(name: string, options: { dataDir: string; databaseUrl?: string }) {
  const store = await openStore({ dataDir: options.dataDir, databaseUrl: options.databaseUrl ?? null });
  try {
    const make = (n: string) =>
      createOrganization(store.db, {
        organizationName: n,
        userName: "bench",
        apiKeyName: "k",
        apiPublicKey: generateP256KeyPair().publicKey,
      });
    const commits = await make("commits");
    const scale = await make("scale");
    return {
      backend: name,
      commit: process.env.BENCH_TLOG_SCALE_ONLY ? null : await commitCost(store, commits.organizationId, commits.userId),
      atScale: await atScale(store, scale.organizationId, scale.userId),
    };
  } finally {
    await store.close();
  }
}

const results: unknown[] = [];
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-bench-tlog-"));
try {
  if (!process.env.BENCH_TLOG_ONLY || process.env.BENCH_TLOG_ONLY === "sqlite") results.push(await backend("sqlite", { dataDir }));
  const postgres = process.env.BENCH_TLOG_ONLY === "sqlite" ? null : await freshPostgres();
  if (postgres) {
    try {
      results.push(await backend("postgres", { dataDir, databaseUrl: postgres.url }));
    } finally {
      await postgres.drop();
    }
  }
} finally {
  fs.rmSync(dataDir, { recursive: true, force: true });
}
console.log(
  JSON.stringify(
    {
      date: new Date().toISOString(),
      machine: { cpus: os.availableParallelism(), node: process.version, loadAverage: os.loadavg() },
      secondsPerRun: SECONDS,
      runs: RUNS,
      results,
    },
    null,
    2,
  ),
);
