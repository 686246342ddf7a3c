// Writing the webhook outbox: the rows an event owes its destinations, written in the transaction of
// what caused the event (an activity, a sent transaction's status change), so an event exists for the
// dispatcher (webhook-dispatcher.ts) exactly when its cause committed. Who listens is decided by the
// caller; the row's shape is decided here, once.
import { newId } from "../store/ids.js";
import type { Tx } from "../store/handles.js";

/** Where one event goes: an endpoint (or, for activities, an organization's FEATURE_NAME_WEBHOOK URL). */
export interface WebhookDestination {
  /** The endpoint, or null for the feature URL. */
  endpointId: string | null;
  /** The organization that receives it (its X-Turnkey-Organization-Id). */
  organizationId: string;
  url: string;
}

export interface WebhookEvent {
  eventType: string;
  /** The organization the event is about (the receiver's own, or one of its sub-organizations). */
  eventOrganizationId: string;
  activityId: string;
  body: string;
}

/** One pending delivery per destination, due now. */
export async function writeDeliveries(trx: Tx, destinations: WebhookDestination[], event: WebhookEvent, now: number): Promise<void> {
  if (destinations.length === 0) return;
  await trx
    .insertInto("webhook_deliveries")
    .values(
      destinations.map((d) => ({
        id: newId(),
        organization_id: d.organizationId,
        event_organization_id: event.eventOrganizationId,
        activity_id: event.activityId,
        destination: d.endpointId ?? `feature:${d.organizationId}`,
        endpoint_id: d.endpointId,
        url: d.url,
        event_type: event.eventType,
        body: event.body,
        status: "pending",
        attempts: 0,
        next_attempt_at: now,
        lease_until: null,
        last_status_code: null,
        last_error: null,
        created_at: now,
        updated_at: now,
        delivered_at: null,
      })),
    )
    .execute();
}
