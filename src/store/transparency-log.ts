// Each organization's transparency log (docs/audit-log.md): every activity that reaches a final status
// (completed, failed, rejected) becomes a leaf of its organization's RFC 9162 Merkle tree.
//
// Appending is a *sequencer*'s work, outside the activity's commit (as Trillian's sequencer, and
// Certificate Transparency's maximum merge delay): an activity's transaction writes nothing for the
// log. A final activity whose `log_index` is null is pending; a partial index holds exactly those
// (migration 0028), so finding them reads no more rows than there are. The sequencer
// (services/log-sequencer.ts) takes an organization's pending activities in one transaction that
// holds its log's head (FOR UPDATE on PostgreSQL; SQLite's one writer), gives them the next leaf
// indexes in a deterministic order, and writes their leaves, the subtrees they complete, the new head
// and their `log_index` in a few statements for the whole batch.
//
// Stored per organization: the head (size, root, and the right edge of the tree, from which the next
// leaves' nodes are computed without reading any other row), one row per leaf (the activity and its
// entry's leaf hash), and the hash of every complete subtree above the leaves, so that an inclusion or
// consistency proof is O(log n) rows read (merkle.ts plans them).
//
// No gap and no fork: the head's row lock orders the sequencers of every process, and a sequencer
// reads the pending activities after taking it, so what an earlier one sequenced is no longer pending.
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

/** The statuses after which an activity never changes again: each is a leaf of the log. */
export const FINAL_STATUSES: readonly string[] = ["ACTIVITY_STATUS_COMPLETED", "ACTIVITY_STATUS_FAILED", "ACTIVITY_STATUS_REJECTED"];

export const isFinal = (status: string) => FINAL_STATUSES.includes(status);

/** JSON with every object's keys in code-point order and no whitespace (RFC 8785 for the values Sigil
 * stores: strings, integers, booleans, null), so one record is one byte string wherever it is rebuilt. */
export function canonicalJson(value: unknown): string {
  // Written as loops over strings: every activity that completes is hashed through here on the write
  // path, and every entry again by `sigil audit verify`. Keys come mostly in a few shapes: their
  // quoted forms are kept, and keys already in order are not sorted again.
  if (typeof value === "string") return JSON.stringify(value);
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) {
    let out = "[";
    for (let i = 0; i < value.length; i++) out += (i === 0 ? "" : ",") + canonicalJson(value[i]);
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
    out += `${out.length === 1 ? "" : ","}${quotedKey(key)}:${canonicalJson(item)}`;
  }
  return `${out}}`;
}

const quotedKeys = new Map<string, string>();
function quotedKey(key: string): string {
  let quoted = quotedKeys.get(key);
  if (quoted === undefined) {
    quoted = JSON.stringify(key);
    // Bounded: keys come from stored JSON, which any caller could fill with new ones.
    if (quotedKeys.size < 10_000) quotedKeys.set(key, quoted);
  }
  return quoted;
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
  const votes = (JSON.parse(row.votes) as VoteAsStored[]).map((v) => ({
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
    intent: JSON.parse(row.intent),
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
interface Append {
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

/** The statuses as SQL literals, matching the partial index's predicate word for word (SQLite uses a
 * partial index only for a query whose WHERE holds the index's terms as written). */
const FINAL_SQL = sql.raw(FINAL_STATUSES.map((s) => `'${s}'`).join(", "));

/** The organizations with final activities not yet in their log (read from the partial index alone). */
export async function organizationsPending(db: Db | Tx): Promise<string[]> {
  const { rows } = await sql<{ organization_id: string }>`select distinct "organization_id" from "activities"
    where "log_index" is null and "status" in (${FINAL_SQL})`.execute(db);
  return rows.map((r) => r.organization_id);
}

/** The oldest final activity not in its organization's log (any organization when none is given). */
export async function oldestPending(
  db: Db | Tx,
  organizationId?: string,
): Promise<{ id: string; organization_id: string; updated_at: number } | undefined> {
  const { rows } = await sql<{ id: string; organization_id: string; updated_at: number }>`select "id", "organization_id", "updated_at"
    from "activities" where "log_index" is null and "status" in (${FINAL_SQL})
    ${organizationId === undefined ? sql`` : sql`and "organization_id" = ${organizationId}`}
    order by "updated_at", "id" limit 1`.execute(db);
  const row = rows[0];
  return row ? { ...row, updated_at: Number(row.updated_at) } : undefined;
}

/**
 * Sequences up to `limit` of the organization's pending final activities, in the transaction `trx`
 * (which must be an exclusive one: store.transact("exclusive")): locks its log's head, takes them in
 * the order they became final (updated_at, then created_at, then id: the same order in every process),
 * and writes their leaves, the subtrees they complete, the head and their log_index. Resolves with how
 * many it appended (fewer than `limit`: none is left that was committed when it looked).
 */
export async function sequenceLog(trx: Tx, dialect: Dialect, organizationId: string, limit: number, now: number): Promise<number> {
  const head = await lockedHead(trx, dialect, organizationId, now);
  // Read after the head's lock is held: on PostgreSQL a statement sees what was committed when it
  // began, so the activities a sequencer that held the lock before marked are not pending any more.
  const { rows } = await sql<ActivitiesTable>`select * from "activities"
    where "organization_id" = ${organizationId} and "log_index" is null and "status" in (${FINAL_SQL})
    order by "updated_at", "created_at", "id" limit ${limit}`.execute(trx);
  if (rows.length === 0) return 0;
  let frontier = head.frontier;
  const appends: Append[] = [];
  for (const row of rows) {
    const { append, next } = appendOf(frontier, row.id, activityLeafHash(row, frontier.size));
    appends.push(append);
    frontier = next;
  }
  const headRow: TransparencyLogHeadsTable = {
    organization_id: organizationId,
    size: frontier.size,
    root_hash: foldFrontier(frontier).toString("hex"),
    frontier: frontier.hashes.map((h) => h.toString("hex")).join(""),
    updated_at: now,
  };
  await (dialect === "postgres" ? writePostgres : writeSqlite)(trx, organizationId, appends, headRow);
  return rows.length;
}

// PostgreSQL: the whole batch in one statement (one round trip).
async function writePostgres(trx: Tx, organizationId: string, appends: Append[], head: TransparencyLogHeadsTable): Promise<void> {
  const leaves = appends.map((a) => ({ i: a.leafIndex, a: a.activityId, h: a.leafHash }));
  const nodes = appends.flatMap((a) => a.nodes.map((n) => ({ l: n.level, i: n.node_index, h: n.hash })));
  await sql`with "leaves" as (
      insert into "transparency_log_leaves" ("organization_id", "leaf_index", "activity_id", "leaf_hash")
      select ${organizationId}, "x"."i", "x"."a", "x"."h"
      from json_to_recordset(${JSON.stringify(leaves)}::json) as "x"("i" bigint, "a" text, "h" text)
    ), "nodes" as (
      insert into "transparency_log_nodes" ("organization_id", "level", "node_index", "hash")
      select ${organizationId}, "x"."l", "x"."i", "x"."h"
      from json_to_recordset(${JSON.stringify(nodes)}::json) as "x"("l" integer, "i" bigint, "h" text)
    ), "marked" as (
      update "activities" as "t" set "log_index" = "x"."i"
      from json_to_recordset(${JSON.stringify(leaves)}::json) as "x"("i" bigint, "a" text, "h" text)
      where "t"."id" = "x"."a"
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
// the subtrees, every activity's log_index (by its primary key), and the head.
async function writeSqlite(trx: Tx, organizationId: string, appends: Append[], head: TransparencyLogHeadsTable): Promise<void> {
  const leaves = JSON.stringify(appends.map((a) => [a.leafIndex, a.activityId, a.leafHash]));
  const nodes = JSON.stringify(appends.flatMap((a) => a.nodes.map((n) => [n.level, n.node_index, n.hash])));
  await sql`insert into "transparency_log_leaves" ("organization_id", "leaf_index", "activity_id", "leaf_hash")
    select ${organizationId}, "value" ->> 0, "value" ->> 1, "value" ->> 2 from json_each(${leaves})`.execute(trx);
  await sql`insert into "transparency_log_nodes" ("organization_id", "level", "node_index", "hash")
    select ${organizationId}, "value" ->> 0, "value" ->> 1, "value" ->> 2 from json_each(${nodes})`.execute(trx);
  await sql`update "activities" set "log_index" = "j"."value" ->> 0
    from json_each(${leaves}) as "j" where "activities"."id" = "j"."value" ->> 1`.execute(trx);
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

/** The leaf recording `activityId`, if it is in its organization's log: found from the activity's
 * log_index (the leaves are keyed by their index only), and only if that leaf records this activity. */
export async function leafOfActivity(db: Db | Tx, organizationId: string, activityId: string) {
  const row = await db
    .selectFrom("activities as a")
    .innerJoin("transparency_log_leaves as l", (join) =>
      join.onRef("l.organization_id", "=", "a.organization_id").onRef("l.leaf_index", "=", "a.log_index"),
    )
    .select(["l.leaf_index", "l.leaf_hash"])
    .where("a.id", "=", activityId)
    .where("a.organization_id", "=", organizationId)
    .where("l.activity_id", "=", activityId)
    .executeTakeFirst();
  return row ? { leafIndex: Number(row.leaf_index), leafHash: Buffer.from(row.leaf_hash, "hex") } : undefined;
}
