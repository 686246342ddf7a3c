// Who sent a request: the stamp's signature is checked and its key traced to a credential of a user.
import type { ExpressionBuilder } from "kysely";
import { prepare, readOf, type Read, type Slots } from "../store/prepared.js";
import type { Db, Tx } from "../store/handles.js";
import type { Database } from "../store/schema.js";
import { ServiceError, serviceError } from "../errors.js";
import { stampKeyProblem } from "../crypto/keys.js";
import { SCHEME_CURVES, verifyApiKeyStamp, type ApiKeyStamp, type Stamp } from "./stamps.js";
import { toBase64url, verifyWebauthnStamp, type WebauthnPolicy } from "./webauthn.js";
import { joinedList, ORGANIZATION_LIST, type ApplicableLists, type ParentKeyLists } from "./ip-allowlists.js";

export interface Principal {
  /** The organization the credential belongs to. */
  organizationId: string;
  /** That organization's parent (null: it is top-level), where the credential's statement read it;
   * undefined where it was not read. */
  organizationParentId?: string | null;
  userId: string;
  credentialType:
    | "CREDENTIAL_TYPE_API_KEY_P256"
    | "CREDENTIAL_TYPE_API_KEY_SECP256K1"
    | "CREDENTIAL_TYPE_API_KEY_ED25519"
    | "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR"
    | "CREDENTIAL_TYPE_OTP_AUTH_KEY_P256"
    | "CREDENTIAL_TYPE_OAUTH_KEY_P256";
  /** The API key id or authenticator id; for an attested stamp, the OAuth provider's id or the contact
   * ("email:<address>", "sms:<number>"). */
  credentialId: string;
  publicKey: string;
  scheme: string;
  signature: string;
  /** The user's name and email as they were when the request was authenticated (for the vote record). */
  userName: string;
  userEmail: string | null;
  /** A passkey's WebAuthn credential id (base64url), for the vote record. */
  webauthnCredentialId?: string;
  /** Set when the API key is a session key: SESSION_TYPE_READ_ONLY keys may only query. */
  sessionType?: string;
  /** The login that made the API key, when a login did (RECOVERY: a recovery credential, which may only
   * call the activities that accept one). */
  sessionKind?: string;
  /** The session profile a login issued the API key with: its scope bounds every activity the key
   * requests (activities/authorization.ts). */
  sessionProfileId?: string;
  /** Set for an attested stamp (X-Stamp-Attested): the MFA method its token proves. Its key is no
   * stored credential; the token vouched for it when the request was authenticated. */
  attestedMethod?: "AUTHENTICATION_TYPE_EMAIL_OTP" | "AUTHENTICATION_TYPE_SMS_OTP" | "AUTHENTICATION_TYPE_OAUTH";
  /** The IP allowlists an API key's stamp is held to (its organization's and its own), read in the
   * statement that found the key: the allowlist step applies them without a read of its own. */
  ipAllowlists?: ApplicableLists;
  /** The parent organization's API key this principal's key also is, with its lists (null: none),
   * when the statement that found the key knew it; undefined when it was not asked. */
  parentKey?: ParentKeyLists | null;
}

/** The credential type the API reports for an API key of each curve. */
export const API_KEY_CREDENTIAL_TYPES: Record<string, Principal["credentialType"]> = {
  API_KEY_CURVE_P256: "CREDENTIAL_TYPE_API_KEY_P256",
  API_KEY_CURVE_SECP256K1: "CREDENTIAL_TYPE_API_KEY_SECP256K1",
  API_KEY_CURVE_ED25519: "CREDENTIAL_TYPE_API_KEY_ED25519",
};

/** The feature that limits the origins an organization's passkeys may stamp from. */
export const WEBAUTHN_ORIGINS = "FEATURE_NAME_WEBAUTHN_ORIGINS";

/**
 * The WebAuthn origins passkey stamps of `organizationId` may come from: its parent's setting when
 * the parent has one (it covers every sub-organization), else its own; null when neither is set (the
 * server's configured origins apply).
 */
async function webauthnOriginsFor(db: Db, organizationId: string): Promise<string[] | null> {
  const row = await db
    .selectFrom("organizations as o")
    .leftJoin("organization_features as own", (join) =>
      join.onRef("own.organization_id", "=", "o.id").on("own.name", "=", WEBAUTHN_ORIGINS),
    )
    .leftJoin("organization_features as inherited", (join) =>
      join.onRef("inherited.organization_id", "=", "o.parent_organization_id").on("inherited.name", "=", WEBAUTHN_ORIGINS),
    )
    .select(["own.value as own", "inherited.value as inherited"])
    .where("o.id", "=", organizationId)
    .executeTakeFirst();
  const value = row?.inherited ?? row?.own;
  return value ? value.split(",") : null;
}

/** An API key's candidates by public key (one per organization holding it), with their IP allowlists:
 * the key's allowlists come with it (by primary key, at most two rows joined), where they would
 * otherwise cost a signed request a round trip more (auth/ip-allowlists.ts). */
const apiKeysByPublicKey = prepare((db, slot: Slots<{ publicKey: string }>) =>
  db
    .selectFrom("api_keys")
    .innerJoin("users", "users.id", "api_keys.user_id")
    .innerJoin("organizations", "organizations.id", "api_keys.organization_id")
    .leftJoin("ip_allowlists as organization_list", (join) =>
      join
        .onRef("organization_list.organization_id", "=", "api_keys.organization_id")
        .on("organization_list.api_key_id", "=", ORGANIZATION_LIST),
    )
    .leftJoin("ip_allowlists as key_list", (join) =>
      join.onRef("key_list.organization_id", "=", "api_keys.organization_id").onRef("key_list.api_key_id", "=", "api_keys.id"),
    )
    .selectAll("api_keys")
    .select([
      "users.name as user_name",
      "users.email as user_email",
      "organizations.parent_organization_id as organization_parent",
      "organization_list.enabled as organization_list_enabled",
      "organization_list.on_evaluation_error as organization_list_on_evaluation_error",
      "organization_list.rules as organization_list_rules",
      "key_list.enabled as key_list_enabled",
      "key_list.on_evaluation_error as key_list_on_evaluation_error",
      "key_list.rules as key_list_rules",
      // Whether the key's user has MFA policies (most have none): asked here so that an activity that
      // reads the key in its transaction has its credential confirmed by this one statement.
      (eb) =>
        eb
          .exists(eb.selectFrom("mfa_policies").select("mfa_policies.id").whereRef("mfa_policies.user_id", "=", "api_keys.user_id"))
          .as("mfa_policies"),
    ])
    .where("api_keys.public_key", "=", slot("publicKey")),
);

/** Whether `verifies` holds for any of `items`, tried one after another (stops at the first). */
async function someVerify<T>(items: T[], verifies: (item: T) => Promise<boolean>): Promise<boolean> {
  for (const item of items) if (await verifies(item)) return true;
  return false;
}

/** How a credential may relate to the organization a request names, and how old it may be. */
export interface CredentialScope {
  /** Accept a credential of a sub-organization of the named one (whoami resolves the caller's
   * sub-organization through its parent). */
  subOrganizations?: boolean;
  /** Refuse an API key created longer ago than this (SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS, for
   * queries: their bodies carry no timestamp, so a captured one can be replayed as long as its key
   * lives). Passkeys are not limited: they are meant to last, and cannot be replaced by a client. */
  apiKeyMaxAgeMs?: number | null;
}

/** The refusal of a query whose credential is older than SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS allows. */
export function credentialTooOld(what: string, maxAgeMs: number): ServiceError {
  return serviceError(
    "CREDENTIAL_TOO_OLD_FOR_QUERIES",
    `${what} is more than ${maxAgeMs / 1000} s old, and this server answers queries only for credentials younger than that ` +
      "(SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS): create a new API key or log in again, and query with the new key",
  );
}

type Candidate = { organization_id: string; organization_parent: string | null };

/**
 * Picks the credential to act with among those sharing a key: one of the named organization, else
 * one of its parent (which reads its sub-organizations), else — when the scope allows — one of a
 * sub-organization of it; or explains why none.
 */
async function chooseForOrganization<T extends Candidate>(
  db: Db,
  candidates: T[],
  organizationId: string,
  what: string,
  scope: CredentialScope,
): Promise<T> {
  const match = candidates.find((c) => c.organization_id === organizationId);
  if (match) return match;
  const organization = await db
    .selectFrom("organizations")
    .select(["id", "parent_organization_id"])
    .where("id", "=", organizationId)
    .where("deleted_at", "is", null)
    .executeTakeFirst();
  if (!organization) throw serviceError("ORGANIZATION_NOT_FOUND", `organization ${organizationId} not found`);
  const parent = organization.parent_organization_id && candidates.find((c) => c.organization_id === organization.parent_organization_id);
  if (parent) return parent;
  if (scope.subOrganizations) {
    const children = candidates.filter((c) => c.organization_parent === organizationId);
    // Public keys are public: anyone may register someone else's in their own sub-organization. A
    // key found in several sub-organizations therefore names none of them for certain.
    if (children.length > 1) {
      throw serviceError(
        "AMBIGUOUS_SUB_ORGANIZATION",
        `${what} is a credential in ${children.length} sub-organizations of ${organizationId}: name the sub-organization in organizationId`,
      );
    }
    if (children[0]) return children[0];
  }
  throw serviceError("ORGANIZATION_MISMATCH", `${what} does not belong to organization ${organizationId}`);
}

/**
 * Who sent the request: the stamp verifies, and its key is a credential of the named organization (or
 * of its parent, or, as `scope` allows, of a sub-organization of it). `principal.organizationId` is
 * the credential's own organization, which may differ from the one named.
 */
export async function authenticate(
  db: Db,
  stamp: Stamp,
  body: Uint8Array,
  organizationId: string,
  now: number,
  webauthn: WebauthnPolicy,
  scope: CredentialScope = {},
): Promise<Principal> {
  if (stamp.kind === "API_KEY") {
    await checkApiKeySignature(stamp, body);
    return (await apiKeyPrincipal(db, stamp, organizationId, now, scope)).principal;
  }

  const credentialId = toBase64url(stamp.credentialId);
  const candidates = await db
    .selectFrom("authenticators")
    .innerJoin("users", "users.id", "authenticators.user_id")
    .innerJoin("organizations", "organizations.id", "authenticators.organization_id")
    .selectAll("authenticators")
    .select(["users.name as user_name", "users.email as user_email", "organizations.parent_organization_id as organization_parent"])
    .where("authenticators.credential_id", "=", credentialId)
    .execute();
  if (candidates.length === 0) throw serviceError("PUBLIC_KEY_NOT_FOUND", `no authenticator with credential id ${credentialId}`);
  // Nothing about other organizations is revealed to a stamp that does not verify: a credential id
  // registered only elsewhere looks unknown unless the stamp's signature holds for it.
  const inOrganization = candidates.find((c) => c.organization_id === organizationId);
  if (!inOrganization && !(await someVerify(candidates, (c) => stampVerifiesWith(stamp, body, c.public_key, webauthn)))) {
    throw serviceError("PUBLIC_KEY_NOT_FOUND", `no authenticator with credential id ${credentialId} in organization ${organizationId}`);
  }
  const authenticator = await chooseForOrganization(db, candidates, organizationId, "the stamp's authenticator", scope);
  const organizationOrigins = await webauthnOriginsFor(db, authenticator.organization_id);
  // An organization's list narrows the operator's (SIGIL_WEBAUTHN_ORIGINS), never widens it; a list
  // that leaves nothing refuses every origin.
  const origins =
    organizationOrigins && webauthn.origins.length ? organizationOrigins.filter((o) => webauthn.origins.includes(o)) : organizationOrigins;
  try {
    if (origins && origins.length === 0)
      throw serviceError(
        "SIGNATURE_INVALID",
        "no WebAuthn origin is allowed for this organization: its FEATURE_NAME_WEBAUTHN_ORIGINS and the server's SIGIL_WEBAUTHN_ORIGINS have none in common",
      );
    await verifyWebauthnStamp(stamp, body, authenticator.public_key, origins ? { ...webauthn, origins } : webauthn);
  } catch (error) {
    if (error instanceof ServiceError) throw error;
    throw serviceError("SIGNATURE_INVALID", "passkey stamp does not verify");
  }
  return {
    organizationId: authenticator.organization_id,
    organizationParentId: authenticator.organization_parent,
    userId: authenticator.user_id,
    credentialType: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR",
    credentialId: authenticator.id,
    publicKey: authenticator.public_key,
    scheme: "SIGNATURE_SCHEME_TK_WEBAUTHN",
    signature: stamp.signature,
    userName: authenticator.user_name,
    userEmail: authenticator.user_email,
    webauthnCredentialId: authenticator.credential_id,
  };
}

/** Refuses an API key stamp whose signature does not hold over `body` with the key it carries
 * (no database involved: whether that key is anyone's is apiKeyPrincipal's question). */
export async function checkApiKeySignature(stamp: ApiKeyStamp, body: Uint8Array): Promise<void> {
  if (await verifyApiKeyStamp(stamp, body)) return;
  // Asked only of a stamp that failed: a key no signature can hold for is said to be the reason.
  const problem = stampKeyProblem(SCHEME_CURVES[stamp.scheme], stamp.publicKey);
  if (problem) throw serviceError("MALFORMED_STAMP", `malformed stamp: its ${problem}`);
  throw serviceError("SIGNATURE_INVALID", "stamp signature does not verify over the request body");
}

/** An API key principal, and what its key's statement learned besides. */
export interface ApiKeyIdentity {
  principal: Principal;
  /** The credential confirmed as it reads (in a transaction: under the organization's lock), so
   * confirmCredential has nothing left to read. */
  confirmation: Confirmation;
}

/**
 * The API key a verified stamp names, as a principal: a key of the named organization (or of its
 * parent, or, as `scope` allows, of a sub-organization of it), of the stamp's curve, unexpired.
 * Read in the activity's transaction, the one statement also confirms the credential (it is read
 * under the organization's lock) and says whether its user has MFA policies.
 */
export async function apiKeyPrincipal(
  db: Db,
  stamp: ApiKeyStamp,
  organizationId: string,
  now: number,
  scope: CredentialScope = {},
): Promise<ApiKeyIdentity> {
  // The key's IP allowlists come with it (by primary key, at most two rows joined): a signed request
  // would otherwise pay a round trip more for them (auth/ip-allowlists.ts).
  const candidates = await apiKeysByPublicKey.all(db, { publicKey: stamp.publicKey });
  if (candidates.length === 0) throw serviceError("PUBLIC_KEY_NOT_FOUND", `no API key with public key ${stamp.publicKey}`);
  const key = await chooseForOrganization(db, candidates, organizationId, "the stamp's API key", scope);
  if (key.curve !== SCHEME_CURVES[stamp.scheme]) {
    throw serviceError("SIGNATURE_INVALID", `stamp scheme ${stamp.scheme} does not match the key's curve ${key.curve}`);
  }
  if (key.expires_at !== null && key.expires_at <= now) throw serviceError("API_KEY_EXPIRED", `API key ${key.id} has expired`);
  if (scope.apiKeyMaxAgeMs && key.created_at + scope.apiKeyMaxAgeMs <= now)
    throw credentialTooOld(`API key ${key.id}`, scope.apiKeyMaxAgeMs);
  const principal: Principal = {
    organizationId: key.organization_id,
    organizationParentId: key.organization_parent,
    userId: key.user_id,
    credentialType: API_KEY_CREDENTIAL_TYPES[key.curve]!,
    credentialId: key.id,
    publicKey: key.public_key,
    scheme: stamp.scheme,
    signature: stamp.signature,
    userName: key.user_name,
    userEmail: key.user_email,
    ...(key.session_type ? { sessionType: key.session_type } : {}),
    ...(key.session_kind ? { sessionKind: key.session_kind } : {}),
    ...(key.session_profile_id ? { sessionProfileId: key.session_profile_id } : {}),
    ipAllowlists: listsOf(key),
    parentKey: parentKeyAmong(candidates, key),
  };
  return { principal, confirmation: { mfaPolicies: Boolean(key.mfa_policies) } };
}

/** A candidate row of apiKeysByPublicKey: a key, its organization's parent and the lists read with it. */
type KeyWithLists = Awaited<ReturnType<typeof apiKeysByPublicKey.all>>[number];

/** The lists a candidate row was read with. */
function listsOf(key: KeyWithLists): ApplicableLists {
  return {
    organization: joinedList(key.organization_list_enabled, key.organization_list_on_evaluation_error, key.organization_list_rules),
    key: joinedList(key.key_list_enabled, key.key_list_on_evaluation_error, key.key_list_rules),
  };
}

/** The API key of the chosen key's parent organization with the same public key and curve, among the
 * candidates the one statement found (every organization's key with that public key): no read more. */
function parentKeyAmong(candidates: KeyWithLists[], key: KeyWithLists): ParentKeyLists | null {
  const parent = key.organization_parent && candidates.find((c) => c.organization_id === key.organization_parent && c.curve === key.curve);
  return parent ? { organizationId: parent.organization_id, apiKeyId: parent.id, lists: listsOf(parent) } : null;
}

/** The statement apiKeyPrincipal runs for a stamp's key, as a read the pipeline sends ahead. */
export const apiKeyReadAhead = (publicKey: string): Read => readOf(apiKeysByPublicKey, { publicKey });

/** The header a read-only session (create_read_only_session) is presented in, instead of a stamp. */
export const READ_ONLY_SESSION_HEADER = "x-session";

export function readOnlySessionHeader(headers: Record<string, string | string[] | undefined>): string | undefined {
  const value = headers[READ_ONLY_SESSION_HEADER];
  return Array.isArray(value) ? value[0] : value;
}

/**
 * Who presents a read-only session: the JWT create_read_only_session returned, signed by the session
 * signer, of type SESSION_TYPE_READ_ONLY (a read-write session's JWT is no credential: its key is),
 * unexpired, issued less than `maxAgeMs` ago (when set), for the organization named (or its
 * sub-organization), and made with a credential that still exists — deleting that key or passkey ends the session.
 */
export async function authenticateReadOnlySession(
  db: Db,
  token: string,
  verify: (token: string) => Record<string, unknown> | null,
  organizationId: string,
  now: number,
  maxAgeMs: number | null = null,
): Promise<Principal> {
  const claims = verify(token.trim());
  if (
    !claims ||
    claims.session_type !== "SESSION_TYPE_READ_ONLY" ||
    typeof claims.user_id !== "string" ||
    typeof claims.organization_id !== "string" ||
    typeof claims.credential_id !== "string"
  ) {
    throw serviceError("SESSION_INVALID", "X-Session is not a read-only session of this server");
  }
  if (typeof claims.exp !== "number" || claims.exp * 1000 <= now)
    throw serviceError("SESSION_EXPIRED", "the read-only session has expired: create a new one");
  // The token is a bearer credential, replayable as a whole until it expires or gets too old.
  if (maxAgeMs && (typeof claims.iat !== "number" || claims.iat * 1000 + maxAgeMs <= now))
    throw credentialTooOld("the read-only session", maxAgeMs);
  if (claims.organization_id !== organizationId) {
    const organization = await db
      .selectFrom("organizations")
      .select("parent_organization_id")
      .where("id", "=", organizationId)
      .where("deleted_at", "is", null)
      .executeTakeFirst();
    if (organization?.parent_organization_id !== claims.organization_id)
      throw serviceError("ORGANIZATION_MISMATCH", `the read-only session belongs to organization ${claims.organization_id}`);
  }
  const user = await db
    .selectFrom("users")
    .select(["id", "name", "email"])
    .where("id", "=", claims.user_id)
    .where("organization_id", "=", claims.organization_id)
    .executeTakeFirst();
  const key = await db
    .selectFrom("api_keys")
    .select(["id", "curve", "expires_at"])
    .where("id", "=", claims.credential_id)
    .executeTakeFirst();
  const passkey = key
    ? undefined
    : await db.selectFrom("authenticators").select("id").where("id", "=", claims.credential_id).executeTakeFirst();
  if (!user || (!key && !passkey) || (key && key.expires_at !== null && key.expires_at <= now)) {
    throw serviceError("SESSION_INVALID", "the credential that opened this read-only session no longer exists");
  }
  return {
    organizationId: claims.organization_id,
    userId: user.id,
    credentialType: key ? API_KEY_CREDENTIAL_TYPES[key.curve]! : "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR",
    credentialId: claims.credential_id,
    publicKey: String(claims.public_key ?? ""),
    scheme: "SESSION",
    signature: "",
    userName: user.name,
    userEmail: user.email,
    sessionType: "SESSION_TYPE_READ_ONLY",
  };
}

/** What confirming a credential learned on the way. */
export interface Confirmation {
  /** False when the requester has no MFA policy at all (read in the same statement, under the lock):
   * the MFA step then has nothing to read. True when they have some, or when it was not read. */
  mfaPolicies: boolean;
}

/** Whether the user `userId` has MFA policies, as a column of a credential statement. */
type CredentialArgs = { id: string; userId: string };
const mfaPolicies = (slot: Slots<CredentialArgs>) => (eb: ExpressionBuilder<Database, keyof Database>) =>
  eb.exists(eb.selectFrom("mfa_policies").select("mfa_policies.id").where("mfa_policies.user_id", "=", slot("userId"))).as("mfa_policies");
const oauthProviderWithMfaPolicies = prepare((db, slot: Slots<CredentialArgs>) =>
  db
    .selectFrom("oauth_providers")
    .select(["id", mfaPolicies(slot)])
    .where("id", "=", slot("id")),
);
const authenticatorWithMfaPolicies = prepare((db, slot: Slots<CredentialArgs>) =>
  db
    .selectFrom("authenticators")
    .select(["id", mfaPolicies(slot)])
    .where("id", "=", slot("id")),
);
const apiKeyWithMfaPolicies = prepare((db, slot: Slots<CredentialArgs>) =>
  db
    .selectFrom("api_keys")
    .select(["id", "expires_at", mfaPolicies(slot)])
    .where("id", "=", slot("id")),
);

/** How a principal's credential is found again under the lock: which kind it is and the statement
 * that reads it with its user's MFA EXISTS. None for an OTP proof, which names a contact, not a credential. */
function credentialLookup(principal: Principal): { kind: "oauth_provider" | "passkey" | "api_key"; read: Read } | undefined {
  const args = { id: principal.credentialId, userId: principal.userId };
  if (principal.attestedMethod === "AUTHENTICATION_TYPE_OAUTH")
    return { kind: "oauth_provider", read: readOf(oauthProviderWithMfaPolicies, args) };
  if (principal.attestedMethod) return undefined;
  if (principal.credentialType === "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR")
    return { kind: "passkey", read: readOf(authenticatorWithMfaPolicies, args) };
  return { kind: "api_key", read: readOf(apiKeyWithMfaPolicies, args) };
}

/** The statement confirmCredential will run for `principal`, as a read the pipeline sends ahead. */
export function credentialReadAhead(principal: Principal): Read[] {
  const lookup = credentialLookup(principal);
  return lookup ? [lookup.read] : [];
}

/**
 * Whether the credential a principal authenticated with still exists (and has not expired), read in
 * the activity's transaction once the organization's lock is held. The same statement asks whether
 * the requester has MFA policies (activities/mfa.ts), which most users do not: one round trip for both.
 */
export async function confirmCredential(trx: Tx, principal: Principal, now: number): Promise<Confirmation> {
  const lookup = credentialLookup(principal);
  if (!lookup) return { mfaPolicies: true };
  const row = (await lookup.read.statement.first(trx, lookup.read.args)) as
    | { id: string; mfa_policies: unknown; expires_at?: number | null }
    | undefined;
  if (!row && lookup.kind === "oauth_provider")
    throw serviceError(
      "ATTESTED_IDENTITY_UNKNOWN",
      `the OAuth provider ${principal.credentialId} the attested stamp named no longer exists`,
    );
  if (!row)
    throw serviceError("PUBLIC_KEY_NOT_FOUND", `the credential ${principal.credentialId} that stamped this request no longer exists`);
  if (lookup.kind === "api_key" && row.expires_at != null && row.expires_at <= now)
    throw serviceError("API_KEY_EXPIRED", `API key ${row.id} has expired`);
  return { mfaPolicies: Boolean(row.mfa_policies) };
}

/** Whether a stamp's signature over `body` holds for a given public key (no database involved). */
export async function stampVerifiesWith(
  stamp: Stamp,
  body: Uint8Array,
  publicKey: string | undefined,
  webauthn: WebauthnPolicy,
): Promise<boolean> {
  if (!publicKey) return false;
  if (stamp.kind === "API_KEY") return stamp.publicKey === publicKey && (await verifyApiKeyStamp(stamp, body));
  try {
    await verifyWebauthnStamp(stamp, body, publicKey, webauthn);
    return true;
  } catch {
    return false;
  }
}
