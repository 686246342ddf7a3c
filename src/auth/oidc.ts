// OpenID Connect identity tokens (oauth, oauth_login, OAuth providers). A token is accepted only from
// an issuer the operator listed (SIGIL_OIDC_ALLOWED_ISSUERS): no other host is ever contacted. The
// issuer's keys are found through its discovery document (<iss>/.well-known/openid-configuration,
// whose `issuer` must be the token's) and fetched and cached by jose, which also checks the
// signature, `iss` and `exp`. The audience and subject are matched by the caller against the user's
// OAuth providers, and the nonce against the session key the login is for.
import { createRemoteJWKSet, decodeJwt, errors as joseErrors, jwtVerify, type JWTPayload } from "jose";
import { ServiceError, serviceError } from "../errors.js";

export interface OidcIdentity {
  issuer: string;
  subject: string;
  /** The token's `aud`, as a list. */
  audiences: string[];
  nonce: string | undefined;
  claims: JWTPayload;
}

export interface OidcVerifier {
  /** Checks signature, issuer and expiry; returns who the token names. */
  verify(token: string): Promise<OidcIdentity>;
}

/** The JWT inside an `oidcToken` field (sent as the compact JWT, or base64 of it). */
export function oidcJwt(raw: unknown): string {
  const text = String(raw ?? "").trim();
  const jwt = text.split(".").length === 3 ? text : Buffer.from(text, "base64").toString("utf8").trim();
  if (!/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(jwt))
    throw serviceError("OIDC_TOKEN_INVALID", "oidcToken is not a JWT (or base64 of one)", "InvalidArgument");
  return jwt;
}

/** The identity claims of a token, read without verifying it: what the audit log keeps in its place. */
export function unverifiedOidcClaims(raw: unknown): { iss: string; sub: string; aud: string } | null {
  try {
    const claims = decodeJwt(oidcJwt(raw));
    const aud = Array.isArray(claims.aud) ? (claims.aud[0] ?? "") : (claims.aud ?? "");
    return { iss: String(claims.iss ?? ""), sub: String(claims.sub ?? ""), aud };
  } catch {
    return null;
  }
}

/** What jose found wrong with a token, in the token's terms (jose's messages name its own checks). */
function tokenProblem(error: unknown): string {
  if (error instanceof joseErrors.JWTClaimValidationFailed)
    return error.reason === "missing"
      ? `it has no ${error.claim} claim`
      : error.claim === "iss"
        ? "its iss claim is not the issuer whose keys verified it"
        : error.claim === "nbf" || error.claim === "iat"
          ? `its ${error.claim} claim is in the future`
          : `its ${error.claim} claim is not valid`;
  if (error instanceof joseErrors.JOSEAlgNotAllowed || error instanceof joseErrors.JOSENotSupported)
    return `its algorithm (alg) is not one of ${ALGORITHMS.join(", ")}`;
  if (error instanceof joseErrors.JWKSMultipleMatchingKeys) return "its header names no key (kid) the issuer's key set tells apart";
  return "it is not a signed JWT the issuer's keys can verify (header, claims or signature malformed)";
}

const ALGORITHMS = ["RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"];

export function oidcVerifier(
  allowedIssuers: string[],
  options: { timeoutMs?: number; clockToleranceSeconds?: number; clock?: () => number } = {},
): OidcVerifier {
  const allowed = new Set(allowedIssuers);
  const keySets = new Map<string, Promise<ReturnType<typeof createRemoteJWKSet>>>();
  const timeoutMs = options.timeoutMs ?? 5_000;

  async function discover(issuer: string): Promise<ReturnType<typeof createRemoteJWKSet>> {
    const url = `${issuer.replace(/\/$/, "")}/.well-known/openid-configuration`;
    let document: { issuer?: unknown; jwks_uri?: unknown };
    let response: Response;
    try {
      response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs), redirect: "error" });
    } catch (error) {
      // fetch's own words ("fetch failed") say nothing of why; a timeout is told apart.
      const why =
        (error as Error).name === "TimeoutError" ? `did not answer within ${timeoutMs / 1000} s` : "could not be reached (or redirected)";
      throw serviceError("OIDC_DISCOVERY_FAILED", `could not read the discovery document of issuer ${issuer}: ${url} ${why}`);
    }
    if (!response.ok)
      throw serviceError(
        "OIDC_DISCOVERY_FAILED",
        `could not read the discovery document of issuer ${issuer}: ${url} answered ${response.status}`,
      );
    try {
      document = (await response.json()) as typeof document;
    } catch {
      throw serviceError("OIDC_DISCOVERY_FAILED", `could not read the discovery document of issuer ${issuer}: ${url} did not answer JSON`);
    }
    if (document.issuer !== issuer || typeof document.jwks_uri !== "string") {
      throw serviceError(
        "OIDC_DISCOVERY_FAILED",
        `the discovery document of ${issuer} names issuer ${String(document.issuer)} / jwks_uri ${String(document.jwks_uri)}`,
      );
    }
    return createRemoteJWKSet(new URL(document.jwks_uri), {
      timeoutDuration: timeoutMs,
      cooldownDuration: 30_000,
      cacheMaxAge: 10 * 60_000,
    });
  }

  function keySetOf(issuer: string) {
    let keySet = keySets.get(issuer);
    if (!keySet) {
      keySet = discover(issuer);
      keySets.set(issuer, keySet);
      // A failed discovery is tried again by the next login, not remembered.
      keySet.catch(() => keySets.delete(issuer));
    }
    return keySet;
  }

  return {
    async verify(raw) {
      const token = oidcJwt(raw);
      let issuer: string;
      try {
        issuer = String(decodeJwt(token).iss ?? "");
      } catch {
        throw serviceError("OIDC_TOKEN_INVALID", "oidcToken is not a JWT", "InvalidArgument");
      }
      if (!allowed.has(issuer)) {
        throw serviceError(
          "OIDC_ISSUER_NOT_ALLOWED",
          `tokens of issuer "${issuer}" are not accepted: the operator lists the accepted issuers in SIGIL_OIDC_ALLOWED_ISSUERS`,
        );
      }
      const keySet = await keySetOf(issuer);
      try {
        const now = options.clock ? Math.floor(options.clock() / 1000) : undefined;
        // exp and sub are required: jose checks exp only when present, and a token that never expires
        // would be a lasting credential.
        const { payload } = await jwtVerify(token, keySet, {
          issuer,
          algorithms: ALGORITHMS,
          requiredClaims: ["exp", "sub"],
          clockTolerance: options.clockToleranceSeconds ?? 30,
          ...(now !== undefined ? { currentDate: new Date(now * 1000) } : {}),
        });
        if (!payload.sub) throw serviceError("OIDC_TOKEN_INVALID", "the OIDC token has no subject (sub)", "Unauthenticated");
        const audiences = Array.isArray(payload.aud) ? payload.aud : payload.aud ? [payload.aud] : [];
        return {
          issuer,
          subject: payload.sub,
          audiences,
          nonce: typeof payload.nonce === "string" ? payload.nonce : undefined,
          claims: payload,
        };
      } catch (error) {
        if (error instanceof ServiceError) throw error;
        if (error instanceof joseErrors.JWTExpired) throw serviceError("OIDC_TOKEN_EXPIRED", "the OIDC token has expired");
        if (error instanceof joseErrors.JWTClaimValidationFailed && (error.claim === "exp" || error.claim === "sub"))
          throw serviceError("OIDC_TOKEN_INVALID", `the OIDC token has no ${error.claim} claim`, "Unauthenticated");
        if (error instanceof joseErrors.JWSSignatureVerificationFailed || error instanceof joseErrors.JWKSNoMatchingKey) {
          throw serviceError("OIDC_SIGNATURE_INVALID", `the OIDC token's signature does not verify with the keys of ${issuer}`);
        }
        if (error instanceof joseErrors.JWKSTimeout)
          throw serviceError("OIDC_DISCOVERY_FAILED", `could not fetch the keys of issuer ${issuer}: its jwks_uri did not answer in time`);
        if ((error as { code?: string }).code === "ERR_JOSE_GENERIC" || error instanceof joseErrors.JWKSInvalid)
          throw serviceError(
            "OIDC_DISCOVERY_FAILED",
            `could not fetch the keys of issuer ${issuer}: its jwks_uri did not answer a JSON Web Key Set`,
          );
        throw serviceError("OIDC_TOKEN_INVALID", `the OIDC token is not valid: ${tokenProblem(error)}`, "Unauthenticated");
      }
    },
  };
}
