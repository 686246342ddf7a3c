// Every operation of the foundation, called the way a user of @turnkey/http calls it: a TurnkeyClient
// with an ApiKeyStamper, full request bodies `{ type, timestampMs, organizationId, parameters }`, and
// the results read off `activity.result.<resultKey>`. Older activity type versions, whose parameter
// shapes differ from the ones the current typings name, are sent the same way.
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  TurnkeyApi,
  type TurnkeyClient,
  TurnkeyRequestError,
  createActivityPoller,
  init,
  withAsyncPolling,
  type TurnkeyApiTypes,
} from "@turnkey/http";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { startHarness, newKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { startOidcIssuer, type TestIssuer } from "./helpers/oidc-issuer.js";
import { SoftwarePasskey } from "./helpers/passkey.js";

let h: Harness;
let org: TestOrganization;
let client: TurnkeyClient;

let oidc: TestIssuer;

beforeAll(async () => {
  oidc = await startOidcIssuer();
  h = await startHarness({ SIGIL_OIDC_ALLOWED_ISSUERS: oidc.issuer });
  org = await h.organization("Acme");
  client = h.http(org.key);
});
afterAll(async () => {
  await h.close();
  await oidc.close();
});

type Activity = TurnkeyApiTypes["v1Activity"];
type Body<M extends keyof TurnkeyClient> = TurnkeyClient[M] extends (input: infer I) => unknown ? I : never;
/** The current typings name only the newest version of each activity type; older ones are still served. */
const olderVersion = <M extends keyof TurnkeyClient>(body: object) => body as unknown as Body<M>;

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const now = () => String(Date.now());
const sha256hex = (text: string) => crypto.createHash("sha256").update(text).digest("hex");
const millis = (t: { seconds: string; nanos: string }) => Number(t.seconds) * 1000 + Number(t.nanos) / 1e6;

function expectTimestamp(t: unknown, notBefore: number) {
  expect(t).toEqual({ seconds: expect.stringMatching(/^\d+$/), nanos: expect.stringMatching(/^\d+$/) });
  const ms = millis(t as { seconds: string; nanos: string });
  expect(ms).toBeGreaterThanOrEqual(notBefore - 1000);
  expect(ms).toBeLessThanOrEqual(Date.now());
}

function p256Verify(compressedHex: string, message: string, derSignatureHex: string): boolean {
  const point = crypto.ECDH.convertKey(compressedHex, "prime256v1", "hex", undefined, "uncompressed") as Buffer;
  const key = crypto.createPublicKey({
    key: { kty: "EC", crv: "P-256", x: point.subarray(1, 33).toString("base64url"), y: point.subarray(33).toString("base64url") },
    format: "jwk",
  });
  return crypto.verify("sha256", Buffer.from(message), { key, dsaEncoding: "der" }, Buffer.from(derSignatureHex, "hex"));
}

/** A completed activity, checked field by field against the body the client sent. */
function expectCompleted(
  activity: Activity,
  body: { type: string; timestampMs: string; organizationId: string; parameters: unknown },
  expected: { intentKeys: string[]; resultKey: string; result: unknown; intent?: unknown },
) {
  const sent = JSON.stringify(body); // what TurnkeyClient puts on the wire
  expect(activity.id).toMatch(UUID);
  expect(activity.organizationId).toBe(org.organizationId);
  expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  expect(activity.type).toBe(body.type);
  expect(Object.keys(activity.intent)).toEqual(expected.intentKeys);
  for (const key of expected.intentKeys)
    expect((activity.intent as Record<string, unknown>)[key]).toEqual(expected.intent ?? body.parameters);
  expect((activity.result as Record<string, unknown>)[expected.resultKey]).toEqual(expected.result);
  expect(activity.fingerprint).toBe(sha256hex(sent));
  expect(activity.canApprove).toBe(false);
  expect(activity.canReject).toBe(false);
  expectTimestamp(activity.createdAt, Number(body.timestampMs));
  expect(activity.updatedAt).toEqual(activity.createdAt);
  expect(activity.failure).toBeUndefined();

  expect(activity.votes).toHaveLength(1);
  const [vote] = activity.votes;
  expect(vote.id).toMatch(UUID);
  expect(vote.id).not.toBe(activity.id);
  expect(vote.activityId).toBe(activity.id);
  expect(vote.userId).toBe(org.userId);
  expect(vote.user).toMatchObject({
    userId: org.userId,
    userName: "root",
    authenticators: [],
    apiKeys: [],
    userTags: [],
    oauthProviders: [],
  });
  expect(vote.selection).toBe("VOTE_SELECTION_APPROVED");
  // The signed body, unless the intent could not keep it whole (an identity token recorded as its claims).
  expect(vote.message).toBe(expected.intent ? "" : sent);
  expect(vote.publicKey).toBe(org.key.publicKey);
  expect(vote.scheme).toBe("SIGNATURE_SCHEME_TK_API_P256");
  expect(p256Verify(org.key.publicKey, sent, vote.signature)).toBe(true);
  expect(vote.createdAt).toEqual(activity.createdAt);
}

/** The spec's query envelope the server adds beside what the clients read. */
function expectQueryEnvelope(response: Record<string, unknown>, keys: string[]) {
  const { activity, ...rest } = response as { activity: any };
  expect(Object.keys(rest)).toEqual(keys);
  expect(activity).toMatchObject({
    status: "ACTIVITY_STATUS_COMPLETED",
    type: "ACTIVITY_TYPE_UNKNOWN_V1",
    organizationId: org.organizationId,
  });
  expect(activity.id).toMatch(UUID);
  expect(activity.timestampMs).toMatch(/^\d+$/);
  expect(activity.result).toEqual(rest);
}

const emptyUser = { apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] };

/** A user with no credentials, created through the latest create_users. */
async function createPlainUser(userName: string): Promise<string> {
  const { activity } = await client.createUsers({
    type: "ACTIVITY_TYPE_CREATE_USERS_V4",
    timestampMs: now(),
    organizationId: org.organizationId,
    parameters: { users: [{ userName, ...emptyUser }] },
  });
  return activity.result.createUsersResult!.userIds[0];
}

describe("@turnkey/http TurnkeyClient against Sigil", () => {
  it("getWhoami names the caller and its organization", async () => {
    const me = await client.getWhoami({ organizationId: org.organizationId });
    expect(me.organizationId).toBe(org.organizationId);
    expect(me.organizationName).toBe("Acme");
    expect(me.userId).toBe(org.userId);
    expect(me.username).toBe("root");
    expectQueryEnvelope(me, ["organizationId", "organizationName", "userId", "username"]);
  });

  describe("createUsers, every version", () => {
    it("ACTIVITY_TYPE_CREATE_USERS_V4 (the version the typings name) with an API key, a passkey and an OIDC identity", async () => {
      const p256 = newKeyPair();
      const k1 = Buffer.from(secp256k1.getPublicKey(secp256k1.utils.randomSecretKey(), true)).toString("hex");
      const passkey = new SoftwarePasskey();
      const registration = passkey.register();
      const body: Body<"createUsers"> = {
        type: "ACTIVITY_TYPE_CREATE_USERS_V4",
        timestampMs: now(),
        organizationId: org.organizationId,
        parameters: {
          users: [
            {
              userName: "alice",
              userEmail: "alice@example.com",
              userPhoneNumber: "+13214567890",
              apiKeys: [
                { apiKeyName: "alice laptop", publicKey: p256.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "3600" },
                { apiKeyName: "alice k1", publicKey: k1, curveType: "API_KEY_CURVE_SECP256K1" },
              ],
              authenticators: [
                { authenticatorName: "alice phone", challenge: registration.challenge, attestation: registration.attestation as any },
              ],
              oauthProviders: [
                { providerName: "Google", oidcClaims: { iss: "https://accounts.google.com", sub: "alice-sub", aud: "client-1" } },
              ],
              userTags: [],
            },
          ],
        },
      };
      const { activity } = await client.createUsers(body);
      const userIds = activity.result.createUsersResult!.userIds;
      expect(userIds).toHaveLength(1);
      expect(userIds[0]).toMatch(UUID);
      expectCompleted(activity, body, { intentKeys: ["createUsersIntentV4"], resultKey: "createUsersResult", result: { userIds } });

      const response = await client.getUser({ organizationId: org.organizationId, userId: userIds[0] });
      expectQueryEnvelope(response, ["user"]);
      const { user } = response;
      expect(user.userId).toBe(userIds[0]);
      expect(user.userName).toBe("alice");
      expect(user.userEmail).toBe("alice@example.com");
      expect(user.userPhoneNumber).toBe("+13214567890");
      expect(user.userTags).toEqual([]);
      expect(user.createdAt).toEqual(activity.createdAt);
      expect(user.updatedAt).toEqual(activity.createdAt);

      expect(user.apiKeys).toHaveLength(2);
      const [laptop, k1Key] = user.apiKeys;
      expect(laptop.apiKeyId).toMatch(UUID);
      expect(laptop.apiKeyName).toBe("alice laptop");
      expect(laptop.credential).toEqual({ publicKey: p256.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" });
      expect(laptop.expirationSeconds).toBe("3600");
      expect(laptop.createdAt).toEqual(activity.createdAt);
      expect(laptop.updatedAt).toEqual(activity.createdAt);
      expect(k1Key.apiKeyName).toBe("alice k1");
      expect(k1Key.credential).toEqual({ publicKey: k1, type: "CREDENTIAL_TYPE_API_KEY_SECP256K1" });
      expect(k1Key.expirationSeconds).toBeUndefined();

      expect(user.authenticators).toHaveLength(1);
      const [authenticator] = user.authenticators;
      expect(authenticator.authenticatorId).toMatch(UUID);
      expect(authenticator.authenticatorName).toBe("alice phone");
      expect(authenticator.credentialId).toBe(passkey.credentialIdBase64url);
      expect(authenticator.credential).toEqual({
        publicKey: passkey.publicKeyCompressedHex(),
        type: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR",
      });
      expect(authenticator.attestationType).toBe("none");
      expect(authenticator.aaguid).toBe("00000000-0000-0000-0000-000000000000");
      expect(authenticator.transports).toEqual(["AUTHENTICATOR_TRANSPORT_INTERNAL"]);
      expect(authenticator.model).toBe("");
      expect(authenticator.createdAt).toEqual(activity.createdAt);

      expect(user.oauthProviders).toHaveLength(1);
      const [provider] = user.oauthProviders;
      expect(provider.providerId).toMatch(UUID);
      expect(provider.providerName).toBe("Google");
      expect(provider.issuer).toBe("https://accounts.google.com");
      expect(provider.subject).toBe("alice-sub");
      expect(provider.audience).toBe("client-1");
      expect(provider.createdAt).toEqual(activity.createdAt);

      // The new user's key works with the same client library.
      expect((await h.http(p256).getWhoami({ organizationId: org.organizationId })).username).toBe("alice");
    });

    it("ACTIVITY_TYPE_CREATE_USERS_V3: curveType on keys, a phone number, an OIDC token", async () => {
      const key = newKeyPair();
      const body = {
        type: "ACTIVITY_TYPE_CREATE_USERS_V3",
        timestampMs: now(),
        organizationId: org.organizationId,
        parameters: {
          users: [
            {
              userName: "v3 user",
              userEmail: "v3@example.com",
              userPhoneNumber: "+14155550123",
              apiKeys: [{ apiKeyName: "v3 key", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "86400" }],
              authenticators: [],
              oauthProviders: [{ providerName: "Auth0", oidcToken: await oidc.token({ sub: "auth0|v3", aud: "aud-v3" }) }],
              userTags: [],
            },
          ],
        },
      };
      const { activity } = await client.createUsers(olderVersion<"createUsers">(body));
      const userIds = activity.result.createUsersResult!.userIds;
      expect(userIds).toHaveLength(1);
      // The spec's intent key first, the swagger's beside it. The audit log keeps the identity token's
      // claims in place of the token (a bearer credential until it expires).
      const intent = {
        users: [
          {
            ...body.parameters.users[0]!,
            oauthProviders: [{ providerName: "Auth0", oidcClaims: { iss: oidc.issuer, sub: "auth0|v3", aud: "aud-v3" } }],
          },
        ],
      };
      expectCompleted(activity, body, {
        intentKeys: ["createUsersIntent", "createUsersIntentV3"],
        resultKey: "createUsersResult",
        result: { userIds },
        intent,
      });

      const { user } = await client.getUser({ organizationId: org.organizationId, userId: userIds[0] });
      expect(user.userName).toBe("v3 user");
      expect(user.userEmail).toBe("v3@example.com");
      expect(user.userPhoneNumber).toBe("+14155550123");
      expect(user.apiKeys.map((k) => [k.apiKeyName, k.credential, k.expirationSeconds])).toEqual([
        ["v3 key", { publicKey: key.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" }, "86400"],
      ]);
      expect(user.authenticators).toEqual([]);
      expect(user.oauthProviders.map((p) => [p.providerName, p.issuer, p.subject, p.audience])).toEqual([
        ["Auth0", oidc.issuer, "auth0|v3", "aud-v3"],
      ]);
      expect((await h.http(key).getWhoami({ organizationId: org.organizationId })).userId).toBe(userIds[0]);
    });

    it("ACTIVITY_TYPE_CREATE_USERS_V2: keys without curveType (P-256), a V2 attestation, no phone number", async () => {
      const key = newKeyPair();
      const passkey = new SoftwarePasskey();
      const registration = passkey.register();
      const body = {
        type: "ACTIVITY_TYPE_CREATE_USERS_V2",
        timestampMs: now(),
        organizationId: org.organizationId,
        parameters: {
          users: [
            {
              userName: "v2 user",
              userEmail: "v2@example.com",
              apiKeys: [{ apiKeyName: "v2 key", publicKey: key.publicKey }],
              authenticators: [
                { authenticatorName: "v2 passkey", challenge: registration.challenge, attestation: registration.attestation },
              ],
              userTags: [],
            },
          ],
        },
      };
      const { activity } = await client.createUsers(olderVersion<"createUsers">(body));
      const userIds = activity.result.createUsersResult!.userIds;
      expect(userIds).toHaveLength(1);
      expectCompleted(activity, body, { intentKeys: ["createUsersIntentV2"], resultKey: "createUsersResult", result: { userIds } });

      const { user } = await client.getUser({ organizationId: org.organizationId, userId: userIds[0] });
      expect(user.userName).toBe("v2 user");
      expect(user.userEmail).toBe("v2@example.com");
      expect(user.userPhoneNumber).toBeUndefined();
      expect(user.apiKeys).toHaveLength(1);
      expect(user.apiKeys[0].apiKeyName).toBe("v2 key");
      expect(user.apiKeys[0].credential).toEqual({ publicKey: key.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" });
      expect(user.apiKeys[0].expirationSeconds).toBeUndefined();
      expect(user.authenticators).toHaveLength(1);
      expect(user.authenticators[0].authenticatorName).toBe("v2 passkey");
      expect(user.authenticators[0].credentialId).toBe(passkey.credentialIdBase64url);
      expect(user.authenticators[0].credential).toEqual({
        publicKey: passkey.publicKeyCompressedHex(),
        type: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR",
      });
      expect(user.oauthProviders).toEqual([]);
      expect((await h.http(key).getWhoami({ organizationId: org.organizationId })).username).toBe("v2 user");
    });

    it("ACTIVITY_TYPE_CREATE_USERS (v1): accessType, keys without curveType", async () => {
      const key = newKeyPair();
      const body = {
        type: "ACTIVITY_TYPE_CREATE_USERS",
        timestampMs: now(),
        organizationId: org.organizationId,
        parameters: {
          users: [
            {
              userName: "v1 user",
              userEmail: "v1@example.com",
              accessType: "ACCESS_TYPE_API",
              apiKeys: [{ apiKeyName: "v1 key", publicKey: key.publicKey, expirationSeconds: "600" }],
              authenticators: [],
              userTags: [],
            },
          ],
        },
      };
      const { activity } = await client.createUsers(olderVersion<"createUsers">(body));
      const userIds = activity.result.createUsersResult!.userIds;
      expect(userIds).toHaveLength(1);
      expectCompleted(activity, body, { intentKeys: ["createUsersIntent"], resultKey: "createUsersResult", result: { userIds } });

      const { user } = await client.getUser({ organizationId: org.organizationId, userId: userIds[0] });
      expect(user.userName).toBe("v1 user");
      expect(user.userEmail).toBe("v1@example.com");
      expect(user.apiKeys.map((k) => [k.apiKeyName, k.credential, k.expirationSeconds])).toEqual([
        ["v1 key", { publicKey: key.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" }, "600"],
      ]);
      expect((await h.http(key).getWhoami({ organizationId: org.organizationId })).username).toBe("v1 user");
    });

    it("getUsers lists every user in creation order, with the spec's envelope beside", async () => {
      const response = await client.getUsers({ organizationId: org.organizationId });
      expectQueryEnvelope(response, ["users"]);
      expect(response.users.map((u) => u.userName)).toEqual(["root", "alice", "v3 user", "v2 user", "v1 user"]);
      const root = response.users[0];
      expect(root.userId).toBe(org.userId);
      expect(root.apiKeys.map((k) => [k.apiKeyId, k.apiKeyName, k.credential.publicKey])).toEqual([
        [org.apiKeyId, "root key", org.key.publicKey],
      ]);
    });
  });

  it("createApiKeys (V2 and the old version without curveType), getApiKey, getApiKeys, deleteApiKeys", async () => {
    const userId = await createPlainUser("carol");
    const k1 = newKeyPair();
    const k2 = newKeyPair();
    const k3 = newKeyPair();

    const v2: Body<"createApiKeys"> = {
      type: "ACTIVITY_TYPE_CREATE_API_KEYS_V2",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: {
        userId,
        apiKeys: [
          { apiKeyName: "one", publicKey: k1.publicKey, curveType: "API_KEY_CURVE_P256" },
          { apiKeyName: "two", publicKey: k2.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "120" },
        ],
      },
    };
    const created = await client.createApiKeys(v2);
    const apiKeyIds = created.activity.result.createApiKeysResult!.apiKeyIds;
    expect(apiKeyIds).toHaveLength(2);
    expectCompleted(created.activity, v2, {
      intentKeys: ["createApiKeysIntentV2"],
      resultKey: "createApiKeysResult",
      result: { apiKeyIds },
    });

    const v1 = {
      type: "ACTIVITY_TYPE_CREATE_API_KEYS",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId, apiKeys: [{ apiKeyName: "three", publicKey: k3.publicKey, expirationSeconds: "3600" }] },
    };
    const old = await client.createApiKeys(olderVersion<"createApiKeys">(v1));
    const oldIds = old.activity.result.createApiKeysResult!.apiKeyIds;
    expect(oldIds).toHaveLength(1);
    expectCompleted(old.activity, v1, {
      intentKeys: ["createApiKeysIntent"],
      resultKey: "createApiKeysResult",
      result: { apiKeyIds: oldIds },
    });

    const one = await client.getApiKey({ organizationId: org.organizationId, apiKeyId: apiKeyIds[0] });
    expectQueryEnvelope(one, ["apiKey"]);
    expect(one.apiKey.apiKeyId).toBe(apiKeyIds[0]);
    expect(one.apiKey.apiKeyName).toBe("one");
    expect(one.apiKey.credential).toEqual({ publicKey: k1.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" });
    expect(one.apiKey.expirationSeconds).toBeUndefined();
    expect(one.apiKey.createdAt).toEqual(created.activity.createdAt);
    expect(one.apiKey.updatedAt).toEqual(created.activity.createdAt);
    const three = await client.getApiKey({ organizationId: org.organizationId, apiKeyId: oldIds[0] });
    expect(three.apiKey).toMatchObject({
      apiKeyName: "three",
      expirationSeconds: "3600",
      credential: { publicKey: k3.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" },
    });

    const all = await client.getApiKeys({ organizationId: org.organizationId, userId });
    expectQueryEnvelope(all, ["apiKeys"]);
    expect(all.apiKeys.map((k) => [k.apiKeyId, k.apiKeyName, k.expirationSeconds])).toEqual([
      [apiKeyIds[0], "one", undefined],
      [apiKeyIds[1], "two", "120"],
      [oldIds[0], "three", "3600"],
    ]);
    // Without userId: the caller's own keys.
    expect((await client.getApiKeys({ organizationId: org.organizationId })).apiKeys.map((k) => k.apiKeyId)).toEqual([org.apiKeyId]);
    // The old-version key authenticates like any other.
    expect((await h.http(k3).getWhoami({ organizationId: org.organizationId })).username).toBe("carol");

    const del: Body<"deleteApiKeys"> = {
      type: "ACTIVITY_TYPE_DELETE_API_KEYS",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId, apiKeyIds: [apiKeyIds[0], oldIds[0]] },
    };
    const deleted = await client.deleteApiKeys(del);
    expectCompleted(deleted.activity, del, {
      intentKeys: ["deleteApiKeysIntent"],
      resultKey: "deleteApiKeysResult",
      result: { apiKeyIds: [apiKeyIds[0], oldIds[0]] },
    });
    expect((await client.getApiKeys({ organizationId: org.organizationId, userId })).apiKeys.map((k) => k.apiKeyId)).toEqual([
      apiKeyIds[1],
    ]);

    const missing = await client.getApiKey({ organizationId: org.organizationId, apiKeyId: apiKeyIds[0] }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(TurnkeyRequestError);
    expect(missing).toMatchObject({
      code: 5,
      details: [{ "@type": "type.googleapis.com/errors.v1.TurnkeyErrorDetail", turnkeyErrorCode: "API_KEY_NOT_FOUND" }],
    });
    await expect(h.http(k3).getWhoami({ organizationId: org.organizationId })).rejects.toMatchObject({ code: 16 });
  });

  it("createAuthenticators (V2, and the old browser-shaped attestation), getAuthenticator, getAuthenticators, deleteAuthenticators", async () => {
    const userId = await createPlainUser("dave");
    const phone = new SoftwarePasskey();
    const registration = phone.register();
    const v2: Body<"createAuthenticators"> = {
      type: "ACTIVITY_TYPE_CREATE_AUTHENTICATORS_V2",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: {
        userId,
        authenticators: [
          { authenticatorName: "dave's phone", challenge: registration.challenge, attestation: registration.attestation as any },
        ],
      },
    };
    const created = await client.createAuthenticators(v2);
    const authenticatorIds = created.activity.result.createAuthenticatorsResult!.authenticatorIds;
    expect(authenticatorIds).toHaveLength(1);
    // CREATE_AUTHENTICATORS_V2 is a spec version: the spec's intent key first, the swagger's beside it.
    expectCompleted(created.activity, v2, {
      intentKeys: ["createAuthenticatorsIntent", "createAuthenticatorsIntentV2"],
      resultKey: "createAuthenticatorsResult",
      result: { authenticatorIds },
    });

    const key = new SoftwarePasskey();
    const keyRegistration = key.register();
    const v1 = {
      type: "ACTIVITY_TYPE_CREATE_AUTHENTICATORS",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: {
        userId,
        authenticators: [
          {
            authenticatorName: "dave's security key",
            userId,
            challenge: keyRegistration.challenge,
            attestation: {
              id: key.credentialIdBase64url,
              type: "public-key",
              rawId: key.credentialIdBase64url,
              response: {
                clientDataJson: keyRegistration.attestation.clientDataJson,
                attestationObject: keyRegistration.attestation.attestationObject,
                transports: ["AUTHENTICATOR_TRANSPORT_USB", "AUTHENTICATOR_TRANSPORT_NFC"],
              },
              clientExtensionResults: {},
            },
          },
        ],
      },
    };
    const old = await client.createAuthenticators(olderVersion<"createAuthenticators">(v1));
    const oldIds = old.activity.result.createAuthenticatorsResult!.authenticatorIds;
    expect(oldIds).toHaveLength(1);
    expectCompleted(old.activity, v1, {
      intentKeys: ["createAuthenticatorsIntent"],
      resultKey: "createAuthenticatorsResult",
      result: { authenticatorIds: oldIds },
    });

    const one = await client.getAuthenticator({ organizationId: org.organizationId, authenticatorId: authenticatorIds[0] });
    expectQueryEnvelope(one, ["authenticator"]);
    const a = one.authenticator;
    expect(a.authenticatorId).toBe(authenticatorIds[0]);
    expect(a.authenticatorName).toBe("dave's phone");
    expect(a.credentialId).toBe(phone.credentialIdBase64url);
    expect(a.credential).toEqual({ publicKey: phone.publicKeyCompressedHex(), type: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR" });
    expect(a.attestationType).toBe("none");
    expect(a.aaguid).toBe("00000000-0000-0000-0000-000000000000");
    expect(a.transports).toEqual(["AUTHENTICATOR_TRANSPORT_INTERNAL"]);
    expect(a.model).toBe("");
    expect(a.createdAt).toEqual(created.activity.createdAt);
    expect(a.updatedAt).toEqual(created.activity.createdAt);

    const legacy = (await client.getAuthenticator({ organizationId: org.organizationId, authenticatorId: oldIds[0] })).authenticator;
    expect(legacy.authenticatorName).toBe("dave's security key");
    expect(legacy.credentialId).toBe(key.credentialIdBase64url);
    expect(legacy.credential).toEqual({ publicKey: key.publicKeyCompressedHex(), type: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR" });
    expect(legacy.transports).toEqual(["AUTHENTICATOR_TRANSPORT_USB", "AUTHENTICATOR_TRANSPORT_NFC"]);

    const all = await client.getAuthenticators({ organizationId: org.organizationId, userId });
    expectQueryEnvelope(all, ["authenticators"]);
    expect(all.authenticators.map((x) => x.authenticatorId)).toEqual([authenticatorIds[0], oldIds[0]]);

    const del: Body<"deleteAuthenticators"> = {
      type: "ACTIVITY_TYPE_DELETE_AUTHENTICATORS",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId, authenticatorIds: [oldIds[0]] },
    };
    const deleted = await client.deleteAuthenticators(del);
    expectCompleted(deleted.activity, del, {
      intentKeys: ["deleteAuthenticatorsIntent"],
      resultKey: "deleteAuthenticatorsResult",
      result: { authenticatorIds: [oldIds[0]] },
    });
    expect(
      (await client.getAuthenticators({ organizationId: org.organizationId, userId })).authenticators.map((x) => x.authenticatorId),
    ).toEqual(authenticatorIds);
    await expect(client.getAuthenticator({ organizationId: org.organizationId, authenticatorId: oldIds[0] })).rejects.toMatchObject({
      code: 5,
      details: [expect.objectContaining({ turnkeyErrorCode: "AUTHENTICATOR_NOT_FOUND" })],
    });
  });

  it("createUserTag, updateUserTag, listUserTags, deleteUserTags", async () => {
    const erin = await createPlainUser("erin");
    const frank = await createPlainUser("frank");

    const create: Body<"createUserTag"> = {
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userTagName: "finance", userIds: [erin] },
    };
    const created = await client.createUserTag(create);
    const userTagId = created.activity.result.createUserTagResult!.userTagId;
    expect(userTagId).toMatch(UUID);
    expectCompleted(created.activity, create, {
      intentKeys: ["createUserTagIntent"],
      resultKey: "createUserTagResult",
      result: { userTagId, userIds: [erin] },
    });
    expect((await client.getUser({ organizationId: org.organizationId, userId: erin })).user.userTags).toEqual([userTagId]);

    const update: Body<"updateUserTag"> = {
      type: "ACTIVITY_TYPE_UPDATE_USER_TAG",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userTagId, newUserTagName: "treasury", addUserIds: [frank], removeUserIds: [erin] },
    };
    const updated = await client.updateUserTag(update);
    expectCompleted(updated.activity, update, {
      intentKeys: ["updateUserTagIntent"],
      resultKey: "updateUserTagResult",
      result: { userTagId },
    });
    expect((await client.getUser({ organizationId: org.organizationId, userId: erin })).user.userTags).toEqual([]);
    expect((await client.getUser({ organizationId: org.organizationId, userId: frank })).user.userTags).toEqual([userTagId]);

    const listed = await client.listUserTags({ organizationId: org.organizationId });
    expectQueryEnvelope(listed, ["userTags"]);
    expect(listed.userTags).toHaveLength(1);
    const [tag] = listed.userTags;
    expect(tag.tagId).toBe(userTagId);
    expect(tag.tagName).toBe("treasury");
    expect(tag.tagType).toBe("TAG_TYPE_USER");
    expect(tag.createdAt).toEqual(created.activity.createdAt);
    expect(tag.updatedAt).toEqual(updated.activity.createdAt);

    const del: Body<"deleteUserTags"> = {
      type: "ACTIVITY_TYPE_DELETE_USER_TAGS",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userTagIds: [userTagId] },
    };
    const deleted = await client.deleteUserTags(del);
    expectCompleted(deleted.activity, del, {
      intentKeys: ["deleteUserTagsIntent"],
      resultKey: "deleteUserTagsResult",
      result: { userTagIds: [userTagId], userIds: [frank] },
    });
    expect((await client.listUserTags({ organizationId: org.organizationId })).userTags).toEqual([]);
    expect((await client.getUser({ organizationId: org.organizationId, userId: frank })).user.userTags).toEqual([]);
  });

  it("updateUser, updateUserName, updateUserEmail, updateUserPhoneNumber", async () => {
    const gina = await createPlainUser("gina");
    const tag = await client.createUserTag({
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userTagName: "ops", userIds: [] },
    });
    const opsTag = tag.activity.result.createUserTagResult!.userTagId;

    const u1: Body<"updateUser"> = {
      type: "ACTIVITY_TYPE_UPDATE_USER",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId: gina, userName: "gina m", userEmail: "gm@example.com", userTagIds: [opsTag] },
    };
    const r1 = await client.updateUser(u1);
    expectCompleted(r1.activity, u1, { intentKeys: ["updateUserIntent"], resultKey: "updateUserResult", result: { userId: gina } });
    expect((await client.getUser({ organizationId: org.organizationId, userId: gina })).user).toMatchObject({
      userName: "gina m",
      userEmail: "gm@example.com",
      userTags: [opsTag],
    });

    const u2: Body<"updateUserName"> = {
      type: "ACTIVITY_TYPE_UPDATE_USER_NAME",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId: gina, userName: "Gina" },
    };
    const r2 = await client.updateUserName(u2);
    expectCompleted(r2.activity, u2, { intentKeys: ["updateUserNameIntent"], resultKey: "updateUserNameResult", result: { userId: gina } });

    const u3: Body<"updateUserEmail"> = {
      type: "ACTIVITY_TYPE_UPDATE_USER_EMAIL",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId: gina, userEmail: "gina@example.com" },
    };
    const r3 = await client.updateUserEmail(u3);
    expectCompleted(r3.activity, u3, {
      intentKeys: ["updateUserEmailIntent"],
      resultKey: "updateUserEmailResult",
      result: { userId: gina },
    });

    const u4: Body<"updateUserPhoneNumber"> = {
      type: "ACTIVITY_TYPE_UPDATE_USER_PHONE_NUMBER",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId: gina, userPhoneNumber: "+447700900123" },
    };
    const r4 = await client.updateUserPhoneNumber(u4);
    expectCompleted(r4.activity, u4, {
      intentKeys: ["updateUserPhoneNumberIntent"],
      resultKey: "updateUserPhoneNumberResult",
      result: { userId: gina },
    });

    const { user } = await client.getUser({ organizationId: org.organizationId, userId: gina });
    expect(user.userId).toBe(gina);
    expect(user.userName).toBe("Gina");
    expect(user.userEmail).toBe("gina@example.com");
    expect(user.userPhoneNumber).toBe("+447700900123");
    expect(user.userTags).toEqual([opsTag]);
    expect(user.updatedAt).toEqual(r4.activity.createdAt);
    expect(millis(user.createdAt)).toBeLessThanOrEqual(millis(user.updatedAt));

    // An empty string removes the email and the phone number.
    await client.updateUserEmail({
      type: "ACTIVITY_TYPE_UPDATE_USER_EMAIL",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId: gina, userEmail: "" },
    });
    await client.updateUserPhoneNumber({
      type: "ACTIVITY_TYPE_UPDATE_USER_PHONE_NUMBER",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userId: gina, userPhoneNumber: "" },
    });
    const cleared = (await client.getUser({ organizationId: org.organizationId, userId: gina })).user;
    expect(cleared.userEmail).toBeUndefined();
    expect(cleared.userPhoneNumber).toBeUndefined();
    expect(cleared.userName).toBe("Gina");
  });

  it("deleteUsers removes the users with their credentials", async () => {
    const key = newKeyPair();
    const created = await client.createUsers({
      type: "ACTIVITY_TYPE_CREATE_USERS_V4",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: {
        users: [
          {
            userName: "henry",
            apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
            authenticators: [],
            oauthProviders: [],
            userTags: [],
          },
          { userName: "ivy", ...emptyUser },
        ],
      },
    });
    const userIds = created.activity.result.createUsersResult!.userIds;
    const { apiKeys } = await client.getApiKeys({ organizationId: org.organizationId, userId: userIds[0] });

    const del: Body<"deleteUsers"> = {
      type: "ACTIVITY_TYPE_DELETE_USERS",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userIds },
    };
    const deleted = await client.deleteUsers(del);
    expectCompleted(deleted.activity, del, { intentKeys: ["deleteUsersIntent"], resultKey: "deleteUsersResult", result: { userIds } });

    for (const userId of userIds) {
      await expect(client.getUser({ organizationId: org.organizationId, userId })).rejects.toMatchObject({
        code: 5,
        details: [expect.objectContaining({ turnkeyErrorCode: "USER_NOT_FOUND" })],
      });
    }
    await expect(client.getApiKey({ organizationId: org.organizationId, apiKeyId: apiKeys[0].apiKeyId })).rejects.toMatchObject({
      code: 5,
    });
    const error = await h
      .http(key)
      .getWhoami({ organizationId: org.organizationId })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnkeyRequestError);
    expect(error).toMatchObject({ code: 16, details: [expect.objectContaining({ turnkeyErrorCode: "PUBLIC_KEY_NOT_FOUND" })] });
    expect((await client.getUsers({ organizationId: org.organizationId })).users.map((u) => u.userName)).not.toContain("henry");
  });

  it("getActivity returns what the submit returned; getActivities pages and filters the audit log", async () => {
    const submit = (name: string) =>
      client.createUserTag({
        type: "ACTIVITY_TYPE_CREATE_USER_TAG",
        timestampMs: now(),
        organizationId: org.organizationId,
        parameters: { userTagName: name, userIds: [] },
      });
    const first = (await submit("audit-1")).activity;
    const second = (await submit("audit-2")).activity;

    const fetched = await client.getActivity({ organizationId: org.organizationId, activityId: second.id });
    expect(Object.keys(fetched)).toEqual(["activity"]);
    expect(fetched.activity).toEqual(second);
    expect(fetched.activity.result.createUserTagResult).toEqual({ userTagId: second.result.createUserTagResult!.userTagId, userIds: [] });
    expect(fetched.activity.intent.createUserTagIntent).toEqual({ userTagName: "audit-2", userIds: [] });

    const page1 = await client.getActivities({ organizationId: org.organizationId, paginationOptions: { limit: "2" } });
    expectQueryEnvelope(page1, ["activities"]);
    expect(page1.activities).toEqual([second, first]);
    const page2 = await client.getActivities({ organizationId: org.organizationId, paginationOptions: { limit: "2", after: first.id } });
    expect(page2.activities).toHaveLength(2);
    expect(page2.activities.map((a) => a.id)).not.toContain(first.id);
    expect(page2.activities.map((a) => a.id)).not.toContain(second.id);
    const back = await client.getActivities({ organizationId: org.organizationId, paginationOptions: { limit: "1", before: first.id } });
    expect(back.activities.map((a) => a.id)).toEqual([second.id]);

    const filtered = await client.getActivities({
      organizationId: org.organizationId,
      filterByType: ["ACTIVITY_TYPE_CREATE_USERS", "ACTIVITY_TYPE_CREATE_USERS_V2", "ACTIVITY_TYPE_CREATE_USERS_V3"],
      paginationOptions: { limit: "100" },
    });
    expect(filtered.activities.map((a) => a.type)).toEqual([
      "ACTIVITY_TYPE_CREATE_USERS",
      "ACTIVITY_TYPE_CREATE_USERS_V2",
      "ACTIVITY_TYPE_CREATE_USERS_V3",
    ]);
    const completed = await client.getActivities({
      organizationId: org.organizationId,
      filterByStatus: ["ACTIVITY_STATUS_COMPLETED"],
      paginationOptions: { limit: "100" },
    });
    expect(completed.activities.length).toBeGreaterThan(10);
    expect(completed.activities.every((a) => a.status === "ACTIVITY_STATUS_COMPLETED")).toBe(true);
  });

  it("withAsyncPolling (the global-config TurnkeyApi fetchers) and createActivityPoller return the completed activity", async () => {
    init({ apiPublicKey: org.key.publicKey, apiPrivateKey: org.key.privateKey, baseUrl: h.url });
    const createUserTag = withAsyncPolling({ request: TurnkeyApi.createUserTag, refreshIntervalMs: 50 });
    const body: Body<"createUserTag"> = {
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userTagName: "polled", userIds: [org.userId] },
    };
    const activity = await createUserTag({ body });
    const userTagId = activity.result.createUserTagResult!.userTagId;
    expectCompleted(activity, body, {
      intentKeys: ["createUserTagIntent"],
      resultKey: "createUserTagResult",
      result: { userTagId, userIds: [org.userId] },
    });
    expect((await client.getUser({ organizationId: org.organizationId, userId: org.userId })).user.userTags).toEqual([userTagId]);

    const poller = createActivityPoller({ client, requestFn: client.updateUserTag, refreshIntervalMs: 50 });
    const update: Body<"updateUserTag"> = {
      type: "ACTIVITY_TYPE_UPDATE_USER_TAG",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userTagId, newUserTagName: "polled-2", addUserIds: [], removeUserIds: [org.userId] },
    };
    const updated = await poller(update);
    expectCompleted(updated, update, { intentKeys: ["updateUserTagIntent"], resultKey: "updateUserTagResult", result: { userTagId } });
    expect((await client.getUser({ organizationId: org.organizationId, userId: org.userId })).user.userTags).toEqual([]);
  });

  it("surfaces a failed submit as TurnkeyRequestError with the gRPC code and Turnkey error code", async () => {
    const error = await client
      .deleteUsers({
        type: "ACTIVITY_TYPE_DELETE_USERS",
        timestampMs: now(),
        organizationId: org.organizationId,
        parameters: { userIds: [crypto.randomUUID()] },
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TurnkeyRequestError);
    expect(error).toMatchObject({
      name: "TurnkeyRequestError",
      code: 5,
      details: [{ "@type": "type.googleapis.com/errors.v1.TurnkeyErrorDetail", turnkeyErrorCode: "USER_NOT_FOUND" }],
    });
    expect((error as Error).message).toMatch(/^Turnkey error 5: user .* not found/);
  });
});
