// The plan of the sequencer's read of a batch (store/transparency-log.ts, sequenceLog) on a log much
// larger than its statistics say: an organization's log grows by thousands of leaves between two
// ANALYZEs (a backlog after a bulk load, a busy day), and a plan that joined the pending rows with the
// leaves by organization alone read every leaf once per pending row. Whatever the statistics, each
// pending row's activity and leaf must be index searches by their keys, and the pending rows a range
// of their primary key up to the batch's LIMIT on SQLite (PostgreSQL may read that near-empty table whole).
import { CompiledQuery, sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { backend } from "./helpers/backend.js";
import { nodesOf, sqlitePlanOf, type PostgresPlanNode } from "./helpers/query-plans.js";
import { newId } from "../src/store/ids.js";
import { batchRead as batchReadStatement, pendingDelete } from "../src/store/transparency-log.js";
import { PLANNED_EACH_RUN } from "../src/store/postgres-pool.js";

let h: Harness;
let org: TestOrganization;
let batchRead: string;

/** Leaves of `org`'s log the statistics never saw: after the last ANALYZE, as many as a day's backlog. */
const UNSEEN_LEAVES = 20_000;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Sequenced");
  const sdk = h.sdk(org, org.key);
  for (let i = 0; i < 3; i++)
    await sdk.createPolicy({ policyName: `p${i}`, effect: "EFFECT_ALLOW", consensus: "true", condition: "false", notes: "" });
  await h.server.logSequencer.flush();
  const db = h.server.store.db;
  // Statistics that count the few leaves there are now, as an ANALYZE would have left them.
  if (h.server.store.dialect === "postgres") await sql`analyze transparency_log_leaves, transparency_log_pending`.execute(db);
  else await sql`analyze`.execute(db);
  // Then the log grows unseen: leaves far past its head (the sequencer never reaches them here).
  for (let start = 0; start < UNSEEN_LEAVES; start += 5_000) {
    const rows = Array.from({ length: 5_000 }, (_, i) => ({
      organization_id: org.organizationId,
      leaf_index: 1_000_000_000 + start + i,
      activity_id: newId(),
      leaf_hash: "00".repeat(32),
    }));
    await db.insertInto("transparency_log_leaves").values(rows).execute();
  }
  // A pending activity, and the statement the sequencer reads its batch with (on SQLite its planning
  // thread, whose connection's statements the store's tally does not see).
  await sdk.createPolicy({ policyName: "pending", effect: "EFFECT_ALLOW", consensus: "true", condition: "false", notes: "" });
  batchRead = batchReadStatement(org.organizationId, 1_000).compile(db).sql;
});
afterAll(() => h.close());

describe(`the sequencer's batch read on a log larger than its statistics (${backend})`, () => {
  it("searches each pending row's activity and leaf by their keys, and the pending rows by theirs up to the batch's limit", async () => {
    const db = h.server.store.db;
    if (h.server.store.dialect === "postgres") {
      const { rows } = await db.executeQuery<{ "QUERY PLAN": Array<{ Plan: PostgresPlanNode }> }>(
        CompiledQuery.raw(`explain (format json) ${batchRead}`, [org.organizationId, 1_000]),
      );
      const plan = rows[0]!["QUERY PLAN"][0]!.Plan;
      const scans = [...nodesOf(plan)].map(([node]) => node).filter((node) => node["Relation Name"]);
      const on = (table: string) => scans.filter((node) => node["Relation Name"] === table);
      const described = JSON.stringify(plan, null, 1);
      // The leaves and the activities read by an index, never whole. (The pending rows may be: the
      // sequencer keeps that table near empty, and PostgreSQL plans a grown one by its size on disk.)
      for (const node of [...on("transparency_log_leaves"), ...on("activities")])
        expect(node["Node Type"], described).toMatch(/^Index (Only )?Scan$/);
      // A leaf by its activity (the hash index of migration 0035, one row), not the organization's leaves filtered.
      expect(on("transparency_log_leaves").length, described).toBe(1);
      expect(on("transparency_log_leaves")[0]!["Index Name"], described).toBe("transparency_log_leaves_by_activity");
      expect(on("transparency_log_leaves")[0]!["Index Cond"], described).toMatch(/^\(activity_id = /);
      expect(on("activities")[0]!["Index Cond"], described).toMatch(/\(id = /);
      // No Materialize or Hash of a table's rows to be searched once per pending row.
      for (const [node] of nodesOf(plan)) expect(node["Node Type"], described).not.toMatch(/^(Materialize|Hash)$/);
    } else {
      const steps = await sqlitePlanOf(h, batchRead);
      const described = steps.join("\n");
      // No table read whole (the batch's own rows, `p`, are read once: they are what is looked up for).
      expect(
        steps.some((step) => /^SCAN (?!p$)/.test(step) && !/USING (COVERING )?INDEX/.test(step)),
        described,
      ).toBe(false);
      expect(
        steps.some((step) =>
          /SEARCH l USING (COVERING )?INDEX transparency_log_leaves_by_activity \(organization_id=\? AND activity_id=\?\)/.test(step),
        ),
        described,
      ).toBe(true);
      expect(
        steps.some((step) => /SEARCH a USING INDEX .*\(id=\?\)/.test(step)),
        described,
      ).toBe(true);
    }
  });
});

// PostgreSQL keeps a prepared statement's generic plan for the connection's life; SQLite plans each
// statement when it is prepared, reading no statistics the queue's size could outgrow.
if (backend === "postgres")
  describe("the sequencer's statements over the pending rows (postgres)", () => {
    it("delete the rows a batch took by a range of the queue's primary key, on a backlog its statistics never saw", async () => {
      const db = h.server.store.db;
      // Statistics taken while the queue was empty, then a bulk load's backlog (activities not in the
      // activities table: the sequencer takes such rows and appends nothing).
      await sql`analyze transparency_log_pending`.execute(db);
      const backlog = Array.from({ length: 20_000 }, () => ({ organization_id: org.organizationId, activity_id: newId() }));
      for (let start = 0; start < backlog.length; start += 5_000)
        await db
          .insertInto("transparency_log_pending")
          .values(backlog.slice(start, start + 5_000))
          .execute();
      const taken = backlog.slice(10_000, 10_100).map((row) => row.activity_id);
      const compiled = pendingDelete(org.organizationId, taken).compile(db);
      const { rows } = await db.executeQuery<{ "QUERY PLAN": Array<{ Plan: PostgresPlanNode }> }>(
        CompiledQuery.raw(`explain (format json) ${compiled.sql}`, [...compiled.parameters]),
      );
      const plan = rows[0]!["QUERY PLAN"][0]!.Plan;
      const described = JSON.stringify(plan, null, 1);
      const scans = [...nodesOf(plan)]
        .map(([node]) => node)
        .filter((node) => node["Relation Name"] === "transparency_log_pending" && node["Node Type"] !== "ModifyTable");
      expect(scans.length, described).toBe(1);
      expect(scans[0]!["Node Type"], described).toMatch(/^Index (Only )?Scan$/);
      expect(scans[0]!["Index Cond"], described).toMatch(/organization_id = .*activity_id >= .*activity_id <= /);
      await h.server.logSequencer.flush();
    });

    it("are planned on every run, never prepared: the queue swings from empty to a bulk load's backlog", async () => {
      const sdk = h.sdk(org, org.key);
      await sdk.createPolicy({ policyName: "queued", effect: "EFFECT_ALLOW", consensus: "true", condition: "false", notes: "" });
      const tally = h.server.store.statements;
      tally.texts = [];
      let texts: string[];
      try {
        await h.server.logSequencer.flush();
        texts = tally.texts;
      } finally {
        tally.texts = null;
      }
      const overTheQueue = texts.filter((text) => text.includes('"transparency_log_pending"'));
      // The sweep's look-up of the organizations pending, the batch's read and its write.
      expect(overTheQueue.length).toBeGreaterThanOrEqual(3);
      for (const text of overTheQueue) expect(text.startsWith(PLANNED_EACH_RUN), text).toBe(true);
    });
  });
