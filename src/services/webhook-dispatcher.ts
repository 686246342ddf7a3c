// Sends the webhook outbox: an outbox worker (outbox-worker.ts: polling, concurrency, deadline, retries)
// over webhook_deliveries. Each server process runs one dispatcher; they share the work through the
// database: a delivery is *claimed* (leased for a while) in a transaction before it is sent, so two
// processes never send it at once (PostgreSQL: FOR UPDATE SKIP LOCKED), and one that crashes
// mid-send leaves a lease that expires, after which another sends it again. For each destination, an
// organization's events go out in the order they happened: a delivery waits while an earlier one to
// the same place is still pending.
//
// Attempts are signed afresh (contract v1: Ed25519 over "v1.ed25519.<keyId>.<timestamp>.<eventId>."
// and the body), with the same event id every time. 2xx is delivered; network errors, timeouts and
// 5xx are retried with exponential backoff; 3xx (redirects are not followed), 4xx and 429 end it.
// The destination's addresses are checked again when dialling, so a name that has come to resolve
// to a private address is not reached.
import http from "node:http";
import https from "node:https";
import net from "node:net";
import dns from "node:dns";
import type pino from "pino";
import { sql } from "kysely";
import { OutboxWorker, type AttemptResult, type SendOutcome } from "./outbox-worker.js";
import type { Store } from "../store/database.js";
import type { WebhookDeliveriesTable } from "../store/schema.js";
import type { WebhookConfig } from "../config.js";
import type { ServiceSigningKey } from "./service-keys.js";
import { forbiddenAddress, redactedUrl, type DestinationPolicy } from "./webhook-destinations.js";

const MAX_BACKOFF_MS = 60 * 60 * 1000;

/** The headers of one signed attempt. */
export function signedHeaders(
  key: ServiceSigningKey,
  delivery: Pick<WebhookDeliveriesTable, "id" | "organization_id" | "event_type">,
  body: Buffer,
  timestampMs: number,
): Record<string, string> {
  const prefix = Buffer.from(`v1.ed25519.${key.keyId}.${timestampMs}.${delivery.id}.`, "utf8");
  return {
    "content-type": "application/json",
    "content-length": String(body.length),
    "x-turnkey-organization-id": delivery.organization_id,
    "x-turnkey-event-type": delivery.event_type,
    "x-turnkey-timestamp": String(timestampMs),
    "x-turnkey-webhook-version": "1",
    "x-turnkey-event-id": delivery.id,
    "x-turnkey-signature-key-id": key.keyId,
    "x-turnkey-signature-algorithm": "ed25519",
    "x-turnkey-signature-version": "v1",
    "x-turnkey-signature": key.sign(Buffer.concat([prefix, body])).toString("hex"),
  };
}

/** A DNS lookup that refuses addresses the policy forbids (checked at the moment of dialling). */
function guardedLookup(policy: DestinationPolicy): net.LookupFunction {
  return (hostname, options, callback) => {
    dns.lookup(hostname, { ...options, all: true }, (error, addresses) => {
      if (error) return callback(error, "", 0);
      const list = addresses as dns.LookupAddress[];
      const problem = list.map((a) => forbiddenAddress(a.address, policy)).find(Boolean);
      if (problem) return callback(Object.assign(new Error(`destination refused: ${problem}`), { code: "EDESTINATION" }), "", 0);
      // biome-ignore lint/suspicious/noExplicitAny: node's lookup callback has an overload for `all: true` that its type does not expose
      if ((options as dns.LookupOptions).all) return (callback as any)(null, list);
      callback(null, list[0]!.address, list[0]!.family);
    });
  };
}

export class WebhookDispatcher extends OutboxWorker<WebhookDeliveriesTable> {
  constructor(
    private readonly store: Store,
    private readonly key: ServiceSigningKey,
    private readonly config: WebhookConfig,
    private readonly logger: pino.Logger,
    clock: () => number = Date.now,
  ) {
    const { pollMs, concurrency, timeoutMs, retryBaseMs, maxAttempts } = config;
    super({ pollMs, concurrency, attemptTimeoutMs: timeoutMs, retryBaseMs, maxBackoffMs: MAX_BACKOFF_MS, maxAttempts }, clock);
  }

  protected override reportFailure(err: unknown, delivery?: WebhookDeliveriesTable): void {
    if (delivery) this.logger.error({ err, eventId: delivery.id }, "webhook delivery could not be recorded");
    else this.logger.warn({ err }, "webhook dispatcher could not claim deliveries");
  }

  /** The claim counts the attempt. */
  protected override attemptOf(delivery: WebhookDeliveriesTable): number {
    return delivery.attempts;
  }

  /** Leases up to `limit` due deliveries, each the oldest pending one of its destination and
   * organization whose endpoint is not paused, with the URL its destination has now. */
  protected override async claim(limit: number): Promise<WebhookDeliveriesTable[]> {
    const now = this.clock();
    // Idle servers look first, without taking the write lock.
    const due = await this.store.reader
      .selectFrom("webhook_deliveries")
      .select("id")
      .where("status", "=", "pending")
      .where("next_attempt_at", "<=", now)
      .limit(1)
      .executeTakeFirst();
    if (!due) return [];
    // Longer than an attempt can last (its deadline is timeoutMs), so a lease never lapses mid-send.
    const leaseUntil = now + this.config.timeoutMs * 2 + 5_000;
    const skipLocked = this.store.dialect === "postgres" ? sql`for update skip locked` : sql``;
    return this.store.transact("exclusive", async (trx) => {
      const result = await sql<WebhookDeliveriesTable>`
        update webhook_deliveries set lease_until = ${leaseUntil}, attempts = attempts + 1, updated_at = ${now}
        where id in (
          select d.id from webhook_deliveries d
          where d.status = 'pending' and d.next_attempt_at <= ${now} and (d.lease_until is null or d.lease_until < ${now})
            and (d.endpoint_id is null or exists (select 1 from webhook_endpoints w where w.id = d.endpoint_id and w.is_active = 1))
            and not exists (
              select 1 from webhook_deliveries e
              where e.destination = d.destination and e.event_organization_id = d.event_organization_id and e.status = 'pending'
                and (e.created_at < d.created_at or (e.created_at = d.created_at and e.id < d.id))
            )
          order by d.created_at, d.id
          limit ${limit}
          ${skipLocked}
        )
        returning *`.execute(trx);
      const claimed = result.rows.map((row) => ({
        ...row,
        created_at: Number(row.created_at),
        next_attempt_at: Number(row.next_attempt_at),
        attempts: Number(row.attempts),
        lease_until: leaseUntil,
      }));
      if (claimed.length === 0) return claimed;
      // Send to where the destination points now (an endpoint's URL may have changed since).
      const endpointIds = claimed.flatMap((d) => (d.endpoint_id ? [d.endpoint_id] : []));
      const featureOwners = claimed.flatMap((d) => (d.endpoint_id ? [] : [d.organization_id]));
      const endpoints = endpointIds.length
        ? await trx.selectFrom("webhook_endpoints").select(["id", "url", "is_active"]).where("id", "in", endpointIds).execute()
        : [];
      // On PostgreSQL each statement reads the database as of its own start: an endpoint paused (and
      // perhaps moved) between the claim and this read is seen here with its new URL. Such a delivery
      // is handed back untouched, to be sent once the endpoint is active again.
      const paused = claimed.filter((d) => d.endpoint_id && endpoints.find((e) => e.id === d.endpoint_id)?.is_active !== 1);
      if (paused.length > 0)
        await trx
          .updateTable("webhook_deliveries")
          .set({ lease_until: null, attempts: sql`attempts - 1` })
          .where(
            "id",
            "in",
            paused.map((d) => d.id),
          )
          .execute();
      const features = featureOwners.length
        ? await trx
            .selectFrom("organization_features")
            .select(["organization_id", "value"])
            .where("name", "=", "FEATURE_NAME_WEBHOOK")
            .where("organization_id", "in", featureOwners)
            .execute()
        : [];
      const sendable = claimed.filter((d) => !paused.includes(d));
      for (const delivery of sendable) {
        const current = delivery.endpoint_id
          ? endpoints.find((e) => e.id === delivery.endpoint_id)?.url
          : features.find((f) => f.organization_id === delivery.organization_id)?.value;
        if (current) delivery.url = current;
      }
      return sendable;
    });
  }

  protected override async record(
    delivery: WebhookDeliveriesTable,
    { outcome, status, gaveUp, error, now, retryInMs }: AttemptResult,
  ): Promise<void> {
    await this.store.transact("exclusive", (trx) =>
      trx
        .updateTable("webhook_deliveries")
        .set({
          status,
          url: delivery.url,
          lease_until: null,
          last_status_code: outcome.status,
          last_error: gaveUp ? `${error} (gave up after ${delivery.attempts} attempts)` : error,
          next_attempt_at: status === "pending" ? now + retryInMs : delivery.next_attempt_at,
          delivered_at: status === "delivered" ? now : null,
          updated_at: now,
        })
        .where("id", "=", delivery.id)
        .where("status", "=", "pending")
        // Only this attempt's outcome: never one of an attempt whose lease another claim replaced.
        .where("attempts", "=", delivery.attempts)
        .execute(),
    );
    const log = {
      eventId: delivery.id,
      activityId: delivery.activity_id,
      url: redactedUrl(delivery.url),
      attempt: delivery.attempts,
      status: outcome.status,
    };
    if (status === "delivered") this.logger.info(log, "webhook delivered");
    else if (status === "failed") this.logger.warn({ ...log, error }, "webhook delivery failed for good");
    else this.logger.info({ ...log, error, retryInMs }, "webhook delivery will be retried");
  }

  /** One signed POST; never throws. The worker's deadline covers it all — lookup, connect, TLS,
   * sending, the status line — and its abort destroys the request. */
  protected override send(delivery: WebhookDeliveriesTable, signal: AbortSignal): Promise<SendOutcome> {
    const body = Buffer.from(delivery.body, "utf8");
    let url: URL;
    try {
      url = new URL(delivery.url);
    } catch {
      return Promise.resolve({ kind: "failed", status: null, error: `not a URL: ${delivery.url}` });
    }
    const host = url.hostname.replace(/^\[|\]$/g, "");
    if (net.isIP(host)) {
      const problem = forbiddenAddress(host, this.config);
      if (problem) return Promise.resolve({ kind: "failed", status: null, error: `destination refused: ${problem}` });
    }
    const headers = signedHeaders(this.key, delivery, body, this.clock());
    const transport = url.protocol === "https:" ? https : http;
    return new Promise<SendOutcome>((resolve) => {
      let settled = false;
      const settle = (outcome: SendOutcome) => {
        if (settled) return;
        settled = true;
        request?.destroy();
        resolve(outcome);
      };
      signal.addEventListener("abort", () => settle({ kind: "retry", status: null, error: "the attempt's deadline passed" }), {
        once: true,
      });
      let request: http.ClientRequest | undefined;
      try {
        request = transport.request(url, { method: "POST", headers, lookup: guardedLookup(this.config), agent: false }, (response) => {
          // The status line decides; the body is not needed.
          const status = response.statusCode ?? 0;
          if (status >= 200 && status < 300) settle({ kind: "delivered", status });
          else if (status >= 500) settle({ kind: "retry", status, error: `the receiver answered ${status}` });
          else
            settle({
              kind: "failed",
              status,
              error: `the receiver answered ${status}${status >= 300 && status < 400 ? " (redirects are not followed)" : ""}`,
            });
        });
        request.on("error", (error: NodeJS.ErrnoException) => {
          if (error.code === "EDESTINATION") settle({ kind: "failed", status: null, error: error.message });
          else settle({ kind: "retry", status: null, error: error.message });
        });
        request.end(body);
      } catch (error) {
        settle({
          kind: "failed",
          status: null,
          error: `the request could not be made: ${error instanceof Error ? error.message : String(error)}`,
        });
      }
    });
  }
}
