// GET /ready: whether this process may take traffic (docs/running.md#readiness-and-shutdown). 200
// only when the database answers, its schema is this version's, the master key opens the
// deployment's keys, the outbox workers run and no shutdown has begun; else 503 naming each check
// that fails. /health stays the liveness check: it answers while the process does.
import { sql } from "kysely";
import type { FastifyInstance } from "fastify";
import type pino from "pino";
import type { Keyring } from "../crypto/envelope.js";
import { schemaState, type Store } from "../store/database.js";
import { keyIdsInUse, SERVICE_KEY_COLUMNS } from "../services/sealed-secrets.js";

/** How long /ready waits for the database (a probe's own timeout should be longer). */
export const READY_TIMEOUT_MS = 2_000;

/** How old the database checks behind a scrape's `sigil_ready` may be (ms): a scrape every second
 * asks them a fifth as often, while /ready itself always checks. */
export const SCRAPE_READINESS_MAX_AGE_MS = 5_000;

/** A worker whose running /ready reports (services/outbox-worker.ts). */
export interface RunningWorker {
  readonly running: boolean;
}

export interface ReadinessParts {
  store: Store;
  keyring: Keyring;
  /** The outbox workers by what they send: webhooks, messages, broadcasts. */
  outboxes: Record<string, RunningWorker>;
}

/** What is not ready, by check: database, migrations, masterKey, outboxes, shutdown. */
export type NotReady = Partial<Record<"database" | "migrations" | "masterKey" | "outboxes" | "shutdown", string>>;

function withTimeout<T>(work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
  });
  return Promise.race([work, timeout]).finally(() => clearTimeout(timer));
}

type DatabaseChecks = Pick<NotReady, "database" | "migrations" | "masterKey">;

export class Readiness {
  private shuttingDown = false;
  /** The last database checks, when they finished (performance.now()). */
  private lastDatabaseChecks: { at: number; failing: Promise<DatabaseChecks> } | null = null;

  constructor(
    private readonly parts: ReadinessParts,
    private readonly logger: pino.Logger,
  ) {}

  /** From now on /ready answers 503 (shutdown): the first step of a graceful stop, so that a load
   * balancer takes the process out of rotation while it still serves. */
  drain(): void {
    this.shuttingDown = true;
  }

  get draining(): boolean {
    return this.shuttingDown;
  }

  /** Every check that fails, with why; empty when ready. The reasons are Sigil's words: the
   * database's own errors go to the log. */
  async notReady(): Promise<NotReady> {
    const checks = this.checkDatabase();
    this.lastDatabaseChecks = { at: performance.now(), failing: checks };
    return { ...this.inProcess(), ...(await checks) };
  }

  /** As notReady, with database checks up to `maxAgeMs` old (those of a check under way count as
   * new); what the process knows of itself (a shutdown begun, the outbox workers) is always current. */
  async recently(maxAgeMs: number): Promise<NotReady> {
    const last = this.lastDatabaseChecks;
    if (!last || performance.now() - last.at > maxAgeMs) return this.notReady();
    return { ...this.inProcess(), ...(await last.failing) };
  }

  private inProcess(): NotReady {
    const failing: NotReady = {};
    if (this.shuttingDown) failing.shutdown = "the server is shutting down: it finishes the requests in flight, then stops";
    const stopped = Object.entries(this.parts.outboxes)
      .filter(([, worker]) => !worker.running)
      .map(([name]) => name);
    if (stopped.length > 0) failing.outboxes = `the outbox workers for ${stopped.join(", ")} are not running`;
    return failing;
  }

  private async checkDatabase(): Promise<DatabaseChecks> {
    const { store, keyring } = this.parts;
    const failing: DatabaseChecks = {};
    try {
      // Both roads to the database: the connection(s) writes take, and the one reads take.
      const [, state, sealedUnder] = await withTimeout(
        Promise.all([sql`select 1`.execute(store.db), schemaState(store.reader), keyIdsInUse(store.reader, SERVICE_KEY_COLUMNS)]),
        READY_TIMEOUT_MS,
      );
      if (state.pending.length > 0) failing.migrations = `migrations ${state.pending.join(", ")} are not applied`;
      const missing = sealedUnder.filter((id) => !keyring.holds(id));
      if (missing.length > 0) {
        failing.masterKey = "the master key this server holds does not open the deployment's keys";
        this.logger.warn(
          { sealedUnder: missing, masterKey: keyring.currentKeyId },
          "not ready: the deployment's keys are sealed under another master key",
        );
      }
    } catch (error) {
      failing.database = "the database does not answer";
      failing.migrations = failing.masterKey = "not checked: the database does not answer";
      this.logger.warn({ err: error }, "not ready: the database does not answer");
    }
    return failing;
  }
}

/** Serves GET /ready from `readiness`. */
export function readyRoute(app: FastifyInstance, readiness: Readiness): void {
  app.get("/ready", async (_request, reply) => {
    const notReady = await readiness.notReady();
    reply.header("cache-control", "no-store");
    if (Object.keys(notReady).length === 0) return { status: "ready" };
    return reply.status(503).send({ status: "not ready", notReady });
  });
}
