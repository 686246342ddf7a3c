// The durable outbox worker: what the webhook dispatcher and the message courier share. Work is queued
// as rows in the same transaction as the change it announces, so it exists exactly when that change
// committed; each server process runs one worker per outbox and they share the rows through leases
// (a row is claimed, leased for longer than an attempt can last, before it is sent). This class is the
// loop: polling and being notified, claiming as many as there are free sending slots, one deadline per
// attempt, retries with exponential backoff until the attempts (or the item's usefulness) run out,
// and a stop that waits for what is being sent. An outbox says only what differs: which rows are due
// and how they are leased (claim), how one is sent (send), and how an outcome is written (record).

/** What one attempt came to. `retry` is tried again (with backoff) until the attempts run out;
 * `failed` ends it at once. `status` is the receiver's HTTP status where there was one. */
export type SendOutcome =
  | { kind: "delivered"; status: number | null }
  | { kind: "retry"; status: number | null; error: string }
  | { kind: "failed"; status: number | null; error: string };

/** What the worker decided after an attempt; `record` writes it. */
export interface AttemptResult {
  outcome: SendOutcome;
  /** Which attempt this was (1 for the first). */
  attempt: number;
  /** delivered; pending (to be tried again at now + retryInMs); or failed for good. */
  status: "delivered" | "pending" | "failed";
  /** A retryable failure that will not be retried: the attempts ran out or the item expired. */
  gaveUp: boolean;
  /** The outcome's error (null once delivered). */
  error: string | null;
  /** The clock when the attempt ended. */
  now: number;
  retryInMs: number;
}

export interface OutboxSettings {
  /** How often to look for due items when nobody said there are new ones (ms). */
  pollMs: number;
  /** How many items are being sent at once, at most. */
  concurrency: number;
  /** One deadline for a whole attempt (ms); the item's lease must outlast it. */
  attemptTimeoutMs: number;
  /** The first retry waits this long (ms); each further one twice as long as the one before… */
  retryBaseMs: number;
  /** …but never longer than this (ms). */
  maxBackoffMs: number;
  /** The attempt after which a retryable failure is given up. */
  maxAttempts: number;
}

/** The wait before the next attempt after a retryable failure of attempt number `attempt`. */
export const backoffMs = (settings: Pick<OutboxSettings, "retryBaseMs" | "maxBackoffMs">, attempt: number) =>
  Math.min(settings.maxBackoffMs, settings.retryBaseMs * 2 ** Math.max(0, attempt - 1));

export abstract class OutboxWorker<Item> {
  private timer: NodeJS.Timeout | null = null;
  private inFlight = 0;
  private polling: Promise<void> | null = null;
  private again = false;
  private closed = false;
  private readonly sending = new Set<Promise<void>>();
  /** Told of each attempt's result once it is recorded (the metrics). */
  private onAttempt?: (status: AttemptResult["status"]) => void;

  constructor(
    protected readonly settings: OutboxSettings,
    protected readonly clock: () => number = Date.now,
  ) {}

  /** Leases up to `limit` due items (none that another process holds) and returns them. */
  protected abstract claim(limit: number): Promise<Item[]>;
  /** Which attempt sending `item` now is (1 for the first). */
  protected abstract attemptOf(item: Item): number;
  /** One attempt. A throw is a retryable failure (its message is the error); `signal` aborts when the
   * attempt's deadline has passed. Never give a body or secret in an error: errors are stored and logged. */
  protected abstract send(item: Item, signal: AbortSignal): Promise<SendOutcome>;
  /** Writes the attempt's result (fenced by the item's lease or attempt number) and logs it. */
  protected abstract record(item: Item, result: AttemptResult): Promise<void>;
  /** The worker itself failed: a claim (no item), or the record of an item's attempt. */
  protected abstract reportFailure(err: unknown, item?: Item): void;
  /** Until when an item is worth sending; none is retried past it. */
  protected expiresAt?(item: Item): number;

  /** Whether the worker has been started and not closed (what /ready reports). */
  get running(): boolean {
    return this.timer !== null && !this.closed;
  }

  /** `recorder` is told of each attempt's result once it is recorded. */
  observeAttempts(recorder: (status: AttemptResult["status"]) => void): void {
    this.onAttempt = recorder;
  }

  start(): void {
    this.timer = setInterval(() => this.notify(), this.settings.pollMs);
    this.timer.unref();
    this.notify();
  }

  /** Looks for due items now (new ones were just committed, or a send finished). */
  notify(): void {
    if (this.closed) return;
    if (this.polling) {
      this.again = true;
      return;
    }
    this.polling = this.poll()
      .catch((err) => this.reportFailure(err))
      .finally(() => {
        this.polling = null;
        if (this.again) {
          this.again = false;
          this.notify();
        }
      });
  }

  /** Stops looking and waits for the attempts under way to be recorded. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearInterval(this.timer);
    await this.polling;
    await Promise.allSettled([...this.sending]);
  }

  private async poll(): Promise<void> {
    const room = this.settings.concurrency - this.inFlight;
    if (room <= 0) return;
    for (const item of await this.claim(room)) {
      this.inFlight++;
      const sent: Promise<void> = this.deliver(item)
        .catch((err) => this.reportFailure(err, item))
        .finally(() => {
          this.inFlight--;
          this.sending.delete(sent);
          this.notify();
        });
      this.sending.add(sent);
    }
  }

  private async deliver(item: Item): Promise<void> {
    const outcome = await this.attempt(item);
    const now = this.clock();
    const attempt = this.attemptOf(item);
    const expiresAt = this.expiresAt?.(item);
    const gaveUp = outcome.kind === "retry" && (attempt >= this.settings.maxAttempts || (expiresAt !== undefined && now >= expiresAt));
    const status = outcome.kind === "delivered" ? "delivered" : outcome.kind === "failed" || gaveUp ? "failed" : "pending";
    const error = outcome.kind === "delivered" ? null : outcome.error;
    await this.record(item, { outcome, attempt, status, gaveUp, error, now, retryInMs: backoffMs(this.settings, attempt) });
    this.onAttempt?.(status);
  }

  /** `send` within one deadline for the whole attempt, so a receiver that trickles bytes (and so never
   * idles long enough for a socket timeout) cannot hold a sending slot, or the item, for long. */
  private async attempt(item: Item): Promise<SendOutcome> {
    const timeoutMs = this.settings.attemptTimeoutMs;
    const abort = new AbortController();
    let timer: NodeJS.Timeout | undefined;
    const deadline = new Promise<SendOutcome>((resolve) => {
      timer = setTimeout(() => {
        resolve({ kind: "retry", status: null, error: `no answer within ${timeoutMs} ms` });
        abort.abort();
      }, timeoutMs);
    });
    const sending = this.send(item, abort.signal).catch(
      (failure): SendOutcome => ({ kind: "retry", status: null, error: failure instanceof Error ? failure.message : String(failure) }),
    );
    try {
      return await Promise.race([sending, deadline]);
    } finally {
      clearTimeout(timer);
    }
  }
}
