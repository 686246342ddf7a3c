// Opens the one database the service keeps its state in: an embedded SQLite file by default, or
// PostgreSQL when a URL is given. Everything above this module sees one Kysely interface.
import fs from "node:fs";
import path from "node:path";
import BetterSqlite3 from "better-sqlite3";
import pg from "pg";
import {
  CompiledQuery,
  Kysely,
  Migrator,
  PostgresDialect,
  SqliteAdapter,
  SqliteDialect,
  SqliteDriver,
  type ControlledTransaction,
  type DatabaseConnection,
  type Transaction,
} from "kysely";
import type { Database } from "./schema.js";
import { migrationProvider } from "./migrations.js";
import { GroupCommit, type LockMode } from "./group-commit.js";

export type Dialect = "sqlite" | "postgres";
export type Tx = Transaction<Database>;
/** A transaction the pipeline commits itself, with savepoints around each operation. */
export type OpenTx = ControlledTransaction<Database>;
export type Db = Kysely<Database>;

export interface Store {
  /** Migrations, administration and tests; the pipeline writes through `transact`. */
  db: Db;
  /** Reads outside any transaction (authentication, queries): they see committed data only. On SQLite
   * a second, read-only connection, so reads go on while a write transaction is open. */
  reader: Db;
  /** Runs reads that must agree with each other in one read-only transaction on the reader: they all
   * see the database as of one moment, whatever commits meanwhile. */
  readSnapshot<T>(work: (trx: Tx) => Promise<T>): Promise<T>;
  /**
   * Runs `work` in a write transaction and resolves with its value once that transaction is durably
   * committed; on failure nothing `work` wrote is kept. `shared` work writes nothing but its own new
   * rows, and may run beside other shared work; `exclusive` work runs alone. On SQLite, activities
   * share transactions (group-commit.ts); on PostgreSQL each has its own, and the caller's row lock on
   * the organization provides the exclusion.
   */
  transact<T>(mode: LockMode, work: (trx: OpenTx) => Promise<T>): Promise<T>;
  dialect: Dialect;
  /** Human-readable location, for logs (never includes a password). */
  location: string;
  close(): Promise<void>;
}

export interface StoreOptions {
  databaseUrl: string | null;
  dataDir: string;
  /** Told when PostgreSQL drops an idle pooled connection (a restart, a failover, an admin's kill).
   * The pool replaces the connection; without a listener such an event would crash the process. */
  onConnectionError?: (error: Error) => void;
}

/**
 * SQLite's default BEGIN is deferred: a transaction that reads first and writes later can fail with
 * SQLITE_BUSY when another process (the CLI, a second server) wrote in between. BEGIN IMMEDIATE takes
 * the write lock up front, so concurrent writers queue on the busy timeout instead.
 */
class ImmediateSqliteDriver extends SqliteDriver {
  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw("begin immediate"));
  }
}

/**
 * Kysely runs SQLite migrations outside a transaction and without a lock, so two processes starting on
 * a fresh file (a server and `sigil bootstrap`) could both create the tables, and a crash could leave
 * half a schema. SQLite's DDL is transactional: declaring it makes the migrator wrap each run in one
 * (BEGIN IMMEDIATE) transaction, which doubles as the cross-process migration lock.
 */
class TransactionalDdlSqliteAdapter extends SqliteAdapter {
  override get supportsTransactionalDdl(): boolean {
    return true;
  }
}

class ImmediateSqliteDialect extends SqliteDialect {
  constructor(private readonly sqliteConfig: ConstructorParameters<typeof SqliteDialect>[0]) {
    super(sqliteConfig);
  }
  override createDriver() {
    return new ImmediateSqliteDriver(this.sqliteConfig);
  }
  override createAdapter() {
    return new TransactionalDdlSqliteAdapter();
  }
}

export const SQLITE_FILE_NAME = "sigil.db";

/**
 * Kysely's SQLite driver prepares every query anew; preparing costs more than running most of ours.
 * The service issues a small, fixed set of SQL texts, so prepared statements are kept and reused
 * (better-sqlite3 statements are reusable; queries run one at a time on the one connection).
 */
function withStatementCache(sqlite: BetterSqlite3.Database) {
  const statements = new Map<string, BetterSqlite3.Statement>();
  return {
    close: () => sqlite.close(),
    prepare(sql: string) {
      let statement = statements.get(sql);
      if (!statement) {
        // Bounded, in case a caller builds SQL texts without end (IN lists of varying length do).
        if (statements.size >= 2000) statements.clear();
        statement = sqlite.prepare(sql);
        statements.set(sql, statement);
      }
      return statement;
    },
  };
}

/**
 * Switching a fresh file to WAL needs a moment of exclusive access, and SQLite answers SQLITE_BUSY at
 * once (without its busy handler) while another process is doing the same: several processes
 * starting together on a new database (a server and `sigil bootstrap`) wait a little and try again.
 */
function useWal(sqlite: BetterSqlite3.Database): void {
  for (let attempt = 1; ; attempt++) {
    try {
      sqlite.pragma("journal_mode = WAL");
      return;
    } catch (error) {
      if ((error as { code?: string }).code !== "SQLITE_BUSY" || attempt >= 100) throw error;
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 50);
    }
  }
}

function openSqlite(dataDir: string): Omit<Store, "reader"> & { openReader(): Db } {
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = path.join(dataDir, SQLITE_FILE_NAME);
  const sqlite = new BetterSqlite3(file, { timeout: 10_000 });
  useWal(sqlite);
  // FULL: every commit is on disk before the client hears of it (in WAL mode, one fsync of the log
  // per commit). A key service must not forget an activity it has answered.
  sqlite.pragma("synchronous = FULL");
  sqlite.pragma("foreign_keys = ON");
  const db = new Kysely<Database>({ dialect: new ImmediateSqliteDialect({ database: withStatementCache(sqlite) }) });
  const writes = new GroupCommit(db);
  let reader: Kysely<Database> | null = null;
  return {
    db,
    dialect: "sqlite",
    location: file,
    transact: (mode, work) => writes.run(mode, work),
    // Opened once the schema exists. A WAL reader never waits for the writer, so the busy timeout
    // (which would block the event loop) only covers the rare recovery of another process's crash.
    openReader() {
      const connection = new BetterSqlite3(file, { readonly: true, timeout: 2_000 });
      reader = new Kysely<Database>({ dialect: new SqliteDialect({ database: withStatementCache(connection) }) });
      return reader;
    },
    // A WAL read transaction keeps the snapshot of its first read until it ends.
    readSnapshot: (work) => reader!.transaction().execute(work),
    close: async () => {
      await reader?.destroy();
      await db.destroy();
    },
  };
}

function openPostgres(url: string, onConnectionError: (error: Error) => void): Store {
  // int8 columns hold millisecond timestamps, well inside Number's exact range.
  const types = {
    getTypeParser: (oid: number, format?: any) =>
      oid === pg.types.builtins.INT8 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format),
  };
  const pool = new pg.Pool({ connectionString: url, max: 10, types });
  pool.on("error", onConnectionError);
  const db = new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
  const parsed = new URL(url);
  parsed.password = "";
  return {
    db,
    reader: db,
    // READ COMMITTED (the default) would give each statement its own snapshot.
    readSnapshot: (work) => db.transaction().setIsolationLevel("repeatable read").setAccessMode("read only").execute(work),
    dialect: "postgres",
    location: parsed.toString(),
    async transact(_mode, work) {
      const trx = await db.startTransaction().execute();
      try {
        const value = await work(trx);
        await trx.commit().execute();
        return value;
      } catch (error) {
        await trx.rollback().execute().catch(() => undefined);
        throw error;
      }
    },
    close: () => db.destroy(),
  };
}

/** Opens the database and brings its schema up to date. */
export async function openStore(options: StoreOptions): Promise<Store> {
  const onConnectionError = options.onConnectionError ?? ((error: Error) => console.error(`database connection lost: ${error.message}`));
  if (options.databaseUrl) {
    const store = openPostgres(options.databaseUrl, onConnectionError);
    await migrateOrClose(store);
    return store;
  }
  const { openReader, ...store } = openSqlite(options.dataDir);
  await migrateOrClose(store);
  return { ...store, reader: openReader() };
}

async function migrateOrClose(store: Pick<Store, "db" | "close">): Promise<void> {
  try {
    await migrate(store.db);
  } catch (error) {
    await store.close();
    throw error;
  }
}

export async function migrate(db: Db): Promise<void> {
  const migrator = new Migrator({ db, provider: migrationProvider, migrationTableName: "sigil_migrations", migrationLockTableName: "sigil_migrations_lock" });
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === "Error");
    throw new Error(`database migration ${failed?.migrationName ?? ""} failed: ${error instanceof Error ? error.message : String(error)}`);
  }
}

/**
 * Takes the organization's lock in the open transaction `trx`, so the activities of one organization
 * are applied one after another even across server processes. On PostgreSQL that is a row lock on
 * the organization: `exclusive` for an activity that may change the organization, `shared` for one
 * that changes nothing another activity reads (several of those hold it at once, and an exclusive
 * holder waits for them all). SQLite already admits one writer at a time (BEGIN IMMEDIATE).
 * Returns whether the organization exists.
 */
export async function lockOrganization(trx: Tx, dialect: Dialect, organizationId: string, mode: "exclusive" | "shared" = "exclusive"): Promise<boolean> {
  let query = trx.selectFrom("organizations").select("id").where("id", "=", organizationId);
  if (dialect === "postgres") query = mode === "shared" ? query.forShare() : query.forUpdate();
  return (await query.executeTakeFirst()) !== undefined;
}

/** A second activity with the same fingerprint, inserted by a transaction running beside this one. */
export function isDuplicateFingerprint(error: unknown): boolean {
  const e = error as { code?: string; constraint?: string; message?: string } | undefined;
  if (e?.code === "23505") return (e.constraint ?? "").includes("fingerprint");
  return e?.code === "SQLITE_CONSTRAINT_UNIQUE" && (e.message ?? "").includes("activities.fingerprint");
}
