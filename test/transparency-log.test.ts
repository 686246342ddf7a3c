// Each organization's transparency log (docs/audit-log.md): the RFC 9162 tree and its proofs, every
// activity that reaches a final status appended by the sequencer after its commit (submitted,
// approved, rejected, refused, signatures side by side), an inclusion proof asked before the sequencer
// ran, the maximum merge delay, sub-organizations' own logs, the signed checkpoints and the three
// queries in Sigil's namespace, and two server processes on one database keeping one log with no gap
// and no fork.
import crypto from "node:crypto";
import path from "node:path";
import { Worker } from "node:worker_threads";
import BetterSqlite3 from "better-sqlite3";
import { CompiledQuery, Kysely, Migrator, PostgresDialect, SqliteDialect, sql } from "kysely";
import pg from "pg";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toHex } from "viem";
import { startHarness, newKeyPair, signedRequest, type Harness, type ApiKeyPair } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";
import { cliDeployment } from "./helpers/processes.js";
import { loadConfig } from "../src/config.js";
import { openStore } from "../src/store/database.js";
import { backend, createTestDatabase } from "./helpers/backend.js";
import { createOrganization } from "../src/operations/organizations/organizations.js";
import {
  activityLeafHash,
  appendOf,
  canonicalJson,
  commitPlan,
  leafOfActivity,
  oldestPending,
  planBatch,
  batchRead,
  sequenceLog,
  vacuumPending,
} from "../src/store/transparency-log.js";
import { LogPlanThread } from "../src/store/log-plan-thread.js";
import { migrations } from "../src/store/migrations.js";
import type { Db } from "../src/store/handles.js";
import { BATCH, LogSequencer, MAXIMUM_MERGE_DELAY_MS, PLANNED_BATCH } from "../src/services/log-sequencer.js";
import { newId } from "../src/store/ids.js";
import {
  appendLeaf,
  EMPTY_ROOT,
  leafHash,
  nodeHash,
  planConsistency,
  planInclusion,
  rootOf,
  subtreeKey,
  verifyConsistency,
  verifyInclusion,
  type Frontier,
  type Hash,
} from "../src/store/merkle.js";
import { verifyStoredLog } from "../src/services/log-audit.js";
import { openNote, parseCheckpoint, parseVerifierKey } from "../src/services/log-checkpoints.js";

/** MTH straight from RFC 9162's definition, over the leaves' hashes. */
function referenceRoot(leaves: Hash[]): Hash {
  if (leaves.length === 0) return EMPTY_ROOT;
  if (leaves.length === 1) return leaves[0]!;
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return nodeHash(referenceRoot(leaves.slice(0, k)), referenceRoot(leaves.slice(k)));
}

describe("the RFC 9162 tree", () => {
  const leaves = Array.from({ length: 37 }, (_, i) => leafHash(Buffer.from(`entry ${i}`)));
  // Every complete subtree, as a store keeps them.
  const subtrees = new Map<string, Hash>();
  let frontier: Frontier = { size: 0, hashes: [] };
  const roots: Hash[] = [EMPTY_ROOT];
  for (const [i, leaf] of leaves.entries()) {
    subtrees.set(subtreeKey({ level: 0, index: i }), leaf);
    const appended = appendLeaf(frontier, leaf);
    frontier = appended.frontier;
    for (const c of appended.completed) subtrees.set(subtreeKey(c.subtree), c.hash);
    roots.push(rootOf(frontier));
  }

  it("keeps the root of every size as the RFC defines it, and the hash of every complete subtree", () => {
    for (let n = 0; n <= leaves.length; n++) expect(roots[n]!.equals(referenceRoot(leaves.slice(0, n))), `size ${n}`).toBe(true);
    expect(subtrees.get("5/0")!.equals(referenceRoot(leaves.slice(0, 32)))).toBe(true);
    expect(subtrees.get("2/8")!.equals(referenceRoot(leaves.slice(32, 36)))).toBe(true);
  });

  it("makes inclusion and consistency proofs that verify, and that fail for another leaf, size or root", () => {
    for (let n = 1; n <= leaves.length; n++) {
      for (let m = 0; m < n; m++) {
        const proof = planInclusion(m, n).assemble(subtrees);
        expect(verifyInclusion(m, n, leaves[m]!, proof, roots[n]!), `leaf ${m} of ${n}`).toBe(true);
        expect(verifyInclusion(m, n, leaves[(m + 1) % n]!, proof, roots[n]!) && n > 1).toBe(false);
        if (proof.length > 0) {
          const altered = proof.map((p, i) => (i === 0 ? Buffer.from(p.map((b) => b ^ 1)) : p));
          expect(verifyInclusion(m, n, leaves[m]!, altered, roots[n]!)).toBe(false);
        }
      }
      for (let m = 0; m <= n; m++) {
        const proof = planConsistency(m, n).assemble(subtrees);
        expect(verifyConsistency(m, n, roots[m]!, roots[n]!, proof), `${m} to ${n}`).toBe(true);
        if (m > 0 && m < n) expect(verifyConsistency(m, n, roots[m - 1]!, roots[n]!, proof)).toBe(false);
      }
    }
    expect(() => planInclusion(5, 5)).toThrow("leaf 5 is not in a tree of 5");
    expect(() => planConsistency(6, 5)).toThrow("no consistency proof from 6 to 5");
  });
});

let h: Harness;
let verifierKey: string;

beforeAll(async () => {
  h = await startHarness();
  verifierKey = ((await (await fetch(`${h.url}/.well-known/sigil.json`)).json()) as { transparencyLogVerifierKey: string })
    .transparencyLogVerifierKey;
});
afterAll(() => h.close());

async function query(name: string, body: unknown, key: ApiKeyPair) {
  const request = signedRequest(body, key);
  const res = await fetch(`${h.url}/sigil/v1/query/${name}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...request.headers },
    body: request.body,
  });
  return { status: res.status, json: (await res.json()) as any };
}

/** The organization's leaves, once the server's sequencer appended what was committed (it runs in the
 * background: flushed here). */
/** `count` completed activities of the organization, as rows to write straight into the store (each
 * made pending by the trigger): a backlog as a bulk import or a busy second makes one. */
function finalActivityRows(organizationId: string, count: number) {
  return Array.from({ length: count }, (_, i) => {
    const id = newId();
    return {
      id,
      organization_id: organizationId,
      type: "ACTIVITY_TYPE_CREATE_USERS_V4",
      status: "ACTIVITY_STATUS_COMPLETED",
      intent: JSON.stringify({ n: i }),
      result: "{}",
      failure: null,
      votes: "[]",
      fingerprint: `final-${id}`,
      timestamp_ms: String(Date.now()),
      user_id: null,
      created_at: Date.now(),
      updated_at: Date.now(),
    };
  });
}

async function leavesOf(organizationId: string) {
  await h.server.logSequencer.flush();
  return h.server.store.db
    .selectFrom("transparency_log_leaves")
    .select(["leaf_index", "activity_id"])
    .where("organization_id", "=", organizationId)
    .orderBy("leaf_index")
    .execute();
}

const now = () => String(Date.now());
const b64 = (text: string) => Buffer.from(text, "base64");

describe("an organization's log", () => {
  it("appends each activity when it reaches a final status — completed, failed, rejected, or completed by an approval — and no other", async () => {
    const { org, root, members } = await organizationWith(h, ["alice", "bob"]);
    const logged: string[] = [];
    const lastActivity = async () =>
      (
        await h.server.store.db
          .selectFrom("activities")
          .select(["id", "status"])
          .where("organization_id", "=", org.organizationId)
          .orderBy("created_at", "desc")
          .orderBy("id", "desc")
          .executeTakeFirstOrThrow()
      ).id;
    logged.push(await lastActivity()); // the users' creation
    await root.updateRootQuorum({ threshold: 2, userIds: [org.userId, members.bob!.userId] });
    logged.push(await lastActivity());
    const createUser = (userName: string) =>
      h.http(org.key).createUsers({
        type: "ACTIVITY_TYPE_CREATE_USERS_V4",
        timestampMs: now(),
        organizationId: org.organizationId,
        parameters: { users: [{ userName, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] },
      });
    const waiting = (await createUser("carol")).activity;
    expect(waiting.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    expect((await leavesOf(org.organizationId)).map((l) => l.activity_id)).toEqual(logged);
    const pendingProof = await query("get_inclusion_proof", { organizationId: org.organizationId, activityId: waiting.id }, org.key);
    expect(pendingProof.status).toBe(404);
    expect(pendingProof.json.details[0].turnkeyErrorCode).toBe("LOG_ENTRY_NOT_FOUND");
    expect(pendingProof.json.message).toContain("it is ACTIVITY_STATUS_CONSENSUS_NEEDED");

    const bob = h.http(members.bob!.key);
    const rejected = await bob.rejectActivity({
      type: "ACTIVITY_TYPE_REJECT_ACTIVITY",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { fingerprint: waiting.fingerprint },
    });
    expect(rejected.activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    logged.push(waiting.id);
    const second = (await createUser("dave")).activity;
    const approved = await bob.approveActivity({
      type: "ACTIVITY_TYPE_APPROVE_ACTIVITY",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { fingerprint: second.fingerprint },
    });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    logged.push(second.id);
    // alice has no policy allowing her anything: her activity is recorded FAILED.
    await expect(
      members.alice!.client.createUsers({
        users: [{ userName: "eve", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
      }),
    ).rejects.toThrow();
    const failed = await h.server.store.db
      .selectFrom("activities")
      .select(["id", "status"])
      .where("organization_id", "=", org.organizationId)
      .where("user_id", "=", members.alice!.userId)
      .executeTakeFirstOrThrow();
    expect(failed.status).toBe("ACTIVITY_STATUS_FAILED");
    logged.push(failed.id);

    const leaves = await leavesOf(org.organizationId);
    expect(leaves.map((l) => l.activity_id)).toEqual(logged);
    expect(leaves.map((l) => Number(l.leaf_index))).toEqual([0, 1, 2, 3, 4]);
    const verified = await verifyStoredLog(h.server.store.db, org.organizationId, parseVerifierKey(verifierKey));
    expect(verified).toMatchObject({ size: 5, problem: null });

    // Every entry proves its inclusion in a checkpoint the published key signed.
    const checkpoint = await query("get_log_checkpoint", { organizationId: org.organizationId }, org.key);
    expect(checkpoint.status).toBe(200);
    expect(checkpoint.json.verifierKey).toBe(verifierKey);
    const body = parseCheckpoint(openNote(checkpoint.json.checkpoint.note, parseVerifierKey(verifierKey)));
    expect(body).toMatchObject({ origin: `${verifierKey.split("+")[0]}/organizations/${org.organizationId}`, size: 5 });
    expect(body.root.toString("base64")).toBe(verified.rootHash);
    for (const [i, id] of logged.entries()) {
      const proof = await query("get_inclusion_proof", { organizationId: org.organizationId, activityId: id }, members.alice!.key);
      expect(proof.status).toBe(200);
      expect(proof.json.leafIndex).toBe(i);
      const entry = JSON.parse(proof.json.entry);
      expect(entry).toMatchObject({ id, leafIndex: i, organizationId: org.organizationId });
      // The stamps' public keys are there; the voters' names and emails, and the signed bodies, are not.
      expect(entry.votes[0].publicKey).toMatch(/^0[23][0-9a-f]{64}$/);
      for (const vote of entry.votes)
        expect(Object.keys(vote).sort()).toEqual([
          "createdAt",
          "credentialId",
          "credentialType",
          "id",
          "messageSha256",
          "publicKey",
          "scheme",
          "selection",
          "signature",
          "userId",
        ]);
      const leaf = leafHash(Buffer.from(proof.json.entry, "utf8"));
      expect(leaf.toString("base64")).toBe(proof.json.leafHash);
      expect(verifyInclusion(i, 5, leaf, proof.json.proof.map(b64), body.root)).toBe(true);
    }
  });

  it("refuses a proof for a size the log does not have, an unknown activity and an unknown field, changing nothing", async () => {
    const { org } = await organizationWith(h, ["frank"]);
    const [first] = await leavesOf(org.organizationId);
    const checkpoints = () => h.server.store.db.selectFrom("transparency_log_checkpoints").selectAll().execute();
    const before = [await h.snapshot(), await checkpoints()];
    const cases: [string, Record<string, unknown>, number, string, string][] = [
      [
        "get_inclusion_proof",
        { activityId: first!.activity_id, treeSize: 2 },
        400,
        "LOG_SIZE_INVALID",
        "larger than the organization's log",
      ],
      [
        "get_inclusion_proof",
        { activityId: first!.activity_id, treeSize: 0 },
        400,
        "LOG_SIZE_INVALID",
        "a tree of 0 entries does not hold it",
      ],
      ["get_inclusion_proof", { activityId: "no-such-activity" }, 404, "ACTIVITY_NOT_FOUND", "activity no-such-activity not found"],
      ["get_consistency_proof", { fromSize: 3, toSize: 1 }, 400, "LOG_SIZE_INVALID", "fromSize 3 is larger than toSize 1"],
      ["get_consistency_proof", { fromSize: -1 }, 400, "REQUEST_INVALID", "fromSize"],
      ["get_log_checkpoint", { since: 1 }, 400, "REQUEST_INVALID", "since"],
    ];
    for (const [name, body, status, code, message] of cases) {
      const answer = await query(name, { organizationId: org.organizationId, ...body }, org.key);
      expect(answer.status, `${name} ${JSON.stringify(body)}`).toBe(status);
      expect(answer.json.details[0].turnkeyErrorCode).toBe(code);
      expect(answer.json.message).toContain(message);
    }
    expect([await h.snapshot(), await checkpoints()]).toEqual(before);
  });

  it("proves to an auditor holding an old checkpoint that the log only grew", async () => {
    const { org, root } = await organizationWith(h, []);
    await root.createUsers({ users: [{ userName: "u1", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] });
    // The checkpoint is of the log as the sequencer left it: appended first.
    await h.server.logSequencer.flush();
    const old = (await query("get_log_checkpoint", { organizationId: org.organizationId }, org.key)).json.checkpoint;
    expect(old.treeSize).toBe(1);
    for (const name of ["u2", "u3", "u4"])
      await root.createUsers({ users: [{ userName: name, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] });
    await h.server.logSequencer.flush();
    const answer = await query("get_consistency_proof", { organizationId: org.organizationId, fromSize: 1 }, org.key);
    expect(answer.status).toBe(200);
    const latest = parseCheckpoint(openNote(answer.json.checkpoint.note, parseVerifierKey(verifierKey)));
    expect(latest.size).toBe(4);
    expect(verifyConsistency(1, 4, b64(old.rootHash), latest.root, answer.json.proof.map(b64))).toBe(true);
    // The same proof does not make a different old root consistent.
    expect(verifyConsistency(1, 4, leafHash(Buffer.from("forged")), latest.root, answer.json.proof.map(b64))).toBe(false);
    // A size between checkpoints has a root too (the server's word, no note).
    const at3 = await query("get_consistency_proof", { organizationId: org.organizationId, fromSize: 1, toSize: 3 }, org.key);
    expect(at3.json.checkpoint).toMatchObject({ treeSize: 3, note: null });
    expect(verifyConsistency(1, 3, b64(old.rootHash), b64(at3.json.checkpoint.rootHash), at3.json.proof.map(b64))).toBe(true);
  });

  it("gives a sub-organization a log of its own", async () => {
    const { org, root } = await organizationWith(h, []);
    const key = newKeyPair();
    const sub = await root.createSubOrganization({
      subOrganizationName: "sub",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "owner",
          apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    await h
      .sdk({ organizationId: sub.subOrganizationId }, key)
      .createUsers({ users: [{ userName: "in sub", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] });
    expect(await leavesOf(org.organizationId)).toHaveLength(1);
    expect(await leavesOf(sub.subOrganizationId)).toHaveLength(1);
    expect((await verifyStoredLog(h.server.store.db, sub.subOrganizationId, null)).problem).toBeNull();
    // The parent reads the sub-organization's log, as it reads its activities.
    const checkpoint = await query("get_log_checkpoint", { organizationId: sub.subOrganizationId }, org.key);
    expect(checkpoint.json.checkpoint.origin).toBe(`${verifierKey.split("+")[0]}/organizations/${sub.subOrganizationId}`);
  });

  it("keeps one log with no gap while signatures run side by side with other activities", async () => {
    const { org, root } = await organizationWith(h, []);
    const wallet = await root.createWallet({
      walletName: "w",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    const signWith = wallet.addresses[0]!;
    await Promise.all([
      ...Array.from({ length: 40 }, (_, i) =>
        root.signRawPayload({
          signWith,
          payload: toHex(`payload ${i}`).slice(2),
          encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
          hashFunction: "HASH_FUNCTION_KECCAK256",
        }),
      ),
      ...Array.from({ length: 5 }, (_, i) =>
        root.createUsers({ users: [{ userName: `c${i}`, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] }),
      ),
    ]);
    const leaves = await leavesOf(org.organizationId);
    expect(leaves.map((l) => Number(l.leaf_index))).toEqual(Array.from({ length: 46 }, (_, i) => i));
    expect((await verifyStoredLog(h.server.store.db, org.organizationId, parseVerifierKey(verifierKey))).problem).toBeNull();
  });
});

describe("the sequencer", () => {
  it("answers an inclusion proof asked as soon as the activity completed, appending it then if it is not yet", async () => {
    const { org } = await organizationWith(h, []);
    const base = (await leavesOf(org.organizationId)).length;
    for (let i = base; i < base + 5; i++) {
      const created = await h.http(org.key).createUsers({
        type: "ACTIVITY_TYPE_CREATE_USERS_V4",
        timestampMs: now(),
        organizationId: org.organizationId,
        parameters: { users: [{ userName: `p${i}`, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] },
      });
      expect(created.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      const proof = await query("get_inclusion_proof", { organizationId: org.organizationId, activityId: created.activity.id }, org.key);
      expect(proof.status, JSON.stringify(proof.json)).toBe(200);
      expect(proof.json.leafIndex).toBe(i);
      const body = parseCheckpoint(openNote(proof.json.checkpoint.note, parseVerifierKey(verifierKey)));
      expect(verifyInclusion(i, body.size, b64(proof.json.leafHash), proof.json.proof.map(b64), body.root)).toBe(true);
    }
  });
});

describe("the sequencer's transactions", () => {
  it("appends a backlog in transactions of at most BATCH activities (PLANNED_BATCH when SQLite's thread hashes them), so that none holds the event loop (and SQLite's writer) long", async () => {
    const { org } = await organizationWith(h, []);
    await h.server.logSequencer.flush();
    const base = (await leavesOf(org.organizationId)).length;
    const batch = h.server.store.dialect === "sqlite" ? PLANNED_BATCH : BATCH;
    const backlog = 2 * batch + 50;
    const tally = h.server.store.statements;
    tally.texts = [];
    try {
      // A backlog made at once (as a bulk import or a busy second makes one): final activities written
      // straight into the store in one transaction, each made pending by the trigger.
      await h.server.store.db.insertInto("activities").values(finalActivityRows(org.organizationId, backlog)).execute();
      await h.server.logSequencer.flush();
      // Whoever appended them (a sweep, or the flush): one delete of pending rows per transaction.
      const appends = tally.texts.filter((text) => text.includes('delete from "transparency_log_pending"')).length;
      expect(appends).toBe(Math.ceil(backlog / batch));
    } finally {
      tally.texts = null;
    }
    expect((await leavesOf(org.organizationId)).length).toBe(base + backlog);
    expect(BATCH).toBeLessThanOrEqual(100);
  });
});

describe("the maximum merge delay", () => {
  it("is a problem for sigil audit verify once a final activity waited longer, and pending before; sequencing clears it", async () => {
    // A database no server sequences: what a crash, or a sequencer that stopped, leaves.
    const database = await createTestDatabase();
    const store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir });
    try {
      const { organizationId, userId } = await createOrganization(store.db, {
        organizationName: "unsequenced",
        userName: "u",
        apiKeyName: "k",
        apiPublicKey: newKeyPair().publicKey,
      });
      const finalAt = Date.now();
      const activity = (id: string, status: string) => ({
        id,
        organization_id: organizationId,
        type: "ACTIVITY_TYPE_CREATE_USERS_V3",
        status,
        intent: "{}",
        result: "{}",
        failure: null,
        votes: "[]",
        fingerprint: id,
        timestamp_ms: String(finalAt),
        user_id: userId,
        created_at: finalAt,
        updated_at: finalAt,
        prepared: null,
        request_id: null,
      });
      await store.db
        .insertInto("activities")
        .values([activity("a-final", "ACTIVITY_STATUS_COMPLETED"), activity("a-waiting", "ACTIVITY_STATUS_CONSENSUS_NEEDED")])
        .execute();
      expect(await verifyStoredLog(store.db, organizationId, null, finalAt + 1_000)).toMatchObject({ size: 0, pending: 1, problem: null });
      expect(await verifyStoredLog(store.db, organizationId, null, finalAt + MAXIMUM_MERGE_DELAY_MS + 1_000)).toMatchObject({
        problem: { leafIndex: null, activityId: "a-final", problem: expect.stringContaining("the maximum merge delay is 60 s") },
      });
      expect(await store.transact("exclusive", (trx) => sequenceLog(trx, store.dialect, organizationId, 10, Date.now()))).toBe(1);
      // Sequenced once: a second run finds nothing, and the waiting activity is not in the log.
      expect(await store.transact("exclusive", (trx) => sequenceLog(trx, store.dialect, organizationId, 10, Date.now()))).toBe(0);
      expect(await verifyStoredLog(store.db, organizationId, null, finalAt + MAXIMUM_MERGE_DELAY_MS + 1_000)).toMatchObject({
        size: 1,
        pending: 0,
        problem: null,
      });
    } finally {
      await store.close();
      await database.drop();
    }
  });
});

describe("migration 0034_transparency_log_pending", () => {
  /** A database migrated through 0033, holding a log as the sequencer of 0028 kept it: entries 0 and 1
   * (each activity's log_index set), one final activity not yet appended, one waiting for votes. */
  async function logBefore0034(places: [number, number]) {
    const database = await createTestDatabase();
    // biome-ignore lint/suspicious/noExplicitAny: the schema as of migration 0033, not today's typed one
    const db = new Kysely<any>({
      dialect: database.databaseUrl
        ? new PostgresDialect({ pool: new pg.Pool({ connectionString: database.databaseUrl, max: 1 }) })
        : new SqliteDialect({ database: new BetterSqlite3(path.join(database.dataDir, "migration.db")) }),
    });
    const dialect = database.databaseUrl ? ("postgres" as const) : ("sqlite" as const);
    const migrateThrough = async (last: string) => {
      const chosen = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= last));
      return (await new Migrator({ db, provider: { getMigrations: async () => chosen } }).migrateToLatest()).error;
    };
    expect(await migrateThrough("0033_sub_organization_lookups")).toBeUndefined();
    await db
      .insertInto("organizations")
      .values({ id: "org", name: "before", root_quorum_threshold: 1, created_at: 1, updated_at: 1 })
      .execute();
    const activity = (id: string, status: string, at: number) => ({
      id,
      organization_id: "org",
      type: "ACTIVITY_TYPE_CREATE_USERS_V3",
      status,
      intent: `{"createUsersIntentV3":{"n":"${id}"}}`,
      result: "{}",
      failure: null,
      votes: "[]",
      fingerprint: id,
      timestamp_ms: String(at),
      user_id: null,
      created_at: at,
      updated_at: at,
      prepared: null,
      request_id: null,
    });
    const rows = [
      activity("a-0", "ACTIVITY_STATUS_COMPLETED", 1_000),
      activity("a-1", "ACTIVITY_STATUS_FAILED", 2_000),
      activity("a-2", "ACTIVITY_STATUS_COMPLETED", 3_000),
      activity("a-3", "ACTIVITY_STATUS_CONSENSUS_NEEDED", 4_000),
    ];
    await db.insertInto("activities").values(rows).execute();
    let frontier: Frontier = { size: 0, hashes: [] };
    for (const row of rows.slice(0, 2)) {
      const { append, next } = appendOf(frontier, row.id, activityLeafHash(row, frontier.size));
      await db
        .insertInto("transparency_log_leaves")
        .values({ organization_id: "org", leaf_index: append.leafIndex, activity_id: row.id, leaf_hash: append.leafHash })
        .execute();
      for (const n of append.nodes)
        await db
          .insertInto("transparency_log_nodes")
          .values({ organization_id: "org", ...n })
          .execute();
      frontier = next;
    }
    await db
      .insertInto("transparency_log_heads")
      .values({
        organization_id: "org",
        size: 2,
        root_hash: rootOf(frontier).toString("hex"),
        frontier: frontier.hashes.map((x) => x.toString("hex")).join(""),
        updated_at: 2_000,
      })
      .execute();
    for (const [i, id] of ["a-0", "a-1"].entries())
      await db.updateTable("activities").set({ log_index: places[i] }).where("id", "=", id).execute();
    return {
      database,
      db,
      dialect,
      migrateThrough,
      close: async () => {
        await db.destroy();
        await database.drop();
      },
    };
  }

  it("carries an existing log over: its entries, the final activities not yet appended, and nothing in the activity rows", async () => {
    const { db, dialect, migrateThrough, close } = await logBefore0034([0, 1]);
    try {
      expect(await migrateThrough("0034_transparency_log_pending")).toBeUndefined();
      expect(await db.selectFrom("transparency_log_pending").selectAll().execute()).toEqual([
        { organization_id: "org", activity_id: "a-2" },
      ]);
      expect(Object.keys(await db.selectFrom("activities").selectAll().where("id", "=", "a-0").executeTakeFirstOrThrow())).not.toContain(
        "log_index",
      );
      const store = db as unknown as Db;
      expect((await leafOfActivity(store, "org", "a-1"))?.leafIndex).toBe(1);
      expect(await leafOfActivity(store, "org", "a-2")).toBeUndefined();
      expect(await verifyStoredLog(store, "org", null, 4_000)).toMatchObject({ size: 2, pending: 1, problem: null });
      // The carried-over pending activity is appended as entry 2; the waiting one, once final (the
      // trigger marks it pending in the same statement), as entry 3.
      expect(await db.transaction().execute((trx) => sequenceLog(trx, dialect, "org", 10, 5_000))).toBe(1);
      await db.updateTable("activities").set({ status: "ACTIVITY_STATUS_REJECTED", updated_at: 6_000 }).where("id", "=", "a-3").execute();
      expect(await db.selectFrom("transparency_log_pending").select("activity_id").execute()).toEqual([{ activity_id: "a-3" }]);
      expect(await db.transaction().execute((trx) => sequenceLog(trx, dialect, "org", 10, 7_000))).toBe(1);
      expect((await leafOfActivity(store, "org", "a-3"))?.leafIndex).toBe(3);
      expect(await verifyStoredLog(store, "org", null, 8_000)).toMatchObject({ size: 4, pending: 0, problem: null });
    } finally {
      await close();
    }
  });

  it("stops, changing nothing, where an activity says it is an entry that records another", async () => {
    const { db, migrateThrough, close } = await logBefore0034([0, 0]);
    try {
      const error = await migrateThrough("0034_transparency_log_pending");
      expect(String(error)).toContain("1 activities say they are an entry of their transparency log that records another activity");
      const places = await db.selectFrom("activities").select(["id", "log_index"]).orderBy("id").execute();
      expect(places.map((r) => [r.id, r.log_index === null ? null : Number(r.log_index)])).toEqual([
        ["a-0", 0],
        ["a-1", 0],
        ["a-2", null],
        ["a-3", null],
      ]);
      expect((await db.introspection.getTables()).map((t) => t.name)).not.toContain("transparency_log_pending");
      expect((await db.selectFrom("kysely_migration").select("name").execute()).map((r) => r.name)).not.toContain(
        "0034_transparency_log_pending",
      );
    } finally {
      await close();
    }
  });
});

describe("two server processes on one database", () => {
  it("keep one log per organization, with no gap and no fork", async () => {
    const deployment = await cliDeployment();
    const { database, env, key, organizationId } = deployment;
    try {
      const servers = [await deployment.start(), await deployment.start()];
      const post = async (url: string, operation: string, body: unknown) => {
        const request = signedRequest(body, key);
        const res = await fetch(`${url}/public/v1/submit/${operation}`, {
          method: "POST",
          headers: { "content-type": "application/json", ...request.headers },
          body: request.body,
        });
        return { status: res.status, json: (await res.json()) as any };
      };
      const created = await post(servers[0]!.url, "create_wallet", {
        type: "ACTIVITY_TYPE_CREATE_WALLET",
        timestampMs: now(),
        organizationId,
        parameters: {
          walletName: "w",
          accounts: [
            {
              curve: "CURVE_SECP256K1",
              pathFormat: "PATH_FORMAT_BIP32",
              path: "m/44'/60'/0'/0/0",
              addressFormat: "ADDRESS_FORMAT_ETHEREUM",
            },
          ],
        },
      });
      const signWith = created.json.activity.result.createWalletResult.addresses[0];
      let sent = 0;
      const answered: string[] = [];
      const worker = async (w: number) => {
        while (sent < 80) {
          const n = sent++;
          const url = servers[(w + n) % 2]!.url;
          const response =
            n % 10 === 0
              ? await post(url, "create_users", {
                  type: "ACTIVITY_TYPE_CREATE_USERS_V3",
                  timestampMs: now(),
                  organizationId,
                  parameters: { users: [{ userName: `u${n}`, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] },
                })
              : await post(url, "sign_raw_payload", {
                  type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
                  timestampMs: now(),
                  organizationId,
                  parameters: {
                    signWith,
                    payload: toHex(`two processes ${n}`).slice(2),
                    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
                    hashFunction: "HASH_FUNCTION_KECCAK256",
                  },
                });
          expect(response.status).toBe(200);
          answered.push(response.json.activity.id);
        }
      };
      await Promise.all(Array.from({ length: 12 }, (_, w) => worker(w)));
      expect(answered).toHaveLength(80);
      const store = await openStore(loadConfig(env, { dataDir: database.dataDir }));
      try {
        // The servers' sequencers append after the commits, each woken by its own and sweeping for the
        // other's: waited for until nothing final is pending.
        while (await oldestPending(store.db, organizationId)) await new Promise((resolve) => setTimeout(resolve, 100));
        const leaves = await store.db
          .selectFrom("transparency_log_leaves")
          .select(["leaf_index", "activity_id"])
          .where("organization_id", "=", organizationId)
          .orderBy("leaf_index")
          .execute();
        expect(leaves.map((l) => Number(l.leaf_index))).toEqual(Array.from({ length: 81 }, (_, i) => i));
        expect(new Set(leaves.map((l) => l.activity_id))).toEqual(new Set([created.json.activity.id, ...answered]));
        const verified = await verifyStoredLog(store.db, organizationId, null);
        expect(verified).toMatchObject({ size: 81, problem: null });
      } finally {
        await store.close();
      }
    } finally {
      await deployment.stop();
    }
    // Two servers and their start on a shared 2-core machine: minutes under a heavy load, not seconds.
  }, 120_000);
});

// The hashes are SHA-256 as node:crypto computes them.
it("writes an entry's JSON with every object's keys in order, those that read as array indexes and __proto__ too", () => {
  const value = JSON.parse(
    '{"b":1,"a":{"x":[{"z":null,"__proto__":1,"\u00e9":"\u2028"},true],"10":1,"2":-2.5,"02":0},"__proto__":{"y":1,"u":"\\\\"}}',
  );
  expect(canonicalJson(value)).toBe(
    '{"__proto__":{"u":"\\\\","y":1},"a":{"02":0,"10":1,"2":-2.5,"x":[{"__proto__":1,"z":null,"\u00e9":"\u2028"},true]},"b":1}',
  );
  // Without a key that reads as an index: JSON.stringify with the keys put in order.
  expect(canonicalJson({ b: [{ d: 1, c: "x" }], a: undefined, __proto__: null })).toBe('{"b":[{"c":"x","d":1}]}');
  expect(canonicalJson(JSON.parse('{"z":[1,{"b":2,"a":1}],"__proto__":{"b":2,"a":1}}'))).toBe(
    '{"__proto__":{"a":1,"b":2},"z":[1,{"a":1,"b":2}]}',
  );
});

it("hashes leaves and nodes with RFC 9162's domain separation", () => {
  expect(
    leafHash(Buffer.from("x")).equals(
      crypto
        .createHash("sha256")
        .update(Buffer.from([0, 0x78]))
        .digest(),
    ),
  ).toBe(true);
  expect(EMPTY_ROOT.toString("hex")).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
});

/** A database no server sequences, with an organization and `count` final activities written straight into it. */
async function unsequenced() {
  const database = await createTestDatabase();
  const store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir });
  const { organizationId } = await createOrganization(store.db, {
    organizationName: "planned",
    userName: "u",
    apiKeyName: "k",
    apiPublicKey: newKeyPair().publicKey,
  });
  const addFinal = async (count: number) => {
    // A thousand at a time: SQLite binds at most 32,766 values to a statement.
    for (let added = 0; added < count; added += 1_000)
      await store.db
        .insertInto("activities")
        .values(finalActivityRows(organizationId, Math.min(1_000, count - added)))
        .execute();
  };
  // Every table, the log's included.
  const everything = async () => {
    const out: Record<string, string[]> = {};
    for (const { name } of await store.db.introspection.getTables())
      if (!name.startsWith("kysely_"))
        out[name] = (
          await store.db
            .selectFrom(name as "users")
            .selectAll()
            .execute()
        )
          .map((r) => JSON.stringify(r))
          .sort();
    return out;
  };
  const close = async () => {
    await store.close();
    await database.drop();
  };
  return { store, organizationId, addFinal, everything, close };
}

describe("the log's planning thread", () => {
  it("writes a plan only onto the head it was made from: overtaken by another sequencing, it writes nothing", async () => {
    const { store, organizationId, addFinal, everything, close } = await unsequenced();
    try {
      await addFinal(3);
      const overtaken = await planBatch(store.reader, organizationId, BATCH, Date.now());
      expect(overtaken?.appends.length).toBe(3);
      // Another sequencing (another process, or this one's in-process fallback) appends them first.
      expect(await store.transact("exclusive", (trx) => sequenceLog(trx, store.dialect, organizationId, BATCH, Date.now()))).toBe(3);
      await addFinal(2);
      const before = await everything();
      expect(await store.transact("exclusive", (trx) => commitPlan(trx, store.dialect, overtaken!))).toBe("stale");
      expect(await everything()).toEqual(before);
      // A plan made from the head as it is now is written, and the log verifies.
      const current = await planBatch(store.reader, organizationId, BATCH, Date.now());
      expect(current?.from.size).toBe(3);
      expect(await store.transact("exclusive", (trx) => commitPlan(trx, store.dialect, current!))).toBe(2);
      expect(await planBatch(store.reader, organizationId, BATCH, Date.now())).toBeNull();
      expect(await verifyStoredLog(store.db, organizationId, null, Date.now())).toMatchObject({ size: 5, pending: 0, problem: null });
    } finally {
      await close();
    }
  });

  it("fails over to appending on the event loop when the thread fails, and says so once", async () => {
    const { store, organizationId, addFinal, close } = await unsequenced();
    const lines: string[] = [];
    const logger = pino({ level: "info" }, { write: (line: string) => void lines.push(line) });
    const failing = new LogPlanThread("unused", () => new Worker("throw new Error('no thread here')", { eval: true }));
    const sequencer = new LogSequencer(store, logger, Date.now, { planner: failing });
    try {
      await addFinal(3);
      await sequencer.flush();
      await addFinal(2);
      await sequencer.flush();
      expect(await verifyStoredLog(store.db, organizationId, null, Date.now())).toMatchObject({ size: 5, pending: 0, problem: null });
      expect(failing.failed).toContain("no thread here");
      expect(sequencer.hashing).toBe("event loop");
      const warnings = lines.map((line) => JSON.parse(line)).filter((entry) => entry.msg.includes("planning thread"));
      expect(warnings).toHaveLength(1);
      expect(warnings[0].err.message).toContain("no thread here");
    } finally {
      await sequencer.close();
      await close();
    }
  });

  it(`hashes a batch on the thread, which on SQLite reads it too, off the event loop's connections (${backend})`, async () => {
    const { org, root } = await organizationWith(h, []);
    await h.server.logSequencer.flush();
    const tally = h.server.store.statements;
    tally.texts = [];
    try {
      await root.createPolicy({ policyName: "planned", effect: "EFFECT_ALLOW", consensus: "true", condition: "false", notes: "" });
      await h.server.logSequencer.flush();
      const batchReads = tally.texts.filter((text) => text.includes('"pending_id"'));
      const appends = tally.texts.filter((text) => text.includes('delete from "transparency_log_pending"'));
      expect(appends.length).toBeGreaterThan(0);
      expect(batchReads.length).toBe(h.server.store.dialect === "sqlite" ? 0 : appends.length);
      // Hashed on the thread on both databases (had it failed, the event loop would have).
      expect(h.server.logSequencer.hashing).toBe("planning thread");
    } finally {
      tally.texts = null;
    }
    const leaves = await leavesOf(org.organizationId);
    expect(await verifyStoredLog(h.server.store.db, org.organizationId, null, Date.now())).toMatchObject({
      size: leaves.length,
      problem: null,
    });
  });
});

describe(`the pending rows a backlog leaves behind (${backend})`, () => {
  /** What the next batch read costs once a backlog of `backlog` was appended by a sequencer that
   * vacuums after `vacuumAfter` deleted rows: the buffers PostgreSQL's plan touched (SQLite: none asked). */
  async function afterBacklog(backlog: number, vacuumAfter: number) {
    const { store, organizationId, addFinal, close } = await unsequenced();
    const sequencer = new LogSequencer(store, pino({ level: "silent" }), Date.now, { vacuumAfter });
    const tally = store.statements;
    tally.texts = [];
    try {
      await addFinal(backlog);
      await sequencer.flush();
      expect(await verifyStoredLog(store.db, organizationId, null, Date.now())).toMatchObject({ size: backlog, pending: 0, problem: null });
      const vacuums = tally.texts.filter((text) => /vacuum/i.test(text)).length;
      if (store.dialect === "sqlite") return { vacuums, buffers: 0 };
      const read = batchRead(organizationId, BATCH).compile(store.db);
      const { rows } = await store.db.executeQuery<{ "QUERY PLAN": Array<{ Plan: Record<string, number> }> }>(
        CompiledQuery.raw(`explain (analyze, buffers, format json) ${read.sql}`, [...read.parameters]),
      );
      const plan = rows[0]!["QUERY PLAN"][0]!.Plan;
      return { vacuums, buffers: plan["Shared Hit Blocks"]! + plan["Shared Read Blocks"]! };
    } finally {
      tally.texts = null;
      await sequencer.close();
      await close();
    }
  }

  it("are vacuumed on PostgreSQL as they are deleted, so the next read does not walk them (SQLite deletes them outright)", async () => {
    const vacuumed = await afterBacklog(3_000, 1_000);
    const kept = await afterBacklog(3_000, Number.POSITIVE_INFINITY);
    expect(kept.vacuums).toBe(0);
    if (backend === "postgres") {
      // Once after every 1,000 deleted.
      expect(vacuumed.vacuums).toBe(3);
      // The 3,000 deleted keys, unvacuumed, are some forty pages of the primary key walked by every
      // read; vacuumed, the read finds the empty queue in a page or two of it.
      expect(kept.buffers).toBeGreaterThan(30);
      expect(vacuumed.buffers).toBeLessThan(10);
    } else {
      expect(vacuumed.vacuums).toBe(0);
    }
  });

  it("are rewritten on PostgreSQL to the few rows left once a large backlog has drained", async () => {
    // SQLite frees a deleted row's page at once: there is nothing to rewrite.
    if (backend !== "postgres") return;
    const { store, organizationId, addFinal, close } = await unsequenced();
    const sequencer = new LogSequencer(store, pino({ level: "silent" }), Date.now, { vacuumAfter: Number.POSITIVE_INFINITY });
    const pagesOf = async () =>
      (await sql<{ pages: string }>`select pg_relation_size('transparency_log_pending') / 8192 as "pages"`.execute(store.db)).rows[0]!
        .pages;
    try {
      await addFinal(3_000);
      await sequencer.flush();
      // Five arrive after the backlog drained: the table's last pages hold them, so no vacuum can cut it short.
      await addFinal(5);
      const grown = Number(await pagesOf());
      expect(grown).toBeGreaterThan(30);
      // A table under the size that is rewritten is only vacuumed.
      expect(await vacuumPending(store.db)).toBe(false);
      expect(Number(await pagesOf())).toBe(grown);
      // Of at least 10 pages with fewer live rows than pages: rewritten to its live rows, which stay pending.
      expect(await vacuumPending(store.db, 10)).toBe(true);
      expect(Number(await pagesOf())).toBe(1);
      expect((await planBatch(store.reader, organizationId, BATCH, Date.now()))?.appends).toHaveLength(5);
      await sequencer.flush();
      expect(await verifyStoredLog(store.db, organizationId, null, Date.now())).toMatchObject({ size: 3_005, pending: 0, problem: null });
    } finally {
      await sequencer.close();
      await close();
    }
  });
});
