// Solana program IDLs in Anchor's format (both the legacy one, `isMut`/`isSigner`, `publicKey`,
// `{defined: "Name"}`, and Anchor 0.30's, `writable`/`signer`, `pubkey`, `{defined: {name}}`,
// explicit discriminators): checked when uploaded, and used to show policies what an instruction asks
// of its program (`parsed_instruction_data`). The bytes are read by @solana/kit's Borsh-compatible
// codecs (the Solana Foundation's own, already used for transactions); this file only maps IDL types
// onto them. @coral-xyz/anchor's BorshCoder reads only one of the two IDL formats per major version
// and brings the legacy @solana/web3.js with it, which is why it is not used.
import { createHash } from "node:crypto";
import {
  addCodecSizePrefix,
  getAddressCodec,
  getArrayCodec,
  getBooleanCodec,
  getBytesCodec,
  getDiscriminatedUnionCodec,
  getF32Codec,
  getF64Codec,
  getI128Codec,
  getI16Codec,
  getI32Codec,
  getI64Codec,
  getI8Codec,
  getOptionCodec,
  getStructCodec,
  getTupleCodec,
  getU128Codec,
  getU16Codec,
  getU32Codec,
  getU64Codec,
  getU8Codec,
  getUtf8Codec,
  transformCodec,
  type Codec,
} from "@solana/kit";
import { parseInterfaceJson } from "./ethereum-abi.js";
import { MAX_NESTING } from "./nesting.js";

export class IdlError extends Error {
  override name = "IdlError";
}

// biome-ignore lint/suspicious/noExplicitAny: IDL types are chosen at run time, and so are their codecs' value types
type AnyCodec = Codec<any>;

/** How an IDL type is read, rendered for policies, at least how many bytes it takes, and how deeply
 * its values nest. */
interface Reader {
  codec: AnyCodec;
  render(value: unknown): unknown;
  /** The fewest bytes a value takes: a list of zero-byte items could claim billions of them. */
  minSize: number;
  /** Levels of nesting in a value, itself included (a u64 is 1, a vec of u64 2): the codecs and
   * `render` recurse once per level. A type named by `defined` is built once and reused, so its
   * height is carried with it rather than counted again at each use. */
  height: number;
}

/**
 * The most values the instructions of one transaction may decode to. Every value takes a byte of the
 * data or holds other values, at most MAX_NESTING deep, so a transaction small enough to land (1232
 * bytes) decodes to at most 1232 × 32 = 39,424 values; but types that read values from no bytes at all
 * (an empty struct, a struct of two of them, and so on, each level doubling) could decode to billions
 * from a handful of bytes, and a larger transaction to millions. Past it the instruction is shown
 * undecoded, as data the IDL does not read.
 */
export const MAX_DECODED_VALUES = 50_000;

/** What the decode under way may still read (decodeInstruction sets it; every value read spends one). */
let valuesLeft = MAX_DECODED_VALUES;

class DecodeBudgetSpent extends Error {}

/** The codec, each value it reads counted against `valuesLeft`. */
const counted = (codec: AnyCodec): AnyCodec =>
  transformCodec(
    codec,
    (value: unknown) => value,
    (value: unknown) => {
      valuesLeft -= 1;
      if (valuesLeft < 0) throw new DecodeBudgetSpent();
      return value;
    },
  );

/** A reader whose codec counts what it reads. */
const made = (reader: Reader): Reader => ({ ...reader, codec: counted(reader.codec) });

const numeric = (codec: AnyCodec, size: number): Reader =>
  made({ codec, render: (v) => BigInt(v as number | bigint), minSize: size, height: 1 });
// The policy language has no fractions: a float is shown as the decimal text JavaScript prints for it.
const float = (codec: AnyCodec, size: number): Reader => made({ codec, render: (v) => String(v), minSize: size, height: 1 });
const PRIMITIVES: Record<string, () => Reader> = {
  bool: () => made({ codec: getBooleanCodec(), render: (v) => v, minSize: 1, height: 1 }),
  u8: () => numeric(getU8Codec(), 1),
  i8: () => numeric(getI8Codec(), 1),
  u16: () => numeric(getU16Codec(), 2),
  i16: () => numeric(getI16Codec(), 2),
  u32: () => numeric(getU32Codec(), 4),
  i32: () => numeric(getI32Codec(), 4),
  u64: () => numeric(getU64Codec(), 8),
  i64: () => numeric(getI64Codec(), 8),
  u128: () => numeric(getU128Codec(), 16),
  i128: () => numeric(getI128Codec(), 16),
  f32: () => float(getF32Codec(), 4),
  f64: () => float(getF64Codec(), 8),
  string: () => made({ codec: addCodecSizePrefix(getUtf8Codec(), getU32Codec()), render: (v) => v, minSize: 4, height: 1 }),
  // Bytes as lower-case hex without 0x, like an instruction's instruction_data_hex.
  bytes: () =>
    made({
      codec: addCodecSizePrefix(getBytesCodec(), getU32Codec()),
      render: (v) => Buffer.from(v as Uint8Array).toString("hex"),
      minSize: 4,
      height: 1,
    }),
  publicKey: () => made({ codec: getAddressCodec(), render: (v) => v, minSize: 32, height: 1 }),
  pubkey: () => made({ codec: getAddressCodec(), render: (v) => v, minSize: 32, height: 1 }),
};

/** How many `defined` references may be followed inside one another while types are built (aliases
 * add no level of nesting, so a chain of them is bounded here rather than by MAX_NESTING). */
const MAX_REFERENCES = 2 * MAX_NESTING;

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

interface TypeDefinition {
  name: string;
  type: Record<string, unknown>;
}

/**
 * Builds readers for an IDL's types, resolving `defined` references once each and refusing cycles.
 * `level` is how deep the values a reader reads sit (1 at the top of an instruction's arguments, or
 * of a type checked on its own); a value may sit at most MAX_NESTING deep, whether the types are built
 * as they are met or were built before and are reused (their height is checked then).
 */
class Types {
  private readonly built = new Map<string, Reader>();
  private readonly building = new Set<string>();

  constructor(private readonly definitions: Map<string, TypeDefinition>) {}

  reader(type: unknown, where: string, level: number): Reader {
    if (level > MAX_NESTING) throw new IdlError(`${where}: types nest more than ${MAX_NESTING} levels deep`);
    if (typeof type === "string") {
      const primitive = Object.hasOwn(PRIMITIVES, type) ? PRIMITIVES[type] : undefined;
      if (!primitive)
        throw new IdlError(`${where}: "${type.slice(0, 64)}" is not an IDL type this server reads (${Object.keys(PRIMITIVES).join(", ")})`);
      return primitive();
    }
    if (!isObject(type) || Object.keys(type).length !== 1)
      throw new IdlError(`${where}: a type is a name ("u64") or an object with one key (vec, option, array, defined)`);
    const [kind, inner] = Object.entries(type)[0]!;
    switch (kind) {
      case "vec": {
        const item = this.reader(inner, `${where}.vec`, level + 1);
        if (item.minSize === 0) throw new IdlError(`${where}: a vec of a type that takes no bytes cannot be read safely`);
        return made({
          codec: getArrayCodec(item.codec, { size: getU32Codec() }),
          render: (v) => (v as unknown[]).map(item.render),
          minSize: 4,
          height: item.height + 1,
        });
      }
      case "array": {
        if (!Array.isArray(inner) || inner.length !== 2 || !Number.isSafeInteger(inner[1]) || (inner[1] as number) < 0)
          throw new IdlError(`${where}.array must be [type, length] with a whole length`);
        const item = this.reader(inner[0], `${where}.array[0]`, level + 1);
        const length = inner[1] as number;
        if (item.minSize === 0 && length > 0) throw new IdlError(`${where}: an array of a type that takes no bytes cannot be read safely`);
        return made({
          codec: getArrayCodec(item.codec, { size: length }),
          render: (v) => (v as unknown[]).map(item.render),
          minSize: item.minSize * length,
          height: item.height + 1,
        });
      }
      case "option": {
        const item = this.reader(inner, `${where}.option`, level + 1);
        // None is absent: reading it in a policy is an evaluation error, like any missing value.
        return made({
          codec: getOptionCodec(item.codec),
          render: (v) => ((v as { __option: string }).__option === "Some" ? item.render((v as { value: unknown }).value) : undefined),
          minSize: 1,
          height: item.height + 1,
        });
      }
      case "defined": {
        const name = typeof inner === "string" ? inner : isObject(inner) && typeof inner.name === "string" ? inner.name : undefined;
        if (name === undefined) throw new IdlError(`${where}.defined must name a type`);
        if (isObject(inner) && Array.isArray(inner.generics) && inner.generics.length > 0)
          throw new IdlError(`${where}: generic types (${name}) are not read by this server`);
        return this.defined(name, where, level);
      }
      default:
        throw new IdlError(`${where}: "${kind.slice(0, 64)}" is not an IDL type this server reads (vec, option, array, defined)`);
    }
  }

  private defined(name: string, where: string, level: number): Reader {
    const cached = this.built.get(name);
    if (cached) {
      if (level - 1 + cached.height > MAX_NESTING)
        throw new IdlError(`${where}: types nest more than ${MAX_NESTING} levels deep (${name.slice(0, 64)} nests ${cached.height})`);
      return cached;
    }
    const definition = this.definitions.get(name);
    if (!definition) throw new IdlError(`${where}: type ${name.slice(0, 64)} is not defined in types`);
    if (this.building.has(name)) throw new IdlError(`type ${name} contains itself, which this server does not read`);
    if (this.building.size >= MAX_REFERENCES)
      throw new IdlError(`${where}: types refer to one another more than ${MAX_REFERENCES} deep (through defined types and aliases)`);
    this.building.add(name);
    const reader = this.definition(definition, `types.${name}`, level);
    this.building.delete(name);
    this.built.set(name, reader);
    return reader;
  }

  private definition({ type }: TypeDefinition, where: string, level: number): Reader {
    switch (type.kind) {
      case "struct":
        return this.fields(type.fields ?? [], `${where}.fields`, level);
      case "enum": {
        if (!Array.isArray(type.variants) || type.variants.length === 0 || type.variants.length > 256)
          throw new IdlError(`${where}.variants must list 1 to 256 variants`);
        const variants = type.variants.map((variant, i) => {
          if (!isObject(variant) || typeof variant.name !== "string") throw new IdlError(`${where}.variants[${i}] must have a name`);
          return {
            name: variant.name,
            fields: variant.fields === undefined ? undefined : this.fields(variant.fields, `${where}.variants[${i}].fields`, level + 1),
          };
        });
        const codec = getDiscriminatedUnionCodec(
          variants.map((v) => [v.name, v.fields ? getStructCodec([["fields", v.fields.codec]]) : getStructCodec([])] as const),
        );
        // As serde writes an enum: a variant without fields is its name, one with fields {name: fields}.
        return made({
          codec: codec as unknown as AnyCodec,
          render: (v) => {
            const value = v as { __kind: string; fields?: unknown };
            const variant = variants.find((x) => x.name === value.__kind)!;
            return variant.fields ? { [variant.name]: variant.fields.render(value.fields) } : variant.name;
          },
          minSize: 1,
          height: 1 + Math.max(0, ...variants.map((v) => v.fields?.height ?? 0)),
        });
      }
      case "alias":
        return this.reader(type.value, `${where}.value`, level);
      case "type":
        return this.reader(type.alias, `${where}.alias`, level);
      default:
        throw new IdlError(`${where}.kind must be struct, enum, alias (legacy) or type (an alias)`);
    }
  }

  /** Named fields ([{name, type}]) read as a map; unnamed ([type, …], a tuple struct) as a list. The
   * struct's values sit at `level`, its fields' one deeper. */
  fields(fields: unknown, where: string, level: number): Reader {
    if (!Array.isArray(fields)) throw new IdlError(`${where} must be a list`);
    const named = fields.every((f) => isObject(f) && "name" in f);
    if (named) {
      const readers = fields.map((f, i) => {
        const field = f as Record<string, unknown>;
        if (typeof field.name !== "string" || field.name === "") throw new IdlError(`${where}[${i}].name must be a name`);
        return [field.name, this.reader(field.type, `${where}[${i}].type`, level + 1)] as const;
      });
      const names = new Set(readers.map(([n]) => n));
      if (names.size !== readers.length) throw new IdlError(`${where} names a field twice`);
      return made({
        codec: getStructCodec(readers.map(([n, r]) => [n, r.codec] as [string, AnyCodec])) as AnyCodec,
        render: (v) => {
          const value = v as Record<string, unknown>;
          const out: Record<string, unknown> = {};
          for (const [n, r] of readers) {
            const rendered = r.render(value[n]);
            if (rendered !== undefined) out[n] = rendered;
          }
          return out;
        },
        minSize: readers.reduce((sum, [, r]) => sum + r.minSize, 0),
        height: 1 + Math.max(0, ...readers.map(([, r]) => r.height)),
      });
    }
    const readers = fields.map((t, i) => this.reader(t, `${where}[${i}]`, level + 1));
    return made({
      codec: getTupleCodec(readers.map((r) => r.codec)) as AnyCodec,
      render: (v) => (v as unknown[]).map((item, i) => readers[i]!.render(item)),
      minSize: readers.reduce((sum, r) => sum + r.minSize, 0),
      height: 1 + Math.max(0, ...readers.map((r) => r.height)),
    });
  }
}

interface Instruction {
  name: string;
  discriminator: Uint8Array;
  args: Reader;
  /** Account names in the order the instruction takes them (nested groups flattened). */
  accounts: string[];
}

export interface Idl {
  instructions: Instruction[];
}

/** Anchor's default discriminator: the first 8 bytes of sha256("global:<name in snake_case>"), the
 * name converted as Anchor's TypeScript client converts it (the `snake-case` rules: a break before
 * an upper-case letter that follows a lower-case letter or digit, and inside a run of capitals before
 * its last one when a lower-case letter follows). */
export function anchorDiscriminator(name: string): Uint8Array {
  const snake = name
    .replace(/([a-z0-9])([A-Z])/g, "$1_$2")
    .replace(/([A-Z])([A-Z][a-z])/g, "$1_$2")
    .toLowerCase();
  return new Uint8Array(createHash("sha256").update(`global:${snake}`).digest().subarray(0, 8));
}

function accountNames(accounts: unknown, where: string, depth = 0): string[] {
  if (!Array.isArray(accounts)) throw new IdlError(`${where} must be a list`);
  if (depth > 8) throw new IdlError(`${where}: account groups nest more than 8 deep`);
  return accounts.flatMap((account, i) => {
    if (!isObject(account) || typeof account.name !== "string") throw new IdlError(`${where}[${i}] must have a name`);
    if ("accounts" in account) return accountNames(account.accounts, `${where}[${i}].accounts`, depth + 1);
    return [account.name];
  });
}

/** Checks that `text` is an Anchor IDL whose instructions this server can read, and prepares them.
 * Throws IdlError saying what is wrong, and where. */
export function validateIdl(text: string): Idl {
  let value: unknown;
  try {
    value = parseInterfaceJson(text);
  } catch (error) {
    throw new IdlError((error as Error).message);
  }
  if (!isObject(value)) throw new IdlError("must be a JSON object with instructions and types (an Anchor IDL)");
  if (!Array.isArray(value.instructions) || value.instructions.length === 0)
    throw new IdlError("instructions must list the program's instructions");
  if (!Array.isArray(value.types)) throw new IdlError('types must be a list (add "types": [] to an IDL that defines none)');
  const definitions = new Map<string, TypeDefinition>();
  // Legacy IDLs declare account structs apart from types; either may be referenced.
  const declared = [...value.types, ...(Array.isArray(value.accounts) ? value.accounts.filter((a) => isObject(a) && "type" in a) : [])];
  for (const [i, definition] of declared.entries()) {
    if (!isObject(definition) || typeof definition.name !== "string" || !isObject(definition.type))
      throw new IdlError(`types[${i}] must be {name, type: {kind, …}}`);
    if (definitions.has(definition.name)) {
      if (i < value.types.length) throw new IdlError(`types[${i}]: ${definition.name} is defined twice`);
      continue;
    }
    definitions.set(definition.name, { name: definition.name, type: definition.type });
  }
  const types = new Types(definitions);
  // Every declared type must be readable, not only the ones instructions use today.
  for (const name of definitions.keys()) types.reader({ defined: name }, `types.${name}`, 1);
  const instructions = value.instructions.map((instruction, i): Instruction => {
    const where = `instructions[${i}]`;
    if (!isObject(instruction) || typeof instruction.name !== "string" || instruction.name === "")
      throw new IdlError(`${where} must have a name`);
    let discriminator: Uint8Array;
    if (instruction.discriminator === undefined) discriminator = anchorDiscriminator(instruction.name);
    else if (
      Array.isArray(instruction.discriminator) &&
      instruction.discriminator.length > 0 &&
      instruction.discriminator.length <= 32 &&
      instruction.discriminator.every((b) => Number.isInteger(b) && b >= 0 && b <= 255)
    )
      discriminator = new Uint8Array(instruction.discriminator as number[]);
    else throw new IdlError(`${where}.discriminator must be a list of 1 to 32 bytes (0 to 255)`);
    return {
      name: instruction.name,
      discriminator,
      args: types.fields(instruction.args ?? [], `${where}.args`, 1),
      accounts: accountNames(instruction.accounts ?? [], `${where}.accounts`),
    };
  });
  for (const [i, a] of instructions.entries()) {
    for (const b of instructions.slice(i + 1)) {
      const j = instructions.indexOf(b);
      if (a.name === b.name) throw new IdlError(`instructions[${j}]: ${b.name} is declared twice`);
      // A discriminator that begins another's would make their call data impossible to tell apart.
      const [short, long] = a.discriminator.length <= b.discriminator.length ? [a, b] : [b, a];
      if (startsWith(long.discriminator, short.discriminator))
        throw new IdlError(`instructions[${j}] (${b.name}): its discriminator and ${a.name}'s cannot be told apart (one begins the other)`);
    }
  }
  return { instructions };
}

const startsWith = (bytes: Uint8Array, prefix: Uint8Array) => prefix.every((b, i) => bytes[i] === b);

/** `parsed_instruction_data` of one instruction. */
export interface ParsedInstructionData {
  instruction_name: string;
  /** Hex, without 0x, like instruction_data_hex. */
  discriminator: string;
  named_accounts: Record<string, string>;
  program_call_args: Record<string, unknown>;
}

/** What the decodes of one transaction's instructions may still read, shared between them. */
export interface DecodeBudget {
  values: number;
}

export const newDecodeBudget = (): DecodeBudget => ({ values: MAX_DECODED_VALUES });

/**
 * What the IDL says an instruction's data and accounts are, or undefined when no instruction's
 * discriminator starts the data or its arguments do not read. Only a canonical encoding counts: the
 * arguments read are encoded again and must be the bytes they were read from (a bool of 2, an option
 * tag of 5, are not shown as something else). Bytes after the arguments are ignored, as Anchor's
 * programs ignore them. Reading spends `budget` (one per value); arguments that would read more than
 * it holds are not shown.
 */
export function decodeInstruction(
  idl: Idl,
  data: Uint8Array,
  accountKeys: string[],
  budget: DecodeBudget = newDecodeBudget(),
): ParsedInstructionData | undefined {
  const instruction = idl.instructions.find((i) => data.length >= i.discriminator.length && startsWith(data, i.discriminator));
  if (!instruction) return undefined;
  const start = instruction.discriminator.length;
  let args: unknown;
  let end: number;
  valuesLeft = budget.values;
  try {
    [args, end] = instruction.args.codec.read(data, start);
    const again = instruction.args.codec.encode(args);
    if (Buffer.compare(Buffer.from(again), Buffer.from(data.subarray(start, end))) !== 0) return undefined;
  } catch {
    return undefined;
  } finally {
    budget.values = Math.max(valuesLeft, 0);
    valuesLeft = MAX_DECODED_VALUES;
  }
  const namedAccounts: Record<string, string> = {};
  instruction.accounts.forEach((name, i) => {
    if (i < accountKeys.length && !Object.hasOwn(namedAccounts, name)) namedAccounts[name] = accountKeys[i]!;
  });
  return {
    instruction_name: instruction.name,
    discriminator: Buffer.from(instruction.discriminator).toString("hex"),
    named_accounts: namedAccounts,
    program_call_args: instruction.args.render(args) as Record<string, unknown>,
  };
}
