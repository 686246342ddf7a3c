// Sends the emails and SMS that carry one-time passwords (and, by email, credential bundles). An activity
// queues its message in its own transaction (sealed: it holds a code or a credential), so a message exists exactly when the activity committed;
// each server process runs a courier (an outbox worker, outbox-worker.ts) that sends what is due and
// shares the work with the others through a lease on the row. Email goes to an SMTP relay (nodemailer,
// SIGIL_SMTP_URL); SMS is POSTed as JSON { "to", "body" } to an HTTP provider (SIGIL_SMS_URL). A
// channel without a transport keeps its messages in the local outbox (`sigil outbox` prints them)
// until the code inside expires: nothing is dropped silently. A sent message's text is erased; failures are retried with backoff
// until the code expires or the attempts run out. (The courier also clears expired verification tokens.)
// Of every email it hands to the relay the courier records what it observed (list_email_events reads
// them): Send at the first attempt, Delivery with the relay's answer, DeliveryDelay for an attempt to be
// retried (a 4xx answer, no answer), Bounce for a permanent refusal (a 5xx answer) or when it gives up.
import type pino from "pino";
import nodemailer, { type Transporter } from "nodemailer";
import type { Store } from "../store/database.js";
import type { Keyring } from "../crypto/envelope.js";
import type { OutboundMessagesTable } from "../store/schema.js";
import type { MessagingConfig } from "../config.js";
import { newId } from "../store/ids.js";
import { OutboxWorker, type AttemptResult, type SendOutcome } from "./outbox-worker.js";
import { endpointOf, unreachableReason } from "./node-answers.js";

export type Channel = "email" | "sms";

/** What a message says; sealed at rest. */
export interface MessageContent {
  subject?: string;
  text: string;
  html?: string;
  from?: string;
  replyTo?: string;
}

export const messageIdentity = (row: Pick<OutboundMessagesTable, "id" | "organization_id">) => ({
  organizationId: row.organization_id,
  kind: "outbound_message",
  resourceId: row.id,
});

/** Whether a channel has somewhere to go; if not, its messages stay in the local outbox. */
export const hasTransport = (config: MessagingConfig, channel: Channel) => (channel === "email" ? !!config.smtpUrl : !!config.smsUrl);

const MAX_BACKOFF_MS = 60_000;
const RETENTION_MS = 7 * 24 * 3600 * 1000;
/** Email events outlive their messages: a delivery history of the last 30 days. */
const EVENT_RETENTION_MS = 30 * 24 * 3600 * 1000;

/** What one attempt at an email saw of the relay, for its events. */
interface Observed {
  from: string;
  startedAt: number;
  /** The relay's answer (its SMTP reply line), or the connection's failure. */
  answer?: string;
  /** The SMTP reply code, when the relay answered. */
  replyCode?: number;
}

/** A message leased for one attempt: the lease fences what the attempt may write. */
interface ClaimedMessage {
  row: OutboundMessagesTable;
  leaseUntil: number;
  observed?: Observed;
}

/** The SMTP reply nodemailer reports with a refusal: its code and line (none when the connection failed). */
function smtpReply(error: unknown): { replyCode?: number; answer?: string } {
  const { responseCode, response } = (error ?? {}) as { responseCode?: unknown; response?: unknown };
  return {
    ...(typeof responseCode === "number" ? { replyCode: responseCode } : {}),
    ...(typeof response === "string" ? { answer: response } : {}),
  };
}

/** The event an attempt at an email comes to (besides Send on the first): list_email_events' shape. */
function outcomeEvent(result: AttemptResult, observed: Observed, queuedAt: number): { type: string; details: Record<string, string> } {
  const diagnostic = observed.answer ?? result.error ?? "";
  if (result.status === "delivered")
    return {
      type: "Delivery",
      details: { deliverySmtpResponse: observed.answer ?? "", deliveryProcessingTimeMillis: String(Math.max(0, result.now - queuedAt)) },
    };
  if (result.status === "failed")
    return {
      type: "Bounce",
      details: { bounceType: result.gaveUp ? "Transient" : "Permanent", bounceSubType: "General", diagnosticCode: diagnostic },
    };
  return {
    type: "DeliveryDelay",
    details: {
      deliveryDelayType: observed.replyCode !== undefined ? "RecipientServerError" : "TransientCommunicationFailure",
      diagnosticCode: diagnostic,
    },
  };
}

export class MessageCourier extends OutboxWorker<ClaimedMessage> {
  private readonly mailer: Transporter | null;

  constructor(
    private readonly store: Store,
    private readonly keyring: Keyring,
    private readonly config: MessagingConfig,
    private readonly logger: pino.Logger,
    clock: () => number = Date.now,
  ) {
    // One message at a time. One deadline for the whole attempt (a relay that trickles its answers
    // never idles long enough for a socket timeout), well inside the lease (claim below).
    const { pollMs, timeoutMs, retryBaseMs, maxAttempts } = config;
    super({ pollMs, concurrency: 1, attemptTimeoutMs: timeoutMs * 2, retryBaseMs, maxBackoffMs: MAX_BACKOFF_MS, maxAttempts }, clock);
    // nodemailer's own timeouts run to minutes; an attempt must end within its lease, or another
    // process would take the message over and send it twice.
    const limits = { connectionTimeout: config.timeoutMs, greetingTimeout: config.timeoutMs, socketTimeout: config.timeoutMs };
    this.mailer = config.smtpUrl
      ? nodemailer.createTransport({ url: config.smtpUrl, ...limits } as Parameters<typeof nodemailer.createTransport>[0])
      : null;
  }

  override async close(): Promise<void> {
    await super.close();
    this.mailer?.close();
  }

  protected override reportFailure(error: unknown): void {
    this.logger.error({ err: error }, "message courier failed; retrying at the next poll");
  }

  /** Attempts are counted when their outcome is recorded. */
  protected override attemptOf({ row }: ClaimedMessage): number {
    return row.attempts + 1;
  }

  /** A message is of no use once the code inside has expired. */
  protected override expiresAt({ row }: ClaimedMessage): number {
    return row.expires_at;
  }

  protected override async claim(limit: number): Promise<ClaimedMessage[]> {
    const now = this.clock();
    // Outbox copies and undelivered messages whose code has expired are of no use: erase their text.
    // Their rows (recipient, status) stay a week for the operator, as do expired verification tokens.
    await this.store.transact("exclusive", async (trx) => {
      await this.recordExpiredRetries(trx, now);
      await trx
        .updateTable("outbound_messages")
        .set({ sealed_message: null, status: "expired" })
        .where("status", "in", ["pending", "outbox"])
        .where("expires_at", "<=", now)
        .execute();
      await trx
        .deleteFrom("outbound_messages")
        .where("expires_at", "<=", now - RETENTION_MS)
        .execute();
      // Kept past expiry a while, so a late login hears VERIFICATION_TOKEN_EXPIRED, not "unknown".
      await trx
        .deleteFrom("verification_tokens")
        .where("expires_at", "<=", now - RETENTION_MS)
        .execute();
      await trx
        .deleteFrom("email_events")
        .where("created_at", "<=", now - EVENT_RETENTION_MS)
        .execute();
    });
    const due = await this.store.db
      .selectFrom("outbound_messages")
      .selectAll()
      .where("status", "=", "pending")
      .where("next_attempt_at", "<=", now)
      .where((eb) => eb.or([eb("lease_until", "is", null), eb("lease_until", "<", now)]))
      .orderBy("created_at")
      .limit(20)
      .execute();
    const claimed: ClaimedMessage[] = [];
    for (const row of due) {
      if (claimed.length >= limit) break;
      // Claim it: only one process's update matches while the lease is free. The lease outlasts the
      // attempt's own deadline (twice timeoutMs), read from the clock now, not at the batch's start:
      // it is sent right away.
      const claimedAt = this.clock();
      const leaseUntil = claimedAt + this.config.timeoutMs * 3;
      const update = await this.store.transact("exclusive", (trx) =>
        trx
          .updateTable("outbound_messages")
          .set({ lease_until: leaseUntil })
          .where("id", "=", row.id)
          .where("status", "=", "pending")
          .where((eb) => eb.or([eb("lease_until", "is", null), eb("lease_until", "<", claimedAt)]))
          .executeTakeFirst(),
      );
      if (Number(update.numUpdatedRows) === 1 && row.sealed_message) claimed.push({ row, leaseUntil });
    }
    return claimed;
  }

  protected override async send(item: ClaimedMessage): Promise<SendOutcome> {
    const { row } = item;
    const content = JSON.parse(this.keyring.open(row.sealed_message!, messageIdentity(row)).toString("utf8")) as MessageContent;
    if (row.channel !== "email") {
      await this.sendSms(row.recipient, content);
      return { kind: "delivered", status: null };
    }
    const observed: Observed = { from: content.from ?? this.config.smtpFrom, startedAt: this.clock() };
    item.observed = observed;
    try {
      observed.answer = await this.sendEmail(row.recipient, content);
      return { kind: "delivered", status: null };
    } catch (error) {
      Object.assign(observed, smtpReply(error));
      const reason = error instanceof Error ? error.message : String(error);
      // A 5xx answer is the relay's (or the recipient's server's) permanent refusal: sending the same
      // message again would be refused again. A 4xx answer, or none, is worth another try.
      if (observed.replyCode !== undefined && observed.replyCode >= 500)
        return { kind: "failed", status: null, error: observed.answer ?? reason };
      return { kind: "retry", status: null, error: observed.answer ?? reason };
    }
  }

  /** An email that was tried and is still waiting for its next try when it expires is given up: a
   * Bounce, as when an attempt ends past the expiry. Its sender is its Send event's. */
  private async recordExpiredRetries(trx: Parameters<Parameters<Store["transact"]>[1]>[0], now: number): Promise<void> {
    const givenUp = await trx
      .selectFrom("outbound_messages as m")
      .innerJoin("email_events as e", (join) => join.onRef("e.message_id", "=", "m.id").on("e.event_type", "=", "Send"))
      .select(["m.id", "m.organization_id", "m.recipient", "m.last_error", "e.from_address"])
      .where("m.status", "=", "pending")
      .where("m.channel", "=", "email")
      .where("m.expires_at", "<=", now)
      .execute();
    if (givenUp.length === 0) return;
    await trx
      .insertInto("email_events")
      .values(
        givenUp.map((row) => ({
          id: newId(),
          organization_id: row.organization_id,
          message_id: row.id,
          event_type: "Bounce",
          from_address: row.from_address,
          to_address: row.recipient,
          recipient_key: foldAscii(row.recipient),
          details: JSON.stringify({ bounceType: "Transient", bounceSubType: "General", diagnosticCode: row.last_error ?? "" }),
          timestamp: now,
          created_at: now,
        })),
      )
      .execute();
  }

  /** Writes an email attempt's events in the transaction that records its outcome. */
  private async recordEvents(trx: Parameters<Parameters<Store["transact"]>[1]>[0], item: ClaimedMessage, result: AttemptResult) {
    const { row, observed } = item;
    if (row.channel !== "email" || !observed) return;
    const event = (type: string, details: Record<string, string>, timestamp: number) => ({
      id: newId(),
      organization_id: row.organization_id,
      message_id: row.id,
      event_type: type,
      from_address: observed.from,
      to_address: row.recipient,
      recipient_key: foldAscii(row.recipient),
      details: JSON.stringify(details),
      timestamp,
      created_at: result.now,
    });
    const outcome = outcomeEvent(result, observed, row.created_at);
    const events = [
      ...(result.attempt === 1 ? [event("Send", {}, observed.startedAt)] : []),
      event(outcome.type, outcome.details, result.now),
    ];
    await trx.insertInto("email_events").values(events).execute();
  }

  protected override async record(item: ClaimedMessage, result: AttemptResult): Promise<void> {
    const { row, leaseUntil } = item;
    const { attempt: attempts, status, gaveUp, error, now, retryInMs } = result;
    // Fenced by the lease: an attempt that outlived it (another process took the message over) writes
    // nothing, events included.
    const update = (changes: Partial<OutboundMessagesTable>) =>
      this.store.transact("exclusive", async (trx) => {
        const updated = await trx
          .updateTable("outbound_messages")
          .set(changes)
          .where("id", "=", row.id)
          .where("lease_until", "=", leaseUntil)
          .executeTakeFirst();
        if (Number(updated.numUpdatedRows) === 1) await this.recordEvents(trx, item, result);
      });
    if (status === "delivered") {
      await update({ status: "sent", sealed_message: null, attempts, sent_at: now, lease_until: null, last_error: null });
      this.logger.info({ messageId: row.id, organizationId: row.organization_id, channel: row.channel, attempts }, "message sent");
      return;
    }
    await update(
      status === "failed"
        ? { status: "failed", sealed_message: null, attempts, lease_until: null, last_error: error }
        : { attempts, next_attempt_at: now + retryInMs, lease_until: null, last_error: error },
    );
    // The error names the transport's complaint, never the message (it carries a code).
    this.logger.warn(
      { messageId: row.id, organizationId: row.organization_id, channel: row.channel, attempts, error, gaveUp },
      "message not sent",
    );
  }

  /** Hands the email to the relay; returns the relay's answer (its SMTP reply line). */
  private async sendEmail(to: string, content: MessageContent): Promise<string> {
    if (!this.mailer) throw new Error("no SMTP relay configured (SIGIL_SMTP_URL)");
    const info = await this.mailer.sendMail({
      from: content.from ?? this.config.smtpFrom,
      to,
      replyTo: content.replyTo,
      subject: content.subject,
      text: content.text,
      html: content.html,
    });
    return String((info as { response?: unknown }).response ?? "");
  }

  private async sendSms(to: string, content: MessageContent): Promise<void> {
    if (!this.config.smsUrl) throw new Error("no SMS provider configured (SIGIL_SMS_URL)");
    // The URL may hold the provider's credentials: a user name and password go as Basic authorization
    // (SIGIL_SMS_TOKEN, when set, as Bearer instead), and a failure is told in Sigil's words only, as
    // the error is stored and logged.
    const endpoint = endpointOf(this.config.smsUrl);
    let response: Response;
    try {
      response = await fetch(endpoint.url, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          ...endpoint.headers,
          ...(this.config.smsToken ? { authorization: `Bearer ${this.config.smsToken}` } : {}),
        },
        body: JSON.stringify({ to, body: content.text }),
        signal: AbortSignal.timeout(this.config.timeoutMs),
      });
    } catch (error) {
      if ((error as { name?: unknown } | null)?.name === "TimeoutError")
        throw new Error(`SMS provider did not answer within ${this.config.timeoutMs} ms`);
      throw new Error(`SMS provider could not be reached (${unreachableReason(error)})`);
    }
    await response.arrayBuffer().catch(() => undefined);
    if (!response.ok) throw new Error(`SMS provider answered ${response.status}`);
  }
}

/** ASCII letters lower-cased (not toLowerCase, which folds look-alikes such as the Kelvin sign). */
export const foldAscii = (text: string) => text.replace(/[A-Z]/g, (c) => c.toLowerCase());

/** The messages kept in the local outbox (no transport configured), opened for the operator. */
export async function readOutbox(
  store: Store,
  keyring: Keyring,
  now: number,
): Promise<
  Array<{
    id: string;
    organizationId: string;
    channel: string;
    recipient: string;
    createdAt: string;
    expiresAt: string;
    content: MessageContent;
  }>
> {
  const rows = await store.db
    .selectFrom("outbound_messages")
    .selectAll()
    .where("status", "=", "outbox")
    .where("expires_at", ">", now)
    .orderBy("created_at")
    .execute();
  return rows.map((row) => ({
    id: row.id,
    organizationId: row.organization_id,
    channel: row.channel,
    recipient: row.recipient,
    createdAt: new Date(row.created_at).toISOString(),
    expiresAt: new Date(row.expires_at).toISOString(),
    content: JSON.parse(keyring.open(row.sealed_message!, messageIdentity(row)).toString("utf8")) as MessageContent,
  }));
}
