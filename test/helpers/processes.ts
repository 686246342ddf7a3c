// Server processes started by tests (the built CLI in a child process): a free loopback port, and
// waiting until the server answers.
import net from "node:net";

export async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const server = net.createServer().listen(0, "127.0.0.1", () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** Resolves once `GET <url>/health` answers 200; throws after ten seconds. */
export async function waitForHealth(url: string): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (await fetch(`${url}/health`).then((r) => r.ok, () => false)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} did not answer /health`);
}
