// The policy dry run (POST /sigil/v1/query/evaluate_policies, docs/policy-testing.md), sent the way a
// user's program sends it: @turnkey/http's TurnkeyClient, stamped by @turnkey/api-key-stamper. Its
// answer is checked against what a real submit of the same request does, and every dry run is checked
// to change nothing at all (no activity, no fingerprint: the full-table snapshot).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseEther, serializeTransaction, type Hex } from "viem";
import { TurnkeyRequestError } from "@turnkey/http";
import { ethereumAccountOrganization, organizationWith, type Member } from "./helpers/organizations.js";
import { startHarness, type Harness } from "./helpers/harness.js";

const PATH = "/sigil/v1/query/evaluate_policies";
const FRIEND = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
const STRANGER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";

let h: Harness;
let made: Awaited<ReturnType<typeof ethereumAccountOrganization>>;
let bob: Member;
let ids: { allow: string; deny: string; pair: string };

const unsigned = (to: string, value: bigint) =>
  serializeTransaction({
    chainId: 1,
    to: to as Hex,
    value,
    nonce: 0,
    gas: 21_000n,
    maxFeePerGas: 1n,
    maxPriorityFeePerGas: 1n,
    type: "eip1559",
  });
const signRequest = (to: string, value: bigint) => ({
  type: "ACTIVITY_TYPE_SIGN_TRANSACTION_V2",
  parameters: { signWith: made.address, unsignedTransaction: unsigned(to, value).slice(2), type: "TRANSACTION_TYPE_ETHEREUM" },
});

/** The dry run, through the official client, stamped by `key`. */
async function dryRun(key: { publicKey: string; privateKey: string }, body: Record<string, unknown>): Promise<any> {
  return h.http(key).request(PATH, { organizationId: made.org.organizationId, ...body });
}

/** The refusal of a dry run, as the official client reports it. */
async function refusal(key: { publicKey: string; privateKey: string }, body: Record<string, unknown>) {
  const error = await dryRun(key, body).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(TurnkeyRequestError);
  const { code, message, details } = error as TurnkeyRequestError;
  return { code, message, errorCode: (details?.[0] as { turnkeyErrorCode?: string } | undefined)?.turnkeyErrorCode };
}

beforeAll(async () => {
  h = await startHarness();
  made = await ethereumAccountOrganization(h, "treasury");
  const { userIds } = await made.root.createUsers({
    users: [{ userName: "bob", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
  });
  bob = { userId: userIds[0]!, key: made.alice.key, client: made.alice.client };
  const { alice } = made;
  const allow = await made.root.createPolicy({
    policyName: "alice pays friends",
    effect: "EFFECT_ALLOW",
    condition: `activity.type == 'ACTIVITY_TYPE_SIGN_TRANSACTION_V2' && eth.tx.to == '${FRIEND}'`,
    consensus: `approvers.any(u, u.id == '${alice.userId}')`,
    notes: "",
  });
  const deny = await made.root.createPolicy({
    policyName: "nothing over one ether",
    effect: "EFFECT_DENY",
    condition: "eth.tx.value > 1000000000000000000",
    notes: "",
  });
  const pair = await made.root.createPolicy({
    policyName: "tags need two",
    effect: "EFFECT_ALLOW",
    condition: "activity.type == 'ACTIVITY_TYPE_CREATE_USER_TAG'",
    consensus: "approvers.count() >= 2",
    notes: "",
  });
  ids = { allow: allow.policyId, deny: deny.policyId, pair: pair.policyId };
});
afterAll(() => h.close());

describe("evaluate_policies answers what a submit would be answered", () => {
  it("allow, deny, needs consensus: each policy's outcome and the part that gave it, the same as a real submit decides", async () => {
    const { alice } = made;
    const before = await h.snapshot();
    const allowed = await dryRun(alice.key, signRequest(FRIEND, parseEther("0.5")));
    expect(allowed).toMatchObject({ verdict: "ALLOW", outcome: "OUTCOME_ALLOW", decidedBy: "POLICIES" });
    expect(allowed.error).toBeUndefined();
    expect(allowed.policyEvaluations).toEqual([
      { policyId: ids.allow, policyName: "alice pays friends", outcome: "OUTCOME_ALLOW", part: "effect", deciding: true },
      { policyId: ids.deny, policyName: "nothing over one ether", outcome: "OUTCOME_DENY_IMPLICIT", part: "condition", deciding: false },
      { policyId: ids.pair, policyName: "tags need two", outcome: "OUTCOME_DENY_IMPLICIT", part: "condition", deciding: false },
    ]);

    const denied = await dryRun(alice.key, signRequest(FRIEND, parseEther("2")));
    expect(denied).toMatchObject({ verdict: "DENY", outcome: "OUTCOME_DENY_EXPLICIT", error: { code: "POLICY_DENIED" } });
    expect(denied.policyEvaluations.filter((p: any) => p.deciding)).toEqual([
      { policyId: ids.deny, policyName: "nothing over one ether", outcome: "OUTCOME_DENY_EXPLICIT", part: "effect", deciding: true },
    ]);

    const nobody = await dryRun(alice.key, signRequest(STRANGER, 1n));
    expect(nobody).toMatchObject({ verdict: "DENY", outcome: "OUTCOME_DENY_IMPLICIT", decidedBy: "NO_POLICY" });

    const waits = await dryRun(alice.key, { type: "ACTIVITY_TYPE_CREATE_USER_TAG", parameters: { userTagName: "ops", userIds: [] } });
    expect(waits).toMatchObject({ verdict: "NEEDS_CONSENSUS", outcome: "OUTCOME_REQUIRES_CONSENSUS", decidedBy: "POLICIES" });
    expect(waits.policyEvaluations.find((p: any) => p.policyId === ids.pair)).toEqual({
      policyId: ids.pair,
      policyName: "tags need two",
      outcome: "OUTCOME_REQUIRES_CONSENSUS",
      part: "consensus",
      deciding: true,
    });
    // Nothing was recorded, no fingerprint consumed: the same bodies are answered again alike.
    expect(await h.snapshot()).toBe(before);
    expect(await dryRun(alice.key, signRequest(FRIEND, parseEther("0.5")))).toMatchObject({ verdict: "ALLOW" });

    // The submits themselves decide as the dry runs said.
    const sign = (to: string, value: bigint) =>
      alice.client.signTransaction({
        signWith: made.address,
        unsignedTransaction: unsigned(to, value).slice(2),
        type: "TRANSACTION_TYPE_ETHEREUM",
      });
    expect((await sign(FRIEND, parseEther("0.5"))).signedTransaction).toMatch(/^02/);
    await expect(sign(FRIEND, parseEther("2"))).rejects.toThrow(/OUTCOME_DENY_EXPLICIT/);
    await expect(sign(STRANGER, 1n)).rejects.toThrow(/OUTCOME_DENY_IMPLICIT/);
    const tag = await alice.client.createUserTag({ userTagName: "ops", userIds: [] }).catch((e: { activityStatus?: string }) => e);
    expect(tag).toMatchObject({ activity: { status: "ACTIVITY_STATUS_CONSENSUS_NEEDED" } });
  });

  it("the acting user: the caller by default, another user of the organization when named", async () => {
    const rootSelf = await dryRun(made.org.key, signRequest(STRANGER, 1n));
    expect(rootSelf).toMatchObject({ verdict: "ALLOW", decidedBy: "ROOT_QUORUM", rootQuorum: { threshold: 1, approvals: 1 } });
    expect(rootSelf.policyEvaluations).toEqual([]);
    const asAlice = await dryRun(made.org.key, { ...signRequest(FRIEND, 1n), actingUserId: made.alice.userId });
    expect(asAlice).toMatchObject({ verdict: "ALLOW", decidedBy: "POLICIES" });
    // Bob is not named by the consensus of the policy that allows alice.
    const asBob = await dryRun(made.org.key, { ...signRequest(FRIEND, 1n), actingUserId: bob.userId });
    expect(asBob).toMatchObject({ verdict: "NEEDS_CONSENSUS", outcome: "OUTCOME_REQUIRES_CONSENSUS" });
    expect(asBob.policyEvaluations.find((p: any) => p.policyId === ids.allow)).toMatchObject({ part: "consensus", deciding: true });
  });

  it("a type only the root quorum may approve: denied to a member, waiting for the quorum when it needs more than the requester", async () => {
    const member = await dryRun(made.alice.key, {
      type: "ACTIVITY_TYPE_UPDATE_ROOT_QUORUM",
      parameters: { threshold: 1, userIds: [made.org.userId] },
    });
    expect(member).toMatchObject({ verdict: "DENY", decidedBy: "ROOT_ONLY", outcome: "OUTCOME_DENY_IMPLICIT" });

    const two = await organizationWith(h, ["second"]);
    await two.root.updateRootQuorum({ threshold: 2, userIds: [two.org.userId, two.members.second!.userId] });
    const body = {
      organizationId: two.org.organizationId,
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      parameters: { userTagName: "x", userIds: [] },
    };
    const waiting: any = await h.http(two.org.key).request(PATH, body);
    expect(waiting).toMatchObject({
      verdict: "NEEDS_ROOT_QUORUM",
      outcome: "OUTCOME_REQUIRES_CONSENSUS",
      decidedBy: "ROOT_QUORUM",
      rootQuorum: { threshold: 2, approvals: 1 },
    });
  });

  it("is listed in /openapi.json under Sigil's own prefix", async () => {
    const document = (await (await fetch(`${h.url}/openapi.json`)).json()) as { paths: Record<string, unknown> };
    expect(Object.keys(document.paths)).toContain(PATH);
  });
});

describe("evaluate_policies refuses bad input, changing nothing", () => {
  it("an unknown activity type, a vote, parameters its schema refuses, a body field it does not take", async () => {
    const before = await h.snapshot();
    const { alice } = made;
    expect(await refusal(alice.key, { type: "ACTIVITY_TYPE_MAKE_COFFEE", parameters: {} })).toMatchObject({
      code: 3,
      errorCode: "ACTIVITY_TYPE_UNKNOWN",
      message: expect.stringContaining("unknown activity type ACTIVITY_TYPE_MAKE_COFFEE"),
    });
    expect(await refusal(alice.key, { type: "ACTIVITY_TYPE_APPROVE_ACTIVITY", parameters: { fingerprint: "f" } })).toMatchObject({
      code: 3,
      errorCode: "REQUEST_INVALID",
      message: expect.stringContaining("is a vote on another activity"),
    });
    expect(
      await refusal(alice.key, {
        type: "ACTIVITY_TYPE_SIGN_TRANSACTION_V2",
        parameters: { signWith: made.address, type: "TRANSACTION_TYPE_ETHEREUM" },
      }),
    ).toMatchObject({ code: 3, errorCode: "REQUEST_INVALID", message: expect.stringContaining("unsignedTransaction") });
    expect(await refusal(alice.key, { ...signRequest(FRIEND, 1n), fingerprint: "x" })).toMatchObject({
      code: 3,
      errorCode: "REQUEST_INVALID",
    });
    expect(await refusal(alice.key, { type: "ACTIVITY_TYPE_CREATE_USER_TAG" })).toMatchObject({ code: 3, errorCode: "REQUEST_INVALID" });
    expect(await h.snapshot()).toBe(before);
  });

  it("an acting user who is unknown, or a user of another organization", async () => {
    const other = await h.organization("Other");
    const before = await h.snapshot();
    for (const actingUserId of ["no-such-user", other.userId]) {
      expect(await refusal(made.org.key, { ...signRequest(FRIEND, 1n), actingUserId })).toEqual({
        code: 5,
        errorCode: "USER_NOT_FOUND",
        message: expect.stringContaining(`no user ${actingUserId} in organization ${made.org.organizationId}`),
      });
    }
    expect(await h.snapshot()).toBe(before);
  });

  it("an organization the caller's key does not belong to, an unknown organization, and an unstamped request", async () => {
    const other = await h.organization("Another");
    const before = await h.snapshot();
    const asked = (organizationId: string) =>
      h
        .http(made.alice.key)
        .request(PATH, { organizationId, ...signRequest(FRIEND, 1n) })
        .then(
          () => undefined,
          (e: unknown) => e as TurnkeyRequestError,
        );
    const foreign = await asked(other.organizationId);
    expect(foreign).toBeInstanceOf(TurnkeyRequestError);
    expect(foreign!.code).toBe(7);
    expect(foreign!.details?.[0]).toMatchObject({ turnkeyErrorCode: "ORGANIZATION_MISMATCH" });
    const unknown = await asked("no-such-organization");
    expect(unknown).toBeInstanceOf(TurnkeyRequestError);
    expect(unknown!.code).toBe(5);
    expect(unknown!.details?.[0]).toMatchObject({ turnkeyErrorCode: "ORGANIZATION_NOT_FOUND" });
    const unstamped = await h.post(PATH, JSON.stringify({ organizationId: made.org.organizationId, ...signRequest(FRIEND, 1n) }));
    expect(unstamped.status).toBe(401);
    expect(await h.snapshot()).toBe(before);
  });
});
