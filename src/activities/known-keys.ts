// The API keys lately accepted for an organization, remembered by this process so that their next
// signatures may be authenticated inside the activity's transaction (pipeline.ts, submit).
//
// On PostgreSQL every statement costs both processes CPU
// (docs/benchmarks.md#a-key-already-accepted-read-in-the-transaction); a signature read its API key
// before its transaction and its credential again inside it. A key already accepted is instead read
// once, in the statement the transaction reads ahead, under the organization's lock.
// This memory decides only *where* a key is read, never whether it is accepted: a key removed or
// expired since is refused by the read in the transaction as it would have been before it. What it
// guards is the lock: a stamp made with a key nobody registered (anyone can make one) is refused
// before any lock is taken, as before, instead of sharing a transaction and an organization's row
// lock with the signatures of that organization. It also says, before the transaction, which
// credential's rate limits such a signature counts against (services/rate-limits.ts): the one whose
// acceptance it remembers, whose key the stamp's signature must hold for first.
const LIMIT = 10_000;

/** What names a stamp's key: its public key and the scheme it signed with. */
export interface StampKey {
  publicKey: string;
  scheme: string;
}

/** What the last acceptance of a key learned that its next requests are counted by before they are
 * authenticated again (services/rate-limits.ts): the credential, its user, and its organization's parent. */
export interface KnownKey {
  credentialId: string;
  userId: string;
  organizationParentId?: string | null;
}

export class KnownKeys {
  // A Map iterates in insertion order: re-inserting on use makes the first entry the least recently used.
  private readonly keys = new Map<string, KnownKey>();

  constructor(private readonly limit = LIMIT) {}

  // The scheme too: a key is accepted with the curve it was registered with, and a stamp naming the
  // same hex under another scheme is not that key.
  private static entry(stamp: StampKey, organizationId: string): string {
    return `${organizationId} ${stamp.scheme} ${stamp.publicKey}`;
  }

  has(stamp: StampKey, organizationId: string): boolean {
    return this.keys.has(KnownKeys.entry(stamp, organizationId));
  }

  /** The key as its last acceptance for the organization named found it, if it is remembered. */
  get(stamp: StampKey, organizationId: string): KnownKey | undefined {
    return this.keys.get(KnownKeys.entry(stamp, organizationId));
  }

  /** Remembers (again: as the most recently used) a key just accepted for the organization named,
   * forgetting the least recently used beyond the limit. */
  accepted(stamp: StampKey, organizationId: string, key: KnownKey): void {
    const entry = KnownKeys.entry(stamp, organizationId);
    this.keys.delete(entry);
    this.keys.set(entry, key);
    if (this.keys.size > this.limit) this.keys.delete(this.keys.keys().next().value!);
  }

  /** Forgets a key refused: its next stamp is authenticated before any lock again. */
  refused(stamp: StampKey, organizationId: string): void {
    this.keys.delete(KnownKeys.entry(stamp, organizationId));
  }

  get size(): number {
    return this.keys.size;
  }
}
