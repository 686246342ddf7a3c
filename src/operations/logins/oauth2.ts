// OAuth 2.0 providers that issue no OIDC token of their own (X, Discord): an organization keeps the
// client id and secret of its app with each (create/update/delete_oauth2_credential; the secret arrives
// encrypted to the deployment's published key, is kept sealed under the master key, and is never
// answered), and oauth2_authenticate runs the end of the Authorization Code + PKCE flow with them — the
// code exchanged at the provider, the user looked up, in its precheck before the organization's lock —
// then issues, under the lock, as Sigil's own OIDC issuer (SIGIL_PUBLIC_URL), a short-lived identity
// token naming that user, bound to the caller's key by `nonce`. oauth_login and sub-organization
// creation accept it like any allowed issuer's token: its keys are found through Sigil's discovery
// document (auth/oidc.ts). See docs/oauth2-providers.md.
import crypto from "node:crypto";
import type { Selectable } from "kysely";
import { serviceError } from "../../errors.js";
import { HpkeError, uncompressedP256 } from "../../crypto/hpke.js";
import { QuorumEnvelopeError } from "../../crypto/quorum-envelope.js";
import type { Oauth2ProviderName, ProviderUser } from "../../services/oauth2-providers.js";
import type { Db, Tx } from "../../store/handles.js";
import type { Oauth2CredentialsTable } from "../../store/schema.js";
import { newId } from "../../store/ids.js";
import {
  defineActivity,
  defineQuery,
  type ActivityContext,
  type CommittedState,
  type OperationEnvironment,
  type ParametersOf,
} from "../../registry/registry.js";
import { timestamp } from "../resources.js";
import { credentialBundleOf } from "./sessions.js";

/** How long an identity token issued here may be used: long enough to look up or create the user's
 * sub-organization and log in, short enough that a leaked one is soon useless. */
export const IDENTITY_TOKEN_SECONDS = 600;

/** The prefix of the subject (`sub`) of a provider's users, as the product forms it (`x:123456789`). */
const SUBJECT_PREFIX: Record<Oauth2ProviderName, string> = { OAUTH2_PROVIDER_X: "x", OAUTH2_PROVIDER_DISCORD: "discord" };

/** Client secrets providers issue are tens of characters; a larger one is not a client secret. */
const MAX_CLIENT_SECRET_BYTES = 1024;
/** The longest authorization code, redirect URI, code verifier or nonce accepted. */
const MAX_PARAMETER_LENGTH = 2048;

const secretIdentity = (row: { id: string; organization_id: string }) => ({
  organizationId: row.organization_id,
  kind: "oauth2_client_secret",
  resourceId: row.id,
});

export function renderOauth2Credential(row: Selectable<Oauth2CredentialsTable>) {
  return {
    oauth2CredentialId: row.id,
    organizationId: row.organization_id,
    provider: row.provider,
    clientId: row.client_id,
    encryptedClientSecret: row.encrypted_client_secret,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
  };
}

async function requireCredential(db: Db | Tx, organizationId: string, id: string): Promise<Selectable<Oauth2CredentialsTable>> {
  const row = await db
    .selectFrom("oauth2_credentials")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (!row) throw serviceError("OAUTH2_CREDENTIAL_NOT_FOUND", `OAuth 2.0 credential ${id} not found in organization ${organizationId}`);
  return row;
}

/** A parameter that must be set: not blank, of a bounded length (its value is never repeated). */
function required(value: string | undefined, field: string, max = MAX_PARAMETER_LENGTH): string {
  const text = String(value ?? "");
  if (text.trim() === "") throw serviceError("REQUEST_INVALID", `${field} must be set`);
  if (text.length > max) throw serviceError("REQUEST_INVALID", `${field} must be at most ${max} characters`);
  return text;
}

function clientIdOf(value: string): string {
  const clientId = required(value, "clientId", 256).trim();
  if (/[\u0000-\u0020\u007f]/.test(clientId))
    throw serviceError("REQUEST_INVALID", "clientId must not contain spaces or control characters");
  return clientId;
}

/** The client secret inside the envelope, or OAUTH2_CLIENT_SECRET_INVALID. The reason never quotes it. */
function openClientSecret(ctx: ActivityContext, envelope: string): Buffer {
  let secret: Buffer;
  try {
    secret = ctx.env.oauth2.clientSecrets.open(String(envelope ?? ""));
  } catch (error) {
    if (!(error instanceof QuorumEnvelopeError)) throw error;
    throw serviceError(
      "OAUTH2_CLIENT_SECRET_INVALID",
      `encryptedClientSecret does not open with this deployment's key (${error.message}): encrypt the secret with encryptOauth2ClientSecret ` +
        `to the tlsFetcherEncryptPublicKey of /.well-known/sigil.json (${ctx.env.oauth2.clientSecrets.publicKey}); nothing was stored`,
    );
  }
  const text = secret.toString("utf8");
  const unusable =
    secret.length === 0
      ? "it is empty"
      : secret.length > MAX_CLIENT_SECRET_BYTES
        ? `it is longer than ${MAX_CLIENT_SECRET_BYTES} bytes`
        : !Buffer.from(text, "utf8").equals(secret) || /[\u0000-\u001f\u007f]/.test(text)
          ? "it is not printable UTF-8 text"
          : null;
  if (unusable) {
    secret.fill(0);
    throw serviceError("OAUTH2_CLIENT_SECRET_INVALID", `the client secret in encryptedClientSecret cannot be a provider's: ${unusable}`);
  }
  return secret;
}

/** The SHA-256 (hex) of an envelope's bytes: the same for every spelling of it (0x prefix, hex case). */
const envelopeDigestOf = (envelopeHex: string) =>
  crypto
    .createHash("sha256")
    .update(Buffer.from(envelopeHex.replace(/^0x/, ""), "hex"))
    .digest("hex");

/**
 * The digest of an envelope no other organization's credential holds, or OAUTH2_CLIENT_SECRET_IN_USE.
 * Queries answer encryptedClientSecret as it was sent, so anyone who reads an organization's
 * credentials holds envelopes that open here: without this, they could keep one in their own
 * organization and sign users in with a sealed copy of another organization's secret. A client
 * encrypting its own secret makes a new envelope each time (a fresh ephemeral key), so it never
 * meets this; within one organization an envelope may be kept again.
 */
async function unclaimedEnvelope(ctx: ActivityContext, envelopeHex: string): Promise<string> {
  const digest = envelopeDigestOf(envelopeHex);
  const holder = await ctx.trx
    .selectFrom("oauth2_credentials")
    .select("id")
    .where("encrypted_client_secret_digest", "=", digest)
    .where("organization_id", "<>", ctx.organizationId)
    .executeTakeFirst();
  if (holder)
    throw serviceError(
      "OAUTH2_CLIENT_SECRET_IN_USE",
      "encryptedClientSecret is an envelope another organization's OAuth 2.0 credential holds: an organization keeps only client " +
        "secrets it encrypted itself (encryptOauth2ClientSecret makes a new envelope each time); nothing was stored",
    );
  return digest;
}

/** SIGIL_PUBLIC_URL without its trailing slash: the issuer of the tokens oauth2_authenticate answers. */
function issuerOf(env: OperationEnvironment): string {
  const { issuer } = env.oauth2;
  if (!issuer)
    throw serviceError(
      "PUBLIC_URL_NOT_CONFIGURED",
      "this server has no SIGIL_PUBLIC_URL, which is the issuer (iss) of the OIDC tokens oauth2_authenticate answers and where their " +
        "keys are found: the operator must set it; the code was not used",
    );
  return issuer;
}

/** What oauth2_authenticate's precheck learned from the provider, for execute: plain JSON, the access
 * token only sealed to the requester's bearerTokenTargetPublicKey (the client secret not at all). */
interface CodeExchanged {
  oauth2CredentialId: string;
  provider: Oauth2ProviderName;
  clientId: string;
  user: ProviderUser;
  /** The access token as a credential bundle for bearerTokenTargetPublicKey; absent without one. */
  encryptedBearerToken?: string;
}

/**
 * oauth2_authenticate's precheck: the request's own checks, the credential as committed, then the code
 * exchanged at the provider and the user looked up — all before the organization's lock. Every check
 * that needs no provider comes first, so a request refused by one of them leaves the code unused.
 */
async function exchangeCode(
  p: ParametersOf<"oauth2_authenticate">,
  env: OperationEnvironment,
  committed: CommittedState,
): Promise<CodeExchanged> {
  issuerOf(env);
  const code = required(p.authCode, "authCode");
  const redirectUri = required(p.redirectUri, "redirectUri");
  const codeVerifier = required(p.codeVerifier, "codeVerifier");
  required(p.nonce, "nonce", 256);
  let bearerReceiver: Uint8Array | undefined;
  if (p.bearerTokenTargetPublicKey !== undefined && p.bearerTokenTargetPublicKey !== "") {
    try {
      bearerReceiver = uncompressedP256(p.bearerTokenTargetPublicKey, "bearerTokenTargetPublicKey");
    } catch (error) {
      if (error instanceof HpkeError) throw serviceError("INVALID_TARGET_PUBLIC_KEY", error.message);
      throw error;
    }
  }
  const row = await requireCredential(committed.db, committed.organizationId, p.oauth2CredentialId);
  const provider = row.provider as Oauth2ProviderName;
  const secret = env.keyring.open(row.sealed_client_secret, secretIdentity(row));
  let accessToken: string;
  try {
    accessToken = await env.oauth2.providers.exchangeCode(provider, {
      clientId: row.client_id,
      clientSecret: secret.toString("utf8"),
      code,
      redirectUri,
      codeVerifier,
    });
  } finally {
    secret.fill(0);
  }
  const user = await env.oauth2.providers.userOf(provider, accessToken);
  return {
    oauth2CredentialId: row.id,
    provider,
    clientId: row.client_id,
    user,
    ...(bearerReceiver ? { encryptedBearerToken: await credentialBundleOf(bearerReceiver, Buffer.from(accessToken, "utf8")) } : {}),
  };
}

export const oauth2Operations = [
  defineActivity({
    name: "create_oauth2_credential",
    summary:
      "Keep an OAuth 2.0 provider's client id and secret (X, Discord) for oauth2_authenticate; the secret arrives encrypted to the " +
      "deployment's tlsFetcherEncryptPublicKey and is kept sealed, never answered.",
    resource: "AUTH",
    action: "CREATE",
    // The envelope opens only here, but anyone reading the audit log could keep it in another
    // organization were it recorded (unclaimedEnvelope refuses that; the record need not offer it).
    secretParameters: ["encryptedClientSecret"],
    async execute(ctx, p) {
      const clientId = clientIdOf(p.clientId);
      const secret = openClientSecret(ctx, p.encryptedClientSecret);
      const id = newId();
      try {
        await ctx.trx
          .insertInto("oauth2_credentials")
          .values({
            id,
            organization_id: ctx.organizationId,
            provider: p.provider,
            client_id: clientId,
            encrypted_client_secret: p.encryptedClientSecret,
            encrypted_client_secret_digest: await unclaimedEnvelope(ctx, p.encryptedClientSecret),
            sealed_client_secret: ctx.env.keyring.seal(secret, secretIdentity({ id, organization_id: ctx.organizationId })),
            created_at: ctx.now,
            updated_at: ctx.now,
          })
          .execute();
      } finally {
        secret.fill(0);
      }
      return { oauth2CredentialId: id };
    },
  }),

  defineActivity({
    name: "update_oauth2_credential",
    summary: "Replace an OAuth 2.0 credential's provider, client id and (encrypted) client secret.",
    resource: "AUTH",
    action: "UPDATE",
    secretParameters: ["encryptedClientSecret"],
    async execute(ctx, p) {
      const row = await requireCredential(ctx.trx, ctx.organizationId, p.oauth2CredentialId);
      const clientId = clientIdOf(p.clientId);
      const secret = openClientSecret(ctx, p.encryptedClientSecret);
      try {
        await ctx.trx
          .updateTable("oauth2_credentials")
          .set({
            provider: p.provider,
            client_id: clientId,
            encrypted_client_secret: p.encryptedClientSecret,
            encrypted_client_secret_digest: await unclaimedEnvelope(ctx, p.encryptedClientSecret),
            sealed_client_secret: ctx.env.keyring.seal(secret, secretIdentity(row)),
            updated_at: ctx.now,
          })
          .where("id", "=", row.id)
          .execute();
      } finally {
        secret.fill(0);
      }
      return { oauth2CredentialId: row.id };
    },
  }),

  defineActivity({
    name: "delete_oauth2_credential",
    summary: "Delete an OAuth 2.0 credential: oauth2_authenticate can no longer use it.",
    resource: "AUTH",
    action: "DELETE",
    async execute(ctx, p) {
      const row = await requireCredential(ctx.trx, ctx.organizationId, p.oauth2CredentialId);
      await ctx.trx.deleteFrom("oauth2_credentials").where("id", "=", row.id).execute();
      return { oauth2CredentialId: row.id };
    },
  }),

  defineActivity({
    name: "oauth2_authenticate",
    summary:
      "Exchange an OAuth 2.0 authorization code (PKCE) at X or Discord with a stored credential and answer an OIDC token issued by Sigil " +
      "(iss SIGIL_PUBLIC_URL) for oauth_login and sub-organization creation; the provider's bearer token, encrypted, on request.",
    resource: "AUTH",
    action: "CREATE",
    // The code and its verifier are single-use credentials until exchanged; the token answered is a
    // login credential until it expires: the audit log keeps neither.
    secretParameters: ["authCode", "codeVerifier"],
    secretResults: ["oidcToken"],
    leavesOrganizationUnchanged: true,
    // The provider is asked before the organization's lock is taken: under it, a slow provider would
    // hold up the organization's writes (on SQLite, every organization's) until its deadline.
    precheck: (p, env, _type, committed) => exchangeCode(p, env, committed),
    async execute(ctx, p, _type, exchange) {
      const issuer = issuerOf(ctx.env);
      // Read again under the lock: the code was exchanged with the credential as it was committed then.
      const row = await requireCredential(ctx.trx, ctx.organizationId, exchange.oauth2CredentialId);
      if (row.provider !== exchange.provider || row.client_id !== exchange.clientId)
        throw serviceError(
          "OAUTH2_CREDENTIAL_NOT_FOUND",
          `OAuth 2.0 credential ${row.id} was updated while the code was exchanged: it no longer has the provider and client id the code ` +
            "was exchanged with, which the token's audience would name; start the sign-in again",
        );
      const { user } = exchange;
      const issuedAt = Math.floor(ctx.now / 1000);
      const claims: Record<string, unknown> = {
        iss: issuer,
        sub: `${SUBJECT_PREFIX[exchange.provider]}:${user.id}`,
        aud: exchange.clientId,
        nonce: String(p.nonce),
        iat: issuedAt,
        exp: issuedAt + IDENTITY_TOKEN_SECONDS,
        ...(user.username ? { preferred_username: user.username } : {}),
        ...(user.name ? { name: user.name } : {}),
        ...(user.email ? { email: user.email, email_verified: user.emailVerified === true } : {}),
        ...(exchange.encryptedBearerToken ? { encrypted_bearer_token: exchange.encryptedBearerToken } : {}),
      };
      return { oidcToken: ctx.env.oauth2.identityTokens.sign(claims) };
    },
  }),

  defineQuery({
    name: "get_oauth2_credential",
    summary: "An OAuth 2.0 credential: provider, client id and the client secret as it was sent (encrypted), never in the clear.",
    async run(ctx, body) {
      return { oauth2Credential: renderOauth2Credential(await requireCredential(ctx.db, ctx.organizationId, body.oauth2CredentialId)) };
    },
  }),

  defineQuery({
    name: "list_oauth2_credentials",
    summary: "The organization's OAuth 2.0 credentials, oldest first.",
    async run(ctx) {
      const rows = await ctx.db
        .selectFrom("oauth2_credentials")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return { oauth2Credentials: rows.map(renderOauth2Credential) };
    },
  }),
];
