// Send budgets of one-time passwords: whoever may start a code (an end user, as a sub-organization's
// own root) must not be able to mail or text strangers without bound through the operator's relay.
// Budgets here are small (8 codes an hour per top-level organization, 3 per end user's credentials,
// 3 per contact in 10 minutes); emails go to an SMTP server the test runs.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AddressInfo } from "node:net";
import { SMTPServer } from "smtp-server";
import { Turnkey } from "@turnkey/sdk-server";
import { startHarness, newKeyPair, signedRequest, type ApiKeyPair, type Harness } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { cliDeployment } from "./helpers/processes.js";
import { loadConfig } from "../src/config.js";
import { openStore } from "../src/store/database.js";
import { contactKey } from "../src/services/send-budgets.js";

const LIMITS = { SIGIL_OTP_PER_ORGANIZATION_LIMIT: "8", SIGIL_OTP_PER_END_USER_LIMIT: "3", SIGIL_OTP_PER_CONTACT_LIMIT: "3" };
const HOUR = 3600;

let smtp: SMTPServer;
const mails: string[] = [];
let h: Harness;
let offset = 0;

beforeAll(async () => {
  smtp = new SMTPServer({
    authOptional: true,
    disabledCommands: ["STARTTLS", "AUTH"],
    logger: false,
    onData(stream, session, callback) {
      stream.on("data", () => undefined);
      stream.on("end", () => {
        for (const rcpt of session.envelope.rcptTo) mails.push(rcpt.address);
        callback();
      });
    },
  });
  await new Promise<void>((resolve) => smtp.listen(0, "127.0.0.1", resolve));
  const smtpPort = (smtp.server.address() as AddressInfo).port;
  const env = {
    ...LIMITS,
    SIGIL_SMTP_URL: `smtp://127.0.0.1:${smtpPort}`,
    SIGIL_TIMESTAMP_WINDOW_SECONDS: "86400",
    SIGIL_MESSAGE_POLL_MS: "50",
  };
  h = await startHarness(env, { clock: () => Date.now() + offset });
});
afterAll(async () => {
  await h.close();
  await new Promise<void>((resolve) => smtp.close(() => resolve()));
});

let lastTimestamp = 0;
/** init_otp (V3) or init_otp_auth (V3) as raw HTTP, to read the status and the Retry-After header. */
async function start(baseUrl: string, key: ApiKeyPair, organizationId: string, operation: "init_otp" | "init_otp_auth", contact: string) {
  lastTimestamp = Math.max(Date.now(), lastTimestamp + 1);
  const type = operation === "init_otp" ? "ACTIVITY_TYPE_INIT_OTP_V3" : "ACTIVITY_TYPE_INIT_OTP_AUTH_V3";
  const otpType = contact.startsWith("+") ? "OTP_TYPE_SMS" : "OTP_TYPE_EMAIL";
  const parameters = { otpType, contact, appName: "Demo" };
  const { body, headers } = signedRequest({ type, timestampMs: String(lastTimestamp), organizationId, parameters }, key);
  const response = await fetch(`${baseUrl}/public/v1/submit/${operation}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body,
  });
  const json = (await response.json()) as any;
  const code = json.details?.[0]?.turnkeyErrorCode as string | undefined;
  return { status: response.status, retryAfter: response.headers.get("retry-after"), code, message: String(json.message ?? ""), json };
}

const device = (key: ApiKeyPair, apiKeyName = "device") => ({
  apiKeyName,
  publicKey: key.publicKey,
  curveType: "API_KEY_CURVE_P256" as const,
});

/** A top-level organization (an app's backend) and a way to make its end users: sub-organizations
 * whose root user holds its own API key. */
async function app(name: string) {
  const org = await h.organization(name);
  const backend = h.sdk(org, org.key, fastPoller);
  let users = 0;
  return {
    org,
    async endUser() {
      users += 1;
      const key = newKeyPair();
      const email = `${name.replace(/\W/g, "")}.user${users}@example.com`;
      const { subOrganizationId, rootUserIds } = await backend.createSubOrganization({
        subOrganizationName: `${name} user ${users}`,
        rootQuorumThreshold: 1,
        rootUsers: [{ userName: "end user", userEmail: email, apiKeys: [device(key)], authenticators: [], oauthProviders: [] }],
      });
      return { subOrganizationId, userId: rootUserIds![0]!, key, email };
    },
  };
}

/** Every row of every table (the harness's snapshot), but for the courier's own columns. */
async function everything(harness: Harness = h): Promise<Record<string, string[]>> {
  const out = JSON.parse(await harness.snapshot()) as Record<string, string[]>;
  // The courier works on earlier messages meanwhile (sends, retries, erases their text): those columns
  // are its own; which messages exist, to whom, is what a request could change.
  const messages = await harness.server.store.db
    .selectFrom("outbound_messages")
    .select(["id", "organization_id", "channel", "recipient", "expires_at", "created_at"])
    .execute();
  out.outbound_messages = messages.map((r) => JSON.stringify(r)).sort();
  // What the courier observed of those sends (list_email_events) is its own record too.
  delete out.email_events;
  return out;
}

/** Proves a refused send changed nothing but what every refused activity records: its FAILED
 * activity row and its policy evaluation. */
async function refusedUnchanged<T extends { status: number; code?: string }>(send: () => Promise<T>, harness: Harness = h): Promise<T> {
  const before = await everything(harness);
  const response = await send();
  expect(response.status).toBe(429);
  expect(response.code).toBe("OTP_RATE_LIMITED");
  const after = await everything(harness);
  for (const table of Object.keys(before)) {
    if (table === "activities" || table === "policy_evaluations") continue;
    expect(after[table], table).toEqual(before[table]);
  }
  const added = after.activities!.filter((row) => !before.activities!.includes(row)).map((row) => JSON.parse(row));
  expect(added).toHaveLength(1);
  expect(added[0].status).toBe("ACTIVITY_STATUS_FAILED");
  expect(added[0].failure).toContain("OTP_RATE_LIMITED");
  expect(after.policy_evaluations!.length).toBe(before.policy_evaluations!.length + 1);
  return response;
}

const outboxOf = (organizationIds: string[]) =>
  h.server.store.db.selectFrom("outbound_messages").select("recipient").where("organization_id", "in", organizationIds).execute();

/** Waits until the SMTP server received a mail to `to` (the courier runs after the commit). */
async function delivered(to: string): Promise<void> {
  for (let i = 0; i < 400 && !mails.includes(to); i++) await new Promise((r) => setTimeout(r, 25));
  expect(mails).toContain(to);
}

describe("a top-level organization's budget", () => {
  it("counts its sub-organizations' sends toward it, so more sub-organizations buy no more; Retry-After says when a slot frees", async () => {
    const shop = await app("Shop");
    const users = [await shop.endUser(), await shop.endUser(), await shop.endUser(), await shop.endUser()];
    const firstSent = Date.now() + offset;
    // Four end users, two strangers each (under their own budget of 3): the organization's 8.
    for (const [i, user] of users.entries()) {
      for (const n of [1, 2])
        expect((await start(h.url, user.key, user.subOrganizationId, "init_otp", `stranger.${i}.${n}@example.net`)).status).toBe(200);
    }
    const late = await shop.endUser();
    const refused = await refusedUnchanged(() =>
      start(h.url, late.key, late.subOrganizationId, "init_otp", "one.more.stranger@example.net"),
    );
    expect(refused.message).toContain("SIGIL_OTP_PER_ORGANIZATION_LIMIT");
    expect(refused.message).toContain(shop.org.organizationId);
    // The oldest of the eight leaves the hour-long window first: that is when a slot frees.
    const retryAfter = Number(refused.retryAfter);
    expect(refused.retryAfter).toMatch(/^\d+$/);
    expect(retryAfter).toBeLessThanOrEqual(HOUR);
    expect(retryAfter).toBeGreaterThanOrEqual(HOUR - Math.ceil((Date.now() + offset - firstSent) / 1000));
    // The app's backend draws on the same budget, in any of its sub-organizations.
    expect((await start(h.url, shop.org.key, users[0]!.subOrganizationId, "init_otp_auth", users[0]!.email)).code).toBe("OTP_RATE_LIMITED");
    // Another app's budget is its own.
    const other = await (await app("Other")).endUser();
    expect((await start(h.url, other.key, other.subOrganizationId, "init_otp", "stranger.0.1@example.net")).status).toBe(200);
    // Nothing was queued for the refused sends: eight messages, to the eight strangers.
    const queued = await outboxOf([...users, late].map((u) => u.subOrganizationId));
    expect(queued.map((m) => m.recipient).sort()).toEqual(
      users.flatMap((_, i) => [`stranger.${i}.1@example.net`, `stranger.${i}.2@example.net`]).sort(),
    );

    // Two seconds before the slot frees the answer is the same; at Retry-After the send goes out.
    offset += (retryAfter - 2) * 1000;
    try {
      expect((await start(h.url, late.key, late.subOrganizationId, "init_otp", "still.too.early@example.net")).code).toBe(
        "OTP_RATE_LIMITED",
      );
      offset += 2000;
      expect((await start(h.url, late.key, late.subOrganizationId, "init_otp", "on.time@example.net")).status).toBe(200);
      // Sent by the courier on the server's (moved) clock.
      await delivered("on.time@example.net");
    } finally {
      offset -= retryAfter * 1000;
    }
    expect(mails).not.toContain("one.more.stranger@example.net");
    expect(mails).not.toContain("still.too.early@example.net");
  });
});

describe("an end user's credentials", () => {
  it("share one budget per sub-organization, however many keys its root mints; the app's backend still reaches that user", async () => {
    const wallet = await app("Wallet");
    const user = await wallet.endUser();
    for (const n of [1, 2, 3])
      expect((await start(h.url, user.key, user.subOrganizationId, "init_otp", `target.${n}@example.org`)).status).toBe(200);
    const refused = await refusedUnchanged(() => start(h.url, user.key, user.subOrganizationId, "init_otp", "target.4@example.org"));
    expect(refused.message).toContain("SIGIL_OTP_PER_END_USER_LIMIT");
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect(Number(refused.retryAfter)).toBeLessThanOrEqual(HOUR);

    // A second API key of the same end user gets no fresh budget.
    const second = newKeyPair();
    const own = h.sdk({ organizationId: user.subOrganizationId }, user.key, fastPoller);
    await own.createApiKeys({ userId: user.userId, apiKeys: [device(second, "second device")] });
    const again = await refusedUnchanged(() => start(h.url, second, user.subOrganizationId, "init_otp", "target.5@example.org"));
    expect(again.message).toContain("SIGIL_OTP_PER_END_USER_LIMIT");

    // The app's backend logs the user in (its budget is the organization's), and other end users keep theirs.
    expect((await start(h.url, wallet.org.key, user.subOrganizationId, "init_otp_auth", user.email)).status).toBe(200);
    const neighbour = await wallet.endUser();
    expect((await start(h.url, neighbour.key, neighbour.subOrganizationId, "init_otp", "target.4@example.org")).status).toBe(200);
    const queued = (await outboxOf([user.subOrganizationId])).map((m) => m.recipient).sort();
    expect(queued).toEqual(["target.1@example.org", "target.2@example.org", "target.3@example.org", user.email].sort());
    await delivered(user.email);
    expect(mails).not.toContain("target.5@example.org");
  });
});

describe("one contact's share for end users", () => {
  it("is per top-level organization: one app's end users spend their own app's share, never another app's", async () => {
    const contact = "shared.inbox@example.net";
    const spender = await app("Spender");
    // Two end users of one app send the contact twice the per-contact budget (3 each): their app's share.
    for (const user of [await spender.endUser(), await spender.endUser()]) {
      for (let i = 0; i < 3; i++) expect((await start(h.url, user.key, user.subOrganizationId, "init_otp", contact)).status).toBe(200);
    }
    const third = await spender.endUser();
    const refused = await refusedUnchanged(() => start(h.url, third.key, third.subOrganizationId, "init_otp", contact));
    expect(refused.message).toContain(`organization ${spender.org.organizationId}'s sub-organizations share`);

    // Another app's end user still reaches that contact.
    const other = await app("Bystander");
    const user = await other.endUser();
    expect((await start(h.url, user.key, user.subOrganizationId, "init_otp", contact)).status).toBe(200);
  });
});

describe("one credential of a top-level organization", () => {
  it("spends at most its own budget; the organization's other keys keep theirs", async () => {
    // A server of its own: here one key's budget (2) is below the organization's (8).
    const own = await startHarness({ ...LIMITS, SIGIL_OTP_PER_CREDENTIAL_LIMIT: "2" });
    try {
      const org = await own.organization("Keys");
      const second = newKeyPair();
      const backend = own.sdk(org, org.key, fastPoller);
      await backend.createApiKeys({ userId: org.userId, apiKeys: [device(second, "second backend")] });
      // Top-level organizations opt in to one-time passwords.
      await backend.setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
      for (const n of [1, 2])
        expect((await start(own.url, org.key, org.organizationId, "init_otp", `someone.${n}@example.org`)).status).toBe(200);
      const refused = await refusedUnchanged(() => start(own.url, org.key, org.organizationId, "init_otp", "someone.3@example.org"), own);
      expect(refused.message).toContain("SIGIL_OTP_PER_CREDENTIAL_LIMIT");
      expect(refused.message).toContain(org.apiKeyId);
      expect(Number(refused.retryAfter)).toBeGreaterThan(0);
      expect(Number(refused.retryAfter)).toBeLessThanOrEqual(HOUR);
      expect((await start(own.url, second, org.organizationId, "init_otp", "someone.3@example.org")).status).toBe(200);
    } finally {
      await own.close();
    }
  });
});

describe("contacts are counted in one spelling per inbox", () => {
  it("Gmail's dots, +tags and googlemail.com are one inbox (the mail still goes to the address as written); a 429 says when to retry", async () => {
    const mail = await app("Gmail");
    const user = await mail.endUser();
    // The app's backend (its per-contact budget: 3 in 10 minutes).
    const send = (contact: string) => start(h.url, mail.org.key, user.subOrganizationId, "init_otp", contact);
    const spellings = ["jane.doe@gmail.com", "JaneDoe+news@googlemail.com", "j.a.n.e.d.o.e@GMAIL.com."];
    for (const spelling of spellings) expect((await send(spelling)).status, spelling).toBe(200);
    const refused = await refusedUnchanged(() => send("janedoe@gmail.com"));
    expect(refused.message).toContain("SIGIL_OTP_PER_CONTACT_LIMIT");
    expect(Number(refused.retryAfter)).toBeGreaterThan(0);
    expect(Number(refused.retryAfter)).toBeLessThanOrEqual(600);
    expect((await outboxOf([user.subOrganizationId])).map((m) => m.recipient).sort()).toEqual([...spellings].sort());
  });

  it("a trailing full stop in any script (。 ． ｡, which IDNA maps to '.') is no new contact", async () => {
    for (const stop of ["\u3002", "\uFF0E", "\uFF61", "."]) {
      expect(contactKey("email", `vi.ctim@gmail.com${stop}`), stop).toBe("victim@gmail.com");
      expect(contactKey("email", `Victim+x@Example.com${stop}`), stop).toBe("victim@example.com");
    }
    const stops = await app("Stops");
    const user = await stops.endUser();
    // The app's backend (its per-contact budget: 3 in 10 minutes).
    const send = (contact: string) => start(h.url, stops.org.key, user.subOrganizationId, "init_otp", contact);
    for (const spelling of ["victim@example.com", "victim@example.com\u3002", "victim@example.com\uFF0E"])
      expect((await send(spelling)).status, spelling).toBe(200);
    expect((await refusedUnchanged(() => send("victim@example.com\uFF61"))).message).toContain("SIGIL_OTP_PER_CONTACT_LIMIT");
  });

  it("elsewhere dots matter (j.d and jd are two inboxes); a phone number is its digits however punctuated", async () => {
    const other = await app("Elsewhere");
    const user = await other.endUser();
    const send = (contact: string) => start(h.url, other.org.key, user.subOrganizationId, "init_otp", contact);
    for (let i = 0; i < 3; i++) expect((await send("j.d@example.com")).status).toBe(200);
    expect((await send("jd@example.com")).status).toBe(200);
    for (const spelling of ["+1 555 010 0000", "+1 (555) 010-0000", "+15550100000"])
      expect((await send(spelling)).status, spelling).toBe(200);
    expect((await refusedUnchanged(() => send("+1.555.010.0000"))).message).toContain("SIGIL_OTP_PER_CONTACT_LIMIT");
  });
});

describe("two server processes on one database", () => {
  it("admit exactly the organization's budget among concurrent sends into many of its sub-organizations", async () => {
    const deployment = await cliDeployment(LIMITS);
    try {
      const [first, second] = [await deployment.start(), await deployment.start()];
      const { key, organizationId } = deployment;
      const client = {
        apiBaseUrl: first!.url,
        apiPublicKey: key.publicKey,
        apiPrivateKey: key.privateKey,
        defaultOrganizationId: organizationId,
        ...fastPoller,
      };
      const backend = new Turnkey(client).apiClient();
      const subs = await Promise.all(
        Array.from({ length: 16 }, (_, i) =>
          backend.createSubOrganization({
            subOrganizationName: `user ${i}`,
            rootQuorumThreshold: 1,
            rootUsers: [{ userName: "u", apiKeys: [device(newKeyPair())], authenticators: [], oauthProviders: [] }],
          }),
        ),
      );
      // Into sixteen sub-organizations (sixteen different organization locks), half through each process.
      const answers = await Promise.all(
        subs.map(({ subOrganizationId }, i) =>
          start(i % 2 ? second!.url : first!.url, key, subOrganizationId, "init_otp", `person.${i}@example.net`),
        ),
      );
      expect(answers.filter((a) => a.status === 200)).toHaveLength(8);
      expect(answers.filter((a) => a.code === "OTP_RATE_LIMITED")).toHaveLength(8);
      const store = await openStore(loadConfig(deployment.env, { dataDir: deployment.database.dataDir }));
      try {
        const subIds = subs.map((s) => s.subOrganizationId);
        expect(await store.db.selectFrom("outbound_messages").select("id").where("organization_id", "in", subIds).execute()).toHaveLength(
          8,
        );
        expect(
          await store.db.selectFrom("otp_sends").select("created_at").where("root_organization_id", "=", organizationId).execute(),
        ).toHaveLength(8);
      } finally {
        await store.close();
      }
    } finally {
      await deployment.stop();
    }
  }, 90_000); // two server processes started through the CLI: slow on a loaded 2-core machine
});
