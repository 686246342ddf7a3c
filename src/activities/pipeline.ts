// The road every request walks (DESIGN.md, "One request, one path"):
//   submit: stamp ─► JSON ─► envelope schema ─► liveness ─► who (stamp check) ─► in one transaction
//           holding the organization's lock: may they? (root quorum, policies) ─► operation, or
//           wait for approvals, or refuse ─► quorum safety ─► activity record (its fingerprint is
//           unique: a retry is rolled back and answered with the first) and policy evaluation ─►
//           response envelope
//   vote:   the same up to "who", then in one transaction: find the pending activity ─► may they
//           vote? ─► add the vote ─► decide again (run it, keep waiting, or reject) ─► response
//   query:  stamp ─► JSON ─► schema ─► who (the organization, or its parent: both may read) ─► read
//           ─► response envelope
import type pino from "pino";
import type { OpenTx, Store, Tx } from "../store/database.js";
import { isDuplicateFingerprint, lockOrganization } from "../store/database.js";
import { BatchRolledBack } from "../store/group-commit.js";
import { ServiceError, serviceError, type ErrorBody } from "../errors.js";
import { readStamp, type Stamp } from "../auth/stamps.js";
import {
  authenticate,
  authenticateReadOnlySession,
  confirmCredential,
  readOnlySessionHeader,
  stampVerifiesWith,
  type Principal,
} from "../auth/authenticate.js";
import { sha256 } from "../crypto/keys.js";
import type { OperationEnvironment, QueryOperation, SubmitOperation, VoteOperation, VotingRights } from "../registry/registry.js";
import type { PolicyVerdict } from "../policy/engine.js";
import { swagger } from "../registry/registry.js";
import { checkRequestText, validateActivityRequest, validateQueryRequest } from "../registry/validation.js";
import { assertRootQuorumReachable } from "../operations/organizations/organizations.js";
import { newId } from "../operations/resources.js";
import { decideActivity, denialError, mayVote, stillApprovable, type ActivitySubject, type Decision } from "./authorization.js";
import { operationByActivityType } from "../operations/catalog.js";
import { insertActivity, recordEvaluation, renderActivity, requesterOf, type StoredVote } from "../operations/activities/records.js";
import type { ActivitiesTable } from "../store/schema.js";
import { enqueueActivityEvent } from "../operations/webhooks/webhooks.js";

export interface PipelineOptions {
  store: Store;
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
}

export interface PipelineResponse {
  status: number;
  body: unknown;
}

type Headers = Record<string, string | string[] | undefined>;

interface Envelope {
  type: string;
  timestampMs: string;
  organizationId: string;
  parameters: Record<string, unknown>;
}

// Fatal: bytes that are not UTF-8 are refused rather than read as U+FFFD, so the body kept in a vote
// is the very text the stamp signed.
const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/** The body as JSON whose every string may be stored by either database (checkRequestText). */
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
    throw serviceError("REQUEST_BODY_INVALID", `request body is not valid JSON: ${error instanceof Error ? error.message : ""}`);
  }
  checkRequestText(body);
  return body;
}

function removeSecrets(parameters: Record<string, unknown>, secrets: string[] | undefined): Record<string, unknown> {
  if (!secrets?.length) return parameters;
  return Object.fromEntries(Object.entries(parameters).map(([k, v]) => [k, secrets.includes(k) && v !== undefined ? "<redacted>" : v]));
}

/** Whether this request carries one of the operation's secret parameters (then neither its intent
 * nor its signed body is kept whole, and it cannot wait for approvals). */
const carriesSecrets = (operation: SubmitOperation, parameters: Record<string, unknown>) =>
  operation.kind === "activity" && !!operation.secretParameters?.some((name) => parameters?.[name] !== undefined);

/** A parent organization's credential reads its sub-organizations (authentication accepts it for
 * them) but writes only in its own organization — except the logins a parent's backend runs for its
 * sub-organizations' users (`parentMayRequest`: OTP, OAuth). */
function refuseParentWrites(principal: Principal, organizationId: string, operation?: SubmitOperation): void {
  if (principal.organizationId !== organizationId && !(operation?.kind === "activity" && operation.parentMayRequest)) {
    throw serviceError(
      "PARENT_ORGANIZATION_READ_ONLY",
      `the stamp's credential belongs to organization ${principal.organizationId}, the parent of ${organizationId}: a parent organization reads its sub-organizations but cannot write in them; use a credential of ${organizationId}`,
    );
  }
}

/** A read-only session's key reads; it neither submits activities nor votes. */
function refuseReadOnlySessions(principal: Principal): void {
  if (principal.sessionType === "SESSION_TYPE_READ_ONLY") {
    throw serviceError("READ_ONLY_SESSION", `API key ${principal.credentialId} belongs to a read-only session: it may only query`);
  }
}

export class Pipeline {
  private readonly clock: () => number;

  constructor(private readonly options: PipelineOptions) {
    this.clock = options.clock ?? Date.now;
  }

  private checkLiveness(timestampMs: string, now: number): void {
    if (!/^\d{1,16}$/.test(timestampMs))
      throw serviceError("TIMESTAMP_INVALID", `timestampMs must be milliseconds since the epoch as a string, got "${timestampMs}"`);
    const skew = Number(timestampMs) - now;
    if (Math.abs(skew) > this.options.timestampWindowMs) {
      const window = this.options.timestampWindowMs / 1000;
      throw serviceError(
        "TIMESTAMP_OUT_OF_RANGE",
        `timestampMs is ${Math.round(Math.abs(skew) / 1000)}s ${skew < 0 ? "in the past" : "in the future"}; requests must be within ${window}s of the server's clock`,
      );
    }
  }

  async submit(operation: SubmitOperation, raw: Buffer, headers: Headers): Promise<PipelineResponse> {
    const { store, env } = this.options;
    if (readOnlySessionHeader(headers) !== undefined)
      throw serviceError("READ_ONLY_SESSION", "a read-only session (X-Session) may only query: stamp activities with a key");
    const stamp = readStamp(headers);
    const body = parseBody(raw);
    const type = (body as { type?: unknown })?.type;
    if (typeof type !== "string") throw serviceError("REQUEST_INVALID", 'missing required field "type"');
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
    validateActivityRequest(type, body);
    const envelope = body as Envelope;
    const received = this.clock();
    this.checkLiveness(envelope.timestampMs, received);
    if (operation.kind === "vote") return this.vote(operation, envelope, raw, stamp, received);
    const fingerprint = sha256(raw).toString("hex");

    let principal: Principal;
    try {
      principal = await authenticate(store.reader, stamp, raw, envelope.organizationId, received, env.webauthn);
    } catch (error) {
      // A retry is answered from the audit log when its stamp verifies with the key that made the
      // original request, even if that request removed the key (rotating one's own key is common).
      // Only then is the log consulted: a retry by a key that still works is found on insert (below).
      const earlier = await store.reader.selectFrom("activities").selectAll().where("fingerprint", "=", fingerprint).executeTakeFirst();
      if (earlier && stampVerifiesWith(stamp, raw, (JSON.parse(earlier.votes) as StoredVote[])[0]?.publicKey, env.webauthn))
        return this.respond(earlier);
      throw error;
    }
    refuseParentWrites(principal, envelope.organizationId, operation);
    refuseReadOnlySessions(principal);
    const precheckFailure: unknown = operation.precheck
      ? await operation.precheck(envelope.parameters, env, type).then(
          () => undefined,
          (error: unknown) => error ?? new Error("precheck failed"),
        )
      : undefined;
    const lock = operation.leavesOrganizationUnchanged ? "shared" : "exclusive";
    try {
      return await this.inOrganization(envelope.organizationId, lock, async (trx, now) => {
        await confirmCredential(trx, principal, now);
        const activityId = newId();
        const intent = removeSecrets(operation.intentOf?.(envelope.parameters, type) ?? envelope.parameters, operation.secretParameters);
        // The vote keeps the signed body only when it holds nothing the intent had to leave out
        // (a secret parameter, or an identity token recorded as its claims).
        const bodyIsRecordable =
          !carriesSecrets(operation, envelope.parameters) &&
          (!operation.intentOf || JSON.stringify(intent) === JSON.stringify(envelope.parameters));
        const vote = this.castBy(principal, activityId, "VOTE_SELECTION_APPROVED", bodyIsRecordable ? raw.toString("utf8") : "", now);
        const row: ActivitiesTable = {
          id: activityId,
          organization_id: envelope.organizationId,
          type,
          status: "ACTIVITY_STATUS_CONSENSUS_NEEDED",
          intent: JSON.stringify(intent),
          result: "{}",
          failure: null,
          votes: JSON.stringify([vote]),
          fingerprint,
          timestamp_ms: envelope.timestampMs,
          user_id: principal.userId,
          created_at: now,
          updated_at: now,
        };
        const subject: ActivitySubject = {
          organizationId: envelope.organizationId,
          type,
          operation,
          parameters: envelope.parameters,
          requesterId: principal.userId,
          votes: [vote],
          now,
          confirmed: [principal.credentialId],
        };
        // A parent's backend logging in a sub-organization's user is governed by the parent's root
        // quorum and policies: the requester is one of the parent's users.
        if (principal.organizationId !== envelope.organizationId) subject.authorityOrganizationId = principal.organizationId;
        const decision = await decideActivity(trx, subject);
        const requesterResult = await this.apply(trx, decision, subject, row, principal, precheckFailure);
        await insertActivity(trx, row);
        await recordEvaluation(trx, row, vote, decision.outcome, decision.verdicts, now);
        const queued = await enqueueActivityEvent(trx, row, () => renderActivity(row), now);
        this.options.logger.info(
          {
            activityId,
            organizationId: row.organization_id,
            type,
            status: row.status,
            userId: principal.userId,
            outcome: decision.outcome,
            ...failureOf(row),
          },
          "activity",
        );
        return () => {
          if (queued) this.options.onWebhookEventsQueued?.();
          if (operation.queuesMessages && row.status === "ACTIVITY_STATUS_COMPLETED") this.options.onMessagesQueued?.();
          return this.respond(requesterResult ? { ...row, result: requesterResult } : row);
        };
      });
    } catch (error) {
      // The fingerprint is the idempotency key, kept unique by the database rather than looked up
      // first (a round trip every activity would pay for the sake of retries): a retry's transaction
      // fails on insert, is rolled back whole, and is answered with the activity already recorded.
      if (!isDuplicateFingerprint(error)) throw error;
      // Read inside a write transaction: on SQLite the first may still be in the batch being committed.
      const existing = await store.transact("shared", (trx) =>
        trx.selectFrom("activities").selectAll().where("fingerprint", "=", fingerprint).executeTakeFirstOrThrow(),
      );
      // A result that is a credential was shown once, to the first response; a retry cannot repeat it.
      if (operation.kind === "activity" && operation.secretResults?.length && existing.status === "ACTIVITY_STATUS_COMPLETED") {
        throw serviceError(
          "RESULT_NOT_REPEATABLE",
          `activity ${existing.id} already completed; its result is a credential shown only in the first response: send a new request (a new timestampMs) for another`,
        );
      }
      // The same bytes stamped by someone else are not a retry of theirs: say so rather than answer
      // with another user's activity as if it were the caller's success.
      if (existing.user_id !== principal.userId) {
        throw serviceError(
          "DUPLICATE_REQUEST",
          `an identical request body was already submitted by another user (activity ${existing.id}); change timestampMs to submit it yourself`,
        );
      }
      return this.respond(existing);
    }
  }

  /** Runs `work` in one transaction holding the organization's lock, with the clock read under it,
   * so an organization's activities are timestamped in the order they are applied (those holding it
   * shared — signatures — run side by side and may commit in another order among themselves).
   * `work` returns the response to send once the transaction has committed. */
  private async inOrganization(
    organizationId: string,
    lock: "exclusive" | "shared",
    work: (trx: OpenTx, now: number) => Promise<PipelineResponse | (() => PipelineResponse)>,
  ): Promise<PipelineResponse> {
    const { store } = this.options;
    try {
      const outcome = await store.transact(lock, async (trx) => {
        await lockOrganization(trx, store.dialect, organizationId, lock);
        return work(trx, this.clock());
      });
      return typeof outcome === "function" ? outcome() : outcome;
    } catch (error) {
      if (error instanceof BatchRolledBack)
        throw serviceError("TRANSACTION_ROLLED_BACK", `${error.message}; nothing of this request was kept: send it again`);
      throw error;
    }
  }

  /** A vote of `principal`, as stored in the activity's votes (who they were comes from authentication). */
  private castBy(principal: Principal, activityId: string, selection: StoredVote["selection"], message: string, now: number): StoredVote {
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

  /** Carries out a decision on the activity row: run it, keep it waiting for votes, or refuse it. */
  /** Returns the result as the requester may see it, when it differs from the one recorded. */
  private async apply(
    trx: OpenTx,
    decision: Decision,
    subject: ActivitySubject,
    row: ActivitiesTable,
    requester: Principal,
    precheckFailure?: unknown,
  ): Promise<string | void> {
    const { store, env } = this.options;
    const fail = (error: ServiceError) => {
      row.status = "ACTIVITY_STATUS_FAILED";
      row.failure = JSON.stringify(error.toBody());
    };
    if (decision.outcome === "OUTCOME_DENY_EXPLICIT" || decision.outcome === "OUTCOME_DENY_IMPLICIT")
      return fail(denialError(subject, decision));
    if (decision.outcome === "OUTCOME_REQUIRES_CONSENSUS") {
      // Its secret parameters are not stored, so it could not run later: it must be allowed now.
      if (carriesSecrets(subject.operation, subject.parameters))
        return fail(
          serviceError("CONSENSUS_NOT_SUPPORTED", `${subject.type} carries secrets and cannot wait for approvals: ${decision.reason}`),
        );
      // Its result would be a credential nobody receives (the approval's response is another's).
      if (subject.operation.secretResults?.length)
        return fail(
          serviceError("CONSENSUS_NOT_SUPPORTED", `${subject.type} returns a credential and cannot wait for approvals: ${decision.reason}`),
        );
      // Votes are cast in the activity's organization, where a parent's users cannot vote.
      if (subject.authorityOrganizationId)
        return fail(
          serviceError(
            "CONSENSUS_NOT_SUPPORTED",
            `${subject.type} requested by the parent organization cannot wait for approvals: ${decision.reason}`,
          ),
        );
      row.status = "ACTIVITY_STATUS_CONSENSUS_NEEDED";
      return;
    }
    if (precheckFailure) return fail(precheckFailure instanceof ServiceError ? precheckFailure : this.internal(precheckFailure, row.id));
    const ctx = {
      trx,
      dialect: store.dialect,
      organizationId: subject.organizationId,
      activityId: row.id,
      principal: requester,
      now: subject.now,
      env,
    };
    // An operation that writes nothing has nothing to undo: it runs without a savepoint (two round
    // trips fewer on PostgreSQL for every signature).
    const undoable = !subject.operation.leavesOrganizationUnchanged;
    const savepoint = undoable ? await trx.savepoint("operation").execute() : undefined;
    try {
      const result = await subject.operation.execute(ctx, subject.parameters, subject.type);
      if (undoable) await assertRootQuorumReachable(trx, subject.organizationId);
      await savepoint?.releaseSavepoint("operation").execute();
      row.status = "ACTIVITY_STATUS_COMPLETED";
      // A result that is itself a credential (a read-only session, a verification token) goes to the
      // requester in this response only: the audit log, other readers and webhooks get it redacted.
      const secrets = subject.operation.secretResults ?? [];
      row.result = JSON.stringify(
        secrets.length ? Object.fromEntries(Object.entries(result).map(([k, v]) => [k, secrets.includes(k) ? "<redacted>" : v])) : result,
      );
      if (secrets.length) return JSON.stringify(result);
    } catch (error) {
      await savepoint?.rollbackToSavepoint("operation").execute();
      fail(error instanceof ServiceError ? error : this.internal(error, row.id));
      await subject.operation.afterFailure?.(ctx, subject.parameters);
    }
  }

  /**
   * approve_activity / reject_activity: adds the caller's vote to the pending activity with that
   * fingerprint and decides it again. The answer is that activity as it now stands, so a client
   * reads the result of an activity its approval completed from the approval's response.
   */
  private async vote(operation: VoteOperation, envelope: Envelope, raw: Buffer, stamp: Stamp, received: number): Promise<PipelineResponse> {
    const { store, env } = this.options;
    const principal = await authenticate(store.reader, stamp, raw, envelope.organizationId, received, env.webauthn);
    refuseParentWrites(principal, envelope.organizationId);
    refuseReadOnlySessions(principal);
    const fingerprint = String(envelope.parameters.fingerprint ?? "");
    return this.inOrganization(envelope.organizationId, "exclusive", async (trx, now) => {
      await confirmCredential(trx, principal, now);
      const row = await trx
        .selectFrom("activities")
        .selectAll()
        .where("organization_id", "=", envelope.organizationId)
        .where("fingerprint", "=", fingerprint)
        .executeTakeFirst();
      if (!row)
        throw serviceError("ACTIVITY_NOT_FOUND", `no activity of organization ${envelope.organizationId} has fingerprint ${fingerprint}`);
      const votes = JSON.parse(row.votes) as StoredVote[];
      const mine = votes.find((v) => v.userId === principal.userId);
      const pending = row.status === "ACTIVITY_STATUS_CONSENSUS_NEEDED";
      if (mine && mine.selection !== operation.selection)
        throw serviceError(
          "VOTE_ALREADY_CAST",
          `user ${principal.userId} already voted ${mine.selection} on activity ${row.id}; a vote cannot be changed`,
        );
      // Voting again the same way is a retry, answered with the activity as it stands.
      if (mine && !(pending && mine.selection === "VOTE_SELECTION_APPROVED"))
        return { status: 200, body: { activity: renderActivity(row) } };
      if (!pending)
        throw serviceError("ACTIVITY_NOT_PENDING", `activity ${row.id} is ${row.status}; only activities waiting for consensus take votes`);
      const target = operationByActivityType.get(row.type);
      if (target?.kind !== "activity") throw new Error(`pending activity ${row.id} has type ${row.type}, which no operation runs`);
      const subject: ActivitySubject = {
        organizationId: row.organization_id,
        type: row.type,
        operation: target,
        parameters: JSON.parse(row.intent),
        requesterId: row.user_id ?? "",
        votes,
        now,
        confirmed: [principal.credentialId],
      };

      // Repeating an approval decides the activity again without a new vote: what it waits for may
      // have been met by something other than a vote (a tag given to an approver, a new policy).
      const vote = mine ?? this.castBy(principal, row.id, operation.selection, raw.toString("utf8"), now);
      if (!mine) {
        if (!(await mayVote(trx, subject, vote, envelope.type))) {
          throw serviceError(
            "VOTE_NOT_ALLOWED",
            `user ${principal.userId} may not vote on activity ${row.id}: not in the root quorum, and not named by the consensus of any policy in force for it`,
          );
        }
        subject.votes = [...votes, vote];
      }
      row.votes = JSON.stringify(subject.votes);
      row.updated_at = now;
      let outcome: string;
      let verdicts: PolicyVerdict[] = [];
      if (operation.selection === "VOTE_SELECTION_APPROVED") {
        const decision = await decideActivity(trx, subject);
        await this.apply(trx, decision, subject, row, requesterOf(votes[0]!, row.organization_id));
        ({ outcome, verdicts } = decision);
      } else if (await stillApprovable(trx, subject)) {
        outcome = "OUTCOME_REQUIRES_CONSENSUS";
      } else {
        row.status = "ACTIVITY_STATUS_REJECTED";
        outcome = "OUTCOME_REJECTED";
      }
      await trx
        .updateTable("activities")
        .set({ status: row.status, result: row.result, failure: row.failure, votes: row.votes, updated_at: row.updated_at })
        .where("id", "=", row.id)
        .execute();
      await recordEvaluation(trx, row, vote, outcome, verdicts, now);
      // Receivers hear of every change of an activity's status, not of votes that change nothing.
      const queued =
        row.status !== "ACTIVITY_STATUS_CONSENSUS_NEEDED" ? await enqueueActivityEvent(trx, row, () => renderActivity(row), now) : 0;
      this.options.logger.info(
        {
          activityId: row.id,
          organizationId: row.organization_id,
          type: row.type,
          status: row.status,
          userId: principal.userId,
          vote: operation.selection,
          ...failureOf(row),
        },
        "vote",
      );
      return () => {
        if (queued) this.options.onWebhookEventsQueued?.();
        return { status: 200, body: { activity: renderActivity(row) } };
      };
    });
  }

  private internal(error: unknown, activityId: string): ServiceError {
    // The cause goes to the operator's log only: it may quote data the caller should not see.
    this.options.logger.error({ err: error, activityId }, "activity failed with an internal error");
    return serviceError("INTERNAL", `internal error while executing activity ${activityId}`);
  }

  /** A completed activity is a 200 with the activity; a failed one is the error it failed with. */
  private respond(row: ActivitiesTable): PipelineResponse {
    if (row.status === "ACTIVITY_STATUS_FAILED" && row.failure) {
      const failure = ServiceError.fromBody(JSON.parse(row.failure));
      return { status: failure.httpStatus, body: JSON.parse(row.failure) };
    }
    return { status: 200, body: { activity: renderActivity(row) } };
  }

  /** The caller may vote on a pending activity it has not voted on, if mayVote says so. */
  private async votingRights(row: ActivitiesTable, principal: Principal, now: number): Promise<VotingRights> {
    const none = { canApprove: false, canReject: false };
    // A parent organization's credential reads a sub-organization's activities but never votes; a
    // read-only session never does.
    if (principal.sessionType === "SESSION_TYPE_READ_ONLY") return none;
    if (row.status !== "ACTIVITY_STATUS_CONSENSUS_NEEDED" || principal.organizationId !== row.organization_id) return none;
    const votes = JSON.parse(row.votes) as StoredVote[];
    const operation = operationByActivityType.get(row.type);
    if (votes.some((v) => v.userId === principal.userId) || operation?.kind !== "activity") return none;
    const db = this.options.store.reader;
    const subject: ActivitySubject = {
      organizationId: row.organization_id,
      type: row.type,
      operation,
      parameters: JSON.parse(row.intent),
      requesterId: row.user_id ?? "",
      votes,
      now,
    };
    const voter = {
      userId: principal.userId,
      credentialId: principal.credentialId,
      credentialType: principal.credentialType,
      publicKey: principal.publicKey,
    };
    return {
      canApprove: await mayVote(db, subject, voter, "ACTIVITY_TYPE_APPROVE_ACTIVITY"),
      canReject: await mayVote(db, subject, voter, "ACTIVITY_TYPE_REJECT_ACTIVITY"),
    };
  }

  async query(operation: QueryOperation, raw: Buffer, headers: Headers): Promise<PipelineResponse> {
    const { store, env } = this.options;
    const session = readOnlySessionHeader(headers);
    const stamp = session === undefined ? readStamp(headers) : undefined;
    const body = parseBody(raw);
    validateQueryRequest(operation.name, body);
    const organizationId = (body as { organizationId: string }).organizationId;
    const now = this.clock();
    const maxAgeMs = this.options.queryCredentialMaxAgeMs ?? null;
    const principal: Principal = stamp
      ? await authenticate(store.reader, stamp, raw, organizationId, now, env.webauthn, {
          subOrganizations: operation.resolvesSubOrganizations,
          apiKeyMaxAgeMs: maxAgeMs,
        })
      : await authenticateReadOnlySession(store.reader, session!, env.sessions.signer.verify, organizationId, now, maxAgeMs);
    // Authentication already decided who may read: every user of the organization and of its parent
    // (a sibling's or a child's credential never gets here, except a child's asking whoami).
    const votingRights = (activity: ActivitiesTable) => this.votingRights(activity, principal, now);
    const readSnapshot = <T>(work: (trx: Tx) => Promise<T>) => store.readSnapshot(work);
    const result = await operation.run({ db: store.reader, readSnapshot, organizationId, principal, now, votingRights }, body);
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

/**
 * What the log line of a failed activity adds: the code and message it failed with, exactly as the
 * requester and the audit log see them (error messages never carry secrets, so neither does this).
 */
function failureOf(row: ActivitiesTable): { errorCode?: string; error?: string } {
  if (row.status !== "ACTIVITY_STATUS_FAILED" || !row.failure) return {};
  const failure = JSON.parse(row.failure) as ErrorBody;
  return { errorCode: failure.details?.[0]?.turnkeyErrorCode, error: failure.message };
}
