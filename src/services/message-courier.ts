// Sends the emails and SMS that carry one-time passwords. An activity queues its message in its own
// transaction (sealed: it holds a code), so a message exists exactly when the activity committed;
// each server process runs a courier (an outbox worker, outbox-worker.ts) that sends what is due and
// shares the work with the others through a lease on the row. Email goes to an SMTP relay (nodemailer,
// SIGIL_SMTP_URL); SMS is POSTed as JSON { "to", "body" } to an HTTP provider (SIGIL_SMS_URL). A
// channel without a transport keeps its messages in the local outbox (`sigil outbox` prints them)
// until the code inside expires: nothing is dropped silently. A sent message's text is erased; failures are retried with backoff
// until the code expires or the attempts run out. (The courier also clears expired verification tokens.)
import type pino from "pino";
import nodemailer, { type Transporter } from "nodemailer";
import type { Store } from "../store/database.js";
import type { Keyring } from "../crypto/envelope.js";
import type { OutboundMessagesTable } from "../store/schema.js";
import type { MessagingConfig } from "../config.js";
import { OutboxWorker, type AttemptResult, type SendOutcome } from "./outbox-worker.js";

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

/** A message leased for one attempt: the lease fences what the attempt may write. */
interface ClaimedMessage {
  row: OutboundMessagesTable;
  leaseUntil: number;
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

  protected override async send({ row }: ClaimedMessage): Promise<SendOutcome> {
    const content = JSON.parse(this.keyring.open(row.sealed_message!, messageIdentity(row)).toString("utf8")) as MessageContent;
    await (row.channel === "email" ? this.sendEmail(row.recipient, content) : this.sendSms(row.recipient, content));
    return { kind: "delivered", status: null };
  }

  protected override async record({ row, leaseUntil }: ClaimedMessage, result: AttemptResult): Promise<void> {
    const { attempt: attempts, status, gaveUp, error, now, retryInMs } = result;
    const fenced = (trx: Parameters<Parameters<Store["transact"]>[1]>[0]) =>
      trx.updateTable("outbound_messages").where("id", "=", row.id).where("lease_until", "=", leaseUntil);
    if (status === "delivered") {
      await this.store.transact("exclusive", (trx) =>
        fenced(trx).set({ status: "sent", sealed_message: null, attempts, sent_at: now, lease_until: null, last_error: null }).execute(),
      );
      this.logger.info({ messageId: row.id, organizationId: row.organization_id, channel: row.channel, attempts }, "message sent");
      return;
    }
    await this.store.transact("exclusive", (trx) =>
      fenced(trx)
        .set(
          status === "failed"
            ? { status: "failed", sealed_message: null, attempts, lease_until: null, last_error: error }
            : { attempts, next_attempt_at: now + retryInMs, lease_until: null, last_error: error },
        )
        .execute(),
    );
    // The error names the transport's complaint, never the message (it carries a code).
    this.logger.warn(
      { messageId: row.id, organizationId: row.organization_id, channel: row.channel, attempts, error, gaveUp },
      "message not sent",
    );
  }

  private async sendEmail(to: string, content: MessageContent): Promise<void> {
    if (!this.mailer) throw new Error("no SMTP relay configured (SIGIL_SMTP_URL)");
    await this.mailer.sendMail({
      from: content.from ?? this.config.smtpFrom,
      to,
      replyTo: content.replyTo,
      subject: content.subject,
      text: content.text,
      html: content.html,
    });
  }

  private async sendSms(to: string, content: MessageContent): Promise<void> {
    if (!this.config.smsUrl) throw new Error("no SMS provider configured (SIGIL_SMS_URL)");
    const response = await fetch(this.config.smsUrl, {
      method: "POST",
      headers: { "content-type": "application/json", ...(this.config.smsToken ? { authorization: `Bearer ${this.config.smsToken}` } : {}) },
      body: JSON.stringify({ to, body: content.text }),
      signal: AbortSignal.timeout(this.config.timeoutMs),
    });
    await response.arrayBuffer().catch(() => undefined);
    if (!response.ok) throw new Error(`SMS provider answered ${response.status}`);
  }
}

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
