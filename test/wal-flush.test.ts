// SQLite commits flushed off the event loop (src/store/wal-flush.ts), on a real database file: a
// transaction commits under synchronous=NORMAL and resolves only once its write-ahead log is flushed;
// the event loop runs meanwhile; statements outside transactions stay under FULL; no HTTP answer leaves
// before the flush in flight; and a flush that fails stops the store from accepting more work.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { openStore, type Store } from "../src/store/database.js";
import { fdatasyncFile } from "../src/store/wal-flush.js";
import { startHarness, type Harness } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";

/** A flush the test lets go of: each call waits until `release`, and is recorded. */
function heldFlush() {
  const calls: string[] = [];
  let held: { release: () => void; failWith: (error: Error) => void } | null = null;
  let hold = false;
  const flush = async (file: string) => {
    calls.push(file);
    if (!hold) return fdatasyncFile(file);
    await new Promise<void>((resolve, reject) => {
      held = { release: resolve, failWith: reject };
    });
    return fdatasyncFile(file);
  };
  return {
    flush,
    calls,
    hold: () => void (hold = true),
    /** Lets the held flush finish (and later ones run freely). */
    release: () => {
      hold = false;
      held?.release();
    },
    fail: (error: Error) => held?.failWith(error),
    get waiting() {
      return held !== null;
    },
  };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function scratchStore(flushWal: (file: string) => Promise<void>): Promise<{ store: Store; dir: string }> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-wal-flush-"));
  const store = await openStore({ databaseUrl: null, dataDir: dir, flushWal });
  await sql`create table scratch (k text primary key)`.execute(store.db);
  cleanups.push(async () => {
    await store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { store, dir };
}

const synchronousLevel = async (db: Store["db"]) =>
  (await sql<{ synchronous: number }>`pragma synchronous`.execute(db)).rows[0]!.synchronous;
const keys = async (store: Store) =>
  (await sql<{ k: string }>`select k from scratch order by k`.execute(store.reader)).rows.map((r) => r.k);

/** Resolves on the event loop's next turns: proves it is not blocked. */
const turns = (n: number) =>
  new Promise<number>((resolve) => {
    let count = 0;
    const spin = () => (++count >= n ? resolve(count) : setImmediate(spin));
    setImmediate(spin);
  });

describe("commits flushed off the event loop (SQLite)", () => {
  it("answers a transaction once its write-ahead log is flushed, and the event loop runs meanwhile", async () => {
    const flush = heldFlush();
    const { store, dir } = await scratchStore(flush.flush);
    flush.hold();
    let answered = false;
    const writing = store.transact("shared", (trx) => sql`insert into scratch (k) values ('a')`.execute(trx)).then(() => (answered = true));
    let settled = false;
    let settling: Promise<unknown>;
    try {
      while (!flush.waiting) await turns(1);
      settling = store.settled().then(() => (settled = true));
      expect(await turns(20)).toBe(20);
      expect(answered).toBe(false);
      expect(settled).toBe(false);
      // The other connection may read it already: it is committed, only not yet flushed.
      expect(await keys(store)).toEqual(["a"]);
    } finally {
      flush.release();
    }
    await writing;
    await settling;
    expect(answered && settled).toBe(true);
    expect(flush.calls.at(-1)).toBe(path.join(dir, "sigil.db-wal"));
  });

  it("runs a transaction under NORMAL and everything else under FULL", async () => {
    const { store } = await scratchStore(heldFlush().flush);
    expect(await synchronousLevel(store.db)).toBe(2);
    const inside = await store.transact("exclusive", async (trx) => {
      await sql`insert into scratch (k) values ('b')`.execute(trx);
      return synchronousLevel(trx);
    });
    expect(inside).toBe(1);
    expect(await synchronousLevel(store.db)).toBe(2);
    // A transaction that fails is rolled back, and FULL is back too.
    await expect(
      store.db.transaction().execute(async (trx) => {
        await sql`insert into scratch (k) values ('c')`.execute(trx);
        throw new Error("undo");
      }),
    ).rejects.toThrow("undo");
    expect(await synchronousLevel(store.db)).toBe(2);
    expect(await keys(store)).toEqual(["b"]);
  });

  it("refuses every later transaction once a flush failed, and writes nothing more", async () => {
    const flush = heldFlush();
    const { store } = await scratchStore(flush.flush);
    await store.transact("shared", (trx) => sql`insert into scratch (k) values ('a')`.execute(trx));
    flush.hold();
    const failing = store.transact("shared", (trx) => sql`insert into scratch (k) values ('b')`.execute(trx));
    while (!flush.waiting) await turns(1);
    flush.fail(Object.assign(new Error("EIO: i/o error, fdatasync"), { code: "EIO" }));
    await expect(failing).rejects.toThrow(/write-ahead log could not be flushed to disk \(EIO: i\/o error, fdatasync\)/);
    const before = await keys(store);
    await expect(store.transact("shared", (trx) => sql`insert into scratch (k) values ('c')`.execute(trx))).rejects.toThrow(
      /accepts no more work; check the disk and restart Sigil/,
    );
    await expect(store.settled()).rejects.toThrow(/could not be flushed/);
    expect(await keys(store)).toEqual(before);
    expect(before).not.toContain("c");
  });

  it("keeps what it answered: the same rows after the store is closed and opened again", async () => {
    const { store, dir } = await scratchStore(fdatasyncFile);
    await Promise.all(
      ["x", "y", "z"].map((k) => store.transact("shared", (trx) => sql`insert into scratch (k) values (${k})`.execute(trx))),
    );
    const again = await openStore({ databaseUrl: null, dataDir: dir, mode: "existing" });
    try {
      expect((await sql<{ k: string }>`select k from scratch order by k`.execute(again.reader)).rows.map((r) => r.k)).toEqual([
        "x",
        "y",
        "z",
      ]);
    } finally {
      await again.close();
    }
  });
});

describe("answers wait for the flush in flight (SQLite)", () => {
  let h: Harness;
  it("does not answer a query while a commit it may show is not on disk", async () => {
    const flush = heldFlush();
    h = await startHarness({}, { flushWal: flush.flush });
    cleanups.push(() => h.close());
    const { root } = await organizationWith(h, []);
    flush.hold();
    const creating = root.createWallet({ walletName: "held", accounts: [] });
    let listed: unknown;
    let listing: Promise<unknown>;
    try {
      while (!flush.waiting) await turns(1);
      listing = root.getWallets({}).then((answer: unknown) => (listed = answer));
      await turns(50);
      await new Promise((resolve) => setTimeout(resolve, 50));
      expect(listed).toBeUndefined();
    } finally {
      flush.release();
    }
    await creating;
    await listing;
    expect(JSON.stringify(listed)).toContain("held");
  });
});
