// The statements a request sends, read from the store's statement tally (handles.ts, StatementTally),
// and the plans the database picks for them: test/query-plans.test.ts (a signature's, SQLite) and
// test/sub-organization-plans.test.ts (an app's end users', both databases).
import { CompiledQuery } from "kysely";
import type { Harness } from "./harness.js";

/** The statements `request` sends that read or change rows by a condition (SELECT, UPDATE, DELETE and
 * INSERT … SELECT; not BEGIN, COMMIT, savepoints or plain INSERTs). The server's pollers (webhooks,
 * courier, broadcaster) read now and then too: what `times` requests in a row all sent is the request's own.
 * The transparency log's sequencer, which appends each final activity after its commit, runs between
 * them, uncounted. */
export async function statementsOf(
  h: Harness,
  request: () => Promise<unknown>,
  times = 3,
  only = /^(select|update|delete|with|insert .* select )/,
): Promise<string[]> {
  const tally = h.server.store.statements;
  let common: Set<string> | undefined;
  try {
    for (let attempt = 0; attempt < times; attempt++) {
      tally.texts = [];
      await request();
      const sent = new Set(tally.texts.filter((text) => only.test(text)));
      tally.texts = null;
      await h.server.logSequencer.flush();
      common = common ? new Set([...common].filter((text) => sent.has(text))) : sent;
    }
  } finally {
    tally.texts = null;
  }
  return [...common!];
}

/** SQLite's plan of a statement, one line per step ("SEARCH t USING INDEX …", "SCAN t", …). */
export async function sqlitePlanOf(h: Harness, text: string): Promise<string[]> {
  const parameters = Array.from(text.matchAll(/\?/g), () => null);
  const { rows } = await h.server.store.db.executeQuery<{ detail: string }>(CompiledQuery.raw(`explain query plan ${text}`, parameters));
  return rows.map((row) => row.detail);
}

/** A node of PostgreSQL's plan (EXPLAIN (FORMAT JSON)). */
export interface PostgresPlanNode {
  "Node Type": string;
  "Relation Name"?: string;
  "Index Name"?: string;
  "Plan Rows": number;
  Filter?: string;
  Plans?: PostgresPlanNode[];
  [key: string]: unknown;
}

/**
 * PostgreSQL's generic plan of a statement: the plan a prepared statement runs once PostgreSQL stops
 * planning it for each execution's values (Sigil runs recurring statements prepared: postgres-pool.ts),
 * which knows the parameters' types but not their values. PostgreSQL 15 has no EXPLAIN (GENERIC_PLAN):
 * the text is prepared and explained with plan_cache_mode = force_generic_plan, every parameter null.
 */
export async function postgresPlanOf(h: Harness, text: string): Promise<PostgresPlanNode> {
  const count = Math.max(0, ...Array.from(text.matchAll(/\$(\d+)/g), (m) => Number(m[1])));
  return h.server.store.db.connection().execute(async (db) => {
    await db.executeQuery(CompiledQuery.raw("set plan_cache_mode = force_generic_plan"));
    await db.executeQuery(CompiledQuery.raw(`prepare sigil_plan_probe as ${text}`));
    try {
      const args = count ? `(${Array.from({ length: count }, () => "null").join(", ")})` : "";
      const { rows } = await db.executeQuery<{ "QUERY PLAN": Array<{ Plan: PostgresPlanNode }> }>(
        CompiledQuery.raw(`explain (format json) execute sigil_plan_probe${args}`),
      );
      return rows[0]!["QUERY PLAN"][0]!.Plan;
    } finally {
      await db.executeQuery(CompiledQuery.raw("deallocate sigil_plan_probe"));
      await db.executeQuery(CompiledQuery.raw("reset plan_cache_mode"));
    }
  });
}

/** Every node of a plan, each with the nodes above it. */
export function* nodesOf(node: PostgresPlanNode, above: PostgresPlanNode[] = []): Generator<[PostgresPlanNode, PostgresPlanNode[]]> {
  yield [node, above];
  for (const child of node.Plans ?? []) yield* nodesOf(child, [...above, node]);
}
