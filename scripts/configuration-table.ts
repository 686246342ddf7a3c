// Renders docs/configuration.md from the settings catalog in src/config.ts, so the docs cannot drift
// from the code. `npm run docs` rewrites the file; a test fails when the committed file is stale.
import { DURATION_MAX_SECONDS, TIMER_MAX_MS, settings, type Setting } from "../src/config.js";

const cell = (text: string) => text.replaceAll("|", "\\|");

function defaultOf(declared: Setting<unknown, unknown>): string {
  if (declared.defaultText) return declared.defaultText;
  if (declared.default === null || (Array.isArray(declared.default) && declared.default.length === 0)) return "*(unset)*";
  return `\`${String(declared.default)}\``;
}

export function renderConfigurationPage(): string {
  const lines = [
    "# Configuration",
    "",
    "Generated from the settings catalog in `src/config.ts` by `npm run docs`; do not edit by hand.",
    "",
    "Sigil reads its settings from environment variables when a command starts. `sigil serve`'s flags `--host`, `--port` and `--workers`, and",
    "every command's `--data-dir`, win over their variables. An empty variable counts as unset, except where a setting below says",
    "otherwise.",
    "",
    "A value a setting does not accept stops `sigil serve` (and every other command but `keygen`) at start, before anything is",
    "created or opened, with exit status 1 and a message that names the variable (and the flag, when the value came from one) and",
    "says what is expected, for every such value at once. Values that are or may hold secrets (keys, URLs that may carry a",
    "password, tokens) are never repeated in a message.",
    "",
    "Numbers are whole numbers, written in decimal digits (JavaScript's other forms, such as `1e3` or `0x10`, are read too).",
    `Durations in milliseconds stop at ${TIMER_MAX_MS} (about 24.8 days: a Node.js timer waits no longer), durations in seconds`,
    `at ${DURATION_MAX_SECONDS} (100 years).`,
  ];
  const groups = new Map<string, Setting<unknown, unknown>[]>();
  for (const declared of Object.values(settings) as Setting<unknown, unknown>[]) {
    groups.set(declared.group, [...(groups.get(declared.group) ?? []), declared]);
  }
  for (const [group, members] of groups) {
    lines.push("", `## ${group}`, "", "| variable | flag | default | accepted | meaning |", "|---|---|---|---|---|");
    for (const declared of members) {
      const meaning = declared.ifEmpty ? `${declared.meaning}. Set but empty, it is refused (${declared.ifEmpty})` : declared.meaning;
      const flag = declared.flag ? `\`${declared.flag}\`` : "";
      lines.push(
        `| \`${declared.variable}\` | ${flag} | ${cell(defaultOf(declared))} | ${cell(declared.kind.accepts)} | ${cell(meaning)} |`,
      );
    }
  }
  lines.push(
    "",
    "## Logs",
    "",
    "Logs are JSON lines (pino) on stdout. They name activities, organizations and users, never request bodies or credentials. At",
    'the default level every activity has a line (`"msg":"activity"`: its id, type, status, policy outcome and, when it failed, its',
    '`errorCode` and `error` message), and so has every refused request (`"msg":"request refused"`: method, URL, client address, HTTP',
    "status, `errorCode`, `error`); `debug` adds one line per request with its duration. Every line written while serving a request",
    "carries its `requestId` (and `traceId` and `spanId` when it came with a W3C `traceparent`): see",
    "[Request ids and traces](running.md#request-ids-and-traces).",
  );
  return lines.join("\n") + "\n";
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { writeFileSync } = await import("node:fs");
  writeFileSync(new URL("../docs/configuration.md", import.meta.url), renderConfigurationPage());
  console.log("wrote docs/configuration.md");
}
