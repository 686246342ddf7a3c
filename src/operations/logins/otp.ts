// One-time passwords by email and SMS. Two flows, as in the product:
//   - init_otp_auth → otp_auth: a code sent to a user of the organization; the right code returns a
//     credential bundle (a session key sealed to targetPublicKey);
//   - init_otp → verify_otp → otp_login: a code sent to any contact; the right code returns a
//     verification token (an ES256 JWT naming the contact, signed by the bundle signer), which
//     otp_login spends once for a session of the user holding that contact (or which
//     create_sub_organization accepts as proof of the root user's contact).
// Codes are 6–9 characters, digits or Crockford base32, generated with the CSPRNG; only an HMAC of
// them is stored. Each expires (5 minutes by default, up to 10), is single-use, and burns after a
// bounded number of wrong tries (a wrong try is counted even though its activity fails: the
// `afterFailure` hook runs after the rollback). The message goes out through the courier (see
// services/message-courier.ts), queued in the activity's own transaction, once the send fits its budgets
// (services/send-budgets.ts).
import crypto from "node:crypto";
import { p256 } from "@noble/curves/nist.js";
import { serviceError } from "../../errors.js";
import { HpkeError, openWith } from "../../crypto/hpke.js";
import { hasTransport, messageIdentity, type Channel, type MessageContent } from "../../services/message-courier.js";
import { recordSend } from "../../services/send-budgets.js";
import type { OtpSettings } from "../../services/login-settings.js";
import { defineActivity, type ActivityContext } from "../../registry/registry.js";
import { newId, secondsParameter } from "../resources.js";
import { signedBundle } from "../wallets/exports.js";
import { defaultKeyName, issueCredentialBundle, issueSession, sessionPublicKey, sessionSeconds } from "./sessions.js";
import { verifyP256Der } from "../../crypto/keys.js";

type OtpType = "OTP_TYPE_EMAIL" | "OTP_TYPE_SMS";
type Flow = "otp_auth" | "otp";

interface InitParams {
  otpType: OtpType;
  contact: string;
  otpLength?: number;
  appName?: string;
  emailCustomization?: { appName?: string; logoUrl?: string; magicLinkTemplate?: string; templateVariables?: string; templateId?: string };
  smsCustomization?: { template?: string };
  userIdentifier?: string;
  sendFromEmailAddress?: string;
  sendFromEmailSenderName?: string;
  replyToEmailAddress?: string;
  alphanumeric?: boolean;
  expirationSeconds?: string;
}

const CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const DIGITS = "0123456789";
const MAX_OTP_SECONDS = 600;
const MAX_VERIFICATION_TOKEN_SECONDS = 86_400;
const EMAIL = /^[^\s@<>()",;:\\]+@[^\s@<>()",;:\\]+\.[^\s@<>()",;:\\]+$/;
const PHONE = /^\+[1-9]\d{6,14}$/;

function generateCode(length: number, alphanumeric: boolean): string {
  const alphabet = alphanumeric ? CROCKFORD : DIGITS;
  let code = "";
  for (let i = 0; i < length; i++) code += alphabet[crypto.randomInt(alphabet.length)];
  return code;
}

/** What the user typed, as the code was generated: Crockford reads I/L as 1 and O as 0, ignores case
 * and separators. */
function normalizeCode(input: string, alphanumeric: boolean): string {
  const compact = String(input ?? "")
    .replace(/[\s-]/g, "")
    .toUpperCase();
  return alphanumeric ? compact.replace(/[IL]/g, "1").replace(/O/g, "0") : compact;
}

const hashOf = (ctx: ActivityContext, otpId: string, code: string) => ctx.env.otp.codeHash(`${otpId}:${code}`);

function requireContact(otpType: unknown, contact: unknown): { otpType: OtpType; contact: string; channel: Channel } {
  if (otpType === "OTP_TYPE_EMAIL") {
    const email = String(contact ?? "").trim();
    if (!EMAIL.test(email) || email.length > 320)
      throw serviceError("INVALID_CONTACT", `contact must be an email address for OTP_TYPE_EMAIL, got "${String(contact)}"`);
    return { otpType, contact: email, channel: "email" };
  }
  if (otpType === "OTP_TYPE_SMS") {
    const phone = String(contact ?? "").replace(/[\s().-]/g, "");
    if (!PHONE.test(phone))
      throw serviceError(
        "INVALID_CONTACT",
        `contact must be a phone number in E.164 form (+ and 7 to 15 digits) for OTP_TYPE_SMS, got "${String(contact)}"`,
      );
    return { otpType, contact: phone, channel: "sms" };
  }
  throw serviceError("INVALID_OTP_TYPE", `otpType must be OTP_TYPE_EMAIL or OTP_TYPE_SMS, got "${String(otpType)}"`);
}

function codeShape(p: InitParams): { length: number; alphanumeric: boolean } {
  const length = p.otpLength ?? 9;
  if (!Number.isInteger(length) || length < 6 || length > 9)
    throw serviceError("INVALID_OTP_LENGTH", `otpLength must be 6 to 9, got ${String(p.otpLength)}`);
  return { length, alphanumeric: p.alphanumeric ?? true };
}

function otpSeconds(ctx: ActivityContext, requested: string | undefined): number {
  const rule = { field: "expirationSeconds", max: MAX_OTP_SECONDS, of: "a one-time password", code: "INVALID_EXPIRATION" } as const;
  return secondsParameter(requested, rule) ?? ctx.env.otp.defaultSeconds;
}

const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

/** How long an expired code is kept, so a late try hears OTP_EXPIRED rather than OTP_NOT_FOUND. */
const EXPIRED_CODE_KEPT_MS = 10 * 60 * 1000;
const MAX_APP_NAME = 64;
const MAX_SMS_TEMPLATE = 320;
const CODE_PLACEHOLDER = /\{\{\s*\.OtpCode\s*\}\}/g;

/** The app name as it may appear in a subject and body: one line, short. */
function appNameOf(p: InitParams): string {
  const name = (p.appName ?? p.emailCustomization?.appName ?? "").replace(/[\u0000-\u001f\u007f]/g, " ").trim();
  if (name.length > MAX_APP_NAME) throw serviceError("INVALID_APP_NAME", `appName must be at most ${MAX_APP_NAME} characters`);
  return name;
}

/** Whether a host is one of the operator's email domains (or a subdomain of one). */
const allowedDomain = (settings: OtpSettings, host: string) =>
  settings.emailAllowedDomains.some((d) => host === d || host.endsWith(`.${d}`));

/**
 * Anything in an email besides the code points somewhere: links, logos, senders. Those must be the
 * operator's own (SIGIL_EMAIL_ALLOWED_DOMAINS), or an end user able to start a code could send mail
 * that looks like anyone's from this deployment's relay.
 */
function requireOperatorDomain(settings: OtpSettings, field: string, value: string, kind: "url" | "address"): void {
  let host: string;
  if (kind === "url") {
    // URL parsing drops tabs and newlines and keeps spaces, so text around a URL could smuggle a
    // second link into the mail: only printable ASCII, written exactly as the parser reads it.
    if (/[^\x21-\x7e]/.test(value))
      throw serviceError("INVALID_EMAIL_CUSTOMIZATION", `${field} must be a URL of printable ASCII characters (no spaces or line breaks)`);
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      throw serviceError("INVALID_EMAIL_CUSTOMIZATION", `${field} must be an https URL`);
    }
    if (url.protocol !== "https:") throw serviceError("INVALID_EMAIL_CUSTOMIZATION", `${field} must be an https URL`);
    if (url.href !== value)
      throw serviceError("INVALID_EMAIL_CUSTOMIZATION", `${field} must be written as a URL parser writes it: ${url.href}`);
    host = url.hostname.toLowerCase();
  } else {
    if (!EMAIL.test(value)) throw serviceError("INVALID_EMAIL_CUSTOMIZATION", `${field} must be an email address`);
    host = value.slice(value.lastIndexOf("@") + 1).toLowerCase();
  }
  if (!allowedDomain(settings, host)) {
    const listed = settings.emailAllowedDomains.length ? `: ${settings.emailAllowedDomains.join(", ")}` : ", unset";
    throw serviceError(
      "EMAIL_DOMAIN_NOT_ALLOWED",
      `${field} points to ${host}, which is not among the operator's email domains (SIGIL_EMAIL_ALLOWED_DOMAINS${listed})`,
    );
  }
}

/** Checks the request's customization; returns the From header it asks for, if any. A request from a
 * sub-organization's own credential (an end user) may not customize the message at all beyond a
 * plain app name: whatever text it could choose would go out under the operator's name. */
function checkCustomization(settings: OtpSettings, p: InitParams, channel: Channel, fromSubOrganization: boolean): string | undefined {
  const appName = appNameOf(p);
  if (fromSubOrganization) {
    const customized = [
      "emailCustomization",
      "smsCustomization",
      "sendFromEmailAddress",
      "sendFromEmailSenderName",
      "replyToEmailAddress",
    ].filter((field) => {
      const value = (p as unknown as Record<string, unknown>)[field];
      return (
        value !== undefined &&
        value !== "" &&
        !(field === "emailCustomization" && Object.keys(value as object).every((k) => k === "appName"))
      );
    });
    if (customized.length)
      throw serviceError(
        "OTP_CUSTOMIZATION_NOT_ALLOWED",
        `a sub-organization's own credential may not customize the message (${customized.join(", ")}): the app's backend (the parent) does that`,
      );
    if (!/^[A-Za-z][A-Za-z .'&-]{0,31}$/.test(appName) && appName !== "")
      throw serviceError(
        "INVALID_APP_NAME",
        "appName, from a sub-organization's own credential, must be up to 32 letters, spaces and . ' & -",
      );
    return undefined;
  }
  if (channel === "sms") {
    const template = p.smsCustomization?.template;
    // A template without the code would make this server an SMS relay for any text.
    if (
      template !== undefined &&
      template !== "" &&
      (template.match(CODE_PLACEHOLDER)?.length !== 1 || template.length > MAX_SMS_TEMPLATE)
    ) {
      throw serviceError(
        "INVALID_SMS_TEMPLATE",
        `smsCustomization.template must contain {{.OtpCode}} once and be at most ${MAX_SMS_TEMPLATE} characters`,
      );
    }
    return undefined;
  }
  const custom = p.emailCustomization ?? {};
  if (custom.logoUrl) requireOperatorDomain(settings, "emailCustomization.logoUrl", custom.logoUrl, "url");
  if (custom.magicLinkTemplate) {
    if (custom.magicLinkTemplate.split("%s").length !== 2)
      throw serviceError(
        "INVALID_EMAIL_CUSTOMIZATION",
        "emailCustomization.magicLinkTemplate must be an https URL with one %s where the code goes",
      );
    requireOperatorDomain(settings, "emailCustomization.magicLinkTemplate", custom.magicLinkTemplate.replace("%s", "code"), "url");
  }
  if (custom.templateVariables !== undefined && custom.templateVariables !== "") {
    let parsed: unknown;
    try {
      parsed = JSON.parse(custom.templateVariables);
    } catch {
      parsed = null;
    }
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed))
      throw serviceError("INVALID_EMAIL_CUSTOMIZATION", "emailCustomization.templateVariables must be a JSON object");
  }
  if (custom.templateId)
    throw serviceError(
      "EMAIL_TEMPLATE_NOT_FOUND",
      "emailCustomization.templateId: this server has no stored email templates; leave it out",
    );
  if (p.replyToEmailAddress) requireOperatorDomain(settings, "replyToEmailAddress", p.replyToEmailAddress, "address");
  if (!p.sendFromEmailAddress) return undefined;
  requireOperatorDomain(settings, "sendFromEmailAddress", p.sendFromEmailAddress, "address");
  const name =
    (p.sendFromEmailSenderName ?? "Notifications")
      .replace(/["\r\n<>\\]/g, "")
      .trim()
      .slice(0, MAX_APP_NAME) || "Notifications";
  return `"${name}" <${p.sendFromEmailAddress}>`;
}

/** The email or SMS carrying the code, from the request's (checked) customization. */
function composeMessage(p: InitParams, channel: Channel, code: string, seconds: number, from: string | undefined): MessageContent {
  const appName = appNameOf(p);
  const minutes = Math.max(1, Math.round(seconds / 60));
  const expiry = `It expires in ${minutes} minute${minutes === 1 ? "" : "s"}.`;
  if (channel === "sms") {
    const template = p.smsCustomization?.template;
    return {
      text: template
        ? template.replace(CODE_PLACEHOLDER, code)
        : `${appName ? `${appName}: ` : ""}your verification code is ${code}. ${expiry}`,
    };
  }
  const custom = p.emailCustomization ?? {};
  const link = custom.magicLinkTemplate ? custom.magicLinkTemplate.replace("%s", encodeURIComponent(code)) : undefined;
  const subject = `${appName ? `${appName} ` : ""}verification code`;
  const text = [
    `Your ${appName ? `${appName} ` : ""}verification code is ${code}`,
    expiry,
    ...(link ? [`Or open ${link}`] : []),
    "If you did not ask for it, ignore this message.",
  ].join("\n\n");
  const html = [
    ...(custom.logoUrl
      ? [`<p><img src="${escapeHtml(custom.logoUrl)}" alt="${escapeHtml(appName)}" style="max-width:340px;max-height:124px"></p>`]
      : []),
    `<p>Your ${escapeHtml(appName ? `${appName} ` : "")}verification code is</p>`,
    `<p style="font-size:28px;letter-spacing:4px;font-family:monospace"><strong>${escapeHtml(code)}</strong></p>`,
    `<p>${expiry}</p>`,
    ...(link ? [`<p><a href="${escapeHtml(link)}">Continue</a></p>`] : []),
    "<p>If you did not ask for it, ignore this message.</p>",
  ].join("\n");
  return { subject, text, html, ...(from ? { from } : {}), ...(p.replyToEmailAddress ? { replyTo: p.replyToEmailAddress } : {}) };
}

/** The parent of the organization whose credential asks: set when that is a sub-organization (an end
 * user's own credential), null for a top-level organization (the app's backend). */
async function requesterParent(ctx: ActivityContext): Promise<string | null> {
  const organization = await ctx.trx
    .selectFrom("organizations")
    .select("parent_organization_id")
    .where("id", "=", ctx.principal.organizationId)
    .executeTakeFirst();
  return organization?.parent_organization_id ?? null;
}

/** Queues a message in the activity's transaction: sealed, and kept in the outbox when its channel
 * has no transport. */
async function queueMessage(
  ctx: ActivityContext,
  channel: Channel,
  recipient: string,
  content: MessageContent,
  expiresAt: number,
): Promise<void> {
  const id = newId();
  const outbox = !hasTransport(ctx.env.otp.messaging, channel);
  await ctx.trx
    .insertInto("outbound_messages")
    .values({
      id,
      organization_id: ctx.organizationId,
      channel,
      recipient,
      sealed_message: ctx.env.keyring.seal(
        Buffer.from(JSON.stringify(content), "utf8"),
        messageIdentity({ id, organization_id: ctx.organizationId }),
      ),
      status: outbox ? "outbox" : "pending",
      attempts: 0,
      next_attempt_at: ctx.now,
      lease_until: null,
      last_error: null,
      expires_at: expiresAt,
      created_at: ctx.now,
      sent_at: null,
    })
    .execute();
}

const targetIdentity = (row: { id: string; organization_id: string }) => ({
  organizationId: row.organization_id,
  kind: "otp_target",
  resourceId: row.id,
});

/** Makes and sends a code; returns the OTP id (and, with `encryptionTarget`, the signed bundle of the
 * key verify_otp V2's encrypted code is sealed to). */
async function startOtp(
  ctx: ActivityContext,
  p: InitParams,
  flow: Flow,
  userId: string | null,
  encryptionTarget: boolean,
): Promise<{ otpId: string; otpEncryptionTargetBundle?: string }> {
  const { otpType, contact, channel } = requireContact(p.otpType, p.contact);
  const { length, alphanumeric } = codeShape(p);
  const seconds = otpSeconds(ctx, p.expirationSeconds);
  const parent = await requesterParent(ctx);
  const from = checkCustomization(ctx.env.otp, p, channel, parent !== null);
  // Expired codes go after a while (until then a late try hears OTP_EXPIRED, not "unknown"). Only this
  // organization's, whose lock is held: deleting others' rows would wait on (and could deadlock with)
  // their sends on PostgreSQL.
  await ctx.trx
    .deleteFrom("otps")
    .where("organization_id", "=", ctx.organizationId)
    .where("expires_at", "<=", ctx.now - EXPIRED_CODE_KEPT_MS)
    .execute();
  await recordSend(ctx, ctx.env.otp, channel, contact, parent);
  const otpId = newId();
  const code = generateCode(length, alphanumeric);
  const expiresAt = ctx.now + seconds * 1000;
  let target: { publicKey: string; sealed: string } | null = null;
  if (encryptionTarget) {
    const secret = p256.utils.randomSecretKey();
    target = {
      publicKey: Buffer.from(p256.getPublicKey(secret, false)).toString("hex"),
      sealed: ctx.env.keyring.seal(secret, targetIdentity({ id: otpId, organization_id: ctx.organizationId })),
    };
    secret.fill(0);
  }
  await ctx.trx
    .insertInto("otps")
    .values({
      id: otpId,
      organization_id: ctx.organizationId,
      user_id: userId,
      flow,
      otp_type: otpType,
      contact,
      code_hash: hashOf(ctx, otpId, code),
      code_length: length,
      alphanumeric: alphanumeric ? 1 : 0,
      attempts: 0,
      target_public_key: target?.publicKey ?? null,
      sealed_target_key: target?.sealed ?? null,
      expires_at: expiresAt,
      used_at: null,
      created_at: ctx.now,
    })
    .execute();
  await queueMessage(ctx, channel, contact, composeMessage(p, channel, code, seconds, from), expiresAt);
  if (!target) return { otpId };
  return {
    otpId,
    otpEncryptionTargetBundle: await signedBundle(ctx.env.bundles, {
      targetPublic: target.publicKey,
      organizationId: ctx.organizationId,
      otpId,
    }),
  };
}

/** The code a verify/auth request carries: plain (otpCode), or sealed with the client's public key
 * to the OTP's target (encryptedOtpBundle, @turnkey/crypto's encryptOtpCodeToBundle). */
type Presented = { otpId: string; otpCode?: string; encryptedOtpBundle?: string };

async function presentedCode(
  ctx: ActivityContext,
  row: { id: string; organization_id: string; target_public_key: string | null; sealed_target_key: string | null },
  presented: Presented,
): Promise<{ code: string; publicKey?: string }> {
  if (presented.encryptedOtpBundle === undefined) return { code: String(presented.otpCode ?? "") };
  if (!row.sealed_target_key || !row.target_public_key)
    throw serviceError(
      "OTP_BUNDLE_UNSUPPORTED",
      "this OTP was started without an encryption target (init_otp V1): send otpCode with verify_otp V1",
    );
  let sealed: { encappedPublic?: unknown; ciphertext?: unknown };
  try {
    sealed = JSON.parse(presented.encryptedOtpBundle) as typeof sealed;
  } catch {
    throw serviceError(
      "INVALID_OTP_BUNDLE",
      "encryptedOtpBundle must be the JSON {encappedPublic, ciphertext} encryptOtpCodeToBundle returns",
    );
  }
  if (typeof sealed.encappedPublic !== "string" || typeof sealed.ciphertext !== "string")
    throw serviceError("INVALID_OTP_BUNDLE", "encryptedOtpBundle lacks encappedPublic or ciphertext");
  const secret = ctx.env.keyring.open(row.sealed_target_key, targetIdentity(row));
  try {
    const plaintext = await openWith(secret, Buffer.from(row.target_public_key, "hex"), {
      encappedPublic: sealed.encappedPublic,
      ciphertext: sealed.ciphertext,
    });
    const inner = JSON.parse(Buffer.from(plaintext).toString("utf8")) as { otp_code?: unknown; public_key?: unknown };
    if (typeof inner.otp_code !== "string") throw serviceError("INVALID_OTP_BUNDLE", "encryptedOtpBundle does not carry an otp_code");
    return { code: inner.otp_code, ...(typeof inner.public_key === "string" && inner.public_key ? { publicKey: inner.public_key } : {}) };
  } catch (error) {
    if (error instanceof HpkeError) throw serviceError("INVALID_OTP_BUNDLE", `encryptedOtpBundle: ${error.message}`);
    if (error instanceof SyntaxError)
      throw serviceError("INVALID_OTP_BUNDLE", "encryptedOtpBundle does not hold the JSON {otp_code, public_key}");
    throw error;
  } finally {
    secret.fill(0);
  }
}

async function findOtp(ctx: ActivityContext, otpId: string, flow: Flow) {
  const row = await ctx.trx
    .selectFrom("otps")
    .selectAll()
    .where("id", "=", String(otpId ?? ""))
    .where("organization_id", "=", ctx.organizationId)
    .where("flow", "=", flow)
    .executeTakeFirst();
  const start = flow === "otp" ? "init_otp" : "init_otp_auth";
  if (!row) throw serviceError("OTP_NOT_FOUND", `no one-time password ${otpId} of this organization from ${start}`);
  if (row.used_at !== null)
    throw serviceError("OTP_ALREADY_USED", `one-time password ${otpId} was already used: start again with ${start}`);
  if (row.attempts >= ctx.env.otp.maxAttempts)
    throw serviceError(
      "OTP_ATTEMPTS_EXCEEDED",
      `one-time password ${otpId} was burnt after ${row.attempts} wrong codes: start again with ${start}`,
    );
  if (row.expires_at <= ctx.now)
    throw serviceError(
      "OTP_EXPIRED",
      `one-time password ${otpId} expired at ${new Date(row.expires_at).toISOString()}: start again with ${start}`,
    );
  return row;
}

const matches = (ctx: ActivityContext, row: { id: string; code_hash: string; alphanumeric: number }, code: string) => {
  const presented = Buffer.from(hashOf(ctx, row.id, normalizeCode(code, row.alphanumeric === 1)), "hex");
  const stored = Buffer.from(row.code_hash, "hex");
  return presented.length === stored.length && crypto.timingSafeEqual(presented, stored);
};

/** Checks the code and uses the OTP up; returns the OTP row and the public key an encrypted bundle named. */
async function consumeOtp(ctx: ActivityContext, presented: Presented, flow: Flow) {
  const row = await findOtp(ctx, presented.otpId, flow);
  const { code, publicKey } = await presentedCode(ctx, row, presented);
  if (!matches(ctx, row, code)) {
    const left = ctx.env.otp.maxAttempts - row.attempts - 1;
    throw serviceError(
      "OTP_INVALID",
      `wrong one-time password for ${row.id}${left > 0 ? ` (${left} tr${left === 1 ? "y" : "ies"} left)` : "; it is now burnt"}`,
    );
  }
  const used = await ctx.trx
    .updateTable("otps")
    .set({ used_at: ctx.now, sealed_target_key: null })
    .where("id", "=", row.id)
    .where("used_at", "is", null)
    .executeTakeFirst();
  if (Number(used.numUpdatedRows) !== 1) throw serviceError("OTP_ALREADY_USED", `one-time password ${row.id} was already used`);
  return { row, publicKey };
}

/** After a failed verification (rolled back): a wrong code still counts against the OTP. */
async function countWrongCode(ctx: ActivityContext, presented: Presented, flow: Flow): Promise<void> {
  let row;
  try {
    row = await findOtp(ctx, presented.otpId, flow);
  } catch {
    return;
  }
  let code: string;
  try {
    ({ code } = await presentedCode(ctx, row, presented));
  } catch {
    // An unreadable bundle is a wrong try as well: otherwise garbage could be sent without limit.
    code = "";
  }
  if (matches(ctx, row, code)) return;
  await ctx.trx
    .updateTable("otps")
    .set({ attempts: row.attempts + 1 })
    .where("id", "=", row.id)
    .execute();
}

/** The feature that lets an organization's users log in by a code of this type: on by default in
 * sub-organizations (create_sub_organization's disable* flags turn them off), set by the root quorum
 * elsewhere (set_organization_feature). */
export const OTP_LOGIN_FEATURES: Record<OtpType, string> = {
  OTP_TYPE_EMAIL: "FEATURE_NAME_OTP_EMAIL_AUTH",
  OTP_TYPE_SMS: "FEATURE_NAME_SMS_AUTH",
};

async function requireLoginFeature(ctx: ActivityContext, otpType: string): Promise<void> {
  const feature = OTP_LOGIN_FEATURES[otpType as OtpType];
  const row = await ctx.trx
    .selectFrom("organization_features")
    .select("name")
    .where("organization_id", "=", ctx.organizationId)
    .where("name", "=", feature)
    .executeTakeFirst();
  if (!row)
    throw serviceError(
      "FEATURE_NOT_ENABLED",
      `${otpType} login is not enabled in organization ${ctx.organizationId}: its root quorum enables it with set_organization_feature ${feature}`,
    );
}

/** Marks the contact proven on the user (list_verified_suborgs reads it). */
async function markVerified(ctx: ActivityContext, userId: string, otpType: string): Promise<void> {
  await ctx.trx
    .updateTable("users")
    .set(otpType === "OTP_TYPE_EMAIL" ? { email_verified_at: ctx.now } : { phone_verified_at: ctx.now })
    .where("id", "=", userId)
    .execute();
}

/** Emails compare without regard to ASCII letter case only (toLowerCase would also fold look-alikes
 * such as the Kelvin sign into "k"). */
export const foldEmail = (email: string) => email.replace(/[A-Z]/g, (c) => c.toLowerCase());

/** The user of the organization with this email (ASCII case-insensitive) or phone number, and the
 * contact as stored for it (where the code goes). */
async function userWithContact(ctx: ActivityContext, otpType: string, contact: string): Promise<{ id: string; contact: string }> {
  const byEmail = otpType === "OTP_TYPE_EMAIL";
  const rows = await ctx.trx
    .selectFrom("users")
    .select(["id", "email", "phone_number"])
    .where("organization_id", "=", ctx.organizationId)
    .where(byEmail ? "email" : "phone_number", "is not", null)
    .execute();
  const wanted = byEmail ? foldEmail(contact) : contact;
  const found = rows.flatMap((r) => {
    const stored = byEmail ? r.email! : r.phone_number!;
    return (byEmail ? foldEmail(stored) : stored.replace(/[\s().-]/g, "")) === wanted ? [{ id: r.id, contact: stored }] : [];
  });
  if (found.length === 0)
    throw serviceError(
      "USER_NOT_FOUND",
      `no user of organization ${ctx.organizationId} has ${byEmail ? "email" : "phone number"} ${contact}`,
    );
  if (found.length > 1)
    throw serviceError(
      "CONTACT_AMBIGUOUS",
      `${found.length} users of organization ${ctx.organizationId} share ${contact}: a one-time password cannot tell them apart`,
    );
  return found[0]!;
}

const policyParams = (p: InitParams) => ({
  otp_type: p.otpType,
  contact: p.contact,
  otp_length: p.otpLength ?? 9,
  alphanumeric: p.alphanumeric ?? true,
  app_name: p.appName ?? p.emailCustomization?.appName ?? "",
});

export interface VerificationClaims {
  id: string;
  verification_type: string;
  contact: string;
  organization_id: string;
  public_key?: string;
  /** Milliseconds since the epoch, as a string (what the clients' verifier reads). */
  exp: string;
}

/** The verification token otp_login or create_sub_organization presents: signature, expiry, single
 * use; marks it used. `organizationId` must be the one that verified it or a sub-organization of it. */
export async function spendVerificationToken(ctx: ActivityContext, token: string): Promise<VerificationClaims> {
  const claims = ctx.env.bundles.verifyJwt(String(token ?? "")) as VerificationClaims | null;
  if (!claims || typeof claims.id !== "string")
    throw serviceError(
      "VERIFICATION_TOKEN_INVALID",
      "verificationToken is not a token this server issued (its signature does not verify)",
      "InvalidArgument",
    );
  const row = await ctx.trx.selectFrom("verification_tokens").selectAll().where("id", "=", claims.id).executeTakeFirst();
  if (!row)
    throw serviceError(
      "VERIFICATION_TOKEN_INVALID",
      `verification token ${claims.id} is unknown (its organization was deleted?)`,
      "NotFound",
    );
  if (row.used_at !== null) throw serviceError("VERIFICATION_TOKEN_ALREADY_USED", `verification token ${claims.id} was already used`);
  if (row.expires_at <= ctx.now)
    throw serviceError(
      "VERIFICATION_TOKEN_EXPIRED",
      `verification token ${claims.id} expired at ${new Date(row.expires_at).toISOString()}`,
    );
  if (row.organization_id !== ctx.organizationId) {
    const organization = await ctx.trx
      .selectFrom("organizations")
      .select("parent_organization_id")
      .where("id", "=", ctx.organizationId)
      .executeTakeFirst();
    if (organization?.parent_organization_id !== row.organization_id) {
      throw serviceError(
        "VERIFICATION_TOKEN_ORGANIZATION_MISMATCH",
        `verification token ${claims.id} was issued to organization ${row.organization_id}; it serves that organization and its sub-organizations only`,
      );
    }
  }
  // Spent by a conditional update: two logins into different sub-organizations hold different
  // organization locks, so only the row (PostgreSQL re-checks the condition after waiting for the
  // other's commit) keeps a token to one use.
  const spent = await ctx.trx
    .updateTable("verification_tokens")
    .set({ used_at: ctx.now })
    .where("id", "=", row.id)
    .where("used_at", "is", null)
    .executeTakeFirst();
  if (Number(spent.numUpdatedRows) !== 1)
    throw serviceError("VERIFICATION_TOKEN_ALREADY_USED", `verification token ${claims.id} was already used`);
  return { ...claims, contact: row.contact, verification_type: row.otp_type, ...(row.public_key ? { public_key: row.public_key } : {}) };
}

export interface ClientSignature {
  publicKey?: string;
  scheme?: string;
  message?: string;
  signature?: string;
}

/** What a client signature authorizes: a login with a session key, or a sign-up. */
export type SignatureUsage =
  | { type: "USAGE_TYPE_LOGIN"; sessionKey: string }
  /** The credentials the signed-up user gets: the signature must cover exactly these. */
  | { type: "USAGE_TYPE_SIGNUP"; credentials: SignupCredentials };

export interface SignupCredentials {
  apiKeys: string[];
  authenticators: string[];
  oauthProviders: string[];
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && [...a].sort().every((v, i) => v === [...b].sort()[i]);

/**
 * A client signature by the key a verification token is bound to (verify_otp's public key): ECDSA
 * P-256 over SHA-256 of `message` (raw r||s or DER, hex), where `message` is the JSON the clients
 * build (@turnkey/core getClientSignatureMessageForLogin / …ForSignup): the usage type, the token id,
 * and for a login the session key. It proves the holder of the key that verified the code asked for
 * this use of the token: someone who only captured the token cannot spend it.
 */
export function checkClientSignature(
  signature: ClientSignature | undefined,
  claims: VerificationClaims,
  usage: SignatureUsage,
  required: boolean,
): void {
  if (!signature) {
    if (required || claims.public_key)
      throw serviceError(
        "CLIENT_SIGNATURE_REQUIRED",
        "clientSignature is required: sign the usage message with the key the verification token is bound to",
      );
    return;
  }
  if (!claims.public_key)
    throw serviceError(
      "CLIENT_SIGNATURE_INVALID",
      "this verification token is bound to no key (verify_otp was sent without publicKey): it takes no clientSignature",
      "InvalidArgument",
    );
  if (signature.scheme !== "CLIENT_SIGNATURE_SCHEME_API_P256")
    throw serviceError(
      "CLIENT_SIGNATURE_INVALID",
      `clientSignature.scheme must be CLIENT_SIGNATURE_SCHEME_API_P256, got ${String(signature.scheme)}`,
      "InvalidArgument",
    );
  const boundKey = sessionPublicKey(claims.public_key, "the token's public_key");
  if (sessionPublicKey(signature.publicKey, "clientSignature.publicKey") !== boundKey)
    throw serviceError(
      "CLIENT_SIGNATURE_INVALID",
      "clientSignature.publicKey is not the key the verification token is bound to",
      "PermissionDenied",
    );
  let message: {
    login?: { publicKey?: unknown };
    signupV2?: {
      email?: unknown;
      phoneNumber?: unknown;
      apiKeys?: Array<{ publicKey?: unknown }>;
      authenticators?: Array<{ attestation?: { credentialId?: unknown } }>;
      oauthProviders?: Array<{ oidcToken?: unknown }>;
    };
    tokenId?: unknown;
    type?: unknown;
  };
  try {
    message = JSON.parse(String(signature.message ?? "")) as typeof message;
  } catch {
    throw serviceError("CLIENT_SIGNATURE_INVALID", "clientSignature.message must be the JSON usage message", "InvalidArgument");
  }
  if (message?.type !== usage.type || message.tokenId !== claims.id)
    throw serviceError("CLIENT_SIGNATURE_INVALID", `clientSignature.message is not a ${usage.type} of this token`, "PermissionDenied");
  if (
    usage.type === "USAGE_TYPE_LOGIN" &&
    (typeof message.login?.publicKey !== "string" ||
      sessionPublicKey(message.login.publicKey, "clientSignature.message.login.publicKey") !== usage.sessionKey)
  ) {
    throw serviceError(
      "CLIENT_SIGNATURE_INVALID",
      "clientSignature.message logs in another session key than publicKey",
      "PermissionDenied",
    );
  }
  if (usage.type === "USAGE_TYPE_SIGNUP") {
    const signed = claims.verification_type === "OTP_TYPE_EMAIL" ? message.signupV2?.email : message.signupV2?.phoneNumber;
    if (signed !== undefined && foldEmail(String(signed)) !== foldEmail(claims.contact))
      throw serviceError(
        "CLIENT_SIGNATURE_INVALID",
        "clientSignature.message signs up another contact than the token proves",
        "PermissionDenied",
      );
    // The signature covers the credentials the new user gets: nobody relaying the request can swap in their own.
    const signup = message.signupV2 ?? {};
    const list = <T>(value: T[] | undefined) => (Array.isArray(value) ? value : []);
    const signed_ = {
      apiKeys: list(signup.apiKeys).map((k) => String(k?.publicKey ?? "").toLowerCase()),
      authenticators: list(signup.authenticators).map((a) => String(a?.attestation?.credentialId ?? "")),
      oauthProviders: list(signup.oauthProviders).map((o) => String(o?.oidcToken ?? "")),
    };
    for (const kind of ["apiKeys", "authenticators", "oauthProviders"] as const) {
      if (!sameSet(signed_[kind], usage.credentials[kind]))
        throw serviceError(
          "CLIENT_SIGNATURE_INVALID",
          `clientSignature.message signs up other ${kind} than the request gives the user`,
          "PermissionDenied",
        );
    }
  }
  const raw = String(signature.signature ?? "").replace(/^0x/, "");
  if (!/^([0-9a-fA-F]{2})+$/.test(raw))
    throw serviceError("CLIENT_SIGNATURE_INVALID", "clientSignature.signature must be hex", "InvalidArgument");
  const bytes = Buffer.from(raw, "hex");
  const signedBytes = Buffer.from(String(signature.message), "utf8");
  const ok =
    bytes.length === 64
      ? p256.verify(bytes, crypto.createHash("sha256").update(signedBytes).digest(), Buffer.from(boundKey, "hex"), {
          prehash: false,
          lowS: false,
        })
      : verifyP256Der(boundKey, signedBytes, bytes);
  if (!ok)
    throw serviceError("CLIENT_SIGNATURE_INVALID", "clientSignature does not verify with the verification token's key", "PermissionDenied");
}

export const otpOperations = [
  defineActivity<InitParams>({
    name: "init_otp_auth",
    summary: "Send a one-time password to a user of the organization (email or SMS); otp_auth exchanges it for a credential bundle.",
    resource: "OTP",
    action: "CREATE",
    parentMayRequest: true,
    queuesMessages: true,
    policyParameters: policyParams,
    async execute(ctx, p) {
      const { otpType, contact } = requireContact(p.otpType, p.contact);
      await requireLoginFeature(ctx, otpType);
      const user = await userWithContact(ctx, otpType, contact);
      // The code goes to the address on record, however the request spelled it.
      const { otpId } = await startOtp(ctx, { ...p, contact: user.contact }, "otp_auth", user.id, false);
      return { otpId };
    },
  }),

  defineActivity<{
    otpId: string;
    otpCode: string;
    targetPublicKey: string;
    apiKeyName?: string;
    expirationSeconds?: string;
    invalidateExisting?: boolean;
  }>({
    name: "otp_auth",
    summary: "Exchange the code from init_otp_auth for a session key sealed to targetPublicKey (credential bundle).",
    resource: "AUTH",
    action: "CREATE",
    parentMayRequest: true,
    secretParameters: ["otpCode"],
    policyParameters: (p) => ({ otp_id: p.otpId, target_public_key: p.targetPublicKey, expiration_seconds: p.expirationSeconds ?? "" }),
    afterFailure: (ctx, p) => countWrongCode(ctx, p, "otp_auth"),
    async execute(ctx, p) {
      const seconds = sessionSeconds(ctx.env.sessions, p.expirationSeconds);
      const { row } = await consumeOtp(ctx, p, "otp_auth");
      await requireLoginFeature(ctx, row.otp_type);
      const userId = row.user_id!;
      await markVerified(ctx, userId, row.otp_type);
      const bundle = await issueCredentialBundle(ctx, p.targetPublicKey, {
        userId,
        kind: "OTP_AUTH",
        name: defaultKeyName("OTP Auth", ctx.now, p.apiKeyName),
        seconds,
        invalidateExisting: p.invalidateExisting,
      });
      return { userId, ...bundle };
    },
  }),

  defineActivity<InitParams>({
    name: "init_otp",
    summary: "Send a one-time password to any email or phone number; verify_otp exchanges it for a verification token.",
    resource: "OTP",
    action: "CREATE",
    parentMayRequest: true,
    queuesMessages: true,
    policyParameters: policyParams,
    async execute(ctx, p, type) {
      // Codes go out only where the organization enabled that kind of message.
      await requireLoginFeature(ctx, requireContact(p.otpType, p.contact).otpType);
      // V2 and later hand out a key the code is sent back encrypted to (verify_otp V2).
      return startOtp(ctx, p, "otp", null, type !== "ACTIVITY_TYPE_INIT_OTP");
    },
  }),

  defineActivity<{ otpId: string; otpCode?: string; encryptedOtpBundle?: string; expirationSeconds?: string; publicKey?: string }>({
    name: "verify_otp",
    summary: "Exchange the code from init_otp for a verification token (a signed JWT naming the contact), bound to the client's key.",
    resource: "OTP",
    action: "VERIFY",
    parentMayRequest: true,
    secretParameters: ["otpCode", "encryptedOtpBundle"],
    // Spendable by whoever holds it (once): nobody but the requester sees it.
    secretResults: ["verificationToken"],
    policyParameters: (p) => ({ otp_id: p.otpId }),
    afterFailure: (ctx, p) => countWrongCode(ctx, p, "otp"),
    async execute(ctx, p) {
      const rule = {
        field: "expirationSeconds",
        max: MAX_VERIFICATION_TOKEN_SECONDS,
        of: "a verification token",
        code: "INVALID_EXPIRATION",
      } as const;
      const seconds = secondsParameter(p.expirationSeconds, rule) ?? ctx.env.otp.verificationTokenSeconds;
      const boundKey = p.publicKey !== undefined && p.publicKey !== "" ? sessionPublicKey(p.publicKey, "publicKey") : undefined;
      const { row, publicKey } = await consumeOtp(ctx, p, "otp");
      const key = publicKey !== undefined ? sessionPublicKey(publicKey, "the encrypted bundle's public_key") : boundKey;
      const id = newId();
      const expiresAt = ctx.now + seconds * 1000;
      await ctx.trx
        .insertInto("verification_tokens")
        .values({
          id,
          organization_id: ctx.organizationId,
          otp_type: row.otp_type,
          contact: row.contact,
          public_key: key ?? null,
          expires_at: expiresAt,
          used_at: null,
          created_at: ctx.now,
        })
        .execute();
      const claims: VerificationClaims = {
        id,
        verification_type: row.otp_type,
        contact: row.contact,
        organization_id: ctx.organizationId,
        ...(key ? { public_key: key } : {}),
        exp: String(expiresAt),
      };
      return { verificationToken: ctx.env.bundles.signJwt({ ...claims }) };
    },
  }),

  defineActivity<{
    verificationToken: string;
    publicKey: string;
    expirationSeconds?: string;
    invalidateExisting?: boolean;
    clientSignature?: ClientSignature;
    sessionProfileId?: string;
  }>({
    name: "otp_login",
    summary:
      "Spend a verification token for a session of the user holding its contact: publicKey becomes a session key; returns the session JWT.",
    resource: "AUTH",
    action: "CREATE",
    parentMayRequest: true,
    secretParameters: ["verificationToken"],
    policyParameters: (p) => ({
      public_key: p.publicKey,
      expiration_seconds: p.expirationSeconds ?? "",
      invalidate_existing: p.invalidateExisting ?? false,
    }),
    async execute(ctx, p, type) {
      const publicKey = sessionPublicKey(p.publicKey, "publicKey");
      const seconds = sessionSeconds(ctx.env.sessions, p.expirationSeconds);
      const claims = await spendVerificationToken(ctx, p.verificationToken);
      checkClientSignature(
        p.clientSignature,
        claims,
        { type: "USAGE_TYPE_LOGIN", sessionKey: publicKey },
        type !== "ACTIVITY_TYPE_OTP_LOGIN",
      );
      await requireLoginFeature(ctx, claims.verification_type);
      const { id: userId } = await userWithContact(ctx, claims.verification_type, claims.contact);
      await markVerified(ctx, userId, claims.verification_type);
      const session = await issueSession(ctx, {
        userId,
        publicKey,
        kind: "LOGIN",
        name: defaultKeyName("OTP Login", ctx.now),
        seconds,
        invalidateExisting: p.invalidateExisting,
      });
      return { session };
    },
  }),
];
