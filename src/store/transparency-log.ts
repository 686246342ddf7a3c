// Each organization's transparency log (docs/audit-log.md): every activity that reaches a final status
// (completed, failed, rejected) becomes a leaf of its organization's RFC 9162 Merkle tree.
//
// Appending is a *sequencer*'s work, outside the activity's commit (as Trillian's sequencer, and
// Certificate Transparency's maximum merge delay): an activity's transaction only marks it pending, a
// row of `transparency_log_pending` (organization, activity) that a trigger writes as the activity
// becomes final (migration 0034). The sequencer (services/log-sequencer.ts) takes an organization's
// pending rows in one transaction that holds its log's head (FOR UPDATE on PostgreSQL; SQLite's one
// writer), gives their activities the next leaf indexes in a deterministic order, and writes their
// leaves, the subtrees they complete and the new head, and deletes the pending rows, in a few
// statements for the whole batch. It writes nothing to the activity rows: an activity's place in the
// log is its leaf, found by the leaves' index by activity (by organization and activity on SQLite; a
// hash index of the activity on PostgreSQL, store/migrations.ts 0035).
//
// Stored per organization: the head (size, root, and the right edge of the tree, from which the next
// leaves' nodes are computed without reading any other row), one row per leaf (the activity and its
// entry's leaf hash), and the hash of every complete subtree above the leaves, so that an inclusion or
// consistency proof is O(log n) rows read (merkle.ts plans them).
//
// No gap and no fork: the head's row lock orders the sequencers of every process, and a sequencer
// reads the pending rows after taking it, so what an earlier one sequenced is no longer pending.
import crypto from "node:crypto";
import { sql } from "kysely";
import type { ActivitiesTable, TransparencyLogHeadsTable } from "./schema.js";
import type { Db, Dialect, Tx } from "./handles.js";
import {
  appendLeaf,
  EMPTY_ROOT,
  leafHashOfText,
  rootOf as foldFrontier,
  type Frontier,
  type Hash,
  type ProofPlan,
  type Subtree,
} from "./merkle.js";
import { prepare, type Slots } from "./prepared.js";
import { intentText } from "./activity-intent.js";
import { PLANNED_EACH_RUN } from "./postgres-pool.js";

/** The statements over the pending rows are planned on each run with the queue's size at that moment,
 * never from a plan made while it was empty: it swings from none to a bulk load's backlog. */
const queued = sql.raw(PLANNED_EACH_RUN);

/** The statuses after which an activity never changes again: each is a leaf of the log. */
export const FINAL_STATUSES: readonly string[] = ["ACTIVITY_STATUS_COMPLETED", "ACTIVITY_STATUS_FAILED", "ACTIVITY_STATUS_REJECTED"];

export const isFinal = (status: string) => FINAL_STATUSES.includes(status);

/** JSON with every object's keys in code-point order and no whitespace (RFC 8785 for the values Sigil
 * stores: strings, integers, booleans, null), so one record is one byte string wherever it is rebuilt.
 * Every activity that completes is hashed through here on the write path, so it is JSON.stringify's
 * native walk with each object's keys put in order by a replacer; an object with a key that reads as an
 * array index, which JavaScript would put first whatever the order of insertion, is written by the
 * plain recursive walk instead. */
export function canonicalJson(value: unknown): string {
  try {
    return JSON.stringify(value, sortedKeys) ?? "null";
  } catch (error) {
    if (error !== INDEX_KEY) throw error;
    return walked(value);
  }
}

const INDEX_KEY = new Error("a key that reads as an array index");
const ARRAY_INDEX = /^(?:0|[1-9]\d*)$/;

function sortedKeys(_key: string, value: unknown): unknown {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return value;
  const keys = Object.keys(value).sort();
  // No prototype: a key "__proto__" is then a property like any other.
  const sorted: Record<string, unknown> = Object.create(null);
  for (const key of keys) {
    const first = key.charCodeAt(0);
    if (first >= 48 && first <= 57 && ARRAY_INDEX.test(key)) throw INDEX_KEY;
    sorted[key] = (value as Record<string, unknown>)[key];
  }
  return sorted;
}

function walked(value: unknown): string {
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) {
    let out = "[";
    for (let i = 0; i < value.length; i++) out += (i === 0 ? "" : ",") + walked(value[i]);
    return `${out}]`;
  }
  const object = value as Record<string, unknown>;
  const keys = Object.keys(object);
  for (let i = 1; i < keys.length; i++)
    if (keys[i - 1]! > keys[i]!) {
      keys.sort();
      break;
    }
  let out = "{";
  for (const key of keys) {
    const item = object[key];
    if (item === undefined) continue;
    out += `${out.length === 1 ? "" : ","}${JSON.stringify(key)}:${walked(item)}`;
  }
  return `${out}}`;
}

interface VoteAsStored {
  id: string;
  userId: string;
  selection: string;
  publicKey: string;
  scheme: string;
  signature: string;
  message: string;
  credentialId?: string;
  credentialType?: string;
  createdAt: number;
}

/**
 * The entry a leaf records: the activity as the audit log keeps it, with its place in the log. The
 * votes carry the stamps' public keys and signatures, and the SHA-256 of the signed message (whoever
 * holds the request can check the signature); never a voter's name or email, and no secret: a
 * credential among the results is already recorded "<redacted>" (pipeline.ts, recordedRow), and the
 * database row holds nothing more (prepared reads and the request id are left out).
 */
export function logEntry(row: ActivitiesTable, leafIndex: number): Record<string, unknown> {
  const stored = JSON.parse(row.votes) as VoteAsStored[];
  const votes = stored.map((v) => ({
    id: v.id,
    userId: v.userId,
    selection: v.selection,
    publicKey: v.publicKey,
    scheme: v.scheme,
    signature: v.signature,
    messageSha256: sha256Hex(v.message ?? ""),
    credentialId: v.credentialId ?? null,
    credentialType: v.credentialType ?? null,
    createdAt: v.createdAt,
  }));
  return {
    format: "sigil.activity.v1",
    leafIndex,
    id: row.id,
    organizationId: row.organization_id,
    type: row.type,
    status: row.status,
    // The intent whole, wherever the row keeps it: a leaf hashes the same entry either way.
    intent: JSON.parse(intentText(row, stored)),
    result: JSON.parse(row.result),
    failure: row.failure ? JSON.parse(row.failure) : null,
    votes,
    fingerprint: row.fingerprint,
    timestampMs: row.timestamp_ms,
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
  };
}

const sha256Hex = (text: string) => crypto.hash("sha256", text, "hex");

/** The bytes a leaf hashes: the entry as canonical JSON, UTF-8. */
export const entryBytes = (entry: Record<string, unknown>) => Buffer.from(canonicalJson(entry), "utf8");

/** RFC 9162 leaf hash of the activity `row` recorded at `leafIndex`. */
export const activityLeafHash = (row: ActivitiesTable, leafIndex: number): Hash => leafHashOfText(canonicalJson(logEntry(row, leafIndex)));

/** A log's head as read. */
export interface LogHead {
  size: number;
  root: Hash;
  frontier: Frontier;
}

export function headOf(row: Pick<TransparencyLogHeadsTable, "size" | "root_hash" | "frontier">): LogHead {
  const size = Number(row.size);
  const hashes: Hash[] = [];
  for (let i = 0; i < row.frontier.length; i += 64) hashes.push(Buffer.from(row.frontier.slice(i, i + 64), "hex"));
  return { size, root: Buffer.from(row.root_hash, "hex"), frontier: { size, hashes } };
}

export const emptyHeadRow = (organizationId: string, now: number): TransparencyLogHeadsTable => ({
  organization_id: organizationId,
  size: 0,
  root_hash: EMPTY_ROOT.toString("hex"),
  frontier: "",
  updated_at: now,
});

const headColumns = ["size", "root_hash", "frontier"] as const;

const headForUpdate = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db.selectFrom("transparency_log_heads").select(headColumns).where("organization_id", "=", slot("organizationId")).forUpdate(),
);
const headPlain = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db.selectFrom("transparency_log_heads").select(headColumns).where("organization_id", "=", slot("organizationId")),
);

/** The head, locked for this transaction (PostgreSQL; SQLite's one writer needs no lock), made if missing. */
async function lockedHead(trx: Tx, dialect: Dialect, organizationId: string, now: number): Promise<LogHead> {
  const read = dialect === "postgres" ? headForUpdate : headPlain;
  let row = await read.first(trx, { organizationId });
  if (!row) {
    // An organization's first sequencing makes its head; two processes making it at once make one.
    await trx
      .insertInto("transparency_log_heads")
      .values(emptyHeadRow(organizationId, now))
      .onConflict((c) => c.column("organization_id").doNothing())
      .execute();
    row = await read.first(trx, { organizationId });
  }
  return headOf(row!);
}

/** What one append writes: the leaf, the subtrees it completes. */
export interface Append {
  leafIndex: number;
  activityId: string;
  leafHash: string;
  nodes: { level: number; node_index: number; hash: string }[];
}

/** The append of `leaf` to the tree whose right edge is `frontier`. */
export function appendOf(frontier: Frontier, activityId: string, leaf: Hash): { append: Append; next: Frontier } {
  const appended = appendLeaf(frontier, leaf);
  return {
    next: appended.frontier,
    append: {
      leafIndex: frontier.size,
      activityId,
      leafHash: leaf.toString("hex"),
      nodes: appended.completed.map((c) => ({ level: c.subtree.level, node_index: c.subtree.index, hash: c.hash.toString("hex") })),
    },
  };
}

/** The organizations with final activities not yet in their log (read from the pending rows' key alone). */
export async function organizationsPending(db: Db | Tx): Promise<string[]> {
  const { rows } = await sql<{
    organization_id: string;
  }>`${queued}select distinct "organization_id" from "transparency_log_pending"`.execute(db);
  return rows.map((r) => r.organization_id);
}

/** The final activity that has waited longest for its organization's log (any organization when none
 * is given): the pending rows are few (the sequencer deletes them as it appends), so sorting them is cheap. */
export async function oldestPending(
  db: Db | Tx,
  organizationId?: string,
): Promise<{ id: string; organization_id: string; updated_at: number } | undefined> {
  const { rows } = await sql<{
    id: string;
    organization_id: string;
    updated_at: number;
  }>`${queued}select "a"."id", "a"."organization_id", "a"."updated_at"
    from "transparency_log_pending" as "p" inner join "activities" as "a" on "a"."id" = "p"."activity_id"
    ${organizationId === undefined ? sql`` : sql`where "p"."organization_id" = ${organizationId}`}
    order by "a"."updated_at", "a"."id" limit 1`.execute(db);
  const row = rows[0];
  return row ? { ...row, updated_at: Number(row.updated_at) } : undefined;
}

/** What a leaf's entry is made of (logEntry): an activity's columns but the user, what was prepared and the request. */
const ENTRY_COLUMNS = sql.raw(
  [
    "id",
    "organization_id",
    "type",
    "status",
    "intent",
    "result",
    "failure",
    "votes",
    "fingerprint",
    "timestamp_ms",
    "created_at",
    "updated_at",
  ]
    .map((c) => `"a"."${c}"`)
    .join(", "),
);

/**
 * Sequences up to `limit` of the organization's pending final activities, in the transaction `trx`
 * (which must be an exclusive one: store.transact("exclusive")): locks its log's head, takes the
 * pending rows in the order of their activities' ids (UUIDv7: the order they were made), appends them
 * in the order they became final (updated_at, then created_at, then id: the same order in every
 * process), and writes their leaves, the subtrees they complete and the head, and deletes their
 * pending rows; no activity row is written. A pending row whose activity is missing, not final or
 * already a leaf (none is, but by a hand's change) is deleted without an entry. Resolves with how many
 * pending rows it took (fewer than `limit`: none is left that was committed when it looked).
 */
export async function sequenceLog(
  trx: Tx,
  dialect: Dialect,
  organizationId: string,
  limit: number,
  now: number,
  plan: PlanRows = planRowsHere,
): Promise<number> {
  const head = await lockedHead(trx, dialect, organizationId, now);
  // Read after the head's lock is held: on PostgreSQL a statement sees what was committed when it
  // began, so the pending rows a sequencer that held the lock before deleted are gone.
  const rows = await readBatch(trx, organizationId, limit);
  if (rows.length === 0) return 0;
  const planned = await plan(organizationId, headRowOf(head, organizationId, now), rows, now);
  await writePlan(trx, dialect, planned);
  return planned.taken.length;
}

/** A batch's rows as read (readBatch): the pending row's activity id, its activity's columns (null
 * when the activity is missing) and its leaf index, if it already has one. */
export type BatchRow = ActivitiesTable & { pending_id: string; leaf_index: number | null };

/** Works out the plan of `rows` appended to the head `head` (as its row: plain strings and numbers,
 * so that it can be handed to a thread): here (planRowsHere), or on the log's planning thread. */
export type PlanRows = (organizationId: string, head: TransparencyLogHeadsTable, rows: BatchRow[], now: number) => Promise<AppendPlan>;

export const planRowsHere: PlanRows = async (organizationId, head, rows, now) => planAppends(organizationId, headOf(head), rows, now);

const headRowOf = (head: LogHead, organizationId: string, now: number): TransparencyLogHeadsTable => ({
  organization_id: organizationId,
  size: head.size,
  root_hash: head.root.toString("hex"),
  frontier: head.frontier.hashes.map((h) => h.toString("hex")).join(""),
  updated_at: now,
});

/**
 * What sequencing a batch writes, worked out from a head and the batch's rows as read: made under the
 * head's lock (sequenceLog), or beforehand from a snapshot, off the writer and the event loop
 * (log-plan-thread.ts), and then written by commitPlan only if the head is still the one it started from.
 */
export interface AppendPlan {
  organizationId: string;
  /** The head it appends to: its size and root (hex). */
  from: { size: number; root: string };
  appends: Append[];
  /** The pending rows it deletes (activity ids): every one read, appended or not. */
  taken: string[];
  /** The head after it. */
  head: TransparencyLogHeadsTable;
}

/**
 * The plan of the organization's next batch of at most `limit` pending activities, read from `db`
 * without any lock (in a read transaction, for one snapshot); null when none is pending. Its head may
 * have moved by the time it is written: commitPlan checks.
 */
export async function planBatch(db: Db | Tx, organizationId: string, limit: number, now: number): Promise<AppendPlan | null> {
  const head = await readHead(db, organizationId);
  const rows = await readBatch(db, organizationId, limit);
  return rows.length === 0 ? null : planAppends(organizationId, head, rows, now);
}

/**
 * Writes `plan` in the exclusive transaction `trx` if the organization's head is still the one it was
 * made from, and resolves with how many pending rows it took; "stale" (nothing written) if another
 * sequencing appended meanwhile. Pending rows only leave by a sequencing, which moves the head unless
 * none of them was appendable: so a head that has not moved means every row the plan read is still
 * pending and none of its activities has a leaf yet.
 */
export async function commitPlan(trx: Tx, dialect: Dialect, plan: AppendPlan): Promise<number | "stale"> {
  const head = await lockedHead(trx, dialect, plan.organizationId, plan.head.updated_at);
  if (head.size !== plan.from.size || head.root.toString("hex") !== plan.from.root) return "stale";
  await writePlan(trx, dialect, plan);
  return plan.taken.length;
}

// The batch's pending rows are taken first, then each one's activity and leaf by its keys: every
// look-up an index search whatever the statistics say. (A join of the pending rows with the leaves,
// planned while the leaves' statistics still counted a few, read every leaf of the organization once
// per pending row: a backlog of 300,000 was appended at a hundred a second.)
async function readBatch(db: Db | Tx, organizationId: string, limit: number) {
  return (await batchRead(organizationId, limit).execute(db)).rows;
}

/** The statement that reads a batch (exported for the test of its plan). */
export const batchRead = (organizationId: string, limit: number) =>
  sql<BatchRow>`${queued}select "p"."activity_id" as "pending_id",
      (select "l"."leaf_index" from "transparency_log_leaves" as "l"
        where "l"."organization_id" = "p"."organization_id" and "l"."activity_id" = "p"."activity_id") as "leaf_index",
      ${ENTRY_COLUMNS}
    from (select "organization_id", "activity_id" from "transparency_log_pending"
      where "organization_id" = ${organizationId} order by "activity_id" limit ${limit}) as "p"
    left join "activities" as "a" on "a"."id" = "p"."activity_id" and "a"."organization_id" = "p"."organization_id"
    order by "p"."activity_id"`;

function planAppends(organizationId: string, head: LogHead, rows: BatchRow[], now: number): AppendPlan {
  const appended = rows
    .filter((r) => r.id !== null && r.leaf_index === null && isFinal(r.status))
    .sort((a, b) => Number(a.updated_at) - Number(b.updated_at) || Number(a.created_at) - Number(b.created_at) || (a.id < b.id ? -1 : 1));
  let frontier = head.frontier;
  const appends: Append[] = [];
  for (const row of appended) {
    const { append, next } = appendOf(frontier, row.id, activityLeafHash(row, frontier.size));
    appends.push(append);
    frontier = next;
  }
  return {
    organizationId,
    from: { size: head.size, root: head.root.toString("hex") },
    appends,
    taken: rows.map((r) => r.pending_id),
    head: headRowOf({ size: frontier.size, root: foldFrontier(frontier), frontier }, organizationId, now),
  };
}

const writePlan = (trx: Tx, dialect: Dialect, plan: AppendPlan) =>
  (dialect === "postgres" ? writePostgres : writeSqlite)(trx, plan.organizationId, plan.appends, plan.taken, plan.head);

/**
 * The statement that deletes the pending rows a batch took (exported for the test of its plan): by
 * their keys, and also as the range of the primary key they span (in the column's own order), a range
 * the planner searches whatever it believes of the queue's size. With the list alone, a plan made from
 * statistics taken while the queue was empty read the whole backlog for each batch of a hundred.
 */
export const pendingDelete = (organizationId: string, taken: string[]) =>
  sql`delete from "transparency_log_pending"
      where "organization_id" = ${organizationId}
        and "activity_id" between (select min("t") from unnest(${taken}::text[]) as "t") and (select max("t") from unnest(${taken}::text[]) as "t")
        and "activity_id" = any(${taken}::text[])`;

/** PostgreSQL: a pending table of at least this many pages (8 kB each) holding fewer live rows than
 * pages (a page holds some 75) is rewritten by vacuumPending. */
export const COMPACT_FROM_PAGES = 1_000;
/** How long vacuumPending waits for the table's lock to rewrite it before leaving it for next time:
 * the activities that would add a pending row meanwhile wait behind it. */
export const COMPACT_LOCK_TIMEOUT_MS = 100;

/**
 * PostgreSQL: vacuums the pending rows' table (docs/audit-log.md#the-pending-queue-on-postgresql),
 * removing the versions the sequencer's deletes left and their keys in its primary key, which every
 * batch read walks until a vacuum removes them: once a backlog of 1,000,000 was appended, each read
 * walked them all, 75-350 ms once a second. Autovacuum removes them in its own time, or never where it
 * is turned off; PostgreSQL skips an index's clean-up when few of the table's pages hold dead rows, so
 * it is asked for. It waits for no lock (another process's vacuum in progress makes it a no-op).
 *
 * A vacuum frees pages but keeps them, and the planner reads a table by its pages: once a backlog has
 * drained, the few rows left made every read (and the sweep's list of organizations) a scan of the
 * backlog's pages, 30-45 ms each for 13,000 pages. So a table of COMPACT_FROM_PAGES or more holding
 * fewer live rows than pages is rewritten to its live rows (vacuum full: 165 ms for 13,000 pages),
 * waiting at most COMPACT_LOCK_TIMEOUT_MS for its lock. Resolves with whether it was rewritten.
 */
export async function vacuumPending(db: Db, compactFromPages = COMPACT_FROM_PAGES): Promise<boolean> {
  await sql`${queued}vacuum (index_cleanup on, skip_locked) "transparency_log_pending"`.execute(db);
  const { rows } = await sql<{ pages: number; live: number }>`${queued}select "relpages" as "pages", "reltuples" as "live"
    from "pg_class" where "oid" = '"transparency_log_pending"'::regclass`.execute(db);
  const { pages, live } = rows[0]!;
  if (pages < compactFromPages || live >= pages) return false;
  // On one connection: the lock's timeout is the session's, set for this statement alone.
  return db.connection().execute(async (connection) => {
    await sql`${queued}set lock_timeout = ${sql.lit(`${COMPACT_LOCK_TIMEOUT_MS}ms`)}`.execute(connection);
    try {
      await sql`${queued}vacuum (full) "transparency_log_pending"`.execute(connection);
      return true;
    } catch (error) {
      // Its lock was not had in time (lock_not_available): the next vacuum tries again.
      if ((error as { code?: string }).code === "55P03") return false;
      throw error;
    } finally {
      await sql`${queued}reset lock_timeout`.execute(connection);
    }
  });
}

// PostgreSQL: the whole batch in one statement (one round trip).
async function writePostgres(
  trx: Tx,
  organizationId: string,
  appends: Append[],
  taken: string[],
  head: TransparencyLogHeadsTable,
): Promise<void> {
  const leaves = appends.map((a) => ({ i: a.leafIndex, a: a.activityId, h: a.leafHash }));
  const nodes = appends.flatMap((a) => a.nodes.map((n) => ({ l: n.level, i: n.node_index, h: n.hash })));
  await sql`${queued}with "leaves" as (
      insert into "transparency_log_leaves" ("organization_id", "leaf_index", "activity_id", "leaf_hash")
      select ${organizationId}, "x"."i", "x"."a", "x"."h"
      from json_to_recordset(${JSON.stringify(leaves)}::json) as "x"("i" bigint, "a" text, "h" text)
    ), "nodes" as (
      insert into "transparency_log_nodes" ("organization_id", "level", "node_index", "hash")
      select ${organizationId}, "x"."l", "x"."i", "x"."h"
      from json_to_recordset(${JSON.stringify(nodes)}::json) as "x"("l" integer, "i" bigint, "h" text)
    ), "taken" as (
      ${pendingDelete(organizationId, taken)}
    )
    update "transparency_log_heads" set "size" = ${head.size}, "root_hash" = ${head.root_hash},
      "frontier" = ${head.frontier}, "updated_at" = ${head.updated_at}
    where "organization_id" = ${organizationId}`.execute(trx);
}

const headUpdate = prepare((db, slot: Slots<TransparencyLogHeadsTable>) =>
  db
    .updateTable("transparency_log_heads")
    .set({ size: slot("size"), root_hash: slot("root_hash"), frontier: slot("frontier"), updated_at: slot("updated_at") })
    .where("organization_id", "=", slot("organization_id")),
);

// SQLite: statements cost no round trip, but each is work on the one writer, and a statement whose
// text changes with the batch's size is prepared anew every time. So each write is one statement of
// fixed text, whatever the number of rows, which reads them from a JSON array (json_each): the leaves,
// the subtrees, the pending rows taken (by their primary key), and the head.
async function writeSqlite(
  trx: Tx,
  organizationId: string,
  appends: Append[],
  taken: string[],
  head: TransparencyLogHeadsTable,
): Promise<void> {
  const leaves = JSON.stringify(appends.map((a) => [a.leafIndex, a.activityId, a.leafHash]));
  const nodes = JSON.stringify(appends.flatMap((a) => a.nodes.map((n) => [n.level, n.node_index, n.hash])));
  if (appends.length > 0) {
    await sql`insert into "transparency_log_leaves" ("organization_id", "leaf_index", "activity_id", "leaf_hash")
      select ${organizationId}, "value" ->> 0, "value" ->> 1, "value" ->> 2 from json_each(${leaves})`.execute(trx);
    await sql`insert into "transparency_log_nodes" ("organization_id", "level", "node_index", "hash")
      select ${organizationId}, "value" ->> 0, "value" ->> 1, "value" ->> 2 from json_each(${nodes})`.execute(trx);
  }
  await sql`delete from "transparency_log_pending"
    where "organization_id" = ${organizationId} and "activity_id" in (select "value" from json_each(${JSON.stringify(taken)}))`.execute(
    trx,
  );
  await headUpdate.run(trx, head);
}

/** The log's head as committed (no lock): what a checkpoint or a proof is made of. An organization
 * whose log was never sequenced has the empty log. */
export async function readHead(db: Db | Tx, organizationId: string): Promise<LogHead> {
  const row = await headPlain.first(db, { organizationId });
  return headOf(row ?? emptyHeadRow(organizationId, 0));
}

/** The hashes of complete subtrees, read in at most two statements (leaves, and the nodes above them). */
export async function readSubtrees(db: Db | Tx, organizationId: string, subtrees: Subtree[]): Promise<Map<string, Hash>> {
  const read = new Map<string, Hash>();
  const leaves = subtrees.filter((s) => s.level === 0).map((s) => s.index);
  const nodes = subtrees.filter((s) => s.level > 0);
  if (leaves.length > 0) {
    const rows = await db
      .selectFrom("transparency_log_leaves")
      .select(["leaf_index", "leaf_hash"])
      .where("organization_id", "=", organizationId)
      .where("leaf_index", "in", leaves)
      .execute();
    for (const r of rows) read.set(`0/${Number(r.leaf_index)}`, Buffer.from(r.leaf_hash, "hex"));
  }
  if (nodes.length > 0) {
    const rows = await db
      .selectFrom("transparency_log_nodes")
      .select(["level", "node_index", "hash"])
      .where("organization_id", "=", organizationId)
      .where((eb) =>
        eb(
          eb.refTuple("level", "node_index"),
          "in",
          nodes.map((n) => eb.tuple(n.level, n.index)),
        ),
      )
      .execute();
    for (const r of rows) read.set(`${Number(r.level)}/${Number(r.node_index)}`, Buffer.from(r.hash, "hex"));
  }
  return read;
}

/** A proof planned by merkle.ts, read from the store. */
export async function readProof(db: Db | Tx, organizationId: string, plan: ProofPlan): Promise<Hash[]> {
  return plan.assemble(await readSubtrees(db, organizationId, plan.subtrees));
}

/** The leaf recording `activityId`, if it is in its organization's log (the leaves' index by activity). */
export async function leafOfActivity(db: Db | Tx, organizationId: string, activityId: string) {
  const row = await db
    .selectFrom("transparency_log_leaves")
    .select(["leaf_index", "leaf_hash"])
    .where("organization_id", "=", organizationId)
    .where("activity_id", "=", activityId)
    .executeTakeFirst();
  return row ? { leafIndex: Number(row.leaf_index), leafHash: Buffer.from(row.leaf_hash, "hex") } : undefined;
}
