// The web console in a real browser: Debian's Chromium driven by playwright-core (Playwright's own
// browser download is not used), passkeys through Chromium's virtual authenticator, and axe-core
// run inside the page. Used by test/console.test.ts and scripts/console-screenshots.ts.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { type Browser, type BrowserContext, type Page, chromium } from "playwright-core";

/** Where Debian's `chromium` package puts the browser (.ci/run installs it when missing). */
export const CHROMIUM = process.env.SIGIL_CHROMIUM ?? "/usr/bin/chromium";

export async function launchChromium(): Promise<Browser> {
  // --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
  return chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] });
}

/** A page in a context of its own (its own storage), with every Content-Security-Policy violation recorded. */
export async function consolePage(browser: Browser, viewport = { width: 1280, height: 900 }) {
  const context: BrowserContext = await browser.newContext({ viewport });
  // A step that cannot happen fails with its locator named, before the test itself times out.
  context.setDefaultTimeout(8_000);
  const page = await context.newPage();
  const violations: string[] = [];
  page.on("console", (message) => {
    if (/Content Security Policy|Refused to/i.test(message.text())) violations.push(message.text());
  });
  page.on("pageerror", (error) => violations.push(`page error: ${error.message}`));
  return { context, page, violations };
}

/** Chromium's virtual authenticator on `page` (a platform passkey that needs no touch), with the
 * credentials it holds. */
export async function virtualAuthenticator(page: Page) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send("WebAuthn.enable", { enableUI: false });
  const { authenticatorId } = await cdp.send("WebAuthn.addVirtualAuthenticator", {
    options: {
      protocol: "ctap2",
      transport: "internal",
      hasResidentKey: true,
      hasUserVerification: true,
      isUserVerified: true,
      automaticPresenceSimulation: true,
    },
  });
  return {
    authenticatorId,
    /** The credential ids it holds, base64url as WebAuthn and the API write them. */
    async credentialIds(): Promise<string[]> {
      const { credentials } = await cdp.send("WebAuthn.getCredentials", { authenticatorId });
      return credentials.map((c) => Buffer.from(c.credentialId, "base64").toString("base64url"));
    },
  };
}

export async function signInWithApiKey(
  page: Page,
  consoleUrl: string,
  organizationId: string,
  key: { publicKey: string; privateKey: string },
) {
  await page.goto(consoleUrl);
  await page.getByLabel("Organization ID", { exact: true }).fill(organizationId);
  await page.getByLabel("API public key").fill(key.publicKey);
  await page.getByLabel("API private key").fill(key.privateKey);
  await page.getByRole("button", { name: "Sign in", exact: true }).click();
}

export async function signInWithPasskey(page: Page, consoleUrl: string, organizationId: string) {
  await page.goto(consoleUrl);
  await page.getByLabel("Organization ID", { exact: true }).fill(organizationId);
  await page.getByRole("button", { name: "Sign in with a passkey" }).click();
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");

interface AxeViolation {
  id: string;
  impact: string | null;
  help: string;
  nodes: Array<{ target: unknown[] }>;
}

/** axe-core's serious and critical violations on the page as it is now. Evaluated through the
 * DevTools protocol, which the page's Content-Security-Policy does not govern. */
export async function seriousViolations(page: Page): Promise<string[]> {
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(axeSource);
  const violations = (await page.evaluate(async () => {
    const axe = (window as unknown as { axe: { run(context: Document): Promise<{ violations: unknown[] }> } }).axe;
    return (await axe.run(document)).violations;
  })) as AxeViolation[];
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => JSON.stringify(n.target)).join(", ")}`);
}
