// Operations are data: each is declared once, and the router, request validation, policy metadata and
// the docs table are derived from these declarations. Activity type versions, and the intent and
// result key of each, come from the product's published API description (swagger-schemas.json).
import swaggerSchemas from "./swagger-schemas.json" with { type: "json" };
import type { Tx, Db, Dialect } from "../store/handles.js";
import type { ActivitiesTable } from "../store/schema.js";
import type { Read } from "../store/prepared.js";
import type { Principal } from "../auth/authenticate.js";
import type { WebauthnPolicy } from "../auth/webauthn.js";
import type { SignatureThreads } from "../crypto/signature-threads.js";
import type { DestinationPolicy } from "../services/webhook-destinations.js";
import type { BundleSigner, ClientSecretKey, IdentityTokenSigner } from "../services/service-keys.js";
import type { Oauth2Providers } from "../services/oauth2-providers.js";
import type { OtpSettings, SessionSettings } from "../services/login-settings.js";
import type { OidcVerifier } from "../auth/oidc.js";
import type { ChainRpc, ContractAbiLookup } from "../services/chain-rpc.js";
import type { Keyring } from "../crypto/envelope.js";
import type { TransparencyLog } from "../services/log-checkpoints.js";
import type { InvitationConfig } from "../config.js";
import type { ActivityTypeShapes, QueryShapes, SubmitActivityTypes } from "../api/types.js";

export interface SwaggerSchemas {
  activityTypes: Record<string, { intentKey: string; resultKey: string | null; parameters: string }>;
  submits: Record<string, { request: string; type: string | null }>;
  queries: Record<string, { request: string }>;
  /** Paths outside /public/v1/ (the product's own tooling), by name only. */
  otherPaths: string[];
  definitions: Record<string, object>;
}

export const swagger = swaggerSchemas as unknown as SwaggerSchemas;

/** Where the spec (shared/spec/organization-api.md) names a key differently from the swagger, the
 * spec's name is served first and the swagger's beside it. */
const SPEC_KEYS: Record<string, { intentKey?: string; resultKey?: string }> = {
  ACTIVITY_TYPE_CREATE_USERS_V3: { intentKey: "createUsersIntent", resultKey: "createUsersResult" },
  ACTIVITY_TYPE_CREATE_AUTHENTICATORS_V2: { intentKey: "createAuthenticatorsIntent" },
  ACTIVITY_TYPE_UPDATE_POLICY_V2: { intentKey: "updatePolicyIntentV2", resultKey: "updatePolicyResultV2" },
  ACTIVITY_TYPE_INIT_OTP_AUTH_V2: { intentKey: "initOtpAuthIntentV2", resultKey: "initOtpAuthResultV2" },
  ACTIVITY_TYPE_SIGN_TRANSACTION_V2: { intentKey: "signTransactionIntent", resultKey: "signTransactionResult" },
  // The official clients read these results under the V2 key (the swagger names the V1 one).
  ACTIVITY_TYPE_INIT_OTP_V3: { resultKey: "initOtpResultV2" },
  ACTIVITY_TYPE_INIT_OTP_AUTH_V3: { resultKey: "initOtpAuthResultV2" },
};

/**
 * Activity types as an official client sends them where that differs from the API description: read
 * as the description's spelling (recorded, shown to policies and answered as such). @turnkey/sdk-server
 * 8.x generates ACTIVITY_TYPE_ETH_UNDELEGATE7702; @turnkey/http and @turnkey/core send the described one.
 */
export const CLIENT_TYPE_SPELLINGS: Record<string, string> = {
  ACTIVITY_TYPE_ETH_UNDELEGATE7702: "ACTIVITY_TYPE_ETH_UNDELEGATE_7702",
};

export interface ActivityTypeKeys {
  /** Keys the intent is served under: the spec's (if it names one) first, then the swagger's. */
  intentKeys: string[];
  resultKeys: string[];
  /** swagger definition of the `parameters` object for this version */
  parametersDefinition: string;
}

export function keysOf(type: string): ActivityTypeKeys {
  const fromSwagger = swagger.activityTypes[type];
  if (!fromSwagger) throw new Error(`unknown activity type ${type}`);
  const spec = SPEC_KEYS[type] ?? {};
  const unique = (...keys: Array<string | null | undefined>) => [...new Set(keys.filter((k): k is string => !!k))];
  return {
    intentKeys: unique(spec.intentKey, fromSwagger.intentKey),
    resultKeys: unique(spec.resultKey, fromSwagger.resultKey),
    parametersDefinition: fromSwagger.parameters,
  };
}

/**
 * The envelope of a submit request for one activity type version, as a JSON Schema: request
 * validation compiles it, and GET /openapi.json publishes it. `reference` names the swagger definition
 * of the parameters where the schema is used ("swagger#/definitions/X" for Ajv,
 * "#/components/schemas/X" in the OpenAPI document).
 */
export function activityEnvelopeSchema(type: string, reference: (definition: string) => object) {
  return {
    type: "object",
    properties: {
      type: { const: type },
      timestampMs: { type: "string" },
      organizationId: { type: "string" },
      parameters: reference(keysOf(type).parametersDefinition),
      generateAppProofs: { type: "boolean" },
    },
    required: ["type", "timestampMs", "organizationId", "parameters"],
    additionalProperties: false,
  };
}

/** Every version of the activity type the swagger's request for `operation` names (X, X_V2, X_V3, …). */
export function activityTypesFor(operation: string): string[] {
  const latest = swagger.submits[operation]?.type;
  if (!latest) throw new Error(`the swagger has no submit endpoint ${operation}`);
  const base = latest.replace(/_V\d+$/, "");
  const versions = Object.keys(swagger.activityTypes).filter((t) => t === base || new RegExp(`^${base}_V\\d+$`).test(t));
  return versions.sort((a, b) => versionOf(a) - versionOf(b));
}

const versionOf = (type: string) => Number(/_V(\d+)$/.exec(type)?.[1] ?? 1);

export interface OperationEnvironment {
  webauthn: WebauthnPolicy;
  /** Seals and opens the secrets operations store (mnemonics, private keys). */
  keyring: Keyring;
  /** Computes signatures off the event loop (crypto/signature-threads.ts). */
  signatures: SignatureThreads;
  /** Where webhook URLs may point besides public addresses. */
  webhooks: DestinationPolicy;
  /** Signs export (and import) bundles: the deployment's P-256 bundle signer. */
  bundles: BundleSigner;
  /** How long an import target stays usable (ms). */
  importTargetTtlMs: number;
  /** Session lengths and the key session JWTs are signed with. */
  sessions: SessionSettings;
  /** One-time passwords: how codes are hashed, how long they live, where messages can go. */
  otp: OtpSettings;
  /** Verifies OIDC identity tokens (oauth, oauth_login, OAuth providers). */
  oidc: OidcVerifier;
  /** The chain nodes transactions are sent to (SIGIL_CHAIN_RPC_URLS). */
  chains: ChainRpc;
  /** A contract's uploaded ABI, to name its custom revert errors. */
  findContractAbi: ContractAbiLookup;
  /** Where invitation links point (SIGIL_PUBLIC_URL) and how long they last. */
  invitations: InvitationConfig;
  /** OAuth 2.0 providers (oauth2_authenticate) and the credentials kept for them. */
  oauth2: Oauth2Environment;
  /** The organizations' transparency logs (services/log-checkpoints.ts). */
  transparencyLog: TransparencyLog;
}

export interface Oauth2Environment {
  /** The providers' token and user-info endpoints (SIGIL_OAUTH2_X_TOKEN_URL and the three like it). */
  providers: Oauth2Providers;
  /** The key client secrets arrive encrypted to (published as tlsFetcherEncryptPublicKey). */
  clientSecrets: ClientSecretKey;
  /** The `iss` of the OIDC tokens Sigil issues: SIGIL_PUBLIC_URL without its trailing slash; null when unset. */
  issuer: string | null;
  /** Signs those tokens (its key is in the JWKS the issuer's discovery document names). */
  identityTokens: IdentityTokenSigner;
}

/**
 * What a precheck prepared that is never stored: key material derived before the organization's lock
 * is taken. JSON leaves it out (its toJSON answers nothing), so an activity left waiting for approvals
 * keeps none of it, and the approval that runs the activity prepares it again.
 */
export class InMemoryOnly<T> {
  constructor(readonly value: T) {}
  toJSON(): undefined {
    return undefined;
  }
}

/** What a precheck may read: the organization's committed rows, without its lock (see precheck). */
export interface CommittedState {
  /** The read-only handle (on SQLite, a reader beside the one writer): never waits for a write. */
  db: Db;
  /** The organization the activity is for. */
  organizationId: string;
}

export interface ActivityContext {
  trx: Tx;
  dialect: Dialect;
  organizationId: string;
  activityId: string;
  principal: Principal;
  /** Milliseconds since the epoch; one clock reading per activity. */
  now: number;
  env: OperationEnvironment;
}

export interface QueryContext {
  db: Db;
  organizationId: string;
  principal: Principal;
  now: number;
  /** Runs reads that must agree with each other (one view of a whole organization) on one snapshot. */
  readSnapshot<T>(work: (trx: Tx) => Promise<T>): Promise<T>;
  /** Whether the caller may vote on this activity now (the activity's canApprove / canReject). */
  votingRights(activity: ActivitiesTable): Promise<VotingRights>;
  /** The chain nodes (get_nonces asks one). */
  chains: ChainRpc;
  /** The organizations' transparency logs: their signer, and checkpoints made on demand. */
  transparencyLog: TransparencyLog;
  /** The policy dry run (evaluate_policies): what a submit of `request` by the caller, or by its
   * acting user, would be answered, decided by the submit's own code on the organization's policies.
   * It reads only: no activity is recorded, no fingerprint consumed. */
  wouldBeAnswered(request: WouldBeRequest): Promise<Record<string, unknown>>;
}

/** A submit request that is not sent: the activity type and parameters a submit would carry, and
 * the user it would be requested by when not the caller. */
export interface WouldBeRequest {
  type: string;
  parameters: unknown;
  actingUserId?: string;
}

export interface VotingRights {
  canApprove: boolean;
  canReject: boolean;
}

/** `activity.resource` / `activity.action` of the policy language, with the values the product's
 * policy docs list (tkhq/docs features/policies/language.mdx, "Activity resources and actions"), and
 * SECRET for stored secrets, which that list does not name yet. */
export type PolicyResource =
  | "AUTH"
  | "AUTH_PROXY"
  | "CONFIG"
  | "CREDENTIAL"
  | "FIAT_TRANSACTION"
  | "INVITATION"
  | "MFA_POLICY"
  | "ON_RAMP_CREDENTIALS"
  | "ORGANIZATION"
  | "OTP"
  | "PAYMENT_METHOD"
  | "POLICY"
  | "PRIVATE_KEY"
  | "RECOVERY"
  | "SECRET"
  | "SESSION_PROFILE"
  | "SMART_CONTRACT_INTERFACE"
  | "SPONSORSHIP"
  | "SUBSCRIPTION"
  | "TVC_APP"
  | "TVC_DEPLOYMENT"
  | "TVC_OPERATOR"
  | "TVC_QUORUM_KEY"
  | "USER"
  | "WALLET"
  | "WEBHOOK_ENDPOINT";
/** One part of an activity that policies judge alone (see policyContexts). */
export interface PolicyPart {
  /** Condition keywords of this part (`secret`, `solana.tx`, …), by keyword path. */
  keywords: Record<string, unknown>;
  /** `activity.params` this part has alone, over the activity's. */
  params?: Record<string, unknown>;
}

export type PolicyAction = "CREATE" | "UPDATE" | "DELETE" | "SIGN" | "EXPORT" | "IMPORT" | "VERIFY" | "ENCRYPT";

/** `activity.kind`: the version-agnostic name of an activity type (ACTIVITY_TYPE_X_V2 -> X). */
export const activityKind = (type: string) => type.replace(/^ACTIVITY_TYPE_/, "").replace(/_V\d+$/, "");

/** A submit endpoint whose request names an activity type with parameters (votes included). */
export type SubmitName = keyof typeof SubmitActivityTypes;
/** Every version of the activity type `N` accepts (ACTIVITY_TYPE_X, ACTIVITY_TYPE_X_V2, …). */
export type ActivityTypeOf<N extends SubmitName> = (typeof SubmitActivityTypes)[N][number];

type KeysOfUnion<U> = U extends unknown ? keyof U : never;
type ValueIn<U, K extends PropertyKey> = U extends unknown ? (K extends keyof U ? U[K] : never) : never;
/** Keys some member of the union `U` has as optional. */
type OptionalKeysIn<U> = U extends unknown ? { [K in keyof U]-?: object extends Pick<U, K> ? K : never }[keyof U] : never;
type RequiredKeysIn<U> = Exclude<keyof U, OptionalKeysIn<U>>;
/** The parameters of any of the versions in the union `U`, as one object: a field every version requires
 * stays required, any other is optional (the request may be of a version without it), and its type is
 * the union of the versions' types for it. Only the top level is merged: a nested object keeps its
 * versions apart (an authenticator's attestation is one shape or the other, and handlers tell them
 * apart with `in`). The key sets are computed rather than mapped over `U`, which would keep the union. */
export type AnyVersionOf<U> = { [K in RequiredKeysIn<U>]: ValueIn<U, K> } & {
  [K in Exclude<KeysOfUnion<U>, RequiredKeysIn<U>>]?: Exclude<ValueIn<U, K>, undefined>;
};

/** The parameters an activity handler of submit endpoint `N` receives, from the generated API types
 * (src/api/types.ts): request validation holds every request to the same swagger schema, which
 * refuses fields it does not name. */
export type ParametersOf<N extends SubmitName> = AnyVersionOf<ActivityTypeShapes[ActivityTypeOf<N>]["parameters"]>;
/** The request body a query handler of endpoint `N` receives. */
export type QueryBodyOf<N extends keyof QueryShapes> = QueryShapes[N]["request"];

/** `P`: the parameters the handler receives; `T`: the activity types it is run for; `R`: what its
 * precheck prepares (undefined without one). The defaults (`unknown`, any string) are what the catalog
 * and the pipeline see of an operation whose name they do not know; declarations get `P` and `T` from
 * their name (`defineActivity`) and `R` from their precheck. */
export interface ActivityOperation<P = unknown, T extends string = string, R = unknown> {
  kind: "activity";
  /** Path suffix: /public/v1/submit/<name> */
  name: string;
  summary: string;
  /** Accepted activity types, oldest first. */
  types: T[];
  resource: PolicyResource;
  action: PolicyAction;
  /** Parameters that are secrets: never stored in the intent or echoed in a vote's message. A name is
   * a top-level field, or "list[].field" for a field of each element of a list. */
  secretParameters?: string[];
  /** Result fields that are credentials: returned to the requester, recorded as "<redacted>" (the
   * audit log, other readers, webhooks and a retry's answer see that). */
  secretResults?: string[];
  /** Only the root quorum may perform it; no policy can allow it (the product's root-only types). */
  rootOnly?: boolean;
  /** It changes nothing in the organization beyond its own activity record (signing does not):
   * such activities hold the organization's lock shared, so on PostgreSQL they run side by side
   * (every other activity waits for them, and they for it), and skip the root-quorum check. */
  leavesOrganizationUnchanged?: boolean;
  /** It changes nothing the organization's other activities read or write — it only creates a new
   * sub-organization and what is in it (a sign-up) — so it holds the organization's lock shared, and
   * on PostgreSQL sign-ups into one parent run side by side (anything that changes the parent still
   * waits for them, and they for it). Unlike a signature it writes: it has a transaction of its own
   * (on SQLite, the write lock alone) and its savepoint; the root-quorum check is the new
   * organization's, made where it is created (its own organization's quorum is as it was). Every statement it
   * sends about existing rows must be one that concurrent sign-ups cannot race: a single-use
   * verification token is spent by a conditional update (verification-tokens.ts). */
  addsOnlyNewOrganization?: boolean;
  /** The prepared reads `execute` (or `policyContext`) will make with these parameters, sent ahead in
   * the one statement the pipeline reads with once it holds the lock (store/prepared.ts, readAhead).
   * Only an operation that leaves the organization unchanged, or adds only a new organization, reads
   * ahead: what it writes, none of these reads. */
  readsAhead?(parameters: P, organizationId: string): Read[];
  /** It may queue emails or SMS (one-time passwords): the couriers are told after it commits. */
  queuesMessages?: boolean;
  /** It may queue signed transactions: the chain broadcaster is told after it commits (never before:
   * a transaction whose activity rolled back must never reach a node). */
  queuesBroadcasts?: boolean;
  /** A recovery credential (init_user_email_recovery's) may request it; such a credential may request
   * nothing else, and no query. */
  acceptsRecoveryCredential?: boolean;
  /** A parent organization's credential may request it in a sub-organization (the logins a parent's
   * backend runs for its sub-organizations' users); the parent's root quorum and policies decide. */
  parentMayRequest?: boolean;
  /** Only the root quorum may perform it with these parameters: returns why, or undefined. */
  rootOnlyWhen?(trx: Tx | Db, organizationId: string, parameters: P): Promise<string | undefined>;
  /** `activity.params` of the policy language: the documented snake_case fields this type exposes. */
  policyParameters?(parameters: P, type: T): Record<string, unknown>;
  /** The user whose own credentials this activity changes: a user may change its own credentials
   * without a policy, unless a policy explicitly denies it. */
  credentialOwner?(parameters: P, principal: Principal): string | undefined;
  /** Further condition keywords this activity provides (`wallet`, `eth.tx`, …), by keyword path.
   * `prepared` is what the precheck prepared: when the activity is decided, from this request's
   * precheck; when a vote's rights are weighed for a listing, as stored with the pending activity;
   * undefined when the precheck failed. Reads the database only (never the network). */
  policyContext?(trx: Tx, organizationId: string, parameters: P, type: T, prepared: R | undefined): Promise<Record<string, unknown>>;
  /** For an activity made of several parts, each of which policies judge alone (sol_send_transaction's
   * signWiths, each what sign_transaction would show for that key alone; export_secrets' secrets, each
   * with its own target key): per part, its condition keywords and the `activity.params` it has alone
   * (over policyParameters'). The activity is allowed only when policies allow every part. When
   * present, policyContext is not used. */
  policyContexts?(trx: Tx, organizationId: string, parameters: P, type: T, prepared: R | undefined): Promise<PolicyPart[]>;
  /** The intent as recorded, when it differs from the parameters as sent (extra fields a spec names). */
  intentOf?(parameters: P, type: T): Record<string, unknown>;
  /** Checks and reads that wait on the network (a webhook host's DNS; a chain node's fees, gas
   * estimate, pending nonce or blockhash; an OAuth 2.0 provider's code exchange), and work that needs
   * no lock but takes long (deriving a wallet's keys), run before the organization's lock is taken so
   * a slow answer or a long computation holds up nobody else (on SQLite, the lock is the database's
   * one write lock: every organization's). They may read the database
   * through `committed` only: committed rows, read without the lock, which may change before execute
   * runs — so execute re-reads under the lock whatever must still hold (a row still there, a field
   * still the value the network work used) and fails the activity when it no longer does. What they
   * return is handed to policyContext(s) and execute, and stored with the activity while it waits for
   * approvals: it must be plain JSON and hold no secret in the clear (a secret it must carry, it
   * carries encrypted to the requester's key, or in an InMemoryOnly, which is never stored); a listing weighs canApprove / canReject on the
   * keywords computed from it. Their failure is the activity's: recorded as FAILED once policies have allowed the
   * activity (policies are decided after them, under the lock, so a refused request has still run its
   * precheck). An approval that may run the activity runs it again, so what it reads is read afresh then. */
  precheck?(parameters: P, env: OperationEnvironment, type: T, committed: CommittedState): Promise<R>;
  /** What a failed run must still change, after its own writes were rolled back (an import target
   * is used up by a failed import too: it serves one attempt). Runs in the activity's transaction. */
  afterFailure?(ctx: ActivityContext, parameters: P): Promise<void>;
  /** Runs inside the activity's transaction; returns the result object (the value under the result key).
   * `prepared` is what this run's precheck returned (an operation with a precheck always has it here). */
  execute(ctx: ActivityContext, parameters: P, type: T, prepared: R): Promise<Record<string, unknown>>;
}

/** approve_activity / reject_activity: a vote on a pending activity, named by its fingerprint. The
 * pipeline applies it to that activity; the vote itself is recorded among the activity's votes. */
export interface VoteOperation {
  kind: "vote";
  name: string;
  summary: string;
  types: string[];
  selection: "VOTE_SELECTION_APPROVED" | "VOTE_SELECTION_REJECTED";
}

/** Anything submitted to /public/v1/submit/<name>. */
export type SubmitOperation = ActivityOperation | VoteOperation;

/** `B`: the request body the query receives; `unknown` where the endpoint is not known (the catalog). */
export interface QueryOperation<B = unknown> {
  kind: "query";
  /** Path suffix: /public/v1/query/<name>, or /sigil/v1/query/<name> for a query of Sigil's own. */
  name: string;
  summary: string;
  /** A query of Sigil's own, which the product's API description does not have: served under
   * OWN_QUERY_PREFIX (so it can never collide with a path the product adds later), its body held to
   * this JSON Schema instead of the description's. Authenticated and answered like every query. */
  own?: { schema: OwnQuerySchema };
  /** A credential of a sub-organization of the organization named may ask too (whoami: a client that
   * knows only the parent's id finds the caller's own sub-organization). */
  resolvesSubOrganizations?: boolean;
  /** Returns the whole response object, e.g. `{ user }`. */
  run(ctx: QueryContext, body: B): Promise<Record<string, unknown>>;
}

export type Operation = ActivityOperation | VoteOperation | QueryOperation;

/** Declares the activity operation served at /public/v1/submit/<name>: its parameters are typed by the
 * name (`ParametersOf`), and `type` is one of the name's activity types, so a misspelt one does not compile. */
export function defineActivity<N extends SubmitName, R = undefined>(
  op: Omit<ActivityOperation<ParametersOf<N>, ActivityTypeOf<N>, R>, "kind" | "types" | "name"> & { name: N; types?: ActivityTypeOf<N>[] },
): ActivityOperation<ParametersOf<N>, ActivityTypeOf<N>, R> {
  return { ...op, kind: "activity", types: op.types ?? (activityTypesFor(op.name) as ActivityTypeOf<N>[]) };
}

export function defineVote(op: Omit<VoteOperation, "kind" | "types">): VoteOperation {
  return { ...op, kind: "vote", types: activityTypesFor(op.name) };
}

/** Where the queries of Sigil's own are served: `${OWN_QUERY_PREFIX}<name>`. */
export const OWN_QUERY_PREFIX = "/sigil/v1/query/";
const API_QUERY_PREFIX = "/public/v1/query/";

/** The path a query is served at. */
export function queryPath(op: Pick<QueryOperation, "name" | "own">): string {
  return `${op.own ? OWN_QUERY_PREFIX : API_QUERY_PREFIX}${op.name}`;
}

/** The body schema of a query of Sigil's own: an object naming the organization asked about, as every
 * query of the API does (authentication reads `organizationId`), and no field it does not declare. */
export interface OwnQuerySchema {
  type: "object";
  required: ["organizationId", ...string[]];
  properties: { organizationId: { type: "string" } & Record<string, unknown> } & Record<string, object>;
  additionalProperties: false;
  [keyword: string]: unknown;
}

/** Declares a query of Sigil's own, served at /sigil/v1/query/<name>; `B` is the body `schema` admits. */
export function defineSigilQuery<B extends { organizationId: string }>(
  op: Omit<QueryOperation<B>, "kind" | "own"> & { schema: OwnQuerySchema },
): QueryOperation<B> {
  if (!/^[a-z][a-z0-9_]*$/.test(op.name)) throw new Error(`a query name is snake_case: ${op.name}`);
  if (swagger.queries[op.name]) throw new Error(`${op.name} is a query of the API description: declare it with defineQuery`);
  const { schema, ...rest } = op;
  return { ...rest, kind: "query", own: { schema } };
}

/** Declares the query served at /public/v1/query/<name>, its request body typed by the name. */
export function defineQuery<N extends keyof QueryShapes>(
  op: Omit<QueryOperation<QueryBodyOf<N>>, "kind" | "name"> & { name: N },
): QueryOperation<QueryBodyOf<N>> {
  if (!swagger.queries[op.name]) throw new Error(`the swagger has no query endpoint ${op.name}`);
  return { ...op, kind: "query" };
}
