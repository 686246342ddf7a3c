// Durable SQLite commits that do not stop the event loop.
//
// With synchronous=FULL, SQLite's COMMIT flushes the write-ahead log (fdatasync) before it returns:
// about a millisecond on the development machine's disk, most of a commit's time, during which the
// event loop — every request on it — stands still. Instead, a write transaction here commits with
// synchronous=NORMAL (its WAL frames are written, not yet flushed) and the same fdatasync of the WAL
// then runs on a thread of libuv's pool. The commit resolves only once the flush is done, and the
// connection is not released before, so whoever awaits a commit still knows it is on disk, as with
// FULL; the event loop meanwhile parses, verifies and answers other requests.
//
// The one difference from FULL: the read-only connection may see a transaction from the moment its
// COMMIT ran, a millisecond before the flush. Nothing read leaves the process before it is durable:
// every HTTP answer waits for the flush in flight (`settled`, http/server.ts), and the background
// services read through the writer connection, which the flush holds.
//
// A flush that fails leaves the transaction committed in SQLite but perhaps not on disk, and a retry
// proves nothing (the kernel may have dropped the pages it could not write): the store refuses every
// later transaction and answer with the first failure, like PostgreSQL's panic on a failed fsync.
import fs from "node:fs";

/** Flushes a file's data to the disk (fdatasync, as SQLite itself does on Linux), off the event loop. */
export async function fdatasyncFile(file: string): Promise<void> {
  const handle = await fs.promises.open(file, "r");
  try {
    await handle.datasync();
  } finally {
    await handle.close();
  }
}

export class WalFlush {
  private flushing: Promise<void> | null = null;
  private lost: Error | null = null;

  constructor(
    private readonly walFile: string,
    private readonly flush: (file: string) => Promise<void> = fdatasyncFile,
  ) {}

  /** Throws the failure that made the store unusable, if one did. */
  assertUsable(): void {
    if (this.lost) throw this.lost;
  }

  /**
   * Runs `commit` (the COMMIT statement, under synchronous=NORMAL), then flushes the WAL; resolves
   * once both are done. Readers waiting in `settled` wait from before the COMMIT runs.
   */
  async commit(commit: () => Promise<void>): Promise<void> {
    this.assertUsable();
    let done!: () => void;
    const flushed = new Promise<void>((resolve) => (done = resolve));
    this.flushing = flushed;
    try {
      await commit();
      try {
        await this.flush(this.walFile);
      } catch (error) {
        this.lost = new Error(
          `the database's write-ahead log could not be flushed to disk (${error instanceof Error ? error.message : String(error)}): ` +
            "what was committed may not survive a power loss, so this process accepts no more work; check the disk and restart Sigil",
        );
        throw this.lost;
      }
    } finally {
      if (this.flushing === flushed) this.flushing = null;
      done();
    }
  }

  /** Resolves once everything committed so far is on disk (at once when no flush is in flight). */
  async settled(): Promise<void> {
    while (this.flushing) await this.flushing;
    this.assertUsable();
  }
}
