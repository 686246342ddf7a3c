// An OpenID Connect issuer on loopback for tests: a discovery document and a JWKS served over HTTP,
// and identity tokens (RS256) signed with its key — what Google or Auth0 are to a real deployment.
import http from "node:http";
import type { AddressInfo } from "node:net";
import { SignJWT, exportJWK, generateKeyPair, type CryptoKey } from "jose";

export interface TestIssuer {
  /** The `iss` value (http://127.0.0.1:<port>), to list in SIGIL_OIDC_ALLOWED_ISSUERS. */
  issuer: string;
  /** Paths the issuer was asked for, in order. */
  requests: string[];
  /** An identity token for `sub` (audience, nonce and expiry as given — `exp: 0` leaves it out; signed
   * with another key when `key` is passed). */
  token(claims: { sub: string; aud?: string | string[]; nonce?: string; iss?: string; exp?: number }, key?: CryptoKey): Promise<string>;
  close(): Promise<void>;
}

export const TEST_AUDIENCE = "sigil-test-app";

export async function startOidcIssuer(): Promise<TestIssuer> {
  const pair = await generateKeyPair("RS256");
  const jwk = { ...(await exportJWK(pair.publicKey)), kid: "test-key-1", alg: "RS256", use: "sig" };
  const requests: string[] = [];
  let issuer = "";
  const server = http.createServer((request, response) => {
    requests.push(request.url ?? "");
    if (request.url === "/.well-known/openid-configuration") {
      response
        .writeHead(200, { "content-type": "application/json" })
        .end(JSON.stringify({ issuer, jwks_uri: `${issuer}/jwks`, id_token_signing_alg_values_supported: ["RS256"] }));
    } else if (request.url === "/jwks") {
      response.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ keys: [jwk] }));
    } else response.writeHead(404).end();
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  issuer = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    issuer,
    requests,
    token(claims, key = pair.privateKey) {
      const jwt = new SignJWT({ email: "user@example.com", ...(claims.nonce ? { nonce: claims.nonce } : {}) })
        .setProtectedHeader({ alg: "RS256", kid: "test-key-1" })
        .setIssuer(claims.iss ?? issuer)
        .setSubject(claims.sub)
        .setAudience(claims.aud ?? TEST_AUDIENCE)
        .setIssuedAt();
      if (claims.exp !== 0) jwt.setExpirationTime(claims.exp ?? Math.floor(Date.now() / 1000) + 600);
      return jwt.sign(key);
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
