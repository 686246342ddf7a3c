// Plain inserts held back on PostgreSQL and sent as one statement when the transaction next needs an
// answer (src/store/deferred-inserts.ts; a sign-up's new organization goes out so). What is held is
// sent before any other statement of the handle, in order; a held insert that fails fails the
// statement that sends it and the transaction with it; RETURNING, ON CONFLICT and INSERT … SELECT are
// never held; more values than one statement may carry go out as several. SQLite has no data-modifying
// WITH and no round trips to save: the store never holds inserts there, and only the text functions
// are checked on it.
import { CompiledQuery, sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openStore, type Store } from "../src/store/database.js";
import { combinedStatements, deferInserts, renumberPlaceholders } from "../src/store/deferred-inserts.js";
import type { Tx } from "../src/store/handles.js";
import { backend, createTestDatabase, type TestDatabase } from "./helpers/backend.js";

describe("held inserts' text", () => {
  it("numbers placeholders on from an offset, leaving quoted names, literals and dollar-quoted text as they are", () => {
    expect(renumberPlaceholders(`insert into "t" ("a", "b$1") values ($1, $2, '$3', 'it''s $4', $$ $5 $$, $q$ $6 $q$, $10)`, 7)).toBe(
      `insert into "t" ("a", "b$1") values ($8, $9, '$3', 'it''s $4', $$ $5 $$, $q$ $6 $q$, $17)`,
    );
    expect(renumberPlaceholders("values ($1)", 0)).toBe("values ($1)");
  });

  it("joins held inserts as one statement's WITH parts, its values in order, and starts another past PostgreSQL's 65,535 parameters", () => {
    const insert = (table: string, count: number) =>
      CompiledQuery.raw(
        `insert into "${table}" ("v") values ${Array.from({ length: count }, (_, i) => `($${i + 1})`).join(", ")}`,
        Array.from({ length: count }, (_, i) => `${table}${i}`),
      );
    const [one] = combinedStatements([insert("a", 1), insert("b", 2), insert("c", 1)]);
    expect(one!.sql).toBe(
      `with "deferred_0" as (insert into "a" ("v") values ($1)), "deferred_1" as (insert into "b" ("v") values ($2), ($3)) insert into "c" ("v") values ($4)`,
    );
    expect(one!.parameters).toEqual(["a0", "b0", "b1", "c0"]);
    // 30,000 + 30,000 fit in one statement; the third would not.
    const split = combinedStatements([insert("a", 30_000), insert("b", 30_000), insert("c", 30_000)]);
    expect(split.map((statement) => statement.parameters.length)).toEqual([60_000, 30_000]);
    expect(split[1]!.sql.startsWith(`insert into "c"`)).toBe(true);
    expect(combinedStatements([])).toEqual([]);
  });
});

let database: TestDatabase;
let store: Store;

beforeAll(async () => {
  database = await createTestDatabase();
  store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir, onConnectionError: () => undefined });
  if (backend === "postgres") {
    await sql`create table deferred_parents (id text primary key)`.execute(store.db);
    await sql`create table deferred_children (id text primary key, parent_id text not null references deferred_parents (id), n integer)`.execute(
      store.db,
    );
  }
});
afterAll(async () => {
  await store?.close();
  await database?.drop();
});

// The test tables are not in Sigil's schema: their handle is typed loosely.
// biome-ignore lint/suspicious/noExplicitAny: tables made for this test only
const loose = (trx: Tx) => trx as any;
const rowsOf = async (table: string) =>
  (await sql<{ id: string }>`select id from ${sql.table(table)} order by id`.execute(store.db)).rows.map((r) => r.id);

/** Runs `work` in a transaction with a handle holding inserts back; the statements sent, by text. */
async function inTransaction(work: (held: Tx, trx: Tx, flush: () => Promise<void>) => Promise<void>): Promise<string[]> {
  store.statements.texts = [];
  try {
    await store.db.transaction().execute(async (trx) => {
      const deferred = deferInserts(trx);
      await work(deferred.handle, trx, deferred.flush);
    });
    return store.statements.texts.filter((text) => !/^(begin|commit|rollback)/.test(text));
  } finally {
    store.statements.texts = null;
  }
}

if (backend === "postgres") {
  describe("held inserts (PostgreSQL)", () => {
    it("sends nothing for a plain insert, then what is held as one statement before the next read, which sees it", async () => {
      let sentBeforeRead: number | undefined;
      let read: string[] = [];
      const texts = await inTransaction(async (held) => {
        const answer = await loose(held).insertInto("deferred_parents").values({ id: "p1" }).execute();
        await loose(held)
          .insertInto("deferred_children")
          .values([
            { id: "c1", parent_id: "p1", n: 1 },
            { id: "c2", parent_id: "p1", n: 2 },
          ])
          .execute();
        sentBeforeRead = store.statements.texts!.length;
        expect(answer[0].numInsertedOrUpdatedRows).toBe(1n);
        read = (await loose(held).selectFrom("deferred_children").select("id").orderBy("id").execute()).map((r: { id: string }) => r.id);
      });
      expect(sentBeforeRead).toBe(1); // BEGIN only
      expect(read).toEqual(["c1", "c2"]);
      expect(texts.length).toBe(2);
      expect(texts[0]).toMatch(/^with "deferred_0" as \(insert into "deferred_parents".*\) insert into "deferred_children"/);
      // The child references a parent inserted in the same statement: the foreign key is checked at its end.
      expect(await rowsOf("deferred_children")).toEqual(["c1", "c2"]);
      await sql`delete from deferred_children`.execute(store.db);
      await sql`delete from deferred_parents`.execute(store.db);
    });

    it("sends RETURNING, ON CONFLICT and INSERT … SELECT at once, after what is held", async () => {
      const texts = await inTransaction(async (held) => {
        await loose(held).insertInto("deferred_parents").values({ id: "p2" }).execute();
        const returned = await loose(held).insertInto("deferred_parents").values({ id: "p3" }).returning("id").execute();
        expect(returned).toEqual([{ id: "p3" }]);
        await loose(held)
          .insertInto("deferred_parents")
          .values({ id: "p3" })
          .onConflict((oc: { doNothing(): unknown }) => oc.doNothing())
          .execute();
        await loose(held)
          .insertInto("deferred_children")
          .columns(["id", "parent_id", "n"])
          .expression(
            loose(held)
              .selectFrom("deferred_parents")
              .select([sql`'c-' || id`.as("id"), "id", sql`1`.as("n")]),
          )
          .execute();
      });
      expect(texts.map((text) => text.split(" (")[0])).toEqual([
        `insert into "deferred_parents"`,
        `insert into "deferred_parents"`,
        `insert into "deferred_parents"`,
        `insert into "deferred_children"`,
      ]);
      expect(texts[1]).toContain("returning");
      expect(await rowsOf("deferred_children")).toEqual(["c-p2", "c-p3"]);
      await sql`delete from deferred_children`.execute(store.db);
      await sql`delete from deferred_parents`.execute(store.db);
    });

    it("sends what is held at flush, before the transaction goes on without the handle", async () => {
      let seen: string[] = [];
      const texts = await inTransaction(async (held, trx, flush) => {
        await loose(held)
          .insertInto("deferred_parents")
          .values([{ id: "p4" }, { id: "p5" }])
          .execute();
        await flush();
        await flush(); // nothing left: nothing sent
        seen = (await loose(trx).selectFrom("deferred_parents").select("id").orderBy("id").execute()).map((r: { id: string }) => r.id);
      });
      expect(seen).toEqual(["p4", "p5"]);
      expect(texts.length).toBe(2);
      await sql`delete from deferred_parents`.execute(store.db);
    });

    it("fails the statement that sends a held insert a constraint refuses, and the transaction with it: nothing is kept", async () => {
      await sql`insert into deferred_parents (id) values ('taken')`.execute(store.db);
      const before = { parents: await rowsOf("deferred_parents"), children: await rowsOf("deferred_children") };
      let afterInserts = "";
      const failed = await inTransaction(async (held) => {
        await loose(held).insertInto("deferred_parents").values({ id: "new" }).execute();
        // Refused by the primary key, and a child whose parent does not exist: both held, so far answered.
        await loose(held).insertInto("deferred_parents").values({ id: "taken" }).execute();
        await loose(held).insertInto("deferred_children").values({ id: "orphan", parent_id: "nobody", n: 0 }).execute();
        afterInserts = "answered";
        await loose(held).selectFrom("deferred_parents").select("id").execute();
      }).then(
        () => undefined,
        (error: { code?: string }) => error,
      );
      expect(afterInserts).toBe("answered");
      expect(failed?.code).toBe("23505");
      expect({ parents: await rowsOf("deferred_parents"), children: await rowsOf("deferred_children") }).toEqual(before);
      await sql`delete from deferred_parents`.execute(store.db);
    });

    it("sends more values than one statement may carry as several, all kept", async () => {
      const rows = (prefix: string) => Array.from({ length: 10_000 }, (_, i) => ({ id: `${prefix}${i}`, parent_id: "p", n: i }));
      const texts = await inTransaction(async (held) => {
        await loose(held).insertInto("deferred_parents").values({ id: "p" }).execute();
        // Three columns a row: 30,000 parameters an insert.
        for (const prefix of ["a", "b", "c"]) await loose(held).insertInto("deferred_children").values(rows(prefix)).execute();
        const { count } = await loose(held).selectFrom("deferred_children").select(sql`count(*)::int`.as("count")).executeTakeFirst();
        expect(count).toBe(30_000);
      });
      expect(texts.length).toBe(3); // two statements of held inserts, then the count
      await sql`delete from deferred_children`.execute(store.db);
      await sql`delete from deferred_parents`.execute(store.db);
    });
  });
}
