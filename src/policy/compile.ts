// Type-checks a parsed expression and turns it into a closure in the same pass. Everything that can
// be known before evaluation is checked here (types, keyword names, literal ranges, Timestamp and
// CronSpan arguments), so evaluation fails only for what depends on the activity: a keyword or
// field the activity does not have, or an index out of range.
//
// Evaluation does not short-circuit, as in the product: `a || b` evaluates both sides, so an error
// in either makes the whole expression an error.
import { PolicySyntaxError } from "./lexer.js";
import { parse, type Node } from "./parser.js";
import { keywordTypes, type PolicyField } from "./keywords.js";
import { compileCronSpan, inCronSpan, parseTimestamp } from "./time.js";
import {
  EthereumAddress,
  I128_MAX,
  I128_MIN,
  PolicyTimestamp,
  T,
  U256_MAX,
  compatible,
  describeType,
  holdsEthereumAddresses,
  isDynamic,
  isNumeric,
  textOf,
  unify,
  type Type,
  type Value,
} from "./types.js";

/** Something the expression needed that this activity does not have. */
export class PolicyEvaluationError extends Error {
  override name = "PolicyEvaluationError";
}

export interface Environment {
  /** Keyword values by root name (see rootValues). */
  roots: Record<string, unknown>;
  /** time.now in milliseconds, for CronSpan. */
  nowMs: number;
  /** Lambda variables, by slot. */
  locals: Value[];
  /** Work left for this evaluation (see spend). Shared by every policy of one decision. */
  budget: { steps: number };
  /** When set, records whether one of these values (a would-be voter's user and credential) was
   * counted, or made a predicate true, while evaluating a consensus (see namesVoter). */
  trace?: { subjects: Set<unknown>; named: boolean };
}

export type Evaluator = (env: Environment) => Value;

/**
 * Nested lambdas multiply work (`l.all(a, l.all(b, …))`) and long strings make each operation dearer,
 * so one stored policy could otherwise keep the server's only thread busy for seconds or hours while
 * it holds an organization's lock. Every operation is charged for the work it really does: one step
 * for evaluating any node, one per list item visited, compared or built, one per STRING_CHARS_PER_STEP
 * characters read, compared, hashed or copied. The budget is sized so the costliest step there is
 * keeps a whole decision in the low milliseconds (see test/policy-cost.test.ts); past it the
 * evaluation fails (OUTCOME_ERROR) and the decision cannot allow.
 */
export const STEP_BUDGET = 250_000;
export const MAX_LAMBDA_DEPTH = 4;
/** Characters that cost one step to read, compare or copy (a step is about one node's evaluation). */
export const STRING_CHARS_PER_STEP = 16;
/** No real policy quotes more than a public key or an address; the attack quotes 15 000 characters. */
export const MAX_STRING_LITERAL_LENGTH = 1_024;
/** An allow-list of addresses runs out of expression length (16 384 characters) long before this. */
export const MAX_LIST_LITERAL_ITEMS = 1_000;

export class BudgetExceededError extends PolicyEvaluationError {
  override name = "BudgetExceededError";
}

export function spend(env: Environment, steps: number): void {
  env.budget.steps -= steps;
  if (env.budget.steps < 0)
    throw new BudgetExceededError(`evaluation exceeded its budget of ${STEP_BUDGET} steps: simplify the policy or the request`);
}

const stringSteps = (text: string) => Math.ceil(text.length / STRING_CHARS_PER_STEP);

interface Compiled {
  type: Type;
  run: Evaluator;
}

interface Scope {
  field: PolicyField;
  locals: Map<string, { slot: number; type: Type }>;
  /** How many lambdas enclose this point: the next lambda's variable takes this slot, so a name
   * reused by an inner lambda shadows the outer one without overwriting it. */
  depth: number;
}

// ---- Values of dynamic type are checked where they are used. ----

const isMap = (v: Value): v is { [key: string]: Value } =>
  typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof PolicyTimestamp) && !(v instanceof EthereumAddress);

function kindOf(v: Value): string {
  if (typeof v === "boolean") return "bool";
  if (typeof v === "bigint") return "number";
  if (typeof v === "string" || v instanceof EthereumAddress) return "string";
  if (v instanceof PolicyTimestamp) return "timestamp";
  return Array.isArray(v) ? "list" : "map";
}

function expectBool(v: Value): boolean {
  if (typeof v !== "boolean") throw new PolicyEvaluationError(`expected a bool, found a ${kindOf(v)}`);
  return v;
}

function expectList(v: Value): Value[] {
  if (!Array.isArray(v)) throw new PolicyEvaluationError(`expected a list, found a ${kindOf(v)}`);
  return v;
}

/** A bool-typed use of an expression: dynamic values are checked when they arrive. */
function asBool(compiled: Compiled): Evaluator {
  const run = compiled.run;
  return isDynamic(compiled.type) ? (env) => expectBool(run(env)) : run;
}

const isBoolish = (type: Type) => type.kind === "bool" || isDynamic(type);

export const MAX_EXPRESSION_LENGTH = 16_384;

/** Parses, checks and compiles an expression that must be a bool. Throws PolicySyntaxError. */
export function compileExpression(source: string, field: PolicyField): Evaluator {
  if (source.length > MAX_EXPRESSION_LENGTH)
    throw new PolicySyntaxError(source, MAX_EXPRESSION_LENGTH, `the expression is longer than ${MAX_EXPRESSION_LENGTH} characters`);
  let compiled: Compiled;
  try {
    compiled = check(parse(source), { field, locals: new Map(), depth: 0 }, source);
  } catch (error) {
    // A very long chain of operators nests the tree beyond the stack: refuse it as too complex.
    if (error instanceof RangeError) throw new PolicySyntaxError(source, 0, "the expression is too deeply nested");
    throw error;
  }
  if (!isBoolish(compiled.type))
    throw new PolicySyntaxError(source, 0, `a ${field} must be a bool expression, but this one is ${describeType(compiled.type)}`);
  return asBool(compiled);
}

/** Every node charges one step, so no operator is free however its operands are built. */
function check(node: Node, scope: Scope, source: string): Compiled {
  const compiled = checkNode(node, scope, source);
  const run = compiled.run;
  return {
    type: compiled.type,
    run: (env) => {
      spend(env, 1);
      return run(env);
    },
  };
}

function checkNode(node: Node, scope: Scope, source: string): Compiled {
  const fail = (at: Node | number, problem: string): never => {
    throw new PolicySyntaxError(source, typeof at === "number" ? at : at.start, problem);
  };
  const sub = (n: Node, s: Scope = scope) => check(n, s, source);

  switch (node.kind) {
    case "bool": {
      const value = node.value;
      return { type: T.bool, run: () => value };
    }
    case "number": {
      const value = BigInt(node.digits);
      if (value > U256_MAX) fail(node, `the number ${node.digits} is larger than the largest uint (2^256 - 1)`);
      return { type: value > I128_MAX ? T.uint : T.int, run: () => value };
    }
    case "negate": {
      const operand = sub(node.operand);
      if (!isNumeric(operand.type)) fail(node, `"-" applies to a number, not ${describeType(operand.type)}`);
      if (node.operand.kind === "number") {
        const value = -BigInt(node.operand.digits);
        if (value < I128_MIN) fail(node, `the number -${node.operand.digits} is smaller than the smallest int (-2^127)`);
        return { type: T.int, run: () => value };
      }
      if (operand.type.kind === "uint") fail(node, `"-" does not apply to a uint`);
      const run = operand.run;
      return {
        type: T.int,
        run: (env) => {
          const v = -(run(env) as bigint);
          if (v > I128_MAX) throw new PolicyEvaluationError("integer overflow in negation");
          return v;
        },
      };
    }
    case "string": {
      const value = node.value;
      if (value.length > MAX_STRING_LITERAL_LENGTH)
        fail(node, `a string literal may be at most ${MAX_STRING_LITERAL_LENGTH} characters, this one has ${value.length}`);
      return { type: T.string, run: () => value };
    }
    case "list": {
      if (node.items.length > MAX_LIST_LITERAL_ITEMS)
        fail(node, `a list literal may hold at most ${MAX_LIST_LITERAL_ITEMS} items, this one has ${node.items.length}`);
      const items = node.items.map((item) => sub(item));
      let element: Type = T.never;
      for (const [i, item] of items.entries()) {
        if (!compatible(element, item.type))
          fail(
            node.items[i]!,
            `a list holds one type: this item is ${describeType(item.type)}, earlier items are ${describeType(element)}`,
          );
        element = unify(element, item.type);
      }
      const runs = items.map((i) => i.run);
      return {
        type: T.list(element),
        run: (env) => {
          spend(env, runs.length);
          return runs.map((r) => r(env));
        },
      };
    }
    case "name": {
      const local = scope.locals.get(node.name);
      if (local) {
        const slot = local.slot;
        return { type: local.type, run: (env) => env.locals[slot]! };
      }
      const roots = keywordTypes(scope.field);
      const type = roots.get(node.name);
      if (!type) {
        const available = [...roots.keys()].sort().join(", ");
        fail(node, `unknown keyword "${node.name}" in a ${scope.field} (available: ${available})`);
      }
      const name = node.name;
      return {
        type: type!,
        run: (env) => {
          const value = env.roots[name];
          if (value === undefined) throw new PolicyEvaluationError(`${name} is not available for this activity`);
          return value as Value;
        },
      };
    }
    case "not": {
      const operand = sub(node.operand);
      if (!isBoolish(operand.type)) fail(node, `"!" applies to a bool, not ${describeType(operand.type)}`);
      const run = asBool(operand);
      return { type: T.bool, run: (env) => !run(env) };
    }
    case "binary":
      return binary(node, scope, source, fail);
    case "field": {
      const object = sub(node.object);
      const field = node.field;
      const path = source.slice(startOf(node.object), node.start + field.length);
      const run = object.run;
      const read = (env: Environment) => {
        const value = run(env);
        if (!isMap(value)) throw new PolicyEvaluationError(`${path}: a ${kindOf(value)} has no fields`);
        const found = Object.hasOwn(value, field) ? value[field] : undefined;
        if (found === undefined) throw new PolicyEvaluationError(`missing field: ${path} is not available for this activity`);
        return found;
      };
      if (isDynamic(object.type)) return { type: T.dynamic, run: read };
      if (object.type.kind !== "struct") fail(node, `${describeType(object.type)} has no fields; "${node.field}" cannot be read from it`);
      const struct = object.type as Extract<Type, { kind: "struct" }>;
      // Own fields only: "constructor" or "__proto__" are not fields of any struct.
      const type = Object.hasOwn(struct.fields, node.field) ? struct.fields[node.field] : undefined;
      if (!type) fail(node, `${struct.name} has no field "${node.field}" (fields: ${Object.keys(struct.fields).join(", ")})`);
      return { type: type!, run: read };
    }
    case "index": {
      const object = sub(node.object);
      const index = sub(node.index);
      const runObject = object.run;
      const runIndex = index.run;
      const byKey = (env: Environment, marked: Value, markedKey: Value): Value => {
        const container = textOf(marked);
        const key = textOf(markedKey);
        if (typeof key === "string") {
          // Looking a key up hashes it.
          spend(env, stringSteps(key));
          if (!isMap(container)) throw new PolicyEvaluationError(`cannot look up '${shorten(key)}' in a ${kindOf(container)}`);
          const found = Object.hasOwn(container, key) ? container[key] : undefined;
          if (found === undefined) throw new PolicyEvaluationError(`missing key '${shorten(key)}'`);
          return found;
        }
        if (typeof key !== "bigint") throw new PolicyEvaluationError(`an index must be a number or a string, found a ${kindOf(key)}`);
        if (typeof container === "string") return characterAt(env, container, key);
        const all = expectList(container);
        if (key < 0n || key >= BigInt(all.length))
          throw new PolicyEvaluationError(`index ${key} is out of range for a length of ${all.length}`);
        return all[Number(key)]!;
      };
      if (object.type.kind === "map") {
        if (index.type.kind !== "string" && !isDynamic(index.type))
          fail(node.index, `a map is indexed by a string key, not ${describeType(index.type)}`);
        return { type: object.type.value, run: (env) => byKey(env, runObject(env), runIndex(env)) };
      }
      if (isDynamic(object.type)) {
        if (!isNumeric(index.type) && index.type.kind !== "string" && !isDynamic(index.type))
          fail(node.index, `an index must be a number or a string key, not ${describeType(index.type)}`);
        return { type: T.dynamic, run: (env) => byKey(env, runObject(env), runIndex(env)) };
      }
      if (!isNumeric(index.type)) fail(node.index, `an index must be a number, not ${describeType(index.type)}`);
      const [element] = indexable(object.type, node, fail);
      return {
        type: element,
        run: (env) => {
          const container = textOf(runObject(env));
          const i = runIndex(env) as bigint;
          if (typeof container === "string") return characterAt(env, container, i);
          const all = expectList(container);
          if (i < 0n || i >= BigInt(all.length))
            throw new PolicyEvaluationError(`index ${i} is out of range for a length of ${all.length}`);
          return all[Number(i)]!;
        },
      };
    }
    case "slice": {
      const object = sub(node.object);
      const from = node.from ? sub(node.from) : null;
      const to = node.to ? sub(node.to) : null;
      for (const [bound, n] of [
        [from, node.from],
        [to, node.to],
      ] as const) {
        if (bound && !isNumeric(bound.type)) fail(n!, `a slice bound must be a number, not ${describeType(bound.type)}`);
      }
      indexable(object.type, node, fail);
      const runObject = object.run;
      return {
        type: object.type,
        run: (env) => {
          const whole = textOf(runObject(env));
          const start = from ? (from.run(env) as bigint) : 0n;
          const end = to ? (to.run(env) as bigint) : null;
          if (typeof whole === "string") return sliceOfString(env, whole, start, end);
          const all = expectList(whole);
          const last = end ?? BigInt(all.length);
          if (start < 0n || last > BigInt(all.length) || start > last)
            throw new PolicyEvaluationError(`slice ${start}..${last} is out of range for a length of ${all.length}`);
          spend(env, Number(last - start));
          return all.slice(Number(start), Number(last));
        },
      };
    }
    case "method":
      return method(node, scope, source, fail);
    case "call":
      return call(node, scope, source, fail);
  }
}

function startOf(node: Node): number {
  switch (node.kind) {
    case "field":
    case "method":
    case "index":
    case "slice":
      return startOf(node.object);
    case "binary":
      return startOf(node.left);
    default:
      return node.start;
  }
}

type Fail = (at: Node | number, problem: string) => never;

/** Lists index by element; strings by Unicode code point, so 'é' is one character. */
function indexable(type: Type, node: Node, fail: Fail): [Type] {
  if (type.kind === "list") return [type.element];
  if (type.kind === "string") return [T.string];
  if (isDynamic(type)) return [T.dynamic];
  return fail(node, `only lists and strings can be indexed or sliced, not ${describeType(type)}`);
}

// Strings index by code point. Copying a whole string into an array of characters to read one of
// them made `'<15 000 characters>'[0]` cost 15 000 allocations for one step; these walk only as far
// as the position asked for, and charge for every character walked.

const SURROGATE = /[\uD800-\uDFFF]/;
/** Walking text that holds surrogate pairs goes unit by unit in JavaScript: dearer than a native scan. */
const WALKED_CHARS_PER_STEP = 2;

/** The UTF-16 offset after `count` more code points of `text` from `offset`, or -1 when it has fewer.
 * Charges what it reads as it goes, so even a walk the budget cannot pay for stops early. */
function offsetOf(env: Environment, text: string, count: number, offset = 0): number {
  // Most text has no surrogate pair: then code points are UTF-16 units, and a native scan says so.
  const units = text.slice(offset, offset + count);
  spend(env, stringSteps(units));
  if (!SURROGATE.test(units)) {
    if (units.length === count) return offset + count;
    if (offset + units.length >= text.length) return -1;
  }
  let at = offset;
  for (let seen = 0; seen < count; seen++) {
    if (at >= text.length) return -1;
    if (seen % 64 === 0) spend(env, 64 / WALKED_CHARS_PER_STEP);
    const unit = text.charCodeAt(at);
    at += unit >= 0xd800 && unit <= 0xdbff && at + 1 < text.length && (text.charCodeAt(at + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
  }
  return at;
}

function codePointLength(env: Environment, text: string): number {
  spend(env, stringSteps(text));
  if (!SURROGATE.test(text)) return text.length;
  let length = 0;
  for (let at = 0; at < text.length; length++) {
    if (length % 64 === 0) spend(env, 64 / WALKED_CHARS_PER_STEP);
    const unit = text.charCodeAt(at);
    at += unit >= 0xd800 && unit <= 0xdbff && at + 1 < text.length && (text.charCodeAt(at + 1) & 0xfc00) === 0xdc00 ? 2 : 1;
  }
  return length;
}

/** A position no string is that long at: refused before any walking (and before Number() loses it). */
const beyond = (text: string, position: bigint) => position > BigInt(text.length);

function characterAt(env: Environment, text: string, index: bigint): string {
  if (index >= 0n && !beyond(text, index)) {
    const start = offsetOf(env, text, Number(index));
    if (start >= 0 && start < text.length) return text.slice(start, offsetOf(env, text, 1, start));
  }
  throw new PolicyEvaluationError(`index ${index} is out of range for a length of ${codePointLength(env, text)}`);
}

function sliceOfString(env: Environment, text: string, start: bigint, end: bigint | null): string {
  const outOfRange = () => {
    const length = codePointLength(env, text);
    return new PolicyEvaluationError(`slice ${start}..${end ?? length} is out of range for a length of ${length}`);
  };
  if (start < 0n || beyond(text, start) || (end !== null && (start > end || beyond(text, end)))) throw outOfRange();
  const from = offsetOf(env, text, Number(start));
  const to = from < 0 ? -1 : end === null ? text.length : offsetOf(env, text, Number(end - start), from);
  if (to < 0) throw outOfRange();
  spend(env, Math.ceil((to - from) / STRING_CHARS_PER_STEP));
  return text.slice(from, to);
}

/** A key quoted in an error: the message goes to the audit log, which need not hold a megabyte. */
const shorten = (text: string) => (text.length > 64 ? `${text.slice(0, 64)}…` : text);

function binary(node: Extract<Node, { kind: "binary" }>, scope: Scope, source: string, fail: Fail): Compiled {
  const op = node.operator;
  if (op === "&&" || op === "||") return logical(node, op, scope, source, fail);
  const left = check(node.left, scope, source);
  const right = check(node.right, scope, source);
  const l = left.run;
  const r = right.run;
  if (op === "in") {
    if (right.type.kind !== "list" && !isDynamic(right.type))
      fail(node, `the right side of "in" must be a list, not ${describeType(right.type)}`);
    const element = right.type.kind === "list" ? right.type.element : T.dynamic;
    if (!compatible(left.type, element)) fail(node, `cannot look for ${describeType(left.type)} in ${describeType(right.type)}`);
    const addresses = holdsEthereumAddresses(left.type) || holdsEthereumAddresses(element);
    return {
      type: T.bool,
      run: (env) => {
        const needle = l(env);
        const items = expectList(r(env));
        spend(env, items.length);
        return items.some((item) => equal(needle, item, env, addresses));
      },
    };
  }
  if (op === "==" || op === "!=") {
    if (!compatible(left.type, right.type))
      fail(node, `cannot compare ${describeType(left.type)} with ${describeType(right.type)} using "${op}"`);
    const addresses = holdsEthereumAddresses(left.type) || holdsEthereumAddresses(right.type);
    return op === "=="
      ? { type: T.bool, run: (env) => equal(l(env), r(env), env, addresses) }
      : { type: T.bool, run: (env) => !equal(l(env), r(env), env, addresses) };
  }
  const orderable = (t: Type) => isNumeric(t) || t.kind === "timestamp" || isDynamic(t);
  const ordered =
    orderable(left.type) &&
    orderable(right.type) &&
    (isDynamic(left.type) ||
      isDynamic(right.type) ||
      (isNumeric(left.type) && isNumeric(right.type)) ||
      left.type.kind === right.type.kind);
  if (!ordered)
    fail(node, `"${op}" compares two numbers or two timestamps, not ${describeType(left.type)} and ${describeType(right.type)}`);
  // Numbers compare as bigints, timestamps by their nanoseconds; a dynamic value must turn out to be
  // of the same kind as the other side.
  const key = (v: Value, other: Value): bigint => {
    if (typeof v === "bigint" && typeof other === "bigint") return v;
    if (v instanceof PolicyTimestamp && other instanceof PolicyTimestamp) return v.epochNanos;
    throw new PolicyEvaluationError(`"${op}" cannot compare a ${kindOf(v)} with a ${kindOf(other)}`);
  };
  const compare = (env: Environment): [bigint, bigint] => {
    const a = l(env);
    const b = r(env);
    return [key(a, b), key(b, a)];
  };
  switch (op) {
    case "<":
      return {
        type: T.bool,
        run: (env) => {
          const [a, b] = compare(env);
          return a < b;
        },
      };
    case ">":
      return {
        type: T.bool,
        run: (env) => {
          const [a, b] = compare(env);
          return a > b;
        },
      };
    case "<=":
      return {
        type: T.bool,
        run: (env) => {
          const [a, b] = compare(env);
          return a <= b;
        },
      };
    default:
      return {
        type: T.bool,
        run: (env) => {
          const [a, b] = compare(env);
          return a >= b;
        },
      };
  }
}

/**
 * A chain of one logical operator (`a && b && c …`) compiled flat: the parser nests it to the left,
 * and walking that spine iteratively keeps a long chain from exhausting the stack. Every operand runs
 * (no short-circuit), so an error in any operand is an error.
 */
function logical(node: Extract<Node, { kind: "binary" }>, op: "&&" | "||", scope: Scope, source: string, fail: Fail): Compiled {
  const operands: Node[] = [];
  let spine: Node = node;
  while (spine.kind === "binary" && spine.operator === op) {
    operands.push(spine.right);
    spine = spine.left;
  }
  operands.push(spine);
  operands.reverse();
  const runs = operands.map((operand) => {
    const compiled = check(operand, scope, source);
    if (!isBoolish(compiled.type)) fail(operand, `"${op}" joins bools, but this operand is ${describeType(compiled.type)}`);
    return asBool(compiled);
  });
  const all = op === "&&";
  return {
    type: T.bool,
    run: (env) => {
      let result = all;
      for (const run of runs) {
        const value = run(env) as boolean;
        result = all ? result && value : result || value;
      }
      return result;
    },
  };
}

const ETHEREUM_ADDRESS = /^0x[0-9a-fA-F]{40}$/;

/** An Ethereum address is the same address in any letter case (EIP-55 capitals are only a checksum):
 * Sigil shows addresses in lower case, and a policy may write them checksummed, as the product's docs
 * do. Only 0x and 40 hex digits on both sides fold, and only ASCII letters. */
const sameEthereumAddress = (a: string, b: string) =>
  a.length === 42 && ETHEREUM_ADDRESS.test(a) && ETHEREUM_ADDRESS.test(b) && a.toLowerCase() === b.toLowerCase();

/**
 * Charges each value visited, and each string compared by its length (strings of different lengths
 * differ at once; a struct's keys are hashed). Letter case is ignored only when one side is an
 * Ethereum address: `addresses` when the type checker knows one side's field is (T.ethereumAddress,
 * or a list of them), or a value marked EthereumAddress. Whatever merely looks like an address (text
 * that happens to be 0x and 40 hex digits, two literals) compares exactly, as do Solana and Bitcoin
 * addresses, hex data and text.
 */
export function equal(left: Value, right: Value, env: Environment, addresses = false): boolean {
  spend(env, 1);
  const marked = left instanceof EthereumAddress || right instanceof EthereumAddress;
  const a = textOf(left);
  const b = textOf(right);
  if (typeof a === "string" && typeof b === "string") {
    if (a.length !== b.length) return false;
    spend(env, stringSteps(a));
    return a === b || ((addresses || marked) && sameEthereumAddress(a, b));
  }
  if (a === b) return true;
  if (a instanceof PolicyTimestamp && b instanceof PolicyTimestamp) return a.epochNanos === b.epochNanos;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((item, i) => equal(item, b[i]!, env, addresses));
  if (
    typeof a === "object" &&
    typeof b === "object" &&
    !Array.isArray(a) &&
    !Array.isArray(b) &&
    !(a instanceof PolicyTimestamp) &&
    !(b instanceof PolicyTimestamp)
  ) {
    const keys = Object.keys(a);
    spend(env, keys.length);
    return (
      keys.length === Object.keys(b).length &&
      keys.every((k) => (spend(env, stringSteps(k)), Object.hasOwn(b, k)) && equal(a[k]!, b[k]!, env))
    );
  }
  return false;
}

const LAMBDA_METHODS = new Set(["all", "any", "filter"]);

function method(node: Extract<Node, { kind: "method" }>, scope: Scope, source: string, fail: Fail): Compiled {
  const object = check(node.object, scope, source);
  const known = ["all", "any", "filter", "contains", "count"];
  if (!known.includes(node.method)) fail(node, `unknown function "${node.method}" (functions: ${known.map((k) => `${k}()`).join(", ")})`);
  if (object.type.kind !== "list" && !isDynamic(object.type))
    fail(node, `${node.method}() applies to a list, not ${describeType(object.type)}`);
  const element = object.type.kind === "list" ? object.type.element : T.dynamic;
  const runObject = object.run;
  const runList = isDynamic(object.type) ? (env: Environment) => expectList(runObject(env)) : runObject;

  if (node.method === "count") {
    if (node.args.length !== 0) fail(node, `count() takes no arguments`);
    return {
      type: T.int,
      run: (env) => {
        const items = runList(env) as Value[];
        if (env.trace) {
          spend(env, items.length);
          if (items.some((item) => env.trace!.subjects.has(item))) env.trace.named = true;
        }
        return BigInt(items.length);
      },
    };
  }
  if (node.method === "contains") {
    if (node.args.length !== 1) fail(node, `contains() takes one argument`);
    const needle = check(node.args[0]!, scope, source);
    if (!compatible(needle.type, element))
      fail(node.args[0]!, `cannot look for ${describeType(needle.type)} in ${describeType(object.type)}`);
    const addresses = holdsEthereumAddresses(needle.type) || holdsEthereumAddresses(element);
    return {
      type: T.bool,
      run: (env) => {
        const items = runList(env) as Value[];
        const v = needle.run(env);
        spend(env, items.length);
        return items.some((item) => equal(v, item, env, addresses));
      },
    };
  }
  // all / any / filter: (variable, predicate)
  if (!LAMBDA_METHODS.has(node.method)) fail(node, `unknown function "${node.method}"`);
  if (node.args.length !== 2) fail(node, `${node.method}() takes a variable name and a predicate, as in ${node.method}(x, x == 1)`);
  const variable = node.args[0]!;
  if (variable.kind !== "name") fail(variable, `the first argument of ${node.method}() must be a variable name`);
  const name = (variable as Extract<Node, { kind: "name" }>).name;
  if (keywordTypes(scope.field).has(name) || name === "true" || name === "false")
    fail(variable, `"${name}" is a keyword and cannot name a variable`);
  if (scope.depth >= MAX_LAMBDA_DEPTH) fail(node, `${node.method}() nests more than ${MAX_LAMBDA_DEPTH} predicates deep`);
  const slot = scope.depth;
  const locals = new Map(scope.locals);
  locals.set(name, { slot, type: element });
  const predicate = check(node.args[1]!, { ...scope, locals, depth: scope.depth + 1 }, source);
  if (!isBoolish(predicate.type))
    fail(node.args[1]!, `the predicate of ${node.method}() must be a bool, not ${describeType(predicate.type)}`);
  const test = asBool(predicate);
  // Every item is tested (no short-circuit), so an error for any item is an error.
  const results = (env: Environment, items: Value[]): boolean[] => {
    spend(env, items.length);
    return items.map((item) => {
      env.locals[slot] = item;
      const ok = test(env) as boolean;
      if (ok && env.trace?.subjects.has(item)) env.trace.named = true;
      return ok;
    });
  };
  switch (node.method) {
    case "all":
      return { type: T.bool, run: (env) => results(env, runList(env) as Value[]).every(Boolean) };
    case "any":
      return { type: T.bool, run: (env) => results(env, runList(env) as Value[]).some(Boolean) };
    default:
      return {
        type: object.type.kind === "list" ? object.type : T.list(T.dynamic),
        run: (env) => {
          const items = runList(env) as Value[];
          const keep = results(env, items);
          return items.filter((_, i) => keep[i]);
        },
      };
  }
}

function literalArguments(node: Extract<Node, { kind: "call" }>, count: number, fail: Fail): string[] {
  if (node.args.length !== count)
    fail(node, `${node.callee}() takes ${count} string argument${count > 1 ? "s" : ""}, got ${node.args.length}`);
  return node.args.map((arg) => {
    if (arg.kind !== "string") fail(startOf(arg), `the arguments of ${node.callee}() must be string literals in single quotes`);
    return (arg as Extract<Node, { kind: "string" }>).value;
  });
}

function call(node: Extract<Node, { kind: "call" }>, _scope: Scope, _source: string, fail: Fail): Compiled {
  if (node.callee === "Timestamp") {
    const [text] = literalArguments(node, 1, fail);
    const parsed = parseTimestamp(text!);
    if (typeof parsed === "string") fail(node.args[0]!, parsed);
    const value = parsed as PolicyTimestamp;
    return { type: T.timestamp, run: () => value };
  }
  if (node.callee === "CronSpan") {
    const [cron, duration, zone] = literalArguments(node, 3, fail);
    const span = compileCronSpan(cron!, duration!, zone!);
    if (typeof span === "string") fail(node, span);
    const compiled = span as Exclude<typeof span, string>;
    return {
      type: T.bool,
      run: (env) => {
        // Time zone arithmetic is the costliest thing a policy can ask for.
        spend(env, 1000);
        return inCronSpan(compiled, env.nowMs);
      },
    };
  }
  return fail(node, `unknown function "${node.callee}" (functions: Timestamp(), CronSpan())`);
}
