// What an operator reads at the default log level: every refused request with its status and code,
// every failed activity with the code and message it failed with — and never a body or a secret.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, newKeyPair, signedRequest, type Harness, type TestOrganization } from "./helpers/harness.js";

let h: Harness;
let org: TestOrganization;

beforeAll(async () => {
  h = await startHarness(); // SIGIL_LOG_LEVEL as shipped: info
  org = await h.organization("Logged");
});
afterAll(() => h.close());

/** The JSON log lines written since `from`, parsed. */
const linesSince = (from: number) => h.logLines.slice(from).map((line) => JSON.parse(line) as Record<string, unknown>);

/** Sends a request and returns its response and the log lines it produced. */
async function logged(path: string, body: string, headers: Record<string, string> = {}) {
  const from = h.logLines.length;
  const response = await h.post(path, body, headers);
  return { response, lines: linesSince(from) };
}

const envelope = (type: string, parameters: object) => ({
  type,
  timestampMs: String(Date.now()),
  organizationId: org.organizationId,
  parameters,
});

describe("logs at the default level", () => {
  it("log a request refused for its stamp (401) with the code, without the body", async () => {
    const marker = "do-not-log-this-wallet-name";
    const { body, headers } = signedRequest(envelope("ACTIVITY_TYPE_CREATE_WALLET", { walletName: marker, accounts: [] }), newKeyPair());
    const { response, lines } = await logged("/public/v1/submit/create_wallet", body, headers);
    expect(response.status).toBe(401);
    const refused = lines.find((line) => line.msg === "request refused");
    expect(refused).toMatchObject({
      level: 30,
      status: 401,
      errorCode: response.json.details[0].turnkeyErrorCode,
      url: "/public/v1/submit/create_wallet",
      method: "POST",
    });
    expect(refused!.errorCode).toEqual(expect.any(String));
    expect(refused!.error).toBe(response.json.message);
    expect(JSON.stringify(lines)).not.toContain(marker);
    expect(JSON.stringify(lines)).not.toContain(headers["X-Stamp"]);
  });

  it("log a malformed request (400), an unknown endpoint (404) and a hosted-only operation (501) with their codes", async () => {
    const { body, headers } = signedRequest(envelope("ACTIVITY_TYPE_CREATE_WALLET", { accounts: [] }), org.key); // no walletName
    const malformed = await logged("/public/v1/submit/create_wallet", body, headers);
    expect(malformed.response.status).toBe(400);
    expect(malformed.lines).toContainEqual(
      expect.objectContaining({ msg: "request refused", status: 400, errorCode: malformed.response.json.details[0].turnkeyErrorCode }),
    );

    const unknown = await logged("/public/v1/submit/no_such_operation", "{}");
    expect(unknown.response.status).toBe(404);
    expect(unknown.lines).toContainEqual(expect.objectContaining({ msg: "request refused", status: 404, errorCode: "ENDPOINT_NOT_FOUND" }));

    const hostedOnly = await logged("/public/v1/submit/create_fiat_on_ramp_credential", "{}");
    expect(hostedOnly.response.status).toBe(501);
    expect(hostedOnly.lines).toContainEqual(
      expect.objectContaining({ level: 30, msg: "request refused", status: 501, errorCode: "OPERATION_NOT_SERVED" }),
    );
  });

  it("log a request refused for its rights (403) with the code", async () => {
    // A key of one organization reading another's data.
    const other = await h.organization("Other");
    const { body, headers } = signedRequest({ organizationId: other.organizationId }, org.key);
    const { response, lines } = await logged("/public/v1/query/list_users", body, headers);
    expect(response.status).toBe(403);
    expect(lines).toContainEqual(
      expect.objectContaining({ msg: "request refused", status: response.status, errorCode: response.json.details[0].turnkeyErrorCode }),
    );
  });

  it("log a failed activity with its code and message, never its parameters", async () => {
    const unknownAddress = "0x000000000000000000000000000000000000dEaD";
    const payload = "secret-looking-payload-text";
    const { body, headers } = signedRequest(
      envelope("ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", {
        signWith: unknownAddress,
        payload,
        encoding: "PAYLOAD_ENCODING_TEXT_UTF8",
        hashFunction: "HASH_FUNCTION_KECCAK256",
      }),
      org.key,
    );
    const { response, lines } = await logged("/public/v1/submit/sign_raw_payload", body, headers);
    expect(response.status).toBeGreaterThanOrEqual(400);
    const activity = lines.find((line) => line.msg === "activity");
    expect(activity).toMatchObject({
      level: 30,
      status: "ACTIVITY_STATUS_FAILED",
      type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
      errorCode: response.json.details[0].turnkeyErrorCode,
      error: response.json.message,
    });
    expect(JSON.stringify(lines)).not.toContain(payload);
  });

  it("keep a completed activity's line free of error fields", async () => {
    const { body, headers } = signedRequest(envelope("ACTIVITY_TYPE_CREATE_WALLET", { walletName: "fine", accounts: [] }), org.key);
    const { response, lines } = await logged("/public/v1/submit/create_wallet", body, headers);
    expect(response.status).toBe(200);
    const activity = lines.find((line) => line.msg === "activity");
    expect(activity).toMatchObject({ status: "ACTIVITY_STATUS_COMPLETED" });
    expect(activity).not.toHaveProperty("errorCode");
    expect(lines.some((line) => line.msg === "request refused")).toBe(false);
  });
});
