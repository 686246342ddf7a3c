// Starting a one-time password: the contact and customization checked, the send counted against its
// budgets (services/send-budgets.ts), the code made and stored, and the message queued for the courier
// (services/message-courier.ts) in the activity's own transaction, so it goes out only if the activity
// commits.
import { p256 } from "@noble/curves/nist.js";
import { recordSend } from "../../services/send-budgets.js";
import type { ActivityContext } from "../../registry/registry.js";
import { newId } from "../../store/ids.js";
import { signedBundle } from "../secure-channel.js";
import { requireContact } from "./contacts.js";
import { EXPIRED_CODE_KEPT_MS, codeShape, generateCode, hashOf, otpSeconds, targetIdentity, type Flow } from "./otp-codes.js";
import { checkCustomization, composeMessage, type OtpInitParams } from "./otp-messages.js";
import { queueMessage, requesterParent } from "./outgoing-messages.js";

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
