// Email auth, email recovery and the email delivery history, through the official clients, with a real
// SMTP server (smtp-server) the test runs: the credential bundle is read from the delivered email and
// opened with @turnkey/crypto as a client does. The SMTP server refuses (5xx) or defers (4xx) the
// addresses whose local part says so, so bounces and delays are real SMTP answers.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { generateP256KeyPair } from "@turnkey/crypto";
import { TurnkeyClient } from "@turnkey/http";
import { ApiKeyStamper } from "@turnkey/api-key-stamper";
import { startHarness, newKeyPair, type ApiKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { errorOf, keyFromBundle } from "./helpers/logins.js";
import { SoftwarePasskey } from "./helpers/passkey.js";
import { startSmtp, until, type Refusal, type TestSmtp } from "./helpers/smtp.js";
import { intentText } from "../src/store/activity-intent.js";

let smtp: TestSmtp;
/** Addresses already deferred once (a "defer-" address is refused with 451 the first time only). */
const deferred = new Set<string>();
let h: Harness;
let parent: TestOrganization;
let parentSdk: ReturnType<Harness["sdk"]>;
let offset = 0;
/** The parent's webhook receiver (FEATURE_NAME_WEBHOOK): its sub-organizations' activities arrive here. */
let hook: http.Server;
const hookBodies: string[] = [];

/** "bounce-…" is refused for good (550), "later-…" deferred every time (451), "defer-…" deferred once. */
function refusalFor(address: string): Refusal {
  if (address.startsWith("bounce-")) return { code: 550, text: "5.1.1 mailbox unavailable" };
  if (address.startsWith("later-")) return { code: 451, text: "4.3.0 try again much later" };
  if (address.startsWith("defer-") && !deferred.has(address)) {
    deferred.add(address);
    return { code: 451, text: "4.3.0 try again later" };
  }
  return undefined;
}

beforeAll(async () => {
  smtp = await startSmtp(refusalFor);
  hook = http.createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    request.on("end", () => {
      hookBodies.push(body);
      response.writeHead(200).end();
    });
  });
  await new Promise<void>((resolve) => hook.listen(0, "127.0.0.1", resolve));
  h = await startHarness(
    {
      SIGIL_SMTP_URL: smtp.url,
      SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400",
      SIGIL_MESSAGE_POLL_MS: "50",
      SIGIL_MESSAGE_RETRY_BASE_MS: "20",
      SIGIL_EMAIL_ALLOWED_DOMAINS: "example.com",
      SIGIL_OTP_PER_CONTACT_LIMIT: "3",
      SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
      SIGIL_WEBHOOK_POLL_MS: "50",
    },
    { clock: () => Date.now() + offset },
  );
  parent = await h.organization("App backend");
  parentSdk = h.sdk(parent, parent.key, fastPoller);
  const hookUrl = `http://127.0.0.1:${(hook.address() as AddressInfo).port}/hook`;
  await parentSdk.setOrganizationFeature({ name: "FEATURE_NAME_WEBHOOK", value: hookUrl });
});
afterAll(async () => {
  await h.close();
  await smtp.close();
  await new Promise<void>((resolve) => hook.close(() => resolve()));
});

/** The webhook delivery of the activity of this type in this organization. */
const webhookOf = (type: string, organizationId: string) =>
  until(() => hookBodies.find((body) => body.includes(`"${type}"`) && body.includes(organizationId)), `the ${type} webhook`);

const mails = () => smtp.mails;

/** The credential bundle in the latest email to `to` ("… credential is <bundle>"). */
async function emailedBundle(to: string, after: number): Promise<{ bundle: string; raw: string }> {
  const mail = await until(
    () =>
      mails()
        .slice(after)
        .reverse()
        .find((m) => m.to === to),
    `an email to ${to}`,
  );
  // Quoted-printable soft line breaks removed: the bundle and the link read whole.
  const raw = mail.raw.replace(/=\r?\n/g, "");
  return { bundle: /credential is ([1-9A-HJ-NP-Za-km-z]{40,})/.exec(raw)![1]!, raw };
}

/** Waits until the courier and the webhook dispatcher have finished with everything queued (sent,
 * failed or kept), so a snapshot is not taken while a delivery is changing its row. */
const outboxesIdle = () =>
  until(async () => {
    const db = h.server.store.db;
    const messages = await db.selectFrom("outbound_messages").select("id").where("status", "=", "pending").execute();
    const deliveries = await db.selectFrom("webhook_deliveries").select("id").where("status", "=", "pending").execute();
    return messages.length + deliveries.length === 0 ? true : undefined;
  }, "the courier and the webhook dispatcher to finish");

let counter = 0;
/** A sub-organization (features on by default) whose root user has an email and an API key, and a
 * second user with an email of its own. */
async function endUser(options: { prefix?: string; disable?: Record<string, boolean> } = {}) {
  counter += 1;
  const email = `${options.prefix ?? "user"}${counter}.${Date.now()}@example.com`;
  const device = newKeyPair();
  const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
    subOrganizationName: `end user ${counter}`,
    rootQuorumThreshold: 1,
    rootUsers: [
      {
        userName: `user ${counter}`,
        userEmail: email,
        apiKeys: [{ apiKeyName: "device", publicKey: device.publicKey, curveType: "API_KEY_CURVE_P256" }],
        authenticators: [],
        oauthProviders: [],
      },
    ],
    ...options.disable,
  });
  return { subOrganizationId, userId: rootUserIds![0]!, email, device };
}

/** Runs a refused request and proves that only its failed activity was stored (or, for a request
 * refused before it became an activity, nothing at all), and that no email went out. */
async function refusedSendingNothing(attempt: () => Promise<unknown>, expected: RegExp, activity: "recorded" | "none" = "recorded") {
  await outboxesIdle();
  const before = JSON.parse(await h.snapshot());
  const sent = mails().length;
  const message = await errorOf(attempt());
  expect(message).toMatch(expected);
  await outboxesIdle();
  const after = JSON.parse(await h.snapshot());
  const added = after.activities.filter((row: string) => !before.activities.includes(row)).map((row: string) => JSON.parse(row));
  expect(added).toHaveLength(activity === "recorded" ? 1 : 0);
  if (activity === "recorded") {
    expect(added[0]).toMatchObject({ status: "ACTIVITY_STATUS_FAILED" });
    // The failed activity's own record, its evaluation and its webhook announcement; nothing else.
    after.webhook_deliveries = after.webhook_deliveries.filter((row: string) => JSON.parse(row).activity_id !== added[0].id);
  }
  for (const table of Object.keys(before)) {
    if (activity === "recorded" && (table === "activities" || table === "policy_evaluations")) continue;
    expect(after[table], table).toEqual(before[table]);
  }
  expect(mails().length).toBe(sent);
  return message;
}

const client = (organizationId: string, key: ApiKeyPair) => h.sdk({ organizationId }, key, fastPoller);

describe("email_auth", () => {
  it("emails a credential bundle that @turnkey/crypto opens into an expiring API key of the user", async () => {
    const user = await endUser();
    const target = generateP256KeyPair();
    const before = mails().length;
    const result = await parentSdk.emailAuth({
      organizationId: user.subOrganizationId,
      email: user.email.toUpperCase().replace("@EXAMPLE.COM", "@example.com"),
      targetPublicKey: target.publicKeyUncompressed,
      emailCustomization: { appName: "Demo App", magicLinkTemplate: "https://app.example.com/auth?bundle=%s" },
    });
    expect(result.userId).toBe(user.userId);
    const { bundle, raw } = await emailedBundle(user.email, before);
    expect(raw).toContain("Subject: Demo App sign-in credential");
    expect(raw).toContain(`https://app.example.com/auth?bundle=3D${bundle}`);
    const key = keyFromBundle(bundle, target);
    const asUser = client(user.subOrganizationId, key);
    expect((await asUser.getWhoami({})).userId).toBe(user.userId);
    const { apiKey } = await asUser.getApiKey({ apiKeyId: result.apiKeyId });
    expect(apiKey.apiKeyName).toMatch(/^Email Auth - /);
    expect(apiKey.expirationSeconds).toBe("900");
    // A stamped activity with it: the key is the user's.
    const tag = await asUser.createUserTag({ userTagName: "from email auth", userIds: [] });
    expect(tag.userTagId).toBeTruthy();

    // The bundle is in the email only: not in the audit log, a webhook, a table or a log line.
    expect(await webhookOf("ACTIVITY_TYPE_EMAIL_AUTH_V3", user.subOrganizationId)).toContain(result.apiKeyId);
    expect(hookBodies.join("\n")).not.toContain(bundle);
    await outboxesIdle();
    expect(await h.snapshot()).not.toContain(bundle);
    expect(h.logLines.join("\n")).not.toContain(bundle);
  });

  it("accepts every version the API lists, names the key as asked, and invalidateExisting removes only earlier email-auth keys", async () => {
    const user = await endUser();
    const http = new TurnkeyClient(
      { baseUrl: h.url },
      new ApiKeyStamper({ apiPublicKey: parent.key.publicKey, apiPrivateKey: parent.key.privateKey }),
    );
    const keyIds: string[] = [];
    for (const type of ["ACTIVITY_TYPE_EMAIL_AUTH", "ACTIVITY_TYPE_EMAIL_AUTH_V2", "ACTIVITY_TYPE_EMAIL_AUTH_V3"] as const) {
      const before = mails().length;
      const target = generateP256KeyPair();
      const response = await http.emailAuth({
        type: type as "ACTIVITY_TYPE_EMAIL_AUTH_V3",
        timestampMs: String(Date.now()),
        organizationId: user.subOrganizationId,
        parameters: {
          email: user.email,
          targetPublicKey: target.publicKeyUncompressed,
          apiKeyName: `key ${type}`,
          expirationSeconds: "600",
          emailCustomization: { appName: "Demo" },
          ...(type === "ACTIVITY_TYPE_EMAIL_AUTH_V3" ? { invalidateExisting: true } : {}),
        },
      });
      expect(response.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      const result = response.activity.result.emailAuthResult!;
      keyIds.push(result.apiKeyId);
      const key = keyFromBundle((await emailedBundle(user.email, before)).bundle, target);
      const { apiKey } = await client(user.subOrganizationId, key).getApiKey({ apiKeyId: result.apiKeyId });
      expect(apiKey).toMatchObject({ apiKeyName: `key ${type}`, expirationSeconds: "600" });
    }
    const { apiKeys } = await parentSdk.getApiKeys({ organizationId: user.subOrganizationId, userId: user.userId });
    const ids = apiKeys.map((k) => k.apiKeyId);
    // The V3 request invalidated the two earlier email-auth keys; the device key stays.
    expect(ids).toContain(keyIds[2]);
    expect(ids).not.toContain(keyIds[0]);
    expect(ids).not.toContain(keyIds[1]);
    expect(apiKeys.map((k) => k.apiKeyName)).toContain("device");
  });

  it("is opt-in for a top-level organization (FEATURE_NAME_EMAIL_AUTH) and on by default in sub-organizations", async () => {
    const target = generateP256KeyPair().publicKeyUncompressed;
    const own = await h.organization("Own users");
    const ownSdk = client(own.organizationId, own.key);
    const email = `owner.${Date.now()}@example.com`;
    const { userIds } = await ownSdk.createUsers({
      users: [{ userName: "member", userEmail: email, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
    });
    await refusedSendingNothing(
      () => ownSdk.emailAuth({ email, targetPublicKey: target, emailCustomization: { appName: "Own" } }),
      /FEATURE_NAME_EMAIL_AUTH/,
    );
    await ownSdk.setOrganizationFeature({ name: "FEATURE_NAME_EMAIL_AUTH", value: "" });
    const before = mails().length;
    expect((await ownSdk.emailAuth({ email, targetPublicKey: target, emailCustomization: { appName: "Own" } })).userId).toBe(userIds[0]);
    await emailedBundle(email, before);

    const optedOut = await endUser({ disable: { disableEmailAuth: true } });
    await refusedSendingNothing(
      () =>
        parentSdk.emailAuth({
          organizationId: optedOut.subOrganizationId,
          email: optedOut.email,
          targetPublicKey: target,
          emailCustomization: { appName: "Demo" },
        }),
      /email auth is not enabled/,
    );
  });

  it("makes a root user known by email alone reachable with email codes off: the sub-organization can be created and its root logs in", async () => {
    const email = `email.only.${Date.now()}@example.com`;
    const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
      subOrganizationName: "email only",
      rootQuorumThreshold: 1,
      rootUsers: [{ userName: "by email", userEmail: email, apiKeys: [], authenticators: [], oauthProviders: [] }],
      disableOtpEmailAuth: true,
    });
    const target = generateP256KeyPair();
    const before = mails().length;
    await parentSdk.emailAuth({
      organizationId: subOrganizationId,
      email,
      targetPublicKey: target.publicKeyUncompressed,
      emailCustomization: { appName: "D" },
    });
    const key = keyFromBundle((await emailedBundle(email, before)).bundle, target);
    expect((await client(subOrganizationId, key).getWhoami({})).userId).toBe(rootUserIds![0]);
  });

  it("refuses bad input with a clear error, changing nothing and sending nothing", async () => {
    const user = await endUser();
    const other = await endUser();
    const target = generateP256KeyPair().publicKeyUncompressed;
    const base = {
      organizationId: user.subOrganizationId,
      email: user.email,
      targetPublicKey: target,
      emailCustomization: { appName: "Demo" },
    };
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ email: `nobody.${Date.now()}@example.com` }, /USER_NOT_FOUND|no user of organization/],
      [{ email: other.email }, /no user of organization/],
      [{ email: "not an email" }, /email must be an email address/],
      [{ email: "" }, /email must be an email address/],
      [{ targetPublicKey: "04abcd" }, /targetPublicKey/],
      [{ targetPublicKey: "" }, /targetPublicKey/],
      [{ expirationSeconds: "0" }, /expirationSeconds must be a whole number/],
      [{ apiKeyName: "k".repeat(257) }, /apiKeyName must be at most 256 characters/],
      [{ email: `${"a".repeat(320)}@example.com` }, /email must be an email address/],
      [{ expirationSeconds: "99999999" }, /SIGIL_SESSION_MAX_SECONDS/],
      [{ emailCustomization: { appName: "Demo", logoUrl: "https://evil.test/logo.png" } }, /SIGIL_EMAIL_ALLOWED_DOMAINS/],
      [{ emailCustomization: { appName: "Demo", magicLinkTemplate: "https://evil.test/%s" } }, /not among the operator's email domains/],
      [{ sendFromEmailAddress: "ceo@evil.test" }, /sendFromEmailAddress points to evil.test/],
      [{ replyToEmailAddress: "ceo@evil.test" }, /replyToEmailAddress points to evil.test/],
      [{ emailCustomization: { appName: "x".repeat(65) } }, /appName must be at most 64 characters/],
      [{ emailCustomization: { appName: "Demo", templateId: "t1" } }, /no stored email templates/],
    ];
    for (const [change, expected] of cases) {
      await refusedSendingNothing(() => parentSdk.emailAuth({ ...base, ...change } as never), expected);
    }
    // Refused before they become activities: nothing at all is stored.
    const missing = { ...base, email: undefined } as never;
    await refusedSendingNothing(() => parentSdk.emailAuth(missing), /email/, "none");
    const wrongType = { ...base, invalidateExisting: "yes" } as never;
    await refusedSendingNothing(() => parentSdk.emailAuth(wrongType), /invalidateExisting/, "none");
    // Another organization's user, named in a sibling's organization with the sibling's own key.
    await refusedSendingNothing(
      () => client(other.subOrganizationId, other.device).emailAuth({ ...base, organizationId: user.subOrganizationId }),
      /does not belong to organization/,
      "none",
    );
  });

  it("lets an end user ask for itself without customizing, and counts every email against the contact's budget", async () => {
    const user = await endUser();
    const self = client(user.subOrganizationId, user.device);
    const target = generateP256KeyPair().publicKeyUncompressed;
    await refusedSendingNothing(
      () =>
        self.emailAuth({
          email: user.email,
          targetPublicKey: target,
          emailCustomization: { appName: "Demo", logoUrl: "https://example.com/logo.png" },
        }),
      /may not customize the message/,
    );
    await self.emailAuth({ email: user.email, targetPublicKey: target, emailCustomization: { appName: "Demo" } });
    // SIGIL_OTP_PER_CONTACT_LIMIT is 3 here: the parent's backend may send this contact 3 in ten minutes.
    const request = {
      organizationId: user.subOrganizationId,
      email: user.email,
      targetPublicKey: target,
      emailCustomization: { appName: "Demo" },
    };
    await parentSdk.emailAuth(request);
    await parentSdk.initUserEmailRecovery(request);
    await parentSdk.emailAuth(request);
    await refusedSendingNothing(() => parentSdk.emailAuth(request), /OTP_RATE_LIMITED|budget/);
    await refusedSendingNothing(() => parentSdk.initUserEmailRecovery(request), /budget/);
  });

  it("is AUTH/CREATE for policies: a parent's user may run it only where a policy allows", async () => {
    const user = await endUser();
    const memberKey = newKeyPair();
    const { userIds } = await parentSdk.createUsers({
      users: [
        {
          userName: "backend job",
          apiKeys: [{ apiKeyName: "job", publicKey: memberKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    const member = client(parent.organizationId, memberKey);
    const request = {
      organizationId: user.subOrganizationId,
      email: user.email,
      targetPublicKey: generateP256KeyPair().publicKeyUncompressed,
      emailCustomization: { appName: "Demo" },
    };
    await refusedSendingNothing(() => member.emailAuth(request), /denied|DENY|not allowed/i);
    const { policyId } = await parentSdk.createPolicy({
      policyName: "email logins",
      notes: "",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${userIds[0]}')`,
      condition: `activity.resource == 'AUTH' && activity.action == 'CREATE' && activity.organization_id == '${user.subOrganizationId}'`,
    });
    expect((await member.emailAuth(request)).userId).toBe(user.userId);
    // AUTH is not RECOVERY.
    await refusedSendingNothing(() => member.initUserEmailRecovery(request), /denied|DENY|not allowed/i);
    await parentSdk.deletePolicy({ policyId });
    const recovery = await parentSdk.createPolicy({
      policyName: "email recovery",
      notes: "",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(user, user.id == '${userIds[0]}')`,
      condition: "activity.resource == 'RECOVERY' && activity.action == 'CREATE'",
    });
    expect((await member.initUserEmailRecovery(request)).userId).toBe(user.userId);
    await refusedSendingNothing(() => member.emailAuth(request), /denied|DENY|not allowed/i);
    await parentSdk.deletePolicy({ policyId: recovery.policyId });
  });
});

describe("init_user_email_recovery → recover_user", () => {
  async function startRecovery(user: Awaited<ReturnType<typeof endUser>>, expirationSeconds?: string) {
    const target = generateP256KeyPair();
    const before = mails().length;
    const result = await parentSdk.initUserEmailRecovery({
      organizationId: user.subOrganizationId,
      email: user.email,
      targetPublicKey: target.publicKeyUncompressed,
      ...(expirationSeconds ? { expirationSeconds } : {}),
      emailCustomization: { appName: "Demo" },
    });
    expect(result.userId).toBe(user.userId);
    const { bundle, raw } = await emailedBundle(user.email, before);
    expect(raw).toContain("Subject: Demo recovery credential");
    return { key: keyFromBundle(bundle, target), bundle };
  }

  const recoverWith = (user: { subOrganizationId: string }, key: ApiKeyPair, userId: string, passkey = new SoftwarePasskey()) => {
    const registration = passkey.register();
    return client(user.subOrganizationId, key).recoverUser({
      userId,
      authenticator: { authenticatorName: "new phone", challenge: registration.challenge, attestation: registration.attestation as never },
    });
  };

  it("emails a recovery credential that registers a new passkey for its user; the user's other credentials stay", async () => {
    const user = await endUser();
    const { key, bundle } = await startRecovery(user);
    const passkey = new SoftwarePasskey();
    const { authenticatorId } = await recoverWith(user, key, user.userId, passkey);
    expect(authenticatorId).toHaveLength(1);
    const { user: recovered } = await parentSdk.getUser({ organizationId: user.subOrganizationId, userId: user.userId });
    expect(recovered.authenticators.map((a) => a.authenticatorId)).toEqual(authenticatorId);
    expect(recovered.authenticators[0]!.credential.publicKey).toBe(passkey.publicKeyCompressedHex());
    // The device key is still there; the recovery credential is spent.
    expect(recovered.apiKeys.map((k) => k.apiKeyName)).toEqual(["device"]);
    expect(await errorOf(recoverWith(user, key, user.userId))).toMatch(/no API key with public key|no longer exists/);
    await webhookOf("ACTIVITY_TYPE_INIT_USER_EMAIL_RECOVERY_V2", user.subOrganizationId);
    await webhookOf("ACTIVITY_TYPE_RECOVER_USER", user.subOrganizationId);
    expect(hookBodies.join("\n")).not.toContain(bundle);
    await outboxesIdle();
    expect(await h.snapshot()).not.toContain(bundle);
    expect(h.logLines.join("\n")).not.toContain(bundle);
  });

  it("is single-purpose: the recovery credential may not query, vote or request anything but recover_user", async () => {
    const user = await endUser();
    const { key } = await startRecovery(user);
    const asRecovery = client(user.subOrganizationId, key);
    await refusedSendingNothing(() => asRecovery.getWhoami({}), /recovery credential: it may only request recover_user/, "none");
    await refusedSendingNothing(
      () =>
        asRecovery.createApiKeys({
          userId: user.userId,
          apiKeys: [{ apiKeyName: "mine", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
        }),
      /RECOVERY_CREDENTIAL_RESTRICTED|may only request recover_user/,
      "none",
    );
    await refusedSendingNothing(() => asRecovery.createReadOnlySession({}), /may only request recover_user/, "none");
    await refusedSendingNothing(
      () => asRecovery.stampLogin({ publicKey: newKeyPair().publicKey }),
      /may only request recover_user/,
      "none",
    );
    await refusedSendingNothing(() => asRecovery.approveActivity({ fingerprint: "sha256:none" }), /may only request recover_user/, "none");
    // And recover_user needs a recovery credential: the user's own device key is not one.
    await refusedSendingNothing(() => recoverWith(user, user.device, user.userId), /must be stamped with the recovery credential/);
  });

  it("cannot recover another user, and a bad attestation leaves the credential unspent", async () => {
    const user = await endUser();
    const colleagueEmail = `colleague.${Date.now()}@example.com`;
    const self = client(user.subOrganizationId, user.device);
    const { userIds } = await self.createUsers({
      users: [{ userName: "colleague", userEmail: colleagueEmail, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
    });
    const colleague = { ...user, email: colleagueEmail, userId: userIds[0]! };
    // The colleague's credential for the root user: adding the root's credentials needs a policy.
    const { key: colleagueKey } = await startRecovery(colleague);
    await refusedSendingNothing(() => recoverWith(user, colleagueKey, user.userId), /is not allowed/);
    // The root user's credential (the root quorum) for the colleague, or for nobody: not its user.
    const { key } = await startRecovery(user);
    await refusedSendingNothing(() => recoverWith(user, key, colleague.userId), /belongs to another user/);
    await refusedSendingNothing(() => recoverWith(user, key, "00000000-0000-0000-0000-000000000000"), /belongs to another user/);
    const registration = new SoftwarePasskey().register();
    await refusedSendingNothing(
      () =>
        client(user.subOrganizationId, key).recoverUser({
          userId: user.userId,
          authenticator: {
            authenticatorName: "phone",
            challenge: registration.challenge,
            attestation: { ...registration.attestation, clientDataJson: Buffer.from("{}").toString("base64url") } as never,
          },
        }),
      /attestation|clientData|PASSKEY|registration/i,
    );
    const unnamed = new SoftwarePasskey().register();
    await refusedSendingNothing(
      () =>
        client(user.subOrganizationId, key).recoverUser({
          userId: user.userId,
          authenticator: { authenticatorName: " ", challenge: unnamed.challenge, attestation: unnamed.attestation as never },
        }),
      /authenticatorName must not be empty/,
    );
    const { authenticatorId } = await recoverWith(user, key, user.userId);
    expect(authenticatorId).toHaveLength(1);
  });

  it("is CREDENTIAL/CREATE for policies: a user recovers itself unless a policy of its organization denies that", async () => {
    const user = await endUser();
    const memberEmail = `member.${Date.now()}@example.com`;
    const self = client(user.subOrganizationId, user.device);
    const { userIds } = await self.createUsers({
      users: [{ userName: "member", userEmail: memberEmail, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
    });
    const member = { ...user, email: memberEmail, userId: userIds[0]! };
    const { policyId } = await self.createPolicy({
      policyName: "no new credentials",
      notes: "",
      effect: "EFFECT_DENY",
      condition: "activity.resource == 'CREDENTIAL' && activity.action == 'CREATE'",
    });
    const { key } = await startRecovery(member);
    await refusedSendingNothing(() => recoverWith(member, key, member.userId), /is not allowed|DENY/);
    await self.deletePolicy({ policyId });
    expect((await recoverWith(member, key, member.userId)).authenticatorId).toHaveLength(1);
  });

  it("expires, and a newer recovery email replaces the earlier credential", async () => {
    const user = await endUser();
    const first = await startRecovery(user, "60");
    const second = await startRecovery(user, "60");
    expect(await errorOf(recoverWith(user, first.key, user.userId))).toMatch(/no API key with public key/);
    offset += 61_000;
    try {
      expect(await errorOf(recoverWith(user, second.key, user.userId))).toMatch(/has expired/);
    } finally {
      offset -= 61_000;
    }
  });

  it("is RECOVERY/CREATE, opt-in for a top-level organization and refused where a sub-organization opted out", async () => {
    const optedOut = await endUser({ disable: { disableEmailRecovery: true } });
    const request = {
      organizationId: optedOut.subOrganizationId,
      email: optedOut.email,
      targetPublicKey: generateP256KeyPair().publicKeyUncompressed,
      emailCustomization: { appName: "Demo" },
    };
    await refusedSendingNothing(() => parentSdk.initUserEmailRecovery(request), /FEATURE_NAME_EMAIL_RECOVERY/);
    await refusedSendingNothing(() => parentSdk.initUserEmailRecovery({ ...request, email: "bad" }), /email must be an email address/);
    // Both refusals are recorded (in no particular order: they may share a millisecond).
    const activities = await h.server.store.db
      .selectFrom("activities")
      .select(["type", "intent", "votes"])
      .where("organization_id", "=", optedOut.subOrganizationId)
      .where("type", "=", "ACTIVITY_TYPE_INIT_USER_EMAIL_RECOVERY_V2")
      .execute();
    expect(activities.map((a) => JSON.parse(intentText(a)).email).sort()).toEqual([optedOut.email, "bad"].sort());
    const own = await h.organization("Own recovery");
    const ownSdk = client(own.organizationId, own.key);
    const email = `own.${Date.now()}@example.com`;
    await ownSdk.createUsers({
      users: [{ userName: "m", userEmail: email, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
    });
    const ownRequest = { email, targetPublicKey: request.targetPublicKey, emailCustomization: { appName: "Own" } };
    await refusedSendingNothing(() => ownSdk.initUserEmailRecovery(ownRequest), /FEATURE_NAME_EMAIL_RECOVERY/);
    await ownSdk.setOrganizationFeature({ name: "FEATURE_NAME_EMAIL_RECOVERY", value: "" });
    const sentBefore = mails().length;
    expect((await ownSdk.initUserEmailRecovery(ownRequest)).userId).toBeTruthy();
    expect((await emailedBundle(email, sentBefore)).raw).toContain("Subject: Own recovery credential");
    // V1, whose emailCustomization is optional, as @turnkey/http sends it when told to.
    const http = new TurnkeyClient(
      { baseUrl: h.url },
      new ApiKeyStamper({ apiPublicKey: own.key.publicKey, apiPrivateKey: own.key.privateKey }),
    );
    const before = mails().length;
    const v1 = await http.initUserEmailRecovery({
      type: "ACTIVITY_TYPE_INIT_USER_EMAIL_RECOVERY" as "ACTIVITY_TYPE_INIT_USER_EMAIL_RECOVERY_V2",
      timestampMs: String(Date.now()),
      organizationId: own.organizationId,
      parameters: { email, targetPublicKey: request.targetPublicKey } as never,
    });
    expect(v1.activity).toMatchObject({ status: "ACTIVITY_STATUS_COMPLETED", type: "ACTIVITY_TYPE_INIT_USER_EMAIL_RECOVERY" });
    expect(v1.activity.result.initUserEmailRecoveryResult?.userId).toBeTruthy();
    expect((await emailedBundle(email, before)).raw).toContain("Subject: recovery credential");
  });
});

describe("list_email_events", () => {
  const events = (organizationId: string, email: string, extra: Record<string, unknown> = {}) =>
    parentSdk.listEmailEvents({ organizationId, email, ...extra } as never);

  async function settledEvents(organizationId: string, email: string, last: string) {
    return until(async () => {
      const { emailEvents } = await events(organizationId, email);
      return emailEvents[0]?.eventType === last ? emailEvents : undefined;
    }, `a ${last} event for ${email}`);
  }

  it("records Send and Delivery with the SMTP server's answer, newest first, for the organization only", async () => {
    const user = await endUser();
    const target = generateP256KeyPair().publicKeyUncompressed;
    await parentSdk.emailAuth({
      organizationId: user.subOrganizationId,
      email: user.email,
      targetPublicKey: target,
      emailCustomization: { appName: "D" },
    });
    const list = await settledEvents(user.subOrganizationId, user.email.toUpperCase(), "Delivery");
    expect(list.map((e) => e.eventType)).toEqual(["Delivery", "Send"]);
    const [delivery, send] = list;
    expect(delivery).toMatchObject({ organizationId: user.subOrganizationId, toAddress: user.email, messageId: send!.messageId });
    expect(delivery!.details.deliverySmtpResponse).toMatch(/^250 /);
    expect(Number(delivery!.details.deliveryProcessingTimeMillis)).toBeGreaterThanOrEqual(0);
    expect(delivery!.fromAddress).toContain("@");
    expect(Number(send!.timestamp)).toBeLessThanOrEqual(Number(delivery!.timestamp));
    // The parent's own organization sent nothing to that address; a sibling cannot read it.
    expect((await events(parent.organizationId, user.email)).emailEvents).toEqual([]);
    const sibling = await endUser();
    expect(
      await errorOf(
        client(sibling.subOrganizationId, sibling.device).listEmailEvents({ organizationId: user.subOrganizationId, email: user.email }),
      ),
    ).toMatch(/does not belong to organization/);
  });

  it("records a Bounce on a permanent refusal (5xx) and a DeliveryDelay on a deferral (4xx) before the delivery", async () => {
    const bounced = await endUser({ prefix: "bounce-" });
    const delayed = await endUser({ prefix: "defer-" });
    const target = generateP256KeyPair().publicKeyUncompressed;
    for (const user of [bounced, delayed])
      await parentSdk.emailAuth({
        organizationId: user.subOrganizationId,
        email: user.email,
        targetPublicKey: target,
        emailCustomization: { appName: "D" },
      });

    const bounce = await settledEvents(bounced.subOrganizationId, bounced.email, "Bounce");
    expect(bounce.map((e) => e.eventType)).toEqual(["Bounce", "Send"]);
    expect(bounce[0]!.details).toMatchObject({ bounceType: "Permanent", bounceSubType: "General" });
    expect(bounce[0]!.details.diagnosticCode).toMatch(/^550 .*mailbox unavailable/);
    const message = await h.server.store.db
      .selectFrom("outbound_messages")
      .selectAll()
      .where("recipient", "=", bounced.email)
      .executeTakeFirstOrThrow();
    expect(message).toMatchObject({ status: "failed", attempts: 1, sealed_message: null });

    const delay = await settledEvents(delayed.subOrganizationId, delayed.email, "Delivery");
    expect(delay.map((e) => e.eventType)).toEqual(["Delivery", "DeliveryDelay", "Send"]);
    expect(delay[1]!.details).toMatchObject({ deliveryDelayType: "RecipientServerError" });
    expect(delay[1]!.details.diagnosticCode).toMatch(/^451 .*try again later/);

    // Deferred until it is given up: a transient Bounce closes its history.
    const givenUp = await endUser({ prefix: "later-" });
    await parentSdk.emailAuth({
      organizationId: givenUp.subOrganizationId,
      email: givenUp.email,
      targetPublicKey: target,
      expirationSeconds: "1",
      emailCustomization: { appName: "D" },
    });
    const abandoned = await settledEvents(givenUp.subOrganizationId, givenUp.email, "Bounce");
    expect(abandoned.at(-1)!.eventType).toBe("Send");
    expect(abandoned.slice(1, -1).every((e) => e.eventType === "DeliveryDelay")).toBe(true);
    expect(abandoned[0]!.details).toMatchObject({ bounceType: "Transient", diagnosticCode: expect.stringMatching(/^451 /) });

    // The filter by type, and paging one at a time.
    const onlyDelays = await events(delayed.subOrganizationId, delayed.email, { eventType: "DeliveryDelay" });
    expect(onlyDelays.emailEvents.map((e) => e.id)).toEqual([delay[1]!.id]);
    const first = await events(delayed.subOrganizationId, delayed.email, { paginationOptions: { limit: "1" } });
    expect(first.emailEvents.map((e) => e.id)).toEqual([delay[0]!.id]);
    const next = await events(delayed.subOrganizationId, delayed.email, { paginationOptions: { limit: "2", after: delay[0]!.id } });
    expect(next.emailEvents.map((e) => e.id)).toEqual([delay[1]!.id, delay[2]!.id]);
    const back = await events(delayed.subOrganizationId, delayed.email, { paginationOptions: { before: delay[2]!.id } });
    expect(back.emailEvents.map((e) => e.id)).toEqual([delay[0]!.id, delay[1]!.id]);

    // Bad inputs.
    await outboxesIdle();
    const before = await h.snapshot();
    expect(await errorOf(events(delayed.subOrganizationId, delayed.email, { eventType: "Opened" }))).toMatch(/eventType must be one of/);
    expect(await errorOf(events(delayed.subOrganizationId, ""))).toMatch(/email must be/);
    expect(await errorOf(events(delayed.subOrganizationId, delayed.email, { paginationOptions: { limit: "0" } }))).toMatch(/limit/);
    expect(await errorOf(events(delayed.subOrganizationId, delayed.email, { paginationOptions: { after: bounce[0]!.id } }))).toMatch(
      /not an email event of this organization/,
    );
    expect(await errorOf(events(delayed.subOrganizationId, delayed.email, { unknown: 1 }))).toMatch(/unknown/);
    expect(await h.snapshot()).toBe(before);
  });
});
