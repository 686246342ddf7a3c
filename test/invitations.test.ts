// Invitations and the organization's name, through @turnkey/sdk-server as a backend drives them:
// create_invitations emails each invitee (over real SMTP: smtp-server, or the local outbox) a link to
// <SIGIL_PUBLIC_URL>/invitations/accept carrying a single-use token; POST /invitations/accept, stamped
// by the very key it registers (@turnkey/api-key-stamper), creates the invited user; delete_invitation
// revokes. update_organization_name is the root quorum's alone. Every refusal changes nothing (the
// full-table snapshot) and sends nothing; the token appears nowhere but in the email.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { startSmtp, until, type Mail, type TestSmtp } from "./helpers/smtp.js";
import { ApiKeyStamper } from "@turnkey/api-key-stamper";
import { Ajv } from "ajv";
import {
  apiKeyStamp,
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  signedRequest,
  startHarness,
  type ApiKeyPair,
  type Harness,
  type TestOrganization,
} from "./helpers/harness.js";
import { fastPoller, organizationWith } from "./helpers/organizations.js";
import { readOutbox } from "../src/services/message-courier.js";
import { loadKeyring } from "../src/crypto/master-key.js";

const PUBLIC_URL = "https://wallet.example.com/sigil";
const LINK = /https:\/\/wallet\.example\.com\/sigil\/invitations\/accept\?token=([A-Za-z0-9_-]+)/;

let smtp: TestSmtp;
let mails: Mail[] = [];
let hooks: http.Server;
const deliveries: any[] = [];
let h: Harness;
let org: TestOrganization;
let root: ReturnType<Harness["sdk"]>;
/** An organization whose activities go to a webhook receiver (kept apart: refusals there are delivered too). */
let hooked: TestOrganization;
let hookedSdk: ReturnType<Harness["sdk"]>;

async function startHooks(): Promise<string> {
  hooks = http.createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    request.on("end", () => {
      deliveries.push(JSON.parse(body));
      response.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => hooks.listen(0, "127.0.0.1", resolve));
  return `http://127.0.0.1:${(hooks.address() as AddressInfo).port}/hook`;
}

/** The token in the latest invitation email to `to` (quoted-printable soft breaks undone). */
async function emailedToken(to: string): Promise<{ token: string; raw: string }> {
  const mail = await until(() => [...mails].reverse().find((m) => m.to === to), `an email to ${to}`);
  // The courier records the send after the relay took it: wait for that, so later table snapshots hold still.
  for (let i = 0; i < 400; i++) {
    const unrecorded = await h.server.store.db
      .selectFrom("outbound_messages")
      .select("id")
      .where("recipient", "=", to)
      .where("status", "=", "pending")
      .execute();
    if (unrecorded.length === 0) break;
    await new Promise((r) => setTimeout(r, 25));
  }
  const raw = mail.raw.replace(/=\r?\n/g, "").replace(/=3D/g, "=");
  return { token: LINK.exec(raw)![1]!, raw };
}

/** POST /invitations/accept as the invitee's program does: the body stamped by the key it registers. */
async function accept(token: string, key: ApiKeyPair, extra: { body?: string; stampWith?: ApiKeyPair; apiKeyName?: string } = {}) {
  const body =
    extra.body ??
    JSON.stringify({
      token,
      apiKey: { apiKeyName: extra.apiKeyName ?? "laptop", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" },
    });
  const signer = extra.stampWith ?? key;
  const stamp = await new ApiKeyStamper({ apiPublicKey: signer.publicKey, apiPrivateKey: signer.privateKey }).stamp(body);
  return h.post("/invitations/accept", body, { [stamp.stampHeaderName]: stamp.stampHeaderValue });
}

/** get_organization's organizationData (@turnkey/http's client: the programs written against the older API read it). */
async function organizationData(of: { organizationId: string }, key: ApiKeyPair) {
  return (await h.http(key).getOrganization({ organizationId: of.organizationId })).organizationData;
}

const invitee = (email: string, senderUserId: string, tags: string[] = []) => ({
  receiverUserName: email.split("@")[0]!,
  receiverUserEmail: email,
  receiverUserTags: tags,
  accessType: "ACCESS_TYPE_API" as const,
  senderUserId,
});

/** A request that must be refused before it becomes an activity: every table stays as it was. */
async function refusedChangingNothing(attempt: () => Promise<{ status: number; json: any }>, status: number, code: string) {
  const before = await h.snapshot();
  const sent = mails.length;
  const answer = await attempt();
  expect(answer.status, JSON.stringify(answer.json)).toBe(status);
  expect(answer.json.details[0].turnkeyErrorCode).toBe(code);
  expect(await h.snapshot()).toBe(before);
  expect(mails.length).toBe(sent);
  return answer.json.message as string;
}

beforeAll(async () => {
  smtp = await startSmtp();
  mails = smtp.mails;
  h = await startHarness({
    SIGIL_SMTP_URL: smtp.url,
    SIGIL_MESSAGE_POLL_MS: "50",
    SIGIL_PUBLIC_URL: `${PUBLIC_URL}/`,
    // Request lines too: the token must not reach them.
    SIGIL_LOG_LEVEL: "debug",
    SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
    SIGIL_WEBHOOK_POLL_MS: "50",
  });
  org = await h.organization("Acme");
  root = h.sdk(org, org.key, fastPoller);
  hooked = await h.organization("Hooked");
  hookedSdk = h.sdk(hooked, hooked.key, fastPoller);
  await hookedSdk.createWebhookEndpoint({ url: await startHooks(), name: "audit", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] });
});
afterAll(async () => {
  await h?.close();
  await smtp?.close();
  await new Promise<void>((resolve) => hooks.close(() => resolve()));
});

describe("update_organization_name", () => {
  it("renames the organization; get_organization, whoami and the webhook show the new name", async () => {
    const renamed = await root.updateOrganizationName({ organizationName: "  Acme Corp  " });
    expect(renamed).toMatchObject({ organizationId: org.organizationId, organizationName: "Acme Corp" });
    expect((await organizationData(org, org.key)).name).toBe("Acme Corp");
    expect((await root.getWhoami({})).organizationName).toBe("Acme Corp");
    await hookedSdk.updateOrganizationName({ organizationName: "Hooked Corp" });
    const delivered = await until(
      () => deliveries.find((d) => d.type === "ACTIVITY_TYPE_UPDATE_ORGANIZATION_NAME" && d.status === "ACTIVITY_STATUS_COMPLETED"),
      "the rename's webhook",
    );
    expect(delivered.result.updateOrganizationNameResult).toEqual({
      organizationId: hooked.organizationId,
      organizationName: "Hooked Corp",
    });
  });

  it("is the root quorum's alone: a policy allowing everything does not let a member rename", async () => {
    const { org: owner_org, root: owner, members } = await organizationWith(h, ["plain"]);
    await owner.createPolicy({
      policyName: "plain may do anything",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${members.plain!.userId}')`,
      condition: "activity.resource == 'ORGANIZATION' && activity.action == 'UPDATE'",
      notes: "",
    });
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => members.plain!.client.updateOrganizationName({ organizationName: "Mine now" }),
      { code: 7, message: expect.stringContaining("root quorum") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
    expect((await organizationData(owner_org, owner_org.key)).name).toBe("Test Org");
  });

  it("refuses an empty, blank or over-long name, and a name that is not a string, changing nothing", async () => {
    for (const organizationName of ["", "   ", "x".repeat(257)]) {
      await refusedLeavingOnlyItsActivity(h, () => root.updateOrganizationName({ organizationName }), {
        code: 3,
        message: expect.stringMatching(/organizationName must (not be empty|be at most 256 characters)/),
      });
    }
    const wrongType = signedRequest(
      {
        type: "ACTIVITY_TYPE_UPDATE_ORGANIZATION_NAME",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: { organizationName: 7 },
      },
      org.key,
    );
    await refusedChangingNothing(
      () => h.post("/public/v1/submit/update_organization_name", wrongType.body, wrongType.headers),
      400,
      "REQUEST_INVALID",
    );
    const missing = signedRequest(
      {
        type: "ACTIVITY_TYPE_UPDATE_ORGANIZATION_NAME",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: {},
      },
      org.key,
    );
    await refusedChangingNothing(
      () => h.post("/public/v1/submit/update_organization_name", missing.body, missing.headers),
      400,
      "REQUEST_INVALID",
    );
    expect((await organizationData(org, org.key)).name).toBe("Acme Corp");
  });
});

describe("invitations", () => {
  it("invites, emails a link, lists the invitation, and the link's key becomes the invited user's", async () => {
    const { userTagId } = await root.createUserTag({ userTagName: "ops", userIds: [] });
    const { invitationIds } = await root.createInvitations({ invitations: [invitee("alice@example.com", org.userId, [userTagId])] });
    expect(invitationIds).toHaveLength(1);
    const invitationId = invitationIds[0]!;
    const { token, raw } = await emailedToken("alice@example.com");
    expect(raw).toContain("Subject: root invited you to join Acme Corp");
    expect(raw).toContain(`${PUBLIC_URL}/invitations/accept?token=${token}`);
    // Opened in a browser (the server's own address standing in for SIGIL_PUBLIC_URL), the link explains
    // how acceptance works, repeating no token, and nothing is created.
    const before = await h.snapshot();
    const page = await fetch(`${h.url}/invitations/accept?token=${token}`);
    expect(page.status).toBe(200);
    expect(page.headers.get("referrer-policy")).toBe("no-referrer");
    const html = await page.text();
    expect(html).toContain("accepts an invitation");
    expect(html).not.toContain(token);
    expect(await h.snapshot()).toBe(before);
    // Another method is refused with the token redacted from the answer (and the log line).
    const put = await fetch(`${h.url}/invitations/accept?token=${token}`, { method: "PUT" });
    expect(put.status).toBe(404);
    expect(await put.text()).toContain("token=<redacted>");

    const listed = (await organizationData(org, org.key)).invitations!;
    expect(listed).toEqual([
      {
        invitationId,
        receiverUserName: "alice",
        receiverEmail: "alice@example.com",
        receiverUserTags: [userTagId],
        accessType: "ACCESS_TYPE_API",
        status: "INVITATION_STATUS_CREATED",
        createdAt: expect.objectContaining({ seconds: expect.any(String) }),
        updatedAt: expect.objectContaining({ seconds: expect.any(String) }),
        senderUserId: org.userId,
      },
    ]);

    const key = newKeyPair();
    const accepted = await accept(token, key);
    expect(accepted.status, JSON.stringify(accepted.json)).toBe(200);
    expect(accepted.json).toEqual({ organizationId: org.organizationId, userId: expect.any(String), invitationId });
    const { userId } = accepted.json;
    const { user } = await root.getUser({ userId });
    expect(user).toMatchObject({ userName: "alice", userEmail: "alice@example.com", userTags: [userTagId] });
    expect(user.apiKeys.map((k) => [k.apiKeyName, k.credential.publicKey])).toEqual([["laptop", key.publicKey]]);
    // The registered key is the new user's own credential: it works with the official client.
    expect(await h.sdk(org, key).getWhoami({})).toMatchObject({ userId, organizationId: org.organizationId });
    const after = (await organizationData(org, org.key)).invitations!;
    expect(after.map((i: { status: string }) => i.status)).toEqual(["INVITATION_STATUS_ACCEPTED"]);

    // The acceptance is in the audit log (and delivered to webhooks) as the new user's activity.
    const { activities } = await root.getActivities({});
    const acceptance = activities.find((a) => a.type === "ACTIVITY_TYPE_ACCEPT_INVITATION_V2")!;
    expect(acceptance).toMatchObject({ status: "ACTIVITY_STATUS_COMPLETED" });
    expect((acceptance.result as any).acceptInvitationResult).toEqual({ invitationId, userId });
    expect(acceptance.votes[0]).toMatchObject({ userId, publicKey: key.publicKey, message: "" });

    // Single use: the same link, even with another key, creates nobody.
    const message = await refusedChangingNothing(() => accept(token, newKeyPair()), 400, "INVITATION_NOT_PENDING");
    expect(message).toContain("INVITATION_STATUS_ACCEPTED");
    // An accepted invitation is not revoked: the user it created is deleted instead.
    await refusedLeavingOnlyItsActivity(h, () => root.deleteInvitation({ invitationId }), {
      message: expect.stringContaining("delete the user it created instead"),
    });

    // The token is in the email only: not in any table (the sent email's text is erased), log line or webhook.
    expect(await h.snapshot()).not.toContain(token);
    expect(h.logLines.join("\n")).not.toContain(token);
    expect(h.logLines.join("\n")).toContain("/invitations/accept?token=<redacted>");
  });

  it("accepts apiKey.publicKey written in upper-case hex and registers it in lower case", async () => {
    await root.createInvitations({ invitations: [invitee("upper@example.com", org.userId)] });
    const { token } = await emailedToken("upper@example.com");
    const key = newKeyPair();
    const upper = { ...key, publicKey: key.publicKey.toUpperCase() };
    const accepted = await accept(token, upper);
    expect(accepted.status, JSON.stringify(accepted.json)).toBe(200);
    const { user } = await root.getUser({ userId: accepted.json.userId });
    expect(user.apiKeys.map((k) => k.credential.publicKey)).toEqual([key.publicKey]);
  });

  it("webhooks hear of the invitation and of its acceptance, never of the token", async () => {
    await hookedSdk.createInvitations({ invitations: [invitee("jo@example.com", hooked.userId)] });
    const { token } = await emailedToken("jo@example.com");
    const accepted = await accept(token, newKeyPair());
    expect(accepted.status).toBe(200);
    const delivered = await until(
      () => deliveries.find((d) => d.type === "ACTIVITY_TYPE_ACCEPT_INVITATION_V2"),
      "the acceptance's webhook",
    );
    expect(delivered).toMatchObject({ organizationId: hooked.organizationId, status: "ACTIVITY_STATUS_COMPLETED" });
    expect(delivered.result.acceptInvitationResult).toEqual({ invitationId: accepted.json.invitationId, userId: accepted.json.userId });
    expect(deliveries.some((d) => d.type === "ACTIVITY_TYPE_CREATE_INVITATIONS")).toBe(true);
    expect(JSON.stringify(deliveries)).not.toContain(token);
  });

  it("revoking an invitation kills its link; it stays listed as revoked", async () => {
    const { invitationIds } = await root.createInvitations({ invitations: [invitee("bob@example.com", org.userId)] });
    const { token } = await emailedToken("bob@example.com");
    expect(await root.deleteInvitation({ invitationId: invitationIds[0]! })).toMatchObject({ invitationId: invitationIds[0] });
    const listed = (await organizationData(org, org.key)).invitations!;
    expect(listed.find((i: { invitationId: string }) => i.invitationId === invitationIds[0])!.status).toBe("INVITATION_STATUS_REVOKED");
    await refusedChangingNothing(() => accept(token, newKeyPair()), 400, "INVITATION_NOT_PENDING");
    // Revoking again is refused: it is no longer pending.
    await refusedLeavingOnlyItsActivity(h, () => root.deleteInvitation({ invitationId: invitationIds[0]! }), {
      message: expect.stringContaining("INVITATION_STATUS_REVOKED"),
    });
  });

  it("policies govern invitations by resource INVITATION, actions CREATE and DELETE", async () => {
    const { org: team, root: owner, members } = await organizationWith(h, ["hr"]);
    const hr = members.hr!;
    await owner.createPolicy({
      policyName: "hr invites",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${hr.userId}')`,
      condition: "activity.resource == 'INVITATION' && activity.action == 'CREATE'",
      notes: "",
    });
    const { invitationIds } = await hr.client.createInvitations({ invitations: [invitee("carol@example.com", hr.userId)] });
    await emailedToken("carol@example.com");
    // No policy allows hr to DELETE: refused, the invitation stays pending.
    await refusedLeavingOnlyItsActivity(h, () => hr.client.deleteInvitation({ invitationId: invitationIds[0]! }), {
      code: 7,
      message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
    });
    await owner.createPolicy({
      policyName: "hr revokes",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${hr.userId}')`,
      condition: "activity.resource == 'INVITATION' && activity.action == 'DELETE'",
      notes: "",
    });
    await hr.client.deleteInvitation({ invitationId: invitationIds[0]! });
    expect((await organizationData(team, team.key)).invitations![0]!.status).toBe("INVITATION_STATUS_REVOKED");
  });

  it("refuses bad invitations, changing nothing and sending nothing", async () => {
    const other = await h.organization("Other");
    const { userTagId: foreignTag } = await h.sdk(other, other.key).createUserTag({ userTagName: "theirs", userIds: [] });
    const sender = org.userId;
    const cases: Array<[unknown[], string]> = [
      [[], "invitations must list at least one invitation"],
      [[{ ...invitee("dave@example.com", sender), receiverUserName: "  " }], "invitations[0].receiverUserName must not be empty"],
      [[{ ...invitee("dave@example.com", sender), receiverUserName: "d".repeat(257) }], "receiverUserName must be at most 256 characters"],
      [[invitee("not-an-email", sender)], 'invitations[0].receiverUserEmail is not an email address: "not-an-email"'],
      [[invitee("dave@example.com", sender, ["no-such-tag"])], "user tag no-such-tag not found"],
      [[invitee("dave@example.com", sender, [foreignTag])], `user tag ${foreignTag} not found`],
      [[invitee("dave@example.com", other.userId)], `senderUserId must be the requesting user (${org.userId})`],
      [[invitee("dave@example.com", sender), invitee("Dave@Example.com", sender)], "lists dave@example.com more than once"],
      [Array.from({ length: 101 }, (_, i) => invitee(`u${i}@example.com`, sender)), "at most 100 per request"],
    ];
    for (const [invitations, message] of cases) {
      const sent = mails.length;
      await refusedLeavingOnlyItsActivity(h, () => root.createInvitations({ invitations: invitations as any }), {
        message: expect.stringContaining(message),
      });
      expect(mails.length).toBe(sent);
    }
    // Bodies the API description refuses are not activities at all.
    const schemaRefusals = [
      { invitations: [{ ...invitee("dave@example.com", sender), receiverUserTags: "ops" }] },
      { invitations: [{ ...invitee("dave@example.com", sender), accessType: "ACCESS_TYPE_ROOT" }] },
      {
        invitations: [
          { receiverUserName: "dave", receiverUserEmail: "dave@example.com", receiverUserTags: [], accessType: "ACCESS_TYPE_API" },
        ],
      },
      { invitations: [{ ...invitee("dave@example.com", sender), token: "mine" }] },
    ];
    for (const parameters of schemaRefusals) {
      const request = signedRequest(
        { type: "ACTIVITY_TYPE_CREATE_INVITATIONS", timestampMs: String(Date.now()), organizationId: org.organizationId, parameters },
        org.key,
      );
      await refusedChangingNothing(
        () => h.post("/public/v1/submit/create_invitations", request.body, request.headers),
        400,
        "REQUEST_INVALID",
      );
    }
  });

  it("refuses to revoke an unknown invitation or another organization's", async () => {
    const other = await h.organization("Elsewhere");
    const otherSdk = h.sdk(other, other.key, fastPoller);
    const { invitationIds } = await otherSdk.createInvitations({ invitations: [invitee("erin@example.com", other.userId)] });
    await emailedToken("erin@example.com");
    for (const invitationId of ["no-such-invitation", invitationIds[0]!]) {
      const { failure } = await refusedLeavingOnlyItsActivity(h, () => root.deleteInvitation({ invitationId }), {
        message: expect.stringContaining(`invitation ${invitationId} not found in organization ${org.organizationId}`),
      });
      expect(failure.details[0].turnkeyErrorCode).toBe("INVITATION_NOT_FOUND");
    }
    expect((await organizationData(other, other.key)).invitations![0]!.status).toBe("INVITATION_STATUS_CREATED");
  });

  it("refuses a bad acceptance, changing nothing", async () => {
    await root.createInvitations({ invitations: [invitee("frank@example.com", org.userId)] });
    const { token } = await emailedToken("frank@example.com");
    const key = newKeyPair();
    const body = (fields: Record<string, unknown>) =>
      JSON.stringify({ token, apiKey: { apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }, ...fields });
    const stamped = (text: string) => h.post("/invitations/accept", text, { "X-Stamp": apiKeyStamp(text, key) });

    await refusedChangingNothing(() => h.post("/invitations/accept", body({})), 401, "SIGNATURE_MISSING");
    // Stamped by another key than the one registered: the invitee must prove they hold it.
    await refusedChangingNothing(() => accept(token, key, { stampWith: newKeyPair() }), 401, "SIGNATURE_INVALID");
    await refusedChangingNothing(() => accept(token, key, { stampWith: org.key }), 401, "SIGNATURE_INVALID");
    // A stamp over other bytes.
    await refusedChangingNothing(
      () => h.post("/invitations/accept", body({}), { "X-Stamp": apiKeyStamp(body({ token: `${token}x` }), key) }),
      401,
      "SIGNATURE_INVALID",
    );
    await refusedChangingNothing(() => accept(`${token}x`, key), 404, "INVITATION_NOT_FOUND");
    await refusedChangingNothing(() => accept("", key), 400, "REQUEST_INVALID");
    await refusedChangingNothing(() => stamped(body({ token: 42 })), 400, "REQUEST_INVALID");
    // In Sigil's words, not the schema validator's.
    expect(await refusedChangingNothing(() => stamped(body({ token: "t".repeat(300) })), 400, "REQUEST_INVALID")).toContain(
      'field "token" must be at most 256 characters long',
    );
    await refusedChangingNothing(() => stamped(body({ organizationId: org.organizationId })), 400, "REQUEST_INVALID");
    await refusedChangingNothing(() => stamped(JSON.stringify({ token })), 400, "REQUEST_INVALID");
    await refusedChangingNothing(
      () => stamped(body({ apiKey: { apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_ED25519" } })),
      400,
      "REQUEST_INVALID",
    );
    await refusedChangingNothing(
      () =>
        stamped(body({ apiKey: { apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "60" } })),
      400,
      "REQUEST_INVALID",
    );
    await refusedChangingNothing(() => accept(token, key, { apiKeyName: " " }), 400, "REQUEST_INVALID");
    await refusedChangingNothing(() => stamped("not json"), 400, "REQUEST_BODY_INVALID");
    // A body broken right at the token: JSON.parse's own message quotes the body around the fault,
    // which neither the answer nor the log may repeat.
    const broken = `{"token":@${token},"apiKey":{}}`;
    const parseMessage = await refusedChangingNothing(() => stamped(broken), 400, "REQUEST_BODY_INVALID");
    expect(parseMessage).toBe("request body is not valid JSON: an unexpected character");
    expect(parseMessage).not.toContain(token.slice(0, 8));
    expect(h.logLines.join("\n")).not.toContain(token.slice(0, 8));
    await refusedChangingNothing(() => stamped("[]"), 400, "REQUEST_INVALID");
    // A key already registered in the organization (the root's own, stamped by it) is refused whole.
    await refusedChangingNothing(() => accept(token, org.key), 409, "API_KEY_ALREADY_EXISTS");
    // The body's schema is the one /openapi.json publishes.
    const document = (await (await fetch(`${h.url}/openapi.json`)).json()) as any;
    const published = new Ajv({ strict: false }).compile(
      document.paths["/invitations/accept"].post.requestBody.content["application/json"].schema,
    );
    expect(published(JSON.parse(body({})))).toBe(true);
    expect(published(JSON.parse(body({ organizationId: org.organizationId })))).toBe(false);
    expect(published({ token })).toBe(false);
    // After all that the link still works, once: of two acceptances racing, one wins and one is refused.
    const race = await Promise.all([accept(token, key), accept(token, newKeyPair())]);
    expect(race.map((r) => r.status).sort()).toEqual([200, 400]);
    expect(race.find((r) => r.status === 400)!.json.details[0].turnkeyErrorCode).toBe("INVITATION_NOT_PENDING");
    const users = (await organizationData(org, org.key)).users!.filter((u: { userName: string }) => u.userName === "frank");
    expect(users).toHaveLength(1);
  });
});

describe("in a sub-organization", () => {
  it("its root invites; deleting the sub-organization kills the links", async () => {
    const key = newKeyPair();
    const { subOrganizationId, rootUserIds } = await root.createSubOrganization({
      subOrganizationName: "Team",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "lead",
          apiKeys: [{ apiKeyName: "lead key", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const sub = { organizationId: subOrganizationId };
    const lead = h.sdk(sub, key, fastPoller);
    await lead.createInvitations({
      invitations: [invitee("kim@example.com", rootUserIds![0]!), invitee("lee@example.com", rootUserIds![0]!)],
    });
    const kim = await emailedToken("kim@example.com");
    const lee = await emailedToken("lee@example.com");
    expect(kim.raw).toContain("lead invited you to join Team");
    const joined = await accept(kim.token, newKeyPair());
    expect(joined.json).toMatchObject({ organizationId: subOrganizationId, invitationId: expect.any(String) });
    expect((await organizationData(sub, key)).invitations!.map((i: { status: string }) => i.status)).toEqual([
      "INVITATION_STATUS_ACCEPTED",
      "INVITATION_STATUS_CREATED",
    ]);
    await lead.deleteSubOrganization({ organizationId: subOrganizationId, deleteWithoutExport: true });
    await refusedChangingNothing(() => accept(lee.token, newKeyPair()), 404, "INVITATION_NOT_FOUND");
  });
});

describe("without SIGIL_PUBLIC_URL, over the send budget, after the link's lifetime", () => {
  it("an organization has at most 100 pending invitations; revoking one frees room", async () => {
    // No SMTP relay: the 100 emails wait in the local outbox.
    const full = await startHarness({ SIGIL_PUBLIC_URL: PUBLIC_URL, SIGIL_MESSAGE_POLL_MS: "3600000" });
    try {
      const team = await full.organization();
      const sdk = full.sdk(team, team.key, fastPoller);
      const hundred = Array.from({ length: 100 }, (_, i) => invitee(`p${i}@example.com`, team.userId));
      const { invitationIds } = await sdk.createInvitations({ invitations: hundred });
      expect(invitationIds).toHaveLength(100);
      const { failure } = await refusedLeavingOnlyItsActivity(
        full,
        () => sdk.createInvitations({ invitations: [invitee("one-more@example.com", team.userId)] }),
        { message: expect.stringContaining("has 100 pending invitations, and may have at most 100") },
      );
      expect(failure.details[0].turnkeyErrorCode).toBe("INVITATION_LIMIT_REACHED");
      await sdk.deleteInvitation({ invitationId: invitationIds[0]! });
      // A revoked invitation no longer counts; two would again exceed the limit.
      await refusedLeavingOnlyItsActivity(
        full,
        () => sdk.createInvitations({ invitations: [invitee("a@example.com", team.userId), invitee("b@example.com", team.userId)] }),
        { message: expect.stringContaining("has 99 pending invitations") },
      );
      const { invitationIds: more } = await sdk.createInvitations({ invitations: [invitee("one-more@example.com", team.userId)] });
      expect(more).toHaveLength(1);
    } finally {
      await full.close();
    }
  });

  it("refuses to invite when the server has no public URL: nothing is recorded but the failed activity, nothing sent", async () => {
    const bare = await startHarness();
    try {
      const alone = await bare.organization();
      await refusedLeavingOnlyItsActivity(
        bare,
        () => bare.sdk(alone, alone.key).createInvitations({ invitations: [invitee("gina@example.com", alone.userId)] }),
        { message: expect.stringContaining("SIGIL_PUBLIC_URL") },
      );
    } finally {
      await bare.close();
    }
  });

  it("the send budget applies; an expired link is refused, changing nothing; with no SMTP relay the email waits in the local outbox", async () => {
    let now = Date.now();
    // The courier looks at its outbox only when told (a long poll): it must not expire the emails while tables are compared.
    const timed = await startHarness(
      { SIGIL_PUBLIC_URL: PUBLIC_URL, SIGIL_INVITATION_SECONDS: "60", SIGIL_MESSAGE_POLL_MS: "3600000", SIGIL_OTP_PER_CONTACT_LIMIT: "1" },
      { clock: () => now },
    );
    try {
      const team = await timed.organization();
      const sdk = timed.sdk(team, team.key, fastPoller);
      await sdk.createInvitations({ invitations: [invitee("hana@example.com", team.userId), invitee("ivan@example.com", team.userId)] });
      const { keyring } = loadKeyring(timed.config.masterKey);
      const outbox = await readOutbox(timed.server.store, keyring, now);
      expect(outbox.map((m) => m.recipient).sort()).toEqual(["hana@example.com", "ivan@example.com"]);
      // Invitation emails spend the one-time passwords' send budgets: a second to one inbox is refused.
      const { failure } = await refusedLeavingOnlyItsActivity(
        timed,
        () => sdk.createInvitations({ invitations: [invitee("Hana@example.com", team.userId)] }),
        { message: expect.stringContaining("SIGIL_OTP_PER_CONTACT_LIMIT") },
      );
      // The refusal speaks of messages, not of codes: an invitation carries none.
      expect(failure.message).toContain("nothing was sent: this contact's budget of 1 messages per 10 minutes");
      expect(failure.message).not.toMatch(/\bcodes?\b/);
      const tokenFor = (to: string) => LINK.exec(outbox.find((m) => m.recipient === to)!.content.text)![1]!;
      const post = async (token: string, key: ApiKeyPair) => {
        const body = JSON.stringify({ token, apiKey: { apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" } });
        return timed.post("/invitations/accept", body, { "X-Stamp": apiKeyStamp(body, key) });
      };
      // Revoked before it went out, an invitation's email is cancelled: it leaves the outbox, its sealed text erased.
      const { invitationIds } = await sdk.createInvitations({ invitations: [invitee("judy@example.com", team.userId)] });
      expect((await readOutbox(timed.server.store, keyring, now)).map((m) => m.recipient)).toContain("judy@example.com");
      await sdk.deleteInvitation({ invitationId: invitationIds[0]! });
      expect((await readOutbox(timed.server.store, keyring, now)).map((m) => m.recipient)).not.toContain("judy@example.com");
      const cancelled = await timed.server.store.db
        .selectFrom("outbound_messages")
        .select(["status", "sealed_message"])
        .where("recipient", "=", "judy@example.com")
        .execute();
      expect(cancelled).toEqual([{ status: "cancelled", sealed_message: null }]);
      expect((await post(tokenFor("hana@example.com"), newKeyPair())).status).toBe(200);
      now += 61_000;
      const before = await timed.snapshot();
      const late = await post(tokenFor("ivan@example.com"), newKeyPair());
      expect(late.status).toBe(400);
      expect(late.json.details[0].turnkeyErrorCode).toBe("INVITATION_EXPIRED");
      expect(await timed.snapshot()).toBe(before);
      // Past its lifetime the invitation's email is no longer in the outbox either.
      expect(await readOutbox(timed.server.store, keyring, now)).toEqual([]);
    } finally {
      await timed.close();
    }
  });
});
