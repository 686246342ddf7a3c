// `sigil serve --workers N`: N server processes on one port (node:cluster), sharing the database.
//
// The primary serves no request (but scrapes of the metrics on a listener of their own: http/metrics.ts,
// which gathers the workers' series into one answer). It prepares the deployment once (database, migrations, master key, the
// deployment's keys: prepareDeployment), so that workers starting together on a fresh deployment do
// not race to make them, then forks the workers, which run the command line again (cluster re-runs
// bin/sigil.js with the same arguments) and each start an ordinary server on the shared port: the
// primary hands each new connection to the next worker (node's round-robin). What keeps several
// processes consistent is the database (organization row locks, leases on outbox rows, the unique
// fingerprint), as for several servers on several machines; see docs/running.md.
//
// The primary keeps N workers running: one that exits when it was not asked to is replaced, after a
// pause that doubles with each death of that worker within STABLE_MS of its start; when one more
// dies after MAX_QUICK_DEATHS such replacements in a row, it gives up, stops the others and exits 1. A worker that fails
// while the deployment first starts (the port is taken, the database refuses) stops everything at
// once, as a single server that fails to start does. SIGTERM or SIGINT to the primary stops every
// worker gracefully (each finishes its requests in flight) and the primary exits when all have, 0 if
// all exited cleanly; a second signal meanwhile kills them.
import cluster, { type Worker } from "node:cluster";
import type pino from "pino";
import type { Config } from "../config.js";
import { answerPrimaryFromStart, gatherForWorkers } from "../http/metrics.js";

/** A worker that has served this long before it dies was not failing to start: its slot's count of quick deaths starts over. */
export const STABLE_MS = 30_000;
/** Replacements in a row, each dead within STABLE_MS of its start, after which the next such death makes the primary give up. */
export const MAX_QUICK_DEATHS = 5;
/** The pause before the first replacement; it doubles with each further quick death. */
const RESTART_BASE_MS = 500;

/** What a worker tells its primary once it is accepting requests. */
interface ReadyMessage {
  sigil: "ready";
  url: string;
}

const isReady = (message: unknown): message is ReadyMessage => (message as ReadyMessage | null)?.sigil === "ready";

/** One of the N places a worker runs in; a replacement takes its predecessor's slot. */
interface Slot {
  index: number;
  worker: Worker | null;
  /** When the current worker said it was ready; null until it has. */
  readyAt: number | null;
  /** Deaths in a row within STABLE_MS of starting. */
  quickDeaths: number;
  restart: NodeJS.Timeout | null;
}

/**
 * Runs the primary: forks `config.workers` workers, keeps them running and stops them on SIGTERM or
 * SIGINT. Resolves with the exit status once every worker has exited. The deployment must have been
 * prepared (prepareDeployment) before.
 */
export function runPrimary(config: Config, logger: pino.Logger, database: string): Promise<number> {
  const slots: Slot[] = Array.from({ length: config.workers }, (_, index) => ({
    index,
    worker: null,
    readyAt: null,
    quickDeaths: 0,
    restart: null,
  }));
  /** Until every worker of the first start has said it is ready: a failure then ends the start. */
  let starting = true;
  let stopping = false;
  let exitStatus = 0;
  let finish!: (status: number) => void;
  const finished = new Promise<number>((resolve) => {
    finish = resolve;
  });

  const live = () => slots.filter((slot) => slot.worker !== null);

  const stop = (status: number) => {
    if (stopping) return;
    stopping = true;
    exitStatus = Math.max(exitStatus, status);
    for (const slot of slots) {
      if (slot.restart) clearTimeout(slot.restart);
      slot.restart = null;
      // SIGTERM: the worker's graceful stop (it finishes the requests in flight, then exits).
      slot.worker?.process.kill("SIGTERM");
    }
    if (live().length === 0) finish(exitStatus);
  };

  const fork = (slot: Slot) => {
    slot.restart = null;
    slot.readyAt = null;
    const worker = cluster.fork();
    slot.worker = worker;
    logger.info({ worker: worker.id, workerPid: worker.process.pid, slot: slot.index + 1 }, "worker starting");
    worker.on("message", (message: unknown) => {
      if (!isReady(message) || slot.worker !== worker) return;
      slot.readyAt = Date.now();
      if (!starting) {
        logger.info({ worker: worker.id, workerPid: worker.process.pid, slot: slot.index + 1 }, "worker replaced: accepting requests");
        return;
      }
      if (slots.every((s) => s.readyAt !== null)) {
        starting = false;
        logger.info({ url: message.url, database, workers: slots.length }, "sigil is accepting requests");
      }
    });
    worker.on("exit", (code, signal) => {
      if (slot.worker !== worker) return;
      slot.worker = null;
      const fields = { worker: worker.id, workerPid: worker.process.pid, slot: slot.index + 1, code, signal };
      if (stopping) {
        if (code !== 0) exitStatus = 1;
        logger.info(fields, "worker stopped");
        if (live().length === 0) finish(exitStatus);
        return;
      }
      if (starting) {
        logger.error(fields, "a worker failed to start (its error is above): stopping");
        return stop(1);
      }
      const lived = slot.readyAt === null ? 0 : Date.now() - slot.readyAt;
      if (lived >= STABLE_MS) slot.quickDeaths = 0;
      slot.quickDeaths += 1;
      if (slot.quickDeaths > MAX_QUICK_DEATHS) {
        logger.fatal(
          { ...fields, deaths: slot.quickDeaths },
          `a worker died ${slot.quickDeaths} times in a row within ${STABLE_MS / 1000} s of its start: giving up, stopping`,
        );
        return stop(1);
      }
      const delayMs = RESTART_BASE_MS * 2 ** (slot.quickDeaths - 1);
      logger.error({ ...fields, restartInMs: delayMs }, "a worker exited unexpectedly: starting another in its place");
      slot.restart = setTimeout(() => fork(slot), delayMs);
    });
  };

  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals += 1;
    if (signals === 1) {
      logger.info({ signal, workers: live().length }, "shutting down: the workers finish their requests in flight");
      return stop(0);
    }
    logger.warn({ signal }, "second signal: killing the workers");
    exitStatus = 1;
    for (const slot of live()) slot.worker!.process.kill("SIGKILL");
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  // One answer to a scrape for all the workers (http/metrics.ts); a listener of its own that cannot
  // listen stops the start, as the main port would.
  const metrics = gatherForWorkers(config.metrics, logger).catch((error: unknown) => {
    logger.error({ err: error }, (error as Error).message);
    stop(1);
    return undefined;
  });
  for (const slot of slots) fork(slot);
  return finished.then(async (status) => {
    await (await metrics)?.close();
    return status;
  });
}

/**
 * Runs a worker: starts its server, tells the primary once it accepts requests, and stops it
 * gracefully on SIGTERM (which the primary sends when it stops), also when SIGTERM comes while it is
 * still starting. SIGINT is ignored: Ctrl-C in a terminal reaches every process of the group, and the
 * primary, which gets it too, stops the workers. A worker that cannot start says why and exits 1.
 * Called first thing, so that the signals are handled from the start.
 */
export async function runWorker(
  start: () => Promise<{ server: { url: string; close(): Promise<void> }; logger: pino.Logger }>,
): Promise<void> {
  let stopRequested = false;
  let stopServer: (() => void) | null = null;
  answerPrimaryFromStart();
  process.on("SIGINT", () => undefined);
  process.on("SIGTERM", () => {
    if (stopRequested) return;
    stopRequested = true;
    stopServer?.();
  });
  let started: Awaited<ReturnType<typeof start>>;
  try {
    started = await start();
  } catch (error) {
    process.stderr.write(`sigil serve: worker ${cluster.worker?.id} (pid ${process.pid}) could not start: ${(error as Error).message}\n`);
    process.exit(1);
  }
  const { server, logger } = started;
  stopServer = () => {
    logger.info({ signal: "SIGTERM" }, "shutting down");
    server.close().then(
      () => process.exit(0),
      (error: unknown) => {
        logger.error({ err: error }, "the worker did not stop cleanly");
        process.exit(1);
      },
    );
  };
  process.send?.({ sigil: "ready", url: server.url } satisfies ReadyMessage);
  if (stopRequested) stopServer();
}
