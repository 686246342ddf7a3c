// Organizations: creation (bootstrap), the root quorum's safety rule, and whoami.
import { sql } from "kysely";
import type { Db, Tx } from "../../store/handles.js";
import { LOGIN_FEATURE_BITS } from "../../store/schema.js";
import { serviceError } from "../../errors.js";
import { validatePublicKey, type ApiKeyCurve } from "../../crypto/keys.js";
import { defineActivity, defineQuery } from "../../registry/registry.js";
import { distinct, requireUsers } from "../resources.js";
import { requireName } from "../identity/credentials.js";
import { newId } from "../../store/ids.js";

export interface NewOrganization {
  organizationName: string;
  userName: string;
  userEmail?: string;
  apiKeyName: string;
  apiPublicKey: string;
  apiKeyCurve?: ApiKeyCurve;
}

/** The input's first value that createOrganization would refuse, and why; null when there is none.
 * Asked before anything is opened or written: `sigil bootstrap` refuses its command line with it
 * before it opens (or creates) a database. */
export function newOrganizationProblem(
  input: NewOrganization,
): { field: "apiPublicKey" | "organizationName" | "userName"; problem: string } | null {
  const problem = validatePublicKey(input.apiKeyCurve ?? "API_KEY_CURVE_P256", input.apiPublicKey);
  if (problem) return { field: "apiPublicKey", problem };
  if (!input.organizationName.trim()) return { field: "organizationName", problem: "must not be empty" };
  if (!input.userName.trim()) return { field: "userName", problem: "must not be empty" };
  return null;
}

const FIELD_NAMES = { apiPublicKey: "api public key:", organizationName: "organization name", userName: "user name" } as const;

/** Creates an organization whose root quorum is one user (threshold 1) holding one API key. */
export async function createOrganization(db: Db, input: NewOrganization, now = Date.now()) {
  const wrong = newOrganizationProblem(input);
  if (wrong) throw serviceError("REQUEST_INVALID", `${FIELD_NAMES[wrong.field]} ${wrong.problem}`);
  const curve = input.apiKeyCurve ?? "API_KEY_CURVE_P256";
  const organizationId = newId();
  const userId = newId();
  const apiKeyId = newId();
  await db.transaction().execute(async (trx) => {
    await trx
      .insertInto("organizations")
      .values({
        id: organizationId,
        name: input.organizationName.trim(),
        parent_organization_id: null,
        root_quorum_threshold: 1,
        created_at: now,
        updated_at: now,
      })
      .execute();
    await trx
      .insertInto("users")
      .values({
        id: userId,
        organization_id: organizationId,
        name: input.userName.trim(),
        email: input.userEmail ?? null,
        phone_number: null,
        created_at: now,
        updated_at: now,
      })
      .execute();
    await trx.insertInto("root_quorum_members").values({ organization_id: organizationId, user_id: userId }).execute();
    await trx
      .insertInto("api_keys")
      .values({
        id: apiKeyId,
        organization_id: organizationId,
        user_id: userId,
        name: input.apiKeyName,
        public_key: input.apiPublicKey.toLowerCase(),
        curve,
        expiration_seconds: null,
        expires_at: null,
        created_at: now,
        updated_at: now,
      })
      .execute();
  });
  return { organizationId, userId, apiKeyId };
}

export async function rootQuorumUserIds(db: Db | Tx, organizationId: string): Promise<string[]> {
  const rows = await db.selectFrom("root_quorum_members").select("user_id").where("organization_id", "=", organizationId).execute();
  return rows.map((r) => r.user_id);
}

/**
 * An organization must never lock itself out: at least `threshold` root users must keep a lasting
 * credential (an API key without expiry, a passkey, or an OAuth identity), or, in a sub-organization, an
 * email or phone number its parent's backend can log it in by. An expiring key does not
 * count: when it lapses the organization would be locked out with nobody left to notice. Checked
 * after every activity, inside its transaction, so any change that breaks it is rolled back whole.
 */
export async function assertRootQuorumReachable(trx: Tx, organizationId: string): Promise<void> {
  // One query, as it runs after every activity: root members holding a lasting credential.
  const row = await trx
    .selectFrom("organizations")
    .select((eb) => [
      "root_quorum_threshold",
      eb
        .selectFrom("root_quorum_members as m")
        .select((inner) => inner.fn.countAll<number>().as("n"))
        .where("m.organization_id", "=", organizationId)
        .where((w) =>
          w.or([
            w.exists(
              w.selectFrom("api_keys as k").select("k.id").whereRef("k.user_id", "=", "m.user_id").where("k.expires_at", "is", null),
            ),
            w.exists(w.selectFrom("authenticators as a").select("a.id").whereRef("a.user_id", "=", "m.user_id")),
            w.exists(w.selectFrom("oauth_providers as o").select("o.id").whereRef("o.user_id", "=", "m.user_id")),
            // In a sub-organization, the parent's backend can log a root user in by a one-time
            // password or a credential sent to its email or phone number, while that login is enabled.
            w.exists(
              w
                .selectFrom("users as u")
                .innerJoin("organizations as uo", "uo.id", "u.organization_id")
                .select("u.id")
                .whereRef("u.id", "=", "m.user_id")
                .where("uo.parent_organization_id", "is not", null)
                .where((c) => {
                  // A login feature is set as its bit (LOGIN_FEATURE_BITS) or, given a value, as a row.
                  const loginBy = (names: string[]) =>
                    c.or([
                      sql<boolean>`("uo"."login_features" & ${names.reduce((bits, n) => bits | LOGIN_FEATURE_BITS[n]!, 0)}) <> 0`,
                      c.exists(
                        c
                          .selectFrom("organization_features as f")
                          .select("f.name")
                          .whereRef("f.organization_id", "=", "uo.id")
                          .where("f.name", "in", names),
                      ),
                    ]);
                  return c.or([
                    c.and([c("u.email", "is not", null), loginBy(["FEATURE_NAME_OTP_EMAIL_AUTH", "FEATURE_NAME_EMAIL_AUTH"])]),
                    c.and([c("u.phone_number", "is not", null), loginBy(["FEATURE_NAME_SMS_AUTH"])]),
                  ]);
                }),
            ),
          ]),
        )
        .as("reachable"),
      "deleted_at",
    ])
    .where("id", "=", organizationId)
    .executeTakeFirstOrThrow();
  // A deleted sub-organization has nobody left to lock out.
  if (row.deleted_at !== null) return;
  const reachable = Number(row.reachable ?? 0);
  if (reachable < row.root_quorum_threshold) {
    throw serviceError(
      "ROOT_QUORUM_UNREACHABLE",
      `this change would leave ${reachable} root user(s) with a usable credential, fewer than the root quorum threshold of ${row.root_quorum_threshold}: the organization would be locked out`,
    );
  }
}

export const organizationOperations = [
  defineActivity({
    name: "update_root_quorum",
    summary: "Set the root quorum's members and threshold. Only the current root quorum can approve it.",
    resource: "ORGANIZATION",
    action: "UPDATE",
    rootOnly: true,
    async execute(ctx, p) {
      const userIds = distinct(p.userIds, "userIds");
      if (userIds.length === 0) throw serviceError("REQUEST_INVALID", "userIds must name at least one user");
      if (!Number.isInteger(p.threshold) || p.threshold < 1 || p.threshold > userIds.length) {
        throw serviceError(
          "REQUEST_INVALID",
          `threshold must be between 1 and the number of users (${userIds.length}), got ${p.threshold}`,
        );
      }
      await requireUsers(ctx.trx, ctx.organizationId, userIds);
      await ctx.trx.deleteFrom("root_quorum_members").where("organization_id", "=", ctx.organizationId).execute();
      await ctx.trx
        .insertInto("root_quorum_members")
        .values(userIds.map((user_id) => ({ organization_id: ctx.organizationId, user_id })))
        .execute();
      await ctx.trx
        .updateTable("organizations")
        .set({ root_quorum_threshold: p.threshold, updated_at: ctx.now })
        .where("id", "=", ctx.organizationId)
        .execute();
      // Whether the new quorum can still act is checked for every activity (assertRootQuorumReachable).
      return {};
    },
  }),

  defineActivity({
    name: "update_organization_name",
    summary: "Rename the organization (root quorum only, as the product's policy docs list it); the result names it as it now is.",
    resource: "ORGANIZATION",
    action: "UPDATE",
    rootOnly: true,
    async execute(ctx, p) {
      const name = requireName(p.organizationName, "organizationName");
      await ctx.trx.updateTable("organizations").set({ name, updated_at: ctx.now }).where("id", "=", ctx.organizationId).execute();
      return { organizationId: ctx.organizationId, organizationName: name };
    },
  }),

  defineQuery({
    name: "whoami",
    summary: "The caller's user and organization (the caller's own sub-organization when the request names its parent).",
    resolvesSubOrganizations: true,
    async run(ctx) {
      const organization = await ctx.db
        .selectFrom("organizations")
        .select(["id", "name"])
        .where("id", "=", ctx.principal.organizationId)
        .executeTakeFirst();
      const user = await ctx.db.selectFrom("users").select(["id", "name"]).where("id", "=", ctx.principal.userId).executeTakeFirst();
      if (!organization || !user) throw serviceError("USER_NOT_FOUND", "the caller's user no longer exists");
      return { organizationId: organization.id, organizationName: organization.name, userId: user.id, username: user.name };
    },
  }),
];
