// The Merkle tree of RFC 9162 (Certificate Transparency 2.0, §2.1), which the transparency ecosystem
// shares (C2SP tlog-checkpoint, Go's golang.org/x/mod/sumdb/tlog): its hashes, the right edge that an
// append keeps, and the inclusion and consistency proofs with their verification. The structure is
// protocol code written from the RFC; SHA-256 is node:crypto's. test/transparency-interop.test.ts
// checks every proof made here with Go's own implementation.
//
// A *complete subtree* (level l, index i) covers leaves [i·2^l, (i+1)·2^l). Every hash a proof needs
// is either a complete subtree's, or, at the tree's ragged right edge, the hash of a range made of a
// few complete subtrees: so a store that keeps every complete subtree's hash answers any proof with
// O(log n) reads (plan* say which), never a walk over the leaves.
import crypto from "node:crypto";

export type Hash = Buffer;

/** SHA-256 of nothing: the root of the empty tree. */
export const EMPTY_ROOT: Hash = crypto.createHash("sha256").digest();

const LEAF_PREFIX = Buffer.of(0);
const NODE_PREFIX = Buffer.of(1);

// Node's one-shot digest: a Merkle tree hashes many short inputs, and a Hash object per input costs
// more than the hashing itself.
const sha256 = (data: Buffer): Hash => crypto.hash("sha256", data, "buffer") as unknown as Hash;

/** RFC 9162 MTH({d}) = SHA-256(0x00 ‖ d). */
export function leafHash(entry: Uint8Array): Hash {
  return sha256(Buffer.concat([LEAF_PREFIX, entry]));
}

// The leaf hashes of many entries, each encoded into this one buffer (grown as needed) rather than into
// a new buffer and a new copy with its prefix.
let leafInput = Buffer.alloc(4096);

/** leafHash of the UTF-8 encoding of `text`. */
export function leafHashOfText(text: string): Hash {
  const most = 1 + 3 * text.length;
  if (leafInput.length < most) leafInput = Buffer.alloc(2 * most);
  leafInput[0] = LEAF_PREFIX[0]!;
  const length = leafInput.write(text, 1, "utf8");
  return sha256(leafInput.subarray(0, 1 + length));
}

/** RFC 9162 interior node: SHA-256(0x01 ‖ left ‖ right). */
export function nodeHash(left: Hash, right: Hash): Hash {
  return sha256(Buffer.concat([NODE_PREFIX, left, right], 65));
}

/** A complete subtree: 2^level leaves starting at leaf index·2^level. */
export interface Subtree {
  level: number;
  index: number;
}

/** The largest power of two strictly below n (n ≥ 2): RFC 9162's split point k. */
function split(n: number): number {
  let k = 1;
  while (k * 2 < n) k *= 2;
  return k;
}

/** The complete subtrees that make up the leaves [lo, hi), largest first, where [lo, hi) is a range
 * the RFC's recursion meets (lo a multiple of the largest power of two not above hi − lo). */
export function rangeSubtrees(lo: number, hi: number): Subtree[] {
  const parts: Subtree[] = [];
  while (lo < hi) {
    let size = 1;
    let level = 0;
    while (size * 2 <= hi - lo) {
      size *= 2;
      level++;
    }
    parts.push({ level, index: lo / size });
    lo += size;
  }
  return parts;
}

/** MTH of a range from its complete subtrees' hashes (rangeSubtrees' order): folded from the right. */
export function foldRange(hashes: Hash[]): Hash {
  if (hashes.length === 0) return EMPTY_ROOT;
  let hash = hashes[hashes.length - 1]!;
  for (let i = hashes.length - 2; i >= 0; i--) hash = nodeHash(hashes[i]!, hash);
  return hash;
}

/** The right edge of a tree of `size` leaves: the hashes of rangeSubtrees(0, size). */
export interface Frontier {
  size: number;
  hashes: Hash[];
}

/** Appends one leaf to a tree's right edge: the new edge, and every complete subtree the leaf completes
 * above level 0 (what a store keeps so that proofs need no walk). */
export function appendLeaf(frontier: Frontier, leaf: Hash): { frontier: Frontier; completed: { subtree: Subtree; hash: Hash }[] } {
  const hashes = [...frontier.hashes, leaf];
  const completed: { subtree: Subtree; hash: Hash }[] = [];
  const size = frontier.size + 1;
  // The edge is the binary expansion of the size: adding one carries through the trailing ones.
  let level = 0;
  let index = frontier.size;
  while (Math.floor(size / 2 ** level) % 2 === 0) {
    const right = hashes.pop()!;
    const left = hashes.pop()!;
    level++;
    index = Math.floor(index / 2);
    const hash = nodeHash(left, right);
    hashes.push(hash);
    completed.push({ subtree: { level, index }, hash });
  }
  return { frontier: { size, hashes }, completed };
}

export const rootOf = (frontier: Frontier): Hash => foldRange(frontier.hashes);

/** One hash of a proof: a range of leaves [lo, hi) whose MTH it is. */
interface Range {
  lo: number;
  hi: number;
}

/** RFC 9162 §2.1.3.1 PATH(m, D[lo:hi]): the ranges whose hashes make the inclusion proof, leaf first. */
function pathRanges(m: number, lo: number, hi: number, out: Range[]): void {
  if (hi - lo <= 1) return;
  const k = split(hi - lo);
  if (m < lo + k) {
    pathRanges(m, lo, lo + k, out);
    out.push({ lo: lo + k, hi });
  } else {
    pathRanges(m, lo + k, hi, out);
    out.push({ lo, hi: lo + k });
  }
}

/** RFC 9162 §2.1.4.1 SUBPROOF(m, D[lo:hi], b): the ranges whose hashes make the consistency proof. */
function subproofRanges(m: number, lo: number, hi: number, whole: boolean, out: Range[]): void {
  if (m === hi - lo) {
    if (!whole) out.push({ lo, hi });
    return;
  }
  const k = split(hi - lo);
  if (m <= k) {
    subproofRanges(m, lo, lo + k, whole, out);
    out.push({ lo: lo + k, hi });
  } else {
    subproofRanges(m - k, lo + k, hi, false, out);
    out.push({ lo, hi: lo + k });
  }
}

/** What a proof needs read: the complete subtrees, and how to fold them into the proof's hashes. */
export interface ProofPlan {
  /** Every complete subtree to read (each once). */
  subtrees: Subtree[];
  /** Given each subtree's hash (keyed by subtreeKey), the proof. */
  assemble(read: Map<string, Hash>): Hash[];
}

export const subtreeKey = (s: Subtree) => `${s.level}/${s.index}`;

function planOf(ranges: Range[]): ProofPlan {
  const parts = ranges.map((r) => rangeSubtrees(r.lo, r.hi));
  const unique = new Map<string, Subtree>();
  for (const s of parts.flat()) unique.set(subtreeKey(s), s);
  return {
    subtrees: [...unique.values()],
    assemble: (read) =>
      parts.map((subtrees) =>
        foldRange(
          subtrees.map((s) => {
            const hash = read.get(subtreeKey(s));
            if (!hash) throw new Error(`the log's subtree ${subtreeKey(s)} is missing`);
            return hash;
          }),
        ),
      ),
  };
}

/** The inclusion proof of leaf `index` in the tree of the first `size` leaves. */
export function planInclusion(index: number, size: number): ProofPlan {
  if (!(index >= 0 && index < size)) throw new RangeError(`leaf ${index} is not in a tree of ${size}`);
  const ranges: Range[] = [];
  pathRanges(index, 0, size, ranges);
  return planOf(ranges);
}

/** The consistency proof between the trees of the first `from` and the first `to` leaves. */
export function planConsistency(from: number, to: number): ProofPlan {
  if (!(from >= 0 && from <= to)) throw new RangeError(`no consistency proof from ${from} to ${to}`);
  const ranges: Range[] = [];
  if (from > 0 && from < to) subproofRanges(from, 0, to, true, ranges);
  return planOf(ranges);
}

/** RFC 9162 §2.1.3.2: whether `proof` shows leaf `index` with hash `leaf` in the tree of `size` leaves whose root is `root`. */
export function verifyInclusion(index: number, size: number, leaf: Hash, proof: Hash[], root: Hash): boolean {
  if (index >= size || index < 0) return false;
  let fn = index;
  let sn = size - 1;
  let r = leaf;
  for (const p of proof) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      r = nodeHash(p, r);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      r = nodeHash(r, p);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return sn === 0 && r.equals(root);
}

/** RFC 9162 §2.1.4.2: whether `proof` shows the tree (size2, root2) extends the tree (size1, root1). */
export function verifyConsistency(size1: number, size2: number, root1: Hash, root2: Hash, proof: Hash[]): boolean {
  if (size1 > size2) return false;
  if (size1 === size2) return proof.length === 0 && root1.equals(root2);
  if (size1 === 0) return proof.length === 0;
  let path = proof;
  if (Number.isInteger(Math.log2(size1)) && 2 ** Math.log2(size1) === size1) path = [root1, ...proof];
  if (path.length === 0) return false;
  let fn = size1 - 1;
  let sn = size2 - 1;
  while (fn % 2 === 1) {
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  let fr = path[0]!;
  let sr = path[0]!;
  for (const c of path.slice(1)) {
    if (sn === 0) return false;
    if (fn % 2 === 1 || fn === sn) {
      fr = nodeHash(c, fr);
      sr = nodeHash(c, sr);
      if (fn % 2 === 0) {
        while (fn % 2 === 0 && fn !== 0) {
          fn = Math.floor(fn / 2);
          sn = Math.floor(sn / 2);
        }
      }
    } else {
      sr = nodeHash(sr, c);
    }
    fn = Math.floor(fn / 2);
    sn = Math.floor(sn / 2);
  }
  return fr.equals(root1) && sr.equals(root2) && sn === 0;
}
