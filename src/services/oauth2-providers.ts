// The OAuth 2.0 providers oauth2_authenticate talks to (X, Discord): an authorization code (with its
// PKCE code_verifier) exchanged at the provider's token endpoint with the organization's client id and
// secret, then the access token shown to the provider's user-info endpoint to learn who the user is.
// Only the endpoints the operator configured (SIGIL_OAUTH2_X_TOKEN_URL and the three like it) are contacted, with no redirects
// followed, a deadline per request and a cap on what is read. What a provider answers goes into error
// messages only as its OAuth error code and description, never the secret, the code or the token.
import type { Oauth2Endpoints, Oauth2ProviderConfig } from "../config.js";
import { serviceError } from "../errors.js";

export type Oauth2ProviderName = "OAUTH2_PROVIDER_X" | "OAUTH2_PROVIDER_DISCORD";

/** One request to a provider may take this long. */
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
  const reader = response.body?.getReader();
  if (!reader) return "";
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_ANSWER_BYTES) {
      await reader.cancel();
      throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} answered more than ${MAX_ANSWER_BYTES} bytes: not the provider's API`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}

const parseJson = (text: string): Record<string, unknown> | null => {
  try {
    const value = JSON.parse(text) as unknown;
    return value && typeof value === "object" && !Array.isArray(value) ? (value as Record<string, unknown>) : null;
  } catch {
    return null;
  }
};

/** The provider's own words for a refusal: its OAuth error code and description, on one short line,
 * with anything the request carried that must not be repeated taken out. */
function refusalOf(body: Record<string, unknown> | null, status: number, hide: string[]): string {
  const parts = [body?.error, body?.error_description ?? body?.detail ?? body?.title ?? body?.message]
    .filter((part): part is string => typeof part === "string" && part.length > 0)
    .map((part) => part.replace(/[\u0000-\u001f\u007f]/g, " ").slice(0, 200));
  let text = parts.length ? parts.join(": ") : `HTTP ${status}`;
  for (const secret of hide) if (secret) text = text.split(secret).join("<redacted>");
  return text;
}

async function call(
  url: string,
  init: RequestInit,
  what: string,
  hide: string[],
): Promise<{ status: number; body: Record<string, unknown> | null }> {
  let response: Response;
  try {
    response = await fetch(url, { ...init, redirect: "error", signal: AbortSignal.timeout(TIMEOUT_MS) });
  } catch (error) {
    const reason = (error as Error).name === "TimeoutError" ? `no answer within ${TIMEOUT_MS} ms` : "could not be reached";
    throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} (${new URL(url).origin}) ${reason}`);
  }
  let text: string;
  try {
    text = await readCapped(response, what);
  } catch (error) {
    if ((error as { turnkeyErrorCode?: string }).turnkeyErrorCode) throw error;
    throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} broke off its answer`);
  }
  const body = parseJson(text);
  if (response.status >= 500 || response.status === 429)
    throw serviceError(
      "OAUTH2_PROVIDER_UNAVAILABLE",
      `${what} failed with HTTP ${response.status} (${refusalOf(body, response.status, hide)})`,
    );
  return { status: response.status, body };
}

const basic = (clientId: string, clientSecret: string) =>
  `Basic ${Buffer.from(`${encodeURIComponent(clientId)}:${encodeURIComponent(clientSecret)}`).toString("base64")}`;

export function oauth2Providers(config: Oauth2ProviderConfig): Oauth2Providers {
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
      const hide = [exchange.clientSecret, exchange.code, exchange.codeVerifier];
      const { status, body } = await call(endpoints(provider).tokenUrl, { method: "POST", headers, body: form.toString() }, what, hide);
      if (status !== 200)
        throw serviceError("OAUTH2_PROVIDER_REFUSED", `${what} refused the authorization code: ${refusalOf(body, status, hide)}`);
      const token = body?.access_token;
      if (typeof token !== "string" || token.length === 0)
        throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} answered without an access_token`);
      if (typeof body?.token_type === "string" && body.token_type.toLowerCase() !== "bearer")
        throw serviceError("OAUTH2_PROVIDER_UNAVAILABLE", `${what} answered a ${body.token_type} token, not a bearer token`);
      return token;
    },

    async userOf(provider, accessToken) {
      const what = `${LABEL[provider]}'s user-info endpoint`;
      const { status, body } = await call(
        endpoints(provider).userInfoUrl,
        { method: "GET", headers: { authorization: `Bearer ${accessToken}`, accept: "application/json" } },
        what,
        [accessToken],
      );
      if (status !== 200)
        throw serviceError(
          "OAUTH2_PROVIDER_REFUSED",
          `${what} refused the access token (HTTP ${status}: ${refusalOf(body, status, [accessToken])}): the app may lack the scopes ` +
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
