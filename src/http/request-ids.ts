// One request, traceable (docs/running.md#request-ids-and-traces): every request has an id — the
// client's X-Request-Id when it is well-formed, else one made here — which is sent back in the
// X-Request-Id header, carried by every log line written while the request is served (Fastify's
// request logger, which the routes hand to the pipeline with the id: requestContextOf), put in every
// error body as `requestId`, and stored with the activity the request made. A W3C traceparent sent
// with the request puts its trace id and span id into those log lines too.
//
// The pipeline is handed the request's logger rather than finding it through node's
// AsyncLocalStorage: that would turn on promise hooks for the whole process, which cost about a
// tenth more CPU per signature when measured.
import crypto from "node:crypto";
import type { IncomingMessage } from "node:http";
import type { FastifyBaseLogger, FastifyInstance, FastifyRequest } from "fastify";
import type pino from "pino";
import type { RequestContext } from "../activities/pipeline.js";

export const REQUEST_ID_HEADER = "x-request-id";

/** What a client's X-Request-Id may be to be taken as the request's id: 1 to 128 letters, digits,
 * `.`, `_` or `-`. Anything else (longer, other characters, the header sent twice) is not repeated
 * anywhere — not in a header, a log line or a body — and the request gets an id of its own. */
const WELL_FORMED_REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

/** The request's id: the client's, when well-formed, else a new UUID. */
export function requestIdOf(sent: string | string[] | undefined): string {
  return typeof sent === "string" && WELL_FORMED_REQUEST_ID.test(sent) ? sent : crypto.randomUUID();
}

export interface TraceContext {
  /** The trace the request belongs to (32 lowercase hex digits). */
  traceId: string;
  /** The caller's span, the request's parent (16 lowercase hex digits): Sigil makes no span of its own. */
  spanId: string;
}

// W3C Trace Context (https://www.w3.org/TR/trace-context/#traceparent-header): version "-" trace-id
// "-" parent-id "-" trace-flags, all lowercase hex. Version ff is invalid; version 00 is exactly these
// 55 characters; a later version may append fields after a further "-", and is read for these four.
const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/;
const ALL_ZEROS = /^0+$/;

/** The trace context of a traceparent header, or undefined when it is absent or not valid (then it is ignored, as the standard says). */
export function traceContextOf(sent: string | string[] | undefined): TraceContext | undefined {
  if (typeof sent !== "string") return undefined;
  const match = TRACEPARENT.exec(sent);
  if (!match) return undefined;
  const [, version, traceId, spanId, , rest] = match as unknown as [string, string, string, string, string, string | undefined];
  if (version === "ff" || (version === "00" && rest !== undefined)) return undefined;
  if (ALL_ZEROS.test(traceId) || ALL_ZEROS.test(spanId)) return undefined;
  return { traceId, spanId };
}

/** Fastify's options that give each request its id and its logger (with the trace context). */
export const requestIdOptions = {
  genReqId: (request: IncomingMessage) => requestIdOf(request.headers[REQUEST_ID_HEADER]),
  childLoggerFactory(logger: FastifyBaseLogger, bindings: pino.Bindings, options: pino.ChildLoggerOptions, request: IncomingMessage) {
    const trace = traceContextOf(request.headers.traceparent);
    return logger.child(trace ? { ...bindings, ...trace } : bindings, options);
  },
} as const;

/** The label of the request id in Fastify's request log lines. */
export const REQUEST_ID_LOG_LABEL = "requestId";

/** Whether `payload` is an error body the official clients parse (TurnkeyRequestError reads code, message and details). */
function isErrorBody(payload: unknown): payload is { code: number; message: string } {
  const body = payload as { code?: unknown; message?: unknown; details?: unknown } | null;
  return typeof body === "object" && body !== null && typeof body.code === "number" && typeof body.message === "string";
}

/** What the pipeline is handed of the request: its id and its logger. */
export const requestContextOf = (request: FastifyRequest): RequestContext => ({
  requestId: request.id,
  log: request.log as unknown as pino.Logger,
});

/** Sends each request's id back in X-Request-Id and in its error body (`requestId`, beside code,
 * message and details). */
export function traceRequests(app: FastifyInstance): void {
  app.addHook("onRequest", (request, reply, done) => {
    reply.header(REQUEST_ID_HEADER, request.id);
    done();
  });
  app.addHook("preSerialization", async (request, reply, payload) =>
    reply.statusCode >= 400 && isErrorBody(payload) ? { ...payload, requestId: request.id } : payload,
  );
}
