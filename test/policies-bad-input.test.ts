// Bad input to the policy engine: policies, the root quorum, and votes. Every refusal names the
// problem and changes nothing. A refused activity is still recorded, as one FAILED activity (with its
// policy evaluation); a refused vote is not an activity, so for it nothing at all changes.
// Also: racing approvals run the activity exactly once (across two servers on PostgreSQL), and a
// passkey-only user approves through @turnkey/sdk-server with the real WebauthnStamper.
import crypto from "node:crypto";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Turnkey, TurnkeyServerClient } from "@turnkey/sdk-server";
import { WebauthnStamper } from "@turnkey/webauthn-stamper";
import { startServer } from "../src/http/server.js";
import { newKeyPair, signedRequest, startHarness, type ApiKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { SoftwarePasskey } from "./helpers/passkey.js";
import { fastPoller, noCredentials, organizationWith, type Member } from "./helpers/organizations.js";
import { backend } from "./helpers/backend.js";

const FAILED = "ACTIVITY_STATUS_FAILED";
const PENDING = "ACTIVITY_STATUS_CONSENSUS_NEEDED";
const COMPLETED = "ACTIVITY_STATUS_COMPLETED";

type Client = ReturnType<Harness["sdk"]>;

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h?.close());

/** @turnkey/sdk-server's API client for `key`, pointed at the server at `url`. */
function clientAt(url: string, org: { organizationId: string }, key: ApiKeyPair): Client {
  return new Turnkey({
    apiBaseUrl: url,
    apiPublicKey: key.publicKey,
    apiPrivateKey: key.privateKey,
    defaultOrganizationId: org.organizationId,
    ...fastPoller,
  }).apiClient();
}

/**
 * An organization where creating users needs `needed` approvals from users tagged "approvers"
 * (ann, ben, cat); "outsider" is neither tagged nor root. Ann has asked to create a user, so that
 * activity is pending with her approval.
 */
async function pendingCreateUsers(needed = 2) {
  const setup = await organizationWith(h, ["ann", "ben", "cat", "outsider"]);
  const { root, members } = setup;
  const { userTagId } = await root.createUserTag({
    userTagName: "approvers",
    userIds: [members.ann!.userId, members.ben!.userId, members.cat!.userId],
  });
  await root.createPolicy({
    policyName: `${needed} approvers create users`,
    effect: "EFFECT_ALLOW",
    consensus: `approvers.filter(user, user.tags.contains('${userTagId}')).count() >= ${needed}`,
    condition: "activity.resource == 'USER' && activity.action == 'CREATE'",
    notes: "",
  });
  const pending = await members.ann!.client.createUsers({ users: [{ userName: "newcomer", apiKeys: [], ...noCredentials }] });
  expect(pending.activity.status).toBe(PENDING);
  return { ...setup, pending: pending.activity };
}

// ---- what a refusal looks like ----------------------------------------------------------------

type Snapshot = Record<string, string[]>;
const snapshot = async (): Promise<Snapshot> => JSON.parse(await h.snapshot());

/** The error body (or sdk error) of a refusal: gRPC code, Turnkey error code, and a telling fragment. */
function refusal(code: number, turnkeyErrorCode: string, fragment: string) {
  return { code, message: expect.stringContaining(fragment), details: [expect.objectContaining({ turnkeyErrorCode })] };
}

/** A refusal that is not an activity (schema errors, votes): checks the error and that nothing at all changed. */
async function expectRefusedUnchanged(send: () => Promise<unknown>, code: number, turnkeyErrorCode: string, fragment: string) {
  const before = await h.snapshot();
  await expect(send()).rejects.toMatchObject(refusal(code, turnkeyErrorCode, fragment));
  expect(await h.snapshot()).toBe(before);
}

/** A stamped raw POST that must be refused before it becomes an activity: same checks, on the HTTP answer. */
async function expectRawRefusedUnchanged(path: string, body: unknown, key: ApiKeyPair, status: number, fragment: string) {
  const before = await h.snapshot();
  const { body: text, headers } = signedRequest(body, key);
  const response = await h.post(path, text, headers);
  expect(response.status, JSON.stringify(response.json)).toBe(status);
  expect(response.json).toMatchObject(refusal(3, "REQUEST_INVALID", fragment));
  expect(await h.snapshot()).toBe(before);
}

const added = (before: string[], after: string[]) => after.filter((row) => !before.includes(row)).map((row) => JSON.parse(row));

/**
 * An activity the operation must refuse: checks the error, that no table but the audit log
 * (activities, policy_evaluations) changed, that the audit log only gained rows, and that exactly one
 * activity was added: FAILED, of `type`, recording the same error.
 */
async function expectActivityRefused(type: string, send: () => Promise<unknown>, code: number, turnkeyErrorCode: string, fragment: string) {
  const before = await snapshot();
  await expect(send()).rejects.toMatchObject(refusal(code, turnkeyErrorCode, fragment));
  const after = await snapshot();
  const { activities: activitiesBefore, policy_evaluations: evaluationsBefore, ...restBefore } = before;
  const { activities: activitiesAfter, policy_evaluations: evaluationsAfter, ...restAfter } = after;
  expect(restAfter).toEqual(restBefore);
  expect(activitiesAfter).toEqual(expect.arrayContaining(activitiesBefore!));
  expect(evaluationsAfter).toEqual(expect.arrayContaining(evaluationsBefore!));
  const [failed, ...more] = added(activitiesBefore!, activitiesAfter!);
  expect(more).toEqual([]);
  expect(failed).toMatchObject({ type, status: FAILED });
  expect(JSON.parse(failed.failure)).toMatchObject(refusal(code, turnkeyErrorCode, fragment));
  for (const evaluation of added(evaluationsBefore!, evaluationsAfter!)) expect(evaluation.activity_id).toBe(failed.id);
}

const CREATE_POLICY_V3 = "ACTIVITY_TYPE_CREATE_POLICY_V3";
const CREATE_POLICIES = "ACTIVITY_TYPE_CREATE_POLICIES";
const UPDATE_POLICY_V2 = "ACTIVITY_TYPE_UPDATE_POLICY_V2";
const DELETE_POLICY = "ACTIVITY_TYPE_DELETE_POLICY";
const DELETE_POLICIES = "ACTIVITY_TYPE_DELETE_POLICIES";
const UPDATE_ROOT_QUORUM = "ACTIVITY_TYPE_UPDATE_ROOT_QUORUM";
const unknownId = () => crypto.randomUUID();

// ---- policies ---------------------------------------------------------------------------------

describe("create_policy", () => {
  let org: TestOrganization;
  let root: Client;
  beforeAll(async () => ({ org, root } = await organizationWith(h, [])));

  const policy = (parameters: Record<string, unknown>) => ({ policyName: "p", effect: "EFFECT_ALLOW", notes: "", ...parameters });
  const rawCreatePolicy = (parameters: Record<string, unknown>) => ({
    type: CREATE_POLICY_V3,
    timestampMs: String(Date.now()),
    organizationId: org.organizationId,
    parameters,
  });

  it("refuses a policy without policyName (schema), and nothing changes", async () => {
    const { policyName: _, ...withoutName } = policy({});
    await expectRawRefusedUnchanged(
      "/public/v1/submit/create_policy",
      rawCreatePolicy(withoutName),
      org.key,
      400,
      'missing required field "parameters.policyName"',
    );
  });

  it("refuses an effect that is not EFFECT_ALLOW or EFFECT_DENY (schema), and nothing changes", async () => {
    await expectRawRefusedUnchanged(
      "/public/v1/submit/create_policy",
      rawCreatePolicy(policy({ effect: "EFFECT_MAYBE" })),
      org.key,
      400,
      'field "parameters.effect" must be one of: EFFECT_ALLOW, EFFECT_DENY',
    );
  });

  it("refuses an unknown field in parameters, by name, and nothing changes", async () => {
    await expectRawRefusedUnchanged(
      "/public/v1/submit/create_policy",
      rawCreatePolicy(policy({ priority: 1 })),
      org.key,
      400,
      'unknown field "parameters.priority"',
    );
  });

  it.each(["", "   "])("refuses the policyName %j", async (policyName) => {
    await expectActivityRefused(
      CREATE_POLICY_V3,
      () => root.createPolicy({ policyName, effect: "EFFECT_ALLOW", notes: "" }),
      3,
      "REQUEST_INVALID",
      "policyName must not be empty",
    );
  });

  it.each([
    [
      "condition",
      "activity.kind == 'X' &&",
      "condition is not a valid policy expression: line 1, column 24: expected a value but found end of input",
    ],
    ["condition", "activity.kind == 5", "condition is not a valid policy expression: line 1, column 15: cannot compare string with int"],
    [
      "consensus",
      "approvers.any(u, u.id == 1)",
      "consensus is not a valid policy expression: line 1, column 23: cannot compare string with int",
    ],
    [
      "consensus",
      "approvers.count()",
      "consensus is not a valid policy expression: line 1, column 1: a consensus must be a bool expression",
    ],
    ["time", "time.now > ", "time is not a valid policy expression: line 1, column 12: expected a value but found end of input"],
    ["time", "time.now > 5", "time is not a valid policy expression: line 1, column 10:"],
  ])("refuses a %s that does not parse or type-check: %j", async (field, expression, message) => {
    await expectActivityRefused(
      CREATE_POLICY_V3,
      () => root.createPolicy({ policyName: "bad", effect: "EFFECT_ALLOW", notes: "", [field]: expression }),
      3,
      "POLICY_INVALID",
      message,
    );
  });

  it("refuses an expression longer than 16384 characters; 16384 is accepted", async () => {
    // Padded with spaces: a string literal is capped well below the expression's length.
    const ofLength = (n: number) => `activity.kind == 'x'${" ".repeat(n - 20)}`;
    expect(ofLength(16385)).toHaveLength(16385);
    await expectActivityRefused(
      CREATE_POLICY_V3,
      () => root.createPolicy({ policyName: "long", effect: "EFFECT_ALLOW", condition: ofLength(16385), notes: "" }),
      3,
      "POLICY_INVALID",
      "condition is not a valid policy expression: line 1, column 16385: the expression is longer than 16384 characters",
    );
    const { policyId } = await root.createPolicy({
      policyName: "just fits",
      effect: "EFFECT_ALLOW",
      condition: ofLength(16384),
      notes: "",
    });
    expect((await root.getPolicy({ policyId })).policy.condition).toHaveLength(16384);
  });
});

describe("create_policies", () => {
  let root: Client;
  beforeAll(async () => ({ root } = await organizationWith(h, [])));

  it("refuses an empty list", async () => {
    await expectActivityRefused(
      CREATE_POLICIES,
      () => root.createPolicies({ policies: [] }),
      3,
      "REQUEST_INVALID",
      "policies must not be empty",
    );
  });

  it("refuses the whole list when one policy is invalid, storing none of the valid ones", async () => {
    const valid = { policyName: "fine", effect: "EFFECT_DENY" as const, condition: "activity.action == 'DELETE'", notes: "" };
    await expectActivityRefused(
      CREATE_POLICIES,
      () =>
        root.createPolicies({
          policies: [
            valid,
            { ...valid, policyName: "broken", consensus: "approvers.count() >= 'two'" },
            { ...valid, policyName: "also fine" },
          ],
        }),
      3,
      "POLICY_INVALID",
      "policies[1].consensus is not a valid policy expression: line 1, column 19",
    );
    expect((await root.getPolicies({})).policies).toEqual([]);
  });
});

describe("update_policy", () => {
  let root: Client;
  let policyId: string;
  beforeAll(async () => {
    ({ root } = await organizationWith(h, []));
    ({ policyId } = await root.createPolicy({
      policyName: "original",
      effect: "EFFECT_ALLOW",
      condition: "activity.kind == 'CREATE_USER_TAG'",
      notes: "kept",
    }));
  });

  it("refuses an unknown policyId (NotFound)", async () => {
    const missing = unknownId();
    await expectActivityRefused(
      UPDATE_POLICY_V2,
      () => root.updatePolicy({ policyId: missing, policyName: "renamed" }),
      5,
      "POLICY_NOT_FOUND",
      `policy ${missing} not found`,
    );
  });

  it("refuses a new condition that does not parse, and the stored policy keeps its old one", async () => {
    const { policy: before } = await root.getPolicy({ policyId });
    await expectActivityRefused(
      UPDATE_POLICY_V2,
      () => root.updatePolicy({ policyId, policyName: "renamed", policyCondition: "activity.kind == " }),
      3,
      "POLICY_INVALID",
      "condition is not a valid policy expression: line 1, column 18",
    );
    expect((await root.getPolicy({ policyId })).policy).toEqual(before);
  });

  it("refuses an empty policyName", async () => {
    await expectActivityRefused(
      UPDATE_POLICY_V2,
      () => root.updatePolicy({ policyId, policyName: "" }),
      3,
      "REQUEST_INVALID",
      "policyName must not be empty",
    );
  });
});

describe("delete_policy and delete_policies", () => {
  let root: Client;
  let known: string[];
  beforeAll(async () => {
    ({ root } = await organizationWith(h, []));
    const policies = ["one", "two"].map((policyName) => ({
      policyName,
      effect: "EFFECT_DENY" as const,
      condition: "activity.action == 'DELETE'",
      notes: "",
    }));
    ({ policyIds: known } = await root.createPolicies({ policies }));
  });

  it("delete_policy refuses an unknown id (NotFound)", async () => {
    const missing = unknownId();
    await expectActivityRefused(
      DELETE_POLICY,
      () => root.deletePolicy({ policyId: missing }),
      5,
      "POLICY_NOT_FOUND",
      `policy ${missing} not found`,
    );
  });

  it("delete_policy treats another organization's policy as unknown, and leaves it alone", async () => {
    const other = await organizationWith(h, []);
    const { policyId } = await other.root.createPolicy({ policyName: "theirs", effect: "EFFECT_DENY", condition: "true", notes: "" });
    await expectActivityRefused(
      DELETE_POLICY,
      () => root.deletePolicy({ policyId }),
      5,
      "POLICY_NOT_FOUND",
      `policy ${policyId} not found`,
    );
    expect((await other.root.getPolicy({ policyId })).policy.policyName).toBe("theirs");
  });

  it("delete_policies refuses a list naming the same id twice", async () => {
    await expectActivityRefused(
      DELETE_POLICIES,
      () => root.deletePolicies({ policyIds: [known[0]!, known[1]!, known[0]!] }),
      3,
      "REQUEST_INVALID",
      `policyIds lists ${known[0]} more than once`,
    );
  });

  it("delete_policies refuses an empty list", async () => {
    await expectActivityRefused(
      DELETE_POLICIES,
      () => root.deletePolicies({ policyIds: [] }),
      3,
      "REQUEST_INVALID",
      "policyIds must not be empty",
    );
  });

  it("delete_policies with one unknown id among known ones deletes none (NotFound)", async () => {
    const missing = unknownId();
    await expectActivityRefused(
      DELETE_POLICIES,
      () => root.deletePolicies({ policyIds: [known[0]!, missing, known[1]!] }),
      5,
      "POLICY_NOT_FOUND",
      `policy ${missing} not found`,
    );
    expect((await root.getPolicies({})).policies.map((p) => p.policyId)).toEqual(known);
  });
});

// ---- root quorum ------------------------------------------------------------------------------

describe("update_root_quorum", () => {
  let org: TestOrganization;
  let root: Client;
  let x: Member;
  beforeAll(async () => {
    let members: Record<string, Member>;
    ({ org, root, members } = await organizationWith(h, ["x"]));
    x = members.x!;
  });

  /** Refused; and (besides everything expectActivityRefused checks) the quorum is still the root user alone. */
  async function expectQuorumRefused(
    params: { threshold: number; userIds: string[] },
    code: number,
    turnkeyErrorCode: string,
    fragment: string,
  ) {
    await expectActivityRefused(UPDATE_ROOT_QUORUM, () => root.updateRootQuorum(params), code, turnkeyErrorCode, fragment);
    const quorum = await h.server.store.db
      .selectFrom("root_quorum_members")
      .select("user_id")
      .where("organization_id", "=", org.organizationId)
      .execute();
    expect(quorum.map((m) => m.user_id)).toEqual([org.userId]);
    const { root_quorum_threshold } = await h.server.store.db
      .selectFrom("organizations")
      .select("root_quorum_threshold")
      .where("id", "=", org.organizationId)
      .executeTakeFirstOrThrow();
    expect(Number(root_quorum_threshold)).toBe(1);
  }

  it("refuses threshold 0", async () => {
    await expectQuorumRefused(
      { threshold: 0, userIds: [org.userId, x.userId] },
      3,
      "REQUEST_INVALID",
      "threshold must be between 1 and the number of users (2), got 0",
    );
  });

  it("refuses a threshold larger than the number of users", async () => {
    await expectQuorumRefused(
      { threshold: 3, userIds: [org.userId, x.userId] },
      3,
      "REQUEST_INVALID",
      "threshold must be between 1 and the number of users (2), got 3",
    );
  });

  it("refuses userIds naming a user twice", async () => {
    await expectQuorumRefused(
      { threshold: 1, userIds: [org.userId, x.userId, x.userId] },
      3,
      "REQUEST_INVALID",
      `userIds lists ${x.userId} more than once`,
    );
  });

  it("refuses an unknown user (NotFound)", async () => {
    const missing = unknownId();
    await expectQuorumRefused({ threshold: 1, userIds: [org.userId, missing] }, 5, "USER_NOT_FOUND", `user ${missing} not found`);
  });

  it("refuses empty userIds", async () => {
    await expectQuorumRefused({ threshold: 1, userIds: [] }, 3, "REQUEST_INVALID", "userIds must name at least one user");
  });

  it("refuses a quorum whose users only hold expiring API keys (ROOT_QUORUM_UNREACHABLE)", async () => {
    const { userIds } = await root.createUsers({
      users: ["temp 1", "temp 2"].map((userName) => ({
        userName,
        apiKeys: [
          {
            apiKeyName: "expiring",
            publicKey: newKeyPair().publicKey,
            curveType: "API_KEY_CURVE_P256" as const,
            expirationSeconds: "3600",
          },
        ],
        ...noCredentials,
      })),
    });
    await expectQuorumRefused({ threshold: 1, userIds }, 9, "ROOT_QUORUM_UNREACHABLE", "locked out");
  });
});

// ---- votes ------------------------------------------------------------------------------------

const votes = ["approveActivity", "rejectActivity"] as const;
const vote = (client: Client, kind: (typeof votes)[number], fingerprint: string) => client[kind]({ fingerprint });

describe("approve_activity and reject_activity refusals change nothing", () => {
  it.each(votes)("%s: an unknown fingerprint is NotFound", async (kind) => {
    const { members } = await pendingCreateUsers();
    const fingerprint = crypto.randomBytes(32).toString("hex");
    await expectRefusedUnchanged(() => vote(members.ben!.client, kind, fingerprint), 5, "ACTIVITY_NOT_FOUND", `fingerprint ${fingerprint}`);
  });

  it.each(votes)("%s: another organization's pending activity is NotFound, and stays as it was", async (kind) => {
    const theirs = await pendingCreateUsers();
    const ours = await organizationWith(h, []);
    // Even the root quorum, who may vote on anything of its own organization.
    await expectRefusedUnchanged(
      () => vote(ours.root, kind, theirs.pending.fingerprint),
      5,
      "ACTIVITY_NOT_FOUND",
      theirs.pending.fingerprint,
    );
    const { activity } = await theirs.root.getActivity({ activityId: theirs.pending.id });
    expect(activity.status).toBe(PENDING);
    expect(activity.votes.map((v) => v.userId)).toEqual([theirs.members.ann!.userId]);
  });

  it.each([
    ["ACTIVITY_TYPE_APPROVE_ACTIVITY", "/public/v1/submit/approve_activity"],
    ["ACTIVITY_TYPE_REJECT_ACTIVITY", "/public/v1/submit/reject_activity"],
  ])("%s without a fingerprint is refused (schema)", async (type, path) => {
    const { org, members } = await pendingCreateUsers();
    const body = { type, timestampMs: String(Date.now()), organizationId: org.organizationId, parameters: {} };
    await expectRawRefusedUnchanged(path, body, members.ben!.key, 400, 'missing required field "parameters.fingerprint"');
  });

  it("approving an activity that already COMPLETED is FailedPrecondition", async () => {
    const { root, members } = await organizationWith(h, ["alice"]);
    const done = await root.createUserTag({ userTagName: "done", userIds: [] });
    expect(done.activity.status).toBe(COMPLETED);
    await expectRefusedUnchanged(
      () => members.alice!.client.approveActivity({ fingerprint: done.activity.fingerprint }),
      9,
      "ACTIVITY_NOT_PENDING",
      "ACTIVITY_STATUS_COMPLETED",
    );
  });

  it("a user who approved cannot then reject (VOTE_ALREADY_CAST)", async () => {
    const { members, pending } = await pendingCreateUsers(3);
    const approved = await members.ben!.client.approveActivity({ fingerprint: pending.fingerprint });
    expect(approved.activity.status).toBe(PENDING);
    await expectRefusedUnchanged(
      () => members.ben!.client.rejectActivity({ fingerprint: pending.fingerprint }),
      9,
      "VOTE_ALREADY_CAST",
      "a vote cannot be changed",
    );
  });

  it.each(votes)("%s: a user neither root nor named by a consensus may not vote (PermissionDenied)", async (kind) => {
    const { members, pending } = await pendingCreateUsers();
    await expectRefusedUnchanged(() => vote(members.outsider!.client, kind, pending.fingerprint), 7, "VOTE_NOT_ALLOWED", "may not vote");
  });
});

// ---- racing approvals -------------------------------------------------------------------------

describe("concurrent approvals", () => {
  /** Ben and Cat approve Ann's pending 2-of-3 activity at the same moment, through `urls[0]` and `urls[1]`. */
  async function raceApprovals(urls: [string, string]) {
    const { org, root, members, pending } = await pendingCreateUsers(2);
    const usersBefore = (await root.getUsers({})).users.length;
    const approvers = [members.ben!, members.cat!];
    const results = await Promise.allSettled(
      approvers.map((m, i) => clientAt(urls[i]!, org, m.key).approveActivity({ fingerprint: pending.fingerprint })),
    );

    const won = results.filter((r) => r.status === "fulfilled");
    const lost = results.filter((r) => r.status === "rejected");
    expect(won).toHaveLength(1);
    expect(lost).toHaveLength(1);
    const winner = won[0]!.value as any;
    expect(winner.activity).toMatchObject({ id: pending.id, status: COMPLETED });
    expect(winner.createUsersResult.userIds).toHaveLength(1);
    expect(lost[0]!.reason).toMatchObject(refusal(9, "ACTIVITY_NOT_PENDING", "ACTIVITY_STATUS_COMPLETED"));

    // The operation ran once; the activity holds Ann's approval and the winner's, nothing from the loser.
    expect((await root.getUsers({})).users.length).toBe(usersBefore + 1);
    const row = await h.server.store.db
      .selectFrom("activities")
      .select(["status", "votes"])
      .where("id", "=", pending.id)
      .executeTakeFirstOrThrow();
    expect(row.status).toBe(COMPLETED);
    const stored = (JSON.parse(row.votes) as Array<{ userId: string; selection: string }>).map((v) => [v.userId, v.selection]);
    const winnerId = approvers[results.indexOf(won[0]!)]!.userId;
    expect(stored).toEqual([
      [members.ann!.userId, "VOTE_SELECTION_APPROVED"],
      [winnerId, "VOTE_SELECTION_APPROVED"],
    ]);
    const evaluations = await root.getPolicyEvaluations({ activityId: pending.id });
    expect(evaluations.policyEvaluations.map((e: any) => e.outcome)).toEqual(["OUTCOME_REQUIRES_CONSENSUS", "OUTCOME_ALLOW"]);
  }

  it("two approvals at once on one server: exactly one completes the activity, the other finds it no longer pending", async () => {
    await raceApprovals([h.url, h.url]);
  });

  if (backend === "postgres") {
    it("two approvals at once on two servers sharing the database: the activity still runs exactly once", async () => {
      const second = await startServer({ ...h.config, port: 0 }, pino({ level: "silent" }));
      try {
        await raceApprovals([h.url, second.url]);
      } finally {
        await second.close();
      }
    });
  }
});

// ---- a passkey approver -----------------------------------------------------------------------

describe("a passkey-only user approves through @turnkey/sdk-server with WebauthnStamper", () => {
  const PASSKEY_CONSENSUS = "approvers.count() >= 2 && credentials.any(c, c.type == 'CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR')";

  /** Alice and Bob hold API keys; "pk" holds only a passkey. Creating user tags needs two approvers, one with a passkey. */
  async function passkeySetup() {
    const setup = await organizationWith(h, ["alice", "bob"]);
    const passkey = new SoftwarePasskey();
    const registration = passkey.register();
    const { userIds } = await setup.root.createUsers({
      users: [
        {
          userName: "pk",
          apiKeys: [],
          oauthProviders: [],
          userTags: [],
          authenticators: [
            { authenticatorName: "laptop", challenge: registration.challenge, attestation: registration.attestation as any },
          ],
        },
      ],
    });
    const { policyId } = await setup.root.createPolicy({
      policyName: "tags need a passkey",
      effect: "EFFECT_ALLOW",
      condition: "activity.kind == 'CREATE_USER_TAG'",
      consensus: PASSKEY_CONSENSUS,
      notes: "",
    });
    return { ...setup, passkey, passkeyUserId: userIds[0]!, policyId };
  }

  /** Approves as the passkey user: sdk-server's client, its stamps made by the official WebauthnStamper. */
  async function approveWithPasskey(passkey: SoftwarePasskey, org: TestOrganization, fingerprint: string) {
    const restore = passkey.installAsNavigator();
    try {
      const client = new TurnkeyServerClient({
        apiBaseUrl: h.url,
        organizationId: org.organizationId,
        stamper: new WebauthnStamper({ rpId: passkey.rpId }),
      });
      return await client.approveActivity({ fingerprint });
    } finally {
      restore();
    }
  }

  it("the passkey approval completes the activity: OUTCOME_REQUIRES_CONSENSUS, then OUTCOME_ALLOW", async () => {
    const { org, root, members, passkey, passkeyUserId, policyId } = await passkeySetup();
    const pending = await members.alice!.client.createUserTag({ userTagName: "needs a passkey", userIds: [] });
    expect(pending.activity.status).toBe(PENDING);

    const approved = await approveWithPasskey(passkey, org, pending.activity.fingerprint);
    expect(approved.activity).toMatchObject({ id: pending.activity.id, status: COMPLETED });
    expect((approved as any).createUserTagResult.userTagId).toEqual(expect.any(String));
    expect(approved.activity.votes[1]).toMatchObject({
      userId: passkeyUserId,
      selection: "VOTE_SELECTION_APPROVED",
      scheme: "SIGNATURE_SCHEME_TK_WEBAUTHN",
    });

    const { policyEvaluations } = await root.getPolicyEvaluations({ activityId: pending.activity.id });
    expect(policyEvaluations.map((e: any) => [e.outcome, e.policyEvaluations])).toEqual([
      ["OUTCOME_REQUIRES_CONSENSUS", [{ policyId, outcome: "OUTCOME_REQUIRES_CONSENSUS" }]],
      ["OUTCOME_ALLOW", [{ policyId, outcome: "OUTCOME_ALLOW" }]],
    ]);
  });

  it("two approvals made with API keys are not enough; the passkey approval then completes it", async () => {
    const { org, members, passkey } = await passkeySetup();
    const pending = await members.alice!.client.createUserTag({ userTagName: "still waiting", userIds: [] });
    const second = await members.bob!.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(second.activity.status).toBe(PENDING);
    const third = await approveWithPasskey(passkey, org, pending.activity.fingerprint);
    expect(third.activity.status).toBe(COMPLETED);
  });
});
