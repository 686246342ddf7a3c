// Every error code the service answers with, declared once: its gRPC status (from which the HTTP status
// follows), and one line saying what it means and what to do, from which docs/errors.md is generated
// (`npm run docs`). Throw sites name a code with `serviceError("CODE", message)` (src/errors.ts): an
// undeclared code does not compile, and test/error-catalog.test.ts fails on a declared code nothing throws.
// The codes, statuses and messages on the wire are the API: clients branch on them, so an existing code
// keeps its name and status. This module is the bottom layer: it imports nothing.

/** The gRPC statuses the service answers with, their numbers and the HTTP status each is sent as. */
export const GRPC_CODES = {
  InvalidArgument: { code: 3, http: 400 },
  NotFound: { code: 5, http: 404 },
  AlreadyExists: { code: 6, http: 409 },
  PermissionDenied: { code: 7, http: 403 },
  ResourceExhausted: { code: 8, http: 429 },
  FailedPrecondition: { code: 9, http: 400 },
  Unimplemented: { code: 12, http: 501 },
  Internal: { code: 13, http: 500 },
  Unavailable: { code: 14, http: 503 },
  Unauthenticated: { code: 16, http: 401 },
} as const;

export type GrpcStatus = keyof typeof GRPC_CODES;

export interface ErrorEntry {
  /** The gRPC status the code is answered with. A few codes are answered with one of several, as the
   * product answers them; the throw site then names which (serviceError's third argument). */
  readonly status: GrpcStatus | readonly GrpcStatus[];
  /** An HTTP status other than the one the gRPC status is sent as (413, 408, 431). */
  readonly http?: number;
  /** What it means and what to do, for docs/errors.md: one line, no trailing period. */
  readonly meaning: string;
}

export const ERROR_CATALOG = {
  // ── 400, gRPC 3 InvalidArgument: the request itself is wrong; sending it again will not help ──
  OAUTH2_CLIENT_SECRET_INVALID: {
    status: "InvalidArgument",
    meaning:
      "encryptedClientSecret is not a client secret encrypted (encryptOauth2ClientSecret) to this deployment's tlsFetcherEncryptPublicKey " +
      "(/.well-known/sigil.json, `sigil info`): encrypt it to that key, not the product's",
  },
  OAUTH2_CLIENT_SECRET_IN_USE: {
    status: "InvalidArgument",
    meaning:
      "encryptedClientSecret is an envelope another organization's OAuth 2.0 credential holds (copied from its get_oauth2_credential " +
      "or list_oauth2_credentials): encrypt the client secret anew with encryptOauth2ClientSecret",
  },
  OAUTH2_PROVIDER_REFUSED: {
    status: "InvalidArgument",
    meaning:
      "the OAuth 2.0 provider refused the authorization code (wrong, used or expired code, a code_verifier that does not match the " +
      "challenge, another redirect_uri) or the credential's client id and secret; the message carries the provider's HTTP status and its " +
      "OAuth error code (RFC 6749 and 6750 codes only, never the provider's own text): start the login again",
  },
  REQUEST_INVALID: {
    status: "InvalidArgument",
    meaning:
      "the body breaks the schema of the product's API description (a missing, unknown or mistyped field, named in the message) " +
      "or a rule of a parameter (an empty list, a duplicate, a bad pagination option…); a request the HTTP framework refuses " +
      "before it is read keeps the 4xx status the framework chose",
  },
  REQUEST_BODY_INVALID: {
    status: "InvalidArgument",
    meaning: "the body is empty, not UTF-8 or not JSON: send one JSON object encoded as UTF-8",
  },
  TEXT_CONTAINS_NUL: {
    status: "InvalidArgument",
    meaning: "a string (or a field name) holds U+0000, which no field accepts; arbitrary bytes are sent hex-encoded",
  },
  TEXT_NOT_UNICODE: {
    status: "InvalidArgument",
    meaning: "a string holds an unpaired UTF-16 surrogate (a lone \\uD800–\\uDFFF escape): send well-formed Unicode",
  },
  REQUEST_TOO_DEEP: {
    status: "InvalidArgument",
    meaning: "objects and arrays nest more than 32 levels deep; no request of the API needs that many",
  },
  REQUEST_MALFORMED: { status: "InvalidArgument", meaning: "the bytes received are not parseable HTTP/1.1; the connection is closed" },
  TIMESTAMP_INVALID: {
    status: "InvalidArgument",
    meaning: "timestampMs is not milliseconds since the epoch written as a string of digits",
  },
  TIMESTAMP_OUT_OF_RANGE: {
    status: "InvalidArgument",
    meaning:
      "timestampMs is further from the server's clock than the liveness window allows: check the client's clock, stamp a fresh request",
  },
  ACTIVITY_TYPE_MISMATCH: {
    status: "InvalidArgument",
    meaning: "the activity type belongs to another endpoint, which the message names: send it there",
  },
  ACTIVITY_TYPE_UNSUPPORTED: {
    status: "InvalidArgument",
    meaning: "the product's API has this activity type (or this version of it), but this server does not serve it",
  },
  ACTIVITY_TYPE_UNKNOWN: { status: "InvalidArgument", meaning: "no such activity type; the message lists the types the endpoint accepts" },
  TOO_MANY_ITEMS: { status: "InvalidArgument", meaning: "a list holds more items than one request may: split it over several requests" },
  FILTER_TYPE_INVALID: {
    status: "InvalidArgument",
    meaning: "list_suborgs / list_verified_suborgs got a filterType they do not take; the message lists the allowed ones",
  },
  INVALID_PUBLIC_KEY: {
    status: "InvalidArgument",
    meaning:
      "an API key's or a session's public key is not a valid public key of its curve in its one encoding: not a compressed point on " +
      "P-256 / secp256k1, or an ed25519 key that is not canonical, of small order or with a small-order component (the message says why)",
  },
  INVALID_ATTESTATION: {
    status: "InvalidArgument",
    meaning: "a passkey's attestation does not verify (challenge, origin, format) or its key is not P-256 (ES256), the only kind served",
  },
  INVALID_EXPIRATION: {
    status: "InvalidArgument",
    meaning: "an expiration is not a whole number of seconds within the range the message gives",
  },
  SESSION_EXPIRATION_TOO_LONG: {
    status: "InvalidArgument",
    meaning: "the session asked for outlives the longest this server grants (SIGIL_SESSION_MAX_SECONDS)",
  },
  INVALID_TARGET_PUBLIC_KEY: {
    status: "InvalidArgument",
    meaning: "targetPublicKey of an export or a login is not a P-256 public key (hex) to encrypt the bundle to",
  },
  POLICY_INVALID: {
    status: "InvalidArgument",
    meaning: "a policy's condition or consensus does not parse or type-check, or is over a size limit; the message points at the problem",
  },
  INVALID_DERIVATION_PATH: {
    status: "InvalidArgument",
    meaning: "a wallet account's path is not a BIP-32 path this server derives (the message says why)",
  },
  UNSUPPORTED_ADDRESS_FORMAT: {
    status: "InvalidArgument",
    meaning: "the address format does not go with the curve, or is not served by this server",
  },
  TRANSACTION_TYPE_UNSUPPORTED: {
    status: "InvalidArgument",
    meaning: "sign_transaction got a transaction type this server does not sign (Ethereum, Solana, Bitcoin, Tron and Tempo are served)",
  },
  INVALID_IMPORT_BUNDLE: {
    status: "InvalidArgument",
    meaning:
      "encryptedBundle (secretPayload) is not the {encappedPublic, ciphertext} JSON the import helpers produce, or does not decrypt with the import target",
  },
  INVALID_MNEMONIC: {
    status: "InvalidArgument",
    meaning: "the imported mnemonic is not a valid BIP-39 phrase (a word outside the word lists, or a failed checksum)",
  },
  MNEMONIC_PASSPHRASE_UNSUPPORTED: {
    status: "InvalidArgument",
    meaning: "a mnemonic with a BIP-39 passphrase cannot be imported yet: import the mnemonic alone",
  },
  INVALID_PRIVATE_KEY: { status: "InvalidArgument", meaning: "the imported private key is not a valid key of its curve" },
  ROOT_QUORUM_THRESHOLD_INVALID: {
    status: "InvalidArgument",
    meaning: "a new sub-organization's rootQuorumThreshold is not between 1 and its number of root users",
  },
  ROOT_USER_WITHOUT_CREDENTIAL: {
    status: "InvalidArgument",
    meaning:
      "a new sub-organization's root user would have no way to log in: give it an API key, a passkey, an OAuth provider or an email/phone login",
  },
  INVALID_OIDC_TOKEN: {
    status: "InvalidArgument",
    meaning: "an OAuth provider or an OIDC_TOKEN filter needs an OIDC token (or, where allowed, oidcClaims with iss, sub and aud)",
  },
  OIDC_TOKEN_INVALID: {
    status: ["InvalidArgument", "Unauthenticated"],
    meaning:
      "oidcToken is not a JWT (400), or lacks a subject or expiry or is otherwise not valid (401): send the token the issuer signed, unaltered",
  },
  OIDC_AUDIENCE_MISMATCH: {
    status: ["InvalidArgument", "PermissionDenied"],
    meaning:
      "a token naming several audiences cannot be linked as one provider: link one with oidcClaims (400); a login token names no audience, " +
      "or not the one the user's provider was registered for (403)",
  },
  INVALID_CONTACT: {
    status: "InvalidArgument",
    meaning:
      "an OTP's contact is not an email address (OTP_TYPE_EMAIL) or an E.164 phone number (OTP_TYPE_SMS), or the email of email_auth or init_user_email_recovery is not an email address",
  },
  INVALID_OTP_TYPE: { status: "InvalidArgument", meaning: "otpType is neither OTP_TYPE_EMAIL nor OTP_TYPE_SMS" },
  INVALID_OTP_LENGTH: { status: "InvalidArgument", meaning: "otpLength is not 6 to 9" },
  INVALID_APP_NAME: {
    status: "InvalidArgument",
    meaning: "appName is too long, or (from a sub-organization's own credential) holds more than letters, spaces and . ' & -",
  },
  INVALID_EMAIL_CUSTOMIZATION: {
    status: "InvalidArgument",
    meaning: "an emailCustomization field is not a well-formed https URL, email address, magic-link template (one %s) or JSON object",
  },
  INVALID_SMS_TEMPLATE: {
    status: "InvalidArgument",
    meaning: "smsCustomization.template must hold {{.OtpCode}} once and fit the length limit",
  },
  EMAIL_TEMPLATE_NOT_FOUND: {
    status: "InvalidArgument",
    meaning: "emailCustomization.templateId names a stored template; this server stores none: leave it out",
  },
  OTP_BUNDLE_UNSUPPORTED: {
    status: "InvalidArgument",
    meaning: "the OTP was started without an encryption target (init_otp V1): verify it with otpCode (verify_otp V1)",
  },
  INVALID_OTP_BUNDLE: {
    status: "InvalidArgument",
    meaning: "encryptedOtpBundle is not the JSON encryptOtpCodeToBundle returns, or does not decrypt to {otp_code, public_key}",
  },
  VERIFICATION_TOKEN_INVALID: {
    status: ["InvalidArgument", "NotFound"],
    meaning: "the verification token was not issued by this server (its signature does not verify, 400) or is unknown to it (404)",
  },
  VERIFICATION_TOKEN_CONTACT_MISMATCH: {
    status: "InvalidArgument",
    meaning: "the verification token proves another email or phone number than the user's",
  },
  CLIENT_SIGNATURE_REQUIRED: {
    status: "InvalidArgument",
    meaning: "a verification token bound to a key is used without clientSignature: sign the usage message with that key",
  },
  CLIENT_SIGNATURE_INVALID: {
    status: ["InvalidArgument", "PermissionDenied"],
    meaning:
      "clientSignature is malformed or given for a token bound to no key (400), or does not sign this use of the token with the key it is " +
      "bound to (403)",
  },
  WEBHOOK_URL_INVALID: {
    status: "InvalidArgument",
    meaning: "a webhook URL is not an http(s) URL without credentials whose host resolves",
  },
  WEBHOOK_DESTINATION_FORBIDDEN: {
    status: "InvalidArgument",
    meaning: "a webhook URL points at (or resolves to) an address webhooks may not reach, such as loopback or a private network",
  },
  WEBHOOK_SUBSCRIPTIONS_MISSING: { status: "InvalidArgument", meaning: "a webhook endpoint needs at least one subscription" },
  WEBHOOK_EVENT_TYPE_UNSUPPORTED: {
    status: "InvalidArgument",
    meaning:
      "a subscription names an event type this server does not deliver (it delivers ACTIVITY_UPDATES and SEND_TRANSACTION_STATUS_UPDATES)",
  },
  CHAIN_NOT_CONFIGURED: {
    status: "InvalidArgument",
    meaning:
      "caip2 names a chain this server has no node for (one the API lists, or any other the operator did not configure): add " +
      "`<caip2>=<url>` to SIGIL_CHAIN_RPC_URLS, or send to a chain listed there",
  },

  SMART_CONTRACT_INTERFACE_INVALID: {
    status: "InvalidArgument",
    meaning:
      "smartContractInterface is not JSON, or not an Ethereum JSON ABI (TYPE_ETHEREUM) or an Anchor IDL this server reads (TYPE_SOLANA); " +
      "the message says what is wrong and where",
  },
  SMART_CONTRACT_INTERFACE_TOO_LARGE: {
    status: "InvalidArgument",
    meaning: "smartContractInterface is over 400 KiB (409 600 bytes of UTF-8): minify the JSON, or upload only the functions policies need",
  },
  SMART_CONTRACT_ADDRESS_INVALID: {
    status: "InvalidArgument",
    meaning:
      "smartContractAddress is not an Ethereum address (0x and 40 hex digits; mixed case must be its EIP-55 checksum) " +
      "or a Solana program id (base58 of 32 bytes), as the type says",
  },
  // ── 431, gRPC 3 InvalidArgument ──
  HEADERS_TOO_LARGE: { status: "InvalidArgument", http: 431, meaning: "the request headers exceed 16 KiB; the connection is closed" },

  // ── 400, gRPC 9 FailedPrecondition: the request is well-formed but the state it meets does not allow it ──
  IP_ALLOWLIST_PARENT_ONLY: {
    status: "FailedPrecondition",
    meaning: "IP allowlists belong to top-level organizations: a sub-organization has none, and its requests are not held to any",
  },
  RESULT_NOT_REPEATABLE: {
    status: "FailedPrecondition",
    meaning: "a retry of a completed activity whose result was a credential, shown only once: send a new request (a new timestampMs)",
  },
  CONSENSUS_NOT_SUPPORTED: {
    status: "FailedPrecondition",
    meaning:
      "the activity needs approvals but cannot wait for them (it carries or returns secrets, or a parent requested it): get it allowed outright",
  },
  AUTHENTICATORS_NOT_SUPPORTED: {
    status: "FailedPrecondition",
    meaning:
      "the requester's MFA policy requires further authentication, but the activity cannot wait for it (it carries or returns secrets, or a parent requested it): stamp it with a credential that satisfies the policy, or narrow the policy's condition",
  },
  AUTHENTICATION_METHOD_NOT_ACCEPTED: {
    status: "FailedPrecondition",
    meaning:
      "a vote on an activity waiting for its requester's authentication that it does not take: another user's approval, a rejection by someone neither its requester nor in the root quorum, or a credential no remaining step accepts; get_mfa_status lists what is needed",
  },
  REQUESTING_CREDENTIAL_GONE: {
    status: "FailedPrecondition",
    meaning:
      "the credential that stamped an activity waiting for its requester's authentication was deleted or expired meanwhile: the activity failed rather than run on the others' authority; send the request again stamped with a live credential",
  },
  ACTIVITY_NOT_PENDING: {
    status: "FailedPrecondition",
    meaning: "the activity voted on is not waiting for consensus (it completed, failed or was rejected)",
  },
  VOTE_ALREADY_CAST: {
    status: "FailedPrecondition",
    meaning: "the user already voted the other way on this activity; a vote cannot be changed",
  },
  ROOT_QUORUM_UNREACHABLE: {
    status: "FailedPrecondition",
    meaning:
      "the change would leave fewer root users with a usable credential than the root quorum threshold, locking the organization out",
  },
  NESTED_SUB_ORGANIZATION: { status: "FailedPrecondition", meaning: "a sub-organization cannot have sub-organizations of its own" },
  NOT_A_SUB_ORGANIZATION: { status: "FailedPrecondition", meaning: "only a sub-organization can be deleted" },
  WALLET_NOT_EXPORTED: {
    status: "FailedPrecondition",
    meaning: "deleting would lose a wallet never exported: export it first, or pass deleteWithoutExport",
  },
  PRIVATE_KEY_NOT_EXPORTED: {
    status: "FailedPrecondition",
    meaning: "deleting would lose a private key never exported: export it first, or pass deleteWithoutExport",
  },
  MNEMONIC_LANGUAGE_MISMATCH: {
    status: "FailedPrecondition",
    meaning: "the wallet's mnemonic is in another language; spelled in the one asked it would derive other keys",
  },
  IMPORT_TARGET_EXPIRED: {
    status: "FailedPrecondition",
    meaning: "the import target from init_import_wallet / init_import_private_key / init_import_secrets expired: call it again",
  },
  FEATURE_NOT_ENABLED: {
    status: "FailedPrecondition",
    meaning:
      "the login or recovery asked for (email or SMS code, email auth, email recovery) is not enabled in the organization: its root quorum enables it with set_organization_feature",
  },
  CONTACT_AMBIGUOUS: {
    status: "FailedPrecondition",
    meaning: "several users of the organization share the contact, so a one-time password cannot tell them apart",
  },
  OTP_ALREADY_USED: { status: "FailedPrecondition", meaning: "the one-time password was already used: start again with init_otp" },
  OTP_ATTEMPTS_EXCEEDED: {
    status: "FailedPrecondition",
    meaning: "the one-time password was burnt by too many wrong codes: start again with init_otp",
  },
  OTP_EXPIRED: { status: "FailedPrecondition", meaning: "the one-time password expired: start again with init_otp" },
  VERIFICATION_TOKEN_ALREADY_USED: {
    status: "FailedPrecondition",
    meaning: "the verification token was already used; each serves one login or sign-up",
  },
  VERIFICATION_TOKEN_EXPIRED: { status: "FailedPrecondition", meaning: "the verification token expired: verify a new one-time password" },
  PUBLIC_URL_NOT_CONFIGURED: {
    status: "FailedPrecondition",
    meaning:
      "SIGIL_PUBLIC_URL is unset, so an invitation email's link would point nowhere, and oauth2_authenticate has no issuer to issue " +
      "OIDC tokens as: the operator sets it, then the request is sent again",
  },
  INVITATION_NOT_PENDING: {
    status: "FailedPrecondition",
    meaning: "the invitation was already accepted or revoked: an invitation is accepted once, and a revoked one never",
  },
  INVITATION_LIMIT_REACHED: {
    status: "FailedPrecondition",
    meaning: "the organization already has 100 pending invitations, the product's limit: revoke those no longer wanted, then invite",
  },
  INVITATION_EXPIRED: {
    status: "FailedPrecondition",
    meaning: "the invitation's link is older than SIGIL_INVITATION_SECONDS: ask for a new invitation",
  },
  GAS_STATION_NOT_OFFERED: {
    status: "FailedPrecondition",
    meaning:
      "sponsored transactions, batches of several calls and gas station nonces need the product's Gas Station (a paymaster and an " +
      "EIP-7702 delegate contract), which this server does not run: send one call with sponsor false, paid by the sender",
  },
  TRANSACTION_REJECTED_BY_NODE: {
    status: "FailedPrecondition",
    meaning: "the chain node refused the transaction (the message quotes it: nonce too low, insufficient funds, underpriced, malformed…)",
  },
  NONCE_ALREADY_USED: {
    status: "FailedPrecondition",
    meaning:
      "the signed transaction's nonce was already used on the chain, so it can never be mined: sign it again with the sender's next nonce",
  },
  NONCE_RESERVATION_CONFLICT: {
    status: "FailedPrecondition",
    meaning: "the nonce reserved for this send was taken by another send from the same address meanwhile; nothing was signed: send again",
  },

  // ── 401, gRPC 16 Unauthenticated: who sent the request is not established ──
  SIGNATURE_MISSING: { status: "Unauthenticated", meaning: "the request is not stamped: send exactly one of X-Stamp or X-Stamp-Webauthn" },
  MULTIPLE_STAMPS: {
    status: "Unauthenticated",
    meaning:
      "the request carries more than one stamp header (X-Stamp, X-Stamp-Webauthn, X-Stamp-Attested), or one of them twice: send exactly one",
  },
  ATTESTED_IDENTITY_UNKNOWN: {
    status: "Unauthenticated",
    meaning:
      "the attested stamp's token names a contact or OAuth identity no user of the request's organization holds (or holds verified), or the OAuth provider it named was deleted",
  },
  ATTESTED_IDENTITY_AMBIGUOUS: {
    status: "Unauthenticated",
    meaning:
      "several users of the request's organization have verified the contact, or hold the OAuth identity, the attested stamp's token names",
  },
  MALFORMED_STAMP: {
    status: "Unauthenticated",
    meaning:
      "the stamp header is not the base64url JSON the stampers produce, names an unknown scheme, or names a key no signature can hold " +
      "for (not the compressed point, or an ed25519 key that is not canonical or of small order); the message says which part",
  },
  SIGNATURE_INVALID: {
    status: "Unauthenticated",
    meaning:
      "the stamp does not verify over the exact body sent, its scheme does not match the key, or a passkey's origin or relying party is not allowed",
  },
  PUBLIC_KEY_NOT_FOUND: {
    status: "Unauthenticated",
    meaning: "no API key or passkey with the stamp's public key or credential id (or it was deleted meanwhile)",
  },
  API_KEY_EXPIRED: { status: "Unauthenticated", meaning: "the stamp's API key (or session) has expired: log in again or use another key" },
  CREDENTIAL_TOO_OLD_FOR_QUERIES: {
    status: "Unauthenticated",
    meaning: "the API key is older than this server answers queries for (SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS): query with a newer key",
  },
  SESSION_INVALID: {
    status: "Unauthenticated",
    meaning: "X-Session is not a read-only session of this server, or the credential that opened it is gone",
  },
  SESSION_EXPIRED: { status: "Unauthenticated", meaning: "the read-only session (X-Session) has expired: create a new one" },
  OIDC_SIGNATURE_INVALID: {
    status: "Unauthenticated",
    meaning: "the OIDC token's signature does not verify with its issuer's published keys",
  },
  OIDC_TOKEN_EXPIRED: { status: "Unauthenticated", meaning: "the OIDC token has expired: get a new one from the issuer" },
  OTP_INVALID: {
    status: "Unauthenticated",
    meaning: "wrong one-time password; the message says how many tries are left before it is burnt",
  },

  // ── 403, gRPC 7 PermissionDenied: who sent it is known, and may not do it ──
  WEBHOOK_BILLING_ORGANIZATION_ONLY: {
    status: "PermissionDenied",
    meaning:
      "a sub-organization subscribed an endpoint to SEND_TRANSACTION_STATUS_UPDATES: those endpoints belong to the parent (billing) organization, which receives its sub-organizations' send statuses",
  },
  POLICY_DENIED: {
    status: "PermissionDenied",
    meaning: "the policies (or the default rules) do not allow the activity; the message gives the outcome and the reason",
  },
  SESSION_SCOPE_DENIED: {
    status: "PermissionDenied",
    meaning:
      "the request was stamped by a session key issued with a session profile, and the profile's scope (a policy condition) does not hold for it; " +
      "no policy or approval can lift that: log in with a profile whose scope allows it, or without one",
  },
  VOTE_NOT_ALLOWED: {
    status: "PermissionDenied",
    meaning: "the user is neither in the root quorum nor named by the consensus of a policy in force for the activity",
  },
  ATTESTED_STAMP_NOT_ACCEPTED: {
    status: "PermissionDenied",
    meaning:
      "an attested stamp (X-Stamp-Attested) only proves an MFA step: it is accepted on approve_activity and reject_activity of an activity waiting for its requester's authentication (docs/authentication.md)",
  },
  IP_NOT_ALLOWED: {
    status: "PermissionDenied",
    meaning:
      "the request comes from an address outside the IP allowlist in force for its API key (docs/ip-allowlists.md), or from one " +
      "that could not be read while the list's onEvaluationError is DENY; it was refused before it was authorized, recorded or run",
  },
  ORGANIZATION_MISMATCH: {
    status: "PermissionDenied",
    meaning: "the credential (or read-only session) does not belong to the organization named in organizationId",
  },
  AMBIGUOUS_SUB_ORGANIZATION: {
    status: "PermissionDenied",
    meaning: "the credential is in several sub-organizations of the one named: name the sub-organization in organizationId",
  },
  PARENT_ORGANIZATION_READ_ONLY: {
    status: "PermissionDenied",
    meaning:
      "a parent organization's credential reads its sub-organizations but cannot write in them: use a credential of the sub-organization",
  },
  READ_ONLY_SESSION: {
    status: "PermissionDenied",
    meaning: "a read-only session (its key, or X-Session) may only query: stamp activities with a read-write key",
  },
  IMPORT_USER_MISMATCH: { status: "PermissionDenied", meaning: "an import must target the requesting user" },
  OIDC_ISSUER_NOT_ALLOWED: {
    status: "PermissionDenied",
    meaning: "the OIDC token's issuer is not one the operator accepts (SIGIL_OIDC_ALLOWED_ISSUERS)",
  },
  OIDC_CLAIMS_NOT_ALLOWED: {
    status: "PermissionDenied",
    meaning:
      "bare oidcClaims are accepted only from a parent creating a sub-organization, or in a top-level organization: send the signed oidcToken",
  },
  OIDC_NONCE_MISMATCH: {
    status: "PermissionDenied",
    meaning: "the OIDC token's nonce is not sha256 of this login's public key: the token was issued for another key",
  },
  EMAIL_DOMAIN_NOT_ALLOWED: {
    status: "PermissionDenied",
    meaning: "an email customization points at a domain outside the operator's SIGIL_EMAIL_ALLOWED_DOMAINS",
  },
  RECOVERY_CREDENTIAL_RESTRICTED: {
    status: "PermissionDenied",
    meaning: "a recovery credential (emailed by init_user_email_recovery) may only request recover_user: no other activity, query or vote",
  },
  RECOVERY_CREDENTIAL_REQUIRED: {
    status: "PermissionDenied",
    meaning: "recover_user must be stamped with the recovery credential init_user_email_recovery emailed to the user, still valid",
  },
  RECOVERY_USER_MISMATCH: {
    status: "PermissionDenied",
    meaning: "the recovery credential belongs to another user: it recovers only the user it was emailed to",
  },
  OTP_CUSTOMIZATION_NOT_ALLOWED: {
    status: "PermissionDenied",
    meaning: "a sub-organization's own credential may not customize the OTP message: the app's backend (the parent) does that",
  },
  VERIFICATION_TOKEN_KEY_MISMATCH: {
    status: "PermissionDenied",
    meaning: "the verification token is bound to a key: stamp the request with that key",
  },
  VERIFICATION_TOKEN_ORGANIZATION_MISMATCH: {
    status: "PermissionDenied",
    meaning: "the verification token serves the organization that issued it and its sub-organizations only",
  },

  // ── 404, gRPC 5 NotFound ──
  ENDPOINT_NOT_FOUND: {
    status: "NotFound",
    meaning: "no such path here (an operation of the product's API not built yet included; hosted-only ones are 501 OPERATION_NOT_SERVED)",
  },
  ORGANIZATION_NOT_FOUND: { status: "NotFound", meaning: "no organization with the organizationId given" },
  USER_NOT_FOUND: {
    status: "NotFound",
    meaning: "no such user in the organization (or no single user with the email or phone number given)",
  },
  USER_TAG_NOT_FOUND: { status: "NotFound", meaning: "no user tag with that id in the organization" },
  SESSION_PROFILE_NOT_FOUND: {
    status: "NotFound",
    meaning:
      "no session profile with that id in the organization or its parent organization (a login's sessionProfileId, get_session_profile, or the id of an MFA policy's session method): " +
      "a profile of an unrelated organization is refused the same way, and the login issues no session",
  },
  API_KEY_NOT_FOUND: { status: "NotFound", meaning: "no API key with that id (for that user)" },
  AUTHENTICATOR_NOT_FOUND: { status: "NotFound", meaning: "no authenticator (passkey) with that id (for that user)" },
  OAUTH2_CREDENTIAL_NOT_FOUND: {
    status: "NotFound",
    meaning:
      "no OAuth 2.0 credential with that id in the organization; for oauth2_authenticate, also one deleted or given another provider or " +
      "client id while the code was exchanged: start the sign-in again",
  },
  OAUTH_PROVIDER_NOT_FOUND: {
    status: "NotFound",
    meaning: "no OAuth provider with that id, or no user linked to the OIDC token's issuer and subject",
  },
  POLICY_NOT_FOUND: { status: "NotFound", meaning: "no policy with that id in the organization" },
  MFA_POLICY_NOT_FOUND: { status: "NotFound", meaning: "no MFA policy with that id for that user in the organization" },
  WALLET_NOT_FOUND: { status: "NotFound", meaning: "no wallet with that id in the organization" },
  WALLET_ACCOUNT_NOT_FOUND: {
    status: "NotFound",
    meaning: "no wallet account with that id, address or path (an address of a private key is not one)",
  },
  PRIVATE_KEY_NOT_FOUND: { status: "NotFound", meaning: "no private key with that id in the organization" },
  SECRET_NOT_FOUND: { status: "NotFound", meaning: "no stored secret with that id in the organization" },
  PRIVATE_KEY_TAG_NOT_FOUND: { status: "NotFound", meaning: "no private key tag with that id in the organization" },
  SIGNER_NOT_FOUND: {
    status: "NotFound",
    meaning: "signWith is neither a wallet account address, a private key id nor a private key address of the organization",
  },
  ACTIVITY_NOT_FOUND: { status: "NotFound", meaning: "no activity with that id (or, for a vote, that fingerprint) in the organization" },
  LOG_ENTRY_NOT_FOUND: {
    status: "NotFound",
    meaning:
      "get_inclusion_proof: the activity is not in its organization's transparency log (yet): only an activity that has reached a final status is",
  },
  LOG_ENTRY_PENDING: {
    status: "Unavailable",
    meaning:
      "get_inclusion_proof: the activity is final but the sequencer has not appended it to the log yet, and could not at once " +
      "(thousands of activities wait before it, or the database failed): ask again; every final activity is appended within the " +
      "maximum merge delay (docs/audit-log.md#sequencing)",
  },
  LOG_SIZE_INVALID: {
    status: "InvalidArgument",
    meaning: "get_inclusion_proof, get_consistency_proof: a tree size the log does not have (larger than the log, or not after the leaf)",
  },
  IP_ALLOWLIST_NOT_FOUND: {
    status: "NotFound",
    meaning: "remove_ip_allowlist: the organization (or the API key named by publicKey) has no IP allowlist",
  },
  FEATURE_NOT_FOUND: { status: "NotFound", meaning: "the feature removed is not set in the organization" },
  INVITATION_NOT_FOUND: {
    status: "NotFound",
    meaning: "no invitation of the organization has this id, or no invitation has this token (check the link was copied whole)",
  },
  IMPORT_TARGET_NOT_FOUND: {
    status: "NotFound",
    meaning:
      "no import target for the user (for import_secrets: none with that targetPublicKey): call init_import_wallet / init_import_private_key / init_import_secrets first (a target serves one import)",
  },
  OTP_NOT_FOUND: { status: "NotFound", meaning: "no one-time password with that id in the organization" },
  SMART_CONTRACT_INTERFACE_NOT_FOUND: { status: "NotFound", meaning: "no smart contract interface with that id in the organization" },
  SEND_TRANSACTION_STATUS_NOT_FOUND: {
    status: "NotFound",
    meaning: "no sent transaction with that sendTransactionStatusId in the organization",
  },
  WEBHOOK_ENDPOINT_NOT_FOUND: { status: "NotFound", meaning: "no webhook endpoint with that id in the organization" },

  // ── 408, gRPC 8 ResourceExhausted ──
  REQUEST_TIMEOUT: {
    status: "ResourceExhausted",
    http: 408,
    meaning:
      "the headers or the whole request did not arrive in time (SIGIL_HEADERS_TIMEOUT_MS, SIGIL_REQUEST_TIMEOUT_MS); the connection is closed",
  },

  // ── 409, gRPC 6 AlreadyExists ──
  DUPLICATE_REQUEST: {
    status: "AlreadyExists",
    meaning:
      "another user already submitted this exact body: change timestampMs to submit it yourself (your own retry is answered from the log)",
  },
  API_KEY_ALREADY_EXISTS: {
    status: ["AlreadyExists", "FailedPrecondition"],
    meaning: "the organization already has an API key with this public key (409); a session's key is one (400): create a fresh key pair",
  },
  AUTHENTICATOR_ALREADY_EXISTS: {
    status: "AlreadyExists",
    meaning: "the organization already has an authenticator with this credential id",
  },
  OAUTH_PROVIDER_ALREADY_EXISTS: {
    status: "AlreadyExists",
    meaning: "the OIDC identity (issuer and subject) is already linked to a user of the organization",
  },
  SMART_CONTRACT_INTERFACE_ALREADY_EXISTS: {
    status: "AlreadyExists",
    meaning: "the organization already has an interface for this address (or program id) and chain: delete it first to replace it",
  },
  SESSION_PROFILE_ALREADY_EXISTS: {
    status: "AlreadyExists",
    meaning:
      "the organization already has a session profile with this name (the name is the session JWT's session_type); profiles are immutable, so choose another name",
  },
  USER_TAG_ALREADY_EXISTS: { status: "AlreadyExists", meaning: "the organization already has a user tag with this name" },
  PRIVATE_KEY_TAG_ALREADY_EXISTS: { status: "AlreadyExists", meaning: "the organization already has a private key tag with this name" },
  WALLET_ALREADY_EXISTS: { status: "AlreadyExists", meaning: "the organization already has a wallet with this name" },
  SECRET_ALREADY_EXISTS: {
    status: "AlreadyExists",
    meaning: "the organization already has a stored secret with this name, or the import names it twice (names are unique)",
  },
  PRIVATE_KEY_ALREADY_EXISTS: {
    status: "AlreadyExists",
    meaning: "the organization already has a private key with this name, or (import) this very key",
  },

  // ── 413, gRPC 8 ResourceExhausted ──
  REQUEST_TOO_LARGE: { status: "ResourceExhausted", http: 413, meaning: "the body exceeds the server's limit (SIGIL_BODY_LIMIT_BYTES)" },

  // ── 429, gRPC 8 ResourceExhausted ──
  OTP_RATE_LIMITED: {
    status: "ResourceExhausted",
    meaning:
      "nothing was sent: a budget of messages (codes, emailed credentials, invitations) per contact, organization or credential is spent; retry after the Retry-After seconds",
  },
  REQUEST_RATE_LIMITED: {
    status: "ResourceExhausted",
    meaning:
      "a request rate limit of the credential, its sub-organization or its organization (named in the message with its setting) is spent: " +
      "nothing was locked or recorded; send it again after the Retry-After seconds (see rate-limits.md)",
  },

  // ── 500, gRPC 13 Internal ──
  INTERNAL: { status: "Internal", meaning: "a fault of the server; the details go to the server's log only" },

  // ── 501, gRPC 12 Unimplemented ──
  OPERATION_NOT_SERVED: {
    status: "Unimplemented",
    meaning:
      "a hosted-only service of the product (TVC, Earn, swaps, fiat on-ramp, Spark, …) that a self-hosted Sigil does not provide; the message " +
      "names the service. Answered before the stamp is checked: the list is public",
  },

  // ── 503, gRPC 14 Unavailable: try again later ──
  TRANSACTION_ROLLED_BACK: {
    status: "Unavailable",
    meaning:
      "the write transaction this request shared with others (activities on SQLite, signatures on PostgreSQL) could not be committed; " +
      "nothing of it was kept: send it again",
  },
  DATABASE_UNAVAILABLE: {
    status: "Unavailable",
    meaning:
      "the database could not be reached, or the connection to it was lost while this request was served (a restart, a failover, a " +
      "terminated connection): nothing of this request was kept; send it again after the Retry-After seconds",
  },
  COMMIT_OUTCOME_UNKNOWN: {
    status: "Unavailable",
    meaning:
      "the connection to the database was lost while this request's transaction was being committed, so it may or may not have been " +
      "kept: send the very same body again after the Retry-After seconds (it is answered with the activity if it was kept, and carried " +
      "out if not), or look for the activity (list_activities) before sending a new request",
  },
  CHAIN_NODE_UNAVAILABLE: {
    status: "Unavailable",
    meaning:
      "the chain node of SIGIL_CHAIN_RPC_URLS did not answer in time, or answered for another chain than the caip2 it is listed under",
  },
  OIDC_DISCOVERY_FAILED: {
    status: "Unavailable",
    meaning: "the OIDC issuer's discovery document or keys could not be fetched, or do not match the issuer",
  },
  OAUTH2_PROVIDER_UNAVAILABLE: {
    status: "Unavailable",
    meaning:
      "the OAuth 2.0 provider's token or user-info endpoint (its setting, e.g. SIGIL_OAUTH2_X_TOKEN_URL) could not be reached, did not " +
      "answer in time, failed (5xx), was overloaded (429), answered with a redirect (not followed), more than 64 KiB or something that " +
      "is not its API's: the authorization code may still be good, try again",
  },
} as const satisfies Record<string, ErrorEntry>;

export type ErrorCode = keyof typeof ERROR_CATALOG;

/** The statuses `code` may be answered with. */
export type StatusOf<C extends ErrorCode> = (typeof ERROR_CATALOG)[C]["status"] extends infer S
  ? S extends readonly (infer One)[]
    ? One
    : S
  : never;

/** The statuses of an entry, as a list. */
export const statusesOf = (entry: ErrorEntry): readonly GrpcStatus[] => (typeof entry.status === "string" ? [entry.status] : entry.status);

/** The HTTP status `code` is sent with when answered with `status`. */
export function httpStatusOf(code: ErrorCode, status: GrpcStatus): number {
  const entry: ErrorEntry = ERROR_CATALOG[code];
  return entry.http ?? GRPC_CODES[status].http;
}
