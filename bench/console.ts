// The web console on a large organization: the time from opening a wallet's page in Debian's
// Chromium to its first page of accounts shown, at 1,000 and at BENCH_CONSOLE_ACCOUNTS (100,000)
// accounts, on SQLite. The page reads accounts a page at a time (list_wallet_accounts with a limit),
// so the two should be alike: the ratio is the figure. Accounts past the first are written straight
// into the table, as bench/load.ts does (deriving 100,000 keys would measure derivation, not reads).
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import pino from "pino";
import { Turnkey } from "@turnkey/sdk-server";
import { loadConfig } from "../src/config.js";
import { startServer } from "../src/http/server.js";
import { createOrganization } from "../src/operations/organizations/organizations.js";
import { generateP256KeyPair } from "../src/crypto/keys.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import { insertAccounts } from "./accounts.js";
import { CHROMIUM, consolePage, launchChromium, signInWithApiKey } from "../test/helpers/console-browser.js";

const ACCOUNTS = Number(process.env.BENCH_CONSOLE_ACCOUNTS ?? 100_000);
const RUNS = 5;

export async function runConsoleBench() {
  if (!existsSync(CHROMIUM)) {
    console.log(`\nweb console: skipped, no Chromium at ${CHROMIUM}`);
    return;
  }
  const dataDir = mkdtempSync(path.join(os.tmpdir(), "sigil-bench-console-"));
  const config = loadConfig({ SIGIL_LOG_LEVEL: "error" }, { host: "127.0.0.1", dataDir });
  config.port = 0;
  const server = await startServer(config, pino({ level: "error" }));
  const browser = await launchChromium();
  try {
    const key = generateP256KeyPair();
    const org = await createOrganization(server.store.db, {
      organizationName: "Large",
      userName: "ops",
      apiPublicKey: key.publicKey,
      apiKeyName: "k",
    });
    const sdk = new Turnkey({
      apiBaseUrl: server.url,
      apiPublicKey: key.publicKey,
      apiPrivateKey: key.privateKey,
      defaultOrganizationId: org.organizationId,
    }).apiClient();
    const { walletId } = await sdk.createWallet({
      walletName: "large",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    const { keyring } = loadKeyring(config.masterKey);
    const fill = (target: number, existing: number) =>
      insertAccounts(server.store.db, keyring, org.organizationId, walletId, target, existing);
    const consoleUrl = `http://localhost:${new URL(server.url).port}/console`;
    /** Median milliseconds from asking for the wallet's page to its 50 accounts shown, signed in afresh each run. */
    const openWallet = async () => {
      const times: number[] = [];
      for (let run = 0; run < RUNS; run++) {
        const { context, page } = await consolePage(browser);
        await signInWithApiKey(page, consoleUrl, org.organizationId, key);
        await page.getByRole("heading", { level: 1, name: "Activities" }).waitFor();
        const start = performance.now();
        await page.evaluate((id) => (location.hash = `#/wallets/${id}`), walletId);
        await page.getByRole("table").getByRole("row").nth(50).waitFor();
        times.push(performance.now() - start);
        await context.close();
      }
      return times.sort((a, b) => a - b)[Math.floor(RUNS / 2)]!;
    };
    await fill(1000, 1);
    const small = await openWallet();
    await fill(ACCOUNTS, 1000);
    const large = await openWallet();
    console.log(
      `\nweb console, a wallet's first page of accounts: ${small.toFixed(0)} ms at 1,000 accounts, ${large.toFixed(0)} ms at ` +
        `${ACCOUNTS.toLocaleString("en")} (median of ${RUNS}); ratio ${(large / small).toFixed(2)}`,
    );
  } finally {
    await browser.close();
    await server.close();
    rmSync(dataDir, { recursive: true, force: true });
  }
}
