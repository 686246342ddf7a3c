// The MFA step of the pipeline. After authorize allows an activity (or leaves it waiting for
// approvals), the requester's MFA policies are evaluated in order; the first whose condition holds is
// enforced: the credential that stamped the request proves one step, and the activity waits
// (ACTIVITY_STATUS_AUTHENTICATORS_NEEDED) until approvals by the requester, stamped with the other
// steps' credentials (or, for email OTP, SMS OTP and OAuth steps, attested stamps), prove the rest. Then it is decided again and runs (pipeline.ts, vote). Proofs,
// like votes, count only while their credentials are live; the requester or the root quorum may
// reject a waiting activity. An approver of an activity waiting for consensus is held to their own
// MFA policies the same way: their vote counts once their approvals have proven its steps.
import type { Principal } from "../auth/authenticate.js";
import { serviceError, type ServiceError } from "../errors.js";
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
import type { StoredVote } from "../operations/activities/records.js";
import { conditionInputs, liveCredentialIds, rootRejections, votingCredential, type ActivitySubject } from "./authorization.js";

/** The authentication an MFA policy asks of the requester of one activity, and the proofs so far. */
export interface Authentication {
  policyId: string;
  userId: string;
  steps: AuthenticationStep[];
  proofs: AuthenticationProof[];
}

/** What a credential proves: a passkey, a session key (an API key a login made), an API key, or the
 * identity an attested stamp's token vouches for (email OTP, SMS OTP, OAuth). */
export function proofOf(principal: Principal, activityType: string, now: number): AuthenticationProof {
  const type =
    principal.attestedMethod ??
    (principal.credentialType === "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR"
      ? "AUTHENTICATION_TYPE_PASSKEY"
      : principal.sessionType
        ? "AUTHENTICATION_TYPE_SESSION"
        : "AUTHENTICATION_TYPE_API_KEY");
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
async function enforcedPolicy(trx: Tx, subject: ActivitySubject, userId: string, any: boolean): Promise<MfaPoliciesTable | undefined> {
  if (!any) return undefined;
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
 * where it fits. The pipeline makes the activity wait while some step is unproven. `mfaPolicies`
 * false says the requester has none (confirmCredential read that in this transaction): nothing to read.
 */
export async function authenticationDemanded(
  trx: Tx,
  subject: ActivitySubject,
  principal: Principal,
  stamped = subject.type,
  mfaPolicies = true,
): Promise<Authentication | undefined> {
  const policy = await enforcedPolicy(trx, subject, principal.userId, mfaPolicies);
  if (!policy) return undefined;
  const steps = JSON.parse(policy.required_methods) as AuthenticationStep[];
  const first = proofOf(principal, stamped, subject.now);
  return { policyId: policy.id, userId: principal.userId, steps, proofs: advances(steps, [], first) ? [first] : [] };
}

export const authenticated = (authentication: Authentication) => fullySatisfied(authentication.steps, authentication.proofs);

/**
 * What the requester's MFA policies still ask of a stored activity about to run (an approval, or the
 * last proof of an earlier authentication, decided to run it): the demand on the activity as it is
 * now — an approval builds a send's transaction again, which may meet an MFA policy the request's did
 * not — with the proofs already recorded for it counting while their credentials are live.
 * Undefined when nothing is owed.
 */
export async function authenticationOwed(
  trx: Tx,
  subject: ActivitySubject,
  requester: Principal,
  activityId: string,
  now: number,
): Promise<Authentication | undefined> {
  const demanded = await authenticationDemanded(trx, subject, requester);
  if (!demanded || authenticated(demanded)) return undefined;
  const stored = await authenticationOf(trx, activityId, requester.userId);
  const recorded = stored ? await liveProofs(trx, JSON.parse(stored.proofs) as AuthenticationProof[], now, requester.credentialId) : [];
  let proofs = demanded.proofs;
  for (const proof of recorded)
    if (!proofs.some((p) => p.credentialId === proof.credentialId) && advances(demanded.steps, proofs, proof)) proofs = [...proofs, proof];
  const owed = { ...demanded, proofs };
  return authenticated(owed) ? undefined : owed;
}

/** Records (or replaces) the authentication the requester owes an activity. */
export async function replaceAuthentication(
  trx: Tx,
  activity: ActivitiesTable,
  authentication: Authentication,
  now: number,
): Promise<void> {
  await trx
    .deleteFrom("activity_authentications")
    .where("activity_id", "=", activity.id)
    .where("user_id", "=", authentication.userId)
    .execute();
  await saveAuthentication(trx, activity, authentication, now);
}

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

/** Proofs by attested stamps: their tokens were checked when they were made, and name no credential. */
const ATTESTED: ReadonlySet<string> = new Set([
  "AUTHENTICATION_TYPE_EMAIL_OTP",
  "AUTHENTICATION_TYPE_SMS_OTP",
  "AUTHENTICATION_TYPE_OAUTH",
]);

/**
 * The proofs still standing: one made with a credential since deleted or expired no longer counts,
 * just as a vote does not (authorization.ts, liveCredentialIds); its step must be proven again. An
 * attested proof stands as made (its token was valid then, and no credential was registered), except
 * an OAuth proof whose provider has since been deleted.
 */
async function liveProofs(trx: Tx, proofs: AuthenticationProof[], now: number, confirmed: string): Promise<AuthenticationProof[]> {
  const stamped = proofs.filter((p) => !ATTESTED.has(p.type));
  const credentials = stamped.map((p) => ({ credentialId: p.credentialId, passkey: p.type === "AUTHENTICATION_TYPE_PASSKEY" }));
  const live = await liveCredentialIds(trx, credentials, now, [confirmed]);
  const providerIds = proofs
    .filter((p) => p.type === "AUTHENTICATION_TYPE_OAUTH" && p.credentialId !== confirmed)
    .map((p) => p.credentialId);
  const providers = providerIds.length ? await trx.selectFrom("oauth_providers").select("id").where("id", "in", providerIds).execute() : [];
  for (const provider of providers) live.add(provider.id);
  return proofs.filter(
    (p) => live.has(p.credentialId) || p.type === "AUTHENTICATION_TYPE_EMAIL_OTP" || p.type === "AUTHENTICATION_TYPE_SMS_OTP",
  );
}

/**
 * A credential offered to prove one more step of the authentication `stored` records. Proofs whose
 * credentials are gone are dropped first (and the record with them, so get_mfa_status shows it). A
 * credential already counted is a retry ("repeated"); one that fits no step still unproven is refused
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
  const recorded = JSON.parse(stored.proofs) as AuthenticationProof[];
  const proofs = await liveProofs(trx, recorded, now, proof.credentialId);
  const save = (next: AuthenticationProof[]) =>
    trx
      .updateTable("activity_authentications")
      .set({ proofs: JSON.stringify(next), updated_at: now })
      .where("activity_id", "=", stored.activity_id)
      .where("user_id", "=", stored.user_id)
      .execute();
  if (proofs.some((p) => p.credentialId === proof.credentialId)) {
    if (proofs.length !== recorded.length) await save(proofs);
    return fullySatisfied(steps, proofs) ? "satisfied" : "repeated";
  }
  if (!advances(steps, proofs, proof))
    throw serviceError(
      "AUTHENTICATION_METHOD_NOT_ACCEPTED",
      `activity ${stored.activity_id} waits for user ${stored.user_id} to authenticate further: ${proof.type} ${proof.credentialId} satisfies none of the steps of MFA policy ${stored.mfa_policy_id} still to be proven (get_mfa_status lists them)`,
    );
  const next = [...proofs, proof];
  await save(next);
  return fullySatisfied(steps, next) ? "satisfied" : "advanced";
}

/** What a vote on an activity waiting for its requester's authentication does. */
export type WaitingVote =
  /** Nothing changes: a credential already counted, or a rejection already cast. */
  | { kind: "repeated" }
  /** One more step proven; others remain. */
  | { kind: "advanced" }
  /** Every step proven: the activity is decided again. */
  | { kind: "satisfied" }
  /** A root-quorum member's rejection, short of the quorum's threshold: kept, the activity still waits. */
  | { kind: "rejection noted" }
  /** Withdrawn by its requester, or rejected by the root quorum. */
  | { kind: "rejected" }
  /** The credential that stamped the request is gone: the activity fails with this error. */
  | { kind: "orphaned"; error: ServiceError };

/**
 * A vote on an activity waiting for its requester's authentication (`subject.votes` as stored, the
 * requester's first). Only the requester's approvals prove steps, and only while the credential that
 * stamped the request is still live: a request whose credential was deleted or has expired since
 * fails rather than run on the authority of the others (the requester sends it again). The requester
 * (with any live credential) may withdraw it, and the root quorum may reject it: a rejection by
 * anyone else, and anyone else's approval, are refused.
 */
export async function voteOnWaiting(
  trx: Tx,
  subject: ActivitySubject,
  row: ActivitiesTable,
  principal: Principal,
  vote: StoredVote,
  proof: AuthenticationProof,
  now: number,
): Promise<WaitingVote> {
  const waitsFor = `activity ${row.id} waits for its requester (user ${row.user_id}) to authenticate further`;
  const requester = principal.userId === row.user_id;
  if (vote.selection === "VOTE_SELECTION_REJECTED") {
    if (subject.votes.some((v) => v.userId === principal.userId && v.selection === "VOTE_SELECTION_REJECTED")) return { kind: "repeated" };
    if (requester) return { kind: "rejected" };
    const quorum = await rootRejections(trx, { ...subject, votes: [...subject.votes, vote] }, principal.userId);
    if (!quorum.member)
      throw serviceError(
        "AUTHENTICATION_METHOD_NOT_ACCEPTED",
        `${waitsFor}: only the requester and the root quorum may reject it, and user ${principal.userId} is neither`,
      );
    return quorum.rejecting >= quorum.threshold ? { kind: "rejected" } : { kind: "rejection noted" };
  }
  if (!requester)
    throw serviceError(
      "AUTHENTICATION_METHOD_NOT_ACCEPTED",
      `${waitsFor}: user ${principal.userId} cannot vote on it or authenticate for them`,
    );
  const submitted = subject.votes[0];
  if (!submitted) throw new Error(`activity ${row.id} waits for authentication but records no request`);
  const live = await liveCredentialIds(trx, [votingCredential(submitted)], now, [principal.credentialId]);
  if (!live.has(submitted.credentialId))
    return {
      kind: "orphaned",
      error: serviceError(
        "REQUESTING_CREDENTIAL_GONE",
        `activity ${row.id} cannot run: credential ${submitted.credentialId}, which stamped the request, was deleted or has expired while it waited for its requester to authenticate further; send the request again stamped with a live credential`,
      ),
    };
  const stored = await authenticationOf(trx, row.id, principal.userId);
  if (!stored) throw new Error(`activity ${row.id} waits for authentication but records none`);
  return { kind: await addProof(trx, stored, proof, now) };
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
