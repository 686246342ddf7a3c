// The web console (docs/console.md) in Debian's Chromium: served files and their headers, sign-in
// with an API key and with a passkey (Chromium's virtual authenticator), approvals, policies with the
// compiler's errors, every page checked by axe-core. One browser and one server for the whole file.
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import Fastify from "fastify";
import { CONSOLE_CSP, serveConsole } from "../src/http/console.js";
import { freePort, newKeyPair, signedRequest, startHarness, type Harness } from "./helpers/harness.js";
import { fastPoller, organizationWith } from "./helpers/organizations.js";
import { receiver, until } from "./helpers/webhook-receiver.js";
import {
  consolePage,
  launchChromium,
  seriousViolations,
  signInWithApiKey,
  signInWithPasskey,
  virtualAuthenticator,
} from "./helpers/console-browser.js";

let h: Harness;
let browser: Browser;
/** The console as a person opens it: on localhost, a host name WebAuthn accepts as a relying party. */
let consoleUrl: string;
/** Every page opened, so that the Content-Security-Policy violations of all of them are checked. */
const opened: Array<{ violations: string[] }> = [];

beforeAll(async () => {
  const port = await freePort();
  consoleUrl = `http://localhost:${port}/console`;
  [h, browser] = await Promise.all([
    startHarness({
      SIGIL_PORT: String(port),
      SIGIL_WEBAUTHN_RP_IDS: "localhost",
      SIGIL_WEBAUTHN_ORIGINS: `http://localhost:${port}`,
      // The webhooks page's deliveries go to receivers on this machine, promptly.
      SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
      SIGIL_WEBHOOK_POLL_MS: "50",
    }),
    launchChromium(),
  ]);
});

afterAll(async () => {
  await browser?.close();
  await h?.close();
});

async function newPage(viewport?: { width: number; height: number }) {
  const opened_ = await consolePage(browser, viewport);
  opened.push(opened_);
  return opened_.page;
}

const heading = (page: Page) => page.getByRole("heading", { level: 1 });
const nav = (page: Page, name: string) => page.getByRole("navigation", { name: "Console" }).getByRole("link", { name, exact: true });

async function expectAccessible(page: Page) {
  expect(await seriousViolations(page)).toEqual([]);
}

describe("the console's files", () => {
  it("are served at /console with a strict Content-Security-Policy and no other path", async () => {
    const page = await fetch(`${h.url}/console`);
    expect(page.status).toBe(200);
    expect(page.headers.get("content-type")).toBe("text/html; charset=utf-8");
    expect(page.headers.get("content-security-policy")).toBe(CONSOLE_CSP);
    expect(CONSOLE_CSP).not.toMatch(/unsafe-inline|unsafe-eval/);
    expect(CONSOLE_CSP).toContain("frame-ancestors 'none'");
    expect(page.headers.get("x-content-type-options")).toBe("nosniff");
    expect(page.headers.get("referrer-policy")).toBe("no-referrer");
    const html = await page.text();
    const assets = [...html.matchAll(/(?:src|href)="(\/console\/assets\/[^"]+)"/g)].map((m) => m[1]!);
    expect(assets.length).toBeGreaterThanOrEqual(2);
    // Nothing but the console's own files: no inline script or style, no other origin.
    expect(html).not.toMatch(/<script(?![^>]*\bsrc=)|<style|https?:\/\//);
    for (const asset of assets) {
      const response = await fetch(h.url + asset);
      expect(response.status).toBe(200);
      expect(response.headers.get("x-content-type-options")).toBe("nosniff");
      expect(response.headers.get("content-security-policy")).toBe(CONSOLE_CSP);
      expect(response.headers.get("content-type")).toMatch(/^text\/(javascript|css); charset=utf-8$/);
    }
    for (const path of ["/console/assets/missing.js", "/console/assets/../index.html", "/console/users", "/console/index.html"]) {
      const response = await fetch(h.url + path);
      expect(response.status, path).toBe(404);
      expect(((await response.json()) as { details: Array<{ turnkeyErrorCode: string }> }).details[0]!.turnkeyErrorCode).toBe(
        "ENDPOINT_NOT_FOUND",
      );
    }
  });
});

describe("a checkout whose console was not built", () => {
  it("serves no /console", async () => {
    const empty = mkdtempSync(path.join(os.tmpdir(), "sigil-no-console-"));
    const app = Fastify();
    try {
      expect(serveConsole(app, empty)).toBe(false);
      expect((await app.inject({ method: "GET", url: "/console" })).statusCode).toBe(404);
    } finally {
      await app.close();
      rmSync(empty, { recursive: true });
    }
  });
});

describe("signing in with an API key", () => {
  it("shows the server's refusal for an unknown key and for another organization's key, and keeps no key in storage", async () => {
    const org = await h.organization("Keys");
    const other = await h.organization("Other");
    const page = await newPage();
    await page.goto(consoleUrl);
    await expectAccessible(page);

    // The words are the server's own: the same request from a program is refused with them.
    const refusal = async (key: { publicKey: string; privateKey: string }) => {
      const answer = await h.post("/public/v1/query/whoami", ...stamped({ organizationId: org.organizationId }, key));
      return `${answer.json.message} (${answer.json.details[0].turnkeyErrorCode})`;
    };
    const unknownKey = newKeyPair();
    await signInWithApiKey(page, consoleUrl, org.organizationId, unknownKey);
    await expect.poll(() => page.getByRole("alert").textContent()).toBe(await refusal(unknownKey));
    await signInWithApiKey(page, consoleUrl, org.organizationId, other.key);
    await expect.poll(() => page.getByRole("alert").textContent()).toBe(await refusal(other.key));
    expect(await refusal(other.key)).not.toBe(await refusal(unknownKey));

    // A private key that is not the public key's is refused in the page, before any request.
    await signInWithApiKey(page, consoleUrl, org.organizationId, { publicKey: org.key.publicKey, privateKey: newKeyPair().privateKey });
    await expect.poll(() => page.getByRole("alert").textContent()).toContain("does not belong");

    // The file `sigil keygen` writes fills both fields; a file that is not one is refused in the page.
    const keyFile = page.getByLabel("Or the key file from sigil keygen");
    await keyFile.setInputFiles({ name: "notes.txt", mimeType: "text/plain", buffer: Buffer.from("not a key") });
    await expect.poll(() => page.getByRole("alert").textContent()).toBe("The file is not a key file written by sigil keygen");
    await keyFile.setInputFiles({ name: "root-key.json", mimeType: "application/json", buffer: Buffer.from(JSON.stringify(org.key)) });
    await expect.poll(() => page.getByLabel("API public key").inputValue()).toBe(org.key.publicKey);
    await page.getByRole("button", { name: "Sign in", exact: true }).click();
    await expect.poll(() => heading(page).textContent()).toBe("Activities");
    const stored = await page.evaluate(() => JSON.stringify({ ...localStorage, ...sessionStorage }));
    expect(stored).not.toContain(org.key.privateKey);
    await page.getByRole("button", { name: "Sign out" }).click();
    await expect(page.getByLabel("API private key").inputValue()).resolves.toBe("");
  });
});

describe("activities and approvals with API keys", () => {
  it("pages and filters the activity log, and approves and rejects from the detail", async () => {
    const { org, root, members } = await organizationWith(h, ["alice", "bob"]);
    const { alice, bob } = members;
    await root.createPolicy({
      policyName: "tags need bob",
      effect: "EFFECT_ALLOW",
      condition: "activity.resource == 'USER' && activity.action == 'CREATE'",
      consensus: `approvers.count() >= 2 && approvers.any(user, user.id == '${bob!.userId}')`,
      notes: "",
    });
    for (let i = 0; i < 22; i++) await root.createUserTag({ userTagName: `tag ${i}`, userIds: [] });
    const approveMe = await alice!.client.createUserTag({ userTagName: "approve me", userIds: [] });
    const rejectMe = await alice!.client.createUserTag({ userTagName: "reject me", userIds: [] });
    expect(approveMe.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");

    const list = await newPage();
    await signInWithApiKey(list, consoleUrl, org.organizationId, bob!.key);
    await expect.poll(() => heading(list).textContent()).toBe("Activities");
    const rowsOf = (page: Page) => page.getByRole("table").getByRole("row");
    let rows = rowsOf(list);
    await expect.poll(() => rows.count()).toBe(21); // a header and a page of 20
    await expectAccessible(list);
    const links = () => rows.getByRole("link").evaluateAll((found) => found.map((a) => a.getAttribute("href")));
    const firstPage = await links();
    expect(await list.getByRole("link", { name: "Newer" }).count()).toBe(0);
    await list.getByRole("link", { name: "Older" }).click();
    await expect.poll(() => rows.count()).toBe(1 + 6); // create_users, the policy, 22 tags and the two waiting: 26
    const secondPage = await links();
    expect(new Set([...firstPage, ...secondPage]).size).toBe(26);
    expect(await list.getByRole("link", { name: "Older" }).count()).toBe(0);
    // Back to the newer page: the same 20, none skipped.
    await list.getByRole("link", { name: "Newer" }).click();
    await expect.poll(links).toEqual(firstPage);
    await list.getByLabel("Status").selectOption("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    await list.getByRole("button", { name: "Filter" }).click();
    await expect.poll(() => rows.count()).toBe(3);
    await list.getByLabel("User").selectOption(alice!.userId);
    await list.getByLabel("Status").selectOption("");
    await list.getByRole("button", { name: "Filter" }).click();
    await expect.poll(() => rows.count()).toBe(3);
    expect(list.url()).toContain(`user=${alice!.userId}`);

    await nav(list, "Approvals").click();
    await expect.poll(() => heading(list).textContent()).toBe("Approvals");
    await expect.poll(() => rows.count()).toBe(3);
    await expectAccessible(list);
    // Bob's first browser watches the activity while his second approves it.
    await list.goto(`${consoleUrl}#/activities/${approveMe.activity.id}`);
    await expect.poll(() => list.getByLabel("Status").textContent()).toBe("CONSENSUS_NEEDED");
    // A shared link, opened in another browser, asks to sign in first, then shows the page it names.
    const page = await newPage();
    await page.goto(`${consoleUrl}#/activities/${approveMe.activity.id}`);
    await signInAgain(page, org.organizationId, bob!.key);
    rows = rowsOf(page);
    await expect.poll(() => page.getByLabel("Status").textContent()).toBe("CONSENSUS_NEEDED");
    await expectAccessible(page);
    await page.getByRole("button", { name: "Approve" }).click();
    await expect.poll(() => page.getByLabel("Status").textContent()).toBe("COMPLETED");
    expect((await root.getActivity({ activityId: approveMe.activity.id })).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    // The watching page reads the waiting activity again (every 3 s) and shows it completed.
    await expect.poll(() => list.getByLabel("Status").textContent(), { timeout: 10_000 }).toBe("COMPLETED");

    await nav(page, "Approvals").click();
    await expect.poll(() => rows.count()).toBe(2);
    await rows.nth(1).getByRole("link").click();
    await page.getByRole("button", { name: "Reject" }).click();
    await expect.poll(() => page.getByLabel("Status").textContent()).toBe("REJECTED");
    expect((await root.getActivity({ activityId: rejectMe.activity.id })).activity.status).toBe("ACTIVITY_STATUS_REJECTED");
    await nav(page, "Approvals").click();
    await expect.poll(() => page.getByText("Nothing waits for you.").count()).toBe(1);
  });
});

/** A body and its X-Stamp header, for h.post. */
function stamped(body: unknown, key: { publicKey: string; privateKey: string }): [string, Record<string, string>] {
  const request = signedRequest(body, key);
  return [request.body, request.headers];
}

async function signInAgain(page: Page, organizationId: string, key: { publicKey: string; privateKey: string }) {
  await page.getByLabel("Organization ID", { exact: true }).fill(organizationId);
  await page.getByLabel("API public key").fill(key.publicKey);
  await page.getByLabel("API private key").fill(key.privateKey);
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
}

describe("passkeys", () => {
  it("registers passkeys through the console, signs in with them, and completes a two-approval activity", async () => {
    const { org, members } = await organizationWith(h, ["alice", "bob", "carol"]);
    const { alice, bob, carol } = members;
    const root = h.sdk(org, org.key, fastPoller);
    await root.createPolicy({
      policyName: "tags need alice and bob",
      effect: "EFFECT_ALLOW",
      condition: "activity.resource == 'USER' && activity.action == 'CREATE'",
      consensus: `approvers.any(user, user.id == '${alice!.userId}') && approvers.any(user, user.id == '${bob!.userId}')`,
      notes: "",
    });

    /** A person with their own browser and passkey: registers it with their API key, then signs in with it. */
    const passkeySession = async (member: typeof alice, name: string) => {
      const page = await newPage();
      const authenticator = await virtualAuthenticator(page);
      await signInWithApiKey(page, consoleUrl, org.organizationId, member!.key);
      await nav(page, "Users").click();
      await page.getByLabel("Passkey name").fill(name);
      await page.getByRole("button", { name: "Add a passkey" }).click();

      await expect.poll(() => page.getByText(`Passkey ${name} added.`).count()).toBe(1);
      await expect.poll(() => page.getByText(name).count()).toBeGreaterThan(0);
      await page.getByRole("button", { name: "Sign out" }).click();
      await signInWithPasskey(page, consoleUrl, org.organizationId);
      await nav(page, "Organization").click();
      await expect.poll(() => page.getByText("with a passkey").count()).toBe(1);
      const [credentialId] = await authenticator.credentialIds();
      return { page, credentialId: credentialId! };
    };
    const [a, b] = await Promise.all([passkeySession(alice, "alice's laptop"), passkeySession(bob, "bob's phone")]);
    const registered = await root.getAuthenticators({ userId: alice!.userId });
    expect(registered.authenticators.map((x) => x.credentialId)).toEqual([a.credentialId]);

    const pending = await carol!.client.createUserTag({ userTagName: "needs two", userIds: [] });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");

    for (const [person, after] of [
      [a, "CONSENSUS_NEEDED"],
      [b, "COMPLETED"],
    ] as const) {
      await nav(person.page, "Approvals").click();
      await person.page.getByRole("link", { name: "CREATE_USER_TAG" }).click();
      await person.page.getByRole("button", { name: "Approve" }).click();
      await expect.poll(() => person.page.getByLabel("Status").textContent()).toBe(after);
    }
    await expectAccessible(b.page);

    // On the server: each approval is a vote stamped by that person's passkey.
    const row = await h.server.store.db
      .selectFrom("activities")
      .select(["status", "votes"])
      .where("id", "=", pending.activity.id)
      .executeTakeFirstOrThrow();
    expect(row.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const votes = JSON.parse(row.votes) as Array<{ userId: string; scheme: string; webauthnCredentialId?: string }>;
    expect(votes.map((v) => [v.userId, v.scheme, v.webauthnCredentialId ?? null])).toEqual([
      [carol!.userId, "SIGNATURE_SCHEME_TK_API_P256", null],
      [alice!.userId, "SIGNATURE_SCHEME_TK_WEBAUTHN", a.credentialId],
      [bob!.userId, "SIGNATURE_SCHEME_TK_WEBAUTHN", b.credentialId],
    ]);

    // Alice's passkey is no key of another organization: signing in there shows the server's refusal.
    const other = await h.organization("Elsewhere");
    await a.page.getByRole("button", { name: "Sign out" }).click();
    await signInWithPasskey(a.page, consoleUrl, other.organizationId);
    await expect
      .poll(() => a.page.getByRole("alert").textContent())
      .toBe(`the stamp's authenticator does not belong to organization ${other.organizationId} (ORGANIZATION_MISMATCH)`);
    expect(await heading(a.page).textContent()).toBe("Sigil console");
  });
});

describe("policies", () => {
  it("shows a compile error at its line and column, saves the fixed policy, evaluates a request and deletes it", async () => {
    const org = await h.organization("Policies");
    const root = h.sdk(org, org.key);
    const page = await newPage();
    await signInWithApiKey(page, consoleUrl, org.organizationId, org.key);
    await nav(page, "Policies").click();
    await page.getByRole("link", { name: "New policy" }).click();
    await page.getByLabel("Policy name").fill("wallets need two");
    await page.getByLabel("Condition").fill("activity.resource == 'WALLET' &&\nactivity.action ==");
    await page.getByLabel("Consensus").fill("approvers.count() >= 2");
    const before = await h.snapshot();
    await page.getByRole("button", { name: "Save policy" }).click();
    const error = page.locator("#policy-condition-error");
    await expect.poll(() => error.textContent()).toMatch(/^Line 2, column 19: /);
    await expect(page.getByLabel("Condition").getAttribute("aria-invalid")).resolves.toBe("true");
    await expectAccessible(page);
    expect((await root.getPolicies({})).policies).toEqual([]);
    // A refused activity is recorded; nothing else changed.
    expect(JSON.parse(await h.snapshot()).policies).toEqual(JSON.parse(before).policies);

    await page.getByLabel("Condition").fill("activity.resource == 'WALLET' &&\nactivity.action == 'CREATE'");
    await page.getByRole("button", { name: "Save policy" }).click();
    await expect.poll(() => page.getByText("Saved wallets need two.").count()).toBe(1);
    const [saved] = (await root.getPolicies({})).policies;
    expect(saved).toMatchObject({
      policyName: "wallets need two",
      condition: "activity.resource == 'WALLET' &&\nactivity.action == 'CREATE'",
    });

    // Edited: the consensus is compiled too, and its error shown under it.
    await page.getByRole("link", { name: "Edit wallets need two" }).click();
    await page.getByLabel("Consensus").fill("approvers.count() >=");
    await page.getByRole("button", { name: "Save policy" }).click();
    await expect.poll(() => page.locator("#policy-consensus-error").textContent()).toMatch(/^Line 1, column 21: /);
    expect((await root.getPolicies({})).policies[0]!.consensus).toBe("approvers.count() >= 2");
    await page.getByLabel("Consensus").fill("approvers.count() >= 3");
    await page.getByRole("button", { name: "Save policy" }).click();
    await expect.poll(() => page.getByText("Saved wallets need two.").count()).toBe(1);
    expect((await root.getPolicies({})).policies[0]!.consensus).toBe("approvers.count() >= 3");

    // Parameters that are not JSON are refused in the page; a type the server does not know, by the server.
    await page.getByLabel("Parameters (JSON)").fill("{ walletName: ");
    await page.getByRole("button", { name: "Evaluate" }).click();
    await expect.poll(() => page.locator("#evaluate-title ~ [role=alert]").textContent()).toMatch(/^Parameters are not JSON: /);
    await page.getByLabel("Activity type").fill("ACTIVITY_TYPE_MAKE_COFFEE");
    await page.getByLabel("Parameters (JSON)").fill("{}");
    await page.getByRole("button", { name: "Evaluate" }).click();
    await expect.poll(() => page.locator("#evaluate-title ~ [role=alert]").textContent()).toMatch(/\(ACTIVITY_TYPE_UNKNOWN\)$/);
    await page.getByLabel("Activity type").fill("ACTIVITY_TYPE_CREATE_WALLET");
    await page.getByLabel("Parameters (JSON)").fill('{ "walletName": "w", "accounts": [] }');
    await page.getByRole("button", { name: "Evaluate" }).click();
    await expect.poll(() => page.locator(".verdict").textContent()).toBe("ALLOW");

    await page.getByRole("button", { name: "Delete wallets need two" }).click();
    await page.getByRole("button", { name: "Delete wallets need two for good" }).click();
    await expect.poll(async () => (await root.getPolicies({})).policies.length).toBe(0);
  });
});

describe("webhooks", () => {
  it("shows real deliveries to receivers on loopback, newest first, paged, by endpoint and status", async () => {
    const org = await h.organization("Hooks");
    const root = h.sdk(org, org.key, fastPoller);
    const [good, refusing] = await Promise.all([receiver(), receiver()]);
    refusing.answers.push(...Array.from({ length: 20 }, () => 404));
    try {
      const { endpointId: goodId } = await root.createWebhookEndpoint({
        url: good.url,
        name: "audit feed",
        subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
      });
      const { endpointId: refusingId } = await root.createWebhookEndpoint({
        url: refusing.url,
        name: "old receiver",
        subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
      });
      const tags: string[] = [];
      for (let i = 0; i < 11; i++) tags.push((await root.createUserTag({ userTagName: `hooked ${i}`, userIds: [] })).activity.id);
      // 13 events to the feed (both endpoints' creations, 11 tags), 12 to the old receiver (its own creation, 11 tags): 25.
      await until("every delivery made", async () => {
        const rows = await h.server.store.db
          .selectFrom("webhook_deliveries")
          .select("status")
          .where("organization_id", "=", org.organizationId)
          .execute();
        return rows.length === 25 && rows.every((r) => r.status !== "pending");
      });
      expect(good.received).toHaveLength(13);

      const page = await newPage();
      await signInWithApiKey(page, consoleUrl, org.organizationId, org.key);
      await expect.poll(() => heading(page).textContent()).toBe("Activities");
      await nav(page, "Webhooks").click();
      const table = page.getByRole("table", { name: "Recent deliveries" });
      const rows = table.locator("tbody tr");
      const column = (n: number) => rows.locator(`td:nth-child(${n})`).allTextContents();
      await expect.poll(() => rows.count()).toBe(20);
      await expectAccessible(page);
      // The newest: the last tag's deliveries, one to each endpoint, linking to the activity.
      const newest = rows.first();
      expect(await newest.getByRole("link", { name: "activity" }).getAttribute("href")).toBe(`#/activities/${tags[10]}`);
      const firstPage = await table.getByRole("link", { name: "activity" }).evaluateAll((a) => a.map((x) => x.getAttribute("href")));
      expect(firstPage.slice(0, 2)).toEqual([`#/activities/${tags[10]}`, `#/activities/${tags[10]}`]);
      expect(new Set(await column(4))).toEqual(new Set(["delivered", "failed"]));
      const feedRow = rows.filter({ hasText: "audit feed" }).first();
      expect(await feedRow.locator("td:nth-child(4)").textContent()).toBe("delivered");
      expect(await feedRow.locator("td:nth-child(6)").textContent()).toBe("200");
      const oldRow = rows.filter({ hasText: "old receiver" }).first();
      expect(await oldRow.locator("td:nth-child(6)").textContent()).toBe("404: the receiver answered 404");

      // Readable at 390 px too: one card per delivery, nothing wider than the screen.
      await page.setViewportSize({ width: 390, height: 900 });
      expect(await page.evaluate(() => document.documentElement.scrollWidth)).toBeLessThanOrEqual(390);
      await expectAccessible(page);
      await page.setViewportSize({ width: 1280, height: 900 });

      await page.getByRole("link", { name: "Older" }).click();
      await expect.poll(() => rows.count()).toBe(5);
      expect(await page.getByRole("link", { name: "Older" }).count()).toBe(0);
      await page.getByRole("link", { name: "Newer" }).click();
      await expect
        .poll(() => table.getByRole("link", { name: "activity" }).evaluateAll((a) => a.map((x) => x.getAttribute("href"))))
        .toEqual(firstPage);

      // One endpoint's failed deliveries, from its card's link and the filters.
      await page.getByRole("link", { name: "Deliveries to old receiver" }).click();
      await expect.poll(() => rows.count()).toBe(12);
      expect(page.url()).toContain(`endpoint=${refusingId}`);
      await page.getByLabel("Delivery status").selectOption("delivered");
      await page.getByRole("button", { name: "Show" }).click();
      await expect.poll(() => page.getByText("No delivery.").count()).toBe(1);
      await page.getByLabel("Endpoint").selectOption(goodId);
      await page.getByRole("button", { name: "Show" }).click();
      await expect.poll(() => rows.count()).toBe(13);
      expect(new Set(await column(4))).toEqual(new Set(["delivered"]));
      await expectAccessible(page);
    } finally {
      await Promise.all([good.close(), refusing.close()]);
    }
  });
});

describe("every page", () => {
  it("opens from its navigation link and by its URL, with no serious accessibility violation, at 1280 and 390 px", async () => {
    const { org, root } = await organizationWith(h, ["dora"]);
    await root.createWallet({
      walletName: "treasury",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    await root.createPrivateKeys({
      privateKeys: [
        { privateKeyName: "signer", curve: "CURVE_SECP256K1", addressFormats: ["ADDRESS_FORMAT_ETHEREUM"], privateKeyTags: [] },
      ],
    });
    const pages: Array<[string, string]> = [
      ["Activities", "activities"],
      ["Approvals", "approvals"],
      ["Users", "users"],
      ["Policies", "policies"],
      ["Wallets", "wallets"],
      ["Private keys", "private-keys"],
      ["Sub-organizations", "sub-organizations"],
      ["Webhooks", "webhooks"],
      ["Organization", "organization"],
    ];
    for (const width of [1280, 390]) {
      const page = await newPage({ width, height: 900 });
      // By keyboard: the form is submitted with Enter, and a page is reached by Tab and Enter.
      await page.goto(consoleUrl);
      await page.getByLabel("Organization ID", { exact: true }).fill(org.organizationId);
      await page.getByLabel("API public key").fill(org.key.publicKey);
      await page.getByLabel("API private key").fill(org.key.privateKey);
      await page.getByLabel("API private key").press("Enter");
      await expect.poll(() => heading(page).textContent()).toBe("Activities");
      for (let tabs = 0; tabs < 20 && (await page.evaluate(() => document.activeElement?.textContent)) !== "Users"; tabs++) {
        await page.keyboard.press("Tab");
      }
      await page.keyboard.press("Enter");
      await expect.poll(() => heading(page).textContent()).toBe("Users");
      for (const [name, path] of pages) {
        await nav(page, name).click();
        await expect.poll(() => heading(page).textContent()).toBe(name);
        expect(page.url()).toBe(`${consoleUrl}#/${path}`);
        await page.getByText("Loading…").waitFor({ state: "detached" });
        await expectAccessible(page);
        expect(await page.evaluate(() => document.documentElement.scrollWidth), `${name} at ${width} px`).toBeLessThanOrEqual(width);
      }
      await nav(page, "Wallets").click();
      await page.getByRole("link", { name: "treasury" }).click();
      await expect.poll(() => page.getByRole("table").getByRole("row").count()).toBe(2);
    }
  });

  it("pages a wallet's accounts through the API, 50 at a time, none skipped either way", async () => {
    const org = await h.organization("Accounts");
    const root = h.sdk(org, org.key);
    const { walletId } = await root.createWallet({
      walletName: "many",
      accounts: Array.from({ length: 60 }, (_, i) => ({
        curve: "CURVE_SECP256K1" as const,
        pathFormat: "PATH_FORMAT_BIP32" as const,
        path: `m/44'/60'/0'/0/${i}`,
        addressFormat: "ADDRESS_FORMAT_ETHEREUM" as const,
      })),
    });
    const page = await newPage();
    await signInWithApiKey(page, consoleUrl, org.organizationId, org.key);
    await expect.poll(() => heading(page).textContent()).toBe("Activities");
    await page.goto(`${consoleUrl}#/wallets/${walletId}`);
    const paths = () => page.getByRole("table").locator("tbody tr td:nth-child(2)").allTextContents();
    await expect.poll(async () => (await paths()).length).toBe(50);
    const first = await paths();
    expect(first[0]).toBe("m/44'/60'/0'/0/0");
    expect(await page.getByRole("link", { name: "Previous" }).count()).toBe(0);
    await page.getByRole("link", { name: "Next" }).click();
    await expect.poll(paths).toEqual(Array.from({ length: 10 }, (_, i) => `m/44'/60'/0'/0/${50 + i}`));
    expect(await page.getByRole("link", { name: "Next" }).count()).toBe(0);
    await page.getByRole("link", { name: "Previous" }).click();
    await expect.poll(paths).toEqual(first);
  });

  it("ran without a Content-Security-Policy violation or a script error", () => {
    expect(opened.flatMap((o) => o.violations)).toEqual([]);
  });
});
