import type { ColumnType, Selectable } from "kysely";

// Row types of the database, shared by SQLite and PostgreSQL. Times are integer milliseconds since the
// epoch; JSON documents are stored as text so both dialects read them back the same way.
export interface OrganizationsTable {
  id: string;
  name: string;
  /** Set for a sub-organization; its parent may read it. */
  parent_organization_id: string | null;
  root_quorum_threshold: number;
  created_at: number;
  updated_at: number;
  /** Set when a sub-organization is deleted: the row and its audit log stay, nothing else does. */
  deleted_at: ColumnType<number | null, number | null | undefined, number | null>;
  /** The login features (LOGIN_FEATURE_BITS) set without a value, one bit each. */
  login_features: ColumnType<number, number | undefined, number>;
}

/**
 * The login features every sub-organization has unless its sign-up turns them off (the product's
 * default), kept as bits of `organizations.login_features` while they are set without a value: as
 * rows of organization_features they were four rows, about 800 bytes with their index, per end user
 * (docs/storage.md). Set with a value, a login feature is a row like any other feature.
 */
export const LOGIN_FEATURE_BITS: Readonly<Record<string, number>> = {
  FEATURE_NAME_EMAIL_AUTH: 1,
  FEATURE_NAME_EMAIL_RECOVERY: 2,
  FEATURE_NAME_OTP_EMAIL_AUTH: 4,
  FEATURE_NAME_SMS_AUTH: 8,
};

/** FEATURE_NAME_* settings of an organization (set_organization_feature). */
export interface OrganizationFeaturesTable {
  organization_id: string;
  name: string;
  value: string;
  created_at: number;
  updated_at: number;
}

/** A key the service itself holds (purpose "webhook_signing": the Ed25519 key deliveries are signed with). */
export interface ServiceKeysTable {
  id: string;
  purpose: string;
  /** "" — the key belongs to the deployment, not to an organization (part of the sealing identity). */
  organization_id: string;
  /** Hex. */
  public_key: string;
  sealed_private_key: string;
  created_at: number;
}

/** The data key secrets are sealed under while the master key is in a PKCS#11 token, wrapped by the token's key. */
export interface TokenDataKeysTable {
  /** Always "master": one data key per deployment. */
  slot: string;
  /** The data key's key id (what sealed values name). */
  key_id: string;
  /** AES-GCM under the token's key, bound to the key id (crypto/token-key.ts). */
  wrapped_key: string;
  /** The token and key that wrapped it, for messages: not secrets. */
  token_label: string;
  key_label: string;
  created_at: number;
}

export interface WebhookEndpointsTable {
  id: string;
  organization_id: string;
  name: string;
  url: string;
  /** 0 or 1 */
  is_active: number;
  created_at: number;
  updated_at: number;
}

/** An Ethereum ABI or a Solana IDL (create_smart_contract_interface), bound to one address. */
export interface SmartContractInterfacesTable {
  id: string;
  organization_id: string;
  /** SMART_CONTRACT_INTERFACE_TYPE_ETHEREUM | SMART_CONTRACT_INTERFACE_TYPE_SOLANA */
  type: string;
  /** Ethereum: 0x and 40 lower-case hex digits; Solana: the program id in base58, as written. */
  address: string;
  label: string;
  notes: string;
  /** The ABI or IDL exactly as uploaded (validated then). */
  interface_json: string;
  /** SHA-256 of interface_json's UTF-8 bytes, hex: the `digest` of smartContractInterfaceReferences. */
  digest: string;
  created_at: number;
  updated_at: number;
}

export interface WebhookSubscriptionsTable {
  endpoint_id: string;
  event_type: string;
  filters_json: string;
  is_active: number;
}

export interface WebhookDeliveriesTable {
  /** The event id: the same on every attempt. */
  id: string;
  /** The organization whose endpoint (or webhook feature) receives it. */
  organization_id: string;
  /** The organization the activity belongs to (the receiver's own, or one of its sub-organizations). */
  event_organization_id: string;
  activity_id: string;
  /** The endpoint id, or "feature:<organization id>" for the FEATURE_NAME_WEBHOOK URL. */
  destination: string;
  endpoint_id: string | null;
  url: string;
  event_type: string;
  body: string;
  /** pending | delivered | failed | cancelled */
  status: string;
  attempts: number;
  next_attempt_at: number;
  /** While a dispatcher is sending it: no other takes it before this time. */
  lease_until: number | null;
  last_status_code: number | null;
  last_error: string | null;
  created_at: number;
  updated_at: number;
  delivered_at: number | null;
}

/** A target key handed out by init_import_wallet / init_import_private_key: one import may use it. */
/** A secret a client imported (import_secrets); its plaintext only ever sealed. */
export interface SecretsTable {
  id: string;
  organization_id: string;
  name: string | null;
  /** JSON [{key, value}], in the order imported: what policies read as secret.static_properties. */
  static_properties: string;
  sealed_secret: string;
  /** The user whose import brought it in. */
  imported_by: string;
  created_at: number;
}

export interface ImportTargetsTable {
  id: string;
  organization_id: string;
  user_id: string;
  /** "wallet" | "private_key" | "secret" */
  kind: string;
  /** Uncompressed P-256, hex. */
  public_key: string;
  sealed_private_key: string;
  expires_at: number;
  created_at: number;
}

/** A one-time password sent by init_otp_auth ("otp_auth") or init_otp ("otp"); only its hash is kept. */
export interface OtpsTable {
  id: string;
  organization_id: string;
  /** The user it logs in (init_otp_auth); null for init_otp, which proves a contact only. */
  user_id: string | null;
  flow: string;
  /** OTP_TYPE_EMAIL | OTP_TYPE_SMS */
  otp_type: string;
  contact: string;
  /** HMAC-SHA256 under the deployment's OTP key of (id, code), hex. */
  code_hash: string;
  code_length: number;
  alphanumeric: number;
  /** Wrong codes tried so far; at the limit the code is burnt. */
  attempts: number;
  /** init_otp V2+: the P-256 key (uncompressed hex) verify_otp's encryptedOtpBundle is sealed to. */
  target_public_key: string | null;
  sealed_target_key: string | null;
  expires_at: number;
  used_at: number | null;
  created_at: number;
}

/** One code sent (init_otp_auth, init_otp): what the send budgets count (services/send-budgets.ts). */
export interface OtpSendsTable {
  /** The contact in one spelling (emails: ASCII lower case, no +tag, no trailing dot; Gmail's without
   * dots, googlemail.com as gmail.com; phones: + and digits). */
  contact_key: string;
  /** The organization of the credential that asked (the parent, for its backend's requests). */
  requester_organization_id: string;
  /** The top-level organization whose budget the send counts toward (the requester's parent, or the
   * requester itself). Nullable only because SQLite adds columns so; migration 0008 filled older rows. */
  root_organization_id: string | null;
  /** 1 when the requester is a sub-organization (an end user's own credential). */
  from_sub_organization: number;
  /** The API key or passkey that stamped the request (null for sends recorded before migration 0008). */
  credential_id: string | null;
  created_at: number;
}

/** A verification token from verify_otp: proof that someone holds a contact; otp_login spends it once. */
export interface VerificationTokensTable {
  id: string;
  organization_id: string;
  otp_type: string;
  contact: string;
  /** Compressed P-256 hex the token was bound to (verify_otp's publicKey), if any. */
  public_key: string | null;
  expires_at: number;
  used_at: number | null;
  created_at: number;
}

/** An email or SMS waiting to go out (or, with no transport configured, kept for `sigil outbox`). */
export interface OutboundMessagesTable {
  id: string;
  organization_id: string;
  /** email | sms */
  channel: string;
  recipient: string;
  /** The message (it carries a code), sealed; erased once sent. */
  sealed_message: string | null;
  /** pending | sent | failed | outbox | expired | cancelled (an invitation revoked before its email went) */
  status: string;
  attempts: number;
  next_attempt_at: number;
  lease_until: number | null;
  last_error: string | null;
  /** After this the code inside is useless: the message is no longer sent (and an outbox copy is dropped). */
  expires_at: number;
  created_at: number;
  sent_at: number | null;
}

/** One thing the courier observed of an email it sent (list_email_events). */
export interface EmailEventsTable {
  id: string;
  /** The organization the message was sent for. */
  organization_id: string;
  /** The outbound message (outbound_messages.id; its Message-ID header is <id@sigil>). */
  message_id: string;
  /** Send | Delivery | Bounce | DeliveryDelay */
  event_type: string;
  from_address: string;
  to_address: string;
  /** to_address with ASCII letters lower-cased: what the email filter compares. */
  recipient_key: string;
  /** JSON: the v1EmailEventDetails fields of the event (SMTP answer, bounce or delay type). */
  details: string;
  /** When it happened (ms). */
  timestamp: number;
  created_at: number;
}

/** An invitation to join an organization (create_invitations); the token its link carries is stored
 * only as a hash (SHA-256 of its bytes: it is 32 random bytes, so no slower hash is needed). */
export interface Oauth2CredentialsTable {
  id: string;
  organization_id: string;
  /** OAUTH2_PROVIDER_X | OAUTH2_PROVIDER_DISCORD */
  provider: string;
  client_id: string;
  /** The envelope as the client sent it, encrypted to the deployment's client-secret key (hex). */
  encrypted_client_secret: string;
  /** SHA-256 (hex) of the envelope's bytes: another organization may not keep the same envelope. */
  encrypted_client_secret_digest: string;
  /** The client secret, sealed under the master key. */
  sealed_client_secret: string;
  created_at: number;
  updated_at: number;
}

export interface InvitationsTable {
  id: string;
  organization_id: string;
  receiver_name: string;
  receiver_email: string;
  /** JSON array of user tag ids the user gets on acceptance. */
  receiver_tags: string;
  /** ACCESS_TYPE_WEB | ACCESS_TYPE_API | ACCESS_TYPE_ALL, as requested (shown, not enforced). */
  access_type: string;
  sender_user_id: string;
  /** INVITATION_STATUS_CREATED | INVITATION_STATUS_ACCEPTED | INVITATION_STATUS_REVOKED */
  status: string;
  /** Hex SHA-256 of the token. */
  token_hash: string;
  expires_at: number;
  /** The user acceptance created. */
  accepted_user_id: string | null;
  /** The invitation email (outbound_messages), so that revoking the invitation cancels it if unsent. */
  message_id: string | null;
  created_at: number;
  updated_at: number;
}

/** An IP allowlist: the organization's (api_key_id "") or one API key's (docs/ip-allowlists.md). */
export interface IpAllowlistsTable {
  organization_id: string;
  /** The API key it applies to; "" for the organization's own list. */
  api_key_id: string;
  /** 1 or 0 for the organization's list (only an enabled one is enforced); null for a key's. */
  enabled: number | null;
  /** ALLOW | DENY: what happens when the client's address cannot be read. */
  on_evaluation_error: string;
  /** JSON array of {cidr, label, createdAt}: normalized CIDR blocks, in the order given. */
  rules: string;
  created_at: number;
  updated_at: number;
}

export interface RootQuorumMembersTable {
  organization_id: string;
  user_id: string;
}

export interface UsersTable {
  id: string;
  organization_id: string;
  name: string;
  email: string | null;
  phone_number: string | null;
  /** When the email / phone number was proven with a one-time password; null if never. */
  email_verified_at: ColumnType<number | null, number | null | undefined, number | null>;
  phone_verified_at: ColumnType<number | null, number | null | undefined, number | null>;
  created_at: number;
  updated_at: number;
}

export interface ApiKeysTable {
  id: string;
  organization_id: string;
  user_id: string;
  name: string;
  /** Hex: compressed P-256/secp256k1 point, or 32-byte ed25519 key. */
  public_key: string;
  /** API_KEY_CURVE_P256 | API_KEY_CURVE_SECP256K1 | API_KEY_CURVE_ED25519 */
  curve: string;
  /** As requested (seconds, a decimal string); null when the key does not expire. */
  expiration_seconds: string | null;
  /** created_at + expiration_seconds, precomputed for the stamp check. */
  expires_at: number | null;
  /** The login that made it (LOGIN, READ_WRITE, READ_ONLY, OAUTH, OTP_AUTH, EMAIL_AUTH,
   * RECOVERY: a recovery credential, which may only call recover_user); null for an ordinary key.
   * invalidateExisting removes a user's earlier keys of the same kind. */
  session_kind: ColumnType<string | null, string | null | undefined, string | null>;
  /** SESSION_TYPE_READ_ONLY keys may only query; null or SESSION_TYPE_READ_WRITE may do anything. */
  session_type: ColumnType<string | null, string | null | undefined, string | null>;
  /** The session profile a login issued the key with: its scope bounds every activity the key
   * requests. Null for any other key. */
  session_profile_id: ColumnType<string | null, string | null | undefined, string | null>;
  created_at: number;
  updated_at: number;
}

/** A session profile (create_session_profile). Never changed or removed once made. */
export interface SessionProfilesTable {
  id: string;
  organization_id: string;
  /** Unique in its organization; the session JWT's session_type. */
  name: string;
  /** A condition in the policy language. */
  scope: string;
  /** The longest session issued with it (seconds, a decimal string); null: the login decides. */
  expiration_seconds: string | null;
  notes: string | null;
  created_at: number;
  updated_at: number;
}

export interface AuthenticatorsTable {
  id: string;
  organization_id: string;
  user_id: string;
  name: string;
  /** base64url credential id, as the authenticator reports it. */
  credential_id: string;
  /** Compressed P-256 hex. */
  public_key: string;
  attestation_type: string;
  aaguid: string;
  model: string;
  /** JSON array of AUTHENTICATOR_TRANSPORT_* values. */
  transports: string;
  sign_count: number;
  created_at: number;
  updated_at: number;
}

export interface OauthProvidersTable {
  id: string;
  organization_id: string;
  user_id: string;
  name: string;
  issuer: string;
  audience: string;
  subject: string;
  created_at: number;
  updated_at: number;
}

export interface TagsTable {
  id: string;
  organization_id: string;
  name: string;
  /** TAG_TYPE_USER | TAG_TYPE_PRIVATE_KEY */
  tag_type: string;
  created_at: number;
  updated_at: number;
}

export interface UserTagMembersTable {
  tag_id: string;
  user_id: string;
}

export interface ActivitiesTable {
  id: string;
  organization_id: string;
  type: string;
  status: string;
  /** JSON: the parameters as recorded (without secret ones), or "" when they are those of the body
   * its requester signed, kept in the first vote (read them with store/activity-intent.ts intentText). */
  intent: string;
  /** JSON: { <resultKey>: result }, "{}" until completed */
  result: string;
  /** JSON: the gRPC-style status of a failed activity, or null */
  failure: string | null;
  /** JSON array of votes */
  votes: string;
  /** sha256 hex of the exact request body: the idempotency key and the replay defence. */
  fingerprint: string;
  /** The request's timestampMs, as sent. */
  timestamp_ms: string;
  user_id: string | null;
  created_at: number;
  updated_at: number;
  /** JSON: what the operation's precheck prepared (a send's fees, gas and pending nonce), kept while
   * the activity waits for approvals so a listing weighs canApprove / canReject on it; null otherwise. */
  prepared: string | null;
  /** The id of the request that made the activity (its X-Request-Id, or the one made for it), which
   * every log line of that request carries; null for activities recorded before it was kept. */
  request_id: string | null;
}

export interface PoliciesTable {
  id: string;
  organization_id: string;
  name: string;
  /** EFFECT_ALLOW | EFFECT_DENY */
  effect: string;
  /** Policy-language expressions as written; null when absent. */
  condition: string | null;
  consensus: string | null;
  time: string | null;
  notes: string;
  created_at: number;
  updated_at: number;
}

/** One evaluation of an organization's policies for one vote on an activity. */
export interface MfaPoliciesTable {
  id: string;
  organization_id: string;
  /** The user the MFA policy applies to: it is evaluated for that user's activities only. */
  user_id: string;
  name: string;
  /** A policy-language condition, as written. */
  condition: string;
  /** JSON: the ordered steps, each { any: [{ type, id? }] }. */
  required_methods: string;
  /** Lower is evaluated first; the first policy whose condition holds is the one enforced. */
  evaluation_order: number;
  notes: string;
  created_at: number;
  updated_at: number;
}

export interface ActivityAuthenticationsTable {
  activity_id: string;
  /** The user who must authenticate (the activity's requester). */
  user_id: string;
  organization_id: string;
  /** The MFA policy that applied when the activity was submitted (it may since have been changed or
   * deleted: its steps are kept here as they were). */
  mfa_policy_id: string;
  /** JSON: the policy's steps, as when the activity was submitted. */
  required_methods: string;
  /** JSON: the credentials that proved a step so far, in the order they were given. */
  proofs: string;
  created_at: number;
  updated_at: number;
}

export interface PolicyEvaluationsTable {
  id: string;
  organization_id: string;
  activity_id: string;
  vote_id: string;
  /** The combined outcome (OUTCOME_*) of this evaluation. */
  outcome: string;
  /** JSON array of { policyId, outcome } */
  evaluations: string;
  created_at: number;
}

export interface WalletsTable {
  id: string;
  organization_id: string;
  name: string;
  /** The mnemonic, sealed under the master key (crypto/envelope.ts); never stored in the clear. */
  sealed_mnemonic: string;
  /** MNEMONIC_LANGUAGE_* */
  mnemonic_language: string;
  /** 0 or 1 */
  imported: number;
  exported: number;
  created_at: number;
  updated_at: number;
}

export interface WalletAccountsTable {
  id: string;
  organization_id: string;
  wallet_id: string;
  curve: string;
  path_format: string;
  path: string;
  address_format: string;
  address: string;
  /** Hex: compressed secp256k1/P-256 point, or the 32-byte ed25519 key. */
  public_key: string;
  /** The derived private key, sealed, so signing opens one value instead of re-deriving from the
   * mnemonic (a PBKDF2 of 2048 rounds) on every request. */
  sealed_private_key: string;
  name: string | null;
  created_at: number;
  updated_at: number;
}

export interface PrivateKeysTable {
  id: string;
  organization_id: string;
  name: string;
  curve: string;
  public_key: string;
  /** The private key, sealed under the master key; never stored in the clear. */
  sealed_private_key: string;
  /** JSON array of { format, address } */
  addresses: string;
  imported: number;
  exported: number;
  created_at: number;
  updated_at: number;
}

export interface PrivateKeyAddressesTable {
  private_key_id: string;
  organization_id: string;
  format: string;
  address: string;
}

export interface PrivateKeyTagMembersTable {
  tag_id: string;
  private_key_id: string;
}

/** A transaction eth_send_transaction signed, sent and tracks until it is final (docs/sending-transactions.md). */
export interface SentTransactionsTable {
  /** The sendTransactionStatusId. */
  id: string;
  organization_id: string;
  activity_id: string;
  caip2: string;
  /** The sender: EIP-55 checksummed; on Solana the fee payer (the first signer), base58. */
  from_address: string;
  to_address: string | null;
  /** Null when nothing was signed (the simulation reverted). */
  nonce: number | null;
  /** The signed transaction, 0x hex, as broadcast (public once broadcast; no secret). */
  signed_transaction: string | null;
  tx_hash: string | null;
  /** INITIALIZED (signed, not yet accepted by the node), BROADCASTING, INCLUDED or FAILED. */
  status: string;
  /** JSON { message, revertChain?, eth? } when it failed or reverted. */
  error: string | null;
  /** How often the node was handed it (first broadcast and rebroadcasts after it was dropped). */
  broadcasts: number;
  /** Looks since the status last changed: the backoff grows with them. */
  attempts: number;
  next_attempt_at: number;
  /** The process looking at it holds it until then. */
  lease_until: number | null;
  block_number: number | null;
  /** The block (Ethereum) or slot's block (Solana) it landed in, and that block's time (ms). */
  block_hash: string | null;
  block_time: number | null;
  /** What it paid, in the chain's smallest native unit (wei, lamports), as decimal digits. */
  fee: string | null;
  /** Consecutive nonces of the sender it uses from `nonce` on: 2 when it carries the sender's own
   * EIP-7702 authorization (whose nonce is the transaction's plus one), else 1. */
  nonce_count: ColumnType<number, number | undefined, number>;
  created_at: number;
  updated_at: number;
}

/** A sent transaction as read. */
export type SentTransaction = Selectable<SentTransactionsTable>;

/** One row per sending address and chain: locked while a nonce is reserved for it. */
export interface NonceReservationsTable {
  caip2: string;
  address: string;
  /** The nonce after the last one reserved here (a high-water mark; the reservation itself is
   * computed from the node and the sends still in flight). */
  next_nonce: number;
  updated_at: number;
}

/** An organization's transparency log as it stands (store/transparency-log.ts): its size, its root and
 * the right edge of its Merkle tree, from which the next leaf's new nodes are computed without a read. */
export interface TransparencyLogHeadsTable {
  organization_id: string;
  size: number;
  /** Hex SHA-256: the RFC 9162 root of the log's `size` leaves (that of the empty string when empty). */
  root_hash: string;
  /** The hashes of the complete subtrees along the right edge, largest first: hex, concatenated. */
  frontier: string;
  updated_at: number;
}

/** One leaf of an organization's transparency log: the activity it records, and the hash of its entry. */
export interface TransparencyLogLeavesTable {
  organization_id: string;
  leaf_index: number;
  activity_id: string;
  /** Hex SHA-256(0x00 ‖ entry): RFC 9162's leaf hash of the activity's canonical entry. */
  leaf_hash: string;
}

/** The hash of each complete subtree of 2^level leaves (level ≥ 1) of a log: what makes a proof O(log n) reads. */
export interface TransparencyLogNodesTable {
  organization_id: string;
  level: number;
  node_index: number;
  hash: string;
}

/** A signed checkpoint of a log (C2SP tlog-checkpoint in a signed note). */
export interface TransparencyLogCheckpointsTable {
  organization_id: string;
  tree_size: number;
  root_hash: string;
  /** The signed note, as served. */
  note: string;
  created_at: number;
}

/** A final activity waiting for its leaf: written with the activity (a trigger, migration 0034), deleted
 * by the sequencer that appends it (store/transparency-log.ts). */
export interface TransparencyLogPendingTable {
  organization_id: string;
  activity_id: string;
}

export interface Database {
  transparency_log_pending: TransparencyLogPendingTable;
  transparency_log_heads: TransparencyLogHeadsTable;
  transparency_log_leaves: TransparencyLogLeavesTable;
  transparency_log_nodes: TransparencyLogNodesTable;
  transparency_log_checkpoints: TransparencyLogCheckpointsTable;
  organizations: OrganizationsTable;
  root_quorum_members: RootQuorumMembersTable;
  users: UsersTable;
  api_keys: ApiKeysTable;
  session_profiles: SessionProfilesTable;
  authenticators: AuthenticatorsTable;
  oauth_providers: OauthProvidersTable;
  tags: TagsTable;
  user_tag_members: UserTagMembersTable;
  activities: ActivitiesTable;
  policies: PoliciesTable;
  policy_evaluations: PolicyEvaluationsTable;
  mfa_policies: MfaPoliciesTable;
  activity_authentications: ActivityAuthenticationsTable;
  organization_features: OrganizationFeaturesTable;
  service_keys: ServiceKeysTable;
  token_data_keys: TokenDataKeysTable;
  import_targets: ImportTargetsTable;
  secrets: SecretsTable;
  otps: OtpsTable;
  otp_sends: OtpSendsTable;
  verification_tokens: VerificationTokensTable;
  outbound_messages: OutboundMessagesTable;
  email_events: EmailEventsTable;
  invitations: InvitationsTable;
  ip_allowlists: IpAllowlistsTable;
  oauth2_credentials: Oauth2CredentialsTable;
  webhook_endpoints: WebhookEndpointsTable;
  smart_contract_interfaces: SmartContractInterfacesTable;
  webhook_subscriptions: WebhookSubscriptionsTable;
  webhook_deliveries: WebhookDeliveriesTable;
  wallets: WalletsTable;
  wallet_accounts: WalletAccountsTable;
  private_keys: PrivateKeysTable;
  private_key_tag_members: PrivateKeyTagMembersTable;
  private_key_addresses: PrivateKeyAddressesTable;
  sent_transactions: SentTransactionsTable;
  nonce_reservations: NonceReservationsTable;
}
