// The transparency log's sequencer (docs/audit-log.md#sequencing): appends the final activities to
// their organizations' logs after they commit, never inside an activity's transaction, so recording an
// activity costs the log nothing (store/transparency-log.ts has the append itself).
//
// Each server process runs one. It is woken shortly after this process commits a final activity
// (WAKE_DELAY_MS, so that the activities committed meanwhile are appended together), and sweeps every
// SWEEP_MS for the activities other processes committed and those a crash left pending. Per
// organization it appends in transactions of at most BATCH (PLANNED_BATCH when planned) activities,
// each short: on SQLite it shares the one writer with the activities, so a backlog is appended a
// batch at a time, the activities' batches running between. Only one sequencing runs at a time in a process; across processes the
// log's head lock orders them.
//
// A batch's entries are hashed on a thread of its own (store/log-plan-thread.ts). On SQLite the thread
// reads the batch too, and the event loop only writes it, in a transaction that checks the head has
// not moved; should another process's sequencing overtake its plan, the batch is appended as on
// PostgreSQL: read and written in one transaction holding the head, the thread hashing between.
// Should the thread fail, the event loop hashes, as it would with no thread at all.
import type pino from "pino";
import type { Store } from "../store/database.js";
import { LogPlanThread } from "../store/log-plan-thread.js";
import {
  commitPlan,
  oldestPending,
  organizationsPending,
  type PlanRows,
  planRowsHere,
  sequenceLog,
  vacuumPending,
} from "../store/transparency-log.js";

/** How long after a final activity's commit this process's sequencer runs: long enough that one of its
 * transactions appends many activities, short enough that a checkpoint asked for soon after holds them
 * (an inclusion proof asked for sooner appends its activity then). Each append costs its statements
 * and, on SQLite, whole pages written twice (the write-ahead log, then the checkpoint: the head's, the
 * right edges of the leaves, their index by activity and the subtrees, the pending rows it deletes)
 * however few activities it appends, so fewer, larger appends cost less per activity: at 100 ms they
 * cost both databases measurably more than at 1 s (docs/benchmarks.md#the-sequencers-wake-delay). */
export const WAKE_DELAY_MS = 1_000;
/** How often the sequencer looks for activities other processes (or a crash) left pending. */
export const SWEEP_MS = 1_000;
/** The most activities appended in one transaction that reads its batch itself (PostgreSQL; SQLite
 * when a plan was overtaken): it holds the head while its entries are hashed (40–50 µs each), on the
 * planning thread or, should that fail, on the event loop, where on SQLite it holds the one writer too:
 * at 1,000 hashed there a transaction held every request for ~50 ms once a second and made the signing
 * p99 4–5 × its p50 on both databases; at 100, 2.1–2.6 × at the same throughput
 * (docs/benchmarks.md#the-transparency-logs-cost). */
export const BATCH = 100;
/** The most activities appended in one transaction planned on SQLite's planning thread: the event loop
 * only writes them (a few milliseconds for 1,000), and each transaction writes the log's right edge
 * (a page per level of the tree) once, whatever its size: at 1,000 rather than 100, 2–3 kB less written
 * a signature and no longer tail (docs/benchmarks.md#the-transparency-logs-cost). */
export const PLANNED_BATCH = 1_000;
/**
 * The maximum merge delay: how long a final activity may wait for its leaf. Sequencing runs within
 * WAKE_DELAY_MS of a commit and a sweep each second; this bound leaves room for a loaded
 * server and a database's failover. `sigil audit verify` reports an activity pending for longer.
 */
export const MAXIMUM_MERGE_DELAY_MS = 60_000;
/**
 * PostgreSQL: how many pending rows this process's sequencer deletes between two vacuums of their
 * table (vacuumPending). Each batch read walks the deleted keys not yet vacuumed, so this bounds the
 * walk (to well under a millisecond) whatever autovacuum does; each vacuum reads the table's pages
 * written since the last and its primary key, milliseconds while the queue is short.
 */
export const VACUUM_AFTER = 10_000;

export class LogSequencer {
  private wake: NodeJS.Timeout | undefined;
  private sweep: NodeJS.Timeout | undefined;
  /** The sequencings of this process, one after another. */
  private chain: Promise<unknown> = Promise.resolve();
  /** A sweep is queued and has not begun: another wake-up adds nothing. */
  private queued = false;
  private closed = false;
  /** The planning thread (reading the batches itself on SQLite); null on a read-only store, which appends nothing. */
  private readonly planner: LogPlanThread | null;
  /** PostgreSQL: pending rows deleted between two vacuums of their table (VACUUM_AFTER; tests set fewer). */
  private readonly vacuumAfter: number;
  private plannerFailureLogged = false;
  /** PostgreSQL: pending rows this process deleted since it last vacuumed their table. */
  private deletedSinceVacuum = 0;
  private vacuumFailureLogged = false;

  constructor(
    private readonly store: Store,
    private readonly logger: pino.Logger,
    private readonly clock: () => number = Date.now,
    options: { planner?: LogPlanThread | null; vacuumAfter?: number } = {},
  ) {
    this.vacuumAfter = options.vacuumAfter ?? VACUUM_AFTER;
    // On PostgreSQL the thread reads no database (the rows are handed to it); a read-only SQLite
    // store (a CLI command) appends nothing. The thread starts with the first batch.
    if (options.planner !== undefined) this.planner = options.planner;
    else if (store.dialect === "postgres") this.planner = new LogPlanThread(null);
    else this.planner = store.checkpoints ? new LogPlanThread(store.location) : null;
  }

  /** Where batches are hashed now: on the planning thread, or on the event loop (no thread, or it failed). */
  get hashing(): "planning thread" | "event loop" {
    return this.planner && !this.planner.failed ? "planning thread" : "event loop";
  }

  start(): void {
    this.sweep = setInterval(() => this.notify(0), SWEEP_MS);
    this.sweep.unref();
    // What is pending since before this start (another process's, or this one's before a crash).
    this.notify(0);
  }

  /** A final activity was committed: appends it (and whatever else is pending) shortly. */
  notify(delayMs = WAKE_DELAY_MS): void {
    if (this.closed || this.wake || this.queued) return;
    this.wake = setTimeout(() => {
      this.wake = undefined;
      this.all().catch((error: unknown) =>
        this.logger.warn({ err: error }, "the transparency log's sequencer failed; it tries again at its next sweep"),
      );
    }, delayMs);
    this.wake.unref();
  }

  /** Appends everything pending now; resolves once it is committed (rejects with its failure). */
  flush(): Promise<void> {
    // It appends what every wake-up asked so far was for: a pending one would find nothing.
    clearTimeout(this.wake);
    this.wake = undefined;
    return this.enqueue(() => this.sequenceAll());
  }

  /**
   * Appends the organization's pending activities now (an inclusion proof asked for one not yet
   * appended), after the sequencing in progress. Resolves with whether none is left.
   */
  sequenceOrganization(organizationId: string): Promise<boolean> {
    // Up to 100 batches (10,000 activities in-process, 100,000 planned) before the proof is answered: a
    // backlog longer than that is appended by the sweeps, and the proof asked again finds its activity.
    return this.enqueue(() => this.sequenceOne(organizationId, 100));
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.wake);
    clearInterval(this.sweep);
    await this.chain.catch(() => undefined);
    await this.planner?.close();
  }

  private all(): Promise<void> {
    if (this.queued) return Promise.resolve();
    this.queued = true;
    return this.enqueue(() => {
      this.queued = false;
      return this.sequenceAll();
    });
  }

  private enqueue<T>(work: () => Promise<T>): Promise<T> {
    const next = this.chain.catch(() => undefined).then(work);
    this.chain = next;
    return next;
  }

  private async sequenceAll(): Promise<void> {
    for (const organizationId of await organizationsPending(this.store.reader)) {
      if (this.closed) return;
      await this.sequenceOne(organizationId, Number.POSITIVE_INFINITY);
    }
  }

  /** Appends the organization's pending activities in at most `rounds` transactions; whether none is left. */
  private async sequenceOne(organizationId: string, rounds: number): Promise<boolean> {
    for (let round = 0; round < rounds; round++) {
      const last = await this.appendBatch(organizationId);
      if (this.deletedSinceVacuum >= this.vacuumAfter) await this.vacuumPending();
      if (last) return true;
    }
    return (await oldestPending(this.store.reader, organizationId)) === undefined;
  }

  /** Appends the organization's next batch; resolves with whether it was the last (it took fewer
   * pending rows than it could: none was left that was committed when it looked). */
  private async appendBatch(organizationId: string): Promise<boolean> {
    if (this.store.dialect === "sqlite") {
      const plan = await this.plannedBatch(organizationId);
      if (plan === null) return true;
      if (plan !== undefined) {
        const taken = await this.store.transact("exclusive", (trx) => commitPlan(trx, this.store.dialect, plan));
        // Stale: another process's sequencing appended since the plan's snapshot; appended below instead.
        if (taken !== "stale") return taken < PLANNED_BATCH;
      }
    }
    const taken = await this.store.transact("exclusive", (trx) =>
      sequenceLog(trx, this.store.dialect, organizationId, BATCH, this.clock(), this.planRows),
    );
    if (this.store.dialect === "postgres") this.deletedSinceVacuum += taken;
    return taken < BATCH;
  }

  /** PostgreSQL: vacuums the pending rows' table (vacuumPending). A role that does not own it is only
   * warned by PostgreSQL; a failure (a lost connection) is logged once, and the sequencer goes on. */
  private async vacuumPending(): Promise<void> {
    this.deletedSinceVacuum = 0;
    try {
      if (await vacuumPending(this.store.db))
        this.logger.info("the transparency log's pending rows were rewritten to the few left once a backlog was appended");
    } catch (error) {
      if (this.vacuumFailureLogged) return;
      this.vacuumFailureLogged = true;
      this.logger.warn({ err: error }, "the transparency log's sequencer could not vacuum its pending rows; it relies on autovacuum");
    }
  }

  /** The planning thread's plan of the next batch it reads (null: nothing pending); undefined when
   * there is no thread or it has failed. */
  private async plannedBatch(organizationId: string) {
    if (!this.planner || this.planner.failed || this.closed) return undefined;
    try {
      return await this.planner.plan(organizationId, PLANNED_BATCH, this.clock());
    } catch (error) {
      this.plannerFailed(error);
      return undefined;
    }
  }

  /** Rows read in-process planned on the thread; on the event loop when there is none, or it fails. */
  private readonly planRows: PlanRows = async (organizationId, head, rows, now) => {
    if (this.planner && !this.planner.failed && !this.closed) {
      try {
        return await this.planner.planRows(organizationId, head, rows, now);
      } catch (error) {
        this.plannerFailed(error);
      }
    }
    return planRowsHere(organizationId, head, rows, now);
  };

  private plannerFailed(error: unknown): void {
    if (this.plannerFailureLogged) return;
    this.plannerFailureLogged = true;
    this.logger.warn({ err: error }, "the transparency log's planning thread failed; the log is hashed on the event loop from now on");
  }
}
