// Statements built once and run with new values (src/store/prepared.ts), on a real database of each
// backend: the same rows as the statement built anew, values bound (never spliced into the SQL),
// one SQL text whatever the values, the handle's plugins told of every run, and a missing value
// refused before anything is sent.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql, type KyselyPlugin, type PluginTransformQueryArgs, type PluginTransformResultArgs } from "kysely";
import { openStore, type Store } from "../src/store/database.js";
import { prepare, rowOfSlots, type Slots } from "../src/store/prepared.js";
import { backend, createTestDatabase, type TestDatabase } from "./helpers/backend.js";

let database: TestDatabase;
let store: Store;

beforeAll(async () => {
  database = await createTestDatabase();
  store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir });
  await sql`create table scratch (k text primary key, v text not null, n integer)`.execute(store.db);
});
afterAll(async () => {
  await store.close();
  await database.drop();
});

type Row = { k: string; v: string; n: number | null };
const insertRow = prepare((db, slot: Slots<Row>) =>
  // biome-ignore lint/suspicious/noExplicitAny: a scratch table the schema does not declare
  (db as any).insertInto("scratch").values(rowOfSlots(slot, { k: true, v: true, n: true })),
);
const byValue = prepare((db, slot: Slots<{ v: string; least: number }>) =>
  // biome-ignore lint/suspicious/noExplicitAny: a scratch table the schema does not declare
  (db as any).selectFrom("scratch").select(["k", "v", "n"]).where("v", "=", slot("v")).where("n", ">=", slot("least")).orderBy("k"),
) as unknown as ReturnType<typeof prepare<{ v: string; least: number }, Row>>;

const everything = async () => (await sql<Row>`select k, v, n from scratch order by k`.execute(store.db)).rows;

/** Tells of every statement a handle runs, as a plugin sees it. */
class Watcher implements KyselyPlugin {
  readonly seen: string[] = [];
  readonly answered: number[] = [];
  transformQuery({ node }: PluginTransformQueryArgs) {
    this.seen.push(node.kind);
    return node;
  }
  async transformResult({ result }: PluginTransformResultArgs) {
    this.answered.push(result.rows.length);
    return result;
  }
}

describe("prepared statements", () => {
  it("write and read what the statement built anew would, with each run's values", async () => {
    const hostile = `it's "quoted"; drop table scratch; --`;
    await insertRow.run(store.db, { k: "a", v: "x", n: 1 });
    await insertRow.run(store.db, { k: "b", v: hostile, n: 2 });
    await insertRow.run(store.db, { k: "c", v: "x", n: null });
    await insertRow.run(store.db, { k: "d", v: "x", n: 5 });
    expect(await everything()).toEqual([
      { k: "a", v: "x", n: 1 },
      { k: "b", v: hostile, n: 2 },
      { k: "c", v: "x", n: null },
      { k: "d", v: "x", n: 5 },
    ]);
    expect(await byValue.all(store.db, { v: "x", least: 2 })).toEqual([{ k: "d", v: "x", n: 5 }]);
    expect(await byValue.all(store.db, { v: hostile, least: 0 })).toEqual([{ k: "b", v: hostile, n: 2 }]);
    expect(await byValue.first(store.db, { v: "x", least: 0 })).toEqual({ k: "a", v: "x", n: 1 });
    expect(await byValue.first(store.db, { v: "nothing", least: 0 })).toBeUndefined();
    const built = await sql<Row>`select k, v, n from scratch where v = ${"x"} and n >= ${0} order by k`.execute(store.db);
    expect(await byValue.all(store.db, { v: "x", least: 0 })).toEqual(built.rows);
  });

  it("sends one SQL text whatever the values, with the values as parameters", async () => {
    const tally = store.statements;
    tally.texts = [];
    try {
      await byValue.all(store.db, { v: "one", least: 1 });
      await byValue.all(store.db, { v: "two'; --", least: 2 });
    } finally {
      const [first, second, ...rest] = tally.texts;
      tally.texts = null;
      expect(rest).toEqual([]);
      expect(first).toBe(second);
      expect(first).not.toContain("one");
      expect(first).not.toContain("two");
    }
  });

  it("tells the handle's plugins of every run (the group commit tracks writes so)", async () => {
    const watcher = new Watcher();
    const watched = store.db.withPlugin(watcher);
    await byValue.all(watched, { v: "x", least: 0 });
    await insertRow.run(watched, { k: "e", v: "y", n: 7 });
    await byValue.all(watched, { v: "y", least: 0 });
    expect(watcher.seen).toEqual(["SelectQueryNode", "InsertQueryNode", "SelectQueryNode"]);
    expect(watcher.answered).toEqual([2, 0, 1]);
  });

  it("refuses a run missing a value, before sending anything", async () => {
    const before = await everything();
    const count = store.statements.count;
    await expect(insertRow.run(store.db, { k: "f", v: "z" } as Row)).rejects.toThrow("prepared statement: no value for n");
    await expect(byValue.all(store.db, { v: "x" } as { v: string; least: number })).rejects.toThrow("no value for least");
    expect(store.statements.count).toBe(count);
    expect(await everything()).toEqual(before);
  });
});

describe("named prepared statements on PostgreSQL (SIGIL_DATABASE_PREPARED_STATEMENTS)", () => {
  // One connection, so the session asked is the one that ran the statements.
  it.each([true, false])("with the setting %s, a recurring statement is named in the session or never", async (prepared) => {
    const one = await openStore({
      databaseUrl: database.databaseUrl,
      dataDir: database.dataDir,
      mode: "existing",
      databasePoolSize: 1,
      databasePreparedStatements: prepared,
    });
    try {
      for (let i = 0; i < 3; i++)
        expect(await byValue.all(one.db, { v: "x", least: 0 })).toEqual(await byValue.all(store.db, { v: "x", least: 0 }));
      if (backend === "postgres") {
        const { rows } = await sql<{ name: string }>`select name from pg_prepared_statements where name like 'sigil\_%'`.execute(one.db);
        expect(rows.length > 0).toBe(prepared);
      } else {
        // SQLite ignores the setting (it caches its own statements): the same rows, checked above.
        expect(one.dialect).toBe("sqlite");
      }
    } finally {
      await one.close();
    }
  });
});
