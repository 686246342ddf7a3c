// Recursive-descent parser of the policy language. Precedence, loosest first:
//   ||   &&   == != < > <= >= in   ! - (prefix)   .field .method(args) [index] [start..end]
import { PolicySyntaxError, tokenize, type Token } from "./lexer.js";

export type Node =
  | { kind: "bool"; value: boolean; start: number }
  | { kind: "number"; digits: string; start: number }
  | { kind: "string"; value: string; start: number }
  | { kind: "name"; name: string; start: number }
  | { kind: "list"; items: Node[]; start: number }
  | { kind: "not"; operand: Node; start: number }
  | { kind: "negate"; operand: Node; start: number }
  | { kind: "binary"; operator: "&&" | "||" | "==" | "!=" | "<" | ">" | "<=" | ">=" | "in"; left: Node; right: Node; start: number }
  | { kind: "field"; object: Node; field: string; start: number }
  | { kind: "method"; object: Node; method: string; args: Node[]; start: number }
  | { kind: "call"; callee: string; args: Node[]; start: number }
  | { kind: "index"; object: Node; index: Node; start: number }
  | { kind: "slice"; object: Node; from: Node | null; to: Node | null; start: number };

// Deeply nested input must fail as a parse error, never as a stack overflow of the service.
const MAX_DEPTH = 64;
const COMPARISONS = new Set(["==", "!=", "<", ">", "<=", ">="]);

export function parse(source: string): Node {
  const tokens = tokenize(source);
  let at = 0;
  let depth = 0;

  const peek = (): Token => tokens[at]!;
  const next = (): Token => tokens[at++]!;
  const describe = (t: Token) => (t.kind === "end" ? "end of input" : t.kind === "string" ? `'${t.text}'` : `"${t.text}"`);
  const fail = (t: Token, problem: string): never => {
    throw new PolicySyntaxError(source, t.start, problem);
  };
  const isOp = (text: string) => peek().kind === "operator" && peek().text === text;
  const expect = (text: string, context: string): Token => {
    if (!isOp(text)) fail(peek(), `expected "${text}" ${context} but found ${describe(peek())}`);
    return next();
  };
  const nested = <R>(start: Token, f: () => R): R => {
    if (++depth > MAX_DEPTH) fail(start, `expression nests deeper than ${MAX_DEPTH} levels`);
    try {
      return f();
    } finally {
      depth -= 1;
    }
  };

  /** operand (operator operand)*, grouped from the left. */
  function leftAssociative(operator: "||" | "&&", operand: () => Node): Node {
    let left = operand();
    while (isOp(operator)) {
      const op = next();
      left = { kind: "binary", operator, left, right: operand(), start: op.start };
    }
    return left;
  }

  function or(): Node {
    return leftAssociative("||", and);
  }

  function and(): Node {
    return leftAssociative("&&", comparison);
  }

  function comparison(): Node {
    let left = prefix();
    for (;;) {
      const t = peek();
      if (t.kind === "operator" && COMPARISONS.has(t.text)) {
        next();
        left = { kind: "binary", operator: t.text as "==", left, right: prefix(), start: t.start };
      } else if (t.kind === "identifier" && t.text === "in") {
        next();
        left = { kind: "binary", operator: "in", left, right: prefix(), start: t.start };
      } else {
        return left;
      }
    }
  }

  function prefix(): Node {
    const t = peek();
    if (isOp("!")) {
      next();
      return nested(t, () => ({ kind: "not", operand: prefix(), start: t.start }));
    }
    if (isOp("-")) {
      next();
      return nested(t, () => ({ kind: "negate", operand: prefix(), start: t.start }));
    }
    return postfix();
  }

  function postfix(): Node {
    let node = primary();
    for (;;) {
      const t = peek();
      if (isOp(".")) {
        next();
        const name = next();
        if (name.kind !== "identifier") fail(name, `expected a field or method name after "." but found ${describe(name)}`);
        if (isOp("(")) {
          next();
          const object = node;
          node = nested(name, () => ({
            kind: "method",
            object,
            method: name.text,
            args: argumentsUntilClose(`to close the arguments of ${name.text}(`),
            start: name.start,
          }));
        } else {
          node = { kind: "field", object: node, field: name.text, start: name.start };
        }
      } else if (isOp("[")) {
        next();
        node = nested(t, () => bracket(node, t));
      } else {
        return node;
      }
    }
  }

  function bracket(object: Node, open: Token): Node {
    const from = isOp("..") ? null : or();
    if (isOp("..")) {
      next();
      const to = isOp("]") ? null : or();
      expect("]", "to close the slice");
      return { kind: "slice", object, from, to, start: open.start };
    }
    expect("]", "to close the index");
    return { kind: "index", object, index: from!, start: open.start };
  }

  function argumentsUntilClose(context: string): Node[] {
    const args: Node[] = [];
    if (isOp(")")) {
      next();
      return args;
    }
    for (;;) {
      args.push(or());
      if (isOp(",")) {
        next();
        continue;
      }
      expect(")", context);
      return args;
    }
  }

  function primary(): Node {
    const t = next();
    switch (t.kind) {
      case "number":
        return { kind: "number", digits: t.text, start: t.start };
      case "string":
        return { kind: "string", value: t.text, start: t.start };
      case "identifier":
        if (t.text === "true" || t.text === "false") return { kind: "bool", value: t.text === "true", start: t.start };
        if (t.text === "in") return fail(t, 'expected a value but found "in"');
        if (isOp("(")) {
          next();
          return nested(t, () => ({
            kind: "call",
            callee: t.text,
            args: argumentsUntilClose(`to close the arguments of ${t.text}(`),
            start: t.start,
          }));
        }
        return { kind: "name", name: t.text, start: t.start };
      case "operator":
        if (t.text === "(") {
          const inner = nested(t, () => or());
          expect(")", "to close the parenthesis");
          return inner;
        }
        if (t.text === "[") {
          return nested(t, () => {
            const items = isOp("]") ? [] : listItems();
            expect("]", "to close the list");
            return { kind: "list", items, start: t.start };
          });
        }
        return fail(t, `expected a value but found ${describe(t)}`);
      default:
        return fail(t, `expected a value but found ${describe(t)}`);
    }
  }

  function listItems(): Node[] {
    const items = [or()];
    while (isOp(",")) {
      next();
      items.push(or());
    }
    return items;
  }

  if (peek().kind === "end") fail(peek(), "the expression is empty");
  const tree = or();
  if (peek().kind !== "end") fail(peek(), `unexpected ${describe(peek())} after a complete expression`);
  return tree;
}
