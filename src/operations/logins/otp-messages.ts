// The message carrying a code (or, for email_auth and email recovery, a credential bundle), and the
// rules for customizing it. Anything in an email besides the code
// points somewhere (links, logos, senders): those must be within the operator's email domains
// (SIGIL_EMAIL_ALLOWED_DOMAINS); an SMS template must hold the code; and an end user's own credential (a
// sub-organization's) may customize nothing beyond a plain app name, since its text would go out under
// the operator's name.
import { serviceError } from "../../errors.js";
import type { Channel, MessageContent } from "../../services/message-courier.js";
import type { OtpSettings } from "../../services/login-settings.js";
import type { ParametersOf } from "../../registry/registry.js";
import { EMAIL } from "./contacts.js";

/** What init_otp and init_otp_auth (every version) ask for: the contact, the code's shape, the message's customization. */
export type OtpInitParams = ParametersOf<"init_otp" | "init_otp_auth">;

/** What a request may say of the message carrying its secret: init_otp, init_otp_auth, email_auth and
 * init_user_email_recovery (every version) all say it with these fields. */
export interface MessageCustomization {
  appName?: string;
  emailCustomization?: { appName?: string; logoUrl?: string; magicLinkTemplate?: string; templateVariables?: string; templateId?: string };
  smsCustomization?: { template?: string };
  sendFromEmailAddress?: string;
  sendFromEmailSenderName?: string;
  replyToEmailAddress?: string;
}

export const escapeHtml = (text: string) =>
  text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]!);

const MAX_APP_NAME = 64;
const MAX_SMS_TEMPLATE = 320;
const CODE_PLACEHOLDER = /\{\{\s*\.OtpCode\s*\}\}/g;

/** The app name the request gives: its own field, or (init_otp_auth V1, init_otp V1) the email customization's. */
export function requestedAppName(p: MessageCustomization): string | undefined {
  return p.appName ?? p.emailCustomization?.appName;
}

/** The app name as it may appear in a subject and body: one line, short. */
function appNameOf(p: MessageCustomization): string {
  const name = (requestedAppName(p) ?? "").replace(/[\u0000-\u001f\u007f]/g, " ").trim();
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
export function checkCustomization(
  settings: OtpSettings,
  p: MessageCustomization,
  channel: Channel,
  fromSubOrganization: boolean,
): string | undefined {
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

/** The secret an email carries, and how to show it. */
export interface EmailedSecret {
  /** What it is, after the app's name: "verification code", "sign-in credential". */
  what: string;
  secret: string;
  /** How long it is valid. */
  seconds: number;
  /** A code the user types, in large letters; or a credential bundle the user copies, wrapped. */
  display: "code" | "bundle";
}

const expiryOf = (seconds: number) => {
  const minutes = Math.max(1, Math.round(seconds / 60));
  return `It expires in ${minutes} minute${minutes === 1 ? "" : "s"}.`;
};

/** The email carrying a secret, from the request's (checked) customization: the magic link has the
 * secret in place of %s. */
export function composeEmail(p: MessageCustomization, from: string | undefined, emailed: EmailedSecret): MessageContent {
  const appName = appNameOf(p);
  const custom = p.emailCustomization ?? {};
  const expiry = expiryOf(emailed.seconds);
  const link = custom.magicLinkTemplate ? custom.magicLinkTemplate.replace("%s", encodeURIComponent(emailed.secret)) : undefined;
  const named = `${appName ? `${appName} ` : ""}${emailed.what}`;
  const text = [
    `Your ${named} is ${emailed.secret}`,
    expiry,
    ...(link ? [`Or open ${link}`] : []),
    "If you did not ask for it, ignore this message.",
  ].join("\n\n");
  const style =
    emailed.display === "code" ? "font-size:28px;letter-spacing:4px;font-family:monospace" : "font-family:monospace;word-break:break-all";
  const html = [
    ...(custom.logoUrl
      ? [`<p><img src="${escapeHtml(custom.logoUrl)}" alt="${escapeHtml(appName)}" style="max-width:340px;max-height:124px"></p>`]
      : []),
    `<p>Your ${escapeHtml(named)} is</p>`,
    `<p style="${style}"><strong>${escapeHtml(emailed.secret)}</strong></p>`,
    `<p>${expiry}</p>`,
    ...(link ? [`<p><a href="${escapeHtml(link)}">Continue</a></p>`] : []),
    "<p>If you did not ask for it, ignore this message.</p>",
  ].join("\n");
  return {
    subject: named,
    text,
    html,
    ...(from ? { from } : {}),
    ...(p.replyToEmailAddress ? { replyTo: p.replyToEmailAddress } : {}),
  };
}

/** The email or SMS carrying the code, from the request's (checked) customization. */
export function composeMessage(
  p: OtpInitParams,
  channel: Channel,
  code: string,
  seconds: number,
  from: string | undefined,
): MessageContent {
  if (channel === "email") return composeEmail(p, from, { what: "verification code", secret: code, seconds, display: "code" });
  const appName = appNameOf(p);
  const template = p.smsCustomization?.template;
  return {
    text: template
      ? template.replace(CODE_PLACEHOLDER, code)
      : `${appName ? `${appName}: ` : ""}your verification code is ${code}. ${expiryOf(seconds)}`,
  };
}
