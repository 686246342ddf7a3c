// The road every request walks (DESIGN.md, "One request, one path"):
//   submit: stamp ─► JSON ─► envelope schema ─► liveness ─► who (stamp check) ─► in one transaction
//           holding the organization's lock: idempotency ─► may they? ─► operation ─► quorum safety
//           ─► activity record ─► response envelope
//   query:  stamp ─► JSON ─► schema ─► who ─► may they read? ─► read ─► response envelope
import type pino from "pino";
import type { Store } from "../store/database.js";
import { lockOrganization } from "../store/database.js";
import { ServiceError, invalidArgument } from "../errors.js";
import { readStamp } from "../auth/stamps.js";
import { authenticate, confirmCredential, stampVerifiesWith, type Principal } from "../auth/authenticate.js";
import { sha256 } from "../crypto/keys.js";
import type { ActivityOperation, OperationEnvironment, QueryOperation } from "../operations/registry.js";
import { swagger } from "../operations/registry.js";
import { validateActivityRequest, validateQueryRequest } from "../operations/validation.js";
import { assertRootQuorumReachable } from "../operations/organizations.js";
import { newId } from "../operations/resources.js";
import { authorizeActivity, authorizeQuery } from "./authorization.js";
import { operationByActivityType } from "./catalog.js";
import { insertActivity, renderActivity, type StoredVote } from "./records.js";
import type { ActivitiesTable } from "../store/schema.js";

export interface PipelineOptions {
  store: Store;
  /** A request's timestampMs must lie within this many ms of now, either side. */
  timestampWindowMs: number;
  env: OperationEnvironment;
  logger: pino.Logger;
  clock?: () => number;
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

function parseBody(raw: Buffer): unknown {
  if (raw.length === 0) throw invalidArgument("request body is empty: send a JSON object", "REQUEST_BODY_INVALID");
  try {
    return JSON.parse(raw.toString("utf8"));
  } catch (error) {
    throw invalidArgument(`request body is not valid JSON: ${error instanceof Error ? error.message : ""}`, "REQUEST_BODY_INVALID");
  }
}

function removeSecrets(parameters: Record<string, unknown>, secrets: string[] | undefined): Record<string, unknown> {
  if (!secrets?.length) return parameters;
  return Object.fromEntries(Object.entries(parameters).map(([k, v]) => [k, secrets.includes(k) ? "<redacted>" : v]));
}

export class Pipeline {
  private readonly clock: () => number;

  constructor(private readonly options: PipelineOptions) {
    this.clock = options.clock ?? Date.now;
  }

  private checkLiveness(timestampMs: string, now: number): void {
    if (!/^\d{1,16}$/.test(timestampMs)) throw invalidArgument(`timestampMs must be milliseconds since the epoch as a string, got "${timestampMs}"`, "TIMESTAMP_INVALID");
    const skew = Number(timestampMs) - now;
    if (Math.abs(skew) > this.options.timestampWindowMs) {
      const window = this.options.timestampWindowMs / 1000;
      throw invalidArgument(
        `timestampMs is ${Math.round(Math.abs(skew) / 1000)}s ${skew < 0 ? "in the past" : "in the future"}; requests must be within ${window}s of the server's clock`,
        "TIMESTAMP_OUT_OF_RANGE",
      );
    }
  }

  async submit(operation: ActivityOperation, raw: Buffer, headers: Headers): Promise<PipelineResponse> {
    const { store, env } = this.options;
    const stamp = readStamp(headers);
    const body = parseBody(raw);
    const type = (body as { type?: unknown })?.type;
    if (typeof type !== "string") throw invalidArgument('missing required field "type"');
    if (!operation.types.includes(type)) {
      const owner = operationByActivityType.get(type);
      if (owner) throw invalidArgument(`${type} is not accepted by /public/v1/submit/${operation.name}; send it to /public/v1/submit/${owner.name}`, "ACTIVITY_TYPE_MISMATCH");
      if (swagger.activityTypes[type]) throw invalidArgument(`activity type ${type} is not supported by this server`, "ACTIVITY_TYPE_UNSUPPORTED");
      throw invalidArgument(`unknown activity type ${type}; /public/v1/submit/${operation.name} accepts ${operation.types.join(", ")}`, "ACTIVITY_TYPE_UNKNOWN");
    }
    validateActivityRequest(type, body);
    const envelope = body as Envelope;
    const received = this.clock();
    this.checkLiveness(envelope.timestampMs, received);
    const fingerprint = sha256(raw).toString("hex");

    // A retry is answered from the audit log when its stamp verifies with the key that made the
    // original request, even if that request removed the key (rotating one's own key is common).
    const earlier = await store.db.selectFrom("activities").selectAll().where("fingerprint", "=", fingerprint).executeTakeFirst();
    if (earlier && stampVerifiesWith(stamp, raw, (JSON.parse(earlier.votes) as StoredVote[])[0]?.publicKey, env.webauthn)) {
      return this.respond(earlier);
    }

    const principal = await authenticate(store.db, stamp, raw, envelope.organizationId, received, env.webauthn);
    const trx = await store.db.startTransaction().execute();
    try {
      await lockOrganization(trx, store.dialect, envelope.organizationId);
      // Read the clock under the lock, so an organization's activities are timestamped in the order
      // they are applied even when a request waited for the lock.
      const now = this.clock();
      // Authentication read outside the lock; an activity that removed this credential may have
      // committed since. Checked again under the lock so a revoked key can never act.
      await confirmCredential(trx, principal, now);
      const existing = await trx.selectFrom("activities").selectAll().where("fingerprint", "=", fingerprint).executeTakeFirst();
      if (existing) {
        await trx.commit().execute();
        // The same bytes stamped by someone else are not a retry of theirs: say so rather than
        // answer with another user's activity as if it were the caller's success.
        if (existing.user_id !== principal.userId) {
          throw new ServiceError("AlreadyExists", "DUPLICATE_REQUEST", `an identical request body was already submitted by another user (activity ${existing.id}); change timestampMs to submit it yourself`);
        }
        return this.respond(existing);
      }

      const activityId = newId();
      const voter = await trx.selectFrom("users").select(["id", "name", "email"]).where("id", "=", principal.userId).executeTakeFirstOrThrow();
      const vote: StoredVote = {
        id: newId(),
        userId: principal.userId,
        user: { userId: voter.id, userName: voter.name, ...(voter.email ? { userEmail: voter.email } : {}) },
        activityId,
        selection: "VOTE_SELECTION_APPROVED",
        message: operation.secretParameters?.length ? "" : raw.toString("utf8"),
        publicKey: principal.publicKey,
        signature: principal.signature,
        scheme: principal.scheme,
        createdAt: now,
      };
      const row: ActivitiesTable = {
        id: activityId,
        organization_id: envelope.organizationId,
        type,
        status: "ACTIVITY_STATUS_COMPLETED",
        intent: JSON.stringify(removeSecrets(envelope.parameters, operation.secretParameters)),
        result: "{}",
        failure: null,
        votes: JSON.stringify([vote]),
        fingerprint,
        timestamp_ms: envelope.timestampMs,
        user_id: principal.userId,
        created_at: now,
        updated_at: now,
      };

      const decision = await authorizeActivity(trx, principal, envelope.organizationId, operation);
      if (!decision.allowed) {
        row.status = "ACTIVITY_STATUS_FAILED";
        row.failure = JSON.stringify(decision.error.toBody());
      } else {
        const savepoint = await trx.savepoint("operation").execute();
        try {
          const result = await operation.execute({ trx, dialect: store.dialect, organizationId: envelope.organizationId, activityId, principal, now, env }, envelope.parameters, type);
          await assertRootQuorumReachable(trx, envelope.organizationId);
          await savepoint.releaseSavepoint("operation").execute();
          row.result = JSON.stringify(result);
        } catch (error) {
          await savepoint.rollbackToSavepoint("operation").execute();
          const failure = error instanceof ServiceError ? error : this.internal(error, activityId);
          row.status = "ACTIVITY_STATUS_FAILED";
          row.failure = JSON.stringify(failure.toBody());
        }
      }
      await insertActivity(trx, row);
      await trx.commit().execute();
      this.options.logger.info({ activityId, organizationId: row.organization_id, type, status: row.status, userId: principal.userId }, "activity");
      return this.respond(row);
    } catch (error) {
      await trx.rollback().execute().catch(() => undefined);
      throw error;
    }
  }

  private internal(error: unknown, activityId: string): ServiceError {
    // The cause goes to the operator's log only: it may quote data the caller should not see.
    this.options.logger.error({ err: error, activityId }, "activity failed with an internal error");
    return new ServiceError("Internal", "INTERNAL", `internal error while executing activity ${activityId}`);
  }

  /** A completed activity is a 200 with the activity; a failed one is the error it failed with. */
  private respond(row: ActivitiesTable): PipelineResponse {
    if (row.status === "ACTIVITY_STATUS_FAILED" && row.failure) {
      const failure = ServiceError.fromBody(JSON.parse(row.failure));
      return { status: failure.httpStatus, body: JSON.parse(row.failure) };
    }
    return { status: 200, body: { activity: renderActivity(row) } };
  }

  async query(operation: QueryOperation, raw: Buffer, headers: Headers): Promise<PipelineResponse> {
    const { store, env } = this.options;
    const stamp = readStamp(headers);
    const body = parseBody(raw);
    validateQueryRequest(operation.name, body);
    const organizationId = (body as { organizationId: string }).organizationId;
    const now = this.clock();
    const principal: Principal = await authenticate(store.db, stamp, raw, organizationId, now, env.webauthn);
    const decision = await authorizeQuery(store.db, principal, organizationId);
    if (!decision.allowed) throw decision.error;
    const result = await operation.run({ db: store.db, organizationId, principal, now }, body);
    if ("activity" in result) return { status: 200, body: result };
    // The spec's query envelope, served beside the top-level keys the clients read.
    const activity = { id: newId(), status: "ACTIVITY_STATUS_COMPLETED", type: "ACTIVITY_TYPE_UNKNOWN_V1", organizationId, timestampMs: String(now), result };
    return { status: 200, body: { ...result, activity } };
  }
}
