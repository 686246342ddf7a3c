// A webhook receiver on loopback for the tests that check deliveries end to end, and what they wait
// with: `until` a condition holds, and the deployment's verification keys for
// @turnkey/crypto's verifyTurnkeyWebhookSignature, which `verdictOf` applies to a delivery.
import http from "node:http";
import type net from "node:net";
import { verifyTurnkeyWebhookSignature } from "@turnkey/crypto";

interface Received {
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

/** A webhook receiver on loopback: answers with the queued statuses (then 200), records every request. */
export async function receiver(port = 0) {
  const received: Received[] = [];
  const answers: number[] = [];
  let hang = false;
  const server = http.createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on("data", (c: Buffer) => chunks.push(c));
    request.on("end", () => {
      received.push({ headers: request.headers, body: Buffer.concat(chunks) });
      if (hang) return;
      const status = answers.shift() ?? 200;
      if (status >= 300 && status < 400) response.setHeader("location", "http://127.0.0.1:1/elsewhere");
      response.writeHead(status).end();
    });
  });
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  const address = server.address() as net.AddressInfo;
  return {
    url: `http://127.0.0.1:${address.port}/hook`,
    port: address.port,
    received,
    answers,
    hangForever: () => (hang = true),
    activities: () => received.map((r) => JSON.parse(r.body.toString("utf8"))),
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

export async function until<T>(what: string, probe: () => T | undefined | Promise<T | undefined>, ms = 10_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

export async function verificationKeys(baseUrl: string) {
  const document = (await (await fetch(`${baseUrl}/.well-known/sigil.json`)).json()) as {
    webhookVerificationKeys: { keyId: string; publicKey: string }[];
  };
  return document.webhookVerificationKeys.map((k) => ({ keyId: k.keyId, publicKey: k.publicKey }));
}

/** What the official helper says of a delivery (of `body` in its place, to check a tampered one). */
export function verdictOf(delivery: Received, keys: { keyId: string; publicKey: string }[], body: Buffer = delivery.body) {
  return verifyTurnkeyWebhookSignature({
    headers: delivery.headers as Record<string, string>,
    body,
    verificationKeys: keys,
    maxTimestampAgeMs: 60_000,
  });
}
