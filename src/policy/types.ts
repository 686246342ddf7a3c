// The static types of the policy language and the runtime shapes of its values.
//   bool -> boolean, int (i128) / uint (u256) -> bigint, string -> string,
//   timestamp -> PolicyTimestamp, list<T> -> T[], struct -> plain object.

export type Type =
  | { kind: "bool" }
  | { kind: "int" }
  | { kind: "uint" }
  | { kind: "string" }
  | { kind: "timestamp" }
  /** The element type of `[]`, which fits any list. */
  | { kind: "never" }
  | { kind: "list"; element: Type }
  | { kind: "struct"; name: string; fields: Record<string, Type> }
  /** A map with string keys, read as `m['key']` (an EIP-712 message, a contract call's arguments). */
  | { kind: "map"; value: Type }
  /** A value whose shape is only known at evaluation (a decoded contract argument): what is done with
   * it is checked when the policy runs, and a mismatch is an evaluation error. */
  | { kind: "dynamic" };

export const T = {
  bool: { kind: "bool" } as Type,
  int: { kind: "int" } as Type,
  uint: { kind: "uint" } as Type,
  string: { kind: "string" } as Type,
  timestamp: { kind: "timestamp" } as Type,
  never: { kind: "never" } as Type,
  list: (element: Type): Type => ({ kind: "list", element }),
  struct: (name: string, fields: Record<string, Type>): Type => ({ kind: "struct", name, fields }),
  map: (value: Type): Type => ({ kind: "map", value }),
  dynamic: { kind: "dynamic" } as Type,
};

export const I128_MIN = -(2n ** 127n);
export const I128_MAX = 2n ** 127n - 1n;
export const U256_MAX = 2n ** 256n - 1n;

export function describeType(type: Type): string {
  switch (type.kind) {
    case "list":
      return `list<${describeType(type.element)}>`;
    case "struct":
      return type.name;
    case "never":
      return "nothing";
    case "map":
      return `map<string, ${describeType(type.value)}>`;
    default:
      return type.kind;
  }
}

export const isNumeric = (type: Type) => type.kind === "int" || type.kind === "uint";
export const isDynamic = (type: Type) => type.kind === "dynamic";

/** Whether values of the two types can be compared for equality (ints and uints compare by value). */
export function compatible(a: Type, b: Type): boolean {
  if (a.kind === "never" || b.kind === "never" || a.kind === "dynamic" || b.kind === "dynamic") return true;
  if (isNumeric(a) && isNumeric(b)) return true;
  if (a.kind !== b.kind) return false;
  if (a.kind === "list" && b.kind === "list") return compatible(a.element, b.element);
  if (a.kind === "struct" && b.kind === "struct") return a.name === b.name;
  if (a.kind === "map" && b.kind === "map") return compatible(a.value, b.value);
  return true;
}

/** The more specific of two compatible types (a list literal's element type). */
export function unify(a: Type, b: Type): Type {
  if (a.kind === "never") return b;
  if (b.kind === "never") return a;
  if (a.kind === "dynamic" || b.kind === "dynamic") return T.dynamic;
  if (isNumeric(a) && isNumeric(b)) return a.kind === b.kind ? a : T.uint;
  if (a.kind === "list" && b.kind === "list") return T.list(unify(a.element, b.element));
  return a;
}

/** A point in time, kept in nanoseconds since the epoch so RFC 3339 fractions compare exactly. */
export class PolicyTimestamp {
  constructor(readonly epochNanos: bigint) {}
  static fromMillis(ms: number): PolicyTimestamp {
    return new PolicyTimestamp(BigInt(Math.trunc(ms)) * 1_000_000n);
  }
  get epochMillis(): number {
    return Number(this.epochNanos / 1_000_000n);
  }
}

export type Value = boolean | bigint | string | PolicyTimestamp | Value[] | { [field: string]: Value };
