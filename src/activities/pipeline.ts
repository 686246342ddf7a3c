// The road every request walks (DESIGN.md, "One request, one path"), one named step each:
//   submit: read (stamp, JSON, envelope schema) ─► liveness (timestamp window) and fingerprint ─►
//           authenticate (who; a retry by a key since removed is answered from the audit log) ─►
//           IP allowlist (may this key send from where the request came?) ─► count (rate limits) ─► precheck (network checks and committed reads, before any lock) ─► in one transaction holding the
//           organization's lock: (a signature's reads sent ahead as one statement: readsAhead) ─► authorize (root quorum, policies, consensus) ─► execute (the
//           operation and the quorum safety check, or the wait for approvals, or the refusal) ─►
//           record (the activity row built from those outcomes; its fingerprint is unique, so a
//           retry is rolled back and answered with the first) and its policy evaluation ─► publish
//           (webhook event and log line in the transaction; after commit, the dispatcher and the
//           courier are told and the response is sent)
//           Between authorize and execute, an activity allowed (or left waiting for approvals) whose
//           requester's MFA policy the request's credential does not satisfy waits instead until the
//           requester has proven each of its steps (demandAuthentication; activities/mfa.ts).
//   vote:   read ─► liveness ─► authenticate (also by an attested stamp: operations/logins/attested-stamps.ts,
//           which only proves or withdraws its own waiting activity) ─► IP allowlist ─► count, then in one transaction: find the pending activity ─►
//           (waiting for its requester's authentication: the requester's approval proves a step, and the
//           last one decides and runs it as a vote would; the requester or the root quorum may reject
//           it) ─► ballot (a new vote, an approval repeated, or a retry) ─► may they vote? ─► (an
//           approver's own MFA policy holds the vote back until their approvals prove its steps) ─► the same authorize ─► execute ─► record ─► publish
//   query:  stamp ─► JSON ─► schema ─► who (the organization, or its parent: both may read) ─► IP allowlist ─► count ─► read
//           ─► response envelope
// A step that refuses a request leaving no record throws a ServiceError (http/ answers it); every
// outcome that is recorded is a value a step returns, and each step builds its own data from the
// outcomes before it rather than changing them.
import { ActivityTypes } from "../api/types.js";
import type pino from "pino";
import type { Store } from "../store/database.js";
import { controlled, type Dialect, type LockMode, type OpenTx, type Tx, type WriteTx } from "../store/handles.js";
import { isDuplicateFingerprint, lockOrganization } from "../store/database.js";
import { isLostConnection } from "../store/lost-connections.js";
import { isFinal } from "../store/transparency-log.js";
import { outageError } from "../services/database-outages.js";
import { readAhead, type Read } from "../store/prepared.js";
import { ServiceError, serviceError, type ErrorBody } from "../errors.js";
import { attestedStampNotAccepted, readStamp, type ApiKeyStamp, type AttestedStamp, type Stamp } from "../auth/stamps.js";
import { KnownKeys } from "./known-keys.js";
import type { RateLimiter, Requester, RequestClass } from "../services/rate-limits.js";
import type { Metrics } from "../services/metrics.js";
import { authenticateAttested } from "../operations/logins/attested-stamps.js";
import {
  apiKeyPrincipal,
  apiKeyReadAhead,
  authenticate as verifyStamp,
  authenticateReadOnlySession,
  checkApiKeySignature,
  confirmCredential,
  credentialReadAhead,
  readOnlySessionHeader,
  stampVerifiesWith,
  type Confirmation,
  type Principal,
} from "../auth/authenticate.js";
import {
  applyIpAllowlists,
  curveOfCredential,
  enforceIpAllowlist,
  heldToIpAllowlists,
  ORGANIZATION_LIST,
  readParentKeyLists,
} from "../auth/ip-allowlists.js";
import { sha256 } from "../crypto/keys.js";
import type {
  OperationEnvironment,
  QueryOperation,
  SubmitOperation,
  VoteOperation,
  VotingRights,
  WouldBeRequest,
} from "../registry/registry.js";
import type { PolicyVerdict } from "../policy/engine.js";
import { CLIENT_TYPE_SPELLINGS, swagger } from "../registry/registry.js";
import {
  checkRequestText,
  type ServedChains,
  validateActivityRequest,
  validateOwnRequest,
  validateQueryRequest,
} from "../registry/validation.js";
import { assertRootQuorumReachable } from "../operations/organizations/organizations.js";
import { newId } from "../store/ids.js";
import { intentText, storedIntent } from "../store/activity-intent.js";
import {
  decideActivity,
  denialError,
  mayVote,
  requesterAsItStands,
  rootQuorumReadAhead,
  stillApprovable,
  voteWithinScope,
  type ActivitySubject,
  type Decision,
} from "./authorization.js";
import { operationByActivityType } from "../operations/catalog.js";
import {
  approverAuthenticated,
  authenticated,
  authenticationDemanded,
  authenticationOwed,
  proofOf,
  replaceAuthentication,
  voteOnWaiting,
  saveAuthentication,
  type Authentication,
} from "./mfa.js";
import {
  insertActivity,
  insertActivityWithEvaluation,
  recordEvaluation,
  renderActivity,
  requesterOf,
  type ActivityStatus,
  type StoredVote,
} from "../operations/activities/records.js";
import type { ActivitiesTable } from "../store/schema.js";
import { activityDestinationsReadAhead, enqueueActivityEvent } from "../operations/webhooks/webhooks.js";
import {
  acceptInvitation,
  invitationTokenHash,
  organizationOfInvitation,
  readAcceptance,
} from "../operations/organizations/invitations.js";

/** Answers a policy dry run (activities/policy-evaluation.ts, answerDryRun): given to the pipeline by
 * the server, since that module builds on this one. */
export type DryRun = (
  store: Store,
  chains: ServedChains,
  organizationId: string,
  principal: Principal,
  request: WouldBeRequest,
  now: number,
) => Promise<Record<string, unknown>>;

export interface PipelineOptions {
  store: Store;
  /** The policy dry run's answer (evaluate_policies). */
  dryRun?: DryRun;
  /** A request's timestampMs must lie within this many ms of now, either side. */
  timestampWindowMs: number;
  /** Queries are refused to API keys and read-only sessions older than this (null: no limit). */
  queryCredentialMaxAgeMs?: number | null;
  env: OperationEnvironment;
  logger: pino.Logger;
  clock?: () => number;
  /** Told after a commit that queued webhook deliveries (the dispatcher sends them). */
  onWebhookEventsQueued?: () => void;
  /** Told after an activity that may have queued emails or SMS committed (the courier sends them). */
  onMessagesQueued?: () => void;
  /** Told after an activity that may have queued signed transactions committed (the broadcaster sends them). */
  onBroadcastsQueued?: () => void;
  /** Told after an activity that reached a final status committed (the log's sequencer appends it). */
  onFinalActivity?: () => void;
  /** Counts each request against its credential's and organizations' buckets; none: not counted (SIGIL_RATE_LIMITS=false). */
  rateLimits?: RateLimiter;
  /** Told the time of each step and what was committed (SIGIL_METRICS); none: nothing is measured. */
  metrics?: Metrics;
}

export interface PipelineResponse {
  status: number;
  body: unknown;
}

/** The HTTP request an entry point serves (http/request-ids.ts): its id, stored with the activity it
 * makes, and its logger, whose every line carries the id (and the caller's trace, if any). */
export interface RequestContext {
  requestId: string;
  log: pino.Logger;
}

type Headers = Record<string, string | string[] | undefined>;

/** The operation an activity runs (the registry's ActivityOperation). */
type ActivityOperation = ActivitySubject["operation"];

interface Envelope {
  type: string;
  timestampMs: string;
  organizationId: string;
  parameters: Record<string, unknown>;
}

/** A submit request as read: the stamp (not yet checked), the envelope its schema accepted, and the
 * exact bytes (the stamp signed them; their hash is the fingerprint). */
export interface SubmitRequest {
  raw: Buffer;
  /** An attested stamp only on a vote (readRequest refuses it elsewhere). */
  stamp: Stamp | AttestedStamp;
  envelope: Envelope;
}

/** The network checks and reads an operation makes before the lock is taken, and what they prepared
 * for its policy keywords and its execution; a failure is recorded once policies allow the activity,
 * not answered at once. */
export type Precheck = { kind: "passed"; prepared: unknown } | { kind: "failed"; error: unknown };

/** A new activity before anything is decided: waiting, with the requester's approval as its first vote. */
export interface Draft {
  row: ActivitiesTable;
  vote: StoredVote;
  subject: ActivitySubject;
}

/** What a vote on a pending activity is: a new vote, an approval repeated while the activity still
 * waits (it is decided again without a new vote), or a retry answered with the activity as it stands. */
export type Ballot = { kind: "new"; vote: StoredVote } | { kind: "again"; vote: StoredVote } | { kind: "answered" };

/** authorize's outcome. `outcome` and `verdicts` are what the policy evaluation records. */
export type Authorization =
  | { kind: "allowed"; outcome: "OUTCOME_ALLOW"; verdicts: PolicyVerdict[] }
  | { kind: "waiting"; outcome: "OUTCOME_REQUIRES_CONSENSUS"; verdicts: PolicyVerdict[] }
  | { kind: "refused"; outcome: Decision["outcome"]; verdicts: PolicyVerdict[]; error: ServiceError }
  | { kind: "rejected"; outcome: "OUTCOME_REJECTED"; verdicts: PolicyVerdict[] }
  | { kind: "authenticating"; outcome: "OUTCOME_REQUIRES_AUTHENTICATORS"; verdicts: PolicyVerdict[] };

/** execute's outcome. A completed result is whole: record redacts what the operation declares secret. */
export type Execution =
  | { kind: "completed"; result: Record<string, unknown> }
  | { kind: "failed"; error: ServiceError }
  | { kind: "pending" }
  | { kind: "rejected" }
  | { kind: "authenticating" };

/** What execute runs, and for whom. */
interface Run {
  subject: ActivitySubject;
  activityId: string;
  /** Who the operation runs for: the requester, also when an approval runs it later. */
  requester: Principal;
  precheck?: Precheck;
  /** The request it runs in, whose logger tells of an internal error. */
  context?: RequestContext;
}

/** What record writes: one entry of the audit log. */
export interface Entry {
  /** The activity before this request decided it: a draft to insert, or the stored row with its new votes. */
  base: ActivitiesTable;
  /** Whether `base` is already stored (a vote's activity): then it is updated rather than inserted. */
  stored: boolean;
  /** This run's precheck: what it prepared is kept with an activity left waiting for approvals. */
  precheck?: Precheck;
  /** The vote this request cast (its policy evaluation is recorded against it). */
  vote: StoredVote;
  authorization: Authorization;
  execution: Execution;
  secretResults?: string[];
}

/** What publish announces. */
interface Publication {
  recorded: ActivitiesTable;
  /** Whether webhook receivers hear of it: every change of status, not a vote that changes nothing. */
  announce: boolean;
  line: "activity" | "vote";
  /** The log line's own fields besides the activity's (its outcome, or the vote). */
  fields: Record<string, unknown>;
  /** Whether the courier is told: the activity may have queued emails or SMS. */
  messagesQueued: boolean;
  /** Whether the chain broadcaster is told: the activity may have queued signed transactions. */
  broadcastsQueued: boolean;
  /** The policy decision recorded with it, if one was (the metrics count it once committed). */
  decision?: Authorization["outcome"];
  /** The response, rendered after commit. */
  answer: () => PipelineResponse;
  /** The request whose logger writes the line. */
  context?: RequestContext;
}

// Fatal: bytes that are not UTF-8 are refused rather than read as U+FFFD, so the body kept in a vote
// is the very text the stamp signed.
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The body as JSON whose every string may be stored by either database (checkRequestText). */
/** What JSON.parse found wrong, without the excerpt of the body V8 quotes around an unexpected
 * character: the body may hold a credential (an invitation token, a code, a bundle), and the message
 * is logged. */
function jsonProblem(error: unknown): string {
  const message = error instanceof Error ? error.message : "";
  return /^Unexpected token\b/.test(message) ? "an unexpected character" : message.replace(/, (\.\.\.)?".*$/s, "");
}

function parseBody(raw: Buffer): unknown {
  if (raw.length === 0) throw serviceError("REQUEST_BODY_INVALID", "request body is empty: send a JSON object");
  let text: string;
  try {
    text = utf8.decode(raw);
  } catch {
    throw serviceError("REQUEST_BODY_INVALID", "request body is not valid UTF-8: send JSON encoded as UTF-8");
  }
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch (error) {
    throw serviceError("REQUEST_BODY_INVALID", `request body is not valid JSON: ${jsonProblem(error)}`);
  }
  checkRequestText(body);
  return body;
}

/** Step read: the stamp, the body as JSON, an activity type this path accepts, and the envelope schema. */
export function readRequest(operation: SubmitOperation, raw: Buffer, headers: Headers, chains: ServedChains): SubmitRequest {
  if (readOnlySessionHeader(headers) !== undefined)
    throw serviceError("READ_ONLY_SESSION", "a read-only session (X-Session) may only query: stamp activities with a key");
  const stamp = readStamp(headers, operation.kind === "vote");
  const body = parseBody(raw);
  const sent = (body as { type?: unknown })?.type;
  if (typeof sent !== "string") throw serviceError("REQUEST_INVALID", 'missing required field "type"');
  // A client's own spelling of a type is read as the API's (the fingerprint stays that of the bytes sent).
  const type = Object.hasOwn(CLIENT_TYPE_SPELLINGS, sent) ? CLIENT_TYPE_SPELLINGS[sent]! : sent;
  if (type !== sent) (body as { type: string }).type = type;
  if (!operation.types.includes(type)) {
    const owner = operationByActivityType.get(type);
    if (owner)
      throw serviceError(
        "ACTIVITY_TYPE_MISMATCH",
        `${type} is not accepted by /public/v1/submit/${operation.name}; send it to /public/v1/submit/${owner.name}`,
      );
    if (swagger.activityTypes[type])
      throw serviceError("ACTIVITY_TYPE_UNSUPPORTED", `activity type ${type} is not supported by this server`);
    throw serviceError(
      "ACTIVITY_TYPE_UNKNOWN",
      `unknown activity type ${type}; /public/v1/submit/${operation.name} accepts ${operation.types.join(", ")}`,
    );
  }
  validateActivityRequest(type, body, chains);
  return { raw, stamp, envelope: body as Envelope };
}

/** Step liveness: the request was made within `windowMs` of `now`, either side. */
export function checkLiveness(timestampMs: string, now: number, windowMs: number): void {
  if (!/^\d{1,16}$/.test(timestampMs))
    throw serviceError("TIMESTAMP_INVALID", `timestampMs must be milliseconds since the epoch as a string, got "${timestampMs}"`);
  const skew = Number(timestampMs) - now;
  if (Math.abs(skew) > windowMs) {
    throw serviceError(
      "TIMESTAMP_OUT_OF_RANGE",
      `timestampMs is ${Math.round(Math.abs(skew) / 1000)}s ${skew < 0 ? "in the past" : "in the future"}; requests must be within ${windowMs / 1000}s of the server's clock`,
    );
  }
}

/** The idempotency key: the hash of the exact bytes, so only the very same request is a retry. */
const fingerprintOf = (raw: Buffer) => sha256(raw).toString("hex");

/**
 * Step fingerprint, for a request whose fingerprint is already recorded: the answer a retry gets.
 * Refused are a retry of an activity whose result was a credential (shown once, to the first
 * response) and the same bytes stamped by another user (not a retry of theirs).
 */
export function answerRetry(
  existing: ActivitiesTable,
  operation: ActivityOperation,
  userId: string,
): { kind: "repeated"; activity: ActivitiesTable } | { kind: "refused"; error: ServiceError } {
  if (operation.secretResults?.length && existing.status === "ACTIVITY_STATUS_COMPLETED") {
    const error = serviceError(
      "RESULT_NOT_REPEATABLE",
      `activity ${existing.id} already completed; its result is a credential shown only in the first response: send a new request (a new timestampMs) for another`,
    );
    return { kind: "refused", error };
  }
  if (existing.user_id !== userId) {
    const error = serviceError(
      "DUPLICATE_REQUEST",
      `an identical request body was already submitted by another user (activity ${existing.id}); change timestampMs to submit it yourself`,
    );
    return { kind: "refused", error };
  }
  return { kind: "repeated", activity: existing };
}

/** A secret parameter's name: a top-level field ("encryptedBundle"), or a field of each element of a
 * list ("secrets[].secretPayload"). */
function secretPath(name: string): { list?: string; field: string } {
  const nested = /^(\w+)\[\]\.(\w+)$/.exec(name);
  return nested ? { list: nested[1]!, field: nested[2]! } : { field: name };
}

const elementsOf = (value: unknown): unknown[] => (Array.isArray(value) ? value : []);
const isRecord = (value: unknown): value is Record<string, unknown> => typeof value === "object" && value !== null;

function removeSecrets(parameters: Record<string, unknown>, secrets: string[] | undefined): Record<string, unknown> {
  if (!secrets?.length) return parameters;
  let out = { ...parameters };
  for (const { list, field } of secrets.map(secretPath)) {
    if (!list) {
      if (out[field] !== undefined) out[field] = "<redacted>";
      continue;
    }
    if (!Array.isArray(out[list])) continue;
    const redacted = elementsOf(out[list]).map((e) => (isRecord(e) && e[field] !== undefined ? { ...e, [field]: "<redacted>" } : e));
    out = { ...out, [list]: redacted };
  }
  return out;
}

/** Whether this request carries one of the operation's secret parameters (then neither its intent
 * nor its signed body is kept whole, and it cannot wait for approvals). */
const carriesSecrets = (operation: ActivityOperation, parameters: Record<string, unknown>) =>
  !!operation.secretParameters
    ?.map(secretPath)
    .some(({ list, field }) =>
      list ? elementsOf(parameters?.[list]).some((e) => isRecord(e) && e[field] !== undefined) : parameters?.[field] !== undefined,
    );

/** A parent organization's credential reads its sub-organizations (authentication accepts it for
 * them) but writes only in its own organization — except the logins a parent's backend runs for its
 * sub-organizations' users (`parentMayRequest`: OTP, OAuth). A read-only session's key reads only. */
function mayWrite(principal: Principal, organizationId: string, operation?: ActivityOperation): void {
  if (principal.organizationId !== organizationId && !operation?.parentMayRequest) {
    throw serviceError(
      "PARENT_ORGANIZATION_READ_ONLY",
      `the stamp's credential belongs to organization ${principal.organizationId}, the parent of ${organizationId}: a parent organization reads its sub-organizations but cannot write in them; use a credential of ${organizationId}`,
    );
  }
  if (principal.sessionType === "SESSION_TYPE_READ_ONLY") {
    throw serviceError("READ_ONLY_SESSION", `API key ${principal.credentialId} belongs to a read-only session: it may only query`);
  }
  if (principal.sessionKind === RECOVERY && !operation?.acceptsRecoveryCredential) throw recoveryOnly(principal);
}

/** The login kind of a recovery credential's key (init_user_email_recovery). */
const RECOVERY = "RECOVERY";

/** A recovery credential serves one purpose: it reads nothing and requests nothing but recover_user,
 * so an emailed credential of a root user cannot act as that root user. */
const recoveryOnly = (principal: Principal) =>
  serviceError(
    "RECOVERY_CREDENTIAL_RESTRICTED",
    `API key ${principal.credentialId} is a recovery credential: it may only request recover_user for its own user`,
  );

/** Whether `principal` may write in `organizationId` whatever the operation: its own organization's
 * credential, neither a read-only session's nor a recovery credential (mayWrite's operation-dependent
 * refusals cannot apply). */
function writesFreely(principal: Principal, organizationId: string): boolean {
  return (
    principal.organizationId === organizationId && principal.sessionType !== "SESSION_TYPE_READ_ONLY" && principal.sessionKind !== RECOVERY
  );
}

/** A vote of `principal`, as stored in the activity's votes (who they were comes from authentication). */
export function voteOf(
  principal: Principal,
  activityId: string,
  selection: StoredVote["selection"],
  message: string,
  now: number,
): StoredVote {
  return {
    id: newId(),
    userId: principal.userId,
    user: { userId: principal.userId, userName: principal.userName, ...(principal.userEmail ? { userEmail: principal.userEmail } : {}) },
    activityId,
    selection,
    message,
    publicKey: principal.publicKey,
    signature: principal.signature,
    scheme: principal.scheme,
    createdAt: now,
    credentialId: principal.credentialId,
    credentialType: principal.credentialType,
    ...(principal.webauthnCredentialId ? { webauthnCredentialId: principal.webauthnCredentialId } : {}),
  };
}

/** A new activity as its request makes it, before authorize: the intent without secret parameters,
 * and the requester's vote, keeping the signed body only when it holds nothing the intent left out. */
export function draftActivity(
  operation: ActivityOperation,
  request: SubmitRequest,
  principal: Principal,
  fingerprint: string,
  now: number,
  precheck?: Precheck,
  requestId?: string,
): Draft {
  const { envelope } = request;
  const activityId = newId();
  const intent = removeSecrets(operation.intentOf?.(envelope.parameters, envelope.type) ?? envelope.parameters, operation.secretParameters);
  // What the intent leaves out: a secret parameter, or an identity token recorded as its claims.
  const bodyIsRecordable =
    !carriesSecrets(operation, envelope.parameters) &&
    (!operation.intentOf || JSON.stringify(intent) === JSON.stringify(envelope.parameters));
  const vote = voteOf(principal, activityId, "VOTE_SELECTION_APPROVED", bodyIsRecordable ? request.raw.toString("utf8") : "", now);
  const row: ActivitiesTable = {
    id: activityId,
    organization_id: envelope.organizationId,
    type: envelope.type,
    status: "ACTIVITY_STATUS_CONSENSUS_NEEDED",
    // Kept once: "" when the vote's signed body gives this very text back (store/activity-intent.ts).
    intent: storedIntent(JSON.stringify(intent), vote.message),
    result: "{}",
    failure: null,
    votes: JSON.stringify([vote]),
    fingerprint,
    timestamp_ms: envelope.timestampMs,
    user_id: principal.userId,
    created_at: now,
    updated_at: now,
    prepared: null,
    request_id: requestId ?? null,
  };
  return { row, vote, subject: subjectOf(operation, envelope, principal, vote, now, precheck) };
}

/** The activity a request makes, as policies judge it: by its requester's vote (an approval), at
 * `now`. A submit builds it here; so does a policy dry run (policy-evaluation.ts), so both are judged
 * on the same subject. */
export function subjectOf(
  operation: ActivityOperation,
  envelope: Pick<Envelope, "organizationId" | "type" | "parameters">,
  principal: Principal,
  vote: StoredVote,
  now: number,
  precheck?: Precheck,
): ActivitySubject {
  return {
    organizationId: envelope.organizationId,
    type: envelope.type,
    operation,
    parameters: envelope.parameters,
    requesterId: principal.userId,
    votes: [vote],
    now,
    confirmed: [principal.credentialId],
    // A parent's backend logging in a sub-organization's user is governed by the parent's root
    // quorum and policies: the requester is one of the parent's users.
    ...(principal.organizationId !== envelope.organizationId ? { authorityOrganizationId: principal.organizationId } : {}),
    ...(precheck?.kind === "passed" ? { prepared: precheck.prepared } : {}),
    ...(principal.sessionProfileId ? { sessionProfileId: principal.sessionProfileId } : {}),
  };
}

/**
 * Step ballot: what `principal`'s vote on `row` is. A vote cannot be changed; voting again the same
 * way is a retry, answered with the activity as it stands — except an approval repeated while the
 * activity waits, which decides it again: what it waits for may have been met by something other
 * than a vote (a tag given to an approver, a new policy).
 */
export function ballotOn(
  row: ActivitiesTable,
  votes: StoredVote[],
  principal: Principal,
  selection: StoredVote["selection"],
  raw: Buffer,
  now: number,
): Ballot {
  // Their latest vote: a requester who withdrew an activity waiting for their authentication
  // approved it (the request) and then rejected it.
  const mine = votes.filter((v) => v.userId === principal.userId).at(-1);
  const pending = row.status === "ACTIVITY_STATUS_CONSENSUS_NEEDED";
  if (mine && mine.selection !== selection)
    throw serviceError(
      "VOTE_ALREADY_CAST",
      `user ${principal.userId} already voted ${mine.selection} on activity ${row.id}; a vote cannot be changed`,
    );
  if (mine && !(pending && mine.selection === "VOTE_SELECTION_APPROVED")) return { kind: "answered" };
  if (!pending)
    throw serviceError("ACTIVITY_NOT_PENDING", `activity ${row.id} is ${row.status}; only activities waiting for consensus take votes`);
  return mine ? { kind: "again", vote: mine } : { kind: "new", vote: voteOf(principal, row.id, selection, raw.toString("utf8"), now) };
}

/**
 * Step authorize, from the decision (authorization.ts): run it, wait for approvals, or refuse it. An
 * activity that could not run later cannot wait: its secret parameters are not stored, its result
 * would be a credential nobody receives (the approval's response is another's), or it was requested
 * by the parent organization, whose users cannot vote in the activity's organization.
 */
export function ruleOn(decision: Decision, subject: ActivitySubject): Authorization {
  const { outcome, verdicts } = decision;
  if (outcome === "OUTCOME_DENY_EXPLICIT" || outcome === "OUTCOME_DENY_IMPLICIT")
    return { kind: "refused", outcome, verdicts, error: denialError(subject, decision) };
  if (outcome === "OUTCOME_ALLOW") return { kind: "allowed", outcome, verdicts };
  const why = cannotWait(subject);
  if (why)
    return {
      kind: "refused",
      outcome,
      verdicts,
      error: serviceError("CONSENSUS_NOT_SUPPORTED", `${subject.type} ${why} for approvals: ${decision.reason}`),
    };
  return { kind: "waiting", outcome, verdicts };
}

/** Why an activity cannot wait (for approvals, or for its requester's further authentication). */
function cannotWait(subject: ActivitySubject): string | undefined {
  return carriesSecrets(subject.operation, subject.parameters)
    ? "carries secrets and cannot wait"
    : subject.operation.secretResults?.length
      ? "returns a credential and cannot wait"
      : subject.authorityOrganizationId
        ? "requested by the parent organization cannot wait"
        : undefined;
}

/** Step authorize: the root quorum and the policies decide (authorization.ts), then ruleOn. */
export async function authorize(trx: Tx, subject: ActivitySubject): Promise<Authorization> {
  return ruleOn(await decideActivity(trx, subject), subject);
}

/**
 * Step authenticate further, after authorize: what it decided, unless an MFA policy of the requester
 * applies (activities/mfa.ts) and the request's own credential does not satisfy it; then the activity
 * waits for the remaining steps, if it can wait (else it fails). A refused activity is asked for nothing.
 */
export async function demandAuthentication(
  trx: Tx,
  subject: ActivitySubject,
  principal: Principal,
  decided: Authorization,
  confirmation: Confirmation = { mfaPolicies: true },
): Promise<{ authorization: Authorization; authentication?: Authentication }> {
  if (decided.kind !== "allowed" && decided.kind !== "waiting") return { authorization: decided };
  const authentication = await authenticationDemanded(trx, subject, principal, subject.type, confirmation.mfaPolicies);
  if (!authentication || authenticated(authentication)) return { authorization: decided, authentication };
  const why = cannotWait(subject);
  if (why) {
    const error = serviceError(
      "AUTHENTICATORS_NOT_SUPPORTED",
      `MFA policy ${authentication.policyId} requires further authentication of user ${principal.userId}, but ${subject.type} ${why} for it`,
    );
    return { authorization: { kind: "refused", outcome: decided.outcome, verdicts: decided.verdicts, error } };
  }
  return {
    authorization: { kind: "authenticating", outcome: "OUTCOME_REQUIRES_AUTHENTICATORS", verdicts: decided.verdicts },
    authentication,
  };
}

/**
 * Step authorize for a stored activity an approval (or its requester's last MFA proof) may run: it is
 * judged in full again, on what would run now — an approval builds a send's transaction anew from the
 * node (fees, gas, nonce), and what is signed must be what was judged, in this very transaction. The
 * requester's credential must still stand (deleted or expired since: the activity fails,
 * REQUESTING_CREDENTIAL_GONE), its session profile's scope must hold, the policies and the root quorum
 * decide (authorize), and once allowed the requester's MFA policies are asked again: one whose
 * condition the activity now meets, and whose steps the proofs recorded for it do not satisfy, makes
 * it wait for the requester's authentication instead (ACTIVITY_STATUS_AUTHENTICATORS_NEEDED).
 */
export async function decideAgain(
  trx: Tx,
  subject: ActivitySubject,
  row: ActivitiesTable,
  request: StoredVote,
  now: number,
): Promise<{ authorization: Authorization; authentication?: Authentication }> {
  const requester = await requesterAsItStands(trx, request, row.organization_id, now);
  if (!requester) {
    const error = serviceError(
      "REQUESTING_CREDENTIAL_GONE",
      `activity ${row.id} cannot run: credential ${request.credentialId}, which stamped the request, was deleted or has expired while the activity waited; send the request again stamped with a live credential`,
    );
    return { authorization: { kind: "refused", outcome: "OUTCOME_DENY_IMPLICIT", verdicts: [], error } };
  }
  const judged: ActivitySubject = { ...subject, ...(requester.sessionProfileId ? { sessionProfileId: requester.sessionProfileId } : {}) };
  const decided = await authorize(trx, judged);
  if (decided.kind !== "allowed") return { authorization: decided };
  const authentication = await authenticationOwed(trx, judged, requester, row.id, now);
  if (!authentication) return { authorization: decided };
  return {
    authorization: { kind: "authenticating", outcome: "OUTCOME_REQUIRES_AUTHENTICATORS", verdicts: decided.verdicts },
    authentication,
  };
}

/** Step authorize for a vote: an approval decides the activity again (decideAgain); a rejection
 * rejects it once approval has become impossible, and otherwise leaves it waiting. */
export async function authorizeVote(
  trx: Tx,
  subject: ActivitySubject,
  row: ActivitiesTable,
  selection: StoredVote["selection"],
  now: number,
): Promise<{ authorization: Authorization; authentication?: Authentication }> {
  if (selection === "VOTE_SELECTION_APPROVED") return decideAgain(trx, subject, row, subject.votes[0]!, now);
  if (await stillApprovable(trx, subject))
    return { authorization: { kind: "waiting", outcome: "OUTCOME_REQUIRES_CONSENSUS", verdicts: [] } };
  return { authorization: { kind: "rejected", outcome: "OUTCOME_REJECTED", verdicts: [] } };
}

const STATUS: Record<Execution["kind"], ActivityStatus> = {
  completed: "ACTIVITY_STATUS_COMPLETED",
  failed: "ACTIVITY_STATUS_FAILED",
  pending: "ACTIVITY_STATUS_CONSENSUS_NEEDED",
  rejected: "ACTIVITY_STATUS_REJECTED",
  authenticating: "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED",
};

/**
 * The activity as its execution leaves it. A result field that is itself a credential (a read-only
 * session, a verification token) is recorded "<redacted>": the requester gets it in this response
 * only (answerOf), while the audit log, other readers and webhooks get it redacted.
 */
export function recordedRow(
  base: ActivitiesTable,
  execution: Execution,
  secretResults: string[] = [],
  precheck?: Precheck,
): ActivitiesTable {
  // What the precheck prepared is kept while the activity waits (a listing weighs votes on it).
  const prepared =
    execution.kind === "pending" && precheck?.kind === "passed" && precheck.prepared !== undefined
      ? JSON.stringify(precheck.prepared)
      : null;
  const row = { ...base, status: STATUS[execution.kind], prepared };
  if (execution.kind === "failed") return { ...row, failure: JSON.stringify(execution.error.toBody()) };
  if (execution.kind !== "completed") return row;
  const { result } = execution;
  const recorded = secretResults.length
    ? Object.fromEntries(Object.entries(result).map(([k, v]) => [k, secretResults.includes(k) ? "<redacted>" : v]))
    : result;
  return { ...row, result: JSON.stringify(recorded) };
}

/** Step record: the activity row built from the outcomes, inserted when new or updated after a vote,
 * and the policy evaluation of the vote that brought it here. */
export async function record(trx: Tx, dialect: Dialect, entry: Entry, now: number): Promise<ActivitiesTable> {
  const row = recordedRow(entry.base, entry.execution, entry.secretResults, entry.precheck);
  const { outcome, verdicts } = entry.authorization;
  if (!entry.stored) {
    await insertActivityWithEvaluation(trx, dialect, row, entry.vote, outcome, verdicts, now);
    return row;
  }
  await trx
    .updateTable("activities")
    .set({
      status: row.status,
      result: row.result,
      failure: row.failure,
      votes: row.votes,
      updated_at: row.updated_at,
      // A vote whose precheck read nothing new (a rejection; an approval whose reads failed) leaves
      // what was prepared before, while the activity still waits.
      prepared: entry.precheck?.kind === "passed" || row.status !== "ACTIVITY_STATUS_CONSENSUS_NEEDED" ? row.prepared : entry.base.prepared,
    })
    .where("id", "=", row.id)
    .execute();
  await recordEvaluation(trx, row, entry.vote, outcome, verdicts, now);
  return row;
}

/** A completed activity is a 200 with the activity; a failed one is the error it failed with. */
function respond(row: ActivitiesTable): PipelineResponse {
  if (row.status === "ACTIVITY_STATUS_FAILED" && row.failure) {
    const failure = ServiceError.fromBody(JSON.parse(row.failure));
    return { status: failure.httpStatus, body: JSON.parse(row.failure) };
  }
  return { status: 200, body: { activity: renderActivity(row) } };
}

/** The requester's answer: the activity as recorded, save a secret result, which the requester sees whole. */
export function answerOf(recorded: ActivitiesTable, execution: Execution, secretResults: string[] = []): PipelineResponse {
  if (execution.kind === "completed" && secretResults.length) return respond({ ...recorded, result: JSON.stringify(execution.result) });
  return respond(recorded);
}

/**
 * What the log line of a failed activity adds: the code and message it failed with, exactly as the
 * requester and the audit log see them (error messages never carry secrets, so neither does this).
 */
function failureOf(row: ActivitiesTable): { errorCode?: string; error?: string } {
  if (row.status !== "ACTIVITY_STATUS_FAILED" || !row.failure) return {};
  const failure = JSON.parse(row.failure) as ErrorBody;
  return { errorCode: failure.details?.[0]?.turnkeyErrorCode, error: failure.message };
}

/** What this run's precheck prepared, when it passed. */
const preparedBy = (precheck: Precheck): { prepared?: unknown } => (precheck.kind === "passed" ? { prepared: precheck.prepared } : {});

/** A stored pending activity as the pipeline decides on it again (or weighs a vote on it): its
 * operation, intent and votes as recorded, judged at `now`, with the credential now voting (or
 * authenticating), if any, confirmed. */
function pendingSubject(
  row: ActivitiesTable,
  votes: StoredVote[],
  voter: Principal | undefined,
  now: number,
  prepared: { prepared?: unknown },
): ActivitySubject {
  const operation = operationByActivityType.get(row.type);
  if (operation?.kind !== "activity") throw new Error(`pending activity ${row.id} has type ${row.type}, which no operation runs`);
  return {
    organizationId: row.organization_id,
    type: row.type,
    operation,
    parameters: JSON.parse(intentText(row, votes)),
    requesterId: row.user_id ?? "",
    votes,
    now,
    ...(voter ? { confirmed: [voter.credentialId] } : {}),
    ...prepared,
  };
}

/** What a pending activity's precheck prepared, as stored with it. */
const preparedOf = (row: ActivitiesTable): { prepared?: unknown } => (row.prepared !== null ? { prepared: JSON.parse(row.prepared) } : {});

/**
 * Step read ahead, for an activity holding the organization's lock shared (it writes nothing the
 * steps read): the reads the steps after the lock make whatever the outcome — the root quorum of
 * `authority` (the requester's organization), the operation's own (a signature's account), the
 * webhook destinations — sent, with the credential's, as one statement on PostgreSQL: three round
 * trips fewer per signature (store/prepared.ts, readAhead).
 */
function readsAhead(operation: ActivityOperation, envelope: Envelope, authority: string): Read[] {
  return [
    rootQuorumReadAhead(authority),
    ...(operation.readsAhead?.(envelope.parameters, envelope.organizationId) ?? []),
    activityDestinationsReadAhead(envelope.organizationId),
  ];
}

/** A refusal by the authentication made in an activity's transaction, carried out of it to be answered. */
class NotAuthenticated extends Error {
  constructor(readonly reason: unknown) {
    super("not authenticated");
  }
}

export class Pipeline {
  private readonly clock: () => number;

  /** Keys whose signatures are authenticated in their transaction (known-keys.ts). */
  private readonly knownKeys = new KnownKeys();

  constructor(private readonly options: PipelineOptions) {
    this.clock = options.clock ?? Date.now;
  }

  async submit(
    operation: SubmitOperation,
    raw: Buffer,
    headers: Headers,
    client?: string,
    context?: RequestContext,
  ): Promise<PipelineResponse> {
    const request = readRequest(operation, raw, headers, this.options.env.chains);
    const { envelope } = request;
    const received = this.clock();
    checkLiveness(envelope.timestampMs, received, this.options.timestampWindowMs);
    if (operation.kind === "vote") return this.vote(operation, request, received, client, context);
    const fingerprint = fingerprintOf(raw);
    const { store } = this.options;
    const lock = operation.leavesOrganizationUnchanged ? "shared" : "exclusive";
    // A sign-up writes in a transaction of its own but holds its parent's row shared (registry.ts,
    // addsOnlyNewOrganization): sign-ups into one parent do not wait for each other on PostgreSQL.
    const rowLock = lock === "shared" || operation.addsOnlyNewOrganization ? "shared" : "exclusive";
    // A signature on PostgreSQL by a key lately accepted for this organization is authenticated in its
    // transaction, its key read in the statement read ahead (known-keys.ts says why and what it guards).
    const stamp = request.stamp;
    // The key as this process last accepted it, on the road that authenticates it in the transaction.
    const known =
      store.dialect === "postgres" && lock === "shared" && !operation.precheck && stamp.kind === "API_KEY"
        ? this.knownKeys.get(stamp, envelope.organizationId)
        : undefined;
    // The stamp of a key authenticated in the transaction; undefined on the road before it.
    const knownStamp = known && stamp.kind === "API_KEY" ? stamp : undefined;
    let principal: Principal | undefined;
    if (!knownStamp) {
      try {
        principal = await this.authenticate(request, received);
      } catch (error) {
        return this.answerUnauthenticated(error, request, fingerprint, client);
      }
      await this.checkIpAllowlist(principal, client);
      mayWrite(principal, envelope.organizationId, operation);
      if (stamp.kind === "API_KEY") this.rememberKey(stamp, principal, envelope.organizationId);
      await this.count("activities", principal);
    } else {
      const verifying = performance.now();
      try {
        await checkApiKeySignature(knownStamp, raw);
      } catch (error) {
        return this.answerUnauthenticated(error, request, fingerprint, client);
      } finally {
        this.options.metrics?.step("authentication", verifying);
      }
      // The signature holds for the key, which this process accepted for the organization named (and
      // only keys of that very organization are remembered): the buckets are that credential's.
      await this.count("activities", { ...known!, organizationId: envelope.organizationId });
    }
    const precheck = await this.precheck(operation, envelope);
    try {
      return await this.inOrganization(envelope.organizationId, lock, rowLock, async (trx, now) => {
        let confirmation: Confirmation;
        if (knownStamp) {
          // The authority guessed: the organization named (a key of its parent reads its quorum itself).
          await readAhead(trx, [apiKeyReadAhead(knownStamp.publicKey), ...readsAhead(operation, envelope, envelope.organizationId)]);
          // Only refusals are carried out as such: a database error stays one (the batch learns it is lost).
          ({ principal, confirmation } = await apiKeyPrincipal(trx, knownStamp, envelope.organizationId, now).catch((error: unknown) => {
            throw error instanceof ServiceError ? new NotAuthenticated(error) : error;
          }));
          try {
            await this.checkIpAllowlist(principal, client);
            mayWrite(principal, envelope.organizationId, operation);
          } catch (error) {
            // Refused as before; the key's next request is checked before any lock again.
            this.knownKeys.refused(knownStamp, envelope.organizationId);
            throw error;
          }
          this.rememberKey(knownStamp, principal, envelope.organizationId);
        } else {
          // Built only where they are sent: on SQLite each step's statement costs no round trip. A
          // sign-up reads ahead too: it writes only its new organization's rows, which none of these read.
          if (rowLock === "shared" && store.dialect === "postgres")
            await readAhead(trx, [
              ...credentialReadAhead(principal!),
              // The authority: the requester's organization (a parent's, when it acts in a sub-organization).
              ...readsAhead(operation, envelope, principal!.organizationId),
            ]);
          confirmation = await confirmCredential(trx, principal!, now);
        }
        // Assigned above on either road; TypeScript cannot follow it into this closure.
        const requester = principal!;
        const { row, vote, subject } = draftActivity(operation, request, requester, fingerprint, now, precheck, context?.requestId);
        const deciding = performance.now();
        const decided = await authorize(trx, subject);
        const { authorization, authentication } = await demandAuthentication(trx, subject, requester, decided, confirmation);
        this.options.metrics?.step("decision", deciding);
        const execution = await this.execute(trx, authorization, { subject, activityId: row.id, requester, precheck, context });
        const secretResults = operation.secretResults;
        const recorded = await record(
          trx,
          this.options.store.dialect,
          { base: row, stored: false, vote, authorization, execution, secretResults, precheck },
          now,
        );
        if (authentication) await saveAuthentication(trx, recorded, authentication, now);
        return this.publish(
          trx,
          {
            recorded,
            announce: true,
            line: "activity",
            fields: { userId: requester.userId, outcome: authorization.outcome },
            messagesQueued: !!operation.queuesMessages && recorded.status === "ACTIVITY_STATUS_COMPLETED",
            broadcastsQueued: !!operation.queuesBroadcasts && recorded.status === "ACTIVITY_STATUS_COMPLETED",
            decision: authorization.outcome,
            answer: () => answerOf(recorded, execution, secretResults),
            context,
          },
          now,
        );
      });
    } catch (error) {
      if (error instanceof NotAuthenticated) {
        this.knownKeys.refused(knownStamp!, envelope.organizationId);
        return this.answerUnauthenticated(error.reason, request, fingerprint, client);
      }
      // The fingerprint is the idempotency key, kept unique by the database rather than looked up
      // first (a round trip every activity would pay for the sake of retries): a retry's transaction
      // fails on insert, is rolled back whole, and is answered with the activity already recorded.
      if (!isDuplicateFingerprint(error)) throw error;
      // Read inside a write transaction: on SQLite the first may still be in the batch being committed.
      const existing = await this.options.store.transact("shared", (trx) =>
        trx.selectFrom("activities").selectAll().where("fingerprint", "=", fingerprint).executeTakeFirstOrThrow(),
      );
      const retry = answerRetry(existing, operation, principal!.userId);
      if (retry.kind === "refused") throw retry.error;
      return respond(retry.activity);
    }
  }

  /**
   * Remembers (or refreshes) an API key just accepted for `organizationId` when its writes there are
   * refused by no operation's rules (not a parent's key, a read-only session's or a recovery
   * credential): the road in the transaction is for keys its checks will let through. Any other is
   * forgotten.
   */
  private rememberKey(stamp: ApiKeyStamp, principal: Principal, organizationId: string): void {
    const { credentialId, userId, organizationParentId } = principal;
    if (writesFreely(principal, organizationId))
      this.knownKeys.accepted(stamp, organizationId, { credentialId, userId, organizationParentId });
    else this.knownKeys.refused(stamp, organizationId);
  }

  /**
   * Step count (services/rate-limits.ts): the request against the buckets of its credential, of the
   * credential's sub-organization and of its top-level organization; refused (429 REQUEST_RATE_LIMITED)
   * when one is empty. Only once the signature is known to hold and the credential to be the
   * organization's (authenticated, or accepted before by this process), so that nobody can spend
   * another's buckets with a forged stamp or a key of their own; and before anything is locked, read
   * for the operation, sent to a network or recorded.
   */
  private async count(kind: RequestClass, requester: Requester): Promise<void> {
    await this.options.rateLimits?.charge(kind, requester);
  }

  /** Step authenticate: who stamped the request (auth/authenticate.ts checks the stamp and the credential). */
  private async authenticate(request: SubmitRequest, received: number): Promise<Principal> {
    const { store, env, metrics } = this.options;
    const started = performance.now();
    try {
      if (request.stamp.kind === "ATTESTED")
        return await authenticateAttested(store.reader, request.stamp, request.raw, request.envelope.organizationId, received, env);
      return await verifyStamp(store.reader, request.stamp, request.raw, request.envelope.organizationId, received, env.webauthn);
    } finally {
      metrics?.step("authentication", started);
    }
  }

  /**
   * Step authenticate, for an activity whose stamp was refused (`refusal`): a retry is answered from
   * the audit log when its stamp verifies with the key that made the original request, even if that
   * request removed the key (rotating one's own key is common). Only then is the log consulted: a
   * retry by a key that still works is found on insert (record).
   */
  private async answerUnauthenticated(
    refusal: unknown,
    request: SubmitRequest,
    fingerprint: string,
    client: string | undefined,
  ): Promise<PipelineResponse> {
    const { store, env } = this.options;
    const earlier = await store.reader.selectFrom("activities").selectAll().where("fingerprint", "=", fingerprint).executeTakeFirst();
    const first = earlier && (JSON.parse(earlier.votes) as StoredVote[])[0];
    if (
      !earlier ||
      request.stamp.kind === "ATTESTED" ||
      !(await stampVerifiesWith(request.stamp, request.raw, first?.publicKey, env.webauthn))
    )
      throw refusal;
    // The key may be gone or expired, but the lists it was held to still stand between the audit log
    // and an address they refuse.
    if (first && first.credentialType !== "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR") {
      const owner = await this.credentialOrganization(first, earlier.organization_id);
      await enforceIpAllowlist(store.reader, owner, first.credentialId, client);
      const parentKey = await readParentKeyLists(store.reader, owner, first.publicKey, curveOfCredential(first.credentialType));
      if (parentKey) applyIpAllowlists(parentKey.lists, parentKey.organizationId, parentKey.apiKeyId, client);
    }
    return respond(earlier);
  }

  /**
   * Step IP allowlist: a request an API key stamped is refused (IP_NOT_ALLOWED) unless the allowlists
   * of the key's organization let its client address in (auth/ip-allowlists.ts). It runs as soon as the
   * key is known, before anything is locked, recorded or changed: a refused request leaves no activity.
   */
  private async checkIpAllowlist(principal: Principal, client: string | undefined): Promise<void> {
    if (!heldToIpAllowlists(principal)) return;
    const db = this.options.store.reader;
    // A read-only session a passkey opened names the passkey, which has no list of its own.
    // So does an attested stamp's key, which is no stored credential.
    const passkey = principal.credentialType === "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR";
    const listed = passkey || principal.attestedMethod ? ORGANIZATION_LIST : principal.credentialId;
    // An API key's stamp brought its lists along (read with the key, in one statement).
    if (principal.ipAllowlists && listed === principal.credentialId)
      applyIpAllowlists(principal.ipAllowlists, principal.organizationId, listed, client);
    else await enforceIpAllowlist(db, principal.organizationId, listed, client);
    // Key material that is also the parent organization's API key is held to that key's lists too
    // (auth/ip-allowlists.ts, ParentKeyLists); a passkey's key signs no API-key stamp.
    if (passkey) return;
    const parentKey =
      principal.parentKey !== undefined
        ? principal.parentKey
        : await readParentKeyLists(db, principal.organizationId, principal.publicKey, curveOfCredential(principal.credentialType));
    if (parentKey) applyIpAllowlists(parentKey.lists, parentKey.organizationId, parentKey.apiKeyId, client);
  }

  /**
   * The organization whose lists hold the API key that cast `vote` in organization `named`, which may
   * be a parent's key acting in a sub-organization, and may have been deleted since: the key's own
   * organization while it exists (expired or not), else its user's, else (both gone) the organization
   * named when it is top-level and its parent when not, the only ones with lists a key acting there
   * can have been held to.
   */
  private async credentialOrganization(vote: StoredVote, named: string): Promise<string> {
    const db = this.options.store.reader;
    const key = await db.selectFrom("api_keys").select("organization_id").where("id", "=", vote.credentialId).executeTakeFirst();
    if (key) return key.organization_id;
    const user = await db.selectFrom("users").select("organization_id").where("id", "=", vote.userId).executeTakeFirst();
    if (user) return user.organization_id;
    const organization = await db.selectFrom("organizations").select("parent_organization_id").where("id", "=", named).executeTakeFirst();
    return organization?.parent_organization_id ?? named;
  }

  /** Step precheck: the operation's network checks and its reads of committed rows, run before the
   * organization's lock is taken (on the reader, which no write holds up). */
  private async precheck(
    operation: ActivityOperation,
    envelope: Pick<Envelope, "parameters" | "type" | "organizationId">,
  ): Promise<Precheck> {
    if (!operation.precheck) return { kind: "passed", prepared: undefined };
    const committed = { db: this.options.store.reader, organizationId: envelope.organizationId };
    return operation.precheck(envelope.parameters, this.options.env, envelope.type, committed).then(
      (prepared) => ({ kind: "passed", prepared }) as const,
      (error: unknown) => {
        // The database's unavailability is no outcome of the activity's: nothing is recorded.
        if (isLostConnection(error)) throw error;
        return { kind: "failed", error: error ?? new Error("precheck failed") } as const;
      },
    );
  }

  /** Runs `work` in one transaction holding the organization's lock, with the clock read under it,
   * so an organization's activities are timestamped in the order they are applied (those holding it
   * shared — signatures, sign-ups — run side by side and may commit in another order among
   * themselves). `lock` is the transaction's kind (shared: a batch's; exclusive: one of its own),
   * `rowLock` how it holds the organization's row on PostgreSQL (a sign-up: exclusive, shared).
   * `work` returns the response to send once the transaction has committed. */
  private async inOrganization<M extends LockMode>(
    organizationId: string,
    lock: M,
    rowLock: LockMode,
    work: (trx: WriteTx<M>, now: number) => Promise<PipelineResponse | (() => PipelineResponse)>,
  ): Promise<PipelineResponse> {
    const { store, metrics } = this.options;
    // Waiting for the lock includes waiting to join a write transaction (SQLite: the readers-writer
    // lock of group-commit.ts is the organization's lock); the commit, from the end of the work to
    // the transaction's durable commit.
    const asked = performance.now();
    let worked = 0;
    try {
      const outcome = await store.transact(lock, async (trx) => {
        await lockOrganization(trx, store.dialect, organizationId, rowLock);
        metrics?.step("organization_lock", asked);
        const answer = await work(trx, this.clock());
        worked = performance.now();
        return answer;
      });
      metrics?.step("commit", worked);
      return typeof outcome === "function" ? outcome() : outcome;
    } catch (error) {
      // A shared transaction rolled back, or the database lost (services/database-outages.ts).
      throw outageError(error) ?? error;
    }
  }

  /**
   * Step execute: carries out the authorization. An allowed activity runs its operation (unless its
   * precheck failed) inside a savepoint, followed by the root-quorum safety check; a failure rolls
   * back to the savepoint, then the operation's afterFailure runs.
   */
  private async execute(trx: Tx, authorization: Authorization, run: Run): Promise<Execution> {
    if (authorization.kind === "refused") return { kind: "failed", error: authorization.error };
    if (authorization.kind === "waiting") return { kind: "pending" };
    if (authorization.kind === "rejected") return { kind: "rejected" };
    if (authorization.kind === "authenticating") return { kind: "authenticating" };
    const { subject, activityId } = run;
    if (run.precheck?.kind === "failed") return { kind: "failed", error: this.asServiceError(run.precheck.error, activityId, run.context) };
    const { store, env } = this.options;
    const ctx = {
      trx,
      dialect: store.dialect,
      organizationId: subject.organizationId,
      activityId,
      principal: run.requester,
      now: subject.now,
      env,
    };
    // An operation that writes nothing has nothing to undo: it runs without a savepoint (two round
    // trips fewer on PostgreSQL for every signature). One that writes holds its transaction alone.
    const undoable = !subject.operation.leavesOrganizationUnchanged;
    const started = performance.now();
    const savepoint = undoable ? await controlled(trx).savepoint("operation").execute() : undefined;
    try {
      const prepared = run.precheck?.kind === "passed" ? run.precheck.prepared : undefined;
      const result = await subject.operation.execute(ctx, subject.parameters, subject.type, prepared);
      // An activity that only adds a new organization (a sign-up) leaves its own organization's root
      // quorum as it was; the new one's is checked where it is made.
      if (undoable && !subject.operation.addsOnlyNewOrganization) await assertRootQuorumReachable(trx, subject.organizationId);
      await savepoint?.releaseSavepoint("operation").execute();
      return { kind: "completed", result };
    } catch (error) {
      // The database's unavailability is no failure of the operation's: the transaction is lost.
      if (isLostConnection(error)) throw error;
      await savepoint?.rollbackToSavepoint("operation").execute();
      const failure = this.asServiceError(error, activityId, run.context);
      await subject.operation.afterFailure?.(ctx, subject.parameters);
      return { kind: "failed", error: failure };
    } finally {
      this.options.metrics?.step("execution", started);
    }
  }

  /**
   * Step publish: in the transaction, the webhook event (the outbox commits with the record) and the
   * log line; once committed, the dispatcher and the courier are told, and the answer is rendered.
   */
  private async publish(trx: Tx, publication: Publication, now: number): Promise<() => PipelineResponse> {
    const { recorded } = publication;
    const queued = publication.announce ? await enqueueActivityEvent(trx, recorded, () => renderActivity(recorded), now) : 0;
    (publication.context?.log ?? this.options.logger).info(
      {
        activityId: recorded.id,
        organizationId: recorded.organization_id,
        type: recorded.type,
        status: recorded.status,
        ...publication.fields,
        ...failureOf(recorded),
      },
      publication.line,
    );
    return () => {
      if (queued) this.options.onWebhookEventsQueued?.();
      if (publication.messagesQueued) this.options.onMessagesQueued?.();
      if (publication.broadcastsQueued) this.options.onBroadcastsQueued?.();
      // A final activity is appended to its organization's transparency log after its commit, by the
      // sequencer (services/log-sequencer.ts): its transaction writes nothing for the log.
      if (isFinal(recorded.status)) this.options.onFinalActivity?.();
      const { metrics } = this.options;
      if (metrics) {
        if (publication.announce) metrics.activity(recorded.type, recorded.status);
        if (publication.decision) metrics.decision(publication.decision);
      }
      return publication.answer();
    };
  }

  /**
   * approve_activity / reject_activity: adds the caller's vote to the pending activity with that
   * fingerprint and decides it again. The answer is that activity as it now stands, so a client
   * reads the result of an activity its approval completed from the approval's response.
   */
  private async vote(
    operation: VoteOperation,
    request: SubmitRequest,
    received: number,
    client?: string,
    context?: RequestContext,
  ): Promise<PipelineResponse> {
    const { envelope } = request;
    const principal = await this.authenticate(request, received);
    await this.checkIpAllowlist(principal, client);
    mayWrite(principal, envelope.organizationId);
    // Votes have buckets of their own: a flood of activities that spent the organization's leaves
    // the votes that decide what waits (and the root quorum's, through its reserve) a way through.
    await this.count("votes", principal);
    const fingerprint = String(envelope.parameters.fingerprint ?? "");
    const precheck =
      operation.selection === "VOTE_SELECTION_APPROVED" ? await this.precheckPending(envelope.organizationId, fingerprint) : undefined;
    return this.inOrganization(envelope.organizationId, "exclusive", "exclusive", async (trx, now) => {
      await confirmCredential(trx, principal, now);
      const row = await trx
        .selectFrom("activities")
        .selectAll()
        .where("organization_id", "=", envelope.organizationId)
        .where("fingerprint", "=", fingerprint)
        .executeTakeFirst();
      if (!row)
        throw serviceError("ACTIVITY_NOT_FOUND", `no activity of organization ${envelope.organizationId} has fingerprint ${fingerprint}`);
      if (principal.sessionProfileId && !(await voteWithinScope(trx, principal.sessionProfileId, envelope.type, row.organization_id, now)))
        throw serviceError(
          "SESSION_SCOPE_DENIED",
          `${envelope.type} by user ${principal.userId} is not allowed: outside the scope of session profile ${principal.sessionProfileId}, which the stamping session key was issued with`,
        );
      // An attested stamp proves a step of its requester's MFA (or withdraws it); it is no credential
      // to vote with, nor one whose rejection the root quorum could count (liveCredentialIds).
      if (principal.attestedMethod && (row.status !== "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED" || row.user_id !== principal.userId))
        throw attestedStampNotAccepted();
      if (row.status === "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED")
        return this.authenticateFurther(trx, operation, envelope.type, row, principal, request.raw, precheck, now, context);
      const votes = JSON.parse(row.votes) as StoredVote[];
      const ballot = ballotOn(row, votes, principal, operation.selection, request.raw, now);
      if (ballot.kind === "answered") return { status: 200, body: { activity: renderActivity(row) } };
      // An approval decides on what its own precheck read; a rejection on what the request's did.
      const asFound = pendingSubject(row, votes, principal, now, precheck ? preparedBy(precheck) : preparedOf(row));
      const target = asFound.operation;
      if (ballot.kind === "new" && !(await mayVote(trx, asFound, ballot.vote, envelope.type))) {
        throw serviceError(
          "VOTE_NOT_ALLOWED",
          `user ${principal.userId} may not vote on activity ${row.id}: not in the root quorum, and not named by the consensus of any policy in force for it`,
        );
      }
      // An approver's MFA policy holds their vote back until their approvals have proven its steps.
      if (
        ballot.kind === "new" &&
        operation.selection === "VOTE_SELECTION_APPROVED" &&
        !(await approverAuthenticated(trx, asFound, row, principal, proofOf(principal, envelope.type, now), now))
      )
        return { status: 200, body: { activity: { ...renderActivity(row), status: "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED" } } };
      const subject = ballot.kind === "new" ? { ...asFound, votes: [...votes, ballot.vote] } : asFound;
      const deciding = performance.now();
      const { authorization, authentication } = await authorizeVote(trx, subject, row, operation.selection, now);
      this.options.metrics?.step("decision", deciding);
      const requester = requesterOf(votes[0]!, row.organization_id);
      const execution = await this.execute(trx, authorization, { subject, activityId: row.id, requester, precheck, context });
      const base = { ...row, votes: JSON.stringify(subject.votes), updated_at: now };
      const entry = { base, stored: true, vote: ballot.vote, authorization, execution, secretResults: target.secretResults, precheck };
      const recorded = await record(trx, this.options.store.dialect, entry, now);
      if (authentication) await replaceAuthentication(trx, recorded, authentication, now);
      return this.publish(
        trx,
        {
          recorded,
          // Receivers hear of every change of an activity's status, not of votes that change nothing.
          announce: recorded.status !== "ACTIVITY_STATUS_CONSENSUS_NEEDED",
          line: "vote",
          fields: { userId: principal.userId, vote: operation.selection },
          // An approval that ran a message-sending activity queued its message, as a submit would.
          messagesQueued: !!target.queuesMessages && recorded.status === "ACTIVITY_STATUS_COMPLETED",
          broadcastsQueued: !!target.queuesBroadcasts && recorded.status === "ACTIVITY_STATUS_COMPLETED",
          decision: authorization.outcome,
          answer: () => ({ status: 200, body: { activity: renderActivity(recorded) } }),
          context,
        },
        now,
      );
    });
  }

  /**
   * A vote on an activity waiting for its requester's authentication (activities/mfa.ts): the
   * requester's approval proves one more step, and once every step is proven the activity is decided
   * again (policies may have changed meanwhile) and runs, or waits for approvals, or fails, as a
   * submitted one would. The requester may withdraw it and the root quorum reject it (REJECTED); an
   * approval once the request's own credential is gone fails it.
   */
  private async authenticateFurther(
    trx: OpenTx,
    operation: VoteOperation,
    voteType: string,
    row: ActivitiesTable,
    principal: Principal,
    raw: Buffer,
    precheck: Precheck | undefined,
    now: number,
    context?: RequestContext,
  ): Promise<PipelineResponse | (() => PipelineResponse)> {
    const votes = JSON.parse(row.votes) as StoredVote[];
    const subject = pendingSubject(row, votes, principal, now, precheck ? preparedBy(precheck) : {});
    const cast = voteOf(principal, row.id, operation.selection, raw.toString("utf8"), now);
    const outcome = await voteOnWaiting(trx, subject, row, principal, cast, proofOf(principal, voteType, now), now);
    if (outcome.kind === "repeated") return { status: 200, body: { activity: renderActivity(row) } };
    const target = subject.operation;
    const deciding = performance.now();
    const { authorization, authentication }: { authorization: Authorization; authentication?: Authentication } =
      outcome.kind === "satisfied"
        ? await decideAgain(trx, subject, row, votes[0]!, now)
        : outcome.kind === "rejected"
          ? { authorization: { kind: "rejected", outcome: "OUTCOME_REJECTED", verdicts: [] } }
          : outcome.kind === "orphaned"
            ? { authorization: { kind: "refused", outcome: "OUTCOME_DENY_IMPLICIT", verdicts: [], error: outcome.error } }
            : { authorization: { kind: "authenticating", outcome: "OUTCOME_REQUIRES_AUTHENTICATORS", verdicts: [] } };
    this.options.metrics?.step("decision", deciding);
    const requester = requesterOf(votes[0]!, row.organization_id);
    const execution = await this.execute(trx, authorization, { subject, activityId: row.id, requester, precheck, context });
    // A rejection is kept among the votes (who withdrew or rejected it); a proof is kept with the
    // authentication it proves (activity_authentications), the vote recorded being the request's.
    const rejection = operation.selection === "VOTE_SELECTION_REJECTED";
    const base = { ...row, updated_at: now, ...(rejection ? { votes: JSON.stringify([...votes, cast]) } : {}) };
    const vote = rejection ? cast : votes[0]!;
    const entry = { base, stored: true, vote, authorization, execution, secretResults: target.secretResults, precheck };
    const recorded = await record(trx, this.options.store.dialect, entry, now);
    if (authentication) await replaceAuthentication(trx, recorded, authentication, now);
    return this.publish(
      trx,
      {
        recorded,
        announce: recorded.status !== row.status,
        line: "vote",
        fields: { userId: principal.userId, vote: operation.selection, waitingVote: outcome.kind },
        messagesQueued: !!target.queuesMessages && recorded.status === "ACTIVITY_STATUS_COMPLETED",
        broadcastsQueued: !!target.queuesBroadcasts && recorded.status === "ACTIVITY_STATUS_COMPLETED",
        decision: authorization.outcome,
        answer: () => ({ status: 200, body: { activity: renderActivity(recorded) } }),
        context,
      },
      now,
    );
  }

  /**
   * Step precheck for an approval, which may run the activity: the pending activity's precheck, run on
   * its recorded parameters before the lock is taken, so the node is read afresh (fees, nonce,
   * blockhash as they are at approval) and never under the lock. Read from committed rows: the
   * transaction finds the activity again and decides whether it is still pending.
   */
  private async precheckPending(organizationId: string, fingerprint: string): Promise<Precheck | undefined> {
    const row = await this.options.store.reader
      .selectFrom("activities")
      .select(["type", "intent", "votes", "status"])
      .where("organization_id", "=", organizationId)
      .where("fingerprint", "=", fingerprint)
      .executeTakeFirst();
    if (row?.status !== "ACTIVITY_STATUS_CONSENSUS_NEEDED" && row?.status !== "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED") return undefined;
    const target = operationByActivityType.get(row.type);
    if (target?.kind !== "activity" || !target.precheck) return undefined;
    return this.precheck(target, { parameters: JSON.parse(intentText(row)), type: row.type, organizationId });
  }

  /**
   * POST /invitations/accept: the invitee registers an API key and stamps the request with it, so the
   * stamp proves they hold the key the new user gets. Under the organization's lock the invitation is
   * turned into its user (operations/organizations/invitations.ts), and the acceptance is recorded as
   * an ACTIVITY_TYPE_ACCEPT_INVITATION_V2 activity of the new user (the audit log and webhooks see it;
   * its intent and vote never hold the token). A refusal changes nothing and records nothing.
   */
  async acceptInvitation(raw: Buffer, headers: Headers, client?: string, context?: RequestContext): Promise<PipelineResponse> {
    const stamp = readStamp(headers);
    const acceptance = readAcceptance(parseBody(raw));
    const { publicKey } = acceptance.apiKey;
    if (stamp.kind !== "API_KEY" || stamp.publicKey.toLowerCase() !== publicKey || stamp.scheme !== "SIGNATURE_SCHEME_TK_API_P256")
      throw serviceError(
        "SIGNATURE_INVALID",
        "an invitation is accepted by a request stamped (X-Stamp, P-256) with the very key it registers",
      );
    if (!(await stampVerifiesWith(stamp, raw, publicKey, this.options.env.webauthn)))
      throw serviceError("SIGNATURE_INVALID", "the stamp does not verify over the exact body sent with apiKey.publicKey");
    const tokenHash = invitationTokenHash(acceptance.token);
    const { store, env } = this.options;
    const organizationId = await organizationOfInvitation(store.reader, tokenHash);
    // The key is not the organization's yet, so only the organization's own list can apply to it,
    // and the lists of its parent's API key when the key is that too.
    await enforceIpAllowlist(store.reader, organizationId, ORGANIZATION_LIST, client);
    const parentKey = await readParentKeyLists(store.reader, organizationId, publicKey, "API_KEY_CURVE_P256");
    if (parentKey) applyIpAllowlists(parentKey.lists, parentKey.organizationId, parentKey.apiKeyId, client);
    return this.inOrganization(organizationId, "exclusive", "exclusive", async (trx, now) => {
      const activityId = newId();
      const pending: Principal = {
        organizationId,
        userId: "",
        credentialType: "CREDENTIAL_TYPE_API_KEY_P256",
        credentialId: "",
        publicKey,
        scheme: stamp.scheme,
        signature: stamp.signature,
        userName: "",
        userEmail: null,
      };
      const ctx = { trx, dialect: store.dialect, organizationId, activityId, principal: pending, now, env };
      const accepted = await acceptInvitation(ctx, acceptance, tokenHash);
      const invitee: Principal = {
        ...pending,
        userId: accepted.userId,
        credentialId: accepted.apiKeyId,
        userName: accepted.userName,
        userEmail: accepted.userEmail,
      };
      const row: ActivitiesTable = {
        id: activityId,
        organization_id: organizationId,
        type: ActivityTypes.ACTIVITY_TYPE_ACCEPT_INVITATION_V2,
        status: "ACTIVITY_STATUS_COMPLETED",
        intent: JSON.stringify({ invitationId: accepted.invitationId, userId: accepted.userId, apiKey: acceptance.apiKey }),
        result: JSON.stringify({ invitationId: accepted.invitationId, userId: accepted.userId }),
        failure: null,
        // The signed body holds the token: the vote keeps the signature, not the message.
        votes: JSON.stringify([voteOf(invitee, activityId, "VOTE_SELECTION_APPROVED", "", now)]),
        fingerprint: fingerprintOf(raw),
        timestamp_ms: String(now),
        user_id: accepted.userId,
        prepared: null,
        created_at: now,
        updated_at: now,
        request_id: context?.requestId ?? null,
      };
      await insertActivity(trx, row);
      const answer = { organizationId, userId: accepted.userId, invitationId: accepted.invitationId };
      return this.publish(
        trx,
        {
          recorded: row,
          announce: true,
          line: "activity",
          fields: { userId: accepted.userId, invitationId: accepted.invitationId },
          messagesQueued: false,
          broadcastsQueued: false,
          answer: () => ({ status: 200, body: answer }),
          context,
        },
        now,
      );
    });
  }

  /** An error the caller may see: a ServiceError as it is; anything else becomes INTERNAL, and its
   * cause goes to the operator's log only (it may quote data the caller should not see). */
  private asServiceError(error: unknown, activityId: string, context?: RequestContext): ServiceError {
    if (error instanceof ServiceError) return error;
    (context?.log ?? this.options.logger).error({ err: error, activityId }, "activity failed with an internal error");
    return serviceError("INTERNAL", `internal error while executing activity ${activityId}`);
  }

  /** The caller may vote on a pending activity it has not voted on, if mayVote says so. */
  private async votingRights(row: ActivitiesTable, principal: Principal, now: number): Promise<VotingRights> {
    const none = { canApprove: false, canReject: false };
    // A parent organization's credential reads a sub-organization's activities but never votes; a
    // read-only session never does.
    if (principal.sessionType === "SESSION_TYPE_READ_ONLY" || principal.sessionKind === RECOVERY) return none;
    if (row.status !== "ACTIVITY_STATUS_CONSENSUS_NEEDED" || principal.organizationId !== row.organization_id) return none;
    const votes = JSON.parse(row.votes) as StoredVote[];
    const operation = operationByActivityType.get(row.type);
    if (votes.some((v) => v.userId === principal.userId) || operation?.kind !== "activity") return none;
    const db = this.options.store.reader;
    const subject = pendingSubject(row, votes, undefined, now, preparedOf(row));
    const voter = {
      userId: principal.userId,
      credentialId: principal.credentialId,
      credentialType: principal.credentialType,
      publicKey: principal.publicKey,
    };
    // A session key issued with a profile votes only as far as its scope lets it (as vote() checks).
    const sessionProfileId = principal.sessionProfileId;
    const may = async (voteType: string) =>
      (!sessionProfileId || (await voteWithinScope(db, sessionProfileId, voteType, row.organization_id, now))) &&
      (await mayVote(db, subject, voter, voteType));
    return {
      canApprove: await may(ActivityTypes.ACTIVITY_TYPE_APPROVE_ACTIVITY),
      canReject: await may(ActivityTypes.ACTIVITY_TYPE_REJECT_ACTIVITY),
    };
  }

  async query(operation: QueryOperation, raw: Buffer, headers: Headers, client?: string): Promise<PipelineResponse> {
    const { store, env } = this.options;
    const session = readOnlySessionHeader(headers);
    const stamp = session === undefined ? readStamp(headers) : undefined;
    const body = parseBody(raw);
    if (operation.own) validateOwnRequest(`query:${operation.name}`, operation.own.schema, body);
    else validateQueryRequest(operation.name, body, env.chains);
    const organizationId = (body as { organizationId: string }).organizationId;
    const now = this.clock();
    const maxAgeMs = this.options.queryCredentialMaxAgeMs ?? null;
    const principal: Principal = stamp
      ? await verifyStamp(store.reader, stamp, raw, organizationId, now, env.webauthn, {
          subOrganizations: operation.resolvesSubOrganizations,
          apiKeyMaxAgeMs: maxAgeMs,
        })
      : await authenticateReadOnlySession(store.reader, session!, env.sessions.signer.verify, organizationId, now, maxAgeMs);
    await this.checkIpAllowlist(principal, client);
    if (principal.sessionKind === RECOVERY) throw recoveryOnly(principal);
    await this.count("queries", principal);
    // Authentication already decided who may read: every user of the organization and of its parent
    // (a sibling's or a child's credential never gets here, except a child's asking whoami).
    const votingRights = (activity: ActivitiesTable) => this.votingRights(activity, principal, now);
    const readSnapshot = <T>(work: (trx: Tx) => Promise<T>) => store.readSnapshot(work);
    const wouldBeAnswered = (request: WouldBeRequest) => {
      if (!this.options.dryRun) throw new Error("this pipeline was given no policy dry run");
      return this.options.dryRun(store, env.chains, organizationId, principal, request, now);
    };
    const result = await operation.run(
      {
        db: store.reader,
        readSnapshot,
        organizationId,
        principal,
        now,
        votingRights,
        chains: this.options.env.chains,
        transparencyLog: this.options.env.transparencyLog,
        wouldBeAnswered,
      },
      body,
    );
    if ("activity" in result) return { status: 200, body: result };
    // The spec's query envelope, served beside the top-level keys the clients read.
    const activity = {
      id: newId(),
      status: "ACTIVITY_STATUS_COMPLETED",
      type: "ACTIVITY_TYPE_UNKNOWN_V1",
      organizationId,
      timestampMs: String(now),
      result,
    };
    return { status: 200, body: { ...result, activity } };
  }
}
