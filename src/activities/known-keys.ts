// The API keys lately accepted for an organization, remembered by this process so that their next
// signatures may be authenticated inside the activity's transaction (pipeline.ts, submit).
//
// On PostgreSQL every statement costs both processes CPU (docs/benchmarks.md); a signature read its
// API key before its transaction and its credential again inside it. A key already accepted is
// instead read once, in the statement the transaction reads ahead, under the organization's lock.
// This memory decides only *where* a key is read, never whether it is accepted: a key removed or
// expired since is refused by the read in the transaction as it would have been before it. What it
// guards is the lock: a stamp made with a key nobody registered (anyone can make one) is refused
// before any lock is taken, as before, instead of sharing a transaction and an organization's row
// lock with the signatures of that organization.
const LIMIT = 10_000;

export class KnownKeys {
  // A Map iterates in insertion order: re-inserting on use makes the first entry the least recently used.
  private readonly keys = new Map<string, true>();

  constructor(private readonly limit = LIMIT) {}

  private static entry(publicKey: string, organizationId: string): string {
    return `${organizationId} ${publicKey}`;
  }

  has(publicKey: string, organizationId: string): boolean {
    return this.keys.has(KnownKeys.entry(publicKey, organizationId));
  }

  /** Remembers a key just accepted for the organization named, forgetting the least recently used beyond the limit. */
  accepted(publicKey: string, organizationId: string): void {
    const entry = KnownKeys.entry(publicKey, organizationId);
    this.keys.delete(entry);
    this.keys.set(entry, true);
    if (this.keys.size > this.limit) this.keys.delete(this.keys.keys().next().value!);
  }

  /** Forgets a key refused: its next stamp is authenticated before any lock again. */
  refused(publicKey: string, organizationId: string): void {
    this.keys.delete(KnownKeys.entry(publicKey, organizationId));
  }

  get size(): number {
    return this.keys.size;
  }
}
