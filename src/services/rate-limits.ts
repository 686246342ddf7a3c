// Request rate limits (docs/rate-limits.md): token buckets per credential, per sub-organization and
// per top-level organization, apart for activities, votes and queries. The pipeline counts a request
// once it knows which credential sent it and that the credential belongs to the organization charged
// (after authentication, or from the memory of accepted keys), and before it locks, reads for the
// operation or records anything: a refusal is 429 REQUEST_RATE_LIMITED with Retry-After.
//
// A bucket is kept as GCRA's theoretical arrival time (`tat`): it refills at `perSecond` and holds
// `burst` requests, is full when `tat` is not after now, and a request fits while max(tat, now) plus
// one interval stays within the burst of now. A request takes a token from every bucket it counts
// against or from none, so a flood its own key's bucket refuses spends nothing of its organization's.
// A member of an organization's root quorum whose request only that organization's own bucket refuses
// is counted against the organization's root reserve instead: a runaway key cannot lock the root
// quorum out of deleting it.
//
// On PostgreSQL the buckets are rows of an UNLOGGED table shared by every server process, charged by
// one function call (migration 0022) per batch of concurrent requests: one statement on the reader's
// pipelined connection, whatever the number of requests and buckets. A busy bucket's tokens are taken
// a tenth of a second ahead (Leases): its next requests in this process are counted without a
// statement, and the tokens are the database's all the same, so no process admits more than the
// bucket allows. SQLite serves one process: its
// buckets are kept in memory, with the same arithmetic.
import { sql } from "kysely";
import type pino from "pino";
import type { Rate, RateLevels, RateLimitConfig } from "../config.js";
import { ServiceError, type ErrorBody } from "../errors.js";
import type { Db, Dialect } from "../store/handles.js";
import { RETRY_INFO_TYPE } from "./send-budgets.js";

/** The PostgreSQL table of the buckets (migration 0022): the limiter's own state, which no activity reads. */
export const RATE_LIMIT_TABLE = "rate_limit_buckets";

/** What a request is counted as: votes have buckets of their own, at the activities' rates. */
export type RequestClass = "activities" | "votes" | "queries";

/** Who a request is counted against: the credential that sent it, and the credential's organization. */
export interface Requester {
  /** The API key (session keys are ones), passkey or attested identity; for a read-only session, the
   * credential that opened it. */
  credentialId: string;
  userId: string;
  /** The credential's own organization (a parent's key acting in a sub-organization counts in the parent). */
  organizationId: string;
  /** Its parent: null for a top-level organization; undefined when the caller did not read it. */
  organizationParentId?: string | null;
}

export interface RateLimiter {
  /** Counts one request; throws RateLimited when a bucket it counts against has no token left. */
  charge(kind: RequestClass, requester: Requester): Promise<void>;
}

/** A refused request: 429 REQUEST_RATE_LIMITED, with a RetryInfo detail the HTTP layer turns into Retry-After. */
export class RateLimited extends ServiceError {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super("ResourceExhausted", "REQUEST_RATE_LIMITED", message);
  }

  override toBody(): ErrorBody {
    const body = super.toBody();
    const retryInfo = { "@type": RETRY_INFO_TYPE, retryDelay: `${this.retryAfterSeconds}s` };
    return { ...body, details: [...body.details, retryInfo as unknown as ErrorBody["details"][number]] };
  }
}

/** How a bucket stands to its request: the credential's own organization's ('own', which the root
 * reserve may stand in for), the reserve itself, or any other. */
type Role = "own" | "reserve" | "other";

interface Bucket {
  key: string;
  rate: Rate;
  role: Role;
  /** Whose budget it is, for the refusal's message. */
  owner: string;
  setting: string;
}

const SETTINGS: Record<"activities" | "queries", Record<keyof RateLevels, string>> = {
  activities: {
    key: "SIGIL_RATE_LIMIT_KEY_ACTIVITIES",
    subOrganization: "SIGIL_RATE_LIMIT_SUB_ORGANIZATION_ACTIVITIES",
    organization: "SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES",
  },
  queries: {
    key: "SIGIL_RATE_LIMIT_KEY_QUERIES",
    subOrganization: "SIGIL_RATE_LIMIT_SUB_ORGANIZATION_QUERIES",
    organization: "SIGIL_RATE_LIMIT_ORGANIZATION_QUERIES",
  },
};

/** The buckets a request of `kind` by `requester` counts against, the reserve among them when one may stand in. */
function bucketsOf(config: RateLimitConfig, kind: RequestClass, requester: Requester, parent: string | null): Bucket[] {
  const levels = kind === "queries" ? "queries" : "activities";
  const rates = config[levels];
  const settings = SETTINGS[levels];
  const organization = requester.organizationId;
  const buckets: Bucket[] = [];
  const add = (rate: Rate | null, key: string, role: Role, owner: string, setting: string) => {
    if (rate) buckets.push({ key: `${kind}:${key}`, rate, role, owner, setting });
  };
  add(rates.key, `key:${requester.credentialId}`, "other", `credential ${requester.credentialId}`, settings.key);
  if (parent) {
    add(rates.subOrganization, `sub:${organization}`, "own", `sub-organization ${organization}`, settings.subOrganization);
    add(rates.organization, `org:${parent}`, "other", `organization ${parent} and its sub-organizations`, settings.organization);
  } else {
    add(rates.organization, `org:${organization}`, "own", `organization ${organization} and its sub-organizations`, settings.organization);
  }
  if (buckets.some((b) => b.role === "own"))
    add(config.rootReserve, `reserve:${organization}`, "reserve", `the root quorum of ${organization}`, "SIGIL_RATE_LIMIT_ROOT_RESERVE");
  return buckets;
}

/** Milliseconds between two tokens, and how far ahead of now a bucket may run (its burst). */
const intervalOf = (rate: Rate) => 1000 / rate.perSecond;
const toleranceOf = (rate: Rate) => rate.burst * intervalOf(rate);
/** Rounding of intervals that do not divide a second: a fit within a microsecond fits (as in the SQL). */
const SLACK_MS = 0.001;

function refusal(kind: RequestClass, bucket: Bucket, waitMs: number): RateLimited {
  const seconds = Math.max(1, Math.ceil(waitMs / 1000));
  const shared = kind === "votes" ? ", counted apart from activities" : "";
  return new RateLimited(
    `too many ${kind}: the budget of ${bucket.owner} (${bucket.rate.perSecond} ${kind} a second, bursts of ${bucket.rate.burst}: ` +
      `${bucket.setting}${shared}) is spent; nothing was done: send the request again in ${seconds} s`,
    seconds,
  );
}

/** Organizations' parents, which never change once an organization is made: read once per process. */
class OrganizationParents {
  private readonly known = new Map<string, string | null>();

  constructor(private readonly reader: Db) {}

  async of(requester: Requester): Promise<string | null> {
    const organization = requester.organizationId;
    if (requester.organizationParentId !== undefined) {
      this.remember(organization, requester.organizationParentId);
      return requester.organizationParentId;
    }
    const known = this.known.get(organization);
    if (known !== undefined) return known;
    const row = await this.reader
      .selectFrom("organizations")
      .select("parent_organization_id")
      .where("id", "=", organization)
      .executeTakeFirst();
    const parent = row?.parent_organization_id ?? null;
    this.remember(organization, parent);
    return parent;
  }

  private remember(organization: string, parent: string | null): void {
    if (this.known.size >= 100_000 && !this.known.has(organization)) this.known.clear();
    this.known.set(organization, parent);
  }
}

/** Buckets whose every token is back count for nothing: forgotten this often. */
const PRUNE_INTERVAL_MS = 60_000;
/** Rows forgotten by one statement. */
const PRUNE_BATCH = 1000;

/** SQLite: the one server process keeps its buckets in memory. */
class MemoryRateLimiter implements RateLimiter {
  private readonly tats = new Map<string, number>();
  private readonly parents: OrganizationParents;
  private prunedAt: number;

  /** Buckets held (not yet forgotten as full). */
  get size(): number {
    return this.tats.size;
  }

  constructor(
    private readonly config: RateLimitConfig,
    private readonly reader: Db,
    private readonly clock: () => number,
    private readonly pruneIntervalMs: number,
  ) {
    this.parents = new OrganizationParents(reader);
    this.prunedAt = clock();
  }

  async charge(kind: RequestClass, requester: Requester): Promise<void> {
    const buckets = bucketsOf(this.config, kind, requester, await this.parents.of(requester));
    const counted = buckets.filter((b) => b.role !== "reserve");
    const first = this.take(counted);
    if (!first) return;
    const reserve = buckets.find((b) => b.role === "reserve");
    if (first.ownOnly && reserve && (await isRootMember(this.reader, requester))) {
      // Taken again after the read of the root quorum: the organization's bucket may have refilled meanwhile.
      if (!this.take(counted)) return;
      const reserved = this.take([...counted.filter((b) => b.role !== "own"), reserve]);
      if (!reserved) return;
      throw refusal(kind, first.bucket, Math.min(first.waitMs, reserved.waitMs));
    }
    throw refusal(kind, first.bucket, first.waitMs);
  }

  /** Takes one token from each of `buckets`, or none: undefined when taken, else the bucket that
   * refuses for longest, how long, and whether only the organization's own buckets refuse. */
  private take(buckets: Bucket[]): { bucket: Bucket; waitMs: number; ownOnly: boolean } | undefined {
    const now = this.clock();
    this.prune(now);
    let worst: { bucket: Bucket; waitMs: number } | undefined;
    let ownOnly = true;
    const next = buckets.map((bucket) => {
      const tat = Math.max(this.tats.get(bucket.key) ?? now, now) + intervalOf(bucket.rate);
      const over = tat - now - toleranceOf(bucket.rate);
      if (over > SLACK_MS) {
        if (bucket.role !== "own") ownOnly = false;
        if (!worst || over > worst.waitMs) worst = { bucket, waitMs: over };
      }
      return tat;
    });
    if (worst) return { ...worst, ownOnly };
    buckets.forEach((bucket, i) => this.tats.set(bucket.key, next[i]!));
    return undefined;
  }

  private prune(now: number): void {
    if (now - this.prunedAt < this.pruneIntervalMs) return;
    this.prunedAt = now;
    for (const [key, tat] of this.tats) if (tat <= now) this.tats.delete(key);
  }
}

async function isRootMember(reader: Db, requester: Requester): Promise<boolean> {
  const row = await reader
    .selectFrom("root_quorum_members")
    .select("user_id")
    .where("organization_id", "=", requester.organizationId)
    .where("user_id", "=", requester.userId)
    .executeTakeFirst();
  return row !== undefined;
}

/** A request waiting for its batch's statement. */
interface Pending {
  kind: RequestClass;
  requester: Requester;
  buckets: Bucket[];
  resolve(): void;
  reject(error: unknown): void;
}

/**
 * How far ahead a process takes a busy bucket's tokens from the database: a tenth of a second of its
 * rate (at most a quarter of its burst). A bucket of 50 a second is then charged once every five
 * requests, one of 2,000 a second once every 200: the statement per request a busy key would otherwise
 * cost shrinks as the rate grows, while a bucket of 10 a second or less is charged request by request.
 */
const LEASE_SECONDS = 0.1;
/** Tokens taken ahead and not used within this time are dropped: they stay spent (a process may
 * refuse a little early, never admit more than the bucket allows). */
const LEASE_TTL_MS = 1000;

/** Tokens of `rate` a process takes at once, 1 meaning none ahead. */
export const defaultLease = (rate: Rate) => Math.max(1, Math.min(Math.floor(rate.perSecond * LEASE_SECONDS), Math.floor(rate.burst / 4)));

/** The tokens this process took from the database ahead of its requests, by bucket. */
class Leases {
  private readonly held = new Map<string, { tokens: number; until: number }>();

  /** Takes one token of each bucket from what is held, when every one has one; else takes none. */
  takeAll(keys: string[], now: number): boolean {
    const leases = keys.map((key) => this.held.get(key));
    if (leases.some((lease) => !lease || lease.tokens < 1 || lease.until <= now)) return false;
    for (const lease of leases) lease!.tokens--;
    return true;
  }

  /** Whether `key` has tokens held. */
  holds(key: string, now: number): boolean {
    const lease = this.held.get(key);
    return !!lease && lease.tokens >= 1 && lease.until > now;
  }

  add(key: string, tokens: number, now: number): void {
    this.held.set(key, { tokens, until: now + LEASE_TTL_MS });
  }

  /** Forgets what has expired. */
  prune(now: number): void {
    for (const [key, lease] of this.held) if (lease.until <= now || lease.tokens < 1) this.held.delete(key);
  }
}

/** Requests charged by one statement at most. */
const MAX_BATCH = 256;

interface ChargeRow {
  request_index: number;
  wait_ms: number;
  bucket_index: number | null;
}

/**
 * PostgreSQL: the buckets are rows every server process charges. A request arriving while a charge is
 * under way waits for it and goes with the others that came meanwhile, as one statement (as the group
 * commit batches signatures): under load each statement charges many requests, locking each bucket
 * they share once.
 */
class PostgresRateLimiter implements RateLimiter {
  private readonly parents: OrganizationParents;
  private readonly leases = new Leases();
  private queue: Pending[] = [];
  private sending = false;
  private prunedAt = Date.now();

  constructor(
    private readonly config: RateLimitConfig,
    private readonly reader: Db,
    private readonly db: Db,
    private readonly logger: pino.Logger,
    private readonly pruneIntervalMs: number,
    private readonly leaseOf: (rate: Rate) => number,
  ) {
    this.parents = new OrganizationParents(reader);
  }

  async charge(kind: RequestClass, requester: Requester): Promise<void> {
    const buckets = bucketsOf(this.config, kind, requester, await this.parents.of(requester));
    if (buckets.length === 0) return;
    // Tokens taken ahead for every bucket it counts against: nothing to ask the database.
    if (
      this.leases.takeAll(
        buckets.filter((b) => b.role !== "reserve").map((b) => b.key),
        Date.now(),
      )
    )
      return;
    return new Promise<void>((resolve, reject) => {
      this.queue.push({ kind, requester, buckets, resolve, reject });
      if (!this.sending) void this.send();
    });
  }

  private async send(): Promise<void> {
    this.sending = true;
    while (this.queue.length > 0) {
      const batch = this.queue.splice(0, MAX_BATCH);
      try {
        await this.chargeBatch(batch);
      } catch (error) {
        for (const pending of batch) pending.reject(error);
      }
    }
    this.sending = false;
    this.prune();
  }

  private async chargeBatch(batch: Pending[]): Promise<void> {
    const rates = new Map(batch.flatMap((p) => p.buckets.map((b) => [b.key, b.rate] as const)));
    // Sorted: the function locks them in this order, as every other process does.
    const keys = [...rates.keys()].sort();
    const indexOf = new Map(keys.map((key, i) => [key, i + 1]));
    // After the requests, a lease of the tokens ahead for each busy bucket that holds none: asked for
    // alone, so that a bucket too low for it refuses the lease, never a request.
    const now = Date.now();
    const leases = keys.flatMap((key) => {
      const ahead = this.leaseOf(rates.get(key)!) - 1;
      const bucket = batch.flatMap((p) => p.buckets).find((b) => b.key === key)!;
      return ahead >= 1 && bucket.role !== "reserve" && !this.leases.holds(key, now) ? [{ key, ahead }] : [];
    });
    const entries = [
      ...batch.flatMap((p) => p.buckets.map((b) => ({ key: b.key, role: b.role, tokens: 1 }))),
      ...leases.map((lease) => ({ key: lease.key, role: "other" as Role, tokens: lease.ahead })),
    ];
    const requests = [...batch.map((p) => p.buckets.length), ...leases.map(() => 1)];
    const { rows } = await sql<ChargeRow>`select request_index, wait_ms, bucket_index from sigil_charge_rate_limits(
      ${keys}, ${keys.map((key) => intervalOf(rates.get(key)!))}, ${keys.map((key) => toleranceOf(rates.get(key)!))},
      ${entries.map((e) => indexOf.get(e.key)!)}, ${entries.map((e) => e.role)}, ${entries.map((e) => e.tokens)},
      ${requests}, ${[...batch.map((p) => p.requester.organizationId), ...leases.map(() => "")]},
      ${[...batch.map((p) => (p.buckets.some((b) => b.role === "reserve") ? p.requester.userId : null)), ...leases.map(() => null)]}
    )`.execute(this.reader);
    const answers = new Map(rows.map((row) => [row.request_index, row]));
    leases.forEach((lease, i) => {
      const answer = answers.get(batch.length + i + 1);
      if (answer && answer.wait_ms <= SLACK_MS) this.leases.add(lease.key, lease.ahead, Date.now());
    });
    batch.forEach((pending, i) => {
      const answer = answers.get(i + 1);
      if (!answer) return pending.reject(new Error(`rate limits: no answer for request ${i + 1} of a batch of ${batch.length}`));
      if (answer.wait_ms <= SLACK_MS) return pending.resolve();
      const key = answer.bucket_index === null ? undefined : keys[answer.bucket_index - 1];
      const bucket = pending.buckets.find((b) => b.key === key) ?? pending.buckets[0]!;
      pending.reject(refusal(pending.kind, bucket, answer.wait_ms));
    });
  }

  /** Forgets, now and then, the rows of buckets whose every token is back (a full bucket and a missing
   * row are the same), skipping rows a charge holds, a thousand rows a statement so that no charge
   * waits long for one. On the pool: the reads' connection does not wait for it. */
  private prune(): void {
    const now = Date.now();
    if (now - this.prunedAt < this.pruneIntervalMs) return;
    this.prunedAt = now;
    this.leases.prune(now);
    const table = sql.table(RATE_LIMIT_TABLE);
    const deleteSome = async (): Promise<void> => {
      const { numAffectedRows } = await sql`delete from ${table} where key in (
        select key from ${table} where tat < extract(epoch from clock_timestamp()) * 1000 limit ${PRUNE_BATCH} for update skip locked
      )`.execute(this.db);
      if (Number(numAffectedRows ?? 0) === PRUNE_BATCH) return deleteSome();
    };
    deleteSome().catch((error: unknown) => this.logger.warn({ err: error }, "rate limits: forgetting refilled buckets failed"));
  }
}

/** The limiter for a store, or none when rate limits are off (SIGIL_RATE_LIMITS=false).
 * `pruneIntervalMs`: how often the buckets that are full again are forgotten (a minute); `leaseOf`:
 * how many tokens of a bucket a process takes at once on PostgreSQL (a tenth of a second's worth). */
export function rateLimiter(
  config: RateLimitConfig | null,
  store: { dialect: Dialect; reader: Db; db: Db },
  logger: pino.Logger,
  { pruneIntervalMs = PRUNE_INTERVAL_MS, leaseOf = defaultLease }: { pruneIntervalMs?: number; leaseOf?: (rate: Rate) => number } = {},
): RateLimiter | undefined {
  if (!config) return undefined;
  return store.dialect === "postgres"
    ? new PostgresRateLimiter(config, store.reader, store.db, logger, pruneIntervalMs, leaseOf)
    : new MemoryRateLimiter(config, store.reader, Date.now, pruneIntervalMs);
}
