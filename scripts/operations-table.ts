// Renders docs/operations.md from the operation registry, so the docs cannot drift from the code.
// `npm run docs` rewrites the file; a test fails when the committed file is stale.
import { activityOperations, queryOperations } from "../src/operations/catalog.js";
import { keysOf } from "../src/registry/registry.js";
import { notServedOperations } from "../src/operations/not-served.js";

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
    const intents = op.types
      .map((t) =>
        keysOf(t)
          .intentKeys.map((k) => `\`${k}\``)
          .join(" + "),
      )
      .join("<br>");
    const results = op.types
      .map((t) =>
        keysOf(t)
          .resultKeys.map((k) => `\`${k}\``)
          .join(" + "),
      )
      .join("<br>");
    lines.push(
      `| \`${op.name}\` | ${types} | ${intents} | ${results} | ${op.kind === "activity" ? `${op.resource} / ${op.action}${op.rootOnly ? " (root quorum only)" : ""}` : "a vote on a pending activity"} | ${op.summary} |`,
    );
  }
  lines.push("", "## Queries (`POST /public/v1/query/<operation>`)", "", "| operation | what it returns |", "|---|---|");
  for (const op of queryOperations.filter((op) => !op.own)) lines.push(`| \`${op.name}\` | ${op.summary} |`);
  lines.push(
    "",
    "## Sigil's own queries (`POST /sigil/v1/query/<operation>`)",
    "",
    "Queries the product's API does not have, served under a prefix of Sigil's own so that no path the product adds can ever",
    "collide with one. They are stamped, authenticated and answered exactly as the queries above (`organizationId` names the",
    "organization asked about); their request bodies are described in `/openapi.json`.",
    "",
    "| operation | what it returns |",
    "|---|---|",
  );
  for (const op of queryOperations.filter((op) => op.own)) lines.push(`| \`${op.name}\` | ${op.summary} |`);
  lines.push(
    "",
    "## Not served (HTTP 501)",
    "",
    "These paths of the product's API are its hosted-only services. Every request for one is answered HTTP 501, gRPC code 12",
    "(Unimplemented), `OPERATION_NOT_SERVED`, with a message naming the service — before the stamp or the body is looked at, as the",
    "answer says nothing the product's public API description does not. Any other path Sigil does not serve, operations of the",
    "product's API still to be built here included, is answered 404 `ENDPOINT_NOT_FOUND`.",
    "",
    "| hosted-only service of the product | paths |",
    "|---|---|",
  );
  const pathsByService = new Map<string, string[]>();
  for (const op of notServedOperations) pathsByService.set(op.service, [...(pathsByService.get(op.service) ?? []), op.path]);
  for (const [service, paths] of pathsByService) lines.push(`| ${service} | ${paths.map((path) => `\`${path}\``).join("<br>")} |`);
  return lines.join("\n") + "\n";
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { writeFileSync } = await import("node:fs");
  writeFileSync(new URL("../docs/operations.md", import.meta.url), renderOperationsTable());
  console.log("wrote docs/operations.md");
}
