// Policies as resources: created, updated, deleted as activities, read by queries. Every expression is
// compiled when stored, so a policy that does not parse or type-check never reaches the engine.
import { serviceError } from "../../errors.js";
import { InvalidPolicyError, present, validatePolicy } from "../../policy/engine.js";
import type { PoliciesTable } from "../../store/schema.js";
import type { Db, Tx } from "../../store/handles.js";
import { defineActivity, defineQuery, type ActivityContext, type AnyVersionOf, type ParametersOf } from "../../registry/registry.js";
// Policies may name the transaction keywords, so they must be declared before any is checked.
import "../wallets/transaction-keywords.js";
import { requireName } from "../identity/credentials.js";
import { distinct, timestamp } from "../resources.js";
import { newId } from "../../store/ids.js";

/** A policy as any version of create_policy sends it, its legacy selectors already turned into condition and consensus
 * (create_policies lists policies of the newest version's shape). */
type NewPolicy = Omit<ParametersOf<"create_policy">, "selectors">;

/** Legacy (CREATE_POLICY, CREATE_POLICY_V2) selectors: `subject operator target(s)`, all of which must hold. */
type Selector = AnyVersionOf<NonNullable<ParametersOf<"create_policy">["selectors"]>[number]>;

export function renderPolicy(row: PoliciesTable) {
  return {
    policyId: row.id,
    policyName: row.name,
    effect: row.effect,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
    notes: row.notes,
    consensus: row.consensus ?? "",
    condition: row.condition ?? "",
    ...(row.time !== null ? { time: row.time } : {}),
  };
}

/** Every policy of the organization, oldest first. */
export async function listPolicies(db: Db | Tx, organizationId: string) {
  const rows = await db
    .selectFrom("policies")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .orderBy("created_at")
    .orderBy("id")
    .execute();
  return rows.map(renderPolicy);
}

function literal(value: string): string {
  return /^-?\d+$/.test(value) ? value : `'${value.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
}

/** One selector needs no parentheses; several are each parenthesised before joining with &&. */
const unwrapSingle = (parts: string[]) => (parts.length === 1 ? [parts[0]!.slice(1, -1)] : parts);

/** Translates legacy selectors to an expression of the language; approver selectors form the consensus. */
export function selectorsToExpressions(selectors: Selector[]): { condition?: string; consensus?: string } {
  const condition: string[] = [];
  const consensus: string[] = [];
  for (const [i, s] of selectors.entries()) {
    if (!s.subject || !s.operator) throw serviceError("REQUEST_INVALID", `selectors[${i}] needs a subject and an operator`);
    // The subject is pasted into the expression, so it must be a keyword path and nothing more.
    if (!/^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)*$/.test(s.subject))
      throw serviceError("POLICY_INVALID", `selectors[${i}].subject must be a keyword path such as activity.type, got "${s.subject}"`);
    const targets = s.targets ?? (s.target !== undefined ? [s.target] : []);
    const one = () => {
      if (targets.length !== 1) throw serviceError("REQUEST_INVALID", `selectors[${i}]: ${s.operator} takes exactly one target`);
      return literal(targets[0]!);
    };
    const list = `[${targets.map(literal).join(", ")}]`;
    const comparisons: Record<string, string> = {
      OPERATOR_EQUAL: "==",
      OPERATOR_NOT_EQUAL: "!=",
      OPERATOR_MORE_THAN: ">",
      OPERATOR_MORE_THAN_OR_EQUAL: ">=",
      OPERATOR_LESS_THAN: "<",
      OPERATOR_LESS_THAN_OR_EQUAL: "<=",
    };
    let expression: string;
    if (comparisons[s.operator]) expression = `${s.subject} ${comparisons[s.operator]} ${one()}`;
    else if (s.operator === "OPERATOR_CONTAINS") expression = `${s.subject}.contains(${one()})`;
    else if (s.operator === "OPERATOR_IN") expression = `${s.subject} in ${list}`;
    else if (s.operator === "OPERATOR_NOT_IN") expression = `!(${s.subject} in ${list})`;
    else if (s.operator === "OPERATOR_CONTAINS_ONE") expression = `${list}.any(target, ${s.subject}.contains(target))`;
    else if (s.operator === "OPERATOR_CONTAINS_ALL") expression = `${list}.all(target, ${s.subject}.contains(target))`;
    else throw serviceError("REQUEST_INVALID", `selectors[${i}]: unknown operator ${s.operator}`);
    (/^(approvers|credentials)\b/.test(s.subject) ? consensus : condition).push(`(${expression})`);
  }
  return {
    ...(condition.length ? { condition: unwrapSingle(condition).join(" && ") } : {}),
    ...(consensus.length ? { consensus: unwrapSingle(consensus).join(" && ") } : {}),
  };
}

/** Compiles every expression; a failure is InvalidArgument naming the field, position and problem. */
function checkExpressions(policy: { condition?: string | null; consensus?: string | null; time?: string | null }, where: string): void {
  try {
    validatePolicy({ condition: policy.condition ?? null, consensus: policy.consensus ?? null, time: policy.time ?? null });
  } catch (error) {
    if (error instanceof InvalidPolicyError)
      throw serviceError("POLICY_INVALID", `${where}${error.field} is not a valid policy expression: ${error.problem.message}`);
    throw error;
  }
}

const orNull = (text: string | undefined | null) => (present(text) ? text : null);

async function insertPolicy(ctx: ActivityContext, policy: NewPolicy, where: string): Promise<string> {
  const name = requireName(policy.policyName, `${where}policyName`);
  checkExpressions(policy, where);
  const id = newId();
  await ctx.trx
    .insertInto("policies")
    .values({
      id,
      organization_id: ctx.organizationId,
      name,
      effect: policy.effect,
      condition: orNull(policy.condition),
      consensus: orNull(policy.consensus),
      time: orNull(policy.time),
      notes: policy.notes ?? "",
      created_at: ctx.now,
      updated_at: ctx.now,
    })
    .execute();
  return id;
}

async function requirePolicy(trx: Tx, organizationId: string, policyId: string): Promise<PoliciesTable> {
  const row = await trx
    .selectFrom("policies")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", policyId)
    .executeTakeFirst();
  if (!row) throw serviceError("POLICY_NOT_FOUND", `policy ${policyId} not found`);
  return row;
}

async function deletePolicies(ctx: ActivityContext, ids: string[]): Promise<void> {
  for (const id of ids) await requirePolicy(ctx.trx, ctx.organizationId, id);
  if (ids.length) await ctx.trx.deleteFrom("policies").where("organization_id", "=", ctx.organizationId).where("id", "in", ids).execute();
}

export const policyOperations = [
  defineActivity({
    name: "create_policy",
    summary: "Create a policy. CREATE_POLICY_V3 takes condition/consensus/time expressions; V1 and V2 take legacy selectors.",
    resource: "POLICY",
    action: "CREATE",
    async execute(ctx, p) {
      const expressions = p.selectors ? selectorsToExpressions(p.selectors) : {};
      const policyId = await insertPolicy(ctx, { ...p, ...expressions }, "");
      return { policyId };
    },
  }),

  defineActivity({
    name: "create_policies",
    summary: "Create several policies at once (all or none).",
    resource: "POLICY",
    action: "CREATE",
    async execute(ctx, p) {
      if (p.policies.length === 0) throw serviceError("REQUEST_INVALID", "policies must not be empty");
      const policyIds: string[] = [];
      for (const [i, policy] of p.policies.entries()) policyIds.push(await insertPolicy(ctx, policy, `policies[${i}].`));
      return { policyIds };
    },
  }),

  defineActivity({
    name: "update_policy",
    summary:
      "Change a policy's name, effect, condition, consensus, time or notes; omitted fields keep their value, an empty expression removes it.",
    resource: "POLICY",
    action: "UPDATE",
    async execute(ctx, p) {
      const row = await requirePolicy(ctx.trx, ctx.organizationId, p.policyId);
      const next = {
        name: p.policyName !== undefined ? requireName(p.policyName, "policyName") : row.name,
        effect: p.policyEffect ?? row.effect,
        condition: p.policyCondition !== undefined ? orNull(p.policyCondition) : row.condition,
        consensus: p.policyConsensus !== undefined ? orNull(p.policyConsensus) : row.consensus,
        time: p.time !== undefined ? orNull(p.time) : row.time,
        notes: p.policyNotes ?? row.notes,
      };
      checkExpressions(next, "");
      await ctx.trx
        .updateTable("policies")
        .set({ ...next, updated_at: ctx.now })
        .where("id", "=", row.id)
        .execute();
      return { policyId: row.id };
    },
  }),

  defineActivity({
    name: "delete_policy",
    summary: "Delete a policy.",
    resource: "POLICY",
    action: "DELETE",
    async execute(ctx, p) {
      await deletePolicies(ctx, [p.policyId]);
      return { policyId: p.policyId };
    },
  }),

  defineActivity({
    name: "delete_policies",
    summary: "Delete several policies at once (all or none).",
    resource: "POLICY",
    action: "DELETE",
    async execute(ctx, p) {
      const ids = distinct(p.policyIds, "policyIds");
      if (ids.length === 0) throw serviceError("REQUEST_INVALID", "policyIds must not be empty");
      await deletePolicies(ctx, ids);
      return { policyIds: ids };
    },
  }),

  defineQuery({
    name: "get_policy",
    summary: "One policy.",
    async run(ctx, body) {
      const row = await ctx.db
        .selectFrom("policies")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .where("id", "=", body.policyId)
        .executeTakeFirst();
      if (!row) throw serviceError("POLICY_NOT_FOUND", `policy ${body.policyId} not found`);
      return { policy: renderPolicy(row) };
    },
  }),

  defineQuery({
    name: "list_policies",
    summary: "All policies of the organization, oldest first.",
    async run(ctx) {
      return { policies: await listPolicies(ctx.db, ctx.organizationId) };
    },
  }),
];
