// The operations table in docs/ is derived from the registry; a stale copy fails here.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { renderOperationsTable } from "../scripts/operations-table.js";

describe("docs/operations.md", () => {
  it("matches the operation registry (run `npm run docs` after changing an operation)", () => {
    expect(readFileSync("docs/operations.md", "utf8")).toBe(renderOperationsTable());
  });
});
