// `sigil serve --workers N`, the built CLI in child processes. On both backends: every bad --workers is
// refused before anything is made. On SQLite: several workers are refused (docs/running.md#sqlite). On
// PostgreSQL: two workers serve one port, both answer, an activity written through one is read
// through the other, a killed worker is replaced while the port keeps answering, a worker that cannot
// start stops the whole start, and SIGTERM stops every process cleanly after the request in flight.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { promisify } from "node:util";
import crypto from "node:crypto";
import fs from "node:fs";
import http from "node:http";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import { backend, createTestDatabase } from "./helpers/backend.js";
import { cliDeployment, freePort } from "./helpers/processes.js";
import { signedRequest, type ApiKeyPair } from "./helpers/harness.js";
import { MAX_QUICK_DEATHS } from "../src/cli/cluster.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");

/** An environment with no SIGIL_ variable but the test backend's database URL, when given. */
function cleanEnv(databaseUrl: string | null): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env, SIGIL_LOG_LEVEL: "warn" };
  for (const name of Object.keys(env))
    if (name.startsWith("SIGIL_") && name !== "SIGIL_TEST_BACKEND" && name !== "SIGIL_LOG_LEVEL") delete env[name];
  if (databaseUrl) env.SIGIL_DATABASE_URL = databaseUrl;
  return env;
}

async function sigil(args: string[], env: NodeJS.ProcessEnv) {
  return run(process.execPath, [CLI, ...args], { env, timeout: 30_000 }).then(
    ({ stdout, stderr }) => ({ code: 0 as number | null, stdout, stderr }),
    (error: { code: number | string | null; stdout: string; stderr: string }) => ({
      code: typeof error.code === "number" ? error.code : null,
      stdout: error.stdout,
      stderr: error.stderr,
    }),
  );
}

async function tablesOf(databaseUrl: string): Promise<string[]> {
  const client = new pg.Client({ connectionString: databaseUrl });
  await client.connect();
  try {
    const { rows } = await client.query("select table_name from information_schema.tables where table_schema = current_schema()");
    return rows.map((r) => r.table_name as string);
  } finally {
    await client.end();
  }
}

describe("sigil serve --workers: what is refused before anything starts", () => {
  it.each([
    ["0", 'got "0"'],
    ["-1", 'got "-1"'],
    ["1.5", 'got "1.5"'],
    ["65", 'got "65"'],
    ["1e1", 'got "1e1"'],
    ["two", 'got "two"'],
  ])("--workers %s is refused (exit 2), and no data directory, key or table is made", async (workers, got) => {
    const database = await createTestDatabase();
    try {
      const dataDir = path.join(database.dataDir, "data");
      const outcome = await sigil(
        ["serve", "--port", String(await freePort()), "--data-dir", dataDir, "--workers", workers],
        cleanEnv(database.databaseUrl),
      );
      expect(outcome.code).toBe(2);
      expect(outcome.stderr).toContain(`sigil serve: --workers must be a whole number from 1 to 64, or auto, ${got}`);
      expect(outcome.stderr).toContain("usage: sigil serve [--host H] [--port P] [--data-dir D] [--workers N|auto]");
      expect(fs.existsSync(dataDir)).toBe(false);
      if (database.databaseUrl) expect(await tablesOf(database.databaseUrl)).toEqual([]);
    } finally {
      await database.drop();
    }
  });

  it("an empty --workers, or one given twice, is refused too", async () => {
    const dataDir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "sigil-workers-")), "data");
    const env = cleanEnv(null);
    const empty = await sigil(["serve", "--data-dir", dataDir, "--workers="], env);
    expect(empty.code).toBe(2);
    expect(empty.stderr).toContain("sigil serve: --workers must not be empty");
    const twice = await sigil(["serve", "--data-dir", dataDir, "--workers", "2", "--workers", "3"], env);
    expect(twice.code).toBe(2);
    expect(twice.stderr).toContain("sigil serve: --workers is given twice");
    expect(fs.existsSync(dataDir)).toBe(false);
  });

  if (backend === "sqlite") {
    it("on SQLite, more than one worker is refused with the reason (exit 1), and nothing is made", async () => {
      const dataDir = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "sigil-workers-")), "data");
      for (const [args, env] of [
        [["--workers", "2"], {}],
        [[], { SIGIL_WORKERS: "3" }],
      ] as const) {
        const outcome = await sigil(["serve", "--port", String(await freePort()), "--data-dir", dataDir, ...args], {
          ...cleanEnv(null),
          ...env,
        });
        expect(outcome.code).toBe(1);
        expect(outcome.stderr).toMatch(/^sigil serve: \d workers need PostgreSQL \(SIGIL_DATABASE_URL\); nothing was started\. /);
        expect(outcome.stderr).toContain("docs/running.md#sqlite");
      }
      expect(fs.existsSync(dataDir)).toBe(false);
    });
  }
});

/** One JSON log line of the cluster (primary and workers write to the same stdout). */
type LogLine = Record<string, unknown> & { msg: string };

/** `sigil serve --workers 2` on the deployment, its log lines collected as they come. */
function startCluster(dataDir: string, env: NodeJS.ProcessEnv, port: number) {
  const child = spawn(process.execPath, [CLI, "serve", "--port", String(port), "--data-dir", dataDir, "--workers", "2"], {
    env: { ...env, SIGIL_LOG_LEVEL: "debug" },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: LogLine[] = [];
  let stderr = "";
  let rest = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    const text = rest + chunk.toString("utf8");
    const parts = text.split("\n");
    rest = parts.pop()!;
    for (const part of parts) if (part.startsWith("{")) lines.push(JSON.parse(part) as LogLine);
  });
  child.stderr!.on("data", (chunk: Buffer) => {
    stderr += chunk.toString("utf8");
  });
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once("exit", (code, signal) => resolve({ code, signal })),
  );
  return {
    child,
    lines,
    stderr: () => stderr,
    exited,
    url: `http://127.0.0.1:${port}`,
    /** The first line (after `after` lines) that `match` accepts; fails after `ms`. */
    async waitFor(match: (line: LogLine) => boolean, ms = 60_000, after = 0): Promise<LogLine> {
      for (const deadline = Date.now() + ms; Date.now() < deadline; ) {
        const found = lines.slice(after).find(match);
        if (found) return found;
        await new Promise((r) => setTimeout(r, 50));
      }
      throw new Error(`no such log line within ${ms} ms; stderr: ${stderr}`);
    },
  };
}

/** One request on a connection of its own (no keep-alive): the cluster hands each connection to a worker. */
function request(
  url: string,
  method: "GET" | "POST",
  pathname: string,
  body?: { body: string; headers: Record<string, string> },
): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${url}${pathname}`, { method, agent: false, headers: body?.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on("data", (c: Buffer) => chunks.push(c));
      res.on("end", () => resolve({ status: res.statusCode!, json: JSON.parse(Buffer.concat(chunks).toString("utf8") || "null") }));
    });
    req.on("error", reject);
    req.end(body?.body);
  });
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

if (backend === "postgres") {
  describe("sigil serve --workers 2 on PostgreSQL", () => {
    let deployment: Awaited<ReturnType<typeof cliDeployment>>;
    let cluster: ReturnType<typeof startCluster>;
    let key: ApiKeyPair;
    let organizationId: string;
    /** Which worker (its pid) served the request sent with this probe in its query string. */
    const servedBy = async (probe: string) =>
      (await cluster.waitFor((l) => l.msg === "request" && String(l.url).includes(`probe=${probe}`), 10_000)).pid as number;
    const probed = (pathname: string) => {
      const probe = crypto.randomUUID();
      return { probe, pathname: `${pathname}?probe=${probe}` };
    };

    beforeAll(async () => {
      deployment = await cliDeployment();
      key = deployment.key;
      organizationId = deployment.organizationId;
      cluster = startCluster(deployment.database.dataDir, deployment.env, await freePort());
      await cluster.waitFor((l) => l.msg === "sigil is accepting requests" && l.workers === 2, 90_000);
    }, 120_000);

    afterAll(async () => {
      if (cluster.child.exitCode === null && cluster.child.signalCode === null) cluster.child.kill("SIGKILL");
      for (const line of cluster.lines)
        if (line.msg === "worker starting" && alive(line.workerPid as number)) process.kill(line.workerPid as number, "SIGKILL");
      await deployment.stop();
    });

    it("the primary prepares once and starts two workers, each logging under its worker id and pid", () => {
      const starts = cluster.lines.filter((l) => l.msg === "worker starting");
      expect(starts.map((l) => [l.role, l.pid, l.worker, l.slot])).toEqual([
        ["primary", cluster.child.pid, 1, 1],
        ["primary", cluster.child.pid, 2, 2],
      ]);
      const workerPids = starts.map((l) => l.workerPid);
      // Each worker's own lines carry its id and pid; the primary's banner is the one at info level.
      const listening = cluster.lines.filter((l) => String(l.msg).startsWith("Server listening"));
      expect(listening.map((l) => [l.worker, l.pid]).sort()).toEqual([
        [1, workerPids[0]],
        [2, workerPids[1]],
      ]);
      expect(cluster.lines.filter((l) => l.msg === "sigil is accepting requests" && l.level === 30)).toHaveLength(1);
      // The primary made the master key (bootstrap makes none) and says so; the workers only load it, at debug level.
      const keyLines = cluster.lines.filter((l) => /master key/.test(l.msg));
      expect(keyLines.map((l) => [l.level, l.role ?? l.worker, l.msg]).sort()).toEqual([
        [20, 1, "master key loaded"],
        [20, 2, "master key loaded"],
        [40, "primary", "created a new master key: back it up, every stored secret is sealed under it"],
      ]);
    });

    it("both workers answer on the one port", async () => {
      const seen = new Set<number>();
      for (let i = 0; i < 40 && seen.size < 2; i++) {
        const { probe, pathname } = probed("/health");
        const answer = await request(cluster.url, "GET", pathname);
        expect(answer).toEqual({ status: 200, json: { status: "ok" } });
        seen.add(await servedBy(probe));
      }
      const workerPids = cluster.lines.filter((l) => l.msg === "worker starting").map((l) => l.workerPid);
      expect([...seen].sort()).toEqual([...workerPids].sort());
    });

    it("an activity written through one worker is read through the other", async () => {
      const write = probed("/public/v1/submit/create_private_key_tag");
      const created = await request(
        cluster.url,
        "POST",
        write.pathname,
        signedRequest(
          {
            type: "ACTIVITY_TYPE_CREATE_PRIVATE_KEY_TAG",
            timestampMs: String(Date.now()),
            organizationId,
            parameters: { privateKeyTagName: "across workers", privateKeyIds: [] },
          },
          key,
        ),
      );
      expect(created.status).toBe(200);
      expect(created.json.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      const writer = await servedBy(write.probe);
      let readByTheOther = false;
      for (let i = 0; i < 40 && !readByTheOther; i++) {
        const read = probed("/public/v1/query/get_activity");
        const answer = await request(
          cluster.url,
          "POST",
          read.pathname,
          signedRequest({ organizationId, activityId: created.json.activity.id }, key),
        );
        expect(answer.status).toBe(200);
        expect(answer.json.activity).toMatchObject({
          id: created.json.activity.id,
          status: "ACTIVITY_STATUS_COMPLETED",
          result: {
            createPrivateKeyTagResult: { privateKeyTagId: created.json.activity.result.createPrivateKeyTagResult.privateKeyTagId },
          },
        });
        readByTheOther = (await servedBy(read.probe)) !== writer;
      }
      expect(readByTheOther).toBe(true);
    });

    it("a killed worker is replaced, and the port keeps answering meanwhile", async () => {
      const starts = cluster.lines.filter((l) => l.msg === "worker starting");
      const victim = starts[0]!.workerPid as number;
      const survivor = starts[1]!.workerPid as number;
      const mark = cluster.lines.length;
      process.kill(victim, "SIGKILL");
      const exit = await cluster.waitFor((l) => l.msg === "a worker exited unexpectedly: starting another in its place", 30_000, mark);
      expect(exit).toMatchObject({ role: "primary", workerPid: victim, slot: 1, signal: "SIGKILL", code: null, restartInMs: 500 });
      // Until the replacement is ready, the survivor answers every connection.
      for (let i = 0; i < 10; i++) expect((await request(cluster.url, "GET", "/health")).status).toBe(200);
      const replaced = await cluster.waitFor((l) => l.msg === "worker replaced: accepting requests", 90_000, mark);
      expect(replaced).toMatchObject({ role: "primary", slot: 1, worker: 3 });
      const newcomer = replaced.workerPid as number;
      expect([victim, survivor]).not.toContain(newcomer);
      expect(alive(victim)).toBe(false);
      expect(alive(newcomer)).toBe(true);
      // The newcomer takes connections too.
      let servedByNewcomer = false;
      for (let i = 0; i < 40 && !servedByNewcomer; i++) {
        const { probe, pathname } = probed("/health");
        expect((await request(cluster.url, "GET", pathname)).status).toBe(200);
        servedByNewcomer = (await servedBy(probe)) === newcomer;
      }
      expect(servedByNewcomer).toBe(true);
    }, 120_000);

    it("SIGTERM lets the request in flight finish, stops every worker and exits 0, leaving no process behind", async () => {
      const workerPids = [...new Set(cluster.lines.filter((l) => l.msg === "worker starting").map((l) => l.workerPid as number))].filter(
        alive,
      );
      expect(workerPids).toHaveLength(2);
      // A whoami whose body has not all arrived when the signal comes.
      const { body, headers } = signedRequest({ organizationId }, key);
      const socket = net.connect(Number(new URL(cluster.url).port), "127.0.0.1");
      await new Promise((resolve) => socket.once("connect", resolve));
      let answer = "";
      socket.on("data", (chunk: Buffer) => {
        answer += chunk.toString("utf8");
      });
      const closed = new Promise((resolve) => socket.once("close", resolve));
      const half = Math.floor(body.length / 2);
      socket.write(
        `POST /public/v1/query/whoami HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
          `X-Stamp: ${headers["X-Stamp"]}\r\nConnection: close\r\n\r\n${body.slice(0, half)}`,
      );
      const mark = cluster.lines.length;
      // Once a worker has the request open (its start is logged at trace level only, so wait a moment).
      await new Promise((r) => setTimeout(r, 500));
      cluster.child.kill("SIGTERM");
      for (const pid of workerPids) await cluster.waitFor((l) => l.msg === "shutting down" && l.pid === pid, 30_000, mark);
      socket.write(body.slice(half));
      await closed;
      expect(answer).toMatch(/^HTTP\/1\.1 200 /);
      expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4))).toMatchObject({ organizationId });
      expect(await cluster.exited).toEqual({ code: 0, signal: null });
      const stopped = cluster.lines.slice(mark).filter((l) => l.msg === "worker stopped");
      expect(stopped.map((l) => [l.workerPid, l.code]).sort()).toEqual(workerPids.map((pid) => [pid, 0]).sort());
      for (const pid of workerPids) expect(alive(pid)).toBe(false);
      await expect(request(cluster.url, "GET", "/health")).rejects.toThrow(/ECONNREFUSED/);
    }, 60_000);

    it("a worker that keeps dying soon after it starts: replaced with a doubling pause, then the primary gives up (exit 1, no worker left)", async () => {
      const dying = startCluster(deployment.database.dataDir, deployment.env, await freePort());
      try {
        await dying.waitFor((l) => l.msg === "sigil is accepting requests" && l.workers === 2, 90_000);
        const survivor = dying.lines.find((l) => l.msg === "worker starting" && l.slot === 2)!.workerPid as number;
        // Slot 1's worker, and each replacement as soon as it starts, is killed: MAX_QUICK_DEATHS (5)
        // replacements, each after a pause twice the last, then a sixth death ends it.
        const killed: number[] = [];
        for (let death = 1; death <= MAX_QUICK_DEATHS + 1; death++) {
          const victim = [...dying.lines].reverse().find((l) => l.msg === "worker starting" && l.slot === 1)!.workerPid as number;
          expect(killed).not.toContain(victim);
          const mark = dying.lines.length;
          process.kill(victim, "SIGKILL");
          killed.push(victim);
          if (death <= MAX_QUICK_DEATHS) {
            const exit = await dying.waitFor((l) => l.msg === "a worker exited unexpectedly: starting another in its place", 30_000, mark);
            expect(exit).toMatchObject({ slot: 1, workerPid: victim, signal: "SIGKILL", restartInMs: 500 * 2 ** (death - 1) });
            await dying.waitFor((l) => l.msg === "worker starting" && l.slot === 1, 30_000, mark);
          }
        }
        const gaveUp = await dying.waitFor((l) => l.msg.includes("giving up, stopping"), 30_000);
        expect(gaveUp).toMatchObject({ slot: 1, deaths: MAX_QUICK_DEATHS + 1 });
        expect(await dying.exited).toEqual({ code: 1, signal: null });
        // The other worker was stopped gracefully; nothing is left running.
        expect(dying.lines.some((l) => l.msg === "worker stopped" && l.workerPid === survivor)).toBe(true);
        for (const pid of [...killed, survivor]) expect(alive(pid)).toBe(false);
      } finally {
        if (dying.child.exitCode === null && dying.child.signalCode === null) dying.child.kill("SIGKILL");
        for (const line of dying.lines)
          if (line.msg === "worker starting" && alive(line.workerPid as number)) process.kill(line.workerPid as number, "SIGKILL");
      }
    }, 120_000);

    it("a worker that cannot start (its port is taken) stops the whole start: exit 1, no worker left", async () => {
      const taken = net.createServer();
      const port = await freePort();
      await new Promise<void>((resolve) => taken.listen(port, "127.0.0.1", resolve));
      try {
        const failing = startCluster(deployment.database.dataDir, deployment.env, port);
        const outcome = await failing.exited;
        expect(outcome).toEqual({ code: 1, signal: null });
        expect(failing.stderr()).toMatch(/sigil serve: worker \d \(pid \d+\) could not start: .*EADDRINUSE/);
        expect(failing.lines.some((l) => l.msg === "a worker failed to start (its error is above): stopping")).toBe(true);
        for (const line of failing.lines.filter((l) => l.msg === "worker starting")) expect(alive(line.workerPid as number)).toBe(false);
      } finally {
        taken.close();
      }
    }, 120_000);
  });
}
