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
// A request pays a few additions: the series it touches are counted in children resolved once (a
// route's when it is registered, an activity type's at its first use), and handed to prom-client when
// a scrape asks (CountingCounter, CountingHistogram). prom-client's own inc() and observe() hash the
// labels and allocate on every call: in a profile of a signing server under load they took about 2 %
// of its event loop's time, for the eight or so a request makes.
import { Counter, Gauge, Registry, collectDefaultMetrics, type Metric } from "prom-client";
import { sql } from "kysely";
import type pino from "pino";
import type { Store } from "../store/database.js";
import type { TransactionObserver } from "../store/handles.js";
import type { SignatureThreads } from "../crypto/signature-threads.js";
import { prepare } from "../store/prepared.js";

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

// A scrape's reads, prepared once (store/prepared.ts). Each is served by an index on the status
// (store/migrations.ts): it reads only what waits, not the history.
const waitingByStatus = prepare((db) =>
  db
    .selectFrom("activities")
    .select((eb) => ["status", eb.fn.countAll<number | string>().as("count")])
    .where(WAITING)
    .groupBy("status"),
);
const oldestPending = (table: "webhook_deliveries" | "outbound_messages" | "sent_transactions", statuses: string[]) =>
  prepare((db) =>
    db
      .selectFrom(table)
      .select((eb) => [eb.fn.countAll<number | string>().as("pending"), eb.fn.min<number | string | null>("created_at").as("oldest")])
      .where("status", "in", statuses),
  );
const oldestPendingOf = {
  webhooks: oldestPending("webhook_deliveries", ["pending"]),
  messages: oldestPending("outbound_messages", ["pending"]),
  broadcasts: oldestPending("sent_transactions", ["INITIALIZED", "BROADCASTING"]),
};

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

/** One series of a CountingCounter: what was counted, and how much of it prom-client has been given. */
class CounterChild {
  count = 0;
  given = 0;
  constructor(readonly labels: Record<string, string>) {}

  inc(): void {
    this.count++;
  }
}

/**
 * A counter counted in plain numbers and handed to prom-client's Counter at each scrape (its collect):
 * the exposition, the help, the checks of names and labels and a cluster's aggregation stay the
 * library's; a request only adds one.
 */
class CountingCounter<L extends string> {
  private readonly counter: Counter<L>;
  private readonly children: CounterChild[] = [];

  constructor(registry: Registry, name: string, help: string, labelNames: readonly L[]) {
    this.counter = new Counter({ name, help, labelNames, registers: [registry], collect: () => this.give() });
  }

  /** The series of these labels, shown from now on (at 0 until counted). */
  child(labels: Record<L, string>): CounterChild {
    const child = new CounterChild(labels);
    this.children.push(child);
    this.counter.inc(labels as Partial<Record<L, string>>, 0);
    return child;
  }

  private give(): void {
    for (const child of this.children) {
      if (child.count === child.given) continue;
      this.counter.inc(child.labels as Partial<Record<L, string>>, child.count - child.given);
      child.given = child.count;
    }
  }
}

/** One series of a CountingHistogram: its counts by bucket (not cumulative), sum and count. */
class HistogramChild {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;
  constructor(
    readonly labels: Record<string, string>,
    private readonly bounds: readonly number[],
  ) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    const bounds = this.bounds;
    for (let i = 0; i < bounds.length; i++) {
      if (value <= bounds[i]!) {
        this.counts[i]!++;
        break;
      }
    }
    this.sum += value;
    this.count++;
  }
}

/**
 * A histogram counted in plain numbers, registered in prom-client's registry as a series of its own:
 * prom-client has no way to hand a histogram counts observed elsewhere, so at each scrape get()
 * answers its values in the shape prom-client's Histogram gives them (`_bucket` by `le`, cumulative,
 * `_sum`, `_count`), and the registry writes them and a cluster aggregates them as it does its own.
 */
class CountingHistogram<L extends string> {
  readonly type = "histogram";
  readonly aggregator = "sum";
  private readonly children: HistogramChild[] = [];

  constructor(
    registry: Registry,
    readonly name: string,
    readonly help: string,
    readonly labelNames: readonly L[],
    private readonly bounds: readonly number[],
  ) {
    registry.registerMetric(this as unknown as Metric);
  }

  /** The series of these labels, shown from now on (empty until observed). */
  child(labels: Record<L, string>): HistogramChild {
    const child = new HistogramChild(labels, this.bounds);
    this.children.push(child);
    return child;
  }

  async get() {
    const values: Array<{ labels: Record<string, string | number>; value: number; metricName: string }> = [];
    for (const child of this.children) {
      let cumulative = 0;
      this.bounds.forEach((le, i) => {
        cumulative += child.counts[i]!;
        values.push({ labels: { le, ...child.labels }, value: cumulative, metricName: `${this.name}_bucket` });
      });
      values.push({ labels: { le: "+Inf", ...child.labels }, value: child.count, metricName: `${this.name}_bucket` });
      values.push({ labels: child.labels, value: child.sum, metricName: `${this.name}_sum` });
      values.push({ labels: child.labels, value: child.count, metricName: `${this.name}_count` });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  /** What Registry.resetMetrics asks of every series. */
  reset(): void {
    for (const child of this.children) {
      child.counts.fill(0);
      child.sum = 0;
      child.count = 0;
    }
  }
}

/** The series of one route, bound to it when it is registered: a request only adds. They are made
 * at the route's first answer, so a scrape shows the routes that have answered, not every route. */
export class RouteMetrics {
  /** By the status's first digit. */
  private readonly byClass: Array<CounterChild | undefined> = [];
  private duration: HistogramChild | undefined;

  constructor(
    private readonly requests: CountingCounter<"operation" | "status_class">,
    private readonly durations: CountingHistogram<"operation">,
    readonly operation: string,
  ) {}

  /** One answer of the route: its HTTP status, and the time it took (milliseconds). */
  answered(status: number, ms: number): void {
    const digit = Math.min(5, Math.max(1, Math.floor(status / 100)));
    let answered = this.byClass[digit];
    if (!answered) answered = this.byClass[digit] = this.requests.child({ operation: this.operation, status_class: `${digit}xx` });
    answered.inc();
    this.duration ??= this.durations.child({ operation: this.operation });
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
  /** Whether this process would answer /ready with 200 (http/readiness.ts), asked at each scrape
   * (its database checks may be a few seconds old: SCRAPE_READINESS_MAX_AGE_MS). */
  ready?: () => Promise<boolean>;
}

export class Metrics {
  readonly registry = new Registry();

  private readonly httpRequests = new CountingCounter(
    this.registry,
    "sigil_http_requests_total",
    "HTTP requests answered, by operation and status class",
    ["operation", "status_class"],
  );
  private readonly httpDuration = new CountingHistogram(
    this.registry,
    "sigil_http_request_duration_seconds",
    "Time from a request's arrival to the end of its answer, by operation",
    ["operation"],
    LATENCY_BUCKETS,
  );
  private readonly refusals = new CountingCounter(
    this.registry,
    "sigil_requests_refused_total",
    "Requests and connections refused before any work was done for them, by reason",
    ["reason"],
  );
  private readonly activities = new CountingCounter(
    this.registry,
    "sigil_activities_total",
    "Activities recorded, by type and the status the request left them in (committed ones only)",
    ["type", "status"],
  );
  private readonly decisions = new CountingCounter(
    this.registry,
    "sigil_policy_decisions_total",
    "Policy decisions recorded with activities (committed ones only), by outcome",
    ["outcome"],
  );
  private readonly waiting = new Gauge({
    name: "sigil_activities_waiting",
    help: "Activities waiting for approvals or for their requester's further authentication (MFA), by status, in the database",
    labelNames: ["status"] as const,
    aggregator: "max",
    registers: [this.registry],
    collect: () => this.readDatabase(),
  });
  private readonly steps = new CountingHistogram(
    this.registry,
    "sigil_activity_step_duration_seconds",
    "Time an activity spent in each step of the pipeline",
    ["step"],
    STEP_BUCKETS,
  );
  private readonly signatureQueue: Gauge = new Gauge({
    name: "sigil_signature_queue_length",
    help: "Signatures handed to signature threads and not yet answered",
    registers: [this.registry],
    collect: (): void => this.signatureQueue.set(this.sources?.signatures?.queued ?? 0),
  });
  private readonly signatureWait = new CountingHistogram(
    this.registry,
    "sigil_signature_queue_wait_seconds",
    "Time a signature waited for a signature thread to take it up",
    [],
    STEP_BUCKETS,
  ).child({});
  private readonly transactions = new CountingHistogram(
    this.registry,
    "sigil_database_transaction_duration_seconds",
    "Write transactions, from asking for BEGIN to the end of COMMIT or ROLLBACK, by kind and outcome",
    ["kind", "outcome"],
    LATENCY_BUCKETS,
  );
  private readonly batchSizes = new CountingHistogram(
    this.registry,
    "sigil_database_group_commit_batch_size",
    "Activities per shared write transaction (group commit)",
    [],
    BATCH_BUCKETS,
  ).child({});
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
  private readonly outboxAttempts = new CountingCounter(
    this.registry,
    "sigil_outbox_attempts_total",
    "Delivery attempts this process made, by outbox and result",
    ["outbox", "result"],
  );
  private readonly ready: Gauge = new Gauge({
    name: "sigil_ready",
    help: "1 when the process would answer /ready with 200 (it may take traffic), else 0; the database checks behind it are at most 5 s old",
    aggregator: "min",
    registers: [this.registry],
    collect: async (): Promise<void> => {
      const ready = this.sources?.ready;
      if (ready) this.ready.set((await ready().catch(() => false)) ? 1 : 0);
    },
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

  private readonly transactionChildren = {
    group: {
      committed: this.transactions.child({ kind: "group", outcome: "committed" }),
      rolled_back: this.transactions.child({ kind: "group", outcome: "rolled_back" }),
    },
    single: {
      committed: this.transactions.child({ kind: "single", outcome: "committed" }),
      rolled_back: this.transactions.child({ kind: "single", outcome: "rolled_back" }),
    },
  };

  /** Told by the store of each write transaction as it ends. */
  readonly transactionObserver: TransactionObserver = {
    transactionEnded: (kind, committed, seconds, members) => {
      this.transactionChildren[kind][committed ? "committed" : "rolled_back"].observe(seconds);
      if (kind === "group") this.batchSizes.observe(members);
    },
  };

  /** Told of each signature a thread computed: how long it waited for the thread (seconds). */
  readonly onSignatureWait = (seconds: number): void => this.signatureWait.observe(seconds);

  constructor() {
    // Node's process metrics under their usual names (process_*, nodejs_*), as dashboards expect them.
    collectDefaultMetrics({ register: this.registry });
    // The series of the small closed sets exist from the start, at 0, so that a rate over them (an
    // alert) has a value before the first event rather than none.
    this.stepChildren = Object.fromEntries(PIPELINE_STEPS.map((step) => [step, this.steps.child({ step })])) as Record<
      PipelineStep,
      HistogramChild
    >;
    this.refusalChildren = Object.fromEntries(REFUSAL_REASONS.map((reason) => [reason, this.refusals.child({ reason })])) as Record<
      RefusalReason,
      CounterChild
    >;
    for (const outcome of DECISION_OUTCOMES) this.decisionChildren.set(outcome, this.decisions.child({ outcome }));
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
    if (!child) byStatus.set(status, (child = this.activities.child({ type, status })));
    child.inc();
  }

  /** A policy decision was committed with its activity. */
  decision(outcome: string): void {
    let child = this.decisionChildren.get(outcome);
    if (!child) this.decisionChildren.set(outcome, (child = this.decisions.child({ outcome })));
    child.inc();
  }

  refused(reason: RefusalReason): void {
    this.refusalChildren[reason].inc();
  }

  /** What an outbox's worker calls after each attempt. */
  outboxRecorder(outbox: Outbox): (status: AttemptStatus) => void {
    const children = {
      delivered: this.outboxAttempts.child({ outbox, result: "delivered" }),
      pending: this.outboxAttempts.child({ outbox, result: "retry" }),
      failed: this.outboxAttempts.child({ outbox, result: "failed" }),
    };
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
    try {
      const [waiting, ...outboxes] = await Promise.all([
        waitingByStatus.all(db, {}),
        ...OUTBOXES.map((outbox) => oldestPendingOf[outbox].first(db, {}).then((row) => row!)),
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
