// An OpenAPI 3.1 description of exactly the operations this server registers, derived from the
// registry and the swagger-derived request schemas (served at GET /openapi.json).
import { activityOperations, queryOperations } from "../operations/catalog.js";
import { activityEnvelopeSchema, queryPath, swagger } from "../registry/registry.js";
import { ACCEPT_PATH, invitationAcceptanceSchema } from "../operations/organizations/invitations.js";

const errorBody = {
  type: "object",
  required: ["code", "message", "details"],
  properties: {
    code: { type: "integer", description: "gRPC status code" },
    message: { type: "string" },
    details: {
      type: "array",
      items: { type: "object", properties: { "@type": { type: "string" }, turnkeyErrorCode: { type: "string" } } },
    },
  },
};

const errors = {
  default: { description: "Error (gRPC-style body)", content: { "application/json": { schema: { $ref: "#/components/schemas/Error" } } } },
};

/** swagger "#/definitions/X" references become OpenAPI "#/components/schemas/X". */
function rewriteRefs(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(rewriteRefs);
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.entries(value).map(([k, v]) => [
        k,
        k === "$ref" && typeof v === "string" ? v.replace("#/definitions/", "#/components/schemas/") : rewriteRefs(v),
      ]),
    );
  }
  return value;
}

export function buildOpenApiDocument(version: string) {
  const paths: Record<string, unknown> = {};
  for (const op of activityOperations) {
    const envelopes = op.types.map((type) =>
      activityEnvelopeSchema(type, (definition) => ({ $ref: `#/components/schemas/${definition}` })),
    );
    paths[`/public/v1/submit/${op.name}`] = {
      post: {
        operationId: op.name,
        summary: op.summary,
        tags: ["activities"],
        ...(op.kind === "activity" ? { "x-policy-resource": op.resource, "x-policy-action": op.action } : { "x-vote": op.selection }),
        requestBody: { required: true, content: { "application/json": { schema: { oneOf: envelopes } } } },
        responses: {
          "200": {
            description: "The activity",
            content: { "application/json": { schema: { $ref: "#/components/schemas/ActivityResponse" } } },
          },
          ...errors,
        },
      },
    };
  }
  for (const op of queryOperations) {
    paths[queryPath(op)] = {
      post: {
        operationId: op.name,
        summary: op.summary,
        tags: [op.own ? "sigil queries" : "queries"],
        requestBody: {
          required: true,
          content: {
            "application/json": { schema: op.own ? op.own.schema : { $ref: `#/components/schemas/${swagger.queries[op.name].request}` } },
          },
        },
        responses: { "200": { description: "The result" }, ...errors },
      },
    };
  }
  paths[ACCEPT_PATH] = {
    post: {
      operationId: "accept_invitation",
      summary:
        "Accept an invitation (the link of its email): the invited user is created holding apiKey, which must stamp the request (X-Stamp).",
      tags: ["invitations"],
      requestBody: { required: true, content: { "application/json": { schema: invitationAcceptanceSchema } } },
      responses: {
        "200": {
          description: "The user the invitation created",
          content: {
            "application/json": {
              schema: {
                type: "object",
                required: ["organizationId", "userId", "invitationId"],
                properties: { organizationId: { type: "string" }, userId: { type: "string" }, invitationId: { type: "string" } },
              },
            },
          },
        },
        ...errors,
      },
      security: [{ apiKeyStamp: [] }],
    },
  };
  return {
    openapi: "3.1.0",
    info: {
      title: "Sigil",
      version,
      description: "Activity-based organization API. Every request is authenticated by an X-Stamp or X-Stamp-Webauthn header.",
    },
    paths,
    components: {
      schemas: {
        ...(rewriteRefs(swagger.definitions) as Record<string, unknown>),
        Error: errorBody,
        ActivityResponse: { type: "object", required: ["activity"], properties: { activity: { type: "object" } } },
      },
      securitySchemes: {
        apiKeyStamp: { type: "apiKey", in: "header", name: "X-Stamp" },
        passkeyStamp: { type: "apiKey", in: "header", name: "X-Stamp-Webauthn" },
      },
    },
    security: [{ apiKeyStamp: [] }, { passkeyStamp: [] }],
  };
}
