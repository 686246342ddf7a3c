// The web console (console/, docs/console.md): the static files `npm run build` writes to
// dist/console, answered at /console and /console/assets/<file> and nowhere else. The page talks to
// the public API like any client, stamping every request itself, so nothing here authenticates.
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { FastifyInstance } from "fastify";

/** dist/console, from src/http (tests) and from dist/http (the built server) alike. */
export const CONSOLE_DIRECTORY = fileURLToPath(new URL("../../dist/console/", import.meta.url));

const TYPES: Record<string, string> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".html": "text/html; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".woff2": "font/woff2",
};

/**
 * Only the console's own files, no inline script or style, no eval: a script injected into a page
 * (through a name or a note an attacker stored) cannot run, and the page cannot be framed
 * (clickjacking an Approve button). connect-src 'self' keeps requests, and so stamps, on this server.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join("; ");

const SECURITY_HEADERS = {
  "content-security-policy": CONSOLE_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
  "cross-origin-opener-policy": "same-origin",
  "cross-origin-resource-policy": "same-origin",
};

interface ConsoleFile {
  body: Buffer;
  type: string;
}

/** The built console's files, read once: index.html and the assets Vite named by their content. */
function readConsole(directory: string): { index: Buffer; assets: Map<string, ConsoleFile> } | undefined {
  let index: Buffer;
  try {
    index = readFileSync(path.join(directory, "index.html"));
  } catch {
    return undefined;
  }
  const assets = new Map<string, ConsoleFile>();
  const assetDirectory = path.join(directory, "assets");
  for (const name of existsSync(assetDirectory) ? readdirSync(assetDirectory) : []) {
    const type = TYPES[path.extname(name)];
    if (type) assets.set(name, { body: readFileSync(path.join(assetDirectory, name)), type });
  }
  return { index, assets };
}

/** Adds the console's routes when it is built; answers whether it was. */
export function serveConsole(app: FastifyInstance, directory = CONSOLE_DIRECTORY): boolean {
  const files = readConsole(directory);
  if (!files) return false;
  const page = async (_request: unknown, reply: import("fastify").FastifyReply) =>
    reply.headers(SECURITY_HEADERS).header("cache-control", "no-cache").type(TYPES[".html"]).send(files.index);
  app.get("/console", page);
  app.get("/console/", page);
  app.get<{ Params: { file: string } }>("/console/assets/:file", async (request, reply) => {
    const file = files.assets.get(request.params.file);
    // Not found is the service's usual 404 (ENDPOINT_NOT_FOUND), from callNotFound.
    if (!file) return reply.callNotFound();
    // Vite names each asset by a hash of its content: a name never changes meaning.
    return reply.headers(SECURITY_HEADERS).header("cache-control", "public, max-age=31536000, immutable").type(file.type).send(file.body);
  });
  return true;
}
