// Statements of the hot paths, built with Kysely once and then run with new values.
//
// Kysely builds every query as a tree of frozen nodes and compiles the tree to SQL on every call.
// On the signing path that building and compiling cost more of the server's CPU than executing the
// SQL did (docs/benchmarks.md#statements-built-once). A prepared statement is built once per
// database dialect with *slots* in place of its values; each run puts the values into the compiled
// parameters and executes the same SQL text — which is also what lets SQLite and PostgreSQL reuse
// their own prepared statements (store/database.ts, store/postgres-pool.ts).
//
// Each run still goes through the handle's plugins (the group commit's write tracking relies on
// seeing every statement), and the statement is written with Kysely's typed builder like any other.
// A run answered from rows read ahead (below; PostgreSQL only) sends nothing: the plugins saw the
// one statement that read them.
// A slot stands for one value: a statement whose shape depends on its values (an `in` list of any
// length, an optional condition) is not one statement and is not prepared.
import {
  createQueryId,
  PostgresAdapter,
  type Compilable,
  type DialectAdapter,
  type Expression,
  type Kysely,
  type QueryResult,
  type RootOperationNode,
} from "kysely";
import { jsonArrayFrom } from "kysely/helpers/postgres";
import type { Database } from "./schema.js";

/** Stands, in a statement built once, for the value named `name` of each run. */
class Slot {
  constructor(readonly name: string) {}
}

/** Gives the slot for an argument, typed as the argument's value so that Kysely's builder accepts it. */
export type Slots<A> = <K extends keyof A & string>(name: K) => A[K];

interface Compiled {
  query: RootOperationNode;
  sql: string;
  parameters: readonly unknown[];
}

export interface Prepared<A, R> {
  /** Every row. */
  all(db: Kysely<Database>, args: A): Promise<R[]>;
  /** The first row, if any. */
  first(db: Kysely<Database>, args: A): Promise<R | undefined>;
  /** The whole result (rows, and for a write the number of rows it changed). */
  run(db: Kysely<Database>, args: A): Promise<QueryResult<R>>;
  /** How the statement is built: readAhead composes several into one. */
  readonly build: (db: Kysely<Database>, slot: Slots<A>) => Compilable<R>;
}

/**
 * A statement built by `build` once per dialect, with `slot(name)` wherever a run's value goes:
 *
 *     const byId = prepare((db, slot: Slots<{ id: string }>) =>
 *       db.selectFrom("users").selectAll().where("id", "=", slot("id")));
 *     const user = await byId.first(trx, { id });
 */
export function prepare<A, R>(build: (db: Kysely<Database>, slot: Slots<A>) => Compilable<R>): Prepared<A, R> {
  // One per dialect adapter: a server has one store, tests have many, and each dialect writes its own SQL.
  const byAdapter = new WeakMap<DialectAdapter, Compiled>();
  const slot = ((name: string) => new Slot(name)) as Slots<A>;

  const compiledFor = (db: Kysely<Database>): Compiled => {
    const adapter = db.getExecutor().adapter;
    let compiled = byAdapter.get(adapter);
    if (!compiled) {
      // Built without the handle's plugins: they see each run instead.
      const { query, sql, parameters } = build(db.withoutPlugins(), slot).compile();
      compiled = { query, sql, parameters };
      byAdapter.set(adapter, compiled);
    }
    return compiled;
  };

  const fill = (parameters: readonly unknown[], args: A): unknown[] =>
    parameters.map((parameter) => {
      if (!(parameter instanceof Slot)) return parameter;
      const value = (args as Record<string, unknown>)[parameter.name];
      // Kysely leaves a column out of an insert for `undefined`; a prepared statement has no such
      // choice, so a missing value is a mistake in the caller, not a NULL.
      if (value === undefined) throw new Error(`prepared statement: no value for ${parameter.name}`);
      return value;
    });

  const run = async (db: Kysely<Database>, args: A): Promise<QueryResult<R>> => {
    const held = heldRows(db, prepared, args);
    if (held) return { rows: held as R[] };
    const executor = db.getExecutor();
    const compiled = compiledFor(db);
    const queryId = createQueryId();
    let { query, sql, parameters } = compiled;
    if (executor.plugins.length > 0) {
      const transformed = executor.transformQuery(query, queryId);
      // A plugin that rewrites the statement gets it compiled again, as Kysely would.
      if (transformed !== query) ({ query, sql, parameters } = executor.compileQuery(transformed, queryId));
    }
    return executor.executeQuery<R>({ query, queryId, sql, parameters: fill(parameters, args) });
  };

  const prepared: Prepared<A, R> = {
    run,
    all: async (db, args) => (await run(db, args)).rows,
    first: async (db, args) => (await run(db, args)).rows[0],
    build,
  };
  return prepared;
}

/**
 * A whole row of slots, one per column, for a statement that inserts whole rows. `columns` is a
 * record with every column of the row set to true, so the compiler refuses a list that misses one.
 */
export function rowOfSlots<T>(slot: Slots<T>, columns: Record<keyof T & string, true>): T {
  return Object.fromEntries(Object.keys(columns).map((column) => [column, slot(column as keyof T & string)])) as T;
}

// Reading ahead: on PostgreSQL every statement is a round trip, and each costs both processes more
// CPU than a small indexed read does (docs/benchmarks.md#reads-sent-ahead-as-one-statement). Where a
// transaction knows, once it holds its lock, several reads it will make whatever happens next — a
// signature's credential, root quorum, signing account and webhook destinations — it sends them as
// one statement, each statement's rows aggregated into one JSON column, and each later run of one of
// them with the same values in that transaction is answered from those rows without a statement of
// its own. On SQLite a statement is a function call in the same process: there is nothing to save,
// and nothing is read ahead.
//
// The rows are kept for the rest of the transaction, so the caller must know they cannot change
// before it ends: the pipeline reads ahead only for activities that hold the organization's lock
// shared, which write nothing but their own records (registry.ts, leavesOrganizationUnchanged) or
// only the rows of the new organization they create, which no statement read ahead reads
// (addsOnlyNewOrganization).
// Values a JSON column carries come back as pg gives them (text, numbers, booleans, null): the
// statements read ahead select no dates, binary or numeric columns (test/read-ahead.test.ts compares
// each one's rows both ways).

/** One statement with the values of one run, as readAhead takes it. */
export interface Read {
  // biome-ignore lint/suspicious/noExplicitAny: a list mixes statements of different arguments; readOf types each pair
  statement: Prepared<any, unknown>;
  args: object;
}

/** A statement and its values, checked against each other. */
export const readOf = <A extends object>(statement: Prepared<A, unknown>, args: A): Read => ({ statement, args });

interface Held {
  args: Record<string, unknown>;
  rows: unknown[];
}

/** What each open transaction (the Kysely handle the caller passes on) has read ahead, by statement. */
const readsAhead = new WeakMap<Kysely<Database>, Map<Prepared<never, unknown>, Held[]>>();

/** The composite statement of each list of statements, by their identities. */
const composites = new Map<string, Prepared<Record<string, unknown>, Record<string, unknown[]>>>();
const statementIds = new WeakMap<Prepared<never, unknown>, number>();

function heldRows(db: Kysely<Database>, statement: Prepared<never, unknown>, args: unknown): unknown[] | undefined {
  const held = readsAhead.get(db)?.get(statement);
  if (!held) return undefined;
  const wanted = args as Record<string, unknown>;
  const rows = held.find((h) => Object.keys(h.args).every((name) => Object.is(h.args[name], wanted[name])))?.rows;
  // Copies: each run gets rows of its own, as a statement sent would give, whatever an earlier caller did with its own.
  return rows?.map((row) => ({ ...(row as object) }));
}

/**
 * Runs `reads` as one statement in the open transaction `trx` (PostgreSQL; nothing on SQLite) and
 * keeps their rows: a later run of one of these statements with the same values in `trx` is
 * answered from them. Only for reads whose rows nothing can change before `trx` ends.
 */
export async function readAhead(trx: Kysely<Database>, reads: readonly Read[]): Promise<void> {
  if (reads.length === 0 || !(trx.getExecutor().adapter instanceof PostgresAdapter)) return;
  const statements = reads.map((read) => read.statement as Prepared<never, unknown>);
  const key = statements.map(idOf).join(",");
  let composite = composites.get(key);
  if (!composite) {
    composite = prepare((db, slot: Slots<Record<string, unknown>>) =>
      db.selectNoFrom(
        statements.map((statement, i) =>
          // Each statement's slots are renamed `i.name`, so two statements' values never meet.
          jsonArrayFrom(statement.build(db, ((name: string) => slot(`${i}.${name}`)) as never) as unknown as Expression<unknown>).as(
            `${i}`,
          ),
        ),
      ),
    );
    composites.set(key, composite);
  }
  const args: Record<string, unknown> = {};
  reads.forEach((read, i) => {
    for (const [name, value] of Object.entries(read.args)) args[`${i}.${name}`] = value;
  });
  const row = await composite.first(trx, args);
  let held = readsAhead.get(trx);
  if (!held) readsAhead.set(trx, (held = new Map()));
  for (const [i, statement] of statements.entries()) {
    const list = held.get(statement) ?? [];
    list.push({ args: reads[i]!.args as Record<string, unknown>, rows: row![`${i}`]! });
    held.set(statement, list);
  }
}

let nextStatementId = 0;
function idOf(statement: Prepared<never, unknown>): number {
  let id = statementIds.get(statement);
  if (id === undefined) statementIds.set(statement, (id = nextStatementId++));
  return id;
}
