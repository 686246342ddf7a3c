// Bad input, sent over raw HTTP: every refusal is a gRPC-style error body naming the problem, and a
// refused request changes nothing. Requests refused before they become an activity (stamp, body,
// schema, liveness, authentication) leave the whole database as it was; requests refused by the
// operation itself leave only their FAILED activity record in the audit log.
import crypto from "node:crypto";
import http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  apiKeyStamp,
  newKeyPair,
  signedRequest,
  startHarness,
  type ApiKeyPair,
  type Harness,
  type TestOrganization,
} from "./helpers/harness.js";
import { SoftwarePasskey } from "./helpers/passkey.js";

let h: Harness;
let org: TestOrganization;
let otherOrg: TestOrganization;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Acme");
  otherOrg = await h.organization("Globex");
});
afterAll(() => h?.close());

const CREATE_USERS = "/public/v1/submit/create_users";
const CREATE_API_KEYS = "/public/v1/submit/create_api_keys";
const CREATE_USER_TAG = "/public/v1/submit/create_user_tag";
const MINUTE = 60_000;

const noCredentials = { apiKeys: [], authenticators: [], oauthProviders: [], userTags: [] };

/** A well-formed create_users request for `org`; `overrides` replace top-level fields. */
function createUsersBody(users: unknown[], overrides: Record<string, unknown> = {}) {
  return {
    type: "ACTIVITY_TYPE_CREATE_USERS_V4",
    timestampMs: String(Date.now()),
    organizationId: org.organizationId,
    parameters: { users },
    ...overrides,
  };
}

/** A user with one P-256 API key; `apiKey` fields override the key's. */
function userWithKey(name: string, apiKey: Record<string, unknown> = {}, user: Record<string, unknown> = {}) {
  return {
    userName: name,
    apiKeys: [{ apiKeyName: `${name} key`, publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256", ...apiKey }],
    authenticators: [],
    oauthProviders: [],
    userTags: [],
    ...user,
  };
}

function createUserTagBody(name: string, organizationId = org.organizationId) {
  return {
    type: "ACTIVITY_TYPE_CREATE_USER_TAG",
    timestampMs: String(Date.now()),
    organizationId,
    parameters: { userTagName: name, userIds: [] },
  };
}

/** An X-Stamp header with arbitrary (possibly broken) contents. */
const rawStamp = (value: unknown) => Buffer.from(typeof value === "string" ? value : JSON.stringify(value)).toString("base64url");

/** The signature of `body` under `signer`, in an X-Stamp that claims `claimedPublicKey`. */
function stampClaiming(body: string, signer: ApiKeyPair, claimedPublicKey: string): string {
  const real = JSON.parse(Buffer.from(apiKeyStamp(body, signer), "base64url").toString("utf8"));
  return rawStamp({ ...real, publicKey: claimedPublicKey });
}

/** The error body every refusal carries, with the specific Turnkey error code. */
function expectError(response: { status: number; json: any }, status: number, code: number, turnkeyErrorCode: string) {
  expect(response.status, JSON.stringify(response.json)).toBe(status);
  expect(response.json).toEqual({
    code,
    message: expect.any(String),
    details: [{ "@type": "type.googleapis.com/errors.v1.TurnkeyErrorDetail", turnkeyErrorCode }],
    requestId: expect.any(String),
  });
  expect(response.json.message.length).toBeGreaterThan(10);
}

/**
 * Sends a request that must be refused before it becomes an activity: checks the error, and that
 * no row of any table changed. Returns the error message for further checks.
 */
async function expectRefusedUnchanged(
  send: () => Promise<{ status: number; json: any }>,
  status: number,
  code: number,
  turnkeyErrorCode: string,
  harness: Harness = h,
): Promise<string> {
  const before = await harness.snapshot();
  const response = await send();
  expectError(response, status, code, turnkeyErrorCode);
  expect(await harness.snapshot()).toBe(before);
  return response.json.message;
}

type Snapshot = Record<string, string[]>;
const parseSnapshot = async (): Promise<Snapshot> => JSON.parse(await h.snapshot());
/** Every table but the audit log (activities and the policy evaluation recorded with each). */
const withoutActivities = (s: Snapshot) => ({ ...s, activities: undefined, policy_evaluations: undefined });

/**
 * Sends a stamped request the operation must refuse: checks the error, that every table except the
 * audit log is unchanged, and that exactly one FAILED activity recording that same error was added.
 */
async function expectOperationFailure(
  path: string,
  body: Record<string, unknown>,
  status: number,
  code: number,
  turnkeyErrorCode: string,
): Promise<string> {
  const before = await parseSnapshot();
  const { body: text, headers } = signedRequest(body, org.key);
  const response = await h.post(path, text, headers);
  expectError(response, status, code, turnkeyErrorCode);
  const after = await parseSnapshot();
  expect(withoutActivities(after)).toEqual(withoutActivities(before));
  const added = after.activities.filter((row) => !before.activities.includes(row)).map((row) => JSON.parse(row));
  expect(added).toHaveLength(1);
  expect(added[0]).toMatchObject({
    organization_id: org.organizationId,
    type: body.type,
    status: "ACTIVITY_STATUS_FAILED",
    user_id: org.userId,
  });
  // The recorded failure is the answer but for the request's id, which the row keeps apart.
  const { requestId, ...recorded } = response.json;
  expect(JSON.parse(added[0].failure)).toEqual(recorded);
  expect(added[0].request_id).toBe(requestId);
  expect(before.activities.length + 1).toBe(after.activities.length);
  return response.json.message;
}

/** Sends `body`, stamped by the organization's root key, to `path`. */
async function sendSigned(path: string, body: unknown, key: ApiKeyPair = org.key) {
  const { body: text, headers } = signedRequest(body, key);
  return h.post(path, text, headers);
}

describe("stamps", () => {
  it("refuses a request with no stamp (401 SIGNATURE_MISSING)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("nostamp")]));
    const message = await expectRefusedUnchanged(() => h.post(CREATE_USERS, body), 401, 16, "SIGNATURE_MISSING");
    expect(message).toMatch(/X-Stamp/);
  });

  it("refuses a request carrying both X-Stamp and X-Stamp-Webauthn (401 MULTIPLE_STAMPS)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("twostamps")]));
    const headers = { "X-Stamp": apiKeyStamp(body, org.key), "X-Stamp-Webauthn": new SoftwarePasskey().stamp(body) };
    const message = await expectRefusedUnchanged(() => h.post(CREATE_USERS, body, headers), 401, 16, "MULTIPLE_STAMPS");
    expect(message).toContain("X-Stamp");
    expect(message).toContain("X-Stamp-Webauthn");
  });

  it("refuses an X-Stamp header sent twice (401 MULTIPLE_STAMPS)", async () => {
    const { body, headers } = signedRequest(createUserTagBody("twice"), org.key);
    const send = () =>
      new Promise<{ status: number; json: any }>((resolve, reject) => {
        const url = new URL(h.url + CREATE_USER_TAG);
        const request = http.request(
          {
            host: url.hostname,
            port: url.port,
            path: url.pathname,
            method: "POST",
            headers: { "content-type": "application/json", "x-stamp": [headers["X-Stamp"], headers["X-Stamp"]] },
          },
          (response) => {
            let text = "";
            response.on("data", (chunk) => (text += chunk));
            response.on("end", () => resolve({ status: response.statusCode ?? 0, json: JSON.parse(text) }));
          },
        );
        request.on("error", reject);
        request.end(body);
      });
    await expectRefusedUnchanged(send, 401, 16, "MULTIPLE_STAMPS");
  });

  it("refuses an X-Stamp that is not base64url (401 MALFORMED_STAMP)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("garbled1")]));
    const message = await expectRefusedUnchanged(
      () => h.post(CREATE_USERS, body, { "X-Stamp": "this is *not* base64url!" }),
      401,
      16,
      "MALFORMED_STAMP",
    );
    expect(message).toMatch(/not base64url/);
  });

  it("refuses an X-Stamp whose decoded contents are not JSON (401 MALFORMED_STAMP)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("garbled2")]));
    const message = await expectRefusedUnchanged(
      () => h.post(CREATE_USERS, body, { "X-Stamp": rawStamp("publicKey=02ab;scheme=p256") }),
      401,
      16,
      "MALFORMED_STAMP",
    );
    expect(message).toMatch(/not JSON/);
  });

  it("refuses an X-Stamp that is JSON but not an object (401 MALFORMED_STAMP)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("garbled3")]));
    const message = await expectRefusedUnchanged(
      () => h.post(CREATE_USERS, body, { "X-Stamp": rawStamp(["a", "b"]) }),
      401,
      16,
      "MALFORMED_STAMP",
    );
    expect(message).toMatch(/not a JSON object/);
  });

  it("refuses an X-Stamp missing its signature field (401 MALFORMED_STAMP, naming the field)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("garbled4")]));
    const stamp = rawStamp({ publicKey: org.key.publicKey, scheme: "SIGNATURE_SCHEME_TK_API_P256" });
    const message = await expectRefusedUnchanged(() => h.post(CREATE_USERS, body, { "X-Stamp": stamp }), 401, 16, "MALFORMED_STAMP");
    expect(message).toContain('"signature"');
  });

  it("refuses an X-Stamp with an unsupported signature scheme (401 MALFORMED_STAMP, naming the scheme)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("garbled5")]));
    const real = JSON.parse(Buffer.from(apiKeyStamp(body, org.key), "base64url").toString("utf8"));
    const stamp = rawStamp({ ...real, scheme: "SIGNATURE_SCHEME_TK_API_RSA" });
    const message = await expectRefusedUnchanged(() => h.post(CREATE_USERS, body, { "X-Stamp": stamp }), 401, 16, "MALFORMED_STAMP");
    expect(message).toContain("SIGNATURE_SCHEME_TK_API_RSA");
  });

  it("refuses an X-Stamp whose signature is not hex (401 MALFORMED_STAMP)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("garbled6")]));
    const stamp = rawStamp({ publicKey: org.key.publicKey, scheme: "SIGNATURE_SCHEME_TK_API_P256", signature: "not-hex-at-all" });
    const message = await expectRefusedUnchanged(() => h.post(CREATE_USERS, body, { "X-Stamp": stamp }), 401, 16, "MALFORMED_STAMP");
    expect(message).toMatch(/signature is not hex/);
  });

  it("refuses an X-Stamp-Webauthn that is not JSON (401 MALFORMED_STAMP)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("garbled7")]));
    const message = await expectRefusedUnchanged(
      () => h.post(CREATE_USERS, body, { "X-Stamp-Webauthn": "{credentialId:" }),
      401,
      16,
      "MALFORMED_STAMP",
    );
    expect(message).toMatch(/X-Stamp-Webauthn is not JSON/);
  });

  it("refuses a signature made by another key that claims the registered public key (401 SIGNATURE_INVALID)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("impostor")]));
    const stamp = stampClaiming(body, newKeyPair(), org.key.publicKey);
    const message = await expectRefusedUnchanged(() => h.post(CREATE_USERS, body, { "X-Stamp": stamp }), 401, 16, "SIGNATURE_INVALID");
    expect(message).toMatch(/does not verify/);
  });

  it("refuses a valid signature over a different body (401 SIGNATURE_INVALID)", async () => {
    const signed = JSON.stringify(createUsersBody([userWithKey("harmless")]));
    const sent = JSON.stringify(createUsersBody([userWithKey("tampered")]));
    const message = await expectRefusedUnchanged(
      () => h.post(CREATE_USERS, sent, { "X-Stamp": apiKeyStamp(signed, org.key) }),
      401,
      16,
      "SIGNATURE_INVALID",
    );
    expect(message).toMatch(/request body/);
  });

  it("refuses a valid signature from a key registered nowhere (401 PUBLIC_KEY_NOT_FOUND, naming the key)", async () => {
    const stranger = newKeyPair();
    const message = await expectRefusedUnchanged(
      () => sendSigned(CREATE_USERS, createUsersBody([userWithKey("stranger")]), stranger),
      401,
      16,
      "PUBLIC_KEY_NOT_FOUND",
    );
    expect(message).toContain(stranger.publicKey);
  });

  it("refuses a valid passkey stamp from a passkey registered nowhere (401 PUBLIC_KEY_NOT_FOUND, naming the credential)", async () => {
    const body = JSON.stringify(createUsersBody([userWithKey("stranger-passkey")]));
    const passkey = new SoftwarePasskey();
    const message = await expectRefusedUnchanged(
      () => h.post(CREATE_USERS, body, { "X-Stamp-Webauthn": passkey.stamp(body) }),
      401,
      16,
      "PUBLIC_KEY_NOT_FOUND",
    );
    expect(message).toContain(passkey.credentialIdBase64url);
  });

  it("refuses a stamp from an expired API key (401 API_KEY_EXPIRED)", async () => {
    const expiring = newKeyPair();
    const { apiKeyIds } = await h.sdk(org, org.key).createApiKeys({
      userId: org.userId,
      apiKeys: [{ apiKeyName: "short-lived", publicKey: expiring.publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds: "1" }],
    });
    await new Promise((resolve) => setTimeout(resolve, 1100));
    const message = await expectRefusedUnchanged(
      () => sendSigned(CREATE_USER_TAG, createUserTagBody("from-expired-key"), expiring),
      401,
      16,
      "API_KEY_EXPIRED",
    );
    expect(message).toContain(apiKeyIds[0]);
  });
});

describe("liveness", () => {
  it("refuses a timestampMs more than 5 minutes in the past (400 TIMESTAMP_OUT_OF_RANGE)", async () => {
    const body = createUsersBody([userWithKey("stale")], { timestampMs: String(Date.now() - 5 * MINUTE - MINUTE) });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "TIMESTAMP_OUT_OF_RANGE");
    expect(message).toMatch(/in the past/);
    expect(message).toMatch(/300s/);
  });

  it("refuses a timestampMs more than 5 minutes in the future (400 TIMESTAMP_OUT_OF_RANGE)", async () => {
    const body = createUsersBody([userWithKey("future")], { timestampMs: String(Date.now() + 5 * MINUTE + MINUTE) });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "TIMESTAMP_OUT_OF_RANGE");
    expect(message).toMatch(/in the future/);
  });

  it("refuses a non-numeric timestampMs (400 TIMESTAMP_INVALID, quoting it)", async () => {
    const body = createUsersBody([userWithKey("notime")], { timestampMs: "yesterday" });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "TIMESTAMP_INVALID");
    expect(message).toContain('"yesterday"');
  });
});

describe("request body", () => {
  it("refuses a body that is not JSON (400 REQUEST_BODY_INVALID)", async () => {
    const text = '{"type": "ACTIVITY_TYPE_CREATE_USERS_V4", "parameters": ';
    const message = await expectRefusedUnchanged(
      () => h.post(CREATE_USERS, text, { "X-Stamp": apiKeyStamp(text, org.key) }),
      400,
      3,
      "REQUEST_BODY_INVALID",
    );
    expect(message).toMatch(/not valid JSON/);
  });

  it("refuses an empty body (400 REQUEST_BODY_INVALID)", async () => {
    const message = await expectRefusedUnchanged(
      () => h.post(CREATE_USERS, "", { "X-Stamp": apiKeyStamp("", org.key) }),
      400,
      3,
      "REQUEST_BODY_INVALID",
    );
    expect(message).toMatch(/empty/);
  });

  it("refuses a JSON body that is not an object (400 REQUEST_INVALID)", async () => {
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, "[1, 2, 3]"), 400, 3, "REQUEST_INVALID");
    expect(message).toMatch(/"type"/);
  });

  it("refuses userName given as a number (400 REQUEST_INVALID, naming the field)", async () => {
    const body = createUsersBody([{ ...noCredentials, userName: 42 }]);
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('field "parameters.users[0].userName" must be string');
  });

  it("refuses users given as an object instead of an array (400 REQUEST_INVALID, naming the field)", async () => {
    const body = createUsersBody([], { parameters: { users: { userName: "alice", ...noCredentials } } });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('field "parameters.users" must be array');
  });

  it("refuses timestampMs given as a number (400 REQUEST_INVALID, naming the field)", async () => {
    const body = createUsersBody([userWithKey("numeric-ts")], { timestampMs: Date.now() });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('field "timestampMs" must be string');
  });

  it("refuses an unknown top-level field (400 REQUEST_INVALID, naming it)", async () => {
    const body = createUsersBody([userWithKey("toplevel")], { dryRun: true });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('unknown field "dryRun"');
  });

  it("refuses an unknown field nested deep in parameters (400 REQUEST_INVALID, naming its full path)", async () => {
    const body = createUsersBody([userWithKey("nested", { foo: "bar" })]);
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('unknown field "parameters.users[0].apiKeys[0].foo"');
  });

  it("refuses an unknown __proto__ field nested in parameters (400 REQUEST_INVALID, naming its path)", async () => {
    const text = JSON.stringify(createUsersBody([userWithKey("proto")])).replace(
      '"userName":"proto"',
      '"userName":"proto","__proto__":{"isAdmin":true}',
    );
    expect(text).toContain("__proto__");
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, text), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('unknown field "parameters.users[0].__proto__"');
  });

  it("refuses an unknown field in a query body (400 REQUEST_INVALID, naming it)", async () => {
    const message = await expectRefusedUnchanged(
      () => sendSigned("/public/v1/query/list_users", { organizationId: org.organizationId, includeDeleted: true }),
      400,
      3,
      "REQUEST_INVALID",
    );
    expect(message).toContain('unknown field "includeDeleted"');
  });

  it("refuses a missing required field (400 REQUEST_INVALID, naming it)", async () => {
    const { userName: _omitted, ...nameless } = userWithKey("nameless");
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, createUsersBody([nameless])), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('missing required field "parameters.users[0].userName"');
  });

  it("refuses a missing organizationId (400 REQUEST_INVALID, naming it)", async () => {
    const { organizationId: _omitted, ...body } = createUsersBody([userWithKey("orgless")]);
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('missing required field "organizationId"');
  });

  it("refuses a curveType outside the enum (400 REQUEST_INVALID, listing the allowed values)", async () => {
    const body = createUsersBody([userWithKey("badcurve", { curveType: "API_KEY_CURVE_P384" })]);
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "REQUEST_INVALID");
    expect(message).toContain('field "parameters.users[0].apiKeys[0].curveType" must be one of');
    expect(message).toContain("API_KEY_CURVE_P256");
  });
});

describe("activity types and routing", () => {
  it("refuses an unknown activity type (400 ACTIVITY_TYPE_UNKNOWN, naming it and the accepted ones)", async () => {
    const body = createUsersBody([userWithKey("coffee")], { type: "ACTIVITY_TYPE_MAKE_COFFEE" });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "ACTIVITY_TYPE_UNKNOWN");
    expect(message).toContain("ACTIVITY_TYPE_MAKE_COFFEE");
    expect(message).toContain("ACTIVITY_TYPE_CREATE_USERS_V4");
  });

  it("refuses a known activity type this server does not implement (400 ACTIVITY_TYPE_UNSUPPORTED)", async () => {
    const body = createUsersBody([userWithKey("billing")], { type: "ACTIVITY_TYPE_SET_PAYMENT_METHOD_V2" });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "ACTIVITY_TYPE_UNSUPPORTED");
    expect(message).toContain("ACTIVITY_TYPE_SET_PAYMENT_METHOD_V2");
  });

  it("refuses a valid activity type sent to the wrong path (400 ACTIVITY_TYPE_MISMATCH, naming the right one)", async () => {
    const body = {
      type: "ACTIVITY_TYPE_CREATE_API_KEYS_V2",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: {
        userId: org.userId,
        apiKeys: [{ apiKeyName: "misrouted", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" }],
      },
    };
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 400, 3, "ACTIVITY_TYPE_MISMATCH");
    expect(message).toContain("/public/v1/submit/create_api_keys");
  });

  it("answers an unknown endpoint with 404 ENDPOINT_NOT_FOUND, naming the path", async () => {
    const body = createUsersBody([userWithKey("nowhere")]);
    const message = await expectRefusedUnchanged(() => sendSigned("/public/v1/submit/make_coffee", body), 404, 5, "ENDPOINT_NOT_FOUND");
    expect(message).toContain("/public/v1/submit/make_coffee");
  });

  it("answers a GET on a submit path with 404 ENDPOINT_NOT_FOUND, naming the method", async () => {
    const message = await expectRefusedUnchanged(
      async () => {
        const response = await fetch(h.url + CREATE_USERS, { method: "GET" });
        return { status: response.status, json: await response.json() };
      },
      404,
      5,
      "ENDPOINT_NOT_FOUND",
    );
    expect(message).toContain(`GET ${CREATE_USERS}`);
  });

  it("answers an unknown query endpoint with 404 ENDPOINT_NOT_FOUND", async () => {
    const message = await expectRefusedUnchanged(
      () => sendSigned("/public/v1/query/get_coffee", { organizationId: org.organizationId }),
      404,
      5,
      "ENDPOINT_NOT_FOUND",
    );
    expect(message).toContain("/public/v1/query/get_coffee");
  });
});

describe("organizations", () => {
  it("refuses organization A's key acting on organization B (403 ORGANIZATION_MISMATCH)", async () => {
    const body = createUsersBody([userWithKey("intruder")], { organizationId: otherOrg.organizationId });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body, org.key), 403, 7, "ORGANIZATION_MISMATCH");
    expect(message).toContain(otherOrg.organizationId);
  });

  it("refuses organization A's key reading organization B (403 ORGANIZATION_MISMATCH)", async () => {
    const message = await expectRefusedUnchanged(
      () => sendSigned("/public/v1/query/list_users", { organizationId: otherOrg.organizationId }, org.key),
      403,
      7,
      "ORGANIZATION_MISMATCH",
    );
    expect(message).toContain(otherOrg.organizationId);
  });

  it("refuses an organization id that does not exist (404 ORGANIZATION_NOT_FOUND)", async () => {
    const missing = crypto.randomUUID();
    const body = createUsersBody([userWithKey("ghost")], { organizationId: missing });
    const message = await expectRefusedUnchanged(() => sendSigned(CREATE_USERS, body), 404, 5, "ORGANIZATION_NOT_FOUND");
    expect(message).toContain(missing);
  });
});

describe("body size limit", () => {
  let small: Harness;
  let smallOrg: TestOrganization;

  beforeAll(async () => {
    small = await startHarness({ SIGIL_BODY_LIMIT_BYTES: "2048" });
    smallOrg = await small.organization("Tiny");
  });
  afterAll(() => small?.close());

  it("refuses a 4 KiB body when the limit is 2048 bytes (413, code 8, REQUEST_TOO_LARGE)", async () => {
    const body = {
      type: "ACTIVITY_TYPE_CREATE_USER_TAG",
      timestampMs: String(Date.now()),
      organizationId: smallOrg.organizationId,
      parameters: { userTagName: "x".repeat(4096), userIds: [] },
    };
    const { body: text, headers } = signedRequest(body, smallOrg.key);
    expect(Buffer.byteLength(text)).toBeGreaterThan(4096);
    const message = await expectRefusedUnchanged(() => small.post(CREATE_USER_TAG, text, headers), 413, 8, "REQUEST_TOO_LARGE", small);
    expect(message).toContain("2048");
  });

  it("accepts a body under the limit on the same server", async () => {
    const { body: text, headers } = signedRequest(createUserTagBody("fits", smallOrg.organizationId), smallOrg.key);
    expect(Buffer.byteLength(text)).toBeLessThan(2048);
    const response = await small.post(CREATE_USER_TAG, text, headers);
    expect(response.status, JSON.stringify(response.json)).toBe(200);
    expect(response.json.activity).toMatchObject({ status: "ACTIVITY_STATUS_COMPLETED", type: "ACTIVITY_TYPE_CREATE_USER_TAG" });
  });
});

describe("operation-level refusals (only the audit log changes)", () => {
  it("creates no user at all when the second user names a nonexistent user tag (404 USER_TAG_NOT_FOUND, atomic)", async () => {
    const missingTag = crypto.randomUUID();
    const body = createUsersBody([userWithKey("first-of-two"), userWithKey("second-of-two", {}, { userTags: [missingTag] })]);
    const message = await expectOperationFailure(CREATE_USERS, body, 404, 5, "USER_TAG_NOT_FOUND");
    expect(message).toContain(missingTag);
    const users = JSON.parse(await h.snapshot()).users.map((row: string) => JSON.parse(row).name);
    expect(users).not.toContain("first-of-two");
  });

  it("refuses an API public key already registered in the organization (409 API_KEY_ALREADY_EXISTS)", async () => {
    const body = {
      type: "ACTIVITY_TYPE_CREATE_API_KEYS_V2",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: {
        userId: org.userId,
        apiKeys: [{ apiKeyName: "copy of root key", publicKey: org.key.publicKey, curveType: "API_KEY_CURVE_P256" }],
      },
    };
    const message = await expectOperationFailure(CREATE_API_KEYS, body, 409, 6, "API_KEY_ALREADY_EXISTS");
    expect(message).toContain(org.key.publicKey);
  });

  it("refuses the same new public key twice in one request (409 API_KEY_ALREADY_EXISTS)", async () => {
    const publicKey = newKeyPair().publicKey;
    const body = createUsersBody([userWithKey("twin-a", { publicKey }), userWithKey("twin-b", { publicKey })]);
    const message = await expectOperationFailure(CREATE_USERS, body, 409, 6, "API_KEY_ALREADY_EXISTS");
    expect(message).toContain(publicKey);
  });

  it("refuses a P-256 public key that is not on the curve (400 INVALID_PUBLIC_KEY)", async () => {
    // x = 1 has no y on P-256 (1 - 3 + b is not a square mod p).
    const offCurve = "02" + "00".repeat(31) + "01";
    const message = await expectOperationFailure(
      CREATE_USERS,
      createUsersBody([userWithKey("offcurve", { publicKey: offCurve })]),
      400,
      3,
      "INVALID_PUBLIC_KEY",
    );
    expect(message).toContain("users[0].apiKeys[0].publicKey");
    expect(message).toMatch(/not a valid point on P256/);
  });

  it("refuses an invalid email (400 REQUEST_INVALID, naming the field and value)", async () => {
    const body = createUsersBody([userWithKey("mailer", {}, { userEmail: "not-an-email" })]);
    const message = await expectOperationFailure(CREATE_USERS, body, 400, 3, "REQUEST_INVALID");
    expect(message).toContain("users[0].userEmail");
    expect(message).toContain("not-an-email");
  });

  it("refuses an invalid phone number (400 REQUEST_INVALID, naming the field and the format)", async () => {
    const body = createUsersBody([userWithKey("caller", {}, { userPhoneNumber: "555-1234" })]);
    const message = await expectOperationFailure(CREATE_USERS, body, 400, 3, "REQUEST_INVALID");
    expect(message).toContain("users[0].userPhoneNumber");
    expect(message).toContain("E.164");
  });

  it("refuses an OAuth identity given as empty oidcClaims (400 INVALID_OIDC_TOKEN)", async () => {
    const body = createUsersBody([
      userWithKey("oidc", {}, { oauthProviders: [{ providerName: "p", oidcClaims: { iss: "", sub: "", aud: "" } }] }),
    ]);
    const message = await expectOperationFailure(CREATE_USERS, body, 400, 3, "INVALID_OIDC_TOKEN");
    expect(message).toContain("users[0].oauthProviders[0].oidcClaims");
  });

  it('refuses expirationSeconds "abc" (400 REQUEST_INVALID, naming the field)', async () => {
    const body = createUsersBody([userWithKey("abc-expiry", { expirationSeconds: "abc" })]);
    const message = await expectOperationFailure(CREATE_USERS, body, 400, 3, "REQUEST_INVALID");
    expect(message).toContain("users[0].apiKeys[0].expirationSeconds");
    expect(message).toContain('"abc"');
  });
});
