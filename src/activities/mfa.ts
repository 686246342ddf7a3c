// The MFA step of the pipeline. After authorize allows an activity (or leaves it waiting for
// approvals), the requester's MFA policies are evaluated in order; the first whose condition holds is
// enforced: the credential that stamped the request proves one step, and the activity waits
// (ACTIVITY_STATUS_AUTHENTICATORS_NEEDED) until approvals by the requester, stamped with the other
// steps' credentials, prove the rest. Then it is decided again and runs (pipeline.ts, vote). An
// approver of an activity waiting for consensus is held to their own MFA policies the same way: their
// vote counts once their approvals have proven its steps.
import type { Principal } from "../auth/authenticate.js";
import { serviceError } from "../errors.js";
import { evaluatePolicies, newBudget } from "../policy/engine.js";
import { evaluationTurn } from "../policy/turns.js";
import type { Tx } from "../store/handles.js";
import type { ActivitiesTable, ActivityAuthenticationsTable, MfaPoliciesTable } from "../store/schema.js";
import {
  advances,
  fullySatisfied,
  mfaPoliciesOf,
  type AuthenticationProof,
  type AuthenticationStep,
} from "../operations/mfa/mfa-policies.js";
import { conditionInputs, type ActivitySubject } from "./authorization.js";

/** The authentication an MFA policy asks of the requester of one activity, and the proofs so far. */
export interface Authentication {
  policyId: string;
  userId: string;
  steps: AuthenticationStep[];
  proofs: AuthenticationProof[];
}

/** What a credential proves: a passkey, a session key (an API key a login made), or an API key. */
export function proofOf(principal: Principal, activityType: string, now: number): AuthenticationProof {
  const type =
    principal.credentialType === "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR"
      ? "AUTHENTICATION_TYPE_PASSKEY"
      : principal.sessionType
        ? "AUTHENTICATION_TYPE_SESSION"
        : "AUTHENTICATION_TYPE_API_KEY";
  return {
    type,
    credentialId: principal.credentialId,
    ...(principal.sessionProfileId ? { sessionProfileId: principal.sessionProfileId } : {}),
    publicKey: principal.publicKey,
    scheme: principal.scheme,
    signature: principal.signature,
    activityType,
    createdAt: now,
  };
}

/**
 * The first of the requester's MFA policies, by order, whose condition holds for the activity (for an
 * activity signing with several keys, for any of them). A condition whose evaluation fails does not
 * hold, as with policies; one cut short by the step budget is taken to hold (the activity then waits
 * for authentication rather than slipping past a policy nobody finished evaluating).
 */
async function enforcedPolicy(trx: Tx, subject: ActivitySubject, userId: string): Promise<MfaPoliciesTable | undefined> {
  const policies = await mfaPoliciesOf(trx, userId);
  if (policies.length === 0) return undefined;
  const inputs = await conditionInputs(trx, subject);
  const budget = newBudget();
  await evaluationTurn(subject.organizationId);
  return policies.find((policy) => {
    const source = { id: policy.id, effect: "EFFECT_ALLOW" as const, condition: policy.condition, consensus: null, time: null };
    return inputs.some((input) => {
      const result = evaluatePolicies([source], input, budget);
      return result.outcome === "OUTCOME_ALLOW" || result.budgetExceeded;
    });
  });
}

/**
 * What the requester's MFA policies ask of this activity: nothing (undefined) when none applies, else
 * the enforced policy's steps, the credential that stamped the request already proving one of them
 * where it fits. The pipeline makes the activity wait while some step is unproven.
 */
export async function authenticationDemanded(
  trx: Tx,
  subject: ActivitySubject,
  principal: Principal,
  stamped = subject.type,
): Promise<Authentication | undefined> {
  const policy = await enforcedPolicy(trx, subject, principal.userId);
  if (!policy) return undefined;
  const steps = JSON.parse(policy.required_methods) as AuthenticationStep[];
  const first = proofOf(principal, stamped, subject.now);
  return { policyId: policy.id, userId: principal.userId, steps, proofs: advances(steps, [], first) ? [first] : [] };
}

export const authenticated = (authentication: Authentication) => fullySatisfied(authentication.steps, authentication.proofs);

export async function saveAuthentication(trx: Tx, activity: ActivitiesTable, authentication: Authentication, now: number): Promise<void> {
  await trx
    .insertInto("activity_authentications")
    .values({
      activity_id: activity.id,
      user_id: authentication.userId,
      organization_id: activity.organization_id,
      mfa_policy_id: authentication.policyId,
      required_methods: JSON.stringify(authentication.steps),
      proofs: JSON.stringify(authentication.proofs),
      created_at: now,
      updated_at: now,
    })
    .execute();
}

/** The authentication `userId` owes `activityId`, if an MFA policy asked them for one. */
export function authenticationOf(trx: Tx, activityId: string, userId: string) {
  return trx
    .selectFrom("activity_authentications")
    .selectAll()
    .where("activity_id", "=", activityId)
    .where("user_id", "=", userId)
    .executeTakeFirst();
}

/**
 * A credential offered to prove one more step of the authentication `stored` records: a credential
 * already counted is a retry ("repeated"); one that fits no step still unproven is refused
 * (AUTHENTICATION_METHOD_NOT_ACCEPTED), leaving everything as it was. Returns whether every step is
 * now proven.
 */
export async function addProof(
  trx: Tx,
  stored: ActivityAuthenticationsTable,
  proof: AuthenticationProof,
  now: number,
): Promise<"repeated" | "advanced" | "satisfied"> {
  const steps = JSON.parse(stored.required_methods) as AuthenticationStep[];
  const proofs = JSON.parse(stored.proofs) as AuthenticationProof[];
  if (proofs.some((p) => p.credentialId === proof.credentialId)) return fullySatisfied(steps, proofs) ? "satisfied" : "repeated";
  if (!advances(steps, proofs, proof))
    throw serviceError(
      "AUTHENTICATION_METHOD_NOT_ACCEPTED",
      `activity ${stored.activity_id} waits for user ${stored.user_id} to authenticate further: ${proof.type} ${proof.credentialId} satisfies none of the steps of MFA policy ${stored.mfa_policy_id} still to be proven (get_mfa_status lists them)`,
    );
  const next = [...proofs, proof];
  await trx
    .updateTable("activity_authentications")
    .set({ proofs: JSON.stringify(next), updated_at: now })
    .where("activity_id", "=", stored.activity_id)
    .where("user_id", "=", stored.user_id)
    .execute();
  return fullySatisfied(steps, next) ? "satisfied" : "advanced";
}

/**
 * An approval of an activity waiting for its requester's authentication: only the requester's
 * approvals prove steps; anyone else's vote, and a rejection, are refused.
 */
export async function proveStep(
  trx: Tx,
  row: ActivitiesTable,
  principal: Principal,
  selection: "VOTE_SELECTION_APPROVED" | "VOTE_SELECTION_REJECTED",
  proof: AuthenticationProof,
  now: number,
): Promise<"repeated" | "advanced" | "satisfied"> {
  const waitsFor = `activity ${row.id} waits for its requester (user ${row.user_id}) to authenticate further`;
  if (principal.userId !== row.user_id)
    throw serviceError(
      "AUTHENTICATION_METHOD_NOT_ACCEPTED",
      `${waitsFor}: user ${principal.userId} cannot vote on it or authenticate for them`,
    );
  if (selection !== "VOTE_SELECTION_APPROVED")
    throw serviceError(
      "AUTHENTICATION_METHOD_NOT_ACCEPTED",
      `${waitsFor}: a rejection proves nothing; approve it with the credential a step requires`,
    );
  const stored = await authenticationOf(trx, row.id, principal.userId);
  if (!stored) throw new Error(`activity ${row.id} waits for authentication but records none`);
  return addProof(trx, stored, proof, now);
}

/**
 * An approver's own MFA (the product holds approvers to their MFA policies too): the first approval
 * of an approver whose MFA policy applies to the activity records what it requires, its credential
 * proving the step it fits; their vote counts only once every step is proven by their approvals.
 * Returns whether the vote may count now.
 */
export async function approverAuthenticated(
  trx: Tx,
  subject: ActivitySubject,
  row: ActivitiesTable,
  principal: Principal,
  proof: AuthenticationProof,
  now: number,
): Promise<boolean> {
  const stored = await authenticationOf(trx, row.id, principal.userId);
  if (stored) return (await addProof(trx, stored, proof, now)) === "satisfied";
  const demanded = await authenticationDemanded(trx, subject, principal, proof.activityType);
  if (!demanded) return true;
  await saveAuthentication(trx, row, demanded, now);
  return authenticated(demanded);
}
