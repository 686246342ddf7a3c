// Typed handles on the database, declared apart from database.ts so that group-commit.ts and
// postgres-pool.ts, which database.ts builds on, can name them without the modules importing each other.
import type { ControlledTransaction, Kysely, Transaction } from "kysely";
import type { Database } from "./schema.js";

export type Dialect = "sqlite" | "postgres";
export type Tx = Transaction<Database>;
/** A transaction the pipeline commits itself, with savepoints around each operation. */
export type OpenTx = ControlledTransaction<Database>;
export type Db = Kysely<Database>;

/**
 * The statements a store has sent (BEGIN, COMMIT and savepoints included): on PostgreSQL each is a
 * round trip, and on either database each is work, so how many a path sends is a deterministic
 * measure of its cost (test/statement-budget.test.ts holds the signing path to its count).
 */
export interface StatementTally {
  count: number;
  /** When an array, each statement's SQL text is appended to it (for a test that reads them). */
  texts: string[] | null;
}

/** Counts one statement (and keeps its text when the tally asks for texts). */
export function tally(statements: StatementTally, sqlText: string): void {
  statements.count++;
  statements.texts?.push(sqlText);
}

/** An activity was not inserted: its fingerprint is already recorded (a retry, or the same request
 * sent twice at once). On PostgreSQL the insert reports it without failing the statement, which
 * would abort the transaction. */
export class DuplicateFingerprint extends Error {
  override name = "DuplicateFingerprint";
  constructor(readonly fingerprint: string) {
    super(`an activity with fingerprint ${fingerprint} is already recorded`);
  }
}
