// The commands users run: `sigil keygen`, `sigil serve`, `sigil bootstrap` (while a server runs on
// the same data), exercised as child processes of the built CLI (npm test builds it first).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { promisify } from "node:util";
import crypto from "node:crypto";
import path from "node:path";
import { Turnkey } from "@turnkey/sdk-server";
import { freePort } from "./helpers/processes.js";
import { createTestDatabase, type TestDatabase } from "./helpers/backend.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");


let database: TestDatabase;
let server: ChildProcess;
let baseUrl: string;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  database = await createTestDatabase();
  env = { ...process.env, SIGIL_LOG_LEVEL: "warn" };
  delete env.SIGIL_DATABASE_URL;
  if (database.databaseUrl) env.SIGIL_DATABASE_URL = database.databaseUrl;
  const port = await freePort();
  baseUrl = `http://127.0.0.1:${port}`;
  server = spawn(process.execPath, [CLI, "serve", "--port", String(port), "--data-dir", database.dataDir], { env, stdio: "ignore" });
  for (let i = 0; i < 100; i++) {
    const ok = await fetch(`${baseUrl}/health`).then((r) => r.status === 200, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error("sigil serve did not answer /health");
});

afterAll(async () => {
  server?.kill("SIGTERM");
  await new Promise((r) => server?.once("exit", r));
  await database.drop();
});

describe("sigil CLI", () => {
  it("keygen prints one JSON line with a usable P-256 key pair", async () => {
    const { stdout } = await run(process.execPath, [CLI, "keygen"]);
    expect(stdout.trim().split("\n")).toHaveLength(1);
    const pair = JSON.parse(stdout);
    expect(pair.publicKey).toMatch(/^0[23][0-9a-f]{64}$/);
    expect(pair.privateKey).toMatch(/^[0-9a-f]{64}$/);
    const ecdh = crypto.createECDH("prime256v1");
    ecdh.setPrivateKey(Buffer.from(pair.privateKey, "hex"));
    expect(ecdh.getPublicKey("hex", "compressed")).toBe(pair.publicKey);
  });

  it("serve answers /health", async () => {
    const res = await fetch(`${baseUrl}/health`);
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ status: "ok" });
  });

  it("bootstrap creates an organization while the server runs, and the official client can use it", async () => {
    const { stdout: keyJson } = await run(process.execPath, [CLI, "keygen"]);
    const key = JSON.parse(keyJson);
    const { stdout } = await run(
      process.execPath,
      [CLI, "bootstrap", "--data-dir", database.dataDir, "--org-name", "Acme", "--user-name", "alice", "--user-email", "alice@example.com", "--api-public-key", key.publicKey, "--api-key-name", "ops"],
      { env },
    );
    expect(stdout.trim().split("\n")).toHaveLength(1);
    const created = JSON.parse(stdout);
    expect(Object.keys(created).sort()).toEqual(["apiKeyId", "organizationId", "userId"]);

    const client = new Turnkey({ apiBaseUrl: baseUrl, apiPublicKey: key.publicKey, apiPrivateKey: key.privateKey, defaultOrganizationId: created.organizationId }).apiClient();
    const { user } = await client.getUser({ userId: created.userId });
    expect(user).toMatchObject({ userName: "alice", userEmail: "alice@example.com", apiKeys: [expect.objectContaining({ apiKeyId: created.apiKeyId, apiKeyName: "ops" })] });
    const { userIds } = await client.createUsers({ users: [{ userName: "bob", apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] }] });
    expect(userIds).toHaveLength(1);
  });

  it("bootstrap refuses a public key that is not a P-256 point", async () => {
    const failure = await run(process.execPath, [CLI, "bootstrap", "--data-dir", database.dataDir, "--org-name", "X", "--user-name", "x", "--api-public-key", "02" + "ff".repeat(32)], { env }).catch((e) => e);
    expect(failure.code).toBe(1);
    expect(failure.stderr).toMatch(/public key/);
  });

  it("bootstrap without its required flags explains what is missing", async () => {
    const failure = await run(process.execPath, [CLI, "bootstrap", "--data-dir", database.dataDir], { env }).catch((e) => e);
    expect(failure.code).toBe(1);
    expect(failure.stderr).toMatch(/--org-name/);
  });

  it("an unknown command fails with the usage text", async () => {
    const failure = await run(process.execPath, [CLI, "frobnicate"]).catch((e) => e);
    expect(failure.code).toBe(1);
    expect(failure.stderr).toMatch(/unknown command "frobnicate"/);
    expect(failure.stderr).toMatch(/sigil serve/);
  });
});

describe("GET /openapi.json", () => {
  it("describes every registered operation, with every schema reference resolvable", async () => {
    const { activityOperations, queryOperations } = await import("../src/activities/catalog.js");
    const doc = (await (await fetch(`${baseUrl}/openapi.json`)).json()) as any;
    expect(doc.openapi).toBe("3.1.0");
    for (const op of activityOperations) {
      const described = doc.paths[`/public/v1/submit/${op.name}`].post;
      if (op.kind === "activity") expect(described["x-policy-resource"]).toBe(op.resource);
      else expect(described["x-vote"]).toBe(op.selection);
    }
    for (const op of queryOperations) expect(doc.paths[`/public/v1/query/${op.name}`]).toBeDefined();
    expect(Object.keys(doc.paths)).toHaveLength(activityOperations.length + queryOperations.length);
    const refs = JSON.stringify(doc).match(/"#\/components\/schemas\/[^"]+"/g) ?? [];
    expect(refs.length).toBeGreaterThan(0);
    for (const ref of new Set(refs)) expect(doc.components.schemas[JSON.parse(ref).split("/").pop()], ref).toBeDefined();
  });
});
