// Typed handles on the database, declared apart from database.ts so that group-commit.ts and
// postgres-pool.ts, which database.ts builds on, can name them without the modules importing each other.
import { ControlledTransaction, type Kysely, type Transaction } from "kysely";
import type { Database } from "./schema.js";

export type Dialect = "sqlite" | "postgres";
export type Tx = Transaction<Database>;
/** A transaction the pipeline commits itself, with savepoints around each operation. */
export type OpenTx = ControlledTransaction<Database>;
export type Db = Kysely<Database>;

/** How work holds a write transaction: alone (`exclusive`), or beside other shared work (`shared`). */
export type LockMode = "shared" | "exclusive";

/** The handle work in a write transaction gets: exclusive work may take savepoints (it is alone in
 * the transaction); shared work writes only its own new rows, and its statements may go out beside
 * other work's (on PostgreSQL, pipelined: store/pipelined-transaction.ts), so it takes none. */
export type WriteTx<M extends LockMode> = M extends "exclusive" ? OpenTx : Tx;

/** The handles of shared work (group-commit.ts marks them): on SQLite a controlled transaction too. */
const sharedHandles = new WeakSet<object>();

/** Marks `trx` as shared work's handle, on which no savepoint may be taken. */
export function markShared<T extends Tx>(trx: T): T {
  sharedHandles.add(trx);
  return trx;
}

/** `trx` as a transaction that takes savepoints: only exclusive work holds one (a savepoint in a
 * shared transaction would interleave with the other members' statements). */
export function controlled(trx: Tx): OpenTx {
  if (trx instanceof ControlledTransaction && !sharedHandles.has(trx)) return trx as OpenTx;
  throw new Error("savepoints are taken only in a transaction held exclusively; this work holds a shared one");
}

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

/**
 * A signature sharing a batch's transaction (PostgreSQL) found its organization's row locked by
 * another transaction (an exclusive activity of the same organization): the batch does not wait for
 * it, since every other organization's signatures in the batch would wait too. The member wrote
 * nothing; it is run again apart from the batch (database.ts).
 */
export class OrganizationBusy extends Error {
  override name = "OrganizationBusy";
  constructor(readonly organizationId: string) {
    super(`organization ${organizationId} is locked by another transaction`);
  }
}

/** What a store tells of its write transactions as they end, for the operator's metrics (services/metrics.ts). */
export interface TransactionObserver {
  /**
   * A write transaction ended. `group`: a transaction shared by a batch of `members` activities
   * (group-commit.ts); `single`: work holding a transaction of its own (PostgreSQL's exclusive
   * activities, members 1). `seconds` runs from asking for BEGIN to the end of COMMIT or ROLLBACK.
   */
  transactionEnded(kind: "group" | "single", committed: boolean, seconds: number, members: number): void;
}

/** How one pool of database connections is used at this moment. */
export interface ConnectionUse {
  /** Which pool: `writer` (SQLite's one write connection), or PostgreSQL's `transactions`, `batches` and `reads`. */
  pool: string;
  open: number;
  idle: number;
  /** Work waiting for a connection of the pool (SQLite: activities waiting to join a write transaction). */
  waiting: number;
}
