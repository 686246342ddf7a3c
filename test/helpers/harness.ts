// A real server on loopback with a real database, plus the clients a user's program would use.
import crypto from "node:crypto";
import net from "node:net";
import { expect } from "vitest";
import pino from "pino";
import { Turnkey } from "@turnkey/sdk-server";
import { TurnkeyClient } from "@turnkey/http";
import { ApiKeyStamper } from "@turnkey/api-key-stamper";
import { loadConfig, type Config } from "../../src/config.js";
import { startServer, type RunningServer } from "../../src/http/server.js";
import { createOrganization } from "../../src/operations/organizations/organizations.js";
import { decompressP256, generateP256KeyPair } from "../../src/crypto/keys.js";
import { createTestDatabase, type TestDatabase } from "./backend.js";
import { RATE_LIMIT_TABLE } from "../../src/services/rate-limits.js";

export interface ApiKeyPair {
  publicKey: string;
  privateKey: string;
}

export interface TestOrganization {
  organizationId: string;
  userId: string;
  apiKeyId: string;
  key: ApiKeyPair;
}

export interface Harness {
  server: RunningServer;
  config: Config;
  url: string;
  /** The same server on [::1], when started with `ipv6`. */
  urlIpv6?: string;
  database: TestDatabase;
  /** Lines the server logged, for checks that nothing secret was written. */
  logLines: string[];
  close(): Promise<void>;
  /** A new organization with a root user holding a fresh P-256 API key (what `sigil bootstrap` does). */
  organization(name?: string): Promise<TestOrganization>;
  /** @turnkey/sdk-server's API client, as a user's backend builds it. */
  sdk(
    org: { organizationId: string },
    key: ApiKeyPair,
    options?: { activityPoller?: { intervalMs: number; numRetries: number } },
  ): ReturnType<Turnkey["apiClient"]>;
  /** @turnkey/http's TurnkeyClient with an ApiKeyStamper. */
  http(key: ApiKeyPair): TurnkeyClient;
  /** A POST with a body sent byte for byte, stamped (or not) as the caller says. */
  post(path: string, body: string | Buffer, headers?: Record<string, string>): Promise<{ status: number; json: any }>;
  /** Every row of every table, to prove a refused request changed nothing. */
  snapshot(): Promise<string>;
}

export const newKeyPair = (): ApiKeyPair => generateP256KeyPair();

/** The X-Stamp header value for a body, as @turnkey/api-key-stamper makes it. */
export function apiKeyStamp(body: string | Buffer, key: ApiKeyPair): string {
  const privateKey = crypto.createPrivateKey({
    key: {
      kty: "EC",
      crv: "P-256",
      d: Buffer.from(key.privateKey, "hex").toString("base64url"),
      ...uncompressedXY(key.publicKey),
    },
    format: "jwk",
  });
  const signature = crypto.sign("sha256", Buffer.from(body), { key: privateKey, dsaEncoding: "der" }).toString("hex");
  return Buffer.from(JSON.stringify({ publicKey: key.publicKey, scheme: "SIGNATURE_SCHEME_TK_API_P256", signature })).toString("base64url");
}

function uncompressedXY(compressedHex: string) {
  const point = decompressP256(compressedHex);
  return { x: point.subarray(1, 33).toString("base64url"), y: point.subarray(33).toString("base64url") };
}

/** `ipv6`: the server is reachable on [::1] too, at the same port (`urlIpv6`), besides 127.0.0.1. */
export async function startHarness(
  env: Record<string, string> = {},
  options: { clock?: () => number; ipv6?: boolean; flushWal?: (file: string) => Promise<void> } = {},
): Promise<Harness> {
  const database = await createTestDatabase();
  const config = loadConfig(
    { SIGIL_LOG_LEVEL: "info", ...env, ...(database.databaseUrl ? { SIGIL_DATABASE_URL: database.databaseUrl } : {}) },
    { host: "127.0.0.1", dataDir: database.dataDir },
  );
  // Any free port, unless the test named one (a SIGIL_PUBLIC_URL that must reach this server).
  if (!env.SIGIL_PORT) config.port = 0;
  const logLines: string[] = [];
  const logger = pino({ level: config.logLevel }, { write: (line: string) => void logLines.push(line) });
  const server = await startServer(config, logger, { clock: options.clock, flushWal: options.flushWal });
  const url = server.url;
  // The server listens on one address; a second listener on ::1 hands its connections to the same
  // HTTP server, which sees their real IPv6 peer address.
  let ipv6Listener: net.Server | undefined;
  if (options.ipv6) {
    const listener = net.createServer((socket) => server.app.server.emit("connection", socket));
    await new Promise<void>((resolve, reject) => listener.once("error", reject).listen(Number(new URL(url).port), "::1", resolve));
    ipv6Listener = listener;
  }

  const harness: Harness = {
    server,
    config,
    url,
    urlIpv6: options.ipv6 ? `http://[::1]:${new URL(url).port}` : undefined,
    database,
    logLines,
    async close() {
      await new Promise((resolve) => (ipv6Listener ? ipv6Listener.close(resolve) : resolve(undefined)));
      await server.close();
      await database.drop();
    },
    async organization(name = "Test Org") {
      const key = newKeyPair();
      const created = await createOrganization(server.store.db, {
        organizationName: name,
        userName: "root",
        apiPublicKey: key.publicKey,
        apiKeyName: "root key",
      });
      return { ...created, key };
    },
    sdk(org, key, options = {}) {
      return new Turnkey({
        apiBaseUrl: url,
        apiPublicKey: key.publicKey,
        apiPrivateKey: key.privateKey,
        defaultOrganizationId: org.organizationId,
        ...options,
      }).apiClient();
    },
    http(key) {
      return new TurnkeyClient({ baseUrl: url }, new ApiKeyStamper({ apiPublicKey: key.publicKey, apiPrivateKey: key.privateKey }));
    },
    async post(path, body, headers = {}) {
      const response = await fetch(url + path, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: typeof body === "string" ? body : new Uint8Array(body),
      });
      const text = await response.text();
      let json: unknown;
      try {
        json = JSON.parse(text);
      } catch {
        json = text;
      }
      return { status: response.status, json };
    },
    async snapshot() {
      const db = server.store.db;
      // Every table the migrations made (not Kysely's own bookkeeping, nor the rate limiter's buckets,
      // which every authenticated request charges, refused or not), so a table added later is covered
      // without anyone remembering to list it. The transparency log's tables are left out too: each
      // final activity becomes an entry of them, so they change with the activities table (which
      // test/transparency-log.test.ts proves, entry for activity), and a snapshot diff allowing a
      // recorded activity need not list them.
      const tables = (await db.introspection.getTables())
        .map((t) => t.name)
        .filter((name) => !name.startsWith("kysely_") && name !== RATE_LIMIT_TABLE && !name.startsWith("transparency_log_"))
        .sort();
      const out: Record<string, unknown[]> = {};
      for (const table of tables) {
        const rows = await db
          .selectFrom(table as "users")
          .selectAll()
          .execute();
        out[table] = rows.map((r) => JSON.stringify(r)).sort();
      }
      return JSON.stringify(out);
    },
  };
  return harness;
}

/** A port nothing listens on now, for a server that must know its own URL before it starts. */
export async function freePort(): Promise<number> {
  const probe = net.createServer();
  await new Promise<void>((resolve) => probe.listen(0, "127.0.0.1", resolve));
  const { port } = probe.address() as net.AddressInfo;
  await new Promise<void>((resolve) => probe.close(() => resolve()));
  return port;
}

/** A stamped submit request body and headers, for raw-HTTP tests. */
export function signedRequest(body: unknown, key: ApiKeyPair) {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return { body: text, headers: { "X-Stamp": apiKeyStamp(text, key) } };
}

/** The bundle signer's public key a server publishes (what clients pass as dangerouslyOverrideSignerPublicKey). */
export async function signerPublicKeyOf(baseUrl: string): Promise<string> {
  return ((await (await fetch(`${baseUrl}/.well-known/sigil.json`)).json()) as { signerPublicKey: string }).signerPublicKey;
}

/**
 * Runs a request that must fail, and proves it stored nothing but the one failed activity (and its
 * evaluation): every other table is as it was. Returns the failed activity's recorded failure and id.
 */
export async function refusedLeavingOnlyItsActivity(h: Harness, attempt: () => Promise<unknown>, rejection: Record<string, unknown>) {
  const before = JSON.parse(await h.snapshot());
  await expect(attempt()).rejects.toMatchObject(rejection);
  const after = JSON.parse(await h.snapshot());
  for (const table of Object.keys(before)) {
    if (table !== "activities" && table !== "policy_evaluations") expect(after[table], table).toEqual(before[table]);
  }
  const added = after.activities.filter((row: string) => !before.activities.includes(row)).map((row: string) => JSON.parse(row));
  expect(added).toHaveLength(1);
  expect(added[0]).toMatchObject({ status: "ACTIVITY_STATUS_FAILED" });
  return { id: added[0].id as string, failure: JSON.parse(added[0].failure) };
}
