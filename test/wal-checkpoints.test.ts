// SQLite checkpoints on their own thread (src/store/wal-checkpoints.ts), on a real database file: what
// commits reaches the database file without a commit checkpointing it, the writer's own checkpoints
// are held back while the thread works and handed back when it fails, and the writer stays the last
// connection (it removes the write-ahead log on closing). SQLite's own threshold is 1,000 pages of log:
// the few pages written here would stay in the log without the thread.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFile } from "node:child_process";
import { pathToFileURL } from "node:url";
import { promisify } from "node:util";
import { Worker } from "node:worker_threads";
import BetterSqlite3 from "better-sqlite3";
import { sql } from "kysely";
import { afterEach, describe, expect, it } from "vitest";
import { openStore, SQLITE_FILE_NAME, type Store } from "../src/store/database.js";
import type { WalCheckpointOptions } from "../src/store/wal-checkpoints.js";
import { until } from "./helpers/webhook-receiver.js";

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function scratchStore(checkpoints: WalCheckpointOptions) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-wal-checkpoints-"));
  const store = await openStore({ databaseUrl: null, dataDir: dir, checkpoints });
  await sql`create table scratch (k text primary key)`.execute(store.db);
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await store.close();
  };
  cleanups.push(async () => {
    await close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { store, dir, file: path.join(dir, SQLITE_FILE_NAME), close };
}

/** Commits `count` transactions of one row each through the store's writer. */
async function commitRows(store: Store, prefix: string, count: number): Promise<void> {
  for (let i = 0; i < count; i++) {
    await store.transact("exclusive", (trx) => sql`insert into scratch (k) values (${`${prefix}-${i}`})`.execute(trx));
  }
}

/** The rows the database file itself holds, without its write-ahead log: a copy of the file alone is opened. */
function rowsInFileAlone(dir: string, file: string): string[] {
  const copy = path.join(dir, "copy.db");
  fs.copyFileSync(file, copy);
  const connection = new BetterSqlite3(copy, { readonly: true });
  try {
    const hasTable = connection.prepare("select 1 from sqlite_master where name = 'scratch'").get();
    return hasTable ? (connection.prepare("select k from scratch order by k").all() as { k: string }[]).map((r) => r.k) : [];
  } finally {
    connection.close();
    fs.rmSync(copy, { force: true });
  }
}

const writerAutocheckpoint = async (store: Store) =>
  Number((await sql<{ wal_autocheckpoint: number }>`pragma wal_autocheckpoint`.execute(store.db)).rows[0]!.wal_autocheckpoint);

describe("SQLite checkpoints on their own thread", () => {
  it("copies committed rows into the database file, and holds the writer's own checkpoints back meanwhile", async () => {
    const { store, dir, file } = await scratchStore({ intervalMs: 0 });
    await commitRows(store, "a", 5);
    await until("the checkpoint thread", () => store.checkpoints!.current.state === "ready");
    // While the thread works, the writer checkpoints only if the log grows ten times past SQLite's threshold.
    expect(await writerAutocheckpoint(store)).toBe(10_000);
    // Back to back: a commit made while a checkpoint runs is checkpointed by the next one.
    await commitRows(store, "b", 2);
    await store.checkpoints!.idle();

    expect(store.checkpoints!.current.checkpoints).toBeGreaterThan(0);
    expect(store.checkpoints!.current.failure).toBeNull();
    expect(rowsInFileAlone(dir, file)).toEqual(["a-0", "a-1", "a-2", "a-3", "a-4", "b-0", "b-1"]);
  });

  it("checkpoints a commit made within the interval once the interval is over, with no other commit", async () => {
    // An interval of 3 s: the thread's start and first checkpoint, on a busy machine, stay well inside it.
    const { store, dir, file } = await scratchStore({ intervalMs: 3_000 });
    await commitRows(store, "a", 1);
    await until("the checkpoint thread", () => store.checkpoints!.current.state === "ready");
    await store.checkpoints!.idle();
    const before = store.checkpoints!.current.checkpoints;
    // Within the interval of the last checkpoint asked for: none now, one when the interval is over.
    await commitRows(store, "b", 1);
    expect(rowsInFileAlone(dir, file)).not.toContain("b-0");
    await store.checkpoints!.idle();
    expect(store.checkpoints!.current.checkpoints).toBeGreaterThan(before);
    expect(rowsInFileAlone(dir, file)).toEqual(["a-0", "b-0"]);
  });

  it("waits between checkpoints: commits within the interval start none", async () => {
    const { store, dir, file } = await scratchStore({ intervalMs: 60_000 });
    await commitRows(store, "a", 20);
    expect(store.checkpoints!.current.state).toBe("not started");
    expect(store.checkpoints!.current.checkpoints).toBe(0);
    // The rows are committed (the writer sees them) but still only in the log.
    expect((await sql`select count(*) as n from scratch`.execute(store.db)).rows).toEqual([{ n: 20 }]);
    expect(rowsInFileAlone(dir, file)).toEqual([]);
    expect(await writerAutocheckpoint(store)).toBe(1000);
  });

  it("hands checkpoints back to SQLite when the thread cannot work, and the store goes on", async () => {
    const failing = () => new Worker(`throw new Error("no SQLite on this thread")`, { eval: true });
    const { store, dir, file } = await scratchStore({ intervalMs: 0, startWorker: failing });
    await commitRows(store, "a", 3);
    await until("the thread's failure", () => store.checkpoints!.current.state === "failed");
    expect(store.checkpoints!.current.failure).toContain("no SQLite on this thread");
    expect(await writerAutocheckpoint(store)).toBe(1000);
    await commitRows(store, "b", 2);
    expect((await sql`select count(*) as n from scratch`.execute(store.db)).rows).toEqual([{ n: 5 }]);
    // SQLite's own threshold is not reached by five rows: they stay in the log, as without the thread.
    expect(rowsInFileAlone(dir, file)).toEqual([]);
  });

  it("closes the thread's connection first: the writer, last to close, removes the write-ahead log", async () => {
    const { store, dir, file, close } = await scratchStore({ intervalMs: 0 });
    await commitRows(store, "a", 3);
    await until("the checkpoint thread", () => store.checkpoints!.current.state === "ready");
    expect(fs.existsSync(`${file}-wal`)).toBe(true);
    await close();
    expect(store.checkpoints!.current.state).toBe("closed");
    expect(fs.existsSync(`${file}-wal`)).toBe(false);
    expect(rowsInFileAlone(dir, file)).toEqual(["a-0", "a-1", "a-2"]);
  });

  it("starts no thread for a read-only opening", async () => {
    const { dir } = await scratchStore({ intervalMs: 0 });
    const readOnly = await openStore({ databaseUrl: null, dataDir: dir, mode: "read-only" });
    try {
      expect(readOnly.checkpoints).toBeUndefined();
    } finally {
      await readOnly.close();
    }
  });

  it("lets a process end once its store is closed, the thread included", async () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-wal-checkpoints-"));
    cleanups.push(async () => fs.rmSync(dir, { recursive: true, force: true }));
    // The built store, as the CLI runs it: nothing but the store keeps this process alive.
    const script = path.join(dir, "open-and-close.mjs");
    fs.writeFileSync(
      script,
      `const { openStore } = await import(${JSON.stringify(pathToFileURL(path.resolve("dist/store/database.js")).href)});
      const store = await openStore({ databaseUrl: null, dataDir: process.argv[2], checkpoints: { intervalMs: 0 } });
      while (["not started", "starting"].includes(store.checkpoints.current.state)) await new Promise((resolve) => setTimeout(resolve, 5));
      const state = store.checkpoints.current.state;
      await store.close();
      console.log(state, "closed");`,
    );
    const { stdout } = await promisify(execFile)(process.execPath, [script, dir], { timeout: 20_000 });
    expect(stdout.trim()).toBe("ready closed");
    expect(fs.existsSync(path.join(dir, `${SQLITE_FILE_NAME}-wal`))).toBe(false);
  });
});
