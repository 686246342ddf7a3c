// The error vocabulary of the service. Every layer throws ServiceError; the HTTP layer turns it into
// the gRPC-style body the official clients parse into TurnkeyRequestError.

const GRPC_CODES = {
  InvalidArgument: { code: 3, http: 400 },
  NotFound: { code: 5, http: 404 },
  AlreadyExists: { code: 6, http: 409 },
  PermissionDenied: { code: 7, http: 403 },
  ResourceExhausted: { code: 8, http: 429 },
  FailedPrecondition: { code: 9, http: 400 },
  Unimplemented: { code: 12, http: 501 },
  Internal: { code: 13, http: 500 },
  Unavailable: { code: 14, http: 503 },
  Unauthenticated: { code: 16, http: 401 },
} as const;

export type GrpcStatus = keyof typeof GRPC_CODES;

export interface ErrorBody {
  code: number;
  message: string;
  details: Array<{ "@type": string; turnkeyErrorCode: string }>;
}

export class ServiceError extends Error {
  constructor(
    readonly status: GrpcStatus,
    readonly turnkeyErrorCode: string,
    message: string,
    /** Overrides the HTTP status the gRPC status maps to (e.g. 413 for an oversized body). */
    readonly httpStatusOverride?: number,
  ) {
    super(message);
    this.name = "ServiceError";
  }

  get grpcCode(): number {
    return GRPC_CODES[this.status].code;
  }

  get httpStatus(): number {
    return this.httpStatusOverride ?? GRPC_CODES[this.status].http;
  }

  toBody(): ErrorBody {
    return {
      code: this.grpcCode,
      message: this.message,
      details: [{ "@type": "type.googleapis.com/errors.v1.TurnkeyErrorDetail", turnkeyErrorCode: this.turnkeyErrorCode }],
    };
  }

  static fromBody(body: ErrorBody): ServiceError {
    const status = (Object.keys(GRPC_CODES) as GrpcStatus[]).find((k) => GRPC_CODES[k].code === body.code) ?? "Internal";
    return new ServiceError(status, body.details?.[0]?.turnkeyErrorCode ?? "INTERNAL", body.message);
  }
}

export const invalidArgument = (message: string, code = "REQUEST_INVALID") => new ServiceError("InvalidArgument", code, message);
export const notFound = (message: string, code = "NOT_FOUND") => new ServiceError("NotFound", code, message);
export const alreadyExists = (message: string, code = "ALREADY_EXISTS") => new ServiceError("AlreadyExists", code, message);
export const permissionDenied = (message: string, code = "REQUEST_NOT_AUTHORIZED") => new ServiceError("PermissionDenied", code, message);
export const failedPrecondition = (message: string, code = "FAILED_PRECONDITION") => new ServiceError("FailedPrecondition", code, message);
export const unauthenticated = (message: string, code: string) => new ServiceError("Unauthenticated", code, message);
