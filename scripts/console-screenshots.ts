// `npm run screenshots`: the web console's pages at 1280 and 390 px wide, written to docs/console/
// and shown in docs/console.md. A server on a throwaway SQLite database (its webhook endpoints on
// loopback: one a receiver this script runs, one where nothing listens, so that no delivery leaves the
// machine and the log shows both outcomes), an example organization made through the official client,
// Debian's Chromium (test/helpers/console-browser.ts) signed in with API keys.
import http from "node:http";
import type net from "node:net";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { Turnkey } from "@turnkey/sdk-server";
import type { Page } from "playwright-core";
import { loadConfig } from "../src/config.js";
import { startServer } from "../src/http/server.js";
import { createOrganization } from "../src/operations/organizations/organizations.js";
import { generateP256KeyPair } from "../src/crypto/keys.js";
import { consolePage, launchChromium, signInWithApiKey } from "../test/helpers/console-browser.js";
import { SoftwarePasskey } from "../test/helpers/passkey.js";

const OUT = path.resolve("docs/console");
const WIDTHS = [1280, 390];

// The receiver of the example's "payments app" endpoint: takes every delivery.
const hook = http.createServer((request, response) => {
  request.resume();
  request.on("end", () => response.writeHead(200).end());
});
await new Promise<void>((resolve) => hook.listen(0, "127.0.0.1", resolve));
const hookUrl = `http://127.0.0.1:${(hook.address() as net.AddressInfo).port}/payments/sigil-events`;

const dataDir = mkdtempSync(path.join(os.tmpdir(), "sigil-screenshots-"));
const config = loadConfig({ SIGIL_LOG_LEVEL: "warn", SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true" }, { host: "127.0.0.1", dataDir });
config.port = 0;
// A throwaway deployment: its new master key is not worth the warning a real first start gives.
const server = await startServer(config, pino({ level: "error" }));
const browser = await launchChromium();
try {
  const consoleUrl = `http://localhost:${new URL(server.url).port}/console`;
  const sdk = (organizationId: string, key: { publicKey: string; privateKey: string }) =>
    new Turnkey({
      apiBaseUrl: server.url,
      apiPublicKey: key.publicKey,
      apiPrivateKey: key.privateKey,
      defaultOrganizationId: organizationId,
      activityPoller: { intervalMs: 10, numRetries: 1 },
    }).apiClient();

  // An example organization: a root user, two approvers, a policy that needs both, a waiting activity.
  const rootKey = generateP256KeyPair();
  const org = await createOrganization(server.store.db, {
    organizationName: "Acme Treasury",
    userName: "ops",
    apiPublicKey: rootKey.publicKey,
    apiKeyName: "ops laptop",
  });
  const root = sdk(org.organizationId, rootKey);
  const [aliceKey, bobKey] = [generateP256KeyPair(), generateP256KeyPair()];
  const noCredentials = { authenticators: [], oauthProviders: [], userTags: [] };
  const { userIds } = await root.createUsers({
    users: [
      {
        userName: "alice",
        userEmail: "alice@acme.example",
        apiKeys: [{ apiKeyName: "alice's key", publicKey: aliceKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
        ...noCredentials,
      },
      {
        userName: "bob",
        userEmail: "bob@acme.example",
        apiKeys: [{ apiKeyName: "bob's key", publicKey: bobKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
        ...noCredentials,
      },
    ],
  });
  const { userTagId } = await root.createUserTag({ userTagName: "approvers", userIds });
  // A passkey of alice's, made by the tests' software authenticator, for the Users page to show.
  const registration = new SoftwarePasskey("localhost", consoleUrl.replace(/\/console$/, "")).register();
  await root.createAuthenticators({
    userId: userIds[0]!,
    authenticators: [
      { authenticatorName: "alice's laptop", challenge: registration.challenge, attestation: registration.attestation as never },
    ],
  });
  await root.createPolicy({
    policyName: "Two approvers for new wallets",
    effect: "EFFECT_ALLOW",
    condition: "activity.resource == 'WALLET' && activity.action == 'CREATE'",
    consensus: `approvers.filter(user, user.tags.contains('${userTagId}')).count() >= 2`,
    notes: "Treasury rule 4",
  });
  await root.createPolicy({
    policyName: "No signing on Sundays",
    effect: "EFFECT_DENY",
    condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'",
    notes: "",
  });
  await root.createWallet({
    walletName: "treasury",
    accounts: [0, 1, 2].map((i) => ({
      curve: "CURVE_SECP256K1" as const,
      pathFormat: "PATH_FORMAT_BIP32" as const,
      path: `m/44'/60'/0'/0/${i}`,
      addressFormat: "ADDRESS_FORMAT_ETHEREUM" as const,
    })),
  });
  await root.createPrivateKeys({
    privateKeys: [
      { privateKeyName: "hot signer", curve: "CURVE_SECP256K1", addressFormats: ["ADDRESS_FORMAT_ETHEREUM"], privateKeyTags: [] },
    ],
  });
  await root.createWebhookEndpoint({ url: hookUrl, name: "payments app", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] });
  await root.createWebhookEndpoint({
    url: "http://127.0.0.1:9/acme/audit-feed",
    name: "audit feed",
    subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
  });
  await root.createSubOrganization({
    subOrganizationName: "customer 1",
    rootQuorumThreshold: 1,
    rootUsers: [
      {
        userName: "customer",
        apiKeys: [{ apiKeyName: "k", publicKey: generateP256KeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
        authenticators: [],
        oauthProviders: [],
      },
    ],
  });
  const pending = await sdk(org.organizationId, aliceKey).createWallet({ walletName: "payroll", accounts: [] });
  // Until the receiver has taken every event it is owed (the audit feed's stay pending, retried).
  for (let waited = 0; ; waited += 50) {
    const owed = await server.store.db
      .selectFrom("webhook_deliveries")
      .select("id")
      .where("url", "=", hookUrl)
      .where("status", "=", "pending")
      .execute();
    if (owed.length === 0) break;
    if (waited > 20_000) throw new Error("the example's webhook receiver was not sent its deliveries");
    await new Promise((r) => setTimeout(r, 50));
  }

  mkdirSync(OUT, { recursive: true });
  for (const width of WIDTHS) {
    const { context, page, violations } = await consolePage(browser, { width, height: width > 600 ? 800 : 844 });
    const shot = async (name: string) => {
      await page.getByText("Loading…").waitFor({ state: "detached" });
      await page.screenshot({ path: path.join(OUT, `${name}-${width}.png`) });
    };
    const open = async (hash: string, heading: string) => {
      await page.evaluate((h) => (location.hash = h), hash);
      await page.getByRole("heading", { level: 1, name: heading }).waitFor();
    };
    await page.goto(consoleUrl);
    await shot("sign-in");
    await signInWithApiKey(page, consoleUrl, org.organizationId, rootKey);
    await page.getByRole("heading", { level: 1, name: "Activities" }).waitFor();
    await shot("activities");
    await open(`#/activities/${pending.activity.id}`, "CREATE_WALLET");
    await page.getByRole("button", { name: "Approve" }).waitFor();
    await shot("activity");
    await open("#/approvals", "Approvals");
    await page.getByRole("link", { name: "CREATE_WALLET" }).waitFor();
    await shot("approvals");
    await open("#/users", "Users");
    // Alice's card, with her passkey.
    await page.getByRole("heading", { name: "alice", exact: true }).evaluate((card) => card.scrollIntoView());
    await shot("users");
    await open("#/policies/new", "Policies");
    await page.getByLabel("Policy name").fill("Large transfers");
    await page.getByLabel("Condition").fill("activity.resource == 'PRIVATE_KEY' &&\nactivity.action ==");
    await page.getByRole("button", { name: "Save policy" }).click();
    await page.locator("#policy-condition-error").waitFor();
    await page.getByRole("heading", { name: "New policy" }).evaluate((form) => form.scrollIntoView());
    await shot("policies");
    await open("#/wallets", "Wallets");
    await page.getByRole("link", { name: "treasury" }).click();
    await page.getByRole("table").waitFor();
    await shot("wallets");
    await open("#/private-keys", "Private keys");
    await shot("private-keys");
    await open("#/sub-organizations", "Sub-organizations");
    await shot("sub-organizations");
    await open("#/webhooks", "Webhooks");
    await page.getByRole("table", { name: "Recent deliveries" }).waitFor();
    await page.getByRole("heading", { name: "audit feed" }).evaluate((card) => card.scrollIntoView());
    await shot("webhooks");
    await open("#/organization", "Organization");
    await page.getByRole("heading", { name: "Root quorum" }).waitFor();
    await shot("organization");
    if (violations.length) throw new Error(`the console broke its Content-Security-Policy: ${violations.join("; ")}`);
    await context.close();
  }
  process.stdout.write(`screenshots of ${WIDTHS.join(" and ")} px written to ${path.relative(process.cwd(), OUT)}/\n`);
} finally {
  await browser.close();
  await server.close();
  hook.close();
  rmSync(dataDir, { recursive: true, force: true });
}

export type { Page };
