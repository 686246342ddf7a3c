// PostgreSQL: telling a lost connection from a statement's own failure, and what a lost connection
// means for the work that was under way.
//
// A connection is lost when PostgreSQL restarts or fails over, when an administrator terminates its
// backend (pg_terminate_backend), or when the network drops it. A statement's own failure (a broken
// constraint, a serialization failure) is an answer from the server about that statement; a lost
// connection is the end of the session, and with it of the transaction that was open on it, which
// PostgreSQL rolls back. So work that loses its connection before COMMIT was sent kept nothing; work
// whose COMMIT was under way when the connection went cannot know whether it was committed.
//
// The pool's wrapper (postgres-pool.ts) marks the errors of lost connections where every statement
// passes; the transactions' COMMITs (database.ts, pipelined-transaction.ts) tell the two outcomes
// apart. Nothing here knows of requests: the layers above decide what to answer (DATABASE_UNAVAILABLE,
// COMMIT_OUTCOME_UNKNOWN).
import pg from "pg";

/** Errors a statement failed with because its connection was lost (marked, not wrapped: the error
 * keeps its identity for whoever else looks at it). */
const lost = new WeakSet<object>();

/**
 * PostgreSQL's error classes that end the session rather than the statement: 08 (connection
 * exception), and in class 57 the shutdowns (57P01 admin_shutdown, which pg_terminate_backend sends;
 * 57P02 crash_shutdown; 57P03 cannot_connect_now, while the server starts or recovers).
 */
const SESSION_ENDING_CODES = new Set(["57P01", "57P02", "57P03"]);

/** Whether `error`, as a statement on a pg client failed with it, means the connection is gone. */
export function endsConnection(error: unknown): boolean {
  if (error instanceof pg.DatabaseError) {
    const code = error.code ?? "";
    // FATAL and PANIC end the session whatever the code (a backend ends itself after sending one).
    return code.startsWith("08") || SESSION_ENDING_CODES.has(code) || error.severity === "FATAL" || error.severity === "PANIC";
  }
  // Whatever else a pg client rejects a statement with is about the connection, not the statement:
  // the socket's errors (ECONNRESET, EPIPE…), its end ("Connection terminated unexpectedly"), a client
  // already broken ("… is not queryable"), timeouts. The errors pg raises for a malformed query (no
  // text, values not an array, a prepared statement's name reused) cannot arise from Kysely's
  // compiled queries and the pool's hash-derived names.
  return error instanceof Error;
}

/** Marks `error` as a lost connection's (see endsConnection) and returns it. */
export function markLost<E>(error: E): E {
  if (typeof error === "object" && error !== null) lost.add(error);
  return error;
}

/** No connection to the database could be opened (it is down, unreachable, refuses connections, or
 * no longer exists): nothing was sent. */
export class DatabaseUnreachable extends Error {
  override name = "DatabaseUnreachable";
  constructor(override readonly cause: unknown) {
    super(`no connection to the database could be opened: ${messageOf(cause)}`);
  }
}

/**
 * The connection was lost while a transaction's COMMIT was under way: PostgreSQL may have committed
 * it before the connection went, or not. Only a later read can tell.
 */
export class CommitOutcomeUnknown extends Error {
  override name = "CommitOutcomeUnknown";
  constructor(override readonly cause: unknown) {
    super(`the connection to the database was lost while a transaction was being committed: ${messageOf(cause)}`);
  }
}

/**
 * Whether `error` is the database's unavailability with nothing of the work kept: a statement whose
 * connection was lost (its transaction, never committed, is rolled back by PostgreSQL), or no
 * connection to be had. A CommitOutcomeUnknown is not: something may have been kept.
 */
export function isLostConnection(error: unknown): boolean {
  if (error instanceof DatabaseUnreachable) return true;
  return typeof error === "object" && error !== null && lost.has(error);
}

function messageOf(error: unknown): string {
  if (error instanceof AggregateError) return error.errors.map(messageOf).join("; ");
  if (error instanceof Error) return error.message || (error as { code?: string }).code || error.name;
  return String(error);
}
