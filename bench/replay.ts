// `sigil policy replay` on 10,000 recorded activities (BENCH_REPLAY_ACTIVITIES), on SQLite and, when
// BENCH_DATABASE_URL or TEST_DATABASE_URL names a PostgreSQL server, on a fresh PostgreSQL database.
// The organization's activities are real ones — made through @turnkey/sdk-server against a started
// server: tags, Ethereum transactions signed (eth.tx), raw payloads (a wallet looked up), wallets
// refused — copied (new ids and fingerprints, older times) until there are as many as asked. The
// replay decides each twice (current and proposed policies); it is compared, in the same run, with
// reading those activities' rows alone (the floor no replay can beat), and timed end to end through
// the built CLI (process start included). Prints one JSON summary.
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import pg from "pg";
import pino from "pino";
import { Turnkey } from "@turnkey/sdk-server";
import { parseEther, serializeTransaction, type Hex } from "viem";
import { loadConfig } from "../src/config.js";
import { startServer } from "../src/http/server.js";
import { createOrganization } from "../src/operations/organizations/organizations.js";
import { generateP256KeyPair } from "../src/crypto/keys.js";
import { replayActivities } from "../src/activities/policy-replay.js";
import type { PolicySource } from "../src/policy/engine.js";
import type { Store } from "../src/store/database.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
const ACTIVITIES = Number(process.env.BENCH_REPLAY_ACTIVITIES ?? 10_000);
/** Real activities made through the API before they are copied: this many of each kind. */
const EACH = 25;
const FRIEND = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const round = (n: number, places = 2) => Math.round(n * 10 ** places) / 10 ** places;

async function seconds<T>(work: () => Promise<T>): Promise<{ value: T; seconds: number }> {
  const start = process.hrtime.bigint();
  const value = await work();
  return { value, seconds: Number(process.hrtime.bigint() - start) / 1e9 };
}

/** An organization with real activities of several kinds, then copies of them up to ACTIVITIES. */
async function recordActivities(store: Store, url: string) {
  const key = generateP256KeyPair();
  const org = await createOrganization(store.db, {
    organizationName: "replay",
    userName: "root",
    apiPublicKey: key.publicKey,
    apiKeyName: "root",
  });
  const client = (k: { publicKey: string; privateKey: string }) =>
    new Turnkey({
      apiBaseUrl: url,
      apiPublicKey: k.publicKey,
      apiPrivateKey: k.privateKey,
      defaultOrganizationId: org.organizationId,
    }).apiClient();
  const root = client(key);
  const aliceKey = generateP256KeyPair();
  const { userIds } = await root.createUsers({
    users: [
      {
        userName: "alice",
        apiKeys: [{ apiKeyName: "alice", publicKey: aliceKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
        authenticators: [],
        oauthProviders: [],
        userTags: [],
      },
    ],
  });
  const alice = client(aliceKey);
  const only = `approvers.any(u, u.id == '${userIds[0]}')`;
  const { addresses } = await root.createWallet({
    walletName: "hot",
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  });
  for (const [policyName, condition] of [
    ["tags", "activity.type == 'ACTIVITY_TYPE_CREATE_USER_TAG'"],
    ["pay friends", `activity.type == 'ACTIVITY_TYPE_SIGN_TRANSACTION_V2' && eth.tx.to == '${FRIEND}'`],
    ["sign with hot", "activity.type == 'ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2' && wallet.label == 'hot'"],
  ])
    await root.createPolicy({ policyName, effect: "EFFECT_ALLOW", condition, consensus: only, notes: "" });
  for (let i = 0; i < EACH; i++) {
    await alice.createUserTag({ userTagName: `tag ${i}`, userIds: [] });
    const unsignedTransaction = serializeTransaction({
      chainId: 1,
      to: FRIEND as Hex,
      value: parseEther(String(i % 3)),
      nonce: i,
      gas: 21_000n,
      maxFeePerGas: 1n,
      maxPriorityFeePerGas: 1n,
      type: "eip1559",
    }).slice(2);
    await alice.signTransaction({ signWith: addresses[0]!, unsignedTransaction, type: "TRANSACTION_TYPE_ETHEREUM" });
    await alice.signRawPayload({
      signWith: addresses[0]!,
      payload: `0x${i.toString(16).padStart(2, "0")}`,
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    });
    await alice.createWallet({ walletName: `w${i}`, accounts: [] }).catch(() => undefined);
  }
  const real = await store.db.selectFrom("activities").selectAll().where("organization_id", "=", org.organizationId).execute();
  const evaluations = await store.db
    .selectFrom("policy_evaluations")
    .selectAll()
    .where("organization_id", "=", org.organizationId)
    .execute();
  const firstEvaluation = new Map<string, (typeof evaluations)[number]>();
  for (const e of evaluations.sort((a, b) => a.created_at - b.created_at))
    if (!firstEvaluation.has(e.activity_id)) firstEvaluation.set(e.activity_id, e);
  const oldest = Math.min(...real.map((r) => r.created_at));
  const copies = [];
  const copiedEvaluations = [];
  for (let i = 0; real.length + copies.length < ACTIVITIES; i++) {
    const from = real[i % real.length]!;
    const id = crypto.randomUUID();
    copies.push({
      ...from,
      id,
      fingerprint: crypto.randomBytes(32).toString("hex"),
      created_at: oldest - 1000 * (i + 1),
      updated_at: oldest - 1000 * (i + 1),
    });
    const evaluation = firstEvaluation.get(from.id);
    if (evaluation)
      copiedEvaluations.push({ ...evaluation, id: crypto.randomUUID(), activity_id: id, created_at: oldest - 1000 * (i + 1) });
  }
  for (let i = 0; i < copies.length; i += 500)
    await store.db
      .insertInto("activities")
      .values(copies.slice(i, i + 500))
      .execute();
  for (let i = 0; i < copiedEvaluations.length; i += 500)
    await store.db
      .insertInto("policy_evaluations")
      .values(copiedEvaluations.slice(i, i + 500))
      .execute();
  return { organizationId: org.organizationId, realActivities: real.length, only };
}

async function backendRun(backend: "sqlite" | "postgres", databaseUrl: string | null) {
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-bench-replay-"));
  const config = loadConfig(
    { SIGIL_LOG_LEVEL: "warn", ...(databaseUrl ? { SIGIL_DATABASE_URL: databaseUrl } : {}) },
    { host: "127.0.0.1", dataDir },
  );
  config.port = 0;
  const server = await startServer(config, pino({ level: "warn" }));
  try {
    const made = await recordActivities(server.store, server.url);
    // The proposal: signing more than one ether denied, tags no longer allowed, wallets allowed.
    const proposed: PolicySource[] = [
      { id: "pay friends", effect: "EFFECT_ALLOW", condition: `eth.tx.to == '${FRIEND}'`, consensus: made.only, time: null },
      { id: "nothing over one ether", effect: "EFFECT_DENY", condition: "eth.tx.value > 1000000000000000000", consensus: null, time: null },
      { id: "sign with hot", effect: "EFFECT_ALLOW", condition: "wallet.label == 'hot'", consensus: made.only, time: null },
      {
        id: "wallets",
        effect: "EFFECT_ALLOW",
        condition: "activity.type == 'ACTIVITY_TYPE_CREATE_WALLET'",
        consensus: made.only,
        time: null,
      },
    ];
    const names = new Map(proposed.map((p) => [p.id, p.id]));
    const reader = server.store.reader;
    const floor = await seconds(() =>
      reader
        .selectFrom("activities")
        .selectAll()
        .where("organization_id", "=", made.organizationId)
        .orderBy("created_at", "desc")
        .limit(ACTIVITIES)
        .execute(),
    );
    const concurrency = backend === "postgres" ? 32 : 1;
    const replay = await seconds(() =>
      replayActivities(reader, made.organizationId, { policies: proposed, names }, ACTIVITIES, concurrency),
    );
    const file = path.join(dataDir, "proposed.json");
    fs.writeFileSync(
      file,
      JSON.stringify(proposed.map((p) => ({ policyName: p.id, effect: p.effect, condition: p.condition, consensus: p.consensus }))),
    );
    const env = { ...process.env, ...(databaseUrl ? { SIGIL_DATABASE_URL: databaseUrl } : {}) };
    const cli = await seconds(() =>
      run(
        process.execPath,
        [
          CLI,
          "policy",
          "replay",
          "--organization",
          made.organizationId,
          "--policies",
          file,
          "--last",
          String(ACTIVITIES),
          "--json",
          "--data-dir",
          dataDir,
        ],
        {
          env,
          maxBuffer: 1 << 28,
        },
      ),
    );
    const report = replay.value;
    return {
      backend,
      activities: report.activities,
      realActivities: made.realActivities,
      replayed: report.replayed,
      changed: report.changed.length,
      summary: report.summary,
      concurrency,
      replaySeconds: round(replay.seconds),
      microsecondsPerActivity: round((replay.seconds * 1e6) / report.activities, 0),
      readingTheRowsSeconds: round(floor.seconds, 3),
      replayToReadingTheRows: round(replay.seconds / floor.seconds, 0),
      cliEndToEndSeconds: round(cli.seconds),
    };
  } finally {
    await server.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

export async function runReplayBench() {
  const results = [await backendRun("sqlite", null)];
  const pgUrl = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL;
  if (pgUrl) {
    const name = `sigil_bench_replay_${crypto.randomBytes(4).toString("hex")}`;
    const admin = new pg.Client({ connectionString: pgUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${name}`);
    try {
      const url = new URL(pgUrl);
      url.pathname = `/${name}`;
      results.push(await backendRun("postgres", url.toString()));
    } finally {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    }
  }
  const summary = { machine: { cpus: os.cpus().length, node: process.version, loadAverage: os.loadavg().map((l) => round(l)) }, results };
  console.log(JSON.stringify(summary, null, 2));
  return summary;
}
