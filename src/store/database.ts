// Opens the one database the service keeps its state in: an embedded SQLite file by default, or
// PostgreSQL when a URL is given. Everything above this module sees one Kysely interface.
import fs from "node:fs";
import path from "node:path";
import BetterSqlite3 from "better-sqlite3";
import pg from "pg";
import {
  CompiledQuery,
  Kysely,
  sql,
  Migrator,
  PostgresDialect,
  SqliteAdapter,
  SqliteDialect,
  SqliteDriver,
  type DatabaseConnection,
} from "kysely";
import type { Database } from "./schema.js";
import { migrationProvider, migrations } from "./migrations.js";
import { GroupCommit, sharedLocksHeld } from "./group-commit.js";
import { displayDatabaseUrl, missingDatabaseAdvice } from "./database-url.js";
import { preparingPool, StatementNames } from "./postgres-pool.js";
import {
  DuplicateFingerprint,
  markShared,
  OrganizationBusy,
  tally,
  type ConnectionUse,
  type Db,
  type Dialect,
  type LockMode,
  type OpenTx,
  type StatementTally,
  type TransactionObserver,
  type Tx,
  type WriteTx,
} from "./handles.js";
import { prepare, type Slots } from "./prepared.js";
import { WalFlush } from "./wal-flush.js";
import { beginPipelined } from "./pipelined-transaction.js";
import { PipelinedReadsDriver } from "./pipelined-reads.js";
import { CommitOutcomeUnknown, DatabaseUnreachable, isLostConnection } from "./lost-connections.js";
import { WalCheckpoints, type WalCheckpointOptions } from "./wal-checkpoints.js";

export interface Store {
  /** Migrations, administration and tests; the pipeline writes through `transact`. */
  db: Db;
  /** Reads outside any transaction (authentication, queries): they see committed data only. On SQLite
   * a second, read-only connection, so reads go on while a write transaction is open; on PostgreSQL
   * one connection on which concurrent reads are pipelined (pipelined-reads.ts), on which no
   * transaction can be begun (readSnapshot and transact begin theirs on the pool). */
  reader: Db;
  /** Runs reads that must agree with each other in one read-only transaction on the reader: they all
   * see the database as of one moment, whatever commits meanwhile. */
  readSnapshot<T>(work: (trx: Tx) => Promise<T>): Promise<T>;
  /**
   * Runs `work` in a write transaction and resolves with its value once that transaction is durably
   * committed; on failure nothing `work` wrote is kept. `shared` work writes nothing but its own new
   * rows, and may run beside other shared work; `exclusive` work runs alone. On SQLite, activities
   * share transactions (group-commit.ts); on PostgreSQL shared work does, and exclusive work has a
   * transaction of its own, in which the caller's row lock on the organization provides the exclusion.
   */
  transact<M extends LockMode, T>(mode: M, work: (trx: WriteTx<M>) => Promise<T>): Promise<T>;
  /** Resolves once everything committed so far is on disk: what is answered must not be less durable
   * than what it shows. At once on PostgreSQL (its COMMIT returns when durable); on SQLite, after the
   * write-ahead log's flush in flight, if any (wal-flush.ts). */
  settled(): Promise<void>;
  dialect: Dialect;
  /** Human-readable location, for logs (never includes a password). */
  location: string;
  /** Whether this opening made the database (the SQLite file, or Sigil's tables in PostgreSQL). */
  created: boolean;
  /** Every statement sent to the database so far, by any connection of this store. */
  statements: StatementTally;
  /** How its connections are used at this moment, pool by pool (for the operator's metrics). */
  connections(): ConnectionUse[];
  /** SQLite, unless read-only: the thread that copies the write-ahead log into the file (wal-checkpoints.ts). */
  checkpoints?: WalCheckpoints;
  close(): Promise<void>;
}

/**
 * What opening may do to the database:
 * - `create`: make it when absent (the SQLite file and its directory, Sigil's tables), then migrate —
 *   what a server does on its first start;
 * - `existing`: open only a database that already holds Sigil's tables, and migrate it;
 * - `read-only`: open only an existing database whose schema is this version's, and write nothing
 *   (a newer CLI run against a production database must not migrate it under older servers).
 */
export type OpenMode = "create" | "existing" | "read-only";

/** There is no Sigil database where the configuration points (nothing was created there). */
export class MissingDatabaseError extends Error {
  constructor(
    /** The SQLite file or the PostgreSQL URL (password masked). */
    readonly location: string,
    readonly reason: string,
  ) {
    super(`no Sigil database at ${location} (${reason})`);
  }
}

export interface StoreOptions {
  databaseUrl: string | null;
  dataDir: string;
  /** Told when PostgreSQL drops an idle pooled connection (a restart, a failover, an admin's kill).
   * The pool replaces the connection; without a listener such an event would crash the process. */
  onConnectionError?: (error: Error) => void;
  /** Default `create`. */
  mode?: OpenMode;
  /** PostgreSQL only: the most connections kept open at once (SIGIL_DATABASE_POOL_SIZE). Default 10. */
  databasePoolSize?: number;
  /** PostgreSQL only: run recurring statements as named prepared statements (SIGIL_DATABASE_PREPARED_STATEMENTS). Default true. */
  databasePreparedStatements?: boolean;
  /** SQLite only, for tests: how a commit's write-ahead log reaches the disk (default: fdatasync). */
  flushWal?: (file: string) => Promise<void>;
  /** SQLite only, for tests: how often and on what thread the write-ahead log is checkpointed. */
  checkpoints?: WalCheckpointOptions;
  /** Told of each write transaction as it ends (the metrics; none by default). */
  transactionObserver?: TransactionObserver;
}

/**
 * SQLite's default BEGIN is deferred: a transaction that reads first and writes later can fail with
 * SQLITE_BUSY when another process (the CLI, a second server) wrote in between. BEGIN IMMEDIATE takes
 * the write lock up front, so concurrent writers queue on the busy timeout instead.
 *
 * With `wal`, a transaction runs under synchronous=NORMAL and its commit flushes the WAL off the event
 * loop (wal-flush.ts); statements outside a transaction stay under FULL. The pragma is set on the
 * connection directly: it is no statement of the work, and SQLite refuses it inside a transaction.
 */
class ImmediateSqliteDriver extends SqliteDriver {
  // Prepared once: better-sqlite3's pragma() prepares its statement on every call, twice per batch here.
  private readonly synchronousNormal: BetterSqlite3.Statement;
  private readonly synchronousFull: BetterSqlite3.Statement;

  constructor(
    config: ConstructorParameters<typeof SqliteDriver>[0],
    sqlite: BetterSqlite3.Database,
    private readonly wal: WalFlush | null,
    private readonly checkpoints: WalCheckpoints | null,
  ) {
    super(config);
    this.synchronousNormal = sqlite.prepare("pragma synchronous = NORMAL");
    this.synchronousFull = sqlite.prepare("pragma synchronous = FULL");
  }

  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    if (!this.wal) return void (await connection.executeQuery(CompiledQuery.raw("begin immediate")));
    this.wal.assertUsable();
    this.synchronousNormal.run();
    try {
      await connection.executeQuery(CompiledQuery.raw("begin immediate"));
    } catch (error) {
      this.synchronousFull.run();
      throw error;
    }
  }

  override async commitTransaction(connection: DatabaseConnection): Promise<void> {
    if (!this.wal) return super.commitTransaction(connection);
    await this.wal.commit(async () => {
      // A COMMIT that fails leaves the transaction open: the rollback that follows restores FULL.
      await connection.executeQuery(CompiledQuery.raw("commit"));
      this.synchronousFull.run();
    });
    this.checkpoints?.committed();
  }

  override async rollbackTransaction(connection: DatabaseConnection): Promise<void> {
    await super.rollbackTransaction(connection);
    if (this.wal) this.synchronousFull.run();
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
  constructor(
    private readonly sqliteConfig: ConstructorParameters<typeof SqliteDialect>[0],
    private readonly sqlite: BetterSqlite3.Database,
    private readonly wal: WalFlush | null,
    private readonly checkpoints: WalCheckpoints | null,
  ) {
    super(sqliteConfig);
  }
  override createDriver() {
    return new ImmediateSqliteDriver(this.sqliteConfig, this.sqlite, this.wal, this.checkpoints);
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
function withStatementCache(sqlite: BetterSqlite3.Database, tallied: StatementTally) {
  const statements = new Map<string, BetterSqlite3.Statement>();
  return {
    close: () => sqlite.close(),
    // Kysely asks for the statement of every query it runs, cached or not: one query each.
    prepare(sql: string) {
      tally(tallied, sql);
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

const MIGRATION_TABLE = "sigil_migrations";

function sqliteHasSigilTables(sqlite: BetterSqlite3.Database): boolean {
  return sqlite.prepare("select 1 from sqlite_master where type = 'table' and name = ?").get(MIGRATION_TABLE) !== undefined;
}

/** Opens the file, or throws MissingDatabaseError having created nothing (unless `mode` is create). */
function openSqliteFile(file: string, mode: OpenMode): { sqlite: BetterSqlite3.Database; created: boolean } {
  const exists = fs.existsSync(file);
  if (mode !== "create" && !exists) throw new MissingDatabaseError(file, "the file does not exist");
  // fileMustExist: a file removed since the check above is not created anew.
  const sqlite = new BetterSqlite3(file, { timeout: 10_000, readonly: mode === "read-only", fileMustExist: mode !== "create" });
  try {
    const hasTables = sqliteHasSigilTables(sqlite);
    if (mode !== "create" && !hasTables) throw new MissingDatabaseError(file, "the file holds no Sigil tables");
    return { sqlite, created: !hasTables };
  } catch (error) {
    sqlite.close();
    if ((error as { code?: string }).code === "SQLITE_NOTADB") throw new Error(`${file} is not an SQLite database`);
    throw error;
  }
}

function openSqlite(
  dataDir: string,
  mode: OpenMode,
  flushWal: ((file: string) => Promise<void>) | undefined,
  checkpointOptions: WalCheckpointOptions | undefined,
  observer: TransactionObserver | undefined,
): Omit<Store, "reader"> & { openReader(): Db } {
  if (mode === "create") fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const file = path.join(dataDir, SQLITE_FILE_NAME);
  const { sqlite, created } = openSqliteFile(file, mode);
  // A read-only connection can neither change the journal mode nor needs to: the file is already WAL.
  if (mode !== "read-only") {
    useWal(sqlite);
    // FULL: every commit is on disk before the client hears of it (in WAL mode, one flush of the log
    // per commit). A key service must not forget an activity it has answered. A transaction's commit
    // makes the same flush off the event loop (wal-flush.ts).
    sqlite.pragma("synchronous = FULL");
  }
  sqlite.pragma("foreign_keys = ON");
  const wal = mode === "read-only" ? null : new WalFlush(`${file}-wal`, flushWal);
  const checkpoints = mode === "read-only" ? null : new WalCheckpoints(file, sqlite, checkpointOptions);
  const statements: StatementTally = { count: 0, texts: null };
  const db = new Kysely<Database>({
    dialect: new ImmediateSqliteDialect({ database: withStatementCache(sqlite, statements) }, sqlite, wal, checkpoints),
  });
  const writes = new GroupCommit(db, { maxMembers: 256, maxAgeMs: 20, ...(observer ? { observer } : {}) });
  let reader: Kysely<Database> | null = null;
  return {
    db,
    dialect: "sqlite",
    location: file,
    created,
    statements,
    // The one write connection; the reader's statements run synchronously, so it is never seen busy.
    connections: () => {
      const { busy, waiting } = writes.usage;
      return [{ pool: "writer", open: 1, idle: busy ? 0 : 1, waiting }];
    },
    transact: (lockMode, work) => writes.run(lockMode, work),
    settled: () => wal?.settled() ?? Promise.resolve(),
    // Opened once the schema exists. A WAL reader never waits for the writer, so the busy timeout
    // (which would block the event loop) only covers the rare recovery of another process's crash.
    openReader() {
      if (mode === "read-only") return db;
      const connection = new BetterSqlite3(file, { readonly: true, timeout: 2_000 });
      reader = new Kysely<Database>({ dialect: new SqliteDialect({ database: withStatementCache(connection, statements) }) });
      return reader;
    },
    // A WAL read transaction keeps the snapshot of its first read until it ends.
    readSnapshot: (work) => reader!.transaction().execute(work),
    ...(checkpoints ? { checkpoints } : {}),
    close: async () => {
      await reader?.destroy();
      // The writer closes last: as the last connection, it checkpoints what is left and removes the log.
      await checkpoints?.close();
      await db.destroy();
    },
  };
}

function openPostgres(
  url: string,
  poolSize: number,
  names: StatementNames,
  onConnectionError: (error: Error) => void,
  observer: TransactionObserver | undefined,
): Omit<Store, "created"> {
  const statements: StatementTally = { count: 0, texts: null };
  // int8 columns hold millisecond timestamps, well inside Number's exact range.
  const types = {
    // biome-ignore lint/suspicious/noExplicitAny: pg's own parser signature types `format` as any
    getTypeParser: (oid: number, format?: any) =>
      oid === pg.types.builtins.INT8 ? (v: string) => Number(v) : pg.types.getTypeParser(oid, format),
  };
  const newPool = (max: number, pipeline: boolean) => {
    const created = new pg.Pool({ connectionString: url, max, types, pipeline });
    created.on("error", onConnectionError);
    // The pool listens for errors of idle connections only; one that dies while checked out (the
    // server restarts mid-query) emits "error" on the connection itself, which would otherwise be an
    // uncaught exception that stops the process. Its query fails on its own and the pool replaces it.
    created.on("connect", (connection) => connection.on("error", onConnectionError));
    return created;
  };
  const pool = newPool(poolSize, false);
  // Named prepared statements: PostgreSQL parses and plans each recurring text once per connection
  // (measured: about half of PostgreSQL's CPU per signature; docs/benchmarks.md#prepared-statements-on-postgresql),
  // unless turned off.
  const dialect = new PostgresDialect({ pool: preparingPool(pool, statements, names) });
  const db = new Kysely<Database>({ dialect });
  // Shared activities (signatures) share transactions, as on SQLite (group-commit.ts), one batch at a
  // time on a connection of its own whose statements are pipelined (pipelined-transaction.ts).
  const batchPool = newPool(1, true);
  const batchConnections = preparingPool(batchPool, statements, names);
  const shared = new GroupCommit(db, {
    maxMembers: 256,
    maxAgeMs: 20,
    // A lost connection ends the transaction too (PostgreSQL rolls it back with the session).
    abortsTransaction: (error) => error instanceof pg.DatabaseError || isLostConnection(error),
    begin: async () => beginPipelined(db, dialect, await batchConnections.connect()),
    ...(observer ? { observer } : {}),
  });
  /** `work` in a transaction of its own, on the pool. */
  const alone = async <T>(work: (trx: OpenTx) => Promise<T>): Promise<T> => {
    const began = performance.now();
    let committed = false;
    try {
      const trx = await db.startTransaction().execute();
      let committing = false;
      try {
        const value = await work(trx);
        committing = true;
        await trx.commit().execute();
        committed = true;
        return value;
      } catch (error) {
        await trx
          .rollback()
          .execute()
          .catch(() => undefined);
        // Before COMMIT, a lost connection took the transaction with it; during COMMIT, it may have
        // been committed first (lost-connections.ts).
        throw committing && isLostConnection(error) ? new CommitOutcomeUnknown(error) : error;
      }
    } finally {
      observer?.transactionEnded("single", committed, (performance.now() - began) / 1000, 1);
    }
  };
  // Signatures whose organization another transaction holds exclusively (lockOrganization found it
  // busy) leave the batch, and wait for the lock in a transaction of their own: one at a time per
  // organization in this process, so that a busy organization holds at most one of the pool's
  // connections waiting. Each first tries a batch again when its turn comes: the lock may be free by
  // then, and the batch is the cheap road.
  const apart = new Map<string, Promise<unknown>>();
  const sharedApart = <T>(organizationId: string, work: (trx: Tx) => Promise<T>): Promise<T> => {
    const turn = async () => {
      try {
        return await shared.run("shared", work);
      } catch (error) {
        if (!(error instanceof OrganizationBusy)) throw error;
        return alone((trx) => work(markShared(trx)));
      }
    };
    const previous = apart.get(organizationId);
    const mine = previous ? previous.then(turn, turn) : turn();
    const settled = mine.then(
      () => undefined,
      () => undefined,
    );
    apart.set(organizationId, settled);
    void settled.then(() => {
      if (apart.get(organizationId) === settled) apart.delete(organizationId);
    });
    return mine;
  };
  // Reads outside transactions, pipelined on a connection of their own (pipelined-reads.ts).
  const readsPool = newPool(1, true);
  const reads = new PipelinedReadsDriver(preparingPool(readsPool, statements, names), readsPool);
  const reader = new Kysely<Database>({
    dialect: {
      createAdapter: () => dialect.createAdapter(),
      createDriver: () => reads,
      createIntrospector: (db) => dialect.createIntrospector(db),
      createQueryCompiler: () => dialect.createQueryCompiler(),
    },
  });
  const use = (name: string, of: pg.Pool): ConnectionUse => ({
    pool: name,
    open: of.totalCount,
    idle: of.idleCount,
    waiting: of.waitingCount,
  });
  return {
    db,
    reader,
    statements,
    connections: () => [use("transactions", pool), use("batches", batchPool), use("reads", readsPool)],
    // READ COMMITTED (the default) would give each statement its own snapshot.
    readSnapshot: (work) => db.transaction().setIsolationLevel("repeatable read").setAccessMode("read only").execute(work),
    settled: () => Promise.resolve(),
    dialect: "postgres",
    location: displayDatabaseUrl(url),
    async transact<M extends LockMode, T>(mode: M, work: (trx: WriteTx<M>) => Promise<T>): Promise<T> {
      if (mode === "exclusive") return alone(work as (trx: OpenTx) => Promise<T>);
      const sharedWork = work as (trx: Tx) => Promise<T>;
      try {
        return await shared.run("shared", sharedWork);
      } catch (error) {
        if (!(error instanceof OrganizationBusy)) throw error;
        return sharedApart(error.organizationId, sharedWork);
      }
    },
    close: async () => {
      await db.destroy();
      await reader.destroy();
      await batchPool.end();
      await readsPool.end();
    },
  };
}

/** The first round trip: says plainly when the server or the database is not there. Resolves with whether
 * Sigil's tables exist (looked up like every unqualified name, along the search path). */
async function postgresHasSigilTables(url: string, db: Db, location: string): Promise<boolean> {
  try {
    const { rows } = await sql<{ present: boolean }>`select to_regclass(${MIGRATION_TABLE}) is not null as present`.execute(db);
    return rows[0]!.present;
  } catch (failure) {
    // The first connection's own failure, not the pool's wrapping of it.
    const error = failure instanceof DatabaseUnreachable ? failure.cause : failure;
    const e = error as { code?: string; message?: string };
    if (e.code === "3D000") {
      const { database, advice } = missingDatabaseAdvice(url);
      throw new Error(`PostgreSQL database "${database}" does not exist (SIGIL_DATABASE_URL=${location}): ${advice}`);
    }
    // A refused connection to "localhost" is an AggregateError (one per address) with an empty message.
    throw new Error(`cannot open PostgreSQL database ${location}: ${e.message || e.code || String(error)}`);
  }
}

/** Opens the database and, unless read-only, brings its schema up to date (see OpenMode). */
export async function openStore(options: StoreOptions): Promise<Store> {
  const mode = options.mode ?? "create";
  const onConnectionError = options.onConnectionError ?? ((error: Error) => console.error(`database connection lost: ${error.message}`));
  if (options.databaseUrl) {
    // Turned off, no text is ever named: every statement runs unnamed, parsed and planned each time.
    const names = options.databasePreparedStatements === false ? new StatementNames(2, 0) : new StatementNames();
    const store = openPostgres(options.databaseUrl, options.databasePoolSize ?? 10, names, onConnectionError, options.transactionObserver);
    let created: boolean;
    try {
      const hasTables = await postgresHasSigilTables(options.databaseUrl, store.db, store.location);
      if (mode !== "create" && !hasTables) throw new MissingDatabaseError(store.location, "the database holds no Sigil tables");
      created = !hasTables;
    } catch (error) {
      await store.close();
      throw error;
    }
    await prepareOrClose(store, mode);
    return { ...store, created };
  }
  const { openReader, ...store } = openSqlite(options.dataDir, mode, options.flushWal, options.checkpoints, options.transactionObserver);
  await prepareOrClose(store, mode);
  return { ...store, reader: openReader() };
}

async function prepareOrClose(store: Pick<Store, "db" | "close" | "location">, mode: OpenMode): Promise<void> {
  try {
    if (mode === "read-only") await assertSchemaIsCurrent(store.db, store.location);
    else await migrate(store.db);
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** The migrations of this version not applied to the database (`pending`), and those applied that
 * this version does not know (`unknown`: a newer Sigil migrated it). */
export async function schemaState(db: Db): Promise<{ pending: string[]; unknown: string[] }> {
  const rows = await db
    // biome-ignore lint/suspicious/noExplicitAny: the migrations table is Sigil's bookkeeping, not part of the typed schema
    .selectFrom(MIGRATION_TABLE as any)
    // biome-ignore lint/suspicious/noExplicitAny: the migrations table is Sigil's bookkeeping, not part of the typed schema
    .select("name" as any)
    .execute();
  const applied = new Set(rows.map((row) => (row as { name: string }).name));
  const known = Object.keys(migrations);
  return { pending: known.filter((name) => !applied.has(name)), unknown: [...applied].filter((name) => !known.includes(name)) };
}

/** A read-only opening does not migrate: it refuses a schema this version would change, or does not know. */
async function assertSchemaIsCurrent(db: Db, location: string): Promise<void> {
  const { pending, unknown } = await schemaState(db);
  if (unknown.length > 0) {
    throw new Error(`the database at ${location} was migrated by a newer Sigil (migrations ${unknown.join(", ")}): use that version`);
  }
  if (pending.length > 0) {
    throw new Error(
      `the database at ${location} has an older schema (migrations ${pending.join(", ")} not applied): ` +
        "this command only reads; starting `sigil serve` of this version brings the schema up to date",
    );
  }
}

export async function migrate(db: Db): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: migrationProvider,
    migrationTableName: MIGRATION_TABLE,
    migrationLockTableName: "sigil_migrations_lock",
  });
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
 * holder waits for them all). On SQLite there is nothing to send: the transaction already holds the
 * database's one write lock (BEGIN IMMEDIATE), and the group commit's readers-writer lock keeps an
 * exclusive activity alone in it (group-commit.ts).
 */
export async function lockOrganization(
  trx: Tx,
  dialect: Dialect,
  organizationId: string,
  mode: "exclusive" | "shared" = "exclusive",
): Promise<void> {
  if (dialect === "sqlite") return;
  if (mode === "exclusive") return void (await organizationLock.first(trx, { organizationId }));
  const held = sharedLocksHeld(trx);
  if (!held) return void (await organizationSharedLock.first(trx, { organizationId }));
  // A signature sharing a batch's transaction (group-commit.ts) that already holds this lock holds it
  // too. The batch never waits for a lock: one organization's exclusive activity would hold up every
  // organization's signatures in it. A row it cannot lock at once is skipped, and the member is run
  // apart from the batch (openPostgres, sharedApart).
  let taking = held.get(organizationId);
  if (!taking) {
    taking = organizationSharedLockAtOnce.first(trx, { organizationId }).then((row) => row !== undefined);
    held.set(organizationId, taking);
  }
  if (!(await taking)) throw new OrganizationBusy(organizationId);
}

const organizationLock = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db.selectFrom("organizations").select("id").where("id", "=", slot("organizationId")).forUpdate(),
);
const organizationSharedLock = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db.selectFrom("organizations").select("id").where("id", "=", slot("organizationId")).forShare(),
);
const organizationSharedLockAtOnce = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db.selectFrom("organizations").select("id").where("id", "=", slot("organizationId")).forShare().skipLocked(),
);

/** A second activity with the same fingerprint, inserted by a transaction running beside this one. */
export function isDuplicateFingerprint(error: unknown): boolean {
  if (error instanceof DuplicateFingerprint) return true;
  const e = error as { code?: string; constraint?: string; message?: string } | undefined;
  // 23P01: the fingerprint's exclusion constraint on PostgreSQL (migration 0035); 23505 before it.
  if (e?.code === "23505" || e?.code === "23P01") return (e.constraint ?? "").includes("fingerprint");
  return e?.code === "SQLITE_CONSTRAINT_UNIQUE" && (e.message ?? "").includes("activities.fingerprint");
}
