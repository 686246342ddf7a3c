// How many messages (one-time passwords, emailed credentials, invitations) may go out through the
// operator's SMTP relay and SMS account, and to whom. Whoever can start one (a sub-organization's own
// root is typically an end user) could otherwise make this deployment mail or text any number of
// strangers at the operator's expense and reputation. Every message-sending activity (init_otp,
// init_otp_auth, email_auth, init_user_email_recovery, create_invitations) records one row per message
// in `otp_sends` and must fit every budget below, counted over a sliding window:
//   - per contact, per requesting organization (SIGIL_OTP_PER_CONTACT_LIMIT per 10 minutes), and the
//     own requests of one top-level organization's sub-organizations together at most twice that:
//     nobody floods one inbox or phone, and one tenant's end users cannot spend another tenant's share;
//   - per top-level organization, its sub-organizations counting toward it
//     (SIGIL_OTP_PER_ORGANIZATION_LIMIT per SIGIL_OTP_SEND_WINDOW_SECONDS): creating sub-organizations
//     does not multiply what an app may send;
//   - per credential of a top-level organization (SIGIL_OTP_PER_CREDENTIAL_LIMIT per window): one key
//     of many (a low-privileged user's, a leaked one) cannot spend the whole organization's budget;
//   - per end user (SIGIL_OTP_PER_END_USER_LIMIT per window): the credentials of one sub-organization
//     share one budget, since its root can mint API keys and sessions at will.
// A refusal is 429 OTP_RATE_LIMITED with the seconds until the window frees a slot (Retry-After).
import { domainToASCII } from "node:url";
import { sql } from "kysely";
import { ServiceError, type ErrorBody } from "../errors.js";
import type { Principal } from "../auth/authenticate.js";
import type { Dialect, Tx } from "../store/handles.js";
import type { Channel } from "./message-courier.js";

/** What a budget check needs of the activity that sends: its transaction, clock and requester. The
 * registry's ActivityContext is one; named here so that this service knows nothing of the registry. */
export interface SendingActivity {
  trx: Tx;
  dialect: Dialect;
  now: number;
  principal: Principal;
}

export interface SendBudgetSettings {
  perContactLimit: number;
  perOrganizationLimit: number;
  perCredentialLimit: number;
  perEndUserLimit: number;
  sendWindowSeconds: number;
}

const CONTACT_WINDOW_MS = 10 * 60 * 1000;
/** Requests from sub-organizations (end users' own credentials), all together, may send one contact
 * this many times the per-contact budget in its window. */
const SUB_ORGANIZATION_CONTACT_SHARE = 2;
/** The first key of the PostgreSQL advisory locks that serialize budget checks ("OTPS"). */
const BUDGET_LOCK_CLASS = 0x4f545053;
/** Providers that deliver every spelling of a local part with dots removed and a +tag dropped to one
 * inbox, and the domain they all mean. */
const DOTLESS_PROVIDERS: Record<string, string> = { "gmail.com": "gmail.com", "googlemail.com": "gmail.com" };

/** The type of the gRPC status detail that tells a client when to try again (google.rpc.RetryInfo). */
export const RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo";

/** A refused send: 429 OTP_RATE_LIMITED, with a RetryInfo detail the HTTP layer turns into Retry-After. */
export class SendBudgetExceeded extends ServiceError {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
  ) {
    super("ResourceExhausted", "OTP_RATE_LIMITED", message);
  }

  override toBody(): ErrorBody {
    const body = super.toBody();
    // The recorded failure keeps it too, so a retry answered from the activity log says the same.
    const retryInfo = { "@type": RETRY_INFO_TYPE, retryDelay: `${this.retryAfterSeconds}s` };
    return { ...body, details: [...body.details, retryInfo as unknown as ErrorBody["details"][number]] };
  }
}

const asciiLower = (text: string) => text.replace(/[A-Z]/g, (c) => c.toLowerCase());

/**
 * A contact in one spelling, for counting only (the message goes to the address as given or on
 * record): `Victim+1@Example.COM.` is `victim@example.com`; at Gmail, which ignores dots and +tags and
 * treats googlemail.com as gmail.com, `V.ictim+x@googlemail.com` is `victim@gmail.com`. Domains are
 * compared in their ASCII (IDNA) form. Phone numbers arrive as E.164 (`+` and digits) already.
 */
export function contactKey(channel: Channel, contact: string): string {
  if (channel === "sms") return `+${contact.replace(/\D/g, "")}`;
  const at = contact.lastIndexOf("@");
  // IDNA first: it maps the ideographic and full-width full stops (U+3002, U+FF0E, U+FF61) to "." —
  // only then is a trailing dot a dot, and `victim@gmail.com。` the same inbox as `victim@gmail.com`.
  const rawDomain = contact.slice(at + 1);
  const domain = (domainToASCII(rawDomain) || asciiLower(rawDomain)).replace(/\.+$/, "");
  let local = asciiLower(contact.slice(0, at)).replace(/\+.*$/, "");
  const provider = DOTLESS_PROVIDERS[domain];
  if (provider) local = local.replace(/\./g, "");
  return `${local}@${provider ?? domain}`;
}

/** Holds the lock on one budget until the transaction ends. PostgreSQL only: SQLite has one writer at
 * a time (BEGIN IMMEDIATE), so counts read there cannot change before the commit. Budgets span
 * organizations (a parent and its sub-organizations, every requester of one contact), whose own
 * locks do not exclude each other; without this, two processes could each see the last free slot. */
async function lockBudget(ctx: SendingActivity, key: string): Promise<void> {
  if (ctx.dialect !== "postgres") return;
  await sql`select pg_advisory_xact_lock(${BUDGET_LOCK_CLASS}, hashtext(${key}))`.execute(ctx.trx);
}

interface Budget {
  /** What the refusal says is spent. */
  spent: string;
  limit: number;
  windowMs: number;
  where: {
    contact_key?: string;
    root_organization_id?: string;
    requester_organization_id?: string;
    from_sub_organization?: number;
    credential_id?: string;
  };
}

/** Milliseconds until the budget frees a slot, or 0 when it has one: the send that would have to
 * leave the window is the limit-th newest inside it. */
async function msUntilFree(ctx: SendingActivity, budget: Budget): Promise<number> {
  let query = ctx.trx
    .selectFrom("otp_sends")
    .select("created_at")
    .where("created_at", ">", ctx.now - budget.windowMs);
  for (const [column, value] of Object.entries(budget.where)) query = query.where(column as keyof Budget["where"], "=", value as never);
  const blocking = await query
    .orderBy("created_at", "desc")
    .limit(1)
    .offset(budget.limit - 1)
    .executeTakeFirst();
  return blocking ? blocking.created_at + budget.windowMs - ctx.now : 0;
}

/** "hour", "2 hours", "900 seconds". */
function perWindow(ms: number): string {
  const hours = ms / 3_600_000;
  if (!Number.isInteger(hours)) return `${ms / 1000} seconds`;
  return hours === 1 ? "hour" : `${hours} hours`;
}

/**
 * Checks every budget a send to `contact` counts toward and records the send, in the activity's
 * transaction; `requesterParent` is the parent of the requesting credential's organization, if any.
 * A refusal is rolled back with the activity and records nothing here. Throws
 * SendBudgetExceeded naming each spent budget, with the longest wait among them.
 */
export async function recordSend(
  ctx: SendingActivity,
  settings: SendBudgetSettings,
  channel: Channel,
  contact: string,
  requesterParent: string | null,
): Promise<void> {
  const requester = ctx.principal.organizationId;
  // Sub-organizations cannot have their own (NESTED_SUB_ORGANIZATION): the parent is the top.
  const root = requesterParent ?? requester;
  const fromSub = requesterParent !== null ? 1 : 0;
  const key = contactKey(channel, contact);
  // Always in this order (the top-level organization, then the contact): no two sends wait on each other.
  await lockBudget(ctx, `organization:${root}`);
  await lockBudget(ctx, `contact:${key}`);

  const windowMs = settings.sendWindowSeconds * 1000;
  const budgets: Budget[] = [
    {
      spent: `this contact's budget of ${settings.perContactLimit} messages per 10 minutes (SIGIL_OTP_PER_CONTACT_LIMIT) from organization ${requester}`,
      limit: settings.perContactLimit,
      windowMs: CONTACT_WINDOW_MS,
      where: { contact_key: key, requester_organization_id: requester },
    },
    {
      spent:
        `organization ${root}'s budget of ${settings.perOrganizationLimit} messages per ${perWindow(windowMs)} (SIGIL_OTP_PER_ORGANIZATION_LIMIT), ` +
        "which its sub-organizations share",
      limit: settings.perOrganizationLimit,
      windowMs,
      where: { root_organization_id: root },
    },
  ];
  if (fromSub) {
    budgets.push(
      {
        spent:
          `this contact's budget of ${settings.perContactLimit * SUB_ORGANIZATION_CONTACT_SHARE} messages per 10 minutes ` +
          "(twice SIGIL_OTP_PER_CONTACT_LIMIT) " +
          `that the own credentials of organization ${root}'s sub-organizations share`,
        limit: settings.perContactLimit * SUB_ORGANIZATION_CONTACT_SHARE,
        windowMs: CONTACT_WINDOW_MS,
        // Per top-level organization: one tenant's end users must not spend another tenant's share.
        where: { contact_key: key, from_sub_organization: 1, root_organization_id: root },
      },
      {
        spent:
          `the budget of ${settings.perEndUserLimit} messages per ${perWindow(windowMs)} (SIGIL_OTP_PER_END_USER_LIMIT) ` +
          `the credentials of sub-organization ${requester} share`,
        limit: settings.perEndUserLimit,
        windowMs,
        where: { requester_organization_id: requester },
      },
    );
  } else {
    budgets.push({
      spent: `credential ${ctx.principal.credentialId}'s budget of ${settings.perCredentialLimit} messages per ${perWindow(windowMs)} (SIGIL_OTP_PER_CREDENTIAL_LIMIT)`,
      limit: settings.perCredentialLimit,
      windowMs,
      where: { credential_id: ctx.principal.credentialId, from_sub_organization: 0 },
    });
  }
  const spent: Array<{ budget: Budget; ms: number }> = [];
  for (const budget of budgets) {
    const ms = await msUntilFree(ctx, budget);
    if (ms > 0) spent.push({ budget, ms });
  }
  if (spent.length) {
    const seconds = Math.max(1, Math.ceil(Math.max(...spent.map((s) => s.ms)) / 1000));
    const what = spent.map((s) => `${s.budget.spent} is spent`).join("; ");
    throw new SendBudgetExceeded(`nothing was sent: ${what}. Send a new request (a new timestampMs) in ${seconds} seconds`, seconds);
  }
  // This organization's sends older than every window count for nothing any more.
  const outOfEveryWindow = ctx.now - Math.max(windowMs, CONTACT_WINDOW_MS);
  await ctx.trx.deleteFrom("otp_sends").where("root_organization_id", "=", root).where("created_at", "<=", outOfEveryWindow).execute();
  await ctx.trx
    .insertInto("otp_sends")
    .values({
      contact_key: key,
      requester_organization_id: requester,
      root_organization_id: root,
      from_sub_organization: fromSub,
      credential_id: ctx.principal.credentialId,
      created_at: ctx.now,
    })
    .execute();
}
