// Slow, idle and numerous clients must not hold the server: raw sockets that stall in the headers,
// trickle a body or sit idle are closed (the first two with a 408 the official clients parse), and
// connections beyond the caps (overall, per remote address) are closed as they arrive — while other
// clients are served all along. Timeouts are short here (SIGIL_*_TIMEOUT_MS); no assertion is about
// how long anything took, only about what happened first.
import net from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startHarness, signedRequest, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { clientOf } from "../src/http/limits.js";

const ERROR_DETAIL = "type.googleapis.com/errors.v1.TurnkeyErrorDetail";
const WAIT = 30_000;

interface RawConnection {
  socket: net.Socket;
  /** Every byte the server sent so far. */
  received(): string;
  isClosed(): boolean;
  /** Resolves, with every byte the server sent, once the connection is closed (by either side). */
  closed: Promise<string>;
}

function connect(url: string, localAddress = "127.0.0.1"): Promise<RawConnection> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: hostname, port: Number(port), localAddress });
    let data = "";
    let closed = false;
    socket.on("data", (chunk) => (data += chunk.toString("latin1")));
    // Writing to a connection the server already closed fails; the close is what the tests look at.
    socket.on("error", () => {});
    const whenClosed = new Promise<string>((done) =>
      socket.on("close", () => {
        closed = true;
        done(data);
      }),
    );
    socket.once("connect", () => resolve({ socket, received: () => data, isClosed: () => closed, closed: whenClosed }));
    socket.once("error", reject);
  });
}

/** The JSON body of the one HTTP response in `raw`. */
function responseOf(raw: string) {
  const [head, body] = raw.split("\r\n\r\n", 2);
  return { statusLine: head!.split("\r\n")[0], head: head!, json: JSON.parse(body!) };
}

/** Sends GET /health on a kept-alive connection and waits for its answer. */
async function health(connection: RawConnection): Promise<string> {
  const start = connection.received().length;
  connection.socket.write("GET /health HTTP/1.1\r\nHost: sigil\r\n\r\n");
  return new Promise((resolve, reject) => {
    const check = () => {
      const text = connection.received().slice(start);
      if (text.includes('{"status":"ok"}')) return resolve(text);
      if (connection.isClosed()) return reject(new Error(`closed before answering: ${JSON.stringify(text)}`));
      setTimeout(check, 10);
    };
    check();
  });
}

function expectRequestTimeout(raw: string) {
  const response = responseOf(raw);
  expect(response.statusLine).toBe("HTTP/1.1 408 Request Timeout");
  expect(response.head.toLowerCase()).toContain("connection: close");
  expect(response.json.details).toEqual([{ "@type": ERROR_DETAIL, turnkeyErrorCode: "REQUEST_TIMEOUT" }]);
  expect(response.json.message).toContain("SIGIL_REQUEST_TIMEOUT_MS");
}

describe("timeouts", () => {
  let h: Harness;
  let org: TestOrganization;
  beforeAll(async () => {
    h = await startHarness({ SIGIL_HEADERS_TIMEOUT_MS: "2000", SIGIL_REQUEST_TIMEOUT_MS: "3000", SIGIL_KEEP_ALIVE_TIMEOUT_MS: "2000" });
    org = await h.organization("Timeouts");
  });
  afterAll(() => h.close());

  it("a client that stalls in its request line, or sends nothing, gets 408 and is closed; others are served meanwhile", {
    timeout: WAIT,
  }, async () => {
    const slow = await connect(h.url);
    slow.socket.write("POST /public/v1/query/who");
    const silent = await connect(h.url);
    // The official client, over its own kept-alive connection, is answered while both still hang.
    expect((await h.sdk(org, org.key, fastPoller).getWhoami({})).userId).toBe(org.userId);
    expect(slow.isClosed()).toBe(false);
    expect(silent.isClosed()).toBe(false);
    expectRequestTimeout(await slow.closed);
    expectRequestTimeout(await silent.closed);
  });

  it("a client that trickles its body gets 408 and is closed before the request runs; others are served meanwhile", {
    timeout: WAIT,
  }, async () => {
    const request = signedRequest(
      {
        type: "ACTIVITY_TYPE_CREATE_USER_TAG",
        timestampMs: String(Date.now()),
        organizationId: org.organizationId,
        parameters: { userTagName: "trickled", userIds: [] },
      },
      org.key,
    );
    const before = await h.snapshot();
    const slow = await connect(h.url);
    slow.socket.write(
      `POST /public/v1/submit/create_user_tag HTTP/1.1\r\nHost: sigil\r\nContent-Type: application/json\r\nX-Stamp: ${request.headers["X-Stamp"]}\r\n` +
        `Content-Length: ${Buffer.byteLength(request.body)}\r\n\r\n`,
    );
    // One byte every 100 ms: a body of 200-odd bytes would take 20 s, far past the request timeout.
    let sent = 0;
    const trickle = setInterval(() => {
      if (slow.isClosed() || sent >= request.body.length - 1) return;
      slow.socket.write(request.body[sent++]!);
    }, 100);
    try {
      expect((await h.sdk(org, org.key, fastPoller).getWallets({})).wallets).toEqual([]);
      expect(slow.isClosed()).toBe(false);
      expectRequestTimeout(await slow.closed);
    } finally {
      clearInterval(trickle);
    }
    expect(sent).toBeGreaterThan(0);
    expect(sent).toBeLessThan(request.body.length);
    expect(await h.snapshot()).toBe(before);
  });

  it("an idle kept-alive connection is closed, without an answer to nothing; a busy one is not", { timeout: WAIT }, async () => {
    const idle = await connect(h.url);
    const first = await health(idle);
    expect(first.startsWith("HTTP/1.1 200 OK")).toBe(true);
    // Clients are told how long the server keeps an idle connection, so they do not reuse a closing one.
    expect(first.toLowerCase()).toContain("keep-alive: timeout=2");
    // The same connection serves a second request: keep-alive works.
    expect(await health(idle)).toContain("HTTP/1.1 200 OK");
    const everything = await idle.closed;
    expect(everything.match(/HTTP\/1\.1 /g)).toHaveLength(2);
    // No 408 status line (a response's random x-request-id may hold the digits "408" anywhere).
    expect(everything).not.toMatch(/HTTP\/1\.1 408/);
  });
});

describe("requests that are not HTTP", () => {
  let h: Harness;
  beforeAll(async () => {
    h = await startHarness();
  });
  afterAll(() => h.close());

  it("a request that does not parse gets 400 REQUEST_MALFORMED, headers over 16 KiB 431 HEADERS_TOO_LARGE; the connection is closed", async () => {
    const before = await h.snapshot();
    const garbage = await connect(h.url);
    garbage.socket.write("POST /public/v1/submit/create_users HTTP/1.1\r\nHost: sigil\r\nContent-Length: nope\r\n\r\n{}");
    const malformed = responseOf(await garbage.closed);
    expect(malformed.statusLine).toBe("HTTP/1.1 400 Bad Request");
    expect(malformed.json.details[0].turnkeyErrorCode).toBe("REQUEST_MALFORMED");
    const huge = await connect(h.url);
    huge.socket.write(
      `POST /public/v1/submit/create_users HTTP/1.1\r\nHost: sigil\r\nX-Stamp: ${"a".repeat(20_000)}\r\nContent-Length: 2\r\n\r\n{}`,
    );
    const tooLarge = responseOf(await huge.closed);
    expect(tooLarge.statusLine).toBe("HTTP/1.1 431 Request Header Fields Too Large");
    expect(tooLarge.json).toMatchObject({ code: 3, details: [{ "@type": ERROR_DETAIL, turnkeyErrorCode: "HEADERS_TOO_LARGE" }] });
    expect(await h.snapshot()).toBe(before);
  });
});

describe("connection caps", () => {
  it("count an IPv4 address (also IPv4-mapped) as itself, and an IPv6 address as its /64", () => {
    expect(clientOf("203.0.113.7")).toBe("203.0.113.7");
    expect(clientOf("::ffff:203.0.113.7")).toBe("203.0.113.7");
    // Not IPv4-mapped: an IPv6 address (::cb00:7107), counted in its /64 and not against 203.0.113.7.
    expect(clientOf("::203.0.113.7")).toBe("0:0:0:0::/64");
    // Any address a host picks in its /64 counts as the same client.
    expect(clientOf("2001:db8:aa:1::1")).toBe("2001:db8:aa:1::/64");
    expect(clientOf("2001:0db8:00aa:0001:dead:beef:0:2")).toBe("2001:db8:aa:1::/64");
    expect(clientOf("2001:db8:aa:2::1")).toBe("2001:db8:aa:2::/64");
  });

  let h: Harness;
  const open: RawConnection[] = [];
  beforeAll(async () => {
    h = await startHarness({ SIGIL_MAX_CONNECTIONS: "5", SIGIL_MAX_CONNECTIONS_PER_ADDRESS: "3" });
  });
  afterAll(async () => {
    for (const connection of open) connection.socket.destroy();
    await h.close();
  });
  const served = async (localAddress: string) => {
    const connection = await connect(h.url, localAddress);
    open.push(connection);
    expect(await health(connection)).toContain("HTTP/1.1 200 OK");
    return connection;
  };
  const refused = async (localAddress: string) => {
    const connection = await connect(h.url, localAddress);
    connection.socket.write("GET /health HTTP/1.1\r\nHost: sigil\r\n\r\n");
    expect(await connection.closed).toBe("");
  };
  const openOnServer = () =>
    new Promise<number>((resolve, reject) =>
      h.server.app.server.getConnections((error, count) => (error ? reject(error) : resolve(count))),
    );

  it("one address gets SIGIL_MAX_CONNECTIONS_PER_ADDRESS connections; the next is closed unanswered, and another address is served", {
    timeout: WAIT,
  }, async () => {
    const first = await served("127.0.0.1");
    await served("127.0.0.1");
    await served("127.0.0.1");
    await refused("127.0.0.1");
    await served("127.0.0.2");
    // The operator learns of it (refusals are counted and logged at most every ten seconds).
    expect(h.logLines.some((line) => line.includes('"perAddress":1') && line.includes("connections refused"))).toBe(true);
    // Those still open go on being served.
    expect(await health(first)).toContain("HTTP/1.1 200 OK");
    // A connection that ends frees its place.
    first.socket.destroy();
    while ((await openOnServer()) > 3) await new Promise((resolve) => setTimeout(resolve, 20));
    await served("127.0.0.1");
  });

  it("beyond SIGIL_MAX_CONNECTIONS in all, every new connection is closed unanswered; open ones are still served", {
    timeout: WAIT,
  }, async () => {
    // Open now: three from 127.0.0.1 and one from 127.0.0.2.
    const fifth = await served("127.0.0.3");
    await refused("127.0.0.4");
    await refused("127.0.0.2");
    expect(await health(fifth)).toContain("HTTP/1.1 200 OK");
  });
});
