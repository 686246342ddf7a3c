// Renders src/api/types.ts: TypeScript types for every definition of the product's API description,
// and, keyed by the names the code uses, the parameters and result of every activity type and the
// request and response of every query and submit endpoint. Generated, never edited.
//
// Two stages, so that the check runs anywhere: `npm run generate:types` reads the product's
// swagger (../shared/reference/public_api.swagger.json, outside this repository), keeps only its
// facts — schema keywords and which definition each endpoint takes and answers, no prose — in
// src/api/api-description.json, and renders the types from that. test/generated.test.ts renders the
// types again from the committed description and fails when src/api/types.ts is stale.
//
// json-schema-to-typescript does the schema → type work (it is the generator most TypeScript
// projects use for JSON Schema, and the swagger's definitions are JSON Schema draft 4). Swagger 2.0
// is not OpenAPI 3, so openapi-typescript (3.x only since v7) does not apply.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { compile, type JSONSchema } from "json-schema-to-typescript";

const SWAGGER = fileURLToPath(new URL("../../shared/reference/public_api.swagger.json", import.meta.url));
export const API_DESCRIPTION_FILE = fileURLToPath(new URL("../src/api/api-description.json", import.meta.url));
export const API_TYPES_FILE = fileURLToPath(new URL("../src/api/types.ts", import.meta.url));

interface Swagger {
  paths: Record<
    string,
    { post?: { parameters?: Array<{ in: string; schema?: { $ref?: string } }>; responses: Record<string, { schema?: { $ref?: string } }> } }
  >;
  definitions: Record<string, JSONSchema>;
}

const refName = (ref: string | undefined) => ref?.replace("#/definitions/", "");

/** json-schema-to-typescript's name for a definition: v1CreateWalletIntent → V1CreateWalletIntent. */
const typeName = (definition: string) => definition.charAt(0).toUpperCase() + definition.slice(1);

/** ACTIVITY_TYPE_CREATE_USERS_V3 → { base: "createUsers", version: "V3" } (the swagger's key naming). */
function splitType(type: string) {
  const match = /^ACTIVITY_TYPE_(.+?)(?:_(V\d+))?$/.exec(type)!;
  return { base: match[1]!.toLowerCase().replace(/_([a-z0-9])/g, (_, c: string) => c.toUpperCase()), version: match[2] ?? "" };
}

const quote = (text: string) => JSON.stringify(text);

/** The schema keywords types are made of; descriptions, titles and examples are the product's prose. */
const SCHEMA_KEYWORDS = new Set([
  "type",
  "format",
  "enum",
  "items",
  "properties",
  "required",
  "$ref",
  "additionalProperties",
  "allOf",
  "oneOf",
  "anyOf",
]);

function schemaFacts(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(schemaFacts);
  if (!schema || typeof schema !== "object") return schema;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(schema)) {
    if (!SCHEMA_KEYWORDS.has(key)) continue;
    if (key === "properties") {
      out[key] = Object.fromEntries(
        Object.entries(value as Record<string, unknown>).map(([name, property]) => [name, schemaFacts(property)]),
      );
    } else if (key === "enum" || key === "required" || key === "$ref" || key === "type" || key === "format") out[key] = value;
    else out[key] = schemaFacts(value);
  }
  return out;
}

/** The facts of the product's swagger the types are made from: definitions and each endpoint's request and response. */
export function describeApi(swaggerPath = SWAGGER): Swagger {
  const swagger = JSON.parse(readFileSync(swaggerPath, "utf8")) as Swagger;
  const definitions = Object.fromEntries(
    Object.entries(swagger.definitions).map(([name, schema]) => [name, schemaFacts(schema) as JSONSchema]),
  );
  const paths: Swagger["paths"] = {};
  for (const [path, item] of Object.entries(swagger.paths)) {
    const body = item.post?.parameters?.find((p) => p.in === "body");
    const response = item.post?.responses["200"]?.schema;
    if (!item.post) continue;
    paths[path] = {
      post: {
        parameters: body ? [{ in: "body", schema: { $ref: body.schema?.$ref } }] : [],
        responses: { "200": { schema: { $ref: response?.$ref } } },
      },
    };
  }
  return { paths, definitions };
}

export async function renderApiTypes(description: Swagger = JSON.parse(readFileSync(API_DESCRIPTION_FILE, "utf8"))): Promise<string> {
  const swagger = description;
  const defs = swagger.definitions;
  const definitionTypes = await compile(
    { title: "ApiDefinitions", type: "object", additionalProperties: false, properties: {}, definitions: defs } as JSONSchema,
    "ApiDefinitions",
    { bannerComment: "", unreachableDefinitions: true, additionalProperties: false, strictIndexSignatures: true, format: true },
  );

  // Activity types: parameters (the intent's definition) and result, by the swagger's key naming.
  const intents = defs.v1Intent!.properties as Record<string, { $ref?: string }>;
  const results = defs.v1Result!.properties as Record<string, { $ref?: string }>;
  const activityRows: string[] = [];
  const activityTypes = defs.v1ActivityType!.enum! as string[];
  for (const type of activityTypes) {
    const { base, version } = splitType(type);
    const intentKey = [`${base}Intent${version}`, `${base}Intent`].find((k) => intents[k]);
    if (!intentKey) continue; // a type with no intent (ACTIVITY_TYPE_UNKNOWN…)
    const resultKey = [`${base}Result${version}`, `${base}Result`].find((k) => results[k]);
    const result = resultKey ? typeName(refName(results[resultKey]!.$ref)!) : "Record<string, never>";
    activityRows.push(`  ${type}: { parameters: ${typeName(refName(intents[intentKey]!.$ref)!)}; result: ${result} };`);
  }

  // Submit endpoints: every version of the activity type the request names (X, X_V2, …), oldest first,
  // among the types that have parameters — as src/registry's activityTypesFor derives them.
  const withParameters = activityTypes.filter((type) => activityRows.some((row) => row.startsWith(`  ${type}: `)));
  const versionOf = (type: string) => Number(/_V(\d+)$/.exec(type)?.[1] ?? 1);
  const submitTypeRows: string[] = [];
  // Queries and submits: the request body and the 200 response of each path.
  const queryRows: string[] = [];
  const submitRows: string[] = [];
  for (const [path, item] of Object.entries(swagger.paths).sort(([a], [b]) => a.localeCompare(b))) {
    const match = /^\/public\/v1\/(query|submit)\/([a-z0-9_]+)$/.exec(path);
    if (!match || !item.post) continue;
    const request = refName(item.post.parameters?.find((p) => p.in === "body")?.schema?.$ref);
    const response = refName(item.post.responses["200"]?.schema?.$ref);
    if (!request || !response) continue;
    (match[1] === "query" ? queryRows : submitRows).push(
      `  ${match[2]}: { request: ${typeName(request)}; response: ${typeName(response)} };`,
    );
    const latest = (defs[request]?.properties?.type as { enum?: string[] } | undefined)?.enum?.[0];
    if (match[1] === "submit" && latest) {
      const base = latest.replace(/_V\d+$/, "");
      const versions = withParameters
        .filter((type) => type === base || new RegExp(`^${base}_V\\d+$`).test(type))
        .sort((a, b) => versionOf(a) - versionOf(b));
      submitTypeRows.push(`  ${match[2]}: [${versions.map(quote).join(", ")}],`);
    }
  }

  return [
    "// Generated by scripts/api-types.ts from the product's API description: do not edit.",
    "// `npm run generate:types` rewrites it; test/generated.test.ts fails when it is stale.",
    "/* eslint-disable */",
    "",
    "/** Every activity type of the API, each a constant named as itself, so every use is found by its full name. */",
    "export const ActivityTypes = {",
    ...activityTypes.map((type) => `  ${type}: ${quote(type)},`),
    "} as const;",
    "",
    "export type ActivityType = keyof typeof ActivityTypes;",
    "",
    "/** The parameters (intent) and result of each activity type that has them. */",
    "export interface ActivityTypeShapes {",
    ...activityRows,
    "}",
    "",
    "/** The request body and 200 response of every query endpoint (POST /public/v1/query/<name>). */",
    "export interface QueryShapes {",
    ...queryRows,
    "}",
    "",
    "/** The activity types each submit endpoint accepts: every version of the type its request names, oldest first. */",
    "export const SubmitActivityTypes = {",
    ...submitTypeRows,
    "} as const;",
    "",
    "/** The request body and 200 response of every submit endpoint (POST /public/v1/submit/<name>). */",
    "export interface SubmitShapes {",
    ...submitRows,
    "}",
    "",
    definitionTypes.trimEnd(),
    "",
  ].join("\n");
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { writeFileSync, mkdirSync } = await import("node:fs");
  mkdirSync(new URL("../src/api/", import.meta.url), { recursive: true });
  const description = describeApi(process.argv[2] ?? SWAGGER);
  writeFileSync(API_DESCRIPTION_FILE, `${JSON.stringify(description, null, 1)}\n`);
  writeFileSync(API_TYPES_FILE, await renderApiTypes(description));
  console.log("wrote src/api/api-description.json and src/api/types.ts");
}
