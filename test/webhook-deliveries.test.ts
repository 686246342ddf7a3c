// list_webhook_deliveries (POST /sigil/v1/query/list_webhook_deliveries, docs/webhooks.md): the delivery
// log of an organization's webhooks, sent the way a user's program sends it (@turnkey/http's
// TurnkeyClient, stamped by @turnkey/api-key-stamper), against real deliveries to receivers on
// loopback. Every refusal is checked to change nothing (the full-table snapshot), and every shape of
// the read to reach its rows by an index in the list's order, on SQLite and on PostgreSQL.
import { CompiledQuery, sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { receiver, until } from "./helpers/webhook-receiver.js";
import { newKeyPair, signedRequest, startHarness, type ApiKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";

const PATH = "/sigil/v1/query/list_webhook_deliveries";
const FAST = {
  SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
  SIGIL_WEBHOOK_RETRY_BASE_MS: "30",
  SIGIL_WEBHOOK_POLL_MS: "50",
  SIGIL_WEBHOOK_TIMEOUT_MS: "500",
};
/** What the activity bodies carry that the delivery log must never show (a tag's name). */
const PRIVATE_NAME = "payroll-tag-7f3a";
/** A receiver's token in its URL's query, which the log shows as "?…". */
const TOKEN = "s3cret-receiver-token";

interface Delivery {
  deliveryId: string;
  endpointId: string | null;
  url: string;
  eventType: string;
  eventOrganizationId: string;
  activityId: string;
  status: string;
  attempts: number;
  lastStatusCode: number | null;
  lastError: string | null;
  createdAt: { seconds: string; nanos: string };
  updatedAt: { seconds: string; nanos: string };
  nextAttemptAt: { seconds: string; nanos: string } | null;
  deliveredAt: { seconds: string; nanos: string } | null;
}

let h: Harness;
let org: TestOrganization;
let good: Awaited<ReturnType<typeof receiver>>;
let refusing: Awaited<ReturnType<typeof receiver>>;
let goodEndpoint: string;
let refusingEndpoint: string;
let tagActivity: string;

async function list(key: ApiKeyPair, body: Record<string, unknown>, organizationId = org.organizationId): Promise<Delivery[]> {
  const answer = (await h.http(key).request(PATH, { organizationId, ...body })) as { webhookDeliveries: Delivery[] };
  return answer.webhookDeliveries;
}

/** The refusal of a listing, as the server words it, and proof that it changed nothing. */
async function refusal(body: Record<string, unknown>, key = org.key, organizationId = org.organizationId) {
  const before = await h.snapshot();
  const request = signedRequest({ organizationId, ...body }, key);
  const answer = await h.post(PATH, request.body, request.headers);
  expect(answer.status).toBeGreaterThanOrEqual(400);
  expect(answer.status).toBeLessThan(500);
  expect(await h.snapshot()).toBe(before);
  return { message: answer.json.message as string, errorCode: answer.json.details?.[0]?.turnkeyErrorCode as string | undefined };
}

beforeAll(async () => {
  h = await startHarness(FAST);
  org = await h.organization("Deliveries");
  good = await receiver();
  refusing = await receiver();
  // The second receiver refuses every delivery: a 4xx ends it as failed at once.
  refusing.answers.push(...Array.from({ length: 10 }, () => 404));
  const sdk = h.sdk(org, org.key, fastPoller);
  goodEndpoint = (
    await sdk.createWebhookEndpoint({ url: `${good.url}?token=${TOKEN}`, name: "good", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] })
  ).endpointId;
  refusingEndpoint = (
    await sdk.createWebhookEndpoint({ url: refusing.url, name: "refusing", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] })
  ).endpointId;
  tagActivity = (await sdk.createUserTag({ userTagName: PRIVATE_NAME, userIds: [] })).activity.id;
  // Three events to the good endpoint (both creations and the tag), two to the refusing one; all settled.
  await until("every delivery settled", async () => {
    const rows = await h.server.store.db.selectFrom("webhook_deliveries").select("status").execute();
    return rows.length === 5 && rows.every((r) => r.status !== "pending");
  });
});
afterAll(async () => {
  await good?.close();
  await refusing?.close();
  await h?.close();
});

describe("list_webhook_deliveries", () => {
  it("answers the organization's deliveries newest first: where, what, what came of it, never the body or the URL's query", async () => {
    const all = await list(org.key, {});
    expect(all).toHaveLength(5);
    const order = all.map((d) => [Number(d.createdAt.seconds) * 1e9 + Number(d.createdAt.nanos), d.deliveryId]);
    expect(order).toEqual([...order].sort((a, b) => (a[0]! < b[0]! ? 1 : a[0]! > b[0]! ? -1 : a[1]! < b[1]! ? 1 : -1)));
    const text = JSON.stringify(all);
    expect(text).not.toContain(TOKEN);
    expect(text).not.toContain(PRIVATE_NAME);
    expect(all.every((d) => !("body" in d))).toBe(true);

    const tagToGood = all.find((d) => d.activityId === tagActivity && d.endpointId === goodEndpoint)!;
    expect(tagToGood).toEqual({
      deliveryId: expect.any(String),
      endpointId: goodEndpoint,
      url: `${good.url}?…`,
      eventType: "ACTIVITY_UPDATES",
      eventOrganizationId: org.organizationId,
      activityId: tagActivity,
      status: "delivered",
      attempts: 1,
      lastStatusCode: 200,
      lastError: null,
      createdAt: { seconds: expect.any(String), nanos: expect.any(String) },
      updatedAt: { seconds: expect.any(String), nanos: expect.any(String) },
      nextAttemptAt: null,
      deliveredAt: { seconds: expect.any(String), nanos: expect.any(String) },
    });
    // The event id the receiver saw is the delivery's id.
    const received = good.received.find((r) => JSON.parse(r.body.toString()).id === tagActivity)!;
    expect(received.headers["x-turnkey-event-id"]).toBe(tagToGood.deliveryId);

    const tagToRefusing = all.find((d) => d.activityId === tagActivity && d.endpointId === refusingEndpoint)!;
    expect(tagToRefusing).toMatchObject({
      url: refusing.url,
      status: "failed",
      attempts: 1,
      lastStatusCode: 404,
      lastError: "the receiver answered 404",
      nextAttemptAt: null,
      deliveredAt: null,
    });
  });

  it("narrows to one endpoint, to one status, and to both", async () => {
    const toGood = await list(org.key, { endpointId: goodEndpoint });
    expect(toGood).toHaveLength(3);
    expect(new Set(toGood.map((d) => d.endpointId))).toEqual(new Set([goodEndpoint]));
    const failed = await list(org.key, { status: "failed" });
    expect(failed.map((d) => [d.endpointId, d.status])).toEqual([
      [refusingEndpoint, "failed"],
      [refusingEndpoint, "failed"],
    ]);
    expect(await list(org.key, { endpointId: refusingEndpoint, status: "delivered" })).toEqual([]);
    expect((await list(org.key, { endpointId: refusingEndpoint, status: "failed" })).map((d) => d.deliveryId)).toEqual(
      failed.map((d) => d.deliveryId),
    );
    expect(await list(org.key, { status: "pending" })).toEqual([]);
  });

  it("pages with the API's cursors, none skipped either way", async () => {
    const all = (await list(org.key, {})).map((d) => d.deliveryId);
    const page = async (options: Record<string, string>) =>
      (await list(org.key, { paginationOptions: { limit: "2", ...options } })).map((d) => d.deliveryId);
    const first = await page({});
    const second = await page({ after: first[1]! });
    const third = await page({ after: second[1]! });
    expect([...first, ...second, ...third]).toEqual(all);
    expect(await page({ before: third[0]! })).toEqual(second);
    expect(await page({ before: second[0]! })).toEqual(first);
    expect(await page({ before: first[0]! })).toEqual([]);
    // Within one endpoint the cursor pages that endpoint's deliveries.
    const goodOnes = (await list(org.key, { endpointId: goodEndpoint })).map((d) => d.deliveryId);
    const goodFirst = (await list(org.key, { endpointId: goodEndpoint, paginationOptions: { limit: "1" } })).map((d) => d.deliveryId);
    const goodRest = (await list(org.key, { endpointId: goodEndpoint, paginationOptions: { after: goodFirst[0]! } })).map(
      (d) => d.deliveryId,
    );
    expect([...goodFirst, ...goodRest]).toEqual(goodOnes);
  });

  it("refuses an unknown endpoint, another organization's endpoint, a bad status, a bad limit or cursor, changing nothing", async () => {
    const other = await h.organization("Elsewhere");
    const otherSdk = h.sdk(other, other.key, fastPoller);
    const otherEndpoint = (
      await otherSdk.createWebhookEndpoint({ url: good.url, name: "theirs", subscriptions: [{ eventType: "ACTIVITY_UPDATES" }] })
    ).endpointId;
    await until("the other organization's delivery", async () => {
      const rows = await h.server.store.db
        .selectFrom("webhook_deliveries")
        .select(["id", "status"])
        .where("organization_id", "=", other.organizationId)
        .execute();
      return rows.length === 1 && rows[0]!.status === "delivered" ? rows[0] : undefined;
    });
    const theirDelivery = (await list(other.key, {}, other.organizationId))[0]!.deliveryId;

    const unknown = "8c3f6b0e-0000-4000-8000-000000000000";
    expect(await refusal({ endpointId: unknown })).toEqual({
      message: `webhook endpoint ${unknown} not found in this organization`,
      errorCode: "WEBHOOK_ENDPOINT_NOT_FOUND",
    });
    expect(await refusal({ endpointId: otherEndpoint })).toEqual({
      message: `webhook endpoint ${otherEndpoint} not found in this organization`,
      errorCode: "WEBHOOK_ENDPOINT_NOT_FOUND",
    });
    for (const status of ["DELIVERED", "sent", "", "delivered "]) {
      const refused = await refusal({ status });
      expect(refused.errorCode, status).toBe("REQUEST_INVALID");
      expect(refused.message, status).toContain('field "status"');
      expect(refused.message, status).toContain("pending, delivered, failed, cancelled");
    }
    expect(await refusal({ endpointId: "" })).toMatchObject({
      errorCode: "REQUEST_INVALID",
      message: expect.stringContaining('field "endpointId"'),
    });
    for (const limit of ["0", "101", "ten", "-1", "1.5"]) {
      expect(await refusal({ paginationOptions: { limit } }), limit).toEqual({
        message: `paginationOptions.limit must be between 1 and 100, got "${limit}"`,
        errorCode: "REQUEST_INVALID",
      });
    }
    expect(await refusal({ paginationOptions: { limit: 5 } })).toMatchObject({ errorCode: "REQUEST_INVALID" });
    const mine = (await list(org.key, {}))[0]!.deliveryId;
    expect(await refusal({ paginationOptions: { before: mine, after: mine } })).toEqual({
      message: "paginationOptions takes before or after, not both",
      errorCode: "REQUEST_INVALID",
    });
    expect(await refusal({ paginationOptions: { after: theirDelivery } })).toEqual({
      message: `pagination cursor ${theirDelivery} is not a webhook delivery of this organization`,
      errorCode: "REQUEST_INVALID",
    });
    expect(await refusal({ endpointId: goodEndpoint, secret: true })).toMatchObject({ errorCode: "REQUEST_INVALID" });
    // Another organization's key reads neither this organization's log nor, through it, its own.
    expect(await refusal({}, other.key)).toMatchObject({ errorCode: "ORGANIZATION_MISMATCH" });
  });

  it("a parent reads its sub-organization's deliveries; the sub-organization does not read its parent's", async () => {
    const parent = await h.organization("Parent");
    const parentSdk = h.sdk(parent, parent.key, fastPoller);
    const childKey = newKeyPair();
    const { subOrganizationId } = await parentSdk.createSubOrganization({
      subOrganizationName: "child",
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "child root",
          apiKeys: [{ apiKeyName: "k", publicKey: childKey.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const child = h.sdk({ organizationId: subOrganizationId }, childKey, fastPoller);
    const { endpointId } = await child.createWebhookEndpoint({
      url: good.url,
      name: "child's",
      subscriptions: [{ eventType: "ACTIVITY_UPDATES" }],
    });
    const read = (key: ApiKeyPair) =>
      until("the child's delivery, delivered", async () => {
        const [delivery] = await list(key, {}, subOrganizationId);
        return delivery?.status === "delivered" ? delivery : undefined;
      });
    const byParent = await read(parent.key);
    expect(byParent).toMatchObject({ endpointId, eventOrganizationId: subOrganizationId });
    expect(await read(childKey)).toEqual(byParent);
    // The parent's own log holds none of the child's endpoint's deliveries.
    expect(await list(parent.key, {}, parent.organizationId)).toEqual([]);
    expect(await refusal({}, childKey, parent.organizationId)).toMatchObject({ errorCode: "ORGANIZATION_MISMATCH" });
  });
});

describe("the reads of list_webhook_deliveries", () => {
  /** The SELECTs on webhook_deliveries a listing sends (not the dispatcher's, which poll beside it). */
  async function selectsOf(body: Record<string, unknown>): Promise<string[]> {
    const tally = h.server.store.statements;
    tally.texts = [];
    try {
      await list(org.key, body);
      return [...new Set(tally.texts.filter((t) => t.startsWith('select * from "webhook_deliveries" where "organization_id"')))];
    } finally {
      tally.texts = null;
    }
  }

  /** SQLite's plan steps, or PostgreSQL's generic plan (one for any parameters), of a statement. */
  async function planOf(text: string): Promise<string[]> {
    const db = h.server.store.db;
    if (h.server.store.dialect === "sqlite") {
      const parameters = Array.from(text.matchAll(/\?/g), () => null);
      const { rows } = await db.executeQuery<{ detail: string }>(CompiledQuery.raw(`explain query plan ${text}`, parameters));
      return rows.map((row) => row.detail);
    }
    const count = Math.max(0, ...Array.from(text.matchAll(/\$(\d+)/g), (m) => Number(m[1])));
    return db.transaction().execute(async (trx) => {
      // Only an index read in the list's order can answer once reading whole tables and sorting are
      // priced out; a generic plan is the one for every organization, endpoint and cursor.
      await sql`set local enable_seqscan = off`.execute(trx);
      await sql`set local enable_sort = off`.execute(trx);
      await sql`set local plan_cache_mode = force_generic_plan`.execute(trx);
      await sql.raw(`prepare deliveries_plan as ${text}`).execute(trx);
      try {
        const nulls = Array.from({ length: count }, () => "null").join(", ");
        const { rows } = await sql.raw<{ "QUERY PLAN": string }>(`explain execute deliveries_plan(${nulls})`).execute(trx);
        return rows.map((r) => r["QUERY PLAN"]);
      } finally {
        await sql`deallocate deliveries_plan`.execute(trx);
      }
    });
  }

  const cases: Array<[string, () => Record<string, unknown>, string]> = [
    ["the organization's", () => ({}), "webhook_deliveries_by_organization"],
    ["in one status", () => ({ status: "failed" }), "webhook_deliveries_by_organization_status"],
    ["one endpoint's", () => ({ endpointId: goodEndpoint }), "webhook_deliveries_by_endpoint_time"],
    ["one endpoint's in one status", () => ({ endpointId: goodEndpoint, status: "delivered" }), "webhook_deliveries_by_endpoint"],
  ];

  it.each(cases)("%s deliveries, from a cursor too, are read by an index in the list's order, nothing sorted", async (_, body, index) => {
    const first = (await list(org.key, body()))[0]!.deliveryId;
    for (const paginationOptions of [undefined, { after: first }, { before: first }]) {
      const texts = await selectsOf({ ...body(), ...(paginationOptions ? { paginationOptions } : {}) });
      expect(texts).toHaveLength(1);
      const plan = await planOf(texts[0]!);
      const shown = `${texts[0]}\n${plan.join("\n")}`;
      if (h.server.store.dialect === "sqlite") {
        expect(
          plan.filter((step) => /^(SEARCH|SCAN) /.test(step)),
          shown,
        ).toEqual([expect.stringMatching(new RegExp(`^SEARCH webhook_deliveries USING INDEX ${index} \\(`))]);
        expect(plan.join("\n"), shown).not.toMatch(/TEMP B-TREE/);
      } else {
        expect(plan.join("\n"), shown).toMatch(new RegExp(`Index Scan (Backward )?using ${index} on webhook_deliveries`));
        expect(plan.join("\n"), shown).not.toMatch(/Seq Scan|Sort|Bitmap/);
      }
    }
  });

  it("would catch a listing by status that walks the organization's whole log (the indexes before migration 0027)", async () => {
    const db = h.server.store.db;
    const [text] = await selectsOf({ status: "failed" });
    await db.executeQuery(CompiledQuery.raw("drop index webhook_deliveries_by_organization_status"));
    try {
      const plan = (await planOf(text!)).join("\n");
      expect(plan).toContain("webhook_deliveries_by_organization");
      expect(plan).not.toContain("webhook_deliveries_by_organization_status");
    } finally {
      await db.executeQuery(
        CompiledQuery.raw(
          "create index webhook_deliveries_by_organization_status on webhook_deliveries (organization_id, status, created_at, id)",
        ),
      );
    }
  });
});
