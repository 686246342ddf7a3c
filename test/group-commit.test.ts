// SQLite's shared write transactions (src/store/group-commit.ts), on a real database file: members
// are answered only once their batch is on disk, a failure undoes only what it must, exclusive work
// runs alone, and batches close.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { openStore, type Store } from "../src/store/database.js";
import type { Db, Tx } from "../src/store/handles.js";
import { BatchRolledBack, GroupCommit } from "../src/store/group-commit.js";

let dir: string;
let store: Store;

beforeAll(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-group-commit-"));
  store = await openStore({ databaseUrl: null, dataDir: dir });
  await sql`create table scratch (k text primary key, v text not null)`.execute(store.db);
});
afterAll(async () => {
  await store.close();
  fs.rmSync(dir, { recursive: true, force: true });
});
beforeEach(async () => {
  await sql`delete from scratch`.execute(store.db);
});

const insert = (trx: Tx, k: string) => sql`insert into scratch (k, v) values (${k}, 'x')`.execute(trx);
const committedKeys = async () => (await sql<{ k: string }>`select k from scratch order by k`.execute(store.reader)).rows.map((r) => r.k);

/** A promise to be let go of later: lets a test hold members inside one batch. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

/** The store's Kysely instance, counting the write transactions begun on it. */
function countingTransactions(db: Db) {
  const counter = { begun: 0 };
  const proxy = new Proxy(db, {
    get(target, property, receiver) {
      if (property === "startTransaction") {
        return () => {
          counter.begun++;
          return target.startTransaction();
        };
      }
      return Reflect.get(target, property, receiver);
    },
  });
  return { db: proxy as Db, counter };
}

describe("group commit", () => {
  it("answers each member only once what it wrote is committed (visible to another connection)", async () => {
    const seenOnAnswer = await Promise.all(
      Array.from({ length: 30 }, async (_, i) => {
        const key = `k${String(i).padStart(2, "0")}`;
        await store.transact(i % 5 === 0 ? "exclusive" : "shared", (trx) => insert(trx, key));
        return (await committedKeys()).includes(key);
      }),
    );
    expect(seenOnAnswer).toEqual(Array(30).fill(true));
    expect(await committedKeys()).toHaveLength(30);
  });

  it("commits many concurrent members in fewer transactions than members", async () => {
    const { db, counter } = countingTransactions(store.db);
    const writes = new GroupCommit(db);
    await Promise.all(Array.from({ length: 40 }, (_, i) => writes.run("shared", (trx) => insert(trx, `m${i}`))));
    expect(await committedKeys()).toHaveLength(40);
    expect(counter.begun).toBeGreaterThanOrEqual(1);
    expect(counter.begun).toBeLessThan(40);
  });

  it("closes a batch when it reaches its size limit", async () => {
    const { db, counter } = countingTransactions(store.db);
    const writes = new GroupCommit(db, { maxMembers: 3, maxAgeMs: 60_000 });
    await Promise.all(Array.from({ length: 9 }, (_, i) => writes.run("shared", (trx) => insert(trx, `s${i}`))));
    expect(await committedKeys()).toHaveLength(9);
    expect(counter.begun).toBeGreaterThanOrEqual(3);
  });

  it("undoes only the failing exclusive member's writes", async () => {
    const results = await Promise.allSettled([
      store.transact("shared", (trx) => insert(trx, "a")),
      store.transact("exclusive", async (trx) => {
        await insert(trx, "b");
        throw new Error("exclusive work failed");
      }),
      store.transact("shared", (trx) => insert(trx, "c")),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "fulfilled"]);
    expect((results[1] as PromiseRejectedResult).reason.message).toBe("exclusive work failed");
    expect(await committedKeys()).toEqual(["a", "c"]);
  });

  it("keeps the batch when a shared member fails before writing, or on the write that fails (a duplicate key)", async () => {
    const results = await Promise.allSettled([
      store.transact("shared", (trx) => insert(trx, "d")),
      store.transact("shared", async () => {
        throw new Error("refused before writing");
      }),
      store.transact("shared", (trx) => insert(trx, "d")),
      store.transact("shared", (trx) => insert(trx, "e")),
    ]);
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected", "rejected", "fulfilled"]);
    expect(String((results[2] as PromiseRejectedResult).reason)).toMatch(/UNIQUE constraint failed: scratch.k/);
    expect(await committedKeys()).toEqual(["d", "e"]);
  });

  it("rolls the whole batch back when a shared member fails after writing, and every member is told", async () => {
    const bothWritten = gate();
    let written = 0;
    const wrote = () => {
      if (++written === 2) bothWritten.open();
    };
    const results = await Promise.allSettled([
      store.transact("shared", async (trx) => {
        await insert(trx, "f");
        wrote();
        await bothWritten.opened;
        throw new Error("failed after writing");
      }),
      store.transact("shared", async (trx) => {
        await insert(trx, "g");
        wrote();
        await bothWritten.opened;
      }),
    ]);
    expect(results.map((r) => r.status)).toEqual(["rejected", "rejected"]);
    expect((results[0] as PromiseRejectedResult).reason.message).toBe("failed after writing");
    expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(BatchRolledBack);
    expect(await committedKeys()).toEqual([]);
    // The next batch is a fresh transaction.
    await store.transact("shared", (trx) => insert(trx, "h"));
    expect(await committedKeys()).toEqual(["h"]);
  });

  it("runs an exclusive member alone: after the shared members before it, before those after it", async () => {
    const events: string[] = [];
    const release = gate();
    const first = store.transact("shared", async (trx) => {
      events.push("shared 1 start");
      await release.opened;
      await insert(trx, "s1");
      events.push("shared 1 end");
    });
    const exclusive = store.transact("exclusive", async (trx) => {
      events.push("exclusive start");
      await insert(trx, "x");
      events.push("exclusive end");
    });
    const later = store.transact("shared", async (trx) => {
      events.push("shared 2 start");
      await insert(trx, "s2");
      events.push("shared 2 end");
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(events).toEqual(["shared 1 start"]);
    release.open();
    await Promise.all([first, exclusive, later]);
    expect(events).toEqual(["shared 1 start", "shared 1 end", "exclusive start", "exclusive end", "shared 2 start", "shared 2 end"]);
    expect(await committedKeys()).toEqual(["s1", "s2", "x"]);
  });

  it("reads on the reader connection go on while a write transaction is open", async () => {
    const release = gate();
    const writing = store.transact("shared", async (trx) => {
      await insert(trx, "w");
      await release.opened;
    });
    await new Promise((resolve) => setTimeout(resolve, 10));
    // Not committed yet, and the read is not held up by the open transaction.
    expect(await committedKeys()).toEqual([]);
    release.open();
    await writing;
    expect(await committedKeys()).toEqual(["w"]);
  });
});
