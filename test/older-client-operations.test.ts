// Operations that programs written against @turnkey/http's older API still call, called the way those
// programs call them: get_organization (the whole organization in one object) and create_api_only_users
// (users holding API keys only). Each through TurnkeyClient, and with bad input that changes nothing.
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeyRequestError, type TurnkeyClient } from "@turnkey/http";
import { newKeyPair, signedRequest, startHarness, type ApiKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller, noCredentials } from "./helpers/organizations.js";

let h: Harness;
let org: TestOrganization;
let otherOrg: TestOrganization;
let client: TurnkeyClient;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Acme");
  otherOrg = await h.organization("Globex");
  client = h.http(org.key);
});
afterAll(() => h?.close());

const CREATE_API_ONLY_USERS = "/public/v1/submit/create_api_only_users";
const GET_ORGANIZATION = "/public/v1/query/get_organization";
const ERROR_DETAIL = "type.googleapis.com/errors.v1.TurnkeyErrorDetail";
const now = () => String(Date.now());

type Snapshot = Record<string, string[]>;
const snapshot = async (): Promise<Snapshot> => JSON.parse(await h.snapshot());
/** Every table but the audit log (activities and the policy evaluation recorded with each). */
const withoutAuditLog = (s: Snapshot) => ({ ...s, activities: undefined, policy_evaluations: undefined });

function expectError(response: { status: number; json: any }, status: number, code: number, turnkeyErrorCode: string) {
  expect(response.status, JSON.stringify(response.json)).toBe(status);
  expect(response.json).toEqual({
    code,
    message: expect.any(String),
    details: [{ "@type": ERROR_DETAIL, turnkeyErrorCode }],
    requestId: expect.any(String),
  });
}

async function sendSigned(path: string, body: unknown, key: ApiKeyPair = org.key) {
  const { body: text, headers } = signedRequest(body, key);
  return h.post(path, text, headers);
}

/** A refusal before any activity exists: the error, and not a row of any table changed. */
async function expectRefusedUnchanged(
  send: () => Promise<{ status: number; json: any }>,
  status: number,
  code: number,
  turnkeyErrorCode: string,
) {
  const before = await h.snapshot();
  const response = await send();
  expectError(response, status, code, turnkeyErrorCode);
  expect(await h.snapshot()).toBe(before);
  return response.json.message as string;
}

/** A refusal by the operation itself: the error, one FAILED activity recording it, nothing else changed. */
async function expectOperationFailure(body: Record<string, unknown>, status: number, code: number, turnkeyErrorCode: string) {
  const before = await snapshot();
  const response = await sendSigned(CREATE_API_ONLY_USERS, body);
  expectError(response, status, code, turnkeyErrorCode);
  const after = await snapshot();
  expect(withoutAuditLog(after)).toEqual(withoutAuditLog(before));
  const added = after.activities!.filter((row) => !before.activities!.includes(row)).map((row) => JSON.parse(row));
  expect(added).toHaveLength(1);
  expect(added[0]).toMatchObject({
    organization_id: org.organizationId,
    type: "ACTIVITY_TYPE_CREATE_API_ONLY_USERS",
    status: "ACTIVITY_STATUS_FAILED",
  });
  // The recorded failure is the answer but for the request's id, which the row keeps apart.
  const { requestId, ...recorded } = response.json;
  expect(JSON.parse(added[0].failure)).toEqual(recorded);
  expect(added[0].request_id).toBe(requestId);
  return response.json.message as string;
}

/** An API-only user as the swagger describes one; `overrides` replace its fields. */
function apiOnlyUser(name: string, overrides: Record<string, unknown> = {}) {
  return { userName: name, userTags: [], apiKeys: [{ apiKeyName: `${name} key`, publicKey: newKeyPair().publicKey }], ...overrides };
}

const createApiOnlyUsersBody = (apiOnlyUsers: unknown[], organizationId = org.organizationId) => ({
  type: "ACTIVITY_TYPE_CREATE_API_ONLY_USERS",
  timestampMs: now(),
  organizationId,
  parameters: { apiOnlyUsers },
});

describe("create_api_only_users", () => {
  it("creates users with their API keys, email and tags, recorded under the swagger's intent and result keys", async () => {
    const tag = await client.createUserTag({
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: { userTagName: "bots", userIds: [] },
    });
    const tagId = (tag.activity.result as any).createUserTagResult.userTagId as string;
    const billingKey = newKeyPair();
    const reportKey = newKeyPair();
    const body = {
      type: "ACTIVITY_TYPE_CREATE_API_ONLY_USERS" as const,
      timestampMs: now(),
      organizationId: org.organizationId,
      parameters: {
        apiOnlyUsers: [
          {
            userName: "billing bot",
            userEmail: "billing@example.com",
            userTags: [tagId],
            apiKeys: [{ apiKeyName: "billing key", publicKey: billingKey.publicKey }],
          },
          {
            userName: "report bot",
            userTags: [],
            apiKeys: [{ apiKeyName: "report key", publicKey: reportKey.publicKey, expirationSeconds: "3600" }],
          },
        ],
      },
    };
    const { activity } = await client.createApiOnlyUsers(body);
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(activity.type).toBe("ACTIVITY_TYPE_CREATE_API_ONLY_USERS");
    expect(activity.intent).toEqual({ createApiOnlyUsersIntent: body.parameters });
    const { userIds } = activity.result.createApiOnlyUsersResult!;
    expect(userIds).toHaveLength(2);
    expect(new Set(userIds).size).toBe(2);

    const { user: billing } = await client.getUser({ organizationId: org.organizationId, userId: userIds[0]! });
    expect(billing).toMatchObject({
      userId: userIds[0],
      userName: "billing bot",
      userEmail: "billing@example.com",
      userTags: [tagId],
      authenticators: [],
      oauthProviders: [],
    });
    expect(billing.apiKeys).toHaveLength(1);
    const billingCredential = { publicKey: billingKey.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" };
    expect(billing.apiKeys[0]).toMatchObject({ apiKeyName: "billing key", credential: billingCredential });
    const { user: report } = await client.getUser({ organizationId: org.organizationId, userId: userIds[1]! });
    expect(report).toMatchObject({ userName: "report bot", userTags: [], authenticators: [], oauthProviders: [] });
    expect(report.userEmail).toBeUndefined();
    expect(report.apiKeys[0]).toMatchObject({
      apiKeyName: "report key",
      expirationSeconds: "3600",
      credential: { publicKey: reportKey.publicKey },
    });

    // The keys work: each new user is who its key says.
    const whoami = await h.http(billingKey).getWhoami({ organizationId: org.organizationId });
    expect(whoami).toMatchObject({ organizationId: org.organizationId, userId: userIds[0], username: "billing bot" });

    // The audit log keeps it like any activity.
    const { activity: recorded } = await client.getActivity({ organizationId: org.organizationId, activityId: activity.id });
    expect(recorded).toMatchObject({
      id: activity.id,
      type: "ACTIVITY_TYPE_CREATE_API_ONLY_USERS",
      intent: activity.intent,
      result: activity.result,
    });
  });

  it("is USER / CREATE to policies: a non-root user is denied until a policy allows that", async () => {
    const root = h.sdk(org, org.key, fastPoller);
    const opsKey = newKeyPair();
    const opsApiKey = { apiKeyName: "ops key", publicKey: opsKey.publicKey, curveType: "API_KEY_CURVE_P256" as const };
    const {
      userIds: [opsId],
    } = await root.createUsers({ users: [{ userName: "ops", apiKeys: [opsApiKey], ...noCredentials }] });
    const ops = h.http(opsKey);

    const before = await snapshot();
    const denied = ops.createApiOnlyUsers(createApiOnlyUsersBody([apiOnlyUser("denied bot")]) as any);
    await expect(denied).rejects.toBeInstanceOf(TurnkeyRequestError);
    await expect(denied).rejects.toMatchObject({ code: 7, message: expect.stringContaining("OUTCOME_DENY_IMPLICIT") });
    const after = await snapshot();
    expect(withoutAuditLog(after)).toEqual(withoutAuditLog(before));
    expect(after.activities!.length).toBe(before.activities!.length + 1);

    await root.createPolicy({
      policyName: "ops creates users",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${opsId}')`,
      condition: "activity.resource == 'USER' && activity.action == 'CREATE' && activity.type == 'ACTIVITY_TYPE_CREATE_API_ONLY_USERS'",
      notes: "",
    });
    const { activity } = await ops.createApiOnlyUsers(createApiOnlyUsersBody([apiOnlyUser("allowed bot")]) as any);
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(activity.result.createApiOnlyUsersResult!.userIds).toHaveLength(1);
  });

  describe("bad input", () => {
    it("refuses a body the swagger does not allow before it becomes an activity (400 REQUEST_INVALID)", async () => {
      await expectRefusedUnchanged(
        () => sendSigned(CREATE_API_ONLY_USERS, { ...createApiOnlyUsersBody([]), parameters: {} }),
        400,
        3,
        "REQUEST_INVALID",
      );
      const noTags = apiOnlyUser("untagged") as Record<string, unknown>;
      delete noTags.userTags;
      await expectRefusedUnchanged(() => sendSigned(CREATE_API_ONLY_USERS, createApiOnlyUsersBody([noTags])), 400, 3, "REQUEST_INVALID");
      // Its API key parameters name no curve: a curveType is an unknown field here.
      const withCurve = apiOnlyUser("curved", {
        apiKeys: [{ apiKeyName: "k", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
      });
      const message = await expectRefusedUnchanged(
        () => sendSigned(CREATE_API_ONLY_USERS, createApiOnlyUsersBody([withCurve])),
        400,
        3,
        "REQUEST_INVALID",
      );
      expect(message).toContain("curveType");
      // A user with a passkey is not an API-only user.
      const withPasskey = apiOnlyUser("passkeyed", { authenticators: [] });
      await expectRefusedUnchanged(
        () => sendSigned(CREATE_API_ONLY_USERS, createApiOnlyUsersBody([withPasskey])),
        400,
        3,
        "REQUEST_INVALID",
      );
    });

    it("refuses an unstamped request and another organization's key (nothing changes)", async () => {
      const body = JSON.stringify(createApiOnlyUsersBody([apiOnlyUser("nostamp")]));
      await expectRefusedUnchanged(() => h.post(CREATE_API_ONLY_USERS, body), 401, 16, "SIGNATURE_MISSING");
      const intruder = createApiOnlyUsersBody([apiOnlyUser("intruder")], otherOrg.organizationId);
      const message = await expectRefusedUnchanged(() => sendSigned(CREATE_API_ONLY_USERS, intruder), 403, 7, "ORGANIZATION_MISMATCH");
      expect(message).toContain(otherOrg.organizationId);
    });

    it("refuses an empty list of users", async () => {
      const message = await expectOperationFailure(createApiOnlyUsersBody([]), 400, 3, "REQUEST_INVALID");
      expect(message).toBe("apiOnlyUsers must list at least one user");
    });

    it("refuses a public key that is not a compressed P-256 key, naming the field", async () => {
      const secp256k1Key = "02" + "79be667ef9dcbbac55a06295ce870b07029bfcdb2dce28d959f2815b16f81798";
      const bad = apiOnlyUser("wrong curve", { apiKeys: [{ apiKeyName: "k", publicKey: secp256k1Key }] });
      const message = await expectOperationFailure(createApiOnlyUsersBody([apiOnlyUser("fine"), bad]), 400, 3, "INVALID_PUBLIC_KEY");
      expect(message).toContain("apiOnlyUsers[1].apiKeys[0].publicKey");
    });

    it("refuses a public key the organization already has (409), keeping none of the users", async () => {
      const taken = apiOnlyUser("copycat", { apiKeys: [{ apiKeyName: "k", publicKey: org.key.publicKey }] });
      const message = await expectOperationFailure(createApiOnlyUsersBody([apiOnlyUser("first"), taken]), 409, 6, "API_KEY_ALREADY_EXISTS");
      expect(message).toContain(org.key.publicKey);
    });

    it("refuses a tag the organization does not have, and an email that is not one", async () => {
      const missingTag = crypto.randomUUID();
      const tagged = createApiOnlyUsersBody([apiOnlyUser("tagged", { userTags: [missingTag] })]);
      const tagMessage = await expectOperationFailure(tagged, 404, 5, "USER_TAG_NOT_FOUND");
      expect(tagMessage).toContain(missingTag);
      const mailer = createApiOnlyUsersBody([apiOnlyUser("mailer", { userEmail: "not-an-email" })]);
      const emailMessage = await expectOperationFailure(mailer, 400, 3, "REQUEST_INVALID");
      expect(emailMessage).toContain("apiOnlyUsers[0].userEmail");
    });
  });
});

describe("get_organization", () => {
  let data: any;
  let member: TurnkeyClient;

  beforeAll(async () => {
    const subject = await h.organization("Initech");
    const root = h.sdk(subject, subject.key, fastPoller);
    const memberKey = newKeyPair();
    const {
      userIds: [memberId],
    } = await root.createUsers({
      users: [
        {
          userName: "milton",
          userEmail: "milton@initech.example",
          apiKeys: [{ apiKeyName: "milton key", publicKey: memberKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
          ...noCredentials,
        },
      ],
    });
    await root.createUserTag({ userTagName: "staplers", userIds: [memberId!] });
    const { privateKeyTagId } = await root.createPrivateKeyTag({ privateKeyTagName: "treasury", privateKeyIds: [] });
    const ethereum = "ADDRESS_FORMAT_ETHEREUM" as const;
    const ethKey = {
      privateKeyName: "eth key",
      curve: "CURVE_SECP256K1" as const,
      privateKeyTags: [privateKeyTagId],
      addressFormats: [ethereum],
    };
    await root.createPrivateKeys({ privateKeys: [ethKey] });
    const account = {
      curve: "CURVE_SECP256K1" as const,
      pathFormat: "PATH_FORMAT_BIP32" as const,
      path: "m/44'/60'/0'/0/0",
      addressFormat: ethereum,
    };
    await root.createWallet({ walletName: "main", accounts: [account] });
    const consensus = `approvers.any(user, user.id == '${memberId}')`;
    await root.createPolicy({
      policyName: "milton signs",
      effect: "EFFECT_ALLOW",
      consensus,
      condition: "activity.action == 'SIGN'",
      notes: "n",
    });
    await root.setOrganizationFeature({ name: "FEATURE_NAME_EMAIL_AUTH", value: "" });
    const http = h.http(subject.key);
    data = { subject, http, ...(await http.getOrganization({ organizationId: subject.organizationId })) };
    member = h.http(memberKey);
  });

  it("returns the organization in one object, each part as its own query returns it", async () => {
    const { subject, http, organizationData } = data;
    const organizationId = subject.organizationId as string;
    expect(Object.keys(organizationData).sort()).toEqual([
      "features",
      "invitations",
      "name",
      "organizationId",
      "policies",
      "privateKeys",
      "rootQuorum",
      "smartContractInterfaceReferences",
      "tags",
      "users",
      "wallets",
    ]);
    expect(organizationData.organizationId).toBe(organizationId);
    expect(organizationData.name).toBe("Initech");
    expect(organizationData.invitations).toEqual([]);
    expect(organizationData.smartContractInterfaceReferences).toEqual([]);

    expect(organizationData.users).toEqual((await http.getUsers({ organizationId })).users);
    expect(organizationData.users.map((u: any) => u.userName)).toEqual(["root", "milton"]);
    expect(organizationData.policies).toEqual((await http.getPolicies({ organizationId })).policies);
    expect(organizationData.policies).toHaveLength(1);
    expect(organizationData.privateKeys).toEqual((await http.getPrivateKeys({ organizationId })).privateKeys);
    expect(organizationData.privateKeys).toHaveLength(1);
    expect(organizationData.wallets).toEqual((await http.getWallets({ organizationId })).wallets);
    expect(organizationData.wallets.map((w: any) => w.walletName)).toEqual(["main"]);

    const userTags = (await http.listUserTags({ organizationId })).userTags;
    const privateKeyTags = (await http.listPrivateKeyTags({ organizationId })).privateKeyTags;
    const byId = (a: any, b: any) => a.tagId.localeCompare(b.tagId);
    expect([...organizationData.tags].sort(byId)).toEqual([...userTags, ...privateKeyTags].sort(byId));
    expect(organizationData.tags.map((t: any) => t.tagType).sort()).toEqual(["TAG_TYPE_PRIVATE_KEY", "TAG_TYPE_USER"]);

    const { configs } = await http.getOrganizationConfigs({ organizationId });
    expect(organizationData.rootQuorum).toEqual({ threshold: 1, userIds: [subject.userId] });
    expect(organizationData.rootQuorum).toEqual(configs.quorum);
    expect(organizationData.features).toEqual(configs.features);
    expect(organizationData.features).toEqual([{ name: "FEATURE_NAME_EMAIL_AUTH", value: "" }]);
  });

  it("holds no secret: wallets and private keys carry only the swagger's public fields", () => {
    const { organizationData } = data;
    for (const wallet of organizationData.wallets) {
      expect(Object.keys(wallet).sort()).toEqual(["createdAt", "exported", "imported", "updatedAt", "walletId", "walletName"]);
    }
    for (const key of organizationData.privateKeys) {
      expect(Object.keys(key).sort()).toEqual([
        "addresses",
        "createdAt",
        "curve",
        "exported",
        "imported",
        "privateKeyId",
        "privateKeyName",
        "privateKeyTags",
        "publicKey",
        "updatedAt",
      ]);
      expect(key.publicKey).toMatch(/^0[23][0-9a-f]{64}$/);
    }
  });

  it("is readable by every user of the organization, as the other queries are", async () => {
    const { subject, organizationData } = data;
    const seen = await member.getOrganization({ organizationId: subject.organizationId });
    expect(seen.organizationData).toEqual(organizationData);
  });

  describe("bad input (nothing changes)", () => {
    it("refuses an unstamped request (401 SIGNATURE_MISSING)", async () => {
      await expectRefusedUnchanged(
        () => h.post(GET_ORGANIZATION, JSON.stringify({ organizationId: org.organizationId })),
        401,
        16,
        "SIGNATURE_MISSING",
      );
    });

    it("refuses another organization's key (403 ORGANIZATION_MISMATCH) and an organization that does not exist (404)", async () => {
      const other = { organizationId: otherOrg.organizationId };
      const message = await expectRefusedUnchanged(() => sendSigned(GET_ORGANIZATION, other), 403, 7, "ORGANIZATION_MISMATCH");
      expect(message).toContain(otherOrg.organizationId);
      const missing = crypto.randomUUID();
      const missingMessage = await expectRefusedUnchanged(
        () => sendSigned(GET_ORGANIZATION, { organizationId: missing }),
        404,
        5,
        "ORGANIZATION_NOT_FOUND",
      );
      expect(missingMessage).toContain(missing);
    });

    it("refuses a body without organizationId or with fields the swagger does not name (400 REQUEST_INVALID)", async () => {
      await expectRefusedUnchanged(() => sendSigned(GET_ORGANIZATION, {}), 400, 3, "REQUEST_INVALID");
      const extra = { organizationId: org.organizationId, includeSecrets: true };
      const message = await expectRefusedUnchanged(() => sendSigned(GET_ORGANIZATION, extra), 400, 3, "REQUEST_INVALID");
      expect(message).toContain("includeSecrets");
    });

    it("answers the official client's error type", async () => {
      const before = await h.snapshot();
      await expect(client.getOrganization({ organizationId: otherOrg.organizationId })).rejects.toMatchObject({ code: 7 });
      await expect(client.getOrganization({ organizationId: otherOrg.organizationId })).rejects.toBeInstanceOf(TurnkeyRequestError);
      expect(await h.snapshot()).toBe(before);
    });
  });
});
