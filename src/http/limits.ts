// Slow, idle and numerous connections: what node:http enforces for us (header, request and
// keep-alive timeouts, the overall connection cap) and what it does not (a cap per remote address).
import { maxHeaderSize, type Server } from "node:http";
import type { Socket } from "node:net";
import type ipaddr from "ipaddr.js";
import { clientAddress } from "../auth/ip-allowlists.js";
import type pino from "pino";
import type { HttpLimits } from "../config.js";
import { type ServiceError, serviceError } from "../errors.js";
import type { Metrics } from "../services/metrics.js";
import { refusalOf } from "./metrics.js";

/** The parts of Fastify's options that carry the timeouts. */
export function timeoutOptions(limits: HttpLimits) {
  const enforced = [limits.headersTimeoutMs, limits.requestTimeoutMs].filter((ms) => ms > 0);
  return {
    // Fastify sets these two on the node server itself (and treats 0 as its own default, which for
    // requestTimeout is also "off").
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    http: {
      headersTimeout: limits.headersTimeoutMs,
      requestTimeout: limits.requestTimeoutMs,
      // node looks for late requests only this often (30 s by default), which would stretch a 10 s
      // headers timeout to 40 s: look at least every second, more often for shorter timeouts.
      connectionsCheckingInterval: enforced.length ? Math.max(50, Math.min(1000, Math.floor(Math.min(...enforced) / 4))) : 30_000,
    },
  };
}

const REFUSAL_LOG_INTERVAL_MS = 10_000;

/**
 * Fastify's clientErrorHandler: a request that did not arrive in time, or could not be parsed,
 * gets the error body the official clients parse (instead of Fastify's own shape), then the
 * connection is closed.
 */
export function clientErrorHandler(limits: HttpLimits, metrics?: Metrics) {
  return function (this: { log: pino.Logger }, error: Error & { code?: string }, socket: Socket): void {
    if (error.code === "ECONNRESET" || socket.destroyed) return;
    let refusal: ServiceError;
    if (error.code === "ERR_HTTP_REQUEST_TIMEOUT") {
      refusal = serviceError(
        "REQUEST_TIMEOUT",
        `the request did not arrive in time: headers must arrive within ${limits.headersTimeoutMs} ms and the whole request ` +
          `within ${limits.requestTimeoutMs} ms (SIGIL_HEADERS_TIMEOUT_MS, SIGIL_REQUEST_TIMEOUT_MS; 0 is no limit)`,
      );
    } else if (error.code === "HPE_HEADER_OVERFLOW") {
      refusal = serviceError("HEADERS_TOO_LARGE", `the request headers exceed ${maxHeaderSize} bytes`);
    } else {
      refusal = serviceError("REQUEST_MALFORMED", "the request is not well-formed HTTP/1.1");
    }
    this.log.debug({ code: error.code, remoteAddress: socket.remoteAddress }, "client error");
    const reason = refusalOf(refusal.turnkeyErrorCode);
    if (reason) metrics?.refused(reason);
    if (socket.writable) {
      const body = JSON.stringify(refusal.toBody());
      const reason = { 408: "Request Timeout", 431: "Request Header Fields Too Large" }[refusal.httpStatus] ?? "Bad Request";
      const headers = ["Content-Type: application/json", `Content-Length: ${Buffer.byteLength(body)}`, "Connection: close"];
      socket.write(`HTTP/1.1 ${refusal.httpStatus} ${reason}\r\n${headers.join("\r\n")}\r\n\r\n${body}`);
    }
    socket.destroy();
  };
}

/**
 * The key connections are counted under: an IPv4 address (also when it arrives IPv4-mapped), or the
 * /64 an IPv6 address lies in — one host or subscriber is given a whole /64 and can pick any address
 * in it, so counting single IPv6 addresses would not cap anyone.
 */
export function clientOf(address: string): string {
  // Read as IP allowlists read it: IPv4-mapped IPv6 becomes IPv4, ::a.b.c.d stays IPv6.
  const parsed = clientAddress(address);
  if (!parsed) return address;
  if (parsed.kind() === "ipv4") return parsed.toString();
  return `${(parsed as ipaddr.IPv6).parts
    .slice(0, 4)
    .map((part) => part.toString(16))
    .join(":")}::/64`;
}

/**
 * Caps the connections open at once: overall (node closes the surplus before any JavaScript sees
 * it) and per remote address (an IPv6 /64 counting as one; closed here, before node:http reads a byte of it). A refused
 * connection gets no answer: answering would mean reading its request. Refusals are logged at
 * most once per REFUSAL_LOG_INTERVAL_MS, with counts, so a flood does not flood the log too.
 */
export function limitConnections(server: Server, limits: HttpLimits, logger: pino.Logger, metrics?: Metrics): void {
  if (limits.maxConnections > 0) server.maxConnections = limits.maxConnections;
  let refused = { overall: 0, perAddress: 0 };
  let lastRemoteAddress: string | undefined;
  let flush: NodeJS.Timeout | undefined;
  const report = () => {
    flush = undefined;
    logger.warn(
      { refused, lastRemoteAddress, maxConnections: limits.maxConnections, maxConnectionsPerAddress: limits.maxConnectionsPerAddress },
      "connections refused: too many open (SIGIL_MAX_CONNECTIONS, SIGIL_MAX_CONNECTIONS_PER_ADDRESS)",
    );
    refused = { overall: 0, perAddress: 0 };
  };
  // The first refusal is logged at once; those that follow within the interval are counted and
  // logged together at its end.
  let quietUntil = 0;
  const noteRefusal = (kind: keyof typeof refused, remoteAddress: string | undefined) => {
    refused[kind]++;
    metrics?.refused(kind === "overall" ? "connections_overall" : "connections_per_address");
    lastRemoteAddress = remoteAddress;
    const now = Date.now();
    if (now >= quietUntil) {
      quietUntil = now + REFUSAL_LOG_INTERVAL_MS;
      report();
    } else {
      flush ??= setTimeout(() => {
        quietUntil = Date.now() + REFUSAL_LOG_INTERVAL_MS;
        report();
      }, quietUntil - now).unref();
    }
  };
  server.on("close", () => clearTimeout(flush));
  server.on("drop", (dropped?: { remoteAddress?: string }) => noteRefusal("overall", dropped?.remoteAddress));

  if (limits.maxConnectionsPerAddress <= 0) return;
  const openByAddress = new Map<string, number>();
  // Prepended, so that a refused socket is destroyed before node:http starts parsing it.
  server.prependListener("connection", (socket: Socket) => {
    if (socket.remoteAddress === undefined) return; // already gone
    const address = clientOf(socket.remoteAddress);
    const open = openByAddress.get(address) ?? 0;
    if (open >= limits.maxConnectionsPerAddress) {
      noteRefusal("perAddress", address);
      socket.destroy();
      return;
    }
    openByAddress.set(address, open + 1);
    socket.once("close", () => {
      const left = (openByAddress.get(address) ?? 1) - 1;
      if (left > 0) openByAddress.set(address, left);
      else openByAddress.delete(address);
    });
  });
}
