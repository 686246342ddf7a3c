// The activity record: stored once per accepted submit request and kept for ever as the audit log.
// Rendered in both envelopes the clients and the spec read (shared/reference/compatibility.md).
import { sql } from "kysely";
import type { ActivitiesTable, PolicyEvaluationsTable } from "../../store/schema.js";
import { DuplicateFingerprint, type Db, type Dialect, type Tx } from "../../store/handles.js";
import { prepare, rowOfSlots, type Slots } from "../../store/prepared.js";
import { keysOf, type VotingRights } from "../../registry/registry.js";
import { timestamp } from "../resources.js";
import { newId } from "../../store/ids.js";
import { intentText } from "../../store/activity-intent.js";
import type { Principal } from "../../auth/authenticate.js";
import type { PolicyVerdict } from "../../policy/engine.js";
import { serviceError, type ErrorBody } from "../../errors.js";

export type ActivityStatus =
  | "ACTIVITY_STATUS_CREATED"
  | "ACTIVITY_STATUS_PENDING"
  | "ACTIVITY_STATUS_COMPLETED"
  | "ACTIVITY_STATUS_FAILED"
  | "ACTIVITY_STATUS_CONSENSUS_NEEDED"
  | "ACTIVITY_STATUS_REJECTED"
  | "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED";

export interface StoredVote {
  id: string;
  userId: string;
  /** Who the voter was when voting; the user may be deleted later, the audit log stays readable. */
  user: { userId: string; userName: string; userEmail?: string };
  activityId: string;
  selection: "VOTE_SELECTION_APPROVED" | "VOTE_SELECTION_REJECTED";
  message: string;
  publicKey: string;
  signature: string;
  scheme: string;
  createdAt: number;
  /** The API key or authenticator id that signed the vote, and its type (policies' `credentials`). */
  credentialId: string;
  credentialType: string;
  /** A passkey's WebAuthn credential id. */
  webauthnCredentialId?: string;
}

function keyed(keys: string[], value: unknown): Record<string, unknown> {
  return Object.fromEntries(keys.map((k) => [k, value]));
}

function renderVote(vote: StoredVote) {
  return {
    id: vote.id,
    userId: vote.userId,
    user: {
      ...vote.user,
      authenticators: [],
      apiKeys: [],
      userTags: [],
      oauthProviders: [],
      createdAt: timestamp(vote.createdAt),
      updatedAt: timestamp(vote.createdAt),
    },
    activityId: vote.activityId,
    selection: vote.selection,
    message: vote.message,
    publicKey: vote.publicKey,
    signature: vote.signature,
    scheme: vote.scheme,
    createdAt: timestamp(vote.createdAt),
  };
}

/** The activity object of the API, with the spec's nested `result.activity` beside the result key. */
export function renderActivity(row: ActivitiesTable, rights: VotingRights = { canApprove: false, canReject: false }) {
  const keys = keysOf(row.type);
  const votes = JSON.parse(row.votes) as StoredVote[];
  const intent = keyed(keys.intentKeys, JSON.parse(intentText(row, votes)));
  const resultBody = row.status === "ACTIVITY_STATUS_COMPLETED" ? keyed(keys.resultKeys, JSON.parse(row.result)) : {};
  const failure = row.failure ? (JSON.parse(row.failure) as ErrorBody) : undefined;
  return {
    id: row.id,
    organizationId: row.organization_id,
    status: row.status,
    type: row.type,
    intent,
    result: { ...resultBody, activity: { type: row.type, intent, result: resultBody } },
    votes: votes.map(renderVote),
    fingerprint: row.fingerprint,
    canApprove: rights.canApprove,
    canReject: rights.canReject,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
    timestampMs: row.timestamp_ms,
    ...(failure ? { failure } : {}),
  };
}

/** Every column of an activity row (the compiler checks the list is whole). */
const ACTIVITY_COLUMNS: Record<keyof ActivitiesTable, true> = {
  id: true,
  organization_id: true,
  type: true,
  status: true,
  intent: true,
  result: true,
  failure: true,
  votes: true,
  fingerprint: true,
  timestamp_ms: true,
  user_id: true,
  created_at: true,
  updated_at: true,
  prepared: true,
  request_id: true,
};

const activityInsert = prepare((db, slot: Slots<ActivitiesTable>) =>
  db.insertInto("activities").values(rowOfSlots(slot, ACTIVITY_COLUMNS)),
);

/** A new activity's row and its first policy evaluation's, as one statement's values. */
type ActivityWithEvaluation = ActivitiesTable & {
  evaluation_id: string;
  vote_id: string;
  outcome: string;
  evaluations: string;
  evaluated_at: number;
};

// PostgreSQL: both rows in one statement (a data-modifying WITH), one round trip fewer per activity.
// A fingerprint already recorded inserts neither (ON CONFLICT DO NOTHING: no error, which on
// PostgreSQL would abort the whole transaction — every activity of a shared one, group-commit.ts);
// the caller learns it from the count of rows written. The conflict names no arbiter: the
// fingerprint's is an exclusion constraint (migration 0035), which ON CONFLICT accepts only so; the
// one other constraint the row could meet, its id's key, holds a fresh UUIDv7.
const activityWithEvaluationInsert = prepare((db, slot: Slots<ActivityWithEvaluation>) =>
  db
    .with("activity", (db) =>
      db
        .insertInto("activities")
        .values(rowOfSlots(slot as Slots<ActivitiesTable>, ACTIVITY_COLUMNS))
        .onConflict((conflict) => conflict.doNothing())
        .returning(["id", "organization_id"]),
    )
    .insertInto("policy_evaluations")
    .columns(["id", "organization_id", "activity_id", "vote_id", "outcome", "evaluations", "created_at"])
    .expression((eb) =>
      eb.selectFrom("activity").select([
        // Values in a SELECT list have no column to take their type from: text unless cast.
        sql<string>`${slot("evaluation_id")}::text`.as("id"),
        "activity.organization_id",
        "activity.id",
        sql<string>`${slot("vote_id")}::text`.as("vote_id"),
        sql<string>`${slot("outcome")}::text`.as("outcome"),
        sql<string>`${slot("evaluations")}::text`.as("evaluations"),
        sql<number>`${slot("evaluated_at")}::bigint`.as("created_at"),
      ]),
    ),
);

/** What a stored activity row holds where a caller may have left a nullable column out. */
const storable = (row: ActivitiesTable): ActivitiesTable => ({
  ...row,
  failure: row.failure ?? null,
  user_id: row.user_id ?? null,
  prepared: row.prepared ?? null,
  request_id: row.request_id ?? null,
});

export async function insertActivity(trx: Tx, row: ActivitiesTable): Promise<void> {
  await activityInsert.run(trx, storable(row));
}

/** The requester of an activity as the operation sees it when the activity runs after approvals. */
export function requesterOf(firstVote: StoredVote, organizationId: string): Principal {
  return {
    organizationId,
    userId: firstVote.userId,
    credentialType: firstVote.credentialType as Principal["credentialType"],
    credentialId: firstVote.credentialId,
    publicKey: firstVote.publicKey,
    scheme: firstVote.scheme,
    signature: firstVote.signature,
    userName: firstVote.user.userName,
    userEmail: firstVote.user.userEmail ?? null,
    ...(firstVote.webauthnCredentialId ? { webauthnCredentialId: firstVote.webauthnCredentialId } : {}),
  };
}

const evaluationInsert = prepare((db, slot: Slots<PolicyEvaluationsTable>) =>
  db.insertInto("policy_evaluations").values(
    rowOfSlots(slot, {
      id: true,
      organization_id: true,
      activity_id: true,
      vote_id: true,
      outcome: true,
      evaluations: true,
      created_at: true,
    }),
  ),
);

/** The policy evaluation row of one vote on an activity. */
const evaluationRow = (activity: ActivitiesTable, vote: StoredVote, outcome: string, verdicts: PolicyVerdict[], now: number) => ({
  id: newId(),
  organization_id: activity.organization_id,
  activity_id: activity.id,
  vote_id: vote.id,
  outcome,
  evaluations: JSON.stringify(verdicts),
  created_at: now,
});

/** One row per vote: how the organization's policies judged the activity at that vote. */
export async function recordEvaluation(
  trx: Tx,
  activity: ActivitiesTable,
  vote: StoredVote,
  outcome: string,
  verdicts: PolicyVerdict[],
  now: number,
): Promise<void> {
  await evaluationInsert.run(trx, evaluationRow(activity, vote, outcome, verdicts, now));
}

/** A new activity and its first vote's policy evaluation (insertActivity, then recordEvaluation):
 * on PostgreSQL in one statement, a round trip fewer; on SQLite, where statements cost no round
 * trip and a WITH cannot insert, in two. */
export async function insertActivityWithEvaluation(
  trx: Tx,
  dialect: Dialect,
  activity: ActivitiesTable,
  vote: StoredVote,
  outcome: string,
  verdicts: PolicyVerdict[],
  now: number,
): Promise<void> {
  if (dialect === "sqlite") {
    await insertActivity(trx, activity);
    return recordEvaluation(trx, activity, vote, outcome, verdicts, now);
  }
  const evaluation = evaluationRow(activity, vote, outcome, verdicts, now);
  const { numAffectedRows } = await activityWithEvaluationInsert.run(trx, {
    ...storable(activity),
    evaluation_id: evaluation.id,
    vote_id: evaluation.vote_id,
    outcome: evaluation.outcome,
    evaluations: evaluation.evaluations,
    evaluated_at: evaluation.created_at,
  });
  if (numAffectedRows === 0n) throw new DuplicateFingerprint(activity.fingerprint);
}

export function renderPolicyEvaluation(row: PolicyEvaluationsTable) {
  return {
    id: row.id,
    activityId: row.activity_id,
    organizationId: row.organization_id,
    voteId: row.vote_id,
    outcome: row.outcome,
    policyEvaluations: JSON.parse(row.evaluations) as PolicyVerdict[],
    createdAt: timestamp(row.created_at),
  };
}

/** The organization's activity `activityId`, or ACTIVITY_NOT_FOUND (another organization's is as unknown). */
export async function requireActivity(db: Db | Tx, organizationId: string, activityId: string): Promise<ActivitiesTable> {
  const row = await db
    .selectFrom("activities")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", activityId)
    .executeTakeFirst();
  if (!row) throw serviceError("ACTIVITY_NOT_FOUND", `activity ${activityId} not found`);
  return row;
}
