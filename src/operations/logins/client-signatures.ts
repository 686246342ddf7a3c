// Client signatures: proof that the holder of the key a verification token is bound to asked for this
// use of the token (a login with a session key, or a sign-up with given credentials), so that someone who
// only captured the token cannot spend it.
import crypto from "node:crypto";
import { p256 } from "@noble/curves/nist.js";
import { serviceError } from "../../errors.js";
import { verifyP256Der } from "../../crypto/keys.js";
import { foldEmail } from "./contacts.js";
import { sessionPublicKey } from "./sessions.js";
import type { VerificationClaims } from "./verification-tokens.js";

export interface ClientSignature {
  publicKey?: string;
  scheme?: string;
  message?: string;
  signature?: string;
}

/** What a client signature authorizes: a login with a session key, or a sign-up. */
export type SignatureUsage =
  | { type: "USAGE_TYPE_LOGIN"; sessionKey: string }
  /** The credentials the signed-up user gets: the signature must cover exactly these. */
  | { type: "USAGE_TYPE_SIGNUP"; credentials: SignupCredentials };

export interface SignupCredentials {
  apiKeys: string[];
  authenticators: string[];
  oauthProviders: string[];
}

const sameSet = (a: string[], b: string[]) => a.length === b.length && [...a].sort().every((v, i) => v === [...b].sort()[i]);

/**
 * A client signature by the key a verification token is bound to (verify_otp's public key): ECDSA
 * P-256 over SHA-256 of `message` (raw r||s or DER, hex), where `message` is the JSON the clients
 * build (@turnkey/core getClientSignatureMessageForLogin / …ForSignup): the usage type, the token id,
 * and for a login the session key. It proves the holder of the key that verified the code asked for
 * this use of the token: someone who only captured the token cannot spend it.
 */
export function checkClientSignature(
  signature: ClientSignature | undefined,
  claims: VerificationClaims,
  usage: SignatureUsage,
  required: boolean,
): void {
  if (!signature) {
    if (required || claims.public_key)
      throw serviceError(
        "CLIENT_SIGNATURE_REQUIRED",
        "clientSignature is required: sign the usage message with the key the verification token is bound to",
      );
    return;
  }
  if (!claims.public_key)
    throw serviceError(
      "CLIENT_SIGNATURE_INVALID",
      "this verification token is bound to no key (verify_otp was sent without publicKey): it takes no clientSignature",
      "InvalidArgument",
    );
  if (signature.scheme !== "CLIENT_SIGNATURE_SCHEME_API_P256")
    throw serviceError(
      "CLIENT_SIGNATURE_INVALID",
      `clientSignature.scheme must be CLIENT_SIGNATURE_SCHEME_API_P256, got ${String(signature.scheme)}`,
      "InvalidArgument",
    );
  const boundKey = sessionPublicKey(claims.public_key, "the token's public_key");
  if (sessionPublicKey(signature.publicKey, "clientSignature.publicKey") !== boundKey)
    throw serviceError(
      "CLIENT_SIGNATURE_INVALID",
      "clientSignature.publicKey is not the key the verification token is bound to",
      "PermissionDenied",
    );
  let message: {
    login?: { publicKey?: unknown };
    signupV2?: {
      email?: unknown;
      phoneNumber?: unknown;
      apiKeys?: Array<{ publicKey?: unknown }>;
      authenticators?: Array<{ attestation?: { credentialId?: unknown } }>;
      oauthProviders?: Array<{ oidcToken?: unknown }>;
    };
    tokenId?: unknown;
    type?: unknown;
  };
  try {
    message = JSON.parse(String(signature.message ?? "")) as typeof message;
  } catch {
    throw serviceError("CLIENT_SIGNATURE_INVALID", "clientSignature.message must be the JSON usage message", "InvalidArgument");
  }
  if (message?.type !== usage.type || message.tokenId !== claims.id)
    throw serviceError("CLIENT_SIGNATURE_INVALID", `clientSignature.message is not a ${usage.type} of this token`, "PermissionDenied");
  if (
    usage.type === "USAGE_TYPE_LOGIN" &&
    (typeof message.login?.publicKey !== "string" ||
      sessionPublicKey(message.login.publicKey, "clientSignature.message.login.publicKey") !== usage.sessionKey)
  ) {
    throw serviceError(
      "CLIENT_SIGNATURE_INVALID",
      "clientSignature.message logs in another session key than publicKey",
      "PermissionDenied",
    );
  }
  if (usage.type === "USAGE_TYPE_SIGNUP") {
    const signed = claims.verification_type === "OTP_TYPE_EMAIL" ? message.signupV2?.email : message.signupV2?.phoneNumber;
    if (signed !== undefined && foldEmail(String(signed)) !== foldEmail(claims.contact))
      throw serviceError(
        "CLIENT_SIGNATURE_INVALID",
        "clientSignature.message signs up another contact than the token proves",
        "PermissionDenied",
      );
    // The signature covers the credentials the new user gets: nobody relaying the request can swap in their own.
    const signup = message.signupV2 ?? {};
    const list = <T>(value: T[] | undefined) => (Array.isArray(value) ? value : []);
    const signed_ = {
      apiKeys: list(signup.apiKeys).map((k) => String(k?.publicKey ?? "").toLowerCase()),
      authenticators: list(signup.authenticators).map((a) => String(a?.attestation?.credentialId ?? "")),
      oauthProviders: list(signup.oauthProviders).map((o) => String(o?.oidcToken ?? "")),
    };
    for (const kind of ["apiKeys", "authenticators", "oauthProviders"] as const) {
      if (!sameSet(signed_[kind], usage.credentials[kind]))
        throw serviceError(
          "CLIENT_SIGNATURE_INVALID",
          `clientSignature.message signs up other ${kind} than the request gives the user`,
          "PermissionDenied",
        );
    }
  }
  const raw = String(signature.signature ?? "").replace(/^0x/, "");
  if (!/^([0-9a-fA-F]{2})+$/.test(raw))
    throw serviceError("CLIENT_SIGNATURE_INVALID", "clientSignature.signature must be hex", "InvalidArgument");
  const bytes = Buffer.from(raw, "hex");
  const signedBytes = Buffer.from(String(signature.message), "utf8");
  const ok =
    bytes.length === 64
      ? p256.verify(bytes, crypto.createHash("sha256").update(signedBytes).digest(), Buffer.from(boundKey, "hex"), {
          prehash: false,
          lowS: false,
        })
      : verifyP256Der(boundKey, signedBytes, bytes);
  if (!ok)
    throw serviceError("CLIENT_SIGNATURE_INVALID", "clientSignature does not verify with the verification token's key", "PermissionDenied");
}
