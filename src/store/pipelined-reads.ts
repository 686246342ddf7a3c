// PostgreSQL: the reads made outside any transaction (authenticating every request, the queries),
// pipelined on one connection held for the store's life instead of each taking a connection of the
// pool in turn.
//
// Taking a pooled connection for one small read wakes a PostgreSQL backend that was asleep; on a
// machine whose cores the server and the database share, each wake-up also takes the server's core
// away from it for a moment. On one pipelined connection the reads of concurrent requests are sent
// as they come and answered in order by one backend that stays busy while there is work: measured
// with `npm run bench`, PostgreSQL's CPU per signature fell by a quarter and the reads' throughput
// rose (docs/benchmarks.md#reads-outside-transactions-pipelined).
//
// The price: reads wait behind one another. Those Sigil makes outside transactions are indexed
// lookups and one organization's lists; reads that must agree with each other run in a transaction
// on the pool (store.readSnapshot), and no transaction can be begun here.
import type { DatabaseConnection, Driver, QueryResult } from "kysely";
import type pg from "pg";
import { PipelinedConnection } from "./pipelined-transaction.js";
import type { PooledConnection, PreparingPool } from "./postgres-pool.js";

/** The one connection's statements can fail for two reasons: the statement's own (the connection
 * goes on), or the connection's (lost, or closed by the server with a FATAL error). */
function connectionFailed(error: unknown): boolean {
  const severity = (error as { severity?: string } | undefined)?.severity;
  return severity !== "ERROR";
}

/** Kysely's driver for reads pipelined on one connection of `pool` (a pool of one, `pipeline: true`). */
export class PipelinedReadsDriver implements Driver {
  private current: Promise<{ client: PooledConnection; connection: PipelinedConnection }> | null = null;

  /**
   * `pool` wraps `raw` (postgres-pool.ts): the connection is taken from it and kept; a lost one is
   * given back as unusable and the next read takes a new one.
   */
  constructor(
    private readonly pool: PreparingPool,
    raw: pg.Pool,
  ) {
    // The pool watches only idle connections; the one kept here is never idle, so its end is watched here.
    raw.on("connect", (client) => {
      const lost = () => this.discard(client);
      client.once("end", lost);
      client.once("error", lost);
    });
  }

  async init(): Promise<void> {}

  async acquireConnection(): Promise<DatabaseConnection> {
    const current = (this.current ??= this.pool.connect().then(
      (client) => ({ client, connection: new PipelinedConnection(client) }),
      (error) => {
        this.current = null;
        throw error;
      },
    ));
    const { connection } = await current;
    return {
      executeQuery: async <R>(compiled: { sql: string; parameters: readonly unknown[] }): Promise<QueryResult<R>> => {
        try {
          return await connection.executeQuery<R>(compiled);
        } catch (error) {
          if (connectionFailed(error) && this.current === current) await this.discard();
          throw error;
        }
      },
      streamQuery: () => connection.streamQuery(),
    };
  }

  /** Gives the kept connection back as unusable (`client`: only if it is the one that ended). */
  private async discard(client?: pg.PoolClient): Promise<void> {
    const current = this.current;
    if (!current) return;
    const kept = await current.catch(() => null);
    if (!kept || this.current !== current) return;
    if (client && kept.client.raw !== client) return;
    this.current = null;
    kept.client.release(new Error("the connection for reads was lost"));
  }

  beginTransaction(): Promise<void> {
    return Promise.reject(new Error("reads outside transactions cannot begin one: use the store's readSnapshot or transact"));
  }
  commitTransaction(): Promise<void> {
    return this.beginTransaction();
  }
  rollbackTransaction(): Promise<void> {
    return this.beginTransaction();
  }
  async releaseConnection(): Promise<void> {}

  async destroy(): Promise<void> {
    const current = this.current;
    this.current = null;
    (await current?.catch(() => null))?.client.release();
  }
}
