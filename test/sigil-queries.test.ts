// Queries of Sigil's own (defineSigilQuery): served under /sigil/v1/query/, never at a path the product's
// API has or may add; each declares the JSON Schema of its body. The queries themselves are tested with
// their features (the transparency log, policy dry-runs, the webhook delivery log); this file holds the declaration's rules.
import { describe, expect, it } from "vitest";
import { defineSigilQuery, queryPath, OWN_QUERY_PREFIX, type OwnQuerySchema } from "../src/registry/registry.js";
import { queryOperations } from "../src/operations/catalog.js";

const schema: OwnQuerySchema = {
  type: "object",
  required: ["organizationId"],
  properties: { organizationId: { type: "string" } },
  additionalProperties: false,
};
const run = async () => ({});

describe("defineSigilQuery", () => {
  it("serves the query under Sigil's own prefix, the API's queries where the API has them", () => {
    const own = defineSigilQuery({ name: "get_example_thing", summary: "An example.", schema, run });
    expect(queryPath(own)).toBe(`${OWN_QUERY_PREFIX}get_example_thing`);
    expect(OWN_QUERY_PREFIX).toBe("/sigil/v1/query/");
    expect(queryPath(queryOperations.find((op) => op.name === "get_user")!)).toBe("/public/v1/query/get_user");
  });

  it("refuses a name the API description has (it would shadow the product's query) and a name that is not snake_case", () => {
    expect(() => defineSigilQuery({ name: "get_user", summary: "", schema, run })).toThrow(
      "get_user is a query of the API description: declare it with defineQuery",
    );
    for (const name of ["GetThing", "get-thing", "../get_user", "", "1thing"])
      expect(() => defineSigilQuery({ name, summary: "", schema, run }), name).toThrow("a query name is snake_case");
  });

  it("every query of Sigil's own in the catalog is served at a path no API query has", () => {
    const apiPaths = new Set(queryOperations.filter((op) => !op.own).map(queryPath));
    for (const op of queryOperations.filter((op) => op.own)) {
      expect(apiPaths.has(queryPath(op))).toBe(false);
      expect(op.own!.schema.required).toContain("organizationId");
      expect(op.own!.schema.additionalProperties).toBe(false);
    }
  });
});
