// GET /openapi.json publishes the submit envelope the server enforces (one declaration,
// activityEnvelopeSchema in src/registry/registry.ts): a body the published schema refuses is refused
// by the server (400 REQUEST_INVALID, nothing stored), and one it accepts is served.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Ajv } from "ajv";
import { signedRequest, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";

let h: Harness;
let org: TestOrganization;
let document: any;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Described");
  document = await (await fetch(`${h.url}/openapi.json`)).json();
});
afterAll(() => h?.close());

const SUBMIT = "/public/v1/submit/create_user_tag";

/** The published schema of a path's request body, compiled against the document's components. */
function publishedSchema(path: string) {
  const ajv = new Ajv({ strict: false, validateFormats: false });
  ajv.addSchema(document, "openapi");
  const escapePointer = (segment: string) => segment.replace(/~/g, "~0").replace(/\//g, "~1");
  const pointer = ["paths", path, "post", "requestBody", "content", "application/json", "schema"].map(escapePointer).join("/");
  return ajv.compile({ $ref: `openapi#/${pointer}` });
}

describe("the published submit envelope", () => {
  it("lists every version of an activity type, each with its own parameters", () => {
    const envelopes = document.paths[SUBMIT].post.requestBody.content["application/json"].schema.oneOf;
    expect(envelopes.map((e: any) => e.properties.type.const)).toEqual(["ACTIVITY_TYPE_CREATE_USER_TAG"]);
    const users = document.paths["/public/v1/submit/create_users"].post.requestBody.content["application/json"].schema.oneOf;
    expect(users.map((e: any) => e.properties.type.const)).toEqual(
      ["", "_V2", "_V3", "_V4"].map((version) => `ACTIVITY_TYPE_CREATE_USERS${version}`),
    );
    for (const envelope of users) {
      expect(envelope).toMatchObject({ required: ["type", "timestampMs", "organizationId", "parameters"], additionalProperties: false });
      expect(document.components.schemas[envelope.properties.parameters.$ref.replace("#/components/schemas/", "")]).toBeDefined();
    }
  });

  it("is the one the server enforces", async () => {
    const valid = publishedSchema(SUBMIT);
    const parameters = { userTagName: `tag ${Date.now()}`, userIds: [] };
    const envelope = () => ({
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters,
    });
    const { timestampMs: _, ...withoutTimestamp } = envelope();
    // [what, body, the server's code for it] (the type is checked before the schema, with a code of its own).
    const bodies: Array<[string, Record<string, unknown>, string?]> = [
      ["a well-formed request", envelope()],
      ["an unknown field beside the envelope's", { ...envelope(), dryRun: true }, "REQUEST_INVALID"],
      ["no timestampMs", withoutTimestamp, "REQUEST_INVALID"],
      ["another activity type", { ...envelope(), type: "ACTIVITY_TYPE_DELETE_USER_TAGS" }, "ACTIVITY_TYPE_MISMATCH"],
      ["generateAppProofs that is not a boolean", { ...envelope(), generateAppProofs: "yes" }, "REQUEST_INVALID"],
      ["parameters with an unknown field", { ...envelope(), parameters: { ...envelope().parameters, color: "red" } }, "REQUEST_INVALID"],
    ];
    for (const [what, body, code] of bodies) {
      const before = await h.snapshot();
      const { body: text, headers } = signedRequest(body, org.key);
      const response = await h.post(SUBMIT, text, headers);
      expect(valid(body), what).toBe(code === undefined);
      if (code === undefined) {
        expect(response.status, what).toBe(200);
        continue;
      }
      expect(response.status, what).toBe(400);
      expect(response.json.details[0].turnkeyErrorCode, what).toBe(code);
      if (code === "REQUEST_INVALID") expect(response.json.message, what).toMatch(/^invalid request: /);
      expect(await h.snapshot(), what).toBe(before);
    }
  });
});
