// Every operation of the foundation, called the way a user's backend calls it: through
// @turnkey/sdk-server's API client, with only the base URL pointed at Sigil.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, newKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { SoftwarePasskey } from "./helpers/passkey.js";

let h: Harness;
let org: TestOrganization;
let client: ReturnType<Harness["sdk"]>;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Acme");
  client = h.sdk(org, org.key);
});
afterAll(() => h.close());

const noCredentials = { apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] };

describe("@turnkey/sdk-server against Sigil", () => {
  it("whoami names the caller and its organization", async () => {
    const me = await client.getWhoami({});
    expect(me).toMatchObject({ organizationId: org.organizationId, organizationName: "Acme", userId: org.userId, username: "root" });
  });

  it("creates users with API keys, reads them back, and lists them", async () => {
    const aliceKey = newKeyPair();
    const created = await client.createUsers({
      users: [
        {
          userName: "alice",
          userEmail: "alice@example.com",
          userPhoneNumber: "+13214567890",
          apiKeys: [
            { apiKeyName: "alice laptop", publicKey: aliceKey.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "3600" },
          ],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
        { userName: "bob", ...noCredentials },
      ],
    });
    expect(created.userIds).toHaveLength(2);
    expect(created.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(created.activity.type).toBe("ACTIVITY_TYPE_CREATE_USERS_V4");

    const { user } = await client.getUser({ userId: created.userIds[0] });
    expect(user).toMatchObject({
      userId: created.userIds[0],
      userName: "alice",
      userEmail: "alice@example.com",
      userPhoneNumber: "+13214567890",
      userTags: [],
    });
    expect(user.apiKeys).toHaveLength(1);
    expect(user.apiKeys[0]).toMatchObject({
      apiKeyName: "alice laptop",
      expirationSeconds: "3600",
      credential: { publicKey: aliceKey.publicKey, type: "CREDENTIAL_TYPE_API_KEY_P256" },
    });
    expect(user.createdAt).toEqual({ seconds: expect.stringMatching(/^\d+$/), nanos: expect.stringMatching(/^\d+$/) });

    const { users } = await client.getUsers({});
    expect(users.map((u) => u.userName)).toEqual(["root", "alice", "bob"]);
  });

  it("adds, reads and deletes API keys", async () => {
    const { userIds } = await client.createUsers({ users: [{ userName: "carol", ...noCredentials }] });
    const carol = userIds[0];
    const k1 = newKeyPair();
    const k2 = newKeyPair();
    const { apiKeyIds } = await client.createApiKeys({
      userId: carol,
      apiKeys: [
        { apiKeyName: "one", publicKey: k1.publicKey, curveType: "API_KEY_CURVE_P256" },
        { apiKeyName: "two", publicKey: k2.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "60" },
      ],
    });
    expect(apiKeyIds).toHaveLength(2);
    const { apiKey } = await client.getApiKey({ apiKeyId: apiKeyIds[0] });
    expect(apiKey).toMatchObject({ apiKeyId: apiKeyIds[0], apiKeyName: "one", credential: { publicKey: k1.publicKey } });
    expect(apiKey.expirationSeconds).toBeUndefined();
    const { apiKeys } = await client.getApiKeys({ userId: carol });
    expect(apiKeys.map((k) => k.apiKeyName)).toEqual(["one", "two"]);

    const deleted = await client.deleteApiKeys({ userId: carol, apiKeyIds: [apiKeyIds[0]] });
    expect(deleted.apiKeyIds).toEqual([apiKeyIds[0]]);
    const after = await client.getApiKeys({ userId: carol });
    expect(after.apiKeys.map((k) => k.apiKeyId)).toEqual([apiKeyIds[1]]);
    await expect(client.getApiKey({ apiKeyId: apiKeyIds[0] })).rejects.toMatchObject({ code: 5 });
  });

  it("registers, reads and deletes passkeys (authenticators)", async () => {
    const { userIds } = await client.createUsers({ users: [{ userName: "dave", ...noCredentials }] });
    const passkey = new SoftwarePasskey();
    const registration = passkey.register();
    const { authenticatorIds } = await client.createAuthenticators({
      userId: userIds[0],
      authenticators: [
        { authenticatorName: "dave's phone", challenge: registration.challenge, attestation: registration.attestation as any },
      ],
    });
    expect(authenticatorIds).toHaveLength(1);
    const { authenticator } = await client.getAuthenticator({ authenticatorId: authenticatorIds[0] });
    expect(authenticator).toMatchObject({
      authenticatorId: authenticatorIds[0],
      authenticatorName: "dave's phone",
      credentialId: passkey.credentialIdBase64url,
      attestationType: "none",
      transports: ["AUTHENTICATOR_TRANSPORT_INTERNAL"],
      credential: { publicKey: passkey.publicKeyCompressedHex(), type: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR" },
    });
    const { authenticators } = await client.getAuthenticators({ userId: userIds[0] });
    expect(authenticators.map((a) => a.authenticatorId)).toEqual(authenticatorIds);
    const deleted = await client.deleteAuthenticators({ userId: userIds[0], authenticatorIds });
    expect(deleted.authenticatorIds).toEqual(authenticatorIds);
    expect((await client.getAuthenticators({ userId: userIds[0] })).authenticators).toEqual([]);
  });

  it("creates, updates, lists and deletes user tags", async () => {
    const { userIds } = await client.createUsers({
      users: [
        { userName: "erin", ...noCredentials },
        { userName: "frank", ...noCredentials },
      ],
    });
    const [erin, frank] = userIds;
    const created = await client.createUserTag({ userTagName: "finance", userIds: [erin] });
    expect(created.userIds).toEqual([erin]);
    expect((await client.getUser({ userId: erin })).user.userTags).toEqual([created.userTagId]);

    const updated = await client.updateUserTag({
      userTagId: created.userTagId,
      newUserTagName: "treasury",
      addUserIds: [frank],
      removeUserIds: [erin],
    });
    expect(updated.userTagId).toBe(created.userTagId);
    expect((await client.getUser({ userId: erin })).user.userTags).toEqual([]);
    expect((await client.getUser({ userId: frank })).user.userTags).toEqual([created.userTagId]);

    const { userTags } = await client.listUserTags({});
    expect(userTags).toEqual([expect.objectContaining({ tagId: created.userTagId, tagName: "treasury", tagType: "TAG_TYPE_USER" })]);

    const deleted = await client.deleteUserTags({ userTagIds: [created.userTagId] });
    expect(deleted).toMatchObject({ userTagIds: [created.userTagId], userIds: [frank] });
    expect((await client.listUserTags({})).userTags).toEqual([]);
    expect((await client.getUser({ userId: frank })).user.userTags).toEqual([]);
  });

  it("updates a user's name, email, phone number and tags", async () => {
    const { userIds } = await client.createUsers({ users: [{ userName: "gina", ...noCredentials }] });
    const gina = userIds[0];
    const { userTagId } = await client.createUserTag({ userTagName: "ops", userIds: [] });
    expect((await client.updateUser({ userId: gina, userName: "gina m", userTagIds: [userTagId] })).userId).toBe(gina);
    expect((await client.updateUserName({ userId: gina, userName: "Gina" })).userId).toBe(gina);
    expect((await client.updateUserEmail({ userId: gina, userEmail: "gina@example.com" })).userId).toBe(gina);
    expect((await client.updateUserPhoneNumber({ userId: gina, userPhoneNumber: "+447700900123" })).userId).toBe(gina);
    const { user } = await client.getUser({ userId: gina });
    expect(user).toMatchObject({
      userName: "Gina",
      userEmail: "gina@example.com",
      userPhoneNumber: "+447700900123",
      userTags: [userTagId],
    });

    await client.updateUserEmail({ userId: gina, userEmail: "" });
    expect((await client.getUser({ userId: gina })).user.userEmail).toBeUndefined();
  });

  it("deletes users together with their credentials", async () => {
    const key = newKeyPair();
    const { userIds } = await client.createUsers({
      users: [
        {
          userName: "henry",
          apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    const { apiKeys } = await client.getApiKeys({ userId: userIds[0] });
    const deleted = await client.deleteUsers({ userIds });
    expect(deleted.userIds).toEqual(userIds);
    await expect(client.getUser({ userId: userIds[0] })).rejects.toMatchObject({ code: 5 });
    await expect(client.getApiKey({ apiKeyId: apiKeys[0].apiKeyId })).rejects.toMatchObject({ code: 5 });
    // The deleted user's key no longer authenticates.
    const asHenry = h.sdk(org, key);
    await expect(asHenry.getWhoami({})).rejects.toMatchObject({ code: 16 });
  });

  it("reads activities back from the audit log, with pagination", async () => {
    const first = await client.createUserTag({ userTagName: "audit-1", userIds: [] });
    const second = await client.createUserTag({ userTagName: "audit-2", userIds: [] });
    const { activity } = await client.getActivity({ activityId: second.activity.id });
    expect(activity).toMatchObject({ id: second.activity.id, status: "ACTIVITY_STATUS_COMPLETED", type: "ACTIVITY_TYPE_CREATE_USER_TAG" });
    expect(activity.result.createUserTagResult).toEqual({ userTagId: second.userTagId, userIds: [] });
    expect(activity.intent.createUserTagIntent).toEqual({ userTagName: "audit-2", userIds: [] });

    const page1 = await client.getActivities({ paginationOptions: { limit: "2" } });
    expect(page1.activities.map((a) => a.id)).toEqual([second.activity.id, first.activity.id]);
    const page2 = await client.getActivities({ paginationOptions: { limit: "2", after: first.activity.id } });
    expect(page2.activities).toHaveLength(2);
    expect(page2.activities.map((a) => a.id)).not.toContain(first.activity.id);
    const back = await client.getActivities({ paginationOptions: { limit: "1", before: first.activity.id } });
    expect(back.activities.map((a) => a.id)).toEqual([second.activity.id]);
    const filtered = await client.getActivities({ filterByType: ["ACTIVITY_TYPE_CREATE_USER_TAG"], paginationOptions: { limit: "100" } });
    expect(filtered.activities.every((a) => a.type === "ACTIVITY_TYPE_CREATE_USER_TAG")).toBe(true);
  });

  it("lets a non-root user read but not write (PermissionDenied), and records the refusal", async () => {
    const key = newKeyPair();
    await client.createUsers({
      users: [
        {
          userName: "reader",
          apiKeys: [{ apiKeyName: "r", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    const reader = h.sdk(org, key);
    expect((await reader.getWhoami({})).username).toBe("reader");
    expect((await reader.getUsers({})).users.length).toBeGreaterThan(1);
    await expect(reader.createUserTag({ userTagName: "nope", userIds: [] })).rejects.toMatchObject({ code: 7 });
    const { userTags } = await client.listUserTags({});
    expect(userTags.map((t) => t.tagName)).not.toContain("nope");
    const failed = await client.getActivities({ filterByStatus: ["ACTIVITY_STATUS_FAILED"], paginationOptions: { limit: "1" } });
    expect(failed.activities[0]).toMatchObject({ type: "ACTIVITY_TYPE_CREATE_USER_TAG", failure: { code: 7 } });
  });
});
