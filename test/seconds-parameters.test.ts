// Lifetimes in seconds (expirationSeconds of API keys, sessions, one-time passwords and verification
// tokens) follow one rule, secondsParameter in src/operations/resources.ts: a string of digits from 1
// to the lifetime's maximum; absent or "" takes the default. Each refusal, over raw HTTP, is a 400
// naming the field, the bounds and the value, and leaves nothing but its FAILED activity record.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newKeyPair, signedRequest, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";

let h: Harness;
let org: TestOrganization;

beforeAll(async () => {
  h = await startHarness({ SIGIL_SESSION_MAX_SECONDS: "86400" });
  org = await h.organization("Lifetimes");
  await h.sdk(org, org.key, fastPoller).setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
});
afterAll(() => h?.close());

interface Lifetime {
  what: string;
  operation: string;
  type: string;
  parameters: (expirationSeconds: string) => Record<string, unknown>;
  field: string;
  max: number;
  of: string;
  code: string;
  /** The refusal of a whole number above max, where it has one of its own. */
  tooLong?: { code: string; message: (value: string) => string };
}

const lifetimes: Lifetime[] = [
  {
    what: "an API key",
    operation: "create_api_keys",
    type: "ACTIVITY_TYPE_CREATE_API_KEYS_V2",
    parameters: (expirationSeconds) => ({
      userId: org.userId,
      apiKeys: [{ apiKeyName: "k", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256", expirationSeconds }],
    }),
    field: "apiKeys[0].expirationSeconds",
    max: 100 * 365 * 24 * 3600,
    of: "",
    code: "REQUEST_INVALID",
  },
  {
    what: "a session",
    operation: "stamp_login",
    type: "ACTIVITY_TYPE_STAMP_LOGIN",
    parameters: (expirationSeconds) => ({ publicKey: newKeyPair().publicKey, expirationSeconds }),
    field: "expirationSeconds",
    max: 86_400,
    of: " for a session",
    code: "INVALID_EXPIRATION",
    tooLong: {
      code: "SESSION_EXPIRATION_TOO_LONG",
      message: (value) => `expirationSeconds ${value} exceeds the longest session this server grants (86400 seconds`,
    },
  },
  {
    what: "a one-time password",
    operation: "init_otp",
    type: "ACTIVITY_TYPE_INIT_OTP_V3",
    parameters: (expirationSeconds) => ({ otpType: "OTP_TYPE_EMAIL", contact: "someone@example.com", appName: "Demo", expirationSeconds }),
    field: "expirationSeconds",
    max: 600,
    of: " for a one-time password",
    code: "INVALID_EXPIRATION",
  },
  {
    what: "a verification token",
    operation: "verify_otp",
    type: "ACTIVITY_TYPE_VERIFY_OTP",
    parameters: (expirationSeconds) => ({ otpId: "00000000-0000-0000-0000-000000000000", otpCode: "123456", expirationSeconds }),
    field: "expirationSeconds",
    max: 86_400,
    of: " for a verification token",
    code: "INVALID_EXPIRATION",
  },
];

async function submit(lifetime: Lifetime, expirationSeconds: string) {
  const parameters = lifetime.parameters(expirationSeconds);
  const body = { type: lifetime.type, timestampMs: String(Date.now()), organizationId: org.organizationId, parameters };
  const { body: text, headers } = signedRequest(body, org.key);
  return h.post(`/public/v1/submit/${lifetime.operation}`, text, headers);
}

/** Sends a value that must be refused; checks the answer and that only the FAILED activity (and its
 * policy evaluation) was added. */
async function refused(lifetime: Lifetime, value: string, code: string, message: string) {
  const before = JSON.parse(await h.snapshot()) as Record<string, string[]>;
  const response = await submit(lifetime, value);
  expect(response.status, JSON.stringify(response.json)).toBe(400);
  expect(response.json.details[0].turnkeyErrorCode).toBe(code);
  expect(response.json.message).toContain(message);
  const after = JSON.parse(await h.snapshot()) as Record<string, string[]>;
  for (const table of Object.keys(before)) {
    if (table === "activities" || table === "policy_evaluations") continue;
    expect(after[table], table).toEqual(before[table]);
  }
  const added = after.activities!.filter((row) => !before.activities!.includes(row)).map((row) => JSON.parse(row));
  expect(added.map((a) => a.status)).toEqual(["ACTIVITY_STATUS_FAILED"]);
  expect(after.policy_evaluations!.length).toBe(before.policy_evaluations!.length + 1);
}

describe.each(lifetimes)("expirationSeconds of $what", (lifetime) => {
  it("refuses anything but a whole number of seconds from 1 to the maximum, naming field, bounds and value", async () => {
    const rule = (value: string) =>
      `${lifetime.field} must be a whole number of seconds from 1 to ${lifetime.max}${lifetime.of}, got "${value}"`;
    for (const value of ["0", "-5", "1.5", "soon", " 60", "1e3"]) await refused(lifetime, value, lifetime.code, rule(value));
    const over = String(lifetime.max + 1);
    if (lifetime.tooLong) await refused(lifetime, over, lifetime.tooLong.code, lifetime.tooLong.message(over));
    else await refused(lifetime, over, lifetime.code, rule(over));
  });
});

describe("accepted lifetimes", () => {
  it('takes the maximum itself, and "" as no value (the default)', async () => {
    const [apiKey, session, otp] = lifetimes;
    for (const value of [String(apiKey!.max), ""]) expect((await submit(apiKey!, value)).status).toBe(200);
    expect((await submit(otp!, "600")).status).toBe(200);
    const sessions = await Promise.all([submit(session!, "86400"), submit(session!, "")]);
    expect(sessions.map((s) => s.status)).toEqual([200, 200]);
    const keys = (await h.sdk(org, org.key, fastPoller).getApiKeys({ userId: org.userId })).apiKeys;
    const lifetimesGiven = keys.map((k) => k.expirationSeconds).sort();
    // The API key with the maximum, the two sessions (86400 asked for, 900 the default), the root key
    // and the key without one.
    expect(lifetimesGiven).toEqual([String(apiKey!.max), "86400", "900", undefined, undefined].sort());
  });
});
