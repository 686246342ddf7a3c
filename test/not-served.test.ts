// The product's hosted-only services: every path of the declared list answers 501 OPERATION_NOT_SERVED
// naming the service, before any stamp or body is looked at, and changes nothing. Operations of the
// product's API that Sigil will serve later, and paths the API does not have, stay 404.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeyRequestError } from "@turnkey/http";
import { signedRequest, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { inProductApi, notServedOperations } from "../src/operations/not-served.js";
import { activityOperations, queryOperations } from "../src/operations/catalog.js";
import { swagger } from "../src/registry/registry.js";

let h: Harness;
let org: TestOrganization;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Acme");
});
afterAll(() => h?.close());

const ERROR_DETAIL = "type.googleapis.com/errors.v1.TurnkeyErrorDetail";

function expectNotServed(response: { status: number; json: any }, path: string, service: string) {
  expect(response.status, path).toBe(501);
  expect(response.json).toEqual({
    code: 12,
    message: expect.any(String),
    details: [{ "@type": ERROR_DETAIL, turnkeyErrorCode: "OPERATION_NOT_SERVED" }],
    requestId: expect.any(String),
  });
  expect(response.json.message).toContain(`${path} is a hosted-only service of the product (${service})`);
  expect(response.json.message).toContain("a self-hosted Sigil does not provide it");
}

function expectEndpointNotFound(response: { status: number; json: any }, path: string) {
  expect(response.status, path).toBe(404);
  const details = [{ "@type": ERROR_DETAIL, turnkeyErrorCode: "ENDPOINT_NOT_FOUND" }];
  expect(response.json).toEqual({ code: 5, message: `no endpoint POST ${path}`, details, requestId: expect.any(String) });
}

const served = new Set([
  ...activityOperations.map((op) => `/public/v1/submit/${op.name}`),
  ...queryOperations.filter((op) => !op.own).map((op) => `/public/v1/query/${op.name}`),
]);
const notServed = new Set(notServedOperations.map((op) => op.path));
const productPaths = [
  ...Object.keys(swagger.submits).map((name) => `/public/v1/submit/${name}`),
  ...Object.keys(swagger.queries).map((name) => `/public/v1/query/${name}`),
  ...swagger.otherPaths,
];

describe("the declared list", () => {
  it("names each path once, every one a path of the product's API that Sigil does not also serve", () => {
    expect(notServed.size).toBe(notServedOperations.length);
    for (const op of notServedOperations) {
      expect(inProductApi(op.path), op.path).toBe(true);
      expect(served.has(op.path), op.path).toBe(false);
      expect(op.service.length).toBeGreaterThan(10);
    }
    // The check that guards the declaration refuses what the product's API does not have.
    expect(inProductApi("/public/v1/submit/make_coffee")).toBe(false);
    expect(inProductApi("/public/v1/query/create_users")).toBe(false);
    expect(inProductApi("/tkhq/api/v1/make_coffee")).toBe(false);
  });

  it("holds none of the operations later issues will serve", () => {
    const planned = [
      "submit/create_smart_contract_interface",
      "query/list_smart_contract_interfaces",
      "submit/eth_send_transaction",
      "submit/eth_send_raw_transaction",
      "submit/sol_send_transaction",
      "query/get_nonces",
      "query/get_send_transaction_status",
      "submit/email_auth",
      "submit/init_user_email_recovery",
      "submit/recover_user",
      "submit/create_invitations",
      "submit/delete_invitation",
      "submit/update_organization_name",
      "submit/create_mfa_policy",
      "query/get_mfa_policies",
      "submit/create_session_profile",
      "query/get_session_profiles",
      "submit/set_ip_allowlist",
      "query/get_ip_allowlist",
      "submit/create_oauth2_credential",
      "submit/oauth2_authenticate",
      "submit/import_secrets",
      "query/list_secrets",
    ].map((suffix) => `/public/v1/${suffix}`);
    for (const path of planned) {
      expect(inProductApi(path), path).toBe(true);
      expect(notServed.has(path), path).toBe(false);
    }
  });
});

describe("answers", () => {
  it("answers every not-served path 501 OPERATION_NOT_SERVED naming the service, without a stamp, and changes nothing", async () => {
    const before = await h.snapshot();
    for (const { path, service } of notServedOperations) {
      expectNotServed(await h.post(path, JSON.stringify({ organizationId: org.organizationId })), path, service);
    }
    expect(await h.snapshot()).toBe(before);
  });

  it("answers the same to a stamped, well-formed request, recording no activity", async () => {
    const before = await h.snapshot();
    for (const { path, service } of notServedOperations.filter((op) => op.path.includes("/submit/"))) {
      const type = swagger.submits[path.split("/").pop()!]!.type;
      const { body, headers } = signedRequest(
        { type, timestampMs: String(Date.now()), organizationId: org.organizationId, parameters: {} },
        org.key,
      );
      expectNotServed(await h.post(path, body, headers), path, service);
    }
    expect(await h.snapshot()).toBe(before);
  });

  it("answers the same whatever the body: empty, not JSON, or forged stamps", async () => {
    const { path, service } = notServedOperations.find((op) => op.path.endsWith("/earn_deposit"))!;
    const before = await h.snapshot();
    expectNotServed(await h.post(path, ""), path, service);
    expectNotServed(await h.post(path, "{not json"), path, service);
    expectNotServed(await h.post(path, "{}", { "X-Stamp": "forged" }), path, service);
    expect(await h.snapshot()).toBe(before);
  });

  it("reaches @turnkey/http's TurnkeyClient as a TurnkeyRequestError with code 12 and the message", async () => {
    const client = h.http(org.key);
    const before = await h.snapshot();
    const query = client.getTvcApp({ organizationId: org.organizationId, tvcAppId: "app" } as Parameters<typeof client.getTvcApp>[0]);
    await expect(query).rejects.toBeInstanceOf(TurnkeyRequestError);
    const queryMessage = "/public/v1/query/get_tvc_app is a hosted-only service of the product (TVC";
    await expect(query).rejects.toMatchObject({ code: 12, message: expect.stringContaining(queryMessage) });
    const submit = client.createSwapQuote({
      type: "ACTIVITY_TYPE_CREATE_SWAP_QUOTE",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: {},
    } as unknown as Parameters<typeof client.createSwapQuote>[0]);
    const submitMessage = "/public/v1/submit/create_swap_quote is a hosted-only service of the product (token swaps";
    await expect(submit).rejects.toMatchObject({ code: 12, message: expect.stringContaining(submitMessage) });
    expect(await h.snapshot()).toBe(before);
  });

  it("keeps 404 for a GET on a not-served path (only POST is an operation)", async () => {
    const path = "/public/v1/query/get_swap_status";
    const response = await fetch(h.url + path);
    expect(response.status).toBe(404);
    expect(((await response.json()) as { details: Array<{ turnkeyErrorCode: string }> }).details[0]!.turnkeyErrorCode).toBe(
      "ENDPOINT_NOT_FOUND",
    );
  });

  it("leaves no path of the product's API unanswered: each is served or declared not served (501)", () => {
    // The access controls (MFA policies, session profiles, IP allowlists, stored secrets, OAuth 2.0
    // providers) were the last operations answering 404; a path the swagger gains later shows up here.
    const pending = productPaths.filter((path) => !served.has(path) && !notServed.has(path));
    expect(pending).toEqual([]);
    expect(productPaths.length).toBe(served.size + notServed.size);
  });

  it("answers 404 ENDPOINT_NOT_FOUND for paths no edition of the API has, near the not-served ones", async () => {
    const before = await h.snapshot();
    const unknown = [
      "/public/v1/submit/earn_deposit_v2",
      "/public/v1/query/get_tvc_app_logs",
      "/public/v1/submit/spark",
      "/tkhq/api/v1/make_coffee",
      "/public/v2/submit/earn_deposit",
    ];
    for (const path of unknown) {
      expectEndpointNotFound(await h.post(path, JSON.stringify({ organizationId: org.organizationId })), path);
    }
    expect(await h.snapshot()).toBe(before);
  });
});
