// list_email_events: the delivery history of the emails sent for an organization, as the courier
// observed it handing each to the SMTP relay (services/message-courier.ts records the events): Send,
// Delivery (with the relay's answer), DeliveryDelay (an attempt to be retried) and Bounce (a permanent
// refusal, or given up). Only what this server saw: a relay that accepts a message and later fails to
// deliver it reports that to the sender's mailbox, not here.
import { serviceError } from "../../errors.js";
import { defineQuery } from "../../registry/registry.js";
import { foldAscii } from "../../services/message-courier.js";
import type { EmailEventsTable } from "../../store/schema.js";
import { readPage } from "../resources.js";

const EVENT_TYPES = ["Send", "Delivery", "Bounce", "DeliveryDelay"];
const MAX_EMAIL = 320;

function renderEmailEvent(row: EmailEventsTable) {
  return {
    id: row.id,
    organizationId: row.organization_id,
    messageId: row.message_id,
    eventType: row.event_type,
    fromAddress: row.from_address,
    toAddress: row.to_address,
    timestamp: String(row.timestamp),
    createdAt: String(row.created_at),
    details: JSON.parse(row.details) as Record<string, string>,
  };
}

export const emailEventOperations = [
  defineQuery({
    name: "list_email_events",
    summary:
      "What became of the emails sent to an address for the organization (Send, Delivery, DeliveryDelay, Bounce), newest first; `after` pages towards older ones.",
    async run(ctx, body) {
      const email = String(body.email ?? "").trim();
      if (email === "" || email.length > MAX_EMAIL)
        throw serviceError("REQUEST_INVALID", `email must be the recipient's address (1 to ${MAX_EMAIL} characters)`);
      const eventType = body.eventType ?? "";
      if (eventType !== "" && !EVENT_TYPES.includes(eventType))
        throw serviceError("REQUEST_INVALID", `eventType must be one of ${EVENT_TYPES.join(", ")}, got "${eventType}"`);
      let query = ctx.db
        .selectFrom("email_events")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .where("recipient_key", "=", foldAscii(email));
      if (eventType !== "") query = query.where("event_type", "=", eventType);
      const rows = await readPage(ctx.db, query, body.paginationOptions, {
        newestFirst: true,
        table: "email_events",
        scope: "organization_id",
        owner: ctx.organizationId,
        cursorIs: "an email event of this organization",
      });
      return { emailEvents: rows.map(renderEmailEvent) };
    },
  }),
];
