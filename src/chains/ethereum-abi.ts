// Ethereum contract ABIs: checked when uploaded (create_smart_contract_interface), and used to show
// policies what a transaction's call data asks the contract to do (`eth.tx.function_name`,
// `.function_signature`, `.contract_call_args`). The JSON ABI is checked by abitype's schema (the
// ABI package viem is built on); call data is decoded and re-encoded by viem.
import {
  AbiConstructor,
  AbiError as AbiErrorItem,
  AbiEvent,
  AbiFallback,
  AbiFunction as AbiFunctionItem,
  AbiParameter as AbiParameterSchema,
  AbiReceive,
  Abi as AbiSchema,
} from "abitype/zod";
import { decodeFunctionData, encodeFunctionData, toFunctionSelector, type Abi, type AbiFunction, type AbiParameter, type Hex } from "viem";
import { jsonDepth, MAX_NESTING } from "./nesting.js";

export class AbiError extends Error {
  override name = "AbiError";
}

/** abitype's schema of each kind of ABI item, so a bad item is explained by its own kind's rules. */
const ITEM_SCHEMAS = {
  function: AbiFunctionItem,
  event: AbiEvent,
  error: AbiErrorItem,
  constructor: AbiConstructor,
  fallback: AbiFallback,
  receive: AbiReceive,
};
const ITEM_TYPES = Object.keys(ITEM_SCHEMAS);
export function parseInterfaceJson(text: string): unknown {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    // Not the parser's words: they differ between Node versions.
    throw new AbiError("is not valid JSON text");
  }
  if (jsonDepth(value, MAX_NESTING) > MAX_NESTING) throw new AbiError(`nests arrays and objects more than ${MAX_NESTING} levels deep`);
  return value;
}

/** How many array dimensions end a type (`uint256[2][]` has 2), counted only as far as `limit`. */
function arrayDimensions(type: string, limit: number): number {
  let dimensions = 0;
  let end = type.length;
  while (dimensions <= limit && end > 0 && type[end - 1] === "]") {
    const open = type.lastIndexOf("[", end - 1);
    if (open < 0) break;
    dimensions += 1;
    end = open;
  }
  return dimensions;
}

const isObject = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null && !Array.isArray(value);

/** Parameters checked one by one first, so a bad one is named with its path and type (the schema's
 * union errors name neither). `level` is how deep the values of these parameters sit in a call's
 * arguments (1 at the top): every array dimension and every tuple is a level, which viem's decoder,
 * its encoder and the policy keyword each recurse through, so a value may sit at most MAX_NESTING deep
 * (a type string holds any number of dimensions without nesting its JSON). */
function checkParameters(parameters: unknown, where: string, level = 1): void {
  if (!Array.isArray(parameters)) throw new AbiError(`${where} must be a list of parameters`);
  for (const [i, parameter] of parameters.entries()) {
    const at = `${where}[${i}]`;
    if (!isObject(parameter)) throw new AbiError(`${at} must be an object {name, type}`);
    if (parameter.name !== undefined && typeof parameter.name !== "string") throw new AbiError(`${at}.name must be a string`);
    if (typeof parameter.type !== "string") throw new AbiError(`${at}.type must be a string such as "uint256"`);
    const deepest = level + arrayDimensions(parameter.type, MAX_NESTING);
    if (deepest > MAX_NESTING)
      throw new AbiError(
        `${at}.type nests arrays and tuples more than ${MAX_NESTING} levels deep (array dimensions and tuples count one each)`,
      );
    if (/^tuple(\[\d*\])*$/.test(parameter.type)) {
      // Solidity has no empty structs; an empty tuple would decode to nothing from no bytes.
      if (!Array.isArray(parameter.components) || parameter.components.length === 0)
        throw new AbiError(`${at} is a ${parameter.type} and must list its components`);
      checkParameters(parameter.components, `${at}.components`, deepest + 1);
    } else if (!AbiParameterSchema.safeParse({ type: parameter.type }).success) {
      throw new AbiError(`${at}.type "${parameter.type.slice(0, 64)}" is not a Solidity ABI type`);
    }
  }
}

/** A schema issue of abitype's (zod's), said in the ABI's terms: zod's own words ("Invalid input") name no rule. */
function issueProblem(issue: { code: string; expected?: unknown; values?: unknown[]; errors?: unknown[][]; keys?: string[] }): string {
  const KINDS: Record<string, string> = {
    string: "a string",
    boolean: "true or false",
    number: "a number",
    array: "a list",
    object: "an object",
  };
  if (issue.code === "invalid_type" && typeof issue.expected === "string") return `must be ${KINDS[issue.expected] ?? issue.expected}`;
  if (issue.code === "invalid_value" && issue.values) return `must be ${issue.values.map((v) => JSON.stringify(v)).join(" or ")}`;
  if (issue.code === "invalid_union" && issue.errors) {
    // A field of one of several literal values (stateMutability): each alternative names its value.
    const values = issue.errors.flat().flatMap((e) => {
      const alternative = e as { code?: string; values?: unknown[] };
      return alternative.code === "invalid_value" && alternative.values ? alternative.values : [];
    });
    if (values.length === issue.errors.length) return `must be ${values.map((v) => JSON.stringify(v)).join(" or ")}`;
  }
  if (issue.code === "unrecognized_keys" && issue.keys) return `has fields an ABI item does not have: ${issue.keys.join(", ")}`;
  return "is not what the Solidity JSON ABI format allows here";
}

/**
 * Checks that `text` is an Ethereum JSON ABI (the Solidity ABI specification's JSON format, as
 * abitype's schema reads it: a list of functions, events, errors, constructor, fallback, receive)
 * and returns it. Throws AbiError saying what is wrong, and where.
 */
export function validateAbi(text: string): Abi {
  const value = parseInterfaceJson(text);
  if (!Array.isArray(value))
    throw new AbiError("must be a JSON array of ABI items (the ABI itself, not a compiler artifact holding one under `abi`)");
  for (const [i, item] of value.entries()) {
    if (!isObject(item)) throw new AbiError(`[${i}] must be an object`);
    if (typeof item.type !== "string" || !ITEM_TYPES.includes(item.type))
      throw new AbiError(`[${i}].type must be one of ${ITEM_TYPES.join(", ")}`);
    if ("inputs" in item) checkParameters(item.inputs, `[${i}].inputs`);
    if ("outputs" in item) checkParameters(item.outputs, `[${i}].outputs`);
    // The schema's preprocessing fills stateMutability in from the legacy `constant`/`payable`: on a copy.
    const checked = ITEM_SCHEMAS[item.type as keyof typeof ITEM_SCHEMAS].safeParse(structuredClone(item));
    if (!checked.success) {
      const issue = checked.error.issues[0]!;
      const path = issue.path.map((p: PropertyKey) => (typeof p === "number" ? `[${p}]` : `.${String(p)}`)).join("");
      throw new AbiError(`[${i}]${path} ${issueProblem(issue)}`);
    }
  }
  // The whole list, by the same schema: what passes here is what viem's types describe.
  if (!AbiSchema.safeParse(structuredClone(value)).success) throw new AbiError("is not a JSON ABI");
  return value as Abi;
}

/** What `eth.tx` shows of a call the ABI describes. */
export interface ContractCall {
  function_name: string;
  /** The 4-byte selector, 0x and lower-case hex. */
  function_signature: string;
  contract_call_args: Record<string, unknown>;
}

/** What an `address` argument is shown as, given its lower-case hex (the caller marks it as an address). */
export type AddressValue = (lowerCaseHex: string) => unknown;

/** A decoded value as policies read it: integers as bigint, addresses and bytes as lower-case hex
 * (addresses through `address`), arrays and tuples as lists (tuples by position, as the product's
 * policy docs say). */
function policyValue(value: unknown, parameter: AbiParameter, address: AddressValue): unknown {
  const array = /^(.*)\[\d*\]$/.exec(parameter.type);
  if (array) return (value as unknown[]).map((item) => policyValue(item, { ...parameter, type: array[1]! } as AbiParameter, address));
  if (parameter.type === "tuple") {
    const components = (parameter as { components: readonly AbiParameter[] }).components;
    // viem gives a tuple whose components are all named as an object, otherwise as a list.
    const items = Array.isArray(value) ? value : components.map((c) => (value as Record<string, unknown>)[c.name!]);
    return components.map((component, i) => policyValue(items[i], component, address));
  }
  if (typeof value === "string" && parameter.type === "address") return address(value.toLowerCase());
  if (typeof value === "string" && parameter.type.startsWith("bytes")) return value.toLowerCase();
  if (typeof value === "number") return BigInt(value);
  return value;
}

/**
 * The function `data` calls, decoded with the contract's ABI, or undefined when the ABI has no
 * function with its selector, or the arguments do not decode. Only a canonical encoding counts: the
 * arguments are encoded again and must be the bytes that follow the selector (bytes after them, such
 * as attribution suffixes, are ignored as the contract ignores them), so no dirty high bits or
 * overlapping offsets can show policies one value while the contract reads another.
 */
export function decodeContractCall(abi: Abi, data: string, address: AddressValue = (hex) => hex): ContractCall | undefined {
  if (!/^0x([0-9a-fA-F]{2}){4,}$/.test(data)) return undefined;
  const hex = data.toLowerCase() as Hex;
  let decoded: { args?: readonly unknown[] };
  try {
    decoded = decodeFunctionData({ abi, data: hex });
  } catch {
    return undefined;
  }
  const selector = hex.slice(0, 10);
  const item = abi.find((i): i is AbiFunction => i.type === "function" && toFunctionSelector(i) === selector);
  if (!item) return undefined;
  const args = (decoded.args ?? []) as unknown[];
  try {
    const again = encodeFunctionData({ abi: [item], functionName: item.name, args } as Parameters<typeof encodeFunctionData>[0]);
    if (!hex.startsWith(again.toLowerCase())) return undefined;
  } catch {
    return undefined;
  }
  const named: Record<string, unknown> = {};
  item.inputs.forEach((input, i) => {
    // An unnamed argument is read by its position, as a string key: contract_call_args['0'].
    named[input.name ? input.name : String(i)] = policyValue(args[i], input, address);
  });
  return { function_name: item.name, function_signature: selector, contract_call_args: named };
}
