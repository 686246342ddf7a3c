// A JSON-RPC gateway on loopback in front of a real node (Hardhat, the LiteSVM node), reached through a
// URL that carries secrets the way hosted nodes' URLs do: a user name and password, an API key as a
// path segment and another in the query. It behaves like a careless gateway: every error it relays
// repeats the URL it was reached at, secrets and all (in the message and in every string of the
// error's data: a Solana preflight's logs; with the Basic authorization, a key in capitals and one
// cut short), and so does every refusal a test asks of it — a JSON-RPC
// error for one method (`refuse`), or an HTTP error whose reason phrase and text body quote the URL
// (`fail`). A request without the secrets (wrong path, query or Basic authorization) is answered 401,
// so the tests also see that the secrets are still what reaches the node.
import crypto from "node:crypto";
import http from "node:http";
import type { AddressInfo } from "node:net";

export interface LeakyNode {
  /** The URL to configure: http://<user>:<password>@127.0.0.1:<port>/v2/<path key>?apikey=<query key> */
  url: string;
  /** The secrets in it, none of which may ever leave the server under test. */
  secrets: string[];
  /** The requests it saw without the secrets (each answered 401). */
  unauthorized: number;
  /** Answers `method` with a JSON-RPC error quoting the URL, until `clear`. */
  refuse(method: string, words?: string): void;
  /** Answers `method` with HTTP `status`, its reason phrase and text body quoting the URL, until `clear`. */
  fail(method: string, status?: number): void;
  clear(): void;
  stop(): Promise<void>;
}

/** Letters no hex digit, base58 address or base64 of random bytes is likely to hold eight of in a row. */
const secret = (length: number) =>
  Array.from(crypto.randomBytes(length), (byte) => "ghijklmnopqrstuvwxyzGHIJKLMNOPQRSTUVWXYZ"[byte % 40]).join("");

export async function startLeakyNode(upstream: string): Promise<LeakyNode> {
  const user = `user${secret(12)}`;
  const password = secret(24);
  const pathKey = secret(32);
  const queryKey = secret(32);
  const refusing = new Map<string, string>();
  const failing = new Map<string, number>();
  let url = "";
  let unauthorized = 0;
  const expectedAuthorization = `Basic ${Buffer.from(`${user}:${password}`).toString("base64")}`;

  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (chunk: Buffer) => chunks.push(chunk));
    request.on("end", async () => {
      try {
        if (request.url !== `/v2/${pathKey}?apikey=${queryKey}` || request.headers.authorization !== expectedAuthorization) {
          unauthorized++;
          response.writeHead(401, { "content-type": "text/plain" }).end("unauthorized");
          return;
        }
        const body = Buffer.concat(chunks);
        const call = JSON.parse(body.toString("utf8")) as { id: unknown; method: string };
        // The URL whole, the Basic authorization it was sent, a key in capitals and one cut short.
        const quoted = `(${url}, authorization ${expectedAuthorization}, key ${pathKey.toUpperCase()}, ${queryKey.slice(3, 17)}…)`;
        const words = refusing.get(call.method);
        if (words !== undefined) {
          response
            .writeHead(200, { "content-type": "application/json" })
            .end(JSON.stringify({ jsonrpc: "2.0", id: call.id, error: { code: -32000, message: `${words} ${quoted}`, data: { url } } }));
          return;
        }
        const status = failing.get(call.method);
        if (status !== undefined) {
          response.writeHead(status, `Bad gateway at ${url}`, { "content-type": "text/plain" }).end(`upstream of ${url} failed`);
          return;
        }
        const relayed = await fetch(upstream, { method: "POST", headers: { "content-type": "application/json" }, body });
        const text = await relayed.text();
        let answer: { error?: { message?: unknown; data?: unknown } } | undefined;
        try {
          answer = JSON.parse(text);
        } catch {
          answer = undefined;
        }
        if (answer?.error) {
          answer.error.message = `${String(answer.error.message)} ${quoted}`;
          answer.error.data = quoting(answer.error.data, quoted);
          response.writeHead(relayed.status, { "content-type": "application/json" }).end(JSON.stringify(answer));
          return;
        }
        response.writeHead(relayed.status, { "content-type": relayed.headers.get("content-type") ?? "application/json" }).end(text);
      } catch (error) {
        response.writeHead(502, { "content-type": "text/plain" }).end(String(error));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  url = `http://${user}:${password}@127.0.0.1:${port}/v2/${pathKey}?apikey=${queryKey}`;
  return {
    url,
    secrets: [user, password, pathKey, queryKey, expectedAuthorization.slice("Basic ".length)],
    get unauthorized() {
      return unauthorized;
    },
    refuse: (method, words = "request refused") => void refusing.set(method, words),
    fail: (method, status = 502) => void failing.set(method, status),
    clear() {
      refusing.clear();
      failing.clear();
    },
    stop: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Every string in an error's data with the quote appended (a Solana preflight's logs, revert data is left alone). */
function quoting(data: unknown, quoted: string): unknown {
  if (typeof data === "string") return /^0x[0-9a-fA-F]*$/.test(data) ? data : `${data} ${quoted}`;
  if (Array.isArray(data)) return data.map((item) => quoting(item, quoted));
  if (data && typeof data === "object")
    return Object.fromEntries(Object.entries(data).map(([key, value]) => [key, quoting(value, quoted)]));
  return data;
}

/** Every run of eight characters of each secret, in lower case: none may appear in a text read in lower
 * case (a cut-off copy, in any letter case, counts). */
export function partsOf(secrets: string[]): string[] {
  return secrets.flatMap((s) => Array.from({ length: s.length - 7 }, (_, i) => s.slice(i, i + 8).toLowerCase()));
}
