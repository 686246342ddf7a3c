// MFA policies through @turnkey/sdk-server, as a backend drives them: create/update/delete_mfa_policy
// and the queries; an activity whose requester's first matching MFA policy (by order) is not satisfied
// by the request's own credential waits in ACTIVITY_STATUS_AUTHENTICATORS_NEEDED; get_mfa_status says
// what is proven and what is required; approvals by the requester stamped with the other credentials
// (a real WebAuthn passkey through @turnkey/webauthn-stamper, another API key) prove the remaining
// steps, and the last one runs the activity, once. Every refusal changes nothing (full-table snapshot).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeyApiClient } from "@turnkey/sdk-server";
import { WebauthnStamper } from "@turnkey/webauthn-stamper";
import {
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  signedRequest,
  signerPublicKeyOf,
  startHarness,
  type Harness,
} from "./helpers/harness.js";
import { encryptWalletToBundle } from "@turnkey/crypto";
import { fastPoller, noCredentials, organizationWith } from "./helpers/organizations.js";
import { SoftwarePasskey } from "./helpers/passkey.js";
import { stepsSatisfied } from "../src/operations/mfa/mfa-policies.js";

let h: Harness;

beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

const API_KEY = "AUTHENTICATION_TYPE_API_KEY" as const;
const PASSKEY = "AUTHENTICATION_TYPE_PASSKEY" as const;
const step = (...types: Array<typeof API_KEY | typeof PASSKEY | "AUTHENTICATION_TYPE_EMAIL_OTP" | "AUTHENTICATION_TYPE_SMS_OTP">) => ({
  any: types.map((type) => ({ type })),
});
const CREATE_USER_TAG = "activity.type == 'ACTIVITY_TYPE_CREATE_USER_TAG'";

/**
 * An organization whose root user holds two API keys and a passkey: `root` stamps with the first key,
 * `second` with the other, `withPasskey` runs calls stamped by the passkey (the official stamper, the
 * software authenticator installed as navigator.credentials).
 */
async function rootWithThreeCredentials() {
  const org = await h.organization();
  const root = h.sdk(org, org.key, fastPoller);
  const secondKey = newKeyPair();
  const {
    apiKeyIds: [secondKeyId],
  } = await root.createApiKeys({
    userId: org.userId,
    apiKeys: [{ apiKeyName: "second", publicKey: secondKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
  });
  const passkey = new SoftwarePasskey();
  const registration = passkey.register();
  const {
    authenticatorIds: [passkeyId],
  } = await root.createAuthenticators({
    userId: org.userId,
    authenticators: [{ authenticatorName: "laptop", challenge: registration.challenge, attestation: registration.attestation as any }],
  });
  const passkeyClient = new TurnkeyApiClient({
    stamper: new WebauthnStamper({ rpId: passkey.rpId }),
    apiBaseUrl: h.url,
    organizationId: org.organizationId,
    activityPoller: fastPoller.activityPoller,
  });
  const withPasskey = async <T>(call: (client: TurnkeyApiClient) => Promise<T>): Promise<T> => {
    const restore = passkey.installAsNavigator();
    try {
      return await call(passkeyClient);
    } finally {
      restore();
    }
  };
  return { org, root, second: h.sdk(org, secondKey, fastPoller), secondKeyId: secondKeyId!, passkeyId: passkeyId!, withPasskey };
}

async function tagNames(client: ReturnType<Harness["sdk"]>) {
  return (await client.listUserTags({})).userTags.map((t) => t.tagName);
}

describe("which proofs satisfy which steps", () => {
  const key = (credentialId: string) => ({ type: API_KEY, credentialId });
  const passkey = (credentialId: string) => ({ type: PASSKEY, credentialId });

  it("places a credential that fits two steps where it leaves the others provable, whatever the order given", () => {
    const steps = [step(API_KEY, PASSKEY), step(PASSKEY)];
    expect(stepsSatisfied(steps, [passkey("p"), key("k")])).toBe(2);
    expect(stepsSatisfied(steps, [key("k"), passkey("p")])).toBe(2);
    expect(stepsSatisfied(steps, [key("k"), key("k2")])).toBe(1);
  });

  it("counts one credential for one step only, and honours a method's id", () => {
    expect(stepsSatisfied([step(API_KEY), step(API_KEY)], [key("k")])).toBe(1);
    expect(stepsSatisfied([step(API_KEY), step(API_KEY)], [key("k"), key("k2")])).toBe(2);
    const only = [{ any: [{ type: PASSKEY, id: "mine" }] }];
    expect(stepsSatisfied(only, [passkey("theirs")])).toBe(0);
    expect(stepsSatisfied(only, [passkey("mine")])).toBe(1);
  });
});

describe("an activity matching an MFA policy", () => {
  it("waits for the remaining steps, is refused a credential no remaining step accepts, and runs once when the last is proven", async () => {
    const { org, root, second, secondKeyId, passkeyId, withPasskey } = await rootWithThreeCredentials();
    // The steps are listed passkey first: the docs let them be proven in any order.
    const { mfaPolicyId } = await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "tags need a passkey",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [step(PASSKEY), step(API_KEY)],
      order: 0,
      notes: "passkey and key",
    });
    const { mfaPolicy } = await root.getMfaPolicy({ userId: org.userId, mfaPolicyId });
    expect(mfaPolicy).toMatchObject({
      mfaPolicyId,
      mfaPolicyName: "tags need a passkey",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [{ any: [{ type: PASSKEY }] }, { any: [{ type: API_KEY }] }],
      order: 0,
      notes: "passkey and key",
    });
    expect((await root.getMfaPolicies({ userId: org.userId })).mfaPolicies).toEqual([mfaPolicy]);
    expect((await root.getUser({ userId: org.userId })).user.mfaPolicies).toEqual([mfaPolicy]);

    const waiting = await root.createUserTag({ userTagName: "guarded", userIds: [] });
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    const activityId = waiting.activity.id;
    const fingerprint = waiting.activity.fingerprint;
    expect(await tagNames(root)).toEqual([]);
    const required = [{ any: [{ type: PASSKEY }] }, { any: [{ type: API_KEY }] }];
    expect((await root.getMfaStatus({ activityId })).mfaStatuses).toEqual([
      {
        mfaPolicyId,
        userId: org.userId,
        satisfied: false,
        satisfiedMethods: [{ type: API_KEY, id: org.apiKeyId }],
        requiredMethods: required,
      },
    ]);
    expect((await root.getActivity({ activityId })).activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");

    // Another API key proves nothing more: the only API-key step is already proven.
    const before = await h.snapshot();
    await expect(second.approveActivity({ fingerprint })).rejects.toMatchObject({
      code: 9,
      message: expect.stringContaining(`AUTHENTICATION_TYPE_API_KEY ${secondKeyId} satisfies none of the steps`),
    });
    // The key that made the request approving again is a retry: answered as the activity stands.
    const again = await root.approveActivity({ fingerprint });
    expect(again.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect(await h.snapshot()).toBe(before);
    // Another user can neither authenticate for the requester nor, outside the root quorum, reject it.
    const otherKey = newKeyPair();
    await root.createPrivateKeyTag({ privateKeyTagName: "unguarded", privateKeyIds: [] });
    await root.createUsers({
      users: [
        {
          userName: "other",
          apiKeys: [{ apiKeyName: "k", publicKey: otherKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
          ...noCredentials,
        },
      ],
    });
    const afterOther = await h.snapshot();
    await expect(h.sdk(org, otherKey).approveActivity({ fingerprint })).rejects.toMatchObject({
      code: 9,
      message: expect.stringContaining("cannot vote on it or authenticate for them"),
    });
    await expect(h.sdk(org, otherKey).rejectActivity({ fingerprint })).rejects.toMatchObject({
      code: 9,
      message: expect.stringContaining("only the requester and the root quorum may reject it"),
    });
    expect(await h.snapshot()).toBe(afterOther);
    expect((await root.getMfaStatus({ activityId, userId: org.userId })).mfaStatuses[0].satisfiedMethods).toEqual([
      { type: API_KEY, id: org.apiKeyId },
    ]);

    // The passkey proves the last step: the activity runs, and the approval's answer is its result.
    const done = await withPasskey((client) => client.approveActivity({ fingerprint }));
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(done.activity.result.createUserTagResult?.userTagId).toBeTruthy();
    expect(await tagNames(root)).toEqual(["guarded"]);
    expect((await root.getMfaStatus({ activityId })).mfaStatuses).toEqual([
      {
        mfaPolicyId,
        userId: org.userId,
        satisfied: true,
        satisfiedMethods: [
          { type: API_KEY, id: org.apiKeyId },
          { type: PASSKEY, id: passkeyId },
        ],
        requiredMethods: required,
      },
    ]);
    // Approving a completed activity again runs nothing a second time.
    const after = await withPasskey((client) => client.approveActivity({ fingerprint }));
    expect(after.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    await root.approveActivity({ fingerprint });
    expect(await tagNames(root)).toEqual(["guarded"]);
    // One activity, completed: the approvals changed it rather than adding activities of their own.
    const rows = await h.server.store.db.selectFrom("activities").select(["id", "status"]).where("id", "=", activityId).execute();
    expect(rows).toEqual([{ id: activityId, status: "ACTIVITY_STATUS_COMPLETED" }]);
  });

  it("counts the request's own credential only where a step accepts it, and a passkey request then needs the API key", async () => {
    const { org, root, withPasskey } = await rootWithThreeCredentials();
    await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "keys for tags",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [step(API_KEY)],
      order: 0,
    });
    // Stamped by the passkey: the API-key step is still to be proven.
    const waiting = await withPasskey((client) => client.createUserTag({ userTagName: "by passkey", userIds: [] }));
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect((await root.getMfaStatus({ activityId: waiting.activity.id })).mfaStatuses[0]).toMatchObject({
      satisfied: false,
      satisfiedMethods: [],
    });
    // Stamped by an API key: the policy is satisfied by the request itself, and it runs at once.
    const direct = await root.createUserTag({ userTagName: "by key", userIds: [] });
    expect(direct.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect((await root.getMfaStatus({ activityId: direct.activity.id })).mfaStatuses[0]).toMatchObject({
      satisfied: true,
      satisfiedMethods: [{ type: API_KEY, id: org.apiKeyId }],
    });
    const done = await root.approveActivity({ fingerprint: waiting.activity.fingerprint });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect((await tagNames(root)).sort()).toEqual(["by key", "by passkey"]);
  });

  it("accepts for a session method naming a profile only a session key issued with that profile", async () => {
    const { org, root } = await rootWithThreeCredentials();
    const { sessionProfileId } = await root.createSessionProfile({ sessionProfileName: "step-up", scope: "true" });
    const SESSION = "AUTHENTICATION_TYPE_SESSION" as const;
    await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "tags need a step-up session",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [step(API_KEY), { any: [{ type: SESSION, id: sessionProfileId }] }],
      order: 0,
    });
    const plainKey = newKeyPair();
    const profiledKey = newKeyPair();
    await root.stampLogin({ publicKey: plainKey.publicKey });
    await root.stampLogin({ publicKey: profiledKey.publicKey, sessionProfileId });
    const waiting = await root.createUserTag({ userTagName: "stepped up", userIds: [] });
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    const { fingerprint } = waiting.activity;

    // A session, but not of that profile: it proves nothing, and nothing changes.
    const before = await h.snapshot();
    await expect(h.sdk(org, plainKey, fastPoller).approveActivity({ fingerprint })).rejects.toMatchObject({
      code: 9,
      message: expect.stringContaining("satisfies none of the steps"),
    });
    expect(await h.snapshot()).toBe(before);

    const done = await h.sdk(org, profiledKey, fastPoller).approveActivity({ fingerprint });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(await tagNames(root)).toEqual(["stepped up"]);
    expect((await root.getMfaStatus({ activityId: waiting.activity.id })).mfaStatuses[0]).toMatchObject({
      satisfied: true,
      satisfiedMethods: [
        { type: API_KEY, id: org.apiKeyId },
        { type: SESSION, id: sessionProfileId },
      ],
    });
  });

  it("runs an activity no MFA policy matches at once, and stops asking once the policy is deleted", async () => {
    const { org, root } = await rootWithThreeCredentials();
    const { mfaPolicyId } = await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "passkey for tags",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [step(PASSKEY)],
      order: 0,
    });
    const other = await root.createPrivateKeyTag({ privateKeyTagName: "unguarded", privateKeyIds: [] });
    expect(other.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect((await root.getMfaStatus({ activityId: other.activity.id })).mfaStatuses).toEqual([]);
    const waiting = await root.createUserTag({ userTagName: "first", userIds: [] });
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");

    await root.deleteMfaPolicy({ userId: org.userId, mfaPolicyId });
    expect((await root.getMfaPolicies({ userId: org.userId })).mfaPolicies).toEqual([]);
    const now = await root.createUserTag({ userTagName: "second", userIds: [] });
    expect(now.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    // The activity submitted before still waits for the steps its policy asked for then.
    expect((await root.getActivity({ activityId: waiting.activity.id })).activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect(await tagNames(root)).toEqual(["second"]);
  });

  it("enforces only the first matching policy by order, and follows a change of order", async () => {
    const { org, root, withPasskey } = await rootWithThreeCredentials();
    const { mfaPolicyId: catchAll } = await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "everything needs an API key",
      condition: "true",
      requiredAuthenticationMethods: [step(API_KEY)],
      order: 1,
    });
    const { mfaPolicyId: strict } = await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "tags need key and passkey",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [step(API_KEY), step(PASSKEY)],
      order: 0,
    });
    expect((await root.getMfaPolicies({ userId: org.userId })).mfaPolicies.map((p: { mfaPolicyId: string }) => p.mfaPolicyId)).toEqual([
      strict,
      catchAll,
    ]);
    const tag = await root.createUserTag({ userTagName: "strict", userIds: [] });
    expect(tag.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect((await root.getMfaStatus({ activityId: tag.activity.id })).mfaStatuses[0].mfaPolicyId).toBe(strict);
    const other = await root.createPrivateKeyTag({ privateKeyTagName: "caught", privateKeyIds: [] });
    expect(other.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect((await root.getMfaStatus({ activityId: other.activity.id })).mfaStatuses[0]).toMatchObject({
      mfaPolicyId: catchAll,
      satisfied: true,
    });
    // The catch-all asks a passkey request for an API key.
    const byPasskey = await withPasskey((client) => client.createPrivateKeyTag({ privateKeyTagName: "by passkey", privateKeyIds: [] }));
    expect(byPasskey.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect((await root.approveActivity({ fingerprint: byPasskey.activity.fingerprint })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");

    // Moved after the catch-all, the strict policy is never reached for tags.
    await root.updateMfaPolicy({ userId: org.userId, mfaPolicyId: strict, order: 2 });
    const { mfaPolicy } = await root.getMfaPolicy({ userId: org.userId, mfaPolicyId: strict });
    expect(mfaPolicy).toMatchObject({ order: 2, mfaPolicyName: "tags need key and passkey", condition: CREATE_USER_TAG });
    const relaxed = await root.createUserTag({ userTagName: "relaxed", userIds: [] });
    expect(relaxed.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect((await root.getMfaStatus({ activityId: relaxed.activity.id })).mfaStatuses[0].mfaPolicyId).toBe(catchAll);
    expect(await tagNames(root)).toEqual(["relaxed"]);
  });

  it("fails an activity that cannot wait (its result is a credential) when the request does not satisfy the policy", async () => {
    const { org, root } = await rootWithThreeCredentials();
    await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "sessions need a passkey",
      condition: "activity.type == 'ACTIVITY_TYPE_CREATE_READ_ONLY_SESSION'",
      requiredAuthenticationMethods: [step(PASSKEY)],
      order: 0,
    });
    const { failure } = await refusedLeavingOnlyItsActivity(h, () => root.createReadOnlySession({}), {
      code: 9,
      message: expect.stringContaining("returns a credential and cannot wait for it"),
    });
    expect(failure.details[0].turnkeyErrorCode).toBe("AUTHENTICATORS_NOT_SUPPORTED");
  });
});

describe("an approver's MFA policy", () => {
  it("holds the approver's vote back until their own approvals have proven its steps", async () => {
    const { org, root, members } = await organizationWith(h, ["alice", "bob"]);
    const bob = members.bob!;
    const bobSecond = newKeyPair();
    const {
      apiKeyIds: [bobSecondId],
    } = await root.createApiKeys({
      userId: bob.userId,
      apiKeys: [{ apiKeyName: "bob's other key", publicKey: bobSecond.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    await root.createPolicy({
      policyName: "two approve tags",
      effect: "EFFECT_ALLOW",
      condition: CREATE_USER_TAG,
      consensus: "approvers.count() >= 2",
      notes: "",
    });
    const { mfaPolicyId } = await root.createMfaPolicy({
      userId: bob.userId,
      mfaPolicyName: "bob approves with two keys",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [step(API_KEY), step(API_KEY)],
      order: 0,
    });
    const proposed = await members.alice!.client.createUserTag({ userTagName: "agreed", userIds: [] });
    expect(proposed.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const { fingerprint, id: activityId } = proposed.activity;

    const held = await bob.client.approveActivity({ fingerprint });
    expect(held.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect((await root.getActivity({ activityId })).activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    expect(await tagNames(root)).toEqual([]);
    const bobKeyId = (await root.getUser({ userId: bob.userId })).user.apiKeys.find((k) => k.apiKeyId !== bobSecondId)!.apiKeyId;
    const pending = {
      mfaPolicyId,
      userId: bob.userId,
      satisfied: false,
      satisfiedMethods: [{ type: API_KEY, id: bobKeyId }],
      requiredMethods: [{ any: [{ type: API_KEY }] }, { any: [{ type: API_KEY }] }],
    };
    // The requester had no MFA policy: only the approver is listed.
    expect((await root.getMfaStatus({ activityId })).mfaStatuses).toEqual([pending]);
    const before = await h.snapshot();
    expect((await bob.client.approveActivity({ fingerprint })).activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect(await h.snapshot()).toBe(before);

    const done = await h.sdk(org, bobSecond).approveActivity({ fingerprint });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(done.activity.votes.map((v: { userId: string }) => v.userId)).toEqual([members.alice!.userId, bob.userId]);
    expect(await tagNames(root)).toEqual(["agreed"]);
    expect((await root.getMfaStatus({ activityId, userId: bob.userId })).mfaStatuses[0]).toMatchObject({
      satisfied: true,
      satisfiedMethods: [
        { type: API_KEY, id: bobKeyId },
        { type: API_KEY, id: bobSecondId },
      ],
    });
    // Deleting the user deletes their MFA policies; what their authentication proved stays in the log.
    await root.deleteUsers({ userIds: [bob.userId] });
    expect(await h.server.store.db.selectFrom("mfa_policies").select("id").where("user_id", "=", bob.userId).execute()).toEqual([]);
    expect((await root.getMfaStatus({ activityId })).mfaStatuses).toHaveLength(1);
  });
});

/** Every table but the activities and their evaluations, as a snapshot holds it: what a vote that
 * only decides an activity (fails or rejects it) must leave as it was. */
async function beyondActivities(): Promise<Record<string, string[]>> {
  const tables = JSON.parse(await h.snapshot()) as Record<string, string[]>;
  delete tables.activities;
  delete tables.policy_evaluations;
  return tables;
}

/** A non-root user holding keys k1, k2 (and k3), whom a policy lets create user tags, and whose MFA
 * policy asks every activity for two API keys. */
async function userWithTwoKeySteps() {
  const org = await h.organization();
  const root = h.sdk(org, org.key, fastPoller);
  const keys = [newKeyPair(), newKeyPair(), newKeyPair()];
  const {
    userIds: [userId],
  } = await root.createUsers({
    users: [
      {
        userName: "u",
        apiKeys: keys.map((key, i) => ({ apiKeyName: `k${i + 1}`, publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" as const })),
        ...noCredentials,
      },
    ],
  });
  await root.createPolicy({ policyName: "tags", effect: "EFFECT_ALLOW", condition: CREATE_USER_TAG, notes: "" });
  await root.createMfaPolicy({
    userId: userId!,
    mfaPolicyName: "two keys",
    condition: "true",
    requiredAuthenticationMethods: [step(API_KEY), step(API_KEY)],
    order: 0,
  });
  const { user } = await root.getUser({ userId: userId! });
  const keyIds = ["k1", "k2", "k3"].map((name) => user.apiKeys.find((k) => k.apiKeyName === name)!.apiKeyId);
  const via = keys.map((key) => h.sdk(org, key, fastPoller));
  return { org, root, userId: userId!, keyIds, via };
}

describe("an activity waiting for its requester's authentication, when credentials go", () => {
  it("fails, running nothing, when the key that made the request is deleted before the last step is proven", async () => {
    const { root, userId, keyIds, via } = await userWithTwoKeySteps();
    const waiting = await via[0]!.createUserTag({ userTagName: "stolen", userIds: [] });
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    await root.deleteApiKeys({ userId, apiKeyIds: [keyIds[0]!] });
    const before = await beyondActivities();
    // The approval is answered with the activity as it now stands: failed, with the reason.
    const failed = await via[1]!.approveActivity({ fingerprint: waiting.activity.fingerprint });
    expect(failed.activity.status).toBe("ACTIVITY_STATUS_FAILED");
    expect((failed.activity as any).failure).toMatchObject({ details: [{ turnkeyErrorCode: "REQUESTING_CREDENTIAL_GONE" }] });
    expect(await beyondActivities()).toEqual(before);
    expect(await tagNames(root)).toEqual([]);
    const row = await h.server.store.db
      .selectFrom("activities")
      .select("failure")
      .where("id", "=", waiting.activity.id)
      .executeTakeFirstOrThrow();
    const failure = JSON.parse(row.failure!);
    expect(failure.details[0].turnkeyErrorCode).toBe("REQUESTING_CREDENTIAL_GONE");
    expect(failure.message).toContain(`credential ${keyIds[0]}, which stamped the request, was deleted or has expired`);
    // It stays failed: another approval is answered as it stands and runs nothing.
    const afterFailure = await h.snapshot();
    expect((await via[2]!.approveActivity({ fingerprint: waiting.activity.fingerprint })).activity.status).toBe("ACTIVITY_STATUS_FAILED");
    expect(await h.snapshot()).toBe(afterFailure);
    expect(await tagNames(root)).toEqual([]);
  });

  it("fails a root user's request whose key is deleted with that reason, not a policy denial", async () => {
    const org = await h.organization();
    const root = h.sdk(org, org.key, fastPoller);
    const [k1, k2] = [newKeyPair(), newKeyPair()];
    const { apiKeyIds } = await root.createApiKeys({
      userId: org.userId,
      apiKeys: [
        { apiKeyName: "k1", publicKey: k1.publicKey, curveType: "API_KEY_CURVE_P256" },
        { apiKeyName: "k2", publicKey: k2.publicKey, curveType: "API_KEY_CURVE_P256" },
      ],
    });
    await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "two keys",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [step(API_KEY), step(API_KEY)],
      order: 0,
    });
    const waiting = await h.sdk(org, k1, fastPoller).createUserTag({ userTagName: "t", userIds: [] });
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    await root.deleteApiKeys({ userId: org.userId, apiKeyIds: [apiKeyIds[0]!] });
    const before = await beyondActivities();
    const answer = await h.sdk(org, k2, fastPoller).approveActivity({ fingerprint: waiting.activity.fingerprint });
    expect(answer.activity.status).toBe("ACTIVITY_STATUS_FAILED");
    expect(await beyondActivities()).toEqual(before);
    const row = await h.server.store.db
      .selectFrom("activities")
      .select(["status", "failure"])
      .where("id", "=", waiting.activity.id)
      .executeTakeFirstOrThrow();
    expect(row.status).toBe("ACTIVITY_STATUS_FAILED");
    expect(JSON.parse(row.failure!).details[0].turnkeyErrorCode).toBe("REQUESTING_CREDENTIAL_GONE");
    expect(await tagNames(root)).toEqual([]);
  });

  it("no longer counts a step proven by a key deleted since: it must be proven again", async () => {
    const org = await h.organization();
    const root = h.sdk(org, org.key, fastPoller);
    const [k2, k3, k4] = [newKeyPair(), newKeyPair(), newKeyPair()];
    const { apiKeyIds } = await root.createApiKeys({
      userId: org.userId,
      apiKeys: [
        { apiKeyName: "k2", publicKey: k2.publicKey, curveType: "API_KEY_CURVE_P256" },
        { apiKeyName: "k3", publicKey: k3.publicKey, curveType: "API_KEY_CURVE_P256" },
      ],
    });
    const [k2Id, k3Id] = apiKeyIds as [string, string];
    const { mfaPolicyId } = await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "three keys",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [step(API_KEY), step(API_KEY), step(API_KEY)],
      order: 0,
    });
    const waiting = await root.createUserTag({ userTagName: "t", userIds: [] });
    const { fingerprint, id: activityId } = waiting.activity;
    expect((await h.sdk(org, k2, fastPoller).approveActivity({ fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED",
    );
    await root.deleteApiKeys({ userId: org.userId, apiKeyIds: [k2Id] });
    // k3 proves a step, but k2's proof is gone: two live keys prove two of the three steps.
    expect((await h.sdk(org, k3, fastPoller).approveActivity({ fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED",
    );
    expect(await tagNames(root)).toEqual([]);
    expect((await root.getMfaStatus({ activityId })).mfaStatuses).toEqual([
      {
        mfaPolicyId,
        userId: org.userId,
        satisfied: false,
        satisfiedMethods: [
          { type: API_KEY, id: org.apiKeyId },
          { type: API_KEY, id: k3Id },
        ],
        requiredMethods: [{ any: [{ type: API_KEY }] }, { any: [{ type: API_KEY }] }, { any: [{ type: API_KEY }] }],
      },
    ]);
    // A third live key proves the last step.
    const {
      apiKeyIds: [k4Id],
    } = await root.createApiKeys({
      userId: org.userId,
      apiKeys: [{ apiKeyName: "k4", publicKey: k4.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    expect((await h.sdk(org, k4, fastPoller).approveActivity({ fingerprint })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(await tagNames(root)).toEqual(["t"]);
    expect((await root.getMfaStatus({ activityId })).mfaStatuses[0]).toMatchObject({
      satisfied: true,
      satisfiedMethods: [
        { type: API_KEY, id: org.apiKeyId },
        { type: API_KEY, id: k3Id },
        { type: API_KEY, id: k4Id },
      ],
    });
  });
});

describe("an activity waiting for its requester's authentication, when credentials expire", () => {
  it("drops the proof of a key expired since, and fails the activity once the key that made the request has expired", async () => {
    let now = Date.now();
    // The liveness window is widened so the clients' own timestamps are accepted by the moved clock.
    const clocked = await startHarness({ SIGIL_TIMESTAMP_WINDOW_SECONDS: String(24 * 3600) }, { clock: () => now });
    try {
      const org = await clocked.organization();
      const root = clocked.sdk(org, org.key, fastPoller);
      const [brief, lasting, third] = [newKeyPair(), newKeyPair(), newKeyPair()];
      const { apiKeyIds } = await root.createApiKeys({
        userId: org.userId,
        apiKeys: [
          { apiKeyName: "brief", publicKey: brief.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "60" },
          { apiKeyName: "lasting", publicKey: lasting.publicKey, curveType: "API_KEY_CURVE_P256" },
          { apiKeyName: "third", publicKey: third.publicKey, curveType: "API_KEY_CURVE_P256" },
        ],
      });
      const [, lastingId] = apiKeyIds as [string, string, string];
      await root.createMfaPolicy({
        userId: org.userId,
        mfaPolicyName: "three keys",
        condition: CREATE_USER_TAG,
        requiredAuthenticationMethods: [step(API_KEY), step(API_KEY), step(API_KEY)],
        order: 0,
      });
      // A step proven by the brief key no longer counts once it has expired.
      const proven = await root.createUserTag({ userTagName: "proven", userIds: [] });
      const viaBrief = clocked.sdk(org, brief, fastPoller);
      expect((await viaBrief.approveActivity({ fingerprint: proven.activity.fingerprint })).activity.status).toBe(
        "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED",
      );
      // The brief key also makes a request of its own, which then waits.
      const requested = await viaBrief.createUserTag({ userTagName: "requested", userIds: [] });
      expect(requested.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
      now += 61_000;
      const viaLasting = clocked.sdk(org, lasting, fastPoller);
      expect((await viaLasting.approveActivity({ fingerprint: proven.activity.fingerprint })).activity.status).toBe(
        "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED",
      );
      expect((await root.getMfaStatus({ activityId: proven.activity.id })).mfaStatuses[0].satisfiedMethods).toEqual([
        { type: API_KEY, id: org.apiKeyId },
        { type: API_KEY, id: lastingId },
      ]);
      const done = await clocked.sdk(org, third, fastPoller).approveActivity({ fingerprint: proven.activity.fingerprint });
      expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");

      const failed = await viaLasting.approveActivity({ fingerprint: requested.activity.fingerprint });
      expect(failed.activity.status).toBe("ACTIVITY_STATUS_FAILED");
      expect((failed.activity as any).failure).toMatchObject({ details: [{ turnkeyErrorCode: "REQUESTING_CREDENTIAL_GONE" }] });
      expect((await root.listUserTags({})).userTags.map((t) => t.tagName)).toEqual(["proven"]);
    } finally {
      await clocked.close();
    }
  });
});

describe("rejecting an activity waiting for its requester's authentication", () => {
  it("the requester withdraws it with another of their keys: rejected, nothing runs, and it stays so", async () => {
    const { root, userId, via } = await userWithTwoKeySteps();
    const waiting = await via[0]!.createUserTag({ userTagName: "withdrawn", userIds: [] });
    const { fingerprint, id: activityId } = waiting.activity;
    const before = await beyondActivities();
    const rejected = await via[1]!.rejectActivity({ fingerprint });
    expect(rejected.activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    expect(await beyondActivities()).toEqual(before);
    expect(rejected.activity.votes.map((v: { userId: string; selection: string }) => [v.userId, v.selection])).toEqual([
      [userId, "VOTE_SELECTION_APPROVED"],
      [userId, "VOTE_SELECTION_REJECTED"],
    ]);
    // The rejection sent again is answered as the activity stands; an approval now changes nothing.
    expect((await via[1]!.rejectActivity({ fingerprint })).activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    const afterRejection = await h.snapshot();
    await expect(via[2]!.approveActivity({ fingerprint })).rejects.toMatchObject({
      code: 9,
      message: expect.stringContaining("VOTE_ALREADY_CAST"),
    });
    expect(await h.snapshot()).toBe(afterRejection);
    expect((await root.getActivity({ activityId })).activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    expect(await tagNames(root)).toEqual([]);
  });

  it("the root quorum rejects it: one member of a one-member quorum at once, a two-member quorum once both have", async () => {
    const { root, via, org } = await userWithTwoKeySteps();
    const first = await via[0]!.createUserTag({ userTagName: "first", userIds: [] });
    const before = await beyondActivities();
    expect((await root.rejectActivity({ fingerprint: first.activity.fingerprint })).activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    expect(await beyondActivities()).toEqual(before);

    const second = newKeyPair();
    const {
      userIds: [secondRoot],
    } = await root.createUsers({
      users: [
        {
          userName: "second root",
          apiKeys: [{ apiKeyName: "k", publicKey: second.publicKey, curveType: "API_KEY_CURVE_P256" }],
          ...noCredentials,
        },
      ],
    });
    await root.updateRootQuorum({ threshold: 2, userIds: [org.userId, secondRoot!] });
    const waiting = await via[0]!.createUserTag({ userTagName: "second", userIds: [] });
    const { fingerprint, id: activityId } = waiting.activity;
    const noted = await root.rejectActivity({ fingerprint });
    expect(noted.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    // Sent again, the same rejection changes nothing.
    const afterOne = await h.snapshot();
    expect((await root.rejectActivity({ fingerprint })).activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect(await h.snapshot()).toBe(afterOne);
    expect((await h.sdk(org, second, fastPoller).rejectActivity({ fingerprint })).activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    expect((await root.getActivity({ activityId })).activity.votes).toHaveLength(3);
    expect(await tagNames(root)).toEqual([]);
  });
});

describe("an activity that cannot wait for its requester's authentication", () => {
  it("fails an import (it carries secrets) the policy applies to, leaving the import target to be used", async () => {
    const org = await h.organization();
    const root = h.sdk(org, org.key, fastPoller);
    await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "imports need two keys",
      condition: "activity.type == 'ACTIVITY_TYPE_IMPORT_WALLET'",
      requiredAuthenticationMethods: [step(API_KEY), step(API_KEY)],
      order: 0,
    });
    const { importBundle } = await root.initImportWallet({ userId: org.userId });
    const mnemonic = "abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon abandon about";
    const encryptedBundle = await encryptWalletToBundle({
      mnemonic,
      importBundle,
      userId: org.userId,
      organizationId: org.organizationId,
      dangerouslyOverrideSignerPublicKey: await signerPublicKeyOf(h.url),
    });
    const account = {
      curve: "CURVE_SECP256K1",
      pathFormat: "PATH_FORMAT_BIP32",
      path: "m/44'/60'/0'/0/0",
      addressFormat: "ADDRESS_FORMAT_ETHEREUM",
    } as const;
    const { id, failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => root.importWallet({ userId: org.userId, walletName: "imported", encryptedBundle, accounts: [account] }),
      { code: 9, message: expect.stringContaining("carries secrets and cannot wait for it") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("AUTHENTICATORS_NOT_SUPPORTED");
    expect(
      await h.server.store.db.selectFrom("activity_authentications").select("activity_id").where("activity_id", "=", id).execute(),
    ).toEqual([]);
    expect(JSON.stringify(await h.server.store.db.selectFrom("activities").selectAll().where("id", "=", id).execute())).not.toContain(
      encryptedBundle,
    );
    expect((await root.getWallets({})).wallets).toEqual([]);
  });

  it("fails a parent organization's request in a sub-organization the parent user's policy applies to", async () => {
    const org = await h.organization();
    const root = h.sdk(org, org.key, fastPoller);
    const { subOrganizationId } = await root.createSubOrganization({
      subOrganizationName: "end user",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "u",
          userEmail: "u@example.com",
          apiKeys: [{ apiKeyName: "k", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "logins need two keys",
      condition: "activity.resource == 'OTP'",
      requiredAuthenticationMethods: [step(API_KEY), step(API_KEY)],
      order: 0,
    });
    const { id, failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => root.initOtp({ organizationId: subOrganizationId, otpType: "OTP_TYPE_EMAIL", contact: "u@example.com", appName: "Demo" }),
      { code: 9, message: expect.stringContaining("requested by the parent organization cannot wait for it") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("AUTHENTICATORS_NOT_SUPPORTED");
    const row = await h.server.store.db.selectFrom("activities").select("organization_id").where("id", "=", id).executeTakeFirstOrThrow();
    expect(row.organization_id).toBe(subOrganizationId);
  });
});

describe("approvals of a waiting activity at the same time", () => {
  for (const same of [false, true]) {
    it(`run it exactly once (${same ? "the same key twice" : "two proving keys"})`, async () => {
      const org = await h.organization();
      const root = h.sdk(org, org.key, fastPoller);
      const [k2, k3] = [newKeyPair(), newKeyPair()];
      await root.createApiKeys({
        userId: org.userId,
        apiKeys: [
          { apiKeyName: "k2", publicKey: k2.publicKey, curveType: "API_KEY_CURVE_P256" },
          { apiKeyName: "k3", publicKey: k3.publicKey, curveType: "API_KEY_CURVE_P256" },
        ],
      });
      await root.createMfaPolicy({
        userId: org.userId,
        mfaPolicyName: "two keys",
        condition: CREATE_USER_TAG,
        requiredAuthenticationMethods: [step(API_KEY), step(API_KEY)],
        order: 0,
      });
      const waiting = await root.createUserTag({ userTagName: "once", userIds: [] });
      const { fingerprint, id: activityId } = waiting.activity;
      const answers = await Promise.all([
        h.sdk(org, k2, fastPoller).approveActivity({ fingerprint }),
        h.sdk(org, same ? k2 : k3, fastPoller).approveActivity({ fingerprint }),
      ]);
      expect(answers.map((a) => a.activity.status)).toEqual(["ACTIVITY_STATUS_COMPLETED", "ACTIVITY_STATUS_COMPLETED"]);
      expect(await tagNames(root)).toEqual(["once"]);
      const evaluations = await h.server.store.db
        .selectFrom("policy_evaluations")
        .select("id")
        .where("activity_id", "=", activityId)
        .execute();
      // The submission and the approval that completed it: the other was answered as it stood.
      expect(evaluations).toHaveLength(2);
      expect((await root.getMfaStatus({ activityId })).mfaStatuses[0].satisfiedMethods).toHaveLength(2);
    });
  }
});

describe("who may manage MFA policies", () => {
  it("is decided by policies on activity.resource 'MFA_POLICY' and its actions", async () => {
    const org = await h.organization();
    const root = h.sdk(org, org.key, fastPoller);
    const key = newKeyPair();
    const {
      userIds: [delegate],
    } = await root.createUsers({
      users: [
        {
          userName: "delegate",
          apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          ...noCredentials,
        },
      ],
    });
    await root.createPolicy({
      policyName: "delegate creates MFA policies",
      effect: "EFFECT_ALLOW",
      condition: `activity.resource == 'MFA_POLICY' && activity.action == 'CREATE'`,
      consensus: `approvers.any(user, user.id == '${delegate}')`,
      notes: "",
    });
    const client = h.sdk(org, key, fastPoller);
    const { mfaPolicyId } = await client.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "from the delegate",
      condition: "activity.action == 'SIGN'",
      requiredAuthenticationMethods: [step(API_KEY)],
      order: 0,
    });
    expect(mfaPolicyId).toBeTruthy();
    const { failure } = await refusedLeavingOnlyItsActivity(h, () => client.deleteMfaPolicy({ userId: org.userId, mfaPolicyId }), {
      code: 7,
    });
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
    expect((await root.getMfaPolicies({ userId: org.userId })).mfaPolicies).toHaveLength(1);
  });
});

describe("bad input", () => {
  let org: Awaited<ReturnType<Harness["organization"]>>;
  let root: ReturnType<Harness["sdk"]>;
  let mfaPolicyId: string;
  let stranger: { organizationId: string; userId: string; mfaPolicyId: string; sessionProfileId: string };
  let otherUserPasskey: string;
  const valid = () => ({
    userId: org.userId,
    mfaPolicyName: "valid",
    condition: "true",
    requiredAuthenticationMethods: [step(API_KEY)],
    order: 0,
  });

  beforeAll(async () => {
    org = await h.organization();
    root = h.sdk(org, org.key, fastPoller);
    // A policy that never matches, so the refusals below are not themselves asked for more.
    ({ mfaPolicyId } = await root.createMfaPolicy({ ...valid(), condition: "activity.action == 'EXPORT'" }));
    const other = await h.organization();
    const otherRoot = h.sdk(other, other.key, fastPoller);
    const created = await otherRoot.createMfaPolicy({ ...valid(), userId: other.userId, condition: "false" });
    const { sessionProfileId } = await otherRoot.createSessionProfile({ sessionProfileName: "theirs", scope: "true" });
    stranger = { organizationId: other.organizationId, userId: other.userId, mfaPolicyId: created.mfaPolicyId, sessionProfileId };
    const passkey = new SoftwarePasskey();
    const registration = passkey.register();
    ({
      authenticatorIds: [otherUserPasskey],
    } = await otherRoot.createAuthenticators({
      userId: other.userId,
      authenticators: [{ authenticatorName: "theirs", challenge: registration.challenge, attestation: registration.attestation as any }],
    }));
  });

  const refused = async (attempt: () => Promise<unknown>, code: number, errorCode: string, message: string | RegExp) => {
    const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, {
      code,
      message: typeof message === "string" ? expect.stringContaining(message) : expect.stringMatching(message),
    });
    expect(failure.details[0].turnkeyErrorCode).toBe(errorCode);
  };

  it("refuses a condition that does not compile, with the policy compiler's words", async () => {
    await refused(
      () => root.createMfaPolicy({ ...valid(), condition: "activity.type ==" }),
      3,
      "POLICY_INVALID",
      "expected a value but found end of input",
    );
    await refused(
      () => root.createMfaPolicy({ ...valid(), condition: "activity.type == 1" }),
      3,
      "POLICY_INVALID",
      "cannot compare string with int",
    );
    await refused(() => root.createMfaPolicy({ ...valid(), condition: "activity.type" }), 3, "POLICY_INVALID", "must be a bool expression");
    await refused(() => root.createMfaPolicy({ ...valid(), condition: "  " }), 3, "POLICY_INVALID", "condition must not be empty");
    await refused(
      () => root.updateMfaPolicy({ userId: org.userId, mfaPolicyId, condition: "activity.bogus == 'x'" }),
      3,
      "POLICY_INVALID",
      'Activity has no field "bogus"',
    );
  });

  it("refuses an unknown user and another organization's user or policy", async () => {
    await refused(
      () => root.createMfaPolicy({ ...valid(), userId: "00000000-0000-4000-8000-000000000000" }),
      5,
      "USER_NOT_FOUND",
      "not found",
    );
    await refused(() => root.createMfaPolicy({ ...valid(), userId: stranger.userId }), 5, "USER_NOT_FOUND", stranger.userId);
    await refused(
      () => root.updateMfaPolicy({ userId: stranger.userId, mfaPolicyId: stranger.mfaPolicyId, order: 3 }),
      5,
      "USER_NOT_FOUND",
      stranger.userId,
    );
    await refused(
      () => root.deleteMfaPolicy({ userId: org.userId, mfaPolicyId: stranger.mfaPolicyId }),
      5,
      "MFA_POLICY_NOT_FOUND",
      stranger.mfaPolicyId,
    );
    await refused(
      () => root.createMfaPolicy({ ...valid(), requiredAuthenticationMethods: [{ any: [{ type: PASSKEY, id: otherUserPasskey }] }] }),
      3,
      "REQUEST_INVALID",
      `is not a AUTHENTICATION_TYPE_PASSKEY credential of user ${org.userId}`,
    );
    const before = await h.snapshot();
    await expect(root.getMfaPolicy({ userId: org.userId, mfaPolicyId: stranger.mfaPolicyId })).rejects.toMatchObject({
      code: 5,
      message: expect.stringContaining("MFA policy"),
    });
    await expect(root.getMfaPolicies({ userId: stranger.userId })).rejects.toMatchObject({ code: 5 });
    expect(await h.snapshot()).toBe(before);
  });

  it("refuses update and delete of an MFA policy that does not exist", async () => {
    const missing = "00000000-0000-4000-8000-000000000001";
    await refused(() => root.updateMfaPolicy({ userId: org.userId, mfaPolicyId: missing, order: 1 }), 5, "MFA_POLICY_NOT_FOUND", missing);
    await refused(() => root.deleteMfaPolicy({ userId: org.userId, mfaPolicyId: missing }), 5, "MFA_POLICY_NOT_FOUND", missing);
  });

  it("refuses no steps, an empty step, a method with an id it cannot have or an unknown session profile, a step nothing here can verify, and a negative order", async () => {
    await refused(() => root.createMfaPolicy({ ...valid(), requiredAuthenticationMethods: [] }), 3, "REQUEST_INVALID", "at least one step");
    await refused(
      () => root.updateMfaPolicy({ userId: org.userId, mfaPolicyId, requiredAuthenticationMethods: [step(API_KEY), { any: [] }] }),
      3,
      "REQUEST_INVALID",
      "requiredAuthenticationMethods[1].any must list at least one method",
    );
    await refused(
      () =>
        root.createMfaPolicy({
          ...valid(),
          requiredAuthenticationMethods: [{ any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP", id: "x" }] }],
        }),
      3,
      "REQUEST_INVALID",
      "has no id",
    );
    await refused(
      () =>
        root.createMfaPolicy({
          ...valid(),
          requiredAuthenticationMethods: [{ any: [{ type: "AUTHENTICATION_TYPE_SESSION", id: "11111111-1111-1111-1111-111111111111" }] }],
        }),
      5,
      "SESSION_PROFILE_NOT_FOUND",
      "no session profile 11111111-1111-1111-1111-111111111111",
    );
    // Another organization's session profile is as unknown.
    await refused(
      () =>
        root.createMfaPolicy({
          ...valid(),
          requiredAuthenticationMethods: [{ any: [{ type: "AUTHENTICATION_TYPE_SESSION", id: stranger.sessionProfileId }] }],
        }),
      5,
      "SESSION_PROFILE_NOT_FOUND",
      `no session profile ${stranger.sessionProfileId}`,
    );
    await refused(() => root.createMfaPolicy({ ...valid(), order: -1 }), 3, "REQUEST_INVALID", "order must be a whole number from 0");
    await refused(
      () => root.createMfaPolicy({ ...valid(), requiredAuthenticationMethods: Array.from({ length: 11 }, () => step(API_KEY)) }),
      3,
      "REQUEST_INVALID",
      "lists 11 steps; at most 10",
    );
    await refused(
      () =>
        root.createMfaPolicy({
          ...valid(),
          requiredAuthenticationMethods: [{ any: Array.from({ length: 11 }, () => ({ type: API_KEY })) }],
        }),
      3,
      "REQUEST_INVALID",
      "lists 11 methods; at most 10",
    );
    await refused(
      () => root.updateMfaPolicy({ userId: org.userId, mfaPolicyId, mfaPolicyName: " " }),
      3,
      "REQUEST_INVALID",
      "mfaPolicyName must not be empty",
    );
  });

  it("refuses an unknown authentication method before recording anything", async () => {
    const before = await h.snapshot();
    const { body, headers } = signedRequest(
      {
        type: "ACTIVITY_TYPE_CREATE_MFA_POLICY",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: { ...valid(), requiredAuthenticationMethods: [{ any: [{ type: "AUTHENTICATION_TYPE_CARRIER_PIGEON" }] }] },
      },
      org.key,
    );
    const response = await h.post("/public/v1/submit/create_mfa_policy", body, headers);
    expect(response.status).toBe(400);
    expect(response.json.details[0].turnkeyErrorCode).toBe("REQUEST_INVALID");
    expect(response.json.message).toContain("type");
    expect(await h.snapshot()).toBe(before);
  });

  it("answers get_mfa_status for an unknown activity with ACTIVITY_NOT_FOUND", async () => {
    await expect(root.getMfaStatus({ activityId: "00000000-0000-4000-8000-000000000002" })).rejects.toMatchObject({ code: 5 });
  });
});
