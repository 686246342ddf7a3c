// An OAuth 2.0 server on loopback speaking the token and user-info endpoints as X and Discord do —
// what api.x.com and discord.com are to a real deployment. It keeps registered apps (client id and
// secret), issues authorization codes bound to a PKCE S256 challenge, redirect URI and user (the step
// a browser performs at the provider), and on the token endpoint checks the client's credentials (X:
// HTTP Basic; Discord: in the form), the code (single use), the redirect URI and the verifier.
import crypto from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";

export type Provider = "x" | "discord";

export interface ProviderUser {
  id: string;
  username: string;
  name: string;
  email?: string;
}

interface Grant {
  provider: Provider;
  clientId: string;
  challenge: string;
  redirectUri: string;
  user: ProviderUser;
}

export interface TestOauth2Provider {
  /** Base URL, e.g. http://127.0.0.1:1234; X's endpoints are under /x, Discord's under /discord. */
  url: string;
  /** The SIGIL_OAUTH2_* settings pointing Sigil here. */
  settings: Record<string, string>;
  /** Registers an app (its client id and secret). */
  register(provider: Provider, clientId: string, clientSecret: string): void;
  /** What the provider gives the browser after the user consents: a code for this challenge. */
  authorize(provider: Provider, grant: { clientId: string; codeChallenge: string; redirectUri: string; user: ProviderUser }): string;
  /** Access tokens issued so far (the bearer tokens Sigil must never store or log). */
  accessTokens: string[];
  /** Every request: method, path, headers and body. */
  requests: Array<{ method: string; path: string; headers: http.IncomingHttpHeaders; body: string }>;
  /** While down, every connection is dropped without an answer. */
  setDown(down: boolean): void;
  /** From now on token requests are held unanswered (as a slow provider would) until answerTokens. */
  stallTokens(): void;
  /** How many token requests are held unanswered. */
  heldTokens(): number;
  /** Answers the held token requests, and stops holding them. */
  answerTokens(): void;
  /** The next token request is answered by `answer` instead (a provider misbehaving): it sees what
   * was sent (the form, and the Authorization header's client id and secret) and writes the answer. */
  answerNextToken(answer: (response: http.ServerResponse, sent: SentToken) => void): void;
  /** The next user-info request is answered by `answer` instead: it sees the bearer token sent. */
  answerNextUserInfo(answer: (response: http.ServerResponse, bearer: string | undefined) => void): void;
  close(): Promise<void>;
}

/** What a token request carried. */
export interface SentToken {
  form: URLSearchParams;
  /** From HTTP Basic (X) or the form (Discord). */
  clientSecret: string | null;
}

/** A PKCE pair as a client makes it (RFC 7636, S256). */
export function pkcePair(): { verifier: string; challenge: string } {
  const verifier = crypto.randomBytes(32).toString("base64url");
  return { verifier, challenge: crypto.createHash("sha256").update(verifier).digest("base64url") };
}

export async function startOauth2Provider(): Promise<TestOauth2Provider> {
  const apps = new Map<string, string>(); // `${provider}/${clientId}` -> secret
  const codes = new Map<string, Grant>();
  const tokens = new Map<string, { provider: Provider; user: ProviderUser }>();
  const accessTokens: string[] = [];
  const requests: TestOauth2Provider["requests"] = [];
  let down = false;
  let stalling = false;
  let held: Array<() => void> = [];
  const scripted: Array<(response: http.ServerResponse, sent: SentToken) => void> = [];
  const scriptedUserInfo: Array<(response: http.ServerResponse, bearer: string | undefined) => void> = [];

  const json = (response: http.ServerResponse, status: number, body: unknown) =>
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));

  function clientOf(provider: Provider, request: http.IncomingMessage, form: URLSearchParams) {
    if (provider !== "x") return { clientId: form.get("client_id"), clientSecret: form.get("client_secret") };
    const basic = /^Basic (.+)$/.exec(request.headers.authorization ?? "");
    const [id, secret] = basic ? Buffer.from(basic[1]!, "base64").toString("utf8").split(":") : [];
    return {
      clientId: id !== undefined ? decodeURIComponent(id) : null,
      clientSecret: secret !== undefined ? decodeURIComponent(secret) : null,
    };
  }

  function token(provider: Provider, request: http.IncomingMessage, body: string, response: http.ServerResponse) {
    const form = new URLSearchParams(body);
    const { clientId, clientSecret } = clientOf(provider, request, form);
    const answer = scripted.shift();
    if (answer) return answer(response, { form, clientSecret });
    if (!clientId || apps.get(`${provider}/${clientId}`) !== clientSecret)
      return json(response, 401, { error: "invalid_client", error_description: "Client authentication failed" });
    if (form.get("grant_type") !== "authorization_code") return json(response, 400, { error: "unsupported_grant_type" });
    const code = form.get("code") ?? "";
    const grant = codes.get(code);
    // A code serves one exchange, whatever its outcome.
    codes.delete(code);
    if (!grant || grant.provider !== provider || grant.clientId !== clientId)
      return json(response, 400, { error: "invalid_grant", error_description: "Invalid authorization code" });
    if (form.get("redirect_uri") !== grant.redirectUri)
      return json(response, 400, { error: "invalid_grant", error_description: "redirect_uri does not match" });
    const verifier = form.get("code_verifier") ?? "";
    if (crypto.createHash("sha256").update(verifier).digest("base64url") !== grant.challenge)
      return json(response, 400, { error: "invalid_grant", error_description: "Value passed for the code_verifier does not match" });
    const accessToken = crypto.randomBytes(24).toString("base64url");
    tokens.set(accessToken, { provider, user: grant.user });
    accessTokens.push(accessToken);
    return json(response, 200, {
      token_type: provider === "x" ? "bearer" : "Bearer",
      access_token: accessToken,
      expires_in: 7200,
      scope: provider === "x" ? "tweet.read users.read" : "identify email",
    });
  }

  function me(provider: Provider, request: http.IncomingMessage, response: http.ServerResponse) {
    const bearer = /^Bearer (.+)$/.exec(request.headers.authorization ?? "")?.[1];
    const answer = scriptedUserInfo.shift();
    if (answer) return answer(response, bearer);
    const holder = bearer ? tokens.get(bearer) : undefined;
    if (!holder || holder.provider !== provider) return json(response, 401, { title: "Unauthorized", status: 401, detail: "Unauthorized" });
    const { user } = holder;
    if (provider === "x") return json(response, 200, { data: { id: user.id, name: user.name, username: user.username } });
    return json(response, 200, {
      id: user.id,
      username: user.username,
      global_name: user.name,
      ...(user.email ? { email: user.email, verified: true } : {}),
    });
  }

  const server = http.createServer((request, response) => {
    if (down) {
      request.socket.destroy();
      return;
    }
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", () => {
      const body = Buffer.concat(chunks).toString("utf8");
      const path = request.url ?? "";
      requests.push({ method: request.method ?? "", path, headers: request.headers, body });
      if (stalling && request.method === "POST" && path.endsWith("/oauth2/token"))
        return void held.push(() => token(path.startsWith("/x/") ? "x" : "discord", request, body, response));
      if (request.method === "POST" && path === "/x/2/oauth2/token") return token("x", request, body, response);
      if (request.method === "GET" && path === "/x/2/users/me") return me("x", request, response);
      if (request.method === "POST" && path === "/discord/api/oauth2/token") return token("discord", request, body, response);
      if (request.method === "GET" && path === "/discord/api/users/@me") return me("discord", request, response);
      json(response, 404, { error: "not_found" });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    settings: {
      SIGIL_OAUTH2_X_TOKEN_URL: `${url}/x/2/oauth2/token`,
      SIGIL_OAUTH2_X_USERINFO_URL: `${url}/x/2/users/me`,
      SIGIL_OAUTH2_DISCORD_TOKEN_URL: `${url}/discord/api/oauth2/token`,
      SIGIL_OAUTH2_DISCORD_USERINFO_URL: `${url}/discord/api/users/@me`,
    },
    register: (provider, clientId, clientSecret) => void apps.set(`${provider}/${clientId}`, clientSecret),
    authorize(provider, grant) {
      const code = crypto.randomBytes(18).toString("base64url");
      codes.set(code, {
        provider,
        clientId: grant.clientId,
        challenge: grant.codeChallenge,
        redirectUri: grant.redirectUri,
        user: grant.user,
      });
      return code;
    },
    accessTokens,
    requests,
    setDown: (value) => void (down = value),
    stallTokens: () => void (stalling = true),
    heldTokens: () => held.length,
    answerNextToken: (answer) => void scripted.push(answer),
    answerNextUserInfo: (answer) => void scriptedUserInfo.push(answer),
    answerTokens() {
      stalling = false;
      const waiting = held;
      held = [];
      for (const answer of waiting) answer();
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
