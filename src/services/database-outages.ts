// What a request caught by the database's unavailability is answered, in Sigil's words: a lost
// PostgreSQL connection is an outage of a moment (the pool opens a new one for the next statement),
// so the answer is 503 with a Retry-After, and says whether anything of the request was kept. The
// driver's own text (e.g. "Client has encountered a connection error and is not queryable") goes to
// the log, never into an answer. Every layer lets such failures pass; the pipeline and the HTTP
// layer turn them into these answers (store/lost-connections.ts says what each failure means).
import { ServiceError, type ErrorBody } from "../errors.js";
import { BatchRolledBack } from "../store/group-commit.js";
import { CommitOutcomeUnknown, isLostConnection } from "../store/lost-connections.js";
import { RETRY_INFO_TYPE } from "./send-budgets.js";

/** How soon to send again: the pool opens a new connection at once, so a killed connection costs
 * milliseconds; a restart or a failover takes longer, and /ready says when it lasts. */
export const OUTAGE_RETRY_AFTER_SECONDS = 1;

/** A 503 with a google.rpc.RetryInfo detail, which the HTTP layer turns into Retry-After. */
class DatabaseOutage extends ServiceError {
  override toBody(): ErrorBody {
    const body = super.toBody();
    const retryInfo = { "@type": RETRY_INFO_TYPE, retryDelay: `${OUTAGE_RETRY_AFTER_SECONDS}s` };
    return { ...body, details: [...body.details, retryInfo as unknown as ErrorBody["details"][number]] };
  }
}

const again = `send it again in ${OUTAGE_RETRY_AFTER_SECONDS} s`;

/**
 * The answer to a request that failed with `error`, when `error` is the database's unavailability
 * or a shared transaction's rollback; undefined for any other failure.
 */
export function outageError(error: unknown): ServiceError | undefined {
  const answer = answerOf(error);
  if (answer) answer.cause = error;
  return answer;
}

function answerOf(error: unknown): ServiceError | undefined {
  if (error instanceof CommitOutcomeUnknown)
    return new DatabaseOutage(
      "Unavailable",
      "COMMIT_OUTCOME_UNKNOWN",
      "the connection to the database was lost while this request was being committed, so it may or may not have been kept: " +
        `send the very same body again in ${OUTAGE_RETRY_AFTER_SECONDS} s (it is answered with the activity if it was kept), ` +
        "or look for the activity before sending a new request",
    );
  if (isLostConnection(error) || (error instanceof BatchRolledBack && isLostConnection(error.cause)))
    return new DatabaseOutage(
      "Unavailable",
      "DATABASE_UNAVAILABLE",
      `the database is unavailable (the connection to it was lost, or none could be opened): nothing of this request was kept; ${again}`,
    );
  if (error instanceof BatchRolledBack)
    return new ServiceError(
      "Unavailable",
      "TRANSACTION_ROLLED_BACK",
      "the write transaction this request shared with other activities could not be committed: nothing of this request was kept; send it again",
    );
  return undefined;
}
