// Where the metrics (services/metrics.ts) meet HTTP: each route's series, the refusals the HTTP layer
// makes, and GET /metrics — on the main listener (SIGIL_METRICS=on), on a listener of its own
// (HOST:PORT), or nowhere (off).
//
// With `sigil serve --workers N` the workers share one port, and a scrape reaches whichever worker the
// primary hands the connection to: were each to answer for itself, successive scrapes would read
// different processes' counters, which Prometheus takes for resets. So every answer is the cluster's:
// the worker that is asked asks its primary, which gathers every worker's series (prom-client's
// AggregatorRegistry: counters and histograms summed, the database's figures by their maximum) and
// answers; on a listener of its own, the primary listens and answers itself.
import cluster from "node:cluster";
import Fastify, { type FastifyInstance, type onResponseHookHandler } from "fastify";
import type pino from "pino";
import { AggregatorRegistry } from "prom-client";
import type { MetricsConfig } from "../config.js";
import type { Metrics, RefusalReason } from "../services/metrics.js";

export const METRICS_PATH = "/metrics";

/** How long a worker waits for its primary's gathered answer (the primary waits 5 s for each worker). */
const CLUSTER_ANSWER_TIMEOUT_MS = 10_000;

/** The refusals an error code means, of those the HTTP layer answers before any work is done. */
const REFUSALS: Record<string, RefusalReason> = {
  REQUEST_RATE_LIMITED: "rate_limited",
  IP_NOT_ALLOWED: "ip_not_allowed",
  REQUEST_TOO_LARGE: "body_too_large",
  REQUEST_TIMEOUT: "request_timeout",
  HEADERS_TOO_LARGE: "headers_too_large",
  REQUEST_MALFORMED: "malformed_http",
};

/** The refusal an answered error code counts as, if any. */
export const refusalOf = (errorCode: string): RefusalReason | undefined => REFUSALS[errorCode];

/** Submit and query paths (the API's and Sigil's own) are labelled by the catalog's name of their operation. */
const OPERATION_PATH = /^\/(?:public\/v1\/(?:submit|query)|sigil\/v1\/query)\/([a-z0-9_]+)$/;

/**
 * Counts every answer of `app` under its route's operation label: each route registered after this
 * call gets a hook of its own bound to its series (resolved once, here), and an answer that found no
 * route counts as `unknown` — whatever path was asked for.
 */
export function recordRequests(app: FastifyInstance, metrics: Metrics): void {
  app.addHook("onRoute", (route) => {
    const recorder = metrics.route(OPERATION_PATH.exec(route.url)?.[1] ?? route.url);
    const hook: onResponseHookHandler = (_request, reply, done) => {
      recorder.answered(reply.statusCode, reply.elapsedTime);
      done();
    };
    route.onResponse = route.onResponse === undefined ? [hook] : [...[route.onResponse].flat(), hook];
  });
  app.addHook("onResponse", (request, reply, done) => {
    if (request.is404) metrics.unknownRoute.answered(reply.statusCode, reply.elapsedTime);
    done();
  });
}

/** Answers with the exposition text; a failure to gather it is a 503 (the scrape is retried). */
async function answerScrape(
  source: () => Promise<string>,
  contentType: string,
  reply: { status(code: number): unknown; type(contentType: string): { send(body: string): unknown } },
  logger: pino.Logger,
) {
  try {
    return reply.type(contentType).send(await source());
  } catch (error) {
    logger.warn({ err: error }, "metrics: could not gather them");
    reply.status(503);
    return reply.type("text/plain; charset=utf-8").send("metrics unavailable: see the server's log\n");
  }
}

/** GET /metrics on `app`, answered by `source`. */
export function serveMetrics(app: FastifyInstance, source: () => Promise<string>, contentType: string): void {
  app.get(METRICS_PATH, (request, reply) => answerScrape(source, contentType, reply, request.log as unknown as pino.Logger));
}

/** A listener of its own that answers GET /metrics and nothing else (SIGIL_METRICS=HOST:PORT). */
export async function listenForScrapes(
  place: Extract<MetricsConfig, { serve: "listener" }>,
  source: () => Promise<string>,
  contentType: string,
  logger: pino.Logger,
): Promise<{ url: string; close(): Promise<void> }> {
  const app = Fastify({ logger: false });
  app.get(METRICS_PATH, (_request, reply) => answerScrape(source, contentType, reply, logger));
  try {
    await app.listen({ host: place.host, port: place.port });
  } catch (error) {
    await app.close();
    throw new Error(`SIGIL_METRICS: cannot listen on ${place.host}:${place.port}: ${(error as Error).message}`);
  }
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : place.port;
  const host = place.host.includes(":") ? `[${place.host}]` : place.host;
  return { url: `http://${host}:${port}${METRICS_PATH}`, close: () => app.close() };
}

/** What a worker asks its primary, and what it is answered. */
interface MetricsRequest {
  sigil: "metrics-request";
  id: number;
}
interface MetricsAnswer {
  sigil: "metrics-answer";
  id: number;
  text?: string;
  error?: string;
}

const isRequest = (message: unknown): message is MetricsRequest => (message as MetricsRequest | null)?.sigil === "metrics-request";
const isAnswer = (message: unknown): message is MetricsAnswer => (message as MetricsAnswer | null)?.sigil === "metrics-answer";

/**
 * In a worker of `serve --workers N`, first thing: the primary's requests for this process's series
 * are answered from the start (with none until the server has made its registry, `shareWithPrimary`),
 * so that a worker still starting does not hold a scrape up until it times out.
 */
export function answerPrimaryFromStart(): void {
  new AggregatorRegistry();
  AggregatorRegistry.setRegistries([]);
}

/** In a worker: the primary gathers this process's series from now on. */
export function shareWithPrimary(metrics: Metrics): void {
  new AggregatorRegistry();
  AggregatorRegistry.setRegistries([metrics.registry]);
}

/** What /metrics answers: this process's series, or, in a worker of `serve --workers N`, the cluster's. */
export function scrapeSource(metrics: Metrics): () => Promise<string> {
  if (!cluster.isWorker) return () => metrics.scrape();
  let nextId = 0;
  return () =>
    new Promise<string>((resolve, reject) => {
      const id = nextId++;
      const listener = (message: unknown) => {
        if (!isAnswer(message) || message.id !== id) return;
        finish();
        if (message.text !== undefined) resolve(message.text);
        else reject(new Error(`the primary could not gather the workers' metrics: ${message.error}`));
      };
      const timer = setTimeout(() => {
        finish();
        reject(new Error(`the primary did not answer within ${CLUSTER_ANSWER_TIMEOUT_MS} ms`));
      }, CLUSTER_ANSWER_TIMEOUT_MS);
      const finish = () => {
        clearTimeout(timer);
        process.off("message", listener);
      };
      process.on("message", listener);
      process.send?.({ sigil: "metrics-request", id } satisfies MetricsRequest);
    });
}

/**
 * The primary of `serve --workers N`: gathers the workers' series when one of them is scraped (or, with
 * a listener of its own, when it is), and answers with the cluster's. Resolves with what stops it.
 */
export async function gatherForWorkers(config: MetricsConfig, logger: pino.Logger): Promise<{ close(): Promise<void> }> {
  if (config.serve === "off") return { close: async () => undefined };
  const aggregator = new AggregatorRegistry();
  const gather = () => aggregator.clusterMetrics();
  const onMessage = (worker: { send(message: MetricsAnswer): unknown; isConnected(): boolean }, message: unknown) => {
    if (!isRequest(message)) return;
    // A worker that died meanwhile is not answered: sending to it would fail.
    const answer = (reply: MetricsAnswer) => void (worker.isConnected() && worker.send(reply));
    gather().then(
      (text) => answer({ sigil: "metrics-answer", id: message.id, text }),
      (error: unknown) => answer({ sigil: "metrics-answer", id: message.id, error: (error as Error).message }),
    );
  };
  cluster.on("message", onMessage);
  const listener = config.serve === "listener" ? await listenForScrapes(config, gather, aggregator.contentType, logger) : undefined;
  if (listener) logger.info({ url: listener.url }, "metrics served");
  return {
    async close() {
      cluster.off("message", onMessage);
      await listener?.close();
    },
  };
}
