// Request validation against the swagger-derived JSON Schemas. Unknown fields are refused by name,
// never silently dropped: a typo in a security setting must not pass as "not set".
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import { serviceError } from "../errors.js";
import { activityEnvelopeSchema, swagger } from "./registry.js";

// Two validators per schema. The first stops at the first error: linear in the size of the body.
// Collecting every error costs time quadratic in their number (Ajv concatenates the error list of
// each referenced schema into the caller's), so 70 000 wrong items in a 140 kB body held the event
// loop for 12 s; every error is listed only for bodies small enough for that not to matter.
const firstError = new Ajv({ allErrors: false, strict: false, validateFormats: false, passContext: true });
const everyError = new Ajv({ allErrors: true, strict: false, validateFormats: false, passContext: true });

/**
 * The chains a request may name beyond the API description's list: the API's `caip2` enums list the
 * chains the hosted service runs, and a self-hosted deployment serves the chains its operator configured
 * (Hardhat's eip155:31337, a private chain, a newer one). Each check is given the running server's.
 */
export interface ServedChains {
  /** Whether the operator configured `caip2` (SIGIL_CHAIN_RPC_URLS, SIGIL_CHAIN_ASSETS). */
  configures(caip2: string): boolean;
  /** The refusal of a chain neither listed by the API nor configured: CHAIN_NOT_CONFIGURED, naming what is. */
  notConfigured(caip2: string): Error;
}

const CHAIN_KEYWORD = "sigilChain";
const CAIP2_NAMESPACES = /^(eip155|solana):/;

/** Whether an enum lists CAIP-2 chain ids (every value `eip155:…` or `solana:…`). */
const listsChains = (values: unknown[]) => values.length > 0 && values.every((v) => typeof v === "string" && CAIP2_NAMESPACES.test(v));

/**
 * The API description's definitions with every enum of chains replaced by the `sigilChain` keyword: a
 * string the enum lists, or one the server's operator configured. GET /openapi.json keeps the enums as the
 * product publishes them.
 */
function withServedChains(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(withServedChains);
  if (typeof node !== "object" || node === null) return node;
  const { enum: values, ...rest } = node as Record<string, unknown>;
  if (Array.isArray(values) && listsChains(values)) return { ...rest, type: "string", [CHAIN_KEYWORD]: values };
  return Object.fromEntries(Object.entries(node).map(([key, value]) => [key, withServedChains(value)]));
}

for (const ajv of [firstError, everyError]) {
  ajv.addKeyword({
    keyword: CHAIN_KEYWORD,
    schemaType: "array",
    type: "string",
    errors: true,
    validate: function servedChain(this: ServedChains | undefined, listed: string[], data: string) {
      if (listed.includes(data) || this?.configures(data)) return true;
      (servedChain as unknown as { errors: Partial<ErrorObject>[] }).errors = [
        { keyword: CHAIN_KEYWORD, message: "is not a chain this server serves", params: { chain: data } },
      ];
      return false;
    },
  });
  ajv.addSchema({ $id: "swagger", definitions: withServedChains(swagger.definitions) });
}

/** Bodies with at most this many values (objects, arrays, strings, numbers…) get every error listed. */
const LIST_EVERY_ERROR_UP_TO = 2_000;

interface Validators {
  first: ValidateFunction;
  every: ValidateFunction;
}

const cache = new Map<string, Validators>();

function compiled(id: string, schema: () => object): Validators {
  let validators = cache.get(id);
  if (!validators) {
    validators = { first: firstError.compile(schema()), every: everyError.compile(schema()) };
    cache.set(id, validators);
  }
  return validators;
}

/** Whether `value` holds at most `limit` values, counted without recursion. */
function holdsAtMost(value: unknown, limit: number): boolean {
  const pending = [value];
  let count = 0;
  while (pending.length > 0) {
    const next = pending.pop();
    if (++count > limit) return false;
    if (typeof next !== "object" || next === null) continue;
    for (const child of Array.isArray(next) ? next : Object.values(next)) {
      if (count + pending.length >= limit) return false;
      pending.push(child);
    }
  }
  return true;
}

const ref = (definition: string) => ({ $ref: `swagger#/definitions/${definition}` });

/** "/parameters/users/0/apiKeys" -> "parameters.users[0].apiKeys" */
function fieldPath(instancePath: string, child?: string): string {
  const parts = instancePath
    .split("/")
    .slice(1)
    .map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
  if (child !== undefined) parts.push(child);
  return parts.reduce((acc, part) => (/^\d+$/.test(part) ? `${acc}[${part}]` : acc ? `${acc}.${part}` : part), "");
}

function describe(error: ErrorObject): string {
  switch (error.keyword) {
    case "additionalProperties":
      return `unknown field "${fieldPath(error.instancePath, String(error.params.additionalProperty))}"`;
    case "required":
      return `missing required field "${fieldPath(error.instancePath, String(error.params.missingProperty))}"`;
    case "type":
      return `field "${fieldPath(error.instancePath) || "(body)"}" must be ${error.params.type}`;
    case CHAIN_KEYWORD:
      return `field "${fieldPath(error.instancePath)}" names ${String(error.params.chain).slice(0, 80)}, a chain this server does not serve`;
    case "enum": {
      const allowed = error.params.allowedValues as unknown[];
      const shown = allowed.slice(0, 8).join(", ") + (allowed.length > 8 ? `, … (${allowed.length} values)` : "");
      return `field "${fieldPath(error.instancePath)}" must be one of: ${shown}`;
    }
    case "minLength":
    case "maxLength": {
      const { limit } = error.params as { limit: number };
      if (error.keyword === "minLength" && limit === 1) return `field "${fieldPath(error.instancePath)}" must not be empty`;
      return `field "${fieldPath(error.instancePath)}" must be ${error.keyword === "minLength" ? "at least" : "at most"} ${limit} characters long`;
    }
    case "const":
      return `field "${fieldPath(error.instancePath)}" must be ${JSON.stringify(error.params.allowedValue)}`;
    default:
      // The request schemas use only the keywords above; another would be worded by Ajv, whose text is not quoted.
      return `field "${fieldPath(error.instancePath) || "(body)"}" is not valid here`;
  }
}

function check(validators: Validators, value: unknown, chains?: ServedChains): void {
  if (validators.first.call(chains, value)) return;
  const errors =
    holdsAtMost(value, LIST_EVERY_ERROR_UP_TO) && !validators.every.call(chains, value) ? validators.every.errors : validators.first.errors;
  // A chain that is neither the API's nor configured, in a request that is otherwise sound, is refused
  // as the chain services refuse one without a node: the operator's setting is what is missing.
  const chain = errors?.find((e) => e.keyword === CHAIN_KEYWORD);
  if (chain && chains && errors!.every((e) => e.keyword === CHAIN_KEYWORD)) throw chains.notConfigured(String(chain.params.chain));
  const messages = [...new Set((errors ?? []).map(describe))];
  const shown = messages.slice(0, 5).join("; ") + (messages.length > 5 ? `; and ${messages.length - 5} more` : "");
  throw serviceError("REQUEST_INVALID", `invalid request: ${shown}`);
}

/** The envelope of a submit request for one activity type version. */
export function validateActivityRequest(type: string, body: unknown, chains: ServedChains): void {
  check(
    compiled(`activity:${type}`, () => activityEnvelopeSchema(type, ref)),
    body,
    chains,
  );
}

export function validateQueryRequest(operation: string, body: unknown, chains: ServedChains): void {
  check(
    compiled(`query:${operation}`, () => ref(swagger.queries[operation].request)),
    body,
    chains,
  );
}

/** A body of an endpoint of Sigil's own (not in the product's API description), against the JSON
 * Schema it declares; `id` names the schema once for the cache. Refused as the described bodies are. */
export function validateOwnRequest(id: string, schema: object, body: unknown): void {
  check(
    compiled(`own:${id}`, () => schema),
    body,
  );
}

/** How deeply objects and arrays may nest in a request body. The deepest request the API describes
 * nests 9 levels; far deeper input would only exhaust the stack of whatever walks it next
 * (JSON.stringify of the intent, the policy engine), an error the caller could not act on. */
export const MAX_BODY_DEPTH = 32;

// A UTF-16 code unit of a surrogate pair that has no partner: no UTF-8 text can hold it, so each
// database driver would quietly store U+FFFD instead, and the value read back would not be the one sent.
const UNPAIRED_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

// A field path is built from the caller's own keys: a long one is shortened, not echoed whole.
const named = (path: string) => `field "${path === "" ? "(body)" : path.length > 200 ? `${path.slice(0, 200)}…` : path}"`;

function checkText(text: string, where: () => string): void {
  if (text.includes("\u0000")) {
    throw serviceError(
      "TEXT_CONTAINS_NUL",
      `${where()} contains the character U+0000 (NUL), which no field accepts; remove it ` +
        "(arbitrary bytes are sent hex-encoded, e.g. a payload with PAYLOAD_ENCODING_HEXADECIMAL)",
    );
  }
  if (UNPAIRED_SURROGATE.test(text)) {
    throw serviceError(
      "TEXT_NOT_UNICODE",
      `${where()} contains an unpaired UTF-16 surrogate (a \\uD800-\\uDFFF escape without its partner), which is not text; send well-formed Unicode`,
    );
  }
}

/**
 * The rules every string of every request body obeys, whatever field it is in and before the body
 * reaches a schema, authentication or the database: no U+0000 (PostgreSQL's text type cannot hold
 * it, SQLite stores it, so the two backends would answer the same request differently), no unpaired
 * surrogates, and no nesting deeper than MAX_BODY_DEPTH. Object keys are strings too. The walk keeps
 * its own stack: a body nested past the limit is refused without recursing into it.
 */
export function checkRequestText(body: unknown): void {
  const pending: Array<{ value: unknown; path: string; depth: number }> = [{ value: body, path: "", depth: 0 }];
  while (pending.length > 0) {
    const { value, path, depth } = pending.pop()!;
    if (typeof value === "string") {
      checkText(value, () => named(path));
      continue;
    }
    if (typeof value !== "object" || value === null) continue;
    if (depth + 1 > MAX_BODY_DEPTH) {
      throw serviceError(
        "REQUEST_TOO_DEEP",
        `${named(path)} nests objects and arrays more than ${MAX_BODY_DEPTH} levels deep; no request needs that many`,
      );
    }
    const children: Array<{ value: unknown; path: string; depth: number }> = [];
    if (Array.isArray(value)) {
      value.forEach((item, i) => children.push({ value: item, path: `${path}[${i}]`, depth: depth + 1 }));
    } else {
      for (const [key, item] of Object.entries(value)) {
        checkText(key, () => `a field name in ${named(path)}`);
        children.push({ value: item, path: path ? `${path}.${key}` : key, depth: depth + 1 });
      }
    }
    // Reversed onto the stack, so the first offending field in document order is the one named.
    for (let i = children.length - 1; i >= 0; i--) pending.push(children[i]!);
  }
}
