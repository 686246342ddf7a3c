// The stamp headers: what they look like on the wire and whether their signatures hold.
// Looking up who owns the key is authenticate.ts's job; this module touches no database.
import { serviceError } from "../errors.js";
import {
  type ApiKeyCurve,
  isHex,
  verifyEd25519,
  verifyEd25519OffLoop,
  verifyP256Der,
  verifyP256DerOffLoop,
  verifySecp256k1Der,
  verifySecp256k1Eip191Der,
} from "../crypto/keys.js";

export const API_KEY_STAMP_HEADER = "x-stamp";
export const WEBAUTHN_STAMP_HEADER = "x-stamp-webauthn";
/** A key that is no stored credential, vouched for by a token naming it (auth/attested.ts). */
export const ATTESTED_STAMP_HEADER = "x-stamp-attested";

export type StampScheme =
  | "SIGNATURE_SCHEME_TK_API_P256"
  | "SIGNATURE_SCHEME_TK_API_SECP256K1"
  | "SIGNATURE_SCHEME_TK_API_SECP256K1_EIP191"
  | "SIGNATURE_SCHEME_TK_API_ED25519";

/** Which API-key curve each scheme verifies with. */
export const SCHEME_CURVES: Record<StampScheme, ApiKeyCurve> = {
  SIGNATURE_SCHEME_TK_API_P256: "API_KEY_CURVE_P256",
  SIGNATURE_SCHEME_TK_API_SECP256K1: "API_KEY_CURVE_SECP256K1",
  SIGNATURE_SCHEME_TK_API_SECP256K1_EIP191: "API_KEY_CURVE_SECP256K1",
  SIGNATURE_SCHEME_TK_API_ED25519: "API_KEY_CURVE_ED25519",
};

export interface ApiKeyStamp {
  kind: "API_KEY";
  publicKey: string;
  scheme: StampScheme;
  signature: string;
}

export interface WebauthnStamp {
  kind: "WEBAUTHN";
  authenticatorData: string;
  clientDataJson: string;
  credentialId: string;
  signature: string;
}

export type Stamp = ApiKeyStamp | WebauthnStamp;

/** Which token vouches for an attested stamp's key: a verification token (email or SMS OTP) or an OIDC token. */
export type AttestedScheme = "STAMP_ATTESTED_SCHEME_P256_VERIFICATION_TOKEN" | "STAMP_ATTESTED_SCHEME_P256_OIDC";
const ATTESTED_SCHEMES: ReadonlySet<string> = new Set(["STAMP_ATTESTED_SCHEME_P256_VERIFICATION_TOKEN", "STAMP_ATTESTED_SCHEME_P256_OIDC"]);

export interface AttestedStamp {
  kind: "ATTESTED";
  publicKey: string;
  signature: string;
  /** The token binding `publicKey` to an identity; a bearer credential while it lives, never stored or logged. */
  attestation: string;
  scheme: AttestedScheme;
}

const malformed = (why: string) => serviceError("MALFORMED_STAMP", `malformed stamp: ${why}`);
const BASE64URL = /^[A-Za-z0-9_-]*={0,2}$/;

/** The refusal of an attested stamp where it proves nothing (everywhere but a vote). */
export const attestedStampNotAccepted = () =>
  serviceError(
    "ATTESTED_STAMP_NOT_ACCEPTED",
    "X-Stamp-Attested is accepted only on approve_activity and reject_activity by the requester of an activity waiting for their authentication (to prove an MFA step, or withdraw it): stamp this request with X-Stamp or X-Stamp-Webauthn",
  );

/**
 * Picks the one stamp a request carries; none or several is refused. An attested stamp is read only
 * where `attested` says it may prove something, and refused elsewhere.
 */
export function readStamp(headers: Record<string, string | string[] | undefined>): Stamp;
export function readStamp(headers: Record<string, string | string[] | undefined>, attested: boolean): Stamp | AttestedStamp;
export function readStamp(headers: Record<string, string | string[] | undefined>, attested = false): Stamp | AttestedStamp {
  const apiKey = headers[API_KEY_STAMP_HEADER];
  const webauthn = headers[WEBAUTHN_STAMP_HEADER];
  const attestedHeader = headers[ATTESTED_STAMP_HEADER];
  const sent = [apiKey, webauthn, attestedHeader].filter((h) => h !== undefined);
  if (sent.length === 0) {
    throw serviceError("SIGNATURE_MISSING", "request is not stamped: send exactly one of X-Stamp or X-Stamp-Webauthn");
  }
  if (sent.length > 1) {
    throw serviceError(
      "MULTIPLE_STAMPS",
      "request carries more than one of X-Stamp, X-Stamp-Webauthn and X-Stamp-Attested: send exactly one",
    );
  }
  if (attestedHeader !== undefined && !attested) throw attestedStampNotAccepted();
  // Repeated header lines arrive as arrays (the HTTP layer passes them distinct); a proxy may instead
  // have joined them with ", ", which base64url never contains.
  const repeated = (value: string | string[] | undefined) => Array.isArray(value) && value.length > 1;
  const single = (value: string | string[]) => (Array.isArray(value) ? value[0]! : value);
  if (repeated(sent[0]) || (apiKey !== undefined || attestedHeader !== undefined ? single(sent[0]!) : "").includes(",")) {
    throw serviceError("MULTIPLE_STAMPS", "the stamp header appears more than once: send exactly one");
  }
  if (apiKey !== undefined) return parseApiKeyStamp(single(apiKey));
  if (attestedHeader !== undefined) return parseAttestedStamp(single(attestedHeader));
  return parseWebauthnStamp(single(webauthn!));
}

function parseJsonObject(text: string, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw malformed(`${what} is not JSON`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) throw malformed(`${what} is not a JSON object`);
  return value as Record<string, unknown>;
}

function stringField(obj: Record<string, unknown>, field: string, what: string): string {
  const value = obj[field];
  if (typeof value !== "string" || value === "") throw malformed(`${what} has no "${field}" string`);
  return value;
}

export function parseApiKeyStamp(header: string): ApiKeyStamp {
  if (!BASE64URL.test(header)) throw malformed("X-Stamp is not base64url");
  const obj = parseJsonObject(Buffer.from(header, "base64url").toString("utf8"), "X-Stamp");
  const publicKey = stringField(obj, "publicKey", "X-Stamp");
  const scheme = stringField(obj, "scheme", "X-Stamp");
  const signature = stringField(obj, "signature", "X-Stamp");
  if (!(scheme in SCHEME_CURVES)) throw malformed(`unsupported signature scheme "${scheme}"`);
  if (!isHex(publicKey)) throw malformed("publicKey is not hex");
  if (!isHex(signature)) throw malformed("signature is not hex");
  return { kind: "API_KEY", publicKey: publicKey.toLowerCase(), scheme: scheme as StampScheme, signature: signature.toLowerCase() };
}

export function parseWebauthnStamp(header: string): WebauthnStamp {
  const obj = parseJsonObject(header, "X-Stamp-Webauthn");
  const fields = ["authenticatorData", "clientDataJson", "credentialId", "signature"] as const;
  const values = Object.fromEntries(fields.map((f) => [f, stringField(obj, f, "X-Stamp-Webauthn")])) as Record<
    (typeof fields)[number],
    string
  >;
  for (const f of fields) if (!BASE64URL.test(values[f])) throw malformed(`X-Stamp-Webauthn ${f} is not base64url`);
  return { kind: "WEBAUTHN", ...values };
}

export function parseAttestedStamp(header: string): AttestedStamp {
  if (!BASE64URL.test(header)) throw malformed("X-Stamp-Attested is not base64url");
  const obj = parseJsonObject(Buffer.from(header, "base64url").toString("utf8"), "X-Stamp-Attested");
  const publicKey = stringField(obj, "publicKey", "X-Stamp-Attested");
  const signature = stringField(obj, "signature", "X-Stamp-Attested");
  const attestation = stringField(obj, "publicKeyAttestation", "X-Stamp-Attested");
  const scheme = stringField(obj, "scheme", "X-Stamp-Attested");
  if (!ATTESTED_SCHEMES.has(scheme)) throw malformed(`unsupported attested stamp scheme "${scheme}"`);
  if (!isHex(publicKey)) throw malformed("publicKey is not hex");
  if (!isHex(signature)) throw malformed("signature is not hex");
  return {
    kind: "ATTESTED",
    publicKey: publicKey.toLowerCase(),
    signature: signature.toLowerCase(),
    attestation,
    scheme: scheme as AttestedScheme,
  };
}

/**
 * Whether an API-key stamp's signature covers exactly these body bytes. P-256 (every official
 * client's API key) and Ed25519 are checked on a thread of libuv's pool, off the event loop;
 * secp256k1 inline, by libsecp256k1, which is about as fast as the hand-over would be.
 */
export async function verifyApiKeyStamp(stamp: ApiKeyStamp, body: Uint8Array): Promise<boolean> {
  const signature = Buffer.from(stamp.signature, "hex");
  try {
    switch (stamp.scheme) {
      case "SIGNATURE_SCHEME_TK_API_P256":
        return await verifyP256DerOffLoop(stamp.publicKey, body, signature);
      case "SIGNATURE_SCHEME_TK_API_ED25519":
        return await verifyEd25519OffLoop(stamp.publicKey, body, signature);
      default:
        return verifyApiKeyStampInline(stamp, body);
    }
  } catch {
    // A key that is not on its curve or a signature that does not decode is simply not a valid stamp.
    return false;
  }
}

/** verifyApiKeyStamp on the calling thread (the bench's crypto ceiling counts its cost on one core). */
export function verifyApiKeyStampInline(stamp: ApiKeyStamp, body: Uint8Array): boolean {
  const signature = Buffer.from(stamp.signature, "hex");
  try {
    switch (stamp.scheme) {
      case "SIGNATURE_SCHEME_TK_API_P256":
        return verifyP256Der(stamp.publicKey, body, signature);
      case "SIGNATURE_SCHEME_TK_API_SECP256K1":
        return verifySecp256k1Der(stamp.publicKey, body, signature);
      case "SIGNATURE_SCHEME_TK_API_SECP256K1_EIP191":
        return verifySecp256k1Eip191Der(stamp.publicKey, body, signature);
      case "SIGNATURE_SCHEME_TK_API_ED25519":
        return verifyEd25519(stamp.publicKey, body, signature);
    }
  } catch {
    return false;
  }
}
