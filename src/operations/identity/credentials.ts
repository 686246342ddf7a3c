// API keys and passkeys (authenticators): the credentials users stamp requests with.
import { serviceError } from "../../errors.js";
import { validatePublicKey } from "../../crypto/keys.js";
import { verifyPasskeyRegistration } from "../../auth/webauthn.js";
import { defineActivity, defineQuery, type ActivityContext, type AnyVersionOf, type ParametersOf } from "../../registry/registry.js";
import { distinct, renderApiKey, renderAuthenticator, requireUser, secondsParameter } from "../resources.js";
import { newId } from "../../store/ids.js";
import { forgetApiKeyAllowlists } from "../organizations/ip-allowlists.js";

/** An API key as any version of create_api_keys sends it (the oldest have no curveType: they only knew P-256). */
export type ApiKeyParams = AnyVersionOf<ParametersOf<"create_api_keys">["apiKeys"][number]>;

/** An authenticator as the newer versions send it, or the older browser-shaped credential. */
export type AuthenticatorParams = AnyVersionOf<ParametersOf<"create_authenticators">["authenticators"][number]>;

const MAX_EXPIRATION_SECONDS = 100 * 365 * 24 * 3600;

export function parseExpirationSeconds(value: string | undefined, field: string): number | null {
  return secondsParameter(value, { field, max: MAX_EXPIRATION_SECONDS, code: "REQUEST_INVALID" }) ?? null;
}

export function requireName(value: string, field: string): string {
  const trimmed = value.trim();
  if (trimmed === "") throw serviceError("REQUEST_INVALID", `${field} must not be empty`);
  if (trimmed.length > 256) throw serviceError("REQUEST_INVALID", `${field} must be at most 256 characters`);
  return trimmed;
}

/** Adds API keys to a user. `inNewOrganization`, when given, holds every public key added so far to an
 * organization this activity creates: nothing in the database can collide with them, so the keys are
 * checked against it alone, with no statement. */
export async function addApiKeys(
  ctx: ActivityContext,
  userId: string,
  keys: ApiKeyParams[],
  field = "apiKeys",
  inNewOrganization?: Set<string>,
): Promise<string[]> {
  const seen = inNewOrganization ?? new Set<string>();
  const ids: string[] = [];
  for (const [i, key] of keys.entries()) {
    const name = requireName(key.apiKeyName, `${field}[${i}].apiKeyName`);
    const curve = key.curveType ?? "API_KEY_CURVE_P256";
    const problem = validatePublicKey(curve, key.publicKey);
    if (problem) throw serviceError("INVALID_PUBLIC_KEY", `${field}[${i}].publicKey: ${problem}`);
    const publicKey = key.publicKey.toLowerCase();
    const expirationSeconds = parseExpirationSeconds(key.expirationSeconds, `${field}[${i}].expirationSeconds`);
    const existing =
      !inNewOrganization &&
      (await ctx.trx
        .selectFrom("api_keys")
        .select("id")
        .where("organization_id", "=", ctx.organizationId)
        .where("public_key", "=", publicKey)
        .executeTakeFirst());
    if (existing || seen.has(publicKey)) {
      throw serviceError(
        "API_KEY_ALREADY_EXISTS",
        `an API key with public key ${publicKey} already exists in this organization`,
        "AlreadyExists",
      );
    }
    seen.add(publicKey);
    const id = newId();
    await ctx.trx
      .insertInto("api_keys")
      .values({
        id,
        organization_id: ctx.organizationId,
        user_id: userId,
        name,
        public_key: publicKey,
        curve,
        expiration_seconds: expirationSeconds === null ? null : String(expirationSeconds),
        expires_at: expirationSeconds === null ? null : ctx.now + expirationSeconds * 1000,
        created_at: ctx.now,
        updated_at: ctx.now,
      })
      .execute();
    ids.push(id);
  }
  return ids;
}

export async function addAuthenticators(
  ctx: ActivityContext,
  userId: string,
  authenticators: AuthenticatorParams[],
  field = "authenticators",
): Promise<string[]> {
  const ids: string[] = [];
  for (const [i, params] of authenticators.entries()) {
    const name = requireName(params.authenticatorName, `${field}[${i}].authenticatorName`);
    const a = params.attestation;
    const registration =
      "credentialId" in a
        ? {
            credentialId: a.credentialId,
            clientDataJson: a.clientDataJson,
            attestationObject: a.attestationObject,
            transports: a.transports,
          }
        : {
            credentialId: a.rawId || a.id,
            clientDataJson: a.response.clientDataJson,
            attestationObject: a.response.attestationObject,
            transports: a.response.transports ?? [],
          };
    const passkey = await verifyPasskeyRegistration({ ...registration, challenge: params.challenge }, ctx.env.webauthn);
    const existing = await ctx.trx
      .selectFrom("authenticators")
      .select("id")
      .where("organization_id", "=", ctx.organizationId)
      .where("credential_id", "=", passkey.credentialId)
      .executeTakeFirst();
    if (existing)
      throw serviceError(
        "AUTHENTICATOR_ALREADY_EXISTS",
        `an authenticator with credential id ${passkey.credentialId} already exists in this organization`,
      );
    const id = newId();
    await ctx.trx
      .insertInto("authenticators")
      .values({
        id,
        organization_id: ctx.organizationId,
        user_id: userId,
        name,
        credential_id: passkey.credentialId,
        public_key: passkey.publicKey,
        attestation_type: passkey.attestationType,
        aaguid: passkey.aaguid,
        model: "",
        transports: JSON.stringify([...new Set(registration.transports)]),
        sign_count: passkey.signCount,
        created_at: ctx.now,
        updated_at: ctx.now,
      })
      .execute();
    ids.push(id);
  }
  return ids;
}

/** Deletes credentials of one user; every id must be one of that user's, or nothing is deleted. */
async function deleteUserCredentials(
  ctx: ActivityContext,
  table: "api_keys" | "authenticators",
  userId: string,
  requested: string[],
  field: string,
): Promise<string[]> {
  const what = table === "api_keys" ? "API key" : "authenticator";
  await requireUser(ctx.trx, ctx.organizationId, userId);
  const ids = distinct(requested, field);
  if (ids.length === 0) throw serviceError("REQUEST_INVALID", `${field} must list at least one ${what}`);
  const found = await ctx.trx.selectFrom(table).select("id").where("user_id", "=", userId).where("id", "in", ids).execute();
  const missing = ids.find((id) => !found.some((row) => row.id === id));
  if (missing !== undefined) {
    throw serviceError(
      table === "api_keys" ? "API_KEY_NOT_FOUND" : "AUTHENTICATOR_NOT_FOUND",
      `${what} ${missing} not found for user ${userId}`,
    );
  }
  if (table === "api_keys") await forgetApiKeyAllowlists(ctx.trx, ctx.organizationId, ids);
  await ctx.trx.deleteFrom(table).where("id", "in", ids).execute();
  return ids;
}

export const credentialOperations = [
  defineActivity({
    name: "create_api_keys",
    summary: "Add API keys to a user.",
    resource: "CREDENTIAL",
    action: "CREATE",
    policyParameters: (p) => ({ user_id: p.userId }),
    credentialOwner: (p) => p.userId,
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      if (p.apiKeys.length === 0) throw serviceError("REQUEST_INVALID", "apiKeys must list at least one key");
      return { apiKeyIds: await addApiKeys(ctx, p.userId, p.apiKeys) };
    },
  }),

  defineActivity({
    name: "delete_api_keys",
    summary: "Remove API keys from a user.",
    resource: "CREDENTIAL",
    action: "DELETE",
    policyParameters: (p) => ({ user_id: p.userId, api_key_ids: p.apiKeyIds }),
    credentialOwner: (p) => p.userId,
    async execute(ctx, p) {
      return { apiKeyIds: await deleteUserCredentials(ctx, "api_keys", p.userId, p.apiKeyIds, "apiKeyIds") };
    },
  }),

  defineActivity({
    name: "create_authenticators",
    summary: "Register passkeys for a user.",
    resource: "CREDENTIAL",
    action: "CREATE",
    policyParameters: (p) => ({ user_id: p.userId }),
    credentialOwner: (p) => p.userId,
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      if (p.authenticators.length === 0) throw serviceError("REQUEST_INVALID", "authenticators must list at least one authenticator");
      return { authenticatorIds: await addAuthenticators(ctx, p.userId, p.authenticators) };
    },
  }),

  defineActivity({
    name: "delete_authenticators",
    summary: "Remove passkeys from a user.",
    resource: "CREDENTIAL",
    action: "DELETE",
    policyParameters: (p) => ({ user_id: p.userId }),
    credentialOwner: (p) => p.userId,
    async execute(ctx, p) {
      return { authenticatorIds: await deleteUserCredentials(ctx, "authenticators", p.userId, p.authenticatorIds, "authenticatorIds") };
    },
  }),

  defineQuery({
    name: "get_api_key",
    summary: "One API key.",
    async run(ctx, body) {
      const row = await ctx.db
        .selectFrom("api_keys")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .where("id", "=", body.apiKeyId)
        .executeTakeFirst();
      if (!row) throw serviceError("API_KEY_NOT_FOUND", `API key ${body.apiKeyId} not found`);
      return { apiKey: renderApiKey(row) };
    },
  }),

  defineQuery({
    name: "get_api_keys",
    summary: "The API keys of a user (the caller when userId is absent).",
    async run(ctx, body) {
      const userId = body.userId ?? ctx.principal.userId;
      await requireUser(ctx.db, ctx.organizationId, userId);
      const rows = await ctx.db
        .selectFrom("api_keys")
        .selectAll()
        .where("user_id", "=", userId)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return { apiKeys: rows.map(renderApiKey) };
    },
  }),

  defineQuery({
    name: "get_authenticator",
    summary: "One passkey.",
    async run(ctx, body) {
      const row = await ctx.db
        .selectFrom("authenticators")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .where("id", "=", body.authenticatorId)
        .executeTakeFirst();
      if (!row) throw serviceError("AUTHENTICATOR_NOT_FOUND", `authenticator ${body.authenticatorId} not found`);
      return { authenticator: renderAuthenticator(row) };
    },
  }),

  defineQuery({
    name: "get_authenticators",
    summary: "The passkeys of a user.",
    async run(ctx, body) {
      await requireUser(ctx.db, ctx.organizationId, body.userId);
      const rows = await ctx.db
        .selectFrom("authenticators")
        .selectAll()
        .where("user_id", "=", body.userId)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return { authenticators: rows.map(renderAuthenticator) };
    },
  }),
];
