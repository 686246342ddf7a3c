// Splits a policy expression into tokens. Positions are offsets into the source, reported to users
// as line and column (see PolicySyntaxError).

export type TokenKind = "identifier" | "number" | "string" | "operator" | "end";

export interface Token {
  kind: TokenKind;
  /** identifier name, operator text, digits of a number, or the decoded string */
  text: string;
  start: number;
  end: number;
}

/** A policy that does not parse or type-check. `position` is an offset into the source. */
export class PolicySyntaxError extends Error {
  constructor(
    readonly source: string,
    readonly position: number,
    readonly problem: string,
  ) {
    super(`${where(source, position)}: ${problem}`);
    this.name = "PolicySyntaxError";
  }
}

/** "line 1, column 5" (1-based; columns count code points, so a policy with emoji still lines up). */
export function where(source: string, position: number): string {
  const before = Array.from(source.slice(0, position));
  let line = 1;
  let column = 1;
  for (const ch of before) {
    if (ch === "\n") {
      line += 1;
      column = 1;
    } else {
      column += 1;
    }
  }
  return `line ${line}, column ${column}`;
}

// Longest first, so "<=" is not read as "<" then "=".
const OPERATORS = ["&&", "||", "==", "!=", "<=", ">=", "..", "!", "<", ">", "(", ")", "[", "]", ",", ".", "-"];
const ESCAPES: Record<string, string> = { "'": "'", "\\": "\\", n: "\n", t: "\t", r: "\r" };

export function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < source.length) {
    const ch = source[i]!;
    if (ch === " " || ch === "\t" || ch === "\n" || ch === "\r") {
      i += 1;
      continue;
    }
    const start = i;
    if (/[A-Za-z_]/.test(ch)) {
      while (i < source.length && /[A-Za-z0-9_]/.test(source[i]!)) i += 1;
      tokens.push({ kind: "identifier", text: source.slice(start, i), start, end: i });
      continue;
    }
    if (/[0-9]/.test(ch)) {
      while (i < source.length && /[0-9]/.test(source[i]!)) i += 1;
      if (i < source.length && /[A-Za-z_]/.test(source[i]!))
        throw new PolicySyntaxError(source, i, `unexpected "${source[i]}" after the number ${source.slice(start, i)}`);
      // "1.5" is not a number of this language; "1..3" is a range and must stay two numbers.
      if (source[i] === "." && /[0-9]/.test(source[i + 1] ?? ""))
        throw new PolicySyntaxError(source, start, "numbers are whole: fractions are not supported");
      tokens.push({ kind: "number", text: source.slice(start, i), start, end: i });
      continue;
    }
    if (ch === "'") {
      i += 1;
      let value = "";
      for (;;) {
        if (i >= source.length) throw new PolicySyntaxError(source, start, "string is not closed: add the missing single quote");
        const c = source[i]!;
        if (c === "'") break;
        if (c === "\\") {
          const escaped = ESCAPES[source[i + 1] ?? ""];
          if (escaped === undefined)
            throw new PolicySyntaxError(source, i, `unknown escape "\\${source[i + 1] ?? ""}" in string (known: \\' \\\\ \\n \\t \\r)`);
          value += escaped;
          i += 2;
          continue;
        }
        value += c;
        i += 1;
      }
      i += 1;
      tokens.push({ kind: "string", text: value, start, end: i });
      continue;
    }
    if (ch === '"') throw new PolicySyntaxError(source, start, "strings are written in single quotes ('like this'), not double quotes");
    const operator = OPERATORS.find((op) => source.startsWith(op, i));
    if (operator) {
      i += operator.length;
      tokens.push({ kind: "operator", text: operator, start, end: i });
      continue;
    }
    if (ch === "=") throw new PolicySyntaxError(source, start, 'unexpected "=": compare with "=="');
    if (ch === "&" || ch === "|") throw new PolicySyntaxError(source, start, `unexpected "${ch}": use "${ch}${ch}"`);
    const shown = String.fromCodePoint(source.codePointAt(i)!);
    throw new PolicySyntaxError(source, start, `unexpected character "${shown}"`);
  }
  tokens.push({ kind: "end", text: "", start: source.length, end: source.length });
  return tokens;
}
