// Knowing before submitting (docs/policy-testing.md): what the policy engine would decide on an
// activity, with every policy's verdict and the part of it that gave the verdict. One function,
// `explainDecision`, answers it for the three askers: the dry-run query (a would-be request, judged
// on the organization's stored policies), `sigil policy test` (cases judged offline on a proposed
// set) and `sigil policy replay` (recorded activities judged again on a proposed set). It builds
// nothing of its own: the subject is the one a submit builds (pipeline.ts, subjectOf), decided by the
// submit's own decideActivity and ruleOn, so a keyword (wallet, eth.tx, solana.tx, eth.eip_712, …)
// is what a submit would see. It only reads: it records no activity and consumes no fingerprint.
import type { Tx, Db } from "../store/handles.js";
import type { Principal } from "../auth/authenticate.js";
import type { ActivityOperation, WouldBeRequest } from "../registry/registry.js";
import type { Store } from "../store/database.js";
import { CLIENT_TYPE_SPELLINGS, swagger } from "../registry/registry.js";
import { type ServedChains, validateActivityRequest } from "../registry/validation.js";
import { serviceError } from "../errors.js";
import type { DecidingPart, Outcome, PolicySource } from "../policy/engine.js";
import { operationByActivityType } from "../operations/catalog.js";
import type { StoredVote } from "../operations/activities/records.js";
import {
  decideOn,
  decisionGrounds,
  loadPolicies,
  type ActivitySubject,
  type DecidedBy,
  type Decision,
  type DecisionGrounds,
} from "./authorization.js";
import { ruleOn, subjectOf, voteOf } from "./pipeline.js";

/** The answer, in four words: runs, refused, waits for approvals a policy's consensus names, or
 * waits for the root quorum. */
export type Verdict = "ALLOW" | "DENY" | "NEEDS_CONSENSUS" | "NEEDS_ROOT_QUORUM";

export interface PolicyExplanation {
  policyId: string;
  /** The policy's name, where known (stored policies, or the proposed file's). */
  policyName?: string;
  outcome: Outcome;
  /** The part of the policy that gave this outcome: its effect (every part held), the time,
   * condition or consensus that did not hold or failed to evaluate, or its text not compiling. */
  part: DecidingPart;
  /** Whether this policy is one of those that settled the decision. */
  deciding: boolean;
  /** Why it failed to evaluate (OUTCOME_ERROR): a keyword this activity lacks, a compile error, … */
  error?: string;
}

export interface Explanation {
  verdict: Verdict;
  /** The engine's outcome, as an activity's policy evaluation records it. */
  outcome: Decision["outcome"];
  decidedBy: DecidedBy;
  reason: string;
  /** The error a submit would be refused with (POLICY_DENIED, CONSENSUS_NOT_SUPPORTED, …); absent
   * when it would run or wait. */
  error?: { code: string; message: string };
  rootQuorum?: { threshold: number; approvals: number };
  /** Every policy judged, in the order the engine judged them. */
  policyEvaluations: PolicyExplanation[];
}

/** A would-be submit request, as read: its operation, its type (a client's own spelling read as the
 * API's) and its parameters, held to the submit's own envelope schema. */
export interface WouldBe {
  operation: ActivityOperation;
  type: string;
  parameters: Record<string, unknown>;
}

/** Reads a would-be request as a submit's read step does (the type an operation serves, the
 * parameters its schema admits); refuses as a submit would (ACTIVITY_TYPE_UNKNOWN, REQUEST_INVALID, …). */
export function readWouldBe(request: { organizationId: string; type: string; parameters: unknown }, chains: ServedChains): WouldBe {
  const type = Object.hasOwn(CLIENT_TYPE_SPELLINGS, request.type) ? CLIENT_TYPE_SPELLINGS[request.type]! : request.type;
  const operation = operationByActivityType.get(type);
  if (!operation) {
    if (swagger.activityTypes[type])
      throw serviceError("ACTIVITY_TYPE_UNSUPPORTED", `activity type ${type} is not supported by this server`);
    throw serviceError("ACTIVITY_TYPE_UNKNOWN", `unknown activity type ${type}: name an activity type a submit endpoint accepts`);
  }
  if (operation.kind !== "activity")
    throw serviceError(
      "REQUEST_INVALID",
      `${type} is a vote on another activity, which policies do not judge on its own: evaluate the activity voted on instead`,
    );
  // The envelope a submit's schema holds it to, around the parameters given.
  validateActivityRequest(type, { type, timestampMs: "0", organizationId: request.organizationId, parameters: request.parameters }, chains);
  return { operation, type, parameters: request.parameters as Record<string, unknown> };
}

/** A requester who is not the caller (the dry run's `actingUserId`, a test case's user): a user of
 * the organization, approving with a credential that is taken as live. Policies reading `credentials`
 * see it as an API key of that user with no public key. */
export function actingAs(organizationId: string, user: { id: string; name: string; email: string | null }): Principal {
  return {
    organizationId,
    userId: user.id,
    credentialType: "CREDENTIAL_TYPE_API_KEY_P256",
    credentialId: `acting-${user.id}`,
    publicKey: "",
    scheme: "",
    signature: "",
    userName: user.name,
    userEmail: user.email,
  };
}

/** The acting user of a dry run: one of the organization's users (USER_NOT_FOUND otherwise, another
 * organization's user included). */
export async function actingUser(db: Db | Tx, organizationId: string, userId: string): Promise<Principal> {
  const user = await db
    .selectFrom("users")
    .select(["id", "name", "email"])
    .where("organization_id", "=", organizationId)
    .where("id", "=", userId)
    .executeTakeFirst();
  if (!user) throw serviceError("USER_NOT_FOUND", `no user ${userId} in organization ${organizationId}`);
  return actingAs(organizationId, user);
}

/** The subject a submit of `wouldBe` by `principal` at `now` would be decided on (with what a
 * precheck prepared, when it is known: a pending activity's stored `prepared`). */
export function wouldBeSubject(
  organizationId: string,
  wouldBe: WouldBe,
  principal: Principal,
  now: number,
  prepared?: { prepared?: unknown },
): ActivitySubject {
  const vote: StoredVote = voteOf(principal, "dry-run", "VOTE_SELECTION_APPROVED", "", now);
  const precheck = prepared && "prepared" in prepared ? { kind: "passed" as const, prepared: prepared.prepared } : undefined;
  return subjectOf(
    wouldBe.operation,
    { organizationId, type: wouldBe.type, parameters: wouldBe.parameters },
    principal,
    vote,
    now,
    precheck,
  );
}

/**
 * What a submit of `subject` would be answered: the decision of the submit's own code (decideActivity's
 * two steps, then ruleOn), judged on `policies` when given and on the organization's stored policies
 * otherwise. `names` gives policies' names by id.
 */
export async function explainDecision(
  trx: Tx,
  subject: ActivitySubject,
  policies?: PolicySource[],
  names?: ReadonlyMap<string, string>,
): Promise<Explanation> {
  const grounds = await decisionGrounds(trx, subject);
  return explainOn(grounds, grounds.inputs && (policies ?? (await loadPolicies(trx, grounds.authority))), names);
}

/** explainDecision on grounds already read: one activity decided on several sets of policies. */
export async function explainOn(
  grounds: DecisionGrounds,
  policies: PolicySource[] | undefined,
  names?: ReadonlyMap<string, string>,
): Promise<Explanation> {
  const decision = await decideOn(grounds, grounds.inputs && policies);
  const ruled = ruleOn(decision, grounds.subject);
  const policyOutcome: Outcome | undefined =
    decision.by === "POLICIES"
      ? decision.outcome
      : decision.by === "ROOT_QUORUM" && decision.verdicts.some((v) => v.outcome === "OUTCOME_DENY_EXPLICIT")
        ? "OUTCOME_DENY_EXPLICIT"
        : decision.by === "BUDGET"
          ? "OUTCOME_ERROR"
          : undefined;
  const verdict: Verdict =
    ruled.kind === "refused"
      ? "DENY"
      : decision.outcome === "OUTCOME_ALLOW"
        ? "ALLOW"
        : decision.by === "ROOT_QUORUM" || decision.by === "ROOT_ONLY"
          ? "NEEDS_ROOT_QUORUM"
          : "NEEDS_CONSENSUS";
  return {
    verdict,
    outcome: decision.outcome,
    decidedBy: decision.by,
    reason: decision.reason,
    ...(ruled.kind === "refused" ? { error: { code: ruled.error.turnkeyErrorCode, message: ruled.error.message } } : {}),
    ...(decision.rootQuorum ? { rootQuorum: decision.rootQuorum } : {}),
    policyEvaluations: decision.verdicts.map((v, i) => {
      const name = names?.get(v.policyId);
      return {
        policyId: v.policyId,
        ...(name !== undefined ? { policyName: name } : {}),
        outcome: v.outcome,
        part: decision.parts[i] ?? "effect",
        deciding: policyOutcome !== undefined && v.outcome === policyOutcome,
        ...(v.error ? { error: v.error } : {}),
      };
    }),
  };
}

/** The names of an organization's stored policies, by id. */
export async function policyNames(db: Db | Tx, organizationId: string): Promise<Map<string, string>> {
  const rows = await db.selectFrom("policies").select(["id", "name"]).where("organization_id", "=", organizationId).execute();
  return new Map(rows.map((r) => [r.id, r.name]));
}

/**
 * The policy dry run (evaluate_policies): reads the would-be request as a submit would, then, on one
 * snapshot of the database, decides it as a submit by the caller (or by `actingUserId`, a user of the
 * organization) at `now` would be decided. Keywords a submit computes from a precheck's network reads
 * (a send's fees and nonce) are absent here: the dry run sends nothing anywhere.
 */
export async function answerDryRun(
  store: Store,
  chains: ServedChains,
  organizationId: string,
  principal: Principal,
  request: WouldBeRequest,
  now: number,
): Promise<Record<string, unknown>> {
  const wouldBe = readWouldBe({ organizationId, type: request.type, parameters: request.parameters }, chains);
  const explanation = await store.readSnapshot(async (trx) => {
    const requester = request.actingUserId !== undefined ? await actingUser(trx, organizationId, request.actingUserId) : principal;
    const subject = wouldBeSubject(organizationId, wouldBe, requester, now);
    const names = await policyNames(trx, subject.authorityOrganizationId ?? organizationId);
    return explainDecision(trx, subject, undefined, names);
  });
  return { ...explanation };
}
