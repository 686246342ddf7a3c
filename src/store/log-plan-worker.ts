// The log's planning thread (log-plan-thread.ts). On SQLite it has its own read-only connection to the
// file, on which it reads an organization's next batch of pending activities and works out their
// leaves, subtrees and head (transparency-log.ts, planBatch), so that the event loop only writes them;
// on PostgreSQL it is handed the batch the sequencer's transaction read, and works out the same.
import { parentPort, workerData } from "node:worker_threads";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, SqliteDialect } from "kysely";
import type { Database, TransparencyLogHeadsTable } from "./schema.js";
import { type AppendPlan, type BatchRow, planBatch, planRowsHere } from "./transparency-log.js";

export interface LogPlanWorkerData {
  /** The SQLite file to read batches from; null when batches are handed over (PostgreSQL). */
  file: string | null;
}

export type LogPlanRequest =
  | { id: number; kind: "read"; organizationId: string; limit: number; now: number }
  | { id: number; kind: "rows"; organizationId: string; head: TransparencyLogHeadsTable; rows: BatchRow[]; now: number };

/** What the thread answers, once per request, by its id. */
export type LogPlanAnswer = { id: number; plan: AppendPlan | null } | { id: number; error: string };

const port = parentPort!;
const { file } = workerData as LogPlanWorkerData;
// A WAL reader never waits for the writer; the timeout only covers recovering another process's crash.
const db =
  file === null
    ? null
    : new Kysely<Database>({
        dialect: new SqliteDialect({ database: new BetterSqlite3(file, { readonly: true, fileMustExist: true, timeout: 2_000 }) }),
      });

function planned(request: LogPlanRequest): Promise<AppendPlan | null> {
  if (request.kind === "rows") return planRowsHere(request.organizationId, request.head, request.rows, request.now);
  if (!db) throw new Error("this planning thread reads no database");
  // One read transaction: the head and the batch from one snapshot.
  return db.transaction().execute((trx) => planBatch(trx, request.organizationId, request.limit, request.now));
}

/** The plans asked for, one after another; closing waits for them. */
let work: Promise<unknown> = Promise.resolve();

port.on("message", (message: LogPlanRequest | "close") => {
  if (message === "close") {
    work = work.then(() => db?.destroy()).then(() => port.close());
    return;
  }
  work = work
    .then(() => planned(message))
    .then(
      (plan) => port.postMessage({ id: message.id, plan } satisfies LogPlanAnswer),
      (error: unknown) =>
        port.postMessage({ id: message.id, error: error instanceof Error ? error.message : String(error) } satisfies LogPlanAnswer),
    );
});
