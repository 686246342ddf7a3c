// The webhook dispatcher's claim (src/services/webhook-dispatcher.ts) against an endpoint paused and
// moved to another URL while the claim runs: a paused endpoint is sent nothing, at either URL. On
// PostgreSQL the pause can commit between the claim's two statements (each reads the database as of
// its own start), and the delivery is handed back untouched; on SQLite the pause waits for the claim,
// which sends to the URL the endpoint had while it was active.
import { sql, type KyselyPlugin, type PluginTransformQueryArgs, type PluginTransformResultArgs } from "kysely";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { WebhookDispatcher } from "../src/services/webhook-dispatcher.js";
import type { OpenTx } from "../src/store/handles.js";
import { writeDeliveries } from "../src/services/webhook-outbox.js";
import type { Store } from "../src/store/database.js";
import { backend } from "./helpers/backend.js";
import { startHarness, type Harness } from "./helpers/harness.js";

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

/** Runs `meanwhile` once, right after the first statement of a transaction it watches has run. */
class AfterFirstStatement implements KyselyPlugin {
  private fired = false;
  constructor(private readonly meanwhile: () => Promise<void>) {}
  transformQuery({ node }: PluginTransformQueryArgs) {
    return node;
  }
  async transformResult({ result }: PluginTransformResultArgs) {
    if (!this.fired) {
      this.fired = true;
      await this.meanwhile();
    }
    return result;
  }
}

describe("a webhook claim racing an endpoint's pause", () => {
  it("sends nothing to the paused endpoint's new URL, and keeps the delivery for later", async () => {
    const store = h.server.store;
    const org = await h.organization("claims");
    const now = Date.now();
    const endpointId = `endpoint-${now}`;
    const [before, after] = ["https://before.example/hook", "https://after.example/hook"];
    await store.db
      .insertInto("webhook_endpoints")
      .values({
        id: endpointId,
        organization_id: org.organizationId,
        name: "racing",
        url: before,
        is_active: 1,
        created_at: now,
        updated_at: now,
      })
      .execute();
    // Due in half an hour: the server's own dispatcher leaves it alone; this test's runs an hour ahead.
    await store.db
      .transaction()
      .execute((trx) =>
        writeDeliveries(
          trx,
          [{ endpointId, organizationId: org.organizationId, url: before }],
          { eventType: "ACTIVITY_UPDATES", eventOrganizationId: org.organizationId, activityId: "activity", body: "{}" },
          now + 30 * 60_000,
        ),
      );
    const { id: deliveryId } = await store.db
      .selectFrom("webhook_deliveries")
      .select("id")
      .where("endpoint_id", "=", endpointId)
      .executeTakeFirstOrThrow();

    // The pause and move, by another connection, as an update_webhook_endpoint would commit it.
    let pausing: Promise<unknown> | undefined;
    const pause = async () => {
      pausing = store.db.updateTable("webhook_endpoints").set({ url: after, is_active: 0 }).where("id", "=", endpointId).execute();
      // PostgreSQL commits it at once, between the claim's statements; SQLite's one writer makes it
      // wait for the claim's transaction (awaiting it here would wait for ourselves).
      if (backend === "postgres") await pausing;
    };
    const watched: Store = {
      ...store,
      transact: (mode, work) => store.transact(mode, (trx) => work(trx.withPlugin(new AfterFirstStatement(pause)) as OpenTx)),
    };
    const dispatcher = new WebhookDispatcher(
      watched,
      undefined as never,
      h.config.webhooks,
      pino({ level: "silent" }),
      () => Date.now() + 60 * 60_000,
    );
    const claimed = (
      await (dispatcher as unknown as { claim(limit: number): Promise<Array<{ id: string; url: string }>> }).claim(10)
    ).filter((d) => d.id === deliveryId);
    await pausing;

    expect(claimed.map((d) => d.url)).not.toContain(after);
    const row = await store.db.selectFrom("webhook_deliveries").selectAll().where("id", "=", deliveryId).executeTakeFirstOrThrow();
    expect(row.status).toBe("pending");
    if (backend === "postgres") {
      // Handed back as it was: no lease, no attempt counted.
      expect(claimed).toEqual([]);
      expect(row.lease_until).toBeNull();
      expect(Number(row.attempts)).toBe(0);
    } else {
      // Claimed before the pause: sent where the endpoint pointed while it was active.
      expect(claimed.map((d) => d.url)).toEqual([before]);
      expect(Number(row.attempts)).toBe(1);
    }
    const endpoint = await store.db
      .selectFrom("webhook_endpoints")
      .select(["url", "is_active"])
      .where("id", "=", endpointId)
      .executeTakeFirstOrThrow();
    expect(endpoint).toEqual({ url: after, is_active: 0 });
    await sql`delete from webhook_deliveries where id = ${deliveryId}`.execute(store.db);
  });
});
