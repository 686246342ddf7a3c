// SEND_TRANSACTION_STATUS_UPDATES: when a sent transaction's status changes to BROADCASTING, INCLUDED
// or FAILED, a `transaction:status` event for the endpoints of the billing organization (the sending
// organization's parent, or the organization itself when it has none) that subscribe to it, shaped as
// the product's webhook docs describe it. The broadcaster records each change through
// `recordWithStatusEvent`, so the event is written in the same transaction as the status: one exists
// exactly when the change committed (a look whose lease was lost writes neither).
import { createHash } from "node:crypto";
import type { UpdateResult } from "kysely";
import type { Tx } from "../store/handles.js";
import type { SentTransaction } from "../store/schema.js";
import { writeDeliveries } from "./webhook-outbox.js";

export const SEND_TRANSACTION_STATUS_UPDATES = "SEND_TRANSACTION_STATUS_UPDATES";

/** The statuses an event is sent for (INITIALIZED is where every send starts: no change to report). */
const REPORTED = new Set(["BROADCASTING", "INCLUDED", "FAILED"]);

/** A status change as the broadcaster decided it (its Change): the new status and, when final, why it
 * failed or reverted (the error get_send_transaction_status shows). */
export interface StatusChange {
  status: string;
  error?: { message: string; eth?: unknown; solana?: unknown } | null;
}

/** The webhook body: `msg.txHash` only once INCLUDED, `msg.error` only with an error (FAILED, or a
 * revert), as the product documents each status. */
export function statusEventBody(row: SentTransaction, parentOrganizationId: string, change: StatusChange, now: number) {
  const { error } = change;
  return {
    type: "transaction:status",
    organizationId: row.organization_id,
    parentOrganizationId,
    msg: {
      sendTransactionStatusId: row.id,
      activityId: row.activity_id,
      status: change.status,
      caip2: row.caip2,
      // Stable for this send reaching this status, whichever process records it and however often the
      // delivery is retried.
      idempotencyKey: createHash("sha256").update(`${row.id}:${change.status}`).digest("hex"),
      timestamp: Math.floor(now / 1000),
      ...(change.status === "INCLUDED" && row.tx_hash ? { txHash: row.tx_hash } : {}),
      ...(error
        ? {
            error: {
              message: error.message,
              ...(error.eth !== undefined ? { eth: error.eth } : {}),
              ...(error.solana !== undefined ? { solana: error.solana } : {}),
            },
          }
        : {}),
    },
  };
}

/**
 * Runs the broadcaster's update of one sent transaction (fenced by its lease) and, when it took and
 * changed the status to one that is reported, writes the event for every subscribed endpoint of the
 * billing organization.
 */
export async function recordWithStatusEvent(
  trx: Tx,
  row: SentTransaction,
  change: StatusChange,
  now: number,
  update: { executeTakeFirst(): Promise<UpdateResult> },
): Promise<void> {
  const result = await update.executeTakeFirst();
  if (Number(result.numUpdatedRows) !== 1 || change.status === row.status || !REPORTED.has(change.status)) return;
  const organization = await trx
    .selectFrom("organizations")
    .select("parent_organization_id")
    .where("id", "=", row.organization_id)
    .executeTakeFirst();
  const billing = organization?.parent_organization_id ?? row.organization_id;
  const destinations = await trx
    .selectFrom("webhook_endpoints as e")
    .innerJoin("webhook_subscriptions as s", "s.endpoint_id", "e.id")
    .select(["e.id as endpointId", "e.organization_id as organizationId", "e.url as url"])
    .where("e.organization_id", "=", billing)
    .where("e.is_active", "=", 1)
    .where("s.is_active", "=", 1)
    .where("s.event_type", "=", SEND_TRANSACTION_STATUS_UPDATES)
    .execute();
  if (destinations.length === 0) return;
  await writeDeliveries(
    trx,
    destinations,
    {
      eventType: SEND_TRANSACTION_STATUS_UPDATES,
      eventOrganizationId: row.organization_id,
      activityId: row.activity_id,
      body: JSON.stringify(statusEventBody(row, billing, change, now)),
    },
    now,
  );
}
