// The OAuth 2.0 providers oauth2_authenticate talks to (X, Discord): an authorization code (with its
// PKCE code_verifier) exchanged at the provider's token endpoint with the organization's client id and
// secret, then the access token shown to the provider's user-info endpoint to learn who the user is.
// Only the endpoints the operator configured (SIGIL_OAUTH2_X_TOKEN_URL and the three like it) are
// contacted, with no redirects followed, a deadline per request and a cap on what is read. Error
// messages name what a provider answered only by its HTTP status and, when it is one of OAuth's
// registered error codes, that code: never its free text, which may echo the code, the verifier or
// the secret in any spelling (raw, URL-encoded, base64, cut anywhere) and would be recorded as the
// activity's failure (audit log, webhooks, logs).
import { bodyUpTo } from "./capped-body.js";
import type { Oauth2Endpoints, Oauth2ProviderConfig } from "../config.js";
import { serviceError } from "../errors.js";

export type Oauth2ProviderName = "OAUTH2_PROVIDER_X" | "OAUTH2_PROVIDER_DISCORD";

/** One request to a provider may take this long (tests shorten it through oauth2Providers' options). */
const TIMEOUT_MS = 10_000;
/** A token or user-info answer is a few hundred bytes; more is not the provider's API. */
const MAX_ANSWER_BYTES = 64 * 1024;

export interface ProviderUser {
  /** The provider's stable user id. */
  id: string;
  /** The handle (X username, Discord username). */
  username?: string;
  /** The display name. */
  name?: string;
  email?: string;
  emailVerified?: boolean;
}

export interface CodeExchange {
  clientId: string;
  clientSecret: string;
  code: string;
  redirectUri: string;
  codeVerifier: string;
}

export interface Oauth2Providers {
  /** Exchanges the code for an access token (OAUTH2_PROVIDER_REFUSED / OAUTH2_PROVIDER_UNAVAILABLE). */
  exchangeCode(provider: Oauth2ProviderName, exchange: CodeExchange): Promise<string>;
  /** Who the access token belongs to. */
  userOf(provider: Oauth2ProviderName, accessToken: string): Promise<ProviderUser>;
}

const LABEL: Record<Oauth2ProviderName, string> = { OAUTH2_PROVIDER_X: "X", OAUTH2_PROVIDER_DISCORD: "Discord" };

/** An answer's body, read up to the cap. */
async function readCapped(response: Response, what: string): Promise<string> {
  const text = await bodyUpTo(response, MAX_ANSWER_BYTES);
  if (text === undefined)
    throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} answered more than ${MAX_ANSWER_BYTES} bytes: not the provider's API`);
  return text;
}

const parseJson = (text: string): Record<string, unknown> | null => {
  try {
    const value = JSON.parse(text) as unknown;
    return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
};

/** The error codes of RFC 6749 (sections 4.1.2.1 and 5.2) and RFC 6750 (section 3.1): the only words
 * of a provider's answer an error message repeats. A fixed list rather than "any short token": a
 * provider may put anything in `error`, the code it was sent included. */
const OAUTH_ERROR_CODES = new Set([
  "invalid_request",
  "invalid_client",
  "invalid_grant",
  "unauthorized_client",
  "unsupported_grant_type",
  "invalid_scope",
  "access_denied",
  "unsupported_response_type",
  "server_error",
  "temporarily_unavailable",
  "invalid_token",
  "insufficient_scope",
]);

/** What an error message says of a provider's answer: its HTTP status and, when `error` is a
 * registered OAuth error code, that code. */
function answerOf(body: Record<string, unknown> | null, status: number): string {
  const error = body?.error;
  return typeof error === "string" && OAUTH_ERROR_CODES.has(error) ? `${error} (HTTP ${status})` : `HTTP ${status}`;
}

async function call(
  url: string,
  init: RequestInit,
  what: string,
  timeoutMs: number,
): Promise<{ status: number; body: Record<string, unknown> | null }> {
  let response: Response;
  try {
    // "manual": a redirect is answered as what it is (and reported so) instead of followed.
    response = await fetch(url, { ...init, redirect: "manual", signal: AbortSignal.timeout(timeoutMs) });
  } catch (error) {
    const reason = (error as Error).name === "TimeoutError" ? `gave no answer within ${timeoutMs} ms` : "could not be reached";
    throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} (${new URL(url).origin}) ${reason}`);
  }
  if (response.status >= 300 && response.status < 400) {
    await response.body?.cancel();
    throw serviceError(
      "OAUTH2_PROVIDER_UNAVAILABLE",
      `${what} (${new URL(url).origin}) answered with a redirect (HTTP ${response.status}), which is not followed: its setting ` +
        "must name the endpoint itself",
    );
  }
  let text: string;
  try {
    text = await readCapped(response, what);
  } catch (error) {
    if ((error as { turnkeyErrorCode?: string }).turnkeyErrorCode) throw error;
    const reason = (error as Error).name === "TimeoutError" ? `did not finish its answer within ${timeoutMs} ms` : "broke off its answer";
    throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} ${reason}`);
  }
  const body = parseJson(text);
  // A failing or overloaded provider says nothing about the code: it may still be good.
  if (response.status >= 500 || response.status === 429)
    throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} failed with ${answerOf(body, response.status)}: try again later`);
  return { status: response.status, body };
}

const basic = (clientId: string, clientSecret: string) =>
  `Basic ${Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret)}`).toString("base64")}`;

export function oauth2Providers(config: Oauth2ProviderConfig, options: { timeoutMs?: number } = {}): Oauth2Providers {
  const timeoutMs = options.timeoutMs ?? TIMEOUT_MS;
  const endpoints = (provider: Oauth2ProviderName): Oauth2Endpoints => (provider === "OAUTH2_PROVIDER_X" ? config.x : config.discord);

  return {
    async exchangeCode(provider, exchange) {
      const form = new URLSearchParams({
        grant_type: "authorization_code",
        code: exchange.code,
        redirect_uri: exchange.redirectUri,
        code_verifier: exchange.codeVerifier,
      });
      const headers: Record<string, string> = { "content-type": "application/x-www-form-urlencoded", accept: "application/json" };
      // X takes a confidential client's credentials by HTTP Basic; Discord documents them in the form.
      if (provider === "OAUTH2_PROVIDER_X") headers.authorization = basic(exchange.clientId, exchange.clientSecret);
      else {
        form.set("client_id", exchange.clientId);
        form.set("client_secret", exchange.clientSecret);
      }
      const what = `${LABEL[provider]}'s token endpoint`;
      const { status, body } = await call(
        endpoints(provider).tokenUrl,
        { method: "POST", headers, body: form.toString() },
        what,
        timeoutMs,
      );
      if (status !== 200)
        throw serviceError("OAUTH2_PROVIDER_REFUSED", `${what} refused the authorization code: ${answerOf(body, status)}`);
      const token = body?.access_token;
      if (typeof token !== "string" || token.length === 0)
        throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} answered without an access_token`);
      if (typeof body?.token_type === "string" && body.token_type.toLowerCase() !== "bearer")
        // Its token_type is not repeated: like every word of the answer, it could be anything.
        throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} answered a token that is not a bearer token`);
      return token;
    },

    async userOf(provider, accessToken) {
      const what = `${LABEL[provider]}'s user-info endpoint`;
      const { status, body } = await call(
        endpoints(provider).userInfoUrl,
        { method: "GET", headers: { authorization: `Bearer ${accessToken}`, accept: "application/json" } },
        what,
        timeoutMs,
      );
      if (status !== 200)
        throw serviceError(
          "OAUTH2_PROVIDER_REFUSED",
          `${what} refused the access token (${answerOf(body, status)}): the app may lack the scopes ` +
            (provider === "OAUTH2_PROVIDER_X" ? "tweet.read and users.read" : "identify and email"),
        );
      // X wraps the user in `data` (https://docs.x.com/x-api/users/user-lookup-me); Discord answers the user object.
      const user = (provider === "OAUTH2_PROVIDER_X" ? body?.data : body) as Record<string, unknown> | undefined;
      const id = user?.id;
      if (typeof id !== "string" || !/^[0-9A-Za-z_-]{1,64}$/.test(id))
        throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} answered without a user id`);
      const text = (value: unknown) => (typeof value === "string" && value.length > 0 ? value.slice(0, 256) : undefined);
      if (provider === "OAUTH2_PROVIDER_X") return { id, username: text(user?.username), name: text(user?.name) };
      return {
        id,
        username: text(user?.username),
        name: text(user?.global_name),
        email: text(user?.email),
        emailVerified: typeof user?.verified === "boolean" ? user.verified : undefined,
      };
    },
  };
}
