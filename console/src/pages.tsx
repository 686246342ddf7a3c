// The organization's resources: users, wallets, private keys, sub-organizations, webhooks and the
// organization itself. Lists the API pages (wallet accounts, sub-organizations, webhook deliveries) are
// read a page at a time.
import { useState } from "preact/hooks";
import { type Session, post, query, registerPasskey } from "./api";
import { ErrorMessage, Json, Loading, Page, Pager, type Route, cursorPage, href, useLoad, when } from "./ui";

const PAGE_SIZE = 50;

interface User {
  userId: string;
  userName: string;
  userEmail?: string;
  apiKeys: Array<{ apiKeyId: string; apiKeyName: string; credential: { publicKey: string; type: string }; expirationSeconds?: string }>;
  authenticators: Array<{ authenticatorId: string; authenticatorName: string; credentialId: string; createdAt: { seconds?: string } }>;
  oauthProviders: Array<{ providerId: string; providerName: string; issuer: string; subject: string }>;
  userTags: string[];
}

export function Users({ session }: { session: Session }) {
  const loaded = useLoad(async () => {
    const [{ users }, { userTags }] = await Promise.all([
      query<{ users: User[] }>(session, "list_users"),
      query<{ userTags: Array<{ tagId: string; tagName: string }> }>(session, "list_user_tags"),
    ]);
    return { users, tags: new Map(userTags.map((t) => [t.tagId, t.tagName])) };
  }, "users");
  return (
    <Page title="Users">
      <Loading loaded={loaded} />
      {loaded.data?.users.map((user) => (
        <article class="card" key={user.userId} aria-labelledby={`user-${user.userId}`}>
          <h2 id={`user-${user.userId}`}>
            {user.userName}
            {user.userId === session.userId ? " (you)" : ""}
          </h2>
          <dl class="facts">
            <dt>User id</dt>
            <dd>
              <code>{user.userId}</code>
            </dd>
            {user.userEmail ? (
              <>
                <dt>Email</dt>
                <dd>{user.userEmail}</dd>
              </>
            ) : null}
            <dt>Tags</dt>
            <dd>{user.userTags.map((t) => loaded.data?.tags.get(t) ?? t).join(", ") || "none"}</dd>
          </dl>
          <h3>API keys</h3>
          {user.apiKeys.length ? (
            <ul>
              {user.apiKeys.map((k) => (
                <li key={k.apiKeyId}>
                  {k.apiKeyName} <code class="key">{k.credential.publicKey}</code>
                </li>
              ))}
            </ul>
          ) : (
            <p>None.</p>
          )}
          <h3>Passkeys</h3>
          {user.authenticators.length ? (
            <ul>
              {user.authenticators.map((a) => (
                <li key={a.authenticatorId}>
                  {a.authenticatorName} <span class="muted">credential</span> <code class="key">{a.credentialId}</code>
                </li>
              ))}
            </ul>
          ) : (
            <p>None.</p>
          )}
          {user.userId === session.userId ? <AddPasskey session={session} user={user} done={loaded.reload} /> : null}
          <h3>OAuth identities</h3>
          {user.oauthProviders.length ? (
            <ul>
              {user.oauthProviders.map((o) => (
                <li key={o.providerId}>
                  {o.providerName}: {o.issuer} <code>{o.subject}</code>
                </li>
              ))}
            </ul>
          ) : (
            <p>None.</p>
          )}
        </article>
      ))}
    </Page>
  );
}

function AddPasskey({ session, user, done }: { session: Session; user: User; done: () => void }) {
  const [name, setName] = useState("");
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const [added, setAdded] = useState("");
  const onSubmit = async (event: Event) => {
    event.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      const answer = await registerPasskey(session, user.userId, user.userName, name || "passkey");
      setAdded(
        answer.activity?.status === "ACTIVITY_STATUS_COMPLETED"
          ? `Passkey ${name || "passkey"} added.`
          : "The passkey waits for approvals.",
      );
      setName("");
      done();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return (
    <form class="inline" onSubmit={onSubmit}>
      <label>
        Passkey name
        <input value={name} onInput={(e) => setName(e.currentTarget.value)} required />
      </label>
      <button type="submit" disabled={busy}>
        Add a passkey
      </button>
      {added ? <output>{added}</output> : null}
      <ErrorMessage error={error} />
    </form>
  );
}

interface Wallet {
  walletId: string;
  walletName: string;
  createdAt: { seconds?: string };
  exported: boolean;
  imported: boolean;
}
interface Account {
  walletAccountId: string;
  address: string;
  path: string;
  curve: string;
  addressFormat: string;
}

export function Wallets({ session, route }: { session: Session; route: Route }) {
  const walletId = route.path[1];
  const loaded = useLoad(() => query<{ wallets: Wallet[] }>(session, "list_wallets"), "wallets");
  return (
    <Page title="Wallets">
      <Loading loaded={loaded} />
      {loaded.data && loaded.data.wallets.length === 0 ? <p>No wallet.</p> : null}
      <ul class="plain">
        {loaded.data?.wallets.map((w) => (
          <li key={w.walletId}>
            <a href={href(`wallets/${w.walletId}`)} aria-current={w.walletId === walletId ? "page" : undefined}>
              {w.walletName}
            </a>{" "}
            <span class="muted">created {when(w.createdAt)}</span>
          </li>
        ))}
      </ul>
      {walletId ? <Accounts session={session} walletId={walletId} route={route} /> : null}
    </Page>
  );
}

function Accounts({ session, walletId, route }: { session: Session; walletId: string; route: Route }) {
  const after = route.params.get("after") ?? undefined;
  const before = route.params.get("before") ?? undefined;
  const loaded = useLoad(
    () =>
      query<{ accounts: Account[] }>(session, "list_wallet_accounts", {
        walletId,
        paginationOptions: { limit: String(PAGE_SIZE + 1), ...(after ? { after } : {}), ...(before ? { before } : {}) },
      }),
    `${walletId}/${after}/${before}`,
  );
  const { page: accounts, back, forward } = cursorPage(loaded.data?.accounts ?? [], { after, before }, PAGE_SIZE);
  return (
    <>
      <h2>Accounts</h2>
      <Loading loaded={loaded} />
      <div class="scroll">
        <table class="stack">
          <thead>
            <tr>
              <th scope="col">Address</th>
              <th scope="col">Path</th>
              <th scope="col">Format</th>
            </tr>
          </thead>
          <tbody>
            {accounts.map((a) => (
              <tr key={a.walletAccountId}>
                <td data-label="Address">
                  <code class="key">{a.address}</code>
                </td>
                <td data-label="Path">{a.path}</td>
                <td data-label="Format">{a.addressFormat.replace(/^ADDRESS_FORMAT_/, "")}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </div>
      <Pager
        back={back && accounts.length ? href(`wallets/${walletId}`, { before: accounts[0].walletAccountId }) : undefined}
        forward={
          forward && accounts.length ? href(`wallets/${walletId}`, { after: accounts[accounts.length - 1].walletAccountId }) : undefined
        }
      />
    </>
  );
}

export function PrivateKeys({ session }: { session: Session }) {
  const loaded = useLoad(
    () =>
      query<{
        privateKeys: Array<{
          privateKeyId: string;
          privateKeyName: string;
          curve: string;
          publicKey: string;
          addresses: Array<{ format: string; address: string }>;
        }>;
      }>(session, "list_private_keys"),
    "private-keys",
  );
  return (
    <Page title="Private keys">
      <Loading loaded={loaded} />
      {loaded.data && loaded.data.privateKeys.length === 0 ? <p>No private key.</p> : null}
      {loaded.data?.privateKeys.map((k) => (
        <article class="card" key={k.privateKeyId} aria-labelledby={`key-${k.privateKeyId}`}>
          <h2 id={`key-${k.privateKeyId}`}>{k.privateKeyName}</h2>
          <dl class="facts">
            <dt>Curve</dt>
            <dd>{k.curve.replace(/^CURVE_/, "")}</dd>
            <dt>Public key</dt>
            <dd>
              <code class="key">{k.publicKey}</code>
            </dd>
            {k.addresses.map((a) => (
              <>
                <dt>{a.format.replace(/^ADDRESS_FORMAT_/, "")}</dt>
                <dd>
                  <code class="key">{a.address}</code>
                </dd>
              </>
            ))}
          </dl>
        </article>
      ))}
    </Page>
  );
}

export function SubOrganizations({ session, route }: { session: Session; route: Route }) {
  const after = route.params.get("after") ?? undefined;
  const before = route.params.get("before") ?? undefined;
  const loaded = useLoad(
    () =>
      query<{ organizationIds: string[] }>(session, "list_suborgs", {
        paginationOptions: { limit: String(PAGE_SIZE + 1), ...(after ? { after } : {}), ...(before ? { before } : {}) },
      }),
    `${after}/${before}`,
  );
  const { page: ids, back, forward } = cursorPage(loaded.data?.organizationIds ?? [], { after, before }, PAGE_SIZE);
  return (
    <Page title="Sub-organizations">
      <Loading loaded={loaded} />
      {loaded.data && ids.length === 0 ? <p>No sub-organization.</p> : null}
      <ul>
        {ids.map((id) => (
          <li key={id}>
            <code>{id}</code>
          </li>
        ))}
      </ul>
      <Pager
        back={back && ids.length ? href("sub-organizations", { before: ids[0] }) : undefined}
        forward={forward && ids.length ? href("sub-organizations", { after: ids[ids.length - 1] }) : undefined}
      />
    </Page>
  );
}

interface WebhookEndpoint {
  endpointId: string;
  name: string;
  url: string;
  isActive: boolean;
  subscriptions?: Array<{ eventType: string; filtersJson?: string }>;
}

interface WebhookDelivery {
  deliveryId: string;
  endpointId: string | null;
  url: string;
  eventType: string;
  eventOrganizationId: string;
  activityId: string;
  status: string;
  attempts: number;
  lastStatusCode: number | null;
  lastError: string | null;
  createdAt: { seconds?: string };
  nextAttemptAt: { seconds?: string } | null;
  deliveredAt: { seconds?: string } | null;
}

const DELIVERY_STATUSES = ["pending", "delivered", "failed", "cancelled"];

/** A time in a narrow column: the date and the time of day each kept whole. */
function Time({ at }: { at: { seconds?: string } }) {
  const [date, ...time] = when(at).split(" ");
  return (
    <span>
      <span class="nowrap">{date}</span> <span class="nowrap">{time.join(" ")}</span>
    </span>
  );
}
const DELIVERIES_PAGE = 20;

/** The endpoints, and the delivery log (list_webhook_deliveries, a query of Sigil's own) newest first, a
 * page at a time, for every endpoint or one, in any status or one: read together, so the page shows
 * one answer (the log names endpoints by their names). */
export function Webhooks({ session, route }: { session: Session; route: Route }) {
  const p = route.params;
  const endpoint = p.get("endpoint") ?? undefined;
  const status = p.get("status") ?? undefined;
  const after = p.get("after") ?? undefined;
  const before = p.get("before") ?? undefined;
  const loaded = useLoad(async () => {
    const [{ webhookEndpoints }, { webhookDeliveries }] = await Promise.all([
      query<{ webhookEndpoints: WebhookEndpoint[] }>(session, "list_webhook_endpoints"),
      post<{ webhookDeliveries: WebhookDelivery[] }>(session.stamper, "/sigil/v1/query/list_webhook_deliveries", {
        organizationId: session.organizationId,
        ...(endpoint ? { endpointId: endpoint } : {}),
        ...(status ? { status } : {}),
        paginationOptions: { limit: String(DELIVERIES_PAGE + 1), ...(after ? { after } : {}), ...(before ? { before } : {}) },
      }),
    ]);
    return { endpoints: webhookEndpoints, deliveries: webhookDeliveries };
  }, `webhooks?${p.toString()}`);
  const endpoints = loaded.data?.endpoints ?? [];
  const { page: deliveries, back, forward } = cursorPage(loaded.data?.deliveries ?? [], { after, before }, DELIVERIES_PAGE);
  const names = new Map(endpoints.map((e) => [e.endpointId, e.name]));
  const filters = { endpoint, status };
  const onFilter = (event: Event) => {
    event.preventDefault();
    const form = new FormData(event.currentTarget as HTMLFormElement);
    location.hash = href("webhooks", Object.fromEntries([...form.entries()].map(([k, v]) => [k, String(v)])));
  };
  return (
    <Page title="Webhooks">
      <Loading loaded={loaded} />
      {loaded.data && endpoints.length === 0 ? <p>No webhook endpoint.</p> : null}
      {endpoints.map((w) => (
        <article class="card" key={w.endpointId} aria-labelledby={`hook-${w.endpointId}`}>
          <h2 id={`hook-${w.endpointId}`}>{w.name}</h2>
          <dl class="facts">
            <dt>URL</dt>
            <dd>
              <code class="key">{w.url}</code>
            </dd>
            <dt>Active</dt>
            <dd>{w.isActive ? "yes" : "no"}</dd>
            <dt>Events</dt>
            <dd>{(w.subscriptions ?? []).map((s) => s.eventType).join(", ") || "none"}</dd>
          </dl>
          <a href={href("webhooks", { endpoint: w.endpointId })}>Deliveries to {w.name}</a>
        </article>
      ))}
      <section aria-labelledby="deliveries-title">
        <h2 id="deliveries-title">Recent deliveries</h2>
        <form class="filters" onSubmit={onFilter} aria-label="Filter deliveries">
          <label>
            Endpoint
            <select name="endpoint" value={endpoint ?? ""}>
              <option value="">All</option>
              {endpoints.map((e) => (
                <option value={e.endpointId} key={e.endpointId}>
                  {e.name}
                </option>
              ))}
            </select>
          </label>
          <label>
            Delivery status
            <select name="status" value={status ?? ""}>
              <option value="">Any</option>
              {DELIVERY_STATUSES.map((s) => (
                <option value={s} key={s}>
                  {s}
                </option>
              ))}
            </select>
          </label>
          <button type="submit">Show</button>
        </form>
        {loaded.data && deliveries.length === 0 ? <p>No delivery.</p> : null}
        {deliveries.length ? (
          <div class="scroll">
            <table class="stack" aria-labelledby="deliveries-title">
              <thead>
                <tr>
                  <th scope="col">Created</th>
                  <th scope="col">Event</th>
                  <th scope="col">Endpoint</th>
                  <th scope="col">Status</th>
                  <th scope="col">Attempts</th>
                  <th scope="col">Last answer</th>
                  <th scope="col">Delivered or next attempt</th>
                </tr>
              </thead>
              <tbody>
                {deliveries.map((d) => (
                  <tr key={d.deliveryId}>
                    <td data-label="Created">
                      <Time at={d.createdAt} />
                    </td>
                    <td data-label="Event">
                      <div>
                        {d.eventType}{" "}
                        {d.eventOrganizationId === session.organizationId ? (
                          <a href={href(`activities/${d.activityId}`)}>activity</a>
                        ) : (
                          <span class="muted">sub-organization {d.eventOrganizationId}</span>
                        )}
                      </div>
                    </td>
                    <td data-label="Endpoint">
                      <div>
                        {d.endpointId ? (names.get(d.endpointId) ?? d.endpointId) : "webhook feature"}
                        <code class="key url">{d.url}</code>
                      </div>
                    </td>
                    <td data-label="Status">
                      <span class={`status ${d.status}`}>{d.status}</span>
                    </td>
                    <td data-label="Attempts">{d.attempts}</td>
                    <td data-label="Last answer">
                      {[d.lastStatusCode ?? "", d.lastError ?? ""].filter((x) => x !== "").join(": ") || "none yet"}
                    </td>
                    <td data-label="Delivered or next attempt">
                      {d.deliveredAt ? (
                        <Time at={d.deliveredAt} />
                      ) : d.nextAttemptAt ? (
                        <span>
                          next <Time at={d.nextAttemptAt} />
                        </span>
                      ) : null}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
        <Pager
          names={["Newer", "Older"]}
          back={back && deliveries.length ? href("webhooks", { ...filters, before: deliveries[0].deliveryId }) : undefined}
          forward={
            forward && deliveries.length ? href("webhooks", { ...filters, after: deliveries[deliveries.length - 1].deliveryId }) : undefined
          }
        />
      </section>
    </Page>
  );
}

export function Organization({ session }: { session: Session }) {
  const loaded = useLoad(async () => {
    const [{ configs }, { users }] = await Promise.all([
      query<{ configs: { features?: Array<{ name: string; value?: string }>; quorum?: { threshold: number; userIds: string[] } } }>(
        session,
        "get_organization_configs",
      ),
      query<{ users: Array<{ userId: string; userName: string }> }>(session, "list_users"),
    ]);
    return { configs, names: new Map(users.map((u) => [u.userId, u.userName])) };
  }, "organization");
  const configs = loaded.data?.configs;
  return (
    <Page title="Organization">
      <dl class="facts">
        <dt>Name</dt>
        <dd>{session.organizationName}</dd>
        <dt>Organization id</dt>
        <dd>
          <code>{session.organizationId}</code>
        </dd>
        <dt>Signed in as</dt>
        <dd>
          {session.username} (<code>{session.userId}</code>) with {session.stamper.kind === "passkey" ? "a passkey" : "an API key"}
        </dd>
      </dl>
      <Loading loaded={loaded} />
      {configs ? (
        <>
          <h2>Root quorum</h2>
          <p>
            {configs.quorum?.threshold} of {configs.quorum?.userIds.length} users:
          </p>
          <ul>
            {configs.quorum?.userIds.map((id) => (
              <li key={id}>
                {loaded.data?.names.get(id) ?? ""} <code>{id}</code>
              </li>
            ))}
          </ul>
          <h2>Features</h2>
          {configs.features?.length ? <Json value={configs.features} label="Features" /> : <p>None enabled.</p>}
        </>
      ) : null}
    </Page>
  );
}
