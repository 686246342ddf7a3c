// Ethereum: unsigned transactions in (RLP hex; legacy, EIP-2930, EIP-1559, EIP-4844, EIP-7702),
// signed ones out, EIP-712 typed data and EIP-7702 authorizations hashed — all by viem. Also what
// policies see of them (`eth.tx`, `eth.eip_712`), with the product's field names.
import {
  checksumAddress,
  concatHex,
  fromRlp,
  hashDomain,
  hashStruct,
  hexToBytes,
  keccak256,
  parseTransaction,
  serializeTransaction,
  toRlp,
  type Hex,
  type TransactionSerializable,
} from "viem";
import { hashAuthorization } from "viem/utils";
import { jsonDepth, MAX_NESTING } from "./nesting.js";

export class EthereumError extends Error {
  override name = "EthereumError";
}

const hexOf = (text: string): Hex => (text.startsWith("0x") ? text : `0x${text}`) as Hex;

export interface ParsedEthereumTransaction {
  transaction: TransactionSerializable;
  /** keccak256 of the unsigned serialization: what the key signs. */
  digest: Uint8Array;
}

/** The typed transactions, by their first byte (EIP-2718), with their fields unsigned, in order. */
const TYPED_TRANSACTIONS: Record<number, { name: string; fields: string[] }> = {
  1: { name: "EIP-2930", fields: ["chainId", "nonce", "gasPrice", "gas", "to", "value", "data", "accessList"] },
  2: {
    name: "EIP-1559",
    fields: ["chainId", "nonce", "maxPriorityFeePerGas", "maxFeePerGas", "gas", "to", "value", "data", "accessList"],
  },
  3: {
    name: "EIP-4844",
    fields: [
      "chainId",
      "nonce",
      "maxPriorityFeePerGas",
      "maxFeePerGas",
      "gas",
      "to",
      "value",
      "data",
      "accessList",
      "maxFeePerBlobGas",
      "blobVersionedHashes",
    ],
  },
  4: {
    name: "EIP-7702",
    fields: ["chainId", "nonce", "maxPriorityFeePerGas", "maxFeePerGas", "gas", "to", "value", "data", "accessList", "authorizationList"],
  },
};
const LEGACY_FIELDS = ["nonce", "gasPrice", "gas", "to", "value", "data"];

/** The kind of transaction the bytes announce: a typed one by its first byte, else legacy (an RLP list). */
function transactionKind(hex: Hex): { name: string; fields: string[] } | undefined {
  const first = Number.parseInt(hex.slice(2, 4), 16);
  if (first >= 0xc0) return { name: "legacy", fields: LEGACY_FIELDS };
  return TYPED_TRANSACTIONS[first];
}

/** An RLP item as viem decodes it to hex: a byte string, or a list of items. */
type RlpItem = Hex | readonly RlpItem[];

/**
 * A transaction's RLP (after a typed transaction's type byte), decoded by viem, or a message saying
 * why it is not RLP: viem's own errors name its cursor ("Position `1` is out of bounds").
 */
function rlpOf(hex: Hex, kind: { name: string }, what: string): RlpItem {
  try {
    return fromRlp(kind.name === "legacy" ? hex : `0x${hex.slice(4)}`, "hex") as RlpItem;
  } catch (error) {
    const name = (error as { name?: string }).name;
    const a = `${what} is not a valid ${kind.name} transaction`;
    if (name === "RlpTrailingBytesError") throw new EthereumError(`${a}: bytes follow the end of its RLP list`);
    if (name === "RlpNonCanonicalError")
      throw new EthereumError(`${a}: its RLP is not in canonical form (a length, or a single byte, written the long way)`);
    throw new EthereumError(`${a}: its bytes are not well-formed RLP (a length runs past the end of the bytes or of its list)`);
  }
}

/**
 * The list holding a typed transaction's chain id (first) when that chain id is 0. EIP-2930, 1559,
 * 4844 and 7702 declare chain_id a plain integer, which RLP writes as the empty string for 0: ethers
 * signs such a transaction (a TurnkeySigner without a provider sends chain id 0), while viem's parser
 * and serializer refuse chain ids below 1. Viem is then handed chain id 1, and the field is put back
 * to 0 around it.
 */
function zeroChainIdList(hex: Hex, rlp: RlpItem): RlpItem[] | undefined {
  const type = Number.parseInt(hex.slice(2, 4), 16);
  if (!TYPED_TRANSACTIONS[type] || !Array.isArray(rlp)) return undefined;
  // An EIP-4844 transaction in its network wrapper: [transaction, blobs, commitments, proofs].
  const fields = (type === 0x03 && Array.isArray(rlp[0]) ? rlp[0] : rlp) as RlpItem[];
  return typeof fields[0] === "string" && /^0x(00)*$/.test(fields[0]) ? fields : undefined;
}

/** A typed transaction (type byte, then `rlp`) with its chain id field set to `chainId` in `fields`. */
function withChainId(hex: Hex, rlp: RlpItem, fields: RlpItem[], chainId: Hex): Hex {
  fields[0] = chainId;
  return concatHex([hex.slice(0, 4) as Hex, toRlp(rlp as Parameters<typeof toRlp>[0])]);
}

/**
 * Reads a transaction (unsigned or signed), chain id 0 included, refusing what viem refuses with a
 * message in the request's terms (`what` names the field) rather than viem's own.
 */
export function readEthereumTransaction(hex: Hex, what: string): TransactionSerializable {
  const kind = transactionKind(hex);
  if (!kind)
    throw new EthereumError(
      `${what} starts with 0x${hex.slice(2, 4)}, which is neither a transaction type this server signs (01 EIP-2930, 02 EIP-1559, ` +
        "03 EIP-4844, 04 EIP-7702; 76 is Tempo: send it as TRANSACTION_TYPE_TEMPO) nor the RLP list of a legacy transaction",
    );
  const rlp = rlpOf(hex, kind, what);
  const zero = zeroChainIdList(hex, rlp);
  try {
    const transaction = parseTransaction(zero ? withChainId(hex, rlp, zero, "0x01") : hex) as TransactionSerializable;
    if (zero) transaction.chainId = 0;
    return transaction;
  } catch (error) {
    throw new EthereumError(`${what} ${transactionProblem(error, kind)}`);
  }
}

/** What viem's reading of a transaction's fields refused, in the request's terms: viem's messages name its own internals. */
function transactionProblem(error: unknown, kind: { name: string; fields: string[] }): string {
  const a = `is not a valid ${kind.name} transaction`;
  switch ((error as { name?: string }).name) {
    case "InvalidSerializedTransactionError":
      return (
        `${a}: it needs ${kind.fields.length} fields unsigned (${kind.fields.join(", ")})` +
        `${kind.name === "legacy" ? ", or 9 with EIP-155's chainId, 0, 0," : ""} and 3 more when signed; the RLP list holds another number`
      );
    case "InvalidAddressError":
      return `${a}: an address in it (to, an access list entry or an authorization) is not 20 bytes`;
    case "TipAboveFeeCapError":
      return `${a}: maxPriorityFeePerGas is above maxFeePerGas`;
    case "FeeCapTooHighError":
      return `${a}: its fee per gas is above 2^256 - 1`;
    case "IntegerOutOfRangeError":
      return `${a}: a chain id or nonce in it is above 2^53 - 1, the largest this server reads`;
    case "InvalidStorageKeySizeError":
      return `${a}: a storage key of its access list is not 32 bytes`;
    case "EmptyBlobError":
      return `${a}: blobVersionedHashes is empty (an EIP-4844 transaction carries at least one blob)`;
    case "InvalidVersionedHashSizeError":
    case "InvalidVersionedHashVersionError":
      return `${a}: a blob versioned hash is not 32 bytes starting with 0x01 (EIP-4844's KZG version)`;
    case "InvalidLegacyVError":
    case "InvalidYParityError":
      return `${a}: its signature's v (or yParity) is not one a signature has`;
    default:
      return `${a}: its fields do not decode as one (${kind.fields.join(", ")})`;
  }
}

/** The serialization viem makes, with a typed transaction's chain id 0 written as RLP writes 0. */
function serialize(transaction: TransactionSerializable, signature?: Parameters<typeof serializeTransaction>[1]): Hex {
  if (transaction.type === "legacy" || transaction.type === undefined || transaction.chainId !== 0)
    return serializeTransaction(transaction, signature);
  const serialized = serializeTransaction({ ...transaction, chainId: 1 } as TransactionSerializable, signature);
  const rlp = fromRlp(`0x${serialized.slice(4)}`, "hex") as RlpItem[];
  return withChainId(serialized, rlp, rlp, "0x");
}

export function parseUnsignedTransaction(unsigned: string): ParsedEthereumTransaction {
  if (!/^(0x)?([0-9a-fA-F]{2})+$/.test(unsigned))
    throw new EthereumError("unsignedTransaction must be the hex of an RLP-encoded Ethereum transaction");
  const transaction = readEthereumTransaction(hexOf(unsigned), "unsignedTransaction");
  if ("r" in transaction && transaction.r) throw new EthereumError("unsignedTransaction is already signed");
  // An EIP-4844 transaction may come in its network wrapper (blobs, commitments, proofs): the
  // signature covers the transaction alone.
  for (const field of ["sidecars", "blobs", "kzg"] as const) delete (transaction as Record<string, unknown>)[field];
  const digest = Buffer.from(keccak256(serialize(transaction)).slice(2), "hex");
  return { transaction, digest };
}

/** The signed serialization, without 0x (the form the clients expect). EIP-155 v for legacy. */
export function serializeSigned(transaction: TransactionSerializable, signature: { r: string; s: string; recovery: number }): string {
  const signed = serialize(transaction, {
    r: `0x${signature.r}`,
    s: `0x${signature.s}`,
    yParity: signature.recovery,
    ...(transaction.type === "legacy" || transaction.type === undefined
      ? {
          v:
            transaction.chainId !== undefined
              ? BigInt(transaction.chainId) * 2n + 35n + BigInt(signature.recovery)
              : 27n + BigInt(signature.recovery),
        }
      : {}),
  });
  return signed.slice(2);
}

const TYPE_NAMES: Record<string, string> = { legacy: "LEGACY", eip2930: "TYPE_1", eip1559: "TYPE_2", eip4844: "TYPE_3", eip7702: "TYPE_4" };

/** `eth.tx` of the policy language. */
export function transactionKeyword(transaction: TransactionSerializable, from: string): Record<string, unknown> {
  const t = transaction as TransactionSerializable & Record<string, unknown>;
  const big = (v: unknown) => (typeof v === "bigint" ? v : typeof v === "number" ? BigInt(v) : 0n);
  const maxFee = big(t.maxFeePerGas);
  return {
    from: from.toLowerCase(),
    to: typeof t.to === "string" ? t.to.toLowerCase() : "",
    data: typeof t.data === "string" ? t.data : "0x",
    value: big(t.value),
    gas: big(t.gas),
    // The product fills gas_price with max_fee_per_gas for typed transactions.
    gas_price: t.gasPrice !== undefined ? big(t.gasPrice) : maxFee,
    chain_id: big(t.chainId),
    nonce: big(t.nonce),
    max_fee_per_gas: maxFee,
    max_priority_fee_per_gas: big(t.maxPriorityFeePerGas),
    max_fee_per_blob_gas: big(t.maxFeePerBlobGas),
    type: TYPE_NAMES[String(t.type ?? "legacy")] ?? String(t.type),
  };
}

// Payloads that policies judge (EIP-712 typed data, EIP-7702 authorizations) are parsed once, strictly,
// into canonical values; the digest and the policy keyword are both computed from those values, so a
// policy always sees exactly what is signed. A spelling the parser does not know is refused rather
// than passed on to a library that might read it differently (an address "zz…" was once shown to
// policies as written and signed as the address after its first two characters).

const ADDRESS = /^0x[0-9a-fA-F]{40}$/;
const MAX_INTEGER_DIGITS = 80;

/** An address: 0x and 40 hex digits; mixed case must be a valid EIP-55 checksum (as ethers and viem
 * require; all lower or all upper case carries no checksum). Lower case out. */
function addressOf(value: unknown, where: string): Hex {
  if (typeof value !== "string" || !ADDRESS.test(value))
    throw new EthereumError(`${where} must be an address: 0x followed by 40 hex digits`);
  const digits = value.slice(2);
  const mixedCase = digits !== digits.toLowerCase() && digits !== digits.toUpperCase();
  if (mixedCase && checksumAddress(value as Hex) !== value)
    throw new EthereumError(
      `${where} has mixed-case hex digits that are not its EIP-55 checksum (${value}): check the address, or send it in lower case`,
    );
  return value.toLowerCase() as Hex;
}

/**
 * An integer of `bits` bits, signed or not: a JSON number that is a safe integer, a decimal string
 * without leading zeros, or a 0x hex string. Anything else (fractions, exponents, spaces, values
 * out of range) is refused with where it was found.
 */
function integerOf(value: unknown, where: string, bits: number, signed: boolean): bigint {
  let n: bigint;
  if (typeof value === "number") {
    if (!Number.isSafeInteger(value))
      throw new EthereumError(`${where} must be an integer; send integers beyond 2^53 as decimal or 0x-hex strings`);
    n = BigInt(value);
  } else if (typeof value === "string" && value.length <= MAX_INTEGER_DIGITS && /^-?(0|[1-9][0-9]*)$/.test(value) && value !== "-0") {
    n = BigInt(value);
  } else if (typeof value === "string" && value.length <= MAX_INTEGER_DIGITS && /^0x[0-9a-fA-F]+$/.test(value)) {
    n = BigInt(value);
  } else {
    throw new EthereumError(`${where} must be an integer: a JSON number, a decimal string or a 0x-hex string`);
  }
  const min = signed ? -(1n << BigInt(bits - 1)) : 0n;
  const max = signed ? (1n << BigInt(bits - 1)) - 1n : (1n << BigInt(bits)) - 1n;
  if (n < min || n > max) throw new EthereumError(`${where} is out of range for ${signed ? "int" : "uint"}${bits} (${min} to ${max})`);
  return n;
}

/** Hex bytes (0x and pairs of hex digits), of exactly `size` bytes when given. Lower case out. */
function bytesOf(value: unknown, where: string, size?: number): Hex {
  if (typeof value !== "string" || !/^0x([0-9a-fA-F]{2})*$/.test(value))
    throw new EthereumError(`${where} must be bytes: 0x followed by pairs of hex digits`);
  if (size !== undefined && value.length !== 2 + 2 * size)
    throw new EthereumError(`${where} must be exactly ${size} bytes, got ${(value.length - 2) / 2}`);
  return value.toLowerCase() as Hex;
}

function parseJson(payload: string, what: string): unknown {
  const text = /^(0x)?([0-9a-fA-F]{2})+$/.test(payload) ? Buffer.from(payload.replace(/^0x/, ""), "hex").toString("utf8") : payload;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new EthereumError(`payload must be ${what} as JSON (or the hex of its UTF-8 text)`);
  }
  if (!isPlainObject(value)) throw new EthereumError(`payload must be ${what} as a JSON object`);
  // Read by recursion (here and in viem): bounded before anything recurses.
  if (jsonDepth(value, MAX_NESTING) > MAX_NESTING)
    throw new EthereumError(`payload nests arrays and objects more than ${MAX_NESTING} levels deep (${what})`);
  return value;
}

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === "object" && value !== null && !Array.isArray(value);

/** A field the caller sent, never one inherited from Object.prototype (`constructor`, `toString`). */
const ownField = (object: Record<string, unknown>, name: string): unknown => (Object.hasOwn(object, name) ? object[name] : undefined);

/** String.prototype.isWellFormed (Node 20; not in the ES2022 typings): false for an unpaired surrogate. */
const isWellFormed = (text: string) => (text as string & { isWellFormed(): boolean }).isWellFormed();

type Field = { name: string; type: string };

export interface TypedData {
  /** Canonical values, only the fields EIP712Domain declares. */
  domain: Record<string, unknown>;
  /** Every struct type, EIP712Domain always declared (derived from the domain when not sent). */
  types: Record<string, Field[]>;
  primaryType: string;
  /** Canonical values: integers as bigint, addresses and bytes in lower-case hex, only declared fields. */
  message: Record<string, unknown>;
}

/** The EIP-712 domain's fields, in the order the standard (and every library) declares them. */
const DOMAIN_FIELDS: Field[] = [
  { name: "name", type: "string" },
  { name: "version", type: "string" },
  { name: "chainId", type: "uint256" },
  { name: "verifyingContract", type: "address" },
  { name: "salt", type: "bytes32" },
];

/** A field's name: a Solidity identifier ("a,uint256 b" would make encodeType ambiguous). */
const IDENTIFIER = /^[A-Za-z_$][A-Za-z0-9_$]*$/;

/**
 * What a struct's name may not hold. EIP-712 hashes each struct with its type's encoding,
 * `Name(type1 name1,type2 name2)` followed by the structs it refers to sorted by name, and refers to
 * a struct from a field's type as `Name`, `Name[]` or `Name[N]`. The reference encoders write the
 * name as it is sent: ethers' TypedDataEncoder and eth-account check nothing, viem's hashTypedData
 * checks `[A-Za-z0-9_$:]` (narrower: typedDataDigest hashes with viem's struct encoder instead).
 * A name is refused only where one type string would stand for two sets of types, so that a
 * signature policies judged as one thing could be verified as another:
 * - `(`: ends the name. A struct `A(B b)B` with fields `uint256 x` encodes exactly as a struct `A`
 *   with a field `B b` followed by a struct `B(uint256 x)`: one type hash for two different types.
 * - `)` and `,`: end a field.
 * - whitespace: a space separates a field's type from its name; readers of encoded type strings
 *   (alloy's parser) trim any Unicode whitespace around names and types.
 * - `[` and `]`: a field's type names its struct before its array dimensions; readers cut the
 *   struct's name at the first `[` (ethers, alloy) or strip trailing `[N]` (viem).
 * - `.`: the ABI writes an enum declared in a contract `Contract.Enum`, and alloy's type parser
 *   reads such a name as `uint8`.
 * - a character beyond U+FFFF: the structs a type refers to are sorted by name, and JavaScript
 *   encoders (viem, ethers) sort by UTF-16 code units where others (eth-account, alloy, Go) sort by
 *   code points; the two orders disagree only when such a character meets one from U+E000 to U+FFFF.
 * - an unpaired surrogate (not text): encoded as U+FFFD, like a real U+FFFD in another name.
 * - the empty name, and a name that reads as an elementary type (`address`, `bool`, `string`,
 *   `bytes`, `function`, and `int`, `uint` or `bytes` followed by digits, in range or not): ethers
 *   and alloy read `uint` as `uint256`, and a field of any of these types as that type.
 * `EIP712Domain` names only the domain's type. Everything else is accepted: Hyperliquid's
 * `HyperliquidTransaction:ApproveAgent`, a leading digit, `-`, `/`, `@`, letters beyond ASCII.
 */
const STRUCT_NAME_BREAKS = /[(),.[\]\s]|[\u{10000}-\u{10FFFF}]/u;
const ELEMENTARY_LOOKALIKE = /^(address|bool|string|bytes|function|u?int[0-9]*|bytes[0-9]+)$/;

/** Why `name` cannot be a struct's name, or undefined if it can. */
function structNameProblem(name: string): string | undefined {
  if (name === "") return "is empty";
  if (!isWellFormed(name)) return "contains an unpaired UTF-16 surrogate, which is not text";
  const character = STRUCT_NAME_BREAKS.exec(name)?.[0];
  if (character !== undefined) {
    const codePoint = `U+${character.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}`;
    if (/\s/.test(character))
      return `contains whitespace (${codePoint}), which separates a field's type from its name in EIP-712's type encoding`;
    if (character === ".") return `contains ".", which readers of ABI types take for an enum (Contract.Enum, read as uint8)`;
    if (character.length === 2)
      return (
        `contains a character beyond U+FFFF (${codePoint}), which encoders sort differently (by UTF-16 code units or by ` +
        "code points) when they list the structs a type refers to"
      );
    return (
      `contains ${JSON.stringify(character)}, which EIP-712's type encoding uses as punctuation ` +
      "(Name(type field,…) and Name[N]): two different sets of types could encode to the same string"
    );
  }
  if (ELEMENTARY_LOOKALIKE.test(name))
    return "is the name of an elementary type, or reads as one (a field of this type would mean that type)";
  return undefined;
}

/** A field's type: a type name and array dimensions (`[]` or `[N]`, N from 1 to 9999). */
const FIELD_TYPE = /^([^[\]]+)((?:\[(?:[1-9][0-9]{0,3})?\])*)$/;
/** Real typed data declares a handful of struct types (a Seaport order four); viem follows a type's
 * references by recursion, one level per type. */
export const MAX_STRUCT_TYPES = 128;
/**
 * How many characters of type encodings hashing may go through. EIP-712 hashes each struct value
 * with its type's encoding (`Mail(Person from,Person to,string contents)Person(string name,address
 * wallet)`), which viem builds and hashes again for every value: typed data of many values whose
 * types refer to many others costs their product (300 types and 60,000 values in 550 kB took 80 s).
 * A Seaport bulk order of 512 orders goes through about 440,000 characters, in about half a second.
 */
export const MAX_TYPE_ENCODING_CHARACTERS = 1_000_000;
const INTEGER_TYPE =
  /^(u?)int(8|16|24|32|40|48|56|64|72|80|88|96|104|112|120|128|136|144|152|160|168|176|184|192|200|208|216|224|232|240|248|256)$/;
const FIXED_BYTES_TYPE = /^bytes([1-9]|[12][0-9]|3[0-2])$/;
const ARRAY_TYPE = /^(.+)\[([1-9][0-9]{0,3})?\]$/;
const isElementary = (type: string) =>
  type === "address" || type === "bool" || type === "string" || type === "bytes" || INTEGER_TYPE.test(type) || FIXED_BYTES_TYPE.test(type);

function fieldsOf(value: unknown, where: string): Field[] {
  if (!Array.isArray(value)) throw new EthereumError(`${where} must be a list of {name, type}`);
  const names = new Set<string>();
  return value.map((field, i) => {
    if (!isPlainObject(field) || typeof field.name !== "string" || typeof field.type !== "string")
      throw new EthereumError(`${where}[${i}] must be {name, type}`);
    if (!IDENTIFIER.test(field.name))
      throw new EthereumError(`${where}[${i}].name must be an identifier (letters, digits, _ and $, not starting with a digit)`);
    if (names.has(field.name)) throw new EthereumError(`${where} declares ${field.name} twice`);
    names.add(field.name);
    const type = FIELD_TYPE.exec(field.type);
    if (!type)
      throw new EthereumError(
        `${where}[${i}].type must be a type name followed by array dimensions ([] or [N]), got ${JSON.stringify(field.type.slice(0, 80))}`,
      );
    // Each dimension nests the value one level (and viem reads a type's dimensions by backtracking).
    const dimensions = type[2]!.split("[").length - 1;
    if (dimensions >= MAX_NESTING)
      throw new EthereumError(`${where}[${i}].type has ${dimensions} array dimensions; at most ${MAX_NESTING - 1}`);
    return { name: field.name, type: field.type };
  });
}

/** The type name a field's type is an array of (or is): `Person[2][]` -> `Person`. */
const baseOf = (type: string) => FIELD_TYPE.exec(type)![1]!;

/**
 * How many characters EIP-712's encoding of each struct type has (`encodeType`: the type and every
 * struct type it refers to, directly or not), found without recursion.
 */
function typeEncodingLengths(types: Record<string, Field[]>): Map<string, number> {
  const own = new Map<string, number>();
  for (const [name, fields] of Object.entries(types))
    own.set(name, name.length + 2 + fields.reduce((sum, f, i) => sum + f.type.length + 1 + f.name.length + (i > 0 ? 1 : 0), 0));
  const lengths = new Map<string, number>();
  for (const name of own.keys()) {
    const seen = new Set([name]);
    const pending = [name];
    while (pending.length > 0)
      for (const field of types[pending.pop()!]!) {
        const base = baseOf(field.type);
        if (own.has(base) && !seen.has(base)) {
          seen.add(base);
          pending.push(base);
        }
      }
    lengths.set(
      name,
      [...seen].reduce((sum, type) => sum + own.get(type)!, 0),
    );
  }
  return lengths;
}

/** Parses EIP-712 typed data as the clients send it (JSON, or its hex), strictly, into canonical values. */
export function parseTypedData(payload: string): TypedData {
  const data = parseJson(payload, "EIP-712 typed data {types, primaryType, domain, message}") as Record<string, unknown>;
  if (!isPlainObject(data.types) || typeof data.primaryType !== "string" || !isPlainObject(data.message)) {
    throw new EthereumError("EIP-712 payload needs types, primaryType, domain and message");
  }
  const domainIn = data.domain === undefined ? {} : data.domain;
  if (!isPlainObject(domainIn)) throw new EthereumError("EIP-712 domain must be an object");

  // No prototype: a type named `constructor` or `__proto__` is only ever one the caller declared.
  const types: Record<string, Field[]> = Object.create(null);
  const declared = Object.entries(data.types);
  if (declared.length > MAX_STRUCT_TYPES)
    throw new EthereumError(`EIP-712 types declares ${declared.length} struct types; at most ${MAX_STRUCT_TYPES} are accepted`);
  for (const [name, fields] of declared) {
    const problem = structNameProblem(name);
    if (problem) throw new EthereumError(`types: the struct name ${JSON.stringify(name.slice(0, 80))} ${problem}`);
    types[name] = fieldsOf(fields, `types.${name}`);
  }
  // Every field's type is known, not only those of the fields the message reaches: the hash encodes
  // every struct type a type refers to.
  for (const [name, fields] of Object.entries(types))
    for (const field of fields) {
      const base = baseOf(field.type);
      if (!isElementary(base) && (base === "EIP712Domain" || !Object.hasOwn(types, base)))
        throw new EthereumError(
          `types.${name}.${field.name} has type ${field.type}, which is neither an EIP-712 type nor a struct declared in types`,
        );
    }
  if (types.EIP712Domain) {
    for (const field of types.EIP712Domain) {
      const standard = DOMAIN_FIELDS.find((f) => f.name === field.name);
      if (!standard || standard.type !== field.type)
        throw new EthereumError(
          `types.EIP712Domain: ${field.name} ${field.type} is not an EIP-712 domain field (${DOMAIN_FIELDS.map((f) => `${f.name} ${f.type}`).join(", ")})`,
        );
    }
  } else {
    for (const key of Object.keys(domainIn)) {
      if (!DOMAIN_FIELDS.some((f) => f.name === key))
        throw new EthereumError(`domain.${key} is not an EIP-712 domain field (${DOMAIN_FIELDS.map((f) => f.name).join(", ")})`);
    }
    types.EIP712Domain = DOMAIN_FIELDS.filter((f) => ownField(domainIn, f.name) !== undefined);
  }
  if (data.primaryType === "EIP712Domain" || !Object.hasOwn(types, data.primaryType))
    throw new EthereumError(`primaryType ${data.primaryType} is not one of the struct types declared in types`);

  const encodingLengths = typeEncodingLengths(types);
  let hashed = 0;
  /** Counts a struct value's type encoding, which hashing it goes through once more. */
  const hashes = (type: string) => {
    hashed += encodingLengths.get(type)!;
    if (hashed > MAX_TYPE_ENCODING_CHARACTERS)
      throw new EthereumError(
        `EIP-712 typed data is too large to hash: each struct value hashes its type's encoding, and these values' encodings ` +
          `come to more than ${MAX_TYPE_ENCODING_CHARACTERS} characters: sign fewer structs, or structs of fewer types`,
      );
  };

  const canonical = (value: unknown, type: string, where: string): unknown => {
    const array = ARRAY_TYPE.exec(type);
    if (array) {
      if (!Array.isArray(value)) throw new EthereumError(`${where} must be a list (${type})`);
      if (array[2] !== undefined && value.length !== Number(array[2]))
        throw new EthereumError(`${where} must hold exactly ${array[2]} items (${type})`);
      return value.map((item, i) => canonical(item, array[1]!, `${where}[${i}]`));
    }
    const integer = INTEGER_TYPE.exec(type);
    if (integer) return integerOf(value, where, Number(integer[2]), integer[1] === "");
    const fixed = FIXED_BYTES_TYPE.exec(type);
    if (fixed) return bytesOf(value, where, Number(fixed[1]));
    if (type === "bytes") return bytesOf(value, where);
    if (type === "address") return addressOf(value, where);
    if (type === "bool") {
      if (typeof value !== "boolean") throw new EthereumError(`${where} must be true or false`);
      return value;
    }
    if (type === "string") {
      if (typeof value !== "string") throw new EthereumError(`${where} must be a string`);
      // viem encodes an unpaired surrogate as U+FFFD: two strings policies tell apart would sign alike.
      if (!isWellFormed(value)) throw new EthereumError(`${where} contains an unpaired UTF-16 surrogate, which is not text`);
      return value;
    }
    const struct = type === "EIP712Domain" || !Object.hasOwn(types, type) ? undefined : types[type];
    if (!struct) throw new EthereumError(`${where} has type ${type}, which is neither an EIP-712 type nor a struct declared in types`);
    if (!isPlainObject(value)) throw new EthereumError(`${where} must be an object (${type})`);
    hashes(type);
    return Object.fromEntries(
      struct.map((field) => {
        const fieldValue = ownField(value, field.name);
        if (fieldValue === undefined) throw new EthereumError(`${where}.${field.name} is missing (${type} declares it)`);
        return [field.name, canonical(fieldValue, field.type, `${where}.${field.name}`)];
      }),
    );
  };
  hashes("EIP712Domain");
  const domain = Object.fromEntries(
    types.EIP712Domain.map((field) => {
      const fieldValue = ownField(domainIn, field.name);
      if (fieldValue === undefined) throw new EthereumError(`domain.${field.name} is missing (EIP712Domain declares it)`);
      return [field.name, canonical(fieldValue, field.type, `domain.${field.name}`)];
    }),
  );
  const message = canonical(data.message, data.primaryType, "message") as Record<string, unknown>;
  return { domain, types, primaryType: data.primaryType, message };
}

/**
 * `keccak256("\x19\x01" ‖ hashStruct(domain) ‖ hashStruct(message))`, each struct hashed by viem's
 * EIP-712 encoder. Not viem's hashTypedData: it also checks struct names against `[A-Za-z0-9_$:]`,
 * narrower than what ethers and eth-account sign; parseTypedData has checked every name and value.
 */
export function typedDataDigest(data: TypedData): Uint8Array {
  const types = data.types as Record<string, Field[]>;
  const domainHash = hashDomain({ domain: data.domain, types } as Parameters<typeof hashDomain>[0]);
  const messageHash = hashStruct({ data: data.message, primaryType: data.primaryType, types } as Parameters<typeof hashStruct>[0]);
  return hexToBytes(keccak256(concatHex(["0x1901", domainHash, messageHash])));
}

/** `eth.eip_712`, from the canonical values (the domain holds only the fields the signature covers). */
export function typedDataKeyword(data: TypedData): Record<string, unknown> {
  const { name, version, chainId, verifyingContract } = data.domain;
  return {
    primary_type: data.primaryType,
    domain: {
      ...(name !== undefined ? { name } : {}),
      ...(version !== undefined ? { version } : {}),
      ...(chainId !== undefined ? { chain_id: chainId } : {}),
      ...(verifyingContract !== undefined ? { verifying_contract: verifyingContract } : {}),
    },
    message: data.message,
  };
}

export interface Authorization {
  /** The delegate contract, lower case. */
  address: Hex;
  chainId: bigint;
  nonce: bigint;
}

/** Parses an EIP-7702 authorization `{address (or contractAddress), chainId, nonce}` strictly. */
export function parseAuthorization(payload: string): Authorization {
  const auth = parseJson(payload, "an EIP-7702 authorization {address, chainId, nonce}") as Record<string, unknown>;
  const unknown = Object.keys(auth).filter((k) => !["address", "contractAddress", "chainId", "nonce"].includes(k));
  if (unknown.length)
    throw new EthereumError(
      `EIP-7702 payload has fields an authorization does not sign: ${unknown.join(", ")} (send address, chainId and nonce)`,
    );
  if (auth.address !== undefined && auth.contractAddress !== undefined)
    throw new EthereumError("EIP-7702 payload names both address and contractAddress: send one");
  const address = auth.address ?? auth.contractAddress;
  if (address === undefined || auth.chainId === undefined || auth.nonce === undefined)
    throw new EthereumError("EIP-7702 payload needs address, chainId and nonce");
  return {
    address: addressOf(address, "address"),
    // EIP-7702: chain_id is a uint256 (0 = valid on every chain), nonce a uint64.
    chainId: integerOf(auth.chainId, "chainId", 256, false),
    nonce: integerOf(auth.nonce, "nonce", 64, false),
  };
}

/** keccak256(0x05 ‖ rlp([chain_id, address, nonce])), by viem, from the parsed values. */
export function authorizationDigest(auth: Authorization): Uint8Array {
  return hexToBytes(
    hashAuthorization({ address: auth.address, chainId: auth.chainId as unknown as number, nonce: auth.nonce as unknown as number }),
  );
}

/** `eth.eip_7702_authorization`, from the parsed values. */
export const authorizationKeyword = (auth: Authorization): Record<string, unknown> => ({
  address: auth.address,
  chain_id: auth.chainId,
  nonce: auth.nonce,
});
