// Activities (the audit log, filtered and paged through the API) and one activity in detail, with
// the Approve and Reject buttons for an activity waiting for the signed-in user's vote.
import { useEffect, useState } from "preact/hooks";
import { type Session, query, submit } from "./api";
import { ErrorMessage, Json, Loading, Page, Pager, type Route, href, shortStatus, shortType, useLoad, when } from "./ui";

export const STATUSES = [
  "ACTIVITY_STATUS_CREATED",
  "ACTIVITY_STATUS_PENDING",
  "ACTIVITY_STATUS_COMPLETED",
  "ACTIVITY_STATUS_FAILED",
  "ACTIVITY_STATUS_CONSENSUS_NEEDED",
  "ACTIVITY_STATUS_AUTHENTICATORS_NEEDED",
  "ACTIVITY_STATUS_REJECTED",
];

export interface Activity {
  id: string;
  status: string;
  type: string;
  fingerprint: string;
  intent: Record<string, unknown>;
  result: Record<string, unknown>;
  failure?: { message?: string };
  votes: Array<{
    id: string;
    userId: string;
    user?: { userName?: string };
    selection: string;
    scheme: string;
    publicKey: string;
    createdAt: { seconds?: string };
  }>;
  canApprove: boolean;
  canReject: boolean;
  createdAt: { seconds?: string };
  updatedAt: { seconds?: string };
}

const PAGE_SIZE = 20;
const WATCH_INTERVAL_MS = 3000;
/** Filters the API has no parameter for (user, dates) are applied to pages of this many, read one
 * after the other until a page of the console is full or this many were read. */
const SCAN_PAGES = 10;

/** The requester: the first vote is the requester's own approval. */
const requesterOf = (a: Activity) => a.votes[0]?.userId;

interface ActivityFilters {
  status?: string;
  type?: string;
  user?: string;
  from?: string;
  to?: string;
}

/**
 * A page of the activity log, newest first. The API's cursors read away from the cursor (`after`:
 * older ones, nearest first; `before`: the newer ones nearest the cursor), so a page is read in that
 * direction and shown newest first. Filters the API lacks are applied to what is read.
 */
async function loadActivities(session: Session, filters: ActivityFilters, cursor: { after?: string; before?: string }) {
  const local = !!(filters.user || filters.from || filters.to);
  const fromSec = filters.from ? Date.parse(`${filters.from}T00:00:00Z`) / 1000 : undefined;
  const toSec = filters.to ? Date.parse(`${filters.to}T23:59:59Z`) / 1000 : undefined;
  const keep = (a: Activity) => {
    const at = Number(a.createdAt?.seconds ?? 0);
    return (
      (!filters.user || requesterOf(a) === filters.user) && (fromSec === undefined || at >= fromSec) && (toSec === undefined || at <= toSec)
    );
  };
  const towardsNewer = !!cursor.before;
  const limit = local ? 100 : PAGE_SIZE + 1;
  let position = cursor.before ?? cursor.after;
  const matched: Activity[] = [];
  /** Whether the log may go on past what was read, in the reading direction. */
  let beyond = false;
  for (let page = 0; page < (local ? SCAN_PAGES : 1); page++) {
    const { activities } = await query<{ activities: Activity[] }>(session, "list_activities", {
      ...(filters.status ? { filterByStatus: [filters.status] } : {}),
      ...(filters.type ? { filterByType: [filters.type] } : {}),
      paginationOptions: { limit: String(limit), ...(position ? { [towardsNewer ? "before" : "after"]: position } : {}) },
    });
    // Nearest the cursor first.
    const read = towardsNewer ? [...activities].reverse() : activities;
    for (const a of read) if (keep(a)) matched.push(a);
    beyond = activities.length === limit;
    const last = read[read.length - 1];
    if (!beyond || !last || matched.length > PAGE_SIZE) break;
    // Past the date range in the reading direction, nothing further can match.
    const at = Number(last.createdAt?.seconds ?? 0);
    if ((!towardsNewer && fromSec !== undefined && at < fromSec) || (towardsNewer && toSec !== undefined && at > toSec)) {
      beyond = false;
      break;
    }
    position = last.id;
  }
  if (matched.length > PAGE_SIZE) beyond = true;
  const page = matched.slice(0, PAGE_SIZE);
  return {
    activities: towardsNewer ? page.reverse() : page,
    newer: towardsNewer ? beyond : !!cursor.after,
    older: towardsNewer ? true : beyond,
  };
}

export function ActivityList({ session, route }: { session: Session; route: Route }) {
  const p = route.params;
  const filters: ActivityFilters = {
    status: p.get("status") ?? undefined,
    type: p.get("type") ?? undefined,
    user: p.get("user") ?? undefined,
    from: p.get("from") ?? undefined,
    to: p.get("to") ?? undefined,
  };
  const cursor = { after: p.get("after") ?? undefined, before: p.get("before") ?? undefined };
  const loaded = useLoad(() => loadActivities(session, filters, cursor), p.toString());
  const users = useLoad(() => query<{ users: Array<{ userId: string; userName: string }> }>(session, "list_users"), "users");
  const onFilter = (event: Event) => {
    event.preventDefault();
    const form = new FormData(event.currentTarget as HTMLFormElement);
    location.hash = href("activities", Object.fromEntries([...form.entries()].map(([k, v]) => [k, String(v)])));
  };
  const activities = loaded.data?.activities ?? [];
  return (
    <Page title="Activities">
      <form class="filters" onSubmit={onFilter} aria-label="Filter activities">
        <label>
          Status
          <select name="status" value={filters.status ?? ""}>
            <option value="">Any</option>
            {STATUSES.map((s) => (
              <option value={s} key={s}>
                {shortStatus(s)}
              </option>
            ))}
          </select>
        </label>
        <label>
          Type
          <input name="type" value={filters.type ?? ""} placeholder="ACTIVITY_TYPE_…" />
        </label>
        <label>
          User
          <select name="user" value={filters.user ?? ""}>
            <option value="">Anyone</option>
            {(users.data?.users ?? []).map((u) => (
              <option value={u.userId} key={u.userId}>
                {u.userName}
              </option>
            ))}
          </select>
        </label>
        <label>
          From
          <input type="date" name="from" value={filters.from ?? ""} />
        </label>
        <label>
          To
          <input type="date" name="to" value={filters.to ?? ""} />
        </label>
        <button type="submit">Filter</button>
      </form>
      <Loading loaded={loaded} />
      {loaded.data && activities.length === 0 ? <p>No activity matches.</p> : null}
      {activities.length ? <ActivityTable activities={activities} /> : null}
      <Pager
        names={["Newer", "Older"]}
        back={loaded.data?.newer && activities.length ? href("activities", { ...filters, before: activities[0].id }) : undefined}
        forward={
          loaded.data?.older && activities.length
            ? href("activities", { ...filters, after: activities[activities.length - 1].id })
            : undefined
        }
      />
    </Page>
  );
}

export function ActivityTable({ activities }: { activities: Activity[] }) {
  return (
    <div class="scroll">
      <table class="stack">
        <thead>
          <tr>
            <th scope="col">Type</th>
            <th scope="col">Status</th>
            <th scope="col">Requested by</th>
            <th scope="col">Created</th>
          </tr>
        </thead>
        <tbody>
          {activities.map((a) => (
            <tr key={a.id}>
              <td data-label="Type">
                <a href={href(`activities/${a.id}`)}>{shortType(a.type)}</a>
              </td>
              <td data-label="Status">
                <span class={`status ${shortStatus(a.status).toLowerCase()}`}>{shortStatus(a.status)}</span>
              </td>
              <td data-label="Requested by">{a.votes[0]?.user?.userName ?? a.votes[0]?.userId ?? ""}</td>
              <td data-label="Created">{when(a.createdAt)}</td>
            </tr>
          ))}
        </tbody>
      </table>
    </div>
  );
}

interface PolicyEvaluations {
  policyEvaluations: Array<{ id: string; voteId: string; policyEvaluations: Array<{ policyId: string; outcome: string }> }>;
}

/** "After alice's approval": which vote an evaluation followed, as a person reads it. */
function voteName(activity: Activity, voteId: string): string {
  const vote = activity.votes.find((v) => v.id === voteId);
  if (!vote) return `After vote ${voteId}`;
  const who = vote.user?.userName ?? vote.userId;
  return `After ${who}'s ${vote.selection === "VOTE_SELECTION_REJECTED" ? "rejection" : "approval"}`;
}

export function ActivityDetail({ session, id }: { session: Session; id: string }) {
  const loaded = useLoad(async () => {
    const [{ activity }, evaluations, policies] = await Promise.all([
      query<{ activity: Activity }>(session, "get_activity", { activityId: id }),
      query<PolicyEvaluations>(session, "get_policy_evaluations", { activityId: id }),
      query<{ policies: Array<{ policyId: string; policyName: string }> }>(session, "list_policies"),
    ]);
    return { activity, evaluations, policyNames: new Map(policies.policies.map((p) => [p.policyId, p.policyName])) };
  }, id);
  const [voted, setVoted] = useState<Activity | undefined>();
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<unknown>();
  const activity = voted ?? loaded.data?.activity;
  const vote = async (operation: "approve_activity" | "reject_activity") => {
    if (!activity) return;
    setBusy(true);
    setError(undefined);
    try {
      const type = operation === "approve_activity" ? "ACTIVITY_TYPE_APPROVE_ACTIVITY" : "ACTIVITY_TYPE_REJECT_ACTIVITY";
      const answer = await submit<{ activity: Activity }>(session, operation, type, { fingerprint: activity.fingerprint });
      // The answer is the activity voted on, as the vote left it (run, if it completed the consensus).
      setVoted(answer.activity);
      loaded.reload();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  const waiting = activity?.status === "ACTIVITY_STATUS_CONSENSUS_NEEDED";
  // A waiting activity is read again every few seconds, so the page shows it complete when others
  // approve it. Only with an API key: with a passkey every read is an assertion the person would be
  // asked for, so there the page has Refresh instead.
  const watch = waiting && session.stamper.kind === "API key";
  useEffect(() => {
    if (!watch) return;
    const timer = setInterval(() => {
      setVoted(undefined);
      loaded.reload();
    }, WATCH_INTERVAL_MS);
    return () => clearInterval(timer);
  }, [watch, loaded.reload]);
  if (!activity) return <Page title="Activity">{<Loading loaded={loaded} />}</Page>;
  return (
    <Page title={shortType(activity.type)}>
      <dl class="facts">
        <dt>Status</dt>
        <dd>
          <output class={`status ${shortStatus(activity.status).toLowerCase()}`} aria-label="Status">
            {shortStatus(activity.status)}
          </output>
        </dd>
        <dt>Requested by</dt>
        <dd>{activity.votes[0]?.user?.userName ?? activity.votes[0]?.userId ?? ""}</dd>
        <dt>Activity id</dt>
        <dd>
          <code>{activity.id}</code>
        </dd>
        <dt>Fingerprint</dt>
        <dd>
          <code>{activity.fingerprint}</code>
        </dd>
        <dt>Created</dt>
        <dd>{when(activity.createdAt)}</dd>
        <dt>Updated</dt>
        <dd>{when(activity.updatedAt)}</dd>
        {waiting ? (
          <>
            <dt>You may approve</dt>
            <dd>{activity.canApprove ? "yes" : "no"}</dd>
            <dt>You may reject</dt>
            <dd>{activity.canReject ? "yes" : "no"}</dd>
          </>
        ) : null}
      </dl>
      {waiting && (activity.canApprove || activity.canReject) ? (
        <div class="actions">
          <button type="button" class="primary" disabled={busy || !activity.canApprove} onClick={() => vote("approve_activity")}>
            Approve
          </button>
          <button type="button" class="danger" disabled={busy || !activity.canReject} onClick={() => vote("reject_activity")}>
            Reject
          </button>
        </div>
      ) : null}
      {waiting ? (
        <button
          type="button"
          onClick={() => {
            setVoted(undefined);
            loaded.reload();
          }}
        >
          Refresh
        </button>
      ) : null}
      <ErrorMessage error={error} />
      {activity.failure ? (
        <>
          <h2>Failure</h2>
          <p class="error">{activity.failure.message}</p>
        </>
      ) : null}
      <h2>Votes</h2>
      <div class="scroll">
        <table>
          <thead>
            <tr>
              <th scope="col">User</th>
              <th scope="col">Vote</th>
              <th scope="col">Credential</th>
              <th scope="col">When</th>
            </tr>
          </thead>
          <tbody>
            {activity.votes.map((v) => (
              <tr key={v.id}>
                <td>{v.user?.userName ?? v.userId}</td>
                <td>{v.selection.replace(/^VOTE_SELECTION_/, "")}</td>
                <td>
                  {v.scheme === "SIGNATURE_SCHEME_TK_WEBAUTHN" ? "passkey" : "API key"} <code class="key">{v.publicKey}</code>
                </td>
                <td>{when(v.createdAt)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <h2>Policy evaluation</h2>
      {loaded.data?.evaluations.policyEvaluations.length ? (
        <ul class="plain">
          {loaded.data.evaluations.policyEvaluations.map((e) => (
            <li key={e.id}>
              {voteName(activity, e.voteId)}:
              <ul>
                {e.policyEvaluations.length === 0 ? <li>no policy applied (root quorum or own credentials)</li> : null}
                {e.policyEvaluations.map((p) => (
                  <li key={p.policyId}>
                    {loaded.data?.policyNames.get(p.policyId) ?? p.policyId}: {p.outcome.replace(/^OUTCOME_/, "")}
                  </li>
                ))}
              </ul>
            </li>
          ))}
        </ul>
      ) : (
        <p>No policy evaluation was recorded.</p>
      )}
      <h2>Intent</h2>
      <Json value={activity.intent} label="Intent" />
      <h2>Result</h2>
      <Json value={activity.result} label="Result" />
    </Page>
  );
}

/** What waits for the signed-in user: activities needing consensus that they may still vote on. */
export function Approvals({ session }: { session: Session }) {
  const loaded = useLoad(async () => {
    const waiting: Activity[] = [];
    let after: string | undefined;
    // Waiting activities are few; still, read them a page at a time, at most ten pages.
    for (let page = 0; page < 10; page++) {
      const { activities } = await query<{ activities: Activity[] }>(session, "list_activities", {
        filterByStatus: ["ACTIVITY_STATUS_CONSENSUS_NEEDED"],
        paginationOptions: { limit: "100", ...(after ? { after } : {}) },
      });
      waiting.push(...activities.filter((a) => a.canApprove || a.canReject));
      if (activities.length < 100) break;
      after = activities[activities.length - 1].id;
    }
    return waiting;
  }, "approvals");
  return (
    <Page title="Approvals">
      <p>Activities waiting for approvals that you may still approve or reject.</p>
      <Loading loaded={loaded} />
      {loaded.data && loaded.data.length === 0 ? <p>Nothing waits for you.</p> : null}
      {loaded.data?.length ? <ActivityTable activities={loaded.data} /> : null}
      <button type="button" onClick={loaded.reload}>
        Refresh
      </button>
    </Page>
  );
}
