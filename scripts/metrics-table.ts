// Renders the series of docs/metrics.md from the metrics' declarations (src/services/metrics.ts), so
// the list cannot drift from what /metrics serves. The page's hand-written text stays as written; only
// the part between the two markers is generated. `npm run docs` rewrites it; a test fails when the
// committed page is stale.
import { LABEL_VALUES, Metrics } from "../src/services/metrics.js";

export const BEGIN_MARKER =
  "<!-- BEGIN series: generated from src/services/metrics.ts by `npm run docs`; edit the declarations, not this part -->";
export const END_MARKER = "<!-- END series -->";

const cell = (text: string) => text.replaceAll("|", "\\|");

export function renderSeries(): string {
  const declared = new Metrics().registry.getMetricsAsArray() as unknown as Array<{
    name: string;
    help: string;
    type: string;
    labelNames?: string[];
  }>;
  const own = declared.filter((m) => m.name.startsWith("sigil_"));
  const lines = ["| series | type | labels | meaning |", "|---|---|---|---|"];
  for (const m of own) {
    const labels = (m.labelNames ?? []).map((label) => `\`${label}\``).join(", ");
    lines.push(`| \`${m.name}\` | ${m.type} | ${labels} | ${cell(m.help)} |`);
  }
  const used = [...new Set(own.flatMap((m) => m.labelNames ?? []))];
  lines.push("", "| label | values |", "|---|---|");
  for (const label of used) {
    const values = LABEL_VALUES[label];
    if (!values) throw new Error(`label ${label} has no description in LABEL_VALUES (src/services/metrics.ts)`);
    lines.push(`| \`${label}\` | ${cell(values)} |`);
  }
  const node = declared.filter((m) => !m.name.startsWith("sigil_")).map((m) => `\`${m.name}\``);
  lines.push(
    "",
    `Node.js's own, from prom-client's default collectors under their usual names (CPU, memory, heap, event-loop lag, garbage collection, handles): ${node.join(", ")}.`,
  );
  return lines.join("\n");
}

/** `page` with its generated part rendered anew. */
export function renderMetricsPage(page: string): string {
  const begin = page.indexOf(BEGIN_MARKER);
  const end = page.indexOf(END_MARKER);
  if (begin < 0 || end < begin) throw new Error(`docs/metrics.md has lost its markers: put back ${BEGIN_MARKER} and ${END_MARKER}`);
  return `${page.slice(0, begin + BEGIN_MARKER.length)}\n\n${renderSeries()}\n\n${page.slice(end)}`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { readFileSync, writeFileSync } = await import("node:fs");
  const file = new URL("../docs/metrics.md", import.meta.url);
  writeFileSync(file, renderMetricsPage(readFileSync(file, "utf8")));
  console.log("wrote docs/metrics.md");
}
