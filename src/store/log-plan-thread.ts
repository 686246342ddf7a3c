// The transparency log's planning on a thread of its own.
//
// Appending a batch to an organization's log rebuilds each activity's canonical record and hashes
// it, and computes the subtrees it completes: 40–50 µs an activity (docs/benchmarks.md#the-transparency-logs-cost),
// which on the event loop every request waits behind. Here a worker thread does it:
// - On SQLite, where the event loop also holds the one writer meanwhile, the thread reads the batch
//   too, on a read-only connection of its own (a WAL reader never waits for the writer), from a
//   snapshot; the event loop only writes the plan it answers, in a short exclusive transaction that
//   first checks that the head is still the one the plan was made from (commitPlan): a plan overtaken
//   by another sequencing is dropped, nothing written.
// - On PostgreSQL the sequencer's transaction holds the head's row lock and reads the batch on a
//   pooled connection (off the event loop already), hands the rows to the thread, and writes the plan
//   it answers; the lock is held a few milliseconds longer, which delays no one but another process's
//   sequencer of the same organization.
import type { Worker } from "node:worker_threads";
import type { LogPlanAnswer, LogPlanRequest, LogPlanWorkerData } from "./log-plan-worker.js";
import { startModuleWorker } from "./module-worker.js";
import type { TransparencyLogHeadsTable } from "./schema.js";
import type { AppendPlan, BatchRow } from "./transparency-log.js";

type DistributiveOmit<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;

export class LogPlanThread {
  private worker: Worker | null = null;
  private exited: Promise<void> | null = null;
  private nextId = 0;
  private readonly waiting = new Map<number, { resolve: (plan: AppendPlan | null) => void; reject: (error: Error) => void }>();
  private failure: string | null = null;
  private closed = false;

  constructor(
    /** The SQLite file the thread reads batches from; null when they are handed to it (PostgreSQL). */
    private readonly file: string | null,
    /** Starts the thread (tests start one that fails). Default: log-plan-worker.ts. */
    private readonly startWorker: (data: LogPlanWorkerData) => Worker = (data) =>
      startModuleWorker(import.meta.url, "log-plan-worker", data),
  ) {}

  /** Why the thread no longer plans (it failed to start, stopped, or a plan failed); null while it works. */
  get failed(): string | null {
    return this.failure;
  }

  /** The plan of the organization's next batch, read by the thread (transparency-log.ts, planBatch);
   * rejects once the thread has failed. */
  plan(organizationId: string, limit: number, now: number): Promise<AppendPlan | null> {
    return this.ask({ kind: "read", organizationId, limit, now });
  }

  /** The plan of `rows` appended to `head` (transparency-log.ts, PlanRows); rejects once the thread has failed. */
  planRows(organizationId: string, head: TransparencyLogHeadsTable, rows: BatchRow[], now: number): Promise<AppendPlan> {
    return this.ask({ kind: "rows", organizationId, head, rows, now }) as Promise<AppendPlan>;
  }

  private ask(request: DistributiveOmit<LogPlanRequest, "id">): Promise<AppendPlan | null> {
    if (this.closed) return Promise.reject(new Error("the log's planning thread is closed"));
    if (this.failure) return Promise.reject(new Error(this.failure));
    const worker = (this.worker ??= this.start());
    const id = this.nextId++;
    // The thread keeps the process alive only while a plan is asked of it.
    if (this.waiting.size === 0) worker.ref();
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      worker.postMessage({ ...request, id } as LogPlanRequest);
    });
  }

  private start(): Worker {
    const worker = this.startWorker({ file: this.file });
    this.exited = new Promise((resolve) => worker.once("exit", () => resolve()));
    worker.on("message", (answer: LogPlanAnswer) => {
      const waiter = this.waiting.get(answer.id);
      if (!waiter) return;
      this.waiting.delete(answer.id);
      if (this.waiting.size === 0) worker.unref();
      if ("error" in answer) {
        // A thread whose reads fail is no longer trusted with the next: the caller appends in-process.
        this.fail(`the log's planning thread failed: ${answer.error}`);
        waiter.reject(new Error(answer.error));
      } else waiter.resolve(answer.plan);
    });
    worker.on("error", (error) => this.fail(`the log's planning thread failed: ${error.message}`));
    worker.on("exit", (code) => {
      if (!this.closed) this.fail(`the log's planning thread stopped (exit code ${code})`);
    });
    worker.unref();
    return worker;
  }

  private fail(reason: string): void {
    if (this.failure) return;
    this.failure = reason;
    const worker = this.worker;
    this.worker = null;
    for (const waiter of this.waiting.values()) waiter.reject(new Error(reason));
    this.waiting.clear();
    void worker?.terminate();
  }

  /** Ends the thread once the plan in flight, if any, is answered (its connection closed first). */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const worker = this.worker;
    this.worker = null;
    if (worker && !this.failure) {
      worker.ref();
      worker.postMessage("close");
      await this.exited;
    }
  }
}
