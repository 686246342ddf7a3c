// GET /metrics (docs/metrics.md), scraped after real traffic through @turnkey/sdk-server and read with
// a Prometheus text-format parser: each counter moved by exactly the traffic sent, on both backends;
// no request can make a new series (labels come from closed sets); the database's figures (activities
// waiting, outboxes) are what it holds; refusals are counted by reason; SIGIL_METRICS places the
// endpoint (main listener, off, a listener of its own); with `serve --workers 2` every answer is the
// whole cluster's. The alert rules of docs/metrics.md parse as PromQL and use only series Sigil serves.
import crypto from "node:crypto";
import net from "node:net";
import path from "node:path";
import fs from "node:fs";
import http from "node:http";
import { spawn } from "node:child_process";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getMetricsFromIterator, type PromHistogramData, type PromMetrics } from "prom2javascript";
import { parser as promql } from "@prometheus-io/lezer-promql";
import { parse as parseYaml } from "yaml";
import { CompiledQuery, sql } from "kysely";
import { freePort, startHarness, signedRequest, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller, noCredentials, organizationWith } from "./helpers/organizations.js";
import { receiver, until } from "./helpers/webhook-receiver.js";
import { backend, createTestDatabase } from "./helpers/backend.js";
import pino from "pino";
import { openStore } from "../src/store/database.js";
import { cliDeployment } from "./helpers/processes.js";
import { Metrics, LABEL_VALUES } from "../src/services/metrics.js";

const ETHEREUM_ACCOUNT = {
  curve: "CURVE_SECP256K1",
  pathFormat: "PATH_FORMAT_BIP32",
  path: "m/44'/60'/0'/0/0",
  addressFormat: "ADDRESS_FORMAT_ETHEREUM",
} as const;

/** One sample as the parser gives it: a counter's or gauge's value, or a histogram's buckets, sum and count. */
type Sample = { labels: Record<string, string>; value?: number } & Partial<Pick<PromHistogramData, "buckets" | "sum" | "count">>;

/** One scrape, as a Prometheus text-format parser (prom2javascript) read it. */
class Scrape {
  private constructor(readonly families: PromMetrics) {}

  static async of(text: string): Promise<Scrape> {
    // prom2javascript does not read NaN, which the format allows (and Prometheus reads): prom-client
    // writes `Nan` for Node's event-loop lag between two samples. Those lines are left out; none of
    // Sigil's own series may be one.
    const lines = text.split("\n");
    const nan = lines.filter((line) => / Nan$/.test(line));
    expect(nan.filter((line) => !line.startsWith("nodejs_eventloop_lag_"))).toEqual([]);
    return new Scrape(await getMetricsFromIterator(lines.filter((line) => !nan.includes(line))[Symbol.iterator]()));
  }

  has(name: string): boolean {
    return name in this.families;
  }

  /** The samples of `name` whose labels include `labels`. */
  samples(name: string, labels: Record<string, string> = {}): Sample[] {
    return ((this.families[name]?.data ?? []) as Sample[]).filter((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v));
  }

  /** The value of the one such sample (a histogram's: its count); 0 when there is none yet. */
  value(name: string, labels: Record<string, string> = {}): number {
    const found = this.samples(name, labels);
    if (found.length > 1) throw new Error(`${name} ${JSON.stringify(labels)} matches ${found.length} series`);
    const sample = found[0];
    if (!sample) return 0;
    return sample.count ?? sample.value!;
  }

  /** Every series of Sigil's own (name and labels), one string each. */
  series(): string[] {
    return Object.entries(this.families)
      .filter(([name]) => name.startsWith("sigil_"))
      .flatMap(([name, family]) => (family.data as Sample[]).map((s) => `${name}${JSON.stringify(Object.entries(s.labels).sort())}`))
      .sort();
  }

  /** Every label value of every series, Node's included. */
  labelValues(): string[] {
    return Object.values(this.families).flatMap((family) => (family.data as Sample[]).flatMap((s) => Object.values(s.labels)));
  }
}

async function scrape(url: string): Promise<Scrape> {
  const response = await fetch(url);
  expect(response.status).toBe(200);
  expect(response.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
  return Scrape.of(await response.text());
}

/** How much each of `series` moved between two scrapes. */
const moved = (before: Scrape, after: Scrape, series: Array<[string, Record<string, string>]>) =>
  series.map(([name, labels]) => [name, labels, after.value(name, labels) - before.value(name, labels)]);

describe("GET /metrics after traffic through the official client", () => {
  let h: Harness;
  let org: TestOrganization;
  let client: ReturnType<Harness["sdk"]>;
  let signWith: string;
  const metrics = () => scrape(`${h.url}/metrics`);

  beforeAll(async () => {
    h = await startHarness();
    org = await h.organization("metered");
    client = h.sdk(org, org.key);
    signWith = (await client.createWallet({ walletName: "metered", accounts: [ETHEREUM_ACCOUNT] })).addresses[0]!;
  });
  afterAll(() => h.close());

  it("counts each request, activity, policy decision and step exactly once", async () => {
    const before = await metrics();
    await client.createWallet({ walletName: "second", accounts: [ETHEREUM_ACCOUNT] });
    for (let i = 0; i < 3; i++)
      await client.signRawPayload({
        signWith,
        payload: Buffer.from(`metered ${i}`).toString("hex"),
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_KECCAK256",
      });
    await client.getWhoami({});
    await client.getWhoami({});
    // A signature with an address the organization does not hold: recorded as failed, allowed by policy.
    await expect(
      client.signRawPayload({
        signWith: `0x${"12".repeat(20)}`,
        payload: "00",
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_KECCAK256",
      }),
    ).rejects.toThrow();
    expect((await fetch(`${h.url}/no/such/path`)).status).toBe(404);
    const after = await metrics();

    expect(
      moved(before, after, [
        ["sigil_http_requests_total", { operation: "create_wallet", status_class: "2xx" }],
        ["sigil_http_requests_total", { operation: "sign_raw_payload", status_class: "2xx" }],
        ["sigil_http_request_duration_seconds", { operation: "sign_raw_payload" }],
        ["sigil_http_requests_total", { operation: "whoami", status_class: "2xx" }],
        ["sigil_http_requests_total", { operation: "unknown", status_class: "4xx" }],
        ["sigil_activities_total", { type: "ACTIVITY_TYPE_CREATE_WALLET", status: "ACTIVITY_STATUS_COMPLETED" }],
        ["sigil_activities_total", { type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", status: "ACTIVITY_STATUS_COMPLETED" }],
        ["sigil_activities_total", { type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", status: "ACTIVITY_STATUS_FAILED" }],
        ["sigil_policy_decisions_total", { outcome: "OUTCOME_ALLOW" }],
        ["sigil_policy_decisions_total", { outcome: "OUTCOME_DENY_IMPLICIT" }],
        ["sigil_activity_step_duration_seconds", { step: "authentication" }],
        ["sigil_activity_step_duration_seconds", { step: "organization_lock" }],
        ["sigil_activity_step_duration_seconds", { step: "decision" }],
        ["sigil_activity_step_duration_seconds", { step: "execution" }],
        ["sigil_activity_step_duration_seconds", { step: "commit" }],
      ]),
    ).toEqual([
      ["sigil_http_requests_total", { operation: "create_wallet", status_class: "2xx" }, 1],
      ["sigil_http_requests_total", { operation: "sign_raw_payload", status_class: "2xx" }, 3],
      // The failed signature's answer too.
      ["sigil_http_request_duration_seconds", { operation: "sign_raw_payload" }, 4],
      ["sigil_http_requests_total", { operation: "whoami", status_class: "2xx" }, 2],
      ["sigil_http_requests_total", { operation: "unknown", status_class: "4xx" }, 1],
      ["sigil_activities_total", { type: "ACTIVITY_TYPE_CREATE_WALLET", status: "ACTIVITY_STATUS_COMPLETED" }, 1],
      ["sigil_activities_total", { type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", status: "ACTIVITY_STATUS_COMPLETED" }, 3],
      ["sigil_activities_total", { type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", status: "ACTIVITY_STATUS_FAILED" }, 1],
      ["sigil_policy_decisions_total", { outcome: "OUTCOME_ALLOW" }, 5],
      ["sigil_policy_decisions_total", { outcome: "OUTCOME_DENY_IMPLICIT" }, 0],
      // Five activities, each through every step (queries have none).
      ["sigil_activity_step_duration_seconds", { step: "authentication" }, 5],
      ["sigil_activity_step_duration_seconds", { step: "organization_lock" }, 5],
      ["sigil_activity_step_duration_seconds", { step: "decision" }, 5],
      ["sigil_activity_step_duration_seconds", { step: "execution" }, 5],
      ["sigil_activity_step_duration_seconds", { step: "commit" }, 5],
    ]);
    // The failed signature's answer (its status class) is whatever the error maps to; it is one of them.
    const failedAnswers = ["4xx", "5xx"].reduce(
      (sum, status_class) =>
        sum +
        after.value("sigil_http_requests_total", { operation: "sign_raw_payload", status_class }) -
        before.value("sigil_http_requests_total", { operation: "sign_raw_payload", status_class }),
      0,
    );
    expect(failedAnswers).toBe(1);
    // The time of a signature's requests is the sum of their durations: positive, and each bucket cumulative.
    const signing = after.samples("sigil_http_request_duration_seconds", { operation: "sign_raw_payload" })[0]!;
    expect(signing.sum).toBeGreaterThan(0);
    // By upper bound (an object lists integer-like keys first).
    const counts = Object.entries(signing.buckets!)
      .sort(([a], [b]) => (a === "+Inf" ? Infinity : Number(a)) - (b === "+Inf" ? Infinity : Number(b)))
      .map(([, count]) => count);
    for (let i = 1; i < counts.length; i++) expect(counts[i]).toBeGreaterThanOrEqual(counts[i - 1]!);
    expect(signing.buckets!["+Inf"]).toBe(signing.count);

    // Every activity's transaction committed; on SQLite all are shared ones (group commit), each batch counted.
    const committed = (s: Scrape) =>
      s.value("sigil_database_transaction_duration_seconds", { kind: "group", outcome: "committed" }) +
      s.value("sigil_database_transaction_duration_seconds", { kind: "single", outcome: "committed" });
    expect(committed(after) - committed(before)).toBeGreaterThanOrEqual(backend === "sqlite" ? 5 : 4);
    expect(after.value("sigil_database_group_commit_batch_size")).toBe(
      after.value("sigil_database_transaction_duration_seconds", { kind: "group", outcome: "committed" }) +
        after.value("sigil_database_transaction_duration_seconds", { kind: "group", outcome: "rolled_back" }),
    );
    expect(after.value("sigil_database_statements_total")).toBeGreaterThan(before.value("sigil_database_statements_total"));
    expect(after.value("sigil_database_reachable")).toBe(1);
    expect(after.value("sigil_ready")).toBe(1);
    expect(after.value("sigil_build_info", { database: backend })).toBe(1);
    // Node's own process metrics, under their usual names.
    for (const name of ["process_cpu_user_seconds_total", "process_resident_memory_bytes", "nodejs_eventloop_lag_seconds"])
      expect(after.has(name), name).toBe(true);
  });

  it("shows the pools: SQLite's write connection, PostgreSQL's three pools", async () => {
    const after = await metrics();
    const pools = [...new Set(after.samples("sigil_database_connections").map((s) => s.labels.pool))].sort();
    expect(pools).toEqual(backend === "sqlite" ? ["writer"] : ["batches", "reads", "transactions"]);
    for (const pool of pools) expect(after.value("sigil_database_connection_waiters", { pool })).toBe(0);
  });

  it("counts activities waiting for approvals while they wait, and the votes' decisions", async () => {
    const { root, members } = await organizationWith(h, ["ann", "ben"]);
    const { userTagId } = await root.createUserTag({ userTagName: "both", userIds: [members.ann!.userId, members.ben!.userId] });
    await root.createPolicy({
      policyName: "two create users",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.filter(user, user.tags.contains('${userTagId}')).count() >= 2`,
      condition: "activity.resource == 'USER' && activity.action == 'CREATE'",
      notes: "",
    });
    const waiting = (s: Scrape) => s.value("sigil_activities_waiting", { status: "ACTIVITY_STATUS_CONSENSUS_NEEDED" });
    const before = await metrics();
    const pending = await members.ann!.client.createUsers({ users: [{ userName: "newcomer", apiKeys: [], ...noCredentials }] });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const meanwhile = await metrics();
    expect(waiting(meanwhile) - waiting(before)).toBe(1);
    await members.ben!.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    const after = await metrics();
    expect(waiting(after)).toBe(waiting(before));
    expect(
      moved(before, after, [
        ["sigil_activities_total", { type: pending.activity.type, status: "ACTIVITY_STATUS_CONSENSUS_NEEDED" }],
        ["sigil_activities_total", { type: pending.activity.type, status: "ACTIVITY_STATUS_COMPLETED" }],
        ["sigil_policy_decisions_total", { outcome: "OUTCOME_REQUIRES_CONSENSUS" }],
        ["sigil_http_requests_total", { operation: "approve_activity", status_class: "2xx" }],
      ]),
    ).toEqual([
      ["sigil_activities_total", { type: pending.activity.type, status: "ACTIVITY_STATUS_CONSENSUS_NEEDED" }, 1],
      ["sigil_activities_total", { type: pending.activity.type, status: "ACTIVITY_STATUS_COMPLETED" }, 1],
      ["sigil_policy_decisions_total", { outcome: "OUTCOME_REQUIRES_CONSENSUS" }, 1],
      ["sigil_http_requests_total", { operation: "approve_activity", status_class: "2xx" }, 1],
    ]);
  });

  it("makes no series for unknown paths, operations or organization ids: label values come from closed sets", async () => {
    const random = () => `r${crypto.randomBytes(6).toString("hex")}`;
    const strangers = async (sent: string[]) => {
      for (let i = 0; i < 10; i++) {
        const token = random();
        sent.push(token);
        await fetch(`${h.url}/${token}/${token}`);
        await h.post(`/public/v1/submit/${token}`, "{}");
        await h.post(`/public/v1/query/${token}`, "{}");
        const whoami = signedRequest({ organizationId: token }, org.key);
        await h.post("/public/v1/query/whoami", whoami.body, whoami.headers);
        const organizationId = crypto.randomUUID();
        sent.push(organizationId);
        const wallet = signedRequest(
          {
            type: "ACTIVITY_TYPE_CREATE_WALLET",
            timestampMs: String(Date.now()),
            organizationId,
            parameters: { walletName: token, accounts: [ETHEREUM_ACCOUNT] },
          },
          org.key,
        );
        expect((await h.post("/public/v1/submit/create_wallet", wallet.body, wallet.headers)).status).toBeGreaterThanOrEqual(400);
      }
    };
    // The first round makes the series such requests count under (their operations' refusals), and
    // a first scrape the series of /metrics itself.
    await strangers([]);
    await metrics();
    const before = await metrics();
    const sent: string[] = [];
    await strangers(sent);
    const after = await metrics();
    expect(after.series()).toEqual(before.series());
    const values = after.labelValues().join("\n");
    expect(sent.filter((token) => values.includes(token))).toEqual([]);
    expect(after.value("sigil_http_requests_total", { operation: "unknown", status_class: "4xx" })).toBe(
      before.value("sigil_http_requests_total", { operation: "unknown", status_class: "4xx" }) + 30,
    );
  });

  it("the activities_waiting count reads the partial index, not the activities", async () => {
    const text = `select status, count(*) from activities where status in ('ACTIVITY_STATUS_CONSENSUS_NEEDED', 'ACTIVITY_STATUS_AUTHENTICATORS_NEEDED') group by status`;
    const db = h.server.store.db;
    if (backend === "sqlite") {
      const { rows } = await db.executeQuery<{ detail: string }>(CompiledQuery.raw(`explain query plan ${text}`));
      expect(rows.map((r) => r.detail)).toEqual(["SEARCH activities USING COVERING INDEX activities_waiting (status=?)"]);
    } else {
      // With so few rows PostgreSQL may prefer to read the table; without that choice it must be able to use the index.
      const plan = await db.transaction().execute(async (trx) => {
        await sql`set local enable_seqscan = off`.execute(trx);
        return (await sql<{ "QUERY PLAN": string }>`explain ${sql.raw(text)}`.execute(trx)).rows.map((r) => r["QUERY PLAN"]).join("\n");
      });
      expect(plan).toContain("activities_waiting");
    }
  });
});

describe("refusals before any work, by reason", () => {
  let h: Harness;
  const refused = async (reason: string) => (await scrape(`${h.url}/metrics`)).value("sigil_requests_refused_total", { reason });

  beforeAll(async () => {
    h = await startHarness({
      SIGIL_BODY_LIMIT_BYTES: "4096",
      SIGIL_RATE_LIMIT_KEY_QUERIES: "0.001/1",
      SIGIL_MAX_CONNECTIONS_PER_ADDRESS: "24",
    });
  });
  afterAll(() => h.close());

  it("every reason is served from the start, at 0", async () => {
    const s = await scrape(`${h.url}/metrics`);
    expect(s.samples("sigil_requests_refused_total").map((x) => [x.labels.reason, x.value])).toEqual(
      LABEL_VALUES.reason!.split(", ").map((reason) => [reason.replaceAll("`", ""), 0]),
    );
  });

  it("a body over the limit: 413, counted as body_too_large, nothing stored", async () => {
    const before = await h.snapshot();
    const count = await refused("body_too_large");
    expect((await h.post("/public/v1/submit/create_wallet", "x".repeat(5000))).status).toBe(413);
    expect(await refused("body_too_large")).toBe(count + 1);
    expect(await h.snapshot()).toBe(before);
  });

  it("a key over its query rate: 429, counted as rate_limited", async () => {
    const org = await h.organization();
    const client = h.sdk(org, org.key);
    const count = await refused("rate_limited");
    await client.getWhoami({});
    await expect(client.getWhoami({})).rejects.toMatchObject({ code: 8 });
    expect(await refused("rate_limited")).toBe(count + 1);
  });

  it("a key held to an IP allowlist that does not hold the client: counted as ip_not_allowed, nothing stored", async () => {
    const { root, members } = await organizationWith(h, ["app"]);
    // The key's own list, enforced once the organization's is enabled (which lets the root user in from here).
    await root.setIpAllowlist({ publicKey: members.app!.key.publicKey, rules: [{ cidr: "10.1.2.3/32", label: "elsewhere" }] });
    await root.setIpAllowlist({ enabled: true, rules: [{ cidr: "127.0.0.1/32", label: "here" }] });
    const before = await h.snapshot();
    const count = await refused("ip_not_allowed");
    await expect(members.app!.client.createUserTag({ userTagName: "blocked", userIds: [] })).rejects.toMatchObject({
      message: expect.stringContaining("are not allowed"),
    });
    expect(await refused("ip_not_allowed")).toBe(count + 1);
    expect(await h.snapshot()).toBe(before);
  });

  it("bytes that are not HTTP: 400 and closed, counted as malformed_http", async () => {
    const count = await refused("malformed_http");
    const answer = await new Promise<string>((resolve, reject) => {
      const socket = net.connect(Number(new URL(h.url).port), "127.0.0.1", () => socket.write("NOT HTTP AT ALL\r\n\r\n"));
      let text = "";
      socket.on("data", (chunk) => (text += chunk.toString("latin1")));
      socket.on("close", () => resolve(text));
      socket.on("error", reject);
    });
    expect(answer).toMatch(/^HTTP\/1\.1 400 /);
    expect(await refused("malformed_http")).toBe(count + 1);
  });

  it("connections over the per-address cap: each one closed is counted as connections_per_address", async () => {
    const count = await refused("connections_per_address");
    // Held open, 30 connections: those beyond the cap (less the ones this process already keeps
    // open to the server) are closed by it as they arrive.
    const sockets: Array<{ socket: net.Socket; closedByServer: boolean }> = [];
    let closedByServer: number;
    try {
      for (let i = 0; i < 30; i++) {
        const held = { socket: net.connect(Number(new URL(h.url).port), "127.0.0.1"), closedByServer: false };
        sockets.push(held);
        await new Promise<void>((resolve) => {
          held.socket.once("connect", () => setTimeout(resolve, 50));
          held.socket.once("close", () => {
            held.closedByServer = true;
            resolve();
          });
        });
      }
      closedByServer = sockets.filter((held) => held.closedByServer).length;
      expect(closedByServer).toBeGreaterThan(0);
      expect(closedByServer).toBeLessThan(30);
    } finally {
      for (const { socket } of sockets) socket.destroy();
    }
    // Scraped once the held connections are gone (the scrape itself needs one).
    await until("the sockets to close", async () => (await refused("connections_per_address")) >= count + closedByServer);
    expect(await refused("connections_per_address")).toBe(count + closedByServer);
  });
});

describe("outboxes: pending entries, the oldest one's age, attempts by result", () => {
  let h: Harness;
  let now = Date.now();

  beforeAll(async () => {
    h = await startHarness(
      { SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true", SIGIL_WEBHOOK_POLL_MS: "50", SIGIL_WEBHOOK_TIMEOUT_MS: "1000" },
      { clock: () => now },
    );
  });
  afterAll(() => h.close());

  it("a webhook that fails waits in the outbox, ageing with the clock, and is counted delivered once it goes", async () => {
    const metrics = () => scrape(`${h.url}/metrics`);
    const webhooks = (s: Scrape) => ({
      pending: s.value("sigil_outbox_pending", { outbox: "webhooks" }),
      age: s.value("sigil_outbox_oldest_pending_age_seconds", { outbox: "webhooks" }),
      delivered: s.value("sigil_outbox_attempts_total", { outbox: "webhooks", result: "delivered" }),
      retry: s.value("sigil_outbox_attempts_total", { outbox: "webhooks", result: "retry" }),
      failed: s.value("sigil_outbox_attempts_total", { outbox: "webhooks", result: "failed" }),
    });
    expect(webhooks(await metrics())).toEqual({ pending: 0, age: 0, delivered: 0, retry: 0, failed: 0 });
    for (const outbox of ["messages", "broadcasts"]) expect((await metrics()).value("sigil_outbox_pending", { outbox })).toBe(0);

    const hook = await receiver();
    try {
      hook.answers.push(...Array(50).fill(500));
      const org = await h.organization("hooked");
      // The endpoint's creation is its first event; with the clock held, its retry is not due yet.
      await h.sdk(org, org.key).createWebhookEndpoint({ url: hook.url, name: "down", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] });
      await until("a failed attempt", async () => webhooks(await metrics()).retry === 1);
      expect(webhooks(await metrics())).toEqual({ pending: 1, age: 0, delivered: 0, retry: 1, failed: 0 });

      now += 90_000;
      // The retry is due now (2 s after the first attempt): it fails too, and its next one is reckoned
      // from this clock (4 s on). Waited for before the clock moves again: an attempt recorded after
      // the next jump would put its retry past the test's last reading of the clock.
      const aged = await until("the second attempt", async () => {
        const s = webhooks(await metrics());
        return s.retry === 2 ? s : undefined;
      });
      expect(aged).toEqual({ pending: 1, age: 90, delivered: 0, retry: 2, failed: 0 });

      hook.answers.length = 0;
      now += 600_000;
      // 30 s: once, on a machine loaded by three other test runs, the default 10 s was not enough.
      // The attempt counters move once an attempt's outcome is written, and the pending figures are
      // read from the database by the scrape: wait for a scrape that has both.
      const delivered = await until(
        "the delivery",
        async () => {
          const s = webhooks(await metrics());
          return s.delivered === 1 && s.pending === 0 ? s : undefined;
        },
        30_000,
      );
      expect(delivered).toMatchObject({ pending: 0, age: 0, delivered: 1, failed: 0 });
      expect(delivered.retry).toBe(2);
      expect(hook.received.length).toBe(3);
    } finally {
      await hook.close();
    }
    // Its own wait for the delivery may take 30 s on a loaded machine: the test as a whole gets more
    // than the suite's default 30 s.
  }, 90_000);
});

describe("sigil_ready", () => {
  it("is 1 while /ready answers 200, and 0 once the server drains for a shutdown", async () => {
    const h = await startHarness();
    try {
      expect((await fetch(`${h.url}/ready`)).status).toBe(200);
      expect((await scrape(`${h.url}/metrics`)).value("sigil_ready")).toBe(1);
      h.server.drain();
      expect((await fetch(`${h.url}/ready`)).status).toBe(503);
      expect((await scrape(`${h.url}/metrics`)).value("sigil_ready")).toBe(0);
    } finally {
      await h.close();
    }
  });

  it("asks the database checks behind it at most every few seconds; /ready asks them every time", async () => {
    const h = await startHarness();
    const tally = h.server.store.statements;
    const migrationsRead = (texts: string[]) => texts.filter((text) => text.includes('from "sigil_migrations"')).length;
    try {
      const texts: string[] = [];
      tally.texts = texts;
      await fetch(`${h.url}/ready`);
      await fetch(`${h.url}/ready`);
      expect(migrationsRead(texts)).toBe(2);
      // The scrapes that follow within SCRAPE_READINESS_MAX_AGE_MS use the last checks.
      for (let i = 0; i < 3; i++) expect((await scrape(`${h.url}/metrics`)).value("sigil_ready")).toBe(1);
      expect(migrationsRead(texts)).toBe(2);
      // What the process knows of itself is never old: a drain shows at the next scrape.
      h.server.drain();
      expect((await scrape(`${h.url}/metrics`)).value("sigil_ready")).toBe(0);
    } finally {
      tally.texts = null;
      await h.close();
    }
  });
});

describe("a scrape when the database does not answer", () => {
  it("still answers: sigil_database_reachable 0, the database's figures left out, a warning logged", async () => {
    const database = await createTestDatabase();
    const lines: string[] = [];
    const metrics = new Metrics();
    const store = await openStore({ databaseUrl: database.databaseUrl, dataDir: database.dataDir, onConnectionError: () => undefined });
    try {
      metrics.watch({ store, logger: pino({}, { write: (line: string) => void lines.push(line) }), version: "test" });
      const up = await Scrape.of(await metrics.scrape());
      expect(up.value("sigil_database_reachable")).toBe(1);
      expect(up.samples("sigil_outbox_pending").map((s) => s.labels.outbox)).toEqual(["webhooks", "messages", "broadcasts"]);
      await store.close();
      const down = await Scrape.of(await metrics.scrape());
      expect(down.value("sigil_database_reachable")).toBe(0);
      expect(down.samples("sigil_outbox_pending")).toEqual([]);
      expect(down.samples("sigil_activities_waiting")).toEqual([]);
      expect(lines.map((line) => JSON.parse(line).msg)).toEqual(["metrics: the database does not answer"]);
    } finally {
      await database.drop();
    }
  });
});

describe("SIGIL_METRICS", () => {
  it("off: no /metrics, and no series are kept", async () => {
    const h = await startHarness({ SIGIL_METRICS: "off" });
    try {
      expect((await fetch(`${h.url}/metrics`)).status).toBe(404);
      expect(h.server.metricsUrl).toBeUndefined();
    } finally {
      await h.close();
    }
  });

  it("HOST:PORT: served there only, and nothing else is served there", async () => {
    const port = await freePort();
    const h = await startHarness({ SIGIL_METRICS: `127.0.0.1:${port}` });
    try {
      expect(h.server.metricsUrl).toBe(`http://127.0.0.1:${port}/metrics`);
      expect((await fetch(`${h.url}/metrics`)).status).toBe(404);
      const org = await h.organization();
      await h.sdk(org, org.key).getWhoami({});
      const s = await scrape(h.server.metricsUrl!);
      expect(s.value("sigil_http_requests_total", { operation: "whoami", status_class: "2xx" })).toBe(1);
      // The main listener's own /metrics 404 was counted as a path it does not serve.
      expect(s.value("sigil_http_requests_total", { operation: "unknown", status_class: "4xx" })).toBe(1);
      expect((await fetch(`http://127.0.0.1:${port}/health`)).status).toBe(404);
    } finally {
      await h.close();
    }
  });

  it("a HOST:PORT already taken stops the start, naming the setting", async () => {
    const taken = net.createServer();
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve));
    const { port } = taken.address() as net.AddressInfo;
    try {
      await expect(startHarness({ SIGIL_METRICS: `127.0.0.1:${port}` })).rejects.toThrow(
        `SIGIL_METRICS: cannot listen on 127.0.0.1:${port}`,
      );
    } finally {
      taken.close();
    }
  });
});

describe("docs/metrics.md", () => {
  const page = fs.readFileSync("docs/metrics.md", "utf8");
  const blocks = [...page.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => parseYaml(m[1]!) as Record<string, any>);
  const metrics = new Metrics();
  /** What Sigil serves: each series by name, with its labels (a histogram's bucket, sum and count too). */
  const served = new Map<string, string[]>();
  for (const metric of metrics.registry.getMetricsAsArray()) {
    const labels = [...((metric as unknown as { labelNames?: string[] }).labelNames ?? [])];
    if (String(metric.type) === "histogram") {
      served.set(`${metric.name}_bucket`, [...labels, "le"]);
      served.set(`${metric.name}_sum`, labels);
      served.set(`${metric.name}_count`, labels);
    } else served.set(metric.name, labels);
  }
  /** The labels Prometheus adds to every series it scrapes, and the series it makes of each scrape. */
  const TARGET_LABELS = ["job", "instance"];
  served.set("up", []);

  it("has a scrape configuration for Sigil's /metrics", () => {
    const scrapeConfig = blocks.find((b) => b.scrape_configs)?.scrape_configs?.[0];
    expect(scrapeConfig).toMatchObject({ job_name: "sigil", metrics_path: "/metrics" });
  });

  const rules: Array<{ alert: string; expr: string }> = blocks.find((b) => b.groups)?.groups.flatMap((g: any) => g.rules) ?? [];

  it("has alert rules for a growing outbox, the error rate, the p99 latency and a node that does not answer", () => {
    expect(rules.map((r) => r.alert)).toEqual(
      expect.arrayContaining([
        "SigilOutboxBacklogGrowing",
        "SigilErrorRate",
        "SigilLatencyP99",
        "SigilDown",
        "SigilNotReady",
        "SigilDatabaseUnreachable",
      ]),
    );
  });

  it.each(rules.map((r) => [r.alert, r.expr] as const))("%s parses as PromQL and names only series and labels Sigil serves", (_, expr) => {
    const tree = promql.parse(expr);
    const errors: string[] = [];
    const used: Array<{ name: string; labels: string[] }> = [];
    tree.iterate({
      enter: (node) => {
        if (node.type.isError) errors.push(`at ${node.from}: ${JSON.stringify(expr.slice(node.from, node.to + 10))}`);
        if (node.name === "VectorSelector") {
          const name = node.node.getChild("Identifier");
          const labels = node.node.getChild("LabelMatchers")?.getChildren("UnquotedLabelMatcher") ?? [];
          used.push({
            name: name ? expr.slice(name.from, name.to) : "",
            labels: labels.map((m) => {
              const label = m.getChild("LabelName")!;
              return expr.slice(label.from, label.to);
            }),
          });
        }
      },
    });
    expect(errors).toEqual([]);
    expect(used.length).toBeGreaterThan(0);
    for (const { name, labels } of used) {
      expect(served.has(name), `${name} is not served`).toBe(true);
      for (const label of labels) expect([...served.get(name)!, ...TARGET_LABELS], `${name}{${label}}`).toContain(label);
    }
  });

  it("the check finds a series Sigil does not serve, and PromQL that does not parse (the check itself)", () => {
    const errorsOf = (expr: string) => {
      let errors = 0;
      promql.parse(expr).iterate({ enter: (node) => void (node.type.isError && errors++) });
      return errors;
    };
    expect(errorsOf("sum(rate(sigil_http_requests_total[5m])) by (operation)")).toBe(0);
    expect(errorsOf("sum(rate(sigil_http_requests_total[5m]) by (operation)")).toBeGreaterThan(0);
    expect(served.has("sigil_http_requests")).toBe(false);
  });
});

/** `sigil serve --workers 2` on the test's PostgreSQL database; resolves once both workers accept requests. */
async function startCluster(env: Record<string, string>) {
  const deployment = await cliDeployment();
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [path.resolve("bin/sigil.js"), "serve", "--port", String(port), "--data-dir", deployment.database.dataDir, "--workers", "2"],
    { env: { ...deployment.env, SIGIL_LOG_LEVEL: "info", ...env }, stdio: ["ignore", "pipe", "pipe"] },
  );
  let log = "";
  child.stdout!.on("data", (chunk: Buffer) => (log += chunk.toString("utf8")));
  child.stderr!.on("data", (chunk: Buffer) => (log += chunk.toString("utf8")));
  const exited = new Promise((resolve) => child.once("exit", resolve));
  await until("both workers", () => log.includes('"msg":"sigil is accepting requests"') || child.exitCode !== null, 90_000);
  if (child.exitCode !== null) throw new Error(`the cluster did not start: ${log}`);
  return {
    url: `http://127.0.0.1:${port}`,
    log: () => log,
    async stop() {
      child.kill("SIGTERM");
      await exited;
      await deployment.stop();
    },
  };
}

/** One GET on a connection of its own: the primary hands each connection to the next worker. */
const get = (target: string) =>
  new Promise<{ status: number; text: string }>((resolve, reject) => {
    http
      .get(target, { agent: false }, (response) => {
        let text = "";
        response.on("data", (chunk: Buffer) => (text += chunk.toString("utf8")));
        response.on("end", () => resolve({ status: response.statusCode!, text }));
      })
      .on("error", reject);
  });

const parsed = (answer: { status: number; text: string }) => {
  expect(answer.status).toBe(200);
  return Scrape.of(answer.text);
};

if (backend === "postgres") {
  describe("sigil serve --workers 2: every answer is the cluster's", () => {
    let cluster: Awaited<ReturnType<typeof startCluster>>;
    beforeAll(async () => {
      cluster = await startCluster({});
    }, 120_000);
    afterAll(() => cluster.stop());

    it("on the main port: the traffic of both workers, whichever worker is scraped", async () => {
      for (let i = 0; i < 10; i++) expect((await get(`${cluster.url}/health`)).status).toBe(200);
      const counts: number[] = [];
      for (let i = 0; i < 6; i++) {
        const s = await parsed(await get(`${cluster.url}/metrics`));
        counts.push(s.value("sigil_http_requests_total", { operation: "/health", status_class: "2xx" }));
        // The database's figures are the database's (the largest of what the workers read), not their sum.
        expect(s.value("sigil_database_reachable")).toBe(1);
        expect(s.value("sigil_build_info", { database: "postgres" })).toBe(1);
        expect(s.value("sigil_outbox_pending", { outbox: "webhooks" })).toBe(0);
      }
      expect(counts).toEqual(Array(6).fill(10));
      // Each worker has its own pools: summed, two of each.
      const batches = (await parsed(await get(`${cluster.url}/metrics`))).samples("sigil_database_connections", { pool: "batches" });
      expect(batches.map((b) => b.labels.state).sort()).toEqual(["idle", "in_use"]);
    });
  });

  describe("sigil serve --workers 2 with SIGIL_METRICS=HOST:PORT: the primary listens and answers for the cluster", () => {
    let cluster: Awaited<ReturnType<typeof startCluster>>;
    let scrapes: string;
    beforeAll(async () => {
      const port = await freePort();
      scrapes = `http://127.0.0.1:${port}/metrics`;
      cluster = await startCluster({ SIGIL_METRICS: `127.0.0.1:${port}` });
    }, 120_000);
    afterAll(() => cluster.stop());

    it("counts both workers' traffic there, and the main port has no /metrics", async () => {
      expect(cluster.log()).toContain(`"url":"${scrapes}","msg":"metrics served"`);
      for (let i = 0; i < 8; i++) expect((await get(`${cluster.url}/health`)).status).toBe(200);
      expect((await get(`${cluster.url}/metrics`)).status).toBe(404);
      for (let i = 0; i < 3; i++) {
        const s = await parsed(await get(scrapes));
        expect(s.value("sigil_http_requests_total", { operation: "/health", status_class: "2xx" })).toBe(8);
        expect(s.value("sigil_http_requests_total", { operation: "unknown", status_class: "4xx" })).toBe(1);
      }
    });
  });
}
