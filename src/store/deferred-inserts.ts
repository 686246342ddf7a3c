// PostgreSQL: plain inserts held back and sent together, as one statement, when the transaction next
// needs an answer from the database.
//
// A sign-up writes six or more rows into tables of an organization it creates in the same activity
// (the organization, its users, their credentials, the root quorum, a wallet and its accounts), and
// nothing reads them before the next read. Each insert sent alone is a round trip, and on a machine
// whose cores the server and PostgreSQL share every round trip is also a switch between their
// processes (docs/benchmarks.md#sign-up-cost). Held back, they go out as one statement:
//
//     with "deferred_0" as (insert into "organizations" …), "deferred_1" as (insert into "users" …)
//     insert into "api_keys" …
//
// PostgreSQL runs a statement's data-modifying WITH parts and its main part as one statement: all of
// them or none, foreign keys checked at its end (so a row may reference one inserted beside it).
// An insert is held only when nothing could depend on when it is sent: a plain `insert … values`
// with no RETURNING, no ON CONFLICT and no WITH of its own, whose answer (the number of rows it
// inserts) is known without sending it. Any other statement sends what is held first, so every read
// sees every earlier write; the caller sends what is left (flush) before the transaction goes on
// without this handle. A held insert that fails (a constraint) fails the statement that sends it:
// the transaction is aborted as it would have been, one statement later.
import {
  CompiledQuery,
  InsertQueryNode,
  Transaction,
  ValuesNode,
  type ConnectionProvider,
  type DatabaseConnection,
  type Dialect,
  type QueryResult,
  type RootOperationNode,
} from "kysely";
import type { Database } from "./schema.js";
import type { Tx } from "./handles.js";
import { noDriver } from "./pipelined-transaction.js";

/** PostgreSQL's limit on a statement's parameters: held inserts beyond it go out as several statements. */
const MAX_PARAMETERS = 65_535;

/** How many rows `node` inserts, when it is an insert that may be held back; undefined otherwise. */
function heldRowCount(node: RootOperationNode): number | undefined {
  if (!InsertQueryNode.is(node)) return undefined;
  if (node.returning || node.onConflict || node.onDuplicateKey || node.with || node.orAction || node.output || node.endModifiers)
    return undefined;
  if (!node.values || !ValuesNode.is(node.values)) return undefined;
  return node.values.values.length;
}

/**
 * `$n` placeholders of a PostgreSQL statement numbered from `offset + 1`, outside quoted names,
 * string literals and dollar-quoted text (Kysely sends values as parameters, but a name may hold `$`).
 */
export function renumberPlaceholders(text: string, offset: number): string {
  if (offset === 0) return text;
  let out = "";
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === '"' || c === "'") {
      // A quoted name or a literal, with its doubled quotes.
      let end = i + 1;
      while (end < text.length) {
        if (text[end] === c) {
          if (text[end + 1] === c) end += 2;
          else break;
        } else end++;
      }
      out += text.slice(i, end + 1);
      i = end + 1;
    } else if (c === "$") {
      const digits = /^\$(\d+)/.exec(text.slice(i));
      if (digits) {
        out += `$${Number(digits[1]) + offset}`;
        i += digits[0].length;
      } else {
        // A dollar quote ($tag$ … $tag$) is copied whole.
        const tag = /^\$[A-Za-z_][A-Za-z0-9_]*\$|^\$\$/.exec(text.slice(i));
        if (!tag) {
          out += c;
          i++;
          continue;
        }
        const close = text.indexOf(tag[0], i + tag[0].length);
        const end = close < 0 ? text.length : close + tag[0].length;
        out += text.slice(i, end);
        i = end;
      }
    } else {
      out += c;
      i++;
    }
  }
  return out;
}

/** Held inserts as the fewest statements PostgreSQL takes (each under its limit of parameters). */
export function combinedStatements(held: readonly CompiledQuery[]): CompiledQuery[] {
  const statements: CompiledQuery[] = [];
  let group: CompiledQuery[] = [];
  let count = 0;
  const close = () => {
    if (group.length === 1) statements.push(group[0]!);
    else if (group.length > 1) {
      const parameters: unknown[] = [];
      const parts = group.map((statement) => {
        const text = renumberPlaceholders(statement.sql, parameters.length);
        parameters.push(...statement.parameters);
        return text;
      });
      const last = parts.pop()!;
      const sqlText = `with ${parts.map((part, i) => `"deferred_${i}" as (${part})`).join(", ")} ${last}`;
      statements.push(CompiledQuery.raw(sqlText, parameters));
    }
    group = [];
    count = 0;
  };
  for (const statement of held) {
    if (group.length > 0 && count + statement.parameters.length > MAX_PARAMETERS) close();
    group.push(statement);
    count += statement.parameters.length;
  }
  close();
  return statements;
}

/** Sends what `held` holds on `connection`, and empties it. */
async function send(connection: DatabaseConnection, held: CompiledQuery[]): Promise<void> {
  const statements = combinedStatements(held.splice(0));
  for (const statement of statements) await connection.executeQuery(statement);
}

/** The transaction's connection, holding plain inserts back until a statement needs an answer. */
class Deferring implements DatabaseConnection {
  constructor(
    private readonly connection: DatabaseConnection,
    private readonly held: CompiledQuery[],
  ) {}

  async executeQuery<R>(compiled: CompiledQuery): Promise<QueryResult<R>> {
    const rows = heldRowCount(compiled.query);
    if (rows !== undefined) {
      this.held.push(compiled);
      return { rows: [], numAffectedRows: BigInt(rows) };
    }
    await send(this.connection, this.held);
    return this.connection.executeQuery<R>(compiled);
  }

  // biome-ignore lint/correctness/useYield: never streamed; refused before anything is sent
  async *streamQuery(): AsyncIterableIterator<QueryResult<never>> {
    throw new Error("a handle holding inserts back streams no statement");
  }
}

/** The handle's own dialect is never used: its executor runs every statement. */
const noDialect: Dialect = {
  createAdapter: () => {
    throw new Error("a handle holding inserts back uses its transaction's adapter");
  },
  createDriver: () => noDriver,
  createIntrospector: () => {
    throw new Error("a handle holding inserts back has no introspector");
  },
  createQueryCompiler: () => {
    throw new Error("a handle holding inserts back uses its transaction's compiler");
  },
};

class DeferringProvider implements ConnectionProvider {
  constructor(
    private readonly inner: Tx,
    private readonly held: CompiledQuery[],
  ) {}

  provideConnection<T>(consumer: (connection: DatabaseConnection) => Promise<T>): Promise<T> {
    return this.inner.getExecutor().provideConnection((connection) => consumer(new Deferring(connection, this.held)));
  }
}

export interface DeferredInserts {
  /** `trx` with its plain inserts held back (the same transaction, plugins and statements otherwise). */
  handle: Tx;
  /** Sends what is held. Before anything else uses the transaction without `handle`. */
  flush(): Promise<void>;
}

/**
 * `trx` (an open PostgreSQL transaction) with its plain inserts held back until a statement needs an
 * answer, then sent as one. For a run of inserts into rows nothing else in the transaction reads or
 * writes in between through another handle: statements sent on `trx` itself do not send what is held.
 */
export function deferInserts(trx: Tx): DeferredInserts {
  const held: CompiledQuery[] = [];
  // The transaction's executor (its adapter, compiler and plugins) on another connection provider.
  const executor = trx.getExecutor().withConnectionProvider(new DeferringProvider(trx, held));
  const handle = new Transaction<Database>({ config: { dialect: noDialect }, dialect: noDialect, driver: noDriver, executor });
  return {
    handle,
    flush: () => trx.getExecutor().provideConnection((connection) => send(connection, held)),
  };
}
