// Attested stamps (X-Stamp-Attested): a fresh P-256 key that is no stored credential signs the request,
// and a token vouches that the key belongs to an identity — a verification token verify_otp issued
// bound to that key (email or SMS OTP), or an OIDC token whose nonce is sha256 of that key (OAuth).
// The identity names the user: the one of the request's organization holding that contact, or that
// OAuth provider. The pipeline accepts such a stamp only as a requester's proof of an MFA step
// (activities/mfa.ts); everywhere else it is refused. The token is looked at, never spent or stored:
// it stays a bearer credential until it expires.
import { serviceError } from "../../errors.js";
import type { Principal } from "../../auth/authenticate.js";
import type { AttestedStamp } from "../../auth/stamps.js";
import { stampKeyProblem, verifyP256Der } from "../../crypto/keys.js";
import type { Db } from "../../store/handles.js";
import type { OperationEnvironment } from "../../registry/registry.js";
import { foldEmail, usersWithContact } from "./contacts.js";
import { nonceOf } from "./oauth.js";
import type { VerificationClaims } from "./verification-tokens.js";

type Identity = { userId: string; method: NonNullable<Principal["attestedMethod"]>; credentialId: string };

const unknownIdentity = (what: string, organizationId: string) =>
  serviceError(
    "ATTESTED_IDENTITY_UNKNOWN",
    `no user of organization ${organizationId} has ${what}: the attested stamp names nobody who could prove an MFA step with it`,
  );
const ambiguousIdentity = (count: number, what: string, organizationId: string) =>
  serviceError(
    "ATTESTED_IDENTITY_AMBIGUOUS",
    `${count} users of organization ${organizationId} have ${what}: an attested stamp cannot tell them apart`,
  );

/** The user a verification token's contact names (the one user who has verified it; users holding it
 * unverified do not count), the token's key checked against the stamp's. */
async function verifiedContact(
  db: Db,
  stamp: AttestedStamp,
  organizationId: string,
  now: number,
  env: OperationEnvironment,
): Promise<Identity> {
  const claims = env.bundles.verifyJwt(stamp.attestation) as VerificationClaims | null;
  if (!claims || typeof claims.id !== "string")
    throw serviceError(
      "VERIFICATION_TOKEN_INVALID",
      "the attested stamp's publicKeyAttestation is not a verification token this server issued (its signature does not verify)",
      "InvalidArgument",
    );
  // The record, not the claims, is read for what it says: it also tells a token whose organization is gone.
  const row = await db.selectFrom("verification_tokens").selectAll().where("id", "=", claims.id).executeTakeFirst();
  if (!row)
    throw serviceError(
      "VERIFICATION_TOKEN_INVALID",
      `verification token ${claims.id} is unknown (its organization was deleted?)`,
      "NotFound",
    );
  if (row.expires_at <= now)
    throw serviceError(
      "VERIFICATION_TOKEN_EXPIRED",
      `verification token ${claims.id} expired at ${new Date(row.expires_at).toISOString()}`,
    );
  if (row.public_key === null || row.public_key.toLowerCase() !== stamp.publicKey)
    throw serviceError(
      "VERIFICATION_TOKEN_KEY_MISMATCH",
      `verification token ${claims.id} is ${row.public_key === null ? "bound to no key" : "bound to another key"}: an attested stamp must be signed with the key verify_otp was given`,
    );
  if (row.organization_id !== organizationId) {
    const organization = await db
      .selectFrom("organizations")
      .select("parent_organization_id")
      .where("id", "=", organizationId)
      .executeTakeFirst();
    if (organization?.parent_organization_id !== row.organization_id)
      throw serviceError(
        "VERIFICATION_TOKEN_ORGANIZATION_MISMATCH",
        `verification token ${claims.id} was issued to organization ${row.organization_id}; it serves that organization and its sub-organizations only`,
      );
  }
  const byEmail = row.otp_type === "OTP_TYPE_EMAIL";
  const holders = await usersWithContact(db, organizationId, row.otp_type, row.contact);
  const what = `${byEmail ? "email" : "phone number"} ${row.contact}`;
  // A contact set on a user but never proven may be a typo, someone else's mailbox: it vouches for
  // nobody, and it cannot crowd out the user who proved it either (anyone allowed to create users could
  // otherwise give one the requester's address and make every proof of it ambiguous).
  const verified = holders.filter((holder) => holder.verifiedAt !== null);
  if (verified.length > 1) throw ambiguousIdentity(verified.length, `verified ${what}`, organizationId);
  if (verified.length === 0 && holders.length === 1)
    throw serviceError(
      "ATTESTED_IDENTITY_UNKNOWN",
      `user ${holders[0]!.id} has ${what} but has never verified it (otp_login, or update_user_email / update_user_phone_number with a verification token, verifies it): it proves no MFA step yet`,
    );
  if (verified.length === 0)
    throw unknownIdentity(holders.length === 0 ? what : `verified ${what} (${holders.length} have it unverified)`, organizationId);
  // OTP methods name no credential: the contact itself tells one proof from another.
  return {
    userId: verified[0]!.id,
    method: byEmail ? "AUTHENTICATION_TYPE_EMAIL_OTP" : "AUTHENTICATION_TYPE_SMS_OTP",
    credentialId: byEmail ? `email:${foldEmail(row.contact)}` : `sms:${row.contact}`,
  };
}

/** The user whose OAuth provider the OIDC token's (issuer, audience, subject) is, its nonce checked
 * against the stamp's key. Verifying fetches the issuer's keys: called before any lock is taken. */
async function verifiedOauthIdentity(db: Db, stamp: AttestedStamp, organizationId: string, env: OperationEnvironment): Promise<Identity> {
  const identity = await env.oidc.verify(stamp.attestation);
  if (identity.nonce !== nonceOf(stamp.publicKey))
    throw serviceError(
      "OIDC_NONCE_MISMATCH",
      "the attested stamp's OIDC token has a nonce other than sha256 of the stamp's publicKey: the token was issued for another key",
    );
  const providers = identity.audiences.length
    ? await db
        .selectFrom("oauth_providers")
        .select(["id", "user_id"])
        .where("organization_id", "=", organizationId)
        .where("issuer", "=", identity.issuer)
        .where("subject", "=", identity.subject)
        .where("audience", "in", identity.audiences)
        .execute()
    : [];
  const what = `an OAuth provider for ${identity.issuer} subject ${identity.subject} with the token's audience`;
  if (providers.length === 0) throw unknownIdentity(what, organizationId);
  const users = new Set(providers.map((p) => p.user_id)).size;
  if (users > 1) throw ambiguousIdentity(users, what, organizationId);
  return { userId: providers[0]!.user_id, method: "AUTHENTICATION_TYPE_OAUTH", credentialId: providers[0]!.id };
}

/**
 * Who sent a request stamped with X-Stamp-Attested: the signature holds over the exact body for the
 * stamp's key, the token vouches for that key, and it names exactly one user of `organizationId`.
 */
export async function authenticateAttested(
  db: Db,
  stamp: AttestedStamp,
  body: Uint8Array,
  organizationId: string,
  now: number,
  env: OperationEnvironment,
): Promise<Principal> {
  let verifies = false;
  try {
    verifies = verifyP256Der(stamp.publicKey, body, Buffer.from(stamp.signature, "hex"));
  } catch {
    // A key off the curve or a signature that does not decode is simply not a valid stamp.
  }
  if (!verifies) {
    const problem = stampKeyProblem("API_KEY_CURVE_P256", stamp.publicKey);
    if (problem) throw serviceError("MALFORMED_STAMP", `malformed stamp: the attested stamp's ${problem}`);
    throw serviceError("SIGNATURE_INVALID", "the attested stamp's signature does not verify over the request body with its publicKey");
  }
  const identity =
    stamp.scheme === "STAMP_ATTESTED_SCHEME_P256_OIDC"
      ? await verifiedOauthIdentity(db, stamp, organizationId, env)
      : await verifiedContact(db, stamp, organizationId, now, env);
  const user = await db.selectFrom("users").select(["name", "email"]).where("id", "=", identity.userId).executeTakeFirstOrThrow();
  return {
    organizationId,
    userId: identity.userId,
    credentialType:
      identity.method === "AUTHENTICATION_TYPE_OAUTH" ? "CREDENTIAL_TYPE_OAUTH_KEY_P256" : "CREDENTIAL_TYPE_OTP_AUTH_KEY_P256",
    credentialId: identity.credentialId,
    publicKey: stamp.publicKey,
    scheme: stamp.scheme,
    signature: stamp.signature,
    userName: user.name,
    userEmail: user.email,
    attestedMethod: identity.method,
  };
}
