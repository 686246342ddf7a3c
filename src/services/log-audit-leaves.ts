// One page of an organization's transparency log checked leaf by leaf, for `sigil audit verify`
// (log-audit.ts): each entry's activity rebuilt into its record and hashed (activityLeafHash, the
// sequencer's own function) against the leaf hash stored, and the complete subtrees the page's leaves
// make. It runs on the verifying thread or on worker threads (log-audit-worker.ts), page by page,
// with the same code either way; the caller keeps the pages in order and the tree above them.
import { nodeHash } from "../store/merkle.js";
import type { ActivitiesTable } from "../store/schema.js";
import { activityLeafHash } from "../store/transparency-log.js";

/** Leaves per page: a power of two, so that every complete subtree up to this size lies in one page. */
export const PAGE_LEVELS = 10;
export const PAGE_LEAVES = 2 ** PAGE_LEVELS;

/**
 * One leaf and its activity as the database returns it: a JSON array of these columns, in this order
 * (log-audit.ts builds it in SQL, so that a row crosses to a thread as one string).
 */
export const LEAF_ROW_COLUMNS = [
  "l.leaf_index",
  "l.activity_id",
  "l.leaf_hash",
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
] as const;

type LeafRow = [
  leafIndex: number,
  activityId: string | null,
  leafHash: string,
  id: string | null,
  organizationId: string,
  type: string,
  status: string,
  intent: string,
  result: string,
  failure: string | null,
  votes: string,
  fingerprint: string,
  timestampMs: string,
  createdAt: number,
  updatedAt: number,
];

/** The first leaf of a page found broken: its offset in the page, its activity, what is wrong. */
export interface PageProblem {
  offset: number;
  activityId: string | null;
  problem: string;
}

/** What a page of leaves makes, up to its first broken leaf (`valid` leaves). */
export interface CheckedPage {
  start: number;
  /** Rows the page held. */
  rows: number;
  /** Leaves before the first broken one (all of them: `rows`). */
  valid: number;
  /** The valid leaves' hashes, 32 bytes each. */
  leaves: Uint8Array;
  /** Per level 1..PAGE_LEVELS, the hashes of the complete subtrees of the valid leaves, 32 bytes each. */
  nodes: Uint8Array[];
  problem: PageProblem | null;
}

/** A page for a thread to check (log-audit-worker.ts), and its answer. */
export interface LeafPageTask {
  id: number;
  rows: string[];
  start: number;
  organizationId: string;
}
export type LeafPageAnswer = { id: number } & ({ page: CheckedPage } | { error: string });

/** The problem of the leaf `row` recorded as entry `index`, or null with its hash written to `out` at `at`. */
function leafProblem(row: LeafRow, index: number, organizationId: string, out: Uint8Array, at: number): Omit<PageProblem, "offset"> | null {
  const activityId = row[1];
  if (row[0] !== index)
    return {
      activityId: null,
      problem: `entry ${index} is missing from the log (the next stored entry is ${row[0]}): it was removed`,
    };
  if (!row[3]) return { activityId, problem: `the activity of entry ${index} is not in the database: it was removed` };
  if (row[4] !== organizationId) return { activityId, problem: `the activity of entry ${index} belongs to organization ${row[4]}` };
  let computed: Buffer;
  try {
    computed = activityLeafHash(activityOf(row), index);
  } catch {
    return { activityId, problem: `the activity of entry ${index} is not readable as recorded (its JSON columns were changed)` };
  }
  if (!computed.equals(Buffer.from(row[2], "hex")))
    return {
      activityId,
      problem: `the activity as stored does not hash to the leaf hash of entry ${index}: it (or the leaf) was changed after it was logged, or the entries were reordered`,
    };
  out.set(computed, at);
  return null;
}

const activityOf = (row: LeafRow): ActivitiesTable => ({
  id: row[3]!,
  organization_id: row[4],
  type: row[5],
  status: row[6],
  intent: row[7],
  result: row[8],
  failure: row[9],
  votes: row[10],
  fingerprint: row[11],
  timestamp_ms: row[12],
  created_at: row[13],
  updated_at: row[14],
  user_id: null,
  prepared: null,
  request_id: null,
});

/** Checks the page of `rows` (LEAF_ROW_COLUMNS as JSON arrays, in leaf order) whose first leaf should
 * be entry `start` (a multiple of PAGE_LEAVES), stopping at the first broken leaf. */
export function checkLeafPage(rows: string[], start: number, organizationId: string): CheckedPage {
  const leaves = new Uint8Array(rows.length * 32);
  let valid = 0;
  let problem: PageProblem | null = null;
  for (; valid < rows.length; valid++) {
    const row = JSON.parse(rows[valid]!) as LeafRow;
    // Each row let go of once read: the garbage collector then copies fewer live rows as the page goes.
    rows[valid] = "";
    const wrong = leafProblem(row, start + valid, organizationId, leaves, valid * 32);
    if (wrong) {
      problem = { offset: valid, ...wrong };
      break;
    }
  }
  return { start, rows: rows.length, valid, leaves: leaves.subarray(0, valid * 32), nodes: subtreesOf(leaves, valid), problem };
}

const hashOf = (packed: Uint8Array, i: number) => Buffer.from(packed.buffer, packed.byteOffset + i * 32, 32);

/** The complete subtrees over the first `count` leaves, level by level up to PAGE_LEVELS. */
function subtreesOf(leaves: Uint8Array, count: number): Uint8Array[] {
  const levels: Uint8Array[] = [];
  let below = leaves;
  for (let level = 1, n = count >> 1; level <= PAGE_LEVELS; level++, n >>= 1) {
    const hashes = new Uint8Array(n * 32);
    for (let i = 0; i < n; i++) hashes.set(nodeHash(hashOf(below, 2 * i), hashOf(below, 2 * i + 1)), i * 32);
    levels.push(hashes);
    below = hashes;
  }
  return levels;
}
