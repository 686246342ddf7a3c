// Write transactions on SQLite, shared between activities (group commit).
//
// SQLite admits one writer at a time, and a durable commit costs an fsync that blocks the event loop.
// One transaction per activity would serialize every activity end to end — signatures included,
// though they are computed on another thread — and pay one fsync each. Instead, activities join the
// open *batch* (one write transaction) and the batch commits once for all its members. No member's
// result is handed back before the batch holding it is on disk, so "answered" still means "durable".
//
// Inside a batch, members take the store's readers-writer lock:
//  - `shared` members (those that write only their own activity record: signatures) run side by side,
//    their statements interleaving on the one connection. Their only expected failure comes before
//    their first write (a retry's duplicate fingerprint fails on the insert itself), so a failed
//    member leaves nothing behind. One that fails after it wrote cannot be undone alone: the batch is
//    rolled back and every member of it fails.
//  - an `exclusive` member runs alone, inside a savepoint, so its failure undoes only its own writes.
// A batch closes when no member is running or waiting, or when it is old or large enough; members
// arriving meanwhile wait for the next one.
//
// PostgreSQL uses the same batches for shared activities only (exclusive ones take the organization's
// row lock FOR UPDATE in a transaction of their own): BEGIN and COMMIT, and the commit's flush of
// PostgreSQL's log, are paid once per batch instead of once per signature, and the batch's
// transaction is begun on a connection whose statements are pipelined (`begin`,
// pipelined-transaction.ts), so members do not wait for each other's round trips. There a failed statement
// aborts the whole transaction, so any member's database error loses the batch (`abortsTransaction`);
// an activity whose fingerprint is already recorded is therefore found without an error
// (operations/activities/records.ts).
import type { KyselyPlugin, PluginTransformQueryArgs, PluginTransformResultArgs, QueryResult, RootOperationNode, UnknownRow } from "kysely";
import { controlled, markShared, type Db, type LockMode, type OpenTx, type TransactionObserver, type Tx, type WriteTx } from "./handles.js";
import { CommitOutcomeUnknown } from "./lost-connections.js";

/** FIFO readers-writer lock: a waiting exclusive holder is not overtaken by later shared ones. */
class ReadersWriterLock {
  private readers = 0;
  private writer = false;
  private readonly queue: { mode: LockMode; grant: () => void }[] = [];

  get waiting(): number {
    return this.queue.length;
  }

  private fits(mode: LockMode): boolean {
    return mode === "shared" ? !this.writer : !this.writer && this.readers === 0;
  }

  private take(mode: LockMode): void {
    if (mode === "shared") this.readers++;
    else this.writer = true;
  }

  acquire(mode: LockMode): Promise<void> {
    if (this.queue.length === 0 && this.fits(mode)) {
      this.take(mode);
      return Promise.resolve();
    }
    return new Promise((grant) => this.queue.push({ mode, grant }));
  }

  release(mode: LockMode): void {
    if (mode === "shared") this.readers--;
    else this.writer = false;
    while (this.queue.length > 0 && this.fits(this.queue[0]!.mode)) {
      const next = this.queue.shift()!;
      this.take(next.mode);
      next.grant();
    }
  }
}

/** Notes whether a member's statements changed anything (a write that succeeded and changed rows). */
class WriteTracker implements KyselyPlugin {
  wrote = false;
  private readonly writes = new WeakSet<object>();

  transformQuery({ node, queryId }: PluginTransformQueryArgs): RootOperationNode {
    // Anything but a SELECT counts as a write (raw SQL included): the cautious reading.
    if (node.kind !== "SelectQueryNode") this.writes.add(queryId);
    return node;
  }

  async transformResult({ queryId, result }: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    // A write that changed no row (an insert ON CONFLICT DO NOTHING that met a conflict) left nothing
    // to undo; one that does not say how many it changed counts as a write.
    if (this.writes.has(queryId) && result.numAffectedRows !== 0n) this.wrote = true;
    return result;
  }
}

/** A batch's transaction: the handle its members write through, and how it ends. */
export interface BatchTransaction {
  handle: Tx;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

interface Batch {
  transaction: BatchTransaction;
  openedAt: number;
  /** performance.now() when BEGIN was asked for (the transaction's time, for the observer). */
  beganAt: number;
  admitted: number;
  running: number;
  closing: boolean;
  /** Why the batch must be rolled back instead of committed. */
  poisoned: Error | null;
  /** Settles once the batch is committed (resolves) or rolled back (rejects). */
  done: Promise<void>;
  settle(error?: Error): void;
  /** The organizations whose row the batch's transaction holds FOR SHARE or is taking, each resolving
   * to whether it got it (PostgreSQL). */
  sharedLocks: Map<string, Promise<boolean>>;
}

/** Each shared member's handle on its batch's transaction, to the organization locks that transaction holds. */
const sharedLocksOfMember = new WeakMap<object, Map<string, Promise<boolean>>>();

/**
 * The organizations whose row lock (FOR SHARE) the transaction behind `trx` holds, each with the
 * statement taking it (resolving to whether it got it), when `trx` is a shared member's handle: a
 * transaction keeps a row lock until it ends, so a signature joining a batch that holds (or is taking)
 * its organization's lock needs no statement of its own. Undefined for any other handle.
 */
export function sharedLocksHeld(trx: object): Map<string, Promise<boolean>> | undefined {
  return sharedLocksOfMember.get(trx);
}

export interface GroupCommitOptions {
  /** A batch admits no more members after this many… */
  maxMembers: number;
  /** …or once it has been open this long (ms), so that its first members are not kept waiting. */
  maxAgeMs: number;
  /** Whether a failed statement has aborted the whole transaction (PostgreSQL: every later statement
   * of it fails until the rollback), so the batch is lost even if its member wrote nothing. */
  abortsTransaction?: (error: unknown) => boolean;
  /** How a batch's transaction begins (default: Kysely's controlled transaction on the store's handle). */
  begin?: () => Promise<BatchTransaction>;
  /** Told of each batch's transaction as it ends. */
  observer?: TransactionObserver;
}

/** A shared transaction was rolled back (its `cause`: the failure that lost it): nothing of any member was kept. */
export class BatchRolledBack extends Error {
  override name = "BatchRolledBack";
}

export class GroupCommit {
  private readonly lock = new ReadersWriterLock();
  private batch: Batch | null = null;
  private opening: Promise<Batch> | null = null;
  private joining = 0;

  /** The write transaction as the operator's metrics see it: whether a batch is open, and how many
   * members wait to join one (for the lock, or for the next batch). */
  get usage(): { busy: boolean; waiting: number } {
    return { busy: this.batch !== null || this.opening !== null, waiting: this.joining };
  }

  constructor(
    private readonly db: Db,
    private readonly options: GroupCommitOptions = { maxMembers: 256, maxAgeMs: 20 },
  ) {}

  /** Runs `work` as a member of a batch; resolves with its value once the batch is committed. */
  async run<M extends LockMode, T>(mode: M, work: (trx: WriteTx<M>) => Promise<T>): Promise<T> {
    this.joining++;
    let batch: Batch;
    try {
      await this.lock.acquire(mode);
      try {
        batch = await this.join();
      } catch (error) {
        this.lock.release(mode);
        throw error;
      }
    } finally {
      this.joining--;
    }

    let value: T | undefined;
    let failure: { error: unknown } | undefined;
    try {
      value =
        mode === "exclusive"
          ? await this.alone(batch, work as (trx: OpenTx) => Promise<T>)
          : await this.beside(batch, work as (trx: Tx) => Promise<T>);
    } catch (error) {
      failure = { error };
    } finally {
      this.lock.release(mode);
      this.leave(batch);
    }
    // A member that failed is answered at once: nothing of it will be committed (its savepoint was
    // rolled back, it wrote nothing, or it poisoned the batch).
    if (failure) throw failure.error;
    await batch.done;
    return value as T;
  }

  /** An exclusive member: alone in the batch, in a savepoint of its own. */
  private async alone<T>(batch: Batch, work: (trx: OpenTx) => Promise<T>): Promise<T> {
    const name = `member_${batch.admitted}`;
    const savepoint = (await controlled(batch.transaction.handle).savepoint(name).execute()) as unknown as OpenTx;
    try {
      const value = await work(savepoint);
      // biome-ignore lint/suspicious/noExplicitAny: Kysely types a savepoint's release on the controlled transaction it came from, which this generic helper does not keep
      await (savepoint as any).releaseSavepoint(name).execute();
      return value;
    } catch (error) {
      // biome-ignore lint/suspicious/noExplicitAny: Kysely types a savepoint's release on the controlled transaction it came from, which this generic helper does not keep
      await (savepoint as any).rollbackToSavepoint(name).execute();
      throw error;
    }
  }

  /** A shared member: beside the others; if it fails after writing, the batch cannot be kept. */
  private async beside<T>(batch: Batch, work: (trx: Tx) => Promise<T>): Promise<T> {
    const tracker = new WriteTracker();
    try {
      const member = markShared(batch.transaction.handle.withPlugin(tracker));
      sharedLocksOfMember.set(member, batch.sharedLocks);
      return await work(member);
    } catch (error) {
      const aborted = this.options.abortsTransaction?.(error) ?? false;
      // A member whose statement failed in a transaction another had already aborted fails for that
      // reason, and is told so.
      if (aborted && batch.poisoned) throw batch.poisoned;
      if (tracker.wrote || aborted)
        batch.poisoned ??= new BatchRolledBack(
          `a write transaction shared by several activities was rolled back because one of them failed ${aborted ? "in the database" : "after writing"}: ${error instanceof Error ? error.message : String(error)}`,
          { cause: error },
        );
      throw error;
    }
  }

  /** The open batch if it admits members, else a new one once the current one is finished. */
  private async join(): Promise<Batch> {
    for (;;) {
      const batch = this.batch;
      if (batch && !batch.closing) {
        // A batch that will be rolled back admits no one more.
        if (!batch.poisoned && batch.admitted < this.options.maxMembers && Date.now() - batch.openedAt < this.options.maxAgeMs) {
          batch.admitted++;
          batch.running++;
          return batch;
        }
        this.close(batch);
      }
      if (this.batch) {
        await this.batch.done.catch(() => undefined);
        continue;
      }
      this.opening ??= this.open().finally(() => (this.opening = null));
      await this.opening;
    }
  }

  private async open(): Promise<Batch> {
    const beganAt = performance.now();
    const transaction = await (this.options.begin ?? (() => this.beginControlled()))();
    let settle!: (error?: Error) => void;
    const done = new Promise<void>((resolve, reject) => (settle = (error) => (error ? reject(error) : resolve())));
    // Members await `done` only after they finish; a rejection nobody awaits is not an error here.
    done.catch(() => undefined);
    const batch: Batch = {
      transaction,
      openedAt: Date.now(),
      beganAt,
      admitted: 0,
      running: 0,
      closing: false,
      poisoned: null,
      done,
      settle,
      sharedLocks: new Map(),
    };
    this.batch = batch;
    return batch;
  }

  private async beginControlled(): Promise<BatchTransaction> {
    const handle = await this.db.startTransaction().execute();
    return { handle, commit: () => handle.commit().execute(), rollback: () => handle.rollback().execute() };
  }

  private leave(batch: Batch): void {
    batch.running--;
    if (batch.running > 0) return;
    if (batch.closing) return void this.finish(batch);
    // Let requests that are ready to join (their I/O callbacks run first) come in before committing.
    setImmediate(() => {
      if (batch.running === 0 && !batch.closing && this.joining === 0 && this.lock.waiting === 0) this.close(batch);
    });
  }

  private close(batch: Batch): void {
    if (batch.closing) return;
    batch.closing = true;
    if (batch.running === 0) void this.finish(batch);
  }

  private async finish(batch: Batch): Promise<void> {
    let committed = false;
    try {
      if (batch.poisoned) {
        await batch.transaction.rollback();
        batch.settle(batch.poisoned);
      } else {
        await batch.transaction.commit();
        committed = true;
        batch.settle();
      }
    } catch (error) {
      await batch.transaction.rollback().catch(() => undefined);
      // A COMMIT whose connection went while it was under way (CommitOutcomeUnknown) may have
      // committed: its members are told so, not that nothing was kept.
      batch.settle(
        batch.poisoned ??
          (error instanceof CommitOutcomeUnknown
            ? error
            : new BatchRolledBack(
                `the write transaction could not be committed: ${error instanceof Error ? error.message : String(error)}`,
                {
                  cause: error,
                },
              )),
      );
    } finally {
      if (this.batch === batch) this.batch = null;
      this.options.observer?.transactionEnded("group", committed, (performance.now() - batch.beganAt) / 1000, batch.admitted);
    }
  }
}
