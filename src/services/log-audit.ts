// Checking an organization's transparency log whole (`sigil audit verify`, docs/audit-log.md): every
// leaf against the activity it records, the tree against its stored subtrees and head, the signed
// checkpoints against the tree, and every final activity against the log. The first thing that does
// not match is named: its leaf index, its activity, and what is wrong.
import type { Db, Tx } from "../store/handles.js";
import type { ActivitiesTable } from "../store/schema.js";
import { appendLeaf, EMPTY_ROOT, rootOf, type Frontier, type Hash } from "../store/merkle.js";
import { activityLeafHash, FINAL_STATUSES, readHead } from "../store/transparency-log.js";
import { checkpointsOf, NoteError, openNote, originOf, parseCheckpoint, type StoredCheckpoint, type Verifier } from "./log-checkpoints.js";

export interface LogProblem {
  /** The first leaf found broken (null: the problem is no one leaf's, such as an activity left out). */
  leafIndex: number | null;
  activityId: string | null;
  problem: string;
}

export interface LogVerification {
  organizationId: string;
  size: number;
  rootHash: string;
  checkpoints: number;
  problem: LogProblem | null;
}

const PAGE = 5_000;

/** A checkpoint's note checked against the verifier: its origin, size and root, as signed. */
export function checkNote(
  checkpoint: { treeSize: number; note: string },
  verifier: Verifier,
  organizationId: string,
  root: Hash,
): string | null {
  let body;
  try {
    body = parseCheckpoint(openNote(checkpoint.note, verifier));
  } catch (error) {
    return error instanceof NoteError ? error.message : String(error);
  }
  if (body.origin !== originOf(verifier.name, organizationId)) return `its origin is ${body.origin}, not this organization's log`;
  if (body.size !== checkpoint.treeSize) return `it is signed for ${body.size} entries, not ${checkpoint.treeSize}`;
  if (!body.root.equals(root)) return `the root hash it signs is not the root of the log's first ${checkpoint.treeSize} entries`;
  return null;
}

/** Complete subtrees as the leaves make them, per level, kept as packed hashes to compare with the store. */
class ComputedNodes {
  readonly levels: Buffer[] = [];
  constructor(size: number) {
    for (let level = 1; size >> level > 0; level++) this.levels.push(Buffer.alloc((size >> level) * 32));
  }
  set(level: number, index: number, hash: Hash) {
    hash.copy(this.levels[level - 1]!, index * 32);
  }
  get(level: number, index: number): Buffer | undefined {
    const packed = this.levels[level - 1];
    return packed && (index + 1) * 32 <= packed.length ? packed.subarray(index * 32, index * 32 + 32) : undefined;
  }
}

/** Checks the organization's log as stored; `verifier` (the deployment's) checks the checkpoints' signatures. */
export async function verifyStoredLog(db: Db | Tx, organizationId: string, verifier: Verifier | null): Promise<LogVerification> {
  const head = await readHead(db, organizationId);
  const checkpoints = await checkpointsOf(db, organizationId);
  const result = (size: number, root: Hash, problem: LogProblem | null): LogVerification => ({
    organizationId,
    size,
    rootHash: root.toString("base64"),
    checkpoints: checkpoints.length,
    problem,
  });
  if (!head)
    return result(0, EMPTY_ROOT, { leafIndex: null, activityId: null, problem: `organization ${organizationId} has no transparency log` });
  let frontier: Frontier = { size: 0, hashes: [] };
  const nodes = new ComputedNodes(head.size);
  let nextCheckpoint = 0;
  const checkpointProblem = (c: StoredCheckpoint, root: Hash): LogProblem | null => {
    if (!c.rootHash.equals(root))
      return {
        leafIndex: c.treeSize - 1,
        activityId: null,
        problem: `the checkpoint of ${c.treeSize} entries does not match the log's first ${c.treeSize}: an entry before it was changed, removed, inserted or reordered`,
      };
    const wrong = verifier ? checkNote(c, verifier, organizationId, root) : null;
    return wrong
      ? { leafIndex: c.treeSize - 1, activityId: null, problem: `the signed checkpoint of ${c.treeSize} entries: ${wrong}` }
      : null;
  };
  while (nextCheckpoint < checkpoints.length && checkpoints[nextCheckpoint]!.treeSize === 0) {
    const problem = checkpointProblem(checkpoints[nextCheckpoint++]!, EMPTY_ROOT);
    if (problem) return result(0, EMPTY_ROOT, problem);
  }
  for (let from = 0; ; ) {
    const page = await db
      .selectFrom("transparency_log_leaves as l")
      .leftJoin("activities as a", "a.id", "l.activity_id")
      .select(["l.leaf_index", "l.activity_id", "l.leaf_hash"])
      .select([
        "a.id",
        "a.organization_id",
        "a.type",
        "a.status",
        "a.intent",
        "a.result",
        "a.failure",
        "a.votes",
        "a.fingerprint",
        "a.timestamp_ms",
        "a.created_at",
        "a.updated_at",
      ])
      .where("l.organization_id", "=", organizationId)
      .where("l.leaf_index", ">=", from)
      .orderBy("l.leaf_index")
      .limit(PAGE)
      .execute();
    for (const row of page) {
      const index = frontier.size;
      const at = (problem: string): LogVerification =>
        result(frontier.size, rootOf(frontier), { leafIndex: index, activityId: row.activity_id, problem });
      if (Number(row.leaf_index) !== index)
        return result(frontier.size, rootOf(frontier), {
          leafIndex: index,
          activityId: null,
          problem: `entry ${index} is missing from the log (the next stored entry is ${row.leaf_index}): it was removed`,
        });
      if (!row.id) return at(`the activity of entry ${index} is not in the database: it was removed`);
      if (row.organization_id !== organizationId)
        return at(`the activity of entry ${index} belongs to organization ${row.organization_id}`);
      const leaf = Buffer.from(row.leaf_hash, "hex");
      let computed: Hash;
      try {
        computed = activityLeafHash(row as unknown as ActivitiesTable, index);
      } catch {
        return at(`the activity of entry ${index} is not readable as recorded (its JSON columns were changed)`);
      }
      if (!computed.equals(leaf))
        return at(
          `the activity as stored does not hash to the leaf hash of entry ${index}: it (or the leaf) was changed after it was logged, or the entries were reordered`,
        );
      const appended = appendLeaf(frontier, leaf);
      frontier = appended.frontier;
      for (const c of appended.completed) nodes.set(c.subtree.level, c.subtree.index, c.hash);
      while (nextCheckpoint < checkpoints.length && checkpoints[nextCheckpoint]!.treeSize === frontier.size) {
        const problem = checkpointProblem(checkpoints[nextCheckpoint++]!, rootOf(frontier));
        if (problem) return result(frontier.size, rootOf(frontier), problem);
      }
    }
    if (page.length < PAGE) break;
    from = Number(page[page.length - 1]!.leaf_index) + 1;
  }
  const root = rootOf(frontier);
  if (frontier.size < head.size)
    return result(frontier.size, root, {
      leafIndex: frontier.size,
      activityId: null,
      problem: `the log's head says ${head.size} entries, but entries from ${frontier.size} on are missing: they were removed`,
    });
  if (frontier.size > head.size)
    return result(frontier.size, root, {
      leafIndex: head.size,
      activityId: null,
      problem: `the log's head says ${head.size} entries, but it holds ${frontier.size}: entries from ${head.size} on were inserted`,
    });
  if (!head.root.equals(root) || head.frontier.hashes.some((h, i) => !h.equals(frontier.hashes[i]!)))
    return result(frontier.size, root, {
      leafIndex: null,
      activityId: null,
      problem: "the log's stored head (its root hash or right edge) does not match its entries",
    });
  if (nextCheckpoint < checkpoints.length) {
    const beyond = checkpoints[nextCheckpoint]!;
    return result(frontier.size, root, {
      leafIndex: frontier.size,
      activityId: null,
      problem: `a checkpoint of ${beyond.treeSize} entries was signed, but the log holds only ${frontier.size}: entries were removed`,
    });
  }
  // The stored subtrees, which proofs are read from, against those the entries make.
  for (let after = { level: 0, index: -1 }; ; ) {
    const page = await db
      .selectFrom("transparency_log_nodes")
      .select(["level", "node_index", "hash"])
      .where("organization_id", "=", organizationId)
      .where((eb) => eb.or([eb("level", ">", after.level), eb.and([eb("level", "=", after.level), eb("node_index", ">", after.index)])]))
      .orderBy("level")
      .orderBy("node_index")
      .limit(PAGE * 4)
      .execute();
    for (const n of page) {
      const level = Number(n.level);
      const index = Number(n.node_index);
      const expected = nodes.get(level, index);
      if (!expected || !expected.equals(Buffer.from(n.hash, "hex")))
        return result(frontier.size, root, {
          leafIndex: index * 2 ** level,
          activityId: null,
          problem: `the stored subtree of entries ${index * 2 ** level} to ${(index + 1) * 2 ** level - 1} does not match them: proofs read from it would not verify`,
        });
    }
    if (page.length < PAGE * 4) break;
    const last = page[page.length - 1]!;
    after = { level: Number(last.level), index: Number(last.node_index) };
  }
  // Every final activity of the organization is an entry.
  const unlogged = await db
    .selectFrom("activities as a")
    .select(["a.id", "a.status"])
    .where("a.organization_id", "=", organizationId)
    .where("a.status", "in", [...FINAL_STATUSES])
    .where(({ not, exists, selectFrom }) =>
      not(exists(selectFrom("transparency_log_leaves as l").select("l.leaf_index").whereRef("l.activity_id", "=", "a.id"))),
    )
    .limit(1)
    .executeTakeFirst();
  if (unlogged)
    return result(frontier.size, root, {
      leafIndex: null,
      activityId: unlogged.id,
      problem: `activity ${unlogged.id} is ${unlogged.status} but is not in the log: it was inserted into the database, or its entry removed`,
    });
  return result(frontier.size, root, null);
}
