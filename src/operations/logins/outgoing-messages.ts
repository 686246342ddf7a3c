// Messages an activity sends (one-time passwords, email auth and recovery credentials, invitations): queued in the
// activity's own transaction, sealed under the master key, for the courier (services/message-courier.ts)
// to send once the activity has committed.
import { hasTransport, messageIdentity, type Channel, type MessageContent } from "../../services/message-courier.js";
import type { ActivityContext } from "../../registry/registry.js";
import { newId } from "../../store/ids.js";

/** The parent of the organization whose credential asks: set when that is a sub-organization (an end
 * user's own credential), null for a top-level organization (the app's backend). */
export async function requesterParent(ctx: ActivityContext): Promise<string | null> {
  const organization = await ctx.trx
    .selectFrom("organizations")
    .select("parent_organization_id")
    .where("id", "=", ctx.principal.organizationId)
    .executeTakeFirst();
  return organization?.parent_organization_id ?? null;
}

/** Queues a message in the activity's transaction: sealed, and kept in the outbox when its channel
 * has no transport. Returns the message's id. */
export async function queueMessage(
  ctx: ActivityContext,
  channel: Channel,
  recipient: string,
  content: MessageContent,
  expiresAt: number,
): Promise<string> {
  const id = newId();
  const outbox = !hasTransport(ctx.env.otp.messaging, channel);
  await ctx.trx
    .insertInto("outbound_messages")
    .values({
      id,
      organization_id: ctx.organizationId,
      channel,
      recipient,
      sealed_message: ctx.env.keyring.seal(
        Buffer.from(JSON.stringify(content), "utf8"),
        messageIdentity({ id, organization_id: ctx.organizationId }),
      ),
      status: outbox ? "outbox" : "pending",
      attempts: 0,
      next_attempt_at: ctx.now,
      lease_until: null,
      last_error: null,
      expires_at: expiresAt,
      created_at: ctx.now,
      sent_at: null,
    })
    .execute();
  return id;
}
