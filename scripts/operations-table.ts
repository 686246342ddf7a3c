// Renders docs/operations.md from the operation registry, so the docs cannot drift from the code.
// `npm run docs` rewrites the file; a test fails when the committed file is stale.
import { activityOperations, queryOperations } from "../src/activities/catalog.js";
import { keysOf } from "../src/operations/registry.js";

export function renderOperationsTable(): string {
  const lines = [
    "# Operations",
    "",
    "Generated from the operation registry by `npm run docs`; do not edit by hand.",
    "",
    "## Activities (`POST /public/v1/submit/<operation>`)",
    "",
    "| operation | accepted activity types | intent key(s) | result key(s) | policy resource / action | what it does |",
    "|---|---|---|---|---|---|",
  ];
  for (const op of activityOperations) {
    const types = op.types.map((t) => `\`${t}\``).join("<br>");
    const intents = op.types.map((t) => keysOf(t).intentKeys.map((k) => `\`${k}\``).join(" + ")).join("<br>");
    const results = op.types.map((t) => keysOf(t).resultKeys.map((k) => `\`${k}\``).join(" + ")).join("<br>");
    lines.push(`| \`${op.name}\` | ${types} | ${intents} | ${results} | ${op.kind === "activity" ? `${op.resource} / ${op.action}${op.rootOnly ? " (root quorum only)" : ""}` : "a vote on a pending activity"} | ${op.summary} |`);
  }
  lines.push("", "## Queries (`POST /public/v1/query/<operation>`)", "", "| operation | what it returns |", "|---|---|");
  for (const op of queryOperations) lines.push(`| \`${op.name}\` | ${op.summary} |`);
  return lines.join("\n") + "\n";
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { writeFileSync } = await import("node:fs");
  writeFileSync(new URL("../docs/operations.md", import.meta.url), renderOperationsTable());
  console.log("wrote docs/operations.md");
}
