// Shared work (signatures) shares write transactions on both backends (src/store/group-commit.ts):
// concurrent members commit in fewer transactions than members, each answered once its batch is
// committed. On PostgreSQL a failed statement aborts the whole transaction, so a member's database
// error loses the batch and every member is told, while a write that changed nothing (an insert that
// met a conflict and did nothing) keeps it, and an organization's row lock is taken once per batch.
// On SQLite a failed statement undoes only itself.
import { sql } from "kysely";
import { afterAll, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { lockOrganization, openStore, type Store } from "../src/store/database.js";
import { BatchRolledBack } from "../src/store/group-commit.js";
import { controlled, type Tx } from "../src/store/handles.js";
import { backend, createTestDatabase, type TestDatabase } from "./helpers/backend.js";
import { until } from "./helpers/webhook-receiver.js";
import { answerWatch, slowStatement } from "./helpers/pipelining.js";

let database: TestDatabase;
let store: Store;

beforeAll(async () => {
  database = await createTestDatabase();
  store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir });
  await sql`create table scratch (k text primary key, v text not null)`.execute(store.db);
  for (const id of ["org-a", "org-b"])
    await sql`insert into organizations (id, name, root_quorum_threshold, created_at, updated_at) values (${id}, ${id}, 1, 0, 0)`.execute(
      store.db,
    );
});
afterAll(async () => {
  await store.close();
  await database.drop();
});
beforeEach(async () => {
  await sql`delete from scratch`.execute(store.db);
});

const insert = (trx: Tx, k: string) => sql`insert into scratch (k, v) values (${k}, 'x')`.execute(trx);
const committedKeys = async () => (await sql<{ k: string }>`select k from scratch order by k`.execute(store.reader)).rows.map((r) => r.k);

/** Runs `work` while counting the write transactions the store begins. */
async function countingBegins<T>(work: () => Promise<T>): Promise<{ value: T; begun: number }> {
  store.statements.texts = [];
  try {
    const value = await work();
    return { value, begun: store.statements.texts.filter((text) => /^begin/i.test(text)).length };
  } finally {
    store.statements.texts = null;
  }
}

/** A promise to be let go of later: holds members inside one batch. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { opened, open };
}

describe(`shared write transactions (${backend})`, () => {
  it("commits concurrent shared members in fewer transactions than members, each answered once committed", async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `k${String(i).padStart(2, "0")}`);
    const { value: seen, begun } = await countingBegins(() =>
      Promise.all(
        keys.map(async (key) => {
          await store.transact("shared", (trx) => insert(trx, key));
          // Answered: what it wrote is visible to every other connection.
          return (await committedKeys()).includes(key);
        }),
      ),
    );
    expect(seen).toEqual(keys.map(() => true));
    expect(begun).toBeGreaterThanOrEqual(1);
    expect(begun).toBeLessThan(keys.length);
    expect(await committedKeys()).toEqual(keys);
  });

  /**
   * Two shared members in one batch, after "taken" is committed: the first writes "a", waits until the
   * second has run `second` (whatever its outcome), then runs `afterwards`.
   */
  async function twoMembers(second: (trx: Tx) => Promise<void>, afterwards?: (trx: Tx) => Promise<unknown>) {
    await store.transact("exclusive", (trx) => insert(trx, "taken"));
    const inside = gate();
    return Promise.allSettled([
      store.transact("shared", async (trx) => {
        await insert(trx, "a");
        await inside.opened;
        await afterwards?.(trx);
      }),
      store.transact("shared", async (trx) => {
        try {
          await second(trx);
        } finally {
          inside.open();
        }
      }),
    ]);
  }

  it("keeps the batch when a member's write changed nothing and it then fails", async () => {
    const results = await twoMembers(async (trx) => {
      const { numAffectedRows } = await sql`insert into scratch (k, v) values ('taken', 'y') on conflict (k) do nothing`.execute(trx);
      expect(numAffectedRows).toBe(0n);
      throw new Error("already there");
    });
    expect(results.map((r) => r.status)).toEqual(["fulfilled", "rejected"]);
    expect((results[1] as PromiseRejectedResult).reason.message).toBe("already there");
    expect(await committedKeys()).toEqual(["a", "taken"]);
  });

  it("a member's failed statement: on PostgreSQL the batch is lost and every member is told; on SQLite only the statement is", async () => {
    const results = await twoMembers(
      (trx) => insert(trx, "taken").then(() => undefined),
      // Runs after the other member's statement failed: on PostgreSQL the transaction is aborted.
      (trx) => insert(trx, "b"),
    );
    const [first, second] = results;
    expect(second.status).toBe("rejected");
    if (backend === "postgres") {
      expect((second as PromiseRejectedResult).reason.code).toBe("23505");
      expect(first.status).toBe("rejected");
      expect((first as PromiseRejectedResult).reason).toBeInstanceOf(BatchRolledBack);
      expect((first as PromiseRejectedResult).reason.message).toContain("failed in the database");
      expect(await committedKeys()).toEqual(["taken"]);
    } else {
      expect(first.status).toBe("fulfilled");
      expect(await committedKeys()).toEqual(["a", "b", "taken"]);
    }
    // The next batch is a new transaction, unharmed.
    await store.transact("shared", (trx) => insert(trx, "c"));
    expect(await committedKeys()).toContain("c");
  });

  it("a member that catches its failed statement's error: on PostgreSQL the batch is still lost (COMMIT answers ROLLBACK); on SQLite kept", async () => {
    const outcome = await store
      .transact("shared", async (trx) => {
        await insert(trx, "before");
        await sql`select 1 / 0`.execute(trx).catch(() => undefined);
        await insert(trx, "after").catch(() => undefined);
        return "done";
      })
      .catch((error: unknown) => error);
    if (backend === "postgres") {
      expect(outcome).toBeInstanceOf(BatchRolledBack);
      expect(String(outcome)).toMatch(/rolled the transaction back at COMMIT/);
      expect(await committedKeys()).toEqual([]);
    } else {
      expect(outcome).toBe("done");
      expect(await committedKeys()).toEqual(["after", "before"]);
    }
  });

  it("takes an organization's shared row lock once per batch on PostgreSQL; an exclusive lock each time", async () => {
    store.statements.texts = [];
    const inside = gate();
    let entered = 0;
    try {
      await Promise.all(
        ["org-a", "org-a", "org-b", "org-a", "org-b"].map((organizationId, i) =>
          store.transact("shared", async (trx) => {
            await lockOrganization(trx, store.dialect, organizationId, "shared");
            await insert(trx, `s${i}`);
            // All five in one batch: none finishes before every one has taken its lock.
            if (++entered === 5) inside.open();
            await inside.opened;
          }),
        ),
      );
      await store.transact("exclusive", async (trx) => {
        await lockOrganization(trx, store.dialect, "org-a", "exclusive");
        await lockOrganization(trx, store.dialect, "org-a", "exclusive");
      });
      const texts = store.statements.texts;
      const count = (pattern: RegExp) => texts.filter((text) => pattern.test(text)).length;
      if (backend === "postgres") {
        expect(count(/for share/i)).toBe(2);
        expect(count(/for update/i)).toBe(2);
      } else {
        // SQLite's lock is the transaction itself: nothing is sent.
        expect(count(/for (share|update)/i)).toBe(0);
      }
    } finally {
      store.statements.texts = null;
    }
    expect(await committedKeys()).toEqual(["s0", "s1", "s2", "s3", "s4"]);
  });

  it("on PostgreSQL a member whose organization another transaction holds exclusively leaves the batch: the others commit meanwhile, and it after", async () => {
    // SQLite's one write lock is every organization's: an exclusive holder is alone in the database by
    // design (bounded instead by deriving keys before the lock: test/noisy-neighbours.test.ts).
    if (backend !== "postgres") return;
    const held = gate();
    const locked = gate();
    const exclusive = store.transact("exclusive", async (trx) => {
      await lockOrganization(trx, store.dialect, "org-a", "exclusive");
      locked.open();
      await held.opened;
    });
    await locked.opened;
    const member = (organizationId: string, k: string) =>
      store.transact("shared", async (trx) => {
        await lockOrganization(trx, store.dialect, organizationId, "shared");
        await insert(trx, k);
      });
    // Sent together, so that they meet in one batch.
    const busy = ["a1", "a2", "a3"].map((k) => member("org-a", k));
    const others = Promise.all(["b1", "b2", "b3"].map((k) => member("org-b", k)));
    const first = await Promise.race([
      others.then(() => "org-b committed while org-a was held"),
      new Promise((resolve) => setTimeout(resolve, 10_000, "org-b waited for org-a's lock")),
    ]);
    try {
      expect(first).toBe("org-b committed while org-a was held");
      expect(await committedKeys()).toEqual(["b1", "b2", "b3"]);
      // The busy organization's members wait for its lock one at a time: one connection of the pool,
      // not one each (the others wait in memory).
      const waiting = () =>
        sql<{
          n: number;
        }>`select count(*)::int as n from pg_locks l join pg_stat_activity a on a.pid = l.pid where not l.granted and a.datname = current_database()`
          .execute(store.reader)
          .then((r) => r.rows[0]!.n);
      expect(await until("a member waiting for org-a's lock", async () => ((await waiting()) > 0 ? true : undefined))).toBe(true);
      expect(await waiting()).toBe(1);
    } finally {
      held.open();
    }
    await exclusive;
    await Promise.all(busy);
    expect(await committedKeys()).toEqual(["a1", "a2", "a3", "b1", "b2", "b3"]);
  });

  it("hands a member's statement to PostgreSQL at once, while another member's is running (pipelined); on SQLite after it", async () => {
    store.statements.texts = [];
    const first = answerWatch();
    const inside = gate();
    let handedWhileFirstRan: boolean | undefined;
    try {
      await Promise.all([
        store.transact("shared", async (trx) => {
          const running = slowStatement().execute(trx.withPlugin(first.plugin));
          inside.open();
          await running;
        }),
        store.transact("shared", async (trx) => {
          await inside.opened;
          const asking = sql`select 'second' as who`.execute(trx);
          // The tally counts a statement when it is handed to the connection.
          await until(
            "the second statement handed over",
            () => store.statements.texts!.some((text) => text.includes("'second'")) || undefined,
          );
          handedWhileFirstRan = !first.answered;
          await asking;
        }),
      ]);
    } finally {
      store.statements.texts = null;
    }
    expect(handedWhileFirstRan).toBe(backend === "postgres");
  });

  it("refuses a savepoint in shared work, which shares its transaction; exclusive work takes one", async () => {
    await expect(store.transact("shared", async (trx) => controlled(trx).savepoint("s").execute())).rejects.toThrow(
      /savepoints are taken only in a transaction held exclusively/,
    );
    await store.transact("exclusive", async (trx) => {
      const savepoint = await controlled(trx).savepoint("s").execute();
      await insert(savepoint, "kept");
      await savepoint.releaseSavepoint("s").execute();
    });
    expect(await committedKeys()).toEqual(["kept"]);
  });
});
