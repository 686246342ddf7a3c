// Webhooks end to end: receivers on loopback verify every delivery with @turnkey/crypto's
// verifyTurnkeyWebhookSignature; retries keep the event id; a server killed before delivering
// delivers after restart; two server processes deliver each event once.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import http from "node:http";
import type net from "node:net";
import path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { receiver, until, verdictOf, verificationKeys } from "./helpers/webhook-receiver.js";
import { startHarness, newKeyPair, signedRequest, type Harness, type TestOrganization, type ApiKeyPair } from "./helpers/harness.js";
import { cliDeployment, freePort } from "./helpers/processes.js";
import { fastPoller } from "./helpers/organizations.js";
import { checkDestination, forbiddenAddress } from "../src/services/webhook-destinations.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
const FAST = {
  SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
  SIGIL_WEBHOOK_RETRY_BASE_MS: "30",
  SIGIL_WEBHOOK_POLL_MS: "50",
  SIGIL_WEBHOOK_TIMEOUT_MS: "500",
};

let h: Harness;
let org: TestOrganization;
let sdk: ReturnType<Harness["sdk"]>;

beforeAll(async () => {
  h = await startHarness(FAST);
  org = await h.organization("Hooked");
  sdk = h.sdk(org, org.key, fastPoller);
});
afterAll(() => h.close());

const tag = (client: ReturnType<Harness["sdk"]>, name: string) => client.createUserTag({ userTagName: name, userIds: [] });

describe("webhook endpoints", () => {
  it("delivers every activity, signed so that verifyTurnkeyWebhookSignature accepts it", async () => {
    const hook = await receiver();
    try {
      const created = await sdk.createWebhookEndpoint({ url: hook.url, name: "main", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] });
      expect(created.webhookEndpoint).toMatchObject({
        endpointId: created.endpointId,
        organizationId: org.organizationId,
        url: hook.url,
        name: "main",
        isActive: true,
        subscriptions: [{ eventType: "ACTIVITY_UPDATES", isActive: true }],
      });
      const tagged = await tag(sdk, "hooked");
      await until("two deliveries", () => hook.received.length >= 2);
      const keys = await verificationKeys(h.url);
      for (const delivery of hook.received) {
        const verdict = verdictOf(delivery, keys);
        expect(verdict.ok, JSON.stringify(verdict)).toBe(true);
        expect(delivery.headers["x-turnkey-organization-id"]).toBe(org.organizationId);
        expect(delivery.headers["x-turnkey-event-type"]).toBe("ACTIVITY_UPDATES");
      }
      const activities = hook.activities();
      expect(activities.map((a) => a.type)).toEqual(["ACTIVITY_TYPE_CREATE_WEBHOOK_ENDPOINT", "ACTIVITY_TYPE_CREATE_USER_TAG"]);
      expect(activities[1]).toMatchObject({ organizationId: org.organizationId, status: "ACTIVITY_STATUS_COMPLETED" });
      expect(activities[1].result.createUserTagResult.userTagId).toBe(tagged.userTagId);
      // A tampered body does not verify.
      const tampered = verdictOf(hook.received[1]!, keys, Buffer.from(hook.received[1]!.body.toString().replace("hooked", "hacked")));
      expect(tampered.ok).toBe(false);

      const listed = await sdk.listWebhookEndpoints({});
      expect(listed.webhookEndpoints.map((e) => e.endpointId)).toEqual([created.endpointId]);
      // Paused: nothing more arrives; deleted: gone from the list.
      await sdk.updateWebhookEndpoint({ endpointId: created.endpointId, isActive: false });
      await tag(sdk, "while paused");
      await sdk.deleteWebhookEndpoint({ endpointId: created.endpointId });
      expect((await sdk.listWebhookEndpoints({})).webhookEndpoints).toEqual([]);
      await new Promise((r) => setTimeout(r, 200));
      expect(hook.activities().map((a) => a.type)).toEqual(["ACTIVITY_TYPE_CREATE_WEBHOOK_ENDPOINT", "ACTIVITY_TYPE_CREATE_USER_TAG"]);
    } finally {
      await hook.close();
    }
  });

  it("sends a sub-organization's activities to its parent's webhook (the FEATURE_NAME_WEBHOOK URL)", async () => {
    const hook = await receiver();
    const parent = await h.organization("Parent with webhook");
    const parentSdk = h.sdk(parent, parent.key, fastPoller);
    try {
      await parentSdk.setOrganizationFeature({ name: "FEATURE_NAME_WEBHOOK", value: hook.url });
      const key = newKeyPair();
      const sub = await parentSdk.createSubOrganization({
        subOrganizationName: "child",
        rootQuorumThreshold: 1,
        rootUsers: [
          {
            userName: "u",
            apiKeys: [{ apiKeyName: "k", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
            authenticators: [],
            oauthProviders: [],
          },
        ],
      });
      await tag(h.sdk({ organizationId: sub.subOrganizationId }, key, fastPoller), "in the child");
      const delivered = await until("the child's activity", () =>
        hook.received.find((r) => JSON.parse(r.body.toString()).organizationId === sub.subOrganizationId),
      );
      expect(delivered.headers["x-turnkey-organization-id"]).toBe(parent.organizationId);
      expect(JSON.parse(delivered.body.toString()).type).toBe("ACTIVITY_TYPE_CREATE_USER_TAG");
    } finally {
      await hook.close();
    }
  });

  it("retries a receiver that fails three times, with the same event id, until it takes the event once", async () => {
    const hook = await receiver();
    try {
      const endpoint = await sdk.createWebhookEndpoint({
        url: hook.url,
        name: "flaky",
        subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
      });
      await until("the endpoint's own event", () => hook.received.length >= 1);
      hook.answers.push(500, 502, 503);
      const tagged = await tag(sdk, "flaky");
      const attempts = await until("four attempts", () => {
        const mine = hook.received.filter((r) => JSON.parse(r.body.toString()).result?.createUserTagResult?.userTagId === tagged.userTagId);
        return mine.length >= 4 ? mine : undefined;
      });
      await new Promise((r) => setTimeout(r, 200));
      expect(
        hook.received.filter((r) => JSON.parse(r.body.toString()).result?.createUserTagResult?.userTagId === tagged.userTagId),
      ).toHaveLength(4);
      expect(new Set(attempts.map((a) => a.headers["x-turnkey-event-id"])).size).toBe(1);
      const keys = await verificationKeys(h.url);
      for (const a of attempts) expect(verdictOf(a, keys).ok).toBe(true);
      const row = await h.server.store.db
        .selectFrom("webhook_deliveries")
        .selectAll()
        .where("id", "=", String(attempts[0]!.headers["x-turnkey-event-id"]))
        .executeTakeFirstOrThrow();
      expect(row).toMatchObject({ status: "delivered", attempts: 4, last_status_code: 200 });
      await sdk.deleteWebhookEndpoint({ endpointId: endpoint.endpointId });
    } finally {
      await hook.close();
    }
  });

  it("ends a delivery at a 4xx or a redirect (not followed), and keeps later events in order behind a retry", async () => {
    const hook = await receiver();
    try {
      const endpoint = await sdk.createWebhookEndpoint({
        url: hook.url,
        name: "strict",
        subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
      });
      await until("the endpoint's own event", () => hook.received.length >= 1);
      hook.answers.push(404, 302, 500);
      await tag(sdk, "refused");
      await tag(sdk, "redirected");
      await tag(sdk, "retried");
      await tag(sdk, "after the retry");
      const names = () =>
        hook
          .activities()
          .map((a) => a.intent?.createUserTagIntent?.userTagName)
          .filter(Boolean);
      await until("five attempts", () => names().length >= 5);
      expect(names()).toEqual(["refused", "redirected", "retried", "retried", "after the retry"]);
      const rows = await h.server.store.db
        .selectFrom("webhook_deliveries")
        .select(["status", "last_status_code", "attempts"])
        .where("endpoint_id", "=", endpoint.endpointId)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      expect(rows.slice(1, 3)).toEqual([
        { status: "failed", last_status_code: 404, attempts: 1 },
        { status: "failed", last_status_code: 302, attempts: 1 },
      ]);
      await sdk.deleteWebhookEndpoint({ endpointId: endpoint.endpointId });
    } finally {
      await hook.close();
    }
  });

  it("keeps answering API requests while a receiver never answers, and retries after the timeout", async () => {
    const hook = await receiver();
    hook.hangForever();
    try {
      const endpoint = await sdk.createWebhookEndpoint({
        url: hook.url,
        name: "silent",
        subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
      });
      for (let i = 0; i < 5; i++) await tag(sdk, `while hanging ${i}`);
      await until("a second attempt after the timeout", () => hook.received.length >= 2, 10_000);
      const row = await h.server.store.db
        .selectFrom("webhook_deliveries")
        .selectAll()
        .where("endpoint_id", "=", endpoint.endpointId)
        .orderBy("created_at")
        .executeTakeFirstOrThrow();
      expect(row.status).toBe("pending");
      expect(row.last_error).toMatch(/no answer within 500 ms|socket hang up/);
      await sdk.deleteWebhookEndpoint({ endpointId: endpoint.endpointId });
    } finally {
      await hook.close();
    }
  });

  it("follows its endpoint: a paused endpoint is sent nothing, and a new URL gets the pending retries", async () => {
    const first = await receiver();
    const second = await receiver();
    try {
      const endpoint = await sdk.createWebhookEndpoint({
        url: first.url,
        name: "moving",
        subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
      });
      await until("the endpoint's own event", () => first.received.length >= 1);
      first.answers.push(500, 500, 500, 500, 500, 500);
      await tag(sdk, "to be moved");
      await until("a failed attempt", () => first.received.length >= 2);
      await sdk.updateWebhookEndpoint({ endpointId: endpoint.endpointId, url: second.url, isActive: false });
      await tag(sdk, "while moved and paused");
      await new Promise((r) => setTimeout(r, 300));
      expect(second.received).toHaveLength(0);
      await sdk.updateWebhookEndpoint({ endpointId: endpoint.endpointId, isActive: true });
      const names = () => second.activities().map((a) => a.intent?.createUserTagIntent?.userTagName ?? a.type);
      // The retry waiting since before the pause goes to the new URL; what happened while paused is
      // not queued for a paused endpoint at all.
      await until("the moved events, in order", () => names().length >= 2);
      await new Promise((r) => setTimeout(r, 200));
      expect(names()).toEqual(["to be moved", "ACTIVITY_TYPE_UPDATE_WEBHOOK_ENDPOINT"]);
      const events = new Set(second.received.map((r) => r.headers["x-turnkey-event-id"]));
      expect(events.size).toBe(second.received.length);
      await sdk.deleteWebhookEndpoint({ endpointId: endpoint.endpointId });
    } finally {
      await first.close();
      await second.close();
    }
  });

  it("settles an attempt at the status line: a receiver that trickles its body gets the event once", async () => {
    let requests = 0;
    const trickler = http.createServer((request, response) => {
      requests++;
      request.resume();
      response.writeHead(200);
      const drip = setInterval(() => response.write("."), 100);
      response.on("close", () => clearInterval(drip));
    });
    await new Promise<void>((resolve) => trickler.listen(0, "127.0.0.1", resolve));
    const url = `http://127.0.0.1:${(trickler.address() as net.AddressInfo).port}/hook`;
    try {
      const endpoint = await sdk.createWebhookEndpoint({ url, name: "trickle", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] });
      await until(
        "the delivery recorded",
        async () =>
          (await h.server.store.db
            .selectFrom("webhook_deliveries")
            .select("status")
            .where("endpoint_id", "=", endpoint.endpointId)
            .where("status", "=", "delivered")
            .executeTakeFirst()) !== undefined,
      );
      await new Promise((r) => setTimeout(r, 1500));
      expect(requests).toBe(1);
      await sdk.deleteWebhookEndpoint({ endpointId: endpoint.endpointId });
    } finally {
      trickler.closeAllConnections();
      await new Promise((resolve) => trickler.close(resolve));
    }
  });

  it("refuses URLs with credentials and destinations the operator has not allowed, and changes nothing", async () => {
    const before = await h.snapshot();
    const attempts: Array<[string, string]> = [
      ["https://user:pass@hooks.example.com/", "WEBHOOK_URL_INVALID"],
      ["ftp://hooks.example.com/", "WEBHOOK_URL_INVALID"],
      ["http://10.1.2.3/hook", "WEBHOOK_DESTINATION_FORBIDDEN"],
      ["http://169.254.169.254/latest/meta-data", "WEBHOOK_DESTINATION_FORBIDDEN"],
      ["http://[fd00::1]/hook", "WEBHOOK_DESTINATION_FORBIDDEN"],
    ];
    for (const [url, code] of attempts) {
      const request = signedRequest(
        {
          type: "ACTIVITY_TYPE_CREATE_WEBHOOK_ENDPOINT",
          organizationId: org.organizationId,
          timestampMs: String(Date.now()),
          parameters: { url, name: "bad", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] },
        },
        org.key,
      );
      const res = await h.post("/public/v1/submit/create_webhook_endpoint", request.body, request.headers);
      expect(res.status, url).toBe(400);
      expect(res.json.details[0].turnkeyErrorCode, url).toBe(code);
    }
    // A host that does not resolve is refused before the transaction, and recorded as the activity's failure.
    const unresolvable = signedRequest(
      {
        type: "ACTIVITY_TYPE_CREATE_WEBHOOK_ENDPOINT",
        organizationId: org.organizationId,
        timestampMs: String(Date.now()),
        parameters: { url: "https://no-such-host.invalid/hook", name: "x", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] },
      },
      org.key,
    );
    const refused = await h.post("/public/v1/submit/create_webhook_endpoint", unresolvable.body, unresolvable.headers);
    expect(refused.json.details[0].turnkeyErrorCode).toBe("WEBHOOK_URL_INVALID");
    const noSubscriptions = signedRequest(
      {
        type: "ACTIVITY_TYPE_CREATE_WEBHOOK_ENDPOINT",
        organizationId: org.organizationId,
        timestampMs: String(Date.now()),
        parameters: { url: "http://127.0.0.1:9/", name: "x" },
      },
      org.key,
    );
    expect(
      (await h.post("/public/v1/submit/create_webhook_endpoint", noSubscriptions.body, noSubscriptions.headers)).json.details[0]
        .turnkeyErrorCode,
    ).toBe("WEBHOOK_SUBSCRIPTIONS_MISSING");
    const after = JSON.parse(await h.snapshot());
    for (const [table, rows] of Object.entries(JSON.parse(before)))
      if (table !== "activities" && table !== "policy_evaluations") expect(after[table], table).toEqual(rows);
  });

  it("classifies destinations: loopback and private only when allowed, link-local and metadata never", async () => {
    const none = { allowLoopback: false, allowPrivate: false };
    expect(forbiddenAddress("93.184.216.34", none)).toBeUndefined();
    expect(forbiddenAddress("2606:2800:220:1:248:1893:25c8:1946", none)).toBeUndefined();
    for (const address of [
      "127.0.0.1",
      "::1",
      "::ffff:127.0.0.1",
      "10.0.0.1",
      "192.168.1.1",
      "172.16.0.1",
      "100.64.0.1",
      "fd12::1",
      "169.254.169.254",
      "fe80::1",
      "0.0.0.0",
      "224.0.0.1",
    ]) {
      expect(forbiddenAddress(address, none), address).toBeDefined();
    }
    expect(forbiddenAddress("127.0.0.1", { allowLoopback: true, allowPrivate: false })).toBeUndefined();
    expect(forbiddenAddress("10.0.0.1", { allowLoopback: true, allowPrivate: false })).toBeDefined();
    expect(forbiddenAddress("10.0.0.1", { allowLoopback: false, allowPrivate: true })).toBeUndefined();
    expect(forbiddenAddress("169.254.169.254", { allowLoopback: true, allowPrivate: true })).toBeDefined();
    // Cloud metadata inside ranges an operator may allow, and the IPv4-compatible IPv6 spelling.
    expect(forbiddenAddress("100.100.100.200", { allowLoopback: true, allowPrivate: true })).toMatch(/metadata/);
    expect(forbiddenAddress("fd00:ec2::254", { allowLoopback: true, allowPrivate: true })).toMatch(/metadata/);
    expect(forbiddenAddress("::7f00:1", none)).toBeDefined();
    expect(forbiddenAddress("::127.0.0.1", none)).toBeDefined();
    await expect(checkDestination("http://localhost:8080/hook", none, "url")).rejects.toMatchObject({
      turnkeyErrorCode: "WEBHOOK_DESTINATION_FORBIDDEN",
    });
    await expect(checkDestination("http://localhost:8080/hook", { allowLoopback: true, allowPrivate: false }, "url")).resolves.toBe(
      "http://localhost:8080/hook",
    );
  });
});

// Each test starts, kills and restarts whole server processes (and runs the CLI): on a loaded 2-core
// machine that alone can take longer than the default 30 s.
describe("webhook deliveries across server processes", { timeout: 90_000 }, () => {
  async function processes(count: number, settings: Record<string, string> = {}) {
    const deployment = await cliDeployment({ ...FAST, ...settings });
    for (let i = 0; i < count; i++) await deployment.start();
    const post = async (
      baseUrl: string,
      operation: string,
      type: string,
      parameters: Record<string, unknown>,
      signer: ApiKeyPair = deployment.key,
    ) => {
      const request = signedRequest(
        { type, organizationId: deployment.organizationId, timestampMs: String(Date.now()), parameters },
        signer,
      );
      const res = await fetch(`${baseUrl}/public/v1/submit/${operation}`, {
        method: "POST",
        headers: { "content-type": "application/json", ...request.headers },
        body: request.body,
      });
      return (await res.json()) as any;
    };
    return { ...deployment, post };
  }

  it("a server killed (SIGKILL) before it could deliver delivers after restart", async () => {
    const port = await freePort();
    const cluster = await processes(1);
    try {
      const target = `http://127.0.0.1:${port}/hook`;
      await cluster.post(cluster.servers[0]!.url, "create_webhook_endpoint", "ACTIVITY_TYPE_CREATE_WEBHOOK_ENDPOINT", {
        url: target,
        name: "down",
        subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
      });
      const tagged = await cluster.post(cluster.servers[0]!.url, "create_user_tag", "ACTIVITY_TYPE_CREATE_USER_TAG", {
        userTagName: "before the crash",
        userIds: [],
      });
      expect(tagged.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
      // Nothing listens yet: every attempt so far failed. Kill the server without warning.
      cluster.servers[0]!.child.kill("SIGKILL");
      await cluster.servers[0]!.exited;
      const hook = await receiver(port);
      try {
        await cluster.start();
        await until("the activity, delivered by the restarted server", () => hook.activities().find((a) => a.id === tagged.activity.id));
        const { stdout } = await run(process.execPath, [CLI, "webhooks", "--data-dir", cluster.database.dataDir, "--status", "delivered"], {
          env: cluster.env,
        });
        const log = stdout
          .trim()
          .split("\n")
          .map((line) => JSON.parse(line));
        expect(log.find((entry) => entry.activityId === tagged.activity.id)).toMatchObject({ status: "delivered", url: target });
        expect(log[0]).not.toHaveProperty("body");
      } finally {
        await hook.close();
      }
    } finally {
      await cluster.stop();
    }
  });

  it("two server processes on one database deliver each event exactly once", async () => {
    const hook = await receiver();
    // An attempt that outlives its deadline is retried, and the receiver may then see the event twice
    // (at least once, by design): on a loaded machine 500 ms is too short, so this test, about leases
    // between processes, gives attempts ample time.
    const cluster = await processes(2, { SIGIL_WEBHOOK_TIMEOUT_MS: "10000" });
    try {
      const [a, b] = cluster.servers;
      await cluster.post(a!.url, "create_webhook_endpoint", "ACTIVITY_TYPE_CREATE_WEBHOOK_ENDPOINT", {
        url: hook.url,
        name: "shared",
        subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
      });
      const ids: string[] = [];
      await Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const response = await cluster.post((i % 2 ? a : b)!.url, "create_user_tag", "ACTIVITY_TYPE_CREATE_USER_TAG", {
            userTagName: `tag ${i}`,
            userIds: [],
          });
          ids.push(response.activity.id);
        }),
      );
      await until("21 deliveries", () => hook.received.length >= 21);
      await new Promise((r) => setTimeout(r, 500));
      const eventIds = hook.received.map((r) => r.headers["x-turnkey-event-id"]);
      expect(eventIds).toHaveLength(21);
      expect(new Set(eventIds).size).toBe(21);
      const delivered = new Set(hook.activities().map((x) => x.id));
      for (const id of ids) expect(delivered.has(id)).toBe(true);
    } finally {
      await cluster.stop();
      await hook.close();
    }
  });
});
