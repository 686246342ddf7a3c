// Sessions: a login turns a key the client holds into an API key of the user that expires with the
// session, so the client's next requests are ordinary stamped requests. Two ways to hand it over:
//   - a session JWT (stamp_login, otp_login, oauth_login, create_read_only_session): the client made
//     the key pair and sends its public half; the JWT (ES256, the deployment's session signer, JWKS
//     at /.well-known/sigil.json) tells the client which user, organization and expiry it got;
//   - a credential bundle (create_read_write_session, otp_auth, oauth): the service makes the key
//     pair and seals its private half (HPKE) to the client's targetPublicKey; base58check of the
//     compressed encapsulated key followed by the ciphertext, as @turnkey/crypto's
//     decryptCredentialBundle reads it.
// Each login kind keeps its own keys: invalidateExisting removes the user's earlier keys of that kind.
import { p256 } from "@noble/curves/nist.js";
import { createBase58check } from "@scure/base";
import { sha256 as sha256Hash } from "@noble/hashes/sha2.js";
import { serviceError } from "../../errors.js";
import { HpkeError, sealTo, uncompressedP256 } from "../../crypto/hpke.js";
import { compressP256 } from "../../crypto/keys.js";
import { defineActivity, type ActivityContext } from "../../registry/registry.js";
import type { SessionSettings } from "../../services/login-settings.js";
import { requireUser, secondsParameter } from "../resources.js";
import { newId } from "../../store/ids.js";
import { forgetApiKeyAllowlists } from "../organizations/ip-allowlists.js";
import { usableSessionProfile } from "./session-profiles.js";

/** The login that made a session key. RECOVERY is a recovery credential (init_user_email_recovery): it may
 * only call recover_user. */
export type SessionKind = "LOGIN" | "READ_WRITE" | "READ_ONLY" | "OAUTH" | "OTP_AUTH" | "EMAIL_AUTH" | "RECOVERY";
export type SessionType = "SESSION_TYPE_READ_WRITE" | "SESSION_TYPE_READ_ONLY";

/** Expired session keys are kept this long (so a late request hears API_KEY_EXPIRED, not "unknown
 * key"), then removed when the same user logs in again: logins would otherwise pile up for ever. */
const EXPIRED_KEY_GRACE_MS = 24 * 3600 * 1000;

const base58check = createBase58check(sha256Hash);

/** The validity a login asks for (expirationSeconds), within the configured maximum; undefined when absent. */
function requestedSessionSeconds(
  settings: SessionSettings,
  requested: string | undefined,
  field = "expirationSeconds",
): number | undefined {
  const tooLong = (value: string) =>
    serviceError(
      "SESSION_EXPIRATION_TOO_LONG",
      `${field} ${value} exceeds the longest session this server grants (${settings.maxSeconds} seconds, SIGIL_SESSION_MAX_SECONDS)`,
    );
  return secondsParameter(requested, { field, max: settings.maxSeconds, of: "a session", code: "INVALID_EXPIRATION", tooLong });
}

/** A session's validity in seconds: the request's, within the configured maximum, or the default. */
export function sessionSeconds(settings: SessionSettings, requested: string | undefined, field = "expirationSeconds"): number {
  return requestedSessionSeconds(settings, requested, field) ?? settings.defaultSeconds;
}

/** A client's P-256 public key as stored for API keys (compressed, lowercase hex). */
export function sessionPublicKey(value: unknown, field: string): string {
  try {
    return compressP256(uncompressedP256(String(value ?? ""), field));
  } catch (error) {
    if (error instanceof HpkeError) throw serviceError("INVALID_PUBLIC_KEY", error.message);
    throw error;
  }
}

// Hand-written: the normalized session every login flow (OTP, OAuth, passkey, stamp) builds from its own request shape.
export interface SessionKeyRequest {
  userId: string;
  /** Compressed P-256 hex. */
  publicKey: string;
  kind: SessionKind;
  type: SessionType;
  name: string;
  seconds: number;
  invalidateExisting?: boolean;
  /** The session profile the key is issued with: its scope bounds what the key may request. */
  sessionProfileId?: string;
}

/** Deletes session keys of the organization, and the IP allowlists kept for them. */
export async function deleteSessionKeys(ctx: Pick<ActivityContext, "trx" | "organizationId">, ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  await forgetApiKeyAllowlists(ctx.trx, ctx.organizationId, ids);
  await ctx.trx.deleteFrom("api_keys").where("organization_id", "=", ctx.organizationId).where("id", "in", ids).execute();
}

/**
 * Makes `publicKey` an API key of the user until the session ends. A key the same user already holds
 * as a session key is renewed (a client logging in again with its key pair); any other holder of the
 * key keeps it and the login is refused.
 */
export async function createSessionKey(ctx: ActivityContext, request: SessionKeyRequest): Promise<{ apiKeyId: string; expiresAt: number }> {
  const { trx, organizationId, now } = ctx;
  const expired = await trx
    .selectFrom("api_keys")
    .select("id")
    .where("user_id", "=", request.userId)
    .where("session_kind", "is not", null)
    .where("expires_at", "<=", now - EXPIRED_KEY_GRACE_MS)
    .execute();
  await deleteSessionKeys(
    ctx,
    expired.map((k) => k.id),
  );
  if (request.invalidateExisting) {
    const earlier = await trx
      .selectFrom("api_keys")
      .select("id")
      .where("user_id", "=", request.userId)
      .where("session_kind", "=", request.kind)
      .execute();
    await deleteSessionKeys(
      ctx,
      earlier.map((k) => k.id),
    );
  }
  const existing = await trx
    .selectFrom("api_keys")
    .select(["id", "user_id", "session_kind"])
    .where("organization_id", "=", organizationId)
    .where("public_key", "=", request.publicKey)
    .executeTakeFirst();
  if (existing) {
    if (existing.user_id !== request.userId || existing.session_kind === null) {
      throw serviceError(
        "API_KEY_ALREADY_EXISTS",
        `public key ${request.publicKey} is already an API key of this organization; a session needs a fresh key pair`,
        "FailedPrecondition",
      );
    }
    await deleteSessionKeys(ctx, [existing.id]);
  }
  const apiKeyId = newId();
  const expiresAt = now + request.seconds * 1000;
  await trx
    .insertInto("api_keys")
    .values({
      id: apiKeyId,
      organization_id: organizationId,
      user_id: request.userId,
      name: request.name,
      public_key: request.publicKey,
      curve: "API_KEY_CURVE_P256",
      expiration_seconds: String(request.seconds),
      expires_at: expiresAt,
      session_kind: request.kind,
      session_type: request.type,
      session_profile_id: request.sessionProfileId ?? null,
      created_at: now,
      updated_at: now,
    })
    .execute();
  return { apiKeyId, expiresAt };
}

/** A session profile as the session JWT names it (what @turnkey/core's parseSession reads). */
interface ProfileClaims {
  id: string;
  name: string;
  scope: string;
}

/** The session JWT the clients decode: expiry, the session key, its type, the user and organization;
 * for a session issued with a profile, the profile's name as session_type, its id and its scope. */
export function sessionJwt(
  ctx: ActivityContext,
  claims: { userId: string; publicKey: string; type: SessionType; expiresAt: number; credentialId?: string; profile?: ProfileClaims },
): string {
  const { profile } = claims;
  return ctx.env.sessions.signer.sign({
    ...(claims.credentialId ? { credential_id: claims.credentialId, jti: newId() } : {}),
    exp: Math.floor(claims.expiresAt / 1000),
    iat: Math.floor(ctx.now / 1000),
    public_key: claims.publicKey,
    session_type: profile ? profile.name : claims.type,
    ...(profile ? { session_profile_id: profile.id, scope: profile.scope } : {}),
    user_id: claims.userId,
    organization_id: ctx.organizationId,
  });
}

/**
 * A session for a key the client holds: the key becomes the user's until expiry; returns the JWT.
 * With a session profile (the organization's own, or its parent's), the key is bound to the profile,
 * whose scope then bounds every activity it requests (activities/authorization.ts), and the session
 * lasts no longer than the profile allows: the shorter of the request's and the profile's lifetimes,
 * whichever is given, else the default.
 */
export async function issueSession(
  ctx: ActivityContext,
  {
    sessionProfileId,
    expirationSeconds,
    ...request
  }: Omit<SessionKeyRequest, "type" | "seconds" | "sessionProfileId"> & {
    type?: SessionType;
    /** As the login sent it: absent or "" is not given. */
    expirationSeconds?: string;
    sessionProfileId?: string;
  },
): Promise<string> {
  const settings = ctx.env.sessions;
  const requested = requestedSessionSeconds(settings, expirationSeconds);
  // "" is how the product's policies see an omitted profile (activity.params.session_profile_id).
  const profile = sessionProfileId ? await usableSessionProfile(ctx.trx, ctx.organizationId, sessionProfileId) : undefined;
  // The profile's ceiling, within the server's maximum (which may have been lowered since it was made).
  const ceiling = profile?.expiration_seconds != null ? Math.min(Number(profile.expiration_seconds), settings.maxSeconds) : undefined;
  const seconds =
    ceiling === undefined ? (requested ?? settings.defaultSeconds) : requested === undefined ? ceiling : Math.min(requested, ceiling);
  const type = request.type ?? "SESSION_TYPE_READ_WRITE";
  const { expiresAt } = await createSessionKey(ctx, { ...request, type, seconds, sessionProfileId: profile?.id });
  return sessionJwt(ctx, {
    userId: request.userId,
    publicKey: request.publicKey,
    type,
    expiresAt,
    ...(profile ? { profile: { id: profile.id, name: profile.name, scope: profile.scope } } : {}),
  });
}

/** The key a credential bundle is sealed to (uncompressed P-256), or INVALID_TARGET_PUBLIC_KEY. */
export function bundleReceiver(targetPublicKey: string): Uint8Array {
  try {
    return uncompressedP256(String(targetPublicKey ?? ""), "targetPublicKey");
  } catch (error) {
    if (error instanceof HpkeError) throw serviceError("INVALID_TARGET_PUBLIC_KEY", error.message);
    throw error;
  }
}

/** `plaintext` sealed (HPKE) to `receiver` as a credential bundle: base58check of the compressed
 * encapsulated key and the ciphertext, what @turnkey/crypto's decryptCredentialBundle opens. */
export async function credentialBundleOf(receiver: Uint8Array, plaintext: Uint8Array): Promise<string> {
  const sealed = await sealTo(receiver, plaintext);
  const encapped = compressP256(Buffer.from(sealed.encappedPublic, "hex"));
  return base58check.encode(Buffer.concat([Buffer.from(encapped, "hex"), Buffer.from(sealed.ciphertext, "hex")]));
}

/** A session key made here, its private half sealed to `targetPublicKey` as a credential bundle. */
export async function issueCredentialBundle(
  ctx: ActivityContext,
  targetPublicKey: string,
  request: Omit<SessionKeyRequest, "publicKey" | "type">,
): Promise<{ apiKeyId: string; credentialBundle: string }> {
  const receiver = bundleReceiver(targetPublicKey);
  const secret = p256.utils.randomSecretKey();
  try {
    const publicKey = Buffer.from(p256.getPublicKey(secret, true)).toString("hex");
    const { apiKeyId } = await createSessionKey(ctx, { ...request, publicKey, type: "SESSION_TYPE_READ_WRITE" });
    return { apiKeyId, credentialBundle: await credentialBundleOf(receiver, secret) };
  } finally {
    secret.fill(0);
  }
}

const MAX_KEY_NAME = 256;

/** The requested apiKeyName (at most 256 characters, as any API key's name), or "<prefix> - <timestamp>",
 * the product's default key names (e.g. "Oauth - 2026-11-22T07:00:00.000Z"). */
export function defaultKeyName(prefix: string, now: number, requested?: string): string {
  const name = requested?.trim();
  if (!name) return `${prefix} - ${new Date(now).toISOString()}`;
  if (name.length > MAX_KEY_NAME) throw serviceError("REQUEST_INVALID", `apiKeyName must be at most ${MAX_KEY_NAME} characters`);
  return name;
}

async function organizationAndUser(ctx: ActivityContext, userId: string) {
  const user = await requireUser(ctx.trx, ctx.organizationId, userId);
  const organization = await ctx.trx
    .selectFrom("organizations")
    .select("name")
    .where("id", "=", ctx.organizationId)
    .executeTakeFirstOrThrow();
  return { organizationId: ctx.organizationId, organizationName: organization.name, userId: user.id, username: user.name };
}

/** The activity's own user may always log itself in (unless a policy denies it); another user's
 * session needs a policy or the root quorum. */
const ownUser = (userId: string | undefined, principal: { userId: string }) => userId ?? principal.userId;

export const sessionOperations = [
  defineActivity({
    name: "stamp_login",
    summary: "Log the stamping user in: their new key pair becomes a session key; returns the session JWT.",
    resource: "AUTH",
    action: "CREATE",
    credentialOwner: (_p, principal) => principal.userId,
    policyParameters: (p) => ({
      public_key: p.publicKey,
      expiration_seconds: p.expirationSeconds ?? "",
      invalidate_existing: p.invalidateExisting ?? false,
      session_profile_id: p.sessionProfileId ?? "",
    }),
    async execute(ctx, p) {
      const publicKey = sessionPublicKey(p.publicKey, "publicKey");
      const session = await issueSession(ctx, {
        userId: ctx.principal.userId,
        publicKey,
        kind: "LOGIN",
        name: defaultKeyName("Login Session", ctx.now),
        expirationSeconds: p.expirationSeconds,
        invalidateExisting: p.invalidateExisting,
        sessionProfileId: p.sessionProfileId,
      });
      return { session };
    },
  }),

  defineActivity({
    name: "create_read_write_session",
    summary: "A read-write session key for a user (the caller by default), sealed to targetPublicKey as a credential bundle.",
    resource: "AUTH",
    action: "CREATE",
    // V1 names the user by email; its result is resolved in execute. Without either, the caller.
    credentialOwner: (p, principal) => (p.email ? undefined : ownUser(p.userId, principal)),
    policyParameters: (p) => ({
      user_id: p.userId ?? "",
      email: p.email ?? "",
      target_public_key: p.targetPublicKey,
      expiration_seconds: p.expirationSeconds ?? "",
    }),
    async execute(ctx, p) {
      let userId = ownUser(p.userId, ctx.principal);
      if (p.email !== undefined) {
        const matches = await ctx.trx
          .selectFrom("users")
          .select("id")
          .where("organization_id", "=", ctx.organizationId)
          .where("email", "=", p.email)
          .execute();
        if (matches.length !== 1)
          throw serviceError("USER_NOT_FOUND", `no single user of organization ${ctx.organizationId} has email ${p.email}`);
        userId = matches[0]!.id;
      }
      const names = await organizationAndUser(ctx, userId);
      const bundle = await issueCredentialBundle(ctx, p.targetPublicKey, {
        userId,
        kind: "READ_WRITE",
        name: defaultKeyName("Read Write Session", ctx.now, p.apiKeyName),
        seconds: sessionSeconds(ctx.env.sessions, p.expirationSeconds),
        invalidateExisting: p.invalidateExisting,
      });
      return { ...names, ...bundle };
    },
  }),

  defineActivity({
    name: "create_read_only_session",
    summary: "A read-only session (one hour) of the stamping credential: a token sent as X-Session on queries (never on submits).",
    resource: "AUTH",
    action: "CREATE",
    // A bearer token for an hour of reading: nobody but the requester sees it.
    secretResults: ["session"],
    credentialOwner: (_p, principal) => principal.userId,
    async execute(ctx) {
      const names = await organizationAndUser(ctx, ctx.principal.userId);
      const expiresAt = ctx.now + ctx.env.sessions.readOnlySeconds * 1000;
      // The session is a token the client sends back as X-Session (sdk-browser's readOnlySession):
      // no key is created; it reads as the stamping credential until expiry, or until that credential
      // is deleted. It is a JWT (session_type SESSION_TYPE_READ_ONLY) signed by the session signer.
      const session = sessionJwt(ctx, {
        userId: ctx.principal.userId,
        publicKey: ctx.principal.publicKey,
        type: "SESSION_TYPE_READ_ONLY",
        expiresAt,
        credentialId: ctx.principal.credentialId,
      });
      return { ...names, session, sessionExpiry: String(Math.floor(expiresAt / 1000)) };
    },
  }),
];
