#!/usr/bin/env node
// Derives the request schemas Sigil validates against from the hosted product's published API
// description (shared/reference/public_api.swagger.json), so that every field the official clients
// may send is known, and nothing else is accepted. Run after the swagger changes:
//   node scripts/generate-swagger-schemas.mjs [path/to/public_api.swagger.json]
// Output: src/registry/swagger-schemas.json (committed; the server never reads the swagger itself).
import { readFileSync, writeFileSync } from "node:fs";

const swaggerPath = process.argv[2] ?? new URL("../../shared/reference/public_api.swagger.json", import.meta.url);
const swagger = JSON.parse(readFileSync(swaggerPath, "utf8"));
const defs = swagger.definitions;
const refName = (ref) => ref.replace("#/definitions/", "");

// ACTIVITY_TYPE_CREATE_USERS_V3 -> { base: "createUsers", version: "V3" }
function splitType(type) {
  const m = /^ACTIVITY_TYPE_(.+?)(?:_(V\d+))?$/.exec(type);
  const base = m[1].toLowerCase().replace(/_([a-z0-9])/g, (_, c) => c.toUpperCase());
  return { base, version: m[2] ?? "" };
}

// Intent and result keys follow the type's name: ACTIVITY_TYPE_X_V2 -> xIntentV2 / xResultV2 (or xResult).
const intentKeys = new Set(Object.keys(defs.v1Intent.properties));
const resultKeys = new Set(Object.keys(defs.v1Result.properties));
const activityTypes = {};
const unmatched = [];
defs.v1ActivityType.enum.forEach((type) => {
  const { base, version } = splitType(type);
  const intentKey = [`${base}Intent${version}`, `${base}Intent`].find((k) => intentKeys.has(k));
  if (!intentKey) return unmatched.push(type);
  const resultKey = [`${base}Result${version}`, `${base}Result`].find((k) => resultKeys.has(k)) ?? null;
  activityTypes[type] = {
    intentKey,
    resultKey,
    parameters: refName(defs.v1Intent.properties[intentKey].$ref),
  };
});

const submits = {};
const queries = {};
// Paths outside /public/v1/ (the product's own tooling): kept by name only, so Sigil can say it does not serve them.
const otherPaths = [];
for (const [path, item] of Object.entries(swagger.paths)) {
  const [, kind, op] = /^\/public\/v1\/(submit|query)\/(.+)$/.exec(path) ?? [];
  if (!kind) otherPaths.push(path);
  const body = item.post?.parameters?.find((p) => p.in === "body");
  if (!body) continue;
  const request = refName(body.schema.$ref);
  if (kind === "submit") submits[op] = { request, type: defs[request].properties.type?.enum?.[0] ?? null };
  else if (kind === "query") queries[op] = { request };
}

// Convert the reachable definitions to strict JSON Schema: unknown properties are refused.
const out = {};
function convert(schema) {
  if (schema.$ref) return { $ref: `#/definitions/${refName(schema.$ref)}` };
  const s = {};
  if (schema.enum) s.enum = schema.enum;
  switch (schema.type) {
    case "string":
      s.type = "string";
      break;
    case "integer":
      s.type = "integer";
      break;
    case "number":
      s.type = "number";
      break;
    case "boolean":
      s.type = "boolean";
      break;
    case "array":
      s.type = "array";
      s.items = convert(schema.items ?? {});
      break;
    case "object":
    case undefined:
      if (schema.properties) {
        s.type = "object";
        s.properties = Object.fromEntries(Object.entries(schema.properties).map(([k, v]) => [k, convert(v)]));
        if (schema.required?.length) s.required = schema.required;
        s.additionalProperties = schema.additionalProperties === undefined ? false : true;
      } else if (!schema.enum) {
        s.type = "object";
      }
      break;
  }
  return s;
}
function visit(name) {
  if (out[name]) return;
  out[name] = true;
  out[name] = convert(defs[name]);
  const walk = (schema) => {
    if (!schema || typeof schema !== "object") return;
    if (schema.$ref) visit(refName(schema.$ref));
    for (const v of Object.values(schema)) if (typeof v === "object") walk(v);
  };
  walk(defs[name]);
}
for (const t of Object.values(activityTypes)) visit(t.parameters);
for (const q of Object.values(queries)) visit(q.request);
for (const s of Object.values(submits)) visit(s.request);

const target = new URL("../src/registry/swagger-schemas.json", import.meta.url);
writeFileSync(target, JSON.stringify({ activityTypes, submits, queries, otherPaths, definitions: out }) + "\n");
if (unmatched.length) console.log(`no intent key for: ${unmatched.join(", ")}`);
console.log(`wrote ${Object.keys(activityTypes).length} activity types, ${Object.keys(out).length} definitions`);
