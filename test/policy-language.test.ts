// The policy expression language, row by row: what expressions evaluate to in each field, which
// ones are refused at compile time (and where), that evaluation never short-circuits, how CronSpan
// windows open and close, and how the engine combines policies and decides who may vote.
import { describe, expect, it } from "vitest";
import { PolicyEvaluationError, compileExpression, type Environment, STEP_BUDGET } from "../src/policy/compile.js";
import {
  InvalidPolicyError,
  evaluatePolicies,
  namesVoter,
  validatePolicy,
  type EvaluationInput,
  type Outcome,
  type PolicySource,
} from "../src/policy/engine.js";
import { rootValues, type PolicyField } from "../src/policy/keywords.js";
import { PolicySyntaxError } from "../src/policy/lexer.js";
import { PolicyTimestamp, type Value } from "../src/policy/types.js";

// ---- Numbers at the edges of int (i128) and uint (u256) ----

const I128_MAX = (2n ** 127n - 1n).toString();
const I128_MIN_MAGNITUDE = (2n ** 127n).toString(); // -2^127 is written as "-" and this
const BEYOND_I128_MIN = (2n ** 127n + 1n).toString();
const SMALLEST_UINT_ONLY = (2n ** 127n).toString(); // too large for an int, so typed uint
const U256_MAX = (2n ** 256n - 1n).toString();
const BEYOND_U256 = (2n ** 256n).toString();

// ---- The world the expressions are evaluated in ----

/** Wednesday 2025-06-11, 09:00 in New York (EDT, UTC-4). */
const NOW = Date.parse("2025-06-11T13:00:00Z");

const WALLET = { id: "w1", imported: false, exported: true, label: "treasury" };
const OTHER_WALLET = { id: "w2", imported: true, exported: false, label: "ops" };
const ACTIVITY = {
  type: "ACTIVITY_TYPE_SIGN_TRANSACTION_V2",
  kind: "SIGN_TRANSACTION",
  resource: "PRIVATE_KEY",
  action: "SIGN",
  params: {
    user_ids: ["u1", "u2"],
    user_id: "u1",
    api_key_ids: ["k1"],
    hash_function: "HASH_FUNCTION_SHA256",
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    type: "TRANSACTION_TYPE_ETHEREUM",
    target_public_key: "04ab",
    wallet_id: "w1",
    otp_length: 6n,
    session_profile_id: "sp1",
    endpoint_id: "e1",
    sign_with: "0xabc",
  },
};
const CONDITION = {
  activity: ACTIVITY,
  wallet: WALLET,
  wallets: [WALLET, OTHER_WALLET],
  private_key: { id: "pk1", tags: ["hot", "eth"], imported: true, exported: false, label: "signer" },
  wallet_account: { address: "0xabc" },
};

const ALICE = { id: "A", tags: ["admin"], email: "alice@example.com", alias: "alice" };
const BOB = { id: "B", tags: ["ops", "admin"], email: "bob@example.com", alias: "bob" };
const CAROL = { id: "C", tags: [], email: "carol@example.com", alias: "carol" };
const credential = (id: string, userId: string) => ({
  id,
  user_id: userId,
  type: "CREDENTIAL_TYPE_API_KEY_P256",
  credential_id: `cid-${id}`,
  public_key: `02${id}`,
});
const CREDENTIAL_A = credential("c1", "A");
const CREDENTIAL_B = credential("c2", "B");
const CONSENSUS = { approvers: [ALICE, BOB], credentials: [CREDENTIAL_A] };

const VALUES: Record<PolicyField, Record<string, unknown>> = { condition: CONDITION, consensus: CONSENSUS, time: {} };

// ---- Helpers ----

function environment(values: Record<string, unknown>, nowMs: number): Environment {
  return {
    roots: rootValues({ ...values, "time.now": PolicyTimestamp.fromMillis(nowMs) }),
    nowMs,
    locals: [],
    budget: { steps: STEP_BUDGET },
  };
}

function evaluate(source: string, field: PolicyField = "condition", values = VALUES[field], nowMs = NOW): Value {
  return compileExpression(source, field)(environment(values, nowMs));
}

/** What `run` throws (fails the test if it throws nothing). */
function thrown(run: () => unknown): Error {
  try {
    run();
  } catch (error) {
    return error as Error;
  }
  throw new Error("expected an error, but none was thrown");
}

/** Long sources (10,000 parentheses) make unreadable test names. */
const short = (source: string) => (source.length > 70 ? `${source.slice(0, 40)}… (${source.length} chars)` : source);

/** Column (1-based) of the first occurrence of `fragment` in `source`. */
const columnOf = (source: string, fragment: string) => source.indexOf(fragment) + 1;

const at = (iso: string) => Date.parse(iso);

// =================================================================================================

describe("expressions and their values", () => {
  const OPERATORS: [string, boolean][] = [
    ["true && true", true],
    ["true && false", false],
    ["false || true", true],
    ["false || false", false],
    ["!false", true],
    ["!true", false],
    ["!!true", true],
    ["1 == 1", true],
    ["1 == 2", false],
    ["'a' == 'a'", true],
    ["true == false", false],
    ["1 != 2", true],
    ["'a' != 'a'", false],
    ["1 < 2", true],
    ["2 < 1", false],
    ["2 > 1", true],
    ["1 > 1", false],
    ["1 <= 1", true],
    ["2 <= 1", false],
    ["1 >= 1", true],
    ["0 >= 1", false],
    ["-1 < 0", true],
    ["--1 == 1", true],
    ["-0 == 0", true],
    ["2 in [1, 2]", true],
    ["3 in [1, 2]", false],
    ["'w1' in ['w0', 'w1']", true],
    ["[1] in [[0], [1]]", true],
    ["[1] in [[1, 2]]", false],
    // precedence: || < && < comparisons < prefix ! and -
    ["true || false && false", true],
    ["(true || false) && false", false],
    ["false && true || true", true],
    ["!false == true", true],
    ["!(1 == 2)", true],
    ["1 < 2 == true", true],
    ["-2 < -1", true],
    ["  true\n\t&&\r\n true  ", true],
  ];
  it.each(OPERATORS)("%s → %s", (source, expected) => {
    expect(evaluate(source)).toBe(expected);
  });

  const METHODS: [string, boolean][] = [
    ["[1, 2, 3].all(x, x > 0)", true],
    ["[1, 2, 3].all(x, x > 1)", false],
    ["[1, 2, 3].any(x, x > 2)", true],
    ["[1, 2, 3].any(x, x > 3)", false],
    ["[1, 2, 3].contains(2)", true],
    ["[1, 2, 3].contains(4)", false],
    ["['a', 'b'].contains('b')", true],
    ["[1, 2, 3].count() == 3", true],
    ["[1, 2, 3].filter(x, x >= 2) == [2, 3]", true],
    ["[1, 2, 3].filter(x, x > 5).count() == 0", true],
    ["[1, 2, 3].filter(x, x > 1).all(y, y > 1)", true],
    ["[1].any(x, x == 1) && [2].any(x, x == 2)", true],
    // nested lambdas, the inner one reading the outer variable
    ["[[1, 2], [3]].any(xs, xs.all(x, x > 2))", true],
    ["[[1, 2], [3]].all(xs, xs.any(x, x > 2))", false],
    ["[1, 2].all(x, [2, 1].any(y, y == x))", true],
    ["[1, 2].all(x, [2, 3].any(y, y == x))", false],
  ];
  it.each(METHODS)("%s → %s", (source, expected) => {
    expect(evaluate(source)).toBe(expected);
  });

  const EMPTY_LISTS: [string, boolean][] = [
    ["[].count() == 0", true],
    ["[].all(x, x == 1)", true],
    ["[].any(x, x == 1)", false],
    ["[].contains(1)", false],
    ["[].filter(x, x == 1) == []", true],
    ["1 in []", false],
    ["[] in [[]]", true],
    ["[] == []", true],
    ["[] == [1]", false],
    ["[1][1..] == []", true],
    ["wallets.filter(w, w.id == 'none') == []", true],
  ];
  it.each(EMPTY_LISTS)("%s → %s", (source, expected) => {
    expect(evaluate(source)).toBe(expected);
  });

  const NUMBERS: [string, boolean][] = [
    [`${U256_MAX} > 0`, true],
    [`${U256_MAX} == ${U256_MAX}`, true],
    [`${I128_MAX} > 0`, true],
    [`-${I128_MIN_MAGNITUDE} < 0`, true],
    [`-${I128_MIN_MAGNITUDE} < -${I128_MAX}`, true],
    // int against uint compares by value
    [`${SMALLEST_UINT_ONLY} > ${I128_MAX}`, true],
    [`-1 < ${SMALLEST_UINT_ONLY}`, true],
    [`${U256_MAX} != -1`, true],
    [`${SMALLEST_UINT_ONLY} in [1, ${SMALLEST_UINT_ONLY}]`, true],
    [`[1, ${U256_MAX}].contains(1)`, true],
    ["007 == 7", true],
    ["activity.params.otp_length >= 6", true],
  ];
  it.each(NUMBERS)("%s → %s", (source, expected) => {
    expect(evaluate(source)).toBe(expected);
  });

  const INDEXING: [string, boolean][] = [
    ["[10, 20, 30][0] == 10", true],
    ["[10, 20, 30][2] == 30", true],
    ["[10, 20, 30][0..2] == [10, 20]", true],
    ["[10, 20, 30][1..2] == [20]", true],
    ["[10, 20, 30][..2] == [10, 20]", true],
    ["[10, 20, 30][1..] == [20, 30]", true],
    ["[10, 20, 30][..] == [10, 20, 30]", true],
    ["[10, 20, 30][3..] == []", true],
    ["[10, 20, 30][1..1] == []", true],
    ["[[1, 2], [3]][0][1] == 2", true],
    ["'hello'[0] == 'h'", true],
    ["'hello'[1..3] == 'el'", true],
    ["'hello'[..2] == 'he'", true],
    ["'hello'[3..] == 'lo'", true],
    ["'hello'[5..] == ''", true],
    ["wallets[1].label == 'ops'", true],
    // strings index by code point
    ["'héllo'[1] == 'é'", true],
    ["'héllo'[2] == 'l'", true],
    ["'héllo'[..2] == 'hé'", true],
    ["'a😀b'[1] == '😀'", true],
    ["'a😀b'[2] == 'b'", true],
    ["'a😀b'[2..] == 'b'", true],
    ["'😀😀'[1..] == '😀'", true],
    ["'日本語'[2] == '語'", true],
  ];
  it.each(INDEXING)("%s → %s", (source, expected) => {
    expect(evaluate(source)).toBe(expected);
  });

  const EQUALITY: [string, boolean][] = [
    ["[[1, 2], [3]] == [[1, 2], [3]]", true],
    ["[[1, 2], [3]] == [[1, 2], [4]]", false],
    ["[[1, 2], [3]] != [[1], [2, 3]]", true],
    ["[1, 2] == [1, 2, 3]", false],
    ["[1, 2] == [2, 1]", false],
    ["['a', 'b'] == ['a', 'b']", true],
    ["[true, false] != [true, true]", true],
    [`[1] == [${SMALLEST_UINT_ONLY}]`, false],
    ["wallets[0] == wallet", true],
    ["wallets[1] != wallet", true],
    ["wallets == [wallet, wallets[1]]", true],
    ["[Timestamp('2025-01-01T00:00:00Z')] == [Timestamp('2025-01-01T00:00:00.000Z')]", true],
  ];
  it.each(EQUALITY)("%s → %s", (source, expected) => {
    expect(evaluate(source)).toBe(expected);
  });

  const TIMESTAMPS: [string, boolean][] = [
    ["Timestamp('2025-01-01T00:00:00Z') == Timestamp('2025-01-01T00:00:00+00:00')", true],
    ["Timestamp('2025-01-01T00:00:00Z') == Timestamp('2025-01-01T00:00:00-00:00')", true],
    ["Timestamp('2025-01-01t00:00:00z') == Timestamp('2025-01-01T00:00:00Z')", true],
    ["Timestamp('2025-01-01T00:00:00Z') < Timestamp('2025-01-01T00:00:01Z')", true],
    ["Timestamp('2025-01-02T00:00:00Z') > Timestamp('2025-01-01T23:59:59Z')", true],
    ["Timestamp('2025-01-01T00:00:00.5Z') > Timestamp('2025-01-01T00:00:00.499999999Z')", true],
    ["Timestamp('2025-01-01T00:00:00.000000001Z') != Timestamp('2025-01-01T00:00:00Z')", true],
    ["Timestamp('2025-01-01T00:00:00.1Z') == Timestamp('2025-01-01T00:00:00.100000000Z')", true],
    ["Timestamp('2025-01-01T00:00:00.123+00:00') <= Timestamp('2025-01-01T00:00:00.123Z')", true],
    ["Timestamp('2024-02-29T12:00:00Z') >= Timestamp('2024-02-29T12:00:00Z')", true],
    ["Timestamp('1970-01-01T00:00:00Z') < Timestamp('9999-12-31T23:59:59.999999999Z')", true],
    ["time.now == Timestamp('2025-06-11T13:00:00Z')", true],
    ["time.now > Timestamp('2025-06-11T12:59:59.999999999Z')", true],
    ["time.now < Timestamp('2025-06-11T13:00:00.000000001Z')", true],
  ];
  it.each(TIMESTAMPS)("%s → %s", (source, expected) => {
    expect(evaluate(source)).toBe(expected);
  });

  describe("string escapes decode to the characters they name", () => {
    const label = "it's \\ a\nb\tc\rd";
    const ESCAPES: [string, boolean][] = [
      [String.raw`wallet.label == 'it\'s \\ a\nb\tc\rd'`, true],
      [String.raw`wallet.label[2] == '\''`, true],
      [String.raw`wallet.label[5] == '\\'`, true],
      [String.raw`wallet.label[8] == '\n'`, true],
      [String.raw`wallet.label[8] != 'n'`, true],
      [String.raw`'a\\b'[2] == 'b'`, true],
      [String.raw`'it\'s'[3] == 's'`, true],
      ["'' == ''", true],
    ];
    it.each(ESCAPES)("%s → %s", (source, expected) => {
      expect(evaluate(source, "condition", { wallet: { ...WALLET, label } })).toBe(expected);
    });
  });
});

// =================================================================================================

describe("every keyword of every field", () => {
  const KEYWORDS: [PolicyField, string, boolean][] = [
    ["condition", "activity.type == 'ACTIVITY_TYPE_SIGN_TRANSACTION_V2'", true],
    ["condition", "activity.kind == 'SIGN_TRANSACTION'", true],
    ["condition", "activity.resource == 'PRIVATE_KEY'", true],
    ["condition", "activity.action == 'SIGN'", true],
    ["condition", "activity.params.user_ids == ['u1', 'u2']", true],
    ["condition", "activity.params.user_ids.contains('u2')", true],
    ["condition", "activity.params.user_id == 'u1'", true],
    ["condition", "activity.params.api_key_ids.count() == 1", true],
    ["condition", "activity.params.hash_function == 'HASH_FUNCTION_SHA256'", true],
    ["condition", "activity.params.encoding == 'PAYLOAD_ENCODING_HEXADECIMAL'", true],
    ["condition", "activity.params.type == 'TRANSACTION_TYPE_ETHEREUM'", true],
    ["condition", "activity.params.target_public_key == '04ab'", true],
    ["condition", "activity.params.wallet_id == wallet.id", true],
    ["condition", "activity.params.otp_length == 6", true],
    ["condition", "activity.params.session_profile_id == 'sp1'", true],
    ["condition", "activity.params.endpoint_id == 'e1'", true],
    ["condition", "activity.params.sign_with == wallet_account.address", true],
    ["condition", "wallet.id == 'w1'", true],
    ["condition", "wallet.imported", false],
    ["condition", "wallet.exported", true],
    ["condition", "wallet.label == 'treasury'", true],
    ["condition", "wallets.count() == 2", true],
    ["condition", "wallets.any(w, w.imported)", true],
    ["condition", "wallets.all(w, w.imported)", false],
    ["condition", "wallet in wallets", true],
    ["condition", "private_key.id == 'pk1'", true],
    ["condition", "private_key.tags.contains('hot')", true],
    ["condition", "'cold' in private_key.tags", false],
    ["condition", "private_key.imported && !private_key.exported", true],
    ["condition", "private_key.label == 'signer'", true],
    ["condition", "wallet_account.address == '0xabc'", true],
    ["condition", "time.now > Timestamp('2025-01-01T00:00:00Z')", true],
    ["consensus", "approvers.count() == 2", true],
    ["consensus", "approvers[0].id == 'A'", true],
    ["consensus", "approvers.any(u, u.id == 'B')", true],
    ["consensus", "approvers.any(u, u.id == 'C')", false],
    ["consensus", "approvers.all(u, 'admin' in u.tags)", true],
    ["consensus", "approvers.filter(u, u.tags.contains('ops')).count() == 1", true],
    ["consensus", "approvers[1].email == 'bob@example.com'", true],
    ["consensus", "approvers.any(u, u.alias == 'alice')", true],
    ["consensus", "approvers.any(u, u.tags.any(t, t == 'ops'))", true],
    ["consensus", "approvers.any(u, u.tags.any(t, t == 'x'))", false],
    ["consensus", "approvers.all(u, u.tags.any(t, t == 'admin'))", true],
    ["consensus", "credentials.count() == 1", true],
    ["consensus", "credentials[0].id == 'c1'", true],
    ["consensus", "credentials[0].user_id == approvers[0].id", true],
    ["consensus", "credentials.all(c, c.type == 'CREDENTIAL_TYPE_API_KEY_P256')", true],
    ["consensus", "credentials[0].credential_id == 'cid-c1'", true],
    ["consensus", "credentials[0].public_key == '02c1'", true],
    ["consensus", "credentials.all(c, approvers.any(u, u.id == c.user_id))", true],
    ["consensus", "time.now < Timestamp('2030-01-01T00:00:00Z')", true],
    ["time", "time.now == Timestamp('2025-06-11T13:00:00Z')", true],
    ["time", "time.now >= Timestamp('2025-06-12T00:00:00Z')", false],
  ];
  it.each(KEYWORDS)("%s: %s → %s", (field, source, expected) => {
    expect(evaluate(source, field)).toBe(expected);
  });
});

// =================================================================================================

describe("CronSpan windows", () => {
  const BUSINESS_HOURS = "CronSpan('0 9 * * 1-5', '8h', 'America/New_York')";
  const OVERNIGHT = "CronSpan('0 22 * * *', '8h', 'America/New_York')";
  const FIRST_OR_MONDAY = "CronSpan('0 0 1 * 1', '1d', 'UTC')";

  const WINDOWS: [string, string, string, boolean][] = [
    // business hours, 09:00-17:00 New York time, Monday to Friday
    [BUSINESS_HOURS, "Wednesday 09:00 EDT, the start (inclusive)", "2025-06-11T13:00:00Z", true],
    [BUSINESS_HOURS, "Wednesday 08:59:59.999 EDT", "2025-06-11T12:59:59.999Z", false],
    [BUSINESS_HOURS, "Wednesday 16:59:59.999 EDT", "2025-06-11T20:59:59.999Z", true],
    [BUSINESS_HOURS, "Wednesday 17:00 EDT, the end (exclusive)", "2025-06-11T21:00:00Z", false],
    [BUSINESS_HOURS, "Saturday 11:00 EDT", "2025-06-14T15:00:00Z", false],
    [BUSINESS_HOURS, "Sunday 12:00 EDT", "2025-06-15T16:00:00Z", false],
    [BUSINESS_HOURS, "Monday 10:00 EDT", "2025-06-16T14:00:00Z", true],
    [BUSINESS_HOURS, "Friday 16:30 EDT", "2025-06-13T20:30:00Z", true],
    [BUSINESS_HOURS, "winter Wednesday 09:00 EST", "2025-01-15T14:00:00Z", true],
    [BUSINESS_HOURS, "winter Wednesday 08:30 EST (13:30Z would be 09:30 in summer)", "2025-01-15T13:30:00Z", false],
    // overnight, 22:00 to 06:00
    [OVERNIGHT, "22:30 EDT", "2025-06-12T02:30:00Z", true],
    [OVERNIGHT, "01:00 EDT next day", "2025-06-12T05:00:00Z", true],
    [OVERNIGHT, "05:59 EDT next day", "2025-06-12T09:59:00Z", true],
    [OVERNIGHT, "06:00 EDT next day (end, exclusive)", "2025-06-12T10:00:00Z", false],
    [OVERNIGHT, "21:59 EDT", "2025-06-12T01:59:00Z", false],
    [OVERNIGHT, "noon", "2025-06-11T16:00:00Z", false],
    // DST spring-forward (2025-03-09): 8 hours from 22:00 EST end at 07:00 EDT
    [OVERNIGHT, "DST day 06:00 EDT (would be closed by wall clock)", "2025-03-09T10:00:00Z", true],
    [OVERNIGHT, "DST day 06:59 EDT", "2025-03-09T10:59:00Z", true],
    [OVERNIGHT, "DST day 07:00 EDT", "2025-03-09T11:00:00Z", false],
    // day-of-month and day-of-week both restricted: either one matching fires
    [FIRST_OR_MONDAY, "Sunday the 1st (day of month)", "2025-06-01T12:00:00Z", true],
    [FIRST_OR_MONDAY, "Monday the 9th (day of week)", "2025-06-09T12:00:00Z", true],
    [FIRST_OR_MONDAY, "Tuesday the 10th (neither)", "2025-06-10T12:00:00Z", false],
    ["CronSpan('0 0 1 * *', '1d', 'UTC')", "Monday the 9th, day of month only", "2025-06-09T12:00:00Z", false],
    ["CronSpan('0 0 * * 1', '1d', 'UTC')", "Sunday the 1st, day of week only", "2025-06-01T12:00:00Z", false],
    // months, lists, durations
    ["CronSpan('0 0 * 12 *', '1d', 'UTC')", "December 25th", "2025-12-25T08:00:00Z", true],
    ["CronSpan('0 0 * 12 *', '1d', 'UTC')", "June 1st", "2025-06-01T08:00:00Z", false],
    ["CronSpan('0 9,17 * * *', '1h', 'UTC')", "17:30", "2025-06-11T17:30:00Z", true],
    ["CronSpan('0 9,17 * * *', '1h', 'UTC')", "12:00", "2025-06-11T12:00:00Z", false],
    ["CronSpan('0 9 * * *', '90m', 'UTC')", "10:29", "2025-06-11T10:29:00Z", true],
    ["CronSpan('0 9 * * *', '90m', 'UTC')", "10:30", "2025-06-11T10:30:00Z", false],
    ["CronSpan('0 0 * * 1', '1d12h', 'UTC')", "Tuesday 11:59", "2025-06-10T11:59:00Z", true],
    ["CronSpan('0 0 * * 1', '1d12h', 'UTC')", "Tuesday 12:00", "2025-06-10T12:00:00Z", false],
    ["CronSpan('0 0 * * 1', '7d', 'UTC')", "Sunday 23:59, a week-long window", "2025-06-15T23:59:00Z", true],
    ["CronSpan('30 12 * * *', '1m', 'Asia/Tokyo')", "12:30 in Tokyo", "2025-06-11T03:30:00Z", true],
    ["CronSpan('30 12 * * *', '1m', 'Asia/Tokyo')", "12:31 in Tokyo", "2025-06-11T03:31:00Z", false],
  ];
  it.each(WINDOWS)("%s at %s → %s", (source, _when, iso, expected) => {
    expect(evaluate(source, "time", {}, at(iso))).toBe(expected);
  });

  it("one compiled CronSpan answers for each instant it is asked about, in any order", () => {
    const run = compileExpression(BUSINESS_HOURS, "time");
    const inWindow = (iso: string) => run(environment({}, at(iso)));
    const answers = [
      ["2025-06-11T12:59:59.999Z", false],
      ["2025-06-11T13:00:00.000Z", true],
      ["2025-06-11T20:59:59.999Z", true],
      ["2025-06-11T21:00:00.000Z", false],
      ["2025-06-11T12:59:30.000Z", false],
      ["2025-06-11T13:00:30.000Z", true],
      ["2025-06-14T15:00:00.000Z", false],
      ["2025-06-11T13:00:59.999Z", true],
    ] as const;
    expect(answers.map(([iso]) => inWindow(iso))).toEqual(answers.map(([, expected]) => expected));
  });

  it("is usable in a condition and a consensus too", () => {
    expect(evaluate(`wallet.id == 'w1' && ${BUSINESS_HOURS}`, "condition")).toBe(true);
    expect(evaluate(`approvers.count() >= 2 || ${BUSINESS_HOURS}`, "consensus")).toBe(true);
  });

  const REFUSED: [string, string][] = [
    ["CronSpan('*/5 * * * *', '8h', 'UTC')", "step values"],
    ["CronSpan('0 9 * * MON', '8h', 'UTC')", "names"],
    ["CronSpan('0 9 * JAN *', '8h', 'UTC')", "names"],
    ["CronSpan('@daily', '8h', 'UTC')", "cron macros"],
    ["CronSpan('0 0 9 * * *', '8h', 'UTC')", "must have 5 fields"],
    ["CronSpan('0 9 * *', '8h', 'UTC')", "must have 5 fields"],
    ["CronSpan('', '8h', 'UTC')", "must have 5 fields"],
    ["CronSpan('60 * * * *', '8h', 'UTC')", "outside 0-59"],
    ["CronSpan('0 24 * * *', '8h', 'UTC')", "outside 0-23"],
    ["CronSpan('0 0 0 * *', '8h', 'UTC')", "outside 1-31"],
    ["CronSpan('0 0 * 13 *', '8h', 'UTC')", "outside 1-12"],
    ["CronSpan('5-1 * * * *', '8h', 'UTC')", "outside 0-59"],
    ["CronSpan('0 9 * * ?', '8h', 'UTC')", "is not a number, range or list"],
    ["CronSpan('* * * * *', '1.5h', 'UTC')", "must be whole days, hours and minutes"],
    ["CronSpan('* * * * *', '', 'UTC')", "must be whole days, hours and minutes"],
    ["CronSpan('* * * * *', '8', 'UTC')", "must be whole days, hours and minutes"],
    ["CronSpan('* * * * *', 'h', 'UTC')", "must be whole days, hours and minutes"],
    ["CronSpan('* * * * *', '8s', 'UTC')", "must be whole days, hours and minutes"],
    ["CronSpan('* * * * *', '0m', 'UTC')", "more than zero and at most 7 days"],
    ["CronSpan('* * * * *', '8d', 'UTC')", "more than zero and at most 7 days"],
    ["CronSpan('* * * * *', '7d1m', 'UTC')", "more than zero and at most 7 days"],
    ["CronSpan('* * * * *', '1h', 'Mars/Olympus')", "not an IANA time zone"],
    ["CronSpan('* * * * *', '1h', '')", "not an IANA time zone"],
    ["CronSpan('* * * * *', '1h', '+05:00')", "not an IANA time zone"],
  ];
  it.each(REFUSED)("refuses %s (%s)", (source, fragment) => {
    const error = thrown(() => compileExpression(source, "time"));
    expect(error).toBeInstanceOf(PolicySyntaxError);
    expect(error.message).toMatch(/^line 1, column 1: /);
    expect(error.message).toContain(fragment);
  });

  it("points at the CronSpan call that is refused", () => {
    const error = thrown(() => compileExpression("true && CronSpan('@daily', '1h', 'UTC')", "time"));
    expect(error.message).toMatch(/^line 1, column 9: cron macros/);
  });
});

// =================================================================================================

describe("timestamps that are refused", () => {
  const REFUSED: [string, string][] = [
    ["2025-02-30T00:00:00Z", "does not exist"],
    ["2025-02-29T00:00:00Z", "does not exist"],
    ["2025-13-01T00:00:00Z", "does not exist"],
    ["2025-00-10T00:00:00Z", "does not exist"],
    ["2025-04-31T00:00:00Z", "does not exist"],
    ["2025-01-01T24:00:00Z", "does not exist"],
    ["2025-01-01T23:60:00Z", "does not exist"],
    ["2025-01-01T23:59:60Z", "does not exist"],
    ["2025-01-01T00:00:00+01:00", "non-zero UTC offset"],
    ["2025-01-01T00:00:00-05:00", "non-zero UTC offset"],
    ["2025-01-01T00:00:00+00:30", "non-zero UTC offset"],
    ["2025-01-01T00:00:00", "not an RFC 3339 timestamp"],
    ["2025-01-01", "not an RFC 3339 timestamp"],
    ["2025-01-01 00:00:00Z", "not an RFC 3339 timestamp"],
    ["2025-1-1T00:00:00Z", "not an RFC 3339 timestamp"],
    ["2025-01-01T00:00:00.Z", "not an RFC 3339 timestamp"],
    ["2025-01-01T00:00:00.1234567890Z", "not an RFC 3339 timestamp"],
    ["now", "not an RFC 3339 timestamp"],
    ["", "not an RFC 3339 timestamp"],
  ];
  it.each(REFUSED)("Timestamp('%s') (%s)", (text, fragment) => {
    const error = thrown(() => compileExpression(`Timestamp('${text}') < time.now`, "time"));
    expect(error).toBeInstanceOf(PolicySyntaxError);
    expect(error.message).toMatch(/^line 1, column 11: /); // the string argument
    expect(error.message).toContain(fragment);
  });
});

// =================================================================================================

describe("expressions refused at compile time", () => {
  interface Refusal {
    field?: PolicyField;
    source: string;
    line?: number;
    column: number;
    fragment: string;
  }
  const refusal = (source: string, column: number, fragment: string, field: PolicyField = "condition", line = 1): Refusal => ({
    source,
    column,
    fragment,
    field,
    line,
  });

  const TYPE_ERRORS: Refusal[] = [
    // keywords
    refusal("foo == 1", 1, 'unknown keyword "foo" in a condition'),
    refusal("approvers.count() > 0", 1, 'unknown keyword "approvers" in a condition'),
    refusal("credentials.count() > 0", 1, 'unknown keyword "credentials" in a condition'),
    refusal("activity.type == 'x'", 1, 'unknown keyword "activity" in a consensus', "consensus"),
    refusal("wallet.id == 'x'", 1, 'unknown keyword "wallet" in a consensus', "consensus"),
    refusal("wallet.id == 'x'", 1, 'unknown keyword "wallet" in a time', "time"),
    refusal("approvers.count() > 0", 1, 'unknown keyword "approvers" in a time', "time"),
    refusal("now > Timestamp('2025-01-01T00:00:00Z')", 1, 'unknown keyword "now"', "time"),
    refusal("wallets.any(w, true) && w.id == 'x'", 25, 'unknown keyword "w"'),
    // fields
    refusal("wallet.name == 'x'", 8, 'Wallet has no field "name"'),
    refusal("activity.params.amount == 1", 17, 'ActivityParams has no field "amount"'),
    refusal("approvers[0].phone == ''", 14, 'User has no field "phone"', "consensus"),
    refusal("credentials[0].secret == ''", 16, 'Credential has no field "secret"', "consensus"),
    refusal("time.today == time.now", 6, 'time has no field "today"', "time"),
    refusal("wallet.id.size == 1", 11, "string has no fields"),
    refusal("wallets.id == 'x'", 9, "list<Wallet> has no fields"),
    // methods
    refusal("wallets.size() == 1", 9, 'unknown function "size"'),
    refusal("wallets.map(w, w.id) == []", 9, 'unknown function "map"'),
    refusal("wallet.id.count() == 1", 11, "count() applies to a list, not string"),
    refusal("wallets.count(1) == 1", 9, "count() takes no arguments"),
    refusal("wallets.contains()", 9, "contains() takes one argument"),
    refusal("wallets.contains(wallet, wallet)", 9, "contains() takes one argument"),
    refusal("wallets.any(w)", 9, "any() takes a variable name and a predicate"),
    refusal("wallets.all(w, true, true)", 9, "all() takes a variable name and a predicate"),
    refusal("wallets.filter(w).count() == 0", 9, "filter() takes a variable name and a predicate"),
    refusal("wallets.any('w', true)", 13, "the first argument of any() must be a variable name"),
    refusal("wallets.any(wallet, true)", 13, '"wallet" is a keyword and cannot name a variable'),
    refusal("wallets.any(time, true)", 13, '"time" is a keyword and cannot name a variable'),
    refusal("wallets.any(w, w)", 16, "the predicate of any() must be a bool, not Wallet"),
    refusal("[1].filter(x, 'x').count() == 0", 15, "the predicate of filter() must be a bool, not string"),
    refusal("wallets.contains('w1')", 18, "cannot look for string in list<Wallet>"),
    // functions
    refusal("Timestamp() < time.now", 1, "Timestamp() takes 1 string argument, got 0"),
    refusal("Timestamp('2025-01-01T00:00:00Z', 'UTC') < time.now", 1, "Timestamp() takes 1 string argument, got 2"),
    refusal("CronSpan('* * * * *', '1h')", 1, "CronSpan() takes 3 string arguments, got 2"),
    refusal("Timestamp(now) < time.now", 11, "must be string literals"),
    refusal("Timestamp(1) < time.now", 11, "must be string literals"),
    refusal("CronSpan('* * * * *', '1h', zone)", 29, "must be string literals"),
    refusal("time.now > Timestamp('2025-01-01T00:00:00+01:00')", 22, "non-zero UTC offset"),
    refusal("Now() == time.now", 1, 'unknown function "Now"'),
    refusal("timestamp('2025-01-01T00:00:00Z') < time.now", 1, 'unknown function "timestamp"'),
    // the result must be a bool
    refusal("42", 1, "a condition must be a bool expression, but this one is int"),
    refusal("wallet.id", 1, "a condition must be a bool expression, but this one is string"),
    refusal("wallet", 1, "a condition must be a bool expression, but this one is Wallet"),
    refusal("[true]", 1, "a condition must be a bool expression, but this one is list<bool>"),
    refusal("approvers", 1, "a consensus must be a bool expression, but this one is list<User>", "consensus"),
    refusal("time.now", 1, "a time must be a bool expression, but this one is timestamp", "time"),
    refusal("wallets.filter(w, w.imported)", 1, "but this one is list<Wallet>"),
    // lists hold one type
    refusal("[1, 'a'] == []", 5, "a list holds one type: this item is string, earlier items are int"),
    refusal("[[1], ['a']] == []", 7, "this item is list<string>, earlier items are list<int>"),
    refusal("[wallet, private_key] == []", 10, "this item is PrivateKey, earlier items are Wallet"),
    // operand types
    refusal("'a' == 1", 5, 'cannot compare string with int using "=="'),
    refusal("1 != 'a'", 3, 'cannot compare int with string using "!="'),
    refusal("wallet == wallets", 8, "cannot compare Wallet with list<Wallet>"),
    refusal("[1] == ['a']", 5, "cannot compare list<int> with list<string>"),
    refusal("'a' < 'b'", 5, '"<" compares two numbers or two timestamps, not string and string'),
    refusal("'a' >= 'b'", 5, '">=" compares two numbers or two timestamps'),
    refusal("true > false", 6, '">" compares two numbers or two timestamps, not bool and bool'),
    refusal("time.now <= 0", 10, '"<=" compares two numbers or two timestamps, not timestamp and int'),
    refusal("1 && true", 1, '"&&" joins bools, but this operand is int'),
    refusal("true || 'x'", 9, '"||" joins bools, but this operand is string'),
    refusal("!1", 1, '"!" applies to a bool, not int'),
    refusal("-'a' == 1", 1, '"-" applies to a number, not string'),
    refusal("-true", 1, '"-" applies to a number, not bool'),
    refusal("1 in 1", 3, 'the right side of "in" must be a list, not int'),
    refusal("'a' in 'abc'", 5, 'the right side of "in" must be a list, not string'),
    refusal("'a' in [1]", 5, "cannot look for string in list<int>"),
    refusal("[1]['a'] == 1", 5, "an index must be a number, not string"),
    refusal("wallet[0] == wallet", 7, "only lists and strings can be indexed or sliced, not Wallet"),
    refusal("1[0] == 1", 2, "only lists and strings can be indexed or sliced, not int"),
    refusal("[1][true..] == [1]", 5, "a slice bound must be a number, not bool"),
    refusal("[1][..'b'] == [1]", 7, "a slice bound must be a number, not string"),
    // number ranges
    refusal(`${BEYOND_U256} > 0`, 1, "larger than the largest uint (2^256 - 1)"),
    refusal(`-${BEYOND_U256} < 0`, 2, "larger than the largest uint"),
    refusal(`-${BEYOND_I128_MIN} < 0`, 1, "smaller than the smallest int (-2^127)"),
    refusal(`-${U256_MAX} < 0`, 1, "smaller than the smallest int (-2^127)"),
    refusal(`[${SMALLEST_UINT_ONLY}].any(x, -x < 0)`, 50, '"-" does not apply to a uint'),
    // positions count lines, and columns count code points
    refusal("true &&\n  wallet.nme == 'x'", 10, 'Wallet has no field "nme"', "condition", 2),
    refusal("'😀😀' == 1", 6, "cannot compare string with int"),
  ];

  const PARSE_ERRORS: Refusal[] = [
    refusal('wallet.id == "w1"', 14, "strings are written in single quotes"),
    refusal("wallet.id == 'w1", 14, "string is not closed"),
    refusal("'", 1, "string is not closed"),
    refusal("wallet.id = 'w1'", 11, 'unexpected "=": compare with "=="'),
    refusal("true & false", 6, 'unexpected "&": use "&&"'),
    refusal("true | false", 6, 'unexpected "|": use "||"'),
    refusal("true false", 6, 'unexpected "false" after a complete expression'),
    refusal("true)", 5, 'unexpected ")" after a complete expression'),
    refusal("wallet.id == 'w1' 'w2'", 19, "unexpected 'w2' after a complete expression"),
    refusal("", 1, "the expression is empty"),
    refusal("   ", 4, "the expression is empty"),
    refusal("(true", 6, 'expected ")" to close the parenthesis but found end of input'),
    refusal("((true) && false", 17, 'expected ")" to close the parenthesis'),
    refusal("(true))", 7, 'unexpected ")" after a complete expression'),
    refusal("()", 2, 'expected a value but found ")"'),
    refusal("[1, 2", 6, 'expected "]" to close the list but found end of input'),
    refusal("[1, 2,] == []", 7, 'expected a value but found "]"'),
    refusal("wallets[0", 10, 'expected "]" to close the index'),
    refusal("wallets[0..1", 13, 'expected "]" to close the slice'),
    refusal("wallets[] == wallet", 9, 'expected a value but found "]"'),
    refusal("wallets.any(w, true", 20, 'expected ")" to close the arguments of any('),
    refusal("Timestamp('2025-01-01T00:00:00Z'", 33, 'expected ")" to close the arguments of Timestamp('),
    refusal("1.5 > 1", 1, "numbers are whole: fractions are not supported"),
    refusal("wallets[0.5] == wallet", 9, "numbers are whole"),
    refusal("1x == 1", 2, 'unexpected "x" after the number 1'),
    refusal("1e3 == 1000", 2, 'unexpected "e" after the number 1'),
    refusal("wallet.id == 'x' &&", 20, "expected a value but found end of input"),
    refusal("== 1", 1, 'expected a value but found "=="'),
    refusal("in [1]", 1, 'expected a value but found "in"'),
    refusal("wallet.5 == 1", 8, 'expected a field or method name after "." but found "5"'),
    refusal("wallet. == 1", 9, 'expected a field or method name after "." but found "=="'),
    refusal(String.raw`'\q' == 'a'`, 2, 'unknown escape "\\q" in string'),
    refusal("true # false", 6, 'unexpected character "#"'),
    refusal("1 + 1 == 2", 3, 'unexpected character "+"'),
    refusal("1 - 1 == 0", 3, 'unexpected "-" after a complete expression'),
    refusal("'😀' == 😀", 8, 'unexpected character "😀"'),
    refusal("'héllo' == héllo", 13, 'unexpected character "é"'),
    // nesting and length limits
    refusal("(".repeat(10_000), 65, "expression nests deeper than 64 levels"),
    refusal("(".repeat(10_000) + "true" + ")".repeat(10_000), 16_385, "longer than 16384 characters"),
    refusal("!".repeat(10_000) + "true", 65, "expression nests deeper than 64 levels"),
    refusal("-".repeat(10_000) + "1 == 1", 65, "expression nests deeper than 64 levels"),
    refusal("[".repeat(10_000), 65, "expression nests deeper than 64 levels"),
    refusal("true && ".repeat(3_000) + "true", 16_385, "longer than 16384 characters"),
  ];

  const check = ({ field = "condition", source, line = 1, column, fragment }: Refusal) => {
    const error = thrown(() => compileExpression(source, field));
    expect(error).toBeInstanceOf(PolicySyntaxError);
    expect(error.message).toMatch(new RegExp(`^line ${line}, column ${column}: `));
    expect(error.message).toContain(fragment);
  };

  describe("type errors", () => {
    for (const row of TYPE_ERRORS)
      it(`${row.field}: ${short(JSON.stringify(row.source))} → column ${row.column}: ${row.fragment}`, () => check(row));
  });

  describe("parse errors", () => {
    for (const row of PARSE_ERRORS) it(`${short(JSON.stringify(row.source))} → column ${row.column}: ${row.fragment}`, () => check(row));
  });

  it("the column helper agrees with the columns written in the tables", () => {
    expect(columnOf(`[${SMALLEST_UINT_ONLY}].any(x, -x < 0)`, "-x")).toBe(50);
  });
});

// =================================================================================================

describe("evaluation errors (and no short-circuit)", () => {
  interface Failure {
    field: PolicyField;
    source: string;
    /** keyword values, when not the full set */
    values?: Record<string, unknown>;
    fragment: string;
  }
  const failure = (source: string, fragment: string, values?: Record<string, unknown>, field: PolicyField = "condition"): Failure => ({
    field,
    source,
    values,
    fragment,
  });
  const NO_WALLET = { activity: ACTIVITY };

  const FAILURES: Failure[] = [
    // indexes and slices out of range
    failure("[1, 2, 3][3] == 1", "index 3 is out of range for a length of 3"),
    failure("[1, 2, 3][-1] == 1", "index -1 is out of range"),
    failure("[][0] == 1", "index 0 is out of range for a length of 0"),
    failure(`[1][${U256_MAX}] == 1`, "out of range"),
    failure("'😀'[1] == ''", "index 1 is out of range for a length of 1"),
    failure("'héllo'[5] == 'o'", "index 5 is out of range for a length of 5"),
    failure("[1, 2, 3][..4] == []", "slice 0..4 is out of range"),
    failure("[1, 2, 3][2..1] == []", "slice 2..1 is out of range"),
    failure("[1, 2, 3][-1..] == []", "slice -1..3 is out of range"),
    failure("'abc'[-1..] == ''", "slice -1..3 is out of range"),
    failure("'héllo'[6..] == ''", "slice 6..5 is out of range"),
    failure("wallets[2].id == 'w3'", "index 2 is out of range for a length of 2"),
    // keywords and fields the activity does not have
    failure("wallet.id == 'w1'", "wallet is not available for this activity", NO_WALLET),
    failure("wallets.count() == 0", "wallets is not available", NO_WALLET),
    failure("activity.params.otp_length == 6", "activity.params.otp_length is not available", { activity: { ...ACTIVITY, params: {} } }),
    failure("activity.params.user_ids.count() == 0", "activity.params.user_ids is not available", {
      activity: { ...ACTIVITY, params: {} },
    }),
    failure("credentials.count() == 0", "credentials is not available", { approvers: [ALICE] }, "consensus"),
    // no short-circuit: both sides run, so an error on either side is an error
    failure("wallet.id == 'x' || true", "wallet is not available", NO_WALLET),
    failure("true || wallet.id == 'x'", "wallet is not available", NO_WALLET),
    failure("false && wallet.id == 'x'", "wallet is not available", NO_WALLET),
    failure("wallet.id == 'x' && false", "wallet is not available", NO_WALLET),
    failure("[1][5] == 1 && false", "index 5 is out of range"),
    failure("true || [1][5] == 1", "index 5 is out of range"),
    failure("!([1][5] == 1) || true", "index 5 is out of range"),
    failure("[[1][5] == 1, true].filter(b, b).count() == 1 || true", "index 5 is out of range"),
    // lambdas test every item, so an error for a later item is an error
    failure("[0, 1].any(i, [10][i] == 10)", "index 1 is out of range"),
    failure("[0, 1].all(i, [10][i] == 5)", "index 1 is out of range"),
    failure("[0, 1].filter(i, [10][i] == 10).count() == 1", "index 1 is out of range"),
    failure("approvers.count() > 0 || credentials.count() > 0", "credentials is not available", { approvers: [ALICE] }, "consensus"),
  ];

  for (const { field, source, values, fragment } of FAILURES) {
    it(`${field}: ${source}${values ? " (with fewer keywords)" : ""} → ${fragment}`, () => {
      const error = thrown(() => evaluate(source, field, values ?? VALUES[field]));
      expect(error).toBeInstanceOf(PolicyEvaluationError);
      expect(error.message).toContain(fragment);
    });
  }
});

// =================================================================================================

describe("engine", () => {
  let ids = 0;
  const policy = (
    effect: PolicySource["effect"],
    fields: Partial<Pick<PolicySource, "condition" | "consensus" | "time">>,
  ): PolicySource => ({
    id: `p${++ids}`,
    effect,
    condition: null,
    consensus: null,
    time: null,
    ...fields,
  });
  const allow = (fields: Partial<Pick<PolicySource, "condition" | "consensus" | "time">> = {}) => policy("EFFECT_ALLOW", fields);
  const deny = (fields: Partial<Pick<PolicySource, "condition" | "consensus" | "time">> = {}) => policy("EFFECT_DENY", fields);

  const input = (overrides: Partial<EvaluationInput> = {}): EvaluationInput => ({
    condition: CONDITION,
    approvers: [ALICE],
    credentials: [CREDENTIAL_A],
    nowMs: NOW,
    ...overrides,
  });

  const SIGNING = "activity.action == 'SIGN'";
  const NOT_SIGNING = "activity.action == 'CREATE'";
  const BROKEN = "activity.params.otp_length == 6"; // errors: the input below has no params
  const TWO_APPROVERS = "approvers.count() >= 2";
  const WEEKDAYS = "CronSpan('0 9 * * 1-5', '8h', 'America/New_York')";
  const SATURDAYS = "CronSpan('0 9 * * 6', '8h', 'America/New_York')";
  const NO_PARAMS = { ...CONDITION, activity: { ...ACTIVITY, params: {} } };

  interface Case {
    name: string;
    policies: PolicySource[];
    input?: Partial<EvaluationInput>;
    outcome: Outcome;
    verdicts: Outcome[];
  }
  const CASES: Case[] = [
    { name: "no policies: implicit deny", policies: [], outcome: "OUTCOME_DENY_IMPLICIT", verdicts: [] },
    {
      name: "an allow whose condition holds allows",
      policies: [allow({ condition: SIGNING })],
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_ALLOW"],
    },
    {
      name: "an allow whose condition fails does not apply",
      policies: [allow({ condition: NOT_SIGNING })],
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_DENY_IMPLICIT"],
    },
    {
      name: "absent and blank fields hold",
      policies: [allow({ condition: "  ", consensus: "", time: null })],
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_ALLOW"],
    },
    {
      name: "explicit deny beats allow",
      policies: [allow({ condition: SIGNING }), deny({ condition: SIGNING })],
      outcome: "OUTCOME_DENY_EXPLICIT",
      verdicts: ["OUTCOME_ALLOW", "OUTCOME_DENY_EXPLICIT"],
    },
    {
      name: "explicit deny beats allow, whatever the order",
      policies: [deny({ condition: "wallet.exported" }), allow()],
      outcome: "OUTCOME_DENY_EXPLICIT",
      verdicts: ["OUTCOME_DENY_EXPLICIT", "OUTCOME_ALLOW"],
    },
    {
      name: "a deny whose condition fails does not deny",
      policies: [allow({ condition: SIGNING }), deny({ condition: NOT_SIGNING })],
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_ALLOW", "OUTCOME_DENY_IMPLICIT"],
    },
    {
      name: "an allow with unmet consensus requires consensus",
      policies: [allow({ condition: SIGNING, consensus: TWO_APPROVERS })],
      outcome: "OUTCOME_REQUIRES_CONSENSUS",
      verdicts: ["OUTCOME_REQUIRES_CONSENSUS"],
    },
    {
      name: "an allow with met consensus allows",
      policies: [allow({ condition: SIGNING, consensus: TWO_APPROVERS })],
      input: { approvers: [ALICE, BOB] },
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_ALLOW"],
    },
    {
      name: "a met allow beats one waiting for consensus",
      policies: [allow({ consensus: TWO_APPROVERS }), allow({ condition: SIGNING })],
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_REQUIRES_CONSENSUS", "OUTCOME_ALLOW"],
    },
    {
      name: "explicit deny beats an allow waiting for consensus",
      policies: [allow({ consensus: TWO_APPROVERS }), deny({ condition: SIGNING })],
      outcome: "OUTCOME_DENY_EXPLICIT",
      verdicts: ["OUTCOME_REQUIRES_CONSENSUS", "OUTCOME_DENY_EXPLICIT"],
    },
    {
      name: "a deny whose consensus is unmet does not deny",
      policies: [deny({ consensus: "approvers.any(u, u.id == 'Z')" }), allow()],
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_DENY_IMPLICIT", "OUTCOME_ALLOW"],
    },
    {
      name: "a deny whose consensus is met denies",
      policies: [deny({ consensus: "approvers.any(u, u.id == 'A')" }), allow()],
      outcome: "OUTCOME_DENY_EXPLICIT",
      verdicts: ["OUTCOME_DENY_EXPLICIT", "OUTCOME_ALLOW"],
    },
    {
      name: "an allow out of its time is time-inactive",
      policies: [allow({ time: SATURDAYS })],
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_TIME_INACTIVE"],
    },
    {
      name: "an allow in its time allows",
      policies: [allow({ time: WEEKDAYS, condition: SIGNING })],
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_ALLOW"],
    },
    {
      name: "a deny out of its time does not deny",
      policies: [deny({ time: SATURDAYS }), allow()],
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_TIME_INACTIVE", "OUTCOME_ALLOW"],
    },
    {
      name: "time is checked before consensus",
      policies: [allow({ time: SATURDAYS, consensus: TWO_APPROVERS })],
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_TIME_INACTIVE"],
    },
    {
      name: "time.now in the time field",
      policies: [allow({ time: "time.now < Timestamp('2025-01-01T00:00:00Z')" })],
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_TIME_INACTIVE"],
    },
    {
      name: "an allow whose condition errors is an error and does not allow",
      policies: [allow({ condition: BROKEN })],
      input: { condition: NO_PARAMS },
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_ERROR"],
    },
    {
      name: "an erroring condition joined with || true is still an error",
      policies: [allow({ condition: `${BROKEN} || true` })],
      input: { condition: NO_PARAMS },
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_ERROR"],
    },
    {
      name: "an erroring allow beside a working allow",
      policies: [allow({ condition: BROKEN }), allow({ condition: SIGNING })],
      input: { condition: NO_PARAMS },
      outcome: "OUTCOME_ALLOW",
      verdicts: ["OUTCOME_ERROR", "OUTCOME_ALLOW"],
    },
    {
      name: "an erroring condition does not turn into a consensus request",
      policies: [allow({ condition: BROKEN, consensus: TWO_APPROVERS })],
      input: { condition: NO_PARAMS },
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_ERROR"],
    },
    // An allow policy in force whose consensus fails on missing approvals waits for more of them.
    {
      name: "an allow policy's erroring consensus waits for approvals",
      policies: [allow({ consensus: "approvers[3].id == 'A'" })],
      outcome: "OUTCOME_REQUIRES_CONSENSUS",
      verdicts: ["OUTCOME_REQUIRES_CONSENSUS"],
    },
    {
      name: "a deny policy's erroring consensus is an error",
      policies: [deny({ consensus: "approvers[3].id == 'A'" })],
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_ERROR"],
    },
    {
      name: "an erroring deny is an error verdict",
      policies: [deny({ condition: BROKEN })],
      input: { condition: NO_PARAMS },
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_ERROR"],
    },
    {
      name: "a condition naming a keyword the activity lacks is an error",
      policies: [allow({ condition: "wallet.id == 'w1'" })],
      input: { condition: { activity: ACTIVITY } },
      outcome: "OUTCOME_DENY_IMPLICIT",
      verdicts: ["OUTCOME_ERROR"],
    },
  ];

  for (const c of CASES) {
    it(`${c.name} → ${c.outcome}`, () => {
      const result = evaluatePolicies(c.policies, input(c.input));
      expect(result.outcome).toBe(c.outcome);
      expect(result.verdicts.map((v) => v.outcome)).toEqual(c.verdicts);
      expect(result.verdicts.map((v) => v.policyId)).toEqual(c.policies.map((p) => p.id));
    });
  }

  it("an error verdict says what was missing", () => {
    const [verdict] = evaluatePolicies([allow({ condition: BROKEN })], input({ condition: NO_PARAMS })).verdicts;
    expect(verdict!.error).toContain("activity.params.otp_length");
  });

  it("a stored policy that no longer compiles is OUTCOME_ERROR, never an exception", () => {
    const result = evaluatePolicies([allow({ condition: "approvers.count() > 1" }), allow({})], input());
    expect(result.outcome).toBe("OUTCOME_ALLOW");
    expect(result.verdicts[0]).toMatchObject({
      outcome: "OUTCOME_ERROR",
      error: expect.stringContaining("the stored policy does not compile"),
    });
  });

  it("a policy that multiplies work past the step budget is OUTCOME_ERROR (64 million steps are never taken)", () => {
    const big = `[${Array.from({ length: 400 }, (_, i) => i).join(", ")}]`;
    const heavy = `${big}.all(a, ${big}.all(b, ${big}.all(c, true)))`;
    const result = evaluatePolicies([deny({ condition: heavy })], input());
    expect(result.verdicts[0]).toMatchObject({ outcome: "OUTCOME_ERROR", error: expect.stringContaining("budget") });
    expect(result.outcome).toBe("OUTCOME_DENY_IMPLICIT");
  });

  it("refuses predicates nested more than four deep", () => {
    const error = thrown(() => compileExpression("[1].all(a, [1].all(b, [1].all(c, [1].all(d, [1].all(e, true)))))", "condition"));
    expect(error).toBeInstanceOf(PolicySyntaxError);
    expect((error as Error).message).toContain("nests more than 4 predicates deep");
  });

  describe("validatePolicy", () => {
    const INVALID: [PolicyField, Partial<Pick<PolicySource, "condition" | "consensus" | "time">>, string][] = [
      ["condition", { condition: "approvers.count() > 1" }, 'condition: line 1, column 1: unknown keyword "approvers"'],
      ["consensus", { consensus: "activity.action == 'SIGN'" }, 'consensus: line 1, column 1: unknown keyword "activity"'],
      ["time", { time: "CronSpan('0 9 * * *', '8d', 'UTC')" }, "time: line 1, column 1: duration '8d'"],
      ["condition", { condition: "wallet.id == 'x' &&" }, "condition: line 1, column 20: expected a value"],
    ];
    it.each(INVALID)("refuses a bad %s field", (field, fields, message) => {
      const error = thrown(() => validatePolicy({ condition: null, consensus: null, time: null, ...fields }));
      expect(error).toBeInstanceOf(InvalidPolicyError);
      expect((error as InvalidPolicyError).field).toBe(field);
      expect((error as InvalidPolicyError).problem).toBeInstanceOf(PolicySyntaxError);
      expect(error.message).toContain(message);
    });

    it("accepts valid and blank fields", () => {
      expect(() => validatePolicy({ condition: SIGNING, consensus: TWO_APPROVERS, time: WEEKDAYS })).not.toThrow();
      expect(() => validatePolicy({ condition: " ", consensus: null, time: "" })).not.toThrow();
    });
  });

  describe("namesVoter", () => {
    interface VoterCase {
      consensus: string;
      voter: typeof ALICE;
      named: boolean;
      effect?: PolicySource["effect"];
      condition?: string;
      credentials?: Value[];
    }
    const VOTERS: VoterCase[] = [
      { consensus: "approvers.any(u, u.id == 'B')", voter: BOB, named: true },
      { consensus: "approvers.any(u, u.id == 'B')", voter: CAROL, named: false },
      { consensus: "approvers.filter(u, u.tags.contains('ops')).count() >= 2", voter: BOB, named: true },
      { consensus: "approvers.filter(u, u.tags.contains('ops')).count() >= 2", voter: CAROL, named: false },
      { consensus: "approvers.count() >= 2", voter: CAROL, named: true },
      { consensus: "approvers.count() >= 2", voter: BOB, named: true },
      { consensus: "approvers.all(u, u.tags.contains('admin'))", voter: BOB, named: true },
      { consensus: "approvers.all(u, u.tags.contains('admin'))", voter: CAROL, named: false },
      { consensus: "approvers.any(u, u.tags.any(t, t == 'ops'))", voter: BOB, named: true },
      { consensus: "credentials.any(c, c.user_id == 'B')", voter: BOB, credentials: [CREDENTIAL_B], named: true },
      { consensus: "credentials.any(c, c.user_id == 'B')", voter: CAROL, credentials: [credential("c3", "C")], named: false },
      { consensus: "approvers.any(u, u.id == 'B')", voter: BOB, effect: "EFFECT_DENY", named: false },
      { consensus: "approvers.count() >= 2", voter: CAROL, effect: "EFFECT_DENY", named: false },
      { consensus: "approvers.any(u, u.id == 'B')", voter: BOB, condition: NOT_SIGNING, named: false },
      { consensus: "approvers.any(u, u.id == 'B')", voter: BOB, condition: SIGNING, named: true },
      { consensus: "", voter: BOB, named: false },
    ];
    for (const v of VOTERS) {
      const title = `${v.effect ?? "EFFECT_ALLOW"} ${JSON.stringify(v.consensus)}${v.condition ? ` if ${v.condition}` : ""} ${v.named ? "names" : "does not name"} ${v.voter.id}`;
      it(title, () => {
        const policies = [policy(v.effect ?? "EFFECT_ALLOW", { consensus: v.consensus, condition: v.condition ?? null })];
        expect(namesVoter(policies, input(), v.voter, v.credentials ?? [])).toBe(v.named);
      });
    }
  });
});

// =================================================================================================
// Defects found while writing this suite. Each test states the correct behaviour and fails until
// the source is fixed.

describe("regressions found by review", () => {
  it("a lambda variable shadowed in a nested lambda keeps its value while a deeper lambda runs", () => {
    // The inner x (2) must be visible inside the innermost lambda; the innermost y is given the
    // same slot as the inner x, so x reads 3 there.
    expect(evaluate("[1].any(x, [2].any(x, [3].any(y, x == 2)))")).toBe(true);
    expect(evaluate("[1].any(x, [2].any(x, [3].any(y, y == 3 && x == 2)))")).toBe(true);
  });

  it.each(["constructor", "toString", "hasOwnProperty", "__proto__", "valueOf"])("%s is not a field of a struct", (name) => {
    const error = thrown(() => compileExpression(`[wallet.${name}].count() == 1`, "condition"));
    expect(error).toBeInstanceOf(PolicySyntaxError);
    expect(error.message).toContain(`Wallet has no field "${name}"`);
  });

  it("Timestamp accepts RFC 3339 years before 0100", () => {
    expect(evaluate("Timestamp('0050-01-01T00:00:00Z') < Timestamp('1970-01-01T00:00:00Z')")).toBe(true);
    expect(evaluate("Timestamp('0001-01-01T00:00:00Z') < Timestamp('0099-12-31T23:59:59Z')")).toBe(true);
  });

  it("deeply nested method calls are refused as a PolicySyntaxError, not a stack overflow", () => {
    // 15,000 characters, under the length limit; the parser's depth limit does not count method calls.
    const source = "a.b(".repeat(3_000) + ")".repeat(3_000);
    const error = thrown(() => compileExpression(source, "condition"));
    expect(error).toBeInstanceOf(PolicySyntaxError);
  });
});
