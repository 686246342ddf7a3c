// The one place that decides whether an activity may run, given the approvals it has so far:
//   1. approved by at least `threshold` root-quorum users -> allow (no policy is consulted);
//   2. a root-only type (update_root_quorum, …) -> waits for the root quorum, or is denied;
//   3. the organization's policies (policy/engine): an applicable deny denies, an applicable allow allows;
//   4. default allowance: a user may change its own credentials unless a policy explicitly denies it;
//   5. an allow policy waiting only for approvals, or a root user waiting for the rest of the quorum
//      -> consensus needed; otherwise implicit deny.
// A root user's activity never fails on a policy deny: it waits for the root quorum instead, so the
// quorum can always undo policies that lock everyone out.
import { ActivityTypes } from "../api/types.js";
import type { Db, Tx } from "../store/handles.js";
import { prepare, readOf, type Read, type Slots } from "../store/prepared.js";
import { API_KEY_CREDENTIAL_TYPES, type Principal } from "../auth/authenticate.js";
import type { ActivityOperation } from "../registry/registry.js";
import { activityKind } from "../registry/registry.js";
import { serviceError } from "../errors.js";
import {
  evaluatePolicies,
  namesVoter,
  approvalStillPossible,
  newBudget,
  type EvaluationInput,
  type Outcome,
  type PolicySetResult,
  type PolicySource,
  type PolicyVerdict,
  type Effect,
  type DecidingPart,
} from "../policy/engine.js";
import { evaluationTurn } from "../policy/turns.js";
import type { Value } from "../policy/types.js";
import { STEP_BUDGET } from "../policy/compile.js";
import { requesterOf, type StoredVote } from "../operations/activities/records.js";
import { sessionProfileScope } from "../operations/logins/session-profiles.js";

/** What settled a decision: the requester's session profile's scope, the root quorum (its approvals,
 * or a type only it may approve), the policies (one that allows or denies, or waits for a consensus),
 * their step budget running out, the default allowance of one's own credentials, or no policy at all. */
export type DecidedBy = "SESSION_SCOPE" | "ROOT_QUORUM" | "ROOT_ONLY" | "POLICIES" | "BUDGET" | "OWN_CREDENTIALS" | "NO_POLICY";

export interface Decision {
  outcome: "OUTCOME_ALLOW" | "OUTCOME_DENY_EXPLICIT" | "OUTCOME_DENY_IMPLICIT" | "OUTCOME_REQUIRES_CONSENSUS";
  verdicts: PolicyVerdict[];
  /** For each verdict (same index), the part of its policy that gave it. */
  parts: DecidingPart[];
  by: DecidedBy;
  /** The root quorum's state when the decision was made: threshold, how many of its members approved. */
  rootQuorum?: { threshold: number; approvals: number };
  /** Why, in words: goes into the error message of a denial and the operator's log. */
  reason: string;
  /** Denied because the requester's session profile's scope does not hold (SESSION_SCOPE_DENIED). */
  outsideSessionScope?: boolean;
}

/** The activity being decided, as policies see it. */
export interface ActivitySubject {
  organizationId: string;
  type: string;
  operation: ActivityOperation;
  parameters: Record<string, unknown>;
  requesterId: string;
  votes: StoredVote[];
  now: number;
  /** Credentials already confirmed live in this transaction (the caller's): not read again. */
  confirmed?: string[];
  /** Whose root quorum and policies decide, when not the activity's organization: the parent's, for
   * a login its backend runs in a sub-organization (`parentMayRequest`). */
  authorityOrganizationId?: string;
  /** What the operation's precheck prepared (the fees, gas and nonce a send's transaction is built
   * with): its policy keywords are computed on it. Absent when the precheck failed or there is none. */
  prepared?: unknown;
  /** The session profile of the requester's session key, whose scope must hold for the activity
   * before anything else is weighed: when it is submitted, and again when an approval may run it
   * (the transaction an approval builds may not be the one the request's decision saw). Votes are
   * judged under their own voters' scopes besides (voteWithinScope). */
  sessionProfileId?: string;
}

const authorityOf = (subject: ActivitySubject) => subject.authorityOrganizationId ?? subject.organizationId;

export interface RootQuorum {
  threshold: number;
  members: Set<string>;
}

// One round trip: the threshold beside each member (an organization always has at least one).
const rootQuorumRows = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db
    .selectFrom("organizations as o")
    .leftJoin("root_quorum_members as m", "m.organization_id", "o.id")
    .select(["o.root_quorum_threshold as threshold", "m.user_id as userId"])
    .where("o.id", "=", slot("organizationId")),
);

/** The root quorum of an organization, as a read the pipeline sends ahead. */
export const rootQuorumReadAhead = (organizationId: string): Read => readOf(rootQuorumRows, { organizationId });

async function rootQuorum(trx: Tx | Db, organizationId: string): Promise<RootQuorum> {
  const rows = await rootQuorumRows.all(trx, { organizationId });
  if (rows.length === 0) throw new Error(`organization ${organizationId} vanished during its own activity`);
  return { threshold: rows[0]!.threshold, members: new Set(rows.flatMap((r) => (r.userId ? [r.userId] : []))) };
}

const policiesOf = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db
    .selectFrom("policies")
    .select(["id", "effect", "condition", "consensus", "time"])
    .where("organization_id", "=", slot("organizationId"))
    .orderBy("created_at")
    .orderBy("id"),
);

export async function loadPolicies(trx: Tx | Db, organizationId: string): Promise<PolicySource[]> {
  const rows = await policiesOf.all(trx, { organizationId });
  return rows.map((r) => ({ ...r, effect: r.effect as Effect }));
}

/** A credential that signed something earlier (a vote, an MFA step's proof), as its liveness is read. */
export interface SigningCredential {
  credentialId: string;
  passkey: boolean;
}

/**
 * Which of these credentials still exist and have not expired at `now`: what a credential signed
 * earlier counts only while that credential could still make the request itself. The `confirmed`
 * ones (the caller's, checked in this transaction) are not read again.
 */
export async function liveCredentialIds(
  trx: Tx | Db,
  credentials: SigningCredential[],
  now: number,
  confirmed: readonly string[] = [],
): Promise<Set<string>> {
  const known = new Set(confirmed);
  const unconfirmed = credentials.filter((c) => !known.has(c.credentialId));
  const passkeyIds = [...new Set(unconfirmed.filter((c) => c.passkey).map((c) => c.credentialId))];
  const keyIds = [...new Set(unconfirmed.filter((c) => !c.passkey).map((c) => c.credentialId))];
  const keys = keyIds.length ? await trx.selectFrom("api_keys").select(["id", "expires_at"]).where("id", "in", keyIds).execute() : [];
  const passkeys = passkeyIds.length ? await trx.selectFrom("authenticators").select("id").where("id", "in", passkeyIds).execute() : [];
  return new Set([
    ...known,
    ...keys.filter((k) => k.expires_at === null || k.expires_at > now).map((k) => k.id),
    ...passkeys.map((p) => p.id),
  ]);
}

/**
 * The requester of a stored activity as they stand now: the principal its first vote records, with
 * what the credential that stamped the request says of itself today (a session key's type and
 * profile); undefined when that credential, or its user, was deleted or has expired since. An activity
 * runs only on the authority of a requester who could still make the request: deleting a key disowns
 * what it asked for and what still waits (docs/policies.md, "Approvals").
 */
export async function requesterAsItStands(
  trx: Tx,
  request: StoredVote,
  organizationId: string,
  now: number,
): Promise<Principal | undefined> {
  const recorded = requesterOf(request, organizationId);
  if (request.credentialType === "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR") {
    const passkey = await trx
      .selectFrom("authenticators")
      .select("id")
      .where("id", "=", request.credentialId)
      .where("user_id", "=", request.userId)
      .executeTakeFirst();
    return passkey ? recorded : undefined;
  }
  const key = await trx
    .selectFrom("api_keys")
    .select(["expires_at", "session_type", "session_kind", "session_profile_id"])
    .where("id", "=", request.credentialId)
    .where("user_id", "=", request.userId)
    .executeTakeFirst();
  if (!key || (key.expires_at !== null && key.expires_at <= now)) return undefined;
  return {
    ...recorded,
    ...(key.session_type ? { sessionType: key.session_type } : {}),
    ...(key.session_kind ? { sessionKind: key.session_kind } : {}),
    ...(key.session_profile_id ? { sessionProfileId: key.session_profile_id } : {}),
  };
}

/** A vote's credential, as its liveness is read. */
export const votingCredential = (vote: Pick<StoredVote, "credentialId" | "credentialType">): SigningCredential => ({
  credentialId: vote.credentialId,
  passkey: vote.credentialType === "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR",
});

/** The votes that still count: an approval signed with a credential since deleted or expired does not. */
async function withLiveVotes(trx: Tx | Db, subject: ActivitySubject): Promise<ActivitySubject> {
  const live = await liveCredentialIds(trx, subject.votes.map(votingCredential), subject.now, subject.confirmed);
  return { ...subject, votes: subject.votes.filter((v) => live.has(v.credentialId)) };
}

const approvedBy = (votes: StoredVote[]) => [
  ...new Set(votes.filter((v) => v.selection === "VOTE_SELECTION_APPROVED").map((v) => v.userId)),
];

/** `approvers` and `credentials` values for the given users and votes, read from current records. */
async function consensusValues(
  trx: Tx | Db,
  organizationId: string,
  userIds: string[],
  votes: StoredVote[],
): Promise<{ users: Map<string, Value>; credentials: Value[] }> {
  const users = new Map<string, Value>();
  if (userIds.length) {
    const rows = await trx
      .selectFrom("users")
      .select(["id", "name", "email"])
      .where("organization_id", "=", organizationId)
      .where("id", "in", userIds)
      .execute();
    const tags = await trx
      .selectFrom("user_tag_members")
      .select(["user_id", "tag_id"])
      .where("user_id", "in", userIds)
      .orderBy("tag_id")
      .execute();
    // A deleted user's approval no longer counts: it is absent from `approvers`.
    for (const row of rows) {
      users.set(row.id, {
        id: row.id,
        tags: tags.filter((t) => t.user_id === row.id).map((t) => t.tag_id),
        email: row.email ?? "",
        alias: row.name,
      });
    }
  }
  const credentials = votes.filter((v) => v.selection === "VOTE_SELECTION_APPROVED" && users.has(v.userId)).map(credentialValue);
  return { users, credentials };
}

function credentialValue(
  vote: Pick<StoredVote, "userId" | "credentialId" | "credentialType" | "webauthnCredentialId" | "publicKey">,
): Value {
  return {
    id: vote.credentialId,
    user_id: vote.userId,
    type: vote.credentialType,
    credential_id: vote.webauthnCredentialId ?? "",
    public_key: vote.publicKey,
  };
}

/**
 * What policies judge: one input, or, for an activity made of several parts (policyContexts: the keys
 * of a Solana send, the secrets of an export), one per part, each as if that part alone were requested:
 * its keywords, and its own `activity.params` over the activity's. Such an activity is allowed only
 * when every input is.
 */
async function evaluationInputs(trx: Tx | Db, subject: ActivitySubject, approverIds: string[]): Promise<EvaluationInput[]> {
  const { operation, parameters, type } = subject;
  if (!operation.policyContexts) return [await evaluationInput(trx, subject, approverIds)];
  const contexts = await operation.policyContexts(trx as Tx, subject.organizationId, parameters, type, subject.prepared);
  const base = await evaluationInput(trx, subject, approverIds);
  const activity = base.condition.activity as { params: Record<string, unknown> };
  return contexts.length
    ? contexts.map(({ params, keywords }) => ({
        ...base,
        condition: { ...keywords, ...base.condition, activity: { ...activity, params: { ...activity.params, ...params } } },
      }))
    : [base];
}

/** What policies' conditions judge the activity on, with its approvals so far: an MFA policy's
 * condition is judged on the very same keywords. */
export function conditionInputs(trx: Tx | Db, subject: ActivitySubject): Promise<EvaluationInput[]> {
  return evaluationInputs(trx, subject, approvedBy(subject.votes));
}

/** The strictest of several keys' results: an explicit deny, else anything short of allowed or waiting
 * for approvals (one that ran out of the shared budget first, so the refusal says so), else waiting
 * for approvals, else allowed (all were). */
function strictest(results: PolicySetResult[]): PolicySetResult {
  const rank = (r: PolicySetResult) =>
    r.outcome === "OUTCOME_DENY_EXPLICIT"
      ? 0
      : r.outcome === "OUTCOME_REQUIRES_CONSENSUS"
        ? 3
        : r.outcome === "OUTCOME_ALLOW"
          ? 4
          : r.budgetExceeded
            ? 1
            : 2;
  return results.reduce((worst, r) => (rank(r) < rank(worst) ? r : worst));
}

/** Every key's evaluation of one decision draws on one budget: judging an activity once per key (up to
 * 16 for sol_send_transaction) must not multiply what a decision may cost. */
function evaluateEach(policies: PolicySource[], inputs: EvaluationInput[]): PolicySetResult {
  const budget = newBudget();
  return strictest(inputs.map((input) => evaluatePolicies(policies, input, budget)));
}

async function evaluationInput(trx: Tx | Db, subject: ActivitySubject, approverIds: string[]): Promise<EvaluationInput> {
  const { operation, parameters, type } = subject;
  const { users, credentials } = await consensusValues(trx, authorityOf(subject), approverIds, subject.votes);
  const activity = {
    type,
    kind: activityKind(type),
    resource: operation.resource,
    action: operation.action,
    params: operation.policyParameters?.(parameters, type) ?? {},
    // Sigil's addition: where the activity runs, so a parent's policy allowing its backend to run
    // logins can name the sub-organizations it applies to.
    organization_id: subject.organizationId,
  };
  const extra = (await operation.policyContext?.(trx as Tx, subject.organizationId, parameters, type, subject.prepared)) ?? {};
  return {
    condition: { ...extra, activity },
    approvers: approverIds.flatMap((id) => (users.has(id) ? [users.get(id)!] : [])),
    credentials,
    nowMs: subject.now,
  };
}

/** A session profile's scope as the engine evaluates it: one allow policy whose condition is the
 * scope, so it is compiled, charged and judged exactly as a policy condition is. */
async function scopePolicy(trx: Tx | Db, sessionProfileId: string): Promise<PolicySource[]> {
  // A profile that cannot be found (its sub-organization deleted) allows nothing: never fail open.
  const scope = (await sessionProfileScope(trx, sessionProfileId)) ?? "false";
  return [{ id: sessionProfileId, effect: "EFFECT_ALLOW", condition: scope, consensus: null, time: null }];
}

/**
 * The session profile's scope, evaluated on the activity with the same keywords policies see (for an
 * activity signing with several keys, on each key's): in scope only when the scope holds for every
 * one. A scope that fails to evaluate (a keyword this activity lacks) does not hold.
 */
async function outsideSessionScope(trx: Tx, subject: ActivitySubject, sessionProfileId: string): Promise<Decision | undefined> {
  const policies = await scopePolicy(trx, sessionProfileId);
  const inputs = await evaluationInputs(trx, subject, []);
  await evaluationTurn(authorityOf(subject));
  if (evaluateEach(policies, inputs).outcome === "OUTCOME_ALLOW") return undefined;
  return {
    outcome: "OUTCOME_DENY_EXPLICIT",
    verdicts: [],
    parts: [],
    by: "SESSION_SCOPE",
    reason: `outside the scope of session profile ${sessionProfileId}, which the requesting session key was issued with`,
    outsideSessionScope: true,
  };
}

/** `activity` of the policy language for a vote (approve_activity / reject_activity) in `organizationId`. */
function voteActivity(voteType: string, organizationId: string) {
  return {
    type: voteType,
    kind: activityKind(voteType),
    resource: "ACTIVITY",
    action: voteType === ActivityTypes.ACTIVITY_TYPE_REJECT_ACTIVITY ? "REJECT" : "APPROVE",
    params: {},
    organization_id: organizationId,
  };
}

/** Whether a vote stamped by a session key issued with a session profile is within the profile's
 * scope: a vote is a request of its own (ACTIVITY_TYPE_APPROVE_ACTIVITY / REJECT_ACTIVITY). */
export async function voteWithinScope(
  trx: Tx | Db,
  sessionProfileId: string,
  voteType: string,
  organizationId: string,
  now: number,
): Promise<boolean> {
  const policies = await scopePolicy(trx, sessionProfileId);
  const input: EvaluationInput = {
    condition: { activity: voteActivity(voteType, organizationId) },
    approvers: [],
    credentials: [],
    nowMs: now,
  };
  await evaluationTurn(organizationId);
  return evaluatePolicies(policies, input).outcome === "OUTCOME_ALLOW";
}

/** What a decision rests on besides the policies: the subject with its live votes, the root quorum,
 * and, unless the root quorum alone decides, what the policies judge (their inputs). Read once, it
 * can be decided on several sets of policies (a replay weighs the current and the proposed ones). */
export interface DecisionGrounds {
  subject: ActivitySubject;
  authority: string;
  approvers: string[];
  quorum: RootQuorum;
  rootApprovals: number;
  /** Why only the root quorum may approve it, when it may not be allowed by a policy. */
  rootOnlyBecause?: string;
  /** What policies judge; absent when the root quorum alone decides. */
  inputs?: EvaluationInput[];
  /** Refused before anything else is weighed (outside its session profile's scope). */
  refusal?: Decision;
}

export async function decisionGrounds(trx: Tx, asSubmitted: ActivitySubject): Promise<DecisionGrounds> {
  // A session profile's scope bounds its session whoever else approves: not even the root quorum
  // lifts it (the key's holder can log in again without the profile if their policies allow).
  if (asSubmitted.sessionProfileId) {
    const refusal = await outsideSessionScope(trx, asSubmitted, asSubmitted.sessionProfileId);
    if (refusal)
      return {
        subject: asSubmitted,
        authority: authorityOf(asSubmitted),
        approvers: [],
        quorum: { threshold: 1, members: new Set() },
        rootApprovals: 0,
        refusal,
      };
  }
  const subject = await withLiveVotes(trx, asSubmitted);
  const authority = authorityOf(subject);
  const quorum = await rootQuorum(trx, authority);
  const approvers = approvedBy(subject.votes);
  const rootApprovals = approvers.filter((id) => quorum.members.has(id)).length;
  const grounds: DecisionGrounds = { subject, authority, approvers, quorum, rootApprovals };
  if (rootApprovals >= quorum.threshold) return grounds;
  const rootOnlyBecause = subject.operation.rootOnly
    ? `${subject.type} can only be approved by the root quorum; no policy can allow it`
    : await subject.operation.rootOnlyWhen?.(trx, subject.organizationId, subject.parameters);
  if (rootOnlyBecause) return { ...grounds, rootOnlyBecause };
  return { ...grounds, inputs: await evaluationInputs(trx, subject, approvers) };
}

/**
 * The decision on an activity, given its approvals so far. `policies`, when given, stand in for the
 * organization's stored policies: a proposed set, judged by this very code (docs/policy-testing.md).
 */
export async function decideActivity(trx: Tx, asSubmitted: ActivitySubject, policies?: PolicySource[]): Promise<Decision> {
  const grounds = await decisionGrounds(trx, asSubmitted);
  return decideOn(grounds, grounds.inputs && (policies ?? (await loadPolicies(trx, grounds.authority))));
}

/** The decision on `grounds` with `policies` (read only when the grounds leave it to policies). */
export async function decideOn(grounds: DecisionGrounds, policies: PolicySource[] | undefined): Promise<Decision> {
  if (grounds.refusal) return grounds.refusal;
  const { subject, quorum, rootApprovals, inputs } = grounds;
  const rootPending = rootApprovals > 0;
  const quorumText = `${rootApprovals} of the ${quorum.threshold} root approval(s) needed`;
  const rootQuorumState = { threshold: quorum.threshold, approvals: rootApprovals };
  const none = { verdicts: [], parts: [], rootQuorum: rootQuorumState };

  if (rootApprovals >= quorum.threshold)
    return { outcome: "OUTCOME_ALLOW", ...none, by: "ROOT_QUORUM", reason: `approved by the root quorum (${quorumText})` };
  if (grounds.rootOnlyBecause) {
    return rootPending
      ? { outcome: "OUTCOME_REQUIRES_CONSENSUS", ...none, by: "ROOT_ONLY", reason: `waiting for the root quorum (${quorumText})` }
      : { outcome: "OUTCOME_DENY_IMPLICIT", ...none, by: "ROOT_ONLY", reason: grounds.rootOnlyBecause };
  }
  if (!inputs || !policies) throw new Error("a decision left to policies needs its inputs and the policies");

  // Evaluation is synchronous from here: it waits for its turn on the event loop (policy/turns.ts).
  await evaluationTurn(grounds.authority);
  const { outcome, verdicts, parts, budgetExceeded } = evaluateEach(policies, inputs);
  const judged = { verdicts, parts, rootQuorum: rootQuorumState };
  const deciding = (o: Outcome) =>
    verdicts
      .filter((v) => v.outcome === o)
      .map((v) => v.policyId)
      .join(", ");

  if (outcome === "OUTCOME_DENY_EXPLICIT") {
    if (rootPending)
      return {
        outcome: "OUTCOME_REQUIRES_CONSENSUS",
        ...judged,
        by: "ROOT_QUORUM",
        reason: `denied by policy ${deciding(outcome)} unless the root quorum approves (${quorumText})`,
      };
    return { outcome, ...judged, by: "POLICIES", reason: `explicitly denied by policy ${deciding(outcome)}` };
  }
  if (outcome === "OUTCOME_ALLOW") return { outcome, ...judged, by: "POLICIES", reason: `allowed by policy ${deciding(outcome)}` };
  if (budgetExceeded) {
    const first = verdicts.find((v) => v.outcome === "OUTCOME_ERROR" && v.error?.includes("budget"));
    const reason = `evaluating the policies exceeded the budget of one decision (${STEP_BUDGET} steps) at policy ${first?.policyId ?? "?"}, so nothing can be allowed: simplify that policy, or send shorter parameters`;
    if (rootPending)
      return {
        outcome: "OUTCOME_REQUIRES_CONSENSUS",
        ...judged,
        by: "ROOT_QUORUM",
        reason: `${reason}; waiting for the root quorum (${quorumText})`,
      };
    return { outcome: "OUTCOME_DENY_IMPLICIT", ...judged, by: "BUDGET", reason };
  }
  const owner = subject.operation.credentialOwner?.(subject.parameters, { userId: subject.requesterId } as Principal);
  if (owner !== undefined && owner === subject.requesterId) {
    return {
      outcome: "OUTCOME_ALLOW",
      ...judged,
      by: "OWN_CREDENTIALS",
      reason: "a user may change its own credentials unless a policy denies it",
    };
  }
  if (outcome === "OUTCOME_REQUIRES_CONSENSUS")
    return { outcome, ...judged, by: "POLICIES", reason: `waiting for the approvals policy ${deciding(outcome)} requires` };
  if (rootPending)
    return { outcome: "OUTCOME_REQUIRES_CONSENSUS", ...judged, by: "ROOT_QUORUM", reason: `waiting for the root quorum (${quorumText})` };
  return { outcome: "OUTCOME_DENY_IMPLICIT", ...judged, by: "NO_POLICY", reason: "no policy allows it" };
}

/**
 * Where the root quorum stands on rejecting an activity waiting for its requester's authentication:
 * whether `userId` is one of its members, and how many members have rejected it with a credential
 * still live. The quorum rejects it once as many members reject as its threshold.
 */
export async function rootRejections(
  trx: Tx,
  subject: ActivitySubject,
  userId: string,
): Promise<{ member: boolean; rejecting: number; threshold: number }> {
  const live = await withLiveVotes(trx, subject);
  const quorum = await rootQuorum(trx, subject.organizationId);
  const rejecting = new Set(
    live.votes.filter((v) => v.selection === "VOTE_SELECTION_REJECTED" && quorum.members.has(v.userId)).map((v) => v.userId),
  );
  return { member: quorum.members.has(userId), rejecting: rejecting.size, threshold: quorum.threshold };
}

/** The words a caller sees when an activity is refused. */
export function denialError(subject: Pick<ActivitySubject, "type" | "requesterId">, decision: Decision) {
  if (decision.outsideSessionScope)
    return serviceError("SESSION_SCOPE_DENIED", `${subject.type} by user ${subject.requesterId} is not allowed: ${decision.reason}`);
  return serviceError(
    "POLICY_DENIED",
    `${subject.type} by user ${subject.requesterId} is not allowed: ${decision.outcome} (${decision.reason})`,
  );
}

/**
 * May this user vote on a pending activity? Root-quorum members always may (the quorum must be able
 * to act whatever the policies say); so may a user named by the consensus of an allow policy in force
 * for the activity, or one an allow policy permits to approve (`activity.kind == 'APPROVE_ACTIVITY'`).
 */
export async function mayVote(
  trx: Tx | Db,
  asSubmitted: ActivitySubject,
  voter: Pick<StoredVote, "userId" | "credentialId" | "credentialType" | "webauthnCredentialId" | "publicKey">,
  voteType: string,
): Promise<boolean> {
  const quorum = await rootQuorum(trx, asSubmitted.organizationId);
  if (quorum.members.has(voter.userId)) return true;
  const subject = await withLiveVotes(trx, asSubmitted);
  const policies = await loadPolicies(trx, subject.organizationId);
  const { users } = await consensusValues(trx, subject.organizationId, [voter.userId], []);
  const voterValue = users.get(voter.userId);
  if (!voterValue) return false;
  // A vote is judged as an activity of its own first: a policy that explicitly denies this user
  // approving (or rejecting) wins over being named by a consensus.
  const voteInput: EvaluationInput = {
    condition: { activity: voteActivity(voteType, subject.organizationId) },
    approvers: [voterValue],
    credentials: [credentialValue(voter)],
    nowMs: subject.now,
  };
  // Both questions share one decision's budget.
  const budget = newBudget();
  await evaluationTurn(subject.organizationId);
  const asActivity = evaluatePolicies(policies, voteInput, budget).outcome;
  if (asActivity === "OUTCOME_DENY_EXPLICIT") return false;
  if (asActivity === "OUTCOME_ALLOW") return true;
  const inputs = await evaluationInputs(trx, subject, approvedBy(subject.votes));
  await evaluationTurn(subject.organizationId);
  return inputs.some((input) => namesVoter(policies, input, voterValue, [credentialValue(voter)], budget));
}

/**
 * After a rejection: can the activity still be approved if everyone who has not rejected approves?
 * An activity waits either for the root quorum (a root user requested or approved it, or only the
 * quorum may allow it) or for a policy's consensus; it is judged by what it waits for. Otherwise any
 * activity would stay pending for ever, since the root quorum could in principle approve anything.
 */
export async function stillApprovable(trx: Tx, asSubmitted: ActivitySubject): Promise<boolean> {
  const subject = await withLiveVotes(trx, asSubmitted);
  const rejected = new Set(subject.votes.filter((v) => v.selection === "VOTE_SELECTION_REJECTED").map((v) => v.userId));
  const quorum = await rootQuorum(trx, subject.organizationId);
  const rootOnly =
    subject.operation.rootOnly || (await subject.operation.rootOnlyWhen?.(trx, subject.organizationId, subject.parameters)) !== undefined;
  const waitsForRoot = rootOnly || approvedBy(subject.votes).some((id) => quorum.members.has(id));
  if (waitsForRoot && [...quorum.members].filter((id) => !rejected.has(id)).length >= quorum.threshold) return true;
  if (rootOnly) return false;
  const everyone = await trx
    .selectFrom("users")
    .select("id")
    .where("organization_id", "=", subject.organizationId)
    .orderBy("created_at")
    .execute();
  const potential = [...new Set([...approvedBy(subject.votes), ...everyone.map((u) => u.id).filter((id) => !rejected.has(id))])];
  const inputs = await evaluationInputs(trx, subject, potential);
  // Every credential of every potential approver could be the one they approve with.
  const apiKeys = await trx
    .selectFrom("api_keys")
    .select(["id", "user_id", "public_key", "curve"])
    .where("organization_id", "=", subject.organizationId)
    .execute();
  const passkeys = await trx
    .selectFrom("authenticators")
    .select(["id", "user_id", "public_key", "credential_id"])
    .where("organization_id", "=", subject.organizationId)
    .execute();
  const credentials: Value[] = [
    ...apiKeys
      .filter((k) => !rejected.has(k.user_id))
      .map((k) => ({
        id: k.id,
        user_id: k.user_id,
        type: API_KEY_CREDENTIAL_TYPES[k.curve] ?? k.curve,
        credential_id: "",
        public_key: k.public_key,
      })),
    ...passkeys
      .filter((k) => !rejected.has(k.user_id))
      .map((k) => ({
        id: k.id,
        user_id: k.user_id,
        type: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR",
        credential_id: k.credential_id,
        public_key: k.public_key,
      })),
  ];
  const policies = await loadPolicies(trx, subject.organizationId);
  await evaluationTurn(subject.organizationId);
  const budget = newBudget();
  return inputs.every((input) => approvalStillPossible(policies, { ...input, credentials }, budget));
}
