// One request, traceable (docs/running.md#request-ids-and-traces): every request has an id, the
// client's X-Request-Id when well-formed (1–128 letters, digits, `.`, `_`, `-`) or one made for it. It
// is sent back in X-Request-Id, carried by every log line written while the request is served (the
// HTTP layer's and the pipeline's: the activity with its policy outcome), put in every error body as
// `requestId` beside code, message and details (which the official clients read as before), and
// stored with the activity the request made, never shown in the activity. A valid W3C traceparent
// puts its trace id and span id into those log lines; an invalid one is ignored.
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeyRequestError } from "@turnkey/http";
import { startHarness, newKeyPair, signedRequest, type Harness, type TestOrganization } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";

let h: Harness;
let org: TestOrganization;

beforeAll(async () => {
  h = await startHarness({ SIGIL_LOG_LEVEL: "debug" });
  org = await h.organization("Traced");
});
afterAll(() => h.close());

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

/** The JSON log lines written since `from`, parsed. */
/** The request id stored with an activity. */
const storedRequestId = async (activityId: string) =>
  (await h.server.store.db.selectFrom("activities").select("request_id").where("id", "=", activityId).executeTakeFirstOrThrow()).request_id;

const linesSince = (from: number) => h.logLines.slice(from).map((line) => JSON.parse(line) as Record<string, unknown>);

/** Sends a request; returns its status, X-Request-Id header, body and the log lines written meanwhile. */
async function send(path: string, body: string, headers: Record<string, string> = {}) {
  const from = h.logLines.length;
  const response = await fetch(h.url + path, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
  const text = await response.text();
  // The lines of a request are written by the time its answer is sent, but for the debug line of the
  // response, written once it is sent: wait for that one.
  for (let i = 0; i < 100 && !linesSince(from).some((l) => l.msg === "request"); i++) await new Promise((r) => setTimeout(r, 10));
  return { status: response.status, requestId: response.headers.get("x-request-id"), json: JSON.parse(text), lines: linesSince(from) };
}

const envelope = (type: string, parameters: object, organizationId = org.organizationId) => ({
  type,
  timestampMs: String(Date.now()),
  organizationId,
  parameters,
});

const createTag = (name: string, organizationId = org.organizationId) =>
  envelope("ACTIVITY_TYPE_CREATE_USER_TAG", { userTagName: name, userIds: [] }, organizationId);

describe("the request id", () => {
  it("is the client's X-Request-Id when well-formed: sent back, in every log line of the request, and stored with its activity", async () => {
    for (const sent of ["a", "checkout-7f3a.retry_2", "x".repeat(128)]) {
      const { body, headers } = signedRequest(createTag(`tag ${sent.length} ${Date.now()}`), org.key);
      const response = await send("/public/v1/submit/create_user_tag", body, { ...headers, "X-Request-Id": sent });
      expect(response.status).toBe(200);
      expect(response.requestId).toBe(sent);
      const activityId = response.json.activity.id as string;
      // The pipeline's line (the activity and its policy outcome) and the HTTP layer's both carry it.
      expect(response.lines).toContainEqual(
        expect.objectContaining({ msg: "activity", activityId, outcome: "OUTCOME_ALLOW", requestId: sent }),
      );
      expect(response.lines).toContainEqual(expect.objectContaining({ msg: "request", status: 200, requestId: sent }));
      for (const line of response.lines) expect(line.requestId).toBe(sent);
      // Stored with the activity, not shown in it (the API description has no field for it).
      expect(await storedRequestId(activityId)).toBe(sent);
      expect(JSON.stringify(response.json)).not.toContain(`"${sent}"`);
      const fetched = await h.sdk(org, org.key).getActivity({ activityId });
      expect(Object.keys(fetched.activity)).not.toContain("requestId");
    }
  });

  it("is made anew when the request has none: a UUID, one per request, sent back and logged", async () => {
    const ids = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const { body, headers } = signedRequest(createTag(`generated ${i} ${Date.now()}`), org.key);
      const response = await send("/public/v1/submit/create_user_tag", body, headers);
      expect(response.status).toBe(200);
      expect(response.requestId).toMatch(UUID);
      ids.add(response.requestId!);
      expect(response.lines).toContainEqual(expect.objectContaining({ msg: "activity", requestId: response.requestId }));
      expect(await storedRequestId(response.json.activity.id)).toBe(response.requestId);
    }
    expect(ids.size).toBe(3);
  });

  it("is made anew when the client's is malformed (too long, other characters, empty, several): it is repeated nowhere", async () => {
    const malformed = ["x".repeat(129), "has space", "a/b", "semi;colon", "é", "a,b", "%0D%0AX-Injected:%201", ""];
    for (const sent of malformed) {
      const from = h.logLines.length;
      const { body, headers } = signedRequest(createTag(`malformed ${malformed.indexOf(sent)} ${Date.now()}`), org.key);
      const response = await send("/public/v1/submit/create_user_tag", body, { ...headers, "X-Request-Id": sent });
      expect(response.status, sent).toBe(200);
      expect(response.requestId).toMatch(UUID);
      if (sent) expect(h.logLines.slice(from).join("\n")).not.toContain(sent);
      expect(await storedRequestId(response.json.activity.id)).toBe(response.requestId);
    }
  });

  /** Sends `head` (request line and headers, CRLF-separated) and a body on a raw socket; returns the whole answer. */
  async function raw(head: string, body = ""): Promise<string> {
    const { port } = new URL(h.url);
    const socket = net.connect(Number(port), "127.0.0.1");
    const chunks: Buffer[] = [];
    socket.on("data", (chunk) => chunks.push(chunk));
    socket.write(`${head}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
    await new Promise((resolve) => socket.on("close", resolve));
    return Buffer.concat(chunks).toString("latin1");
  }

  it("is not taken from a header a CR or LF breaks, nor from one sent twice", async () => {
    const path = "POST /public/v1/query/no_such_query HTTP/1.1\r\nhost: sigil";
    // A bare CR or LF inside the value: node's parser refuses the request before it is read.
    for (const broken of ["abc\rX-Injected: 1", "abc\nX-Injected: 1"]) {
      const from = h.logLines.length;
      const answer = await raw(`${path}\r\nx-request-id: ${broken}`);
      expect(answer).toMatch(/^HTTP\/1\.1 400 /);
      expect(answer).not.toMatch(/x-request-id|x-injected/i);
      expect(h.logLines.slice(from).join("\n")).not.toContain("abc");
    }
    // CRLF ends the header: what follows is a header of its own, and the id is what came before.
    const split = await raw(`${path}\r\nx-request-id: first-part\r\nX-Injected: 1`);
    expect(split).toMatch(/^HTTP\/1\.1 404 /);
    expect(split).toMatch(/\r\nx-request-id: first-part\r\n/i);
    expect(split).not.toMatch(/\r\nx-injected/i);
    // Two X-Request-Id headers reach the server as one value joined by ", ": not well-formed.
    const twice = await raw(`${path}\r\nx-request-id: one\r\nx-request-id: two`);
    const echoed = /\r\nx-request-id: ([^\r]*)\r\n/i.exec(twice)?.[1];
    expect(echoed).toMatch(UUID);
  });
});

describe("error bodies", () => {
  it("carry requestId beside code, message and details, for every kind of refusal, and the official client reads them as before", async () => {
    const cases = [
      // Unknown endpoint (404), malformed body (400), bad stamp (401), hosted-only service (501).
      { path: "/public/v1/submit/no_such_operation", body: "{}", status: 404 },
      { ...signedRequest("not json", org.key), path: "/public/v1/submit/create_user_tag", status: 400 },
      { ...signedRequest(createTag("unknown key"), newKeyPair()), path: "/public/v1/submit/create_user_tag", status: 401 },
      { path: "/public/v1/submit/create_fiat_on_ramp_credential", body: "{}", status: 501 },
      { path: "/public/v1/query/whoami", body: "x".repeat(h.config.bodyLimitBytes + 1), status: 413 },
    ];
    for (const { path, body, status, headers = {} } of cases as {
      path: string;
      body: string;
      status: number;
      headers?: Record<string, string>;
    }[]) {
      const sent = `case-${status}`;
      const response = await send(path, body, { ...headers, "X-Request-Id": sent });
      expect(response.status, path).toBe(status);
      expect(response.requestId).toBe(sent);
      expect(Object.keys(response.json)).toEqual(["code", "message", "details", "requestId"]);
      expect(response.json.requestId).toBe(sent);
      expect(response.lines).toContainEqual(expect.objectContaining({ msg: "request refused", status, requestId: sent }));
    }
    // What @turnkey/http makes of such a body: the same error as before there was a requestId.
    const client = h.http(org.key);
    const failure = await client.getWallet({ organizationId: org.organizationId, walletId: "no-such-wallet" }).catch((e: unknown) => e);
    expect(failure).toBeInstanceOf(TurnkeyRequestError);
    expect(failure).toMatchObject({ code: 5, details: [{ turnkeyErrorCode: "WALLET_NOT_FOUND" }] });
  });

  it("of an activity its policies refuse carry the request's id, as its log line does; the recorded failure does not", async () => {
    const { org: team, members } = await organizationWith(h, ["alice"]);
    // alice is no root user and no policy allows her anything: refused, and recorded.
    const { body, headers } = signedRequest(createTag("not allowed", team.organizationId), members.alice!.key);
    const first = await send("/public/v1/submit/create_user_tag", body, { ...headers, "X-Request-Id": "denied-1" });
    expect(first.status).toBe(403);
    expect(first.json).toMatchObject({ details: [{ turnkeyErrorCode: "POLICY_DENIED" }], requestId: "denied-1" });
    expect(first.lines).toContainEqual(
      expect.objectContaining({
        msg: "activity",
        outcome: "OUTCOME_DENY_IMPLICIT",
        status: "ACTIVITY_STATUS_FAILED",
        requestId: "denied-1",
      }),
    );
    const row = await h.server.store.db
      .selectFrom("activities")
      .select(["request_id", "failure"])
      .where("organization_id", "=", team.organizationId)
      .where("type", "=", "ACTIVITY_TYPE_CREATE_USER_TAG")
      .executeTakeFirstOrThrow();
    expect(row.request_id).toBe("denied-1");
    expect(row.failure).not.toContain("requestId");
    // A retry is answered from the audit log with the same body, under its own request's id.
    const retry = await send("/public/v1/submit/create_user_tag", body, { ...headers, "X-Request-Id": "denied-2" });
    expect(retry.status).toBe(403);
    expect({ ...retry.json, requestId: undefined }).toEqual({ ...first.json, requestId: undefined });
    expect(retry.json.requestId).toBe("denied-2");
  });
});

describe("W3C traceparent", () => {
  const traceId = "4bf92f3577b34da6a3ce929d0e0e4736";
  const spanId = "00f067aa0ba902b7";

  it("puts its trace id and span id into every log line of the request", async () => {
    for (const traceparent of [`00-${traceId}-${spanId}-01`, `00-${traceId}-${spanId}-00`, `cc-${traceId}-${spanId}-01-a-later-version`]) {
      const { body, headers } = signedRequest(createTag(`traced ${traceparent.slice(0, 2)} ${traceparent.slice(-2)}`), org.key);
      const response = await send("/public/v1/submit/create_user_tag", body, { ...headers, traceparent });
      expect(response.status).toBe(200);
      expect(response.lines).toContainEqual(expect.objectContaining({ msg: "activity", traceId, spanId, requestId: response.requestId }));
      for (const line of response.lines) expect(line).toMatchObject({ traceId, spanId });
    }
    const refused = await send("/public/v1/submit/no_such_operation", "{}", { traceparent: `00-${traceId}-${spanId}-01` });
    expect(refused.lines).toContainEqual(expect.objectContaining({ msg: "request refused", status: 404, traceId, spanId }));
  });

  it("is ignored when it breaks the format: the request is served, and its lines carry no trace", async () => {
    const invalid = [
      `ff-${traceId}-${spanId}-01`, // version ff is invalid
      `00-${"0".repeat(32)}-${spanId}-01`, // all-zero trace id
      `00-${traceId}-${"0".repeat(16)}-01`, // all-zero span id
      `00-${traceId.toUpperCase()}-${spanId}-01`, // upper case
      `00-${traceId}-${spanId}-01-extra`, // version 00 has exactly four fields
      `00-${traceId.slice(1)}-${spanId}-01`, // a short trace id
      `00-${traceId}-${spanId}`, // no flags
      `0-${traceId}-${spanId}-01`,
      `00-${traceId}-${spanId}-01, 00-${traceId}-${spanId}-01`, // sent twice
    ];
    for (const traceparent of invalid) {
      const { body, headers } = signedRequest(createTag(`untraced ${invalid.indexOf(traceparent)}`), org.key);
      const response = await send("/public/v1/submit/create_user_tag", body, { ...headers, traceparent });
      expect(response.status, traceparent).toBe(200);
      expect(response.lines.length).toBeGreaterThan(0);
      for (const line of response.lines) {
        expect(line.traceId, traceparent).toBeUndefined();
        expect(line.spanId, traceparent).toBeUndefined();
      }
    }
  });
});
