// Keys the deployment itself holds (not an organization's): created on first start, sealed at rest
// like every secret, and the same for every server process sharing the database: the Ed25519 key
// webhook deliveries are signed with, the P-256 key export/import bundles are signed with, the P-256
// key OAuth 2.0 client secrets are encrypted to, and the key the OIDC tokens Sigil issues are signed
// with. Their public halves are published (/.well-known/sigil.json, the JWKS routes).
import crypto from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import { p256 } from "@noble/curves/nist.js";
import { signEs256Jwt, verifyEs256Jwt } from "../crypto/jwt.js";
import type { Keyring } from "../crypto/envelope.js";
import { openQuorumEnvelope } from "../crypto/quorum-envelope.js";
import type { Store } from "../store/database.js";
import type { ServiceKeysTable } from "../store/schema.js";
import { newId } from "../store/ids.js";

export const WEBHOOK_SIGNING = "webhook_signing";

export interface ServiceSigningKey {
  /** What deliveries name the key by (X-Turnkey-Signature-Key-Id). */
  keyId: string;
  /** Hex, 32 bytes. */
  publicKey: string;
  sign(message: Uint8Array): Buffer;
}

const identity = (row: Pick<ServiceKeysTable, "id" | "organization_id">) => ({
  organizationId: row.organization_id,
  kind: "service_key",
  resourceId: row.id,
});

/** The stored key for `purpose`, made (and stored sealed) with `generate` if this deployment has none
 * yet; with its private half opened. Several processes starting at once end up with the same key. */
async function serviceKey(store: Store, keyring: Keyring, purpose: string, generate: () => { secret: Uint8Array; publicKey: string }) {
  let row = await store.db.selectFrom("service_keys").selectAll().where("purpose", "=", purpose).executeTakeFirst();
  if (!row) {
    const { secret, publicKey } = generate();
    const id = newId();
    const fresh: ServiceKeysTable = {
      id,
      purpose,
      organization_id: "",
      public_key: publicKey,
      sealed_private_key: keyring.seal(secret, identity({ id, organization_id: "" })),
      created_at: Date.now(),
    };
    secret.fill(0);
    try {
      await store.transact("exclusive", (trx) => trx.insertInto("service_keys").values(fresh).execute());
    } catch (error) {
      // Another process made it at the same moment (the purpose is unique): use theirs.
      row = await store.db.selectFrom("service_keys").selectAll().where("purpose", "=", purpose).executeTakeFirst();
      if (!row) throw error;
    }
    row ??= await store.db.selectFrom("service_keys").selectAll().where("purpose", "=", purpose).executeTakeFirstOrThrow();
  }
  return { row, secret: keyring.open(row.sealed_private_key, identity(row)) };
}

/** The service's Ed25519 key for `purpose` (made and sealed on first use), opened into a node:crypto
 * key that signs; the seed is wiped once the key object holds it. */
async function ed25519ServiceKey(store: Store, keyring: Keyring, purpose: string) {
  const { row, secret } = await serviceKey(store, keyring, purpose, () => {
    const seed = ed25519.utils.randomSecretKey();
    return { secret: seed, publicKey: Buffer.from(ed25519.getPublicKey(seed)).toString("hex") };
  });
  const publicKey = Buffer.from(row.public_key, "hex");
  const privateKey = crypto.createPrivateKey({
    key: { kty: "OKP", crv: "Ed25519", d: secret.toString("base64url"), x: publicKey.toString("base64url") },
    format: "jwk",
  });
  secret.fill(0);
  return { row, publicKey, sign: (message: Uint8Array) => crypto.sign(null, message, privateKey) };
}

/** The Ed25519 key webhook deliveries are signed with. */
export async function serviceSigningKey(store: Store, keyring: Keyring): Promise<ServiceSigningKey> {
  const { row, publicKey, sign } = await ed25519ServiceKey(store, keyring, WEBHOOK_SIGNING);
  return {
    keyId: `whk_${crypto.createHash("sha256").update(publicKey).digest("hex").slice(0, 16)}`,
    publicKey: row.public_key,
    sign,
  };
}

export const BUNDLE_SIGNER = "bundle_signer";

/** The P-256 key export and import bundles are signed with (the product's "enclave quorum key"). */
export interface BundleSigner {
  /** Uncompressed, lowercase hex (04…): clients compare it character for character. */
  publicKey: string;
  /** ECDSA P-256 over SHA-256 of `data`, DER. */
  sign(data: Uint8Array): Buffer;
  /** A JWT signed (ES256) by this key: OTP verification tokens, which clients check against
   * the same published key as the bundles. */
  signJwt(claims: Record<string, unknown>): string;
  verifyJwt(token: string): Record<string, unknown> | null;
}

/** A P-256 key of the deployment for `purpose` (serviceKey), opened as node:crypto keys; x and y are
 * the public point's coordinates (base64url, as in a JWK). */
async function p256ServiceKey(store: Store, keyring: Keyring, purpose: string) {
  const { row, secret } = await serviceKey(store, keyring, purpose, () => {
    const scalar = p256.utils.randomSecretKey();
    return { secret: scalar, publicKey: Buffer.from(p256.getPublicKey(scalar, false)).toString("hex") };
  });
  const point = Buffer.from(row.public_key, "hex");
  const x = point.subarray(1, 33).toString("base64url");
  const y = point.subarray(33).toString("base64url");
  const privateKey = crypto.createPrivateKey({ key: { kty: "EC", crv: "P-256", d: secret.toString("base64url"), x, y }, format: "jwk" });
  secret.fill(0);
  return { row, point, x, y, privateKey, publicKey: crypto.createPublicKey(privateKey) };
}

export async function bundleSigner(store: Store, keyring: Keyring): Promise<BundleSigner> {
  const { row, privateKey, publicKey } = await p256ServiceKey(store, keyring, BUNDLE_SIGNER);
  return {
    publicKey: row.public_key,
    sign: (data) => crypto.sign("sha256", data, { key: privateKey, dsaEncoding: "der" }),
    signJwt: (claims) => signEs256Jwt(privateKey, claims),
    verifyJwt: (token) => verifyEs256Jwt(publicKey, token),
  };
}

export const SESSION_SIGNER = "session_signer";

/** The ES256 key session JWTs and verification tokens are signed with. */
export interface SessionSigner {
  /** The JWT header's `kid`. */
  keyId: string;
  /** The public key as a JWK (published in the deployment's JWKS). */
  jwk: { kty: "EC"; crv: "P-256"; x: string; y: string; kid: string; alg: "ES256"; use: "sig" };
  sign(claims: Record<string, unknown>): string;
  /** The claims, if the signature is this key's; null otherwise. */
  verify(token: string): Record<string, unknown> | null;
}

export async function sessionSigner(store: Store, keyring: Keyring): Promise<SessionSigner> {
  const { point, x, y, privateKey, publicKey } = await p256ServiceKey(store, keyring, SESSION_SIGNER);
  const keyId = `ses_${crypto.createHash("sha256").update(point).digest("hex").slice(0, 16)}`;
  return {
    keyId,
    jwk: { kty: "EC", crv: "P-256", x, y, kid: keyId, alg: "ES256", use: "sig" },
    sign: (claims) => signEs256Jwt(privateKey, claims, { kid: keyId }),
    verify: (token) => verifyEs256Jwt(publicKey, token),
  };
}

export const OTP_CODE_KEY = "otp_code_key";

/** Keys the hashes one-time passwords are stored as: HMAC-SHA256 under a secret of the deployment,
 * so a copy of the database alone does not let anyone try the (small) code space offline. */
export async function otpCodeHasher(store: Store, keyring: Keyring): Promise<(message: string) => string> {
  const { secret } = await serviceKey(store, keyring, OTP_CODE_KEY, () => ({ secret: crypto.randomBytes(32), publicKey: "" }));
  const key = Buffer.from(secret);
  secret.fill(0);
  return (message) => crypto.createHmac("sha256", key).update(message).digest("hex");
}

export const TLS_FETCHER_ENCRYPT = "tls_fetcher_encrypt";

/** The P-256 key OAuth 2.0 client secrets are encrypted to (the product's "TLS Fetcher" quorum key,
 * published as `tlsFetcherEncryptPublicKey`): what a client passes to encryptOauth2ClientSecret. */
export interface ClientSecretKey {
  /** Uncompressed, lowercase hex (04…). */
  publicKey: string;
  /** The secret inside an envelope encrypted to this key (QuorumEnvelopeError otherwise). */
  open(envelopeHex: string): Buffer;
}

export async function clientSecretKey(store: Store, keyring: Keyring): Promise<ClientSecretKey> {
  const { row, point, privateKey } = await p256ServiceKey(store, keyring, TLS_FETCHER_ENCRYPT);
  return { publicKey: row.public_key, open: (envelopeHex) => openQuorumEnvelope(privateKey, point, envelopeHex) };
}

export const OIDC_ISSUER = "oidc_issuer";

/** The ES256 key the OIDC tokens oauth2_authenticate issues are signed with, published in the JWKS
 * that Sigil's discovery document names. Its own key: a session JWT is never mistaken for an identity token. */
export interface IdentityTokenSigner {
  keyId: string;
  jwk: { kty: "EC"; crv: "P-256"; x: string; y: string; kid: string; alg: "ES256"; use: "sig" };
  sign(claims: Record<string, unknown>): string;
}

export async function identityTokenSigner(store: Store, keyring: Keyring): Promise<IdentityTokenSigner> {
  const { point, x, y, privateKey } = await p256ServiceKey(store, keyring, OIDC_ISSUER);
  const keyId = `oidc_${crypto.createHash("sha256").update(point).digest("hex").slice(0, 16)}`;
  return {
    keyId,
    jwk: { kty: "EC", crv: "P-256", x, y, kid: keyId, alg: "ES256", use: "sig" },
    sign: (claims) => signEs256Jwt(privateKey, claims, { kid: keyId }),
  };
}

export const TRANSPARENCY_LOG_SIGNING = "transparency_log_signing";

/** The Ed25519 key the organizations' log checkpoints are signed with (services/log-checkpoints.ts). */
export interface LogSigningKey {
  /** 32 bytes. */
  publicKey: Buffer;
  sign(message: Uint8Array): Buffer;
}

export async function logSigningKey(store: Store, keyring: Keyring): Promise<LogSigningKey> {
  const { publicKey, sign } = await ed25519ServiceKey(store, keyring, TRANSPARENCY_LOG_SIGNING);
  return { publicKey, sign };
}
