// The policy engine, driven the way users drive it: policies created and activities submitted and
// approved through @turnkey/sdk-server and @turnkey/http, against a real server and database.
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeyActivityError, createActivityPoller } from "@turnkey/http";
import { startHarness, newKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { noCredentials, organizationWith, type Member } from "./helpers/organizations.js";

async function activityCount(h: Harness, org: TestOrganization) {
  const row = await h.server.store.db
    .selectFrom("activities")
    .select((eb) => eb.fn.countAll<number>().as("n"))
    .where("organization_id", "=", org.organizationId)
    .executeTakeFirstOrThrow();
  return Number(row.n);
}

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

describe("policies as resources", () => {
  it("creates (every version), reads, lists, updates and deletes policies", async () => {
    const { root } = await organizationWith(h, []);
    const v3 = await root.createPolicy({
      policyName: "allow tag creation",
      effect: "EFFECT_ALLOW",
      condition: "activity.resource == 'USER'",
      consensus: "approvers.count() >= 1",
      notes: "n",
    });
    expect(v3.activity.type).toBe("ACTIVITY_TYPE_CREATE_POLICY_V3");
    const { policy } = await root.getPolicy({ policyId: v3.policyId });
    expect(policy).toMatchObject({
      policyId: v3.policyId,
      policyName: "allow tag creation",
      effect: "EFFECT_ALLOW",
      condition: "activity.resource == 'USER'",
      consensus: "approvers.count() >= 1",
      notes: "n",
    });
    expect(policy.createdAt.seconds).toMatch(/^\d+$/);

    const many = await root.createPolicies({
      policies: [
        { policyName: "a", effect: "EFFECT_DENY", condition: "activity.action == 'DELETE'", notes: "" },
        { policyName: "b", effect: "EFFECT_ALLOW", time: "time.now > Timestamp('2020-01-01T00:00:00Z')", notes: "" },
      ],
    });
    expect(many.policyIds).toHaveLength(2);

    const updated = await root.updatePolicy({
      policyId: many.policyIds[0]!,
      policyName: "a2",
      policyCondition: "activity.action == 'UPDATE'",
    });
    expect(updated.activity.type).toBe("ACTIVITY_TYPE_UPDATE_POLICY_V2");
    expect((await root.getPolicy({ policyId: many.policyIds[0]! })).policy).toMatchObject({
      policyName: "a2",
      effect: "EFFECT_DENY",
      condition: "activity.action == 'UPDATE'",
    });

    const { policies } = await root.getPolicies({});
    expect(policies.map((p) => p.policyName)).toEqual(["allow tag creation", "a2", "b"]);
    expect(policies[2]).toMatchObject({ time: "time.now > Timestamp('2020-01-01T00:00:00Z')", condition: "", consensus: "" });

    await root.deletePolicy({ policyId: v3.policyId });
    await expect(root.getPolicy({ policyId: v3.policyId })).rejects.toMatchObject({ code: 5 });
    await root.deletePolicies({ policyIds: many.policyIds });
    expect((await root.getPolicies({})).policies).toEqual([]);
  });

  it("refuses a policy that does not parse or type-check, naming the field, position and problem, and stores nothing", async () => {
    const { org, root } = await organizationWith(h, []);
    const before = await h.snapshot();
    await expect(
      root.createPolicy({ policyName: "bad", effect: "EFFECT_ALLOW", condition: "activity.type == ", notes: "" }),
    ).rejects.toMatchObject({
      code: 3,
      message: expect.stringMatching(
        /condition is not a valid policy expression: line 1, column 18: expected a value but found end of input/,
      ),
    });
    await expect(
      root.createPolicy({ policyName: "bad", effect: "EFFECT_ALLOW", consensus: "approvers.count() >= 'two'", notes: "" }),
    ).rejects.toMatchObject({
      message: expect.stringMatching(/consensus .*column 19: .*compares two numbers/),
    });
    await expect(
      root.createPolicy({ policyName: "bad", effect: "EFFECT_ALLOW", condition: "approvers.count() > 1", notes: "" }),
    ).rejects.toMatchObject({
      message: expect.stringMatching(/unknown keyword "approvers" in a condition/),
    });
    await expect(
      root.createPolicy({ policyName: "bad", effect: "EFFECT_ALLOW", time: "CronSpan('*/5 * * * *', '1h', 'UTC')", notes: "" }),
    ).rejects.toMatchObject({
      message: expect.stringMatching(/step values/),
    });
    // Nothing stored but the failed activities themselves (the audit log keeps refused attempts).
    const after = JSON.parse(await h.snapshot());
    expect(after.policies).toEqual(JSON.parse(before).policies);
    const failed = (await root.getActivities({ filterByStatus: ["ACTIVITY_STATUS_FAILED"] })).activities;
    expect(failed).toHaveLength(4);
    expect(org).toBeDefined();
  });

  it("accepts UPDATE_POLICY (V1) through @turnkey/http, with the result under updatePolicyResult", async () => {
    const { org, root } = await organizationWith(h, []);
    const { policyId } = await root.createPolicy({
      policyName: "v1 target",
      effect: "EFFECT_ALLOW",
      condition: "activity.kind == 'CREATE_USERS'",
      notes: "",
    });
    const client = h.http(org.key);
    const response = await client.updatePolicy({
      type: "ACTIVITY_TYPE_UPDATE_POLICY",
      organizationId: org.organizationId,
      timestampMs: String(Date.now()),
      parameters: { policyId, policyEffect: "EFFECT_DENY", policyConsensus: "approvers.count() >= 1" },
    } as any);
    expect(response.activity).toMatchObject({ type: "ACTIVITY_TYPE_UPDATE_POLICY", status: "ACTIVITY_STATUS_COMPLETED" });
    expect((response.activity.result as any).updatePolicyResult).toEqual({ policyId });
    const { policy } = await root.getPolicy({ policyId });
    expect(policy).toMatchObject({
      policyName: "v1 target",
      effect: "EFFECT_DENY",
      condition: "activity.kind == 'CREATE_USERS'",
      consensus: "approvers.count() >= 1",
    });
  });

  it("stores the product's documented transaction policies (eth.tx, eth.eip_712, solana.tx) as written", async () => {
    const { root, members } = await organizationWith(h, ["worker"]);
    const conditions = [
      "eth.tx.to == '0x08d2b0a37f869ff76bacb5bab3278e26ab7067b7' && eth.tx.value < 500000000000000000",
      "eth.tx.function_name == 'executeBatch' && eth.tx.contract_call_args['calls'].all(call, call[0] == '0xc0ffee' && call[1] == 0)",
      "eth.eip_712.domain.name == 'Permit2' && eth.eip_712.message['permitted'][0]['token'] == '0xa0b86991c6218b36c1d19d4a2e9eb0ce3606eb48' && activity.type == 'ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2'",
      "solana.tx.spl_transfers.all(transfer, transfer.signers.any(s, s == 'SIGNER'))",
    ];
    const { policyIds } = await root.createPolicies({
      policies: conditions.map((condition, i) => ({ policyName: `chain ${i}`, effect: "EFFECT_DENY" as const, condition, notes: "" })),
    });
    const { policies } = await root.getPolicies({});
    expect(policies.filter((p) => policyIds.includes(p.policyId)).map((p) => p.condition)).toEqual(conditions);
    // On an activity that signs nothing they fail to evaluate (OUTCOME_ERROR), and so deny nothing.
    await root.createPolicy({
      policyName: "worker tags",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${members.worker!.userId}')`,
      condition: "activity.kind == 'CREATE_USER_TAG'",
      notes: "",
    });
    const done = await members.worker!.client.createUserTag({ userTagName: "unaffected", userIds: [] });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const { policyEvaluations } = await root.getPolicyEvaluations({ activityId: done.activity.id });
    const outcomes = policyEvaluations[0]!.policyEvaluations.filter((v: any) => policyIds.includes(v.policyId)).map((v: any) => v.outcome);
    expect(outcomes).toEqual(["OUTCOME_ERROR", "OUTCOME_ERROR", "OUTCOME_ERROR", "OUTCOME_ERROR"]);
  });

  it("translates legacy selectors (CREATE_POLICY_V2) into an expression", async () => {
    const { org } = await organizationWith(h, []);
    const client = h.http(org.key);
    const response = await client.createPolicy({
      type: "ACTIVITY_TYPE_CREATE_POLICY_V2",
      organizationId: org.organizationId,
      timestampMs: String(Date.now()),
      parameters: {
        policyName: "legacy",
        effect: "EFFECT_ALLOW",
        notes: "",
        selectors: [{ subject: "activity.type", operator: "OPERATOR_IN", targets: ["ACTIVITY_TYPE_CREATE_USERS_V4"] }],
      } as any,
    } as any);
    const policyId = (response.activity.result as any).createPolicyResult.policyId;
    const { policy } = await client.getPolicy({ organizationId: org.organizationId, policyId });
    expect(policy.condition).toBe("activity.type in ['ACTIVITY_TYPE_CREATE_USERS_V4']");
  });
});

describe("evaluation", () => {
  it("denies a non-root user (implicit deny, 403, recorded as FAILED), then a policy allows it", async () => {
    const { org, root, members } = await organizationWith(h, ["alice"]);
    const alice = members.alice!;
    const count = await activityCount(h, org);
    const denied = alice.client.createUserTag({ userTagName: "ops", userIds: [] });
    await expect(denied).rejects.toMatchObject({ code: 7, message: expect.stringContaining("OUTCOME_DENY_IMPLICIT") });
    expect(await activityCount(h, org)).toBe(count + 1);
    const [failed] = (await root.getActivities({ filterByStatus: ["ACTIVITY_STATUS_FAILED"] })).activities;
    expect(failed).toMatchObject({ type: "ACTIVITY_TYPE_CREATE_USER_TAG", status: "ACTIVITY_STATUS_FAILED" });
    const evaluations = await root.getPolicyEvaluations({ activityId: failed!.id });
    expect(evaluations.policyEvaluations).toHaveLength(1);
    expect(evaluations.policyEvaluations[0]).toMatchObject({
      activityId: failed!.id,
      organizationId: org.organizationId,
      voteId: failed!.votes[0]!.id,
      policyEvaluations: [],
    });

    const { policyId } = await root.createPolicy({
      policyName: "alice manages tags",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${alice.userId}')`,
      condition: "activity.resource == 'USER' && activity.kind == 'CREATE_USER_TAG'",
      notes: "",
    });
    const created = await alice.client.createUserTag({ userTagName: "ops", userIds: [] });
    expect(created.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const allowed = await root.getPolicyEvaluations({ activityId: created.activity.id });
    expect(allowed.policyEvaluations[0]!.policyEvaluations).toEqual([{ policyId, outcome: "OUTCOME_ALLOW" }]);
  });

  it("an explicit deny beats an allow, and the message says so", async () => {
    const { root, members } = await organizationWith(h, ["bob"]);
    const bob = members.bob!;
    await root.createPolicy({
      policyName: "bob may create tags",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${bob.userId}')`,
      condition: "activity.action == 'CREATE'",
      notes: "",
    });
    const deny = await root.createPolicy({
      policyName: "no tags named secret",
      effect: "EFFECT_DENY",
      condition: "activity.kind == 'CREATE_USER_TAG'",
      notes: "",
    });
    await expect(bob.client.createUserTag({ userTagName: "x", userIds: [] })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining(`OUTCOME_DENY_EXPLICIT (explicitly denied by policy ${deny.policyId})`),
    });
    await root.deletePolicy({ policyId: deny.policyId });
    expect((await bob.client.createUserTag({ userTagName: "x", userIds: [] })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("README worked example 2: ops manage users, but an explicit deny stops bulk deletion; root is not bound", async () => {
    const { root, members } = await organizationWith(h, ["op", "u1", "u2", "u3", "u4"]);
    const { userTagId } = await root.createUserTag({ userTagName: "ops", userIds: [members.op!.userId] });
    await root.createPolicies({
      policies: [
        {
          policyName: "Ops manage users",
          effect: "EFFECT_ALLOW",
          consensus: `approvers.any(user, user.tags.contains('${userTagId}'))`,
          condition: "activity.resource == 'USER'",
          notes: "",
        },
        {
          policyName: "But never delete more than one user at once",
          effect: "EFFECT_DENY",
          condition: "activity.kind == 'DELETE_USERS' && activity.params.user_ids.count() > 1",
          notes: "",
        },
      ],
    });
    const op = members.op!.client;
    await expect(op.deleteUsers({ userIds: [members.u1!.userId, members.u2!.userId] })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("OUTCOME_DENY_EXPLICIT (explicitly denied by policy"),
    });
    expect((await op.deleteUsers({ userIds: [members.u1!.userId] })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect((await root.deleteUsers({ userIds: [members.u3!.userId, members.u4!.userId] })).activity.status).toBe(
      "ACTIVITY_STATUS_COMPLETED",
    );
  });

  it("a user changes its own credentials without a policy, unless a policy explicitly denies it; not another user's", async () => {
    const { root, members } = await organizationWith(h, ["carol", "dave"]);
    const carol = members.carol!;
    const own = await carol.client.createApiKeys({
      userId: carol.userId,
      apiKeys: [{ apiKeyName: "second", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    expect(own.apiKeyIds).toHaveLength(1);
    await expect(
      carol.client.createApiKeys({
        userId: members.dave!.userId,
        apiKeys: [{ apiKeyName: "x", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
      }),
    ).rejects.toMatchObject({ code: 7 });
    await root.createPolicy({
      policyName: "no new keys",
      effect: "EFFECT_DENY",
      condition: "activity.resource == 'CREDENTIAL' && activity.params.user_id != ''",
      notes: "",
    });
    await expect(carol.client.deleteApiKeys({ userId: carol.userId, apiKeyIds: own.apiKeyIds })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("OUTCOME_DENY_EXPLICIT"),
    });
  });

  it("exposes activity.params: a user may delete only itself (the docs' example)", async () => {
    const { root, members } = await organizationWith(h, ["erin", "frank"]);
    const erin = members.erin!;
    await root.createPolicy({
      policyName: "self deletion",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${erin.userId}')`,
      condition: `activity.type == 'ACTIVITY_TYPE_DELETE_USERS' && activity.params.user_ids.count() == 1 && '${erin.userId}' in activity.params.user_ids`,
      notes: "",
    });
    await expect(erin.client.deleteUsers({ userIds: [members.frank!.userId] })).rejects.toMatchObject({ code: 7 });
    expect((await erin.client.deleteUsers({ userIds: [erin.userId] })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("a policy whose condition reads a keyword this activity lacks is OUTCOME_ERROR and allows nothing", async () => {
    const { root, members } = await organizationWith(h, ["gina"]);
    const gina = members.gina!;
    const { policyId } = await root.createPolicy({
      policyName: "wallet scoped",
      effect: "EFFECT_ALLOW",
      condition: "wallet.id == 'w' || activity.kind == 'CREATE_USER_TAG'",
      notes: "",
    });
    const attempt = gina.client.createUserTag({ userTagName: "t", userIds: [] });
    await expect(attempt).rejects.toMatchObject({ code: 7 });
    const [failed] = (await root.getActivities({ filterByStatus: ["ACTIVITY_STATUS_FAILED"] })).activities;
    const evaluation = await root.getPolicyEvaluations({ activityId: failed!.id });
    expect(evaluation.policyEvaluations[0]!.policyEvaluations).toEqual([
      { policyId, outcome: "OUTCOME_ERROR", error: expect.stringContaining("wallet") },
    ]);
  });
});

describe("consensus", () => {
  async function twoOfThree() {
    const setup = await organizationWith(h, ["ann", "ben", "cat", "outsider"]);
    const { root, members } = setup;
    const { userTagId } = await root.createUserTag({
      userTagName: "approvers",
      userIds: [members.ann!.userId, members.ben!.userId, members.cat!.userId],
    });
    await root.createPolicy({
      policyName: "two approvers create users",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.filter(user, user.tags.contains('${userTagId}')).count() >= 2`,
      condition: "activity.resource == 'USER' && activity.action == 'CREATE'",
      notes: "",
    });
    return setup;
  }

  it("2-of-3 through @turnkey/sdk-server: CONSENSUS_NEEDED, approved by another user, runs exactly once", async () => {
    const { org, root, members } = await twoOfThree();
    const pending = await members.ann!.client.createUsers({ users: [{ userName: "newcomer", apiKeys: [], ...noCredentials }] });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    expect((pending as any).userIds).toBeUndefined();
    const usersBefore = (await root.getUsers({})).users.length;

    // canApprove / canReject are the caller's own: ben may vote; ann already did; the outsider may not.
    const seenBy = async (m: Member) => (await m.client.getActivity({ activityId: pending.activity.id })).activity;
    expect(await seenBy(members.ben!)).toMatchObject({ canApprove: true, canReject: true });
    expect(await seenBy(members.ann!)).toMatchObject({ canApprove: false, canReject: false });
    expect(await seenBy(members.outsider!)).toMatchObject({ canApprove: false, canReject: false });
    expect((await members.ben!.client.getActivities({ filterByStatus: ["ACTIVITY_STATUS_CONSENSUS_NEEDED"] })).activities[0]).toMatchObject(
      { id: pending.activity.id, canApprove: true },
    );

    // Someone the consensus does not name may not vote.
    await expect(members.outsider!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("may not vote"),
    });

    const approved = await members.ben!.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity).toMatchObject({ id: pending.activity.id, status: "ACTIVITY_STATUS_COMPLETED" });
    expect((approved as any).createUsersResult.userIds).toHaveLength(1);
    expect(approved.activity.votes.map((v: any) => [v.userId, v.selection])).toEqual([
      [members.ann!.userId, "VOTE_SELECTION_APPROVED"],
      [members.ben!.userId, "VOTE_SELECTION_APPROVED"],
    ]);
    const { users } = await root.getUsers({});
    expect(users.length).toBe(usersBefore + 1);

    // A third approval finds it no longer pending and changes nothing; the same approval again is a retry.
    await expect(members.cat!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).rejects.toMatchObject({ code: 9 });
    expect((await members.ben!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_COMPLETED",
    );
    expect((await root.getUsers({})).users.length).toBe(usersBefore + 1);
    const evaluations = await root.getPolicyEvaluations({ activityId: pending.activity.id });
    expect(evaluations.policyEvaluations.map((e: any) => e.policyEvaluations[0].outcome)).toEqual([
      "OUTCOME_REQUIRES_CONSENSUS",
      "OUTCOME_ALLOW",
    ]);
    expect(org).toBeDefined();
  });

  it("2-of-3 through @turnkey/http's createActivityPoller: raises TurnkeyActivityError with the activity id", async () => {
    const { org, members } = await twoOfThree();
    const client = h.http(members.cat!.key);
    const poll = createActivityPoller({ client, requestFn: client.createUsers });
    let error: unknown;
    try {
      await poll({
        type: "ACTIVITY_TYPE_CREATE_USERS_V4",
        organizationId: org.organizationId,
        timestampMs: String(Date.now()),
        parameters: { users: [{ userName: "via http", apiKeys: [], ...noCredentials }] },
      } as any);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(TurnkeyActivityError);
    const { activityId, activityStatus } = error as TurnkeyActivityError;
    expect(activityStatus).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const { activity } = await client.getActivity({ organizationId: org.organizationId, activityId: activityId! });
    const approver = h.http(members.ann!.key);
    const approve = createActivityPoller({ client: approver, requestFn: approver.approveActivity });
    const done = await approve({
      type: "ACTIVITY_TYPE_APPROVE_ACTIVITY",
      organizationId: org.organizationId,
      timestampMs: String(Date.now()),
      parameters: { fingerprint: activity.fingerprint },
    });
    expect(done).toMatchObject({ id: activityId, status: "ACTIVITY_STATUS_COMPLETED" });
  });

  it("a rejection that makes approval impossible rejects the activity; one that does not leaves it pending", async () => {
    const { root, members } = await twoOfThree();
    const pending = await members.ann!.client.createUsers({ users: [{ userName: "maybe", apiKeys: [], ...noCredentials }] });
    const oneNo = await members.ben!.client.rejectActivity({ fingerprint: pending.activity.fingerprint });
    expect(oneNo.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const usersBefore = (await root.getUsers({})).users.length;
    const twoNo = await members.cat!.client.rejectActivity({ fingerprint: pending.activity.fingerprint });
    expect(twoNo.activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    // Nothing can revive it, not even the root quorum; nothing ran.
    await expect(root.approveActivity({ fingerprint: pending.activity.fingerprint })).rejects.toMatchObject({
      code: 9,
      message: expect.stringContaining("ACTIVITY_STATUS_REJECTED"),
    });
    expect((await root.getUsers({})).users.length).toBe(usersBefore);
    const evaluations = await root.getPolicyEvaluations({ activityId: pending.activity.id });
    expect(evaluations.policyEvaluations.at(-1)).toMatchObject({ outcome: "OUTCOME_REJECTED" });
  });
});

describe("root quorum", () => {
  it("2-of-3 root quorum: one root approval waits, a second runs it; update_root_quorum needs the current quorum", async () => {
    const { org, root, members } = await organizationWith(h, ["r2", "r3", "plain"]);
    const r2 = members.r2!;
    const r3 = members.r3!;
    // A non-root user can never change the root quorum, whatever the policies say.
    await root.createPolicy({
      policyName: "plain may do anything",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${members.plain!.userId}')`,
      notes: "",
    });
    await expect(members.plain!.client.updateRootQuorum({ threshold: 1, userIds: [members.plain!.userId] })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("only be approved by the root quorum"),
    });

    await root.updateRootQuorum({ threshold: 2, userIds: [org.userId, r2.userId, r3.userId] });
    const pending = await root.createUserTag({ userTagName: "needs two", userIds: [] });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const done = await r3.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect((done as any).createUserTagResult.userTagId).toBeDefined();

    // Changing the quorum back needs two root approvals too.
    const change = await r2.client.updateRootQuorum({ threshold: 1, userIds: [org.userId] });
    expect(change.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    await root.approveActivity({ fingerprint: change.activity.fingerprint });
    const single = await root.createUserTag({ userTagName: "one is enough", userIds: [] });
    expect(single.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("a policy that locks everyone out is undone by the root quorum", async () => {
    const { root, members } = await organizationWith(h, ["ops"]);
    const ops = members.ops!;
    await root.createPolicy({
      policyName: "ops may create tags",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${ops.userId}')`,
      condition: "activity.kind == 'CREATE_USER_TAG'",
      notes: "",
    });
    const lockout = await root.createPolicy({ policyName: "deny everything", effect: "EFFECT_DENY", condition: "true", notes: "" });
    await expect(ops.client.createUserTag({ userTagName: "a", userIds: [] })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("OUTCOME_DENY_EXPLICIT"),
    });
    await expect(ops.client.deletePolicy({ policyId: lockout.policyId })).rejects.toMatchObject({ code: 7 });
    // The root quorum bypasses policies.
    await root.deletePolicy({ policyId: lockout.policyId });
    expect((await ops.client.createUserTag({ userTagName: "a", userIds: [] })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("refuses a root quorum that could never act, and changes nothing", async () => {
    const { org, root, members } = await organizationWith(h, ["x"]);
    const before = await h.snapshot();
    await expect(root.updateRootQuorum({ threshold: 3, userIds: [org.userId, members.x!.userId] })).rejects.toMatchObject({
      code: 3,
      message: expect.stringContaining("threshold"),
    });
    await expect(root.updateRootQuorum({ threshold: 1, userIds: ["not-a-user"] })).rejects.toMatchObject({ code: 5 });
    const after = JSON.parse(await h.snapshot());
    const was = JSON.parse(before);
    for (const table of ["organizations", "root_quorum_members", "users", "policies"]) expect(after[table], table).toEqual(was[table]);
  });
});

describe("time", () => {
  it("a time-windowed allow applies only inside its window, by the server's clock", async () => {
    let now = Date.parse("2026-03-02T15:00:00Z"); // a Monday, 10:00 in New York
    // The liveness window is widened so the clients' own timestamps are accepted by the moved clock.
    const clocked = await startHarness({ SIGIL_TIMESTAMP_WINDOW_SECONDS: String(366 * 24 * 3600) }, { clock: () => now });
    try {
      const { root, members } = await organizationWith(clocked, ["shift"]);
      const shift = members.shift!;
      const { policyId } = await root.createPolicy({
        policyName: "business hours",
        effect: "EFFECT_ALLOW",
        consensus: `approvers.any(u, u.id == '${shift.userId}')`,
        condition: "activity.kind == 'CREATE_USER_TAG'",
        time: "CronSpan('0 9 * * 1-5', '8h', 'America/New_York')",
        notes: "",
      });
      const inside = await shift.client.createUserTag({ userTagName: "in", userIds: [] });
      expect(inside.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      now = Date.parse("2026-03-07T15:00:00Z"); // Saturday
      await expect(shift.client.createUserTag({ userTagName: "out", userIds: [] })).rejects.toMatchObject({
        code: 7,
        message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
      });
      const [failed] = (await root.getActivities({ filterByStatus: ["ACTIVITY_STATUS_FAILED"] })).activities;
      const evaluation = await root.getPolicyEvaluations({ activityId: failed!.id });
      expect(evaluation.policyEvaluations[0]!.policyEvaluations).toEqual([{ policyId, outcome: "OUTCOME_TIME_INACTIVE" }]);
    } finally {
      await clocked.close();
    }
  });
});

describe("hardening (review findings)", () => {
  async function tagged(names: string[]) {
    const setup = await organizationWith(h, names);
    const { userTagId } = await setup.root.createUserTag({
      userTagName: "approvers",
      userIds: names.slice(0, 3).map((n) => setup.members[n]!.userId),
    });
    await setup.root.createPolicy({
      policyName: "two approvers create tags",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.filter(user, user.tags.contains('${userTagId}')).count() >= 2`,
      condition: "activity.kind == 'CREATE_USER_TAG'",
      notes: "",
    });
    return { ...setup, userTagId };
  }

  it("an explicit deny on approving beats being named by a consensus; canApprove and canReject follow it separately", async () => {
    const { root, members } = await tagged(["ann", "ben", "cat"]);
    await root.createPolicy({
      policyName: "ben never approves",
      effect: "EFFECT_DENY",
      consensus: `approvers.any(u, u.id == '${members.ben!.userId}')`,
      condition: "activity.kind == 'APPROVE_ACTIVITY'",
      notes: "",
    });
    const pending = await members.ann!.client.createUserTag({ userTagName: "t", userIds: [] });
    const seen = (await members.ben!.client.getActivity({ activityId: pending.activity.id })).activity;
    expect(seen).toMatchObject({ canApprove: false, canReject: true });
    const before = await h.snapshot();
    await expect(members.ben!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("may not vote"),
    });
    expect(await h.snapshot()).toBe(before);
    expect((await members.cat!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_COMPLETED",
    );
  });

  /** `member` rotates: a new key, then the old one (the one that signed what they did so far) goes. */
  async function rotate(root: Member["client"], member: Member) {
    const fresh = newKeyPair();
    await member.client.createApiKeys({
      userId: member.userId,
      apiKeys: [{ apiKeyName: "new", publicKey: fresh.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const { user } = await root.getUser({ userId: member.userId });
    const old = user.apiKeys.find((k) => k.credential.publicKey === member.key.publicKey)!;
    await root.deleteApiKeys({ userId: member.userId, apiKeyIds: [old.apiKeyId] });
  }

  it("an approval whose key was deleted since no longer counts", async () => {
    // dan is not tagged: his request waits for two tagged approvals.
    const { root, members } = await tagged(["ann", "ben", "cat", "dan"]);
    const pending = await members.dan!.client.createUserTag({ userTagName: "t", userIds: [] });
    expect((await members.ben!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_CONSENSUS_NEEDED",
    );
    await rotate(root, members.ben!);
    // ben's approval went with his key: cat's is the only one that counts.
    expect((await members.cat!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_CONSENSUS_NEEDED",
    );
    expect((await members.ann!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_COMPLETED",
    );
  });

  it("a request whose key was deleted since fails at the next approval (REQUESTING_CREDENTIAL_GONE), as one waiting for MFA does; nothing of it runs", async () => {
    const { root, members } = await tagged(["ann", "ben", "cat"]);
    const pending = await members.ann!.client.createUserTag({ userTagName: "disowned", userIds: [] });
    await rotate(root, members.ann!);
    const approved = await members.ben!.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_FAILED");
    expect(approved.activity.failure).toMatchObject({
      message: expect.stringContaining("deleted or has expired while the activity waited"),
    });
    expect(JSON.stringify(approved.activity.failure)).toContain("REQUESTING_CREDENTIAL_GONE");
    const { userTags } = await root.listUserTags({});
    expect(userTags.map((t) => t.tagName)).toEqual(["approvers"]);
  });

  it("a request whose user was deleted since fails at the next approval (REQUESTING_CREDENTIAL_GONE); nothing of it runs", async () => {
    const { root, members } = await tagged(["ann", "ben", "cat", "dan"]);
    // dan is not tagged: his request waits for two tagged approvals.
    const pending = await members.dan!.client.createUserTag({ userTagName: "orphaned", userIds: [] });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    await root.deleteUsers({ userIds: [members.dan!.userId] });
    const approved = await members.ann!.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_FAILED");
    expect(JSON.stringify(approved.activity.failure)).toContain("REQUESTING_CREDENTIAL_GONE");
    const { userTags } = await root.listUserTags({});
    expect(userTags.map((t) => t.tagName)).toEqual(["approvers"]);
  });

  it("a user given the approvers' tag while an activity waits may then vote, and the approval counts", async () => {
    const { root, members, userTagId } = await tagged(["ann", "ben", "cat", "dan"]);
    const pending = await members.ann!.client.createUserTag({ userTagName: "t", userIds: [] });
    await expect(members.dan!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).rejects.toMatchObject({ code: 7 });
    await root.updateUserTag({ userTagId, addUserIds: [members.dan!.userId], removeUserIds: [] });
    const danVote = await members.dan!.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(danVote.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("a pending activity whose approvals were satisfied by a tag change runs when an approver repeats the approval", async () => {
    const { root, members, userTagId } = await tagged(["ann", "ben", "cat", "eve"]);
    // eve is not in the approvers tag; a second policy lets eve vote on tag creation.
    await root.createPolicy({
      policyName: "eve votes",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${members.eve!.userId}') && approvers.count() >= 3`,
      condition: "activity.kind == 'CREATE_USER_TAG'",
      notes: "",
    });
    const pending = await members.ann!.client.createUserTag({ userTagName: "t", userIds: [] });
    expect((await members.eve!.client.approveActivity({ fingerprint: pending.activity.fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_CONSENSUS_NEEDED",
    );
    await root.updateUserTag({ userTagId, addUserIds: [members.eve!.userId], removeUserIds: [] });
    const again = await members.eve!.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(again.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(again.activity.votes).toHaveLength(2);
  });

  it("deleting a root user needs the root quorum, whatever the policies allow", async () => {
    const { org, root, members } = await organizationWith(h, ["admin", "second"]);
    await root.createPolicy({
      policyName: "admin deletes users",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${members.admin!.userId}')`,
      condition: "activity.kind == 'DELETE_USERS'",
      notes: "",
    });
    await root.updateRootQuorum({ threshold: 1, userIds: [org.userId, members.second!.userId] });
    const before = await h.snapshot();
    await expect(members.admin!.client.deleteUsers({ userIds: [members.second!.userId] })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("changes the root quorum"),
    });
    expect(JSON.parse(await h.snapshot()).root_quorum_members).toEqual(JSON.parse(before).root_quorum_members);
  });

  it("refuses a legacy selector whose subject is not a keyword path (no expression injection)", async () => {
    const { org } = await organizationWith(h, []);
    const before = JSON.parse(await h.snapshot()).policies;
    await expect(
      h.http(org.key).createPolicy({
        type: "ACTIVITY_TYPE_CREATE_POLICY",
        organizationId: org.organizationId,
        timestampMs: String(Date.now()),
        parameters: {
          policyName: "sneaky",
          effect: "EFFECT_ALLOW",
          selectors: [{ subject: "activity.type == 'X' || true || activity.type", operator: "OPERATOR_EQUAL", target: "Y" }],
        },
      } as any),
    ).rejects.toMatchObject({ code: 3, message: expect.stringContaining("must be a keyword path") });
    expect(JSON.parse(await h.snapshot()).policies).toEqual(before);
  });

  it("a stored policy that no longer compiles is judged OUTCOME_ERROR, not a server error", async () => {
    const { org, root, members } = await organizationWith(h, ["fay"]);
    await root.createPolicy({
      policyName: "fay tags",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${members.fay!.userId}')`,
      condition: "activity.kind == 'CREATE_USER_TAG'",
      notes: "",
    });
    // As if written by an older version whose language accepted it.
    const id = crypto.randomUUID();
    await h.server.store.db
      .insertInto("policies")
      .values({
        id,
        organization_id: org.organizationId,
        name: "legacy",
        effect: "EFFECT_DENY",
        condition: "activity.constructor == activity.constructor",
        consensus: null,
        time: null,
        notes: "",
        created_at: Date.now(),
        updated_at: Date.now(),
      })
      .execute();
    const done = await members.fay!.client.createUserTag({ userTagName: "still works", userIds: [] });
    const evaluation = await root.getPolicyEvaluations({ activityId: done.activity.id });
    expect(evaluation.policyEvaluations[0]!.policyEvaluations).toContainEqual({
      policyId: id,
      outcome: "OUTCOME_ERROR",
      error: expect.stringContaining("does not compile"),
    });
  });

  it("a policy that would take hours to evaluate is stopped by the step budget (OUTCOME_ERROR) and the request is answered", async () => {
    const { root, members } = await organizationWith(h, ["gus"]);
    const big = `[${Array.from({ length: 300 }, (_, i) => i).join(",")}]`;
    const { policyId } = await root.createPolicy({
      policyName: "heavy",
      effect: "EFFECT_ALLOW",
      condition: `${big}.all(a, ${big}.all(b, ${big}.all(c, ${big}.all(d, true))))`,
      notes: "",
    });
    await expect(members.gus!.client.createUserTag({ userTagName: "x", userIds: [] })).rejects.toMatchObject({ code: 7 });
    const [failed] = (await root.getActivities({ filterByStatus: ["ACTIVITY_STATUS_FAILED"] })).activities;
    const evaluation = await root.getPolicyEvaluations({ activityId: failed!.id });
    expect(evaluation.policyEvaluations[0]!.policyEvaluations).toEqual([
      { policyId, outcome: "OUTCOME_ERROR", error: expect.stringContaining("budget") },
    ]);
  });
});
