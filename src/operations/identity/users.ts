// Users of an organization: creation with their credentials, updates, deletion, and reads.
import { unverifiedOidcClaims } from "../../auth/oidc.js";
import { serviceError } from "../../errors.js";
import {
  defineActivity,
  defineQuery,
  type ActivityContext,
  type OperationEnvironment,
  type ParametersOf,
} from "../../registry/registry.js";
import { addApiKeys, addAuthenticators, requireName, type ApiKeyParams, type AuthenticatorParams } from "./credentials.js";
import { foldEmail } from "../logins/contacts.js";
import { spendVerificationToken } from "../logins/verification-tokens.js";
import { sessionPublicKey } from "../logins/sessions.js";
import { distinct, loadUsers, requireUser, requireUserTags, requireUsers } from "../resources.js";
import { newId } from "../../store/ids.js";
import { forgetApiKeyAllowlists } from "../organizations/ip-allowlists.js";

/** An OIDC identity to link: a token (every version), or (V2) the claims themselves. */
export type OauthProviderParams = NonNullable<ParametersOf<"create_oauth_providers">["oauthProviders"]>[number];

/** A new user and the credentials it starts with. Hand-written: the common part of create_users, create_api_only_users
 * and every create_sub_organization version (V1 makes its root user from a passkey) normalize to it. */
export interface NewUserParams {
  userName: string;
  userEmail?: string;
  userPhoneNumber?: string;
  apiKeys?: ApiKeyParams[];
  authenticators?: AuthenticatorParams[];
  oauthProviders?: OauthProviderParams[];
}

const EMAIL = /^[^\s@]+@[^\s@]+\.[^\s@]+$/;
const E164 = /^\+[1-9]\d{6,14}$/;

function normalizeEmail(value: string | undefined, field: string): string | null {
  if (value === undefined || value === "") return null;
  const email = value.trim();
  if (!EMAIL.test(email) || email.length > 320) throw serviceError("REQUEST_INVALID", `${field} is not an email address: "${value}"`);
  return email;
}

function normalizePhone(value: string | undefined, field: string): string | null {
  if (value === undefined || value === "") return null;
  if (!E164.test(value))
    throw serviceError("REQUEST_INVALID", `${field} must be a phone number in E.164 format (e.g. +13214567890), got "${value}"`);
  return value;
}

/** Who vouches for an OAuth identity being linked without a token: the parent's backend creating a
 * sub-organization, or a top-level organization for its own users. */
export type ClaimsVouched = "by-parent" | "by-organization";

/**
 * The identity (issuer, subject, audience) a provider links. A token must verify — an allowed
 * issuer's signature, unexpired (auth/oidc.ts) — so nobody links an identity they cannot log in as.
 * Bare claims (V2's oidcClaims, and what the audit log keeps of a token) are taken as given only where
 * someone trusted vouches for them; inside a sub-organization its own users could otherwise claim a
 * stranger's identity, and a backend looking the stranger up by token would log them in there.
 */
async function oidcIdentity(
  ctx: ActivityContext,
  p: OauthProviderParams,
  field: string,
  vouched: ClaimsVouched | null,
): Promise<{ issuer: string; subject: string; audience: string }> {
  if (p.oidcToken !== undefined && p.oidcToken !== "") {
    const verified = await ctx.env.oidc.verify(p.oidcToken);
    if (verified.audiences.length !== 1)
      throw serviceError(
        "OIDC_AUDIENCE_MISMATCH",
        `${field}.oidcToken names ${verified.audiences.length} audiences: link one with oidcClaims`,
        "InvalidArgument",
      );
    return { issuer: verified.issuer, subject: verified.subject, audience: verified.audiences[0]! };
  }
  const claims = "oidcClaims" in p ? p.oidcClaims : undefined;
  if (!claims) throw serviceError("INVALID_OIDC_TOKEN", `${field} needs an oidcToken or oidcClaims`);
  const { iss, sub, aud } = claims;
  if (!iss?.trim() || !sub?.trim() || !aud?.trim())
    throw serviceError("INVALID_OIDC_TOKEN", `${field}.oidcClaims needs non-empty iss, sub and aud`);
  if (!vouched) {
    throw serviceError(
      "OIDC_CLAIMS_NOT_ALLOWED",
      `${field}.oidcClaims: in a sub-organization an identity is linked with a token its issuer signed (oidcToken); bare claims are accepted from the parent creating it, or in a top-level organization`,
    );
  }
  return { issuer: iss, subject: sub, audience: aud };
}

/** Whether bare claims are vouched for in `ctx`'s organization (top-level: its own root or policy). */
export async function claimsVouchedIn(ctx: ActivityContext): Promise<ClaimsVouched | null> {
  const organization = await ctx.trx
    .selectFrom("organizations")
    .select("parent_organization_id")
    .where("id", "=", ctx.organizationId)
    .executeTakeFirstOrThrow();
  return organization.parent_organization_id ? null : "by-organization";
}

/** Fetches the signing keys of the issuers of tokens a request carries before the organization's
 * lock is taken (jose caches them); verification itself happens in the transaction. */
export async function warmOidcKeys(providers: Array<OauthProviderParams | undefined>, env: OperationEnvironment): Promise<void> {
  await Promise.all(providers.map((p) => (p?.oidcToken ? env.oidc.verify(p.oidcToken).catch(() => undefined) : undefined)));
}

/** An OAuth provider as the audit log keeps it: the identity its token names, never the token (a
 * bearer credential until it expires). Executing the recorded intent later links the same identity. */
export function oauthProviderAsRecorded<T extends { oidcToken?: string }>(provider: T): Omit<T, "oidcToken"> & { oidcClaims?: unknown } {
  const { oidcToken, ...rest } = provider;
  if (oidcToken === undefined) return rest;
  const claims = unverifiedOidcClaims(oidcToken);
  return claims ? { ...rest, oidcClaims: claims } : rest;
}

export async function addOauthProviders(
  ctx: ActivityContext,
  userId: string,
  providers: OauthProviderParams[],
  field: string,
  vouched?: ClaimsVouched | null,
): Promise<string[]> {
  const ids: string[] = [];
  if (providers.length === 0) return ids;
  const vouchedHere = vouched !== undefined ? vouched : await claimsVouchedIn(ctx);
  for (const [i, p] of providers.entries()) {
    const name = requireName(p.providerName, `${field}[${i}].providerName`);
    const identity = await oidcIdentity(ctx, p, `${field}[${i}]`, vouchedHere);
    const taken = await ctx.trx
      .selectFrom("oauth_providers")
      .select("id")
      .where("organization_id", "=", ctx.organizationId)
      .where("issuer", "=", identity.issuer)
      .where("subject", "=", identity.subject)
      .executeTakeFirst();
    if (taken)
      throw serviceError(
        "OAUTH_PROVIDER_ALREADY_EXISTS",
        `the OIDC identity ${identity.issuer} / ${identity.subject} is already linked to a user of this organization`,
      );
    const id = newId();
    await ctx.trx
      .insertInto("oauth_providers")
      .values({ id, organization_id: ctx.organizationId, user_id: userId, name, ...identity, created_at: ctx.now, updated_at: ctx.now })
      .execute();
    ids.push(id);
  }
  return ids;
}

type ContactChanges = {
  name?: string;
  email?: string | null;
  phone_number?: string | null;
  email_verified_at?: number | null;
  phone_verified_at?: number | null;
};

/**
 * A changed email or phone number is no longer verified; a verification token (verify_otp) for the new
 * value proves it, and is used up. A token for another contact is refused.
 */
async function withContactProof(
  ctx: ActivityContext,
  userId: string,
  changes: ContactChanges,
  verificationToken?: string,
): Promise<ContactChanges> {
  const current = await ctx.trx.selectFrom("users").select(["email", "phone_number"]).where("id", "=", userId).executeTakeFirstOrThrow();
  const out = { ...changes };
  const email = "email" in changes ? (changes.email ?? null) : current.email;
  const phone = "phone_number" in changes ? (changes.phone_number ?? null) : current.phone_number;
  if (foldEmail(email ?? "") !== foldEmail(current.email ?? "")) out.email_verified_at = null;
  if (phone !== current.phone_number) out.phone_verified_at = null;
  if (verificationToken !== undefined) {
    const claims = await spendVerificationToken(ctx, verificationToken);
    // A token bound to a key (verify_otp with the client's key) proves the contact only to a request
    // stamped by that key: someone who merely captured the token cannot use it.
    if (claims.public_key && sessionPublicKey(claims.public_key, "the token's public_key") !== ctx.principal.publicKey) {
      throw serviceError(
        "VERIFICATION_TOKEN_KEY_MISMATCH",
        "this verification token is bound to a key: send the request stamped by that key (the session key that verified the code)",
      );
    }
    const byEmail = claims.verification_type === "OTP_TYPE_EMAIL";
    const proven = byEmail ? email !== null && foldEmail(email) === foldEmail(claims.contact) : phone !== null && phone === claims.contact;
    if (!proven)
      throw serviceError(
        "VERIFICATION_TOKEN_CONTACT_MISMATCH",
        `the verification token proves ${claims.contact}, not this user's ${byEmail ? "email" : "phone number"}`,
      );
    if (byEmail) out.email_verified_at = ctx.now;
    else out.phone_verified_at = ctx.now;
  }
  return out;
}

/** A user of `ctx.organizationId` with its credentials (API keys, passkeys, OAuth identities);
 * `keysInNewOrganization`: see addApiKeys. */
export async function createUser(
  ctx: ActivityContext,
  user: NewUserParams,
  field: string,
  vouched?: ClaimsVouched | null,
  keysInNewOrganization?: Set<string>,
): Promise<string> {
  const id = newId();
  await ctx.trx
    .insertInto("users")
    .values({
      id,
      organization_id: ctx.organizationId,
      name: requireName(user.userName, `${field}.userName`),
      email: normalizeEmail(user.userEmail, `${field}.userEmail`),
      phone_number: normalizePhone(user.userPhoneNumber, `${field}.userPhoneNumber`),
      created_at: ctx.now,
      updated_at: ctx.now,
    })
    .execute();
  await addApiKeys(ctx, id, user.apiKeys ?? [], `${field}.apiKeys`, keysInNewOrganization);
  await addAuthenticators(ctx, id, user.authenticators ?? [], `${field}.authenticators`);
  await addOauthProviders(ctx, id, user.oauthProviders ?? [], `${field}.oauthProviders`, vouched);
  return id;
}

/** Users with their credentials and tags (create_users, create_api_only_users); `field` names the list in errors. */
async function createTaggedUsers(
  ctx: ActivityContext,
  users: Array<NewUserParams & { userTags: string[] }>,
  field: string,
): Promise<string[]> {
  if (users.length === 0) throw serviceError("REQUEST_INVALID", `${field} must list at least one user`);
  const userIds: string[] = [];
  for (const [i, user] of users.entries()) {
    const item = `${field}[${i}]`;
    const tags = distinct(user.userTags, `${item}.userTags`);
    await requireUserTags(ctx.trx, ctx.organizationId, tags);
    const id = await createUser(ctx, user, item);
    await setUserTags(ctx, id, tags);
    userIds.push(id);
  }
  return userIds;
}

async function setUserTags(ctx: ActivityContext, userId: string, tagIds: string[]): Promise<void> {
  await ctx.trx.deleteFrom("user_tag_members").where("user_id", "=", userId).execute();
  if (tagIds.length)
    await ctx.trx
      .insertInto("user_tag_members")
      .values(tagIds.map((tag_id) => ({ tag_id, user_id: userId })))
      .execute();
}

async function touchUser(ctx: ActivityContext, userId: string, changes: ContactChanges) {
  await ctx.trx
    .updateTable("users")
    .set({ ...changes, updated_at: ctx.now })
    .where("id", "=", userId)
    .execute();
}

export const userOperations = [
  defineActivity({
    name: "create_users",
    summary: "Create users with their API keys, passkeys, OAuth identities and tags.",
    resource: "USER",
    action: "CREATE",
    intentOf: (p) => ({
      ...p,
      users: (p.users ?? []).map((u) =>
        "oauthProviders" in u && u.oauthProviders ? { ...u, oauthProviders: u.oauthProviders.map(oauthProviderAsRecorded) } : u,
      ),
    }),
    precheck: (p, env) =>
      warmOidcKeys(
        (p.users ?? []).flatMap((u): OauthProviderParams[] => ("oauthProviders" in u ? (u.oauthProviders ?? []) : [])),
        env,
      ),
    async execute(ctx, p) {
      return { userIds: await createTaggedUsers(ctx, p.users, "users") };
    },
  }),

  // The older form of create_users that programs written against @turnkey/http still send: users
  // that hold API keys only (always P-256: its key parameters name no curve).
  defineActivity({
    name: "create_api_only_users",
    summary: "Create users that hold API keys only, with their tags (the older form of `create_users`).",
    resource: "USER",
    action: "CREATE",
    async execute(ctx, p) {
      return { userIds: await createTaggedUsers(ctx, p.apiOnlyUsers, "apiOnlyUsers") };
    },
  }),

  defineActivity({
    name: "delete_users",
    summary: "Delete users and every credential they hold.",
    resource: "USER",
    action: "DELETE",
    policyParameters: (p) => ({ user_ids: p.userIds }),
    // Deleting a root user changes the root quorum, which only the quorum itself may do.
    async rootOnlyWhen(trx, organizationId, p) {
      const ids = Array.isArray(p.userIds) ? p.userIds : [];
      if (ids.length === 0) return undefined;
      const root = await trx
        .selectFrom("root_quorum_members")
        .select("user_id")
        .where("organization_id", "=", organizationId)
        .where("user_id", "in", ids)
        .execute();
      return root.length
        ? `deleting root user ${root.map((r) => r.user_id).join(", ")} changes the root quorum, which only the root quorum can approve`
        : undefined;
    },
    async execute(ctx, p) {
      const ids = distinct(p.userIds, "userIds");
      if (ids.length === 0) throw serviceError("REQUEST_INVALID", "userIds must list at least one user");
      await requireUsers(ctx.trx, ctx.organizationId, ids);
      const keys = await ctx.trx.selectFrom("api_keys").select("id").where("user_id", "in", ids).execute();
      await forgetApiKeyAllowlists(
        ctx.trx,
        ctx.organizationId,
        keys.map((k) => k.id),
      );
      // Their unused import targets go too: nobody may use them any more.
      for (const table of [
        "api_keys",
        "authenticators",
        "oauth_providers",
        "user_tag_members",
        "root_quorum_members",
        "import_targets",
        "otps",
        "mfa_policies",
      ] as const) {
        await ctx.trx.deleteFrom(table).where("user_id", "in", ids).execute();
      }
      await ctx.trx.deleteFrom("users").where("id", "in", ids).execute();
      return { userIds: ids };
    },
  }),

  defineActivity({
    name: "update_user",
    summary: "Change a user's name, email, phone number or tags.",
    resource: "USER",
    action: "UPDATE",
    policyParameters: (p) => ({ user_id: p.userId }),
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      const changes: { name?: string; email?: string | null; phone_number?: string | null } = {};
      if (p.userName !== undefined) changes.name = requireName(p.userName, "userName");
      if (p.userEmail !== undefined) changes.email = normalizeEmail(p.userEmail, "userEmail");
      if (p.userPhoneNumber !== undefined) changes.phone_number = normalizePhone(p.userPhoneNumber, "userPhoneNumber");
      if (p.userTagIds !== undefined) {
        const tags = distinct(p.userTagIds, "userTagIds");
        await requireUserTags(ctx.trx, ctx.organizationId, tags);
        await setUserTags(ctx, p.userId, tags);
      }
      await touchUser(ctx, p.userId, await withContactProof(ctx, p.userId, changes));
      return { userId: p.userId };
    },
  }),

  defineActivity({
    name: "update_user_name",
    summary: "Rename a user.",
    resource: "USER",
    action: "UPDATE",
    policyParameters: (p) => ({ user_id: p.userId }),
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      await touchUser(ctx, p.userId, { name: requireName(p.userName, "userName") });
      return { userId: p.userId };
    },
  }),

  defineActivity({
    name: "update_user_email",
    summary: "Set or remove (empty string) a user's email.",
    resource: "USER",
    action: "UPDATE",
    secretParameters: ["verificationToken"],
    policyParameters: (p) => ({ user_id: p.userId }),
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      await touchUser(
        ctx,
        p.userId,
        await withContactProof(ctx, p.userId, { email: normalizeEmail(p.userEmail, "userEmail") }, p.verificationToken),
      );
      return { userId: p.userId };
    },
  }),

  defineActivity({
    name: "update_user_phone_number",
    summary: "Set or remove (empty string) a user's phone number.",
    resource: "USER",
    action: "UPDATE",
    secretParameters: ["verificationToken"],
    policyParameters: (p) => ({ user_id: p.userId }),
    async execute(ctx, p) {
      await requireUser(ctx.trx, ctx.organizationId, p.userId);
      await touchUser(
        ctx,
        p.userId,
        await withContactProof(ctx, p.userId, { phone_number: normalizePhone(p.userPhoneNumber, "userPhoneNumber") }, p.verificationToken),
      );
      return { userId: p.userId };
    },
  }),

  defineQuery({
    name: "get_user",
    summary: "One user with its credentials and tags.",
    async run(ctx, body) {
      await requireUser(ctx.db, ctx.organizationId, body.userId);
      const [user] = await loadUsers(ctx.db, ctx.organizationId, [body.userId]);
      return { user };
    },
  }),

  defineQuery({
    name: "list_users",
    summary: "Every user of the organization.",
    async run(ctx) {
      return { users: await loadUsers(ctx.db, ctx.organizationId) };
    },
  }),
];
