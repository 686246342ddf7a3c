// The files `sigil policy test` and `sigil policy replay` read (docs/policy-testing.md): JSON, comments
// allowed, parsed with jsonc-parser so that every complaint names the file, line and column of what
// it is about — a syntax error, a field of the wrong kind, or a policy expression that does not
// compile (at the very character of the expression, inside its JSON string).
import fs from "node:fs";
import { type Node, type ParseError, getNodeValue, parseTree, printParseErrorCode } from "jsonc-parser";
import { InvalidPolicyError, validatePolicy, type Effect, type PolicySource } from "../policy/engine.js";

/** A file that cannot be used as it is: the message names file:line:column. */
export class PolicyFileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PolicyFileError";
  }
}

/** One parsed file: its tree, and how to name a place in it. */
export class SourceFile {
  private readonly lineStarts: number[] = [0];

  private constructor(
    readonly name: string,
    readonly text: string,
    readonly root: Node,
  ) {
    for (let i = 0; i < text.length; i++) if (text[i] === "\n") this.lineStarts.push(i + 1);
  }

  static read(name: string): SourceFile {
    let text: string;
    try {
      text = fs.readFileSync(name, "utf8");
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      throw new PolicyFileError(`${name}: cannot read it (${code === "ENOENT" ? "no such file" : (code ?? "unreadable")})`);
    }
    return SourceFile.parse(name, text);
  }

  static parse(name: string, text: string): SourceFile {
    const errors: ParseError[] = [];
    const root = parseTree(text, errors, { allowTrailingComma: false, disallowComments: false });
    if (errors.length > 0 || !root) {
      const first = errors[0];
      const at = first ? SourceFile.position(text, first.offset) : { line: 1, column: 1 };
      const problem = first ? describeParseError(printParseErrorCode(first.error)) : "the file is empty";
      throw new PolicyFileError(`${name}:${at.line}:${at.column}: not valid JSON: ${problem}`);
    }
    return new SourceFile(name, text, root);
  }

  private static position(text: string, offset: number): { line: number; column: number } {
    const before = text.slice(0, offset);
    const line = before.split("\n").length;
    const column = Array.from(before.slice(before.lastIndexOf("\n") + 1)).length + 1;
    return { line, column };
  }

  /** "file:line:column" of a character offset (columns count code points). */
  at(offset: number): string {
    let low = 0;
    let high = this.lineStarts.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if (this.lineStarts[middle]! <= offset) low = middle;
      else high = middle - 1;
    }
    const column = Array.from(this.text.slice(this.lineStarts[low]!, offset)).length + 1;
    return `${this.name}:${low + 1}:${column}`;
  }

  fail(node: Node, message: string): PolicyFileError {
    return new PolicyFileError(`${this.at(node.offset)}: ${message}`);
  }
}

const describeParseError = (code: string) =>
  ({
    InvalidSymbol: "an unexpected character",
    InvalidNumberFormat: "a malformed number",
    PropertyNameExpected: "a property name (in double quotes) was expected",
    ValueExpected: "a value was expected",
    ColonExpected: "a colon was expected",
    CommaExpected: "a comma was expected",
    CloseBraceExpected: "a closing brace was expected",
    CloseBracketExpected: "a closing bracket was expected",
    EndOfFileExpected: "the file should end here",
    UnexpectedEndOfString: "a string is not closed",
    UnexpectedEndOfComment: "a comment is not closed",
    UnexpectedEndOfNumber: "a number is cut short",
    InvalidUnicode: "a malformed \\u escape",
    InvalidEscapeCharacter: "a malformed escape",
    InvalidCharacter: "a character strings may not hold",
  })[code] ?? code;

/** The property `key` of an object node. */
export function property(node: Node, key: string): Node | undefined {
  for (const pair of node.children ?? []) {
    if (pair.type === "property" && pair.children?.[0]?.value === key) return pair.children[1];
  }
  return undefined;
}

/** The keys of an object node, each with the node of its name (for complaints about unknown keys). */
export function keysOf(node: Node): Array<{ key: string; at: Node }> {
  return (node.children ?? []).flatMap((pair) =>
    pair.type === "property" && pair.children?.[0] ? [{ key: String(pair.children[0].value), at: pair.children[0] }] : [],
  );
}

/** Checks that an object node has only the keys it may have. */
export function onlyKeys(file: SourceFile, node: Node, allowed: readonly string[], what: string): void {
  for (const { key, at } of keysOf(node))
    if (!allowed.includes(key)) throw file.fail(at, `${what} has no field "${key}" (its fields: ${allowed.join(", ")})`);
}

export function expectKind(file: SourceFile, node: Node | undefined, kind: Node["type"], what: string, parent: Node): Node {
  if (!node) throw file.fail(parent, `${what} is missing`);
  const article = kind === "array" || kind === "object" ? "an" : "a";
  if (node.type !== kind) throw file.fail(node, `${what} must be ${article} ${kind}, not ${describeNode(node)}`);
  return node;
}

const describeNode = (node: Node) =>
  node.type === "null" ? "null" : `${node.type === "array" || node.type === "object" ? "an" : "a"} ${node.type}`;

/** A string property, optional unless `required`. */
export function stringOf(file: SourceFile, parent: Node, key: string, what: string, required = false): string | undefined {
  const node = property(parent, key);
  if (!node || (node.type === "null" && !required)) {
    if (required) throw file.fail(parent, `${what}: "${key}" is missing`);
    return undefined;
  }
  if (node.type !== "string") throw file.fail(node, `${what}: "${key}" must be a string, not ${describeNode(node)}`);
  if (required && (node.value as string).trim() === "") throw file.fail(node, `${what}: "${key}" must not be empty`);
  return node.value as string;
}

export const jsonValueOf = (node: Node): unknown => getNodeValue(node);

/**
 * The file offset of the character at `index` of the string a JSON string node holds: walks the
 * literal as written, so an escape (\n, \", \u00e9) counts as the one character it stands for.
 */
function offsetInString(file: SourceFile, node: Node, index: number): number {
  let decoded = 0;
  let i = node.offset + 1;
  const end = node.offset + node.length - 1;
  while (i < end && decoded < index) {
    if (file.text[i] === "\\") i += file.text[i + 1] === "u" ? 6 : 2;
    else i += 1;
    decoded += 1;
  }
  return i;
}

/** A proposed policy, with where its fields are written (for complaints). */
export interface ProposedPolicy extends PolicySource {
  name: string;
}

const POLICY_FIELDS = ["policyName", "effect", "condition", "consensus", "time", "notes", "policyId"] as const;

/**
 * The policies of a file: `{"policies": [...]}` or a bare array, each as create_policy takes it
 * (policyName, effect, condition, consensus, notes) with the `time` expression Sigil adds. Each
 * expression is compiled as create_policy compiles it; the first that does not compile is named by the
 * file, line and column of the offending character. A policy's id is its `policyId` when given (a
 * policy exported from the server keeps its id), else its name; names must be unique.
 */
export function readPolicies(file: SourceFile, node: Node = file.root): ProposedPolicy[] {
  const list =
    node.type === "array"
      ? node
      : node.type === "object"
        ? expectKind(file, property(node, "policies"), "array", '"policies"', node)
        : (() => {
            throw file.fail(node, 'policies must be a list, or an object with a "policies" list');
          })();
  const seen = new Map<string, Node>();
  return (list.children ?? []).map((entry, i) => {
    const what = `policy ${i + 1}`;
    expectKind(file, entry, "object", what, list);
    onlyKeys(file, entry, POLICY_FIELDS, what);
    const name = stringOf(file, entry, "policyName", what, true)!;
    const named = `policy "${name}"`;
    const id = stringOf(file, entry, "policyId", named) ?? name;
    const earlier = seen.get(id);
    if (earlier)
      throw file.fail(entry, `${named}: another policy (${file.at(earlier.offset)}) has the same ${id === name ? "name" : "id"}`);
    seen.set(id, entry);
    const effect = stringOf(file, entry, "effect", named, true)!;
    if (effect !== "EFFECT_ALLOW" && effect !== "EFFECT_DENY")
      throw file.fail(property(entry, "effect")!, `${named}: effect must be EFFECT_ALLOW or EFFECT_DENY, not "${effect}"`);
    const policy: ProposedPolicy = {
      id,
      name,
      effect: effect as Effect,
      condition: stringOf(file, entry, "condition", named) ?? null,
      consensus: stringOf(file, entry, "consensus", named) ?? null,
      time: stringOf(file, entry, "time", named) ?? null,
    };
    stringOf(file, entry, "notes", named);
    try {
      validatePolicy(policy);
    } catch (error) {
      if (!(error instanceof InvalidPolicyError)) throw error;
      const written = property(entry, error.field)!;
      const offset = offsetInString(file, written, error.problem.position);
      throw new PolicyFileError(`${file.at(offset)}: ${named}, ${error.field}: ${error.problem.problem}`);
    }
    return policy;
  });
}
