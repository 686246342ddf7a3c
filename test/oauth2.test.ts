// OAuth 2.0 providers (X, Discord) through the official clients, against an OAuth 2.0 server the test
// runs on loopback (test/helpers/oauth2-provider.ts): credentials kept with their secret encrypted by
// @turnkey/crypto's encryptOauth2ClientSecret to the deployment's published key; oauth2_authenticate
// exchanging a PKCE code and issuing Sigil's own OIDC token, which creates a sub-organization and logs
// in through oauth_login, verified through Sigil's discovery document like any issuer's; the bearer
// token bundle; then every way the request can be wrong, each leaving only its failed activity.
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeJwt, decodeProtectedHeader } from "jose";
import { decryptCredentialBundle, encryptOauth2ClientSecret, generateP256KeyPair } from "@turnkey/crypto";
import { parseSession } from "@turnkey/core/dist/utils.js";
import {
  freePort,
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  startHarness,
  type Harness,
  type TestOrganization,
} from "./helpers/harness.js";
import { fastPoller, organizationWith } from "./helpers/organizations.js";
import { errorOf } from "./helpers/logins.js";
import { pkcePair, startOauth2Provider, type Provider, type SentToken, type TestOauth2Provider } from "./helpers/oauth2-provider.js";
import { oauth2Providers } from "../src/services/oauth2-providers.js";
import { migrationDatabase } from "./helpers/migration-database.js";
import { receiver } from "./helpers/webhook-receiver.js";

let provider: TestOauth2Provider;
let h: Harness;
let publicUrl: string;
let tlsFetcherKey: string;
let parent: TestOrganization;
let parentSdk: ReturnType<Harness["sdk"]>;
let hooks: Awaited<ReturnType<typeof receiver>>;

const X_CLIENT = "x-client-id-123";
const X_SECRET = "x-client-secret-ABCdef0123456789";
const DISCORD_CLIENT = "1234567890123456789";
const DISCORD_SECRET = "discord-secret-Zyx987654321";
const REDIRECT = "https://app.example.com/oauth/callback";
/** Every secret the suite hands out, searched for in logs, tables and webhooks at the end. */
const secrets: string[] = [X_SECRET, DISCORD_SECRET];
/** Every client-secret envelope sent: kept only in oauth2_credentials, never in the audit log, a log line or a webhook. */
const envelopes: string[] = [];

/** A client secret encrypted to the deployment's key, as a client sends it. */
async function envelopeOf(secret: string, key = tlsFetcherKey) {
  const envelope = await encryptOauth2ClientSecret(secret, key);
  envelopes.push(envelope);
  return envelope;
}

const nonceFor = (publicKey: string) => crypto.createHash("sha256").update(publicKey).digest("hex");

beforeAll(async () => {
  provider = await startOauth2Provider();
  provider.register("x", X_CLIENT, X_SECRET);
  provider.register("discord", DISCORD_CLIENT, DISCORD_SECRET);
  const port = await freePort();
  publicUrl = `http://127.0.0.1:${port}`;
  h = await startHarness({
    SIGIL_PORT: String(port),
    SIGIL_PUBLIC_URL: `${publicUrl}/`,
    SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
    SIGIL_WEBHOOK_POLL_MS: "50",
    ...provider.settings,
  });
  tlsFetcherKey = ((await (await fetch(`${h.url}/.well-known/sigil.json`)).json()) as { tlsFetcherEncryptPublicKey: string })
    .tlsFetcherEncryptPublicKey;
  parent = await h.organization("Social app");
  parentSdk = h.sdk(parent, parent.key, fastPoller);
  hooks = await receiver();
});
afterAll(async () => {
  await h.close();
  await provider.close();
  await hooks.close();
});

const createCredential = async (kind: Provider, sdk = parentSdk) =>
  (
    await sdk.createOauth2Credential({
      provider: kind === "x" ? "OAUTH2_PROVIDER_X" : "OAUTH2_PROVIDER_DISCORD",
      clientId: kind === "x" ? X_CLIENT : DISCORD_CLIENT,
      encryptedClientSecret: await envelopeOf(kind === "x" ? X_SECRET : DISCORD_SECRET),
    })
  ).oauth2CredentialId;

let users = 0;
/** The user's side at the provider: consent given for this PKCE challenge; the code the browser gets. */
function consent(kind: Provider, codeChallenge: string, redirectUri = REDIRECT) {
  users += 1;
  const user = {
    id: `${1_000_000 + users}`,
    username: `user${users}`,
    name: `User ${users}`,
    ...(kind === "discord" ? { email: `user${users}@example.com` } : {}),
  };
  const code = provider.authorize(kind, { clientId: kind === "x" ? X_CLIENT : DISCORD_CLIENT, codeChallenge, redirectUri, user });
  secrets.push(code);
  return { user, code };
}

async function authenticate(kind: Provider, options: { bearer?: boolean } = {}) {
  const credentialId = await createCredential(kind);
  const session = generateP256KeyPair();
  const pkce = pkcePair();
  secrets.push(pkce.verifier);
  const { user, code } = consent(kind, pkce.challenge);
  const bearer = options.bearer ? generateP256KeyPair() : undefined;
  const { oidcToken } = await parentSdk.oauth2Authenticate({
    oauth2CredentialId: credentialId,
    authCode: code,
    redirectUri: REDIRECT,
    codeVerifier: pkce.verifier,
    nonce: nonceFor(session.publicKey),
    ...(bearer ? { bearerTokenTargetPublicKey: bearer.publicKeyUncompressed } : {}),
  });
  secrets.push(oidcToken, provider.accessTokens.at(-1)!);
  return { credentialId, session, user, oidcToken, bearer };
}

/** The sub-organization the parent's backend makes for a new social user, with the token as its identity. */
async function subOrganizationFor(oidcToken: string, providerName: string) {
  const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
    subOrganizationName: `${providerName} user ${Date.now()}-${Math.random()}`,
    rootQuorumThreshold: 1,
    rootUsers: [{ userName: "social user", apiKeys: [], authenticators: [], oauthProviders: [{ providerName, oidcToken }] }],
  });
  return { subOrganizationId, userId: rootUserIds![0]! };
}

/** An oauth2_authenticate that must be refused with `code`, leaving only its failed activity. */
async function refused(parameters: Parameters<typeof parentSdk.oauth2Authenticate>[0], code: string, message: string, sdk = parentSdk) {
  const { id, failure } = await refusedLeavingOnlyItsActivity(h, () => sdk.oauth2Authenticate(parameters), {
    message: expect.stringContaining(message),
  });
  expect(failure.details[0].turnkeyErrorCode).toBe(code);
  return { id, failure };
}

describe("the deployment's keys and issuer", () => {
  it("publishes tlsFetcherEncryptPublicKey (uncompressed P-256) and an OIDC discovery document at SIGIL_PUBLIC_URL", async () => {
    expect(tlsFetcherKey).toMatch(/^04[0-9a-f]{128}$/);
    const discovery = (await (await fetch(`${publicUrl}/.well-known/openid-configuration`)).json()) as Record<string, unknown>;
    expect(discovery).toMatchObject({
      issuer: publicUrl,
      jwks_uri: `${publicUrl}/oauth2/jwks`,
      id_token_signing_alg_values_supported: ["ES256"],
    });
    const jwks = (await (await fetch(String(discovery.jwks_uri))).json()) as { keys: Array<Record<string, string>> };
    expect(jwks.keys).toEqual([expect.objectContaining({ kty: "EC", crv: "P-256", alg: "ES256", kid: expect.stringMatching(/^oidc_/) })]);
  });
});

describe("credentials", () => {
  it("create, get, list, update and delete: the secret is kept sealed, answered only as it was sent (encrypted)", async () => {
    const encrypted = await encryptOauth2ClientSecret(X_SECRET, tlsFetcherKey);
    const { oauth2CredentialId } = await parentSdk.createOauth2Credential({
      provider: "OAUTH2_PROVIDER_X",
      clientId: X_CLIENT,
      encryptedClientSecret: encrypted,
    });
    const { oauth2Credential } = await parentSdk.getOauth2Credential({ oauth2CredentialId });
    expect(oauth2Credential).toEqual({
      oauth2CredentialId,
      organizationId: parent.organizationId,
      provider: "OAUTH2_PROVIDER_X",
      clientId: X_CLIENT,
      encryptedClientSecret: encrypted,
      createdAt: expect.objectContaining({ seconds: expect.any(String) }),
      updatedAt: expect.objectContaining({ seconds: expect.any(String) }),
    });
    const row = await h.server.store.db
      .selectFrom("oauth2_credentials")
      .selectAll()
      .where("id", "=", oauth2CredentialId)
      .executeTakeFirstOrThrow();
    expect(row.sealed_client_secret).toMatch(/^v1\./);
    expect(JSON.stringify(row)).not.toContain(X_SECRET);

    const newSecret = "rotated-secret-0000";
    secrets.push(newSecret);
    const reencrypted = await encryptOauth2ClientSecret(newSecret, tlsFetcherKey);
    await parentSdk.updateOauth2Credential({
      oauth2CredentialId,
      provider: "OAUTH2_PROVIDER_DISCORD",
      clientId: "other-client",
      encryptedClientSecret: reencrypted,
    });
    const listed = (await parentSdk.listOauth2Credentials({})).oauth2Credentials.find((c) => c.oauth2CredentialId === oauth2CredentialId);
    expect(listed).toMatchObject({ provider: "OAUTH2_PROVIDER_DISCORD", clientId: "other-client", encryptedClientSecret: reencrypted });

    await parentSdk.deleteOauth2Credential({ oauth2CredentialId });
    expect(await errorOf(parentSdk.getOauth2Credential({ oauth2CredentialId }))).toContain(
      `OAuth 2.0 credential ${oauth2CredentialId} not found`,
    );
    expect((await parentSdk.listOauth2Credentials({})).oauth2Credentials.map((c) => c.oauth2CredentialId)).not.toContain(
      oauth2CredentialId,
    );
  });

  it("refuses a client secret not encrypted to the published key, storing nothing (create and update)", async () => {
    const otherKey = generateP256KeyPair().publicKeyUncompressed;
    for (const encryptedClientSecret of [await encryptOauth2ClientSecret(X_SECRET, otherKey), "00ff", "not hex at all"]) {
      const { failure } = await refusedLeavingOnlyItsActivity(
        h,
        () => parentSdk.createOauth2Credential({ provider: "OAUTH2_PROVIDER_X", clientId: X_CLIENT, encryptedClientSecret }),
        { message: expect.stringContaining("encryptedClientSecret does not open with this deployment's key") },
      );
      expect(failure.details[0].turnkeyErrorCode).toBe("OAUTH2_CLIENT_SECRET_INVALID");
    }
    const id = await createCredential("x");
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      async () =>
        parentSdk.updateOauth2Credential({
          oauth2CredentialId: id,
          provider: "OAUTH2_PROVIDER_X",
          clientId: X_CLIENT,
          encryptedClientSecret: await encryptOauth2ClientSecret("another", otherKey),
        }),
      { code: 3 },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("OAUTH2_CLIENT_SECRET_INVALID");
  });

  it("refuses a blank client id, and an unknown credential id to update, delete or get", async () => {
    await refusedLeavingOnlyItsActivity(
      h,
      async () =>
        parentSdk.createOauth2Credential({
          provider: "OAUTH2_PROVIDER_X",
          clientId: "  ",
          encryptedClientSecret: await encryptOauth2ClientSecret(X_SECRET, tlsFetcherKey),
        }),
      { code: 3, message: expect.stringContaining("clientId must be set") },
    );
    const unknown = crypto.randomUUID();
    const encryptedClientSecret = await encryptOauth2ClientSecret(X_SECRET, tlsFetcherKey);
    for (const attempt of [
      () =>
        parentSdk.updateOauth2Credential({
          oauth2CredentialId: unknown,
          provider: "OAUTH2_PROVIDER_X",
          clientId: X_CLIENT,
          encryptedClientSecret,
        }),
      () => parentSdk.deleteOauth2Credential({ oauth2CredentialId: unknown }),
    ]) {
      const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, {
        code: 5,
        message: expect.stringContaining(`credential ${unknown} not found`),
      });
      expect(failure.details[0].turnkeyErrorCode).toBe("OAUTH2_CREDENTIAL_NOT_FOUND");
    }
    expect(await errorOf(parentSdk.getOauth2Credential({ oauth2CredentialId: unknown }))).toContain("not found");
    // Another organization neither reads nor changes this one's credentials.
    const mine = await createCredential("discord");
    const stranger = await h.organization("Stranger");
    const strangerSdk = h.sdk(stranger, stranger.key, fastPoller);
    expect(await errorOf(strangerSdk.getOauth2Credential({ oauth2CredentialId: mine }))).toContain(
      `OAuth 2.0 credential ${mine} not found in organization ${stranger.organizationId}`,
    );
    expect((await strangerSdk.listOauth2Credentials({})).oauth2Credentials).toEqual([]);
    const { failure } = await refusedLeavingOnlyItsActivity(h, () => strangerSdk.deleteOauth2Credential({ oauth2CredentialId: mine }), {
      code: 5,
    });
    expect(failure.details[0].turnkeyErrorCode).toBe("OAUTH2_CREDENTIAL_NOT_FOUND");
    expect((await parentSdk.getOauth2Credential({ oauth2CredentialId: mine })).oauth2Credential.clientId).toBe(DISCORD_CLIENT);
  });
  it("an envelope another organization's credential holds is refused (OAUTH2_CLIENT_SECRET_IN_USE), in any spelling; the audit log keeps none", async () => {
    const envelope = await envelopeOf(X_SECRET);
    const { oauth2CredentialId } = await parentSdk.createOauth2Credential({
      provider: "OAUTH2_PROVIDER_X",
      clientId: X_CLIENT,
      encryptedClientSecret: envelope,
    });
    // What a reader of this organization sees: the envelope, in the query's answer (the API requires
    // it there), but not in the recorded intent.
    expect((await parentSdk.getOauth2Credential({ oauth2CredentialId })).oauth2Credential.encryptedClientSecret).toBe(envelope);
    const recorded = (await parentSdk.getActivities({ filterByType: ["ACTIVITY_TYPE_CREATE_OAUTH2_CREDENTIAL"] } as never)).activities[0]!;
    expect(recorded.intent.createOauth2CredentialIntent).toEqual({
      provider: "OAUTH2_PROVIDER_X",
      clientId: X_CLIENT,
      encryptedClientSecret: "<redacted>",
    });

    const thief = await h.organization("Copies envelopes");
    const thiefSdk = h.sdk(thief, thief.key, fastPoller);
    for (const copy of [envelope, envelope.toUpperCase(), `0x${envelope}`]) {
      const { failure } = await refusedLeavingOnlyItsActivity(
        h,
        () => thiefSdk.createOauth2Credential({ provider: "OAUTH2_PROVIDER_X", clientId: X_CLIENT, encryptedClientSecret: copy }),
        {
          code: 3,
          message: expect.stringContaining("encryptedClientSecret is an envelope another organization's OAuth 2.0 credential holds"),
        },
      );
      expect(failure.details[0].turnkeyErrorCode).toBe("OAUTH2_CLIENT_SECRET_IN_USE");
    }
    // Nor may it replace the client secret of a credential of its own.
    const own = (
      await thiefSdk.createOauth2Credential({
        provider: "OAUTH2_PROVIDER_X",
        clientId: X_CLIENT,
        encryptedClientSecret: await envelopeOf("thief-own-secret"),
      })
    ).oauth2CredentialId;
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () =>
        thiefSdk.updateOauth2Credential({
          oauth2CredentialId: own,
          provider: "OAUTH2_PROVIDER_X",
          clientId: X_CLIENT,
          encryptedClientSecret: envelope,
        }),
      { code: 3 },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("OAUTH2_CLIENT_SECRET_IN_USE");
    // A sub-organization is another organization too.
    const { subOrganizationId } = await parentSdk.createSubOrganization({
      subOrganizationName: `envelope copier ${Date.now()}`,
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "root",
          apiKeys: [{ apiKeyName: "k", publicKey: thief.key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const subSdk = h.sdk({ organizationId: subOrganizationId }, thief.key, fastPoller);
    await refusedLeavingOnlyItsActivity(
      h,
      () => subSdk.createOauth2Credential({ provider: "OAUTH2_PROVIDER_X", clientId: X_CLIENT, encryptedClientSecret: envelope }),
      { code: 3, message: expect.stringContaining("another organization's OAuth 2.0 credential holds") },
    );
    // The organization that holds it may keep it again, and update a credential to it.
    const again = (
      await parentSdk.createOauth2Credential({ provider: "OAUTH2_PROVIDER_X", clientId: X_CLIENT, encryptedClientSecret: envelope })
    ).oauth2CredentialId;
    await parentSdk.updateOauth2Credential({
      oauth2CredentialId: again,
      provider: "OAUTH2_PROVIDER_DISCORD",
      clientId: "same-secret-other-app",
      encryptedClientSecret: envelope,
    });
    const stored = await h.server.store.db
      .selectFrom("oauth2_credentials")
      .select(["id", "encrypted_client_secret_digest"])
      .where("id", "in", [oauth2CredentialId, again])
      .execute();
    expect(stored.map((row) => row.encrypted_client_secret_digest)).toEqual([
      crypto.createHash("sha256").update(Buffer.from(envelope, "hex")).digest("hex"),
      crypto.createHash("sha256").update(Buffer.from(envelope, "hex")).digest("hex"),
    ]);
  });
});

describe("policies", () => {
  it("govern credentials and oauth2_authenticate as resource AUTH, actions CREATE, UPDATE and DELETE", async () => {
    const { root: owner, members } = await organizationWith(h, ["backend"]);
    const backend = members.backend!;
    const encryptedClientSecret = await encryptOauth2ClientSecret(X_SECRET, tlsFetcherKey);
    const create = () =>
      backend.client.createOauth2Credential({ provider: "OAUTH2_PROVIDER_X", clientId: X_CLIENT, encryptedClientSecret });
    await refusedLeavingOnlyItsActivity(h, create, { code: 7, message: expect.stringContaining("OUTCOME_DENY_IMPLICIT") });
    await owner.createPolicy({
      policyName: "backend keeps and uses OAuth 2.0 credentials",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${backend.userId}')`,
      condition: "activity.resource == 'AUTH' && activity.action == 'CREATE'",
      notes: "",
    });
    const { oauth2CredentialId } = await create();
    // CREATE covers oauth2_authenticate too (it reaches the provider, which refuses the made-up code)…
    const refusal = await errorOf(
      backend.client.oauth2Authenticate({ oauth2CredentialId, authCode: "made-up", redirectUri: REDIRECT, codeVerifier: "v", nonce: "n" }),
    );
    expect(refusal).toContain("X's token endpoint refused the authorization code");
    // …but not UPDATE or DELETE.
    await refusedLeavingOnlyItsActivity(
      h,
      () =>
        backend.client.updateOauth2Credential({
          oauth2CredentialId,
          provider: "OAUTH2_PROVIDER_X",
          clientId: "other",
          encryptedClientSecret,
        }),
      { code: 7, message: expect.stringContaining("OUTCOME_DENY_IMPLICIT") },
    );
    await refusedLeavingOnlyItsActivity(h, () => backend.client.deleteOauth2Credential({ oauth2CredentialId }), {
      code: 7,
      message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
    });
    await owner.createPolicy({
      policyName: "backend deletes them",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${backend.userId}')`,
      condition: "activity.resource == 'AUTH' && activity.action == 'DELETE' && activity.type == 'ACTIVITY_TYPE_DELETE_OAUTH2_CREDENTIAL'",
      notes: "",
    });
    await backend.client.deleteOauth2Credential({ oauth2CredentialId });
  });

  it("a request the policies deny has still exchanged its code (the provider is asked before policies decide), and keeps nothing of it", async () => {
    const { root: owner, members } = await organizationWith(h, ["backend"]);
    const oauth2CredentialId = await createCredential("x", owner);
    const pkce = pkcePair();
    secrets.push(pkce.verifier);
    const { code } = consent("x", pkce.challenge);
    const request = { oauth2CredentialId, authCode: code, redirectUri: REDIRECT, codeVerifier: pkce.verifier, nonce: "n" };
    const exchanges = () => provider.requests.filter((r) => r.method === "POST").length;
    const before = exchanges();
    await refusedLeavingOnlyItsActivity(h, () => members.backend!.client.oauth2Authenticate(request), {
      code: 7,
      message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
    });
    expect(exchanges()).toBe(before + 1);
    secrets.push(provider.accessTokens.at(-1)!);
    // The code is spent at the provider: the owner cannot use it either.
    expect(await errorOf(owner.oauth2Authenticate(request))).toContain("refused the authorization code: invalid_grant (HTTP 400)");
  });

  it("cannot wait for approvals (it carries the code): refused with CONSENSUS_NOT_SUPPORTED, nothing its precheck prepared stored", async () => {
    const { root: owner, members } = await organizationWith(h, ["backend", "approver"]);
    await owner.createPolicy({
      policyName: "the approver agrees to each login",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${members.approver!.userId}')`,
      condition: "activity.resource == 'AUTH' && activity.action == 'CREATE'",
      notes: "",
    });
    const oauth2CredentialId = await createCredential("discord", owner);
    const pkce = pkcePair();
    secrets.push(pkce.verifier);
    const { user, code } = consent("discord", pkce.challenge);
    const { id, failure } = await refusedLeavingOnlyItsActivity(
      h,
      () =>
        members.backend!.client.oauth2Authenticate({
          oauth2CredentialId,
          authCode: code,
          redirectUri: REDIRECT,
          codeVerifier: pkce.verifier,
          nonce: "n",
          bearerTokenTargetPublicKey: generateP256KeyPair().publicKeyUncompressed,
        }),
      { message: expect.stringContaining("carries secrets and cannot wait for approvals") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("CONSENSUS_NOT_SUPPORTED");
    secrets.push(provider.accessTokens.at(-1)!);
    const row = await h.server.store.db.selectFrom("activities").selectAll().where("id", "=", id).executeTakeFirstOrThrow();
    expect(row.prepared).toBeNull();
    expect(JSON.stringify(row)).not.toContain(user.email!);
  });
});

describe("oauth2_authenticate", () => {
  for (const kind of ["x", "discord"] as const) {
    it(`${kind}: the code is exchanged, the user looked up, and Sigil's token creates a sub-organization and logs in through oauth_login`, async () => {
      const { session, user, oidcToken } = await authenticate(kind);
      const exchange = provider.requests.filter((r) => r.method === "POST").at(-1)!;
      if (kind === "x") {
        // X: the app's credentials by HTTP Basic, never in the form.
        expect(exchange.headers.authorization).toBe(`Basic ${Buffer.from(`${X_CLIENT}:${X_SECRET}`).toString("base64")}`);
        expect(new URLSearchParams(exchange.body).has("client_secret")).toBe(false);
      } else {
        expect(Object.fromEntries(new URLSearchParams(exchange.body))).toMatchObject({
          client_id: DISCORD_CLIENT,
          client_secret: DISCORD_SECRET,
        });
      }
      expect(Object.fromEntries(new URLSearchParams(exchange.body))).toMatchObject({
        grant_type: "authorization_code",
        redirect_uri: REDIRECT,
      });

      const claims = decodeJwt(oidcToken);
      expect(decodeProtectedHeader(oidcToken)).toMatchObject({ alg: "ES256", kid: expect.stringMatching(/^oidc_/) });
      expect(claims).toMatchObject({
        iss: publicUrl,
        sub: `${kind}:${user.id}`,
        aud: kind === "x" ? X_CLIENT : DISCORD_CLIENT,
        nonce: nonceFor(session.publicKey),
        preferred_username: user.username,
      });
      expect(claims.exp! - claims.iat!).toBe(600);
      expect(claims.encrypted_bearer_token).toBeUndefined();
      if (kind === "discord") expect(claims).toMatchObject({ email: user.email, email_verified: true });

      const { subOrganizationId, userId } = await subOrganizationFor(oidcToken, kind === "x" ? "X" : "Discord");
      const { user: created } = await parentSdk.getUser({ organizationId: subOrganizationId, userId });
      expect(created.oauthProviders).toEqual([
        expect.objectContaining({ issuer: publicUrl, subject: `${kind}:${user.id}`, audience: kind === "x" ? X_CLIENT : DISCORD_CLIENT }),
      ]);
      const { organizationIds } = await parentSdk.getSubOrgIds({ filterType: "OIDC_TOKEN", filterValue: oidcToken });
      expect(organizationIds).toEqual([subOrganizationId]);

      const { session: jwt } = await parentSdk.oauthLogin({ organizationId: subOrganizationId, oidcToken, publicKey: session.publicKey });
      const parsed = parseSession(jwt);
      expect(parsed).toMatchObject({ userId, organizationId: subOrganizationId, publicKey: session.publicKey });
      // The session key now acts for the user.
      const asUser = h.sdk(
        { organizationId: subOrganizationId },
        { publicKey: session.publicKey, privateKey: session.privateKey },
        fastPoller,
      );
      expect((await asUser.getWhoami({})).userId).toBe(userId);
    });
  }

  it("encrypts the provider's bearer token to bearerTokenTargetPublicKey (the encrypted_bearer_token claim), opened by @turnkey/crypto", async () => {
    const { oidcToken, bearer } = await authenticate("x", { bearer: true });
    const bundle = decodeJwt(oidcToken).encrypted_bearer_token as string;
    const opened = Buffer.from(decryptCredentialBundle(bundle, bearer!.privateKey), "hex").toString("utf8");
    expect(opened).toBe(provider.accessTokens.at(-1));
  });

  it("oauth_login refuses Sigil's token for a key other than the one its nonce names", async () => {
    const { oidcToken } = await authenticate("discord");
    const { subOrganizationId } = await subOrganizationFor(oidcToken, "Discord");
    const other = newKeyPair();
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => parentSdk.oauthLogin({ organizationId: subOrganizationId, oidcToken, publicKey: other.publicKey }),
      { message: expect.stringContaining("nonce") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("OIDC_NONCE_MISMATCH");
  });

  it("refuses an unknown credential, and another organization's", async () => {
    const pkce = pkcePair();
    const { code } = consent("x", pkce.challenge);
    const request = { authCode: code, redirectUri: REDIRECT, codeVerifier: pkce.verifier, nonce: nonceFor(newKeyPair().publicKey) };
    const unknown = crypto.randomUUID();
    await refused({ ...request, oauth2CredentialId: unknown }, "OAUTH2_CREDENTIAL_NOT_FOUND", `credential ${unknown} not found`);
    const mine = await createCredential("x");
    const other = await h.organization("Another app");
    await refused(
      { ...request, oauth2CredentialId: mine },
      "OAUTH2_CREDENTIAL_NOT_FOUND",
      `credential ${mine} not found in organization ${other.organizationId}`,
      h.sdk(other, other.key, fastPoller),
    );
    // Neither reached the provider: the code is still good.
    const { oidcToken } = await parentSdk.oauth2Authenticate({ ...request, oauth2CredentialId: mine });
    secrets.push(oidcToken);
  });

  it("refuses what the provider refuses: a wrong code, a wrong PKCE verifier, another redirect URI, a code used twice", async () => {
    const credentialId = await createCredential("discord");
    const nonce = nonceFor(newKeyPair().publicKey);
    const pkce = pkcePair();
    await refused(
      { oauth2CredentialId: credentialId, authCode: "made-up-code", redirectUri: REDIRECT, codeVerifier: pkce.verifier, nonce },
      "OAUTH2_PROVIDER_REFUSED",
      "Discord's token endpoint refused the authorization code: invalid_grant (HTTP 400)",
    );
    const wrongVerifier = consent("discord", pkce.challenge);
    await refused(
      { oauth2CredentialId: credentialId, authCode: wrongVerifier.code, redirectUri: REDIRECT, codeVerifier: pkcePair().verifier, nonce },
      "OAUTH2_PROVIDER_REFUSED",
      "refused the authorization code: invalid_grant (HTTP 400)",
    );
    const wrongRedirect = consent("discord", pkce.challenge);
    await refused(
      {
        oauth2CredentialId: credentialId,
        authCode: wrongRedirect.code,
        redirectUri: "https://evil.example.com/cb",
        codeVerifier: pkce.verifier,
        nonce,
      },
      "OAUTH2_PROVIDER_REFUSED",
      "refused the authorization code: invalid_grant (HTTP 400)",
    );
    const once = consent("discord", pkce.challenge);
    const request = { oauth2CredentialId: credentialId, authCode: once.code, redirectUri: REDIRECT, codeVerifier: pkce.verifier, nonce };
    secrets.push((await parentSdk.oauth2Authenticate(request)).oidcToken, provider.accessTokens.at(-1)!);
    await refused({ ...request }, "OAUTH2_PROVIDER_REFUSED", "refused the authorization code: invalid_grant (HTTP 400)");
  });

  it("refuses when the stored client secret is no longer the provider's (invalid_client)", async () => {
    const credentialId = await createCredential("x");
    const stale = "an-old-secret";
    secrets.push(stale);
    await parentSdk.updateOauth2Credential({
      oauth2CredentialId: credentialId,
      provider: "OAUTH2_PROVIDER_X",
      clientId: X_CLIENT,
      encryptedClientSecret: await encryptOauth2ClientSecret(stale, tlsFetcherKey),
    });
    const pkce = pkcePair();
    const { code } = consent("x", pkce.challenge);
    await refused(
      { oauth2CredentialId: credentialId, authCode: code, redirectUri: REDIRECT, codeVerifier: pkce.verifier, nonce: "n" },
      "OAUTH2_PROVIDER_REFUSED",
      "X's token endpoint refused the authorization code: invalid_client (HTTP 401)",
    );
  });

  it("refuses when the provider is down, and missing parameters or a bad bearer target before calling it", async () => {
    const credentialId = await createCredential("x");
    const pkce = pkcePair();
    const { code } = consent("x", pkce.challenge);
    const request = { oauth2CredentialId: credentialId, authCode: code, redirectUri: REDIRECT, codeVerifier: pkce.verifier, nonce: "n" };
    const before = provider.requests.length;
    await refused({ ...request, authCode: "" }, "REQUEST_INVALID", "authCode must be set");
    await refused({ ...request, codeVerifier: " " }, "REQUEST_INVALID", "codeVerifier must be set");
    await refused({ ...request, nonce: "" }, "REQUEST_INVALID", "nonce must be set");
    await refused(
      { ...request, bearerTokenTargetPublicKey: "04abcd" },
      "INVALID_TARGET_PUBLIC_KEY",
      "bearerTokenTargetPublicKey must be a P-256 public key",
    );
    expect(provider.requests.length).toBe(before);
    provider.setDown(true);
    try {
      await refused(request, "OAUTH2_PROVIDER_UNAVAILABLE", `X's token endpoint (${provider.url}) could not be reached`);
    } finally {
      provider.setDown(false);
    }
  });

  it("is refused without SIGIL_PUBLIC_URL (no issuer to issue tokens as), before the provider is called", async () => {
    const plain = await startHarness(provider.settings);
    try {
      const org = await plain.organization();
      const sdk = plain.sdk(org, org.key, fastPoller);
      const key = ((await (await fetch(`${plain.url}/.well-known/sigil.json`)).json()) as { tlsFetcherEncryptPublicKey: string })
        .tlsFetcherEncryptPublicKey;
      const { oauth2CredentialId } = await sdk.createOauth2Credential({
        provider: "OAUTH2_PROVIDER_X",
        clientId: X_CLIENT,
        encryptedClientSecret: await encryptOauth2ClientSecret(X_SECRET, key),
      });
      expect((await fetch(`${plain.url}/.well-known/openid-configuration`)).status).toBe(404);
      const pkce = pkcePair();
      const { code } = consent("x", pkce.challenge);
      const before = provider.requests.length;
      const { failure } = await refusedLeavingOnlyItsActivity(
        plain,
        () =>
          sdk.oauth2Authenticate({ oauth2CredentialId, authCode: code, redirectUri: REDIRECT, codeVerifier: pkce.verifier, nonce: "n" }),
        { message: expect.stringContaining("SIGIL_PUBLIC_URL") },
      );
      expect(failure.details[0].turnkeyErrorCode).toBe("PUBLIC_URL_NOT_CONFIGURED");
      expect(provider.requests.length).toBe(before);
    } finally {
      await plain.close();
    }
  });
});

describe("a provider that misbehaves", () => {
  /** A fresh code and the request that exchanges it with a new X credential. */
  async function request() {
    const credentialId = await createCredential("x");
    const pkce = pkcePair();
    secrets.push(pkce.verifier);
    const { code } = consent("x", pkce.challenge);
    return { oauth2CredentialId: credentialId, authCode: code, redirectUri: REDIRECT, codeVerifier: pkce.verifier, nonce: "n" };
  }
  const json =
    (status: number, body: unknown, headers: Record<string, string> = {}) =>
    (response: import("node:http").ServerResponse) =>
      response.writeHead(status, { "content-type": "application/json", ...headers }).end(JSON.stringify(body));

  it("more than 64 KiB in its answer: OAUTH2_PROVIDER_UNAVAILABLE, leaving only the failed activity", async () => {
    const parameters = await request();
    provider.answerNextToken(json(200, { token_type: "bearer", access_token: "a".repeat(70 * 1024) }));
    await refused(parameters, "OAUTH2_PROVIDER_UNAVAILABLE", "X's token endpoint answered more than 65536 bytes: not the provider's API");
  });

  it("a token of another type than bearer: OAUTH2_PROVIDER_UNAVAILABLE, its token_type not repeated", async () => {
    const parameters = await request();
    provider.answerNextToken(json(200, { token_type: parameters.authCode, access_token: "some-token" }));
    const { failure } = await refused(
      parameters,
      "OAUTH2_PROVIDER_UNAVAILABLE",
      "X's token endpoint answered a token that is not a bearer token",
    );
    expect(JSON.stringify(failure)).not.toContain(parameters.authCode);
  });

  it("a redirect: reported as one and not followed", async () => {
    const parameters = await request();
    const elsewhere = `${provider.url}/x/2/oauth2/token-elsewhere`;
    provider.answerNextToken((response) => response.writeHead(302, { location: elsewhere }).end());
    await refused(
      parameters,
      "OAUTH2_PROVIDER_UNAVAILABLE",
      `X's token endpoint (${provider.url}) answered with a redirect (HTTP 302), which is not followed`,
    );
    expect(provider.requests.some((r) => r.path.endsWith("token-elsewhere"))).toBe(false);
  });

  it("a 5xx or a 429: OAUTH2_PROVIDER_UNAVAILABLE (the code is not spent: the same request succeeds once the provider recovers)", async () => {
    const parameters = await request();
    provider.answerNextToken(json(503, { error: "temporarily_unavailable", error_description: "try later" }));
    await refused(
      parameters,
      "OAUTH2_PROVIDER_UNAVAILABLE",
      "X's token endpoint failed with temporarily_unavailable (HTTP 503): try again later",
    );
    provider.answerNextToken(json(500, "<html>oops</html>"));
    await refused(parameters, "OAUTH2_PROVIDER_UNAVAILABLE", "X's token endpoint failed with HTTP 500: try again later");
    provider.answerNextToken(json(429, { title: "Too Many Requests" }, { "retry-after": "1" }));
    await refused(parameters, "OAUTH2_PROVIDER_UNAVAILABLE", "X's token endpoint failed with HTTP 429: try again later");
    const { oidcToken } = await parentSdk.oauth2Authenticate(parameters);
    secrets.push(oidcToken, provider.accessTokens.at(-1)!);
  });

  it("no answer before the deadline: OAUTH2_PROVIDER_UNAVAILABLE (the deadline shortened for the test)", async () => {
    const providers = oauth2Providers(
      {
        x: { tokenUrl: provider.settings.SIGIL_OAUTH2_X_TOKEN_URL!, userInfoUrl: provider.settings.SIGIL_OAUTH2_X_USERINFO_URL! },
        discord: {
          tokenUrl: provider.settings.SIGIL_OAUTH2_DISCORD_TOKEN_URL!,
          userInfoUrl: provider.settings.SIGIL_OAUTH2_DISCORD_USERINFO_URL!,
        },
      },
      { timeoutMs: 200 },
    );
    const pkce = pkcePair();
    const { code } = consent("discord", pkce.challenge);
    provider.stallTokens();
    try {
      const exchange = { clientId: DISCORD_CLIENT, clientSecret: DISCORD_SECRET, code, redirectUri: REDIRECT, codeVerifier: pkce.verifier };
      await expect(providers.exchangeCode("OAUTH2_PROVIDER_DISCORD", exchange)).rejects.toMatchObject({
        turnkeyErrorCode: "OAUTH2_PROVIDER_UNAVAILABLE",
        message: `Discord's token endpoint (${provider.url}) gave no answer within 200 ms`,
      });
      expect(provider.heldTokens()).toBe(1);
    } finally {
      provider.answerTokens();
    }
  });
});

describe("the provider is asked before the organization's lock is taken", () => {
  /** Starts oauth2_authenticate with a fresh code while the provider holds its token answers, and
   * waits until the exchange is held there. */
  async function heldAtTheProvider(kind: Provider, oauth2CredentialId: string) {
    const pkce = pkcePair();
    secrets.push(pkce.verifier);
    const { user, code } = consent(kind, pkce.challenge);
    const session = generateP256KeyPair();
    provider.stallTokens();
    const authenticating = parentSdk.oauth2Authenticate({
      oauth2CredentialId,
      authCode: code,
      redirectUri: REDIRECT,
      codeVerifier: pkce.verifier,
      nonce: nonceFor(session.publicKey),
    });
    // Awaited by the test; this keeps a test that fails before then from leaving it unhandled.
    authenticating.catch(() => undefined);
    while (provider.heldTokens() === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    return { user, authenticating };
  }

  it("while the provider holds its answer, the organization's and another organization's writes commit; then the login completes", async () => {
    const credentialId = await createCredential("x");
    const neighbour = await h.organization("Busy neighbour");
    const neighbourSdk = h.sdk(neighbour, neighbour.key, fastPoller);
    const policy = (policyName: string) => ({
      policyName,
      effect: "EFFECT_ALLOW" as const,
      consensus: "approvers.count() >= 1",
      condition: "activity.resource == 'WALLET' && activity.action == 'CREATE'",
      notes: "",
    });
    const { user, authenticating } = await heldAtTheProvider("x", credentialId);
    try {
      // Were the exchange made under the lock, these would wait for the provider: on SQLite every
      // organization's writes (one writer), on PostgreSQL this organization's (a policy takes its lock
      // exclusive; the login holds it shared).
      const { policyId: theirs } = await neighbourSdk.createPolicy(policy("made by another organization meanwhile"));
      const { policyId: ours } = await parentSdk.createPolicy(policy("made by this organization meanwhile"));
      expect((await neighbourSdk.getPolicy({ policyId: theirs })).policy.policyName).toBe("made by another organization meanwhile");
      expect((await parentSdk.getPolicy({ policyId: ours })).policy.policyName).toBe("made by this organization meanwhile");
      expect(provider.heldTokens()).toBe(1);
    } finally {
      provider.answerTokens();
    }
    const { oidcToken } = await authenticating;
    secrets.push(oidcToken, provider.accessTokens.at(-1)!);
    expect(decodeJwt(oidcToken)).toMatchObject({ iss: publicUrl, sub: `x:${user.id}`, aud: X_CLIENT });
  });

  for (const change of ["deleted", "given another client id"] as const)
    it(`a credential ${change} while its code is exchanged: the login fails, leaving only its activity`, async () => {
      const credentialId = await createCredential("discord");
      const { authenticating } = await heldAtTheProvider("discord", credentialId);
      try {
        if (change === "deleted") await parentSdk.deleteOauth2Credential({ oauth2CredentialId: credentialId });
        else
          await parentSdk.updateOauth2Credential({
            oauth2CredentialId: credentialId,
            provider: "OAUTH2_PROVIDER_DISCORD",
            clientId: "another-discord-app",
            encryptedClientSecret: await encryptOauth2ClientSecret(DISCORD_SECRET, tlsFetcherKey),
          });
      } catch (error) {
        provider.answerTokens();
        throw error;
      }
      const { failure } = await refusedLeavingOnlyItsActivity(
        h,
        () => {
          provider.answerTokens();
          return authenticating;
        },
        {
          message: expect.stringContaining(
            change === "deleted"
              ? `credential ${credentialId} not found in organization ${parent.organizationId}`
              : `credential ${credentialId} was updated while the code was exchanged`,
          ),
        },
      );
      expect(failure.details[0].turnkeyErrorCode).toBe("OAUTH2_CREDENTIAL_NOT_FOUND");
      // The provider did answer (the code is spent): its token was made, and must be kept nowhere.
      secrets.push(provider.accessTokens.at(-1)!);
    });
});

describe("secrets", () => {
  // From here on every activity of the parent is delivered to a webhook.
  beforeAll(async () => {
    await parentSdk.createWebhookEndpoint({ name: "audit", url: hooks.url, subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] });
  });

  it("no client secret, code, verifier, bearer token or issued token is in a log line, a table or a webhook", async () => {
    // One that succeeds with a bearer token, one the provider refuses, and a credential made.
    await authenticate("x", { bearer: true });
    const credentialId = await createCredential("discord");
    const pkce = pkcePair();
    secrets.push(pkce.verifier);
    await errorOf(
      parentSdk.oauth2Authenticate({
        oauth2CredentialId: credentialId,
        authCode: "wrong",
        redirectUri: REDIRECT,
        codeVerifier: pkce.verifier,
        nonce: "n",
      }),
    );
    const deadline = Date.now() + 10_000;
    while (hooks.received.length < 4 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    const delivered = hooks.activities().map((a) => a.type);
    expect(delivered).toEqual(expect.arrayContaining(["ACTIVITY_TYPE_OAUTH2_AUTHENTICATE", "ACTIVITY_TYPE_CREATE_OAUTH2_CREDENTIAL"]));
    const places = {
      logs: h.logLines.join("\n"),
      tables: await h.snapshot(),
      webhooks: hooks.received.map((r) => r.body.toString("utf8")).join("\n"),
    };
    expect(secrets.length).toBeGreaterThan(10);
    for (const [place, text] of Object.entries(places))
      for (const secret of secrets) expect(text.includes(secret), `${place} holds a secret`).toBe(false);
    // The envelopes too, except in the credentials they were kept as.
    const { oauth2_credentials: _credentials, ...others } = JSON.parse(places.tables) as Record<string, unknown>;
    expect(envelopes.length).toBeGreaterThan(5);
    for (const [place, text] of Object.entries({ ...places, tables: JSON.stringify(others) }))
      for (const envelope of envelopes) expect(text.includes(envelope), `${place} holds an envelope`).toBe(false);
    // The recorded oauth2_authenticate shows what was asked, with the code, verifier and token redacted.
    const recorded = (await parentSdk.getActivities({ filterByType: ["ACTIVITY_TYPE_OAUTH2_AUTHENTICATE"] } as never)).activities.find(
      (a) => a.status === "ACTIVITY_STATUS_COMPLETED",
    )!;
    expect(recorded.intent.oauth2AuthenticateIntent).toMatchObject({
      authCode: "<redacted>",
      codeVerifier: "<redacted>",
      redirectUri: REDIRECT,
    });
    expect(recorded.result.oauth2AuthenticateResult).toEqual({ oidcToken: "<redacted>" });
  });

  it("a provider echoing the code, verifier, secret or access token (raw, URL-encoded, base64, at offset 170, as its error): none reaches the refusal, the audit log, a log line or a webhook", async () => {
    const secret = `odd secret+/=&~${crypto.randomBytes(12).toString("base64")}`;
    const { oauth2CredentialId } = await parentSdk.createOauth2Credential({
      provider: "OAUTH2_PROVIDER_DISCORD",
      clientId: DISCORD_CLIENT,
      encryptedClientSecret: await envelopeOf(secret),
    });
    const authCode = `code+/= ${crypto.randomBytes(18).toString("base64url")}`;
    const codeVerifier = pkcePair().verifier;
    let parameters = { oauth2CredentialId, authCode, redirectUri: REDIRECT, codeVerifier, nonce: "n" };
    const spellings = (value: string) => [
      value,
      encodeURIComponent(value),
      new URLSearchParams({ v: value }).toString().slice(2),
      Buffer.from(value).toString("base64"),
      Buffer.from(value).toString("base64url"),
    ];
    const echoed = [secret, authCode, codeVerifier].flatMap(spellings);
    // What the provider was sent is what it echoes (the test checks it got the real values).
    const echo = (error: string) => (response: import("node:http").ServerResponse, sent: SentToken) => {
      expect([sent.clientSecret, sent.form.get("code"), sent.form.get("code_verifier")]).toEqual([secret, authCode, codeVerifier]);
      const description = `${"x".repeat(170)}${authCode} ${echoed.join(" ")}`;
      response
        .writeHead(400, { "content-type": "application/json" })
        .end(JSON.stringify({ error, error_description: description, message: description }));
    };
    const hooked = hooks.received.length;
    /** Refused with exactly `message`; the failed activity's id. (Webhook deliveries are queued, so
     * this is not refusedLeavingOnlyItsActivity: the tests above hold every table to that.) */
    const refusedWith = async (message: string) => {
      await expect(parentSdk.oauth2Authenticate(parameters)).rejects.toMatchObject({
        code: 3,
        message: expect.stringContaining(`Turnkey error 3: ${message} (Details`),
      });
      const row = await h.server.store.db
        .selectFrom("activities")
        .selectAll()
        .where("organization_id", "=", parent.organizationId)
        .orderBy("created_at", "desc")
        .orderBy("id", "desc")
        .executeTakeFirstOrThrow();
      expect(row).toMatchObject({ type: "ACTIVITY_TYPE_OAUTH2_AUTHENTICATE", status: "ACTIVITY_STATUS_FAILED" });
      expect(JSON.parse(row.failure!)).toMatchObject({ message, details: [{ turnkeyErrorCode: "OAUTH2_PROVIDER_REFUSED" }] });
      return row.id;
    };
    provider.answerNextToken(echo("invalid_grant"));
    const first = { id: await refusedWith("Discord's token endpoint refused the authorization code: invalid_grant (HTTP 400)") };
    // An `error` that is not one of OAuth's registered codes (here the code itself) is not repeated.
    provider.answerNextToken(echo(authCode.replace(/[^A-Za-z0-9]/g, "")));
    const second = { id: await refusedWith("Discord's token endpoint refused the authorization code: HTTP 400") };

    // The user-info endpoint echoing the access token it was shown, in its `error` and its text.
    const pkce = pkcePair();
    const { code } = consent("discord", pkce.challenge);
    parameters = { ...parameters, oauth2CredentialId: await createCredential("discord"), authCode: code, codeVerifier: pkce.verifier };
    let bearer = "";
    provider.answerNextUserInfo((response, sent) => {
      bearer = sent ?? "";
      const text = `${"y".repeat(170)}${bearer} ${spellings(bearer).join(" ")}`;
      response
        .writeHead(401, { "content-type": "application/json" })
        .end(JSON.stringify({ error: bearer, title: text, detail: text, message: text }));
    });
    const third = {
      id: await refusedWith(
        "Discord's user-info endpoint refused the access token (HTTP 401): the app may lack the scopes identify and email",
      ),
    };
    expect(bearer).toBe(provider.accessTokens.at(-1));
    echoed.push(...spellings(bearer));

    const ids = [first.id, second.id, third.id];
    const deadline = Date.now() + 10_000;
    const delivered = () => hooks.received.slice(hooked).map((r) => r.body.toString("utf8"));
    const ours = () => delivered().filter((body) => ids.some((id) => body.includes(id)));
    while (ours().length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(ours()).toHaveLength(3);
    const records = await h.server.store.db.selectFrom("activities").selectAll().where("id", "in", ids).execute();
    const places = {
      activities: JSON.stringify(records),
      answered: JSON.stringify(await Promise.all(ids.map((activityId) => parentSdk.getActivity({ activityId })))),
      logs: h.logLines.join("\n"),
      webhooks: delivered().join("\n"),
    };
    for (const [place, text] of Object.entries(places))
      for (const value of [...echoed, ...[secret, authCode, codeVerifier, bearer].map((v) => v.slice(0, 16))])
        expect(text.includes(value), `${place} holds ${value}`).toBe(false);
  });
});

describe("migration 0020_oauth2_envelope_digests", () => {
  it("gives the credentials kept before it the digest of their envelope's bytes, whatever its spelling", async () => {
    const { db, migrateThrough, close } = await migrationDatabase();
    try {
      await migrateThrough("0019_mfa_policies");
      await db
        .insertInto("organizations")
        .values({ id: "org", name: "before", root_quorum_threshold: 1, created_at: 1, updated_at: 1 })
        .execute();
      const envelope = await encryptOauth2ClientSecret(X_SECRET, tlsFetcherKey);
      for (const [id, stored] of [
        ["plain", envelope],
        ["prefixed", `0x${envelope.toUpperCase()}`],
      ])
        await db
          .insertInto("oauth2_credentials")
          .values({
            id,
            organization_id: "org",
            provider: "OAUTH2_PROVIDER_X",
            client_id: X_CLIENT,
            encrypted_client_secret: stored,
            sealed_client_secret: "v1.sealed",
            created_at: 1,
            updated_at: 1,
          })
          .execute();
      await migrateThrough("0020_oauth2_envelope_digests");
      const digest = crypto.createHash("sha256").update(Buffer.from(envelope, "hex")).digest("hex");
      const rows = await db.selectFrom("oauth2_credentials").select(["id", "encrypted_client_secret_digest"]).orderBy("id").execute();
      expect(rows).toEqual([
        { id: "plain", encrypted_client_secret_digest: digest },
        { id: "prefixed", encrypted_client_secret_digest: digest },
      ]);
    } finally {
      await close();
    }
  });
});
