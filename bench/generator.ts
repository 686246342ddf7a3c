// The load generator: stamped requests sent over kept-alive sockets with node:http, at a fixed
// concurrency for a fixed time. The same generator loads Sigil and the bare floor, so that the
// ratios between them stay fair even though it shares the machine's cores with both.
import crypto from "node:crypto";
import http from "node:http";
import { decompressP256, generateP256KeyPair } from "../src/crypto/keys.js";

export interface Key {
  publicKey: string;
  privateKey: crypto.KeyObject;
}

export function apiKey(): Key {
  const pair = generateP256KeyPair();
  const point = decompressP256(pair.publicKey);
  const privateKey = crypto.createPrivateKey({
    key: {
      kty: "EC",
      crv: "P-256",
      d: Buffer.from(pair.privateKey, "hex").toString("base64url"),
      x: point.subarray(1, 33).toString("base64url"),
      y: point.subarray(33).toString("base64url"),
    },
    format: "jwk",
  });
  return { publicKey: pair.publicKey, privateKey };
}

/** The X-Stamp header over `body`, as the official API-key stamper makes it (P-256, DER, hex). */
export function stamp(body: string, key: Key): string {
  const signature = crypto.sign("sha256", Buffer.from(body), { key: key.privateKey, dsaEncoding: "der" }).toString("hex");
  return Buffer.from(JSON.stringify({ publicKey: key.publicKey, scheme: "SIGNATURE_SCHEME_TK_API_P256", signature })).toString("base64url");
}

/** A request ready to send: its body and the stamp over it. */
export interface Stamped {
  path: string;
  body: string;
  stamp: string;
}

/** A sign_raw_payload body (keccak-256 of a hex payload), unique by `unique`: the one request the references also serve. */
export function signRawPayloadParameters(signWith: string, unique: number) {
  return {
    signWith,
    payload: Buffer.from(`payload ${unique}`).toString("hex"),
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_KECCAK256",
  };
}

/**
 * Requests are stamped ahead of time (each body is unique: the fingerprint is the idempotency key)
 * and sent over kept-alive sockets, so that the generator does as little as it can while the clock
 * runs.
 */
/** CPU time (µs, user + system) spent so far by the processes a run loads, read before and after it. */
export interface CpuProbes {
  /** The server's processes (a cluster's primary and workers). */
  server: () => number;
  /** The database server's processes (PostgreSQL on this machine), when there is one. */
  database?: () => number;
}

export class Client {
  /** Set by the bench once the server runs: a run then reports the CPU it cost the server and database. */
  cpuProbes?: CpuProbes;
  private counter = 0;
  private readonly agent: http.Agent;
  private readonly target: URL;
  constructor(
    url: string,
    private readonly key: Key,
    readonly organizationId: string,
    maxSockets: number,
  ) {
    this.target = new URL(url);
    this.agent = new http.Agent({ keepAlive: true, maxSockets });
  }

  stamped(kind: "submit" | "query", operation: string, body: Record<string, unknown>): Stamped {
    const text = JSON.stringify(body);
    return { path: `/public/v1/${kind}/${operation}`, body: text, stamp: stamp(text, this.key) };
  }

  submitBody(operation: string, type: string, parameters: (unique: number) => Record<string, unknown>): Stamped {
    return this.stamped("submit", operation, {
      type,
      organizationId: this.organizationId,
      timestampMs: String(Date.now()),
      parameters: parameters(++this.counter),
    });
  }

  queryBody(operation: string, body: Record<string, unknown>): Stamped {
    return this.stamped("query", operation, { organizationId: this.organizationId, ...body });
  }

  send(request: Stamped): Promise<any> {
    return new Promise((resolve, reject) => {
      const outgoing = http.request(
        {
          host: this.target.hostname,
          port: this.target.port,
          path: request.path,
          method: "POST",
          agent: this.agent,
          headers: { "content-type": "application/json", "content-length": Buffer.byteLength(request.body), "X-Stamp": request.stamp },
        },
        (response) => {
          const chunks: Buffer[] = [];
          response.on("data", (chunk: Buffer) => chunks.push(chunk));
          response.on("end", () => {
            const text = Buffer.concat(chunks).toString("utf8");
            if (response.statusCode !== 200) reject(new Error(`${request.path}: ${response.statusCode} ${text}`));
            else resolve(JSON.parse(text));
          });
          response.on("error", reject);
        },
      );
      outgoing.on("error", reject);
      outgoing.end(request.body);
    });
  }

  submit(operation: string, type: string, parameters: (unique: number) => Record<string, unknown>) {
    return this.send(this.submitBody(operation, type, parameters));
  }

  query(operation: string, body: Record<string, unknown>) {
    return this.send(this.queryBody(operation, body));
  }

  close() {
    this.agent.destroy();
  }
}

/** How a scenario makes its next request; `fresh` says each request needs a new body and stamp. */
export interface Scenario {
  make: () => Stamped;
  fresh: boolean;
}

export interface RunResult {
  requestsPerSecond: number;
  p50Ms: number;
  p99Ms: number;
  requests: number;
  /** The generator's own CPU time (user + system) per request, in µs. */
  generatorCpuUsPerRequest: number;
  /** The generator's CPU time over the wall time: 1 is one core kept busy, which would make it the limit. */
  generatorCores: number;
  /** Requests that had to be stamped while the clock ran (the stamped-ahead pool ran out); 0 when sized right. */
  stampedDuringRun: number;
  /** The server's CPU time per request, in µs (all its threads and processes), when probed. */
  serverCpuUsPerRequest?: number;
  /** The database server's CPU time per request, in µs, when probed (PostgreSQL). */
  databaseCpuUsPerRequest?: number;
}

const percentile = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? 0;
const round = (n: number) => Math.round(n * 100) / 100;

/**
 * Requests stamped but not yet sent, per scenario: a run stamps only what the pool lacks. They are
 * dropped when older than this (the server accepts a timestampMs within 300 s of its clock).
 */
const POOL_MAX_AGE_MS = 120_000;
const pools = new WeakMap<Scenario, { stampedAt: number; ready: Stamped[] }>();

/**
 * Loads the server with `concurrency` requests always in flight for `seconds`. For a fresh
 * scenario, `ahead` requests are stamped before the clock starts; should they run out, the rest are
 * stamped during the run and counted (stampedDuringRun), as that work then weighs on the figures.
 */
export async function load(client: Client, concurrency: number, scenario: Scenario, seconds: number, ahead: number): Promise<RunResult> {
  const one = scenario.fresh ? undefined : scenario.make();
  let pool = pools.get(scenario);
  if (!pool || Date.now() - pool.stampedAt > POOL_MAX_AGE_MS) pools.set(scenario, (pool = { stampedAt: Date.now(), ready: [] }));
  if (scenario.fresh) while (pool.ready.length < ahead) pool.ready.push(scenario.make());
  const ready = pool.ready;
  let stampedDuringRun = 0;
  const next = (): Stamped => {
    if (one) return one;
    const request = ready.pop();
    if (request) return request;
    stampedDuringRun++;
    return scenario.make();
  };
  const latencies: number[] = [];
  const activities = new Set<string>();
  const deadline = Date.now() + seconds * 1000;
  const probes = client.cpuProbes;
  const serverBefore = probes?.server();
  const databaseBefore = probes?.database?.();
  const cpuBefore = process.cpuUsage();
  const started = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < deadline) {
        const request = next();
        const t0 = process.hrtime.bigint();
        const answer = await client.send(request);
        latencies.push(Number(process.hrtime.bigint() - t0) / 1e6);
        if (scenario.fresh) activities.add(answer.activity.id);
      }
    }),
  );
  const elapsed = Number(process.hrtime.bigint() - started) / 1e9;
  const cpu = process.cpuUsage(cpuBefore);
  const perRequest = (before: number | undefined, now: (() => number) | undefined) =>
    before === undefined || !now ? undefined : round((now() - before) / Math.max(1, latencies.length));
  // A measurement of retries answered from the audit log would flatter the server: refuse it.
  if (scenario.fresh && activities.size !== latencies.length)
    throw new Error(
      `${latencies.length - activities.size} requests were answered as retries of earlier ones: their bodies were not unique`,
    );
  latencies.sort((a, b) => a - b);
  const cpuUs = cpu.user + cpu.system;
  return {
    requestsPerSecond: round(latencies.length / elapsed),
    p50Ms: round(percentile(latencies, 50)),
    p99Ms: round(percentile(latencies, 99)),
    requests: latencies.length,
    generatorCpuUsPerRequest: round(cpuUs / Math.max(1, latencies.length)),
    generatorCores: round(cpuUs / 1e6 / elapsed),
    stampedDuringRun,
    serverCpuUsPerRequest: perRequest(serverBefore, probes?.server),
    databaseCpuUsPerRequest: perRequest(databaseBefore, probes?.database),
  };
}
