// The log's planning thread (log-plan-thread.ts): its own read-only connection to the SQLite file, on
// which it reads an organization's next batch of pending activities and works out their leaves,
// subtrees and head (transparency-log.ts, planBatch), so that the event loop only writes them.
import { parentPort, workerData } from "node:worker_threads";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, SqliteDialect } from "kysely";
import type { Database } from "./schema.js";
import { type AppendPlan, planBatch } from "./transparency-log.js";

export interface LogPlanWorkerData {
  file: string;
}

export interface LogPlanRequest {
  id: number;
  organizationId: string;
  limit: number;
  now: number;
}

/** What the thread answers: once when its connection is open, then once per request, by its id. */
export type LogPlanAnswer = { ready: true } | { id: number; plan: AppendPlan | null } | { id: number; error: string };

const port = parentPort!;
const { file } = workerData as LogPlanWorkerData;
// A WAL reader never waits for the writer; the timeout only covers recovering another process's crash.
const connection = new BetterSqlite3(file, { readonly: true, fileMustExist: true, timeout: 2_000 });
const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: connection }) });

/** The plans asked for, one after another; closing waits for them. */
let work: Promise<unknown> = Promise.resolve();

port.on("message", (message: LogPlanRequest | "close") => {
  if (message === "close") {
    work = work.then(() => db.destroy()).then(() => port.close());
    return;
  }
  // One read transaction: the head and the batch from one snapshot.
  work = work
    .then(() => db.transaction().execute((trx) => planBatch(trx, message.organizationId, message.limit, message.now)))
    .then(
      (plan) => port.postMessage({ id: message.id, plan } satisfies LogPlanAnswer),
      (error: unknown) =>
        port.postMessage({ id: message.id, error: error instanceof Error ? error.message : String(error) } satisfies LogPlanAnswer),
    );
});
port.postMessage({ ready: true } satisfies LogPlanAnswer);
