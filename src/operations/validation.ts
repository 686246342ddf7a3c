// Request validation against the swagger-derived JSON Schemas. Unknown fields are refused by name,
// never silently dropped: a typo in a security setting must not pass as "not set".
import { Ajv, type ErrorObject, type ValidateFunction } from "ajv";
import { invalidArgument } from "../errors.js";
import { keysOf, swagger } from "./registry.js";

const ajv = new Ajv({ allErrors: true, strict: false, validateFormats: false });
ajv.addSchema({ $id: "swagger", definitions: swagger.definitions });

const cache = new Map<string, ValidateFunction>();

function compiled(id: string, schema: () => object): ValidateFunction {
  let validate = cache.get(id);
  if (!validate) {
    validate = ajv.compile(schema());
    cache.set(id, validate);
  }
  return validate;
}

const ref = (definition: string) => ({ $ref: `swagger#/definitions/${definition}` });

/** "/parameters/users/0/apiKeys" -> "parameters.users[0].apiKeys" */
function fieldPath(instancePath: string, child?: string): string {
  const parts = instancePath.split("/").slice(1).map((p) => p.replace(/~1/g, "/").replace(/~0/g, "~"));
  if (child !== undefined) parts.push(child);
  return parts.reduce((acc, part) => (/^\d+$/.test(part) ? `${acc}[${part}]` : acc ? `${acc}.${part}` : part), "");
}

function describe(error: ErrorObject): string {
  switch (error.keyword) {
    case "additionalProperties":
      return `unknown field "${fieldPath(error.instancePath, String(error.params.additionalProperty))}"`;
    case "required":
      return `missing required field "${fieldPath(error.instancePath, String(error.params.missingProperty))}"`;
    case "type":
      return `field "${fieldPath(error.instancePath) || "(body)"}" must be ${error.params.type}`;
    case "enum": {
      const allowed = error.params.allowedValues as unknown[];
      const shown = allowed.slice(0, 8).join(", ") + (allowed.length > 8 ? `, … (${allowed.length} values)` : "");
      return `field "${fieldPath(error.instancePath)}" must be one of: ${shown}`;
    }
    default:
      return `field "${fieldPath(error.instancePath) || "(body)"}" ${error.message ?? "is invalid"}`;
  }
}

function check(validate: ValidateFunction, value: unknown): void {
  if (validate(value)) return;
  const messages = [...new Set((validate.errors ?? []).map(describe))];
  const shown = messages.slice(0, 5).join("; ") + (messages.length > 5 ? `; and ${messages.length - 5} more` : "");
  throw invalidArgument(`invalid request: ${shown}`);
}

/** The envelope of a submit request for one activity type version. */
export function validateActivityRequest(type: string, body: unknown): void {
  check(
    compiled(`activity:${type}`, () => ({
      type: "object",
      properties: {
        type: { const: type },
        timestampMs: { type: "string" },
        organizationId: { type: "string" },
        parameters: ref(keysOf(type).parametersDefinition),
        generateAppProofs: { type: "boolean" },
      },
      required: ["type", "timestampMs", "organizationId", "parameters"],
      additionalProperties: false,
    })),
    body,
  );
}

export function validateQueryRequest(operation: string, body: unknown): void {
  check(compiled(`query:${operation}`, () => ref(swagger.queries[operation].request)), body);
}
