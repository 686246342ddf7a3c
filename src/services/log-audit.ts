// Checking an organization's transparency log whole (`sigil audit verify`, docs/audit-log.md): every
// leaf against the activity it records, the tree against its stored subtrees and head, the signed
// checkpoints against the tree, and every final activity against the log. The first thing that does
// not match is named: its leaf index, its activity, and what is wrong.
import type { Db, Tx } from "../store/handles.js";
import type { ActivitiesTable } from "../store/schema.js";
import { appendLeaf, EMPTY_ROOT, leafHash, rootOf, type Frontier, type Hash } from "../store/merkle.js";
import { activityLeafHash, entryBytes, FINAL_STATUSES, logEntry, oldestPending, readHead } from "../store/transparency-log.js";
import { MAXIMUM_MERGE_DELAY_MS } from "./log-sequencer.js";
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
  /** Final activities not yet appended, within the maximum merge delay (not a problem). */
  pending?: number;
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

/** Checks the organization's log as stored; `verifier` (the deployment's) checks the checkpoints'
 * signatures; a final activity not appended `MAXIMUM_MERGE_DELAY_MS` after `now` is a problem. */
export async function verifyStoredLog(
  db: Db | Tx,
  organizationId: string,
  verifier: Verifier | null,
  now = Date.now(),
): Promise<LogVerification> {
  const head = await readHead(db, organizationId);
  const checkpoints = await checkpointsOf(db, organizationId);
  const result = (size: number, root: Hash, problem: LogProblem | null): LogVerification => ({
    organizationId,
    size,
    rootHash: root.toString("base64"),
    checkpoints: checkpoints.length,
    problem,
  });
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
  // Every final activity of the organization is an entry, or waits for the sequencer (not longer than
  // the maximum merge delay), and is only one of them: the entries (each an activity of this
  // organization, final as hashed) and the pending rows add up to its final activities.
  const [finals, waiting] = await Promise.all([
    db
      .selectFrom("activities")
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .where("organization_id", "=", organizationId)
      .where("status", "in", FINAL_STATUSES)
      .executeTakeFirstOrThrow(),
    db
      .selectFrom("transparency_log_pending")
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .where("organization_id", "=", organizationId)
      .executeTakeFirstOrThrow(),
  ]);
  const pending = Number(waiting.n);
  if (Number(finals.n) !== frontier.size + pending) {
    // Which one: a final activity neither an entry nor waiting (read only now: it scans the organization's activities).
    const stray = await db
      .selectFrom("activities as a")
      .select(["a.id", "a.status"])
      .where("a.organization_id", "=", organizationId)
      .where("a.status", "in", FINAL_STATUSES)
      .where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom("transparency_log_leaves as l")
              .select("l.leaf_index")
              .where("l.organization_id", "=", organizationId)
              .whereRef("l.activity_id", "=", "a.id"),
          ),
        ),
      )
      .where(({ not, exists, selectFrom }) =>
        not(
          exists(
            selectFrom("transparency_log_pending as p")
              .select("p.activity_id")
              .where("p.organization_id", "=", organizationId)
              .whereRef("p.activity_id", "=", "a.id"),
          ),
        ),
      )
      .limit(1)
      .executeTakeFirst();
    return result(frontier.size, root, {
      leafIndex: null,
      activityId: stray?.id ?? null,
      problem: stray
        ? `activity ${stray.id} (${stray.status}) is final but neither an entry of the log nor waiting for one: it was inserted into the database, or its entry removed`
        : `the organization has ${finals.n} final activities, but the log holds ${frontier.size} entries and ${pending} wait for one: an activity is in more than one entry, or waits though it is one`,
    });
  }
  const oldest = await oldestPending(db, organizationId);
  if (oldest && oldest.updated_at < now - MAXIMUM_MERGE_DELAY_MS)
    return result(frontier.size, root, {
      leafIndex: null,
      activityId: oldest.id,
      problem: `activity ${oldest.id} became final ${Math.round((now - oldest.updated_at) / 1000)} s ago but is not in the log (the maximum merge delay is ${MAXIMUM_MERGE_DELAY_MS / 1000} s): it was inserted into the database, its entry removed, or no server is sequencing`,
    });
  return { ...result(frontier.size, root, null), pending };
}

// ---- the export file: JSON lines ----------------------------------------------------------------
//   {"type":"header","format":"sigil.transparency-log.v1","organizationId","origin","verifierKey","treeSize","rootHash"}
//   {"type":"checkpoint","treeSize","rootHash","note"}   every checkpoint, smallest first
//   {"type":"entry","index","activityId","leafHash","entry"}   every entry, in order
// The checkpoints come before the entries so that a file is checked as it is read, however long.

export const EXPORT_FORMAT = "sigil.transparency-log.v1";

/** Writes the organization's log (its entries rebuilt from the activities, its stored checkpoints) as JSON lines to `write`. */
export async function exportLog(
  db: Db | Tx,
  organizationId: string,
  verifier: { name: string; verifierKey: string },
  write: (line: string) => Promise<void> | void,
): Promise<{ treeSize: number; entries: number; checkpoints: number }> {
  const head = await readHead(db, organizationId);
  const checkpoints = (await checkpointsOf(db, organizationId)).filter((c) => c.treeSize <= head.size);
  await write(
    JSON.stringify({
      type: "header",
      format: EXPORT_FORMAT,
      organizationId,
      origin: originOf(verifier.name, organizationId),
      verifierKey: verifier.verifierKey,
      treeSize: head.size,
      rootHash: head.root.toString("base64"),
    }),
  );
  for (const c of checkpoints)
    await write(JSON.stringify({ type: "checkpoint", treeSize: c.treeSize, rootHash: c.rootHash.toString("base64"), note: c.note }));
  let entries = 0;
  for (let from = 0; from < head.size; ) {
    const page = await db
      .selectFrom("transparency_log_leaves as l")
      .leftJoin("activities as a", "a.id", "l.activity_id")
      .select(["l.leaf_index", "l.activity_id", "l.leaf_hash"])
      .selectAll("a")
      .where("l.organization_id", "=", organizationId)
      .where("l.leaf_index", ">=", from)
      .where("l.leaf_index", "<", head.size)
      .orderBy("l.leaf_index")
      .limit(PAGE)
      .execute();
    if (page.length === 0) break;
    for (const row of page) {
      const index = Number(row.leaf_index);
      // An entry whose activity is gone is exported without its text: the file says so, and fails to verify.
      const entry = row.id ? canonicalEntry(row as unknown as ActivitiesTable, index) : null;
      await write(
        JSON.stringify({
          type: "entry",
          index,
          activityId: row.activity_id,
          leafHash: Buffer.from(row.leaf_hash, "hex").toString("base64"),
          entry,
        }),
      );
      entries++;
    }
    from = Number(page[page.length - 1]!.leaf_index) + 1;
  }
  return { treeSize: head.size, entries, checkpoints: checkpoints.length };
}

const canonicalEntry = (row: ActivitiesTable, index: number) => entryBytes(logEntry(row, index)).toString("utf8");

/** Checks an export file's lines, as read, against the verifier key: no database. */
export async function verifyExport(lines: AsyncIterable<string>, verifier: Verifier): Promise<LogVerification> {
  let header: { organizationId: string; origin: string; treeSize: number } | undefined;
  const checkpoints: { treeSize: number; rootHash: Buffer; note: string; line: number }[] = [];
  let frontier: Frontier = { size: 0, hashes: [] };
  let nextCheckpoint = 0;
  let lineNumber = 0;
  const result = (problem: LogProblem | null): LogVerification => ({
    organizationId: header?.organizationId ?? "",
    size: frontier.size,
    rootHash: rootOf(frontier).toString("base64"),
    checkpoints: checkpoints.length,
    problem,
  });
  const fileProblem = (problem: string, leafIndex: number | null = null, activityId: string | null = null) =>
    result({ leafIndex, activityId, problem: `line ${lineNumber}: ${problem}` });
  const checkReached = (): LogVerification | null => {
    while (nextCheckpoint < checkpoints.length && checkpoints[nextCheckpoint]!.treeSize === frontier.size) {
      const c = checkpoints[nextCheckpoint++]!;
      // The signed root against the entries' (the line's own rootHash is not signed, so not trusted).
      const wrong = checkNote(c, verifier, header!.organizationId, rootOf(frontier));
      if (wrong)
        return result({
          leafIndex: c.treeSize - 1,
          activityId: null,
          problem: `the checkpoint of ${c.treeSize} entries (line ${c.line}): ${wrong}: an entry before it was changed, removed, inserted or reordered, or the checkpoint forged`,
        });
    }
    return null;
  };
  for await (const text of lines) {
    lineNumber++;
    if (text.trim() === "") continue;
    let line: Record<string, unknown>;
    try {
      line = JSON.parse(text);
    } catch {
      return fileProblem("not a JSON line", frontier.size);
    }
    if (!header) {
      if (line.type !== "header" || line.format !== EXPORT_FORMAT || typeof line.organizationId !== "string")
        return fileProblem(`the file does not start with a ${EXPORT_FORMAT} header`);
      header = { organizationId: line.organizationId, origin: String(line.origin), treeSize: Number(line.treeSize) };
      if (header.origin !== originOf(verifier.name, header.organizationId))
        return fileProblem(
          `the log's origin ${header.origin} is not one the key ${verifier.name} signs for organization ${header.organizationId}`,
        );
      continue;
    }
    if (line.type === "checkpoint") {
      if (frontier.size > 0) return fileProblem("a checkpoint after the entries (the file was reordered)");
      const size = Number(line.treeSize);
      if (checkpoints.length > 0 && size <= checkpoints[checkpoints.length - 1]!.treeSize)
        return fileProblem("the checkpoints are not in increasing order of size (the file was reordered)");
      checkpoints.push({
        treeSize: size,
        rootHash: Buffer.from(String(line.rootHash), "base64"),
        note: String(line.note),
        line: lineNumber,
      });
      continue;
    }
    if (line.type !== "entry") return fileProblem(`a line of unknown type ${JSON.stringify(line.type)}`, frontier.size);
    if (frontier.size === 0) {
      const early = checkReached();
      if (early) return early;
    }
    const index = frontier.size;
    const activityId = typeof line.activityId === "string" ? line.activityId : null;
    if (line.index !== index)
      return fileProblem(
        typeof line.index === "number" && line.index > index
          ? `entry ${index} is missing here (the next line is entry ${line.index}): it was removed, or the lines reordered`
          : `entry ${String(line.index)} where entry ${index} belongs: a line was inserted or the lines reordered`,
        index,
        activityId,
      );
    if (typeof line.entry !== "string")
      return fileProblem(`entry ${index} has no text: its activity was missing at export`, index, activityId);
    const leaf = leafHash(Buffer.from(line.entry, "utf8"));
    if (leaf.toString("base64") !== line.leafHash)
      return fileProblem(`entry ${index} does not hash to its leaf hash: it was changed`, index, activityId);
    let recorded: { leafIndex?: unknown; id?: unknown };
    try {
      recorded = JSON.parse(line.entry);
    } catch {
      return fileProblem(`entry ${index} is not JSON`, index, activityId);
    }
    if (recorded.leafIndex !== index || recorded.id !== activityId)
      return fileProblem(
        `entry ${index} records activity ${String(recorded.id)} at index ${String(recorded.leafIndex)}: the lines were reordered`,
        index,
        activityId,
      );
    frontier = appendLeaf(frontier, leaf).frontier;
    const reached = checkReached();
    if (reached) return reached;
  }
  if (!header) return fileProblem("the file is empty");
  if (frontier.size === 0) {
    const early = checkReached();
    if (early) return early;
  }
  if (nextCheckpoint < checkpoints.length) {
    const c = checkpoints[nextCheckpoint]!;
    return result({
      leafIndex: frontier.size,
      activityId: null,
      problem: `the checkpoint of ${c.treeSize} entries (line ${c.line}) covers more than the file's ${frontier.size} entries: entries were removed`,
    });
  }
  if (frontier.size !== header.treeSize)
    return result({
      leafIndex: Math.min(frontier.size, header.treeSize),
      activityId: null,
      problem: `the header says ${header.treeSize} entries, the file holds ${frontier.size}`,
    });
  const covered = checkpoints.at(-1)?.treeSize ?? 0;
  if (covered < frontier.size)
    return result({
      leafIndex: covered,
      activityId: null,
      problem: `entries from ${covered} on are covered by no signed checkpoint in the file: they cannot be checked`,
    });
  return result(null);
}
