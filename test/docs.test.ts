// Docs that cannot drift: the operations table, the error codes, the configuration page and the metrics' series in
// docs/ are derived from the registry, the error catalog, the settings catalog and the metrics' declarations (a stale copy fails here), and every relative link resolves.
import { existsSync, readFileSync, readdirSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { renderOperationsTable } from "../scripts/operations-table.js";
import { renderErrorsPage } from "../scripts/errors-table.js";
import { renderConfigurationPage } from "../scripts/configuration-table.js";
import { renderMetricsPage } from "../scripts/metrics-table.js";

describe("docs/operations.md", () => {
  it("matches the operation registry (run `npm run docs` after changing an operation)", () => {
    expect(readFileSync("docs/operations.md", "utf8")).toBe(renderOperationsTable());
  });
});

describe("docs/errors.md", () => {
  it("lists every code of the error catalog as the catalog declares it (run `npm run docs` after changing the catalog)", () => {
    const page = readFileSync("docs/errors.md", "utf8");
    expect(page).toBe(renderErrorsPage(page));
  });
});

describe("docs/configuration.md", () => {
  it("matches the settings catalog in src/config.ts (run `npm run docs` after changing a setting)", () => {
    expect(readFileSync("docs/configuration.md", "utf8")).toBe(renderConfigurationPage());
  });
});

describe("docs/metrics.md", () => {
  it("lists every series /metrics serves as src/services/metrics.ts declares it (run `npm run docs` after changing one)", () => {
    const page = readFileSync("docs/metrics.md", "utf8");
    expect(page).toBe(renderMetricsPage(page));
  });
});

/** A Markdown page's heading anchors, by GitHub's rules. */
const anchorsOf = (file: string) =>
  new Set(
    readFileSync(file, "utf8")
      .split("\n")
      .filter((line) => /^#{1,6} /.test(line))
      .map((line) =>
        line
          .replace(/^#+ /, "")
          .trim()
          .toLowerCase()
          .replace(/[^\p{L}\p{N} _-]/gu, "")
          .replace(/ /g, "-"),
      ),
  );

// Every relative link in README.md and docs/ points at a file that exists and, when it names a
// heading (#anchor) of a Markdown page, at a heading that exists (GitHub's anchor rules).
describe("links in README.md and docs/", () => {
  const pages = [
    "README.md",
    ...readdirSync("docs")
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ];

  it.each(pages)("%s links only to files and headings that exist", (page) => {
    const text = readFileSync(page, "utf8").replace(/```[\s\S]*?```/g, "");
    const broken: string[] = [];
    for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target!)) continue; // http:, https:, mailto:
      const [file, anchor] = target!.split("#") as [string, string | undefined];
      const resolved = file === "" ? page : path.join(path.dirname(page), file);
      if (!existsSync(resolved)) broken.push(`${target} (no file ${resolved})`);
      else if (anchor && resolved.endsWith(".md") && !anchorsOf(resolved).has(anchor))
        broken.push(`${target} (no heading #${anchor} in ${resolved})`);
    }
    expect(broken).toEqual([]);
  });
});

// Code and its comments cite a page's section by its anchor (`docs/benchmarks.md#statements-built-once`):
// every such anchor names a heading of that page, by the same anchor rules as the links above.
describe("docs/… sections cited in src/, bench/, test/ and scripts/", () => {
  const sources = ["src", "bench", "test", "scripts"].flatMap((dir) =>
    (readdirSync(dir, { recursive: true }) as string[]).filter((f) => /\.(ts|tsx|js|mjs)$/.test(f)).map((f) => path.join(dir, f)),
  );
  it("name headings that exist", () => {
    const broken: string[] = [];
    for (const source of sources)
      for (const [, page, anchor] of readFileSync(source, "utf8").matchAll(/\bdocs\/([a-z0-9-]+\.md)#([a-z0-9_-]+)/g)) {
        const file = `docs/${page}`;
        if (!existsSync(file)) broken.push(`${source}: no file ${file}`);
        else if (!anchorsOf(file).has(anchor!)) broken.push(`${source}: no heading #${anchor} in ${file}`);
      }
    expect(sources.length).toBeGreaterThan(0);
    expect(broken).toEqual([]);
  });
});

// Paths of this repository named in README.md and docs/ (`src/…`, `test/…`, `scripts/…`, `bench/…`)
// exist: a file moved or renamed without its docs fails here. docs/sdk-examples.md names files of the
// product's example programs, not of this repository.
describe("paths named in README.md and docs/", () => {
  const pages = [
    "README.md",
    ...readdirSync("docs")
      .filter((f) => f.endsWith(".md") && f !== "sdk-examples.md")
      .map((f) => `docs/${f}`),
  ];
  it.each(pages)("%s names only paths that exist", (page) => {
    const named = [...readFileSync(page, "utf8").matchAll(/`((?:src|test|scripts|bench)\/[A-Za-z0-9_./-]+)`/g)].map((m) => m[1]!);
    expect(named.filter((p) => !existsSync(p.replace(/\/$/, "")))).toEqual([]);
  });
});
