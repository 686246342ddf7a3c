// Renders the error codes of docs/errors.md from the error catalog, so the list cannot drift from the code.
// The page's hand-written text stays as written; only the part between the two markers is generated.
// `npm run docs` rewrites it; a test fails when the committed page is stale.
import { STATUS_CODES } from "node:http";
import { ERROR_CATALOG, GRPC_CODES, httpStatusOf, statusesOf, type ErrorCode, type GrpcStatus } from "../src/error-catalog.js";

export const BEGIN_MARKER =
  "<!-- BEGIN error codes: generated from src/error-catalog.ts by `npm run docs`; edit the catalog, not this part -->";
export const END_MARKER = "<!-- END error codes -->";

/** One section per HTTP status and gRPC status, in that order, its codes in alphabetical order; a code answered
 * with several statuses is in each. */
export function renderErrorCodes(): string {
  const groups = new Map<string, { http: number; status: GrpcStatus; codes: ErrorCode[] }>();
  for (const code of Object.keys(ERROR_CATALOG) as ErrorCode[]) {
    for (const status of statusesOf(ERROR_CATALOG[code])) {
      const http = httpStatusOf(code, status);
      const key = `${http} ${status}`;
      if (!groups.has(key)) groups.set(key, { http, status, codes: [] });
      groups.get(key)!.codes.push(code);
    }
  }
  const ordered = [...groups.values()].sort((a, b) => a.http - b.http || GRPC_CODES[a.status].code - GRPC_CODES[b.status].code);
  const lines: string[] = [];
  for (const { http, status, codes } of ordered) {
    lines.push(`### ${http} ${STATUS_CODES[http]}, gRPC ${GRPC_CODES[status].code} ${status}`, "");
    lines.push("| `turnkeyErrorCode` | what it means / what to do |", "|---|---|");
    for (const code of codes.sort()) lines.push(`| \`${code}\` | ${ERROR_CATALOG[code].meaning.replace(/\|/g, "\\|")} |`);
    lines.push("");
  }
  return lines.join("\n");
}

/** `page` with its generated part rendered anew. */
export function renderErrorsPage(page: string): string {
  const begin = page.indexOf(BEGIN_MARKER);
  const end = page.indexOf(END_MARKER);
  if (begin < 0 || end < begin) throw new Error(`docs/errors.md has lost its markers: put back ${BEGIN_MARKER} and ${END_MARKER}`);
  return `${page.slice(0, begin + BEGIN_MARKER.length)}\n\n${renderErrorCodes()}\n${page.slice(end)}`;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { readFileSync, writeFileSync } = await import("node:fs");
  const file = new URL("../docs/errors.md", import.meta.url);
  writeFileSync(file, renderErrorsPage(readFileSync(file, "utf8")));
  console.log("wrote docs/errors.md");
}
