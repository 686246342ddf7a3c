// Passkeys: reading a registration (attestation) into the key we store, and checking the assertion
// carried by an X-Stamp-Webauthn header. Attestation parsing and verification is @simplewebauthn's.
import { verifyRegistrationResponse } from "@simplewebauthn/server";
import { decodeClientDataJSON, parseAuthenticatorData, decodeCredentialPublicKey, cose } from "@simplewebauthn/server/helpers";
import { serviceError } from "../errors.js";
import { compressP256, verifyP256DerOffLoop, sha256 } from "../crypto/keys.js";
import type { WebauthnStamp } from "./stamps.js";

export interface WebauthnPolicy {
  /** Accepted relying-party ids; empty accepts any. */
  rpIds: string[];
  /** Accepted origins; empty accepts any. */
  origins: string[];
}

export interface RegistrationInput {
  credentialId: string;
  clientDataJson: string;
  attestationObject: string;
  transports: string[];
  /** The challenge the client presented to the authenticator (as sent in the request). */
  challenge: string;
}

export interface RegisteredPasskey {
  credentialId: string;
  /** Compressed P-256 hex. */
  publicKey: string;
  aaguid: string;
  attestationType: string;
  signCount: number;
}

const TRANSPORT_NAMES: Record<string, string> = {
  AUTHENTICATOR_TRANSPORT_BLE: "ble",
  AUTHENTICATOR_TRANSPORT_INTERNAL: "internal",
  AUTHENTICATOR_TRANSPORT_NFC: "nfc",
  AUTHENTICATOR_TRANSPORT_USB: "usb",
  AUTHENTICATOR_TRANSPORT_HYBRID: "hybrid",
};

/** base64url of `value`, accepting standard base64 and padding as browsers and libraries vary. */
export function toBase64url(value: string): string {
  return Buffer.from(value.replace(/-/g, "+").replace(/_/g, "/"), "base64").toString("base64url");
}

/** The challenge as WebAuthn encodes it in clientDataJSON: base64url of the challenge bytes. The
 * product's clients pass the challenge either already base64url-encoded or as the raw string. */
function challengeMatches(presented: string, fromClientData: string): boolean {
  return fromClientData === presented || fromClientData === Buffer.from(presented, "utf8").toString("base64url");
}

/**
 * Why @simplewebauthn refused a registration, in the request's terms: its messages quote its own
 * checks. Its errors carry no code (but for the relying-party check's class name), so the
 * client data is checked again here, and the rest told apart by their text; anything else is told as
 * an attestation object that does not verify.
 */
function attestationProblem(
  error: unknown,
  clientData: { origin?: string; challenge?: string; type?: string },
  challenge: string,
  policy: WebauthnPolicy,
): string {
  if (clientData.type !== "webauthn.create")
    return `clientDataJson's type is ${JSON.stringify(clientData.type ?? "")}, not "webauthn.create" (a registration)`;
  if (!challengeMatches(challenge, String(clientData.challenge ?? "")))
    return "clientDataJson's challenge is not the challenge this request presents";
  if (policy.origins.length && !policy.origins.includes(String(clientData.origin ?? "")))
    return `clientDataJson's origin ${JSON.stringify(clientData.origin ?? "")} is not one this server accepts (${policy.origins.join(", ")})`;
  const message = error instanceof Error ? `${error.name} ${error.message}` : "";
  if (/RPID|RP ID/i.test(message)) return `the authenticator data is for another relying party than ${policy.rpIds.join(" or ")}`;
  if (/public key alg|numeric alg/.test(message)) return "the passkey's key is not P-256 (ES256), the only kind of passkey served";
  if (/User presence/.test(message)) return "the authenticator did not report the user present";
  if (/[Aa]ttestation|attStmt|certificate|x5c/.test(message))
    return "its attestation statement does not verify (format, certificate chain or signature)";
  return "attestationObject does not decode as a WebAuthn registration (CBOR with authenticator data and a credential key)";
}

/** Verifies a passkey registration and returns the key to store. Only ES256 (P-256) passkeys are
 * accepted, as stamps are verified as P-256 signatures. */
export async function verifyPasskeyRegistration(input: RegistrationInput, policy: WebauthnPolicy): Promise<RegisteredPasskey> {
  const clientDataJson = toBase64url(input.clientDataJson);
  let clientData: { origin?: string; challenge?: string; type?: string };
  try {
    clientData = decodeClientDataJSON(clientDataJson);
  } catch {
    throw serviceError("INVALID_ATTESTATION", "attestation clientDataJson is not base64url JSON");
  }
  const origin = String(clientData.origin ?? "");
  let verification;
  try {
    verification = await verifyRegistrationResponse({
      response: {
        id: toBase64url(input.credentialId),
        rawId: toBase64url(input.credentialId),
        type: "public-key",
        response: {
          clientDataJSON: clientDataJson,
          attestationObject: toBase64url(input.attestationObject),
          // biome-ignore lint/suspicious/noExplicitAny: @simplewebauthn's transport union is narrower than the names the API sends; unknown ones were filtered out above
          transports: input.transports.map((t) => TRANSPORT_NAMES[t]).filter(Boolean) as any,
        },
        clientExtensionResults: {},
      },
      expectedChallenge: (challenge: string) => challengeMatches(input.challenge, challenge),
      expectedOrigin: policy.origins.length ? policy.origins : origin,
      expectedRPID: policy.rpIds.length ? policy.rpIds : undefined,
      requireUserVerification: false,
      supportedAlgorithmIDs: [cose.COSEALG.ES256],
    });
  } catch (error) {
    throw serviceError("INVALID_ATTESTATION", `attestation rejected: ${attestationProblem(error, clientData, input.challenge, policy)}`);
  }
  if (!verification.verified || !verification.registrationInfo) throw serviceError("INVALID_ATTESTATION", "attestation rejected");
  const info = verification.registrationInfo;
  const coseKey = decodeCredentialPublicKey(info.credential.publicKey) as Map<number, unknown>;
  const x = coseKey.get(cose.COSEKEYS.x) as Uint8Array;
  const y = coseKey.get(cose.COSEKEYS.y) as Uint8Array;
  if (coseKey.get(cose.COSEKEYS.crv) !== cose.COSECRV.P256 || !x || !y) {
    throw serviceError("INVALID_ATTESTATION", "only P-256 (ES256) passkeys are supported");
  }
  // An attestation of format "none" carries no signature by the key, so nothing above has used it:
  // it is checked here: a point of P-256, as every other registered key is (crypto/keys.ts).
  const publicKey = x.length === 32 && y.length === 32 ? p256PointOf(Buffer.concat([Buffer.from([4]), x, y])) : null;
  if (!publicKey) throw serviceError("INVALID_ATTESTATION", "the passkey's public key is not a point on P-256 (x and y of 32 bytes each)");
  return {
    credentialId: info.credential.id,
    publicKey,
    aaguid: info.aaguid,
    attestationType: info.fmt,
    signCount: info.credential.counter,
  };
}

/** The compressed form of an uncompressed P-256 point, or null when OpenSSL finds it is not a point
 * of the curve (its compressed form is then one every registered key's rule accepts). */
function p256PointOf(uncompressed: Buffer): string | null {
  try {
    return compressP256(uncompressed);
  } catch {
    return null;
  }
}

const stampInvalid = (why: string) => serviceError("SIGNATURE_INVALID", `passkey stamp rejected: ${why}`);

/**
 * Checks a passkey assertion over a request body: the challenge must be the lowercase hex SHA-256 of
 * the body, the user must have been present, and the signature must verify with the stored key (on a
 * thread of libuv's pool, as API-key stamps are: crypto/keys.ts).
 */
export async function verifyWebauthnStamp(
  stamp: WebauthnStamp,
  body: Uint8Array,
  publicKeyHex: string,
  policy: WebauthnPolicy,
): Promise<{ signCount: number }> {
  const clientDataBytes = Buffer.from(stamp.clientDataJson, "base64url");
  let clientData: { type?: unknown; challenge?: unknown; origin?: unknown };
  try {
    clientData = JSON.parse(clientDataBytes.toString("utf8"));
  } catch {
    throw stampInvalid("clientDataJson is not JSON");
  }
  if (clientData.type !== "webauthn.get") throw stampInvalid(`clientData type is "${String(clientData.type)}", expected "webauthn.get"`);
  const expectedChallenge = Buffer.from(sha256(body).toString("hex"), "utf8").toString("base64url");
  if (clientData.challenge !== expectedChallenge) throw stampInvalid("challenge does not match the request body");
  if (policy.origins.length && !policy.origins.includes(String(clientData.origin))) {
    throw stampInvalid(`origin "${String(clientData.origin)}" is not allowed`);
  }
  const authenticatorData = Buffer.from(stamp.authenticatorData, "base64url");
  let parsed;
  try {
    parsed = parseAuthenticatorData(authenticatorData);
  } catch {
    throw stampInvalid("authenticatorData does not parse");
  }
  if (!parsed.flags.up) throw stampInvalid("user presence flag is not set");
  if (policy.rpIds.length) {
    const rpIdHash = Buffer.from(parsed.rpIdHash);
    if (!policy.rpIds.some((rpId) => sha256(rpId).equals(rpIdHash))) throw stampInvalid("relying party id is not allowed");
  }
  const signed = Buffer.concat([authenticatorData, sha256(clientDataBytes)]);
  let valid = false;
  try {
    valid = await verifyP256DerOffLoop(publicKeyHex, signed, Buffer.from(stamp.signature, "base64url"));
  } catch {
    valid = false;
  }
  if (!valid) throw stampInvalid("signature does not verify");
  return { signCount: parsed.counter };
}
