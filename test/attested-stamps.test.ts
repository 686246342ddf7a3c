// Attested stamps (X-Stamp-Attested) proving MFA steps, through the official clients: @turnkey/core's
// AttestedStamper (a fresh P-256 key, vouched for by a verification token from init_otp/verify_otp or
// by an OIDC token whose nonce is sha256 of the key) drives @turnkey/sdk-server's TurnkeyApiClient. An
// activity of a user whose MFA policy asks for [API_KEY] + [EMAIL_OTP] (or + [OAUTH]) waits, and the
// user's approval with the attested stamp runs it. Every bad stamp is refused and changes nothing
// (full-table snapshot), and the tokens never reach the log or an activity record.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ApiKeyStamper } from "@turnkey/api-key-stamper";
import { encryptOtpCodeToBundle } from "@turnkey/crypto";
import { TurnkeyApiClient } from "@turnkey/sdk-server";
import crypto from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";
// The stamper @turnkey/core's client uses for attested stamps (not exported from its index).
import { AttestedScheme, AttestedStamper } from "@turnkey/core/dist/__stampers__/attested/base.js";
import { newKeyPair, signerPublicKeyOf, startHarness, type ApiKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { startSmtp, until, type TestSmtp } from "./helpers/smtp.js";
import { startOidcIssuer, type TestIssuer } from "./helpers/oidc-issuer.js";
import { fromAddress } from "./helpers/source-address.js";

let h: Harness;
let smtp: TestSmtp;
let oidc: TestIssuer;
let parent: TestOrganization;
let parentSdk: ReturnType<Harness["sdk"]>;
let signerPublicKey: string;
let offset = 0;
let smsServer: http.Server;
const texts: Array<{ to: string; body: string }> = [];

beforeAll(async () => {
  smtp = await startSmtp();
  oidc = await startOidcIssuer();
  smsServer = http.createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    request.on("end", () => {
      texts.push(JSON.parse(body) as { to: string; body: string });
      response.writeHead(202).end();
    });
  });
  await new Promise<void>((resolve) => smsServer.listen(0, "127.0.0.1", resolve));
  h = await startHarness(
    {
      SIGIL_SMTP_URL: smtp.url,
      SIGIL_SMS_URL: `http://127.0.0.1:${(smsServer.address() as AddressInfo).port}/sms`,
      SIGIL_MESSAGE_POLL_MS: "50",
      SIGIL_EMAIL_ALLOWED_DOMAINS: "example.com",
      SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400",
      SIGIL_OIDC_ALLOWED_ISSUERS: oidc.issuer,
    },
    { clock: () => Date.now() + offset },
  );
  parent = await h.organization("App backend");
  parentSdk = h.sdk(parent, parent.key, fastPoller);
  await parentSdk.setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
  await parentSdk.setOrganizationFeature({ name: "FEATURE_NAME_SMS_AUTH", value: "" });
  signerPublicKey = await signerPublicKeyOf(h.url);
});
afterAll(async () => {
  await h?.close();
  await smtp?.close();
  await oidc?.close();
  await new Promise<void>((resolve) => (smsServer ? smsServer.close(() => resolve()) : resolve()));
});

const API_KEY = { any: [{ type: "AUTHENTICATION_TYPE_API_KEY" as const }] };
const CREATE_USER_TAG = "activity.type == 'ACTIVITY_TYPE_CREATE_USER_TAG'";
const nonceOf = (publicKey: string) => crypto.createHash("sha256").update(publicKey).digest("hex");

let counter = 0;
/** A sub-organization whose root user has an email, an OAuth identity and an API key, and an MFA
 * policy asking user-tag creations for that API key and `second`; and a tag creation left waiting. */
async function waitingUser(second: (providerId: string) => { any: Array<{ type: any; id?: string }> }, verified = true) {
  counter += 1;
  const email = `mfa${counter}.${Date.now()}@example.com`;
  const phone = `+1555${String(Date.now()).slice(-6)}${counter % 10}`;
  const subject = `oidc-user-${counter}-${Date.now()}`;
  const key = newKeyPair();
  const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
    subOrganizationName: `mfa ${counter}`,
    rootQuorumThreshold: 1,
    rootUsers: [
      {
        userName: `mfa ${counter}`,
        userEmail: email,
        userPhoneNumber: phone,
        apiKeys: [{ apiKeyName: "device", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
        authenticators: [],
        oauthProviders: [],
      },
    ],
  });
  const userId = rootUserIds![0]!;
  const own = h.sdk({ organizationId: subOrganizationId }, key, fastPoller);
  // The user proves the email is theirs (a token bound to their own key): only a verified contact vouches.
  if (verified) {
    await own.updateUserEmail({ userId, userEmail: email, verificationToken: await verificationToken(email, key) });
    await own.updateUserPhoneNumber({ userId, userPhoneNumber: phone, verificationToken: await smsVerificationToken(phone, key) });
  }
  const {
    providerIds: [providerId],
  } = await own.createOauthProviders({
    userId,
    oauthProviders: [{ providerName: "Google", oidcToken: await oidc.token({ sub: subject }) }],
  });
  const { mfaPolicyId } = await own.createMfaPolicy({
    userId,
    mfaPolicyName: "tags need a second factor",
    condition: CREATE_USER_TAG,
    requiredAuthenticationMethods: [API_KEY, second(providerId!)],
    order: 0,
  });
  const waiting = await own.createUserTag({ userTagName: "guarded", userIds: [] });
  expect(waiting.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
  return { subOrganizationId, userId, email, phone, subject, providerId: providerId!, mfaPolicyId, key, own, waiting: waiting.activity };
}

/** init_otp → verify_otp for `email`, the code read from the delivered email: a verification token bound to `clientKey`. */
async function verificationToken(email: string, clientKey: ApiKeyPair, expirationSeconds?: string, backend = parentSdk): Promise<string> {
  const before = smtp.mails.length;
  const { otpId, otpEncryptionTargetBundle } = await backend.initOtp({ otpType: "OTP_TYPE_EMAIL", contact: email, appName: "Demo" });
  const mail = await until(() => smtp.mails.slice(before).find((m) => m.to === email), `an email to ${email}`);
  const code = /verification code is ([0-9A-Z]{6,9})/.exec(mail.raw.replace(/=\r?\n/g, ""))![1]!;
  const encryptedOtpBundle = await encryptOtpCodeToBundle(code, otpEncryptionTargetBundle, clientKey.publicKey, signerPublicKey);
  return (await backend.verifyOtp({ otpId, encryptedOtpBundle, ...(expirationSeconds ? { expirationSeconds } : {}) })).verificationToken;
}

/** The same by text message: the code read from what the SMS endpoint received. */
async function smsVerificationToken(phone: string, clientKey: ApiKeyPair): Promise<string> {
  const before = texts.length;
  const { otpId, otpEncryptionTargetBundle } = await parentSdk.initOtp({
    otpType: "OTP_TYPE_SMS",
    contact: phone,
    appName: "Demo",
    smsCustomization: { template: "Demo code: {{.OtpCode}}" },
  });
  const text = await until(() => texts.slice(before).find((t) => t.to === phone), `a text to ${phone}`);
  const code = /Demo code: ([0-9A-Z]{6,9})$/.exec(text.body)![1]!;
  const encryptedOtpBundle = await encryptOtpCodeToBundle(code, otpEncryptionTargetBundle, clientKey.publicKey, signerPublicKey);
  return (await parentSdk.verifyOtp({ otpId, encryptedOtpBundle })).verificationToken;
}

/** A client of `organizationId` stamping with an AttestedStamper: `signer` signs, `publicKey` is the key the stamp names. */
function attestedClient(
  organizationId: string,
  config: { attestedIdentity: string; publicKey: string; scheme: string },
  signer: ApiKeyPair,
) {
  const stamper = new AttestedStamper(new ApiKeyStamper({ apiPublicKey: signer.publicKey, apiPrivateKey: signer.privateKey }) as any);
  stamper.configure(config as Parameters<AttestedStamper["configure"]>[0]);
  return new TurnkeyApiClient({ stamper, apiBaseUrl: h.url, organizationId, activityPoller: fastPoller.activityPoller });
}

/** The request fails with `code` (gRPC) and a message holding `text`, and no table changed. */
async function refusedChangingNothing(attempt: () => Promise<unknown>, code: number, text: string) {
  const before = await h.snapshot();
  await expect(attempt()).rejects.toMatchObject({ code, message: expect.stringContaining(text) });
  expect(await h.snapshot()).toBe(before);
}

describe("an attested stamp proves an MFA step", () => {
  it("EMAIL_OTP: the verification token bound to the client key, the approval runs the waiting activity", async () => {
    const user = await waitingUser(() => ({ any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP" }] }));
    const clientKey = newKeyPair();
    const token = await verificationToken(user.email, clientKey);
    const client = attestedClient(
      user.subOrganizationId,
      { attestedIdentity: token, publicKey: clientKey.publicKey, scheme: AttestedScheme.P256_VERIFICATION_TOKEN },
      clientKey,
    );
    const done = await client.approveActivity({ fingerprint: user.waiting.fingerprint });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect((await user.own.listUserTags({})).userTags.map((t) => t.tagName)).toEqual(["guarded"]);
    const { mfaStatuses } = await user.own.getMfaStatus({ activityId: user.waiting.id });
    expect(mfaStatuses).toMatchObject([{ mfaPolicyId: user.mfaPolicyId, userId: user.userId, satisfied: true }]);
    expect(mfaStatuses[0].satisfiedMethods).toEqual([
      { type: "AUTHENTICATION_TYPE_API_KEY", id: expect.any(String) },
      { type: "AUTHENTICATION_TYPE_EMAIL_OTP" },
    ]);
    // The token was looked at, not spent: otp_login could still use it.
    const rows = await h.server.store.db
      .selectFrom("verification_tokens")
      .select("used_at")
      .where("public_key", "=", clientKey.publicKey)
      .execute();
    expect(rows.map((r) => r.used_at)).toEqual([null]);
    // The token is a bearer credential: neither the log nor any activity record holds it.
    expect(h.logLines.join("\n")).not.toContain(token);
    expect(JSON.stringify(await h.server.store.db.selectFrom("activities").selectAll().execute())).not.toContain(token);
    expect(JSON.stringify(await h.server.store.db.selectFrom("activity_authentications").selectAll().execute())).not.toContain(token);
  });

  it("SMS_OTP: a verification token for the user's phone number, in a step beside a passkey method", async () => {
    const user = await waitingUser(() => ({ any: [{ type: "AUTHENTICATION_TYPE_PASSKEY" }, { type: "AUTHENTICATION_TYPE_SMS_OTP" }] }));
    const clientKey = newKeyPair();
    const token = await smsVerificationToken(user.phone, clientKey);
    const client = attestedClient(
      user.subOrganizationId,
      { attestedIdentity: token, publicKey: clientKey.publicKey, scheme: AttestedScheme.P256_VERIFICATION_TOKEN },
      clientKey,
    );
    const done = await client.approveActivity({ fingerprint: user.waiting.fingerprint });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const { mfaStatuses } = await user.own.getMfaStatus({ activityId: user.waiting.id });
    expect(mfaStatuses[0].satisfiedMethods).toEqual([
      { type: "AUTHENTICATION_TYPE_API_KEY", id: expect.any(String) },
      { type: "AUTHENTICATION_TYPE_SMS_OTP" },
    ]);
  });

  it("OAUTH: an OIDC token whose nonce is sha256 of the client key, for the provider the method names", async () => {
    const user = await waitingUser((providerId) => ({ any: [{ type: "AUTHENTICATION_TYPE_OAUTH", id: providerId }] }));
    const clientKey = newKeyPair();
    const token = await oidc.token({ sub: user.subject, nonce: nonceOf(clientKey.publicKey) });
    const client = attestedClient(
      user.subOrganizationId,
      { attestedIdentity: token, publicKey: clientKey.publicKey, scheme: AttestedScheme.P256_OIDC },
      clientKey,
    );
    const done = await client.approveActivity({ fingerprint: user.waiting.fingerprint });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const { mfaStatuses } = await user.own.getMfaStatus({ activityId: user.waiting.id });
    expect(mfaStatuses[0].satisfiedMethods).toEqual([
      { type: "AUTHENTICATION_TYPE_API_KEY", id: expect.any(String) },
      { type: "AUTHENTICATION_TYPE_OAUTH", id: user.providerId },
    ]);
    expect(h.logLines.join("\n")).not.toContain(token);
    expect(JSON.stringify(await h.server.store.db.selectFrom("activities").selectAll().execute())).not.toContain(token);
  });
});

describe("another user holding the requester's email or phone number", () => {
  const METHODS = {
    EMAIL: "AUTHENTICATION_TYPE_EMAIL_OTP",
    SMS: "AUTHENTICATION_TYPE_SMS_OTP",
  } as const;
  const tokenFor = (kind: keyof typeof METHODS, user: { email: string; phone: string }, key: ApiKeyPair) =>
    kind === "EMAIL" ? verificationToken(user.email, key) : smsVerificationToken(user.phone, key);

  it.each(["EMAIL", "SMS"] as const)(
    "%s: unverified, given by a user who may only create users, does not make the requester's proof ambiguous",
    async (kind) => {
      const user = await waitingUser(() => ({ any: [{ type: METHODS[kind] }] }));
      // A helpdesk user whom a policy lets create users, and nothing else.
      const helpdeskKey = newKeyPair();
      const {
        userIds: [helpdeskId],
      } = await user.own.createUsers({
        users: [
          {
            userName: "helpdesk",
            apiKeys: [{ apiKeyName: "helpdesk", publicKey: helpdeskKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
            authenticators: [],
            oauthProviders: [],
            userTags: [],
          },
        ],
      });
      await user.own.createPolicy({
        policyName: "helpdesk creates users",
        effect: "EFFECT_ALLOW",
        condition: "activity.resource == 'USER' && activity.action == 'CREATE'",
        consensus: `approvers.any(user, user.id == '${helpdeskId}')`,
        notes: "",
      });
      const helpdesk = h.sdk({ organizationId: user.subOrganizationId }, helpdeskKey, fastPoller);
      // The attack: a look-alike user with the requester's contacts, which nobody proved for it.
      await helpdesk.createUsers({
        users: [
          {
            userName: "look-alike",
            userEmail: user.email,
            userPhoneNumber: user.phone,
            apiKeys: [],
            authenticators: [],
            oauthProviders: [],
            userTags: [],
          },
        ],
      });
      const clientKey = newKeyPair();
      const client = attestedClient(
        user.subOrganizationId,
        {
          attestedIdentity: await tokenFor(kind, user, clientKey),
          publicKey: clientKey.publicKey,
          scheme: AttestedScheme.P256_VERIFICATION_TOKEN,
        },
        clientKey,
      );
      const done = await client.approveActivity({ fingerprint: user.waiting.fingerprint });
      expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      const { mfaStatuses } = await user.own.getMfaStatus({ activityId: user.waiting.id });
      expect(mfaStatuses).toMatchObject([{ userId: user.userId, satisfied: true }]);
      expect(mfaStatuses[0].satisfiedMethods).toContainEqual({ type: METHODS[kind] });
    },
  );

  it("verified by both, the contact names neither: ATTESTED_IDENTITY_AMBIGUOUS, nothing changed", async () => {
    const user = await waitingUser(() => ({ any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP" }] }));
    const {
      userIds: [twinId],
    } = await user.own.createUsers({
      users: [{ userName: "twin", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }],
    });
    // The root proves the address (a token bound to its own key) for the second user too.
    await user.own.updateUserEmail({
      userId: twinId!,
      userEmail: user.email,
      verificationToken: await verificationToken(user.email, user.key),
    });
    const clientKey = newKeyPair();
    const client = attestedClient(
      user.subOrganizationId,
      {
        attestedIdentity: await verificationToken(user.email, clientKey),
        publicKey: clientKey.publicKey,
        scheme: AttestedScheme.P256_VERIFICATION_TOKEN,
      },
      clientKey,
    );
    await refusedChangingNothing(
      () => client.approveActivity({ fingerprint: user.waiting.fingerprint }),
      16,
      `2 users of organization ${user.subOrganizationId} have verified email`,
    );
  });
});

describe("a bad attested stamp is refused and changes nothing", () => {
  it("refuses a token bound to another key, an expired token, another key's signature, an unknown contact, a wrong nonce", async () => {
    const user = await waitingUser(() => ({ any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP" }] }));
    const { fingerprint } = user.waiting;
    const clientKey = newKeyPair();
    const token = await verificationToken(user.email, clientKey);
    const otp = (attestedIdentity: string, publicKey: string, signer: ApiKeyPair) =>
      attestedClient(user.subOrganizationId, { attestedIdentity, publicKey, scheme: AttestedScheme.P256_VERIFICATION_TOKEN }, signer);

    // Bound to clientKey, presented with another key (which signs, so the signature itself holds).
    const other = newKeyPair();
    await refusedChangingNothing(() => otp(token, other.publicKey, other).approveActivity({ fingerprint }), 7, "bound to another key");
    // The token's key named, but the body signed by another key.
    await refusedChangingNothing(
      () => otp(token, clientKey.publicKey, other).approveActivity({ fingerprint }),
      16,
      "signature does not verify",
    );
    // A contact nobody in the organization holds.
    const strangerKey = newKeyPair();
    const strangerToken = await verificationToken(`nobody.${Date.now()}@example.com`, strangerKey);
    await refusedChangingNothing(
      () => otp(strangerToken, strangerKey.publicKey, strangerKey).approveActivity({ fingerprint }),
      16,
      "no user of organization",
    );
    // Expired: a token valid for a minute, presented two minutes later.
    const shortKey = newKeyPair();
    const shortToken = await verificationToken(user.email, shortKey, "60");
    offset = 120_000;
    try {
      await refusedChangingNothing(() => otp(shortToken, shortKey.publicKey, shortKey).approveActivity({ fingerprint }), 9, "expired");
    } finally {
      offset = 0;
    }
    // An OIDC token whose nonce is another key's hash.
    const oauthKey = newKeyPair();
    const wrongNonce = await oidc.token({ sub: user.subject, nonce: nonceOf(newKeyPair().publicKey) });
    await refusedChangingNothing(
      () =>
        attestedClient(
          user.subOrganizationId,
          { attestedIdentity: wrongNonce, publicKey: oauthKey.publicKey, scheme: AttestedScheme.P256_OIDC },
          oauthKey,
        ).approveActivity({
          fingerprint,
        }),
      7,
      "nonce",
    );
    // None of these proved anything: the activity still waits, the good token still works.
    expect((await user.own.getActivity({ activityId: user.waiting.id })).activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    expect((await otp(token, clientKey.publicKey, clientKey).approveActivity({ fingerprint })).activity.status).toBe(
      "ACTIVITY_STATUS_COMPLETED",
    );
    // No refusal quoted a token.
    const log = h.logLines.join("\n");
    for (const secret of [token, strangerToken, shortToken, wrongNonce]) expect(log).not.toContain(secret);
  });

  it("refuses an attested stamp anywhere but a vote on an activity waiting for authentication", async () => {
    const user = await waitingUser(() => ({ any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP" }] }));
    const clientKey = newKeyPair();
    const token = await verificationToken(user.email, clientKey);
    const client = attestedClient(
      user.subOrganizationId,
      { attestedIdentity: token, publicKey: clientKey.publicKey, scheme: AttestedScheme.P256_VERIFICATION_TOKEN },
      clientKey,
    );
    await refusedChangingNothing(
      () => client.createUserTag({ userTagName: "attested", userIds: [] }),
      7,
      "X-Stamp-Attested is accepted only on",
    );
    await refusedChangingNothing(() => client.getWhoami({}), 7, "X-Stamp-Attested is accepted only on");
    // Another organization's activity is not found from this one.
    const { activity } = await parentSdk.createUserTag({ userTagName: "plain", userIds: [] });
    expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    await refusedChangingNothing(() => client.approveActivity({ fingerprint: activity.fingerprint }), 5, "no activity of organization");
    const done = await client.approveActivity({ fingerprint: user.waiting.fingerprint });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    // Once completed, the same stamp casts no vote on it, nor rejects it.
    await refusedChangingNothing(
      () => client.approveActivity({ fingerprint: user.waiting.fingerprint }),
      7,
      "X-Stamp-Attested is accepted only on",
    );
    await refusedChangingNothing(
      () => client.rejectActivity({ fingerprint: user.waiting.fingerprint }),
      7,
      "X-Stamp-Attested is accepted only on",
    );
  });

  it("lets the requester withdraw a waiting activity with an attested stamp; refuses another user's", async () => {
    const user = await waitingUser(() => ({ any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP" }] }));
    const { fingerprint } = user.waiting;
    // A second user of the same organization, with a verified email of their own.
    const otherEmail = `other.${Date.now()}@example.com`;
    const otherKey = newKeyPair();
    const {
      userIds: [otherId],
    } = await user.own.createUsers({
      users: [
        {
          userName: "other",
          userEmail: otherEmail,
          apiKeys: [{ apiKeyName: "k", publicKey: otherKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    // The root proves it (a token bound to the root's key), as an administrator setting it up would.
    await user.own.updateUserEmail({
      userId: otherId!,
      userEmail: otherEmail,
      verificationToken: await verificationToken(otherEmail, user.key),
    });
    const otherClientKey = newKeyPair();
    const other = attestedClient(
      user.subOrganizationId,
      {
        attestedIdentity: await verificationToken(otherEmail, otherClientKey),
        publicKey: otherClientKey.publicKey,
        scheme: AttestedScheme.P256_VERIFICATION_TOKEN,
      },
      otherClientKey,
    );
    await refusedChangingNothing(() => other.rejectActivity({ fingerprint }), 7, "X-Stamp-Attested is accepted only on");
    await refusedChangingNothing(() => other.approveActivity({ fingerprint }), 7, "X-Stamp-Attested is accepted only on");
    const clientKey = newKeyPair();
    const requester = attestedClient(
      user.subOrganizationId,
      {
        attestedIdentity: await verificationToken(user.email, clientKey),
        publicKey: clientKey.publicKey,
        scheme: AttestedScheme.P256_VERIFICATION_TOKEN,
      },
      clientKey,
    );
    const rejected = await requester.rejectActivity({ fingerprint });
    expect(rejected.activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    expect((await user.own.listUserTags({})).userTags).toEqual([]);
  });

  it("refuses a contact its holder never verified", async () => {
    const user = await waitingUser(() => ({ any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP" }] }), false);
    const clientKey = newKeyPair();
    const token = await verificationToken(user.email, clientKey);
    const client = attestedClient(
      user.subOrganizationId,
      { attestedIdentity: token, publicKey: clientKey.publicKey, scheme: AttestedScheme.P256_VERIFICATION_TOKEN },
      clientKey,
    );
    await refusedChangingNothing(() => client.approveActivity({ fingerprint: user.waiting.fingerprint }), 16, "has never verified it");
  });

  it("holds an attested stamp to the organization's IP allowlist", async () => {
    // A top-level organization (sub-organizations have no lists) whose root user proves their own email.
    const org = await h.organization("Locked");
    const root = h.sdk(org, org.key, fastPoller);
    await root.setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
    const email = `locked.${Date.now()}@example.com`;
    await root.updateUserEmail({
      userId: org.userId,
      userEmail: email,
      verificationToken: await verificationToken(email, org.key, undefined, root),
    });
    await root.createMfaPolicy({
      userId: org.userId,
      mfaPolicyName: "tags need email",
      condition: CREATE_USER_TAG,
      requiredAuthenticationMethods: [API_KEY, { any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP" }] }],
      order: 0,
    });
    const clientKey = newKeyPair();
    const token = await verificationToken(email, clientKey, undefined, root);
    const { activity } = await root.createUserTag({ userTagName: "guarded", userIds: [] });
    expect(activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    await fromAddress("127.0.0.1", () => root.setIpAllowlist({ enabled: true, rules: [{ cidr: "127.0.0.1/32", label: "office" }] }));
    const client = attestedClient(
      org.organizationId,
      { attestedIdentity: token, publicKey: clientKey.publicKey, scheme: AttestedScheme.P256_VERIFICATION_TOKEN },
      clientKey,
    );
    await fromAddress("127.0.0.2", () =>
      refusedChangingNothing(
        () => client.approveActivity({ fingerprint: activity.fingerprint }),
        7,
        "requests from 127.0.0.2 are not allowed",
      ),
    );
    const done = await fromAddress("127.0.0.1", () => client.approveActivity({ fingerprint: activity.fingerprint }));
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  });

  it("refuses a malformed header and an unknown scheme", async () => {
    const user = await waitingUser(() => ({ any: [{ type: "AUTHENTICATION_TYPE_EMAIL_OTP" }] }));
    const clientKey = newKeyPair();
    const token = await verificationToken(user.email, clientKey);
    const unknown = attestedClient(
      user.subOrganizationId,
      { attestedIdentity: token, publicKey: clientKey.publicKey, scheme: "STAMP_ATTESTED_SCHEME_P256_PASSWORD" },
      clientKey,
    );
    await refusedChangingNothing(
      () => unknown.approveActivity({ fingerprint: user.waiting.fingerprint }),
      16,
      'unsupported attested stamp scheme "STAMP_ATTESTED_SCHEME_P256_PASSWORD"',
    );
    const body = JSON.stringify({
      type: "ACTIVITY_TYPE_APPROVE_ACTIVITY",
      timestampMs: String(Date.now()),
      organizationId: user.subOrganizationId,
      parameters: { fingerprint: user.waiting.fingerprint },
    });
    const before = await h.snapshot();
    for (const [header, text] of [
      ["not base64url!", "X-Stamp-Attested is not base64url"],
      [Buffer.from("[1]").toString("base64url"), "X-Stamp-Attested is not a JSON object"],
      [
        Buffer.from(JSON.stringify({ publicKey: clientKey.publicKey, scheme: AttestedScheme.P256_OIDC, signature: "00" })).toString(
          "base64url",
        ),
        'no "publicKeyAttestation"',
      ],
    ]) {
      const answer = await h.post("/public/v1/submit/approve_activity", body, { "X-Stamp-Attested": header! });
      expect(answer.status, header).toBe(401);
      expect(answer.json.message, header).toContain(text);
    }
    expect(await h.snapshot()).toBe(before);
  });
});
