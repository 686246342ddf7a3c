// How deep structured data that arrives inside a string may nest. A request body's own nesting is
// bounded before anything reads it (32 levels: docs/security.md, "Hostile input"), but the data a
// string carries — EIP-712 typed data, a contract's ABI or IDL, a Tempo transaction's RLP — is read
// later, by code of Sigil's and of libraries that recurses once per level: 3,000 levels overflowed the
// stack (a 500), and some libraries take time that grows faster than the depth. Each parser measures
// the nesting here first, without recursion, and refuses past the limit before anything recurses.

/** The deepest nesting accepted inside a string: the same as a request body's. Real data nests far
 * less: a Seaport bulk order of the largest tree Seaport accepts (height 24) nests 29 levels. */
export const MAX_NESTING = 32;

/** How deeply arrays and objects nest in a parsed JSON value (a scalar is 0), counted without
 * recursion; the count stops once it passes `limit`. */
export function jsonDepth(value: unknown, limit = Number.POSITIVE_INFINITY): number {
  let deepest = 0;
  const pending: Array<[unknown, number]> = [[value, 0]];
  while (pending.length > 0) {
    const [item, depth] = pending.pop()!;
    if (typeof item !== "object" || item === null) continue;
    deepest = Math.max(deepest, depth + 1);
    if (deepest > limit) return deepest;
    for (const child of Array.isArray(item) ? item : Object.values(item)) pending.push([child, depth + 1]);
  }
  return deepest;
}

/** A big-endian length of `size` bytes at `at`; past the end (or absurdly long), Infinity. */
function lengthAt(bytes: Uint8Array, at: number, size: number): number {
  if (size > 6 || at + size > bytes.length) return Number.POSITIVE_INFINITY;
  let length = 0;
  for (let i = 0; i < size; i++) length = length * 256 + bytes[at + i]!;
  return length;
}

/**
 * How deeply lists nest in RLP-encoded bytes, read from their prefixes alone (the items are not
 * decoded), without recursion; the count stops once it passes `limit`. Framing that does not add up
 * ends the count: the parser that reads the bytes afterwards refuses them.
 */
export function rlpDepth(bytes: Uint8Array, limit = Number.POSITIVE_INFINITY): number {
  let deepest = 0;
  // Where each list that is open at `at` ends.
  const open: number[] = [];
  let at = 0;
  while (at < bytes.length) {
    while (open.length > 0 && at >= open[open.length - 1]!) open.pop();
    const prefix = bytes[at]!;
    if (prefix < 0x80) at += 1;
    else if (prefix <= 0xb7) at += 1 + (prefix - 0x80);
    else if (prefix <= 0xbf) at += 1 + (prefix - 0xb7) + lengthAt(bytes, at + 1, prefix - 0xb7);
    else {
      const size = prefix <= 0xf7 ? 0 : prefix - 0xf7;
      const length = prefix <= 0xf7 ? prefix - 0xc0 : lengthAt(bytes, at + 1, size);
      const start = at + 1 + size;
      open.push(start + length);
      deepest = Math.max(deepest, open.length);
      if (deepest > limit) return deepest;
      at = start;
    }
  }
  return deepest;
}
