// MFA policies: per user, a policy-language condition and the steps of authentication an activity of
// that user must pass when the condition holds (the pipeline enforces them: activities/mfa.ts). Here:
// their declarations, how steps are checked when stored, and which proofs satisfy which steps.
import { serviceError } from "../../errors.js";
import { InvalidPolicyError, compileField } from "../../policy/engine.js";
import type { ActivityAuthenticationsTable, MfaPoliciesTable } from "../../store/schema.js";
import type { Db, Tx } from "../../store/handles.js";
import { defineActivity, defineQuery, type ActivityContext, type ParametersOf } from "../../registry/registry.js";
// MFA conditions may name the transaction keywords, so they must be declared before any is checked.
import "../wallets/transaction-keywords.js";
import { requireName } from "../identity/credentials.js";
import { renderMfaPolicy, requireUser } from "../resources.js";
import { usableSessionProfile } from "../logins/session-profiles.js";
import { requireActivity } from "../activities/records.js";
import { newId } from "../../store/ids.js";

export type AuthenticationType = ParametersOf<"create_mfa_policy">["requiredAuthenticationMethods"][number]["any"][number]["type"];

export interface AuthenticationMethod {
  type: AuthenticationType;
  id?: string;
}

/** One step: any one of its methods satisfies it. */
export interface AuthenticationStep {
  any: AuthenticationMethod[];
}

/** A credential that proved a step: what it was (its method) and the stamp that proved it. */
export interface AuthenticationProof {
  type: AuthenticationType;
  /** The API key or authenticator id (a session key's own id for a session). */
  credentialId: string;
  /** A session key's session profile, which a session method's `id` names (tkhq/docs, satisfying MFA). */
  sessionProfileId?: string;
  publicKey: string;
  scheme: string;
  signature: string;
  /** The activity or approval it stamped. */
  activityType: string;
  createdAt: number;
}

/** The most steps, and methods in a step, one MFA policy may list: enough for any real sequence, few
 * enough that matching proofs to steps stays trivial. */
const MAX_STEPS = 10;
const MAX_METHODS_PER_STEP = 10;

type ProofIdentity = Pick<AuthenticationProof, "type" | "credentialId" | "sessionProfileId">;

/** The id a method names this proof by: a session's profile, an OAuth proof's provider, any other
 * credential's own id; none for a one-time password (its proof's credentialId is the contact). */
const idOf = (proof: ProofIdentity) =>
  proof.type === "AUTHENTICATION_TYPE_SESSION"
    ? proof.sessionProfileId
    : proof.type === "AUTHENTICATION_TYPE_EMAIL_OTP" || proof.type === "AUTHENTICATION_TYPE_SMS_OTP"
      ? undefined
      : proof.credentialId;

/** Whether `proof` is a credential `method` accepts: its type, and its very id (for a session: the
 * profile it was issued with) when the method names one. */
const accepts = (method: AuthenticationMethod, proof: ProofIdentity) =>
  method.type === proof.type && (method.id === undefined || method.id === idOf(proof));

/**
 * The most steps distinct proofs can satisfy, each proof serving one step (a bipartite matching, by
 * augmenting paths). Steps may be satisfied in any order (tkhq/docs, MFA overview): a proof counts
 * wherever it fits, and one fitting two steps is placed where it leaves the others satisfiable.
 */
export function stepsSatisfied(steps: AuthenticationStep[], proofs: ProofIdentity[]): number {
  const proofOfStep = new Array<number>(steps.length).fill(-1);
  const place = (p: number, visited: Set<number>): boolean => {
    for (const [s, step] of steps.entries()) {
      if (visited.has(s) || !step.any.some((m) => accepts(m, proofs[p]!))) continue;
      visited.add(s);
      if (proofOfStep[s] === -1 || place(proofOfStep[s]!, visited)) {
        proofOfStep[s] = p;
        return true;
      }
    }
    return false;
  };
  let satisfied = 0;
  for (const p of proofs.keys()) if (place(p, new Set())) satisfied++;
  return satisfied;
}

/** Whether `proof` brings the authentication closer to done: it satisfies one more step than before. */
export function advances(steps: AuthenticationStep[], proofs: AuthenticationProof[], proof: AuthenticationProof): boolean {
  return stepsSatisfied(steps, [...proofs, proof]) > stepsSatisfied(steps, proofs);
}

export const fullySatisfied = (steps: AuthenticationStep[], proofs: AuthenticationProof[]) =>
  stepsSatisfied(steps, proofs) === steps.length;

const methodView = (m: AuthenticationMethod) => ({ type: m.type, ...(m.id !== undefined ? { id: m.id } : {}) });

/** get_mfa_status's entry for one user's authentication of one activity. */
export function renderMfaStatus(row: ActivityAuthenticationsTable) {
  const steps = JSON.parse(row.required_methods) as AuthenticationStep[];
  const proofs = JSON.parse(row.proofs) as AuthenticationProof[];
  return {
    mfaPolicyId: row.mfa_policy_id,
    userId: row.user_id,
    satisfied: fullySatisfied(steps, proofs),
    // As a method names it: a session by its profile (none for a session issued without one).
    satisfiedMethods: proofs.map((p) => ({ type: p.type, ...(idOf(p) !== undefined ? { id: idOf(p) } : {}) })),
    requiredMethods: steps.map((s) => ({ any: s.any.map(methodView) })),
  };
}

/** The user's MFA policies in the order they are evaluated: by `order`, then oldest first. */
export function mfaPoliciesOf(db: Db | Tx, userId: string) {
  return db
    .selectFrom("mfa_policies")
    .selectAll()
    .where("user_id", "=", userId)
    .orderBy("evaluation_order")
    .orderBy("created_at")
    .orderBy("id")
    .execute();
}

function checkCondition(condition: string): string {
  if (condition.trim() === "")
    throw serviceError("POLICY_INVALID", "condition must not be empty: write true to apply the MFA policy to every activity");
  try {
    compileField("condition", condition);
  } catch (error) {
    if (error instanceof InvalidPolicyError)
      throw serviceError("POLICY_INVALID", `condition is not a valid policy expression: ${error.problem.message}`);
    throw error;
  }
  return condition;
}

function checkOrder(order: number): number {
  if (!Number.isSafeInteger(order) || order < 0) throw serviceError("REQUEST_INVALID", `order must be a whole number from 0, got ${order}`);
  return order;
}

/**
 * The steps as stored. Refused: no step (such a policy would require nothing, and, as the first whose
 * condition holds, would stop the evaluation before the policies that do require something), a step
 * with no method, an id where the method has none, and an id that is not one of the user's own
 * credentials. Every method can be proven: email OTP, SMS OTP and OAuth by attested stamps.
 */
async function checkSteps(trx: Tx, organizationId: string, userId: string, steps: AuthenticationStep[]): Promise<AuthenticationStep[]> {
  const field = "requiredAuthenticationMethods";
  if (steps.length === 0) throw serviceError("REQUEST_INVALID", `${field} must list at least one step`);
  if (steps.length > MAX_STEPS) throw serviceError("REQUEST_INVALID", `${field} lists ${steps.length} steps; at most ${MAX_STEPS}`);
  const stored: AuthenticationStep[] = [];
  for (const [i, step] of steps.entries()) {
    const where = `${field}[${i}].any`;
    if (step.any.length === 0) throw serviceError("REQUEST_INVALID", `${where} must list at least one method`);
    if (step.any.length > MAX_METHODS_PER_STEP)
      throw serviceError("REQUEST_INVALID", `${where} lists ${step.any.length} methods; at most ${MAX_METHODS_PER_STEP}`);
    const methods: AuthenticationMethod[] = [];
    for (const [j, method] of step.any.entries()) {
      const id = method.id?.trim() ? method.id : undefined;
      if (id !== undefined) await checkMethodId(trx, organizationId, userId, method.type, id, `${where}[${j}]`);
      methods.push({ type: method.type, ...(id !== undefined ? { id } : {}) });
    }
    stored.push({ any: methods });
  }
  return stored;
}

async function checkMethodId(trx: Tx, organizationId: string, userId: string, type: AuthenticationType, id: string, where: string) {
  const table = {
    AUTHENTICATION_TYPE_API_KEY: "api_keys",
    AUTHENTICATION_TYPE_PASSKEY: "authenticators",
    AUTHENTICATION_TYPE_OAUTH: "oauth_providers",
  } as const;
  // A session method's id is a session profile the organization may issue sessions with.
  if (type === "AUTHENTICATION_TYPE_SESSION") {
    await usableSessionProfile(trx, organizationId, id);
    return;
  }
  if (!(type in table)) throw serviceError("REQUEST_INVALID", `${where}: ${type} has no id (one-time passwords are not credentials)`);
  const found = await trx
    .selectFrom(table[type as keyof typeof table])
    .select("id")
    .where("organization_id", "=", organizationId)
    .where("user_id", "=", userId)
    .where("id", "=", id)
    .executeTakeFirst();
  if (!found) throw serviceError("REQUEST_INVALID", `${where}.id ${id} is not a ${type} credential of user ${userId}`);
}

async function requireMfaPolicy(db: Db | Tx, organizationId: string, userId: string, mfaPolicyId: string): Promise<MfaPoliciesTable> {
  const row = await db
    .selectFrom("mfa_policies")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("user_id", "=", userId)
    .where("id", "=", mfaPolicyId)
    .executeTakeFirst();
  if (!row)
    throw serviceError("MFA_POLICY_NOT_FOUND", `MFA policy ${mfaPolicyId} of user ${userId} not found in organization ${organizationId}`);
  return row;
}

async function insertMfaPolicy(ctx: ActivityContext, p: ParametersOf<"create_mfa_policy">): Promise<string> {
  await requireUser(ctx.trx, ctx.organizationId, p.userId);
  const name = requireName(p.mfaPolicyName, "mfaPolicyName");
  const condition = checkCondition(p.condition);
  const order = checkOrder(p.order);
  const steps = await checkSteps(ctx.trx, ctx.organizationId, p.userId, p.requiredAuthenticationMethods);
  const id = newId();
  await ctx.trx
    .insertInto("mfa_policies")
    .values({
      id,
      organization_id: ctx.organizationId,
      user_id: p.userId,
      name,
      condition,
      required_methods: JSON.stringify(steps),
      evaluation_order: order,
      notes: p.notes ?? "",
      created_at: ctx.now,
      updated_at: ctx.now,
    })
    .execute();
  return id;
}

export const mfaPolicyOperations = [
  defineActivity({
    name: "create_mfa_policy",
    summary:
      "Create an MFA policy for a user: when its condition holds for an activity of theirs (the first such policy by order), the activity waits until they have authenticated with each step's methods.",
    resource: "MFA_POLICY",
    action: "CREATE",
    async execute(ctx, p) {
      return { mfaPolicyId: await insertMfaPolicy(ctx, p) };
    },
  }),

  defineActivity({
    name: "update_mfa_policy",
    summary: "Change an MFA policy's name, condition, steps, order or notes; omitted fields keep their value.",
    resource: "MFA_POLICY",
    action: "UPDATE",
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      const row = await requireMfaPolicy(ctx.trx, ctx.organizationId, p.userId, p.mfaPolicyId);
      const next = {
        name: p.mfaPolicyName !== undefined ? requireName(p.mfaPolicyName, "mfaPolicyName") : row.name,
        condition: p.condition !== undefined ? checkCondition(p.condition) : row.condition,
        required_methods:
          p.requiredAuthenticationMethods !== undefined
            ? JSON.stringify(await checkSteps(ctx.trx, ctx.organizationId, p.userId, p.requiredAuthenticationMethods))
            : row.required_methods,
        evaluation_order: p.order !== undefined ? checkOrder(p.order) : row.evaluation_order,
        notes: p.notes ?? row.notes,
      };
      await ctx.trx
        .updateTable("mfa_policies")
        .set({ ...next, updated_at: ctx.now })
        .where("id", "=", row.id)
        .execute();
      return { mfaPolicyId: row.id };
    },
  }),

  defineActivity({
    name: "delete_mfa_policy",
    summary: "Delete an MFA policy (activities already waiting for its steps keep waiting for them).",
    resource: "MFA_POLICY",
    action: "DELETE",
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      const row = await requireMfaPolicy(ctx.trx, ctx.organizationId, p.userId, p.mfaPolicyId);
      await ctx.trx.deleteFrom("mfa_policies").where("id", "=", row.id).execute();
      return { mfaPolicyId: row.id };
    },
  }),

  defineQuery({
    name: "get_mfa_policy",
    summary: "One MFA policy of a user.",
    async run(ctx, body) {
      return { mfaPolicy: renderMfaPolicy(await requireMfaPolicy(ctx.db, ctx.organizationId, body.userId, body.mfaPolicyId)) };
    },
  }),

  defineQuery({
    name: "get_mfa_policies",
    summary: "A user's MFA policies, in the order they are evaluated.",
    async run(ctx, body) {
      await requireUser(ctx.db, ctx.organizationId, body.userId);
      return { mfaPolicies: (await mfaPoliciesOf(ctx.db, body.userId)).map(renderMfaPolicy) };
    },
  }),

  defineQuery({
    name: "get_mfa_status",
    summary:
      "What an activity's MFA policy requires of its requester, and which methods they have proven so far (empty when no MFA policy applied).",
    async run(ctx, body) {
      await requireActivity(ctx.db, ctx.organizationId, body.activityId);
      let rows = ctx.db.selectFrom("activity_authentications").selectAll().where("activity_id", "=", body.activityId);
      if (body.userId) rows = rows.where("user_id", "=", body.userId);
      return { mfaStatuses: (await rows.orderBy("created_at").orderBy("user_id").execute()).map(renderMfaStatus) };
    },
  }),
];
