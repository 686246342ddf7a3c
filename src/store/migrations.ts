// One set of migrations for both dialects, written with Kysely's schema builder so the same code
// produces SQLite and PostgreSQL DDL. Append new migrations; never edit a released one.
import crypto from "node:crypto";
import { PostgresAdapter, sql, type Kysely, type Migration, type MigrationProvider } from "kysely";
import { LOGIN_FEATURE_BITS } from "./schema.js";

const initial: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("organizations")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("parent_organization_id", "text")
      .addColumn("root_quorum_threshold", "integer", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();

    await db.schema
      .createTable("users")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("email", "text")
      .addColumn("phone_number", "text")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("users_by_organization").on("users").columns(["organization_id", "created_at"]).execute();

    await db.schema
      .createTable("root_quorum_members")
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("user_id", "text", (c) => c.notNull().references("users.id"))
      .addPrimaryKeyConstraint("root_quorum_members_pk", ["organization_id", "user_id"])
      .execute();

    await db.schema
      .createTable("api_keys")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("user_id", "text", (c) => c.notNull().references("users.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("public_key", "text", (c) => c.notNull())
      .addColumn("curve", "text", (c) => c.notNull())
      .addColumn("expiration_seconds", "text")
      .addColumn("expires_at", "bigint")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    // The stamp check finds a key by its public half; one organization holds a public key once.
    await db.schema.createIndex("api_keys_by_public_key").on("api_keys").columns(["public_key", "organization_id"]).unique().execute();
    await db.schema.createIndex("api_keys_by_user").on("api_keys").columns(["user_id"]).execute();

    await db.schema
      .createTable("authenticators")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("user_id", "text", (c) => c.notNull().references("users.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("credential_id", "text", (c) => c.notNull())
      .addColumn("public_key", "text", (c) => c.notNull())
      .addColumn("attestation_type", "text", (c) => c.notNull())
      .addColumn("aaguid", "text", (c) => c.notNull())
      .addColumn("model", "text", (c) => c.notNull())
      .addColumn("transports", "text", (c) => c.notNull())
      .addColumn("sign_count", "bigint", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex("authenticators_by_credential_id")
      .on("authenticators")
      .columns(["credential_id", "organization_id"])
      .unique()
      .execute();
    await db.schema.createIndex("authenticators_by_user").on("authenticators").columns(["user_id"]).execute();

    await db.schema
      .createTable("oauth_providers")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("user_id", "text", (c) => c.notNull().references("users.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("issuer", "text", (c) => c.notNull())
      .addColumn("audience", "text", (c) => c.notNull())
      .addColumn("subject", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("oauth_providers_by_user").on("oauth_providers").columns(["user_id"]).execute();

    await db.schema
      .createTable("tags")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("tag_type", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("tags_by_name").on("tags").columns(["organization_id", "tag_type", "name"]).unique().execute();

    await db.schema
      .createTable("user_tag_members")
      .addColumn("tag_id", "text", (c) => c.notNull().references("tags.id"))
      .addColumn("user_id", "text", (c) => c.notNull().references("users.id"))
      .addPrimaryKeyConstraint("user_tag_members_pk", ["tag_id", "user_id"])
      .execute();
    await db.schema.createIndex("user_tag_members_by_user").on("user_tag_members").columns(["user_id"]).execute();

    await db.schema
      .createTable("activities")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("type", "text", (c) => c.notNull())
      .addColumn("status", "text", (c) => c.notNull())
      .addColumn("intent", "text", (c) => c.notNull())
      .addColumn("result", "text", (c) => c.notNull())
      .addColumn("failure", "text")
      .addColumn("votes", "text", (c) => c.notNull())
      .addColumn("fingerprint", "text", (c) => c.notNull().unique())
      .addColumn("timestamp_ms", "text", (c) => c.notNull())
      .addColumn("user_id", "text")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("activities_by_organization").on("activities").columns(["organization_id", "created_at", "id"]).execute();
  },
};

const policies: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("policies")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("effect", "text", (c) => c.notNull())
      .addColumn("condition", "text")
      .addColumn("consensus", "text")
      .addColumn("time", "text")
      .addColumn("notes", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("policies_by_organization").on("policies").columns(["organization_id", "created_at"]).execute();

    await db.schema
      .createTable("policy_evaluations")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("activity_id", "text", (c) => c.notNull().references("activities.id"))
      .addColumn("vote_id", "text", (c) => c.notNull())
      .addColumn("outcome", "text", (c) => c.notNull())
      .addColumn("evaluations", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("policy_evaluations_by_activity").on("policy_evaluations").columns(["activity_id", "created_at"]).execute();
  },
};

const wallets: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("wallets")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("sealed_mnemonic", "text", (c) => c.notNull())
      .addColumn("mnemonic_language", "text", (c) => c.notNull())
      .addColumn("imported", "integer", (c) => c.notNull())
      .addColumn("exported", "integer", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("wallets_by_name").on("wallets").columns(["organization_id", "name"]).unique().execute();

    await db.schema
      .createTable("wallet_accounts")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("wallet_id", "text", (c) => c.notNull().references("wallets.id"))
      .addColumn("curve", "text", (c) => c.notNull())
      .addColumn("path_format", "text", (c) => c.notNull())
      .addColumn("path", "text", (c) => c.notNull())
      .addColumn("address_format", "text", (c) => c.notNull())
      .addColumn("address", "text", (c) => c.notNull())
      .addColumn("public_key", "text", (c) => c.notNull())
      .addColumn("sealed_private_key", "text", (c) => c.notNull())
      .addColumn("name", "text")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    // One account per (wallet, curve, path, format): asking again for it returns the same account.
    await db.schema
      .createIndex("wallet_accounts_unique")
      .on("wallet_accounts")
      .columns(["wallet_id", "curve", "path", "address_format"])
      .unique()
      .execute();
    // Listing pages by (created_at, id) and signing finds an account by its address.
    await db.schema.createIndex("wallet_accounts_by_wallet").on("wallet_accounts").columns(["wallet_id", "created_at", "id"]).execute();
    await db.schema
      .createIndex("wallet_accounts_by_organization")
      .on("wallet_accounts")
      .columns(["organization_id", "created_at", "id"])
      .execute();
    await db.schema.createIndex("wallet_accounts_by_address").on("wallet_accounts").columns(["organization_id", "address"]).execute();

    await db.schema
      .createTable("private_keys")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("curve", "text", (c) => c.notNull())
      .addColumn("public_key", "text", (c) => c.notNull())
      .addColumn("sealed_private_key", "text", (c) => c.notNull())
      .addColumn("addresses", "text", (c) => c.notNull())
      .addColumn("imported", "integer", (c) => c.notNull())
      .addColumn("exported", "integer", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("private_keys_by_name").on("private_keys").columns(["organization_id", "name"]).unique().execute();

    // Signing names a private key by one of its addresses as often as by its id.
    await db.schema
      .createTable("private_key_addresses")
      .addColumn("private_key_id", "text", (c) => c.notNull().references("private_keys.id"))
      .addColumn("organization_id", "text", (c) => c.notNull())
      .addColumn("format", "text", (c) => c.notNull())
      .addColumn("address", "text", (c) => c.notNull())
      .addPrimaryKeyConstraint("private_key_addresses_pk", ["private_key_id", "format"])
      .execute();
    await db.schema
      .createIndex("private_key_addresses_by_address")
      .on("private_key_addresses")
      .columns(["organization_id", "address"])
      .execute();

    await db.schema
      .createTable("private_key_tag_members")
      .addColumn("tag_id", "text", (c) => c.notNull().references("tags.id"))
      .addColumn("private_key_id", "text", (c) => c.notNull().references("private_keys.id"))
      .addPrimaryKeyConstraint("private_key_tag_members_pk", ["tag_id", "private_key_id"])
      .execute();
    await db.schema.createIndex("private_key_tag_members_by_key").on("private_key_tag_members").columns(["private_key_id"]).execute();
  },
};

/** Sub-organizations (an organization with a parent), organization features, verified contacts. */
const subOrganizations: Migration = {
  async up(db: Kysely<any>) {
    // A deleted sub-organization keeps its row (and its audit log); everything else of it goes.
    await db.schema.alterTable("organizations").addColumn("deleted_at", "bigint").execute();
    await db.schema
      .createIndex("organizations_by_parent")
      .on("organizations")
      .columns(["parent_organization_id", "created_at", "id"])
      .execute();
    // When a contact was proven by a one-time password (list_verified_suborgs reads it).
    await db.schema.alterTable("users").addColumn("email_verified_at", "bigint").execute();
    await db.schema.alterTable("users").addColumn("phone_verified_at", "bigint").execute();
    await db.schema
      .createTable("organization_features")
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("value", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .addPrimaryKeyConstraint("organization_features_pk", ["organization_id", "name"])
      .execute();
  },
};

/** Webhooks: the service's own keys, endpoints with their subscriptions, and the delivery outbox. */
const webhooks: Migration = {
  async up(db: Kysely<any>) {
    // Keys the service itself holds (the webhook signing key), sealed like every secret.
    await db.schema
      .createTable("service_keys")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("purpose", "text", (c) => c.notNull().unique())
      .addColumn("organization_id", "text", (c) => c.notNull())
      .addColumn("public_key", "text", (c) => c.notNull())
      .addColumn("sealed_private_key", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema
      .createTable("webhook_endpoints")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("url", "text", (c) => c.notNull())
      .addColumn("is_active", "integer", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex("webhook_endpoints_by_organization")
      .on("webhook_endpoints")
      .columns(["organization_id", "created_at"])
      .execute();
    await db.schema
      .createTable("webhook_subscriptions")
      .addColumn("endpoint_id", "text", (c) => c.notNull().references("webhook_endpoints.id"))
      .addColumn("event_type", "text", (c) => c.notNull())
      .addColumn("filters_json", "text", (c) => c.notNull())
      .addColumn("is_active", "integer", (c) => c.notNull())
      .addPrimaryKeyConstraint("webhook_subscriptions_pk", ["endpoint_id", "event_type"])
      .execute();
    // The outbox: written in the activity's own transaction, sent afterwards. `id` is the event id
    // the receiver sees on every attempt; `destination` is the endpoint (or an organization's webhook
    // feature) whose deliveries of one organization's events go out in order.
    await db.schema
      .createTable("webhook_deliveries")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull())
      .addColumn("event_organization_id", "text", (c) => c.notNull())
      .addColumn("activity_id", "text", (c) => c.notNull())
      .addColumn("destination", "text", (c) => c.notNull())
      .addColumn("endpoint_id", "text")
      .addColumn("url", "text", (c) => c.notNull())
      .addColumn("event_type", "text", (c) => c.notNull())
      .addColumn("body", "text", (c) => c.notNull())
      .addColumn("status", "text", (c) => c.notNull())
      .addColumn("attempts", "integer", (c) => c.notNull())
      .addColumn("next_attempt_at", "bigint", (c) => c.notNull())
      .addColumn("lease_until", "bigint")
      .addColumn("last_status_code", "integer")
      .addColumn("last_error", "text")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .addColumn("delivered_at", "bigint")
      .execute();
    await db.schema.createIndex("webhook_deliveries_due").on("webhook_deliveries").columns(["status", "next_attempt_at"]).execute();
    await db.schema
      .createIndex("webhook_deliveries_in_order")
      .on("webhook_deliveries")
      .columns(["destination", "event_organization_id", "status", "created_at", "id"])
      .execute();
    await db.schema
      .createIndex("webhook_deliveries_by_organization")
      .on("webhook_deliveries")
      .columns(["organization_id", "created_at", "id"])
      .execute();
    await db.schema.createIndex("webhook_deliveries_by_endpoint").on("webhook_deliveries").columns(["endpoint_id", "status"]).execute();
  },
};

/** Import targets: the one-use P-256 keys init_import_* hands out, sealed like every secret. */
const importTargets: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("import_targets")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("user_id", "text", (c) => c.notNull())
      .addColumn("kind", "text", (c) => c.notNull())
      .addColumn("public_key", "text", (c) => c.notNull())
      .addColumn("sealed_private_key", "text", (c) => c.notNull())
      .addColumn("expires_at", "bigint", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("import_targets_by_user").on("import_targets").columns(["organization_id", "user_id", "kind"]).execute();
  },
};

/** Logins: session keys (API keys marked with their session), one-time passwords, verification
 * tokens, and the messages that carry codes out (sealed until sent). */
const logins: Migration = {
  async up(db: Kysely<any>) {
    // Which login made an API key (null: an ordinary key) and what it may do.
    await db.schema.alterTable("api_keys").addColumn("session_kind", "text").execute();
    await db.schema.alterTable("api_keys").addColumn("session_type", "text").execute();
    await db.schema.createIndex("api_keys_by_session").on("api_keys").columns(["user_id", "session_kind"]).execute();

    await db.schema
      .createTable("otps")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("user_id", "text")
      .addColumn("flow", "text", (c) => c.notNull())
      .addColumn("otp_type", "text", (c) => c.notNull())
      .addColumn("contact", "text", (c) => c.notNull())
      .addColumn("code_hash", "text", (c) => c.notNull())
      .addColumn("code_length", "integer", (c) => c.notNull())
      .addColumn("alphanumeric", "integer", (c) => c.notNull())
      .addColumn("attempts", "integer", (c) => c.notNull())
      .addColumn("target_public_key", "text")
      .addColumn("sealed_target_key", "text")
      .addColumn("expires_at", "bigint", (c) => c.notNull())
      .addColumn("used_at", "bigint")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("otps_by_expiry").on("otps").columns(["expires_at"]).execute();

    // Codes sent, by contact: the send limits count these (kept apart from the OTPs, which a
    // deleted sub-organization takes with it).
    await db.schema
      .createTable("otp_sends")
      .addColumn("contact_key", "text", (c) => c.notNull())
      .addColumn("requester_organization_id", "text", (c) => c.notNull())
      .addColumn("from_sub_organization", "integer", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("otp_sends_by_contact").on("otp_sends").columns(["contact_key", "created_at"]).execute();

    await db.schema
      .createTable("verification_tokens")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("otp_type", "text", (c) => c.notNull())
      .addColumn("contact", "text", (c) => c.notNull())
      .addColumn("public_key", "text")
      .addColumn("expires_at", "bigint", (c) => c.notNull())
      .addColumn("used_at", "bigint")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();

    await db.schema
      .createTable("outbound_messages")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("channel", "text", (c) => c.notNull())
      .addColumn("recipient", "text", (c) => c.notNull())
      .addColumn("sealed_message", "text")
      .addColumn("status", "text", (c) => c.notNull())
      .addColumn("attempts", "integer", (c) => c.notNull())
      .addColumn("next_attempt_at", "bigint", (c) => c.notNull())
      .addColumn("lease_until", "bigint")
      .addColumn("last_error", "text")
      .addColumn("expires_at", "bigint", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("sent_at", "bigint")
      .execute();
    await db.schema.createIndex("outbound_messages_due").on("outbound_messages").columns(["status", "next_attempt_at"]).execute();
  },
};

/** Send budgets per top-level organization (its sub-organizations counting toward it) and per
 * sub-organization's credentials, besides the per-contact ones. */
const otpSendBudgets: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("otp_sends").addColumn("root_organization_id", "text").execute();
    const parentOfRequester = sql`(select o.parent_organization_id from organizations o where o.id = otp_sends.requester_organization_id)`;
    await sql`update otp_sends set root_organization_id = coalesce(${parentOfRequester}, requester_organization_id)`.execute(db);
    await db.schema.createIndex("otp_sends_by_root").on("otp_sends").columns(["root_organization_id", "created_at"]).execute();
    await db.schema.createIndex("otp_sends_by_requester").on("otp_sends").columns(["requester_organization_id", "created_at"]).execute();
    await db.schema.alterTable("otp_sends").addColumn("credential_id", "text").execute();
    await db.schema.createIndex("otp_sends_by_credential").on("otp_sends").columns(["credential_id", "created_at"]).execute();
  },
};

/** Smart contract interfaces (Ethereum ABIs, Solana IDLs) that policies decode calls with. One per
 * contract address (or program id) and chain in an organization: the address is stored canonical
 * (Ethereum lower case, Solana as written) so the unique index is the lookup signing makes. */
const smartContractInterfaces: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("smart_contract_interfaces")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("type", "text", (c) => c.notNull())
      .addColumn("address", "text", (c) => c.notNull())
      .addColumn("label", "text", (c) => c.notNull())
      .addColumn("notes", "text", (c) => c.notNull())
      .addColumn("interface_json", "text", (c) => c.notNull())
      .addColumn("digest", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex("smart_contract_interfaces_by_address")
      .on("smart_contract_interfaces")
      .columns(["organization_id", "type", "address"])
      .unique()
      .execute();
    await db.schema
      .createIndex("smart_contract_interfaces_by_organization")
      .on("smart_contract_interfaces")
      .columns(["organization_id", "created_at"])
      .execute();
  },
};

/** Transactions Sigil signed and sends (eth_send_transaction), tracked until final, and the nonce
 * reservations of each sending address. The id is the sendTransactionStatusId the activity returns. */
const sentTransactions: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("sent_transactions")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("activity_id", "text", (c) => c.notNull())
      .addColumn("caip2", "text", (c) => c.notNull())
      .addColumn("from_address", "text", (c) => c.notNull())
      .addColumn("to_address", "text")
      .addColumn("nonce", "bigint")
      .addColumn("signed_transaction", "text")
      .addColumn("tx_hash", "text")
      .addColumn("status", "text", (c) => c.notNull())
      .addColumn("error", "text")
      .addColumn("broadcasts", "integer", (c) => c.notNull())
      .addColumn("attempts", "integer", (c) => c.notNull())
      .addColumn("next_attempt_at", "bigint", (c) => c.notNull())
      .addColumn("lease_until", "bigint")
      .addColumn("block_number", "bigint")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("sent_transactions_due").on("sent_transactions").columns(["status", "next_attempt_at"]).execute();
    await db.schema
      .createIndex("sent_transactions_by_sender")
      .on("sent_transactions")
      .columns(["caip2", "from_address", "status", "nonce"])
      .execute();
    await db.schema
      .createTable("nonce_reservations")
      .addColumn("caip2", "text", (c) => c.notNull())
      .addColumn("address", "text", (c) => c.notNull())
      .addColumn("next_nonce", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .addPrimaryKeyConstraint("nonce_reservations_pk", ["caip2", "address"])
      .execute();
  },
};

/** What the chain history reports of a sent transaction once it landed (its block's hash and time, the
 * fee it paid), and how many of the sender's nonces it uses: two for an EIP-7702 transaction carrying
 * the sender's own authorization (eth_undelegate_7702), one otherwise. Solana transactions
 * (sol_send_transaction) share the table: their nonce is null, their tx_hash the signature. */
const sentTransactionBlocks: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("sent_transactions").addColumn("block_hash", "text").execute();
    await db.schema.alterTable("sent_transactions").addColumn("block_time", "bigint").execute();
    await db.schema.alterTable("sent_transactions").addColumn("fee", "text").execute();
    await db.schema
      .alterTable("sent_transactions")
      .addColumn("nonce_count", "integer", (c) => c.notNull().defaultTo(1))
      .execute();
    await db.schema
      .createIndex("sent_transactions_history")
      .on("sent_transactions")
      .columns(["caip2", "from_address", "created_at", "id"])
      .execute();
  },
};

/** What a pending activity's precheck prepared (a send's fees, gas and nonce read from the node), so
 * that listing it weighs the caller's voting rights on the transaction policies would judge, without
 * asking a node for every row listed. */
const activityPrepared: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("activities").addColumn("prepared", "text").execute();
  },
};

/** What the courier observed of each email it handed to the SMTP relay (list_email_events): one row per
 * event (Send, Delivery, Bounce, DeliveryDelay), several per message. Kept past the message's own row,
 * which goes a week after its code expires. */
const emailEvents: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("email_events")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("message_id", "text", (c) => c.notNull())
      .addColumn("event_type", "text", (c) => c.notNull())
      .addColumn("from_address", "text", (c) => c.notNull())
      .addColumn("to_address", "text", (c) => c.notNull())
      .addColumn("recipient_key", "text", (c) => c.notNull())
      .addColumn("details", "text", (c) => c.notNull())
      .addColumn("timestamp", "bigint", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex("email_events_by_recipient")
      .on("email_events")
      .columns(["organization_id", "recipient_key", "created_at", "id"])
      .execute();
    await db.schema.createIndex("email_events_by_age").on("email_events").columns(["created_at"]).execute();
  },
};

/** Invitations to join an organization (create_invitations): who is invited, by whom, and the hash of
 * the token their email's link carries (the token itself is never stored). Kept after acceptance or
 * revocation, with their status, as get_organization lists them. */
const invitations: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("invitations")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("receiver_name", "text", (c) => c.notNull())
      .addColumn("receiver_email", "text", (c) => c.notNull())
      .addColumn("receiver_tags", "text", (c) => c.notNull())
      .addColumn("access_type", "text", (c) => c.notNull())
      .addColumn("sender_user_id", "text", (c) => c.notNull())
      .addColumn("status", "text", (c) => c.notNull())
      .addColumn("token_hash", "text", (c) => c.notNull().unique())
      .addColumn("expires_at", "bigint", (c) => c.notNull())
      .addColumn("accepted_user_id", "text")
      .addColumn("message_id", "text")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("invitations_by_organization").on("invitations").columns(["organization_id", "created_at"]).execute();
  },
};

/** IP allowlists (set_ip_allowlist): one per organization (api_key_id "") and one per API key, each
 * row holding its whole rule set, so that the check every signed request makes is one read of at most
 * two rows by primary key. */
const ipAllowlists: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("ip_allowlists")
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("api_key_id", "text", (c) => c.notNull())
      .addColumn("enabled", "integer")
      .addColumn("on_evaluation_error", "text", (c) => c.notNull())
      .addColumn("rules", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .addPrimaryKeyConstraint("ip_allowlists_pk", ["organization_id", "api_key_id"])
      .execute();
  },
};

/** Session profiles (create_session_profile): a name, a scope in the policy language that every
 * activity of a session issued with the profile must satisfy, and a ceiling on such sessions' lifetime.
 * Immutable once made, as in the product. A session key remembers the profile it was issued with. */
const sessionProfiles: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("session_profiles")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("scope", "text", (c) => c.notNull())
      .addColumn("expiration_seconds", "text")
      .addColumn("notes", "text")
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .addUniqueConstraint("session_profiles_name_unique", ["organization_id", "name"])
      .execute();
    await db.schema.alterTable("api_keys").addColumn("session_profile_id", "text").execute();
  },
};

/** Stored secrets (import_secrets): arbitrary secrets a client imported through the secure channel,
 * sealed under the master key like keys, with an optional name unique in the organization and the
 * static properties policies read. */
const storedSecrets: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("secrets")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      // Null when the import named none: both databases let a unique index hold any number of nulls.
      .addColumn("name", "text")
      .addColumn("static_properties", "text", (c) => c.notNull())
      .addColumn("sealed_secret", "text", (c) => c.notNull())
      .addColumn("imported_by", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema.createIndex("secrets_name_unique").on("secrets").columns(["organization_id", "name"]).unique().execute();
    await db.schema.createIndex("secrets_by_organization").on("secrets").columns(["organization_id", "created_at", "id"]).execute();
  },
};

/** OAuth 2.0 credentials (create_oauth2_credential): a provider's client id and secret, with which
 * oauth2_authenticate exchanges authorization codes. The secret is kept sealed under the master key;
 * beside it, the envelope the client sent (encrypted to the deployment's key), which the queries answer with. */
const oauth2Credentials: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("oauth2_credentials")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("provider", "text", (c) => c.notNull())
      .addColumn("client_id", "text", (c) => c.notNull())
      .addColumn("encrypted_client_secret", "text", (c) => c.notNull())
      .addColumn("sealed_client_secret", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex("oauth2_credentials_by_organization")
      .on("oauth2_credentials")
      .columns(["organization_id", "created_at"])
      .execute();
  },
};

/** MFA policies (create_mfa_policy): per user, a condition in the policy language and the ordered steps
 * of authentication it requires (JSON). And, for each activity an MFA policy applied to, what that
 * policy required of its requester and the proofs given so far (get_mfa_status reads them). */
const mfaPolicies: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("mfa_policies")
      .addColumn("id", "text", (c) => c.primaryKey())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("user_id", "text", (c) => c.notNull().references("users.id"))
      .addColumn("name", "text", (c) => c.notNull())
      .addColumn("condition", "text", (c) => c.notNull())
      .addColumn("required_methods", "text", (c) => c.notNull())
      .addColumn("evaluation_order", "bigint", (c) => c.notNull())
      .addColumn("notes", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema
      .createIndex("mfa_policies_by_user")
      .on("mfa_policies")
      .columns(["user_id", "evaluation_order", "created_at", "id"])
      .execute();
    await db.schema
      .createTable("activity_authentications")
      .addColumn("activity_id", "text", (c) => c.notNull().references("activities.id"))
      .addColumn("user_id", "text", (c) => c.notNull())
      .addColumn("organization_id", "text", (c) => c.notNull().references("organizations.id"))
      .addColumn("mfa_policy_id", "text", (c) => c.notNull())
      .addColumn("required_methods", "text", (c) => c.notNull())
      .addColumn("proofs", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .addPrimaryKeyConstraint("activity_authentications_pk", ["activity_id", "user_id"])
      .execute();
  },
};

/** The digest of each OAuth 2.0 credential's client-secret envelope, so that an envelope one
 * organization keeps (queries answer it) is refused to every other (create_oauth2_credential). */
const oauth2EnvelopeDigests: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("oauth2_credentials").addColumn("encrypted_client_secret_digest", "text").execute();
    const rows = await db.selectFrom("oauth2_credentials").select(["id", "encrypted_client_secret"]).execute();
    for (const row of rows as Array<{ id: string; encrypted_client_secret: string }>) {
      const bytes = Buffer.from(row.encrypted_client_secret.replace(/^0x/, ""), "hex");
      await db
        .updateTable("oauth2_credentials")
        .set({ encrypted_client_secret_digest: crypto.createHash("sha256").update(bytes).digest("hex") })
        .where("id", "=", row.id)
        .execute();
    }
    await db.schema
      .createIndex("oauth2_credentials_by_envelope")
      .on("oauth2_credentials")
      .columns(["encrypted_client_secret_digest"])
      .execute();
  },
};

// Signing finds an account by (organization, address), the oldest first when several wallets hold the
// same address. With the creation time in the index the lookup reads the first matching entry however
// many accounts the organization has. Without it SQLite, which keeps no statistics unless ANALYZE has
// run, may prefer wallet_accounts_by_organization for the ORDER BY and walk the organization's
// accounts in creation order: ~9 ms for the newest of 100,000 accounts, ~20 µs this way.
const signerLookup: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.dropIndex("wallet_accounts_by_address").execute();
    await db.schema
      .createIndex("wallet_accounts_by_address")
      .on("wallet_accounts")
      .columns(["organization_id", "address", "created_at"])
      .execute();
  },
};

// Request rate limits (docs/rate-limits.md), PostgreSQL only: on SQLite the one server process keeps
// its buckets in memory (services/rate-limits.ts), and a write transaction per request would queue
// every request behind the one writer.
//
// One row per token bucket, holding its theoretical arrival time (GCRA: the bucket is full when
// `tat` is not after now, and a request fits while `tat` stays within the burst of now). UNLOGGED:
// losing the buckets in a crash only refills them, and a transaction that writes nothing else needs
// no write-ahead log and commits without waiting for a flush. fillfactor 50 leaves room on each page
// for the next version of its rows (HOT updates: no index entry per charge).
//
// sigil_charge_rate_limits charges the requests of one batch in one statement, in the order given:
// each request takes its entries' tokens (one, or for a lease a process takes ahead, several) from
// every bucket it counts against, or from none (when one has too few, it is refused with the
// milliseconds until it would fit, and which bucket). A request whose only
// empty buckets are its own organization's ('own') may instead take from that organization's
// reserve ('reserve') when its user is a member of the organization's root quorum. Buckets are
// locked one by one in the order given (sorted by key by the caller), so two charges never wait for
// each other in a circle; rows of buckets seen for the first time are made full.
const rateLimits: Migration = {
  async up(db: Kysely<any>) {
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await sql`CREATE UNLOGGED TABLE rate_limit_buckets (key text PRIMARY KEY, tat double precision NOT NULL) WITH (fillfactor = 50)`.execute(
      db,
    );
    await sql`
      CREATE FUNCTION sigil_charge_rate_limits(
        bucket_keys text[], intervals double precision[], tolerances double precision[],
        entry_buckets integer[], entry_roles text[], entry_tokens double precision[],
        request_entries integer[], request_organizations text[], request_users text[]
      ) RETURNS TABLE (request_index integer, wait_ms double precision, bucket_index integer)
      LANGUAGE plpgsql AS $charge$
      DECLARE
        -- The database's clock: every server process reads the same one.
        now_ms double precision := extract(epoch FROM clock_timestamp()) * 1000;
        -- Rounding of intervals that do not divide a second: a fit within a microsecond fits.
        slack constant double precision := 0.001;
        bucket_count integer := coalesce(cardinality(bucket_keys), 0);
        tats double precision[] := array_fill(0::double precision, ARRAY[bucket_count]);
        changed boolean[] := array_fill(false, ARRAY[bucket_count]);
        read_tat double precision;
        first_entry integer := 1;
        last_entry integer;
        worst double precision;
        worst_bucket integer;
        reserve_worst double precision;
        own_only boolean;
        has_reserve boolean;
        over double precision;
        b integer;
      BEGIN
        FOR b IN 1 .. bucket_count LOOP
          SELECT k.tat INTO read_tat FROM rate_limit_buckets k WHERE k.key = bucket_keys[b] FOR UPDATE;
          IF NOT FOUND THEN
            INSERT INTO rate_limit_buckets (key, tat) VALUES (bucket_keys[b], now_ms) ON CONFLICT (key) DO NOTHING;
            SELECT k.tat INTO read_tat FROM rate_limit_buckets k WHERE k.key = bucket_keys[b] FOR UPDATE;
          END IF;
          tats[b] := greatest(read_tat, now_ms);
        END LOOP;
        FOR r IN 1 .. coalesce(cardinality(request_entries), 0) LOOP
          last_entry := first_entry + request_entries[r] - 1;
          worst := '-infinity';
          worst_bucket := NULL;
          own_only := true;
          has_reserve := false;
          FOR e IN first_entry .. last_entry LOOP
            b := entry_buckets[e];
            IF entry_roles[e] = 'reserve' THEN
              has_reserve := true;
            ELSE
              over := tats[b] + intervals[b] * entry_tokens[e] - now_ms - tolerances[b];
              IF over > worst THEN worst := over; worst_bucket := b; END IF;
              IF over > slack AND entry_roles[e] <> 'own' THEN own_only := false; END IF;
            END IF;
          END LOOP;
          IF worst <= slack THEN
            FOR e IN first_entry .. last_entry LOOP
              IF entry_roles[e] <> 'reserve' THEN
                b := entry_buckets[e];
                tats[b] := tats[b] + intervals[b] * entry_tokens[e];
                changed[b] := true;
              END IF;
            END LOOP;
            worst := 0;
            worst_bucket := NULL;
          ELSIF own_only AND has_reserve AND request_users[r] IS NOT NULL AND EXISTS (
            SELECT 1 FROM root_quorum_members m WHERE m.organization_id = request_organizations[r] AND m.user_id = request_users[r]
          ) THEN
            reserve_worst := '-infinity';
            FOR e IN first_entry .. last_entry LOOP
              IF entry_roles[e] <> 'own' THEN
                b := entry_buckets[e];
                reserve_worst := greatest(reserve_worst, tats[b] + intervals[b] * entry_tokens[e] - now_ms - tolerances[b]);
              END IF;
            END LOOP;
            IF reserve_worst <= slack THEN
              FOR e IN first_entry .. last_entry LOOP
                IF entry_roles[e] <> 'own' THEN
                  b := entry_buckets[e];
                  tats[b] := tats[b] + intervals[b] * entry_tokens[e];
                  changed[b] := true;
                END IF;
              END LOOP;
              worst := 0;
              worst_bucket := NULL;
            ELSE
              worst := least(worst, reserve_worst);
            END IF;
          END IF;
          request_index := r;
          wait_ms := worst;
          bucket_index := worst_bucket;
          RETURN NEXT;
          first_entry := last_entry + 1;
        END LOOP;
        IF true = ANY (changed) THEN
          UPDATE rate_limit_buckets k SET tat = v.tat
            FROM unnest(bucket_keys, tats, changed) AS v(key, tat, changed)
            WHERE v.changed AND k.key = v.key;
        END IF;
      END
      $charge$`.execute(db);
  },
};

/** The id of the request that made each activity (its X-Request-Id, or the one made for it), so an
 * activity can be found in the logs: every log line written while serving the request carries it. */
const activityRequestIds: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.alterTable("activities").addColumn("request_id", "text").execute();
  },
};

// The activities waiting for approvals or for their requester's further authentication, which the
// metrics count at each scrape (services/metrics.ts): a partial index holds those only, so counting
// them reads no more than there are, however many activities the audit log keeps; an activity leaves
// it when it is decided. Both databases use it for a query whose condition is the index's.
const waitingActivities: Migration = {
  async up(db: Kysely<any>) {
    await sql`create index activities_waiting on activities (status) where status in ('ACTIVITY_STATUS_CONSENSUS_NEEDED', 'ACTIVITY_STATUS_AUTHENTICATORS_NEEDED')`.execute(
      db,
    );
  },
};

/** The data key secrets are sealed under when the master key is in a PKCS#11 token, as the token's key
 * wrapped it (docs/hsm.md). One row at most (`slot` "master"): servers starting at once on a new
 * database each try to add theirs, and all take the one that got in. */
const tokenDataKey: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createTable("token_data_keys")
      .addColumn("slot", "text", (c) => c.primaryKey())
      .addColumn("key_id", "text", (c) => c.notNull())
      .addColumn("wrapped_key", "text", (c) => c.notNull())
      .addColumn("token_label", "text", (c) => c.notNull())
      .addColumn("key_label", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .execute();
  },
};

/** The webhook delivery log as list_webhook_deliveries reads it, newest first, a page at a time: for an
 * organization in one state (the failed ones, say, among many delivered), for one endpoint, and for an
 * endpoint in one state, each by an index in that order, so a page costs its own rows, not the log's.
 * The endpoint's index by state takes the place of the one without the order, which served only the
 * pending deliveries a deleted endpoint cancels: it still does. */
const webhookDeliveryLists: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .createIndex("webhook_deliveries_by_organization_status")
      .on("webhook_deliveries")
      .columns(["organization_id", "status", "created_at", "id"])
      .execute();
    await db.schema
      .createIndex("webhook_deliveries_by_endpoint_time")
      .on("webhook_deliveries")
      .columns(["endpoint_id", "created_at", "id"])
      .execute();
    await db.schema.dropIndex("webhook_deliveries_by_endpoint").execute();
    await db.schema
      .createIndex("webhook_deliveries_by_endpoint")
      .on("webhook_deliveries")
      .columns(["endpoint_id", "status", "created_at", "id"])
      .execute();
  },
};

/**
 * Each organization's transparency log (store/transparency-log.ts, docs/audit-log.md): heads, leaves,
 * the complete subtrees above them, and signed checkpoints; each activity's place in its log
 * (`log_index`, set by the sequencer), and a partial index of the final activities not yet in their
 * log, which the sequencer reads (it holds only those: an activity leaves it when it is sequenced).
 * The activities already final when it runs are pending, and the first sequencing appends them in the
 * order they became final. Numbered after 0027, which shipped first: migrations run in name order.
 */
const transparencyLog: Migration = {
  async up(db: Kysely<any>) {
    // The leaves and the subtrees are read and written by their primary key only: on SQLite each is one
    // b-tree ordered by it (WITHOUT ROWID), not a table and an index beside it, so an append writes
    // fewer pages (docs/benchmarks.md#the-transparency-logs-cost). An activity's leaf is found from the
    // activity (its log_index), so the leaves need no index by activity, whose pages each append
    // would write too.
    const clusteredOnSqlite = db.getExecutor().adapter instanceof PostgresAdapter ? sql`` : sql`without rowid`;
    await db.schema
      .createTable("transparency_log_heads")
      .addColumn("organization_id", "text", (c) => c.primaryKey())
      .addColumn("size", "bigint", (c) => c.notNull())
      .addColumn("root_hash", "text", (c) => c.notNull())
      .addColumn("frontier", "text", (c) => c.notNull())
      .addColumn("updated_at", "bigint", (c) => c.notNull())
      .execute();
    await db.schema
      .createTable("transparency_log_leaves")
      .addColumn("organization_id", "text", (c) => c.notNull())
      .addColumn("leaf_index", "bigint", (c) => c.notNull())
      .addColumn("activity_id", "text", (c) => c.notNull())
      .addColumn("leaf_hash", "text", (c) => c.notNull())
      .addPrimaryKeyConstraint("transparency_log_leaves_pk", ["organization_id", "leaf_index"])
      .modifyEnd(clusteredOnSqlite)
      .execute();
    await db.schema
      .createTable("transparency_log_nodes")
      .addColumn("organization_id", "text", (c) => c.notNull())
      .addColumn("level", "integer", (c) => c.notNull())
      .addColumn("node_index", "bigint", (c) => c.notNull())
      .addColumn("hash", "text", (c) => c.notNull())
      .addPrimaryKeyConstraint("transparency_log_nodes_pk", ["organization_id", "level", "node_index"])
      .modifyEnd(clusteredOnSqlite)
      .execute();
    await db.schema
      .createTable("transparency_log_checkpoints")
      .addColumn("organization_id", "text", (c) => c.notNull())
      .addColumn("tree_size", "bigint", (c) => c.notNull())
      .addColumn("root_hash", "text", (c) => c.notNull())
      .addColumn("note", "text", (c) => c.notNull())
      .addColumn("created_at", "bigint", (c) => c.notNull())
      .addPrimaryKeyConstraint("transparency_log_checkpoints_pk", ["organization_id", "tree_size"])
      .execute();
    await db.schema.alterTable("activities").addColumn("log_index", "bigint").execute();
    // The predicate's statuses are written as the sequencer's queries write them (store/transparency-log.ts).
    await sql`create index activities_unsequenced on activities (organization_id, updated_at, created_at, id)
      where log_index is null and status in ('ACTIVITY_STATUS_COMPLETED', 'ACTIVITY_STATUS_FAILED', 'ACTIVITY_STATUS_REJECTED')`.execute(
      db,
    );
  },
};

/** A user by email, as the product folds it (lower case): list_suborgs and list_verified_suborgs
 * filtered by EMAIL look the user up by it and then its sub-organization, where without it they walked
 * every sub-organization of the parent (test/sub-organization-plans.test.ts). Not partial (`where email is
 * not null`): PostgreSQL's ANALYZE then keeps no statistics of the expression, and planned without them
 * it read organizations whole. A plain CREATE INDEX: it
 * runs with the other migrations in their one transaction, which CREATE INDEX CONCURRENTLY cannot join,
 * and on PostgreSQL it blocks writes to users while it builds; `if not exists`, so that an operator may
 * build it beforehand with CREATE INDEX CONCURRENTLY (docs/storage.md#migrations-on-a-large-database). */
const usersByEmail: Migration = {
  async up(db: Kysely<any>) {
    await sql`create index if not exists users_by_email on users (lower(email), organization_id)`.execute(db);
  },
};

/**
 * The login features set without a value become bits of `organizations.login_features`
 * (schema.ts, LOGIN_FEATURE_BITS): their rows of organization_features are folded into the
 * organization's row and removed. Only organizations that have such rows are rewritten.
 */
const loginFeatureBits: Migration = {
  async up(db: Kysely<any>) {
    await db.schema
      .alterTable("organizations")
      .addColumn("login_features", "integer", (c) => c.notNull().defaultTo(0))
      .execute();
    const names = Object.keys(LOGIN_FEATURE_BITS);
    const bitOf = sql.join(
      names.map((name) => sql`when ${sql.lit(name)} then ${sql.lit(LOGIN_FEATURE_BITS[name]!)}`),
      sql` `,
    );
    const nameList = sql.join(names.map((n) => sql.lit(n)));
    const folded = sql`"f"."organization_id" = "organizations"."id" and "f"."value" = '' and "f"."name" in (${nameList})`;
    await sql`update "organizations" set "login_features" = (
        select coalesce(sum(case "f"."name" ${bitOf} end), 0) from "organization_features" as "f" where ${folded})
      where exists (select 1 from "organization_features" as "f" where ${folded})`.execute(db);
    await sql`delete from "organization_features" where "value" = '' and "name" in (${nameList})`.execute(db);
  },
};

/** `api_keys_by_user` (user_id) is the first column of `api_keys_by_session` (user_id,
 * session_kind), which serves every search by user as well: one index less to write and keep per API key. */
const apiKeysByUserDropped: Migration = {
  async up(db: Kysely<any>) {
    await db.schema.dropIndex("api_keys_by_user").execute();
  },
};

/**
 * `list_suborgs` filtered by a value few sub-organizations share finds the rows holding it first
 * (operations/organizations/sub-organizations.ts), each by an index on the value: a phone number
 * (only users that have one are in the index), a passkey's or a wallet account's public key, an
 * OAuth identity, and an address (wallet_accounts_by_address_owner, which also serves signing's
 * look-up by organization and address, oldest first, in place of migration 0021's index). On a large database each
 * build blocks writes to its table until it is done (docs/storage.md).
 */
const subOrganizationLookups: Migration = {
  async up(db: Kysely<any>) {
    // `if not exists`: an operator may build them beforehand without blocking writes (docs/storage.md).
    await sql`create index if not exists users_by_phone on users (phone_number, organization_id) where phone_number is not null`.execute(
      db,
    );
    await db.schema.createIndex("authenticators_by_public_key").ifNotExists().on("authenticators").columns(["public_key"]).execute();
    await db.schema.createIndex("wallet_accounts_by_public_key").ifNotExists().on("wallet_accounts").columns(["public_key"]).execute();
    await db.schema.createIndex("oauth_providers_by_identity").ifNotExists().on("oauth_providers").columns(["subject", "issuer"]).execute();
    await db.schema
      .createIndex("wallet_accounts_by_address_owner")
      .ifNotExists()
      .on("wallet_accounts")
      .columns(["address", "organization_id", "created_at"])
      .execute();
    await db.schema.dropIndex("wallet_accounts_by_address").execute();
  },
};

/**
 * An activity's place in its organization's transparency log kept out of its row, so that appending
 * it rewrites none of the activity's pages
 * (docs/benchmarks.md#the-transparency-logs-place-out-of-the-activity-row): the final
 * activities waiting for their leaf are rows of `transparency_log_pending` (organization, activity;
 * on SQLite one b-tree by that key, WITHOUT ROWID), written in the activity's own transaction by a
 * trigger whenever an activity is inserted final or its status becomes final, however it is written,
 * and deleted by the sequencer as it appends them; an activity's leaf is found by the leaves' index by
 * (organization, activity), which also keeps an activity to one leaf. The partial index of pending
 * activities and `activities.log_index` go.
 *
 * An existing log is carried over: the activities final and not yet appended become pending rows, and
 * each leaf already names its activity, which `log_index` only repeated. A database where the two
 * disagree (an activity says it is an entry that records another) was changed by hand: the migration
 * stops rather than drop the evidence (`sigil audit verify` of the version before names the entry).
 * Dropping the column rewrites the activities table on SQLite (docs/storage.md).
 */
const transparencyLogPending: Migration = {
  async up(db: Kysely<any>) {
    const postgres = db.getExecutor().adapter instanceof PostgresAdapter;
    const { rows } = await sql<{ n: number | string }>`select count(*) as "n" from "activities" as "a"
      where "a"."log_index" is not null and not exists (select 1 from "transparency_log_leaves" as "l"
        where "l"."organization_id" = "a"."organization_id" and "l"."leaf_index" = "a"."log_index" and "l"."activity_id" = "a"."id")`.execute(
      db,
    );
    if (Number(rows[0]!.n) > 0)
      throw new Error(
        `${rows[0]!.n} activities say they are an entry of their transparency log that records another activity: the database was changed by hand. Run \`sigil audit verify\` with the version before this one, which names the entry, and restore a backup`,
      );
    await db.schema
      .createTable("transparency_log_pending")
      .addColumn("organization_id", "text", (c) => c.notNull())
      .addColumn("activity_id", "text", (c) => c.notNull())
      .addPrimaryKeyConstraint("transparency_log_pending_pk", ["organization_id", "activity_id"])
      .modifyEnd(postgres ? sql`` : sql`without rowid`)
      .execute();
    await sql`insert into transparency_log_pending (organization_id, activity_id)
      select organization_id, id from activities
      where log_index is null and status in ('ACTIVITY_STATUS_COMPLETED', 'ACTIVITY_STATUS_FAILED', 'ACTIVITY_STATUS_REJECTED')`.execute(
      db,
    );
    await db.schema
      .createIndex("transparency_log_leaves_by_activity")
      .unique()
      .on("transparency_log_leaves")
      .columns(["organization_id", "activity_id"])
      .execute();
    await db.schema.dropIndex("activities_unsequenced").execute();
    await db.schema.alterTable("activities").dropColumn("log_index").execute();
    // The statuses are FINAL_STATUSES (store/transparency-log.ts).
    const final = sql.raw(`('ACTIVITY_STATUS_COMPLETED', 'ACTIVITY_STATUS_FAILED', 'ACTIVITY_STATUS_REJECTED')`);
    if (postgres) {
      await sql`create function transparency_log_enqueue() returns trigger language plpgsql as $$
        begin
          insert into transparency_log_pending (organization_id, activity_id) values (new.organization_id, new.id)
            on conflict do nothing;
          return null;
        end $$`.execute(db);
      await sql`create trigger activities_final_inserted after insert on activities for each row
        when (new.status in ${final}) execute function transparency_log_enqueue()`.execute(db);
      await sql`create trigger activities_final_updated after update of status on activities for each row
        when (new.status in ${final} and old.status not in ${final}) execute function transparency_log_enqueue()`.execute(db);
    } else {
      await sql`create trigger activities_final_inserted after insert on activities when new.status in ${final}
        begin
          insert or ignore into transparency_log_pending (organization_id, activity_id) values (new.organization_id, new.id);
        end`.execute(db);
      await sql`create trigger activities_final_updated after update of status on activities
        when new.status in ${final} and old.status not in ${final}
        begin
          insert or ignore into transparency_log_pending (organization_id, activity_id) values (new.organization_id, new.id);
        end`.execute(db);
    }
  },
};

/**
 * PostgreSQL only: the indexes searched only by equality on a long value that does not arrive in
 * order (a public key, an address, an email, a request's fingerprint, an activity's id in its
 * organization's log, an API key's public key) become hash indexes, and the sub-organizations' index
 * by parent leaves out the organizations that have none. What each sub-organization costs on disk, measured at 1,000,000 in
 * docs/benchmarks.md#bytes-per-sub-organization:
 * - A b-tree holds each key whole (65 to 90 bytes with its tuple's header), in pages that random keys
 *   leave about 70 % full; a hash index holds a 4-byte hash code per row, and searches by equality as
 *   fast. None of these is read in order or by range. (An address is searched with its organization:
 *   one row in practice; a key imported into many organizations has a row in each, all read.)
 * - The fingerprint and the leaf's activity must stay unique: an exclusion constraint over a hash
 *   index keeps them so, as a unique index did (a second row with the same value is refused, or waits
 *   for the transaction that wrote the first), under the same constraint names. An activity's leaf
 *   is now unique by the activity alone, which is unique in every organization. An API key's public
 *   key is unique in its organization: a hash index takes one column, so the constraint's is of the
 *   organization and the key joined by "/", which no organization id holds (the first "/" ends it), and
 *   searches by the key alone use a hash index of it.
 * - The root organizations (no parent, NULL) sorted last in `organizations_by_parent`, so a parent's
 *   new sub-organizations were never added at its end, where PostgreSQL fills a page before it splits
 *   it: elsewhere it splits pages in half, and the index stayed half full. Without them a parent's
 *   sub-organizations go to its end (while it is the parent most recently made). Every search of it
 *   names a parent, which implies the index's condition.
 * SQLite has no hash indexes and keeps its b-trees. Each index is rebuilt, blocking writes to its table
 * meanwhile (docs/storage.md#migrations-on-a-large-database).
 */
const equalityLookupsHashed: Migration = {
  async up(db: Kysely<any>) {
    if (!(db.getExecutor().adapter instanceof PostgresAdapter)) return;
    await sql`drop index wallet_accounts_by_public_key`.execute(db);
    await sql`create index wallet_accounts_by_public_key on wallet_accounts using hash (public_key)`.execute(db);
    await sql`drop index wallet_accounts_by_address_owner`.execute(db);
    await sql`create index wallet_accounts_by_address_owner on wallet_accounts using hash (address)`.execute(db);
    await sql`drop index users_by_email`.execute(db);
    await sql`create index users_by_email on users using hash (lower(email))`.execute(db);
    await sql`drop index transparency_log_leaves_by_activity`.execute(db);
    await sql`alter table transparency_log_leaves
      add constraint transparency_log_leaves_by_activity exclude using hash (activity_id with =)`.execute(db);
    await sql`alter table activities drop constraint activities_fingerprint_key`.execute(db);
    await sql`alter table activities add constraint activities_fingerprint_key exclude using hash (fingerprint with =)`.execute(db);
    await sql`drop index api_keys_by_public_key`.execute(db);
    await sql`create index api_keys_by_public_key on api_keys using hash (public_key)`.execute(db);
    await sql`alter table api_keys
      add constraint api_keys_unique_in_organization exclude using hash ((organization_id || '/' || public_key) with =)`.execute(db);
    await sql`drop index organizations_by_parent`.execute(db);
    await sql`create index organizations_by_parent on organizations (parent_organization_id, created_at, id)
      where parent_organization_id is not null`.execute(db);
  },
};

export const migrations: Record<string, Migration> = {
  "0001_initial": initial,
  "0002_policies": policies,
  "0003_wallets": wallets,
  "0004_sub_organizations": subOrganizations,
  "0005_webhooks": webhooks,
  "0006_import_targets": importTargets,
  "0007_logins": logins,
  "0008_otp_send_budgets": otpSendBudgets,
  "0009_smart_contract_interfaces": smartContractInterfaces,
  "0010_sent_transactions": sentTransactions,
  "0011_sent_transaction_blocks": sentTransactionBlocks,
  "0012_activity_prepared": activityPrepared,
  "0013_email_events": emailEvents,
  "0014_invitations": invitations,
  "0015_ip_allowlists": ipAllowlists,
  "0016_session_profiles": sessionProfiles,
  "0017_stored_secrets": storedSecrets,
  "0018_oauth2_credentials": oauth2Credentials,
  "0019_mfa_policies": mfaPolicies,
  "0020_oauth2_envelope_digests": oauth2EnvelopeDigests,
  "0021_signer_lookup": signerLookup,
  "0022_rate_limits": rateLimits,
  "0023_activity_request_ids": activityRequestIds,
  "0024_waiting_activities": waitingActivities,
  "0026_token_data_key": tokenDataKey,
  "0027_webhook_delivery_lists": webhookDeliveryLists,
  "0028_transparency_log": transparencyLog,
  "0029_users_by_email": usersByEmail,
  "0031_login_feature_bits": loginFeatureBits,
  "0032_api_keys_by_user_dropped": apiKeysByUserDropped,
  "0033_sub_organization_lookups": subOrganizationLookups,
  "0034_transparency_log_pending": transparencyLogPending,
  "0035_equality_lookups_hashed": equalityLookupsHashed,
};

export const migrationProvider: MigrationProvider = {
  async getMigrations() {
    return migrations;
  },
};
