// Organization features (FEATURE_NAME_*): set and removed by the root quorum only, read with the
// organization's configuration. Some change how the service behaves for the organization: the
// WebAuthn origins its passkeys may stamp from (a parent's setting covers its sub-organizations) and
// the webhook URL its activities are delivered to.
import { sql } from "kysely";
import type { Db, Tx } from "../../store/handles.js";
import { LOGIN_FEATURE_BITS } from "../../store/schema.js";
import { serviceError } from "../../errors.js";
import { defineActivity, defineQuery } from "../../registry/registry.js";
import { rootQuorumUserIds } from "./organizations.js";
import { WEBAUTHN_ORIGINS } from "../../auth/authenticate.js";
import { checkDestination, webhookUrl, type DestinationPolicy } from "../../services/webhook-destinations.js";

export const WEBHOOK = "FEATURE_NAME_WEBHOOK";

export interface Feature {
  name: string;
  value: string;
}

export async function featuresOf(db: Db | Tx, organizationId: string): Promise<Feature[]> {
  const [rows, organization] = await Promise.all([
    db.selectFrom("organization_features").select(["name", "value"]).where("organization_id", "=", organizationId).execute(),
    db.selectFrom("organizations").select("login_features").where("id", "=", organizationId).executeTakeFirst(),
  ]);
  const bits = Number(organization?.login_features ?? 0);
  const features = rows.map((r) => ({ name: r.name, value: r.value }));
  for (const [name, bit] of Object.entries(LOGIN_FEATURE_BITS)) if (bits & bit) features.push({ name, value: "" });
  return features.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/** Refuses (FEATURE_NOT_ENABLED) unless the organization has the feature set; `what` names what needs it. */
export async function requireFeature(trx: Tx, organizationId: string, feature: string, what: string): Promise<void> {
  const row = await trx
    .selectFrom("organizations as o")
    .leftJoin("organization_features as f", (join) => join.onRef("f.organization_id", "=", "o.id").on("f.name", "=", feature))
    .select(["o.login_features", "f.name"])
    .where("o.id", "=", organizationId)
    .executeTakeFirst();
  if (!row || !(row.name || Number(row.login_features) & (LOGIN_FEATURE_BITS[feature] ?? 0)))
    throw serviceError(
      "FEATURE_NOT_ENABLED",
      `${what} is not enabled in organization ${organizationId}: its root quorum enables it with set_organization_feature ${feature}`,
    );
}

/** The bits of `organizations.login_features` for the login features of `features` set without a
 * value, and the features that are rows. */
export function splitLoginFeatures(features: Feature[]): { bits: number; rows: Feature[] } {
  let bits = 0;
  const rows: Feature[] = [];
  for (const f of features) {
    const bit = f.value === "" ? LOGIN_FEATURE_BITS[f.name] : undefined;
    if (bit) bits |= bit;
    else rows.push(f);
  }
  return { bits, rows };
}

/** The features of an organization that has none yet (one just created) but its login features'
 * bits: one statement for those that are rows, where setFeatures spends several a feature. */
export async function addFeatures(trx: Tx, organizationId: string, features: Feature[], now: number): Promise<void> {
  if (features.length === 0) return;
  await trx
    .insertInto("organization_features")
    .values(features.map((f) => ({ organization_id: organizationId, name: f.name, value: f.value, created_at: now, updated_at: now })))
    .execute();
}

/** Sets (or replaces) features of an organization: a login feature without a value as its bit, any
 * other as a row (and a login feature given a value loses its bit). */
export async function setFeatures(trx: Tx, organizationId: string, features: Feature[], now: number): Promise<void> {
  for (const feature of features) {
    await trx.deleteFrom("organization_features").where("organization_id", "=", organizationId).where("name", "=", feature.name).execute();
    const bit = LOGIN_FEATURE_BITS[feature.name];
    if (bit && feature.value === "") {
      await trx
        .updateTable("organizations")
        .set({ login_features: sql<number>`"login_features" | ${bit}` })
        .where("id", "=", organizationId)
        .execute();
      continue;
    }
    if (bit) await clearLoginFeature(trx, organizationId, bit);
    await trx
      .insertInto("organization_features")
      .values({ organization_id: organizationId, name: feature.name, value: feature.value, created_at: now, updated_at: now })
      .execute();
  }
}

/** Clears a login feature's bit; whether it was set. */
async function clearLoginFeature(trx: Tx, organizationId: string, bit: number): Promise<boolean> {
  const cleared = await trx
    .updateTable("organizations")
    .set({ login_features: sql<number>`"login_features" - ${bit}` })
    .where("id", "=", organizationId)
    .where(sql<boolean>`("login_features" & ${bit}) <> 0`)
    .executeTakeFirst();
  return Number(cleared.numUpdatedRows) > 0;
}

/** Removes a feature (its row, or a login feature's bit); whether it was set. */
async function removeFeature(trx: Tx, organizationId: string, name: string): Promise<boolean> {
  const removed = await trx
    .deleteFrom("organization_features")
    .where("organization_id", "=", organizationId)
    .where("name", "=", name)
    .executeTakeFirst();
  const bit = LOGIN_FEATURE_BITS[name];
  const cleared = bit ? await clearLoginFeature(trx, organizationId, bit) : false;
  return Number(removed.numDeletedRows) > 0 || cleared;
}

/** The origins of a FEATURE_NAME_WEBAUTHN_ORIGINS value: comma-separated, each exactly an origin. */
export function parseOrigins(value: string): string[] {
  const origins = value
    .split(",")
    .map((o) => o.trim())
    .filter(Boolean);
  if (origins.length === 0)
    throw serviceError(
      "REQUEST_INVALID",
      `${WEBAUTHN_ORIGINS} needs at least one origin, e.g. "https://app.example.com" (several: comma-separated)`,
    );
  for (const origin of origins) {
    let parsed: URL;
    try {
      parsed = new URL(origin);
    } catch {
      throw serviceError("REQUEST_INVALID", `${WEBAUTHN_ORIGINS}: "${origin}" is not an origin such as https://app.example.com`);
    }
    if (parsed.origin !== origin || !["https:", "http:"].includes(parsed.protocol)) {
      throw serviceError(
        "REQUEST_INVALID",
        `${WEBAUTHN_ORIGINS}: "${origin}" is not an origin (scheme, host and port only, no path or trailing slash), e.g. ${parsed.origin}`,
      );
    }
  }
  return origins;
}

function checkedValue(name: string, value: string | undefined, policy: DestinationPolicy): string {
  const text = (value ?? "").trim();
  if (name === WEBAUTHN_ORIGINS) return parseOrigins(text).join(",");
  if (name === WEBHOOK) return webhookUrl(text, policy, WEBHOOK);
  return text;
}

export const featureOperations = [
  defineActivity({
    name: "set_organization_feature",
    summary: "Set an organization feature (root quorum only); the result lists the features now set.",
    resource: "ORGANIZATION",
    action: "UPDATE",
    rootOnly: true,
    // The webhook URL's host is resolved (and its addresses checked) before the transaction.
    precheck: async (p, env) => void (p.name === WEBHOOK && (await checkDestination(String(p.value ?? ""), env.webhooks, WEBHOOK))),
    async execute(ctx, p) {
      await setFeatures(ctx.trx, ctx.organizationId, [{ name: p.name, value: checkedValue(p.name, p.value, ctx.env.webhooks) }], ctx.now);
      return { features: await featuresOf(ctx.trx, ctx.organizationId) };
    },
  }),

  defineActivity({
    name: "remove_organization_feature",
    summary: "Remove an organization feature (root quorum only); the result lists the features still set.",
    resource: "ORGANIZATION",
    action: "UPDATE",
    rootOnly: true,
    async execute(ctx, p) {
      if (!(await removeFeature(ctx.trx, ctx.organizationId, p.name)))
        throw serviceError("FEATURE_NOT_FOUND", `feature ${p.name} is not set in this organization`);
      if (p.name === WEBHOOK) {
        await ctx.trx
          .updateTable("webhook_deliveries")
          .set({ status: "cancelled", last_error: "the organization's webhook URL was removed", updated_at: ctx.now })
          .where("destination", "=", `feature:${ctx.organizationId}`)
          .where("status", "=", "pending")
          .execute();
      }
      return { features: await featuresOf(ctx.trx, ctx.organizationId) };
    },
  }),

  defineQuery({
    name: "get_organization_configs",
    summary: "The organization's features and root quorum.",
    async run(ctx) {
      const organization = await ctx.db
        .selectFrom("organizations")
        .select("root_quorum_threshold")
        .where("id", "=", ctx.organizationId)
        .executeTakeFirstOrThrow();
      return {
        configs: {
          features: await featuresOf(ctx.db, ctx.organizationId),
          quorum: { threshold: organization.root_quorum_threshold, userIds: await rootQuorumUserIds(ctx.db, ctx.organizationId) },
        },
      };
    },
  }),
];
