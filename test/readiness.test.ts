// Readiness and shutdown (docs/running.md#readiness-and-shutdown), and lost database connections.
// /health answers while the process does; /ready answers 200 only when the database answers, its
// schema is this version's, the master key opens the deployment's keys and the outbox workers run,
// else 503 naming what is not ready. SIGTERM turns /ready to 503 first, while the rest is still
// served. On PostgreSQL: a database that goes away makes /ready 503 (and /health stays 200) until it
// is back; connections killed under a signing load through the official client leave every answer
// 200 or 503 with Retry-After in Sigil's words, every acknowledged activity stored, and nothing of a
// request answered "nothing was kept".
import crypto from "node:crypto";
import path from "node:path";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import pg from "pg";
import pino from "pino";
import { TurnkeyClient } from "@turnkey/http";
import { ApiKeyStamper } from "@turnkey/api-key-stamper";
import { backend } from "./helpers/backend.js";
import { newKeyPair, startHarness, signedRequest, type Harness } from "./helpers/harness.js";
import { cliDeployment, freePort, waitForHealth } from "./helpers/processes.js";
import { Readiness } from "../src/http/readiness.js";
import { WebhookDispatcher } from "../src/services/webhook-dispatcher.js";
import { serviceSigningKey } from "../src/services/service-keys.js";
import { resealAll } from "../src/services/sealed-secrets.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import { Keyring } from "../src/crypto/envelope.js";

const CLI = path.resolve("bin/sigil.js");

async function probe(url: string, path: "/ready" | "/health") {
  const response = await fetch(url + path);
  return { status: response.status, body: (await response.json()) as Record<string, unknown> };
}

/** Asks `check` until it returns true (a state the server reaches by itself, such as a database back). */
async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`never: ${what}`);
}

describe(`/ready and /health (${backend})`, () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(() => h.close());

  it("/ready answers 200 when the server may take traffic; /health answers 200", async () => {
    expect(await probe(h.url, "/ready")).toEqual({ status: 200, body: { status: "ready" } });
    expect(await probe(h.url, "/health")).toEqual({ status: 200, body: { status: "ok" } });
  });

  it("/ready answers 503 naming the migrations while one of this version's is not applied, and 200 once it is", async () => {
    const db = h.server.store.db;
    const last = await db
      .selectFrom("sigil_migrations" as "activities")
      .selectAll()
      .orderBy("name" as "id", "desc")
      .executeTakeFirstOrThrow();
    const name = (last as unknown as { name: string }).name;
    await db
      .deleteFrom("sigil_migrations" as "activities")
      .where("name" as "id", "=", name)
      .execute();
    try {
      expect(await probe(h.url, "/ready")).toEqual({
        status: 503,
        body: { status: "not ready", notReady: { migrations: `migrations ${name} are not applied` } },
      });
    } finally {
      await db
        .insertInto("sigil_migrations" as "activities")
        .values(last as never)
        .execute();
    }
    expect((await probe(h.url, "/ready")).status).toBe(200);
  });

  it("/ready answers 503 naming the master key while the deployment's keys are sealed under a key this server does not hold", async () => {
    const ours = loadKeyring(h.config.masterKey).keyring;
    const another = new Keyring(crypto.randomBytes(32));
    // What another process's key rotation would leave this one with.
    await resealAll(h.server.store.db, ours, another);
    try {
      expect(await probe(h.url, "/ready")).toEqual({
        status: 503,
        body: { status: "not ready", notReady: { masterKey: "the master key this server holds does not open the deployment's keys" } },
      });
      // Which key is missing is for the log, not for an unauthenticated probe.
      expect(h.logLines.some((line) => line.includes("not ready: the deployment's keys are sealed under another master key"))).toBe(true);
      expect((await probe(h.url, "/health")).status).toBe(200);
    } finally {
      await resealAll(h.server.store.db, another, ours);
    }
    expect((await probe(h.url, "/ready")).status).toBe(200);
  });

  it("reports the outbox workers that do not run", async () => {
    const { store, keyring } = { store: h.server.store, keyring: loadKeyring(h.config.masterKey).keyring };
    const logger = pino({ level: "silent" });
    const dispatcher = new WebhookDispatcher(store, await serviceSigningKey(store, keyring), h.config.webhooks, logger);
    const readiness = new Readiness({ store, keyring, outboxes: { webhooks: dispatcher } }, logger);
    expect(await readiness.notReady()).toEqual({ outboxes: "the outbox workers for webhooks are not running" });
    dispatcher.start();
    expect(await readiness.notReady()).toEqual({});
    await dispatcher.close();
    expect(await readiness.notReady()).toEqual({ outboxes: "the outbox workers for webhooks are not running" });
  });
});

describe(`shutdown (${backend})`, () => {
  it("drain turns /ready to 503 while /health and every request are still served", async () => {
    const h = await startHarness();
    try {
      const org = await h.organization();
      h.server.drain();
      expect(await probe(h.url, "/ready")).toEqual({
        status: 503,
        body: {
          status: "not ready",
          notReady: { shutdown: "the server is shutting down: it finishes the requests in flight, then stops" },
        },
      });
      expect((await probe(h.url, "/health")).status).toBe(200);
      expect((await h.sdk(org, org.key).createUserTag({ userTagName: "still served", userIds: [] })).userTagId).toEqual(expect.any(String));
    } finally {
      await h.close();
    }
  });

  it("SIGTERM to `sigil serve` turns /ready to 503 first, and serves the rest for SIGIL_SHUTDOWN_DELAY_MS", async () => {
    // A delay far longer than the test: what is checked happens during it, whenever the machine gets to it.
    const deployment = await cliDeployment({ SIGIL_SHUTDOWN_DELAY_MS: "600000", SIGIL_LOG_LEVEL: "info" });
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const child = spawn(process.execPath, [CLI, "serve", "--port", String(port), "--data-dir", deployment.database.dataDir], {
      env: deployment.env,
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    child.stdout.on("data", (chunk) => (out += chunk));
    try {
      await waitForHealth(url);
      expect((await probe(url, "/ready")).status).toBe(200);
      child.kill("SIGTERM");
      await until(async () => out.includes("shutting down: /ready answers 503"), "the shutdown's log line");
      expect((await probe(url, "/ready")).body).toMatchObject({ status: "not ready", notReady: { shutdown: expect.any(String) } });
      expect((await probe(url, "/health")).status).toBe(200);
      const { body, headers } = signedRequest({ organizationId: deployment.organizationId }, deployment.key);
      const whoami = await fetch(`${url}/public/v1/query/whoami`, { method: "POST", body, headers });
      expect(whoami.status).toBe(200);
      const lines = out
        .split("\n")
        .filter(Boolean)
        .map((line) => JSON.parse(line) as { msg: string; delayMs?: number });
      expect(lines.map((l) => l.msg)).toEqual(expect.arrayContaining(["shutting down"]));
      expect(lines.find((l) => l.msg.startsWith("shutting down: /ready answers 503"))?.delayMs).toBe(600000);
    } finally {
      child.kill("SIGKILL");
      await once(child, "exit").catch(() => undefined);
      await deployment.stop();
    }
  });
});

if (backend === "postgres") {
  describe("PostgreSQL going away", () => {
    it("makes /ready 503 naming the database while it is away (/health stays 200), and 200 once it is back", async () => {
      const h = await startHarness();
      const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
      await admin.connect();
      const name = new URL(h.database.databaseUrl!).pathname.slice(1);
      try {
        try {
          expect((await probe(h.url, "/ready")).status).toBe(200);
          // The database refuses new connections and drops the open ones: Sigil cannot reach it.
          await admin.query(`ALTER DATABASE "${name}" ALLOW_CONNECTIONS false`);
          await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1", [name]);
          expect(await probe(h.url, "/ready")).toEqual({
            status: 503,
            body: {
              status: "not ready",
              notReady: {
                database: "the database does not answer",
                migrations: "not checked: the database does not answer",
                masterKey: "not checked: the database does not answer",
              },
            },
          });
          expect(await probe(h.url, "/health")).toEqual({ status: 200, body: { status: "ok" } });
          // A request meanwhile is told so in Sigil's words, with Retry-After.
          const { body, headers } = signedRequest({ organizationId: crypto.randomUUID() }, newKeyPair());
          const refused = await fetch(`${h.url}/public/v1/query/whoami`, { method: "POST", body, headers });
          expect(refused.status).toBe(503);
          expect(refused.headers.get("retry-after")).toBe("1");
          expect((await refused.json()).details[0]).toMatchObject({ turnkeyErrorCode: "DATABASE_UNAVAILABLE" });
        } finally {
          await admin.query(`ALTER DATABASE "${name}" ALLOW_CONNECTIONS true`);
          await admin.end();
        }
        // Connections the database dropped are discarded as their sockets report it: recovery is awaited.
        await until(async () => (await probe(h.url, "/ready")).status === 200, "/ready answers 200 again");
      } finally {
        await h.close();
      }
    });

    it("killing every connection under a signing load through the official client: 200 or 503 with Retry-After, nothing acknowledged lost", async () => {
      const h = await startHarness({ SIGIL_RATE_LIMITS: "false" });
      const admin = new pg.Client({ connectionString: process.env.TEST_DATABASE_URL });
      await admin.connect();
      const name = new URL(h.database.databaseUrl!).pathname.slice(1);
      try {
        const org = await h.organization();
        const { walletId, addresses } = await h.sdk(org, org.key).createWallet({
          walletName: "under fire",
          accounts: [
            {
              curve: "CURVE_SECP256K1",
              pathFormat: "PATH_FORMAT_BIP32",
              path: "m/44'/60'/0'/0/0",
              addressFormat: "ADDRESS_FORMAT_ETHEREUM",
            },
          ],
        });
        const client = new TurnkeyClient(
          { baseUrl: h.url },
          new ApiKeyStamper({ apiPublicKey: org.key.publicKey, apiPrivateKey: org.key.privateKey }),
        );
        const envelope = (type: string, parameters: object) => ({
          type,
          timestampMs: String(Date.now()),
          organizationId: org.organizationId,
          parameters: parameters as never,
        });
        interface Answer {
          kind: "signature" | "accounts" | "query";
          requestId: string;
          status: number;
          retryAfter: string | null;
          body: { activity?: { id: string }; code?: number; message?: string; details?: { turnkeyErrorCode?: string }[] };
          /** The signed request, to be sent again. */
          signed: { url: string; body: string; stamp: { stampHeaderName: string; stampHeaderValue: string } };
        }
        const answers: Answer[] = [];
        const send = async (signed: Answer["signed"], requestId: string) => {
          const response = await fetch(signed.url, {
            method: "POST",
            body: signed.body,
            headers: { [signed.stamp.stampHeaderName]: signed.stamp.stampHeaderValue, "X-Request-Id": requestId },
          });
          return { status: response.status, retryAfter: response.headers.get("retry-after"), body: await response.json() };
        };
        let sent = 0;
        let stop = false;
        const worker = async () => {
          while (!stop) {
            const n = sent++;
            // Mostly signatures (shared transactions), some activities that change the organization
            // (a transaction of their own, with a precheck before it) and some queries (reads only).
            const kind = n % 10 === 9 ? "accounts" : n % 10 === 8 ? "query" : "signature";
            const signed =
              kind === "signature"
                ? await client.stampSignRawPayload(
                    envelope("ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", {
                      signWith: addresses[0],
                      payload: `0x${n.toString(16).padStart(8, "0")}`,
                      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
                      hashFunction: "HASH_FUNCTION_KECCAK256",
                    }) as never,
                  )
                : kind === "accounts"
                  ? await client.stampCreateWalletAccounts(
                      envelope("ACTIVITY_TYPE_CREATE_WALLET_ACCOUNTS", {
                        walletId,
                        accounts: [
                          {
                            curve: "CURVE_SECP256K1",
                            pathFormat: "PATH_FORMAT_BIP32",
                            path: `m/44'/60'/0'/0/${n + 1}`,
                            addressFormat: "ADDRESS_FORMAT_ETHEREUM",
                          },
                        ],
                      }) as never,
                    )
                  : await client.stampGetWhoami({ organizationId: org.organizationId });
            const requestId = `load-${n}`;
            answers.push({ kind, requestId, signed, ...(await send(signed, requestId)) });
          }
        };
        const workers = Array.from({ length: 12 }, worker);
        // Every connection of the server's database is killed, eight times, each once more answers came
        // (so each kill meets work under way, whatever the machine's speed).
        for (let round = 0; round < 8; round++) {
          const target = answers.length + 40;
          await until(async () => answers.length >= target, "40 more answers");
          await admin.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", [
            name,
          ]);
        }
        // And served again after the last.
        const last = answers.length + 40;
        await until(async () => answers.length >= last, "40 answers after the last kill");
        stop = true;
        await Promise.all(workers);

        const statuses = new Set(answers.map((a) => a.status));
        expect([...statuses].sort()).toEqual([200, 503]);
        const unavailable = answers.filter((a) => a.status === 503);
        for (const answer of unavailable) {
          expect(answer.retryAfter).toBe("1");
          expect(answer.body).toMatchObject({ code: 14, requestId: answer.requestId });
          expect(["DATABASE_UNAVAILABLE", "COMMIT_OUTCOME_UNKNOWN"]).toContain(answer.body.details![0]!.turnkeyErrorCode);
          expect(answer.body.details![1]).toEqual({ "@type": "type.googleapis.com/google.rpc.RetryInfo", retryDelay: "1s" });
          // Sigil's words only: none of the driver's.
          expect(answer.body.message).toMatch(
            /^the (database is unavailable|connection to the database was lost while this request was being committed)/,
          );
          expect(answer.body.message).not.toMatch(/queryable|terminat|administrator|EPIPE|ECONN|Connection/);
          // The request's log line says why, under its id.
          expect(h.logLines.some((line) => line.includes(`"requestId":"${answer.requestId}"`) && line.includes('"status":503'))).toBe(true);
        }
        // Every acknowledged activity is stored, under its request's id; of a request answered
        // "nothing was kept", nothing is.
        const rows = await h.server.store.db
          .selectFrom("activities")
          .select(["id", "request_id"])
          .where("organization_id", "=", org.organizationId)
          .execute();
        const byRequest = new Map(rows.map((row) => [row.request_id, row.id]));
        const acknowledged = answers.filter((a) => a.status === 200 && a.kind !== "query");
        expect(acknowledged.length).toBeGreaterThan(0);
        for (const answer of acknowledged) expect(byRequest.get(answer.requestId), answer.requestId).toBe(answer.body.activity!.id);
        for (const answer of unavailable)
          if (answer.body.details![0]!.turnkeyErrorCode === "DATABASE_UNAVAILABLE")
            expect(byRequest.has(answer.requestId), answer.requestId).toBe(false);
        // Sent again, as the answer says, each is carried out once: a request whose commit's outcome
        // was unknown is answered with its activity if it was kept.
        for (const answer of unavailable) {
          const again = await send(answer.signed, `${answer.requestId}-again`);
          expect(again.status, answer.requestId).toBe(200);
          const kept = byRequest.get(answer.requestId);
          if (kept && answer.kind !== "query") expect(again.body.activity.id).toBe(kept);
        }
        // Nothing was answered 500, nor logged as an unhandled error.
        expect(h.logLines.filter((line) => line.includes('"msg":"unhandled error"'))).toEqual([]);
        expect(unavailable.length).toBeGreaterThan(0);
        await until(async () => (await probe(h.url, "/ready")).status === 200, "/ready answers 200");
      } finally {
        await admin.end();
        await h.close();
      }
    }, 120_000);
  });
}
