// Sends the emails and SMS that carry one-time passwords. An activity queues its message in its own
// transaction (sealed: it holds a code), so a message exists exactly when the activity committed;
// each server process runs a courier that sends what is due and shares the work with the others
// through a lease on the row. Email goes to an SMTP relay (nodemailer, SIGIL_SMTP_URL); SMS is POSTed
// as JSON { "to", "body" } to an HTTP provider (SIGIL_SMS_URL). A channel without a transport keeps
// its messages in the local outbox (`sigil outbox` prints them) until the code inside expires:
// nothing is dropped silently. A sent message's text is erased; failures are retried with backoff
// until the code expires or the attempts run out. (The courier also clears expired verification tokens.)
import type pino from "pino";
import nodemailer, { type Transporter } from "nodemailer";
import type { Store } from "../store/database.js";
import type { Keyring } from "../crypto/envelope.js";
import type { OutboundMessagesTable } from "../store/schema.js";
import type { MessagingConfig } from "../config.js";

export type Channel = "email" | "sms";

/** What a message says; sealed at rest. */
export interface MessageContent {
  subject?: string;
  text: string;
  html?: string;
  from?: string;
  replyTo?: string;
}

export const messageIdentity = (row: Pick<OutboundMessagesTable, "id" | "organization_id">) => ({ organizationId: row.organization_id, kind: "outbound_message", resourceId: row.id });

/** Whether a channel has somewhere to go; if not, its messages stay in the local outbox. */
export const hasTransport = (config: MessagingConfig, channel: Channel) => (channel === "email" ? !!config.smtpUrl : !!config.smsUrl);

const MAX_BACKOFF_MS = 60_000;
const RETENTION_MS = 7 * 24 * 3600 * 1000;

export class MessageCourier {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private closed = false;
  private readonly mailer: Transporter | null;

  constructor(
    private readonly store: Store,
    private readonly keyring: Keyring,
    private readonly config: MessagingConfig,
    private readonly logger: pino.Logger,
    private readonly clock: () => number = Date.now,
  ) {
    // nodemailer's own timeouts run to minutes; an attempt must end within its lease, or another
    // process would take the message over and send it twice.
    const limits = { connectionTimeout: config.timeoutMs, greetingTimeout: config.timeoutMs, socketTimeout: config.timeoutMs };
    this.mailer = config.smtpUrl ? nodemailer.createTransport({ url: config.smtpUrl, ...limits } as Parameters<typeof nodemailer.createTransport>[0]) : null;
  }

  start(): void {
    this.timer = setInterval(() => this.notify(), this.config.pollMs);
    this.timer.unref();
    this.notify();
  }

  /** Looks for due messages now (called after a commit that queued one). */
  notify(): void {
    if (this.closed) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.sendDue()
      .catch((error) => this.logger.error({ err: error }, "message courier failed; retrying at the next poll"))
      .finally(() => {
        this.running = null;
        if (this.again) {
          this.again = false;
          this.notify();
        }
      });
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.running;
    this.mailer?.close();
  }

  private async sendDue(): Promise<void> {
    const now = this.clock();
    // Outbox copies and undelivered messages whose code has expired are of no use: erase their text.
    // Their rows (recipient, status) stay a week for the operator, as do expired verification tokens.
    await this.store.transact("exclusive", async (trx) => {
      await trx.updateTable("outbound_messages").set({ sealed_message: null, status: "expired" }).where("status", "in", ["pending", "outbox"]).where("expires_at", "<=", now).execute();
      await trx.deleteFrom("outbound_messages").where("expires_at", "<=", now - RETENTION_MS).execute();
      // Kept past expiry a while, so a late login hears VERIFICATION_TOKEN_EXPIRED, not "unknown".
      await trx.deleteFrom("verification_tokens").where("expires_at", "<=", now - RETENTION_MS).execute();
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
    for (const row of due) {
      if (this.closed) return;
      // Claim it: only one process's update matches while the lease is free. The lease outlasts the
      // attempt's own deadline (attempt below), read from the clock now, not at the batch's start.
      const claimedAt = this.clock();
      const leaseUntil = claimedAt + this.config.timeoutMs * 3;
      const claimed = await this.store.transact("exclusive", (trx) =>
        trx
          .updateTable("outbound_messages")
          .set({ lease_until: leaseUntil })
          .where("id", "=", row.id)
          .where("status", "=", "pending")
          .where((eb) => eb.or([eb("lease_until", "is", null), eb("lease_until", "<", claimedAt)]))
          .executeTakeFirst(),
      );
      if (Number(claimed.numUpdatedRows) !== 1 || !row.sealed_message) continue;
      await this.attempt(row, leaseUntil);
    }
  }

  private async attempt(row: OutboundMessagesTable, leaseUntil: number): Promise<void> {
    const attempts = row.attempts + 1;
    let error: string | null = null;
    try {
      const content = JSON.parse(this.keyring.open(row.sealed_message!, messageIdentity(row)).toString("utf8")) as MessageContent;
      const sending = row.channel === "email" ? this.sendEmail(row.recipient, content) : this.sendSms(row.recipient, content);
      // One deadline for the whole attempt (a relay that trickles its answers never idles long
      // enough for a socket timeout), well inside the lease.
      let timer: NodeJS.Timeout | undefined;
      const deadline = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new Error(`no answer within ${this.config.timeoutMs * 2} ms`)), this.config.timeoutMs * 2);
      });
      try {
        await Promise.race([sending, deadline]);
      } finally {
        clearTimeout(timer);
        sending.catch(() => undefined);
      }
    } catch (failure) {
      error = failure instanceof Error ? failure.message : String(failure);
    }
    const now = this.clock();
    const fenced = (trx: Parameters<Parameters<Store["transact"]>[1]>[0]) => trx.updateTable("outbound_messages").where("id", "=", row.id).where("lease_until", "=", leaseUntil);
    if (error === null) {
      await this.store.transact("exclusive", (trx) => fenced(trx).set({ status: "sent", sealed_message: null, attempts, sent_at: now, lease_until: null, last_error: null }).execute());
      this.logger.info({ messageId: row.id, organizationId: row.organization_id, channel: row.channel, attempts }, "message sent");
      return;
    }
    const giveUp = attempts >= this.config.maxAttempts || now >= row.expires_at;
    const next = now + Math.min(MAX_BACKOFF_MS, this.config.retryBaseMs * 2 ** (attempts - 1));
    await this.store.transact("exclusive", (trx) =>
      fenced(trx)
        .set(giveUp ? { status: "failed", sealed_message: null, attempts, lease_until: null, last_error: error } : { attempts, next_attempt_at: next, lease_until: null, last_error: error })
        .execute(),
    );
    // The error names the transport's complaint, never the message (it carries a code).
    this.logger.warn({ messageId: row.id, organizationId: row.organization_id, channel: row.channel, attempts, error, gaveUp: giveUp }, "message not sent");
  }

  private async sendEmail(to: string, content: MessageContent): Promise<void> {
    if (!this.mailer) throw new Error("no SMTP relay configured (SIGIL_SMTP_URL)");
    await this.mailer.sendMail({ from: content.from ?? this.config.smtpFrom, to, replyTo: content.replyTo, subject: content.subject, text: content.text, html: content.html });
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
export async function readOutbox(store: Store, keyring: Keyring, now: number): Promise<Array<{ id: string; organizationId: string; channel: string; recipient: string; createdAt: string; expiresAt: string; content: MessageContent }>> {
  const rows = await store.db.selectFrom("outbound_messages").selectAll().where("status", "=", "outbox").where("expires_at", ">", now).orderBy("created_at").execute();
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
