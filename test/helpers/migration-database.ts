// A fresh database migrated only as far as a named migration, to test what a later migration does to
// rows written before it: its own Kysely, typed loosely (the schema as it was then, not today's).
import path from "node:path";
import BetterSqlite3 from "better-sqlite3";
import { Kysely, Migrator, PostgresDialect, SqliteDialect } from "kysely";
import pg from "pg";
import { expect } from "vitest";
import { migrations } from "../../src/store/migrations.js";
import { createTestDatabase } from "./backend.js";

export interface MigrationDatabase {
  /** Typed loosely: the schema as of an earlier migration, not today's. */
  db: Kysely<any>;
  /** Applies every migration up to and including `last`. */
  migrateThrough(last: string): Promise<void>;
  close(): Promise<void>;
}

export async function migrationDatabase(): Promise<MigrationDatabase> {
  const database = await createTestDatabase();
  const db = new Kysely<any>({
    dialect: database.databaseUrl
      ? new PostgresDialect({ pool: new pg.Pool({ connectionString: database.databaseUrl, max: 1 }) })
      : new SqliteDialect({ database: new BetterSqlite3(path.join(database.dataDir, "migration.db")) }),
  });
  return {
    db,
    async migrateThrough(last) {
      const chosen = Object.fromEntries(Object.entries(migrations).filter(([name]) => name <= last));
      const { error } = await new Migrator({ db, provider: { getMigrations: async () => chosen } }).migrateToLatest();
      expect(error).toBeUndefined();
    },
    async close() {
      await db.destroy();
      await database.drop();
    },
  };
}
