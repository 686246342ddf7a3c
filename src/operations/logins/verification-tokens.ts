// Verification tokens: what verify_otp returns for a proven contact, an ES256 JWT signed by the bundle
// signer naming the contact (and the client key it is bound to, if any). otp_login spends one for a
// session; create_sub_organization and update_user_email/phone accept one as proof of a contact. Each is
// recorded, so that it can be spent once.
import { serviceError } from "../../errors.js";
import type { ActivityContext } from "../../registry/registry.js";
import { secondsParameter } from "../resources.js";
import { newId } from "../../store/ids.js";

const MAX_VERIFICATION_TOKEN_SECONDS = 86_400;

export interface VerificationClaims {
  id: string;
  verification_type: string;
  contact: string;
  organization_id: string;
  public_key?: string;
  /** Milliseconds since the epoch, as a string (what the clients' verifier reads). */
  exp: string;
}

/** A verification token's validity in seconds: the request's, up to a day, or the configured default. */
export function verificationTokenSeconds(ctx: ActivityContext, requested: string | undefined): number {
  const rule = {
    field: "expirationSeconds",
    max: MAX_VERIFICATION_TOKEN_SECONDS,
    of: "a verification token",
    code: "INVALID_EXPIRATION",
  } as const;
  return secondsParameter(requested, rule) ?? ctx.env.otp.verificationTokenSeconds;
}

/** Records a verification token for a contact just proven, bound to `publicKey` if given, and signs it. */
export async function issueVerificationToken(
  ctx: ActivityContext,
  proven: { otpType: string; contact: string; publicKey: string | undefined; seconds: number },
): Promise<string> {
  const id = newId();
  const expiresAt = ctx.now + proven.seconds * 1000;
  await ctx.trx
    .insertInto("verification_tokens")
    .values({
      id,
      organization_id: ctx.organizationId,
      otp_type: proven.otpType,
      contact: proven.contact,
      public_key: proven.publicKey ?? null,
      expires_at: expiresAt,
      used_at: null,
      created_at: ctx.now,
    })
    .execute();
  const claims: VerificationClaims = {
    id,
    verification_type: proven.otpType,
    contact: proven.contact,
    organization_id: ctx.organizationId,
    ...(proven.publicKey ? { public_key: proven.publicKey } : {}),
    exp: String(expiresAt),
  };
  return ctx.env.bundles.signJwt({ ...claims });
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
