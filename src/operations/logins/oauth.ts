// Logins with an OpenID Connect identity token (Google, Apple, an in-house issuer…): oauth returns a
// credential bundle, oauth_login a session JWT. The token must verify against its issuer's keys
// (auth/oidc.ts; only operator-listed issuers), name a user of the organization through one of its
// OAuth providers (issuer, audience, subject), and carry as nonce the SHA-256 (hex) of the public key
// the login is for — so a token captured on its way to one client cannot log in another key. OAuth
// providers themselves are managed here too. The audit log keeps the token's identity claims, never
// the token (a bearer credential until it expires).
import crypto from "node:crypto";
import { serviceError } from "../../errors.js";
import { unverifiedOidcClaims, type OidcIdentity } from "../../auth/oidc.js";
import { defineActivity, defineQuery, type ActivityContext, type OperationEnvironment } from "../../registry/registry.js";
import { distinct, renderOauthProvider, requireAtMost, requireUser } from "../resources.js";
import { addOauthProviders, oauthProviderAsRecorded, warmOidcKeys } from "../identity/users.js";
import { defaultKeyName, issueCredentialBundle, issueSession, sessionPublicKey, sessionSeconds } from "./sessions.js";

/** The nonce an OIDC token carries for a key: sha256 of its hex, as hex. */
export const nonceOf = (publicKey: string) =>
  crypto
    .createHash("sha256")
    .update(String(publicKey ?? ""), "utf8")
    .digest("hex");

/** The verified token's user: the organization's user with an OAuth provider for (issuer, one of the
 * token's audiences, subject). */
async function userOfToken(ctx: ActivityContext, identity: OidcIdentity): Promise<string> {
  if (identity.audiences.length === 0)
    throw serviceError("OIDC_AUDIENCE_MISMATCH", "the OIDC token names no audience (aud)", "PermissionDenied");
  const providers = await ctx.trx
    .selectFrom("oauth_providers")
    .select(["user_id", "audience"])
    .where("organization_id", "=", ctx.organizationId)
    .where("issuer", "=", identity.issuer)
    .where("subject", "=", identity.subject)
    .execute();
  if (providers.length === 0)
    throw serviceError(
      "OAUTH_PROVIDER_NOT_FOUND",
      `no user of organization ${ctx.organizationId} has an OAuth provider for ${identity.issuer} subject ${identity.subject}`,
    );
  const match = providers.find((p) => identity.audiences.includes(p.audience));
  if (!match)
    throw serviceError(
      "OIDC_AUDIENCE_MISMATCH",
      `the OIDC token's audience (${identity.audiences.join(", ")}) is not the one this user's provider was registered for`,
      "PermissionDenied",
    );
  return match.user_id;
}

async function verifiedUser(ctx: ActivityContext, oidcToken: string, publicKey: string): Promise<string> {
  const identity = await ctx.env.oidc.verify(oidcToken);
  if (identity.nonce !== nonceOf(publicKey)) {
    throw serviceError(
      "OIDC_NONCE_MISMATCH",
      "the OIDC token's nonce is not sha256(public key) of this login: the token was issued for another key",
    );
  }
  return userOfToken(ctx, identity);
}

/** Verification before the organization's lock is taken: fetching an issuer's keys may take a while.
 * `execute` verifies again (from jose's cache). */
const warmUp = async (p: { oidcToken: string }, env: OperationEnvironment) => {
  await env.oidc.verify(p.oidcToken);
};

export const oauthOperations = [
  defineActivity({
    name: "oauth",
    summary: "Log in with an OIDC identity token: a session key sealed to targetPublicKey (credential bundle). BETA in the product.",
    resource: "AUTH",
    action: "CREATE",
    parentMayRequest: true,
    secretParameters: ["oidcToken"],
    intentOf: (p) => oauthProviderAsRecorded(p),
    policyParameters: (p) => ({
      target_public_key: p.targetPublicKey,
      expiration_seconds: p.expirationSeconds ?? "",
      oidc_issuer: unverifiedOidcClaims(p.oidcToken)?.iss ?? "",
    }),
    precheck: warmUp,
    async execute(ctx, p) {
      const seconds = sessionSeconds(ctx.env.sessions, p.expirationSeconds);
      const userId = await verifiedUser(ctx, p.oidcToken, p.targetPublicKey);
      const bundle = await issueCredentialBundle(ctx, p.targetPublicKey, {
        userId,
        kind: "OAUTH",
        name: defaultKeyName("Oauth", ctx.now, p.apiKeyName),
        seconds,
        invalidateExisting: p.invalidateExisting,
      });
      return { userId, ...bundle };
    },
  }),

  defineActivity({
    name: "oauth_login",
    summary: "Log in with an OIDC identity token: publicKey becomes a session key; returns the session JWT.",
    resource: "AUTH",
    action: "CREATE",
    parentMayRequest: true,
    secretParameters: ["oidcToken"],
    intentOf: (p) => oauthProviderAsRecorded(p),
    policyParameters: (p) => ({
      public_key: p.publicKey,
      expiration_seconds: p.expirationSeconds ?? "",
      oidc_issuer: unverifiedOidcClaims(p.oidcToken)?.iss ?? "",
      session_profile_id: p.sessionProfileId ?? "",
    }),
    precheck: warmUp,
    async execute(ctx, p) {
      const publicKey = sessionPublicKey(p.publicKey, "publicKey");
      const userId = await verifiedUser(ctx, p.oidcToken, p.publicKey);
      const session = await issueSession(ctx, {
        userId,
        publicKey,
        kind: "LOGIN",
        name: defaultKeyName("OAuth Login", ctx.now),
        expirationSeconds: p.expirationSeconds,
        invalidateExisting: p.invalidateExisting,
        sessionProfileId: p.sessionProfileId,
      });
      return { session };
    },
  }),

  // Linking needs a token that verifies, or claims someone trusted vouches for (users.ts oidcIdentity).
  defineActivity({
    name: "create_oauth_providers",
    summary: "Link OIDC identities (issuer, audience, subject) to a user, from a token's claims or (V2) the claims themselves.",
    resource: "CREDENTIAL",
    action: "CREATE",
    // Linking one's own identity by token needs no policy; bare claims prove nothing, so they always do.
    credentialOwner: (p) => ((p.oauthProviders ?? []).some((o) => "oidcClaims" in o && o.oidcClaims !== undefined) ? undefined : p.userId),
    intentOf: (p) => ({ ...p, oauthProviders: (p.oauthProviders ?? []).map(oauthProviderAsRecorded) }),
    policyParameters: (p) => ({ user_id: p.userId, provider_names: (p.oauthProviders ?? []).map((o) => o.providerName) }),
    precheck: (p, env) => warmOidcKeys(p.oauthProviders ?? [], env),
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      requireAtMost(p.oauthProviders ?? [], "oauthProviders");
      if (!p.oauthProviders?.length) throw serviceError("REQUEST_INVALID", "oauthProviders must list at least one provider");
      return { providerIds: await addOauthProviders(ctx, p.userId, p.oauthProviders, "oauthProviders") };
    },
  }),

  defineActivity({
    name: "delete_oauth_providers",
    summary: "Unlink OIDC identities from a user.",
    resource: "CREDENTIAL",
    action: "DELETE",
    credentialOwner: (p) => p.userId,
    policyParameters: (p) => ({ user_id: p.userId, provider_ids: p.providerIds }),
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      const ids = distinct(p.providerIds ?? [], "providerIds");
      if (ids.length === 0) throw serviceError("REQUEST_INVALID", "providerIds must list at least one provider");
      const found = await ctx.trx
        .selectFrom("oauth_providers")
        .select("id")
        .where("user_id", "=", p.userId)
        .where("id", "in", ids)
        .execute();
      const missing = ids.filter((id) => !found.some((f) => f.id === id));
      if (missing.length) throw serviceError("OAUTH_PROVIDER_NOT_FOUND", `user ${p.userId} has no OAuth provider ${missing.join(", ")}`);
      await ctx.trx.deleteFrom("oauth_providers").where("id", "in", ids).execute();
      return { providerIds: ids };
    },
  }),

  defineQuery({
    name: "get_oauth_providers",
    summary: "The OAuth providers of a user (the caller when userId is absent).",
    async run(ctx, body) {
      const userId = body.userId ?? ctx.principal.userId;
      await requireUser(ctx.db, ctx.organizationId, userId);
      const rows = await ctx.db
        .selectFrom("oauth_providers")
        .selectAll()
        .where("user_id", "=", userId)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return { oauthProviders: rows.map(renderOauthProvider) };
    },
  }),
];
