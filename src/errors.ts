// The error vocabulary of the service. Every layer throws ServiceError, made by serviceError() from a code of
// the catalog (src/error-catalog.ts); the HTTP layer turns it into the gRPC-style body the official clients
// parse into TurnkeyRequestError.
import { ERROR_CATALOG, GRPC_CODES, httpStatusOf, type ErrorCode, type GrpcStatus, type StatusOf } from "./error-catalog.js";

export interface ErrorBody {
  code: number;
  message: string;
  details: Array<{ "@type": string; turnkeyErrorCode: string }>;
}

/** A status and a code that goes with it in the catalog: `new ServiceError("NotFound", "WALLET_ALREADY_EXISTS", …)` does not compile. */
type Answer = { [C in ErrorCode]: [status: StatusOf<C>, turnkeyErrorCode: C] }[ErrorCode];
type ServiceErrorArguments = [...Answer, message: string, httpStatusOverride?: number];

export class ServiceError extends Error {
  readonly status: GrpcStatus;
  readonly turnkeyErrorCode: ErrorCode;
  /** Overrides the HTTP status the catalog gives (a request the HTTP framework refused keeps the framework's 4xx). */
  readonly httpStatusOverride?: number;

  /** Throw sites use serviceError(); this is for subclasses, for the HTTP framework's refusals, and for fromBody. */
  constructor(...[status, turnkeyErrorCode, message, httpStatusOverride]: ServiceErrorArguments) {
    super(message);
    this.name = "ServiceError";
    this.status = status;
    this.turnkeyErrorCode = turnkeyErrorCode;
    this.httpStatusOverride = httpStatusOverride;
  }

  get grpcCode(): number {
    return GRPC_CODES[this.status].code;
  }

  get httpStatus(): number {
    if (this.httpStatusOverride !== undefined) return this.httpStatusOverride;
    // A failure recorded by an older version may carry a code the catalog no longer has.
    return Object.hasOwn(ERROR_CATALOG, this.turnkeyErrorCode)
      ? httpStatusOf(this.turnkeyErrorCode, this.status)
      : GRPC_CODES[this.status].http;
  }

  toBody(): ErrorBody {
    return {
      code: this.grpcCode,
      message: this.message,
      details: [{ "@type": "type.googleapis.com/errors.v1.TurnkeyErrorDetail", turnkeyErrorCode: this.turnkeyErrorCode }],
    };
  }

  /** Rebuilds the error an activity failed with from its recorded body (a retry is answered with it). */
  static fromBody(body: ErrorBody): ServiceError {
    const status = (Object.keys(GRPC_CODES) as GrpcStatus[]).find((k) => GRPC_CODES[k].code === body.code) ?? "Internal";
    // The record holds what this server once answered: it is repeated as it stands, not checked against today's catalog.
    return new ServiceError(...([status, body.details?.[0]?.turnkeyErrorCode ?? "INTERNAL", body.message] as ServiceErrorArguments));
  }
}

/** The status to answer a code with, for the few codes the catalog declares with several. */
type StatusChoice<C extends ErrorCode> = (typeof ERROR_CATALOG)[C]["status"] extends readonly GrpcStatus[] ? [status: StatusOf<C>] : [];

/**
 * The error to throw: a code of the catalog (its status and HTTP status come from there) and a message for
 * the caller, which names the ids and the reason. A code answered with several statuses takes the one meant.
 */
export function serviceError<C extends ErrorCode>(code: C, message: string, ...status: StatusChoice<C>): ServiceError {
  const declared: GrpcStatus | readonly GrpcStatus[] = ERROR_CATALOG[code].status;
  const chosen = status[0] ?? (declared as GrpcStatus);
  return new ServiceError(...([chosen, code, message] as ServiceErrorArguments));
}
