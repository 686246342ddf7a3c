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
import { batchRead as batchReadStatement } from "../src/store/transparency-log.js";

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
      // A leaf by (organization, activity): both columns in the search, not the organization's leaves filtered.
      expect(on("transparency_log_leaves").length, described).toBe(1);
      expect(on("transparency_log_leaves")[0]!["Index Cond"], described).toMatch(
        /organization_id.*activity_id|activity_id.*organization_id/,
      );
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
