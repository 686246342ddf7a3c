// Each organization's transparency log (docs/audit-log.md): every activity that reaches a final status
// (completed, failed, rejected) becomes the next leaf of its organization's RFC 9162 Merkle tree, in
// the very transaction that records that status, so the log and the activities never disagree.
//
// Stored per organization: the head (size, root, and the right edge of the tree, from which a leaf's
// new nodes are computed without reading any other row), one row per leaf (the activity and its
// entry's leaf hash), and the hash of every complete subtree above the leaves, so that an inclusion or
// consistency proof is O(log n) rows read (merkle.ts plans them). An append writes the leaf, the
// subtrees it completes (one on average) and the head.
//
// No gap and no fork: an organization's appends are one after another. Across transactions the head
// row's lock orders them (FOR UPDATE; an exclusive activity already holds the organization's lock, a
// shared one — a signature — takes the head's with its organization's: database.ts, lockOrganization);
// inside one transaction shared by several activities (group-commit.ts), appends to one log are
// chained in the order they ask, each reading what the previous one wrote.
import crypto from "node:crypto";
import { sql } from "kysely";
import type { ActivitiesTable, TransparencyLogHeadsTable, TransparencyLogLeavesTable, TransparencyLogNodesTable } from "./schema.js";
import type { Db, Dialect, Tx } from "./handles.js";
import { batchWrites, type BatchWrites, sharedLocksHeld } from "./group-commit.js";
import {
  appendLeaf,
  EMPTY_ROOT,
  leafHash,
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
  // Written as loops over strings: every activity that completes is hashed through here on the write path.
  if (value === null || typeof value !== "object") return JSON.stringify(value) ?? "null";
  if (Array.isArray(value)) {
    let out = "[";
    for (let i = 0; i < value.length; i++) out += (i === 0 ? "" : ",") + canonicalJson(value[i]);
    return `${out}]`;
  }
  const object = value as Record<string, unknown>;
  let out = "{";
  for (const key of Object.keys(object).sort()) {
    const item = object[key];
    if (item === undefined) continue;
    out += `${out.length === 1 ? "" : ","}${JSON.stringify(key)}:${canonicalJson(item)}`;
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
export const activityLeafHash = (row: ActivitiesTable, leafIndex: number): Hash => leafHash(entryBytes(logEntry(row, leafIndex)));

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

/** Makes the (empty) log of a new organization, so the row whose lock orders its appends exists. */
export async function createLog(trx: Tx | Db, organizationId: string, now: number): Promise<void> {
  await trx
    .insertInto("transparency_log_heads")
    .values(emptyHeadRow(organizationId, now))
    .onConflict((c) => c.column("organization_id").doNothing())
    .execute();
}

const headColumns = ["size", "root_hash", "frontier"] as const;

const headForUpdate = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db.selectFrom("transparency_log_heads").select(headColumns).where("organization_id", "=", slot("organizationId")).forUpdate(),
);
const headPlain = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db.selectFrom("transparency_log_heads").select(headColumns).where("organization_id", "=", slot("organizationId")),
);

/**
 * PostgreSQL, a batch of shared activities (group-commit.ts): the organization's row FOR SHARE and
 * its log's head FOR UPDATE in one statement, neither waited for (SKIP LOCKED): no row means one of
 * them is held by another transaction (or the log has no head yet), and the member runs apart.
 */
export async function organizationAndLogAtOnce(
  trx: Tx,
  organizationId: string,
): Promise<Pick<TransparencyLogHeadsTable, "size" | "root_hash" | "frontier"> | undefined> {
  // Two locking clauses, one per table, which Kysely's builder does not write: added at the end of a
  // select it builds (a select, so the group commit does not count it as a write).
  return trx
    .selectFrom("organizations as o")
    .innerJoin("transparency_log_heads as h", "h.organization_id", "o.id")
    .select(["h.size", "h.root_hash", "h.frontier"])
    .where("o.id", "=", organizationId)
    .modifyEnd(sql`for share of "o" skip locked for update of "h" skip locked`)
    .executeTakeFirst();
}

/** PostgreSQL, a batch whose organizationAndLogAtOnce found no row: the organization's row FOR SHARE
 * (not waited for) if its log has no head at all (an organization made by a path that makes none), in
 * which case its first append makes the head. No row: the organization or its log is held elsewhere. */
export async function organizationWithoutLogAtOnce(trx: Tx, organizationId: string): Promise<boolean> {
  const row = await trx
    .selectFrom("organizations as o")
    .select("o.id")
    .where("o.id", "=", organizationId)
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom("transparency_log_heads as h").select("h.size").whereRef("h.organization_id", "=", "o.id"))),
    )
    .modifyEnd(sql`for share of "o" skip locked`)
    .executeTakeFirst();
  return row !== undefined;
}

/** Appends this process made outside shared transactions, per organization: a head a shared transaction
 * keeps in memory is good only while this count is what it was when the head was read (on SQLite an
 * exclusive activity may join the same transaction between two shared ones, and append). */
const appendsApart = new Map<string, number>();

interface HeldHead {
  /** The head after the last append this transaction computed (resolves once the first read is done). */
  head: Promise<LogHead>;
  appendsApart: number;
}

/** Per shared transaction (its shared-locks map) and organization: the head as its last append left it. */
const heldHeads = new WeakMap<object, Map<string, HeldHead>>();

function heldHeadsOf(batch: object): Map<string, HeldHead> {
  let heads = heldHeads.get(batch);
  if (!heads) heldHeads.set(batch, (heads = new Map()));
  return heads;
}

/** Notes the head a batch read when it locked the log (PostgreSQL): its first append starts from it. */
export function rememberHead(
  batch: object,
  organizationId: string,
  row: Pick<TransparencyLogHeadsTable, "size" | "root_hash" | "frontier">,
) {
  const heads = heldHeadsOf(batch);
  if (!heads.has(organizationId))
    heads.set(organizationId, { head: Promise.resolve(headOf(row)), appendsApart: appendsApart.get(organizationId) ?? 0 });
}

export type LockedHeadRow = Pick<TransparencyLogHeadsTable, "size" | "root_hash" | "frontier">;

/** Per transaction holding an organization's row lock exclusively (PostgreSQL): the log's head read with it. */
const lockedHeads = new WeakMap<object, Map<string, LogHead>>();

/** Notes the head read with the organization's exclusive lock (database.ts, lockOrganization). */
export function rememberLockedHead(trx: object, organizationId: string, row: LockedHeadRow) {
  let heads = lockedHeads.get(trx);
  if (!heads) lockedHeads.set(trx, (heads = new Map()));
  heads.set(organizationId, headOf(row));
}

/** The head, locked for this transaction (PostgreSQL; SQLite's one writer needs no lock), made if missing. */
async function lockedHead(trx: Tx, dialect: Dialect, organizationId: string, now: number): Promise<LogHead> {
  const read = dialect === "postgres" ? headForUpdate : headPlain;
  let row = await read.first(trx, { organizationId });
  if (!row) {
    await createLog(trx, organizationId, now);
    row = await read.first(trx, { organizationId });
  }
  return headOf(row!);
}

/** What one append writes: the leaf, the subtrees it completes, the new head. */
interface Append {
  organizationId: string;
  leafIndex: number;
  activityId: string;
  leafHash: string;
  nodes: { level: number; node_index: number; hash: string }[];
  /** The head after it (its root is computed only for the head that is written). */
  head: LogHead;
  updatedAt: number;
}

/** The head row an append leaves. */
const headRow = (a: Append): TransparencyLogHeadsTable => ({
  organization_id: a.organizationId,
  size: a.head.size,
  root_hash: a.head.root.toString("hex"),
  frontier: a.head.frontier.hashes.map((h) => h.toString("hex")).join(""),
  updated_at: a.updatedAt,
});

/** The rows of several appends: every leaf and subtree, and each log's head as the last of them left it. */
function rowsOf(appends: Append[]) {
  const last = new Map<string, Append>();
  for (const a of appends) if ((last.get(a.organizationId)?.head.size ?? -1) < a.head.size) last.set(a.organizationId, a);
  const heads = [...last.values()].map(headRow);
  return {
    leaves: appends.map((a) => ({
      organization_id: a.organizationId,
      leaf_index: a.leafIndex,
      activity_id: a.activityId,
      leaf_hash: a.leafHash,
    })),
    nodes: appends.flatMap((a) => a.nodes.map((n) => ({ organization_id: a.organizationId, ...n }))),
    heads,
  };
}

// PostgreSQL: any number of appends in one statement (one round trip). A head only ever moves forward.
async function writeAppendsPostgres(trx: Tx, appends: Append[]): Promise<void> {
  const { leaves, nodes, heads } = rowsOf(appends);
  await sql`with "leaves" as (
      insert into "transparency_log_leaves" ("organization_id", "leaf_index", "activity_id", "leaf_hash")
      select "l"."organization_id", "l"."leaf_index", "l"."activity_id", "l"."leaf_hash"
      from json_to_recordset(${JSON.stringify(leaves)}::json)
        as "l"("organization_id" text, "leaf_index" bigint, "activity_id" text, "leaf_hash" text)
    ), "nodes" as (
      insert into "transparency_log_nodes" ("organization_id", "level", "node_index", "hash")
      select "n"."organization_id", "n"."level", "n"."node_index", "n"."hash"
      from json_to_recordset(${JSON.stringify(nodes)}::json)
        as "n"("organization_id" text, "level" integer, "node_index" bigint, "hash" text)
    )
    update "transparency_log_heads" as "h" set "size" = "x"."size", "root_hash" = "x"."root_hash",
      "frontier" = "x"."frontier", "updated_at" = "x"."updated_at"
    from json_to_recordset(${JSON.stringify(heads)}::json)
      as "x"("organization_id" text, "size" bigint, "root_hash" text, "frontier" text, "updated_at" bigint)
    where "h"."organization_id" = "x"."organization_id" and "h"."size" < "x"."size"`.execute(trx);
}

const leafInsert = prepare((db, slot: Slots<TransparencyLogLeavesTable>) =>
  db.insertInto("transparency_log_leaves").values({
    organization_id: slot("organization_id"),
    leaf_index: slot("leaf_index"),
    activity_id: slot("activity_id"),
    leaf_hash: slot("leaf_hash"),
  }),
);
const nodeInsert = prepare((db, slot: Slots<TransparencyLogNodesTable>) =>
  db.insertInto("transparency_log_nodes").values({
    organization_id: slot("organization_id"),
    level: slot("level"),
    node_index: slot("node_index"),
    hash: slot("hash"),
  }),
);
const headUpdate = prepare((db, slot: Slots<TransparencyLogHeadsTable>) =>
  db
    .updateTable("transparency_log_heads")
    .set({ size: slot("size"), root_hash: slot("root_hash"), frontier: slot("frontier"), updated_at: slot("updated_at") })
    .where("organization_id", "=", slot("organization_id"))
    .where("size", "<", slot("size")),
);

// SQLite: statements cost no round trip. One append: its statements prepared once (store/prepared.ts);
// several: one insert of all their leaves, one of all their subtrees, one update per log's head.
async function writeAppendsSqlite(trx: Tx, appends: Append[]): Promise<void> {
  const { leaves, nodes, heads } = rowsOf(appends);
  if (appends.length === 1) {
    await leafInsert.run(trx, leaves[0]!);
    for (const n of nodes) await nodeInsert.run(trx, n);
  } else {
    await trx.insertInto("transparency_log_leaves").values(leaves).execute();
    if (nodes.length > 0) await trx.insertInto("transparency_log_nodes").values(nodes).execute();
  }
  for (const head of heads) await headUpdate.run(trx, head);
}

const writeAppends = (trx: Tx, dialect: Dialect, appends: Append[]) =>
  dialect === "postgres" ? writeAppendsPostgres(trx, appends) : writeAppendsSqlite(trx, appends);

/** The appends a shared transaction's members computed, written together before it commits (group-commit.ts). */
class PendingAppends implements BatchWrites {
  private appends: Append[] = [];
  constructor(private readonly dialect: Dialect) {}

  add(append: Append): void {
    this.appends.push(append);
  }

  async flush(trx: Tx): Promise<void> {
    if (this.appends.length === 0) return;
    const appends = this.appends;
    this.appends = [];
    await writeAppends(trx, this.dialect, appends);
  }
}

const PENDING_APPENDS = Symbol("transparency log appends");

/** The append of `leaf` to `head`, as rows. */
export function appendOf(
  organizationId: string,
  head: LogHead,
  activityId: string,
  leaf: Hash,
  now: number,
): { append: Append; next: LogHead } {
  const { frontier, completed } = appendLeaf(head.frontier, leaf);
  // The root folds the whole right edge (a hash per level): only the head that is written needs it,
  // once per transaction and log however many appends it holds.
  let root: Hash | undefined;
  const next: LogHead = {
    size: frontier.size,
    frontier,
    get root() {
      root ??= foldFrontier(frontier);
      return root;
    },
  };
  return {
    next,
    append: {
      organizationId,
      leafIndex: head.size,
      activityId,
      leafHash: leaf.toString("hex"),
      nodes: completed.map((c) => ({ level: c.subtree.level, node_index: c.subtree.index, hash: c.hash.toString("hex") })),
      head: next,
      updatedAt: now,
    },
  };
}

/**
 * Appends the activity `row`, which has just reached a final status, as the next leaf of its
 * organization's log, in the transaction `trx` that records it. Resolves with its leaf index.
 */
export async function appendToLog(trx: Tx, dialect: Dialect, row: ActivitiesTable, now: number): Promise<number> {
  const organizationId = row.organization_id;
  const batch = sharedLocksHeld(trx);
  const pending = batchWrites(trx, PENDING_APPENDS, () => new PendingAppends(dialect));
  if (!batch || !pending) {
    // Read with the organization's exclusive lock, when this transaction took it (one round trip fewer).
    const known = lockedHeads.get(trx)?.get(organizationId);
    const head = known ?? (await lockedHead(trx, dialect, organizationId, now));
    const { append, next } = appendOf(organizationId, head, row.id, activityLeafHash(row, head.size), now);
    await writeAppends(trx, dialect, [append]);
    if (known) lockedHeads.get(trx)!.set(organizationId, next);
    appendsApart.set(organizationId, (appendsApart.get(organizationId) ?? 0) + 1);
    return append.leafIndex;
  }
  // Several activities share this transaction, which holds the log (the head's row lock on PostgreSQL,
  // the one writer on SQLite): each append is computed from the head the previous one left, in the
  // order they ask, and handed to the transaction, which writes them all before it commits (a few
  // statements per batch instead of three per activity; a batch's appends are never read before then,
  // as an exclusive member makes the batch write them first: group-commit.ts, BatchWrites).
  const heads = heldHeadsOf(batch);
  const apart = appendsApart.get(organizationId) ?? 0;
  let held = heads.get(organizationId);
  if (!held || held.appendsApart !== apart) {
    held = { head: (held?.head ?? Promise.resolve()).then(() => lockedHead(trx, dialect, organizationId, now)), appendsApart: apart };
    heads.set(organizationId, held);
  }
  const computed = held.head.then((head) => appendOf(organizationId, head, row.id, activityLeafHash(row, head.size), now));
  held.head = computed.then((c) => c.next);
  const { append } = await computed;
  pending.add(append);
  return append.leafIndex;
}

/** The log's head as committed (no lock): what a checkpoint or a proof is made of. */
export async function readHead(db: Db | Tx, organizationId: string): Promise<LogHead | undefined> {
  const row = await headPlain.first(db, { organizationId });
  return row ? headOf(row) : undefined;
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

/** The leaf recording `activityId`, if it is in its organization's log. */
export async function leafOfActivity(db: Db | Tx, organizationId: string, activityId: string) {
  const row = await db
    .selectFrom("transparency_log_leaves")
    .select(["leaf_index", "leaf_hash"])
    .where("organization_id", "=", organizationId)
    .where("activity_id", "=", activityId)
    .executeTakeFirst();
  return row ? { leafIndex: Number(row.leaf_index), leafHash: Buffer.from(row.leaf_hash, "hex") } : undefined;
}
