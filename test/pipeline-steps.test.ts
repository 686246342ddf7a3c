// The pipeline's steps one at a time (src/activities/pipeline.ts): each takes what it needs and
// returns a typed outcome, so the outcome is checked here directly — authorize against a real
// database with real policies, the other steps on their own — and no step changes its inputs.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  answerOf,
  answerRetry,
  authorize,
  ballotOn,
  checkLiveness,
  draftActivity,
  readRequest,
  recordedRow,
  ruleOn,
  type Execution,
} from "../src/activities/pipeline.js";
import { operationByActivityType } from "../src/operations/catalog.js";
import { intentText } from "../src/store/activity-intent.js";
import type { Principal } from "../src/auth/authenticate.js";
import { serviceError, ServiceError } from "../src/errors.js";
import { startHarness, newKeyPair, signedRequest, type Harness } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

const activityOperation = (type: string) => {
  const operation = operationByActivityType.get(type);
  if (operation?.kind !== "activity") throw new Error(`no activity operation runs ${type}`);
  return operation;
};
const CREATE_TAG = "ACTIVITY_TYPE_CREATE_USER_TAG";
const createTag = activityOperation(CREATE_TAG);

/** The principal authentication would make of a user's API key (authorize reads only the user and
 * the credential, which the draft marks as confirmed live). */
const principal = (organizationId: string, userId: string, extra: Partial<Principal> = {}): Principal => ({
  organizationId,
  userId,
  credentialType: "CREDENTIAL_TYPE_API_KEY_P256",
  credentialId: `key-of-${userId}`,
  publicKey: "02".padEnd(66, "a"),
  scheme: "SIGNATURE_SCHEME_TK_API_P256",
  signature: "30",
  userName: `user ${userId}`,
  userEmail: null,
  ...extra,
});

/** A deployment that configured no chain: requests may name only the API's. */
const noChainsConfigured = { configures: () => false, notConfigured: (caip2: string) => new Error(`${caip2} is not configured`) };

/** A request as the read step gives it: real bytes with a real stamp (not checked by read). */
function request(type: string, organizationId: string, parameters: object) {
  const { body, headers } = signedRequest({ type, timestampMs: String(Date.now()), organizationId, parameters }, newKeyPair());
  return readRequest(activityOperation(type), Buffer.from(body), { "x-stamp": headers["X-Stamp"] }, noChainsConfigured);
}

const tagRequest = (organizationId: string) => request(CREATE_TAG, organizationId, { userTagName: "t", userIds: [] });

describe("authorize", () => {
  it("allows the root user's activity, refuses a member's with no policy, and waits for a consensus a policy asks for", async () => {
    const { org, root, members } = await organizationWith(h, ["alice", "bob"]);
    const decide = (userId: string) => {
      const { subject } = draftActivity(createTag, tagRequest(org.organizationId), principal(org.organizationId, userId), "f", Date.now());
      return h.server.store.transact("exclusive", (trx) => authorize(trx, subject));
    };

    expect(await decide(org.userId)).toEqual({ kind: "allowed", outcome: "OUTCOME_ALLOW", verdicts: [] });

    const refused = await decide(members.alice!.userId);
    expect(refused).toMatchObject({ kind: "refused", outcome: "OUTCOME_DENY_IMPLICIT", verdicts: [] });
    if (refused.kind !== "refused") throw new Error("unreachable");
    expect(refused.error.turnkeyErrorCode).toBe("POLICY_DENIED");
    expect(refused.error.message).toContain(`by user ${members.alice!.userId} is not allowed: OUTCOME_DENY_IMPLICIT (no policy allows it)`);

    const { policyId: allowId } = await root.createPolicy({
      policyName: "tags with bob",
      effect: "EFFECT_ALLOW",
      condition: `activity.type == '${CREATE_TAG}'`,
      consensus: `approvers.any(u, u.id == '${members.bob!.userId}')`,
      notes: "",
    });
    const waiting = await decide(members.alice!.userId);
    expect(waiting).toMatchObject({ kind: "waiting", outcome: "OUTCOME_REQUIRES_CONSENSUS" });
    expect(waiting.verdicts).toContainEqual(expect.objectContaining({ policyId: allowId, outcome: "OUTCOME_REQUIRES_CONSENSUS" }));

    const { policyId: denyId } = await root.createPolicy({
      policyName: "no tags",
      effect: "EFFECT_DENY",
      condition: `activity.type == '${CREATE_TAG}'`,
      notes: "",
    });
    const denied = await decide(members.alice!.userId);
    expect(denied).toMatchObject({ kind: "refused", outcome: "OUTCOME_DENY_EXPLICIT" });
    if (denied.kind !== "refused") throw new Error("unreachable");
    expect(denied.error.message).toContain(`explicitly denied by policy ${denyId}`);
    // The root quorum (a threshold of one) still allows it: policies cannot lock the quorum out.
    expect(await decide(org.userId)).toMatchObject({ kind: "allowed", outcome: "OUTCOME_ALLOW" });
  });
});

describe("ruleOn (authorize's ruling on a decision)", () => {
  const subjectOf = (type: string, parameters: object, extra: Partial<Principal> = {}) =>
    draftActivity(activityOperation(type), request(type, "org", parameters), principal("org", "u", extra), "f", 1).subject;
  const consensus = {
    outcome: "OUTCOME_REQUIRES_CONSENSUS" as const,
    verdicts: [],
    parts: [],
    by: "POLICIES" as const,
    reason: "waiting for the approvals policy p requires",
  };

  it("lets an ordinary activity wait for approvals and passes an allow through", () => {
    const subject = subjectOf(CREATE_TAG, { userTagName: "t", userIds: [] });
    expect(ruleOn(consensus, subject)).toEqual({ kind: "waiting", outcome: "OUTCOME_REQUIRES_CONSENSUS", verdicts: [] });
    const allow = { outcome: "OUTCOME_ALLOW" as const, verdicts: [], parts: [], by: "POLICIES" as const, reason: "allowed by policy p" };
    expect(ruleOn(allow, subject)).toEqual({ kind: "allowed", outcome: "OUTCOME_ALLOW", verdicts: [] });
  });

  it("refuses what cannot wait: secret parameters, a secret result, a request of the parent organization", () => {
    const cases = [
      [subjectOf("ACTIVITY_TYPE_OTP_LOGIN", { verificationToken: "secret-token", publicKey: "02".padEnd(66, "b") }), "carries secrets"],
      [subjectOf("ACTIVITY_TYPE_CREATE_READ_ONLY_SESSION", {}), "returns a credential"],
      [subjectOf(CREATE_TAG, { userTagName: "t", userIds: [] }, { organizationId: "parent" }), "requested by the parent organization"],
    ] as const;
    for (const [subject, why] of cases) {
      const ruling = ruleOn(consensus, subject);
      expect(ruling).toMatchObject({ kind: "refused", outcome: "OUTCOME_REQUIRES_CONSENSUS" });
      if (ruling.kind !== "refused") throw new Error("unreachable");
      expect(ruling.error.turnkeyErrorCode).toBe("CONSENSUS_NOT_SUPPORTED");
      expect(ruling.error.message).toBe(
        `${subject.type} ${why}${why.startsWith("requested") ? "" : " and"} cannot wait for approvals: ${consensus.reason}`,
      );
    }
  });
});

describe("draftActivity", () => {
  it("keeps the signed body in the requester's vote, and governs a parent's request by the parent", () => {
    const req = tagRequest("org");
    const draft = draftActivity(createTag, req, principal("org", "u"), "fp", 5);
    const vote = JSON.parse(draft.row.votes)[0];
    expect(vote).toMatchObject({
      userId: "u",
      selection: "VOTE_SELECTION_APPROVED",
      message: req.raw.toString("utf8"),
      activityId: draft.row.id,
    });
    // The intent is those very parameters: kept once, in the vote (store/activity-intent.ts).
    expect(draft.row.intent).toBe("");
    expect(intentText(draft.row)).toBe(JSON.stringify({ userTagName: "t", userIds: [] }));
    expect(draft.row).toMatchObject({
      status: "ACTIVITY_STATUS_CONSENSUS_NEEDED",
      result: "{}",
      failure: null,
      fingerprint: "fp",
      user_id: "u",
    });
    expect(draft.subject.authorityOrganizationId).toBeUndefined();
    expect(draftActivity(createTag, req, principal("parent", "u"), "fp", 5).subject.authorityOrganizationId).toBe("parent");
  });

  it("records a secret parameter as <redacted> and keeps no signed body that holds it", () => {
    const req = request("ACTIVITY_TYPE_OTP_LOGIN", "org", { verificationToken: "secret-token", publicKey: "02".padEnd(66, "b") });
    const draft = draftActivity(activityOperation("ACTIVITY_TYPE_OTP_LOGIN"), req, principal("org", "u"), "fp", 5);
    // The intent is not what was signed: kept whole.
    expect(JSON.parse(draft.row.intent).verificationToken).toBe("<redacted>");
    expect(draft.vote.message).toBe("");
    expect(JSON.stringify([draft.row, draft.vote])).not.toContain("secret-token");
    // The subject policies judge still has the parameter: the operation needs it.
    expect(draft.subject.parameters.verificationToken).toBe("secret-token");
  });
});

describe("recordedRow and answerOf (record's row, built from the outcomes)", () => {
  const base = draftActivity(createTag, tagRequest("org"), principal("org", "u"), "fp", 5).row;

  it("sets status, result and failure from the execution, leaving the draft as it was", () => {
    const before = JSON.stringify(base);
    const completed = recordedRow(base, { kind: "completed", result: { userTagId: "t1" } });
    expect(completed).toMatchObject({ status: "ACTIVITY_STATUS_COMPLETED", result: '{"userTagId":"t1"}', failure: null });
    const error = serviceError("POLICY_DENIED", "no");
    const failed = recordedRow(base, { kind: "failed", error });
    expect(failed).toMatchObject({ status: "ACTIVITY_STATUS_FAILED", result: "{}", failure: JSON.stringify(error.toBody()) });
    expect(recordedRow(base, { kind: "pending" }).status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    expect(recordedRow(base, { kind: "rejected" }).status).toBe("ACTIVITY_STATUS_REJECTED");
    expect(JSON.stringify(base)).toBe(before);
  });

  it("records a secret result <redacted> and gives it whole to the requester only", () => {
    const execution: Execution = { kind: "completed", result: { session: "the-credential", sessionId: "s1" } };
    const recorded = recordedRow(base, execution, ["session"]);
    expect(JSON.parse(recorded.result)).toEqual({ session: "<redacted>", sessionId: "s1" });
    const answer = answerOf(recorded, execution, ["session"]);
    expect(answer.status).toBe(200);
    expect(JSON.stringify(answer.body)).toContain("the-credential");
    expect(JSON.stringify(answerOf(recorded, execution))).not.toContain("the-credential");
  });

  it("answers a failed activity with the error it failed with", () => {
    const error = serviceError("POLICY_DENIED", "not allowed");
    const answer = answerOf(recordedRow(base, { kind: "failed", error }), { kind: "failed", error });
    expect(answer).toEqual({ status: error.httpStatus, body: error.toBody() });
  });
});

describe("answerRetry (the fingerprint step's answer to a repeated request)", () => {
  const row = (status: string, userId: string) => ({
    ...draftActivity(createTag, tagRequest("org"), principal("org", userId), "fp", 5).row,
    status,
  });
  const session = activityOperation("ACTIVITY_TYPE_CREATE_READ_ONLY_SESSION");

  it("repeats the first answer to the same user", () => {
    const existing = row("ACTIVITY_STATUS_COMPLETED", "u");
    expect(answerRetry(existing, createTag, "u")).toEqual({ kind: "repeated", activity: existing });
    // A failed activity whose result would have been a credential has none to repeat: answered too.
    expect(answerRetry(row("ACTIVITY_STATUS_FAILED", "u"), session, "u").kind).toBe("repeated");
  });

  it("refuses another user's identical request and a completed credential-returning activity", () => {
    const other = answerRetry(row("ACTIVITY_STATUS_COMPLETED", "u"), createTag, "someone-else");
    expect(other.kind === "refused" && other.error.turnkeyErrorCode).toBe("DUPLICATE_REQUEST");
    const credential = answerRetry(row("ACTIVITY_STATUS_COMPLETED", "u"), session, "u");
    expect(credential.kind === "refused" && credential.error.turnkeyErrorCode).toBe("RESULT_NOT_REPEATABLE");
  });
});

describe("ballotOn (what a vote is)", () => {
  const pending = draftActivity(createTag, tagRequest("org"), principal("org", "requester"), "fp", 5);
  const votes = [pending.vote];
  const raw = Buffer.from('{"vote":1}');

  it("casts a new vote carrying the signed body, and decides a repeated approval again without a new vote", () => {
    const ballot = ballotOn(pending.row, votes, principal("org", "approver"), "VOTE_SELECTION_APPROVED", raw, 9);
    expect(ballot).toMatchObject({
      kind: "new",
      vote: { userId: "approver", message: '{"vote":1}', activityId: pending.row.id, createdAt: 9 },
    });
    expect(ballotOn(pending.row, votes, principal("org", "requester"), "VOTE_SELECTION_APPROVED", raw, 9)).toEqual({
      kind: "again",
      vote: pending.vote,
    });
    expect(votes).toEqual([pending.vote]);
  });

  it("answers a repeated vote on a decided activity, and refuses a changed vote or a vote on a decided activity", () => {
    const completed = { ...pending.row, status: "ACTIVITY_STATUS_COMPLETED" };
    expect(ballotOn(completed, votes, principal("org", "requester"), "VOTE_SELECTION_APPROVED", raw, 9)).toEqual({ kind: "answered" });
    const code = (vote: () => unknown) => {
      try {
        vote();
      } catch (error) {
        return error instanceof ServiceError ? error.turnkeyErrorCode : error;
      }
      return "accepted";
    };
    expect(code(() => ballotOn(pending.row, votes, principal("org", "requester"), "VOTE_SELECTION_REJECTED", raw, 9))).toBe(
      "VOTE_ALREADY_CAST",
    );
    expect(code(() => ballotOn(completed, votes, principal("org", "approver"), "VOTE_SELECTION_APPROVED", raw, 9))).toBe(
      "ACTIVITY_NOT_PENDING",
    );
  });
});

describe("checkLiveness", () => {
  it("accepts a timestamp at the edge of the window and refuses one a millisecond past it, either side", () => {
    expect(() => checkLiveness("10000", 15000, 5000)).not.toThrow();
    expect(() => checkLiveness("20000", 15000, 5000)).not.toThrow();
    expect(() => checkLiveness("9999", 15000, 5000)).toThrow(/in the past; requests must be within 5s/);
    expect(() => checkLiveness("20001", 15000, 5000)).toThrow(/in the future/);
    expect(() => checkLiveness("1e3", 15000, 5000)).toThrow(/milliseconds since the epoch/);
  });
});
