// One-time passwords by email and SMS. Two flows, as in the product:
//   - init_otp_auth → otp_auth: a code sent to a user of the organization; the right code returns a
//     credential bundle (a session key sealed to targetPublicKey);
//   - init_otp → verify_otp → otp_login: a code sent to any contact; the right code returns a
//     verification token (an ES256 JWT naming the contact, signed by the bundle signer), which
//     otp_login spends once for a session of the user holding that contact (or which
//     create_sub_organization accepts as proof of the root user's contact).// Codes are 6–9 characters, digits or Crockford base32, generated with the CSPRNG; only an HMAC of
// them is stored. Each expires (5 minutes by default, up to 10), is single-use, and burns after a
// bounded number of wrong tries (a wrong try is counted even though its activity fails: the
// `afterFailure` hook runs after the rollback). The message goes out through the courier (see
// services/message-courier.ts), queued in the activity's own transaction, once the send fits its budgets
// (services/send-budgets.ts).
// This file declares the operations; their pieces live beside it: contacts.ts (addresses, the user
// holding one), otp-codes.ts (making and checking codes), otp-messages.ts (the message and its
// customization rules), otp-sending.ts (starting an OTP: budgets, the stored code, the queued message),
// verification-tokens.ts and client-signatures.ts.
import { ActivityTypes } from "../../api/types.js";
import { defineActivity, type ActivityContext } from "../../registry/registry.js";
import { markVerified, requireContact, userWithContact, type OtpType } from "./contacts.js";
import { checkClientSignature } from "./client-signatures.js";
import { consumeOtp, countWrongCode } from "./otp-codes.js";
import { requestedAppName, type OtpInitParams } from "./otp-messages.js";
import { startOtp } from "./otp-sending.js";
import { requireFeature } from "../organizations/features.js";
import { defaultKeyName, issueCredentialBundle, issueSession, sessionPublicKey, sessionSeconds } from "./sessions.js";
import { issueVerificationToken, spendVerificationToken, verificationTokenSeconds } from "./verification-tokens.js";

/** The feature that lets an organization's users log in by a code of this type: on by default in
 * sub-organizations (create_sub_organization's disable* flags turn them off), set by the root quorum
 * elsewhere (set_organization_feature). */
export const OTP_LOGIN_FEATURES: Record<OtpType, string> = {
  OTP_TYPE_EMAIL: "FEATURE_NAME_OTP_EMAIL_AUTH",
  OTP_TYPE_SMS: "FEATURE_NAME_SMS_AUTH",
};

const requireLoginFeature = (ctx: ActivityContext, otpType: string) =>
  requireFeature(ctx.trx, ctx.organizationId, OTP_LOGIN_FEATURES[otpType as OtpType], `${otpType} login`);

const policyParams = (p: OtpInitParams) => ({
  otp_type: p.otpType,
  contact: p.contact,
  otp_length: p.otpLength ?? 9,
  alphanumeric: p.alphanumeric ?? true,
  app_name: requestedAppName(p) ?? "",
});

export const otpOperations = [
  defineActivity({
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

  defineActivity({
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

  defineActivity({
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
      return startOtp(ctx, p, "otp", null, type !== ActivityTypes.ACTIVITY_TYPE_INIT_OTP);
    },
  }),

  defineActivity({
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
      const seconds = verificationTokenSeconds(ctx, p.expirationSeconds);
      const boundKey = p.publicKey !== undefined && p.publicKey !== "" ? sessionPublicKey(p.publicKey, "publicKey") : undefined;
      const { row, publicKey } = await consumeOtp(ctx, p, "otp");
      const key = publicKey !== undefined ? sessionPublicKey(publicKey, "the encrypted bundle's public_key") : boundKey;
      const verificationToken = await issueVerificationToken(ctx, { otpType: row.otp_type, contact: row.contact, publicKey: key, seconds });
      return { verificationToken };
    },
  }),

  defineActivity({
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
      session_profile_id: p.sessionProfileId ?? "",
    }),
    async execute(ctx, p, type) {
      const publicKey = sessionPublicKey(p.publicKey, "publicKey");
      const claims = await spendVerificationToken(ctx, p.verificationToken);
      checkClientSignature(
        p.clientSignature,
        claims,
        { type: "USAGE_TYPE_LOGIN", sessionKey: publicKey },
        type !== ActivityTypes.ACTIVITY_TYPE_OTP_LOGIN,
      );
      await requireLoginFeature(ctx, claims.verification_type);
      const { id: userId } = await userWithContact(ctx, claims.verification_type, claims.contact);
      await markVerified(ctx, userId, claims.verification_type);
      const session = await issueSession(ctx, {
        userId,
        publicKey,
        kind: "LOGIN",
        name: defaultKeyName("OTP Login", ctx.now),
        expirationSeconds: p.expirationSeconds,
        invalidateExisting: p.invalidateExisting,
        sessionProfileId: p.sessionProfileId,
      });
      return { session };
    },
  }),
];
