// The console: sign in with a passkey or an API key, then pages over the public API. Sign-in lives
// in this page's memory only: a reload or Sign out forgets the key (the organization id alone may be
// remembered, at the user's choice).
import "./style.css";
import { render } from "preact";
import { useState } from "preact/hooks";
import { ActivityDetail, ActivityList, Approvals } from "./activities";
import { type Session, apiKeyStamper, chooseRelyingParty, passkeyStamper, signIn } from "./api";
import { Organization, PrivateKeys, SubOrganizations, Users, Wallets, Webhooks } from "./pages";
import { Policies } from "./policies";
import { ErrorMessage, type Route, href, useRoute } from "./ui";

const NAVIGATION: Array<[string, string]> = [
  ["activities", "Activities"],
  ["approvals", "Approvals"],
  ["users", "Users"],
  ["policies", "Policies"],
  ["wallets", "Wallets"],
  ["private-keys", "Private keys"],
  ["sub-organizations", "Sub-organizations"],
  ["webhooks", "Webhooks"],
  ["organization", "Organization"],
];

const REMEMBERED_ORGANIZATION = "sigil-console.organizationId";
const REMEMBERED_RELYING_PARTY = "sigil-console.relyingPartyId";

function SignIn({ onSignedIn }: { onSignedIn: (session: Session) => void }) {
  const [organizationId, setOrganizationId] = useState(() => localStorage.getItem(REMEMBERED_ORGANIZATION) ?? "");
  const [remember, setRemember] = useState(() => localStorage.getItem(REMEMBERED_ORGANIZATION) !== null);
  const [relyingParty, setRelyingParty] = useState(() => localStorage.getItem(REMEMBERED_RELYING_PARTY) ?? "");
  const [publicKey, setPublicKey] = useState("");
  const [privateKey, setPrivateKey] = useState("");
  const [error, setError] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  const finish = async (stamper: Parameters<typeof signIn>[0]) => {
    // The passkeys of this session, to sign in with or to register, belong to this relying party.
    chooseRelyingParty(relyingParty);
    const session = await signIn(stamper, organizationId.trim());
    // Neither is a secret: what may be remembered is where to sign in, never with what.
    if (remember) localStorage.setItem(REMEMBERED_ORGANIZATION, session.organizationId);
    else localStorage.removeItem(REMEMBERED_ORGANIZATION);
    if (remember && relyingParty.trim()) localStorage.setItem(REMEMBERED_RELYING_PARTY, relyingParty.trim());
    else localStorage.removeItem(REMEMBERED_RELYING_PARTY);
    onSignedIn(session);
  };
  const attempt = (how: () => Promise<void>) => async (event?: Event) => {
    event?.preventDefault();
    setBusy(true);
    setError(undefined);
    try {
      await how();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  const withKey = attempt(async () => {
    const stamper = await apiKeyStamper(publicKey, privateKey);
    // The text of the private key is not kept once WebCrypto holds it.
    setPrivateKey("");
    await finish(stamper);
  });
  const withPasskey = attempt(() => finish(passkeyStamper()));
  const readKeyFile = async (event: Event) => {
    const input = event.currentTarget as HTMLInputElement;
    const file = input.files?.[0];
    if (!file) return;
    setError(undefined);
    try {
      const key = JSON.parse(await file.text()) as { publicKey?: unknown; privateKey?: unknown };
      if (typeof key.publicKey !== "string" || typeof key.privateKey !== "string") throw new Error("no key");
      setPublicKey(key.publicKey);
      setPrivateKey(key.privateKey);
    } catch {
      setError(new Error("The file is not a key file written by sigil keygen"));
    } finally {
      // The file's contents are in the fields (and, once signed in, in WebCrypto): the input forgets it.
      input.value = "";
    }
  };
  return (
    <main id="main" class="sign-in">
      <h1>Sigil console</h1>
      <form onSubmit={withKey} aria-label="Sign in">
        <div class="field">
          <label for="organization-id">Organization ID</label>
          <input
            id="organization-id"
            value={organizationId}
            onInput={(e) => setOrganizationId(e.currentTarget.value)}
            required
            autoComplete="off"
            spellcheck={false}
          />
        </div>
        <label class="check">
          <input type="checkbox" checked={remember} onChange={(e) => setRemember(e.currentTarget.checked)} />
          Remember it on this device
        </label>
        <h2>With a passkey</h2>
        <button type="button" class="primary" disabled={busy} onClick={() => withPasskey()}>
          Sign in with a passkey
        </button>
        <details>
          <summary>Passkey options</summary>
          <div class="field">
            <label for="relying-party">Relying party ID (empty: {location.hostname})</label>
            <input
              id="relying-party"
              value={relyingParty}
              onInput={(e) => setRelyingParty(e.currentTarget.value)}
              placeholder={location.hostname}
              autoComplete="off"
              spellcheck={false}
            />
          </div>
        </details>
        <h2>With an API key</h2>
        <div class="field">
          <label for="api-public-key">API public key</label>
          <input
            id="api-public-key"
            value={publicKey}
            onInput={(e) => setPublicKey(e.currentTarget.value)}
            autoComplete="off"
            spellcheck={false}
          />
        </div>
        <div class="field">
          <label for="api-private-key">API private key</label>
          <input
            id="api-private-key"
            type="password"
            value={privateKey}
            onInput={(e) => setPrivateKey(e.currentTarget.value)}
            autoComplete="off"
            spellcheck={false}
          />
        </div>
        <div class="field">
          <label for="key-file">Or the key file from sigil keygen</label>
          <input id="key-file" type="file" accept=".json,application/json" onChange={readKeyFile} />
        </div>
        <button type="submit" disabled={busy}>
          Sign in
        </button>
        <p class="muted">The private key stays in this page: it signs each request here and is never sent, nor stored.</p>
        <ErrorMessage error={error} />
      </form>
    </main>
  );
}

function Content({ session, route }: { session: Session; route: Route }) {
  const [page, id] = route.path;
  switch (page ?? "activities") {
    case "activities":
      return id ? <ActivityDetail session={session} id={id} key={id} /> : <ActivityList session={session} route={route} />;
    case "approvals":
      return <Approvals session={session} />;
    case "users":
      return <Users session={session} />;
    case "policies":
      return <Policies session={session} route={route} />;
    case "wallets":
      return <Wallets session={session} route={route} />;
    case "private-keys":
      return <PrivateKeys session={session} />;
    case "sub-organizations":
      return <SubOrganizations session={session} route={route} />;
    case "webhooks":
      return <Webhooks session={session} route={route} />;
    case "organization":
      return <Organization session={session} />;
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>
            No page {page}. <a href={href("activities")}>Activities</a>
          </p>
        </section>
      );
  }
}

function App() {
  const [session, setSession] = useState<Session>();
  const route = useRoute();
  if (!session) return <SignIn onSignedIn={setSession} />;
  const current = route.path[0] ?? "activities";
  return (
    <>
      <button type="button" class="skip" onClick={() => document.getElementById("main")?.focus()}>
        Skip to content
      </button>
      <header>
        <span class="brand">Sigil</span>
        <span class="who">
          {session.organizationName} · {session.username}
        </span>
        <button type="button" onClick={() => setSession(undefined)}>
          Sign out
        </button>
      </header>
      <nav class="main-nav" aria-label="Console">
        <ul>
          {NAVIGATION.map(([path, name]) => (
            <li key={path}>
              <a href={href(path)} aria-current={current === path ? "page" : undefined}>
                {name}
              </a>
            </li>
          ))}
        </ul>
      </nav>
      <main id="main" tabIndex={-1}>
        <Content session={session} route={route} key={session.userId} />
      </main>
    </>
  );
}

render(<App />, document.getElementById("app")!);
