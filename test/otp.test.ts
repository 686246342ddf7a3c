// One-time passwords through the official clients, with real transports: emails go to an SMTP server
// the test runs (smtp-server) and the code is read from the delivered message; SMS are POSTed to an
// HTTP server the test runs. A parent's backend starts and finishes logins for its sub-organizations'
// users, as with the product. Then every way a code can be wrong.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { ApiKeyStamper, SignatureFormat } from "@turnkey/api-key-stamper";
import { encryptOtpCodeToBundle, generateP256KeyPair, verifyOtpVerificationToken } from "@turnkey/crypto";
// The helpers @turnkey/core's own OTP login runs (not exported from its index).
import { getClientSignatureMessageForLogin, getClientSignatureMessageForSignup, parseSession } from "@turnkey/core/dist/utils.js";
import {
  startHarness,
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  signedRequest,
  signerPublicKeyOf,
  type Harness,
  type TestOrganization,
} from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { errorOf, keyFromBundle } from "./helpers/logins.js";
import path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { Turnkey } from "@turnkey/sdk-server";
import { cliDeployment } from "./helpers/processes.js";
import { startSmtp, until, type Mail, type TestSmtp } from "./helpers/smtp.js";

const run = promisify(execFile);

let smtp: TestSmtp;
let smsServer: http.Server;
let mails: Mail[] = [];
const texts: Array<{ to: string; body: string; authorization?: string }> = [];
let h: Harness;
let parent: TestOrganization;
let parentSdk: ReturnType<Harness["sdk"]>;
let signerPublicKey: string;
let offset = 0;

async function startSms(): Promise<number> {
  smsServer = http.createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    request.on("end", () => {
      texts.push({ ...(JSON.parse(body) as { to: string; body: string }), authorization: request.headers.authorization });
      response.writeHead(202).end();
    });
  });
  await new Promise<void>((resolve) => smsServer.listen(0, "127.0.0.1", resolve));
  return (smsServer.address() as AddressInfo).port;
}

/** The code in the latest email to `to` (the plain-text part says "verification code is <code>"). */
async function emailedCode(to: string, after: number): Promise<string> {
  const mail = await until(
    () =>
      mails
        .slice(after)
        .reverse()
        .find((m) => m.to === to),
    `an email to ${to}`,
  );
  return /verification code is ([0-9A-Z]{6,9})/.exec(mail.raw.replace(/=\r?\n/g, ""))![1]!;
}

beforeAll(async () => {
  smtp = await startSmtp();
  mails = smtp.mails;
  const smsPort = await startSms();
  h = await startHarness(
    {
      SIGIL_SMTP_URL: smtp.url,
      SIGIL_SMS_URL: `http://127.0.0.1:${smsPort}/sms`,
      SIGIL_SMS_TOKEN: "sms-secret",
      SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400",
      SIGIL_MESSAGE_POLL_MS: "50",
      SIGIL_EMAIL_ALLOWED_DOMAINS: "example.com",
    },
    { clock: () => Date.now() + offset },
  );
  parent = await h.organization("App backend");
  parentSdk = h.sdk(parent, parent.key, fastPoller);
  // The app backend's organization sends codes for sign-up (init_otp): its root turns that on.
  await parentSdk.setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
  signerPublicKey = await signerPublicKeyOf(h.url);
});
afterAll(async () => {
  await h.close();
  await smtp.close();
  await new Promise<void>((resolve) => smsServer.close(() => resolve()));
});

let counter = 0;
/** A sub-organization whose root user has an email and a phone number (and an API key the test
 * never uses: logins here go through the parent's backend). */
async function endUser() {
  counter += 1;
  const email = `user${counter}.${Date.now()}@example.com`;
  const phone = `+1555${String(1_000_000 + counter).slice(1)}${counter % 10}`;
  const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
    subOrganizationName: `end user ${counter}`,
    rootQuorumThreshold: 1,
    rootUsers: [
      {
        userName: `user ${counter}`,
        userEmail: email,
        userPhoneNumber: phone,
        apiKeys: [{ apiKeyName: "device", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
        authenticators: [],
        oauthProviders: [],
      },
    ],
  });
  return { subOrganizationId, userId: rootUserIds![0]!, email, phone };
}

describe("init_otp_auth → otp_auth (credential bundle)", () => {
  it("emails a code over SMTP; the code opens a session key for the user; the email counts as verified", async () => {
    const user = await endUser();
    const before = mails.length;
    const { otpId } = await parentSdk.initOtpAuth({
      organizationId: user.subOrganizationId,
      otpType: "OTP_TYPE_EMAIL",
      contact: user.email,
      appName: "Demo App",
      emailCustomization: { logoUrl: "https://example.com/logo.png", magicLinkTemplate: "https://app.example.com/login?code=%s" },
    });
    const code = await emailedCode(user.email, before);
    expect(code).toMatch(/^[0-9A-HJKMNP-TV-Z]{9}$/);
    const raw = mails.at(-1)!.raw;
    expect(raw).toContain("Demo App verification code");
    expect(raw.replace(/=\r?\n/g, "")).toContain(`https://app.example.com/login?code=3D${code}`.replace("=3D", "=3D"));

    const target = generateP256KeyPair();
    const result = await parentSdk.otpAuth({
      organizationId: user.subOrganizationId,
      otpId,
      otpCode: code.toLowerCase(),
      targetPublicKey: target.publicKeyUncompressed,
    });
    expect(result.userId).toBe(user.userId);
    const key = keyFromBundle(result.credentialBundle!, target);
    const asUser = h.sdk({ organizationId: user.subOrganizationId }, key, fastPoller);
    expect((await asUser.getWhoami({})).userId).toBe(user.userId);
    const { apiKey } = await asUser.getApiKey({ apiKeyId: result.apiKeyId! });
    expect(apiKey.apiKeyName).toMatch(/^OTP Auth - /);
    const verified = await parentSdk.getVerifiedSubOrgIds({ filterType: "EMAIL", filterValue: user.email });
    expect(verified.organizationIds).toContain(user.subOrganizationId);

    // The code is kept only as a hash: neither the OTP row nor the sent message holds it.
    const stored =
      JSON.stringify(await h.server.store.db.selectFrom("otps").selectAll().where("id", "=", otpId).execute()) +
      JSON.stringify(await h.server.store.db.selectFrom("outbound_messages").selectAll().execute());
    expect(stored).not.toContain(code);
    const intent = JSON.stringify(await h.server.store.db.selectFrom("activities").select("intent").execute());
    expect(intent).not.toContain(code);
  });

  it("texts a code to the SMS endpoint as JSON {to, body}, with the template and the bearer token", async () => {
    const user = await endUser();
    const before = texts.length;
    const { otpId } = await parentSdk.initOtpAuth({
      organizationId: user.subOrganizationId,
      otpType: "OTP_TYPE_SMS",
      contact: user.phone,
      appName: "Demo",
      otpLength: 6,
      alphanumeric: false,
      smsCustomization: { template: "Your Demo code: {{.OtpCode}}" },
    });
    const text = await until(() => texts.slice(before).find((t) => t.to === user.phone), "the SMS");
    expect(text.authorization).toBe("Bearer sms-secret");
    const code = /Your Demo code: (\d{6})$/.exec(text.body)![1]!;
    const target = generateP256KeyPair();
    const result = await parentSdk.otpAuth({
      organizationId: user.subOrganizationId,
      otpId,
      otpCode: code,
      targetPublicKey: target.publicKeyUncompressed,
    });
    expect(result.userId).toBe(user.userId);
    const verified = await parentSdk.getVerifiedSubOrgIds({ filterType: "PHONE_NUMBER", filterValue: user.phone });
    expect(verified.organizationIds).toContain(user.subOrganizationId);
  });

  it("wrong, reused, burnt and expired codes are each refused with their own error", async () => {
    const user = await endUser();
    const target = generateP256KeyPair();
    const auth = (otpId: string, otpCode: string) =>
      parentSdk.otpAuth({ organizationId: user.subOrganizationId, otpId, otpCode, targetPublicKey: target.publicKeyUncompressed });
    const start = async () => {
      const before = mails.length;
      const { otpId } = await parentSdk.initOtpAuth({
        organizationId: user.subOrganizationId,
        otpType: "OTP_TYPE_EMAIL",
        contact: user.email,
        appName: "Demo",
      });
      return { otpId, code: await emailedCode(user.email, before) };
    };
    const keysBefore = (await parentSdk.getApiKeys({ organizationId: user.subOrganizationId, userId: user.userId })).apiKeys.length;

    // Wrong, then right: a wrong try does not burn the code.
    const first = await start();
    expect(await errorOf(auth(first.otpId, "000000000"))).toContain("OTP_INVALID");
    await auth(first.otpId, first.code);
    // Used once: never again.
    expect(await errorOf(auth(first.otpId, first.code))).toContain("OTP_ALREADY_USED");

    // Brute force: after 5 wrong tries even the right code is refused.
    const second = await start();
    for (let i = 0; i < 5; i++) expect(await errorOf(auth(second.otpId, `WRONG${i}AAA`))).toContain("OTP_INVALID");
    expect(await errorOf(auth(second.otpId, second.code))).toContain("OTP_ATTEMPTS_EXCEEDED");

    // Expired after its 5 minutes.
    const third = await start();
    offset += 301_000;
    try {
      expect(await errorOf(auth(third.otpId, third.code))).toContain("OTP_EXPIRED");
    } finally {
      offset -= 301_000;
    }
    // An OTP id of another sub-organization is unknown here.
    const other = await endUser();
    expect(
      await errorOf(
        parentSdk.otpAuth({
          organizationId: other.subOrganizationId,
          otpId: third.otpId,
          otpCode: third.code,
          targetPublicKey: target.publicKeyUncompressed,
        }),
      ),
    ).toContain("OTP_NOT_FOUND");
    // Only the one good login made a key.
    expect((await parentSdk.getApiKeys({ organizationId: user.subOrganizationId, userId: user.userId })).apiKeys.length).toBe(
      keysBefore + 1,
    );
  });

  it("sends a code to the address on record, and at most 5 codes to one contact in 10 minutes", async () => {
    const user = await endUser();
    const before = mails.length;
    await parentSdk.initOtpAuth({
      organizationId: user.subOrganizationId,
      otpType: "OTP_TYPE_EMAIL",
      contact: user.email.toUpperCase(),
      appName: "Demo",
    });
    await emailedCode(user.email, before);
    for (let i = 0; i < 4; i++)
      await parentSdk.initOtpAuth({
        organizationId: user.subOrganizationId,
        otpType: "OTP_TYPE_EMAIL",
        contact: user.email,
        appName: "Demo",
      });
    const otps = await h.server.store.db.selectFrom("otps").select("id").where("organization_id", "=", user.subOrganizationId).execute();
    expect(
      await errorOf(
        parentSdk.initOtpAuth({ organizationId: user.subOrganizationId, otpType: "OTP_TYPE_EMAIL", contact: user.email, appName: "Demo" }),
      ),
    ).toContain("OTP_RATE_LIMITED");
    // Other spellings of the same inbox count too.
    const [local, domain] = user.email.split("@");
    for (const spelling of [user.email.toUpperCase(), `${local}+again@${domain}`, `${user.email}.`]) {
      expect(await errorOf(parentSdk.initOtp({ otpType: "OTP_TYPE_EMAIL", contact: spelling, appName: "Demo" })), spelling).toContain(
        "OTP_RATE_LIMITED",
      );
    }
    expect(await h.server.store.db.selectFrom("otps").select("id").where("organization_id", "=", user.subOrganizationId).execute()).toEqual(
      otps,
    );
    offset += 10 * 60_000 + 1_000;
    try {
      await parentSdk.initOtpAuth({
        organizationId: user.subOrganizationId,
        otpType: "OTP_TYPE_EMAIL",
        contact: user.email,
        appName: "Demo",
      });
    } finally {
      offset -= 10 * 60_000 + 1_000;
    }
  });

  it("an end user's own requests cannot use up the parent's budget for a contact, nor bomb it from many sub-organizations", async () => {
    const victim = `victim.${Date.now()}@example.com`;
    const attackers = await Promise.all(
      [0, 1, 2].map(async () => {
        const key = newKeyPair();
        const { subOrganizationId } = await parentSdk.createSubOrganization({
          subOrganizationName: "attacker",
          rootQuorumThreshold: 1,
          rootUsers: [
            {
              userName: "attacker",
              apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
              authenticators: [],
              oauthProviders: [],
            },
          ],
        });
        return h.sdk({ organizationId: subOrganizationId }, key, fastPoller);
      }),
    );
    const outcomes: string[] = [];
    for (const attacker of attackers) {
      for (let i = 0; i < 5; i++)
        outcomes.push(
          await attacker.initOtp({ otpType: "OTP_TYPE_EMAIL", contact: victim, appName: "Demo" }).then(
            () => "sent",
            (e: Error) => (e.message.includes("OTP_RATE_LIMITED") ? "limited" : e.message),
          ),
        );
    }
    // Five each at most, ten from sub-organizations together.
    expect(outcomes.filter((o) => o === "sent")).toHaveLength(10);
    expect(outcomes.filter((o) => o === "limited")).toHaveLength(5);
    // The parent's backend still reaches the contact.
    expect((await parentSdk.initOtp({ otpType: "OTP_TYPE_EMAIL", contact: victim, appName: "Demo" })).otpId).toBeTruthy();
  });

  it("an end user's own credential may not customize the message", async () => {
    const key = newKeyPair();
    const { subOrganizationId } = await parentSdk.createSubOrganization({
      subOrganizationName: "end user",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "u",
          apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const own = h.sdk({ organizationId: subOrganizationId }, key, fastPoller);
    const before = mails.length;
    expect(
      await errorOf(
        own.initOtp({
          otpType: "OTP_TYPE_SMS",
          contact: "+15550009999",
          appName: "Bank",
          smsCustomization: { template: "BANK ALERT: call +1 900 555 0100, ref {{.OtpCode}}" },
        }),
      ),
    ).toContain("OTP_CUSTOMIZATION_NOT_ALLOWED");
    expect(
      await errorOf(
        own.initOtp({
          otpType: "OTP_TYPE_EMAIL",
          contact: "someone@example.com",
          appName: "Bank",
          sendFromEmailAddress: "alerts@example.com",
          sendFromEmailSenderName: "Security",
        }),
      ),
    ).toContain("OTP_CUSTOMIZATION_NOT_ALLOWED");
    expect(
      await errorOf(own.initOtp({ otpType: "OTP_TYPE_EMAIL", contact: "someone@example.com", appName: "Call 1-900-555-0100 now" })),
    ).toContain("INVALID_APP_NAME");
    // A plain app name is fine.
    expect((await own.initOtp({ otpType: "OTP_TYPE_EMAIL", contact: "someone@example.com", appName: "My Wallet" })).otpId).toBeTruthy();
    // Only that message was queued (a refused request leaves no message for the courier), and it arrives.
    // Counted by recipient: mails of earlier tests may still be arriving.
    const queued = await h.server.store.db
      .selectFrom("outbound_messages")
      .select("recipient")
      .where("organization_id", "=", subOrganizationId)
      .execute();
    expect(queued).toEqual([{ recipient: "someone@example.com" }]);
    await emailedCode("someone@example.com", before);
    expect(texts.filter((t) => t.to === "+15550009999")).toEqual([]);
  });

  it("the parent's policies govern its backend's logins, and can name the sub-organizations they cover", async () => {
    const a = await endUser();
    const b = await endUser();
    const key = newKeyPair();
    const { userIds } = await parentSdk.createUsers({
      users: [
        {
          userName: `backend ${Date.now()}`,
          apiKeys: [{ apiKeyName: "backend", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
          userTags: [],
        },
      ],
    });
    const backend = h.sdk(parent, key, fastPoller);
    const start = (user: { subOrganizationId: string; email: string }) =>
      backend.initOtpAuth({ organizationId: user.subOrganizationId, otpType: "OTP_TYPE_EMAIL", contact: user.email, appName: "Demo" });
    // A non-root user of the parent with no policy may not start logins anywhere.
    expect(await errorOf(start(a))).toContain("POLICY_DENIED");
    await parentSdk.createPolicy({
      policyName: `backend logins in ${a.subOrganizationId}`,
      effect: "EFFECT_ALLOW",
      notes: "",
      consensus: `approvers.any(user, user.id == '${userIds[0]}')`,
      condition: `activity.resource == 'OTP' && activity.organization_id == '${a.subOrganizationId}'`,
    });
    expect((await start(a)).otpId).toBeTruthy();
    expect(await errorOf(start(b))).toContain("POLICY_DENIED");
  });

  it("V3's expirationSeconds sets the code's lifetime (at most 600 seconds)", async () => {
    const user = await endUser();
    const before = mails.length;
    const { otpId } = await parentSdk.initOtpAuth({
      organizationId: user.subOrganizationId,
      otpType: "OTP_TYPE_EMAIL",
      contact: user.email,
      appName: "Demo",
      expirationSeconds: "60",
    });
    const code = await emailedCode(user.email, before);
    offset += 61_000;
    try {
      expect(
        await errorOf(
          parentSdk.otpAuth({
            organizationId: user.subOrganizationId,
            otpId,
            otpCode: code,
            targetPublicKey: generateP256KeyPair().publicKeyUncompressed,
          }),
        ),
      ).toContain("OTP_EXPIRED");
    } finally {
      offset -= 61_000;
    }
    expect(
      await errorOf(
        parentSdk.initOtpAuth({
          organizationId: user.subOrganizationId,
          otpType: "OTP_TYPE_EMAIL",
          contact: user.email,
          appName: "Demo",
          expirationSeconds: "601",
        }),
      ),
    ).toContain("INVALID_EXPIRATION");
  });

  it("the older versions (V1, V2) are accepted", async () => {
    const user = await endUser();
    for (const type of ["ACTIVITY_TYPE_INIT_OTP_AUTH", "ACTIVITY_TYPE_INIT_OTP_AUTH_V2"]) {
      const before = mails.length;
      const { body, headers } = signedRequest(
        {
          type,
          timestampMs: String(Date.now()),
          organizationId: user.subOrganizationId,
          parameters: { otpType: "OTP_TYPE_EMAIL", contact: user.email, emailCustomization: { appName: "Old" } },
        },
        parent.key,
      );
      const response = await h.post("/public/v1/submit/init_otp_auth", body, headers);
      expect(response.status, JSON.stringify(response.json)).toBe(200);
      const result = response.json.activity.result[type.endsWith("V2") ? "initOtpAuthResultV2" : "initOtpAuthResult"];
      expect(result.otpId).toBeTruthy();
      expect(await emailedCode(user.email, before)).toMatch(/^[0-9A-Z]{9}$/);
    }
  });

  describe("bad requests change nothing and send nothing", () => {
    const cases: Array<[string, Record<string, unknown>, string]> = [
      ["an unknown otpType", { otpType: "OTP_TYPE_PIGEON", contact: "a@example.com", appName: "x" }, "INVALID_OTP_TYPE"],
      ["an email that is not one", { otpType: "OTP_TYPE_EMAIL", contact: "not-an-email", appName: "x" }, "INVALID_CONTACT"],
      ["a phone number that is not E.164", { otpType: "OTP_TYPE_SMS", contact: "555-1234", appName: "x" }, "INVALID_CONTACT"],
      ["a code length of 5", { otpType: "OTP_TYPE_EMAIL", contact: "CONTACT", appName: "x", otpLength: 5 }, "INVALID_OTP_LENGTH"],
      ["a code length of 10", { otpType: "OTP_TYPE_EMAIL", contact: "CONTACT", appName: "x", otpLength: 10 }, "INVALID_OTP_LENGTH"],
      [
        "a contact no user of the organization has",
        { otpType: "OTP_TYPE_EMAIL", contact: "nobody@example.com", appName: "x" },
        "USER_NOT_FOUND",
      ],
      [
        "a logo that is not an https URL",
        { otpType: "OTP_TYPE_EMAIL", contact: "CONTACT", appName: "x", emailCustomization: { logoUrl: "javascript:alert(1)" } },
        "INVALID_EMAIL_CUSTOMIZATION",
      ],
      [
        "a magic link without %s",
        {
          otpType: "OTP_TYPE_EMAIL",
          contact: "CONTACT",
          appName: "x",
          emailCustomization: { magicLinkTemplate: "https://x.example.com/" },
        },
        "INVALID_EMAIL_CUSTOMIZATION",
      ],
      [
        "templateVariables that are not a JSON object",
        { otpType: "OTP_TYPE_EMAIL", contact: "CONTACT", appName: "x", emailCustomization: { templateVariables: "[1]" } },
        "INVALID_EMAIL_CUSTOMIZATION",
      ],
      // Links, logos and senders must be the operator's (SIGIL_EMAIL_ALLOWED_DOMAINS=example.com):
      // otherwise anyone able to start a code could send mail that looks like anyone's.
      [
        "a magic link to another domain",
        {
          otpType: "OTP_TYPE_EMAIL",
          contact: "CONTACT",
          appName: "x",
          emailCustomization: { magicLinkTemplate: "https://evil.example.net/login?c=%s" },
        },
        "EMAIL_DOMAIN_NOT_ALLOWED",
      ],
      [
        "a magic link that smuggles text and a second link",
        {
          otpType: "OTP_TYPE_EMAIL",
          contact: "CONTACT",
          appName: "x",
          emailCustomization: {
            magicLinkTemplate: "https://app.example.com/\n\nYour wallet is locked: https://evil.example.net/unlock?c=%s",
          },
        },
        "INVALID_EMAIL_CUSTOMIZATION",
      ],
      [
        "a magic link over plain http",
        {
          otpType: "OTP_TYPE_EMAIL",
          contact: "CONTACT",
          appName: "x",
          emailCustomization: { magicLinkTemplate: "http://app.example.com/login?c=%s" },
        },
        "INVALID_EMAIL_CUSTOMIZATION",
      ],
      [
        "a logo from another domain",
        { otpType: "OTP_TYPE_EMAIL", contact: "CONTACT", appName: "x", emailCustomization: { logoUrl: "https://cdn.paypal.com/logo.png" } },
        "EMAIL_DOMAIN_NOT_ALLOWED",
      ],
      [
        "a sender at another domain",
        {
          otpType: "OTP_TYPE_EMAIL",
          contact: "CONTACT",
          appName: "x",
          sendFromEmailAddress: "security@paypal.com",
          sendFromEmailSenderName: "PayPal Security",
        },
        "EMAIL_DOMAIN_NOT_ALLOWED",
      ],
      [
        "a reply-to at another domain",
        { otpType: "OTP_TYPE_EMAIL", contact: "CONTACT", appName: "x", replyToEmailAddress: "help@evil.example.net" },
        "EMAIL_DOMAIN_NOT_ALLOWED",
      ],
      [
        "an app name longer than 64 characters",
        { otpType: "OTP_TYPE_EMAIL", contact: "CONTACT", appName: "x".repeat(65) },
        "INVALID_APP_NAME",
      ],
      [
        "an SMS template without the code",
        {
          otpType: "OTP_TYPE_SMS",
          contact: "PHONE",
          appName: "x",
          smsCustomization: { template: "Your bank account is locked, call +1 900 555 0100" },
        },
        "INVALID_SMS_TEMPLATE",
      ],
      [
        "an SMS template longer than 320 characters",
        { otpType: "OTP_TYPE_SMS", contact: "PHONE", appName: "x", smsCustomization: { template: `{{.OtpCode}} ${"x".repeat(320)}` } },
        "INVALID_SMS_TEMPLATE",
      ],
    ];
    it.each(cases)("%s", async (_name, parameters, code) => {
      const user = await endUser();
      const params = {
        ...parameters,
        contact: parameters.contact === "CONTACT" ? user.email : parameters.contact === "PHONE" ? user.phone : parameters.contact,
      };
      const before = JSON.parse(await h.snapshot());
      const sent = mails.length + texts.length;
      const { body, headers } = signedRequest(
        {
          type: "ACTIVITY_TYPE_INIT_OTP_AUTH_V3",
          timestampMs: String(Date.now()),
          organizationId: user.subOrganizationId,
          parameters: params,
        },
        parent.key,
      );
      const response = await h.post("/public/v1/submit/init_otp_auth", body, headers);
      expect(response.status).toBeGreaterThanOrEqual(400);
      expect(JSON.stringify(response.json)).toContain(code);
      const after = JSON.parse(await h.snapshot());
      expect(after.api_keys).toEqual(before.api_keys);
      expect(
        await h.server.store.db.selectFrom("otps").select("id").where("organization_id", "=", user.subOrganizationId).execute(),
      ).toEqual([]);
      expect(
        await h.server.store.db
          .selectFrom("outbound_messages")
          .select("id")
          .where("organization_id", "=", user.subOrganizationId)
          .execute(),
      ).toEqual([]);
      await new Promise((r) => setTimeout(r, 100));
      expect(mails.length + texts.length).toBe(sent);
    });
  });
});

describe("init_otp → verify_otp → otp_login (verification token, session)", () => {
  async function verified(user: Awaited<ReturnType<typeof endUser>>, sessionKey = generateP256KeyPair()) {
    const before = mails.length;
    const { otpId, otpEncryptionTargetBundle } = await parentSdk.initOtp({
      otpType: "OTP_TYPE_EMAIL",
      contact: user.email,
      appName: "Demo",
    });
    const code = await emailedCode(user.email, before);
    // The client encrypts the code with its session key to the signed target (@turnkey/crypto).
    const encryptedOtpBundle = await encryptOtpCodeToBundle(code, otpEncryptionTargetBundle, sessionKey.publicKey, signerPublicKey);
    const { verificationToken } = await parentSdk.verifyOtp({ otpId, encryptedOtpBundle });
    return { verificationToken, sessionKey, otpId, code };
  }

  async function loginSignature(verificationToken: string, sessionKey: { publicKey: string; privateKey: string }) {
    const { message, publicKey } = getClientSignatureMessageForLogin({ verificationToken });
    const signature = await new ApiKeyStamper({ apiPublicKey: sessionKey.publicKey, apiPrivateKey: sessionKey.privateKey }).sign(
      message,
      SignatureFormat.Raw,
    );
    return { message, publicKey, scheme: "CLIENT_SIGNATURE_SCHEME_API_P256" as const, signature };
  }

  it("the client's own helpers run the whole flow; the session JWT's key then stamps as the user", async () => {
    const user = await endUser();
    const { verificationToken, sessionKey } = await verified(user);
    // The token verifies with the client's verifier against the published signer key.
    const claims = await verifyOtpVerificationToken(verificationToken, signerPublicKey);
    // Spendable by whoever holds it: only verify_otp's response carries it, never the audit log.
    expect(JSON.stringify(await h.server.store.db.selectFrom("activities").select(["result", "intent", "votes"]).execute())).not.toContain(
      verificationToken.split(".")[2],
    );
    expect(claims).toMatchObject({
      contact: user.email,
      verification_type: "OTP_TYPE_EMAIL",
      organization_id: parent.organizationId,
      public_key: sessionKey.publicKey,
    });

    const clientSignature = await loginSignature(verificationToken, sessionKey);
    const { session } = await parentSdk.otpLogin({
      organizationId: user.subOrganizationId,
      verificationToken,
      publicKey: sessionKey.publicKey,
      clientSignature,
    });
    const parsed = parseSession(session);
    expect(parsed).toMatchObject({
      userId: user.userId,
      organizationId: user.subOrganizationId,
      publicKey: sessionKey.publicKey,
      sessionType: "SESSION_TYPE_READ_WRITE",
    });
    const asUser = h.sdk(
      { organizationId: user.subOrganizationId },
      { publicKey: sessionKey.publicKey, privateKey: sessionKey.privateKey },
      fastPoller,
    );
    expect((await asUser.getWhoami({})).userId).toBe(user.userId);

    // A token logs in once.
    const again = await loginSignature(verificationToken, sessionKey);
    expect(
      await errorOf(
        parentSdk.otpLogin({
          organizationId: user.subOrganizationId,
          verificationToken,
          publicKey: sessionKey.publicKey,
          clientSignature: again,
        }),
      ),
    ).toContain("VERIFICATION_TOKEN_ALREADY_USED");
  });

  it("logs in with the parent's session profile: its name, id and scope in the JWT, its lifetime the ceiling", async () => {
    const { sessionProfileId } = await parentSdk.createSessionProfile({
      sessionProfileName: `otp wallet session ${Date.now()}`,
      scope: "activity.resource == 'WALLET'",
      expirationSeconds: "300",
    });
    const user = await endUser();
    const { verificationToken, sessionKey } = await verified(user);
    const { session } = await parentSdk.otpLogin({
      organizationId: user.subOrganizationId,
      verificationToken,
      publicKey: sessionKey.publicKey,
      clientSignature: await loginSignature(verificationToken, sessionKey),
      expirationSeconds: "3600",
      sessionProfileId,
    });
    const parsed = parseSession(session);
    expect(parsed).toMatchObject({ sessionProfileId, scope: "activity.resource == 'WALLET'", userId: user.userId });
    expect(parsed.sessionType).toMatch(/^otp wallet session/);
    expect(parsed.expiry - Date.now() / 1000).toBeLessThanOrEqual(301);
    // The scope holds for the session's key in the sub-organization.
    const asUser = h.sdk({ organizationId: user.subOrganizationId }, sessionKey, fastPoller);
    expect(await errorOf(asUser.createUserTag({ userTagName: "outside", userIds: [] }))).toContain("SESSION_SCOPE_DENIED");
  });

  it("refuses a login naming an unknown session profile, leaving the token unspent", async () => {
    const user = await endUser();
    const { verificationToken, sessionKey } = await verified(user);
    const login = async (extra: { sessionProfileId?: string }) =>
      parentSdk.otpLogin({
        organizationId: user.subOrganizationId,
        verificationToken,
        publicKey: sessionKey.publicKey,
        clientSignature: await loginSignature(verificationToken, sessionKey),
        ...extra,
      });
    await refusedLeavingOnlyItsActivity(h, () => login({ sessionProfileId: "3c6a9b4e-2f1d-4c8b-9a7e-5d0f1b2c3d4e" }), {
      message: expect.stringContaining("SESSION_PROFILE_NOT_FOUND"),
    });
    // Nothing was spent: the same token still logs in once, without the profile.
    expect((await login({})).session).toEqual(expect.any(String));
  });

  it("refuses a login without the token key's signature, or signed for another session key", async () => {
    const user = await endUser();
    const { verificationToken, sessionKey } = await verified(user);
    const other = generateP256KeyPair();
    // Signed by the bound key, but the login asks for another session key than the message names.
    const signature = await loginSignature(verificationToken, sessionKey);
    expect(
      await errorOf(
        parentSdk.otpLogin({
          organizationId: user.subOrganizationId,
          verificationToken,
          publicKey: other.publicKey,
          clientSignature: signature,
        }),
      ),
    ).toContain("CLIENT_SIGNATURE_INVALID");
    // Signed by a key the token is not bound to.
    const forged = await loginSignature(verificationToken, other);
    expect(
      await errorOf(
        parentSdk.otpLogin({
          organizationId: user.subOrganizationId,
          verificationToken,
          publicKey: sessionKey.publicKey,
          clientSignature: { ...forged, publicKey: sessionKey.publicKey },
        }),
      ),
    ).toContain("CLIENT_SIGNATURE_INVALID");
    // A token altered by the client no longer verifies.
    const [header, payload, sig] = verificationToken.split(".");
    const altered = JSON.parse(Buffer.from(payload!, "base64url").toString());
    altered.contact = "attacker@example.com";
    const tampered = `${header}.${Buffer.from(JSON.stringify(altered)).toString("base64url")}.${sig}`;
    expect(
      await errorOf(
        parentSdk.otpLogin({
          organizationId: user.subOrganizationId,
          verificationToken: tampered,
          publicKey: sessionKey.publicKey,
          clientSignature: signature,
        }),
      ),
    ).toContain("VERIFICATION_TOKEN_INVALID");
    // The genuine login still works after all that.
    const { session } = await parentSdk.otpLogin({
      organizationId: user.subOrganizationId,
      verificationToken,
      publicKey: sessionKey.publicKey,
      clientSignature: signature,
    });
    expect(parseSession(session).userId).toBe(user.userId);
  });

  it("a look-alike user given the same email, never verified, does not make a login of the user who verified it ambiguous", async () => {
    // An end user whose root key the test keeps, to create the look-alike in its organization.
    const rootKey = newKeyPair();
    const email = `verified.${Date.now()}@example.com`;
    const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
      subOrganizationName: "verified end user",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "verified",
          userEmail: email,
          apiKeys: [{ apiKeyName: "device", publicKey: rootKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const user = { subOrganizationId, userId: rootUserIds![0]!, email, phone: "" };
    const login = async () => {
      const { verificationToken, sessionKey } = await verified(user);
      return parentSdk.otpLogin({
        organizationId: subOrganizationId,
        verificationToken,
        publicKey: sessionKey.publicKey,
        clientSignature: await loginSignature(verificationToken, sessionKey),
      });
    };
    // Two holders, neither verified: the code cannot tell them apart (the first login verifies the address).
    const own = h.sdk({ organizationId: subOrganizationId }, rootKey, fastPoller);
    const lookAlike = { userName: "look-alike", userEmail: email, apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] };
    const {
      userIds: [first],
    } = await own.createUsers({ users: [lookAlike] });
    expect(await errorOf(login())).toContain("CONTACT_AMBIGUOUS");
    await own.deleteUsers({ userIds: [first!] });
    expect(parseSession((await login()).session).userId).toBe(user.userId);
    // Verified by the end user's login, the address is theirs: a look-alike given it since changes nothing.
    await own.createUsers({ users: [lookAlike] });
    expect(parseSession((await login()).session).userId).toBe(user.userId);
  });

  it("one token, two logins at once into two sub-organizations holding the contact: exactly one succeeds", async () => {
    const user = await endUser();
    const twin = await parentSdk.createSubOrganization({
      subOrganizationName: "twin",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "twin",
          userEmail: user.email,
          apiKeys: [{ apiKeyName: "k", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const { verificationToken, sessionKey } = await verified(user);
    const clientSignature = await loginSignature(verificationToken, sessionKey);
    const outcomes = await Promise.allSettled(
      [user.subOrganizationId, twin.subOrganizationId].map((organizationId) =>
        parentSdk.otpLogin({ organizationId, verificationToken, publicKey: sessionKey.publicKey, clientSignature }),
      ),
    );
    expect(outcomes.filter((o) => o.status === "fulfilled")).toHaveLength(1);
    expect(String((outcomes.find((o) => o.status === "rejected") as PromiseRejectedResult).reason)).toContain(
      "VERIFICATION_TOKEN_ALREADY_USED",
    );
  });

  it("an expired verification token is refused", async () => {
    const user = await endUser();
    const { verificationToken, sessionKey } = await verified(user);
    const clientSignature = await loginSignature(verificationToken, sessionKey);
    offset += 3_601_000;
    try {
      expect(
        await errorOf(
          parentSdk.otpLogin({
            organizationId: user.subOrganizationId,
            verificationToken,
            publicKey: sessionKey.publicKey,
            clientSignature,
          }),
        ),
      ).toContain("VERIFICATION_TOKEN_EXPIRED");
    } finally {
      offset -= 3_601_000;
    }
  });

  it("a token of one organization does not log in to an unrelated one", async () => {
    const user = await endUser();
    const { verificationToken, sessionKey } = await verified(user);
    const stranger = await h.organization("Stranger");
    const strangerSdk = h.sdk(stranger, stranger.key, fastPoller);
    await strangerSdk.updateUser({ userId: stranger.userId, userEmail: user.email });
    const clientSignature = await loginSignature(verificationToken, sessionKey);
    expect(await errorOf(strangerSdk.otpLogin({ verificationToken, publicKey: sessionKey.publicKey, clientSignature }))).toContain(
      "VERIFICATION_TOKEN_ORGANIZATION_MISMATCH",
    );
  });

  it("verify_otp refuses a wrong code inside the encrypted bundle and counts it", async () => {
    const user = await endUser();
    const before = mails.length;
    const { otpId, otpEncryptionTargetBundle } = await parentSdk.initOtp({
      otpType: "OTP_TYPE_EMAIL",
      contact: user.email,
      appName: "Demo",
    });
    const code = await emailedCode(user.email, before);
    const sessionKey = generateP256KeyPair();
    const wrong = await encryptOtpCodeToBundle("AAAAAAAAA", otpEncryptionTargetBundle, sessionKey.publicKey, signerPublicKey);
    expect(await errorOf(parentSdk.verifyOtp({ otpId, encryptedOtpBundle: wrong }))).toContain("OTP_INVALID");
    expect(await errorOf(parentSdk.verifyOtp({ otpId, encryptedOtpBundle: '{"encappedPublic":"04","ciphertext":"00"}' }))).toContain(
      "INVALID_OTP_BUNDLE",
    );
    const row = await h.server.store.db.selectFrom("otps").select("attempts").where("id", "=", otpId).executeTakeFirstOrThrow();
    expect(row.attempts).toBe(2);
    const right = await encryptOtpCodeToBundle(code, otpEncryptionTargetBundle, sessionKey.publicKey, signerPublicKey);
    expect((await parentSdk.verifyOtp({ otpId, encryptedOtpBundle: right })).verificationToken).toBeTruthy();
  });
});

describe("sign-up and contact proof with verification tokens", () => {
  async function tokenFor(email: string, sessionKey = generateP256KeyPair()) {
    const before = mails.length;
    const { otpId, otpEncryptionTargetBundle } = await parentSdk.initOtp({ otpType: "OTP_TYPE_EMAIL", contact: email, appName: "Demo" });
    const code = await emailedCode(email, before);
    const { verificationToken } = await parentSdk.verifyOtp({
      otpId,
      encryptedOtpBundle: await encryptOtpCodeToBundle(code, otpEncryptionTargetBundle, sessionKey.publicKey, signerPublicKey),
    });
    return { verificationToken, sessionKey };
  }

  it("a sub-organization whose only root user is known by email: created with the token as proof, then logged into by OTP", async () => {
    const email = `signup.${Date.now()}@example.com`;
    const { verificationToken, sessionKey: signupKey } = await tokenFor(email);
    const signup = {
      subOrganizationName: "email-only",
      rootQuorumThreshold: 1,
      rootUsers: [{ userName: "signup", userEmail: email, apiKeys: [], authenticators: [], oauthProviders: [] }],
      verificationToken,
    };
    // The token is bound to the client's key: without that key's signature it signs nobody up.
    expect(await errorOf(parentSdk.createSubOrganization(signup))).toContain("CLIENT_SIGNATURE_REQUIRED");
    const usage = getClientSignatureMessageForSignup({ verificationToken, email });
    const signupSignature = await new ApiKeyStamper({ apiPublicKey: signupKey.publicKey, apiPrivateKey: signupKey.privateKey }).sign(
      usage.message,
      SignatureFormat.Raw,
    );
    const clientSignature = {
      message: usage.message,
      publicKey: usage.publicKey,
      signature: signupSignature,
      scheme: "CLIENT_SIGNATURE_SCHEME_API_P256" as const,
    };
    // Whoever relays the request cannot swap in their own credentials: the signature covers them.
    const withIntruderKey = {
      ...signup,
      rootUsers: [
        {
          ...signup.rootUsers[0]!,
          apiKeys: [{ apiKeyName: "intruder", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" as const }],
        },
      ],
    };
    expect(await errorOf(parentSdk.createSubOrganization({ ...withIntruderKey, clientSignature }))).toContain("CLIENT_SIGNATURE_INVALID");
    const { verificationToken: second, sessionKey: secondKey } = await tokenFor(email);
    const secondUsage = getClientSignatureMessageForSignup({ verificationToken: second, email });
    const secondSignature = await new ApiKeyStamper({ apiPublicKey: secondKey.publicKey, apiPrivateKey: secondKey.privateKey }).sign(
      secondUsage.message,
      SignatureFormat.Raw,
    );
    const { subOrganizationId, rootUserIds } = await parentSdk.createSubOrganization({
      ...signup,
      verificationToken: second,
      clientSignature: {
        message: secondUsage.message,
        publicKey: secondUsage.publicKey,
        signature: secondSignature,
        scheme: "CLIENT_SIGNATURE_SCHEME_API_P256",
      },
    });
    expect((await parentSdk.getVerifiedSubOrgIds({ filterType: "EMAIL", filterValue: email })).organizationIds).toEqual([
      subOrganizationId,
    ]);
    // The token served the sign-up; a new one logs in.
    const { verificationToken: loginToken, sessionKey } = await tokenFor(email);
    const { message, publicKey } = getClientSignatureMessageForLogin({ verificationToken: loginToken });
    const signature = await new ApiKeyStamper({ apiPublicKey: sessionKey.publicKey, apiPrivateKey: sessionKey.privateKey }).sign(
      message,
      SignatureFormat.Raw,
    );
    const { session } = await parentSdk.otpLogin({
      organizationId: subOrganizationId,
      verificationToken: loginToken,
      publicKey: sessionKey.publicKey,
      clientSignature: { message, publicKey, signature, scheme: "CLIENT_SIGNATURE_SCHEME_API_P256" },
    });
    expect(parseSession(session).userId).toBe(rootUserIds![0]);
  });

  it("two sign-ups sent at once with one token: one is created, the other refused as the token already used", async () => {
    // Sign-ups into one parent run side by side (they hold its lock shared): only the conditional
    // update that spends the token keeps it to one use.
    const email = `twice.${Date.now()}@example.com`;
    const { verificationToken, sessionKey } = await tokenFor(email);
    const usage = getClientSignatureMessageForSignup({ verificationToken, email });
    const signature = await new ApiKeyStamper({ apiPublicKey: sessionKey.publicKey, apiPrivateKey: sessionKey.privateKey }).sign(
      usage.message,
      SignatureFormat.Raw,
    );
    const signUp = (name: string) =>
      parentSdk.createSubOrganization({
        subOrganizationName: name,
        rootQuorumThreshold: 1,
        rootUsers: [{ userName: "twice", userEmail: email, apiKeys: [], authenticators: [], oauthProviders: [] }],
        verificationToken,
        clientSignature: { message: usage.message, publicKey: usage.publicKey, signature, scheme: "CLIENT_SIGNATURE_SCHEME_API_P256" },
      });
    const outcomes = await Promise.allSettled([signUp("twice a"), signUp("twice b")]);
    const created = outcomes.filter((o) => o.status === "fulfilled");
    const refused = outcomes.filter((o): o is PromiseRejectedResult => o.status === "rejected");
    expect(created).toHaveLength(1);
    expect(refused).toHaveLength(1);
    expect(String(refused[0]!.reason?.message ?? refused[0]!.reason)).toContain("VERIFICATION_TOKEN_ALREADY_USED");
    const { organizationIds } = await parentSdk.getSubOrgIds({ filterType: "EMAIL", filterValue: email });
    expect(organizationIds).toEqual([(created[0] as PromiseFulfilledResult<{ subOrganizationId: string }>).value.subOrganizationId]);
  });

  it("update_user_email takes a token for the new address as proof; a token for another address is refused", async () => {
    const own = await h.organization("Own users");
    const sdk = h.sdk(own, own.key, fastPoller);
    await sdk.setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
    const email = `changed.${Date.now()}@example.com`;
    const { verificationToken: wrong } = await tokenFor(`other.${Date.now()}@example.com`);
    // Tokens verified in another organization (the app backend) do not serve this one.
    expect(await errorOf(sdk.updateUserEmail({ userId: own.userId, userEmail: email, verificationToken: wrong }))).toContain(
      "VERIFICATION_TOKEN_ORGANIZATION_MISMATCH",
    );
    const ownSdkToken = async (address: string) => {
      const before = mails.length;
      const { otpId } = await sdk.initOtp({ otpType: "OTP_TYPE_EMAIL", contact: address, appName: "Own" });
      const code = await emailedCode(address, before);
      const { body, headers } = signedRequest(
        {
          type: "ACTIVITY_TYPE_VERIFY_OTP",
          timestampMs: String(Date.now()),
          organizationId: own.organizationId,
          parameters: { otpId, otpCode: code },
        },
        own.key,
      );
      const response = await h.post("/public/v1/submit/verify_otp", body, headers);
      return response.json.activity.result.verifyOtpResult.verificationToken as string;
    };
    expect(
      await errorOf(
        sdk.updateUserEmail({
          userId: own.userId,
          userEmail: email,
          verificationToken: await ownSdkToken(`someone.${Date.now()}@example.com`),
        }),
      ),
    ).toContain("VERIFICATION_TOKEN_CONTACT_MISMATCH");
    await sdk.updateUserEmail({ userId: own.userId, userEmail: email, verificationToken: await ownSdkToken(email) });
    const row = await h.server.store.db
      .selectFrom("users")
      .select(["email", "email_verified_at"])
      .where("id", "=", own.userId)
      .executeTakeFirstOrThrow();
    expect(row.email).toBe(email);
    expect(row.email_verified_at).toBeGreaterThan(0);
    // Changing it again without proof clears the verification.
    await sdk.updateUserEmail({ userId: own.userId, userEmail: `unproven.${Date.now()}@example.com` });
    expect(
      (await h.server.store.db.selectFrom("users").select("email_verified_at").where("id", "=", own.userId).executeTakeFirstOrThrow())
        .email_verified_at,
    ).toBeNull();
  });

  it("a token bound to a key proves a contact only to a request stamped by that key", async () => {
    const user = await endUser();
    // The user logs in by code: the session key is the key the token was bound to.
    const { verificationToken: loginToken, sessionKey } = await tokenFor(user.email);
    const login = getClientSignatureMessageForLogin({ verificationToken: loginToken });
    const loginSignature = await new ApiKeyStamper({ apiPublicKey: sessionKey.publicKey, apiPrivateKey: sessionKey.privateKey }).sign(
      login.message,
      SignatureFormat.Raw,
    );
    await parentSdk.otpLogin({
      organizationId: user.subOrganizationId,
      verificationToken: loginToken,
      publicKey: sessionKey.publicKey,
      clientSignature: {
        message: login.message,
        publicKey: login.publicKey,
        signature: loginSignature,
        scheme: "CLIENT_SIGNATURE_SCHEME_API_P256",
      },
    });
    const asUser = h.sdk(
      { organizationId: user.subOrganizationId },
      { publicKey: sessionKey.publicKey, privateKey: sessionKey.privateKey },
      fastPoller,
    );
    const newEmail = `moved.${Date.now()}@example.com`;
    // Bound to another key (captured from someone else's flow): refused.
    const { verificationToken: foreign } = await tokenFor(newEmail);
    expect(await errorOf(asUser.updateUserEmail({ userId: user.userId, userEmail: newEmail, verificationToken: foreign }))).toContain(
      "VERIFICATION_TOKEN_KEY_MISMATCH",
    );
    // Bound to the key stamping the request: accepted.
    const { verificationToken: own } = await tokenFor(newEmail, sessionKey);
    await asUser.updateUserEmail({ userId: user.userId, userEmail: newEmail, verificationToken: own });
    expect((await parentSdk.getVerifiedSubOrgIds({ filterType: "EMAIL", filterValue: newEmail })).organizationIds).toEqual([
      user.subOrganizationId,
    ]);
  });

  it("a login by a code type the organization turned off is refused", async () => {
    const { subOrganizationId } = await parentSdk.createSubOrganization({
      subOrganizationName: "no sms",
      rootQuorumThreshold: 1,
      disableSmsAuth: true,
      rootUsers: [
        {
          userName: "u",
          userPhoneNumber: "+15557654321",
          apiKeys: [{ apiKeyName: "k", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const sent = texts.length;
    expect(
      await errorOf(
        parentSdk.initOtpAuth({ organizationId: subOrganizationId, otpType: "OTP_TYPE_SMS", contact: "+15557654321", appName: "x" }),
      ),
    ).toContain("FEATURE_NOT_ENABLED");
    await new Promise((r) => setTimeout(r, 100));
    expect(texts.length).toBe(sent);
  });
});

describe("the local outbox", () => {
  it("with no transport configured, messages wait in the outbox; `sigil outbox` prints them for the operator", async () => {
    const deployment = await cliDeployment();
    try {
      const server = await deployment.start();
      const org = { organizationId: deployment.organizationId };
      const sdk = new Turnkey({
        apiBaseUrl: server.url,
        apiPublicKey: deployment.key.publicKey,
        apiPrivateKey: deployment.key.privateKey,
        defaultOrganizationId: org.organizationId,
      }).apiClient();
      const { userId } = await sdk.getWhoami({});
      await sdk.updateUser({ userId, userEmail: "root@example.com" });
      // A top-level organization's root turns email codes on for its own users.
      await sdk.setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
      const { otpId } = await sdk.initOtpAuth({ otpType: "OTP_TYPE_EMAIL", contact: "root@example.com", appName: "Local" });
      const { stdout } = await run(process.execPath, [path.resolve("bin/sigil.js"), "outbox", "--data-dir", deployment.database.dataDir], {
        env: deployment.env,
      });
      const lines = stdout
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line));
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatchObject({ channel: "email", recipient: "root@example.com", organizationId: org.organizationId });
      const code = /verification code is ([0-9A-Z]{9})/.exec(lines[0].content.text)![1]!;
      const target = generateP256KeyPair();
      expect((await sdk.otpAuth({ otpId, otpCode: code, targetPublicKey: target.publicKeyUncompressed })).userId).toBe(userId);
    } finally {
      await deployment.stop();
    }
  });
});
