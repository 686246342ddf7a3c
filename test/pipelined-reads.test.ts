// The store's reads outside transactions (store.reader). On PostgreSQL they are pipelined on one
// connection of their own (src/store/pipelined-reads.ts): a read is sent while another is running, a
// read that fails leaves the others and the connection as they were, the connection is replaced when
// the server ends it, and no transaction can be begun on it. On SQLite the reader is a second,
// read-only connection whose statements run one at a time.
import net from "node:net";
import { sql } from "kysely";
import pg from "pg";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openStore, type Store } from "../src/store/database.js";
import { backend, createTestDatabase, type TestDatabase } from "./helpers/backend.js";
import { until } from "./helpers/webhook-receiver.js";
import { answerWatch, slowStatement } from "./helpers/pipelining.js";

let database: TestDatabase;
let store: Store;

beforeAll(async () => {
  database = await createTestDatabase();
  store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir, onConnectionError: () => undefined });
});
afterAll(async () => {
  await store.close();
  await database.drop();
});

/** The PostgreSQL backend serving the reader's connection. */
const readerBackend = async () => (await sql<{ pid: number }>`select pg_backend_pid() as pid`.execute(store.reader)).rows[0]!.pid;

describe(`reads outside transactions (${backend})`, () => {
  it("hands a read to PostgreSQL while another is running (pipelined); on SQLite after it", async () => {
    const first = answerWatch();
    store.statements.texts = [];
    try {
      const running = slowStatement().execute(store.reader.withPlugin(first.plugin));
      const asking = sql`select 'second' as who`.execute(store.reader);
      await until("the second read handed over", () => store.statements.texts!.some((text) => text.includes("'second'")) || undefined);
      const handedWhileFirstRan = !first.answered;
      await Promise.all([running, asking]);
      expect(handedWhileFirstRan).toBe(backend === "postgres");
    } finally {
      store.statements.texts = null;
    }
  });

  it("answers the reads beside a failing one, and keeps its connection", async () => {
    const before = backend === "postgres" ? await readerBackend() : undefined;
    const results = await Promise.allSettled([
      sql<{ n: number }>`select 1 as n`.execute(store.reader),
      sql`select * from no_such_table`.execute(store.reader),
      sql<{ n: number }>`select 3 as n`.execute(store.reader),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason.message).toMatch(/no_such_table/);
    expect(results.flatMap((r) => (r.status === "fulfilled" ? (r.value.rows as { n: number }[]).map((row) => row.n) : []))).toEqual([1, 3]);
    if (backend === "postgres") expect(await readerBackend()).toBe(before);
  });

  it("writes the reads asked for in one turn of the event loop to PostgreSQL at once, and answers each", async () => {
    // The reader's own socket, by its local port (PostgreSQL's inet_client_port; SQLite has none):
    // every write of that socket is counted (one per writev once corked, or per write), and no other's.
    const port =
      backend === "postgres"
        ? (await sql<{ port: number }>`select inet_client_port() as port`.execute(store.reader)).rows[0]!.port
        : undefined;
    const socket = net.Socket.prototype as unknown as Record<"_write" | "_writev", (...args: unknown[]) => unknown>;
    const original = { _write: socket._write, _writev: socket._writev };
    let writes = 0;
    for (const method of ["_write", "_writev"] as const)
      socket[method] = function (this: net.Socket, ...args: unknown[]) {
        if (port !== undefined && this.localPort === port) writes++;
        return original[method].apply(this, args);
      };
    try {
      const together = await Promise.allSettled([
        sql<{ n: number }>`select 1 as n`.execute(store.reader),
        sql`select * from no_such_table`.execute(store.reader),
        sql<{ n: number }>`select 3 as n`.execute(store.reader),
        sql<{ n: number }>`select 4 as n`.execute(store.reader),
      ]);
      const writesTogether = writes;
      writes = 0;
      const apart: number[] = [];
      for (const n of [5, 6, 7]) apart.push((await sql<{ n: number }>`select cast(${n} as integer) as n`.execute(store.reader)).rows[0]!.n);
      const writesApart = writes;
      expect(together.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled", "fulfilled"]);
      expect((together[1] as PromiseRejectedResult).reason.message).toMatch(/no_such_table/);
      expect(together.flatMap((r) => (r.status === "fulfilled" ? (r.value.rows as { n: number }[]).map((row) => row.n) : []))).toEqual([
        1, 3, 4,
      ]);
      expect(apart).toEqual([5, 6, 7]);
      // SQLite writes to no socket.
      expect([writesTogether, writesApart]).toEqual(backend === "postgres" ? [1, 3] : [0, 0]);
    } finally {
      Object.assign(socket, original);
    }
  });

  it("takes a new connection once the database has ended its own (PostgreSQL)", async () => {
    if (backend !== "postgres") {
      // SQLite's reader is a file handle: nothing to end; it keeps reading.
      expect((await sql<{ n: number }>`select 1 as n`.execute(store.reader)).rows).toEqual([{ n: 1 }]);
      return;
    }
    const before = await readerBackend();
    const admin = new pg.Client({ connectionString: database.databaseUrl! });
    await admin.connect();
    try {
      expect((await admin.query("select pg_terminate_backend($1) as ended", [before])).rows[0].ended).toBe(true);
    } finally {
      await admin.end();
    }
    // The read in flight when it ended may fail; the next ones run on a new connection.
    const after = await until("a read on a new connection", () => readerBackend().catch(() => undefined));
    expect(after).not.toBe(before);
    expect(await readerBackend()).toBe(after);
  });

  it("begins no transaction on PostgreSQL (readSnapshot and transact do); SQLite's reader can", async () => {
    const inTransaction = store.reader.transaction().execute((trx) => sql<{ n: number }>`select 1 as n`.execute(trx));
    if (backend === "postgres") await expect(inTransaction).rejects.toThrow(/cannot begin one: use the store's readSnapshot or transact/);
    else expect((await inTransaction).rows).toEqual([{ n: 1 }]);
    // The reads go on.
    expect((await sql<{ n: number }>`select 2 as n`.execute(store.reader)).rows).toEqual([{ n: 2 }]);
  });
});
