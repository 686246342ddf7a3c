// Policy evaluation: a typical organization's policy set, evaluated against one activity, with the
// compiled forms cached (the server's path) and compiled afresh each time (what caching saves).
import { evaluatePolicies, type EvaluationInput, type PolicySource } from "../src/policy/engine.js";
import { compileExpression } from "../src/policy/compile.js";
import { measure } from "./measure.js";

const tag = "0195b0a2-0000-7000-8000-00000000a11c";
const policies: PolicySource[] = [
  {
    id: "p1",
    effect: "EFFECT_ALLOW",
    consensus: `approvers.filter(user, user.tags.contains('${tag}')).count() >= 2`,
    condition: "activity.resource == 'POLICY' && activity.action == 'CREATE'",
    time: null,
  },
  {
    id: "p2",
    effect: "EFFECT_DENY",
    consensus: `approvers.any(user, user.tags.contains('${tag}'))`,
    condition: "activity.action == 'DELETE'",
    time: null,
  },
  {
    id: "p3",
    effect: "EFFECT_ALLOW",
    consensus: "approvers.any(user, user.id == 'u-ops')",
    condition: "activity.kind == 'CREATE_USER_TAG'",
    time: "CronSpan('0 9 * * 1-5', '8h', 'America/New_York')",
  },
  {
    id: "p4",
    effect: "EFFECT_ALLOW",
    consensus: null,
    condition: "activity.type in ['ACTIVITY_TYPE_CREATE_USERS_V4', 'ACTIVITY_TYPE_CREATE_API_KEYS_V2'] && activity.params.user_id != ''",
    time: null,
  },
  {
    id: "p5",
    effect: "EFFECT_ALLOW",
    consensus: "approvers.count() >= 2 && credentials.all(c, c.type == 'CREDENTIAL_TYPE_API_KEY_P256')",
    condition: null,
    time: "time.now < Timestamp('2030-01-01T00:00:00Z')",
  },
  {
    id: "p6",
    effect: "EFFECT_DENY",
    consensus: null,
    condition: "activity.kind == 'DELETE_USERS' && activity.params.user_ids.count() > 1",
    time: null,
  },
  {
    id: "p7",
    effect: "EFFECT_ALLOW",
    consensus: "approvers.any(u, u.email == 'treasurer@example.com')",
    condition: "activity.resource == 'USER' && activity.action == 'UPDATE'",
    time: null,
  },
  {
    id: "p8",
    effect: "EFFECT_ALLOW",
    consensus: null,
    condition: "activity.kind == 'CREATE_API_KEYS' && activity.params.user_id == 'u-ops'",
    time: null,
  },
];
const input: EvaluationInput = {
  condition: {
    activity: { type: "ACTIVITY_TYPE_CREATE_POLICY_V3", kind: "CREATE_POLICY", resource: "POLICY", action: "CREATE", params: {} },
  },
  approvers: [
    { id: "u-alice", tags: [tag], email: "alice@example.com", alias: "alice" },
    { id: "u-bob", tags: [tag, "other"], email: "bob@example.com", alias: "bob" },
  ],
  credentials: [
    { id: "k1", user_id: "u-alice", type: "CREDENTIAL_TYPE_API_KEY_P256", credential_id: "", public_key: "02aa" },
    { id: "k2", user_id: "u-bob", type: "CREDENTIAL_TYPE_API_KEY_P256", credential_id: "", public_key: "03bb" },
  ],
  nowMs: Date.parse("2026-03-02T15:00:00Z"),
};

if (evaluatePolicies(policies, input).outcome !== "OUTCOME_ALLOW") throw new Error("the benchmark's policy set should allow its activity");
export const policySetEvaluation = measure(`evaluate ${policies.length} policies (compiled once, cached)`, 20000, () => {
  evaluatePolicies(policies, input);
});
const uncached = measure(`parse + check + compile the same ${policies.length} policies`, 2000, () => {
  for (const p of policies)
    for (const field of ["condition", "consensus", "time"] as const) if (p[field]) compileExpression(p[field]!, field);
});
console.log(
  `caching compiled policies makes evaluation ${(uncached / policySetEvaluation).toFixed(1)}x cheaper than compiling per request`,
);
