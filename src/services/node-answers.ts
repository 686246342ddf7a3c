// What a chain node's answers may carry out of the server. The URLs of SIGIL_CHAIN_RPC_URLS hold hosted
// nodes' API keys (in the path, the query, or a user name and password), and a node, or the gateway in
// front of it, may quote the URL it was reached at in an error ("invalid key at https://…/v2/<key>").
// Whatever a node answers reaches Sigil through one of two transports (viem's for EVM chains, through
// `fetchFromNode` below; @solana/kit's for Solana clusters, wrapped in solana-rpc.ts), and there, before
// any of it can become an error message, a stored status, a webhook or a log line, every piece of every
// configured URL that could be a secret is replaced by `[redacted]` in the node's error answers. The
// libraries never hold a URL they could quote themselves: viem is handed a stand-in (the chain's id
// under `.invalid`) and reaches the node through `fetchFromNode`; kit's own errors are replaced by
// Sigil's words before they leave its transport. A node's successful answers are never rewritten:
// they are data (hashes, balances), not words.
import { bodyUpTo } from "./capped-body.js";
import { Buffer } from "node:buffer";

export const REDACTED = "[redacted]";

/** A piece of a URL shorter than this is not taken for a secret (no API key is that short). */
const MIN_PIECE = 6;
/** A run of key characters this long, found inside a secret piece, is taken for a cut-off copy of it. */
const MIN_FRAGMENT = 8;
const KEY_RUN = new RegExp(`[A-Za-z0-9_-]{${MIN_FRAGMENT},}`, "g");
/** viem's own cap on an answer (maxResponseBodySize), kept when the answer is read here first. */
const MAX_ANSWER_BYTES = 10 * 1024 * 1024;
/** A node's error carries a message and a little data; past this many values the rest is dropped. */
const MAX_ERROR_VALUES = 100_000;

/** A failure to get an answer from a node, in Sigil's words only (never a library's, which may quote the URL). */
export class NodeUnreachable extends Error {
  override name = "NodeUnreachable";
}

const decoded = (text: string) => {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
};

/** The spellings a piece of a URL may be quoted in: as the URL holds it, percent-decoded, percent-encoded. */
const spellingsOf = (text: string) => {
  const plain = decoded(text);
  return [text, plain, plain.replace(/\+/g, " "), encodeURIComponent(plain)];
};

/** Every piece of `raw` that may be a secret: user name, password (and their Basic authorization),
 * each path segment, the path with its query, the query, each query value, the fragment. Not the host:
 * no provider keys a node by its host name, and messages naming it say which node failed. */
function secretPiecesOf(raw: string): string[] {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    // The settings accept only URLs; anything else is redacted whole.
    return [raw];
  }
  const texts: string[] = [url.username, url.password, url.pathname + url.search, url.search.slice(1), url.hash.slice(1)];
  if (url.username || url.password) {
    const credentials = `${decoded(url.username)}:${decoded(url.password)}`;
    texts.push(credentials, Buffer.from(credentials, "utf8").toString("base64"));
  }
  texts.push(...url.pathname.split("/"));
  for (const pair of url.search.slice(1).split("&")) texts.push(pair, pair.slice(pair.indexOf("=") + 1));
  return texts.flatMap(spellingsOf).filter((piece) => piece.length >= MIN_PIECE);
}

const escapeRegExp = (text: string) => text.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");

/** The secrets of the configured node URLs, and their removal from what nodes say. */
export class NodeSecrets {
  private readonly pattern: RegExp | null;
  private readonly pieces: string[];

  constructor(urls: string[]) {
    this.pieces = [...new Set(urls.flatMap(secretPiecesOf).map((piece) => piece.toLowerCase()))].sort((a, b) => b.length - a.length);
    this.pattern = this.pieces.length ? new RegExp(this.pieces.map(escapeRegExp).join("|"), "gi") : null;
  }

  /** `text` with every secret piece, in any letter case, and every cut-off copy of one replaced by [redacted]. */
  redact(text: string): string {
    if (!this.pattern) return text;
    return text
      .replace(this.pattern, REDACTED)
      .replace(KEY_RUN, (run) => (this.pieces.some((piece) => piece.includes(run.toLowerCase())) ? REDACTED : run));
  }

  /** A copy of a JSON value (a node's error) with `redact` applied to every string and key in it; walked
   * without recursion, as a node's answer may nest as deep as it likes. */
  redactValue(value: unknown): unknown {
    if (typeof value === "string") return this.redact(value);
    if (typeof value !== "object" || value === null || !this.pattern) return value;
    const copy: object = Array.isArray(value) ? [] : {};
    const pending: Array<[source: object, target: object]> = [[value, copy]];
    let values = 0;
    while (pending.length > 0) {
      const [source, target] = pending.pop()!;
      for (const [key, item] of Object.entries(source)) {
        if (++values > MAX_ERROR_VALUES) return REDACTED;
        let kept: unknown = item;
        if (typeof item === "string") kept = this.redact(item);
        else if (typeof item === "object" && item !== null) {
          kept = Array.isArray(item) ? [] : {};
          pending.push([item, kept as object]);
        }
        // defineProperty: a key "__proto__" stays a key, as JSON.parse made it.
        Object.defineProperty(target, Array.isArray(source) ? key : this.redact(key), {
          value: kept,
          enumerable: true,
          writable: true,
          configurable: true,
        });
      }
    }
    return copy;
  }

  /**
   * A JSON-RPC answer's text with its errors redacted: the `error` member of each answer, or the whole
   * text when it is no JSON-RPC answer or came with an HTTP error status. A successful answer is
   * returned as it came.
   */
  redactAnswer(text: string, ok: boolean): string {
    if (!this.pattern || (ok && !text.includes('"error"'))) return text;
    let parsed: unknown;
    try {
      parsed = JSON.parse(text);
    } catch {
      return this.redact(text);
    }
    const answers = Array.isArray(parsed) ? parsed : [parsed];
    const erring = answers.filter((answer) => typeof answer === "object" && answer !== null && Object.hasOwn(answer, "error"));
    if (erring.length === 0) return ok ? text : JSON.stringify(this.redactValue(parsed));
    for (const answer of erring) (answer as { error: unknown }).error = this.redactValue((answer as { error: unknown }).error);
    return JSON.stringify(parsed);
  }
}

/** Where a request to a configured URL (a chain node, the SMS provider) goes: the URL without user
 * name and password, which travel as HTTP Basic authorization (as viem sends them; fetch refuses a URL
 * that holds them, with an error quoting it whole). */
export interface Endpoint {
  url: string;
  headers: { authorization?: string };
}

export function endpointOf(raw: string): Endpoint {
  const url = new URL(raw);
  if (!url.username && !url.password) return { url: raw, headers: {} };
  const credentials = `${decoded(url.username)}:${decoded(url.password)}`;
  url.username = "";
  url.password = "";
  return { url: url.href, headers: { authorization: `Basic ${Buffer.from(credentials, "utf8").toString("base64")}` } };
}

const isAbort = (error: unknown) => {
  const name = (error as { name?: unknown } | null)?.name;
  return name === "AbortError" || name === "TimeoutError";
};

/** Why no answer came, in Sigil's words: the system's error code when there is one (ECONNREFUSED). */
export function unreachableReason(error: unknown): string {
  const code = (error as { cause?: { code?: unknown } } | null)?.cause?.code ?? (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && /^[A-Z][A-Z0-9_]{1,40}$/.test(code) ? code : "no answer could be read";
}

/** An answer's text, read up to the cap. */
async function readCapped(response: Response): Promise<string> {
  const text = await bodyUpTo(response, MAX_ANSWER_BYTES);
  if (text === undefined) throw new NodeUnreachable(`the answer is larger than ${MAX_ANSWER_BYTES} bytes`);
  return text;
}

/** Statuses whose answers have no body (a Response with one cannot be made). */
const NO_BODY = new Set([101, 204, 205, 304]);

/**
 * A request to a node, for viem's HTTP transport (its `fetchFn`): sent to the configured URL whatever
 * stand-in viem was given, answered with the node's errors redacted; a failure to reach it is a
 * NodeUnreachable in Sigil's words (an abort, viem's deadline, is passed on as it is).
 */
export async function fetchFromNode(endpoint: Endpoint, init: RequestInit | undefined, secrets: NodeSecrets): Promise<Response> {
  const headers = new Headers(init?.headers);
  for (const [name, value] of Object.entries(endpoint.headers)) headers.set(name, value);
  let response: Response;
  let text: string;
  try {
    response = await fetch(endpoint.url, { ...init, headers });
    text = await readCapped(response);
  } catch (error) {
    if (isAbort(error) || error instanceof NodeUnreachable) throw error;
    throw new NodeUnreachable(unreachableReason(error));
  }
  const contentType = response.headers.get("content-type");
  return new Response(NO_BODY.has(response.status) ? null : secrets.redactAnswer(text, response.ok), {
    status: response.status,
    statusText: secrets.redact(response.statusText),
    headers: contentType ? { "content-type": contentType } : {},
  });
}
