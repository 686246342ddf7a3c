// Typed handles on the database, declared apart from database.ts so that group-commit.ts, which
// database.ts builds on, can name them without the two modules importing each other.
import type { ControlledTransaction, Kysely, Transaction } from "kysely";
import type { Database } from "./schema.js";

export type Dialect = "sqlite" | "postgres";
export type Tx = Transaction<Database>;
/** A transaction the pipeline commits itself, with savepoints around each operation. */
export type OpenTx = ControlledTransaction<Database>;
export type Db = Kysely<Database>;
