// Statements of the hot paths, built with Kysely once and then run with new values.
//
// Kysely builds every query as a tree of frozen nodes and compiles the tree to SQL on every call.
// On the signing path that building and compiling cost more of the server's CPU than executing the
// SQL did (docs/benchmarks.md, "Where the time goes"). A prepared statement is built once per
// database dialect with *slots* in place of its values; each run puts the values into the compiled
// parameters and executes the same SQL text — which is also what lets SQLite and PostgreSQL reuse
// their own prepared statements (store/database.ts, store/postgres-pool.ts).
//
// Each run still goes through the handle's plugins (the group commit's write tracking relies on
// seeing every statement), and the statement is written with Kysely's typed builder like any other.
// A slot stands for one value: a statement whose shape depends on its values (an `in` list of any
// length, an optional condition) is not one statement and is not prepared.
import { createQueryId, type Compilable, type DialectAdapter, type Kysely, type QueryResult, type RootOperationNode } from "kysely";
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

  return {
    run,
    all: async (db, args) => (await run(db, args)).rows,
    first: async (db, args) => (await run(db, args)).rows[0],
  };
}

/**
 * A whole row of slots, one per column, for a statement that inserts whole rows. `columns` is a
 * record with every column of the row set to true, so the compiler refuses a list that misses one.
 */
export function rowOfSlots<T>(slot: Slots<T>, columns: Record<keyof T & string, true>): T {
  return Object.fromEntries(Object.keys(columns).map((column) => [column, slot(column as keyof T & string)])) as T;
}
