// The wire format itself: the spec's exact request bodies sent byte for byte over plain HTTP, and both
// response shapes checked field by field — the one the official clients read (activity.intent.<key>,
// activity.result.<key>, votes, fingerprint, …) and the spec's (activity.timestampMs and the nested
// activity.result.activity = { type, intent, result }). Also the query envelope, the fingerprint and
// idempotency.
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, newKeyPair, signedRequest, type ApiKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { startOidcIssuer, type TestIssuer } from "./helpers/oidc-issuer.js";
import { SoftwarePasskey } from "./helpers/passkey.js";

let h: Harness;
let org: TestOrganization;

let oidc: TestIssuer;

beforeAll(async () => {
  oidc = await startOidcIssuer();
  h = await startHarness({ SIGIL_OIDC_ALLOWED_ISSUERS: oidc.issuer });
  org = await h.organization("Acme");
});
afterAll(async () => {
  await h.close();
  await oidc.close();
});

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const sha256hex = (bytes: string) => crypto.createHash("sha256").update(bytes).digest("hex");
const timestampOf = (t: { seconds: string; nanos: string }) => Number(t.seconds) * 1000 + Number(t.nanos) / 1e6;
const ERROR_DETAIL = "type.googleapis.com/errors.v1.TurnkeyErrorDetail";

interface Envelope {
  type: string;
  timestampMs: string;
  organizationId: string;
  parameters: Record<string, unknown>;
}

/** POSTs `body` exactly as given (a string is sent verbatim), stamped with `key`. */
async function send(path: string, body: object | string, key: ApiKeyPair = org.key) {
  const { body: text, headers } = signedRequest(body, key);
  const response = await h.post(path, text, headers);
  return {
    ...response,
    text,
    stamp: JSON.parse(Buffer.from(headers["X-Stamp"], "base64url").toString("utf8")) as {
      publicKey: string;
      scheme: string;
      signature: string;
    },
  };
}
const submit = (operation: string, body: object | string, key?: ApiKeyPair) => send(`/public/v1/submit/${operation}`, body, key);
const query = (operation: string, body: object, key?: ApiKeyPair) => send(`/public/v1/query/${operation}`, body, key);

const ACTIVITY_FIELDS = [
  "canApprove",
  "canReject",
  "createdAt",
  "fingerprint",
  "id",
  "intent",
  "organizationId",
  "result",
  "status",
  "timestampMs",
  "type",
  "updatedAt",
  "votes",
];

/**
 * A 200 submit response for `body` (sent as `sent`), checked in both shapes. Returns the activity.
 */
function expectCompletedActivity(
  response: Awaited<ReturnType<typeof submit>>,
  body: Envelope,
  expected: { intentKeys: string[]; resultKey: string; result: unknown; bodyKept?: boolean },
) {
  expect(response.status).toBe(200);
  expect(Object.keys(response.json)).toEqual(["activity"]);
  const activity = response.json.activity;
  expect(Object.keys(activity).sort()).toEqual(ACTIVITY_FIELDS);

  // The shape the clients read.
  expect(activity.id).toMatch(UUID);
  expect(activity.organizationId).toBe(body.organizationId);
  expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  expect(activity.type).toBe(body.type);
  expect(Object.keys(activity.intent)).toEqual(expected.intentKeys);
  for (const key of expected.intentKeys) expect(activity.intent[key]).toEqual(body.parameters);
  expect(activity.result[expected.resultKey]).toEqual(expected.result);
  expect(activity.fingerprint).toBe(sha256hex(response.text));
  expect(activity.fingerprint).toMatch(/^[0-9a-f]{64}$/);
  expect(activity.canApprove).toBe(false);
  expect(activity.canReject).toBe(false);
  expect(activity.createdAt).toEqual({ seconds: expect.stringMatching(/^\d+$/), nanos: expect.stringMatching(/^\d+$/) });
  expect(Math.abs(timestampOf(activity.createdAt) - Number(body.timestampMs))).toBeLessThan(10_000);
  expect(activity.updatedAt).toEqual(activity.createdAt);

  expect(activity.votes).toEqual([
    {
      id: expect.stringMatching(UUID),
      userId: org.userId,
      user: {
        userId: org.userId,
        userName: "root",
        authenticators: [],
        apiKeys: [],
        userTags: [],
        oauthProviders: [],
        createdAt: activity.createdAt,
        updatedAt: activity.createdAt,
      },
      activityId: activity.id,
      selection: "VOTE_SELECTION_APPROVED",
      // The signed body, unless the intent could not keep it whole (an identity token recorded as its claims).
      message: expected.bodyKept === false ? "" : response.text,
      publicKey: org.key.publicKey,
      signature: response.stamp.signature,
      scheme: "SIGNATURE_SCHEME_TK_API_P256",
      createdAt: activity.createdAt,
    },
  ]);

  // The spec's shape, served beside it.
  expect(activity.timestampMs).toBe(body.timestampMs);
  expect(Object.keys(activity.result)).toEqual([expected.resultKey, "activity"]);
  expect(activity.result.activity).toEqual({
    type: body.type,
    intent: Object.fromEntries(expected.intentKeys.map((k) => [k, body.parameters])),
    result: { [expected.resultKey]: expected.result },
  });
  expect(Object.keys(activity.result.activity)).toEqual(["type", "intent", "result"]);
  expect(Object.keys(activity.result.activity.intent)).toEqual(expected.intentKeys);
  return activity;
}

/** A query response: the resource at the top level for the clients, and the spec's envelope beside it. */
function expectQueryEnvelope(response: Awaited<ReturnType<typeof query>>, key: string) {
  expect(response.status).toBe(200);
  expect(Object.keys(response.json)).toEqual([key, "activity"]);
  const { activity } = response.json;
  expect(Object.keys(activity).sort()).toEqual(["id", "organizationId", "result", "status", "timestampMs", "type"]);
  expect(activity.id).toMatch(UUID);
  expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  expect(activity.type).toBe("ACTIVITY_TYPE_UNKNOWN_V1");
  expect(activity.organizationId).toBe(org.organizationId);
  expect(activity.timestampMs).toMatch(/^\d+$/);
  expect(Math.abs(Number(activity.timestampMs) - Date.now())).toBeLessThan(10_000);
  expect(activity.result).toEqual({ [key]: response.json[key] });
  return response.json[key];
}

const timestamp = expect.objectContaining({ seconds: expect.stringMatching(/^\d+$/), nanos: expect.stringMatching(/^\d+$/) });

/** An identity token (signed by the test's issuer), base64-encoded as the spec's oidcToken field says. */
async function base64OidcToken(claims: { sub: string; aud: string }) {
  return Buffer.from(await oidc.token(claims)).toString("base64");
}

async function listUsers() {
  const response = await query("list_users", { organizationId: org.organizationId });
  return expectQueryEnvelope(response, "users") as Array<{ userId: string; userName: string }>;
}

describe("raw HTTP: the spec's bodies and both response shapes", () => {
  let alice: { userId: string; apiKeyId: string; key: ApiKeyPair };

  it("submit/create_users with ACTIVITY_TYPE_CREATE_USERS_V3 and every field the spec lists", async () => {
    const key = newKeyPair();
    const passkey = new SoftwarePasskey();
    const registration = passkey.register();
    const body: Envelope = {
      type: "ACTIVITY_TYPE_CREATE_USERS_V3",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: {
        users: [
          {
            userName: "alice",
            userEmail: "alice@example.com",
            userPhoneNumber: "+13214567890",
            apiKeys: [{ apiKeyName: "alice key", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "3600" }],
            authenticators: [
              {
                authenticatorName: "alice passkey",
                challenge: registration.challenge,
                attestation: {
                  credentialId: registration.attestation.credentialId,
                  clientDataJson: registration.attestation.clientDataJson,
                  attestationObject: registration.attestation.attestationObject,
                  transports: ["AUTHENTICATOR_TRANSPORT_INTERNAL", "AUTHENTICATOR_TRANSPORT_HYBRID"],
                },
              },
            ],
            oauthProviders: [{ providerName: "Google", oidcToken: await base64OidcToken({ sub: "alice-123", aud: "my-client" }) }],
            userTags: [],
          },
        ],
      },
    };
    const response = await submit("create_users", body);
    const userIds = response.json.activity?.result?.createUsersResult?.userIds;
    expect(userIds).toEqual([expect.stringMatching(UUID)]);
    // The spec names createUsersIntent for V3; the swagger's createUsersIntentV3 is served beside it, second.
    // The audit log keeps the identity token's claims in place of the token.
    const sentUser = (body.parameters as { users: Record<string, unknown>[] }).users[0]!;
    const recorded = {
      ...body,
      parameters: {
        users: [
          {
            ...sentUser,
            oauthProviders: [{ providerName: "Google", oidcClaims: { iss: oidc.issuer, sub: "alice-123", aud: "my-client" } }],
          },
        ],
      },
    };
    const activity = expectCompletedActivity(response, recorded, {
      intentKeys: ["createUsersIntent", "createUsersIntentV3"],
      resultKey: "createUsersResult",
      result: { userIds },
      bodyKept: false,
    });
    expect(activity.intent.createUsersIntent).toEqual(activity.intent.createUsersIntentV3);

    // query/get_user: the User resource field by field, at the top level and in the spec's envelope.
    const user = expectQueryEnvelope(await query("get_user", { organizationId: org.organizationId, userId: userIds[0] }), "user");
    const at = activity.createdAt;
    expect(user).toEqual({
      userId: userIds[0],
      userName: "alice",
      userEmail: "alice@example.com",
      userPhoneNumber: "+13214567890",
      authenticators: [
        {
          authenticatorId: expect.stringMatching(UUID),
          authenticatorName: "alice passkey",
          transports: ["AUTHENTICATOR_TRANSPORT_INTERNAL", "AUTHENTICATOR_TRANSPORT_HYBRID"],
          attestationType: "none",
          aaguid: "00000000-0000-0000-0000-000000000000",
          credentialId: passkey.credentialIdBase64url,
          model: "",
          credential: { publicKey: passkey.publicKeyCompressedHex(), type: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR" },
          createdAt: at,
          updatedAt: at,
        },
      ],
      apiKeys: [
        {
          apiKeyId: expect.stringMatching(UUID),
          apiKeyName: "alice key",
          credential: { publicKey: key.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" },
          expirationSeconds: "3600",
          createdAt: at,
          updatedAt: at,
        },
      ],
      userTags: [],
      oauthProviders: [
        {
          providerId: expect.stringMatching(UUID),
          providerName: "Google",
          issuer: oidc.issuer,
          audience: "my-client",
          subject: "alice-123",
          createdAt: at,
          updatedAt: at,
        },
      ],
      mfaPolicies: [],
      createdAt: at,
      updatedAt: at,
    });
    alice = { userId: userIds[0], apiKeyId: user.apiKeys[0].apiKeyId, key };

    // The new user's key stamps requests of its own.
    const whoami = await query("whoami", { organizationId: org.organizationId }, key);
    expect(whoami.status).toBe(200);
    expect(whoami.json).toMatchObject({ organizationId: org.organizationId, userId: userIds[0], username: "alice" });
  });

  it("query/list_users and query/get_api_key: the resource at the top level and under activity.result", async () => {
    const users = await listUsers();
    expect(users.map((u) => u.userName)).toEqual(["root", "alice"]);
    expect(users[0]).toEqual({
      userId: org.userId,
      userName: "root",
      authenticators: [],
      apiKeys: [
        {
          apiKeyId: org.apiKeyId,
          apiKeyName: "root key",
          credential: { publicKey: org.key.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" },
          createdAt: timestamp,
          updatedAt: timestamp,
        },
      ],
      userTags: [],
      oauthProviders: [],
      mfaPolicies: [],
      createdAt: timestamp,
      updatedAt: timestamp,
    });
    const fromGetUser = expectQueryEnvelope(await query("get_user", { organizationId: org.organizationId, userId: alice.userId }), "user");
    expect(users[1]).toEqual(fromGetUser);

    const apiKey = expectQueryEnvelope(
      await query("get_api_key", { organizationId: org.organizationId, apiKeyId: alice.apiKeyId }),
      "apiKey",
    );
    expect(apiKey).toEqual({
      apiKeyId: alice.apiKeyId,
      apiKeyName: "alice key",
      credential: { publicKey: alice.key.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" },
      expirationSeconds: "3600",
      createdAt: timestamp,
      updatedAt: timestamp,
    });
    expect(apiKey).toEqual(fromGetUser.apiKeys[0]);
  });

  it("the fingerprint is the lowercase hex SHA-256 of the exact bytes sent, whitespace included", async () => {
    const body: Envelope = {
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { userTagName: "pretty", userIds: [] },
    };
    const pretty = JSON.stringify(body, null, 2) + "\n";
    const response = await submit("create_user_tag", pretty);
    const userTagId = response.json.activity?.result?.createUserTagResult?.userTagId;
    const activity = expectCompletedActivity(response, body, {
      intentKeys: ["createUserTagIntent"],
      resultKey: "createUserTagResult",
      result: { userTagId, userIds: [] },
    });
    expect(response.text).toBe(pretty);
    expect(activity.fingerprint).toBe(sha256hex(pretty));
    expect(activity.fingerprint).not.toBe(sha256hex(JSON.stringify(body)));
    expect(activity.votes[0].message).toBe(pretty);
  });

  it("idempotency: the same body twice is one activity and one user; a new timestampMs is a new activity", async () => {
    const body: Envelope = {
      type: "ACTIVITY_TYPE_CREATE_USERS_V3",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: {
        users: [
          {
            userName: "idempotent",
            userEmail: "idem@example.com",
            userPhoneNumber: "+14155550100",
            apiKeys: [],
            authenticators: [],
            oauthProviders: [],
            userTags: [],
          },
        ],
      },
    };
    const text = JSON.stringify(body);
    const before = (await listUsers()).length;

    const first = await submit("create_users", text);
    const userIds = first.json.activity?.result?.createUsersResult?.userIds;
    expectCompletedActivity(first, body, {
      intentKeys: ["createUsersIntent", "createUsersIntentV3"],
      resultKey: "createUsersResult",
      result: { userIds },
    });
    const second = await submit("create_users", text);
    // Stamped afresh (ECDSA signatures differ), yet the same body: the same activity, unchanged.
    expect(second.stamp.signature).not.toBe(first.stamp.signature);
    expect(second.status).toBe(200);
    expect(second.json.activity.id).toBe(first.json.activity.id);
    expect(second.json).toEqual(first.json);
    expect(second.json.activity.votes[0].signature).toBe(first.stamp.signature);

    const afterTwo = await listUsers();
    expect(afterTwo).toHaveLength(before + 1);
    expect(afterTwo.filter((u) => u.userName === "idempotent").map((u) => u.userId)).toEqual(userIds);

    const activities = await query("list_activities", {
      organizationId: org.organizationId,
      filterByType: ["ACTIVITY_TYPE_CREATE_USERS_V3"],
      paginationOptions: { limit: "100" },
    });
    expect(activities.status).toBe(200);
    expect(activities.json.activities.filter((a: { id: string }) => a.id === first.json.activity.id)).toHaveLength(1);

    const later: Envelope = { ...body, timestampMs: String(Number(body.timestampMs) + 1) };
    const third = await submit("create_users", later);
    const thirdIds = third.json.activity?.result?.createUsersResult?.userIds;
    expectCompletedActivity(third, later, {
      intentKeys: ["createUsersIntent", "createUsersIntentV3"],
      resultKey: "createUsersResult",
      result: { userIds: thirdIds },
    });
    expect(third.json.activity.id).not.toBe(first.json.activity.id);
    expect(third.json.activity.fingerprint).not.toBe(first.json.activity.fingerprint);
    expect(thirdIds).not.toEqual(userIds);
    const afterThree = await listUsers();
    expect(afterThree).toHaveLength(before + 2);
    expect(afterThree.filter((u) => u.userName === "idempotent")).toHaveLength(2);
  });

  it("submit/delete_api_keys with the spec's body", async () => {
    const spare = newKeyPair();
    const addKey: Envelope = {
      type: "ACTIVITY_TYPE_CREATE_API_KEYS_V2",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { userId: alice.userId, apiKeys: [{ apiKeyName: "spare", publicKey: spare.publicKey, curveType: "API_KEY_CURVE_P256" }] },
    };
    const added = await submit("create_api_keys", addKey);
    const spareIds = added.json.activity?.result?.createApiKeysResult?.apiKeyIds;
    expectCompletedActivity(added, addKey, {
      intentKeys: ["createApiKeysIntentV2"],
      resultKey: "createApiKeysResult",
      result: { apiKeyIds: spareIds },
    });

    const body: Envelope = {
      type: "ACTIVITY_TYPE_DELETE_API_KEYS",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { userId: alice.userId, apiKeyIds: [alice.apiKeyId] },
    };
    const response = await submit("delete_api_keys", body);
    expectCompletedActivity(response, body, {
      intentKeys: ["deleteApiKeysIntent"],
      resultKey: "deleteApiKeysResult",
      result: { apiKeyIds: [alice.apiKeyId] },
    });

    const gone = await query("get_api_key", { organizationId: org.organizationId, apiKeyId: alice.apiKeyId });
    expect(gone.status).toBe(404);
    expect(gone.json).toEqual({
      code: 5,
      message: expect.stringContaining(alice.apiKeyId),
      details: [{ "@type": ERROR_DETAIL, turnkeyErrorCode: "API_KEY_NOT_FOUND" }],
      requestId: expect.any(String),
    });
    const stale = await query("whoami", { organizationId: org.organizationId }, alice.key);
    expect(stale.status).toBe(401);
    expect(stale.json).toMatchObject({ code: 16, details: [{ "@type": ERROR_DETAIL, turnkeyErrorCode: "PUBLIC_KEY_NOT_FOUND" }] });

    const user = expectQueryEnvelope(await query("get_user", { organizationId: org.organizationId, userId: alice.userId }), "user");
    expect(user.apiKeys.map((k: { apiKeyId: string }) => k.apiKeyId)).toEqual(spareIds);
  });

  it("submit/create_user_tag and submit/update_user_tag with the spec's bodies", async () => {
    const create: Envelope = {
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { userTagName: "approvers", userIds: [alice.userId] },
    };
    const created = await submit("create_user_tag", create);
    const userTagId = created.json.activity?.result?.createUserTagResult?.userTagId;
    expect(userTagId).toMatch(UUID);
    expectCompletedActivity(created, create, {
      intentKeys: ["createUserTagIntent"],
      resultKey: "createUserTagResult",
      result: { userTagId, userIds: [alice.userId] },
    });
    expect(
      expectQueryEnvelope(await query("get_user", { organizationId: org.organizationId, userId: alice.userId }), "user").userTags,
    ).toEqual([userTagId]);

    const update: Envelope = {
      type: "ACTIVITY_TYPE_UPDATE_USER_TAG",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { userTagId, newUserTagName: "signers", addUserIds: [org.userId], removeUserIds: [alice.userId] },
    };
    const updated = await submit("update_user_tag", update);
    expectCompletedActivity(updated, update, {
      intentKeys: ["updateUserTagIntent"],
      resultKey: "updateUserTagResult",
      result: { userTagId },
    });
    expect(
      expectQueryEnvelope(await query("get_user", { organizationId: org.organizationId, userId: alice.userId }), "user").userTags,
    ).toEqual([]);
    expect(
      expectQueryEnvelope(await query("get_user", { organizationId: org.organizationId, userId: org.userId }), "user").userTags,
    ).toEqual([userTagId]);

    const tags = await query("list_user_tags", { organizationId: org.organizationId });
    expect(tags.status).toBe(200);
    expect(tags.json.userTags.find((t: { tagId: string }) => t.tagId === userTagId)).toMatchObject({
      tagId: userTagId,
      tagName: "signers",
      tagType: "TAG_TYPE_USER",
    });
  });

  it("query/get_activity returns the stored activity in both shapes, timestampMs included", async () => {
    const body: Envelope = {
      type: "ACTIVITY_TYPE_UPDATE_USER_NAME",
      timestampMs: String(Date.now() - 5_000),
      organizationId: org.organizationId,
      parameters: { userId: alice.userId, userName: "Alice" },
    };
    const submitted = await submit("update_user_name", body);
    const activity = expectCompletedActivity(submitted, body, {
      intentKeys: ["updateUserNameIntent"],
      resultKey: "updateUserNameResult",
      result: { userId: alice.userId },
    });
    const fetched = await query("get_activity", { organizationId: org.organizationId, activityId: activity.id });
    expect(fetched.status).toBe(200);
    expect(fetched.json).toEqual({ activity });
    expect(fetched.json.activity.timestampMs).toBe(body.timestampMs);
  });
});
