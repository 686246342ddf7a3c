// The checkpoint thread (wal-checkpoints.ts): its own connection to the SQLite file, on which it copies
// the write-ahead log back into the database file when the event loop asks it to.
import { parentPort, workerData } from "node:worker_threads";
import BetterSqlite3 from "better-sqlite3";

export interface CheckpointWorkerData {
  file: string;
}

/** What the thread answers: once when its connection is open, then once per checkpoint asked for. */
export type CheckpointAnswer = { ready: true } | { checkpointed: { busy: number; log: number; checkpointed: number } } | { error: string };

const port = parentPort!;
const { file } = workerData as CheckpointWorkerData;
// Never creates the file: the store that started this thread made it. A checkpoint that meets a lock
// (another process checkpointing) waits on this thread, not on the event loop.
const connection = new BetterSqlite3(file, { fileMustExist: true, timeout: 5_000 });
// PASSIVE: copies what no reader still needs, and never waits for the writer or readers, so the
// server's commits go on meanwhile. SQLite syncs the log before copying and the file after.
const checkpoint = connection.prepare("pragma wal_checkpoint(passive)");

port.on("message", (message: "checkpoint" | "close") => {
  if (message === "close") {
    connection.close();
    port.close();
    return;
  }
  try {
    const result = checkpoint.get() as { busy: number; log: number; checkpointed: number };
    port.postMessage({ checkpointed: result } satisfies CheckpointAnswer);
  } catch (error) {
    port.postMessage({ error: error instanceof Error ? error.message : String(error) } satisfies CheckpointAnswer);
  }
});
port.postMessage({ ready: true } satisfies CheckpointAnswer);
