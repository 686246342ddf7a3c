// The transparency log's sequencer (docs/audit-log.md#sequencing): appends the final activities to
// their organizations' logs after they commit, never inside an activity's transaction, so recording an
// activity costs the log nothing (store/transparency-log.ts has the append itself).
//
// Each server process runs one. It is woken shortly after this process commits a final activity
// (WAKE_DELAY_MS, so that the activities committed meanwhile are appended together), and sweeps every
// SWEEP_MS for the activities other processes committed and those a crash left pending. Per
// organization it appends in transactions of at most BATCH (PLANNED_BATCH) activities, each short: on SQLite it shares
// the one writer with the activities, so a backlog is appended a batch at a time, the activities'
// batches running between. Only one sequencing runs at a time in a process; across processes the
// log's head lock orders them.
//
// On SQLite a batch is read and hashed on a thread of its own (store/log-plan-thread.ts), and only
// written on the event loop, in a transaction that checks the head has not moved; should the thread
// fail, or another process's sequencing overtake its plan, the batch is appended in-process as on
// PostgreSQL: read, hashed and written in one transaction holding the head.
import type pino from "pino";
import type { Store } from "../store/database.js";
import { LogPlanThread } from "../store/log-plan-thread.js";
import { commitPlan, oldestPending, organizationsPending, sequenceLog } from "../store/transparency-log.js";

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
/** The most activities appended in one transaction when the event loop reads and hashes them (on
 * PostgreSQL; on SQLite should its planning thread fail). Each costs its canonical record and hashes
 * (40–50 µs) inside the transaction holding the head, and on SQLite the one writer too: at 1,000 a
 * transaction held every request for ~50 ms once a second and made the signing p99 4–5 × its p50 on
 * both databases; at 100, 2.1–2.6 × at the same throughput (docs/benchmarks.md#the-transparency-logs-cost). */
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

export class LogSequencer {
  private wake: NodeJS.Timeout | undefined;
  private sweep: NodeJS.Timeout | undefined;
  /** The sequencings of this process, one after another. */
  private chain: Promise<unknown> = Promise.resolve();
  /** A sweep is queued and has not begun: another wake-up adds nothing. */
  private queued = false;
  private closed = false;
  /** SQLite's planning thread; null on PostgreSQL, and on a read-only store (which appends nothing). */
  private readonly planner: LogPlanThread | null;
  private plannerFailureLogged = false;

  constructor(
    private readonly store: Store,
    private readonly logger: pino.Logger,
    private readonly clock: () => number = Date.now,
    options: { planner?: LogPlanThread | null } = {},
  ) {
    this.planner =
      options.planner !== undefined
        ? options.planner
        : store.dialect === "sqlite" && store.checkpoints
          ? new LogPlanThread(store.location)
          : null;
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
    for (let round = 0; round < rounds; round++) if (await this.appendBatch(organizationId)) return true;
    return (await oldestPending(this.store.reader, organizationId)) === undefined;
  }

  /** Appends the organization's next batch; resolves with whether it was the last (it took fewer
   * pending rows than it could: none was left that was committed when it looked). */
  private async appendBatch(organizationId: string): Promise<boolean> {
    const plan = await this.plannedBatch(organizationId);
    if (plan === null) return true;
    if (plan !== undefined) {
      const taken = await this.store.transact("exclusive", (trx) => commitPlan(trx, this.store.dialect, plan));
      // Stale: another process's sequencing appended since the plan's snapshot; appended below instead.
      if (taken !== "stale") return taken < PLANNED_BATCH;
    }
    const taken = await this.store.transact("exclusive", (trx) =>
      sequenceLog(trx, this.store.dialect, organizationId, BATCH, this.clock()),
    );
    return taken < BATCH;
  }

  /** The planning thread's plan of the next batch (null: nothing pending); undefined when there is no
   * thread or it has failed, and the batch is appended in-process. */
  private async plannedBatch(organizationId: string) {
    if (!this.planner || this.planner.failed || this.closed) return undefined;
    try {
      return await this.planner.plan(organizationId, PLANNED_BATCH, this.clock());
    } catch (error) {
      if (!this.plannerFailureLogged) {
        this.plannerFailureLogged = true;
        this.logger.warn(
          { err: error },
          "the transparency log's planning thread failed; the log is appended on the event loop from now on",
        );
      }
      return undefined;
    }
  }
}
