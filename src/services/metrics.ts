// The service's Prometheus metrics (docs/metrics.md), with prom-client: every series Sigil serves is
// declared here, once, in the registry of one server process. The layers below say what happened
// through the hooks they offer (store/: each write transaction as it ends; crypto/: each signature's
// wait for a thread); the layers above call the recorders (activities/pipeline.ts: steps, activities,
// policy decisions; http/: requests and refusals; the outbox workers: their attempts); what a scrape
// shows of the database (outboxes, activities waiting) and of the pools is read when it is asked for.
//
// Label values come from closed sets only — the catalog's operation names, activity types and
// statuses, policy outcomes, and the steps, reasons, pools and outboxes named here — never an
// organization, a user, an address or a path a client sent: no request can make a new series.
//
// A request pays only prom-client's increments and observations (0.2–0.35 µs each, measured): the
// children of labelled series are resolved once (a route's when it is registered, an activity type's
// at its first use) rather than looked up by their labels on every request.
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { sql } from "kysely";
import type pino from "pino";
import type { Store } from "../store/database.js";
import type { TransactionObserver } from "../store/handles.js";
import type { SignatureThreads } from "../crypto/signature-threads.js";

/** The steps of an activity's road whose time is measured (activities/pipeline.ts). */
export const PIPELINE_STEPS = ["authentication", "organization_lock", "decision", "execution", "commit"] as const;
export type PipelineStep = (typeof PIPELINE_STEPS)[number];

/** Why a request was refused before any work was done for it. */
export const REFUSAL_REASONS = [
  "rate_limited",
  "ip_not_allowed",
  "body_too_large",
  "headers_too_large",
  "request_timeout",
  "malformed_http",
  "connections_overall",
  "connections_per_address",
] as const;
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** The durable outboxes (services/outbox-worker.ts) and the table each keeps its entries in. */
export const OUTBOXES = ["webhooks", "messages", "broadcasts"] as const;
export type Outbox = (typeof OUTBOXES)[number];

/** What an outbox attempt came to: delivered, to be tried again, or failed for good. */
export type AttemptStatus = "delivered" | "pending" | "failed";

/** The operation label of a request to a path Sigil serves nothing at. */
export const UNKNOWN_OPERATION = "unknown";

const WAITING_STATUSES = ["ACTIVITY_STATUS_CONSENSUS_NEEDED", "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED"] as const;

/** The condition of the partial index activities_waiting (store/migrations.ts), word for word: a
 * database uses a partial index only for a query whose condition it can see implies the index's, and
 * neither sees through bound parameters. */
const WAITING = sql<boolean>`status in ('ACTIVITY_STATUS_CONSENSUS_NEEDED', 'ACTIVITY_STATUS_AUTHENTICATORS_NEEDED')`;

/** Every outcome a policy evaluation records (activities/pipeline.ts, Authorization). */
const DECISION_OUTCOMES = [
  "OUTCOME_ALLOW",
  "OUTCOME_DENY_EXPLICIT",
  "OUTCOME_DENY_IMPLICIT",
  "OUTCOME_REQUIRES_CONSENSUS",
  "OUTCOME_REQUIRES_AUTHENTICATORS",
  "OUTCOME_REJECTED",
] as const;

/** Every label's values, in words, for docs/metrics.md. */
export const LABEL_VALUES: Record<string, string> = {
  operation:
    "the catalog name of the activity or query (`sign_raw_payload`, `get_wallet`; [operations.md](operations.md)), the path of another route Sigil serves (`/health`, `/metrics`, `/.well-known/jwks.json`, …), or `unknown` for every path it does not serve",
  status_class: "`1xx` … `5xx`",
  type: "the activity type as the API names it (`ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2`)",
  status:
    "the activity status as the API names it (`ACTIVITY_STATUS_COMPLETED`, `…_FAILED`, `…_REJECTED`, `…_CONSENSUS_NEEDED`, `…_AUTHENTICATORS_NEEDED`)",
  outcome:
    "policy decisions: `OUTCOME_ALLOW`, `OUTCOME_DENY_EXPLICIT`, `OUTCOME_DENY_IMPLICIT`, `OUTCOME_REQUIRES_CONSENSUS`, `OUTCOME_REQUIRES_AUTHENTICATORS`, `OUTCOME_REJECTED`; transactions: `committed`, `rolled_back`",
  step: PIPELINE_STEPS.map((step) => `\`${step}\``).join(", "),
  kind: "`group` (a transaction shared by a batch of activities) or `single` (one of its own)",
  pool: "`writer` (SQLite's write connection), or PostgreSQL's `transactions`, `batches` (the shared transactions of signatures) and `reads`",
  state: "`in_use` or `idle`",
  outbox: OUTBOXES.map((outbox) => `\`${outbox}\``).join(", "),
  result: "`delivered`, `retry` (to be tried again), `failed` (given up)",
  reason: REFUSAL_REASONS.map((reason) => `\`${reason}\``).join(", "),
  version: "Sigil's version",
  database: "`sqlite` or `postgres`",
};

const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
const STEP_BUCKETS = [0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
const BATCH_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256];

interface CounterChild {
  inc(value?: number): void;
}
interface HistogramChild {
  observe(value: number): void;
}

/** The series of one route, resolved when the route is registered: a request only increments. */
export class RouteMetrics {
  /** By the status's first digit. */
  private readonly byClass: Array<CounterChild | undefined> = [];
  private readonly duration: HistogramChild;

  constructor(
    private readonly requests: Counter<"operation" | "status_class">,
    durations: Histogram<"operation">,
    readonly operation: string,
  ) {
    this.duration = durations.labels(operation);
  }

  /** One answer of the route: its HTTP status, and the time it took (milliseconds). */
  answered(status: number, ms: number): void {
    const digit = Math.min(5, Math.max(1, Math.floor(status / 100)));
    let answered = this.byClass[digit];
    if (!answered) answered = this.byClass[digit] = this.requests.labels(this.operation, `${digit}xx`);
    answered.inc();
    this.duration.observe(ms / 1000);
  }
}

/** What a scrape reads besides the recorders' counts. */
export interface MetricsSources {
  store: Store;
  signatures?: SignatureThreads;
  logger: pino.Logger;
  version: string;
  clock?: () => number;
}

export class Metrics {
  readonly registry = new Registry();

  private readonly httpRequests = new Counter({
    name: "sigil_http_requests_total",
    help: "HTTP requests answered, by operation and status class",
    labelNames: ["operation", "status_class"] as const,
    registers: [this.registry],
  });
  private readonly httpDuration = new Histogram({
    name: "sigil_http_request_duration_seconds",
    help: "Time from a request's arrival to the end of its answer, by operation",
    labelNames: ["operation"] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  private readonly refusals = new Counter({
    name: "sigil_requests_refused_total",
    help: "Requests and connections refused before any work was done for them, by reason",
    labelNames: ["reason"] as const,
    registers: [this.registry],
  });
  private readonly activities = new Counter({
    name: "sigil_activities_total",
    help: "Activities recorded, by type and the status the request left them in (committed ones only)",
    labelNames: ["type", "status"] as const,
    registers: [this.registry],
  });
  private readonly decisions = new Counter({
    name: "sigil_policy_decisions_total",
    help: "Policy decisions recorded with activities (committed ones only), by outcome",
    labelNames: ["outcome"] as const,
    registers: [this.registry],
  });
  private readonly waiting = new Gauge({
    name: "sigil_activities_waiting",
    help: "Activities waiting for approvals or for their requester's further authentication (MFA), by status, in the database",
    labelNames: ["status"] as const,
    aggregator: "max",
    registers: [this.registry],
    collect: () => this.readDatabase(),
  });
  private readonly steps = new Histogram({
    name: "sigil_activity_step_duration_seconds",
    help: "Time an activity spent in each step of the pipeline",
    labelNames: ["step"] as const,
    buckets: STEP_BUCKETS,
    registers: [this.registry],
  });
  private readonly signatureQueue: Gauge = new Gauge({
    name: "sigil_signature_queue_length",
    help: "Signatures handed to signature threads and not yet answered",
    registers: [this.registry],
    collect: (): void => this.signatureQueue.set(this.sources?.signatures?.queued ?? 0),
  });
  private readonly signatureWait = new Histogram({
    name: "sigil_signature_queue_wait_seconds",
    help: "Time a signature waited for a signature thread to take it up",
    buckets: STEP_BUCKETS,
    registers: [this.registry],
  });
  private readonly transactions = new Histogram({
    name: "sigil_database_transaction_duration_seconds",
    help: "Write transactions, from asking for BEGIN to the end of COMMIT or ROLLBACK, by kind and outcome",
    labelNames: ["kind", "outcome"] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  private readonly batchSizes = new Histogram({
    name: "sigil_database_group_commit_batch_size",
    help: "Activities per shared write transaction (group commit)",
    buckets: BATCH_BUCKETS,
    registers: [this.registry],
  });
  private readonly connections = new Gauge({
    name: "sigil_database_connections",
    help: "Database connections open, by pool and state",
    labelNames: ["pool", "state"] as const,
    registers: [this.registry],
    collect: () => this.readConnections(),
  });
  private readonly connectionWaiters = new Gauge({
    name: "sigil_database_connection_waiters",
    help: "Work waiting for a connection of the pool (SQLite: activities waiting to join a write transaction)",
    labelNames: ["pool"] as const,
    registers: [this.registry],
    collect: () => this.readConnections(),
  });
  private readonly statements = new Counter({
    name: "sigil_database_statements_total",
    help: "Statements sent to the database, BEGIN and COMMIT included",
    registers: [this.registry],
    collect: () => this.readStatements(),
  });
  private readonly reachable = new Gauge({
    name: "sigil_database_reachable",
    help: "1 when the scrape's own reads of the database succeeded, else 0",
    aggregator: "min",
    registers: [this.registry],
    collect: () => this.readDatabase(),
  });
  private readonly outboxPending = new Gauge({
    name: "sigil_outbox_pending",
    help: "Entries of each outbox waiting to be delivered, in the database",
    labelNames: ["outbox"] as const,
    aggregator: "max",
    registers: [this.registry],
    collect: () => this.readDatabase(),
  });
  private readonly outboxOldest = new Gauge({
    name: "sigil_outbox_oldest_pending_age_seconds",
    help: "Age of each outbox's oldest entry waiting to be delivered (0 when none waits)",
    labelNames: ["outbox"] as const,
    aggregator: "max",
    registers: [this.registry],
    collect: () => this.readDatabase(),
  });
  private readonly outboxAttempts = new Counter({
    name: "sigil_outbox_attempts_total",
    help: "Delivery attempts this process made, by outbox and result",
    labelNames: ["outbox", "result"] as const,
    registers: [this.registry],
  });
  private readonly buildInfo = new Gauge({
    name: "sigil_build_info",
    help: "Always 1: the version of the process and the database it uses",
    labelNames: ["version", "database"] as const,
    aggregator: "first",
    registers: [this.registry],
  });

  private readonly routes = new Map<string, RouteMetrics>();
  private readonly stepChildren: Record<PipelineStep, HistogramChild>;
  private readonly activityChildren = new Map<string, Map<string, CounterChild>>();
  private readonly decisionChildren = new Map<string, CounterChild>();
  private readonly refusalChildren: Record<RefusalReason, CounterChild>;
  private sources: MetricsSources | undefined;
  private statementsSeen = 0;
  /** The database's answer to the scrape under way, shared by the series it feeds. */
  private databaseRead: Promise<void> | null = null;

  /** The route of requests to a path Sigil does not serve. */
  readonly unknownRoute: RouteMetrics;

  /** Told by the store of each write transaction as it ends. */
  readonly transactionObserver: TransactionObserver = {
    transactionEnded: (kind, committed, seconds, members) => {
      this.transactions.labels(kind, committed ? "committed" : "rolled_back").observe(seconds);
      if (kind === "group") this.batchSizes.observe(members);
    },
  };

  /** Told of each signature a thread computed: how long it waited for the thread (seconds). */
  readonly onSignatureWait = (seconds: number): void => this.signatureWait.observe(seconds);

  constructor() {
    // Node's process metrics under their usual names (process_*, nodejs_*), as dashboards expect them.
    collectDefaultMetrics({ register: this.registry });
    this.stepChildren = Object.fromEntries(PIPELINE_STEPS.map((step) => [step, this.steps.labels(step)])) as unknown as Record<
      PipelineStep,
      HistogramChild
    >;
    this.refusalChildren = Object.fromEntries(REFUSAL_REASONS.map((reason) => [reason, this.refusals.labels(reason)])) as unknown as Record<
      RefusalReason,
      CounterChild
    >;
    // The series of the small closed sets exist from the start, at 0, so that a rate over them (an
    // alert) has a value before the first event rather than none.
    for (const reason of REFUSAL_REASONS) this.refusalChildren[reason].inc(0);
    for (const step of PIPELINE_STEPS) this.steps.zero({ step });
    for (const outcome of DECISION_OUTCOMES) this.decision(outcome, 0);
    this.unknownRoute = this.route(UNKNOWN_OPERATION);
  }

  /** Binds what scrapes read: the database, the signature threads. */
  watch(sources: MetricsSources): void {
    this.sources = sources;
    this.statementsSeen = sources.store.statements.count;
    this.buildInfo.labels(sources.version, sources.store.dialect).set(1);
  }

  /** The series of a route Sigil serves, by its operation label (catalog name or path): called once per route. */
  route(operation: string): RouteMetrics {
    let route = this.routes.get(operation);
    if (!route) {
      route = new RouteMetrics(this.httpRequests, this.httpDuration, operation);
      this.routes.set(operation, route);
    }
    return route;
  }

  /** `step` of an activity took from `startedAt` (performance.now()) until now. */
  step(step: PipelineStep, startedAt: number): void {
    this.stepChildren[step].observe((performance.now() - startedAt) / 1000);
  }

  /** An activity was committed in `status` (type and status come from the catalog's closed sets). */
  activity(type: string, status: string): void {
    let byStatus = this.activityChildren.get(type);
    if (!byStatus) this.activityChildren.set(type, (byStatus = new Map()));
    let child = byStatus.get(status);
    if (!child) byStatus.set(status, (child = this.activities.labels(type, status)));
    child.inc();
  }

  /** A policy decision was committed with its activity. */
  decision(outcome: string, count = 1): void {
    let child = this.decisionChildren.get(outcome);
    if (!child) this.decisionChildren.set(outcome, (child = this.decisions.labels(outcome)));
    child.inc(count);
  }

  refused(reason: RefusalReason): void {
    this.refusalChildren[reason].inc();
  }

  /** What an outbox's worker calls after each attempt. */
  outboxRecorder(outbox: Outbox): (status: AttemptStatus) => void {
    const children = {
      delivered: this.outboxAttempts.labels(outbox, "delivered"),
      pending: this.outboxAttempts.labels(outbox, "retry"),
      failed: this.outboxAttempts.labels(outbox, "failed"),
    };
    for (const child of Object.values(children)) child.inc(0);
    return (status) => children[status].inc();
  }

  get contentType(): string {
    return this.registry.contentType;
  }

  /** The text exposition of every series, as of now. */
  scrape(): Promise<string> {
    return this.registry.metrics();
  }

  private readConnections(): void {
    const store = this.sources?.store;
    if (!store) return;
    for (const use of store.connections()) {
      this.connections.labels(use.pool, "in_use").set(use.open - use.idle);
      this.connections.labels(use.pool, "idle").set(use.idle);
      this.connectionWaiters.labels(use.pool).set(use.waiting);
    }
  }

  private readStatements(): void {
    const count = this.sources?.store.statements.count;
    if (count === undefined) return;
    if (count > this.statementsSeen) this.statements.inc(count - this.statementsSeen);
    this.statementsSeen = count;
  }

  /** One read of the database per scrape, whichever of its series asks first. */
  private readDatabase(): Promise<void> {
    this.databaseRead ??= this.queryDatabase().finally(() => {
      this.databaseRead = null;
    });
    return this.databaseRead;
  }

  private async queryDatabase(): Promise<void> {
    const sources = this.sources;
    if (!sources) return;
    const db = sources.store.reader;
    const now = (sources.clock ?? Date.now)();
    // Each read is served by an index on the status (store/migrations.ts): it reads only what waits,
    // not the history.
    const oldestPending = (table: "webhook_deliveries" | "outbound_messages" | "sent_transactions", statuses: string[]) =>
      db
        .selectFrom(table)
        .select((eb) => [eb.fn.countAll<number | string>().as("pending"), eb.fn.min<number | string | null>("created_at").as("oldest")])
        .where("status", "in", statuses)
        .executeTakeFirstOrThrow();
    try {
      const [waiting, ...outboxes] = await Promise.all([
        db
          .selectFrom("activities")
          .select((eb) => ["status", eb.fn.countAll<number | string>().as("count")])
          .where(WAITING)
          .groupBy("status")
          .execute(),
        oldestPending("webhook_deliveries", ["pending"]),
        oldestPending("outbound_messages", ["pending"]),
        oldestPending("sent_transactions", ["INITIALIZED", "BROADCASTING"]),
      ]);
      for (const status of WAITING_STATUSES)
        this.waiting.labels(status).set(Number(waiting.find((row) => row.status === status)?.count ?? 0));
      OUTBOXES.forEach((outbox, i) => {
        const { pending, oldest } = outboxes[i]!;
        this.outboxPending.labels(outbox).set(Number(pending));
        this.outboxOldest.labels(outbox).set(oldest === null ? 0 : Math.max(0, now - Number(oldest)) / 1000);
      });
      this.reachable.set(1);
    } catch (error) {
      // Shown as absent rather than as stale figures; the scrape itself still answers.
      this.waiting.reset();
      this.outboxPending.reset();
      this.outboxOldest.reset();
      this.reachable.set(0);
      sources.logger.warn({ err: error }, "metrics: the database does not answer");
    }
  }
}
