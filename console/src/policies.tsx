// Policies: the list, a form that creates or edits one (the server compiles every expression and its
// refusal names the field, line and column, shown beside that field), delete, and a dry run asking
// the server's evaluate_policies what a request would get.
import { useState } from "preact/hooks";
import { ApiError, type Session, post, query, submit } from "./api";
import { ErrorMessage, Json, Loading, Page, type Route, href, messageOf, useLoad } from "./ui";

/** What the form said when a new policy was saved: the form of its edit page, opened next, says it again. */
let savedNotice = "";

interface Policy {
  policyId: string;
  policyName: string;
  effect: "EFFECT_ALLOW" | "EFFECT_DENY";
  condition: string;
  consensus: string;
  notes: string;
  time?: string;
}

const FIELDS = ["condition", "consensus", "time"] as const;
type Field = (typeof FIELDS)[number];

/** Where a POLICY_INVALID refusal points: "condition is not a valid policy expression: line 1, column 18: …". */
export function compileError(error: unknown): { field: Field; line: number; column: number; problem: string } | undefined {
  if (!(error instanceof ApiError)) return undefined;
  const found = /\b(condition|consensus|time)\b[^:]*: line (\d+), column (\d+): (.*)$/s.exec(error.message);
  if (!found) return undefined;
  return { field: found[1] as Field, line: Number(found[2]), column: Number(found[3]), problem: found[4] };
}

export function Policies({ session, route }: { session: Session; route: Route }) {
  const editing = route.path[1];
  const loaded = useLoad(() => query<{ policies: Policy[] }>(session, "list_policies"), `policies/${editing ?? ""}`);
  const policy = editing && editing !== "new" ? loaded.data?.policies.find((p) => p.policyId === editing) : undefined;
  return (
    <Page title="Policies">
      <p>
        <a href={href("policies/new")}>New policy</a>
      </p>
      {editing === "new" || policy ? (
        <PolicyForm session={session} policy={policy} key={editing} />
      ) : editing && loaded.data ? (
        <p class="error">No policy {editing}.</p>
      ) : null}
      <Loading loaded={loaded} />
      {loaded.data && loaded.data.policies.length === 0 ? (
        <p>No policy: only the root quorum may act, and users on their own credentials.</p>
      ) : null}
      {loaded.data?.policies.map((p) => (
        <PolicyCard session={session} policy={p} key={p.policyId} deleted={loaded.reload} />
      ))}
      <EvaluatePanel session={session} />
    </Page>
  );
}

function PolicyCard({ session, policy, deleted }: { session: Session; policy: Policy; deleted: () => void }) {
  const [confirming, setConfirming] = useState(false);
  const [error, setError] = useState<unknown>();
  const remove = async () => {
    try {
      const answer = await submit(session, "delete_policy", "ACTIVITY_TYPE_DELETE_POLICY", { policyId: policy.policyId });
      if (answer.activity?.status !== "ACTIVITY_STATUS_COMPLETED") setError(new Error(`The deletion is ${answer.activity?.status}`));
      deleted();
    } catch (e) {
      setError(e);
    }
  };
  return (
    <article class="card" aria-labelledby={`policy-${policy.policyId}`}>
      <h2 id={`policy-${policy.policyId}`}>{policy.policyName}</h2>
      <dl class="facts">
        <dt>Effect</dt>
        <dd>{policy.effect.replace(/^EFFECT_/, "")}</dd>
        <dt>Condition</dt>
        <dd>
          <code class="expr">{policy.condition || "(any activity)"}</code>
        </dd>
        <dt>Consensus</dt>
        <dd>
          <code class="expr">{policy.consensus || "(the requester alone)"}</code>
        </dd>
        {policy.time ? (
          <>
            <dt>Time</dt>
            <dd>
              <code class="expr">{policy.time}</code>
            </dd>
          </>
        ) : null}
        {policy.notes ? (
          <>
            <dt>Notes</dt>
            <dd>{policy.notes}</dd>
          </>
        ) : null}
      </dl>
      <div class="actions">
        <a class="button" href={href(`policies/${policy.policyId}`)} aria-label={`Edit ${policy.policyName}`}>
          Edit
        </a>
        {confirming ? (
          <>
            <button type="button" class="danger" onClick={remove}>
              Delete {policy.policyName} for good
            </button>
            <button type="button" onClick={() => setConfirming(false)}>
              Keep it
            </button>
          </>
        ) : (
          <button type="button" onClick={() => setConfirming(true)} aria-label={`Delete ${policy.policyName}`}>
            Delete
          </button>
        )}
      </div>
      <ErrorMessage error={error} />
    </article>
  );
}

function PolicyForm({ session, policy }: { session: Session; policy?: Policy }) {
  const [values, setValues] = useState({
    policyName: policy?.policyName ?? "",
    effect: policy?.effect ?? "EFFECT_ALLOW",
    condition: policy?.condition ?? "",
    consensus: policy?.consensus ?? "",
    time: policy?.time ?? "",
    notes: policy?.notes ?? "",
  });
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const [saved, setSaved] = useState(() => {
    const notice = savedNotice;
    savedNotice = "";
    return notice;
  });
  const set = (field: keyof typeof values) => (event: Event) =>
    setValues({ ...values, [field]: (event.currentTarget as HTMLInputElement).value });
  const problem = compileError(error);
  const onSubmit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    setSaved("");
    try {
      const answer = policy
        ? await submit(session, "update_policy", "ACTIVITY_TYPE_UPDATE_POLICY_V2", {
            policyId: policy.policyId,
            policyName: values.policyName,
            policyEffect: values.effect,
            policyCondition: values.condition,
            policyConsensus: values.consensus,
            policyNotes: values.notes,
            ...(values.time || policy.time ? { time: values.time } : {}),
          })
        : await submit(session, "create_policy", "ACTIVITY_TYPE_CREATE_POLICY_V3", {
            policyName: values.policyName,
            effect: values.effect,
            ...(values.condition ? { condition: values.condition } : {}),
            ...(values.consensus ? { consensus: values.consensus } : {}),
            ...(values.time ? { time: values.time } : {}),
            notes: values.notes,
          });
      const status = answer.activity?.status;
      if (status === "ACTIVITY_STATUS_COMPLETED") {
        setSaved(`Saved ${values.policyName}.`);
        const id = answer.activity.result?.createPolicyResult?.policyId;
        if (!policy && id) {
          savedNotice = `Saved ${values.policyName}.`;
          location.hash = href(`policies/${id}`);
        }
      } else setSaved(`The change is ${String(status).replace(/^ACTIVITY_STATUS_/, "")}: see Activities.`);
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  const expression = (field: Field, label: string, hint: string) => (
    <div class="field">
      <label for={`policy-${field}`}>{label}</label>
      <textarea
        id={`policy-${field}`}
        rows={3}
        spellcheck={false}
        value={values[field]}
        onInput={set(field)}
        aria-invalid={problem?.field === field ? "true" : undefined}
        aria-describedby={problem?.field === field ? `policy-${field}-error` : `policy-${field}-hint`}
      />
      {problem?.field === field ? (
        <div id={`policy-${field}-error`} class="compile-error" role="alert">
          <p>
            Line {problem.line}, column {problem.column}: {problem.problem}
          </p>
          <pre aria-hidden="true">
            {values[field].split("\n")[problem.line - 1] ?? ""}
            {"\n"}
            {`${" ".repeat(Math.max(0, problem.column - 1))}^`}
          </pre>
        </div>
      ) : (
        <small id={`policy-${field}-hint`}>{hint}</small>
      )}
    </div>
  );
  return (
    <form class="card policy-form" onSubmit={onSubmit} aria-label={policy ? `Edit ${policy.policyName}` : "New policy"}>
      <h2>{policy ? `Edit ${policy.policyName}` : "New policy"}</h2>
      <div class="field">
        <label for="policy-name">Policy name</label>
        <input id="policy-name" value={values.policyName} onInput={set("policyName")} required />
      </div>
      <div class="field">
        <label for="policy-effect">Effect</label>
        <select id="policy-effect" value={values.effect} onChange={set("effect")}>
          <option value="EFFECT_ALLOW">Allow</option>
          <option value="EFFECT_DENY">Deny</option>
        </select>
      </div>
      {expression("condition", "Condition", "Which activities it applies to, e.g. activity.resource == 'WALLET'; empty: every activity.")}
      {expression("consensus", "Consensus", "Whose approvals it needs, e.g. approvers.count() >= 2; empty: the requester's alone.")}
      {expression("time", "Time", "When it is in force; empty: always.")}
      <div class="field">
        <label for="policy-notes">Notes</label>
        <input id="policy-notes" value={values.notes} onInput={set("notes")} />
      </div>
      <div class="actions">
        <button type="submit" class="primary" disabled={busy}>
          Save policy
        </button>
        <a class="button" href={href("policies")}>
          Close
        </a>
      </div>
      {saved ? <output>{saved}</output> : null}
      {error && !problem ? <ErrorMessage error={error} /> : null}
      {problem ? <p class="error">{messageOf(error)}</p> : null}
    </form>
  );
}

interface Evaluation {
  verdict: string;
  outcome: string;
  decidedBy: string;
  reason?: string;
  error?: { code: string; message: string };
  rootQuorum?: { threshold: number; approvals: number };
  policyEvaluations: Array<{ policyId: string; policyName: string; outcome: string; part?: string; deciding?: boolean; error?: string }>;
}

function EvaluatePanel({ session }: { session: Session }) {
  const [type, setType] = useState("ACTIVITY_TYPE_CREATE_USER_TAG");
  const [parameters, setParameters] = useState('{ "userTagName": "example", "userIds": [] }');
  const [actingUserId, setActingUserId] = useState("");
  const [answer, setAnswer] = useState<Evaluation>();
  const [error, setError] = useState<unknown>();
  const onSubmit = async (event: Event) => {
    event.preventDefault();
    setError(undefined);
    setAnswer(undefined);
    try {
      const parsed = JSON.parse(parameters);
      setAnswer(
        await post<Evaluation>(session.stamper, "/sigil/v1/query/evaluate_policies", {
          organizationId: session.organizationId,
          type,
          parameters: parsed,
          ...(actingUserId ? { actingUserId } : {}),
        }),
      );
    } catch (e) {
      setError(e instanceof SyntaxError ? new Error(`Parameters are not JSON: ${e.message}`) : e);
    }
  };
  return (
    <form class="card" onSubmit={onSubmit} aria-labelledby="evaluate-title">
      <h2 id="evaluate-title">What would a request get?</h2>
      <p>Asks the server's policy engine (evaluate_policies) without recording anything.</p>
      <div class="field">
        <label for="evaluate-type">Activity type</label>
        <input id="evaluate-type" value={type} onInput={(e) => setType(e.currentTarget.value)} required />
      </div>
      <div class="field">
        <label for="evaluate-parameters">Parameters (JSON)</label>
        <textarea
          id="evaluate-parameters"
          rows={4}
          spellcheck={false}
          value={parameters}
          onInput={(e) => setParameters(e.currentTarget.value)}
        />
      </div>
      <div class="field">
        <label for="evaluate-user">Acting user id (empty: you)</label>
        <input id="evaluate-user" value={actingUserId} onInput={(e) => setActingUserId(e.currentTarget.value)} />
      </div>
      <button type="submit">Evaluate</button>
      <ErrorMessage error={error} />
      {answer ? (
        <div aria-live="polite">
          <p>
            Verdict: <strong class="verdict">{answer.verdict}</strong> (decided by {answer.decidedBy})
          </p>
          {answer.reason ? <p>{answer.reason}</p> : null}
          {answer.error ? <p class="error">{answer.error.message}</p> : null}
          {answer.policyEvaluations.length ? (
            <ul>
              {answer.policyEvaluations.map((p) => (
                <li key={p.policyId}>
                  {p.policyName}: {p.outcome.replace(/^OUTCOME_/, "")}
                  {p.part ? ` (${p.part})` : ""}
                  {p.deciding ? ", deciding" : ""}
                  {p.error ? ` — ${p.error}` : ""}
                </li>
              ))}
            </ul>
          ) : null}
          <details>
            <summary>Whole answer</summary>
            <Json value={answer} label="Evaluation" />
          </details>
        </div>
      ) : null}
    </form>
  );
}
