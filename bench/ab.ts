// Two server builds side by side (docs/benchmarks.md#comparing-two-builds-side-by-side): each in its own
// process and database, loaded at the same time by one generator with sign_raw_payload, and read between
// runs through /metrics (group-commit batches, statements) and /proc (CPU per thread, bytes written), so
// that a change's cost shows as a difference between two servers under the same load, whatever else the
// shared machine does meanwhile.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { apiKey, Client, load, signRawPayloadParameters, type Scenario } from "./generator.js";

if (!process.env.AB_SIDES) throw new Error("AB_SIDES: the checkouts to compare, built, comma-separated (e.g. .,../other)");
const SIDES = process.env.AB_SIDES.split(",").map((side) => path.resolve(side));
const C = Number(process.env.AB_C ?? 32);
const SECONDS = Number(process.env.AB_SECONDS ?? 5);
const RUNS = Number(process.env.AB_RUNS ?? 3);
const EXTRA = process.env.AB_NODE_ARGS?.split(" ").filter(Boolean) ?? [];

async function start(root: string, name: string) {
  const cli = path.join(root, "bin/sigil.js");
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), `ab-${name}-`));
  const key = apiKey();
  const env: NodeJS.ProcessEnv = { ...process.env, SIGIL_METRICS: "on", SIGIL_LOG_LEVEL: "warn" };
  delete env.SIGIL_DATABASE_URL;
  if (process.env.AB_PG) {
    // AB_PG_PREFIX: the databases' names, so that two people comparing at once on one server do not share them.
    const db = `${process.env.AB_PG_PREFIX ?? "ab"}_${name}`;
    spawnSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-qc", `drop database if exists ${db}`]);
    spawnSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-qc", `create database ${db}`]);
    env.SIGIL_DATABASE_URL = `postgres://postgres@127.0.0.1:5432/${db}`;
  }
  for (const level of ["KEY", "SUB_ORGANIZATION", "ORGANIZATION"])
    for (const kind of ["ACTIVITIES", "QUERIES"]) env[`SIGIL_RATE_LIMIT_${level}_${kind}`] = "1000000/1000000";
  const boot = spawnSync(
    process.execPath,
    [cli, "bootstrap", "--create", "--data-dir", dataDir, "--org-name", name, "--user-name", name, "--api-public-key", key.publicKey],
    { env, encoding: "utf8" },
  );
  if (boot.status !== 0) throw new Error(boot.stderr);
  const { organizationId } = JSON.parse(boot.stdout);
  const port = 20000 + Math.floor(Math.random() * 20000);
  const child = spawn(
    process.execPath,
    [
      ...EXTRA,
      cli,
      "serve",
      "--port",
      String(port),
      "--data-dir",
      dataDir,
      ...(process.env.AB_WORKERS ? ["--workers", process.env.AB_WORKERS] : []),
    ],
    { env, stdio: ["ignore", "ignore", "inherit"] },
  );
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; i < 200; i++) {
    try {
      if ((await fetch(`${url}/health`)).ok) break;
    } catch {}
    await new Promise((r) => setTimeout(r, 100));
  }
  const client = new Client(url, key, organizationId, C);
  const created = await client.submit("create_wallet", "ACTIVITY_TYPE_CREATE_WALLET", () => ({
    walletName: name,
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  }));
  const signWith = created.activity.result.createWalletResult.addresses[0] as string;
  const scenario: Scenario = {
    fresh: true,
    make: () => client.submitBody("sign_raw_payload", "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", (n) => signRawPayloadParameters(signWith, n)),
  };
  return { name, url, client, scenario, child, pid: child.pid! };
}

const threads = (pid: number) => {
  const out: Record<string, number> = {};
  for (const t of fs.readdirSync(`/proc/${pid}/task`)) {
    try {
      const raw = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, "utf8");
      const name = raw.slice(raw.indexOf("(") + 1, raw.lastIndexOf(")"));
      const f = raw.split(") ")[1]!.split(" ");
      const us = (Number(f[11]) + Number(f[12])) * 10_000;
      const key = t === String(pid) ? "main" : name;
      out[key] = (out[key] ?? 0) + us;
    } catch {}
  }
  return out;
};
const written = (pid: number) => Number(/write_bytes: (\d+)/.exec(fs.readFileSync(`/proc/${pid}/io`, "utf8"))![1]);
const tree = (pid: number): number[] => {
  try {
    const kids = fs.readFileSync(`/proc/${pid}/task/${pid}/children`, "utf8").trim().split(/\s+/).filter(Boolean).map(Number);
    return [pid, ...kids.flatMap(tree)];
  } catch {
    return [pid];
  }
};
const cpuOne = (pid: number) => {
  const f = fs.readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(f[11]) + Number(f[12])) * 10_000;
};
const cpu = (pid: number) =>
  tree(pid).reduce((sum, p) => {
    try {
      return sum + cpuOne(p);
    } catch {
      return sum;
    }
  }, 0);
async function scrape(url: string) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const v = (name: string) =>
    Number(
      text
        .split("\n")
        .find((l) => l.startsWith(name + " ") || l.startsWith(name + "{}"))
        ?.split(" ")
        .pop() ?? NaN,
    );
  return {
    batchSum: v("sigil_database_group_commit_batch_size_sum"),
    batchCount: v("sigil_database_group_commit_batch_size_count"),
    statements: v("sigil_database_statements_total"),
  };
}

const sides = [] as Awaited<ReturnType<typeof start>>[];
for (const [i, root] of SIDES.entries()) sides.push(await start(root, `side${i}`));
for (const s of sides) await load(s.client, 8, s.scenario, 2, 64);
const order = process.env.AB_TOGETHER === "0" ? "apart" : "together";
for (let run = 0; run < RUNS; run++) {
  const before = await Promise.all(
    sides.map(async (s) => ({ m: await scrape(s.url), cpu: cpu(s.pid), t: threads(s.pid), w: written(s.pid) })),
  );
  const scraped = process.env.AB_SCRAPE === undefined ? [] : process.env.AB_SCRAPE.split(",").map(Number);
  const scraper = setInterval(
    () => {
      for (const i of scraped) void fetch(`${sides[i]!.url}/metrics`).then((r) => r.text());
    },
    Number(process.env.AB_SCRAPE_MS ?? 1000),
  );
  const results =
    order === "together"
      ? await Promise.all(sides.map((s) => load(s.client, C, s.scenario, SECONDS, 64)))
      : await (async () => {
          const r = [];
          for (const s of sides) r.push(await load(s.client, C, s.scenario, SECONDS, 64));
          return r;
        })();
  clearInterval(scraper);
  const after = await Promise.all(
    sides.map(async (s) => ({ m: await scrape(s.url), cpu: cpu(s.pid), t: threads(s.pid), w: written(s.pid) })),
  );
  sides.forEach((s, i) => {
    const r = results[i]!;
    const b = before[i]!;
    const a = after[i]!;
    const n = r.requestsPerSecond * SECONDS;
    console.log(
      `${run} ${SIDES[i]} req/s=${r.requestsPerSecond.toFixed(0)} cpu_us/req=${((a.cpu - b.cpu) / n).toFixed(0)} batches=${a.m.batchCount - b.m.batchCount} mean_batch=${((a.m.batchSum - b.m.batchSum) / (a.m.batchCount - b.m.batchCount)).toFixed(1)} stmts/req=${((a.m.statements - b.m.statements) / n).toFixed(1)} written/req=${((a.w - b.w) / n).toFixed(0)}`,
    );
    console.log(
      "   threads us/req:",
      Object.entries(a.t)
        .map(([k, v]) => [k, (v - (b.t[k] ?? 0)) / n] as const)
        .filter(([, v]) => v > 5)
        .map(([k, v]) => `${k}=${v.toFixed(0)}`)
        .join(" "),
    );
  });
}
for (const s of sides) {
  s.client.close();
  s.child.kill();
}
