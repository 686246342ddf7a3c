// Copies of an SQLite deployment's database, for `sigil backup` and `sigil restore`
// (services/backups.ts wraps them in the backup file format).
//
// The copy is taken with VACUUM INTO on a read-only connection: one statement in one read transaction,
// so it is the database as of one instant, whatever the servers commit meanwhile — in WAL mode a reader
// never blocks the writer, so they go on committing beside it. The online backup API
// (sqlite3_backup_step, better-sqlite3's db.backup()) copies pages a batch at a time and starts over
// whenever another process writes between two batches, so under a steady write load it must copy every
// page in one step to finish at all, which makes it the same single read transaction; VACUUM INTO also
// leaves out free pages and refuses a destination that exists.
import fs from "node:fs";
import path from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, SqliteDialect } from "kysely";
import type { Db } from "./handles.js";
import { MissingDatabaseError, SQLITE_FILE_NAME } from "./database.js";
import { migrations } from "./migrations.js";

const MIGRATION_TABLE = "sigil_migrations";

/** The migrations a Sigil database has had applied, in order of their names; null when it has no Sigil tables. */
function appliedMigrations(sqlite: BetterSqlite3.Database): string[] | null {
  const hasTable = sqlite.prepare("select 1 from sqlite_master where type = 'table' and name = ?").get(MIGRATION_TABLE);
  if (!hasTable) return null;
  return sqlite
    .prepare(`select name from ${MIGRATION_TABLE} order by name`)
    .all()
    .map((row) => (row as { name: string }).name);
}

/**
 * Writes a consistent copy of `<dataDir>/sigil.db` to the new file `into` (which must not exist), while
 * servers may be running and writing. Opens the database read-only: it is never created, changed or
 * migrated. Throws MissingDatabaseError, having written nothing, where there is no Sigil database.
 */
export function copySqliteDatabase(dataDir: string, into: string): { location: string } {
  const file = path.join(dataDir, SQLITE_FILE_NAME);
  if (!fs.existsSync(file)) throw new MissingDatabaseError(file, "the file does not exist");
  // The busy timeout covers the moment a server's start holds the file to switch it to WAL.
  const sqlite = new BetterSqlite3(file, { readonly: true, fileMustExist: true, timeout: 10_000 });
  try {
    const applied = readOrExplain(file, () => appliedMigrations(sqlite));
    if (!applied) throw new MissingDatabaseError(file, "the file holds no Sigil tables");
    sqlite.prepare("vacuum into ?").run(into);
    return { location: file };
  } finally {
    sqlite.close();
  }
}

function readOrExplain<T>(file: string, read: () => T): T {
  try {
    return read();
  } catch (error) {
    if ((error as { code?: string }).code === "SQLITE_NOTADB") throw new Error(`${file} is not an SQLite database`);
    throw error;
  }
}

export interface SqliteCopy {
  /** A read-only handle on the copy. */
  db: Db;
  /** The migrations applied to the copy. */
  migrations: string[];
  /** Migrations applied to the copy that this version of Sigil does not know (a newer one made them). */
  unknownMigrations: string[];
  close(): Promise<void>;
}

/**
 * Opens a copy made by copySqliteDatabase (or restored from one) read-only, after SQLite's integrity
 * check of every page and index; refuses a file that is not a Sigil database.
 */
export function openSqliteCopy(file: string): SqliteCopy {
  const sqlite = new BetterSqlite3(file, { readonly: true, fileMustExist: true });
  try {
    let problems: { integrity_check: string }[];
    try {
      problems = sqlite.pragma("integrity_check") as { integrity_check: string }[];
    } catch (error) {
      const code = (error as { code?: string }).code ?? "";
      if (code === "SQLITE_NOTADB") throw new Error("the database in it is not an SQLite database");
      // SQLITE_CORRUPT and its kinds: a page SQLite cannot even read.
      if (code.startsWith("SQLITE_CORRUPT")) throw new Error("the database in it fails SQLite's integrity check (a page is malformed)");
      throw error;
    }
    if (problems.length !== 1 || problems[0]!.integrity_check !== "ok")
      throw new Error(`the database in it fails SQLite's integrity check (${problems.length} problems)`);
    const applied = appliedMigrations(sqlite);
    if (!applied) throw new Error("the database in it holds no Sigil tables");
    const known = Object.keys(migrations);
    const db = new Kysely({ dialect: new SqliteDialect({ database: sqlite }) }) as Db;
    return {
      db,
      migrations: applied,
      unknownMigrations: applied.filter((name) => !known.includes(name)),
      close: () => db.destroy(),
    };
  } catch (error) {
    sqlite.close();
    throw error;
  }
}
