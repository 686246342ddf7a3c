// Server processes started by tests (the built CLI in child processes): a free loopback port,
// waiting until a server answers, and a whole deployment (bootstrap, then any number of servers).
import net from "node:net";
import path from "node:path";
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { promisify } from "node:util";
import { createTestDatabase } from "./backend.js";
import { newKeyPair } from "./harness.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Resolves once `GET <url>/health` answers 200; throws after thirty seconds (a process start takes
 * one or two on a quiet machine, and over ten was seen on a loaded one). */
export async function waitForHealth(url: string): Promise<void> {
  for (let i = 0; i < 300; i++) {
    if (
      await fetch(`${url}/health`).then(
        (r) => r.ok,
        () => false,
      )
    )
      return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer /health`);
}

/** A fresh database with one organization made by `sigil bootstrap`, and `sigil serve` processes on it. */
export async function cliDeployment(extraEnv: Record<string, string> = {}) {
  const database = await createTestDatabase();
  const env: NodeJS.ProcessEnv = { ...process.env, SIGIL_LOG_LEVEL: "warn", ...extraEnv };
  delete env.SIGIL_DATABASE_URL;
  delete env.SIGIL_MASTER_KEY;
  if (database.databaseUrl) env.SIGIL_DATABASE_URL = database.databaseUrl;
  const key = newKeyPair();
  const { stdout } = await run(
    process.execPath,
    [
      CLI,
      "bootstrap",
      "--create",
      "--data-dir",
      database.dataDir,
      "--org-name",
      "deployment",
      "--user-name",
      "root",
      "--api-public-key",
      key.publicKey,
    ],
    { env },
  );
  const { organizationId } = JSON.parse(stdout) as { organizationId: string };
  const servers: { child: ChildProcess; url: string; exited: Promise<unknown> }[] = [];
  return {
    database,
    env,
    key,
    organizationId,
    servers,
    /** Starts one more server process and waits until it answers. */
    async start() {
      const port = await freePort();
      const child = spawn(process.execPath, [CLI, "serve", "--port", String(port), "--data-dir", database.dataDir], {
        env,
        stdio: "ignore",
      });
      const server = { child, url: `http://127.0.0.1:${port}`, exited: new Promise((resolve) => child.once("exit", resolve)) };
      servers.push(server);
      await waitForHealth(server.url);
      return server;
    },
    /** Kills every server process and drops the database. */
    async stop() {
      for (const s of servers) s.child.kill("SIGKILL");
      await Promise.all(servers.map((s) => s.exited));
      await database.drop();
    },
  };
}
