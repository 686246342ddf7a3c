// pg's connection pool as Kysely's PostgresDialect takes it, with two additions: every statement is
// tallied (handles.ts, StatementTally), and the service's recurring SQL texts run as named prepared
// statements, so PostgreSQL parses and plans each of them once per connection rather than on every
// execution (Kysely sends every query unnamed, and an unnamed statement is parsed and planned anew).
import crypto from "node:crypto";
import type pg from "pg";
import type { PostgresPool, PostgresPoolClient } from "kysely";
import { tally, type StatementTally } from "./handles.js";
import { DatabaseUnreachable, endsConnection, markLost } from "./lost-connections.js";

/**
 * The start of a statement text that is planned on every run and never prepared. A prepared
 * statement's generic plan is made once, from the sizes the tables had then, and kept for the
 * connection's life; PostgreSQL makes a new one only when the table is analyzed again, which, with
 * autovacuum off or not yet come round, may be never. That is right for tables that grow steadily, and
 * wrong for a queue that is empty most of the time and a backlog of a million rows after a bulk load
 * (the transparency log's pending rows): a plan made while it was empty scanned the whole backlog for
 * each batch of a hundred taken from it (docs/benchmarks.md#a-million-end-users).
 */
export const PLANNED_EACH_RUN = "/* planned each run */ ";

/**
 * Which SQL texts are prepared, by name. A text is named once it has run a few times (so a text made
 * once, like a migration's, is not kept prepared), and at most MAX_NAMED texts ever are: PostgreSQL
 * keeps a connection's prepared statements until it closes, and some texts vary (an IN list of
 * varying length is a new text per length). Beyond the bound, texts run unnamed as before.
 */
export class StatementNames {
  private readonly named = new Map<string, string>();
  private readonly seen = new Map<string, number>();

  constructor(
    private readonly runsBeforeNaming = 2,
    private readonly maxNamed = 400,
  ) {}

  /** The name `text` runs under, or undefined to run it unnamed. */
  nameOf(text: string): string | undefined {
    if (text.startsWith(PLANNED_EACH_RUN)) return undefined;
    const name = this.named.get(text);
    if (name !== undefined || this.named.size >= this.maxNamed) return name;
    const runs = (this.seen.get(text) ?? 0) + 1;
    if (runs < this.runsBeforeNaming) {
      // The candidates are bounded too: a flood of one-off texts only delays naming.
      if (this.seen.size >= 4 * this.maxNamed) this.seen.clear();
      this.seen.set(text, runs);
      return undefined;
    }
    this.seen.delete(text);
    // The name is the text's hash, so every connection gives one text the same name.
    const named = `sigil_${crypto.createHash("sha256").update(text).digest("base64url").slice(0, 22)}`;
    this.named.set(text, named);
    return named;
  }
}

/**
 * A prepared statement stops working when the schema under it changes its result's shape (another
 * server process of a newer version migrated the database: "cached plan must not change result type")
 * or when it was dropped behind pg's back. The statement fails; the connection is then discarded rather
 * than returned to the pool, so the next one prepares afresh.
 */
const STALE_PREPARED_STATEMENT = new Set(["0A000", "26000"]);

/** A pooled connection as Kysely takes it, which can also be given back as unusable. */
export interface PooledConnection extends PostgresPoolClient {
  /** Returns the connection to the pool, or, given the error that made it unusable, closes it. */
  release(error?: Error): void;
  /** pg's client underneath, whose events tell when the connection ends. */
  readonly raw: pg.PoolClient;
}

export interface PreparingPool extends PostgresPool {
  connect(): Promise<PooledConnection>;
}

/** pg's pool, tallied, preparing what `names` names. */
export function preparingPool(pool: pg.Pool, statements: StatementTally, names: StatementNames): PreparingPool {
  const wrapped = new WeakMap<pg.PoolClient, PooledConnection>();
  const wrap = (client: pg.PoolClient): PooledConnection => {
    let stale: Error | undefined;
    const query = async (text: string, values: readonly unknown[]) => {
      tally(statements, text);
      // Statements without parameters (BEGIN, COMMIT, savepoints) go by the simple protocol: one
      // message, nothing to prepare.
      const name = values.length > 0 ? names.nameOf(text) : undefined;
      try {
        return await (name ? client.query({ name, text, values: values as unknown[] }) : client.query(text, values as unknown[]));
      } catch (error) {
        if (name && STALE_PREPARED_STATEMENT.has((error as { code?: string }).code ?? "")) stale = error as Error;
        // Every statement passes here: the one place a lost connection is told from a statement's
        // own failure (lost-connections.ts).
        throw endsConnection(error) ? markLost(error) : error;
      }
    };
    return {
      // Kysely also passes a cursor here for streamed queries, which the service does not use.
      query: query as unknown as PostgresPoolClient["query"],
      release: (error?: Error) => {
        // Kysely reuses its wrapper of a client; a discarded client is never handed out again.
        const discard = stale ?? error;
        if (discard) wrapped.delete(client);
        client.release(discard);
      },
      raw: client,
    };
  };
  return {
    async connect() {
      let client: pg.PoolClient;
      try {
        client = await pool.connect();
      } catch (error) {
        throw new DatabaseUnreachable(error);
      }
      let adapter = wrapped.get(client);
      if (!adapter) {
        adapter = wrap(client);
        wrapped.set(client, adapter);
      }
      return adapter;
    },
    end: () => pool.end(),
  };
}
