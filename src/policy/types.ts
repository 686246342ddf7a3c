// The static types of the policy language and the runtime shapes of its values.
//   bool -> boolean, int (i128) / uint (u256) -> bigint, string -> string,
//   timestamp -> PolicyTimestamp, list<T> -> T[], struct -> plain object.

export type Type =
  | { kind: "bool" }
  | { kind: "int" }
  | { kind: "uint" }
  /** `ethereumAddress`: the value is an Ethereum address, so comparisons with it ignore letter case
   * (see compile.ts `equal`). Any other string compares exactly. */
  | { kind: "string"; ethereumAddress?: true }
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
  ethereumAddress: { kind: "string", ethereumAddress: true } as Type,
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
  // A list of addresses and other text is a list of text.
  if (a.kind === "string" && b.kind === "string") return a.ethereumAddress && b.ethereumAddress ? a : T.string;
  return a;
}

/** Whether a value of this type is an Ethereum address, or a list of them. */
export function holdsEthereumAddresses(type: Type): boolean {
  if (type.kind === "list") return holdsEthereumAddresses(type.element);
  return type.kind === "string" && type.ethereumAddress === true;
}

/**
 * An Ethereum address whose being one is known only when the policy runs: a decoded contract
 * argument of ABI type `address` (in a map of dynamic values), or a wallet account's address when the
 * account is an Ethereum one. It behaves as its text everywhere, except that comparing it with a
 * string ignores letter case, as a field typed T.ethereumAddress does.
 */
export class EthereumAddress {
  constructor(readonly text: string) {}
  /** Written as its text wherever a keyword value is serialized. */
  toJSON(): string {
    return this.text;
  }
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

export type Value = boolean | bigint | string | EthereumAddress | PolicyTimestamp | Value[] | { [field: string]: Value };

/** The text of a string value, whether or not it is marked as an Ethereum address. */
export const textOf = (v: Value): Exclude<Value, EthereumAddress> => (v instanceof EthereumAddress ? v.text : v);
