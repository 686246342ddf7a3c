// Starting a one-time password: the contact and customization checked, the send counted against its
// budgets (services/send-budgets.ts), the code made and stored, and the message queued for the courier
// (services/message-courier.ts) in the activity's own transaction, so it goes out only if the activity
// commits.
import { p256 } from "@noble/curves/nist.js";
import { hasTransport, messageIdentity, type Channel, type MessageContent } from "../../services/message-courier.js";
import { recordSend } from "../../services/send-budgets.js";
import type { ActivityContext } from "../../registry/registry.js";
import { newId } from "../../store/ids.js";
import { signedBundle } from "../wallets/exports.js";
import { requireContact } from "./contacts.js";
import { EXPIRED_CODE_KEPT_MS, codeShape, generateCode, hashOf, otpSeconds, targetIdentity, type Flow } from "./otp-codes.js";
import { checkCustomization, composeMessage, type OtpInitParams } from "./otp-messages.js";

/** The parent of the organization whose credential asks: set when that is a sub-organization (an end
 * user's own credential), null for a top-level organization (the app's backend). */
export async function requesterParent(ctx: ActivityContext): Promise<string | null> {
  const organization = await ctx.trx
    .selectFrom("organizations")
    .select("parent_organization_id")
    .where("id", "=", ctx.principal.organizationId)
    .executeTakeFirst();
  return organization?.parent_organization_id ?? null;
}

/** Queues a message in the activity's transaction: sealed, and kept in the outbox when its channel
 * has no transport. Returns the message's id. */
export async function queueMessage(
  ctx: ActivityContext,
  channel: Channel,
  recipient: string,
  content: MessageContent,
  expiresAt: number,
): Promise<string> {
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
  return id;
}

/** Makes and sends a code; returns the OTP id (and, with `encryptionTarget`, the signed bundle of the
 * key verify_otp V2's encrypted code is sealed to). */
export async function startOtp(
  ctx: ActivityContext,
  p: OtpInitParams,
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
