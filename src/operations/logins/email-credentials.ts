// Email auth and email recovery, the product's credential-by-email flows. The service makes a key pair
// for the user of the organization holding the email, seals its private half to the client's
// targetPublicKey as a credential bundle (the format of otp_auth and oauth: @turnkey/crypto's
// decryptCredentialBundle opens it) and emails the bundle to the address on record; the response names
// the key, never the bundle. The email is customized, checked and counted against the send budgets as a
// one-time password's is (otp-messages.ts, services/send-budgets.ts), and queued in the activity's own
// transaction (outgoing-messages.ts).
//   - email_auth: the key is a session key of the user, until it expires.
//   - init_user_email_recovery → recover_user: the key is a recovery credential. It may only request
//     recover_user (the pipeline refuses it anything else, queries and votes included), for its own user,
//     once: recover_user adds the passkey and deletes the credential. A newer recovery email replaces it.
//     The user's other credentials stay: recovery adds a way in, as the product's docs describe it.
import { serviceError } from "../../errors.js";
import { defineActivity, type ActivityContext, type ParametersOf } from "../../registry/registry.js";
import { recordSend } from "../../services/send-budgets.js";
import { addAuthenticators } from "../identity/credentials.js";
import { requireFeature } from "../organizations/features.js";
import { requireUser } from "../resources.js";
import { requireContact, userWithContact } from "./contacts.js";
import { checkCustomization, composeEmail } from "./otp-messages.js";
import { queueMessage, requesterParent } from "./outgoing-messages.js";
import { bundleReceiver, defaultKeyName, deleteSessionKeys, issueCredentialBundle, sessionSeconds, type SessionKind } from "./sessions.js";

export const EMAIL_AUTH_FEATURE = "FEATURE_NAME_EMAIL_AUTH";
export const EMAIL_RECOVERY_FEATURE = "FEATURE_NAME_EMAIL_RECOVERY";

type EmailCredentialParams = ParametersOf<"email_auth"> | ParametersOf<"init_user_email_recovery">;

interface EmailedCredential {
  feature: string;
  /** What the feature enables, for FEATURE_NOT_ENABLED. */
  flow: string;
  kind: SessionKind;
  /** The key's name when the request names none: "<prefix> - <timestamp>". */
  keyPrefix: string;
  apiKeyName?: string;
  /** What the email calls the bundle, after the app's name. */
  what: string;
  invalidateExisting: boolean;
}

/** Makes the key, seals it to targetPublicKey and queues the email carrying it. */
async function emailCredential(
  ctx: ActivityContext,
  p: EmailCredentialParams,
  credential: EmailedCredential,
): Promise<{ userId: string; apiKeyId: string }> {
  // The request's own faults first, then the organization's state, then the budgets.
  const { contact } = requireContact("OTP_TYPE_EMAIL", p.email, "email");
  const seconds = sessionSeconds(ctx.env.sessions, p.expirationSeconds);
  bundleReceiver(p.targetPublicKey);
  const parent = await requesterParent(ctx);
  const from = checkCustomization(ctx.env.otp, p, "email", parent !== null);
  await requireFeature(ctx.trx, ctx.organizationId, credential.feature, credential.flow);
  // The bundle goes to the address on record, however the request spelled it.
  const user = await userWithContact(ctx, "OTP_TYPE_EMAIL", contact);
  await recordSend(ctx, ctx.env.otp, "email", user.contact, parent);
  const { apiKeyId, credentialBundle } = await issueCredentialBundle(ctx, p.targetPublicKey, {
    userId: user.id,
    kind: credential.kind,
    name: defaultKeyName(credential.keyPrefix, ctx.now, credential.apiKeyName),
    seconds,
    invalidateExisting: credential.invalidateExisting,
  });
  const email = composeEmail(p, from, { what: credential.what, secret: credentialBundle, seconds, display: "bundle" });
  // Of no use once the key has expired: the courier drops it then.
  await queueMessage(ctx, "email", user.contact, email, ctx.now + seconds * 1000);
  return { userId: user.id, apiKeyId };
}

const policyParams = (p: EmailCredentialParams) => ({
  email: p.email,
  target_public_key: p.targetPublicKey,
  expiration_seconds: p.expirationSeconds ?? "",
  app_name: p.emailCustomization?.appName ?? "",
});

export const emailCredentialOperations = [
  defineActivity({
    name: "email_auth",
    summary:
      "Email a user of the organization a session key sealed to targetPublicKey (a credential bundle); returns the key's id, never the bundle.",
    resource: "AUTH",
    action: "CREATE",
    parentMayRequest: true,
    queuesMessages: true,
    policyParameters: (p) => ({ ...policyParams(p), invalidate_existing: p.invalidateExisting ?? false }),
    async execute(ctx, p) {
      return emailCredential(ctx, p, {
        feature: EMAIL_AUTH_FEATURE,
        flow: "email auth",
        kind: "EMAIL_AUTH",
        keyPrefix: "Email Auth",
        apiKeyName: p.apiKeyName,
        what: "sign-in credential",
        invalidateExisting: p.invalidateExisting ?? false,
      });
    },
  }),

  defineActivity({
    name: "init_user_email_recovery",
    summary:
      "Email a user of the organization a recovery credential sealed to targetPublicKey; it may only call recover_user, for that user, once.",
    resource: "RECOVERY",
    action: "CREATE",
    parentMayRequest: true,
    queuesMessages: true,
    policyParameters: policyParams,
    async execute(ctx, p) {
      // Only the latest recovery credential of a user is valid: an earlier email's stops working.
      const { userId } = await emailCredential(ctx, p, {
        feature: EMAIL_RECOVERY_FEATURE,
        flow: "email recovery",
        kind: "RECOVERY",
        keyPrefix: "Email Recovery",
        what: "recovery credential",
        invalidateExisting: true,
      });
      return { userId };
    },
  }),

  defineActivity({
    name: "recover_user",
    summary:
      "With the recovery credential from init_user_email_recovery: register a new passkey for its user (the credential is then spent).",
    resource: "CREDENTIAL",
    action: "CREATE",
    acceptsRecoveryCredential: true,
    policyParameters: (p) => ({ user_id: p.userId }),
    credentialOwner: (p) => p.userId,
    async execute(ctx, p) {
      // Read from the key itself, not from how the request was authenticated, so an activity run later
      // (after approvals) is held to the same rule.
      const key = await ctx.trx
        .selectFrom("api_keys")
        .select(["id", "user_id"])
        .where("id", "=", ctx.principal.credentialId)
        .where("session_kind", "=", "RECOVERY")
        .where("expires_at", ">", ctx.now)
        .executeTakeFirst();
      if (!key)
        throw serviceError(
          "RECOVERY_CREDENTIAL_REQUIRED",
          "recover_user must be stamped with the recovery credential init_user_email_recovery emailed to the user",
        );
      if (key.user_id !== p.userId)
        throw serviceError("RECOVERY_USER_MISMATCH", `the recovery credential belongs to another user than ${p.userId}`);
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      await requireFeature(ctx.trx, ctx.organizationId, EMAIL_RECOVERY_FEATURE, "email recovery");
      const authenticatorId = await addAuthenticators(ctx, p.userId, [p.authenticator], "authenticator");
      // Spent: the recovery credential goes, with any IP allowlist kept for it.
      await deleteSessionKeys(ctx, [key.id]);
      return { authenticatorId };
    },
  }),
];
