// A login's contacts: the email address or phone number a one-time password is sent to, as a request
// writes it and as the organization's users hold it. Emails compare without regard to ASCII case; phone
// numbers in E.164 form, without the spaces and punctuation people type.
import { serviceError } from "../../errors.js";
import type { ActivityContext } from "../../registry/registry.js";
import type { Db, Tx } from "../../store/handles.js";
import { foldAscii, type Channel } from "../../services/message-courier.js";

export type OtpType = "OTP_TYPE_EMAIL" | "OTP_TYPE_SMS";

export const EMAIL = /^[^\s@<>()",;:\\]+@[^\s@<>()",;:\\]+\.[^\s@<>()",;:\\]+$/;
const PHONE = /^\+[1-9]\d{6,14}$/;

/** The address trimmed, if it is one the courier can deliver to (one mailbox, at most 320 characters). */
export function deliverableEmail(value: unknown): string | undefined {
  const email = String(value ?? "").trim();
  return EMAIL.test(email) && email.length <= 320 ? email : undefined;
}

/** A contact as a request gives it (`field` names it in the refusal: "contact", or email_auth's "email"). */
export function requireContact(
  otpType: unknown,
  contact: unknown,
  field = "contact",
): { otpType: OtpType; contact: string; channel: Channel } {
  if (otpType === "OTP_TYPE_EMAIL") {
    const email = deliverableEmail(contact);
    if (email === undefined)
      throw serviceError(
        "INVALID_CONTACT",
        `${field} must be an email address${field === "contact" ? " for OTP_TYPE_EMAIL" : ""}, got "${String(contact)}"`,
      );
    return { otpType, contact: email, channel: "email" };
  }
  if (otpType === "OTP_TYPE_SMS") {
    const phone = bareNumber(String(contact ?? ""));
    if (!PHONE.test(phone))
      throw serviceError(
        "INVALID_CONTACT",
        `contact must be a phone number in E.164 form (+ and 7 to 15 digits) for OTP_TYPE_SMS, got "${String(contact)}"`,
      );
    return { otpType, contact: phone, channel: "sms" };
  }
  throw serviceError("INVALID_OTP_TYPE", `otpType must be OTP_TYPE_EMAIL or OTP_TYPE_SMS, got "${String(otpType)}"`);
}

/** Emails compare without regard to ASCII letter case only (toLowerCase would also fold look-alikes
 * such as the Kelvin sign into "k"). */
export const foldEmail = foldAscii;

/** A phone number as compared and stored: without the spaces, brackets, dots and dashes people write in it. */
const bareNumber = (phone: string) => phone.replace(/[\s().-]/g, "");

/** The users of the organization holding this email (ASCII case-insensitive) or phone number: each with
 * the contact as stored (where a code goes) and when they proved it (null: never). */
export async function usersWithContact(db: Db | Tx, organizationId: string, otpType: string, contact: string) {
  const byEmail = otpType === "OTP_TYPE_EMAIL";
  const rows = await db
    .selectFrom("users")
    .select(["id", "email", "phone_number", "email_verified_at", "phone_verified_at"])
    .where("organization_id", "=", organizationId)
    .where(byEmail ? "email" : "phone_number", "is not", null)
    .execute();
  const wanted = byEmail ? foldEmail(contact) : bareNumber(contact);
  return rows.flatMap((r) => {
    const stored = byEmail ? r.email! : r.phone_number!;
    const verifiedAt = byEmail ? r.email_verified_at : r.phone_verified_at;
    return (byEmail ? foldEmail(stored) : bareNumber(stored)) === wanted ? [{ id: r.id, contact: stored, verifiedAt }] : [];
  });
}

/** The user of the organization with this email (ASCII case-insensitive) or phone number, and the
 * contact as stored for it (where the code goes). Where some holders have verified the contact, only
 * they count: a copy set on another user and never proven (anyone allowed to create users can write
 * one) does not make the user who proved it ambiguous. */
export async function userWithContact(ctx: ActivityContext, otpType: string, contact: string): Promise<{ id: string; contact: string }> {
  const byEmail = otpType === "OTP_TYPE_EMAIL";
  const holders = await usersWithContact(ctx.trx, ctx.organizationId, otpType, contact);
  const verified = holders.filter((holder) => holder.verifiedAt !== null);
  const found = verified.length > 0 ? verified : holders;
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
  return { id: found[0]!.id, contact: found[0]!.contact };
}

/** Marks the contact proven on the user (list_verified_suborgs reads it). */
export async function markVerified(ctx: ActivityContext, userId: string, otpType: string): Promise<void> {
  await ctx.trx
    .updateTable("users")
    .set(otpType === "OTP_TYPE_EMAIL" ? { email_verified_at: ctx.now } : { phone_verified_at: ctx.now })
    .where("id", "=", userId)
    .execute();
}
