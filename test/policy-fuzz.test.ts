// Fuzzing the policy language with a seeded PRNG (the same inputs on every run). Whatever text a
// user submits, compiling it either succeeds or throws PolicySyntaxError, and a compiled expression
// evaluates to a bool or throws PolicyEvaluationError: never a TypeError, RangeError or a non-bool.
import { describe, expect, it } from "vitest";
import { PolicyEvaluationError, compileExpression, type Environment, STEP_BUDGET } from "../src/policy/compile.js";
import { rootValues, type PolicyField } from "../src/policy/keywords.js";
import { PolicySyntaxError } from "../src/policy/lexer.js";
import { PolicyTimestamp } from "../src/policy/types.js";

// ---- A deterministic random source ----

/** mulberry32: a small, fast 32-bit PRNG; returns floats in [0, 1). */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class Random {
  private readonly next: () => number;
  constructor(seed: number) {
    this.next = mulberry32(seed);
  }
  /** an integer in [0, n) */
  below(n: number): number {
    return Math.floor(this.next() * n);
  }
  pick<T>(items: readonly T[]): T {
    return items[this.below(items.length)]!;
  }
  chance(p: number): boolean {
    return this.next() < p;
  }
}

// ---- The environment every compiled expression is evaluated in ----

const NOW = Date.parse("2025-06-11T13:00:00Z");
const WALLET = { id: "w1", imported: false, exported: true, label: "treasury" };
const USER = { id: "A", tags: ["admin", "ops"], email: "a@example.com", alias: "a" };
const FULL: Record<PolicyField, Record<string, unknown>> = {
  condition: {
    activity: {
      type: "ACTIVITY_TYPE_SIGN_TRANSACTION_V2",
      kind: "SIGN_TRANSACTION",
      resource: "PRIVATE_KEY",
      action: "SIGN",
      params: {
        user_ids: ["u1"],
        user_id: "u1",
        api_key_ids: [],
        hash_function: "HASH_FUNCTION_SHA256",
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        type: "TRANSACTION_TYPE_ETHEREUM",
        target_public_key: "04",
        wallet_id: "w1",
        otp_length: 6n,
        session_profile_id: "s",
        endpoint_id: "e",
        sign_with: "0x1",
      },
    },
    wallet: WALLET,
    wallets: [WALLET, { ...WALLET, id: "w2" }],
    private_key: { id: "pk", tags: ["hot"], imported: false, exported: false, label: "k" },
    wallet_account: { address: "0x1" },
  },
  consensus: {
    approvers: [USER, { ...USER, id: "B", tags: [] }],
    credentials: [{ id: "c", user_id: "A", type: "CREDENTIAL_TYPE_API_KEY_P256", credential_id: "cid", public_key: "02" }],
  },
  time: {},
};
/** Some keywords and fields missing, so evaluation errors are exercised too. */
const SPARSE: Record<PolicyField, Record<string, unknown>> = {
  condition: { activity: { type: "ACTIVITY_TYPE_CREATE_USERS_V4", params: {} } },
  consensus: { approvers: [] },
  time: {},
};
const FIELDS: PolicyField[] = ["condition", "consensus", "time"];

const environment = (values: Record<string, unknown>): Environment => ({
  roots: rootValues({ ...values, "time.now": PolicyTimestamp.fromMillis(NOW) }),
  nowMs: NOW,
  locals: [],
  budget: { steps: STEP_BUDGET },
});

// ---- The property under test ----

interface Problem {
  source: string;
  field: PolicyField;
  stage: "compile" | "evaluate";
  what: string;
}

const shown = (source: string) =>
  source.length > 120 ? `${JSON.stringify(source.slice(0, 100))}… (${source.length} chars)` : JSON.stringify(source);

/** Compiles `source` in every field and evaluates what compiles; returns what went wrong. */
function problemsWith(source: string): Problem[] {
  const problems: Problem[] = [];
  for (const field of FIELDS) {
    let run: ReturnType<typeof compileExpression>;
    try {
      run = compileExpression(source, field);
    } catch (error) {
      if (!(error instanceof PolicySyntaxError)) problems.push({ source: shown(source), field, stage: "compile", what: String(error) });
      else if (!/^line \d+, column \d+: ./.test(error.message))
        problems.push({ source: shown(source), field, stage: "compile", what: `message without a position: ${error.message}` });
      continue;
    }
    for (const values of [FULL[field], SPARSE[field]]) {
      try {
        const result = run(environment(values));
        if (typeof result !== "boolean")
          problems.push({ source: shown(source), field, stage: "evaluate", what: `returned ${typeof result}` });
      } catch (error) {
        if (!(error instanceof PolicyEvaluationError))
          problems.push({ source: shown(source), field, stage: "evaluate", what: String(error) });
      }
    }
  }
  return problems;
}

function compiles(source: string, field: PolicyField): boolean {
  try {
    compileExpression(source, field);
    return true;
  } catch {
    return false;
  }
}

function expectNoProblems(sources: Iterable<string>): number {
  const problems: Problem[] = [];
  let count = 0;
  for (const source of sources) {
    count += 1;
    problems.push(...problemsWith(source));
  }
  expect(problems.slice(0, 10), `${problems.length} problems`).toEqual([]);
  return count;
}

// ---- Generators ----

const ALPHABET = Array.from("abcdefgilmnorstuvwxyz_ACST0123456789 \t\n()[],.!=<>&|'\"\\-+*#:/@é😀");

const IDENTIFIERS = [
  "activity",
  "wallet",
  "wallets",
  "private_key",
  "wallet_account",
  "approvers",
  "credentials",
  "time",
  "now",
  "id",
  "tags",
  "type",
  "kind",
  "action",
  "params",
  "user_ids",
  "otp_length",
  "label",
  "imported",
  "address",
  "email",
  "alias",
  "user_id",
  "x",
  "y",
  "u",
  "t",
  "in",
  "true",
  "false",
  "Timestamp",
  "CronSpan",
  "all",
  "any",
  "contains",
  "count",
  "filter",
  "length",
  "constructor",
  "__proto__",
  "toString",
];
const LITERALS = [
  "0",
  "1",
  "2",
  "007",
  "-1",
  (2n ** 127n - 1n).toString(),
  (2n ** 127n).toString(),
  (2n ** 256n - 1n).toString(),
  (2n ** 256n).toString(),
  "'a'",
  "''",
  "'é😀'",
  String.raw`'it\'s'`,
  "'2025-01-01T00:00:00Z'",
  "'2025-02-30T00:00:00Z'",
  "'2025-01-01T00:00:00+01:00'",
  "'0 9 * * 1-5'",
  "'*/5 * * * *'",
  "'8h'",
  "'0m'",
  "'America/New_York'",
  "'UTC'",
];
const OPERATORS = ["&&", "||", "!", "==", "!=", "<", ">", "<=", ">=", "(", ")", "[", "]", ",", ".", "..", "-", "="];
const TOKENS = [...IDENTIFIERS, ...LITERALS, ...OPERATORS];

/** Valid expressions of each field, to mutate. */
const SEEDS = [
  "activity.type == 'ACTIVITY_TYPE_SIGN_TRANSACTION_V2' && wallet.id in ['w1', 'w2']",
  "activity.params.user_ids.all(x, x != 'u9') || !wallet.exported",
  "wallets.filter(w, w.imported).count() >= 1 && private_key.tags.contains('hot')",
  "activity.params.otp_length <= 8 && wallet_account.address[..2] == '0x'",
  "wallet.label[1..3] == 'ea' || 'é😀'[1] == '😀'",
  "[[1, 2], [3]].any(xs, xs.all(x, x > 1)) && [1, 2, 3][1..] == [2, 3]",
  "approvers.any(u, u.tags.any(t, t == 'admin')) && credentials.count() >= 1",
  "approvers.filter(u, u.tags.contains('ops')).count() >= 2 || approvers.count() > 3",
  "credentials.all(c, approvers.any(u, u.id == c.user_id))",
  "time.now >= Timestamp('2025-01-01T00:00:00.5Z') && time.now < Timestamp('2030-01-01T00:00:00+00:00')",
  "CronSpan('0 9 * * 1-5', '8h', 'America/New_York') && !CronSpan('0 22 * * *', '1d12h', 'UTC')",
  `${(2n ** 256n - 1n).toString()} > -${(2n ** 127n).toString()} && -1 < 007`,
  String.raw`'it\'s \\ ok\n' != '' && [] == [] && !(1 in [])`,
];

const TOKEN_PATTERN = /'(?:[^'\\]|\\.)*'?|\.\.|&&|\|\||[=!<>]=|[A-Za-z_][A-Za-z0-9_]*|\d+|\s+|[^]/gu;
const tokensOf = (source: string) => source.match(TOKEN_PATTERN) ?? [];

function randomCharacters(random: Random): string {
  const length = random.below(40);
  let text = "";
  for (let i = 0; i < length; i++) text += random.pick(ALPHABET);
  return text;
}

function randomTokens(random: Random): string {
  const length = 1 + random.below(24);
  const parts: string[] = [];
  for (let i = 0; i < length; i++) parts.push(random.pick(TOKENS));
  return parts.join(random.chance(0.5) ? " " : "");
}

/** One to three edits of a valid expression, by characters or by tokens. */
function mutant(random: Random): string {
  let text = random.pick(SEEDS);
  const edits = 1 + random.below(3);
  for (let e = 0; e < edits; e++) {
    if (random.chance(0.5)) {
      const chars = Array.from(text);
      const at = random.below(chars.length + 1);
      const length = 1 + random.below(8);
      switch (random.below(4)) {
        case 0: // delete
          chars.splice(at, length);
          break;
        case 1: // duplicate
          chars.splice(at, 0, ...chars.slice(at, at + length));
          break;
        case 2: {
          // swap two runs (the later one first, so the earlier one's position still holds)
          const other = random.below(chars.length + 1);
          if (at + length > other) break;
          const first = chars.slice(at, at + length);
          const second = chars.slice(other, other + length);
          chars.splice(other, second.length, ...first);
          chars.splice(at, first.length, ...second);
          break;
        }
        default: // insert a random character
          chars.splice(at, 0, random.pick(ALPHABET));
      }
      text = chars.join("");
    } else {
      const tokens = tokensOf(text);
      const at = random.below(tokens.length + 1);
      switch (random.below(4)) {
        case 0:
          tokens.splice(at, 1 + random.below(3));
          break;
        case 1:
          tokens.splice(at, 0, ...tokens.slice(at, at + 1 + random.below(4)));
          break;
        case 2: {
          const other = random.below(tokens.length);
          [tokens[at], tokens[other]] = [tokens[other]!, tokens[at]!];
          break;
        }
        default:
          tokens.splice(at, 0, random.pick(TOKENS));
      }
      text = tokens.filter((t) => t !== undefined).join("");
    }
  }
  return text;
}

// Well-typed random expressions, so most inputs get past the type checker and are evaluated.
type Kind = "bool" | "int" | "string" | "ints" | "strings" | "timestamp";
interface Variable {
  /** x, y or z: a lambda's variable hides an outer one with the same base */
  base: string;
  /** the base, or when names are unique the base and a counter (x0, y1, x2…) */
  name: string;
  kind: "int" | "string";
}
/** Whether lambda variables get unique names; the random choices are the same either way. */
interface Naming {
  unique: boolean;
  count: number;
}

/** Picks a lambda variable's name: the variables in scope inside the lambda, and the name. */
function bind(random: Random, naming: Naming, variables: Variable[], kind: "int" | "string"): [Variable[], string] {
  const base = random.pick(["x", "y", "z"]);
  const name = naming.unique ? `${base}${naming.count++}` : base;
  return [[...variables.filter((v) => v.base !== base), { base, name, kind }], name];
}
const KEYWORD_VALUES: Record<PolicyField, Partial<Record<Kind, string[]>>> = {
  condition: {
    bool: ["wallet.exported", "wallets[0].imported", "private_key.imported"],
    int: ["activity.params.otp_length"],
    string: ["activity.type", "activity.params.user_id", "wallet.id", "wallet_account.address", "wallets[1].label"],
    strings: ["private_key.tags", "activity.params.user_ids", "activity.params.api_key_ids"],
  },
  consensus: {
    int: ["approvers.count()", "credentials.count()"],
    string: ["approvers[0].id", "credentials[0].user_id", "approvers[1].email"],
    strings: ["approvers[0].tags", "approvers[1].tags"],
  },
  time: {},
};

function typed(random: Random, naming: Naming, field: PolicyField, kind: Kind, depth: number, variables: Variable[]): string {
  const leaf = depth <= 0 || random.chance(0.3);
  const sub = (k: Kind, vars = variables) => typed(random, naming, field, k, depth - 1, vars);
  const own = variables.filter((v) => v.kind === kind).map((v) => v.name);
  const keywords = KEYWORD_VALUES[field][kind] ?? [];
  if (leaf || random.chance(0.2)) {
    const atoms: Record<Kind, string[]> = {
      bool: ["true", "false"],
      int: ["0", "1", "7", "-3", (2n ** 127n).toString(), "-" + (2n ** 127n).toString()],
      string: ["''", "'a'", "'é😀'", String.raw`'\\'`],
      ints: ["[1][..0]", "[1, 2, 3]", "[0]"],
      strings: ["['a'][1..]", "['a', 'b']", "['é😀']"],
      timestamp: ["time.now", "Timestamp('2025-06-11T13:00:00Z')", "Timestamp('2024-02-29T23:59:59.999999999Z')"],
    };
    return random.pick([...atoms[kind], ...own, ...own, ...keywords]);
  }
  const lambda = (): [string, Variable[], string] => {
    const element = random.pick(["int", "string"] as const);
    const [vars, name] = bind(random, naming, variables, element);
    return [sub(element === "int" ? "ints" : "strings"), vars, name];
  };
  switch (kind) {
    case "bool": {
      switch (random.below(11)) {
        case 0:
          return `!(${sub("bool")})`;
        case 1:
          return `(${sub("bool")} ${random.pick(["&&", "||", "==", "!="])} ${sub("bool")})`;
        case 2:
          return `${sub("int")} ${random.pick(["==", "!=", "<", ">", "<=", ">="])} ${sub("int")}`;
        case 3:
          return `${sub("string")} ${random.pick(["==", "!="])} ${sub("string")}`;
        case 4:
          return `${sub("timestamp")} ${random.pick(["==", "!=", "<", ">", "<=", ">="])} ${sub("timestamp")}`;
        case 5:
          return random.chance(0.5) ? `${sub("int")} in ${sub("ints")}` : `${sub("strings")}.contains(${sub("string")})`;
        case 6:
          return `${sub("ints")} ${random.pick(["==", "!="])} ${sub("ints")}`;
        case 7:
        case 8: {
          const [list, vars, name] = lambda();
          return `${list}.${random.pick(["all", "any"])}(${name}, ${sub("bool", vars)})`;
        }
        case 9:
          return `CronSpan('${random.pick(["0 9 * * 1-5", "* * * * *", "0 22 * * *", "30 1 1 * 0"])}', '${random.pick(["8h", "1m", "7d"])}', '${random.pick(["UTC", "America/New_York", "Asia/Kolkata"])}')`;
        default:
          return `(${sub("bool")})`;
      }
    }
    case "int":
      switch (random.below(4)) {
        case 0:
          return `-${sub("int")}`;
        case 1:
          return `${sub(random.chance(0.5) ? "ints" : "strings")}.count()`;
        case 2:
          return `${sub("ints")}[${sub("int")}]`;
        default:
          return `(${sub("int")})`;
      }
    case "string":
      switch (random.below(3)) {
        case 0:
          return `${sub("string")}[${sub("int")}]`;
        case 1:
          return `${sub("string")}[${random.chance(0.5) ? sub("int") : ""}..${random.chance(0.5) ? sub("int") : ""}]`;
        default:
          return `${sub("strings")}[${sub("int")}]`;
      }
    case "ints":
    case "strings": {
      const element = kind === "ints" ? "int" : "string";
      switch (random.below(3)) {
        case 0:
          return `[${Array.from({ length: random.below(4) }, () => sub(element)).join(", ")}]`;
        case 1:
          return `${sub(kind)}[${random.chance(0.5) ? sub("int") : ""}..${random.chance(0.5) ? sub("int") : ""}]`;
        default: {
          const [vars, name] = bind(random, naming, variables, element);
          return `${sub(kind)}.filter(${name}, ${sub("bool", vars)})`;
        }
      }
    }
    case "timestamp":
      return random.pick(["time.now", "Timestamp('2000-01-01T00:00:00+00:00')", "Timestamp('2025-06-11T13:00:00.000000001z')"]);
  }
}

/** Lambdas nested in lambdas over small int lists, whose predicates compare the variables in scope. */
function scoped(random: Random, naming: Naming, depth: number, scope: Variable[]): string {
  if (depth === 0 || random.chance(0.15)) {
    const operand = () => (scope.length > 0 && random.chance(0.8) ? random.pick(scope).name : String(random.below(3)));
    return `${operand()} ${random.pick(["==", "!=", "<", ">="])} ${operand()}`;
  }
  if (random.chance(0.2))
    return `(${scoped(random, naming, depth - 1, scope)} ${random.pick(["&&", "||"])} ${scoped(random, naming, depth - 1, scope)})`;
  const list = `[${Array.from({ length: 1 + random.below(3) }, () => random.below(3)).join(", ")}]`;
  const [inner, name] = bind(random, naming, scope, "int");
  const body = scoped(random, naming, depth - 1, inner);
  switch (random.below(4)) {
    case 0:
      return `${list}.any(${name}, ${body})`;
    case 1:
      return `${list}.all(${name}, ${body})`;
    case 2:
      return `${list}.filter(${name}, ${body}).count() > 0`;
    default:
      return `${list}.filter(${name}, ${body}) == ${list}`;
  }
}

/** Very deep nesting and very long chains, around and beyond every limit. */
function* extremes(): Generator<string> {
  const depths = [63, 64, 65, 100, 1_000, 5_000, 10_000, 20_000];
  const openers = ["(", "!", "-", "[", "!(", "[(", "-(", "(!", "Timestamp(", "f("];
  for (const depth of depths) {
    for (const open of openers) {
      yield open.repeat(depth);
      yield open.repeat(depth) + "true";
      yield open.repeat(depth) + "1 == 1" + ")".repeat(depth);
      yield open.repeat(depth) + "true" + ")".repeat(depth) + "]".repeat(depth);
    }
    yield "(".repeat(depth) + "true" + ")".repeat(depth);
    yield "[".repeat(depth) + "]".repeat(depth) + " == []";
    yield ")".repeat(depth);
    yield "'".repeat(depth);
  }
  const chains = [10, 100, 1_000, 1_500, 2_000, 2_046, 2_047, 2_048, 3_000];
  const links = [
    "true && ",
    "false || ",
    "true == ",
    "1 == 1 && ",
    "!true || ",
    "wallet.exported && ",
    "approvers.count() > 0 && ",
    "[1][0] == 1 || ",
  ];
  for (const n of chains) {
    for (const link of links) yield link.repeat(n) + "true";
    yield "'a'" + "[0]".repeat(n) + " == 'a'";
    yield "'abc'" + "[..]".repeat(n) + " == 'abc'";
    yield "[1]" + "[0..1]".repeat(n) + " == [1]";
    yield "wallet" + ".id".repeat(n) + " == 'x'";
    yield "[" + "1, ".repeat(n) + "1].count() > 0";
    yield "[1].any(x, ".repeat(Math.min(n, 1_000)) + "true" + ")".repeat(Math.min(n, 1_000));
  }
  yield "wallets.any(w, ".repeat(1_024) + "true" + ")".repeat(1_024);
  yield "x".repeat(16_384);
  yield "x".repeat(16_385);
  yield "'" + "a".repeat(20_000) + "'";
  yield "1".repeat(16_000) + " > 0";
  yield "😀".repeat(9_000);
}

// ---- The tests ----

describe("policy language fuzz", () => {
  it("random characters from the language's alphabet", () => {
    const random = new Random(0x5eed_0001);
    const inputs = Array.from({ length: 3_000 }, () => randomCharacters(random));
    expect(expectNoProblems(inputs)).toBe(3_000);
  });

  it("random token sequences", () => {
    const random = new Random(0x5eed_0002);
    const inputs = Array.from({ length: 3_000 }, () => randomTokens(random));
    expect(expectNoProblems(inputs)).toBe(3_000);
  });

  it("mutations of valid expressions", () => {
    // the seeds themselves compile in some field, and evaluate to bools there
    for (const seed of SEEDS) {
      expect(
        FIELDS.some((field) => compiles(seed, field)),
        seed,
      ).toBe(true);
      expect(problemsWith(seed)).toEqual([]);
    }
    const random = new Random(0x5eed_0003);
    const inputs = Array.from({ length: 3_000 }, () => mutant(random));
    expect(expectNoProblems(inputs)).toBe(3_000);
  });

  it("random well-typed expressions, evaluated", () => {
    const random = new Random(0x5eed_0004);
    const inputs = Array.from({ length: 3_000 }, (_, i) =>
      typed(random, { unique: false, count: 0 }, FIELDS[i % 3]!, "bool", 1 + random.below(6), []),
    );
    expect(expectNoProblems(inputs)).toBe(3_000);
    // the generator is worth its name: nearly all of them compile in their own field
    const compiled = inputs.filter((source, i) => compiles(source, FIELDS[i % 3]!)).length;
    expect(compiled).toBeGreaterThan(2_700);
  });

  // Renaming lambda variables apart (x, x → x0, x1) must not change any value. Catches the slot
  // defect shown in policy-language.test.ts ("a lambda variable shadowed in a nested lambda…"):
  // fails until it is fixed.
  it("renaming lambda variables apart does not change the value", () => {
    const seed = 0x5eed_0005;
    const shadowing = new Random(seed);
    const unique = new Random(seed);
    const outcome = (source: string, field: PolicyField) => {
      try {
        return String(compileExpression(source, field)(environment(FULL[field])));
      } catch (error) {
        // positions move when names grow, so only the kind of error is compared
        return error instanceof PolicyEvaluationError
          ? "evaluation error"
          : error instanceof PolicySyntaxError
            ? "syntax error"
            : `${error}`;
      }
    };
    const differences: { shadowing: string; unique: string; values: [string, string] }[] = [];
    let withShadowing = 0;
    for (let i = 0; i < 2_000; i++) {
      const field = FIELDS[i % 3]!;
      const depth = 2 + shadowing.below(4);
      expect(unique.below(4) + 2).toBe(depth);
      // half from the lambda-heavy generator, half from the general one
      const [a, b] =
        i % 2 === 0
          ? [scoped(shadowing, { unique: false, count: 0 }, depth, []), scoped(unique, { unique: true, count: 0 }, depth, [])]
          : [
              typed(shadowing, { unique: false, count: 0 }, field, "bool", depth, []),
              typed(unique, { unique: true, count: 0 }, field, "bool", depth, []),
            ];
      if (a === b) continue; // no lambda
      if (/\(([xyz]), [^]*\(\1, /.test(a)) withShadowing += 1;
      const values: [string, string] = [outcome(a, field), outcome(b, field)];
      if (values[0] !== values[1]) differences.push({ shadowing: a, unique: b, values });
    }
    expect(withShadowing).toBeGreaterThan(100);
    expect(differences.slice(0, 3), `${differences.length} expressions change value when their variables are renamed`).toEqual([]);
  });

  it("very deep nesting and very long chains", () => {
    expect(expectNoProblems(extremes())).toBeGreaterThan(300);
  });

  it("a generated input is the same on every run", () => {
    const a = new Random(42);
    const b = new Random(42);
    expect(Array.from({ length: 5 }, () => mutant(a))).toEqual(Array.from({ length: 5 }, () => mutant(b)));
  });

  // Defect: the parser's depth limit counts "(", "[", "!", "-" and function calls, but not method
  // calls, so 3,276 nested method calls (16,380 characters, within the length limit) overflow the
  // stack while parsing: a RangeError escapes instead of a PolicySyntaxError. Fails until fixed.
  it("nested method calls as deep as the length limit allows", () => {
    const depth = Math.floor(16_384 / "a.b()".length);
    expect(problemsWith("a.b(".repeat(depth) + ")".repeat(depth))).toEqual([]);
  });
});
