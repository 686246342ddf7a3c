// The courier's retries (an outbox worker, src/services/outbox-worker.ts): a failed send is tried again with
// backoff, a sent message's text is erased, and once the attempts run out the message fails for good,
// its text erased too. The SMS provider is an HTTP server the test runs, answering as the test says.
// A provider URL holding credentials sends them as Basic authorization and never logs or stores them.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { startHarness, newKeyPair, type Harness } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { partsOf } from "./helpers/leaky-node.js";

const answers: number[] = [];
const texts: Array<{ to: string; body: string }> = [];
let provider: http.Server;
let h: Harness;
let parentSdk: ReturnType<Harness["sdk"]>;

beforeAll(async () => {
  provider = http.createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString("utf8")));
    request.on("end", () => {
      texts.push(JSON.parse(body) as { to: string; body: string });
      response.writeHead(answers.shift() ?? 202).end();
    });
  });
  await new Promise<void>((resolve) => provider.listen(0, "127.0.0.1", resolve));
  const port = (provider.address() as AddressInfo).port;
  h = await startHarness({
    SIGIL_SMS_URL: `http://127.0.0.1:${port}/sms`,
    SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400",
    SIGIL_MESSAGE_POLL_MS: "50",
    SIGIL_MESSAGE_RETRY_BASE_MS: "20",
    SIGIL_MESSAGE_MAX_ATTEMPTS: "3",
  });
  const parent = await h.organization("App backend");
  parentSdk = h.sdk(parent, parent.key, fastPoller);
});
afterAll(async () => {
  await h.close();
  await new Promise<void>((resolve) => provider.close(() => resolve()));
});

let counter = 0;
/** Queues an SMS with a code to a new end user's phone; returns the phone number. */
async function textACode(): Promise<string> {
  counter += 1;
  const phone = `+1555200000${counter}`;
  const device = { apiKeyName: "device", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" } as const;
  const { subOrganizationId } = await parentSdk.createSubOrganization({
    subOrganizationName: `courier user ${counter}`,
    rootQuorumThreshold: 1,
    rootUsers: [{ userName: "u", userPhoneNumber: phone, apiKeys: [device], authenticators: [], oauthProviders: [] }],
  });
  const request = {
    organizationId: subOrganizationId,
    otpType: "OTP_TYPE_SMS",
    contact: phone,
    appName: "Demo",
    otpLength: 6,
    alphanumeric: false,
  } as const;
  await parentSdk.initOtpAuth(request);
  return phone;
}

async function settled(phone: string) {
  for (let i = 0; i < 400; i++) {
    const row = await h.server.store.db
      .selectFrom("outbound_messages")
      .selectAll()
      .where("recipient", "=", phone)
      .executeTakeFirstOrThrow();
    if (row.status !== "pending") return row;
    await new Promise((r) => setTimeout(r, 25));
  }
  throw new Error(`the message to ${phone} is still pending`);
}

describe("the message courier", () => {
  it("retries a send the provider refused, then erases the sent message's text", async () => {
    answers.push(503, 500);
    const phone = await textACode();
    const row = await settled(phone);
    expect(row).toMatchObject({ status: "sent", attempts: 3, last_error: null, sealed_message: null, lease_until: null });
    expect(texts.filter((t) => t.to === phone)).toHaveLength(3);
  });

  it("gives up when the attempts run out, erasing the text, and logs the provider's complaint but never the code", async () => {
    answers.push(503, 503, 503);
    const phone = await textACode();
    const row = await settled(phone);
    const erased = { sealed_message: null, lease_until: null, sent_at: null };
    expect(row).toMatchObject({ status: "failed", attempts: 3, last_error: "SMS provider answered 503", ...erased });
    const sent = texts.filter((t) => t.to === phone);
    expect(sent).toHaveLength(3);
    const code = /(\d{6})/.exec(sent[0]!.body)![1]!;
    const logged = h.logLines.map(
      (line) => JSON.parse(line) as { msg: string; messageId?: string; attempts?: number; gaveUp?: boolean; error?: string },
    );
    const notSent = logged.filter((entry) => entry.msg === "message not sent" && entry.messageId === row.id);
    expect(notSent.map((entry) => [entry.attempts, entry.gaveUp, entry.error])).toEqual([
      [1, false, "SMS provider answered 503"],
      [2, false, "SMS provider answered 503"],
      [3, true, "SMS provider answered 503"],
    ]);
    expect(h.logLines.join("\n")).not.toContain(code);
  });
});

describe("an SMS provider URL holding credentials (a user name and password, a key in the path and the query)", () => {
  const password = "pwGHJKLMNPQRSTVWXYZghjkmn";
  const pathKey = "kyQWERTZUIOPghjklmnpqrst";
  const queryKey = "tkZXCVBNMghjklmnpqrstuvw";
  const secrets = [password, pathKey, queryKey];
  const received: Array<{ url: string; authorization?: string }> = [];
  let secretProvider: http.Server;
  let secretHarness: Harness;
  let sdk: ReturnType<Harness["sdk"]>;

  beforeAll(async () => {
    secretProvider = http.createServer((request, response) => {
      request.resume();
      request.on("end", () => {
        received.push({ url: request.url ?? "", authorization: request.headers.authorization });
        response.writeHead(202).end();
      });
    });
    await new Promise<void>((resolve) => secretProvider.listen(0, "127.0.0.1", resolve));
    const port = (secretProvider.address() as AddressInfo).port;
    secretHarness = await startHarness({
      SIGIL_SMS_URL: `http://smsuser:${password}@127.0.0.1:${port}/sms/${pathKey}?token=${queryKey}`,
      SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400",
      SIGIL_MESSAGE_POLL_MS: "50",
      SIGIL_MESSAGE_RETRY_BASE_MS: "20",
      SIGIL_MESSAGE_MAX_ATTEMPTS: "2",
    });
    const parent = await secretHarness.organization("App backend");
    sdk = secretHarness.sdk(parent, parent.key, fastPoller);
  });
  afterAll(async () => {
    await secretHarness?.close();
    secretProvider?.closeAllConnections();
    await new Promise<void>((resolve) => (secretProvider?.listening ? secretProvider.close(() => resolve()) : resolve()));
  });

  async function text(phone: string) {
    const device = { apiKeyName: "device", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" } as const;
    const { subOrganizationId } = await sdk.createSubOrganization({
      subOrganizationName: `user ${phone}`,
      rootQuorumThreshold: 1,
      rootUsers: [{ userName: "u", userPhoneNumber: phone, apiKeys: [device], authenticators: [], oauthProviders: [] }],
    });
    await sdk.initOtpAuth({
      organizationId: subOrganizationId,
      otpType: "OTP_TYPE_SMS",
      contact: phone,
      appName: "Demo",
      otpLength: 6,
      alphanumeric: false,
    });
    for (let i = 0; i < 400; i++) {
      const row = await secretHarness.server.store.db
        .selectFrom("outbound_messages")
        .selectAll()
        .where("recipient", "=", phone)
        .executeTakeFirstOrThrow();
      if (row.status !== "pending") return row;
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`the message to ${phone} is still pending`);
  }

  it("sends with the user name and password as Basic authorization; a provider out of reach is logged and stored without them", async () => {
    const sent = await text("+15553000001");
    expect(sent.status).toBe("sent");
    expect(received).toEqual([
      { url: `/sms/${pathKey}?token=${queryKey}`, authorization: `Basic ${Buffer.from(`smsuser:${password}`).toString("base64")}` },
    ]);
    secretProvider.closeAllConnections();
    await new Promise<void>((resolve) => secretProvider.close(() => resolve()));
    const failed = await text("+15553000002");
    expect(failed).toMatchObject({ status: "failed", last_error: "SMS provider could not be reached (ECONNREFUSED)" });
    const everything = `${secretHarness.logLines.join("\n")}\n${await secretHarness.snapshot()}`.toLowerCase();
    expect(partsOf(secrets).filter((part) => everything.includes(part))).toEqual([]);
  });
});
