// Sub-organizations: organizations a top-level organization creates for its end users, each with
// its own root users, policies, wallets and audit log. The parent reads them (authentication accepts
// a parent's credential for queries) but cannot write in them; a sub-organization sees neither its
// parent nor its siblings. A sub-organization cannot have sub-organizations of its own.
import { sql } from "kysely";
import { decodeJwt } from "jose";
import { serviceError } from "../../errors.js";
import type { Db } from "../../store/handles.js";
import { defineActivity, defineQuery, type ActivityContext, type ParametersOf, type QueryBodyOf } from "../../registry/registry.js";
import { readPage, requireAtMost } from "../resources.js";
import { newId } from "../../store/ids.js";
import { deferInserts } from "../../store/deferred-inserts.js";
import { prepare, readOf, type Slots } from "../../store/prepared.js";
import { createUser, oauthProviderAsRecorded, warmOidcKeys, type NewUserParams, type OauthProviderParams } from "../identity/users.js";
import { createWallet, walletAhead, type WalletAhead } from "../wallets/wallets.js";
import { createPrivateKeys, keysAhead, type KeyAhead } from "../wallets/private-keys.js";
import { addFeatures, splitLoginFeatures, type Feature } from "./features.js";
import { checkClientSignature } from "../logins/client-signatures.js";
import { foldEmail } from "../logins/contacts.js";
import { spendVerificationToken } from "../logins/verification-tokens.js";
import { assertRootQuorumReachable } from "./organizations.js";

/** The parameters of any version of create_sub_organization (V1 names one root user by its passkey; V2 and later list
 * rootUsers; V3 adds privateKeys, V4 a wallet, V7 the SMS/OTP switches and the verification token). */
type CreateSubOrganizationParams = ParametersOf<"create_sub_organization">;

const versionOf = (type: string) => Number(/_V(\d+)$/.exec(type)?.[1] ?? 1);

/** A sub-organization's login features: on unless the request turns them off (the product's default). */
function loginFeatures(p: CreateSubOrganizationParams): Feature[] {
  const features: Feature[] = [];
  if (!p.disableEmailAuth) features.push({ name: "FEATURE_NAME_EMAIL_AUTH", value: "" });
  if (!p.disableEmailRecovery) features.push({ name: "FEATURE_NAME_EMAIL_RECOVERY", value: "" });
  if (!p.disableOtpEmailAuth) features.push({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
  if (!p.disableSmsAuth) features.push({ name: "FEATURE_NAME_SMS_AUTH", value: "" });
  return features;
}

/** The product's rule: every root user can log in — a credential, or a contact a login feature serves. */
function requireLoginMethod(user: NewUserParams, p: CreateSubOrganizationParams, field: string): void {
  const credentials = (user.apiKeys?.length ?? 0) + (user.authenticators?.length ?? 0) + (user.oauthProviders?.length ?? 0);
  const byEmail = !!user.userEmail && !(p.disableEmailAuth && p.disableOtpEmailAuth);
  const bySms = !!user.userPhoneNumber && !p.disableSmsAuth;
  if (credentials === 0 && !byEmail && !bySms) {
    throw serviceError(
      "ROOT_USER_WITHOUT_CREDENTIAL",
      `${field} has no way to log in: give it an API key, a passkey or an OAuth provider, or an email or phone number with email or SMS login left enabled`,
    );
  }
}

/** An organization's parent, read ahead with the requester's credential once the lock is held (PostgreSQL). */
const organizationParent = prepare((db, slot: Slots<{ organizationId: string }>) =>
  db.selectFrom("organizations").select("parent_organization_id").where("id", "=", slot("organizationId")),
);

async function createSubOrganization(
  ctx: ActivityContext,
  p: CreateSubOrganizationParams,
  type: string,
  walletMadeAhead?: WalletAhead,
  keysMadeAhead?: Array<KeyAhead | undefined>,
) {
  const parent = await organizationParent.first(ctx.trx, { organizationId: ctx.organizationId });
  if (parent?.parent_organization_id)
    throw serviceError(
      "NESTED_SUB_ORGANIZATION",
      `organization ${ctx.organizationId} is itself a sub-organization, and sub-organizations cannot have their own`,
    );
  // On PostgreSQL the new organization's rows (the organization, its users and their API keys, its
  // root quorum, a wallet and its accounts: rows nobody else can read before the commit) go out as
  // one statement when the activity next reads, not one round trip each (store/deferred-inserts.ts).
  const deferred = ctx.dialect === "postgres" ? deferInserts(ctx.trx) : undefined;
  const created = await createInNewOrganization(deferred ? { ...ctx, trx: deferred.handle } : ctx, p, type, walletMadeAhead, keysMadeAhead);
  await deferred?.flush();
  return created;
}

/** What create_sub_organization makes, in a parent that may have sub-organizations. */
async function createInNewOrganization(
  ctx: ActivityContext,
  p: CreateSubOrganizationParams,
  type: string,
  walletMadeAhead?: WalletAhead,
  keysMadeAhead?: Array<KeyAhead | undefined>,
) {
  const version = versionOf(type);
  const name = (version === 1 ? p.name : p.subOrganizationName)?.trim() ?? "";
  if (!name) throw serviceError("REQUEST_INVALID", `${version === 1 ? "name" : "subOrganizationName"} must not be empty`);
  if (name.length > 256) throw serviceError("REQUEST_INVALID", "the sub-organization's name must be at most 256 characters");
  const rootUsers: NewUserParams[] =
    version === 1
      ? [{ userName: p.rootAuthenticator?.authenticatorName ?? "root", authenticators: p.rootAuthenticator ? [p.rootAuthenticator] : [] }]
      : (p.rootUsers ?? []);
  const threshold = version === 1 ? 1 : (p.rootQuorumThreshold ?? 0);
  if (rootUsers.length === 0) throw serviceError("REQUEST_INVALID", "rootUsers must list at least one user");
  requireAtMost(rootUsers, "rootUsers");
  if (!Number.isInteger(threshold) || threshold < 1 || threshold > rootUsers.length) {
    throw serviceError(
      "ROOT_QUORUM_THRESHOLD_INVALID",
      `rootQuorumThreshold must be between 1 and the number of root users (${rootUsers.length}), got ${threshold}`,
    );
  }
  rootUsers.forEach((user, i) => requireLoginMethod(user, p, `rootUsers[${i}]`));

  const subOrganizationId = newId();
  const features = splitLoginFeatures(loginFeatures(p));
  await ctx.trx
    .insertInto("organizations")
    .values({
      id: subOrganizationId,
      name,
      parent_organization_id: ctx.organizationId,
      root_quorum_threshold: threshold,
      created_at: ctx.now,
      updated_at: ctx.now,
      login_features: features.bits,
    })
    .execute();
  // Everything below is created in the sub-organization, within this one activity.
  const inSub: ActivityContext = { ...ctx, organizationId: subOrganizationId };
  const rootUserIds: string[] = [];
  const apiKeys = new Set<string>();
  for (const [i, user] of rootUsers.entries()) {
    // The parent's backend vouches for the identities it links to the users it signs up.
    const userId = await createUser(inSub, user, `rootUsers[${i}]`, "by-parent", apiKeys);
    await ctx.trx.insertInto("root_quorum_members").values({ organization_id: subOrganizationId, user_id: userId }).execute();
    rootUserIds.push(userId);
  }
  // Organization, users and wallet are new: nothing of theirs to replace or to collide with (below,
  // createWallet's `inNewOrganization`), so no statement looks for it while the parent's lock is held.
  await addFeatures(ctx.trx, subOrganizationId, features.rows, ctx.now);
  // A verification token (verify_otp, in this parent) proves a root user's email or phone number.
  if (p.verificationToken !== undefined) {
    const claims = await spendVerificationToken(ctx, p.verificationToken);
    // A token bound to a key (verify_otp V2) signs up only with that key's signature (V8's
    // clientSignature), so a captured token alone cannot create an account for its contact.
    const byEmail = claims.verification_type === "OTP_TYPE_EMAIL";
    const index = rootUsers.findIndex((u) =>
      byEmail ? foldEmail(u.userEmail ?? "") === foldEmail(claims.contact) : u.userPhoneNumber === claims.contact,
    );
    if (index < 0)
      throw serviceError(
        "VERIFICATION_TOKEN_CONTACT_MISMATCH",
        `the verification token proves ${claims.contact}, which is no root user's ${byEmail ? "email" : "phone number"}`,
      );
    const user = rootUsers[index]!;
    const credentials = {
      apiKeys: (user.apiKeys ?? []).map((k) => k.publicKey.toLowerCase()),
      authenticators: (user.authenticators ?? []).map((a) =>
        "credentialId" in a.attestation ? a.attestation.credentialId : a.attestation.id,
      ),
      oauthProviders: (user.oauthProviders ?? []).map((o) => o.oidcToken ?? ""),
    };
    checkClientSignature(p.clientSignature, claims, { type: "USAGE_TYPE_SIGNUP", credentials }, false);
    await ctx.trx
      .updateTable("users")
      .set(byEmail ? { email_verified_at: ctx.now } : { phone_verified_at: ctx.now })
      .where("id", "=", rootUserIds[index]!)
      .execute();
  }
  const made =
    version === 3
      ? { privateKeys: await createPrivateKeys(inSub, p.privateKeys ?? [], undefined, keysMadeAhead) }
      : version >= 4 && p.wallet
        ? { wallet: await createWallet(inSub, p.wallet, "wallet.", undefined, walletMadeAhead, true) }
        : {};
  // A root user known by an email or phone number alone can log in by a one-time password the parent
  // starts (when that login is enabled here); otherwise enough root users must hold a credential.
  // Checked last, once every row is written: its read is the one statement the rows go out before.
  await assertRootQuorumReachable(ctx.trx, subOrganizationId);
  return { subOrganizationId, ...made, rootUserIds };
}

/** Deletes a sub-organization's users, credentials, keys, policies and features; its row and its
 * audit log stay, marked deleted. */
async function deleteSubOrganization(ctx: ActivityContext, deleteWithoutExport: boolean) {
  const organization = await ctx.trx
    .selectFrom("organizations")
    .select(["parent_organization_id"])
    .where("id", "=", ctx.organizationId)
    .executeTakeFirstOrThrow();
  if (!organization.parent_organization_id)
    throw serviceError(
      "NOT_A_SUB_ORGANIZATION",
      `organization ${ctx.organizationId} is not a sub-organization; only sub-organizations can be deleted`,
    );
  if (!deleteWithoutExport) {
    const wallet = await ctx.trx
      .selectFrom("wallets")
      .select("id")
      .where("organization_id", "=", ctx.organizationId)
      .where("exported", "=", 0)
      .executeTakeFirst();
    if (wallet)
      throw serviceError(
        "WALLET_NOT_EXPORTED",
        `wallet ${wallet.id} was never exported: export it first, or set deleteWithoutExport to delete it with the sub-organization`,
      );
    const key = await ctx.trx
      .selectFrom("private_keys")
      .select("id")
      .where("organization_id", "=", ctx.organizationId)
      .where("exported", "=", 0)
      .executeTakeFirst();
    if (key)
      throw serviceError(
        "PRIVATE_KEY_NOT_EXPORTED",
        `private key ${key.id} was never exported: export it first, or set deleteWithoutExport to delete it with the sub-organization`,
      );
  }
  const id = ctx.organizationId;
  const trx = ctx.trx;
  await trx
    .deleteFrom("private_key_tag_members")
    .where("private_key_id", "in", trx.selectFrom("private_keys").select("id").where("organization_id", "=", id))
    .execute();
  await trx.deleteFrom("private_key_addresses").where("organization_id", "=", id).execute();
  await trx.deleteFrom("private_keys").where("organization_id", "=", id).execute();
  await trx.deleteFrom("wallet_accounts").where("organization_id", "=", id).execute();
  await trx.deleteFrom("wallets").where("organization_id", "=", id).execute();
  await trx.deleteFrom("secrets").where("organization_id", "=", id).execute();
  await trx.deleteFrom("oauth2_credentials").where("organization_id", "=", id).execute();
  await trx
    .deleteFrom("user_tag_members")
    .where("tag_id", "in", trx.selectFrom("tags").select("id").where("organization_id", "=", id))
    .execute();
  await trx.deleteFrom("tags").where("organization_id", "=", id).execute();
  await trx.deleteFrom("policies").where("organization_id", "=", id).execute();
  await trx.deleteFrom("mfa_policies").where("organization_id", "=", id).execute();
  // Pending invitations' links must not create users in a deleted organization.
  await trx.deleteFrom("invitations").where("organization_id", "=", id).execute();
  await trx.deleteFrom("smart_contract_interfaces").where("organization_id", "=", id).execute();
  await trx.deleteFrom("session_profiles").where("organization_id", "=", id).execute();
  await trx.deleteFrom("organization_features").where("organization_id", "=", id).execute();
  await trx.deleteFrom("import_targets").where("organization_id", "=", id).execute();
  await trx.deleteFrom("otps").where("organization_id", "=", id).execute();
  await trx.deleteFrom("verification_tokens").where("organization_id", "=", id).execute();
  await trx.deleteFrom("outbound_messages").where("organization_id", "=", id).where("status", "in", ["pending", "outbox"]).execute();
  await trx
    .deleteFrom("webhook_subscriptions")
    .where("endpoint_id", "in", trx.selectFrom("webhook_endpoints").select("id").where("organization_id", "=", id))
    .execute();
  await trx.deleteFrom("webhook_endpoints").where("organization_id", "=", id).execute();
  await trx
    .updateTable("webhook_deliveries")
    .set({ status: "cancelled", last_error: "the sub-organization was deleted", updated_at: ctx.now })
    .where("organization_id", "=", id)
    .where("status", "=", "pending")
    .execute();
  await trx.deleteFrom("root_quorum_members").where("organization_id", "=", id).execute();
  await trx.deleteFrom("api_keys").where("organization_id", "=", id).execute();
  await trx.deleteFrom("authenticators").where("organization_id", "=", id).execute();
  await trx.deleteFrom("oauth_providers").where("organization_id", "=", id).execute();
  await trx.deleteFrom("users").where("organization_id", "=", id).execute();
  await trx
    .updateTable("organizations")
    .set({ deleted_at: ctx.now, updated_at: ctx.now, login_features: 0 })
    .where("id", "=", id)
    .execute();
  return { subOrganizationUuid: id };
}

type FilterType = "CREDENTIAL_ID" | "NAME" | "USERNAME" | "EMAIL" | "PHONE_NUMBER" | "OIDC_TOKEN" | "WALLET_ACCOUNT_ADDRESS" | "PUBLIC_KEY";
const FILTERS: FilterType[] = [
  "CREDENTIAL_ID",
  "NAME",
  "USERNAME",
  "EMAIL",
  "PHONE_NUMBER",
  "OIDC_TOKEN",
  "WALLET_ACCOUNT_ADDRESS",
  "PUBLIC_KEY",
];
const VERIFIED_FILTERS: FilterType[] = ["EMAIL", "PHONE_NUMBER"];

type ListSubOrganizationsBody = QueryBodyOf<"list_suborgs"> | QueryBodyOf<"list_verified_suborgs">;

/** The identity an OIDC token names, read without checking its signature: a parent may list every
 * sub-organization anyway, so the token here only narrows the list, it proves nothing. */
function oidcIdentityOf(token: string): { iss: string; sub: string; aud: string } {
  try {
    const claims = decodeJwt(token);
    const aud = Array.isArray(claims.aud) ? claims.aud[0] : claims.aud;
    if (claims.iss && claims.sub && aud) return { iss: claims.iss, sub: claims.sub, aud };
  } catch {
    // refused below
  }
  throw serviceError("INVALID_OIDC_TOKEN", "filterValue must be an OIDC token (a JWT with iss, sub and aud) for filterType OIDC_TOKEN");
}

async function listSubOrganizations(db: Db, body: ListSubOrganizationsBody, allowed: FilterType[], verifiedOnly: boolean) {
  const filterType = body.filterType || undefined;
  const value = (body.filterValue ?? "").trim();
  if (filterType !== undefined && !allowed.includes(filterType as FilterType)) {
    throw serviceError("FILTER_TYPE_INVALID", `filterType must be one of ${allowed.join(", ")}, got "${filterType}"`);
  }
  if (filterType && !value) throw serviceError("REQUEST_INVALID", `filterValue is needed with filterType ${filterType}`);
  if (verifiedOnly && !filterType)
    throw serviceError(
      "REQUEST_INVALID",
      `filterType (${allowed.join(" or ")}) and filterValue are needed: verified sub-organizations are found by a verified contact`,
    );
  // A filter by a contact, a credential, a key, an address or a login identity names few
  // sub-organizations: the rows holding that value are found first, each by an index on the value
  // (users_by_email, users_by_phone, authenticators_by_credential_id, api_keys_by_public_key,
  // authenticators_by_public_key, wallet_accounts_by_public_key, wallet_accounts_by_address_owner,
  // oauth_providers_by_identity), then their sub-organizations by id. The parent's own index must not
  // serve then, or SQLite (which keeps no statistics) walks every sub-organization of the parent in
  // order and tries each: `parent || ''` is the same condition that no index serves, on both
  // databases. By name or user name (values many sub-organizations may share) the parent's
  // sub-organizations are walked in order and each tried, up to the page.
  const byValue = filterType !== undefined && filterType !== "NAME" && filterType !== "USERNAME";
  let query = db
    .selectFrom("organizations as o")
    .select(["o.id", "o.created_at"])
    .where(byValue ? sql<string>`o.parent_organization_id || ''` : sql.ref<string>("o.parent_organization_id"), "=", body.organizationId)
    .where("o.deleted_at", "is", null);
  switch (filterType as FilterType | undefined) {
    case "EMAIL": {
      const withEmail = db.selectFrom("users as u").select("u.organization_id").where(sql`lower(u.email)`, "=", value.toLowerCase());
      query = query.where("o.id", "in", verifiedOnly ? withEmail.where("u.email_verified_at", "is not", null) : withEmail);
      break;
    }
    case "PHONE_NUMBER": {
      const withPhone = db.selectFrom("users as u").select("u.organization_id").where("u.phone_number", "=", value);
      query = query.where("o.id", "in", verifiedOnly ? withPhone.where("u.phone_verified_at", "is not", null) : withPhone);
      break;
    }
    case "CREDENTIAL_ID":
      query = query.where(
        "o.id",
        "in",
        db.selectFrom("authenticators as a").select("a.organization_id").where("a.credential_id", "=", value),
      );
      break;
    case "PUBLIC_KEY":
      query = query.where(
        "o.id",
        "in",
        db
          .selectFrom("api_keys as k")
          .select("k.organization_id")
          .where("k.public_key", "=", value.toLowerCase())
          .union(db.selectFrom("authenticators as a").select("a.organization_id").where("a.public_key", "=", value))
          .union(db.selectFrom("wallet_accounts as w").select("w.organization_id").where("w.public_key", "=", value.toLowerCase())),
      );
      break;
    case "WALLET_ACCOUNT_ADDRESS":
      query = query.where("o.id", "in", db.selectFrom("wallet_accounts as w").select("w.organization_id").where("w.address", "=", value));
      break;
    case "OIDC_TOKEN": {
      const identity = oidcIdentityOf(value);
      query = query.where(
        "o.id",
        "in",
        db
          .selectFrom("oauth_providers as p")
          .select("p.organization_id")
          .where("p.subject", "=", identity.sub)
          .where("p.issuer", "=", identity.iss)
          .where("p.audience", "=", identity.aud),
      );
      break;
    }
    case "NAME":
      query = query.where("o.name", "=", value);
      break;
    case "USERNAME":
      query = query.where(({ exists }) =>
        exists(
          db.selectFrom("users as u").select("u.id").where("u.organization_id", "=", sql.ref<string>("o.id")).where("u.name", "=", value),
        ),
      );
      break;
    case undefined:
      break;
  }
  const rows = await readPage(db, query, body.paginationOptions, {
    newestFirst: false,
    table: "organizations",
    scope: "parent_organization_id",
    owner: body.organizationId,
    cursorIs: `a sub-organization of ${body.organizationId}`,
  });
  return { organizationIds: rows.map((r) => r.id) };
}

export const subOrganizationOperations = [
  defineActivity({
    name: "create_sub_organization",
    summary:
      "Create a sub-organization with its root users (API keys, passkeys, OAuth identities), root quorum and, optionally, a wallet or private keys.",
    resource: "ORGANIZATION",
    action: "CREATE",
    // Everything it writes is new, but the activity record and a spent verification token (a
    // conditional update): sign-ups into one parent hold its lock shared, side by side.
    addsOnlyNewOrganization: true,
    readsAhead: (_p, organizationId) => [readOf(organizationParent, { organizationId })],
    // A verification token is spendable by whoever reads it: never kept (the request then cannot
    // wait for approvals).
    secretParameters: ["verificationToken"],
    async precheck(p, env, type) {
      await warmOidcKeys(
        (p.rootUsers ?? []).flatMap((u: { userName: string; oauthProviders?: OauthProviderParams[] }) => u.oauthProviders ?? []),
        env,
      );
      // The first wallet's mnemonic and accounts (wallets.ts, walletAhead), or V3's private keys
      // (private-keys.ts, keysAhead), made before the lock.
      const version = versionOf(type);
      return {
        wallet: version >= 4 && "wallet" in p ? await walletAhead(p.wallet) : undefined,
        keys: version === 3 && "privateKeys" in p ? await keysAhead(p.privateKeys) : undefined,
      };
    },
    intentOf: (p) => ({
      ...p,
      ...(p.rootUsers
        ? {
            rootUsers: p.rootUsers.map((u) =>
              "oauthProviders" in u && u.oauthProviders ? { ...u, oauthProviders: u.oauthProviders.map(oauthProviderAsRecorded) } : u,
            ),
          }
        : {}),
    }),
    execute: (ctx, p, type, prepared) => createSubOrganization(ctx, p, type, prepared.wallet?.value, prepared.keys?.value),
  }),

  defineActivity({
    name: "delete_sub_organization",
    summary:
      "Delete the sub-organization the request names (its root quorum only); refused while it holds wallets or keys never exported, unless deleteWithoutExport.",
    resource: "ORGANIZATION",
    action: "DELETE",
    rootOnly: true,
    policyParameters: (p) => ({ delete_without_export: p.deleteWithoutExport === true }),
    execute: (ctx, p) => deleteSubOrganization(ctx, p.deleteWithoutExport === true),
  }),

  defineQuery({
    name: "list_suborgs",
    summary:
      "The organization's sub-organizations, optionally those matching a name, user name, email, phone number, OIDC identity, passkey, public key or wallet address.",
    run: (ctx, body) => listSubOrganizations(ctx.db, { ...body, organizationId: ctx.organizationId }, FILTERS, false),
  }),

  defineQuery({
    name: "list_verified_suborgs",
    summary: "The sub-organizations with a user whose email or phone number (the filter) was verified by a one-time password.",
    run: (ctx, body) => listSubOrganizations(ctx.db, { ...body, organizationId: ctx.organizationId }, VERIFIED_FILTERS, true),
  }),
];
