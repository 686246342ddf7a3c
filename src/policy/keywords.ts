// The keywords a policy may name, by field. The engine knows keywords only through this registry:
// a module that can describe something about an activity (a chain's parsed transaction, a wallet)
// declares its keyword here with its type, and supplies the value when it builds the activity's
// policy context. Dotted keywords (`eth.tx`) become fields of a struct keyword (`eth`).
import { T, type Type } from "./types.js";

export type PolicyField = "condition" | "consensus" | "time";

export interface KeywordDefinition {
  /** "activity", or dotted: "eth.tx" */
  path: string;
  fields: PolicyField[];
  type: Type;
  description: string;
}

const keywords = new Map<string, KeywordDefinition>();

export function defineKeyword(definition: KeywordDefinition): void {
  if (keywords.has(definition.path)) throw new Error(`policy keyword ${definition.path} is defined twice`);
  keywords.set(definition.path, definition);
  environments.clear();
}

export function keywordDefinitions(): KeywordDefinition[] {
  return [...keywords.values()];
}

const environments = new Map<PolicyField, Map<string, Type>>();

/** Root names and their types in a field; dotted keywords are folded into struct types. */
export function keywordTypes(field: PolicyField): Map<string, Type> {
  const cached = environments.get(field);
  if (cached) return cached;
  const roots = new Map<string, Type>();
  for (const def of keywords.values()) {
    if (!def.fields.includes(field)) continue;
    const [root, ...rest] = def.path.split(".");
    if (rest.length === 0) {
      roots.set(root!, def.type);
      continue;
    }
    let holder = roots.get(root!);
    if (!holder) roots.set(root!, (holder = T.struct(root!, {})));
    for (const [i, segment] of rest.entries()) {
      if (holder.kind !== "struct") throw new Error(`policy keyword ${def.path} nests under a non-struct`);
      if (i === rest.length - 1) holder.fields[segment] = def.type;
      else holder = holder.fields[segment] ??= T.struct(segment, {});
    }
  }
  environments.set(field, roots);
  return roots;
}

/** Folds dotted values ({"eth.tx": …}) into the nested objects the evaluator reads ({eth: {tx: …}}). */
export function rootValues(values: Record<string, unknown>): Record<string, unknown> {
  const roots: Record<string, unknown> = {};
  for (const [path, value] of Object.entries(values)) {
    if (value === undefined) continue;
    if (!path.includes(".")) {
      roots[path] = value;
      continue;
    }
    const segments = path.split(".");
    let holder = roots;
    for (const segment of segments.slice(0, -1)) holder = (holder[segment] ??= {}) as Record<string, unknown>;
    holder[segments[segments.length - 1]!] = value;
  }
  return roots;
}

// ---- The keywords every activity has. Chain and wallet modules add theirs beside their code. ----

export const USER_TYPE = T.struct("User", { id: T.string, tags: T.list(T.string), email: T.string, alias: T.string });
export const CREDENTIAL_TYPE = T.struct("Credential", {
  id: T.string,
  user_id: T.string,
  type: T.string,
  credential_id: T.string,
  public_key: T.string,
});

/** `activity.params`: the request fields the product's policy docs expose, by their snake_case
 * names. Each operation supplies the ones it has; reading one an activity lacks is an evaluation
 * error (as in the product), not a type error. */
export const ACTIVITY_PARAMS_TYPE = T.struct("ActivityParams", {
  user_ids: T.list(T.string),
  user_id: T.string,
  api_key_ids: T.list(T.string),
  hash_function: T.string,
  encoding: T.string,
  type: T.string,
  target_public_key: T.string,
  wallet_id: T.string,
  otp_length: T.int,
  session_profile_id: T.string,
  endpoint_id: T.string,
  sign_with: T.string,
});

export const ACTIVITY_TYPE = T.struct("Activity", {
  type: T.string,
  kind: T.string,
  resource: T.string,
  action: T.string,
  params: ACTIVITY_PARAMS_TYPE,
  organization_id: T.string,
});

defineKeyword({
  path: "activity",
  fields: ["condition"],
  type: ACTIVITY_TYPE,
  description:
    "The activity: type, kind, resource, action, params, and the organization it runs in (organization_id: a sub-organization's, when a parent's backend runs a login there).",
});
defineKeyword({
  path: "approvers",
  fields: ["consensus"],
  type: T.list(USER_TYPE),
  description: "The users who have approved the activity so far (the requester first).",
});
defineKeyword({
  path: "credentials",
  fields: ["consensus"],
  type: T.list(CREDENTIAL_TYPE),
  description: "The credentials those approvals were signed with.",
});
defineKeyword({
  path: "time.now",
  fields: ["condition", "consensus", "time"],
  type: T.timestamp,
  description: "The server's time when the activity is evaluated; one value per evaluation.",
});
defineKeyword({
  path: "wallet",
  fields: ["condition"],
  type: T.struct("Wallet", { id: T.string, imported: T.bool, exported: T.bool, label: T.string }),
  description: "The wallet a signing or export request targets.",
});
defineKeyword({
  path: "wallets",
  fields: ["condition"],
  type: T.list(T.struct("Wallet", { id: T.string, imported: T.bool, exported: T.bool, label: T.string })),
  description: "The wallets a request involving several wallets targets.",
});
defineKeyword({
  path: "private_key",
  fields: ["condition"],
  type: T.struct("PrivateKey", { id: T.string, tags: T.list(T.string), imported: T.bool, exported: T.bool, label: T.string }),
  description: "The private key a signing or export request targets.",
});
defineKeyword({
  path: "wallet_account",
  fields: ["condition"],
  type: T.struct("WalletAccount", { address: T.string }),
  description: "The wallet account a signing or export request targets.",
});
