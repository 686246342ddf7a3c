// SQLite checkpoints on a thread of their own.
//
// In WAL mode SQLite appends every commit to the write-ahead log, and copies the log back into the
// database file — a checkpoint — from inside the commit that takes the log past 1,000 pages. That
// commit then writes a thousand pages and syncs the file twice while the event loop waits: measured
// under signing load (c=32), one commit in twenty took 4.7 ms instead of 0.3, 3 % of the event loop,
// and every request in flight waited with it (docs/benchmarks.md#sqlite-checkpoints-on-a-thread-of-their-own).
//
// Here the writer's own checkpoints are moved out of the way (its threshold raised to a safety net),
// and a worker thread with a connection of its own runs a PASSIVE checkpoint at most every
// `intervalMs` while commits come in. A commit made while a checkpoint runs, or sooner than the
// interval allows, is checkpointed by the next one, asked for when the interval is over even if no
// other commit comes: the last commits of a burst do not wait in the log for the next burst. A passive checkpoint copies only what no reader still needs and
// never blocks the writer, so commits go on beside it on the other core. Should the thread fail to
// start or a checkpoint fail, the writer goes back to SQLite's own checkpoints: nothing depends on the
// thread but the event loop's time.
//
// The thread's connection is closed before the writer's, so the writer stays the last connection: on
// closing it checkpoints what is left and removes the log, as without the thread.
import type { Worker } from "node:worker_threads";
import type BetterSqlite3 from "better-sqlite3";
import type { CheckpointAnswer, CheckpointWorkerData } from "./checkpoint-worker.js";
import { startModuleWorker } from "./module-worker.js";

/** SQLite's own threshold (pages in the log) for a commit to checkpoint: restored when the thread fails. */
const SQLITE_AUTOCHECKPOINT = 1_000;
/** The writer's threshold while the thread works: only reached if the thread falls far behind. */
const SAFETY_AUTOCHECKPOINT = 10_000;

export interface WalCheckpointOptions {
  /** At most one checkpoint per this many milliseconds, and only after a commit. Default 200. */
  intervalMs?: number;
  /** Starts the thread (tests start one that fails). Default: checkpoint-worker.ts. */
  startWorker?: (data: CheckpointWorkerData) => Worker;
}

/** What the checkpoint thread has done, for tests and diagnostics. */
export interface CheckpointStatus {
  state: "not started" | "starting" | "ready" | "failed" | "closed";
  checkpoints: number;
  failure: string | null;
}

export class WalCheckpoints {
  private worker: Worker | null = null;
  private readonly intervalMs: number;
  private readonly startWorker: (data: CheckpointWorkerData) => Worker;
  /** When the last checkpoint was asked for (or the store opened): the next is due `intervalMs` later. */
  private lastAsked = Date.now();
  private inFlight = false;
  /** A commit came since the last checkpoint was asked for. */
  private pending = false;
  /** Set while a pending commit waits for the interval to be over. */
  private due: NodeJS.Timeout | null = null;
  private exited: Promise<void> | null = null;
  private readonly status: CheckpointStatus = { state: "not started", checkpoints: 0, failure: null };
  private idleWaiters: (() => void)[] = [];

  constructor(
    private readonly file: string,
    private readonly writer: BetterSqlite3.Database,
    options: WalCheckpointOptions = {},
  ) {
    this.intervalMs = options.intervalMs ?? 200;
    this.startWorker = options.startWorker ?? ((data) => startModuleWorker(import.meta.url, "checkpoint-worker", data));
  }

  get current(): Readonly<CheckpointStatus> {
    return this.status;
  }

  /**
   * Told after each commit: asks the thread for a checkpoint when one is due and none is running, or
   * once the one running ends and the interval is over. The thread starts on the first checkpoint
   * asked for, so a short-lived process (a CLI command) never starts it.
   */
  committed(): void {
    if (this.status.state === "failed" || this.status.state === "closed") return;
    this.pending = true;
    this.askWhenDue();
  }

  private askWhenDue(): void {
    if (!this.pending || this.inFlight || this.due || this.status.state === "failed" || this.status.state === "closed") return;
    const wait = this.lastAsked + this.intervalMs - Date.now();
    if (wait > 0) {
      this.due = setTimeout(() => {
        this.due = null;
        this.askWhenDue();
      }, wait);
      // A checkpoint not yet run is one the writer's closing (or SQLite's recovery) makes.
      this.due.unref();
      return;
    }
    this.pending = false;
    this.lastAsked = Date.now();
    this.inFlight = true;
    (this.worker ??= this.start()).postMessage("checkpoint");
  }

  /** Resolves once no checkpoint is running or waiting for its interval (for tests). */
  idle(): Promise<void> {
    return this.inFlight || this.due ? new Promise((resolve) => this.idleWaiters.push(resolve)) : Promise.resolve();
  }

  private start(): Worker {
    this.status.state = "starting";
    const worker = this.startWorker({ file: this.file });
    this.exited = new Promise((resolve) => worker.once("exit", () => resolve()));
    worker.on("message", (answer: CheckpointAnswer) => {
      if ("ready" in answer) {
        if (this.status.state !== "starting") return;
        this.status.state = "ready";
        // From now on the thread checkpoints; the writer only if the log grows far past SQLite's own threshold.
        this.writer.pragma(`wal_autocheckpoint = ${SAFETY_AUTOCHECKPOINT}`);
      } else if ("error" in answer) {
        this.fail(answer.error);
      } else {
        this.status.checkpoints++;
        this.settle();
      }
    });
    worker.on("error", (error) => this.fail(error.message));
    worker.on("exit", (code) => {
      if (this.status.state !== "closed") this.fail(`the checkpoint thread stopped (exit code ${code})`);
    });
    // The thread never keeps the process alive: a checkpoint cut short is one SQLite recovers from.
    worker.unref();
    return worker;
  }

  /** Hands checkpoints back to SQLite (the writer's commits), as if the thread had never run. */
  private fail(reason: string): void {
    if (this.status.state === "failed" || this.status.state === "closed") return;
    this.status.state = "failed";
    this.status.failure = reason;
    this.stopWaiting();
    if (this.writer.open) this.writer.pragma(`wal_autocheckpoint = ${SQLITE_AUTOCHECKPOINT}`);
    const worker = this.worker;
    this.worker = null;
    void worker?.terminate();
    this.settle();
  }

  private settle(): void {
    this.inFlight = false;
    // Commits made meanwhile get their checkpoint when the interval is over.
    this.askWhenDue();
    if (this.inFlight || this.due) return;
    for (const resolve of this.idleWaiters.splice(0)) resolve();
  }

  private stopWaiting(): void {
    if (this.due) clearTimeout(this.due);
    this.due = null;
    this.pending = false;
  }

  /** Closes the thread's connection (before the writer's, which must be the last) and ends the thread. */
  async close(): Promise<void> {
    const worker = this.worker;
    const wasFailed = this.status.state === "failed";
    this.status.state = "closed";
    this.stopWaiting();
    this.worker = null;
    if (worker && !wasFailed) {
      // The thread answers a checkpoint in flight first, then closes its connection and exits; it
      // keeps the process alive until then (awaiting an unreferenced thread would not).
      worker.ref();
      worker.postMessage("close");
      await this.exited;
    }
    this.settle();
  }
}
