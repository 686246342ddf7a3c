// Checking an organization's transparency log whole (`sigil audit verify`, docs/audit-log.md): every
// leaf against the activity it records, the tree against its stored subtrees and head, the signed
// checkpoints against the tree, and every final activity against the log. The first thing that does
// not match is named: its leaf index, its activity, and what is wrong.
import os from "node:os";
import type { Worker } from "node:worker_threads";
import { PostgresAdapter, sql } from "kysely";
import type { Db, Tx } from "../store/handles.js";
import type { ActivitiesTable } from "../store/schema.js";
import { appendLeaf, leafHashOfText, rangeSubtrees, rootOf, type Frontier, type Hash } from "../store/merkle.js";
import { startModuleWorker } from "../store/module-worker.js";
import { entryBytes, FINAL_STATUSES, logEntry, oldestPending, readHead } from "../store/transparency-log.js";
import {
  checkLeafPage,
  LEAF_ROW_COLUMNS,
  PAGE_LEAVES,
  PAGE_LEVELS,
  type CheckedPage,
  type LeafPageAnswer,
  type LeafPageTask,
} from "./log-audit-leaves.js";
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

/** Threads checking a large log's leaves: one per core (the verifying thread mostly waits for the
 * database meanwhile), at most eight. */
export const defaultVerifyThreads = () => Math.min(8, os.availableParallelism());

/** Threads that check pages of leaves (log-audit-worker.ts), handed pages in turn; with none, each page
 * is checked on this thread as it is handed over. */
class LeafCheckers {
  private readonly workers: Worker[] = [];
  private readonly pending = new Map<number, { resolve(page: CheckedPage): void; reject(error: Error): void }>();
  private nextId = 0;
  private closed = false;

  constructor(readonly count: number) {
    for (let i = 0; i < count; i++) {
      const worker = startModuleWorker(import.meta.url, "log-audit-worker", null);
      worker.on("message", (answer: LeafPageAnswer) => {
        const task = this.pending.get(answer.id);
        this.pending.delete(answer.id);
        if ("error" in answer) task?.reject(new Error(`a leaf-checking thread: ${answer.error}`));
        else task?.resolve(answer.page);
      });
      const fail = (error: Error) => {
        if (this.closed) return;
        for (const task of this.pending.values()) task.reject(new Error(`a leaf-checking thread stopped: ${error.message}`));
        this.pending.clear();
      };
      worker.on("error", fail);
      worker.on("exit", (code) => fail(new Error(`exit code ${code}`)));
      this.workers.push(worker);
    }
  }

  check(rows: string[], start: number, organizationId: string): Promise<CheckedPage> {
    if (this.workers.length === 0) return Promise.resolve(checkLeafPage(rows, start, organizationId));
    const id = this.nextId++;
    const worker = this.workers[id % this.workers.length]!;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage({ id, rows, start, organizationId } satisfies LeafPageTask);
    });
  }

  /** Stops the threads; pages still being checked are not answered (their verdict is no longer wanted). */
  async close(): Promise<void> {
    this.closed = true;
    this.pending.clear();
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}

/** The page of leaves from entry `start` (PAGE_LEAVES of them, fewer at the log's end or where some
 * are missing), each row with its activity as one JSON array of LEAF_ROW_COLUMNS (one string to hand
 * to a thread), in leaf order. */
async function readLeafRows(db: Db | Tx, organizationId: string, start: number): Promise<string[]> {
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  const columns = sql.raw(LEAF_ROW_COLUMNS.join(", "));
  // PostgreSQL's json would be parsed by the driver on this thread: it is read as text.
  const row = postgres ? sql`json_build_array(${columns})::text` : sql`json_array(${columns})`;
  const { rows } = await sql<{ r: string }>`select ${row} as "r"
    from "transparency_log_leaves" as "l" left join "activities" as "a" on "a"."id" = "l"."activity_id"
    where "l"."organization_id" = ${organizationId} and "l"."leaf_index" >= ${start} and "l"."leaf_index" < ${start + PAGE_LEAVES}
    order by "l"."leaf_index"`.execute(db);
  return rows.map((r) => r.r);
}

/** The first leaf stored from entry `from` on, if any. */
async function nextLeafIndex(db: Db | Tx, organizationId: string, from: number): Promise<number | null> {
  const row = await db
    .selectFrom("transparency_log_leaves")
    .select("leaf_index")
    .where("organization_id", "=", organizationId)
    .where("leaf_index", ">=", from)
    .orderBy("leaf_index")
    .limit(1)
    .executeTakeFirst();
  return row ? Number(row.leaf_index) : null;
}

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
    const packed = this.levels[level - 1];
    if (packed && index * 32 < packed.length) hash.copy(packed, index * 32);
  }
  /** A checked page's complete subtrees, up to its first broken leaf. */
  setPage(page: CheckedPage) {
    for (let level = 1; level <= page.nodes.length; level++) {
      const packed = this.levels[level - 1];
      const at = (page.start >> level) * 32;
      if (packed && at < packed.length) packed.set(page.nodes[level - 1]!.subarray(0, packed.length - at), at);
    }
  }
  private readonly hex: string[] = [];
  /** How many complete subtrees of `level` the leaves make. */
  count(level: number): number {
    return level >= 1 ? (this.levels[level - 1]?.length ?? 0) / 32 : 0;
  }
  private hexOf(level: number): string {
    return (this.hex[level - 1] ??= this.levels[level - 1]!.toString("hex"));
  }
  /** Whether `hashes` (hex) are the hashes of the `count` subtrees of `level` from `from` on, one after another. */
  spell(level: number, from: number, count: number, hashes: string): boolean {
    return hashes.length === count * 64 && from + count <= this.count(level) && this.hexOf(level).startsWith(hashes, from * 64);
  }
  /** Whether `hash` (hex, as stored) is the hash of the subtree (level, index) the leaves make. */
  matches(level: number, index: number, hash: string): boolean {
    const packed = this.levels[level - 1];
    if (!packed || index < 0 || (index + 1) * 32 > packed.length) return false;
    // Compared as text, with no buffer made per node (a million of them at a million entries); hex
    // written otherwise (upper case) is compared as the bytes it stands for.
    return (
      (hash.length === 64 && this.hexOf(level).startsWith(hash, index * 64)) ||
      packed.subarray(index * 32, index * 32 + 32).equals(Buffer.from(hash, "hex"))
    );
  }
}

const SUBTREES_AT_ONCE = 32_768;

/** The first stored subtree, in order of level and index, that is not one the leaves make (`nodes`). A
 * level is read in ranges of indexes, each as one string of its hashes in order: a range whose stored
 * subtrees are the whole range and spell the hashes made is right, with no row read; any other is
 * read row by row, for the first that is wrong. */
async function storedSubtreeProblem(
  db: Db | Tx,
  organizationId: string,
  nodes: ComputedNodes,
): Promise<{ level: number; index: number } | null> {
  const ofLog = db.selectFrom("transparency_log_nodes").where("organization_id", "=", organizationId);
  // The lowest and the highest level, each one step down the primary key.
  const lowest = await ofLog.select("level").orderBy("level").limit(1).executeTakeFirst();
  const highest = await ofLog.select("level").orderBy("level", "desc").limit(1).executeTakeFirst();
  if (!lowest || !highest) return null;
  // SQLite concatenates in the order it reads the range (its primary key's); an ORDER BY would sort
  // the range again. Should the order ever differ, the range is read row by row.
  const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
  const hashes = postgres ? sql<string>`string_agg("hash", '' order by "node_index")` : sql<string>`group_concat("hash", '')`;
  const firstWrong = async (level: number, from: number, to: number | null) => {
    const rows = await ofLog
      .select(["node_index", "hash"])
      .where("level", "=", level)
      .where("node_index", ">=", from)
      .$if(to !== null, (q) => q.where("node_index", "<", to!))
      .orderBy("node_index")
      .execute();
    const wrong = rows.find((r) => !nodes.matches(level, Number(r.node_index), r.hash));
    return wrong ? { level, index: Number(wrong.node_index) } : null;
  };
  for (let level = Number(lowest.level); level <= Number(highest.level); level++) {
    const made = nodes.count(level);
    const below = await ofLog
      .select("node_index")
      .where("level", "=", level)
      .where("node_index", "<", 0)
      .orderBy("node_index")
      .limit(1)
      .executeTakeFirst();
    if (below) return { level, index: Number(below.node_index) };
    for (let from = 0; from < made; from += SUBTREES_AT_ONCE) {
      const to = Math.min(made, from + SUBTREES_AT_ONCE);
      const range = await ofLog
        .select((eb) => [eb.fn.countAll<number>().as("n"), eb.fn.min("node_index").as("lowest"), hashes.as("hashes")])
        .where("level", "=", level)
        .where("node_index", ">=", from)
        .where("node_index", "<", to)
        .executeTakeFirstOrThrow();
      const n = Number(range.n);
      if (n === 0 || (n === to - from && nodes.spell(level, from, n, String(range.hashes)))) continue;
      const wrong = await firstWrong(level, from, to);
      if (wrong) return wrong;
    }
    const beyond = await ofLog
      .select("node_index")
      .where("level", "=", level)
      .where("node_index", ">=", made)
      .orderBy("node_index")
      .limit(1)
      .executeTakeFirst();
    if (beyond) return { level, index: Number(beyond.node_index) };
  }
  return null;
}

/** Checks the organization's log as stored; `verifier` (the deployment's) checks the checkpoints'
 * signatures; a final activity not appended `MAXIMUM_MERGE_DELAY_MS` after `now` is a problem. */
export async function verifyStoredLog(
  db: Db | Tx,
  organizationId: string,
  verifier: Verifier | null,
  now = Date.now(),
  options: { threads?: number } = {},
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
  const nodes = new ComputedNodes(head.size);
  // The tree as far as the pages checked so far reach (`pages.size` leaves, a multiple of a page), and
  // the page being added: the right edge at any size within it is the pages' edge and the page's own
  // complete subtrees (the page starts at a multiple of its size, a power of two).
  let pages: Frontier = { size: 0, hashes: [] };
  let page: CheckedPage | null = null;
  const frontierAt = (size: number): Frontier => {
    if (!page || size <= page.start) return pages;
    const hashes = [...pages.hashes];
    for (const s of rangeSubtrees(page.start, size)) {
      const local = s.index - (page.start >> s.level);
      const packed = s.level === 0 ? page.leaves : page.nodes[s.level - 1]!;
      hashes.push(Buffer.from(packed.buffer, packed.byteOffset + local * 32, 32));
    }
    return { size, hashes };
  };
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
  /** The checkpoints of sizes up to `size` against the tree at their size: the first that does not match. */
  const checkpointsUpTo = (size: number): LogVerification | null => {
    while (nextCheckpoint < checkpoints.length && checkpoints[nextCheckpoint]!.treeSize <= size) {
      const c = checkpoints[nextCheckpoint++]!;
      const root = rootOf(frontierAt(c.treeSize));
      const problem = checkpointProblem(c, root);
      if (problem) return result(c.treeSize, root, problem);
    }
    return null;
  };
  const early = checkpointsUpTo(0);
  if (early) return early;
  // Pages are read ahead while earlier ones are checked (on threads when the log is large), and their
  // answers taken in order: the first broken leaf is the one a check leaf by leaf would name.
  const checkers = new LeafCheckers(options.threads ?? (head.size >= 4 * PAGE_LEAVES ? defaultVerifyThreads() : 0));
  let size = 0;
  try {
    const inFlight: Promise<CheckedPage>[] = [];
    let nextPage = 0;
    // The next page's read is sent before this one is checked: PostgreSQL reads it meanwhile.
    let reading: Promise<string[]> | null = readLeafRows(db, organizationId, 0);
    for (;;) {
      while (reading && inFlight.length <= checkers.count) {
        const start = nextPage++ * PAGE_LEAVES;
        const rows: string[] = await reading;
        reading = rows.length < PAGE_LEAVES ? null : readLeafRows(db, organizationId, start + PAGE_LEAVES);
        // A read no longer wanted (a broken entry found first) must not fail unheard.
        reading?.catch(() => undefined);
        inFlight.push(checkers.check(rows, start, organizationId));
      }
      if (inFlight.length === 0) break;
      page = await inFlight.shift()!;
      const reached = page.start + page.valid;
      nodes.setPage(page);
      const unmatched = checkpointsUpTo(reached);
      if (unmatched) return unmatched;
      size = reached;
      if (page.problem)
        return result(size, rootOf(frontierAt(size)), {
          leafIndex: size,
          activityId: page.problem.activityId,
          problem: page.problem.problem,
        });
      if (page.rows < PAGE_LEAVES) {
        // The page ends short: the log ends here, or entries are missing before the next one stored.
        const next = await nextLeafIndex(db, organizationId, size);
        if (next !== null)
          return result(size, rootOf(frontierAt(size)), {
            leafIndex: size,
            activityId: null,
            problem: `entry ${size} is missing from the log (the next stored entry is ${next}): it was removed`,
          });
        break;
      }
      // A whole page: its root joins the tree above the pages, completing the subtrees it completes.
      const appended = appendLeaf(
        { size: pages.size / PAGE_LEAVES, hashes: pages.hashes },
        Buffer.from(page.nodes[PAGE_LEVELS - 1]!.buffer, page.nodes[PAGE_LEVELS - 1]!.byteOffset, 32),
      );
      pages = { size: pages.size + PAGE_LEAVES, hashes: appended.frontier.hashes };
      for (const c of appended.completed) nodes.set(c.subtree.level + PAGE_LEVELS, c.subtree.index, c.hash);
      page = null;
    }
  } finally {
    await checkers.close();
  }
  const frontier = frontierAt(size);
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
  const stray = await storedSubtreeProblem(db, organizationId, nodes);
  if (stray)
    return result(frontier.size, root, {
      leafIndex: stray.index * 2 ** stray.level,
      activityId: null,
      problem: `the stored subtree of entries ${stray.index * 2 ** stray.level} to ${(stray.index + 1) * 2 ** stray.level - 1} does not match them: proofs read from it would not verify`,
    });
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
    const leaf = leafHashOfText(line.entry);
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
