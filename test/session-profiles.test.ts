// Session profiles through @turnkey/sdk-server: creating, reading and listing them (a sub-organization
// sees its parent's), what create_session_profile refuses, and logins that name one: the session JWT
// carries the profile as @turnkey/core reads it, its lifetime is capped by the profile's, and the
// profile's scope is enforced on everything the session key then requests — root user or not.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSession } from "@turnkey/core/dist/utils.js";
import { startHarness, newKeyPair, refusedLeavingOnlyItsActivity, type ApiKeyPair, type Harness } from "./helpers/harness.js";
import { fastPoller, noCredentials, organizationWith } from "./helpers/organizations.js";

let h: Harness;

beforeAll(async () => {
  h = await startHarness({ SIGIL_SESSION_MAX_SECONDS: "7200" });
});
afterAll(() => h.close());

const ETH_ACCOUNT = {
  curve: "CURVE_SECP256K1",
  pathFormat: "PATH_FORMAT_BIP32",
  path: "m/44'/60'/0'/0/0",
  addressFormat: "ADDRESS_FORMAT_ETHEREUM",
} as const;

/** Seconds from now until the session's expiry. */
const lifetimeOf = (session: string) => parseSession(session).expiry - Date.now() / 1000;

describe("create_session_profile, get_session_profile, get_session_profiles", () => {
  it("creates a profile, reads it back and lists it; the activity records the intent", async () => {
    const { root } = await organizationWith(h, []);
    const created = await root.createSessionProfile({
      sessionProfileName: "signing only",
      scope: "activity.action == 'SIGN'",
      expirationSeconds: "600",
      notes: "for the checkout page",
    });
    expect(created.activity).toMatchObject({ status: "ACTIVITY_STATUS_COMPLETED", type: "ACTIVITY_TYPE_CREATE_SESSION_PROFILE" });
    expect(created.activity.intent.createSessionProfileIntent).toEqual({
      sessionProfileName: "signing only",
      scope: "activity.action == 'SIGN'",
      expirationSeconds: "600",
      notes: "for the checkout page",
    });
    expect(created.sessionProfileId).toMatch(/^[0-9a-f-]{36}$/);
    const plain = await root.createSessionProfile({ sessionProfileName: "everything", scope: "true" });

    const { sessionProfile } = await root.getSessionProfile({ sessionProfileId: created.sessionProfileId });
    expect(sessionProfile).toEqual({
      sessionProfileId: created.sessionProfileId,
      sessionProfileName: "signing only",
      scope: "activity.action == 'SIGN'",
      expirationSeconds: "600",
      notes: "for the checkout page",
      createdAt: { seconds: expect.any(String), nanos: expect.any(String) },
      updatedAt: { seconds: expect.any(String), nanos: expect.any(String) },
    });
    const { sessionProfiles } = await root.getSessionProfiles({});
    expect(sessionProfiles.map((p) => p.sessionProfileId)).toEqual([created.sessionProfileId, plain.sessionProfileId]);
    // Optional fields left out are absent, not empty.
    expect(sessionProfiles[1]).not.toHaveProperty("expirationSeconds");
    expect(sessionProfiles[1]).not.toHaveProperty("notes");
  });

  describe("refuses, changing nothing but its failed activity", () => {
    let root: Awaited<ReturnType<typeof organizationWith>>["root"];
    beforeAll(async () => {
      ({ root } = await organizationWith(h, []));
      await root.createSessionProfile({ sessionProfileName: "taken", scope: "true" });
    });
    const refused = (params: Parameters<typeof root.createSessionProfile>[0], code: string, words: string) =>
      refusedLeavingOnlyItsActivity(h, () => root.createSessionProfile(params), {
        message: expect.stringMatching(new RegExp(`${code}.*${words}|${words}.*${code}`)),
      });

    it("a blank or over-long name", async () => {
      await refused({ sessionProfileName: "  ", scope: "true" }, "REQUEST_INVALID", "sessionProfileName must not be empty");
      await refused({ sessionProfileName: "n".repeat(257), scope: "true" }, "REQUEST_INVALID", "at most 256 characters");
    });

    it("a name starting with SESSION_TYPE_, which a client would read as one of the product's session types", async () => {
      for (const sessionProfileName of ["SESSION_TYPE_READ_WRITE", "SESSION_TYPE_READ_ONLY", "SESSION_TYPE_CUSTOM"])
        await refused({ sessionProfileName, scope: "true" }, "REQUEST_INVALID", 'may not start with "SESSION_TYPE_"');
      // Only the prefix is reserved.
      const { sessionProfileId } = await root.createSessionProfile({ sessionProfileName: "my SESSION_TYPE_READ_WRITE", scope: "true" });
      expect(sessionProfileId).toBeTruthy();
    });

    it("a name the organization already gave a profile", async () => {
      await refused({ sessionProfileName: "taken", scope: "activity.action == 'SIGN'" }, "SESSION_PROFILE_ALREADY_EXISTS", 'named "taken"');
    });

    it("a blank scope, or one that is not a policy condition", async () => {
      await refused({ sessionProfileName: "blank", scope: " " }, "REQUEST_INVALID", "scope must not be empty");
      await refused(
        { sessionProfileName: "broken", scope: "activity.action == " },
        "POLICY_INVALID",
        "scope is not a valid policy condition",
      );
      await refused({ sessionProfileName: "unknown keyword", scope: "nonsense.field == 1" }, "POLICY_INVALID", "scope is not a valid");
    });

    it("a lifetime that is not a whole number of seconds from 1 to the server's longest session", async () => {
      for (const expirationSeconds of ["0", "-5", "1.5", "ten"])
        await refused(
          { sessionProfileName: "bad lifetime", scope: "true", expirationSeconds },
          "INVALID_EXPIRATION",
          "whole number of seconds",
        );
      await refused(
        { sessionProfileName: "too long", scope: "true", expirationSeconds: "7201" },
        "SESSION_EXPIRATION_TOO_LONG",
        "SIGIL_SESSION_MAX_SECONDS",
      );
    });

    it("notes over 1024 characters", async () => {
      await refused(
        { sessionProfileName: "long notes", scope: "true", notes: "x".repeat(1025) },
        "REQUEST_INVALID",
        "notes must be at most",
      );
    });

    it("get_session_profile of an id the organization cannot see", async () => {
      const other = await organizationWith(h, []);
      const { sessionProfileId } = await other.root.createSessionProfile({ sessionProfileName: "theirs", scope: "true" });
      const before = await h.snapshot();
      for (const id of [sessionProfileId, "3c6a9b4e-2f1d-4c8b-9a7e-5d0f1b2c3d4e"])
        await expect(root.getSessionProfile({ sessionProfileId: id })).rejects.toMatchObject({
          code: 5,
          message: expect.stringContaining("SESSION_PROFILE_NOT_FOUND"),
        });
      expect(await h.snapshot()).toBe(before);
    });
  });

  it("policies govern create_session_profile (resource SESSION_PROFILE, action CREATE)", async () => {
    const { root, members } = await organizationWith(h, ["alice", "bob"]);
    await root.createPolicy({
      policyName: "alice makes session profiles",
      effect: "EFFECT_ALLOW",
      condition: "activity.resource == 'SESSION_PROFILE' && activity.action == 'CREATE'",
      consensus: `approvers.any(user, user.id == '${members.alice!.userId}')`,
      notes: "",
    });
    await root.createPolicy({
      policyName: "bob may not",
      effect: "EFFECT_DENY",
      condition: "activity.resource == 'SESSION_PROFILE'",
      consensus: `approvers.any(user, user.id == '${members.bob!.userId}')`,
      notes: "",
    });
    const made = await members.alice!.client.createSessionProfile({ sessionProfileName: "alice's", scope: "true" });
    expect(made.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => members.bob!.client.createSessionProfile({ sessionProfileName: "bob's", scope: "true" }),
      { code: 7, message: expect.stringContaining("POLICY_DENIED") },
    );
    expect(failure.message).toContain("OUTCOME_DENY_EXPLICIT");
  });
});

describe("a login with a session profile", () => {
  it("puts the profile in the session JWT, caps its lifetime, and binds the key to it", async () => {
    const { org, root } = await organizationWith(h, []);
    const { sessionProfileId } = await root.createSessionProfile({
      // Not ASCII, and '~', '?' and '>', which the JWT escapes so the clients' base64 decoding reads it.
      sessionProfileName: "ten minutes ~ café? >",
      scope: "activity.action != 'EXPORT'",
      expirationSeconds: "600",
    });
    const sessionKey = newKeyPair();
    // The request asks for an hour: the profile allows ten minutes.
    const { session } = await root.stampLogin({ publicKey: sessionKey.publicKey, expirationSeconds: "3600", sessionProfileId });
    expect(parseSession(session)).toMatchObject({
      sessionType: "ten minutes ~ café? >",
      sessionProfileId,
      scope: "activity.action != 'EXPORT'",
      userId: org.userId,
      organizationId: org.organizationId,
      publicKey: sessionKey.publicKey,
    });
    expect(lifetimeOf(session)).toBeGreaterThan(590);
    expect(lifetimeOf(session)).toBeLessThanOrEqual(601);
    // A shorter request wins; with none, the profile's lifetime is the session's.
    const shorter = await root.stampLogin({ publicKey: newKeyPair().publicKey, expirationSeconds: "120", sessionProfileId });
    expect(lifetimeOf(shorter.session)).toBeLessThanOrEqual(121);
    const unstated = await root.stampLogin({ publicKey: newKeyPair().publicKey, sessionProfileId });
    expect(lifetimeOf(unstated.session)).toBeGreaterThan(590);
    expect(lifetimeOf(unstated.session)).toBeLessThanOrEqual(601);
    // A profile without a lifetime leaves it to the request (or the default, 900 s).
    const open = await root.createSessionProfile({ sessionProfileName: "open", scope: "true" });
    const long = await root.stampLogin({
      publicKey: newKeyPair().publicKey,
      expirationSeconds: "3600",
      sessionProfileId: open.sessionProfileId,
    });
    expect(lifetimeOf(long.session)).toBeGreaterThan(3590);
    const byDefault = await root.stampLogin({ publicKey: newKeyPair().publicKey, sessionProfileId: open.sessionProfileId });
    expect(lifetimeOf(byDefault.session)).toBeLessThanOrEqual(901);

    // The key lists its profile (credential.sessionProfileId); a login without one is a plain session.
    const { apiKeys } = await root.getApiKeys({ userId: org.userId });
    expect(apiKeys.find((k) => k.credential.publicKey === sessionKey.publicKey)?.credential).toMatchObject({ sessionProfileId });
    const plain = await root.stampLogin({ publicKey: newKeyPair().publicKey, sessionProfileId: "" });
    expect(parseSession(plain.session)).toMatchObject({ sessionType: "SESSION_TYPE_READ_WRITE" });
    expect(parseSession(plain.session)).not.toHaveProperty("sessionProfileId");
  });

  it("enforces the scope on the session key, even a root user's: what it forbids is refused, what it allows runs", async () => {
    const { org, root } = await organizationWith(h, []);
    const { walletId, addresses } = await root.createWallet({ walletName: "treasury", accounts: [ETH_ACCOUNT] });
    const { sessionProfileId } = await root.createSessionProfile({
      sessionProfileName: "sign with the treasury",
      scope: `activity.action == 'SIGN' && wallet.id == '${walletId}'`,
    });
    const sessionKey = newKeyPair();
    await root.stampLogin({ publicKey: sessionKey.publicKey, sessionProfileId });
    const session = h.sdk(org, sessionKey, fastPoller);

    const signed = await session.signRawPayload({
      signWith: addresses[0]!,
      payload: "0x1234",
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    });
    expect(signed.r).toMatch(/^[0-9a-f]{64}$/);
    // Reads are not activities: the scope does not narrow them.
    expect((await session.getWhoami({})).userId).toBe(org.userId);

    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => session.createWallet({ walletName: "more", accounts: [ETH_ACCOUNT] }),
      {
        code: 7,
        message: expect.stringContaining("SESSION_SCOPE_DENIED"),
      },
    );
    expect(failure.message).toContain(sessionProfileId);
    // Nor can the session trade itself for a broader one, or mint an unscoped key for its user.
    await refusedLeavingOnlyItsActivity(h, () => session.stampLogin({ publicKey: newKeyPair().publicKey }), {
      message: expect.stringContaining("SESSION_SCOPE_DENIED"),
    });
    await refusedLeavingOnlyItsActivity(
      h,
      () =>
        session.createApiKeys({
          userId: org.userId,
          apiKeys: [{ apiKeyName: "escape", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
        }),
      { message: expect.stringContaining("SESSION_SCOPE_DENIED") },
    );
    // Another wallet's key is outside `wallet.id == …`.
    const other = await root.createWallet({ walletName: "other", accounts: [ETH_ACCOUNT] });
    await refusedLeavingOnlyItsActivity(
      h,
      () =>
        session.signRawPayload({
          signWith: other.addresses[0]!,
          payload: "0x1234",
          encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
          hashFunction: "HASH_FUNCTION_KECCAK256",
        }),
      { message: expect.stringContaining("SESSION_SCOPE_DENIED") },
    );
    // The root key itself is not narrowed by the sessions it issued.
    expect((await root.createWallet({ walletName: "still mine", accounts: [ETH_ACCOUNT] })).walletId).toBeTruthy();
  });

  it("a scoped session's vote is judged by its scope too", async () => {
    const { org, root, members } = await organizationWith(h, ["alice"]);
    await root.createPolicy({
      policyName: "alice's users need the root user",
      effect: "EFFECT_ALLOW",
      condition: "activity.resource == 'USER'",
      consensus: `approvers.any(user, user.id == '${org.userId}')`,
      notes: "",
    });
    const pending = await members.alice!.client.createUsers({ users: [{ userName: "newcomer", apiKeys: [], ...noCredentials }] });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const { sessionProfileId } = await root.createSessionProfile({ sessionProfileName: "signing", scope: "activity.action == 'SIGN'" });
    const sessionKey = newKeyPair();
    await root.stampLogin({ publicKey: sessionKey.publicKey, sessionProfileId });
    // The listing says so: the root user may vote, this session of theirs may not.
    const seenWith = async (key: ApiKeyPair) =>
      (await h.sdk(org, key, fastPoller).getActivity({ activityId: pending.activity.id })).activity;
    expect(await seenWith(org.key)).toMatchObject({ canApprove: true, canReject: true });
    expect(await seenWith(sessionKey)).toMatchObject({ canApprove: false, canReject: false });
    const before = await h.snapshot();
    await expect(h.sdk(org, sessionKey, fastPoller).approveActivity({ fingerprint: pending.activity.fingerprint })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("SESSION_SCOPE_DENIED"),
    });
    expect(await h.snapshot()).toBe(before);
    // A session whose scope allows approving may.
    const approver = await root.createSessionProfile({
      sessionProfileName: "approvals",
      scope: "activity.type == 'ACTIVITY_TYPE_APPROVE_ACTIVITY'",
    });
    const approverKey = newKeyPair();
    await root.stampLogin({ publicKey: approverKey.publicKey, sessionProfileId: approver.sessionProfileId });
    expect(await seenWith(approverKey)).toMatchObject({ canApprove: true, canReject: false });
    expect(
      (await h.sdk(org, approverKey, fastPoller).getActivities({})).activities.find((a) => a.id === pending.activity.id),
    ).toMatchObject({
      canApprove: true,
      canReject: false,
    });
    const approved = await h.sdk(org, approverKey, fastPoller).approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("policies see activity.params.session_profile_id of a login", async () => {
    const { root, members } = await organizationWith(h, ["alice"]);
    const { sessionProfileId } = await root.createSessionProfile({ sessionProfileName: "elevated", scope: "true" });
    await root.createPolicy({
      policyName: "no elevated sessions by login",
      effect: "EFFECT_DENY",
      condition: `activity.type == 'ACTIVITY_TYPE_STAMP_LOGIN' && activity.params.session_profile_id == '${sessionProfileId}'`,
      notes: "",
    });
    await refusedLeavingOnlyItsActivity(
      h,
      () => members.alice!.client.stampLogin({ publicKey: newKeyPair().publicKey, sessionProfileId }),
      {
        message: expect.stringContaining("POLICY_DENIED"),
      },
    );
    expect((await members.alice!.client.stampLogin({ publicKey: newKeyPair().publicKey })).session).toEqual(expect.any(String));
  });

  it("refuses another organization's profile, issuing no session", async () => {
    const { root } = await organizationWith(h, []);
    const other = await organizationWith(h, []);
    const { sessionProfileId } = await other.root.createSessionProfile({ sessionProfileName: "theirs", scope: "true" });
    const sessionKey = newKeyPair();
    await refusedLeavingOnlyItsActivity(h, () => root.stampLogin({ publicKey: sessionKey.publicKey, sessionProfileId }), {
      code: 5,
      message: expect.stringContaining("SESSION_PROFILE_NOT_FOUND"),
    });
  });
});

describe("sub-organizations", () => {
  async function subOrganization(parent: Awaited<ReturnType<typeof organizationWith>>["root"], name: string) {
    const key: ApiKeyPair = newKeyPair();
    const { subOrganizationId, rootUserIds } = await parent.createSubOrganization({
      subOrganizationName: name,
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: `${name} owner`,
          apiKeys: [{ apiKeyName: "owner key", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const org = { organizationId: subOrganizationId };
    return { org, userId: rootUserIds![0]!, key, sdk: h.sdk(org, key, fastPoller) };
  }

  it("see and log in with their parent's profiles; the scope holds in the sub-organization", async () => {
    const { root } = await organizationWith(h, []);
    const parentProfile = await root.createSessionProfile({
      sessionProfileName: "end user wallet",
      scope: "activity.resource == 'WALLET' && activity.action == 'CREATE'",
      expirationSeconds: "300",
    });
    const sub = await subOrganization(root, "end user");
    const own = await sub.sdk.createSessionProfile({ sessionProfileName: "own", scope: "true" });

    expect((await sub.sdk.getSessionProfile({ sessionProfileId: parentProfile.sessionProfileId })).sessionProfile).toMatchObject({
      sessionProfileName: "end user wallet",
      expirationSeconds: "300",
    });
    const listed = (await sub.sdk.getSessionProfiles({})).sessionProfiles.map((p) => p.sessionProfileId);
    expect(listed).toEqual([parentProfile.sessionProfileId, own.sessionProfileId]);
    // The parent sees its own profiles, not its sub-organizations'.
    expect((await root.getSessionProfiles({})).sessionProfiles.map((p) => p.sessionProfileId)).toEqual([parentProfile.sessionProfileId]);

    const sessionKey = newKeyPair();
    const { session } = await sub.sdk.stampLogin({
      publicKey: sessionKey.publicKey,
      expirationSeconds: "3600",
      sessionProfileId: parentProfile.sessionProfileId,
    });
    expect(parseSession(session)).toMatchObject({
      sessionType: "end user wallet",
      sessionProfileId: parentProfile.sessionProfileId,
      organizationId: sub.org.organizationId,
      userId: sub.userId,
    });
    expect(lifetimeOf(session)).toBeLessThanOrEqual(301);
    const asSession = h.sdk(sub.org, sessionKey, fastPoller);
    expect((await asSession.createWallet({ walletName: "mine", accounts: [ETH_ACCOUNT] })).walletId).toBeTruthy();
    await refusedLeavingOnlyItsActivity(h, () => asSession.createSessionProfile({ sessionProfileName: "wider", scope: "true" }), {
      message: expect.stringContaining("SESSION_SCOPE_DENIED"),
    });
  });

  it("a sibling's profile, or a sub-organization's in its parent, is refused", async () => {
    const { root } = await organizationWith(h, []);
    const first = await subOrganization(root, "first");
    const second = await subOrganization(root, "second");
    const { sessionProfileId } = await first.sdk.createSessionProfile({ sessionProfileName: "first's", scope: "true" });
    await refusedLeavingOnlyItsActivity(h, () => second.sdk.stampLogin({ publicKey: newKeyPair().publicKey, sessionProfileId }), {
      message: expect.stringContaining("SESSION_PROFILE_NOT_FOUND"),
    });
    await refusedLeavingOnlyItsActivity(h, () => root.stampLogin({ publicKey: newKeyPair().publicKey, sessionProfileId }), {
      message: expect.stringContaining("SESSION_PROFILE_NOT_FOUND"),
    });
    await expect(second.sdk.getSessionProfile({ sessionProfileId })).rejects.toMatchObject({
      message: expect.stringContaining("SESSION_PROFILE_NOT_FOUND"),
    });
  });
});
