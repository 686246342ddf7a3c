// What one policy may cost. A condition's work is metered by what each operation really does (string
// and list sizes included), literals are capped when a policy is stored, a decision that runs out of
// steps cannot allow, and while one organization's expensive policies are evaluated another's
// requests are still answered.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PolicySyntaxError } from "../src/policy/lexer.js";
import { MAX_LIST_LITERAL_ITEMS, MAX_STRING_LITERAL_LENGTH, STEP_BUDGET, compileExpression } from "../src/policy/compile.js";
import { InvalidPolicyError, evaluatePolicies, validatePolicy, type EvaluationInput, type PolicySource } from "../src/policy/engine.js";
import "../src/operations/wallets/transaction-keywords.js";
import { startHarness, type Harness } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";

const list = (n: number) => `[${Array.from({ length: n }, (_, i) => i).join(",")}]`;
const nest = (size: number, depth: number, body: string) => {
  let text = body;
  for (let d = depth - 1; d >= 0; d--) text = `${list(size)}.all(v${d}, ${text})`;
  return text;
};

/** The condition of the report: 24-item lists nested four deep around a 15 000-character string's first character. */
const REPORTED = nest(24, 4, `'${"x".repeat(15_000)}'[0] == 'y'`);
/** The same shape with the longest string literal accepted. */
const LONGEST_ACCEPTED = nest(24, 4, `'${"x".repeat(MAX_STRING_LITERAL_LENGTH)}'[${MAX_STRING_LITERAL_LENGTH - 1}] == 'y'`);

const LONG_PARAMETER = "p".repeat(1_000_000);
const WIDE_PARAMETER = "😀".repeat(300_000);

function input(params: Record<string, unknown> = {}): EvaluationInput {
  return {
    condition: {
      activity: {
        type: "ACTIVITY_TYPE_CREATE_USER_TAG",
        kind: "CREATE_USER_TAG",
        resource: "USER_TAG",
        action: "CREATE",
        organization_id: "o",
        params,
      },
    },
    approvers: [],
    credentials: [],
    nowMs: Date.UTC(2026, 0, 5, 12),
  };
}

const policy = (id: string, effect: PolicySource["effect"], condition: string | null): PolicySource => ({
  id,
  effect,
  condition,
  consensus: null,
  time: null,
});

/** Refused when stored (with a message naming the position), or its evaluation ends on the budget. */
function refusedOrStopped(condition: string, params: Record<string, unknown>): "refused" | "stopped" | string {
  try {
    validatePolicy({ condition, consensus: null, time: null });
  } catch (error) {
    if (error instanceof InvalidPolicyError && /^condition: line \d+, column \d+: ./.test(error.message)) return "refused";
    return `unclear refusal: ${error}`;
  }
  const result = evaluatePolicies([policy("p", "EFFECT_ALLOW", condition)], input(params));
  const [verdict] = result.verdicts;
  if (
    verdict?.outcome === "OUTCOME_ERROR" &&
    verdict.error?.includes(`budget of ${STEP_BUDGET} steps`) &&
    result.budgetExceeded &&
    result.outcome === "OUTCOME_DENY_IMPLICIT"
  )
    return "stopped";
  return `${verdict?.outcome}: ${verdict?.error ?? ""}`;
}

/** A small deterministic generator (xorshift), so a failure names a condition that can be replayed. */
class Random {
  constructor(private state: number) {}
  below(n: number): number {
    this.state ^= this.state << 13;
    this.state ^= this.state >>> 17;
    this.state ^= this.state << 5;
    return (this.state >>> 0) % n;
  }
  pick<T>(items: readonly T[]): T {
    return items[this.below(items.length)]!;
  }
}

/** Operations whose cost grows with the size of a string or list, each with sizes that are (or are not) accepted. */
function expensiveInner(r: Random): string {
  const length = r.pick([64, 1_000, MAX_STRING_LITERAL_LENGTH, MAX_STRING_LITERAL_LENGTH + 1, 15_000]);
  const text = r.pick(["x", "é", "😀"]).repeat(length);
  const items = r.pick([100, 500, MAX_LIST_LITERAL_ITEMS, MAX_LIST_LITERAL_ITEMS + 1]);
  const strings = `[${Array.from({ length: r.pick([4, 8, 12]) }, () => `'${"s".repeat(r.pick([500, 1_000]))}'`).join(",")}]`;
  return r.pick([
    () => `'${text}'[${r.below(length)}] == 'y'`,
    () => `'${text}'[${r.below(length)}..] == 'y'`,
    () => `'${text}' == '${text}'`,
    () => `'${text}' in ['a', '${text}']`,
    () => `${strings}.contains('${"s".repeat(500)}')`,
    () => `${strings} == ${strings}`,
    () => `${list(items)}.count() > 0`,
    () => `${list(items)}.filter(i, i > 0).count() > 0`,
    () => `${list(items)}[1..].contains(3)`,
    () => `${list(Math.min(items, 300))} == ${list(Math.min(items, 300))}`,
    () => `activity.params.user_id[${r.pick([0, 500_000, 999_999])}] == 'y'`,
    () => `activity.params.user_id[1..] == activity.params.user_id[..999999]`,
    () => `activity.params.user_id == activity.params.user_id`,
    () => `activity.params.sign_with[${r.pick([1, 150_000, 299_999])}] == 'y'`,
    () => `activity.params.sign_with[1..].count() > 0`,
    () => `activity.params.user_ids.all(u, activity.params.user_ids.any(w, u == w))`,
    () => `CronSpan('0-59 0-23 * * *', '1m', 'America/New_York')`,
    () => Array.from({ length: 200 }, () => "!false").join(" && "),
  ])();
}

/** Nested predicates over literal lists (the report's multiplier), sized so that even the cheapest
 * inner operation done naively would cost several budgets. */
function expensiveCondition(r: Random): string {
  // One level cannot multiply enough within the list limit; the language allows four.
  const depth = 2 + r.below(3);
  const size = Math.ceil(((4 * STEP_BUDGET) / 10) ** (1 / depth)) + r.below(8);
  const lambda = r.pick(["all", "any", "filter"]);
  let text = expensiveInner(r);
  for (let d = depth - 1; d >= 0; d--) {
    const items = list(Math.min(size, MAX_LIST_LITERAL_ITEMS));
    text = lambda === "filter" ? `${items}.filter(v${d}, ${text}).count() >= 0` : `${items}.${lambda}(v${d}, ${text})`;
  }
  return text;
}

describe("the cost of one condition", () => {
  const params = {
    user_id: LONG_PARAMETER,
    sign_with: WIDE_PARAMETER,
    user_ids: Array.from({ length: 2_000 }, (_, i) => `user-${i}`.padEnd(64, "-")),
  };

  it("the reported condition is refused when stored: its string literal is too long", () => {
    expect(() => validatePolicy({ condition: REPORTED, consensus: null, time: null })).toThrow(
      `condition: line 1, column ${REPORTED.indexOf("'") + 1}: a string literal may be at most ${MAX_STRING_LITERAL_LENGTH} characters, this one has 15000`,
    );
  });

  it("the same shape with the longest accepted literal is stopped by the budget", () => {
    expect(refusedOrStopped(LONGEST_ACCEPTED, {})).toBe("stopped");
  });

  it("reading one character of a parameter a megabyte long costs steps for what is walked", () => {
    expect(refusedOrStopped(nest(24, 4, "activity.params.user_id[999999] == 'y'"), params)).toBe("stopped");
    expect(refusedOrStopped(nest(24, 4, "activity.params.sign_with[299999] == 'y'"), params)).toBe("stopped");
  });

  it("a list literal longer than the limit is refused", () => {
    const error = (() => {
      try {
        compileExpression(`3 in ${list(MAX_LIST_LITERAL_ITEMS + 1)}`, "condition");
      } catch (e) {
        return e;
      }
    })();
    expect(error).toBeInstanceOf(PolicySyntaxError);
    expect((error as Error).message).toBe(
      `line 1, column 6: a list literal may hold at most ${MAX_LIST_LITERAL_ITEMS} items, this one has ${MAX_LIST_LITERAL_ITEMS + 1}`,
    );
    expect(() => compileExpression(`3 in ${list(MAX_LIST_LITERAL_ITEMS)}`, "condition")).not.toThrow();
  });

  it("every generated expensive condition is refused when stored or stopped by the budget", () => {
    const r = new Random(0x5eed_c057);
    const outcomes = { refused: 0, stopped: 0 };
    const unclear: { condition: string; outcome: string }[] = [];
    for (let i = 0; i < 150; i++) {
      const condition = expensiveCondition(r);
      const outcome = refusedOrStopped(condition, params);
      if (outcome === "refused" || outcome === "stopped") outcomes[outcome] += 1;
      else
        unclear.push({ condition: condition.length > 200 ? `… ${condition.slice(-200)} (${condition.length} chars)` : condition, outcome });
    }
    expect(unclear.slice(0, 3)).toEqual([]);
    // Both ways out are exercised.
    expect(outcomes.refused).toBeGreaterThan(10);
    expect(outcomes.stopped).toBeGreaterThan(50);
  });

  it("ordinary policies stay far inside the budget", () => {
    const result = evaluatePolicies(
      [
        policy("a", "EFFECT_ALLOW", "activity.resource == 'USER_TAG' && activity.action in ['CREATE', 'UPDATE']"),
        policy("b", "EFFECT_DENY", `activity.params.user_ids.any(u, u == '${"user-7".padEnd(64, "-")}')`),
        policy("c", "EFFECT_ALLOW", "activity.params.user_id[0..4] == 'pppp'"),
      ],
      input(params),
    );
    expect(result).toMatchObject({ outcome: "OUTCOME_DENY_EXPLICIT", budgetExceeded: false });
  });
});

describe("a decision that runs out of steps", () => {
  it("cannot allow: parameters made long on purpose do not slip past a deny", () => {
    // The deny reads a list the request fills: 120 000 ids as long as the victim's make it too costly.
    const victim = "victim-0001";
    const padded = Array.from({ length: 120_000 }, (_, i) => String(i).padStart(victim.length, "0"));
    const policies = [
      policy("allow tags", "EFFECT_ALLOW", "activity.kind == 'CREATE_USER_TAG'"),
      policy("protect victim", "EFFECT_DENY", `activity.params.user_ids.contains('${victim}')`),
    ];
    const result = evaluatePolicies(policies, input({ user_ids: padded }));
    expect(result.verdicts).toEqual([
      { policyId: "allow tags", outcome: "OUTCOME_ALLOW" },
      { policyId: "protect victim", outcome: "OUTCOME_ERROR", error: expect.stringContaining(`budget of ${STEP_BUDGET} steps`) },
    ]);
    expect(result).toMatchObject({ outcome: "OUTCOME_DENY_IMPLICIT", budgetExceeded: true });
    // With ordinary parameters the same policies allow.
    expect(evaluatePolicies(policies, input({ user_ids: ["a", "b"] }))).toMatchObject({ outcome: "OUTCOME_ALLOW", budgetExceeded: false });
  });

  it("still honours a deny evaluated before the budget ran out", () => {
    const result = evaluatePolicies([policy("deny", "EFFECT_DENY", "true"), policy("heavy", "EFFECT_ALLOW", LONGEST_ACCEPTED)], input());
    expect(result).toMatchObject({ outcome: "OUTCOME_DENY_EXPLICIT", budgetExceeded: true });
  });
});

describe("through the server", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(() => h?.close());

  it("create_policy refuses the reported condition (400 POLICY_INVALID) and stores no policy", async () => {
    const { root } = await organizationWith(h, []);
    const before = JSON.parse(await h.snapshot());
    await expect(root.createPolicy({ policyName: "stall", effect: "EFFECT_ALLOW", condition: REPORTED, notes: "" })).rejects.toMatchObject({
      code: 3,
      message: expect.stringContaining(
        `condition is not a valid policy expression: line 1, column ${REPORTED.indexOf("'") + 1}: a string literal may be at most ${MAX_STRING_LITERAL_LENGTH} characters`,
      ),
      details: [expect.objectContaining({ turnkeyErrorCode: "POLICY_INVALID" })],
    });
    const after = JSON.parse(await h.snapshot());
    // Only the audit log records the refused attempt.
    const { activities: _a, policy_evaluations: _e, ...restBefore } = before;
    const { activities: _b, policy_evaluations: _f, ...restAfter } = after;
    expect(restAfter).toEqual(restBefore);
  });

  it("a request that runs a policy out of steps is refused with the reason, and changes nothing but the audit log", async () => {
    const { root, members } = await organizationWith(h, ["ivy"]);
    const { policyId } = await root.createPolicy({ policyName: "costly", effect: "EFFECT_ALLOW", condition: LONGEST_ACCEPTED, notes: "" });
    const before = JSON.parse(await h.snapshot());
    await expect(members.ivy!.client.createUserTag({ userTagName: "t", userIds: [] })).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining(`exceeded the budget of one decision (${STEP_BUDGET} steps) at policy ${policyId}`),
      details: [expect.objectContaining({ turnkeyErrorCode: "POLICY_DENIED" })],
    });
    const after = JSON.parse(await h.snapshot());
    const { activities: _a, policy_evaluations: _e, ...restBefore } = before;
    const { activities: _b, policy_evaluations: _f, ...restAfter } = after;
    expect(restAfter).toEqual(restBefore);
  });

  it("while one organization's costly policy is evaluated for many requests, another organization's whoami is answered first", async () => {
    const a = await organizationWith(h, ["eve"]);
    const b = await organizationWith(h, []);
    await a.root.createPolicy({ policyName: "costly", effect: "EFFECT_ALLOW", condition: LONGEST_ACCEPTED, notes: "" });
    const order: string[] = [];
    const sent = Array.from({ length: 8 }, (_, i) =>
      a.members.eve!.client.createUserTag({ userTagName: `t${i}`, userIds: [] }).then(
        () => order.push("A"),
        () => order.push("A"),
      ),
    );
    // Sent once A's requests are on their way: answered before the last of them.
    await new Promise((resolve) => setImmediate(resolve));
    const whoami = b.root.getWhoami({ organizationId: b.org.organizationId }).then((who) => {
      order.push("B");
      return who;
    });
    await Promise.all([...sent, whoami]);
    expect((await whoami).organizationId).toBe(b.org.organizationId);
    expect(order).toHaveLength(9);
    expect(order.indexOf("B"), order.join(" ")).toBeLessThan(8);
  });
});

describe("turns on the event loop", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(() => h?.close());

  it("while a page of pending activities runs a costly policy for each voting right, another organization's whoami is answered again and again", async () => {
    const a = await organizationWith(h, ["eve", "fay"]);
    const b = await organizationWith(h, []);
    await a.root.createPolicy({
      policyName: "two approve tags",
      effect: "EFFECT_ALLOW",
      condition: "activity.kind == 'CREATE_USER_TAG'",
      consensus: "approvers.count() >= 2",
      notes: "",
    });
    // A page of 30: long enough that whoami's round trips on a busy machine still fit several times in it.
    for (let i = 0; i < 30; i++) {
      const { activity } = await a.members.eve!.client.createUserTag({ userTagName: `t${i}`, userIds: [] });
      expect(activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    }
    // Added afterwards: each of fay's voting rights (canApprove, canReject) on each activity now runs it.
    await a.root.createPolicy({ policyName: "costly", effect: "EFFECT_ALLOW", condition: LONGEST_ACCEPTED, notes: "" });
    let listed = false;
    const page = a.members
      .fay!.client.getActivities({ filterByStatus: ["ACTIVITY_STATUS_CONSENSUS_NEEDED"], paginationOptions: { limit: "30" } })
      .finally(() => (listed = true));
    let answeredMeanwhile = 0;
    while (!listed) {
      const who = await b.root.getWhoami({ organizationId: b.org.organizationId });
      expect(who.organizationId).toBe(b.org.organizationId);
      if (!listed) answeredMeanwhile += 1;
    }
    const { activities } = await page;
    expect(activities).toHaveLength(30);
    // Out of steps, nothing is allowed: not even the vote the consensus would grant.
    expect(activities.map((x) => [x.canApprove, x.canReject])).toEqual(activities.map(() => [false, false]));
    expect(answeredMeanwhile).toBeGreaterThanOrEqual(3);
  });
});
