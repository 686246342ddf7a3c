// Invitations to join an organization: create_invitations records one per invitee and emails each a
// link carrying a single-use token (only its hash is stored); delete_invitation revokes one; and
// POST /invitations/accept (activities/pipeline.ts) turns a pending invitation into a user holding the
// API key that stamped the acceptance. get_organization lists them with their status.
import crypto from "node:crypto";
import type { Selectable } from "kysely";
import { serviceError } from "../../errors.js";
import { sha256, validatePublicKey } from "../../crypto/keys.js";
import type { Db, Tx } from "../../store/handles.js";
import type { InvitationsTable } from "../../store/schema.js";
import { defineActivity, type ActivityContext, type ParametersOf } from "../../registry/registry.js";
import { validateOwnRequest } from "../../registry/validation.js";
import type { MessageContent } from "../../services/message-courier.js";
import { recordSend } from "../../services/send-budgets.js";
import { newId } from "../../store/ids.js";
import { distinct, requireAtMost, requireUser, requireUserTags, timestamp } from "../resources.js";
import { requireName } from "../identity/credentials.js";
import { createUser } from "../identity/users.js";
import { deliverableEmail, foldEmail } from "../logins/contacts.js";
import { queueMessage, requesterParent } from "../logins/outgoing-messages.js";
import { escapeHtml } from "../logins/otp-messages.js";

export const ACCEPT_PATH = "/invitations/accept";

const CREATED = "INVITATION_STATUS_CREATED";
const ACCEPTED = "INVITATION_STATUS_ACCEPTED";
const REVOKED = "INVITATION_STATUS_REVOKED";

/** The product's resource limit: at most 100 invitations in one organization (a sub-organization too).
 * Counted over the pending ones: an accepted invitation has become a user (limited as users are), and a
 * revoked one is dead, so revoking frees room. */
export const MAX_PENDING_INVITATIONS = 100;

type InvitationParams = ParametersOf<"create_invitations">["invitations"][number];

/** The token's hash as stored and looked up. The token is 32 random bytes, so a plain SHA-256 cannot be
 * reversed by guessing (no slow hash is needed), and equal tokens give equal hashes for the look-up. */
export const invitationTokenHash = (token: string) => sha256(token).toString("hex");

export function renderInvitation(row: Selectable<InvitationsTable>) {
  return {
    invitationId: row.id,
    receiverUserName: row.receiver_name,
    receiverEmail: row.receiver_email,
    receiverUserTags: JSON.parse(row.receiver_tags) as string[],
    accessType: row.access_type,
    status: row.status,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
    senderUserId: row.sender_user_id,
  };
}

/** Every invitation of the organization, oldest first, whatever its status (get_organization). */
export async function listInvitations(db: Db | Tx, organizationId: string) {
  const rows = await db
    .selectFrom("invitations")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .orderBy("created_at")
    .orderBy("id")
    .execute();
  return rows.map(renderInvitation);
}

/** Names as they may appear in an email: one line (control characters become spaces). */
const oneLine = (text: string) => text.replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g, " ").trim();

function invitationEmail(sender: string, organization: string, receiver: string, link: string, expiresAt: number): MessageContent {
  const [who, where, whom] = [oneLine(sender), oneLine(organization), oneLine(receiver)];
  const until = new Date(expiresAt)
    .toISOString()
    .replace(/\.\d+Z$/, " UTC")
    .replace("T", " ");
  return {
    subject: `${who} invited you to join ${where}`,
    text: [
      `${who} invited you to join ${where} as ${whom}.`,
      `Accept the invitation: ${link}`,
      `The link can be used once, until ${until}. If you did not expect this invitation, ignore this message.`,
    ].join("\n\n"),
    html: [
      `<p>${escapeHtml(who)} invited you to join <strong>${escapeHtml(where)}</strong> as ${escapeHtml(whom)}.</p>`,
      `<p><a href="${escapeHtml(link)}">Accept the invitation</a></p>`,
      `<p>The link can be used once, until ${until}. If you did not expect this invitation, ignore this message.</p>`,
    ].join("\n"),
  };
}

/** The invitee's email as an invitation may name it: one address the courier can deliver to. */
function receiverEmail(value: string, field: string): string {
  const email = deliverableEmail(value);
  if (email === undefined) throw serviceError("REQUEST_INVALID", `${field} is not an email address: "${value}"`);
  return email;
}

async function createInvitation(
  ctx: ActivityContext,
  invitation: InvitationParams,
  field: string,
  sender: { name: string },
  organizationName: string,
  publicUrl: string,
  parent: string | null,
): Promise<string> {
  const name = requireName(invitation.receiverUserName, `${field}.receiverUserName`);
  const email = receiverEmail(invitation.receiverUserEmail, `${field}.receiverUserEmail`);
  const tags = distinct(invitation.receiverUserTags, `${field}.receiverUserTags`);
  await requireUserTags(ctx.trx, ctx.organizationId, tags);
  // Every invitation email counts toward the same budgets as one-time passwords: whoever may invite
  // (a sub-organization's root is typically an end user) could otherwise mail any number of strangers.
  await recordSend(ctx, ctx.env.otp, "email", email, parent);
  const id = newId();
  const token = crypto.randomBytes(32).toString("base64url");
  const expiresAt = ctx.now + ctx.env.invitations.lifetimeMs;
  const link = `${publicUrl}${ACCEPT_PATH}?token=${token}`;
  const messageId = await queueMessage(
    ctx,
    "email",
    email,
    invitationEmail(sender.name, organizationName, name, link, expiresAt),
    expiresAt,
  );
  await ctx.trx
    .insertInto("invitations")
    .values({
      id,
      organization_id: ctx.organizationId,
      receiver_name: name,
      receiver_email: email,
      receiver_tags: JSON.stringify(tags),
      access_type: invitation.accessType,
      sender_user_id: invitation.senderUserId,
      status: CREATED,
      token_hash: invitationTokenHash(token),
      expires_at: expiresAt,
      accepted_user_id: null,
      message_id: messageId,
      created_at: ctx.now,
      updated_at: ctx.now,
    })
    .execute();
  return id;
}

export const invitationOperations = [
  defineActivity({
    name: "create_invitations",
    summary:
      "Invite people to join the organization: one invitation per invitee (name, email, tags, access type, sender), each emailed a " +
      "single-use link to `<SIGIL_PUBLIC_URL>/invitations/accept` (see docs/invitations.md).",
    resource: "INVITATION",
    action: "CREATE",
    queuesMessages: true,
    async execute(ctx, p) {
      const publicUrl = ctx.env.invitations.publicUrl;
      if (!publicUrl)
        throw serviceError(
          "PUBLIC_URL_NOT_CONFIGURED",
          "this server has no SIGIL_PUBLIC_URL, so an invitation's link would point nowhere: the operator must set it; nothing was sent",
        );
      if (p.invitations.length === 0) throw serviceError("REQUEST_INVALID", "invitations must list at least one invitation");
      requireAtMost(p.invitations, "invitations");
      distinct(
        p.invitations.map((i) => foldEmail(i.receiverUserEmail.trim())),
        "invitations' receiverUserEmail",
      );
      const { pending } = await ctx.trx
        .selectFrom("invitations")
        .select((eb) => eb.fn.countAll<string | number>().as("pending"))
        .where("organization_id", "=", ctx.organizationId)
        .where("status", "=", CREATED)
        .executeTakeFirstOrThrow();
      if (Number(pending) + p.invitations.length > MAX_PENDING_INVITATIONS)
        throw serviceError(
          "INVITATION_LIMIT_REACHED",
          `organization ${ctx.organizationId} has ${pending} pending invitations, and may have at most ${MAX_PENDING_INVITATIONS}: ` +
            `${p.invitations.length} more would exceed that; revoke (delete_invitation) those no longer wanted`,
        );
      const organization = await ctx.trx
        .selectFrom("organizations")
        .select("name")
        .where("id", "=", ctx.organizationId)
        .executeTakeFirstOrThrow();
      const parent = await requesterParent(ctx);
      const ids: string[] = [];
      for (const [i, invitation] of p.invitations.entries()) {
        const field = `invitations[${i}]`;
        // The email says who invites: it is the requester, so nobody sends invitations in another user's name.
        if (invitation.senderUserId !== ctx.principal.userId)
          throw serviceError(
            "REQUEST_INVALID",
            `${field}.senderUserId must be the requesting user (${ctx.principal.userId}), got "${invitation.senderUserId}"`,
          );
        const sender = await requireUser(ctx.trx, ctx.organizationId, invitation.senderUserId);
        ids.push(await createInvitation(ctx, invitation, field, sender, organization.name, publicUrl, parent));
      }
      return { invitationIds: ids };
    },
  }),

  defineActivity({
    name: "delete_invitation",
    summary: "Revoke an invitation that was not accepted: its link stops working at once; it stays listed as INVITATION_STATUS_REVOKED.",
    resource: "INVITATION",
    action: "DELETE",
    async execute(ctx, p) {
      const row = await ctx.trx
        .selectFrom("invitations")
        .select(["id", "status", "message_id"])
        .where("organization_id", "=", ctx.organizationId)
        .where("id", "=", p.invitationId)
        .executeTakeFirst();
      if (!row) throw serviceError("INVITATION_NOT_FOUND", `invitation ${p.invitationId} not found in organization ${ctx.organizationId}`);
      if (row.status !== CREATED)
        throw serviceError(
          "INVITATION_NOT_PENDING",
          `invitation ${row.id} is ${row.status}: only a pending invitation can be revoked${row.status === ACCEPTED ? " (delete the user it created instead)" : ""}`,
        );
      await ctx.trx.updateTable("invitations").set({ status: REVOKED, updated_at: ctx.now }).where("id", "=", row.id).execute();
      // An email not yet sent (or waiting in the local outbox) would carry a dead link: it is cancelled
      // and its sealed text, which holds the token, erased.
      if (row.message_id)
        await ctx.trx
          .updateTable("outbound_messages")
          .set({ status: "cancelled", sealed_message: null })
          .where("id", "=", row.message_id)
          .where("status", "in", ["pending", "outbox"])
          .execute();
      return { invitationId: row.id };
    },
  }),
];

/** The body of POST /invitations/accept, checked: the token and the API key the invitee registers. */
export interface InvitationAcceptance {
  token: string;
  apiKey: { apiKeyName: string; publicKey: string; curveType: "API_KEY_CURVE_P256" };
}

/** The JSON Schema of that body, declared once: the endpoint validates with it, /openapi.json publishes it. */
export const invitationAcceptanceSchema = {
  type: "object",
  properties: {
    // The tokens Sigil makes are 43 base64url characters; a longer one cannot match.
    token: { type: "string", minLength: 1, maxLength: 256, description: "The token of the invitation link." },
    apiKey: {
      type: "object",
      description: "The API key the invited user will hold; the request is stamped (X-Stamp) by it.",
      properties: {
        apiKeyName: { type: "string" },
        publicKey: { type: "string", description: "Compressed P-256 public key, hex." },
        curveType: { type: "string", enum: ["API_KEY_CURVE_P256"] },
      },
      required: ["apiKeyName", "publicKey", "curveType"],
      additionalProperties: false,
    },
  },
  required: ["token", "apiKey"],
  additionalProperties: false,
} as const;

/** Reads an acceptance body: its schema, then a name that is not blank and a key on the curve. */
export function readAcceptance(body: unknown): InvitationAcceptance {
  validateOwnRequest("invitation-acceptance", invitationAcceptanceSchema, body);
  const { token, apiKey } = body as InvitationAcceptance;
  const apiKeyName = requireName(apiKey.apiKeyName, "apiKey.apiKeyName");
  const problem = validatePublicKey("API_KEY_CURVE_P256", apiKey.publicKey);
  if (problem) throw serviceError("INVALID_PUBLIC_KEY", `apiKey.publicKey: ${problem}`);
  return { token, apiKey: { apiKeyName, publicKey: apiKey.publicKey.toLowerCase(), curveType: "API_KEY_CURVE_P256" } };
}

/** The organization whose invitation this token belongs to, so its lock can be taken; read again under it. */
export async function organizationOfInvitation(db: Db, tokenHash: string): Promise<string> {
  const row = await db.selectFrom("invitations").select("organization_id").where("token_hash", "=", tokenHash).executeTakeFirst();
  if (!row) throw serviceError("INVITATION_NOT_FOUND", "no invitation has this token: check that the link was copied whole");
  return row.organization_id;
}

/**
 * Accepts the invitation the token names, under its organization's lock: a pending, unexpired
 * invitation becomes the user it describes (name, email, tags that still exist) holding the API key,
 * and is marked accepted, so the token works once. Anything refused changes nothing.
 */
export async function acceptInvitation(
  ctx: ActivityContext,
  acceptance: InvitationAcceptance,
  tokenHash: string,
): Promise<{ invitationId: string; userId: string; apiKeyId: string; userName: string; userEmail: string }> {
  const invitation = await ctx.trx
    .selectFrom("invitations")
    .selectAll()
    .where("organization_id", "=", ctx.organizationId)
    .where("token_hash", "=", tokenHash)
    .executeTakeFirst();
  if (!invitation) throw serviceError("INVITATION_NOT_FOUND", "no invitation has this token: check that the link was copied whole");
  if (invitation.status !== CREATED)
    throw serviceError("INVITATION_NOT_PENDING", `invitation ${invitation.id} is ${invitation.status}: its link can no longer be used`);
  if (invitation.expires_at <= ctx.now)
    throw serviceError(
      "INVITATION_EXPIRED",
      `invitation ${invitation.id} expired at ${new Date(invitation.expires_at).toISOString()}: ask for a new one`,
    );
  const userId = await createUser(
    ctx,
    { userName: invitation.receiver_name, userEmail: invitation.receiver_email, apiKeys: [acceptance.apiKey] },
    "invitation",
  );
  // A tag deleted since the invitation was made is not given: the organization removed it on purpose.
  const wanted = JSON.parse(invitation.receiver_tags) as string[];
  const tags = wanted.length
    ? (
        await ctx.trx
          .selectFrom("tags")
          .select("id")
          .where("organization_id", "=", ctx.organizationId)
          .where("tag_type", "=", "TAG_TYPE_USER")
          .where("id", "in", wanted)
          .execute()
      ).map((t) => t.id)
    : [];
  if (tags.length)
    await ctx.trx
      .insertInto("user_tag_members")
      .values(tags.map((tag_id) => ({ tag_id, user_id: userId })))
      .execute();
  await ctx.trx
    .updateTable("invitations")
    .set({ status: ACCEPTED, accepted_user_id: userId, updated_at: ctx.now })
    .where("id", "=", invitation.id)
    .execute();
  const apiKey = await ctx.trx.selectFrom("api_keys").select("id").where("user_id", "=", userId).executeTakeFirstOrThrow();
  return {
    invitationId: invitation.id,
    userId,
    apiKeyId: apiKey.id,
    userName: invitation.receiver_name,
    userEmail: invitation.receiver_email,
  };
}
