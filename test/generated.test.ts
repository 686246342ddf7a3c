// Generated sources cannot drift from what generates them: the API types are rendered again from
// the API description and must equal the committed file.
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { API_TYPES_FILE, renderApiTypes } from "../scripts/api-types.js";
import { ActivityTypes, SubmitActivityTypes } from "../src/api/types.js";
import { activityTypesFor, swagger } from "../src/registry/registry.js";
import { activityOperations, queryOperations } from "../src/operations/catalog.js";

describe("src/api/types.ts", () => {
  it("is what scripts/api-types.ts renders from the API description (run `npm run generate:types` after it changes)", async () => {
    expect(readFileSync(API_TYPES_FILE, "utf8")).toBe(await renderApiTypes());
  });

  it("names every activity type Sigil serves as a constant equal to its name", () => {
    const served = activityOperations.flatMap((operation) => operation.types);
    expect(served.length).toBeGreaterThan(50);
    for (const type of served) expect(ActivityTypes[type as keyof typeof ActivityTypes], type).toBe(type);
  });

  it("has a request and response type for every query Sigil serves", () => {
    const text = readFileSync(API_TYPES_FILE, "utf8");
    const queries = text.slice(text.indexOf("export interface QueryShapes {"), text.indexOf("export interface SubmitShapes {"));
    // Sigil's own queries declare their bodies' schemas themselves: the API description has no type for them.
    for (const operation of queryOperations.filter((op) => !op.own))
      expect(queries, operation.name).toContain(`  ${operation.name}: { request: `);
  });

  it("lists for every submit endpoint the activity type versions the registry accepts for it (handlers are typed by that list)", () => {
    const submits = Object.keys(swagger.submits).filter((name) => swagger.submits[name]!.type);
    expect(submits.length).toBeGreaterThan(50);
    for (const name of submits)
      expect([...(SubmitActivityTypes[name as keyof typeof SubmitActivityTypes] ?? [])], name).toEqual(activityTypesFor(name));
    expect(Object.keys(SubmitActivityTypes).sort()).toEqual(submits.sort());
  });
});
