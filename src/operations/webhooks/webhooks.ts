// Webhooks, the part that lives with the activities: endpoints and their subscriptions, and the outbox
// rows an activity writes in its own transaction (one per destination that should hear of it). Where a
// URL may point is services/webhook-destinations.ts; sending is the dispatcher's job
// (services/webhook-dispatcher.ts).
import { sql } from "kysely";
import { serviceError } from "../../errors.js";
import type { Db, Tx } from "../../store/handles.js";
import { prepare, readOf, type Read, type Slots } from "../../store/prepared.js";
import type { ActivitiesTable, WebhookDeliveriesTable, WebhookEndpointsTable } from "../../store/schema.js";
import { defineActivity, defineQuery, defineSigilQuery, type ParametersOf } from "../../registry/registry.js";
import { readPage, requireAtMost, timestamp, type Pagination } from "../resources.js";
import { newId } from "../../store/ids.js";
import { writeDeliveries } from "../../services/webhook-outbox.js";
import { SEND_TRANSACTION_STATUS_UPDATES } from "../../services/send-status-events.js";
import { requireName } from "../identity/credentials.js";
import { checkDestination, redactedUrl, webhookUrl } from "../../services/webhook-destinations.js";

export const ACTIVITY_UPDATES = "ACTIVITY_UPDATES";
const WEBHOOK_FEATURE = "FEATURE_NAME_WEBHOOK";

type SubscriptionParams = NonNullable<ParametersOf<"create_webhook_endpoint">["subscriptions"]>[number];

/** The event types this server delivers. Send status updates are the billing organization's (a
 * top-level one), as in the product: a sub-organization's sends go to its parent's endpoints. */
const EVENT_TYPES = [ACTIVITY_UPDATES, SEND_TRANSACTION_STATUS_UPDATES];
const BILLING_ONLY = new Set([SEND_TRANSACTION_STATUS_UPDATES]);

async function checkedSubscriptions(
  trx: Tx,
  organizationId: string,
  subscriptions: SubscriptionParams[] | undefined,
): Promise<SubscriptionParams[]> {
  if (!subscriptions?.length)
    throw serviceError("WEBHOOK_SUBSCRIPTIONS_MISSING", `subscriptions must list at least one event type (${EVENT_TYPES.join(", ")})`);
  requireAtMost(subscriptions, "subscriptions");
  const seen = new Set<string>();
  for (const [i, s] of subscriptions.entries()) {
    if (!EVENT_TYPES.includes(s.eventType))
      throw serviceError(
        "WEBHOOK_EVENT_TYPE_UNSUPPORTED",
        `subscriptions[${i}].eventType: this server delivers ${EVENT_TYPES.join(" and ")}, got "${s.eventType}"`,
      );
    if (BILLING_ONLY.has(s.eventType)) {
      const organization = await trx
        .selectFrom("organizations")
        .select("parent_organization_id")
        .where("id", "=", organizationId)
        .executeTakeFirst();
      if (organization?.parent_organization_id)
        throw serviceError(
          "WEBHOOK_BILLING_ORGANIZATION_ONLY",
          `subscriptions[${i}].eventType: ${s.eventType} endpoints are managed by the parent organization ${organization.parent_organization_id}, which receives its sub-organizations' events`,
        );
    }
    if (seen.has(s.eventType)) throw serviceError("REQUEST_INVALID", `subscriptions[${i}]: ${s.eventType} is listed twice`);
    seen.add(s.eventType);
    if (s.filtersJson) {
      try {
        JSON.parse(s.filtersJson);
      } catch {
        throw serviceError("REQUEST_INVALID", `subscriptions[${i}].filtersJson is not JSON`);
      }
    }
  }
  return subscriptions;
}

async function renderEndpoint(db: Db | Tx, row: WebhookEndpointsTable) {
  const subscriptions = await db
    .selectFrom("webhook_subscriptions")
    .selectAll()
    .where("endpoint_id", "=", row.id)
    .orderBy("event_type")
    .execute();
  return {
    endpointId: row.id,
    organizationId: row.organization_id,
    url: row.url,
    name: row.name,
    isActive: row.is_active === 1,
    subscriptions: subscriptions.map((s) => ({ eventType: s.event_type, filtersJson: s.filters_json, isActive: s.is_active === 1 })),
  };
}

async function requireEndpoint(db: Db | Tx, organizationId: string, endpointId: string): Promise<WebhookEndpointsTable> {
  const row = await db
    .selectFrom("webhook_endpoints")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", endpointId)
    .executeTakeFirst();
  if (!row) throw serviceError("WEBHOOK_ENDPOINT_NOT_FOUND", `webhook endpoint ${endpointId} not found in this organization`);
  return row;
}

// Who hears of an organization's activities: subscribed active endpoints and the FEATURE_NAME_WEBHOOK
// URL, of the organization and of its parent. Read for every activity, most often to find none.
const activityDestinations = prepare((db, slot: Slots<{ organizationId: string }>) => {
  const organizationId = slot("organizationId");
  const parent = db.selectFrom("organizations").select("parent_organization_id").where("id", "=", organizationId);
  // One list of the two owners, `in (?, (select parent …))`, rather than `= ? or in (select …)`: both
  // databases then search the index by each, where PostgreSQL read the OR of a subquery as a filter
  // over every row of organization_features (test/sub-organization-plans.test.ts).
  // biome-ignore lint/suspicious/noExplicitAny: one filter for two aliased joins; Kysely's builder type for a column chosen by the caller would need both join shapes
  const owners = (column: "e.organization_id" | "f.organization_id") => (eb: any) => eb(column, "in", [organizationId, parent]);
  return db
    .selectFrom("webhook_endpoints as e")
    .innerJoin("webhook_subscriptions as s", "s.endpoint_id", "e.id")
    .select([(eb) => eb.ref("e.id").$castTo<string | null>().as("endpointId"), "e.organization_id as organizationId", "e.url as url"])
    .where("e.is_active", "=", 1)
    .where("s.is_active", "=", 1)
    .where("s.event_type", "=", ACTIVITY_UPDATES)
    .where(owners("e.organization_id"))
    .unionAll(
      db
        .selectFrom("organization_features as f")
        .select([sql<string | null>`cast(null as text)`.as("endpointId"), "f.organization_id as organizationId", "f.value as url"])
        .where("f.name", "=", WEBHOOK_FEATURE)
        .where(owners("f.organization_id")),
    );
});

/** Who hears of an activity of the organization, as a read the pipeline sends ahead. */
export const activityDestinationsReadAhead = (organizationId: string): Read => readOf(activityDestinations, { organizationId });

/**
 * Writes, in the activity's transaction, one outbox row per destination that should hear of the
 * activity as it now stands: active endpoints subscribed to ACTIVITY_UPDATES, and the
 * FEATURE_NAME_WEBHOOK URL, of its organization and of that organization's parent. Returns how many.
 */
export async function enqueueActivityEvent(trx: Tx, activity: ActivitiesTable, render: () => unknown, now: number): Promise<number> {
  const organizationId = activity.organization_id;
  const destinations = await activityDestinations.all(trx, { organizationId });
  if (destinations.length === 0) return 0;
  // Rendered only when someone listens: most activities of most organizations have no destination.
  const body = JSON.stringify(render());
  await writeDeliveries(
    trx,
    destinations,
    { eventType: ACTIVITY_UPDATES, eventOrganizationId: organizationId, activityId: activity.id, body },
    now,
  );
  return destinations.length;
}

/** What a delivery may be in: waiting to be sent (or retried), sent, given up on, or cancelled. */
const DELIVERY_STATUSES = ["pending", "delivered", "failed", "cancelled"];

interface ListWebhookDeliveriesBody {
  organizationId: string;
  endpointId?: string;
  status?: string;
  paginationOptions?: Pagination;
}

export const webhookOperations = [
  defineActivity({
    name: "create_webhook_endpoint",
    summary:
      "Create a webhook endpoint: activities of the organization (and, for a parent, of its sub-organizations), or their sends' status changes, are delivered to its URL, signed.",
    resource: "WEBHOOK_ENDPOINT",
    action: "CREATE",
    precheck: async (p, env) => void (await checkDestination(String(p.url ?? ""), env.webhooks, "url")),
    async execute(ctx, p) {
      const name = requireName(p.name, "name");
      const subscriptions = await checkedSubscriptions(ctx.trx, ctx.organizationId, p.subscriptions);
      const url = webhookUrl(p.url, ctx.env.webhooks, "url");
      const id = newId();
      const row: WebhookEndpointsTable = {
        id,
        organization_id: ctx.organizationId,
        name,
        url,
        is_active: 1,
        created_at: ctx.now,
        updated_at: ctx.now,
      };
      await ctx.trx.insertInto("webhook_endpoints").values(row).execute();
      await ctx.trx
        .insertInto("webhook_subscriptions")
        .values(
          subscriptions.map((s) => ({
            endpoint_id: id,
            event_type: s.eventType,
            filters_json: s.filtersJson ?? "",
            is_active: s.isActive === false ? 0 : 1,
          })),
        )
        .execute();
      return { endpointId: id, webhookEndpoint: await renderEndpoint(ctx.trx, row) };
    },
  }),

  defineActivity({
    name: "update_webhook_endpoint",
    summary: "Change a webhook endpoint's URL or name, or pause (isActive: false) and resume its deliveries.",
    resource: "WEBHOOK_ENDPOINT",
    action: "UPDATE",
    policyParameters: (p) => ({ endpoint_id: p.endpointId }),
    precheck: async (p, env) => void (p.url !== undefined && (await checkDestination(p.url, env.webhooks, "url"))),
    async execute(ctx, p) {
      const row = await requireEndpoint(ctx.trx, ctx.organizationId, p.endpointId);
      if (p.url !== undefined) row.url = webhookUrl(p.url, ctx.env.webhooks, "url");
      if (p.name !== undefined) row.name = requireName(p.name, "name");
      if (p.isActive !== undefined) row.is_active = p.isActive ? 1 : 0;
      row.updated_at = ctx.now;
      await ctx.trx
        .updateTable("webhook_endpoints")
        .set({ url: row.url, name: row.name, is_active: row.is_active, updated_at: row.updated_at })
        .where("id", "=", row.id)
        .execute();
      return { endpointId: row.id, webhookEndpoint: await renderEndpoint(ctx.trx, row) };
    },
  }),

  defineActivity({
    name: "delete_webhook_endpoint",
    summary: "Delete a webhook endpoint and its subscriptions; deliveries not yet made to it are cancelled.",
    resource: "WEBHOOK_ENDPOINT",
    action: "DELETE",
    policyParameters: (p) => ({ endpoint_id: p.endpointId }),
    async execute(ctx, p) {
      const row = await requireEndpoint(ctx.trx, ctx.organizationId, p.endpointId);
      await ctx.trx.deleteFrom("webhook_subscriptions").where("endpoint_id", "=", row.id).execute();
      await ctx.trx.deleteFrom("webhook_endpoints").where("id", "=", row.id).execute();
      await ctx.trx
        .updateTable("webhook_deliveries")
        .set({ status: "cancelled", last_error: "the endpoint was deleted", updated_at: ctx.now })
        .where("endpoint_id", "=", row.id)
        .where("status", "=", "pending")
        .execute();
      return { endpointId: row.id };
    },
  }),

  defineQuery({
    name: "list_webhook_endpoints",
    summary: "The organization's webhook endpoints with their subscriptions.",
    async run(ctx) {
      const rows = await ctx.db
        .selectFrom("webhook_endpoints")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .orderBy("created_at")
        .execute();
      return { webhookEndpoints: await Promise.all(rows.map((row) => renderEndpoint(ctx.db, row))) };
    },
  }),

  defineSigilQuery<ListWebhookDeliveriesBody>({
    name: "list_webhook_deliveries",
    summary:
      "The organization's webhook deliveries, newest first (all its endpoints and its FEATURE_NAME_WEBHOOK URL, or one endpoint's; " +
      "optionally in one status): event, activity, URL without its query, status, attempts, the last answer or error, times; never the body.",
    schema: {
      type: "object",
      required: ["organizationId"],
      properties: {
        organizationId: { type: "string" },
        endpointId: { type: "string", minLength: 1, description: "only the deliveries to this endpoint of the organization" },
        status: { type: "string", enum: DELIVERY_STATUSES, description: "only the deliveries in this status" },
        paginationOptions: {
          type: "object",
          properties: {
            limit: { type: "string", description: "how many, 1 to 100 (10 when absent)" },
            before: { type: "string", description: "a delivery id: the page of newer deliveries before it" },
            after: { type: "string", description: "a delivery id: the page of older deliveries after it" },
          },
          additionalProperties: false,
        },
      },
      additionalProperties: false,
    },
    async run(ctx, body) {
      // The receiving organization's deliveries, as list_webhook_endpoints lists its endpoints: a
      // sub-organization's activities that went to its parent's endpoints are the parent's deliveries.
      let query = ctx.db.selectFrom("webhook_deliveries").selectAll().where("organization_id", "=", ctx.organizationId);
      if (body.endpointId !== undefined) {
        await requireEndpoint(ctx.db, ctx.organizationId, body.endpointId);
        query = query.where("endpoint_id", "=", body.endpointId);
      }
      if (body.status !== undefined) query = query.where("status", "=", body.status);
      const rows = await readPage(ctx.db, query, body.paginationOptions, {
        newestFirst: true,
        table: "webhook_deliveries",
        scope: "organization_id",
        owner: ctx.organizationId,
        cursorIs: "a webhook delivery of this organization",
      });
      return { webhookDeliveries: rows.map(renderListedDelivery) };
    },
  }),
];

/** A delivery as list_webhook_deliveries answers it: what was sent where and what came of it, never
 * the body (an activity with its intent and result), and the URL without its query, which may carry
 * the receiver's token. An error recorded with the whole URL is shown with it redacted too. */
function renderListedDelivery(row: WebhookDeliveriesTable) {
  const url = redactedUrl(row.url);
  return {
    deliveryId: row.id,
    endpointId: row.endpoint_id,
    url,
    eventType: row.event_type,
    eventOrganizationId: row.event_organization_id,
    activityId: row.activity_id,
    status: row.status,
    attempts: Number(row.attempts),
    lastStatusCode: row.last_status_code === null ? null : Number(row.last_status_code),
    lastError: row.last_error === null ? null : row.last_error.replaceAll(row.url, url),
    createdAt: timestamp(Number(row.created_at)),
    updatedAt: timestamp(Number(row.updated_at)),
    nextAttemptAt: row.status === "pending" ? timestamp(Number(row.next_attempt_at)) : null,
    deliveredAt: row.delivered_at === null ? null : timestamp(Number(row.delivered_at)),
  };
}

/** A webhook delivery as the operator's log shows it (without the body). */
export function renderDelivery(row: {
  id: string;
  organization_id: string;
  event_organization_id: string;
  activity_id: string;
  url: string;
  endpoint_id: string | null;
  event_type: string;
  status: string;
  attempts: number;
  next_attempt_at: number;
  last_status_code: number | null;
  last_error: string | null;
  created_at: number;
  delivered_at: number | null;
}) {
  return {
    eventId: row.id,
    organizationId: row.organization_id,
    eventOrganizationId: row.event_organization_id,
    activityId: row.activity_id,
    endpointId: row.endpoint_id,
    url: redactedUrl(row.url),
    eventType: row.event_type,
    status: row.status,
    attempts: row.attempts,
    ...(row.status === "pending" ? { nextAttemptAt: new Date(row.next_attempt_at).toISOString() } : {}),
    lastStatusCode: row.last_status_code,
    lastError: row.last_error,
    createdAt: new Date(row.created_at).toISOString(),
    deliveredAt: row.delivered_at === null ? null : new Date(row.delivered_at).toISOString(),
  };
}
