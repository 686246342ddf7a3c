// Organization features (FEATURE_NAME_*): set and removed by the root quorum only, read with the
// organization's configuration. Some change how the service behaves for the organization: the
// WebAuthn origins its passkeys may stamp from (a parent's setting covers its sub-organizations) and
// the webhook URL its activities are delivered to.
import type { Db, Tx } from "../../store/handles.js";
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
  const rows = await db
    .selectFrom("organization_features")
    .select(["name", "value"])
    .where("organization_id", "=", organizationId)
    .orderBy("name")
    .execute();
  return rows.map((r) => ({ name: r.name, value: r.value }));
}

/** Refuses (FEATURE_NOT_ENABLED) unless the organization has the feature set; `what` names what needs it. */
export async function requireFeature(trx: Tx, organizationId: string, feature: string, what: string): Promise<void> {
  const row = await trx
    .selectFrom("organization_features")
    .select("name")
    .where("organization_id", "=", organizationId)
    .where("name", "=", feature)
    .executeTakeFirst();
  if (!row)
    throw serviceError(
      "FEATURE_NOT_ENABLED",
      `${what} is not enabled in organization ${organizationId}: its root quorum enables it with set_organization_feature ${feature}`,
    );
}

/** The features of an organization that has none yet (one just created): one statement, where
 * setFeatures spends two a feature replacing what is not there. */
export async function addFeatures(trx: Tx, organizationId: string, features: Feature[], now: number): Promise<void> {
  if (features.length === 0) return;
  await trx
    .insertInto("organization_features")
    .values(features.map((f) => ({ organization_id: organizationId, name: f.name, value: f.value, created_at: now, updated_at: now })))
    .execute();
}

/** Sets (or replaces) features of an organization. */
export async function setFeatures(trx: Tx, organizationId: string, features: Feature[], now: number): Promise<void> {
  for (const feature of features) {
    await trx.deleteFrom("organization_features").where("organization_id", "=", organizationId).where("name", "=", feature.name).execute();
    await trx
      .insertInto("organization_features")
      .values({ organization_id: organizationId, name: feature.name, value: feature.value, created_at: now, updated_at: now })
      .execute();
  }
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
      const removed = await ctx.trx
        .deleteFrom("organization_features")
        .where("organization_id", "=", ctx.organizationId)
        .where("name", "=", p.name)
        .executeTakeFirst();
      if (Number(removed.numDeletedRows) === 0)
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
