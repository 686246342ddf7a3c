// Policies: compiled once per distinct text (cached), evaluated against one activity and the
// approvals it has so far. The order is the product's:
//   an applicable EFFECT_DENY denies (explicit deny); else an applicable EFFECT_ALLOW allows;
//   else an allow policy waiting only for approvals asks for consensus; else implicit deny.
// A policy applies when its time, condition and consensus all hold (each absent one holds).
// The root quorum and the default allowances are decided by the caller (activities/authorization).
import { PolicySyntaxError } from "./lexer.js";
import { BudgetExceededError, PolicyEvaluationError, STEP_BUDGET, compileExpression, type Environment, type Evaluator } from "./compile.js";
import { recordSteps } from "./turns.js";
import { rootValues, type PolicyField } from "./keywords.js";
import { PolicyTimestamp, type Value } from "./types.js";

export type Effect = "EFFECT_ALLOW" | "EFFECT_DENY";
export type Outcome =
  | "OUTCOME_ALLOW"
  | "OUTCOME_DENY_EXPLICIT"
  | "OUTCOME_DENY_IMPLICIT"
  | "OUTCOME_REQUIRES_CONSENSUS"
  | "OUTCOME_REJECTED"
  | "OUTCOME_ERROR"
  | "OUTCOME_REQUIRES_AUTHENTICATORS"
  | "OUTCOME_TIME_INACTIVE";

export interface PolicySource {
  id: string;
  effect: Effect;
  condition: string | null;
  consensus: string | null;
  time: string | null;
}

interface CompiledPolicy extends PolicySource {
  run: Partial<Record<PolicyField, Evaluator>>;
}

/** A policy text that does not compile, naming which field it is in. */
export class InvalidPolicyError extends Error {
  constructor(
    readonly field: PolicyField,
    readonly problem: PolicySyntaxError,
  ) {
    super(`${field}: ${problem.message}`);
    this.name = "InvalidPolicyError";
  }
}

const CACHE_LIMIT = 4096;
const caches: Record<PolicyField, Map<string, Evaluator>> = { condition: new Map(), consensus: new Map(), time: new Map() };

/** Compiles one field's expression; the same text in the same field is compiled once per process. */
export function compileField(field: PolicyField, source: string): Evaluator {
  const cache = caches[field];
  const hit = cache.get(source);
  if (hit) return hit;
  let compiled: Evaluator;
  try {
    compiled = compileExpression(source, field);
  } catch (error) {
    if (error instanceof PolicySyntaxError) throw new InvalidPolicyError(field, error);
    throw error;
  }
  // Bounded: an organization editing policies in a loop must not grow memory without end.
  if (cache.size >= CACHE_LIMIT) cache.delete(cache.keys().next().value!);
  cache.set(source, compiled);
  return compiled;
}

/** An absent or empty (whitespace only) field always holds. */
export const present = (text: string | null | undefined): text is string => typeof text === "string" && text.trim() !== "";

/** Checks every field of a policy; throws InvalidPolicyError for the first that does not compile. */
export function validatePolicy(policy: Pick<PolicySource, "condition" | "consensus" | "time">): void {
  for (const field of ["condition", "consensus", "time"] as const) {
    const text = policy[field];
    if (present(text)) compileField(field, text);
  }
}

function compilePolicy(policy: PolicySource): CompiledPolicy {
  const run: CompiledPolicy["run"] = {};
  for (const field of ["condition", "consensus", "time"] as const) {
    const text = policy[field];
    if (present(text)) run[field] = compileField(field, text);
  }
  return { ...policy, run };
}

/** What an activity looks like to policies. */
export interface EvaluationInput {
  /** Condition keyword values by path ("activity", "wallet", "eth.tx", …). */
  condition: Record<string, unknown>;
  approvers: Value[];
  credentials: Value[];
  nowMs: number;
}

export interface PolicyVerdict {
  policyId: string;
  outcome: Outcome;
  /** Why an evaluation failed (OUTCOME_ERROR): for the audit log and the operator, not for callers. */
  error?: string;
}

/** Which part of a policy gave its verdict: its `effect` (every part held), the `time`, `condition` or
 * `consensus` that did not hold or failed to evaluate, or `compile` (the stored text does not compile). */
export type DecidingPart = "effect" | "time" | "condition" | "consensus" | "compile";

export interface PolicySetResult {
  outcome: "OUTCOME_ALLOW" | "OUTCOME_DENY_EXPLICIT" | "OUTCOME_DENY_IMPLICIT" | "OUTCOME_REQUIRES_CONSENSUS";
  verdicts: PolicyVerdict[];
  /** For each verdict (same index), the part of the policy that gave it. Kept beside the verdicts
   * rather than in them: the verdicts are what the audit log records. */
  parts: DecidingPart[];
  /** The decision ran out of steps: policies after that point were not evaluated, so it cannot allow. */
  budgetExceeded: boolean;
}

/** The work one decision may do, shared by every policy it evaluates (and by the evaluations one
 * question needs, such as mayVote's). */
export interface Budget {
  steps: number;
}

export const newBudget = (): Budget => ({ steps: STEP_BUDGET });

/** A stored policy that does not compile (any more): it is judged OUTCOME_ERROR, never a 500. */
type Loaded = CompiledPolicy | { source: PolicySource; error: string };

function load(source: PolicySource): Loaded {
  try {
    return compilePolicy(source);
  } catch (error) {
    if (error instanceof InvalidPolicyError) return { source, error: `the stored policy does not compile: ${error.message}` };
    throw error;
  }
}

class Evaluation {
  private readonly roots: Partial<Record<PolicyField, Record<string, unknown>>> = {};
  private readonly now: PolicyTimestamp;
  private readonly initialSteps: number;

  /** One budget for the whole decision, so many policies cannot add up to an unbounded cost. */
  constructor(
    readonly input: EvaluationInput,
    private readonly budget: Budget = newBudget(),
  ) {
    this.now = PolicyTimestamp.fromMillis(input.nowMs);
    this.initialSteps = Math.max(budget.steps, 0);
  }

  /** Tells the scheduler (turns.ts) what this evaluation cost the event loop. */
  done(): void {
    recordSteps(this.initialSteps - Math.max(this.budget.steps, 0));
  }

  /** Keyword values of one field, built the first time a policy reads that field. */
  private rootsOf(field: PolicyField): Record<string, unknown> {
    const built = this.roots[field];
    if (built) return built;
    const values =
      field === "condition"
        ? { ...this.input.condition, "time.now": this.now }
        : field === "consensus"
          ? { approvers: this.input.approvers, credentials: this.input.credentials, "time.now": this.now }
          : { "time.now": this.now };
    return (this.roots[field] = rootValues(values));
  }

  run(evaluator: Evaluator, field: PolicyField, trace?: Environment["trace"]): boolean {
    return evaluator({ roots: this.rootsOf(field), nowMs: this.input.nowMs, locals: [], budget: this.budget, trace }) as boolean;
  }

  /** The part of the policy the last gate or verdict stopped at (see DecidingPart). */
  part: DecidingPart = "effect";

  /** time and condition: whether the policy is in force for this activity at all. */
  gate(policy: Loaded): PolicyVerdict | null {
    if (!("run" in policy)) {
      this.part = "compile";
      return { policyId: policy.source.id, outcome: "OUTCOME_ERROR", error: policy.error };
    }
    try {
      this.part = "time";
      if (policy.run.time && !this.run(policy.run.time, "time")) return { policyId: policy.id, outcome: "OUTCOME_TIME_INACTIVE" };
      this.part = "condition";
      if (policy.run.condition && !this.run(policy.run.condition, "condition"))
        return { policyId: policy.id, outcome: "OUTCOME_DENY_IMPLICIT" };
      return null;
    } catch (error) {
      return errorVerdict(policy, error);
    }
  }

  verdict(policy: Loaded): PolicyVerdict {
    const gated = this.gate(policy);
    if (gated || !("run" in policy)) return gated!;
    try {
      this.part = "consensus";
      if (policy.run.consensus && !this.run(policy.run.consensus, "consensus")) {
        return { policyId: policy.id, outcome: policy.effect === "EFFECT_ALLOW" ? "OUTCOME_REQUIRES_CONSENSUS" : "OUTCOME_DENY_IMPLICIT" };
      }
    } catch (error) {
      const verdict = errorVerdict(policy, error);
      // A consensus can only fail on what the approvals so far lack (`approvers[1]` with one
      // approver): an allow policy in force then waits for more approvals rather than failing.
      if (policy.effect === "EFFECT_ALLOW" && !this.budgetSpent()) return { ...verdict, outcome: "OUTCOME_REQUIRES_CONSENSUS" };
      return verdict;
    }
    this.part = "effect";
    return { policyId: policy.id, outcome: policy.effect === "EFFECT_ALLOW" ? "OUTCOME_ALLOW" : "OUTCOME_DENY_EXPLICIT" };
  }

  budgetSpent(): boolean {
    return this.budget.steps < 0;
  }
}

function errorVerdict(policy: PolicySource, error: unknown): PolicyVerdict {
  if (error instanceof PolicyEvaluationError) return { policyId: policy.id, outcome: "OUTCOME_ERROR", error: error.message };
  throw error;
}

/**
 * Evaluates every policy (no early exit: each one's outcome is recorded) and combines them. A policy
 * whose evaluation fails (OUTCOME_ERROR) neither allows nor denies: that is the product's rule, and
 * its documented deny examples rely on it (a deny reading `activity.params.hash_function` fails for
 * every activity that has no hash function, and must not deny those).
 */
export function evaluatePolicies(policies: PolicySource[], input: EvaluationInput, budget?: Budget): PolicySetResult {
  const evaluation = new Evaluation(input, budget);
  try {
    const parts: DecidingPart[] = [];
    const verdicts = policies.map((p) => {
      const verdict = evaluation.verdict(load(p));
      parts.push(evaluation.part);
      return verdict;
    });
    const has = (outcome: Outcome) => verdicts.some((v) => v.outcome === outcome);
    // Past the budget the policies left were not really evaluated, and one of them may have been a
    // deny: a request made costly on purpose (long parameters) must not slip past it. It can still
    // be denied by a deny that was evaluated.
    const budgetExceeded = evaluation.budgetSpent();
    const outcome = has("OUTCOME_DENY_EXPLICIT")
      ? "OUTCOME_DENY_EXPLICIT"
      : budgetExceeded
        ? "OUTCOME_DENY_IMPLICIT"
        : has("OUTCOME_ALLOW")
          ? "OUTCOME_ALLOW"
          : has("OUTCOME_REQUIRES_CONSENSUS")
            ? "OUTCOME_REQUIRES_CONSENSUS"
            : "OUTCOME_DENY_IMPLICIT";
    return { outcome, verdicts, parts, budgetExceeded };
  } finally {
    evaluation.done();
  }
}

/**
 * Whether an allow policy in force for this activity counts the would-be voter in its consensus:
 * the voter's user (or credential) makes one of the consensus's predicates over approvers true, or
 * is counted. This is "a user named by a consensus may vote": `approvers.any(u, u.id == 'X')`
 * names X, `approvers.filter(u, u.tags.contains('T')).count() >= 2` names every user tagged T, and
 * `approvers.count() >= 2` names everyone.
 */
export function namesVoter(
  policies: PolicySource[],
  input: EvaluationInput,
  voter: Value,
  voterCredentials: Value[],
  budget?: Budget,
): boolean {
  const withVoter = new Evaluation(
    { ...input, approvers: [...input.approvers, voter], credentials: [...input.credentials, ...voterCredentials] },
    budget,
  );
  try {
    for (const source of policies) {
      if (source.effect !== "EFFECT_ALLOW") continue;
      const policy = load(source);
      if (!("run" in policy) || !policy.run.consensus || withVoter.gate(policy)) continue;
      const trace = { subjects: new Set<unknown>([voter, ...voterCredentials]), named: false };
      try {
        withVoter.run(policy.run.consensus, "consensus", trace);
      } catch (error) {
        if (!(error instanceof PolicyEvaluationError)) throw error;
        // What the rest of the policies would have said is unknown: no right to vote is inferred.
        if (error instanceof BudgetExceededError) return false;
      }
      if (trace.named) return true;
    }
    return false;
  } finally {
    withVoter.done();
  }
}

/**
 * Whether some allow policy in force could still be satisfied if every user who has not rejected
 * approved. Used to decide that a rejection has made approval impossible. Consensus expressions are
 * assumed to be monotone (more approvers never hurt), which holds for the forms the product documents.
 */
export function approvalStillPossible(policies: PolicySource[], input: EvaluationInput, budget?: Budget): boolean {
  const evaluation = new Evaluation(input, budget);
  try {
    // A deny is not evaluated here, so an allow found before the budget ran out still counts.
    return policies.some((p) => p.effect === "EFFECT_ALLOW" && evaluation.verdict(load(p)).outcome === "OUTCOME_ALLOW");
  } finally {
    evaluation.done();
  }
}
