// `sigil policy replay` (docs/policy-testing.md): a proposed set of policies judged against an
// organization's recorded activities. Each activity is decided again as it was submitted — its stored
// intent, its requester's approval, at the time it was recorded, with the policy context a submit
// builds (explainDecision, the one code path) — once on the organization's policies as they stand and
// once on the proposed ones, and every activity whose answer differs is reported with the policy that
// decided it. What the replay cannot rebuild (a wallet or key since deleted, a requester since
// removed) is reported with the activity rather than guessed.
import type { Db, Tx } from "../store/handles.js";
import type { ActivitiesTable } from "../store/schema.js";
import { intentText } from "../store/activity-intent.js";
import type { Effect, PolicySource } from "../policy/engine.js";
import { operationByActivityType } from "../operations/catalog.js";
import type { StoredVote } from "../operations/activities/records.js";
import { findSigner } from "../operations/wallets/signers.js";
import { decisionGrounds, type ActivitySubject } from "./authorization.js";
import { explainOn, policyNames, type Explanation, type Verdict } from "./policy-evaluation.js";

export type Change = "ALLOWED_TO_DENIED" | "DENIED_TO_ALLOWED" | "NOW_NEEDS_CONSENSUS" | "NOW_NEEDS_ROOT_QUORUM" | "NO_LONGER_WAITS";

export interface ReplayedActivity {
  activityId: string;
  type: string;
  /** When it was recorded (ms since the epoch): the time its policies are judged at. */
  createdAt: number;
  requesterId: string | null;
  /** The outcome its submit's policy evaluation recorded. */
  recordedOutcome: string | null;
  current: Verdict;
  proposed: Verdict;
  change: Change;
  /** The proposed policies that decided it, and the part of each that did; else what did (root quorum, …). */
  decidedBy: string;
  reason: string;
  /** What could not be rebuilt from the record (the decision may differ from what it would have been). */
  unavailable?: string[];
}

export interface NotReplayed {
  activityId: string;
  type: string;
  why: string;
}

export interface ReplayReport {
  organizationId: string;
  /** Activities read (the newest `last`). */
  activities: number;
  replayed: number;
  changed: ReplayedActivity[];
  notReplayed: NotReplayed[];
  summary: Record<Change, number> & {
    unchanged: number;
    /** Activities the current policies would now decide otherwise than their submit was decided
     * (policies, tags, the root quorum or the activity's resources changed since). */
    decidedOtherwiseToday: number;
    /** Changed activities with something that could not be rebuilt. */
    withUnavailableContext: number;
  };
}

export interface ProposedPolicies {
  policies: PolicySource[];
  names: ReadonlyMap<string, string>;
}

const policiesOf = async (db: Db | Tx, organizationId: string): Promise<PolicySource[]> =>
  (
    await db
      .selectFrom("policies")
      .select(["id", "effect", "condition", "consensus", "time"])
      .where("organization_id", "=", organizationId)
      .orderBy("created_at")
      .orderBy("id")
      .execute()
  ).map((r) => ({ ...r, effect: r.effect as Effect }));

function changeOf(current: Verdict, proposed: Verdict): Change | undefined {
  if (current === proposed) return undefined;
  if (proposed === "DENY") return "ALLOWED_TO_DENIED";
  if (proposed === "NEEDS_CONSENSUS") return "NOW_NEEDS_CONSENSUS";
  if (proposed === "NEEDS_ROOT_QUORUM") return "NOW_NEEDS_ROOT_QUORUM";
  return current === "DENY" ? "DENIED_TO_ALLOWED" : "NO_LONGER_WAITS";
}

function decidedByText(explanation: Explanation): string {
  const deciding = explanation.policyEvaluations.filter((p) => p.deciding);
  if (deciding.length) return deciding.map((p) => `${p.policyName ?? p.policyId} (${p.part})`).join(", ");
  return explanation.decidedBy;
}

/** Resources the intent names that are gone: the replay cannot show policies what they were. */
async function missingResources(db: Db | Tx, organizationId: string, parameters: Record<string, unknown>): Promise<string[]> {
  const missing: string[] = [];
  const walletId = parameters.walletId;
  if (typeof walletId === "string") {
    const wallet = await db
      .selectFrom("wallets")
      .select("id")
      .where("organization_id", "=", organizationId)
      .where("id", "=", walletId)
      .executeTakeFirst();
    if (!wallet) missing.push(`wallet ${walletId} no longer exists`);
  }
  const signWith = parameters.signWith ?? parameters.privateKeyId;
  if (typeof signWith === "string") {
    const found = await findSigner(db, organizationId, signWith).then(
      () => true,
      () => false,
    );
    if (!found) missing.push(`the key ${signWith} signed with no longer exists`);
  }
  return missing;
}

/**
 * Replays the newest `last` activities of `organizationId` on the organization's current policies and
 * on `proposed`. `db` is read only. `concurrency` activities are decided at once (reads pipelined on
 * PostgreSQL's reader; SQLite answers one at a time whatever it is).
 */
export async function replayActivities(
  db: Db,
  organizationId: string,
  proposed: ProposedPolicies,
  last: number,
  concurrency = 1,
): Promise<ReplayReport> {
  const rows: ActivitiesTable[] = await db
    .selectFrom("activities")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .orderBy("created_at", "desc")
    .orderBy("id", "desc")
    .limit(last)
    .execute();
  const current = await policiesOf(db, organizationId);
  const currentNames = await policyNames(db, organizationId);
  const recorded = new Map<string, string>();
  const users = new Map<string, string>();
  for (let i = 0; i < rows.length; i += 1000) {
    const chunk = rows.slice(i, i + 1000);
    const evaluations = await db
      .selectFrom("policy_evaluations")
      .select(["activity_id", "outcome", "created_at", "id"])
      .where(
        "activity_id",
        "in",
        chunk.map((r) => r.id),
      )
      .orderBy("created_at")
      .orderBy("id")
      .execute();
    for (const e of evaluations) if (!recorded.has(e.activity_id)) recorded.set(e.activity_id, e.outcome);
    const requesters = [...new Set(chunk.flatMap((r) => (r.user_id ? [r.user_id] : [])))];
    if (requesters.length) {
      const found = await db.selectFrom("users").select(["id", "organization_id"]).where("id", "in", requesters).execute();
      for (const u of found) users.set(u.id, u.organization_id);
    }
  }

  const changed: ReplayedActivity[] = [];
  const notReplayed: NotReplayed[] = [];
  let replayed = 0;
  let decidedOtherwiseToday = 0;
  const one = async (row: ActivitiesTable) => {
    const operation = operationByActivityType.get(row.type);
    if (operation?.kind !== "activity") {
      notReplayed.push({
        activityId: row.id,
        type: row.type,
        why: operation ? "a vote is not decided on its own" : `${row.type} is not an activity type this server decides`,
      });
      return;
    }
    const votes = JSON.parse(row.votes) as StoredVote[];
    const request = votes[0];
    if (!request || !row.user_id) {
      notReplayed.push({ activityId: row.id, type: row.type, why: "it records no requester (no request vote)" });
      return;
    }
    const parameters = JSON.parse(intentText(row, votes)) as Record<string, unknown>;
    const requesterOrganization = users.get(row.user_id);
    const subject: ActivitySubject = {
      organizationId: row.organization_id,
      type: row.type,
      operation,
      parameters,
      requesterId: row.user_id,
      // As submitted: the requester's approval alone, with the credential that made it taken as live then.
      votes: [request],
      now: row.created_at,
      confirmed: [request.credentialId],
      ...(requesterOrganization && requesterOrganization !== row.organization_id ? { authorityOrganizationId: requesterOrganization } : {}),
      ...(row.prepared !== null ? { prepared: JSON.parse(row.prepared) } : {}),
    };
    // Read once, decided twice: the grounds (root quorum, approvers, policy context) do not depend on the policies.
    const grounds = await decisionGrounds(db as unknown as Tx, subject);
    const today = await explainOn(grounds, current, currentNames);
    const wouldBe = await explainOn(grounds, proposed.policies, proposed.names);
    replayed += 1;
    const recordedOutcome = recorded.get(row.id) ?? null;
    if (recordedOutcome !== null && recordedOutcome !== today.outcome) decidedOtherwiseToday += 1;
    const change = changeOf(today.verdict, wouldBe.verdict);
    if (!change) return;
    const unavailable = [
      ...(requesterOrganization === undefined ? [`the requesting user ${row.user_id} no longer exists`] : []),
      ...(await missingResources(db, row.organization_id, parameters)),
    ];
    changed.push({
      activityId: row.id,
      type: row.type,
      createdAt: row.created_at,
      requesterId: row.user_id,
      recordedOutcome,
      current: today.verdict,
      proposed: wouldBe.verdict,
      change,
      decidedBy: decidedByText(wouldBe),
      reason: wouldBe.reason,
      ...(unavailable.length ? { unavailable } : {}),
    });
  };
  for (let i = 0; i < rows.length; i += concurrency) await Promise.all(rows.slice(i, i + concurrency).map(one));

  // Newest first, as read, whatever order the concurrent decisions finished in.
  const order = new Map(rows.map((r, i) => [r.id, i]));
  changed.sort((a, b) => order.get(a.activityId)! - order.get(b.activityId)!);
  notReplayed.sort((a, b) => order.get(a.activityId)! - order.get(b.activityId)!);
  const count = (c: Change) => changed.filter((a) => a.change === c).length;
  return {
    organizationId,
    activities: rows.length,
    replayed,
    changed,
    notReplayed,
    summary: {
      ALLOWED_TO_DENIED: count("ALLOWED_TO_DENIED"),
      DENIED_TO_ALLOWED: count("DENIED_TO_ALLOWED"),
      NOW_NEEDS_CONSENSUS: count("NOW_NEEDS_CONSENSUS"),
      NOW_NEEDS_ROOT_QUORUM: count("NOW_NEEDS_ROOT_QUORUM"),
      NO_LONGER_WAITS: count("NO_LONGER_WAITS"),
      unchanged: replayed - changed.length,
      decidedOtherwiseToday,
      withUnavailableContext: changed.filter((a) => a.unavailable).length,
    },
  };
}
