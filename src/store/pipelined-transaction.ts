// PostgreSQL: a transaction whose statements, from several callers at once, are pipelined on its one
// connection (group-commit.ts's batches of signatures).
//
// Kysely runs a transaction's statements one after another: each waits for the previous one's answer
// before it is sent. A batch's members are independent of each other, so that queue only made each
// member wait for the others' round trips — the batch connection's serial round trips were the idle
// quarter of the server's event loop (docs/benchmarks.md#a-batchs-statements-pipelined).
// Here every statement is sent as soon as it is asked for (pg's pipeline mode: each statement is its
// own extended-protocol exchange ending in Sync, answered in order).
//
// PostgreSQL runs pipelined statements in the order they arrive, in the one transaction: a failed
// statement aborts the transaction as it would unpipelined, and every later one fails with it (the
// group commit then loses the batch; its `abortsTransaction`).
import type { Writable } from "node:stream";
import { Transaction, type ConnectionProvider, type DatabaseConnection, type Dialect, type Driver, type QueryResult } from "kysely";
import type { PooledConnection } from "./postgres-pool.js";
import type { Database } from "./schema.js";
import type { Db, Tx } from "./handles.js";
import { CommitOutcomeUnknown, isLostConnection } from "./lost-connections.js";

/**
 * A connection handing every statement to pg at once (on a client of a pool made with `pipeline: true`),
 * and writing the statements asked for in one turn of the event loop to the socket together.
 *
 * pg writes each pipelined statement as soon as it is asked for, one `writev` each. Every write to a
 * backend on the same machine wakes it, and the kernel often runs it at once in the event loop's
 * place: that write was the event loop's largest single cost on the batch connection
 * (docs/benchmarks.md#statements-written-together). A batch's members ask for their statements in
 * the same turns (they start together, and one read of the socket answers several of them), so the
 * socket is corked at a turn's first statement and uncorked in the turn's check phase (setImmediate,
 * after the I/O callbacks of the turn): one write for all of them, sent before the loop next waits.
 */
export class PipelinedConnection implements DatabaseConnection {
  constructor(private readonly client: PooledConnection) {}

  private writeWithTheTurn(): void {
    const socket = (this.client.raw as unknown as { connection?: { stream?: Writable } }).connection?.stream;
    // Corked already: by this turn's first statement (pg's own cork lasts only inside its submit).
    if (!socket || typeof socket.cork !== "function" || socket.writableCorked > 0) return;
    socket.cork();
    setImmediate(() => socket.uncork());
  }

  async executeQuery<R>(compiled: { sql: string; parameters: readonly unknown[] }): Promise<QueryResult<R>> {
    this.writeWithTheTurn();
    const { command, rowCount, rows } = (await this.client.query(compiled.sql, [...compiled.parameters])) as unknown as {
      command: string;
      rowCount: number | null;
      rows: R[];
    };
    return {
      // As Kysely's own PostgreSQL connection reports it: the count of rows a write changed.
      numAffectedRows: ["INSERT", "UPDATE", "DELETE", "MERGE"].includes(command) ? BigInt(rowCount ?? 0) : undefined,
      rows: rows ?? [],
    };
  }

  // biome-ignore lint/correctness/useYield: a batch's statements are never streamed
  async *streamQuery(): AsyncIterableIterator<QueryResult<never>> {
    throw new Error("a shared transaction's statements cannot be streamed");
  }
}

/** Hands the one connection to every statement at once (Kysely's own provider for a transaction waits for the previous statement). */
class AtOnce implements ConnectionProvider {
  constructor(private readonly connection: DatabaseConnection) {}
  provideConnection<T>(consumer: (connection: DatabaseConnection) => Promise<T>): Promise<T> {
    return consumer(this.connection);
  }
}

/** The driver of a handle on a transaction someone else began: it opens, begins, commits and rolls back
 * nothing (its executor runs every statement; the transaction's owner ends it). Also deferred-inserts.ts's. */
export const noDriver: Driver = {
  init: async () => undefined,
  acquireConnection: () => Promise.reject(new Error("a handle on a transaction opens no connection")),
  beginTransaction: () => Promise.reject(new Error("a handle on a transaction begins no other")),
  commitTransaction: () => Promise.reject(new Error("a handle on a transaction commits nothing: the transaction's owner does")),
  rollbackTransaction: () => Promise.reject(new Error("a handle on a transaction rolls nothing back: the transaction's owner does")),
  releaseConnection: async () => undefined,
  destroy: async () => undefined,
};

export interface PipelinedTransaction {
  /** For the members: Kysely's Transaction over the pipelined connection. */
  handle: Tx;
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/**
 * Begins a transaction on `client` (a connection of a pg pool made with `pipeline: true`, as
 * postgres-pool.ts wraps it) and gives a handle whose statements are pipelined. `base` is the
 * store's Kysely, whose compiler and adapter the handle shares (prepared.ts keys compiled
 * statements by adapter). The client is released when the transaction ends; one that failed to
 * commit or roll back is discarded.
 */
export async function beginPipelined(base: Db, dialect: Dialect, client: PooledConnection): Promise<PipelinedTransaction> {
  let ended = false;
  // Whether the connection is known to be gone; a COMMIT that never left cannot have committed.
  let gone = false;
  const lose = () => {
    gone = true;
  };
  client.raw.once("end", lose).once("error", lose);
  const end = async (statement: "commit" | "rollback") => {
    // A rollback after a failed commit has nothing left to end: the connection was discarded.
    if (ended) return;
    ended = true;
    const goneBefore = gone;
    client.raw.off("end", lose).off("error", lose);
    let answer: { command?: string };
    try {
      answer = await client.query(statement, []);
    } catch (error) {
      client.release(error as Error);
      // The connection went while the COMMIT was on its way or being answered: PostgreSQL may have
      // committed before it went.
      if (statement === "commit" && !goneBefore && isLostConnection(error)) throw new CommitOutcomeUnknown(error);
      throw error;
    }
    client.release();
    // PostgreSQL answers COMMIT of a transaction a failed statement aborted with ROLLBACK, not an
    // error: should a member have caught its statement's error, the batch must still not be taken
    // for committed.
    if (statement === "commit" && answer.command === "ROLLBACK")
      throw new Error("PostgreSQL rolled the transaction back at COMMIT: one of its statements had failed");
  };
  try {
    await client.query("begin", []);
  } catch (error) {
    client.raw.off("end", lose).off("error", lose);
    client.release(error as Error);
    throw error;
  }
  const executor = base.getExecutor().withConnectionProvider(new AtOnce(new PipelinedConnection(client)));
  const handle = new Transaction<Database>({ config: { dialect }, dialect, driver: noDriver, executor });
  return { handle, commit: () => end("commit"), rollback: () => end("rollback") };
}
