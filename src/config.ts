// Every setting of a deployment (environment variables, and the flags that may stand in for some)
// declared once, as a value: its variable, its flag, its default, what it means and what it accepts.
// loadConfig reads them into one typed object and refuses, at start, every value a setting does not
// accept, naming the variable (and the flag) and what is expected. docs/configuration.md is generated
// from the same declarations (`npm run docs`) and checked by a test, so the docs cannot drift.
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import addressparser from "nodemailer/lib/addressparser";
import ipaddr from "ipaddr.js";
import { parseMasterKey, type MasterKeyConfig } from "./crypto/master-key.js";
import { SECP256K1_CHOICES, type Secp256k1Choice } from "./crypto/secp256k1.js";
import { defaultSignatureThreads } from "./crypto/signature-threads.js";
import { checkDatabaseUrl } from "./store/database-url.js";

/** Each organization's transparency log (docs/audit-log.md). */
export interface TransparencyLogConfig {
  /** The signed notes' key name and the origins' first part; null: derived from the log key (`sigil-<hash>`). */
  name: string | null;
  /** How often checkpoints are signed (ms); 0: only on demand. */
  checkpointMs: number;
}

export interface Config {
  transparencyLog: TransparencyLogConfig;
  host: string;
  port: number;
  /** Server processes `sigil serve` runs on the one port (node:cluster); 1 runs the server in the
   * command's own process. `auto` is read as the machine's available parallelism on PostgreSQL, 1 on SQLite. */
  workers: number;
  /** On SIGTERM or SIGINT, how long /ready answers 503 while everything else is still served, before
   * the server stops accepting connections (docs/running.md#readiness-and-shutdown). */
  shutdownDelayMs: number;
  /** Directory of the embedded SQLite database and the default master key file. */
  dataDir: string;
  /** What named the data directory, for messages that point at it: the flag, the variable, or neither (./data). */
  dataDirFrom: "--data-dir" | "SIGIL_DATA_DIR" | "default";
  /** postgres://… or postgresql://… to keep all state in PostgreSQL instead of SQLite. */
  databaseUrl: string | null;
  /** How many connections to PostgreSQL a server process keeps at most. */
  databasePoolSize: number;
  databasePreparedStatements: boolean;
  /** A request's timestampMs must lie within this many milliseconds of the server's clock, either side. */
  timestampWindowMs: number;
  /** Largest accepted request body, in bytes. */
  bodyLimitBytes: number;
  http: HttpLimits;
  /** When set, an API key (session keys included) may stamp queries only this long after it was
   * created, and a read-only session answer them only this long after it was issued: query bodies
   * carry no timestamp, so this bounds how long a captured query can be replayed. Null: no limit. */
  queryCredentialMaxAgeMs: number | null;
  webauthn: {
    /** Accepted relying-party ids for passkey stamps; empty accepts any. */
    rpIds: string[];
    /** Accepted origins for passkey stamps and registrations; empty accepts any. */
    origins: string[];
  };
  logLevel: string;
  /** The key every stored secret is sealed under (see crypto/master-key.ts). */
  masterKey: MasterKeyConfig;
  /** Worker threads that compute signatures; 0 computes them on the event loop. */
  signatureThreads: number;
  /** The secp256k1 library to use (docs/cryptography.md); null: the fastest that loads. */
  secp256k1: Secp256k1Choice | null;
  webhooks: WebhookConfig;
  /** How long an import target from init_import_* stays usable, in milliseconds. */
  importTargetTtlMs: number;
  sessions: SessionConfig;
  messages: MessagingConfig;
  otp: OtpConfig;
  /** OIDC issuers whose identity tokens are accepted (exact `iss` values); no other is contacted. */
  oidcAllowedIssuers: string[];
  chains: ChainConfig;
  invitations: InvitationConfig;
  /** Where oauth2_authenticate exchanges codes and asks who the user is, by provider. */
  oauth2Providers: Oauth2ProviderConfig;
  /** How many requests each credential and organization may make (docs/rate-limits.md); null: none counted. */
  rateLimits: RateLimitConfig | null;
  /** Where GET /metrics is served (docs/metrics.md). */
  metrics: MetricsConfig;
}

/** SIGIL_METRICS: on the main listener, not at all, or on a listener of its own. */
export type MetricsConfig = { serve: "main" } | { serve: "off" } | { serve: "listener"; host: string; port: number };

/** A token bucket: it holds `burst` requests and refills at `perSecond`. */
export interface Rate {
  perSecond: number;
  burst: number;
}

/** The buckets of one class of requests; a null bucket is not counted. */
export interface RateLevels {
  /** Each API key (session keys included), passkey, or the credential a read-only session was opened with. */
  key: Rate | null;
  /** Each sub-organization: every credential of one end user together. */
  subOrganization: Rate | null;
  /** Each top-level organization, its sub-organizations counting toward it. */
  organization: Rate | null;
}

export interface RateLimitConfig {
  /** Activities; votes are counted in buckets of their own at the same rates. */
  activities: RateLevels;
  queries: RateLevels;
  /** Per organization and class: what its root quorum's requests are counted against once the
   * organization's own bucket is spent, so that it can still act (delete a runaway key). */
  rootReserve: Rate | null;
}

/** The endpoints of the OAuth 2.0 providers oauth2_authenticate talks to (docs/oauth2-providers.md):
 * no other host is contacted for them. */
export interface Oauth2ProviderConfig {
  x: Oauth2Endpoints;
  discord: Oauth2Endpoints;
}

export interface Oauth2Endpoints {
  /** Authorization codes are exchanged for access tokens here. */
  tokenUrl: string;
  /** The access token is shown here to learn the user's id. */
  userInfoUrl: string;
}

/** What invitation emails are built on (docs/invitations.md). */
export interface InvitationConfig {
  /** The deployment's base URL as its users reach it, without a trailing slash; null: unset, and
   * invitations are refused (their link would point nowhere). */
  publicUrl: string | null;
  /** How long an invitation's link may be used. */
  lifetimeMs: number;
}

/** The chain nodes transactions are sent to and tracked on (docs/sending-transactions.md). */
export interface ChainConfig {
  /** JSON-RPC endpoint by CAIP-2 chain id (`eip155:1`); a chain not listed cannot be sent to. */
  rpcUrls: Record<string, string>;
  /** How often a sent transaction is looked at again (broadcast, receipt) while it is not final. */
  pollMs: number;
  /** One JSON-RPC request may take this long. */
  timeoutMs: number;
  /** How long a send whose nonce is ahead of the chain's waits for the nonces before it, then FAILED. */
  nonceWaitMs: number;
  /** The tokens whose balances are reported, by CAIP-2 chain id (SIGIL_CHAIN_ASSETS), and native
   * asset metadata overriding the built-in one; empty when the setting is unset. */
  assets: Record<string, ConfiguredAsset[]>;
}

/** One asset of SIGIL_CHAIN_ASSETS (docs/chain-assets.md). */
export interface ConfiguredAsset {
  /** `<caip2>/erc20:<contract>`, `<caip2>/token:<mint>` or `<caip2>/slip44:<coin type>` (the native asset). */
  caip19: string;
  symbol: string;
  name: string;
  decimals: number;
  logoUrl?: string;
  stable?: boolean;
}

/** How long a connection may take and how many may be open: slow or idle clients must not hold the
 * server. A timeout of 0 turns that timeout off; a maximum of 0 removes that maximum. */
export interface HttpLimits {
  /** The request line and headers must arrive within this long of the request's first byte (or of
   * the connection opening); else 408 and the connection is closed. */
  headersTimeoutMs: number;
  /** The whole request, headers and body, must arrive within this long; else 408 and close. The
   * time the server takes to answer does not count. */
  requestTimeoutMs: number;
  /** A kept-alive connection with no request under way is closed after this long. */
  keepAliveTimeoutMs: number;
  /** Connections open at once, overall; further ones are closed as they arrive. */
  maxConnections: number;
  /** Connections open at once from one remote address; further ones from it are closed as they arrive. */
  maxConnectionsPerAddress: number;
  /** CIDR blocks of the reverse proxies whose X-Forwarded-For is believed; empty: none is. */
  trustedProxies: string[];
}

export interface MessagingConfig {
  /** smtp://… or smtps://… of the relay emails go to; null keeps emails in the local outbox. */
  smtpUrl: string | null;
  /** The From of emails that name no sender. */
  smtpFrom: string;
  /** The HTTP endpoint SMS are POSTed to as JSON { to, body }; null keeps them in the local outbox. */
  smsUrl: string | null;
  /** Sent as "Authorization: Bearer <token>" to the SMS endpoint, if set. */
  smsToken: string | null;
  pollMs: number;
  retryBaseMs: number;
  maxAttempts: number;
  timeoutMs: number;
}

export interface OtpConfig {
  /** A code's validity when the request names none (seconds). */
  defaultSeconds: number;
  /** Wrong codes tried before a code is burnt. */
  maxAttempts: number;
  /** A verification token's validity when verify_otp names none (seconds). */
  verificationTokenSeconds: number;
  /** Codes one contact may be sent in ten minutes by one requesting organization (the own requests
   * of one top-level organization's sub-organizations together: twice that). */
  perContactLimit: number;
  /** Codes a top-level organization and all its sub-organizations together may have sent per window. */
  perOrganizationLimit: number;
  /** Codes one credential (API key or passkey) of a top-level organization may have sent per window. */
  perCredentialLimit: number;
  /** Codes the credentials of one sub-organization (an end user's keys, passkeys, sessions) together
   * may have sent per window. */
  perEndUserLimit: number;
  /** The window of the organization, credential and end-user budgets (seconds). */
  sendWindowSeconds: number;
  /** Domains (and their subdomains) whose https links and logos emails may carry, and whose
   * addresses may be their sender or reply-to; empty allows none of these customizations. */
  emailAllowedDomains: string[];
}

export interface SessionConfig {
  /** A login's validity when the request names none (seconds). */
  defaultSeconds: number;
  /** The longest validity a login may ask for (seconds). */
  maxSeconds: number;
  /** A read-only session's validity (seconds). */
  readOnlySeconds: number;
}

export interface WebhookConfig {
  /** Let webhook URLs reach loopback / private addresses (refused by default). */
  allowLoopback: boolean;
  allowPrivate: boolean;
  /** The first retry waits this long; each further one twice as long (capped at an hour). */
  retryBaseMs: number;
  /** A delivery is given up after this many attempts. */
  maxAttempts: number;
  /** One attempt may take this long (connect, send, answer) before it counts as failed. */
  timeoutMs: number;
  /** Deliveries one server process sends at a time. */
  concurrency: number;
  /** How often each server looks for deliveries (others' and retries) besides its own new ones. */
  pollMs: number;
}

/** Flags that stand in for a setting's variable (they win over it); see `flag` in the catalog below. */
export interface ConfigFlags {
  host?: string;
  port?: string | number;
  dataDir?: string;
  workers?: string | number;
}

// ---- kinds of value ----------------------------------------------------------------------------

/** A value a setting does not accept. The message names the variable (and the flag it came from) and
 * what is expected; it repeats the value only when the value cannot hold a secret. */
export class ConfigError extends Error {
  override name = "ConfigError";
}

/** What a kind of value gets to know about the text it parses. */
export interface Reading {
  /** The variable, or "--flag (VARIABLE)" when the text came from a flag. */
  name: string;
  /** The value is, or may hold, a secret: it must not appear in a message. */
  secret: boolean;
  /** Throws the ConfigError for this text, with what is wrong when more can be said than `accepts`;
   * `quote: false` when the detail already shows the part of the text that is wrong. */
  refuse(detail?: string, options?: { quote: boolean }): never;
}

/** How a setting's text becomes its value, and what it accepts: said once, for messages and for the docs. */
export interface Kind<T> {
  /** What is accepted, as the words after "must be" (Markdown: docs/configuration.md shows it). */
  accepts: string;
  parse(raw: string, reading: Reading): T;
}

/** The longest a Node.js timer waits (longer ones fire at once): the ceiling of durations in milliseconds. */
export const TIMER_MAX_MS = 2 ** 31 - 1;
/** A hundred years: the ceiling of durations in seconds, far beyond any sensible setting, well inside what a date can hold. */
export const DURATION_MAX_SECONDS = 100 * 365.25 * 24 * 3600;

function integer(min: number, max: number = Number.MAX_SAFE_INTEGER): Kind<number> {
  return {
    accepts: max === Number.MAX_SAFE_INTEGER ? `a whole number, ${min} or more` : `a whole number from ${min} to ${max}`,
    parse(raw, reading) {
      // Read with Number(), as before the catalog existed (so " 5 ", 1e3 and 0x10 are still accepted); a
      // blank text is not 0.
      const value = raw.trim() === "" ? NaN : Number(raw);
      if (!Number.isSafeInteger(value) || value < min || value > max) reading.refuse();
      return value;
    },
  };
}

/** The most server processes `sigil serve --workers` starts. Each holds a database pool (10 PostgreSQL
 * connections), signature threads and its own heap: far more than the cores of any one machine only
 * costs memory and connections. */
export const MAX_WORKERS = 64;

/** A number of workers, or `auto` (resolved in loadConfig, which knows the database). */
const workerCount: Kind<number | "auto"> = {
  accepts: `a whole number from 1 to ${MAX_WORKERS}, or \`auto\` (one per available core on PostgreSQL, 1 on SQLite)`,
  parse(raw, reading) {
    return raw.trim() === "auto" ? "auto" : integer(1, MAX_WORKERS).parse(raw, reading);
  },
};

const milliseconds = (min: number, max = TIMER_MAX_MS) => integer(min, max);
const seconds = (min: number) => integer(min, DURATION_MAX_SECONDS);

const boolean: Kind<boolean> = {
  accepts: "`true` or `false` (`1` and `0` are accepted too)",
  parse: (raw, reading) => (raw === "true" || raw === "1" ? true : raw === "false" || raw === "0" ? false : reading.refuse()),
};

/** The most requests a second a bucket may refill at, and hold: beyond any one server's capacity. */
const RATE_MAX = 1_000_000;

/**
 * A token bucket as `<rate>/<burst>` (requests a second, requests held), or `off`. Read as text and written back in one
 * spelling (`0.50/3` is `0.5/3`); loadConfig turns it into a Rate.
 */
const rate: Kind<string> = {
  accepts:
    "`<rate>/<burst>` such as `10/20`: the requests a second the bucket refills with (above 0; `0.5` is one every 2 s) and the " +
    "requests it holds (a whole number, 1 or more), each at most 1,000,000; or `off` (not counted)",
  parse(raw, reading) {
    const text = raw.trim();
    if (text.toLowerCase() === "off") return "off";
    const match = /^(\d{1,7}(?:\.\d{1,6})?)\s*\/\s*(\d{1,7})$/.exec(text);
    const perSecond = Number(match?.[1]);
    const burst = Number(match?.[2]);
    if (!match || !(perSecond > 0) || perSecond > RATE_MAX || burst < 1 || burst > RATE_MAX) return reading.refuse();
    return `${perSecond}/${burst}`;
  },
};

/** A rate setting's value as loadConfig hands it on. */
function rateOf(text: string): Rate | null {
  if (text === "off") return null;
  const [perSecond, burst] = text.split("/").map(Number) as [number, number];
  return { perSecond, burst };
}

/** pino's levels, and `silent`; pino reads them in any case. */
export const LOG_LEVELS = ["fatal", "error", "warn", "info", "debug", "trace", "silent"];

const logLevel: Kind<string> = {
  accepts: `one of ${LOG_LEVELS.map((level) => `\`${level}\``).join(", ")} (any case)`,
  parse(raw, reading) {
    const level = raw.toLowerCase();
    return LOG_LEVELS.includes(level) ? level : reading.refuse();
  },
};

const secp256k1Choice: Kind<Secp256k1Choice> = {
  accepts: `one of ${SECP256K1_CHOICES.map((choice) => `\`${choice}\``).join(", ")}`,
  parse: (raw, reading) => {
    const choice = raw.trim().toLowerCase();
    return (SECP256K1_CHOICES as readonly string[]).includes(choice) ? (choice as Secp256k1Choice) : reading.refuse();
  },
};

/** A CIDR block (a bare address is read as the block of that one address). */
const cidrBlock: Kind<string> = {
  accepts: "an IPv4 or IPv6 address, or a CIDR block such as `10.0.0.0/8` or `fd00::/8`",
  parse(raw, reading) {
    if (ipaddr.isValid(raw) && !raw.includes("%") && (ipaddr.IPv6.isValid(raw) || ipaddr.IPv4.isValidFourPartDecimal(raw))) return raw;
    const [address = "", prefix] = raw.split("/");
    // A prefix length with a leading zero (/08) is refused as IP allowlist rules refuse it: not every reader takes it as decimal.
    if (
      prefix !== undefined &&
      /^(0|[1-9]\d{0,2})$/.test(prefix) &&
      (ipaddr.IPv4.isValidFourPartDecimal(address) || ipaddr.IPv6.isValid(address))
    ) {
      // A proxy block of every address would let any peer write the client's address into X-Forwarded-For.
      if (Number(prefix) === 0) reading.refuse("a /0 block trusts every peer to name the client: list the proxies' own addresses");
      try {
        ipaddr.parseCIDR(raw);
        return raw;
      } catch {
        // refused below
      }
    }
    return reading.refuse();
  },
};

const HOSTNAME = /^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$/;

const listenAddress: Kind<string> = {
  accepts: "an IP address or a host name (`0.0.0.0` or `::` listens on every address)",
  parse: (raw, reading) => (net.isIP(raw) || HOSTNAME.test(raw.toLowerCase().replace(/\.$/, "")) ? raw : reading.refuse()),
};

/** `on`, `off`, or the HOST:PORT of a listener of its own (an IPv6 address in brackets). Read as text and
 * written back in one spelling (`ON` is `on`); loadConfig turns it into a MetricsConfig (metricsOf). */
const metricsPlace: Kind<string> = {
  accepts:
    "`on` (served at `/metrics` on the main listener), `off`, or `HOST:PORT` for a listener of its own (`127.0.0.1:9464`, `[::1]:9464`): " +
    "an IP address (IPv6 in brackets) or a host name, and a port from 1 to 65535",
  parse(raw, reading) {
    const text = raw.trim();
    if (text.toLowerCase() === "on" || text.toLowerCase() === "off") return text.toLowerCase();
    const match = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(text);
    if (!match) return reading.refuse();
    const host = match[1] ?? match[2]!;
    if (match[1] !== undefined && !net.isIPv6(host)) reading.refuse("only an IPv6 address is written in brackets");
    if (match[1] === undefined && net.isIPv6(host)) reading.refuse("write an IPv6 address in brackets: [::1]:9464");
    const port = Number(match[3]);
    if (port < 1 || port > 65_535) reading.refuse("the port must be from 1 to 65535");
    listenAddress.parse(host, reading);
    return text;
  },
};

/** SIGIL_METRICS's value as loadConfig hands it on. */
function metricsOf(text: string): MetricsConfig {
  if (text === "on") return { serve: "main" };
  if (text === "off") return { serve: "off" };
  const at = text.lastIndexOf(":");
  return { serve: "listener", host: text.slice(0, at).replace(/^\[(.*)\]$/, "$1"), port: Number(text.slice(at + 1)) };
}

/** A domain as browsers and mail hosts compare it: lower case, ASCII. */
function domain(leadingDot: boolean): Kind<string> {
  return {
    accepts: "a domain name such as `example.com`, in any case (an internationalized one in its `xn--` form)",
    parse(raw, reading) {
      const name = leadingDot ? raw.toLowerCase().replace(/^\./, "") : raw.toLowerCase();
      return HOSTNAME.test(name) ? name : reading.refuse();
    },
  };
}

/** A path, taken as written; relative ones are resolved from the working directory. */
const filePath = (what: string): Kind<string> => ({ accepts: what, parse: (raw) => raw });

/** An absolute URL of one of these protocols, naming a host. */
function url(protocols: string[], extra?: { accepts: string; check(url: URL): string | null }): Kind<string> {
  const written = protocols.map((protocol) => `\`${protocol}//\``).join(" or ");
  return {
    accepts: `an ${written} URL${extra ? `, ${extra.accepts}` : ""}`,
    parse(raw, reading) {
      let parsed: URL;
      try {
        // Without "//" a URL parser reads "host:25" as a scheme and "smtp:host" as a path.
        if (!raw.includes("://")) throw new Error();
        parsed = new URL(raw);
      } catch {
        return reading.refuse("it is not a URL");
      }
      if (!protocols.includes(parsed.protocol)) reading.refuse(`not ${parsed.protocol}//`);
      if (!parsed.hostname) reading.refuse("it names no host");
      const problem = extra?.check(parsed);
      if (problem) reading.refuse(problem);
      return raw;
    },
  };
}

const origin: Kind<string> = {
  accepts:
    "an origin as browsers write it: `https://host` or `https://host:port` (lower case, no path, no trailing slash), another " +
    "scheme's `scheme://host` (a browser extension's), or `android:apk-key-hash:…`",
  parse(raw, reading) {
    // Passkey stamps carry the origin as the browser serializes it, compared exactly: anything else never matches.
    if (/^android:apk-key-hash:[A-Za-z0-9_-]+$/.test(raw)) return raw;
    let parsed: URL | null = null;
    try {
      parsed = new URL(raw);
    } catch {
      // refused below
    }
    if (parsed && (parsed.protocol === "https:" || parsed.protocol === "http:")) {
      if (parsed.origin === raw) return raw;
      reading.refuse(`write it as ${parsed.origin}`);
    }
    // Other browser origins (a browser extension's, for one) have a scheme, a host and nothing else.
    return /^[a-z][a-z0-9+.-]*:\/\/[^/?#\s]+$/.test(raw) ? raw : reading.refuse();
  },
};

const masterKey: Kind<string> = {
  accepts: "a 32-byte key: 64 hex digits or base64",
  parse(raw, reading) {
    try {
      parseMasterKey(raw, reading.name);
    } catch {
      reading.refuse();
    }
    return raw;
  },
};

/** A PKCS#11 label (CKA_LABEL, a token's label): compared exactly as written; a token label fills at most 32 bytes. */
function pkcs11Label(maxBytes: number): Kind<string> {
  return {
    accepts: `text of 1 to ${maxBytes} bytes (UTF-8) with no space at either end, as the token shows it`,
    parse: (raw, reading) => (raw.trim() === raw && Buffer.byteLength(raw, "utf8") <= maxBytes ? raw : reading.refuse()),
  };
}

/** The deployment's own base URL: links in emails are built on it, so it must be exactly a base to append a path to. */
const publicUrl = url(["https:", "http:"], {
  accepts: "with no query, fragment or user name (a path is allowed: `https://wallet.example.com/sigil`)",
  check: (base) =>
    base.search || base.hash ? "a base URL has no query or fragment" : base.username || base.password ? "no user name or password" : null,
});

/** An OAuth 2.0 provider's endpoint: client secrets and access tokens are sent to it, so never with a fragment or credentials. */
const providerEndpoint = url(["https:", "http:"], {
  accepts: "with no fragment, user name or password",
  check: (endpoint) =>
    endpoint.hash ? "an endpoint has no fragment" : endpoint.username || endpoint.password ? "no user name or password" : null,
});

const databaseUrl: Kind<string> = {
  accepts: "a `postgres://` or `postgresql://` URL",
  parse(raw, reading) {
    try {
      checkDatabaseUrl(raw, reading.name);
    } catch (error) {
      // Its own message: it shows the URL with the password masked, and what to do for SQLite.
      throw new ConfigError((error as Error).message);
    }
    return raw;
  },
};

const mailbox: Kind<string> = {
  accepts: "one email address, with or without a name: `Name <address@example.com>`",
  parse(raw, reading) {
    const parsed = addressparser(raw, { flatten: true });
    return parsed.length === 1 && /^[^@\s]+@[^@\s]+$/.test(parsed[0]!.address) ? raw : reading.refuse();
  },
};

const headerValue: Kind<string> = {
  accepts: "printable ASCII with no space at either end (it is sent in an HTTP header)",
  parse: (raw, reading) => (/^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/.test(raw) ? raw : reading.refuse()),
};

/** Comma-separated items, each of one kind; spaces around items and empty items are ignored. */
function list<T>(item: Kind<T>): Kind<T[]> {
  return {
    accepts: `a comma-separated list, each item ${item.accepts}`,
    parse(raw, reading) {
      const items = raw
        .split(",")
        .map((text) => text.trim())
        .filter(Boolean);
      return items.map((text, i) =>
        item.parse(text, {
          name: `${reading.name}[${i}]`,
          secret: reading.secret,
          refuse: (detail) => {
            const which = `item ${i + 1}${reading.secret ? "" : ` ${JSON.stringify(text)}`}`;
            return reading.refuse(`${which} is not${detail ? ` (${detail})` : ""}`, { quote: false });
          },
        }),
      );
    },
  };
}

/** A CAIP-2 chain id: namespace:reference (https://chainagnostic.org/CAIPs/caip-2). */
export const CAIP2 = /^[-a-z0-9]{3,8}:[-_a-zA-Z0-9]{1,32}$/;

/** Whether an `eip155:` chain id names its chain as clients and nodes do: a decimal number without
 * leading zeros, within JavaScript's safe integers (the reference `eth_chainId` is compared with). */
export function isEvmChainId(caip2: string): boolean {
  const match = /^eip155:([1-9][0-9]{0,15})$/.exec(caip2);
  return match !== null && Number.isSafeInteger(Number(match[1]));
}

/**
 * Solana's clusters as the API names them: CAIP-2 takes the first 32 characters of the cluster's
 * genesis hash; the API also accepts the whole hash and the human-readable aliases, and normalizes them.
 */
export const SOLANA_CLUSTERS: Record<string, { genesisHash: string; aliases: string[] }> = {
  "solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp": { genesisHash: "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d", aliases: ["solana:mainnet"] },
  "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1": { genesisHash: "EtWTRABZaYq6iMfeYKouRu166VU2xqa1wcaWoxPkrZBG", aliases: ["solana:devnet"] },
};

/** A CAIP-2 chain id as Sigil keys it: a Solana alias or whole genesis hash becomes `solana:<first 32 characters>`. */
export function canonicalCaip2(caip2: string): string {
  for (const [canonical, { genesisHash, aliases }] of Object.entries(SOLANA_CLUSTERS))
    if (aliases.includes(caip2) || caip2 === `solana:${genesisHash}`) return canonical;
  const solana = /^solana:([1-9A-HJ-NP-Za-km-z]{33,44})$/.exec(caip2);
  return solana ? `solana:${solana[1]!.slice(0, 32)}` : caip2;
}

/** Comma-separated `<caip2>=<url>` pairs: one JSON-RPC endpoint per chain. */
const chainEndpoints: Kind<Record<string, string>> = {
  accepts:
    "a comma-separated list of `<caip2>=<url>` pairs, each a CAIP-2 chain id (`eip155:1`) and an `http://` or `https://` URL, " +
    "each chain named once",
  parse(raw, reading) {
    const endpoints: Record<string, string> = {};
    const endpoint = url(["http:", "https:"]);
    raw
      .split(",")
      .map((text) => text.trim())
      .filter(Boolean)
      .forEach((pair, i) => {
        const at = pair.indexOf("=");
        const chain = canonicalCaip2(at > 0 ? pair.slice(0, at).trim() : "");
        // The chain id is never a secret; the URL may carry an API key, so it is never repeated.
        if (!CAIP2.test(chain)) reading.refuse(`item ${i + 1} does not start with a CAIP-2 chain id and "="`, { quote: false });
        if (chain.startsWith("eip155:") && !isEvmChainId(chain))
          reading.refuse(`${chain} is not an EVM chain id (eip155: and the chain id in decimal, without leading zeros)`, { quote: false });
        if (Object.hasOwn(endpoints, chain)) reading.refuse(`${chain} is named twice`, { quote: false });
        endpoints[chain] = endpoint.parse(pair.slice(at + 1).trim(), {
          name: `${reading.name}[${chain}]`,
          secret: true,
          refuse: (detail) =>
            reading.refuse(`the URL of ${chain} is not an http:// or https:// URL${detail ? ` (${detail})` : ""}`, { quote: false }),
        });
      });
    return endpoints;
  },
};

const BASE58 = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/;

/**
 * Where a CAIP-19 asset id may point, per chain namespace: an ERC-20 contract or a native coin type
 * (eip155), an SPL mint or the native coin type (solana).
 */
const ASSET_REFERENCES: Record<string, RegExp> = {
  eip155: /^(erc20:0x[0-9a-fA-F]{40}|slip44:[0-9]{1,10})$/,
  solana: new RegExp(`^(token:${BASE58.source.slice(1, -1)}|slip44:[0-9]{1,10})$`),
};

/** The JSON file of SIGIL_CHAIN_ASSETS, read and checked at start. */
const chainAssets: Kind<Record<string, ConfiguredAsset[]>> = {
  accepts:
    "the path of a JSON file: an object whose keys are CAIP-2 chain ids and whose values are lists of assets " +
    "`{ caip19, symbol, name, decimals }` (optionally `logoUrl`, `stable`)",
  parse(raw, reading) {
    let text: string;
    try {
      text = fs.readFileSync(path.resolve(raw), "utf8");
    } catch (error) {
      return reading.refuse(`it cannot be read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (error) {
      return reading.refuse(`it is not JSON: ${(error as Error).message}`);
    }
    if (typeof json !== "object" || json === null || Array.isArray(json)) return reading.refuse("its JSON is not an object");
    const catalog: Record<string, ConfiguredAsset[]> = {};
    const seen = new Set<string>();
    for (const [key, list] of Object.entries(json)) {
      const caip2 = canonicalCaip2(key);
      const namespace = caip2.split(":")[0]!;
      if (!CAIP2.test(caip2) || !ASSET_REFERENCES[namespace])
        reading.refuse(`${JSON.stringify(key)} is not an eip155 or solana CAIP-2 chain id`, { quote: false });
      if (namespace === "eip155" && !isEvmChainId(caip2))
        reading.refuse(`${caip2} is not an EVM chain id (eip155: and the chain id in decimal, without leading zeros)`, { quote: false });
      if (catalog[caip2]) reading.refuse(`${caip2} is listed twice`, { quote: false });
      if (!Array.isArray(list)) reading.refuse(`the value of ${key} is not a list of assets`, { quote: false });
      catalog[caip2] = (list as unknown[]).map((item, i) => {
        const where = `${key}[${i}]`;
        const refuse = (why: string) => reading.refuse(`${where} ${why}`, { quote: false });
        if (typeof item !== "object" || item === null || Array.isArray(item)) return refuse("is not an object");
        const asset = item as Record<string, unknown>;
        const unknown = Object.keys(asset).filter((k) => !["caip19", "symbol", "name", "decimals", "logoUrl", "stable"].includes(k));
        if (unknown.length) refuse(`has fields no asset has: ${unknown.join(", ")}`);
        const { caip19, symbol, name, decimals, logoUrl, stable } = asset;
        if (typeof caip19 !== "string") return refuse("has no caip19");
        const slash = caip19.indexOf("/");
        if (slash < 0 || canonicalCaip2(caip19.slice(0, slash)) !== caip2 || !ASSET_REFERENCES[namespace]!.test(caip19.slice(slash + 1)))
          refuse(
            `caip19 ${JSON.stringify(caip19)} is not an asset of ${caip2} (${namespace === "eip155" ? "erc20:0x<contract> or slip44:<coin type>" : "token:<mint> or slip44:<coin type>"} after "${caip2}/")`,
          );
        const id = `${caip2}/${caip19.slice(slash + 1)}`;
        if (seen.has(id.toLowerCase())) refuse(`repeats ${id}`);
        seen.add(id.toLowerCase());
        if (typeof symbol !== "string" || !/^\S.{0,31}$/.test(symbol)) refuse("needs a symbol of 1 to 32 characters");
        if (typeof name !== "string" || name.trim() === "" || name.length > 100) refuse("needs a name of 1 to 100 characters");
        if (typeof decimals !== "number" || !Number.isInteger(decimals) || decimals < 0 || decimals > 255)
          refuse("needs decimals, a whole number from 0 to 255");
        if (logoUrl !== undefined && (typeof logoUrl !== "string" || !/^https:\/\/\S+$/.test(logoUrl)))
          refuse("has a logoUrl that is not an https:// URL");
        if (stable !== undefined && typeof stable !== "boolean") refuse("has a stable that is not true or false");
        return {
          caip19: id,
          symbol: symbol as string,
          name: name as string,
          decimals: decimals as number,
          ...(logoUrl !== undefined ? { logoUrl: logoUrl as string } : {}),
          ...(stable !== undefined ? { stable: stable as boolean } : {}),
        };
      });
      if (catalog[caip2]!.filter((a) => a.caip19.includes("/slip44:")).length > 1)
        reading.refuse(`${key} lists more than one native asset (slip44)`, { quote: false });
    }
    return catalog;
  },
};

// ---- the catalog -------------------------------------------------------------------------------

/** One setting. `T` is what its kind reads; `D`, its value when unset (null: derived in loadConfig, or none). */
export interface Setting<T, D extends T | null = T> {
  variable: `SIGIL_${string}`;
  /** The flag that sets it instead, and wins over the variable: `sigil serve`'s (`--data-dir`: every command's). */
  flag?: `--${string}`;
  /** The heading it is listed under in docs/configuration.md. */
  group: string;
  kind: Kind<T>;
  /** The value when the variable is unset or empty. */
  default: D;
  /** How the docs show the default, where the value alone does not say it. */
  defaultText?: string;
  /** What it does, for docs/configuration.md (Markdown). */
  meaning: string;
  /** The value is, or may hold, a secret: no message repeats it. */
  secret?: boolean;
  /** An empty value is refused rather than taken as unset, with this advice: it would not mean the default. */
  ifEmpty?: string;
}

const setting = <T, D extends T | null = T>(declaration: Setting<T, D>) => declaration;

const SERVER = "Server";
const KEYS = "Master key and key imports";
const REQUESTS = "Requests and connections";
const LOGINS = "Passkeys, OIDC and sessions";
const OTP = "One-time passwords";
const MESSAGES = "Emails and SMS";
const WEBHOOKS = "Webhooks";
const CHAINS = "Chain nodes";
const INVITATIONS = "Invitations";
const RATE_LIMITS = "Rate limits";
const AUDIT_LOG = "Transparency log";

/** A note's key name (C2SP signed-note): printable, without spaces or `+`. */
const logName: Kind<string> = {
  accepts: "a name of 1 to 200 printable ASCII characters without spaces or `+`, such as `sigil.example.com`",
  parse: (raw, reading) => (/^[!-*,-~]{1,200}$/.test(raw) ? raw : reading.refuse()),
};

/**
 * Every setting, in the order docs/configuration.md lists them. To add one: declare it here (a test fails
 * on any SIGIL_ name in src/ that is not declared), give it its place in loadConfig's object, and run
 * `npm run docs`.
 */
export const settings = {
  host: setting({
    variable: "SIGIL_HOST",
    flag: "--host",
    group: SERVER,
    kind: listenAddress,
    default: "127.0.0.1",
    meaning: "address to listen on",
    // Before the catalog an empty SIGIL_HOST listened on every address: refused, so that none does by accident.
    ifEmpty: "unset it to listen on 127.0.0.1, or write 0.0.0.0 or :: to listen on every address",
  }),
  port: setting({
    variable: "SIGIL_PORT",
    flag: "--port",
    group: SERVER,
    kind: integer(1, 65_535),
    default: 8080,
    meaning: "port to listen on",
  }),
  workers: setting({
    variable: "SIGIL_WORKERS",
    flag: "--workers",
    group: SERVER,
    kind: workerCount,
    default: 1,
    meaning:
      "server processes `sigil serve` runs on the one port, sharing the database (PostgreSQL only); with more than one, a primary " +
      "process prepares the deployment and keeps them running. Each has its own connection limits and database pool: see " +
      "[Several processes](running.md#several-processes)",
  }),
  shutdownDelayMs: setting({
    variable: "SIGIL_SHUTDOWN_DELAY_MS",
    group: SERVER,
    kind: milliseconds(0),
    default: 0,
    meaning:
      "on SIGTERM or SIGINT, how long `/ready` answers 503 while every other request is still served, before the server stops " +
      "accepting connections and finishes the requests in flight: set it above your load balancer's probe interval times its failure " +
      "threshold, so it stops sending traffic first ([Readiness and shutdown](running.md#readiness-and-shutdown))",
  }),
  dataDir: setting({
    variable: "SIGIL_DATA_DIR",
    flag: "--data-dir",
    group: SERVER,
    kind: filePath("a directory (relative ones from the working directory)"),
    default: "data",
    defaultText: "`./data`",
    meaning: "directory of the embedded SQLite database (`sigil.db`) and of the default master key file",
    // Before the catalog an empty SIGIL_DATA_DIR meant the working directory: refused, so that no database moves by accident.
    ifEmpty: "unset it for ./data, or write . for the working directory",
  }),
  databaseUrl: setting({
    variable: "SIGIL_DATABASE_URL",
    group: SERVER,
    kind: databaseUrl,
    default: null,
    defaultText: "*(unset: SQLite)*",
    meaning: "`postgres://user@host:5432/db` keeps all state in PostgreSQL; the database must exist (Sigil makes its tables)",
    secret: true,
  }),
  databasePoolSize: setting({
    variable: "SIGIL_DATABASE_POOL_SIZE",
    group: SERVER,
    // Each connection is a PostgreSQL backend process: a few per core of the database server serve
    // best (docs/benchmarks.md#prepared-statements-on-postgresql).
    kind: integer(1, 1000),
    default: 10,
    meaning:
      "connections to PostgreSQL each server process keeps at most for its transactions, besides one for its batches of signatures and one for its reads (unused with SQLite); more than the database server's cores can keep busy only queue in it",
  }),
  databasePreparedStatements: setting({
    variable: "SIGIL_DATABASE_PREPARED_STATEMENTS",
    group: SERVER,
    // Named prepared statements live in a PostgreSQL session: a pooler that hands each transaction
    // to any server connection (PgBouncer in transaction mode before 1.21, or without
    // max_prepared_statements) loses them between transactions.
    kind: boolean,
    default: true,
    meaning:
      "run PostgreSQL's recurring statements as named prepared statements, parsed and planned once per connection; `false` behind a connection pooler in transaction mode that does not keep them (PgBouncer before 1.21, or without `max_prepared_statements`) — about half of PostgreSQL's CPU per signature more ([Storage](storage.md#postgresql-behind-a-connection-pooler))",
  }),
  metrics: setting({
    variable: "SIGIL_METRICS",
    group: SERVER,
    kind: metricsPlace,
    default: "on",
    meaning:
      "where the Prometheus metrics are served ([Metrics](metrics.md)): `on` at `/metrics` on the main listener, `off` (none are " +
      "collected), or a listener of its own, to keep them off the public port. With `--workers`, every answer is the whole " +
      "cluster's (the primary gathers the workers'; on a listener of its own, the primary listens)",
  }),
  logLevel: setting({
    variable: "SIGIL_LOG_LEVEL",
    group: SERVER,
    kind: logLevel,
    default: "info",
    meaning: "what the logs say (see [Logs](#logs)): `debug` adds one line per request",
  }),
  signatureThreads: setting({
    variable: "SIGIL_SIGNATURE_THREADS",
    group: SERVER,
    // More threads than cores only cost memory (each has its own JavaScript heap).
    kind: integer(0, 256),
    default: null,
    defaultText: "cores − 1 (1–4)",
    meaning: "worker threads that compute signatures beside the event loop; `0` computes them on it",
  }),
  secp256k1: setting<Secp256k1Choice, null>({
    variable: "SIGIL_SECP256K1",
    group: SERVER,
    kind: secp256k1Choice,
    default: null,
    defaultText: "*(unset: the fastest that loads)*",
    meaning:
      "the secp256k1 library that signs and verifies ([Cryptography](cryptography.md)): `native` (libsecp256k1's Node.js binding), " +
      "`wasm` (libsecp256k1 compiled to WebAssembly) or `noble` (@noble/curves, pure JavaScript); unset, the first of these that " +
      "loads, with a warning in the log naming why a faster one did not. A named one that does not load stops the start",
  }),

  publicUrl: setting({
    variable: "SIGIL_PUBLIC_URL",
    group: SERVER,
    kind: publicUrl,
    default: null,
    defaultText: "*(unset)*",
    meaning:
      "the absolute base URL of this deployment as its users reach it (e.g. `https://wallet.example.com`): links in the emails Sigil " +
      "sends are built on it, and it is the issuer (`iss`) of the OIDC tokens `oauth2_authenticate` issues (its discovery document is " +
      "served under it); unset, `create_invitations` and `oauth2_authenticate` are refused (`PUBLIC_URL_NOT_CONFIGURED`)",
  }),

  masterKey: setting({
    variable: "SIGIL_MASTER_KEY",
    group: KEYS,
    kind: masterKey,
    default: null,
    defaultText: "*(unset)*",
    meaning: "the master key every stored secret is sealed under",
    secret: true,
  }),
  masterKeyFile: setting({
    variable: "SIGIL_MASTER_KEY_FILE",
    group: KEYS,
    kind: filePath("a file path (relative ones from the working directory)"),
    default: null,
    defaultText: "`<data dir>/master.key`",
    meaning: "a file holding the master key; the default file is created (mode 0600) on first start",
  }),
  masterKeyPrevious: setting({
    variable: "SIGIL_MASTER_KEY_PREVIOUS",
    group: KEYS,
    kind: list(masterKey),
    default: [],
    defaultText: "*(unset)*",
    meaning: "comma-separated earlier master keys, kept to open secrets sealed before a rotation",
    secret: true,
  }),
  pkcs11Module: setting({
    variable: "SIGIL_PKCS11_MODULE",
    group: KEYS,
    kind: filePath("the path of a PKCS#11 library (`/usr/lib/softhsm/libsofthsm2.so`, an HSM vendor's module)"),
    default: null,
    defaultText: "*(unset: the master key is a key file)*",
    meaning:
      "keeps the master key in a PKCS#11 token (an HSM) instead of a file: the token's AES key wraps the data key secrets are " +
      "sealed under, and never leaves the token ([The master key in an HSM](hsm.md)). Needs `SIGIL_PKCS11_TOKEN_LABEL`, " +
      "`SIGIL_PKCS11_KEY_LABEL` and `SIGIL_PKCS11_PIN` or `SIGIL_PKCS11_PIN_FILE`; refused beside `SIGIL_MASTER_KEY` or " +
      "`SIGIL_MASTER_KEY_FILE` (but by `sigil rotate-master-key`, which moves secrets between the two)",
  }),
  pkcs11TokenLabel: setting({
    variable: "SIGIL_PKCS11_TOKEN_LABEL",
    group: KEYS,
    kind: pkcs11Label(32),
    default: null,
    defaultText: "*(unset)*",
    meaning: "the label of the token holding the master key, among the tokens of `SIGIL_PKCS11_MODULE`",
  }),
  pkcs11KeyLabel: setting({
    variable: "SIGIL_PKCS11_KEY_LABEL",
    group: KEYS,
    kind: pkcs11Label(255),
    default: null,
    defaultText: "*(unset)*",
    meaning:
      "the label (`CKA_LABEL`) of the master key in the token: an AES key (256 bits advised) allowed to encrypt and decrypt, " +
      "best made in the token, sensitive and not extractable",
  }),
  pkcs11Pin: setting({
    variable: "SIGIL_PKCS11_PIN",
    group: KEYS,
    kind: { accepts: "the token's user PIN", parse: (raw: string) => raw },
    default: null,
    defaultText: "*(unset)*",
    meaning: "the token's user PIN; never logged. `SIGIL_PKCS11_PIN_FILE` keeps it out of the environment",
    secret: true,
  }),
  pkcs11PinFile: setting({
    variable: "SIGIL_PKCS11_PIN_FILE",
    group: KEYS,
    kind: filePath("a file path (relative ones from the working directory)"),
    default: null,
    defaultText: "*(unset)*",
    meaning:
      "a file holding the token's user PIN (one line), instead of `SIGIL_PKCS11_PIN`; refused at start unless only its owner " +
      "may read and write it (mode 0600 or 0400)",
  }),
  importTargetTtlSeconds: setting({
    variable: "SIGIL_IMPORT_TARGET_TTL_SECONDS",
    group: KEYS,
    kind: seconds(1),
    default: 30 * 60,
    meaning: "how long a target key from `init_import_wallet` / `init_import_private_key` may be used",
  }),

  timestampWindowSeconds: setting({
    variable: "SIGIL_TIMESTAMP_WINDOW_SECONDS",
    group: REQUESTS,
    kind: seconds(1),
    default: 300,
    meaning: "a request's `timestampMs` must lie within this many seconds of the server clock, either side",
  }),
  bodyLimitBytes: setting({
    variable: "SIGIL_BODY_LIMIT_BYTES",
    group: REQUESTS,
    kind: integer(1),
    default: 1024 * 1024,
    meaning: "largest accepted request body (larger: HTTP 413)",
  }),
  headersTimeoutMs: setting({
    variable: "SIGIL_HEADERS_TIMEOUT_MS",
    group: REQUESTS,
    kind: milliseconds(0),
    default: 10_000,
    meaning:
      "a request's line and headers must arrive within this long of its first byte (or of the connection opening); else HTTP 408 " +
      "`REQUEST_TIMEOUT` and the connection is closed; `0`: no limit",
  }),
  requestTimeoutMs: setting({
    variable: "SIGIL_REQUEST_TIMEOUT_MS",
    group: REQUESTS,
    kind: milliseconds(0),
    default: 30_000,
    meaning:
      "the whole request, headers and body, must arrive within this long (the time the server takes to answer does not count); else " +
      "HTTP 408 `REQUEST_TIMEOUT` and close; `0`: no limit; must not be below the headers timeout",
  }),
  keepAliveTimeoutMs: setting({
    variable: "SIGIL_KEEP_ALIVE_TIMEOUT_MS",
    group: REQUESTS,
    // node keeps the connection a second longer than it announces, on a timer.
    kind: milliseconds(1, TIMER_MAX_MS - 1000),
    default: 72_000,
    meaning:
      "a kept-alive connection with no request under way is closed after this long (announced in the `Keep-Alive` header; node closes " +
      "about a second later, so a client that trusts the header never reuses a closing connection); above the 60 s idle timeout of " +
      "common load balancers",
  }),
  maxConnections: setting({
    variable: "SIGIL_MAX_CONNECTIONS",
    group: REQUESTS,
    kind: integer(0),
    default: 1024,
    meaning:
      "connections open at once; further ones are closed as they arrive, unanswered; `0`: no limit (keep it below the process's " +
      "open-file limit)",
  }),
  maxConnectionsPerAddress: setting({
    variable: "SIGIL_MAX_CONNECTIONS_PER_ADDRESS",
    group: REQUESTS,
    kind: integer(0),
    default: 128,
    meaning:
      "connections open at once from one remote address (an IPv6 /64 counts as one address); further ones from it are closed " +
      "unanswered; `0`: no limit. Behind a reverse proxy every connection comes from the proxy: set `0` (or above the proxy's " +
      "upstream connections) and let the proxy limit clients",
  }),
  trustedProxies: setting({
    variable: "SIGIL_TRUSTED_PROXIES",
    group: REQUESTS,
    kind: list(cidrBlock),
    default: [],
    defaultText: "*(none)*",
    meaning:
      "comma-separated CIDR blocks of the reverse proxies in front of Sigil. A request whose TCP peer is in one has its client address " +
      "read from `X-Forwarded-For`: the right-most address that is not itself a trusted proxy. Unset, the header is never read and the " +
      "client is the TCP peer. A `/0` block (every peer a proxy) is refused. The client address is what IP allowlists are checked " +
      "against (docs/ip-allowlists.md) and what logs show",
  }),
  queryCredentialMaxAgeSeconds: setting({
    variable: "SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS",
    group: REQUESTS,
    kind: integer(0, DURATION_MAX_SECONDS),
    default: 0,
    defaultText: "`0` *(no limit)*",
    meaning:
      "queries are answered only for API keys (session keys included) created, and read-only sessions issued, less than this long " +
      "ago; older ones get HTTP 401 `CREDENTIAL_TOO_OLD_FOR_QUERIES` (submits and passkeys are not limited). Bounds how long a " +
      "captured query can be replayed",
  }),

  rateLimits: setting({
    variable: "SIGIL_RATE_LIMITS",
    group: RATE_LIMITS,
    kind: boolean,
    default: true,
    meaning:
      "count every authenticated request against the token buckets below and refuse one that finds a bucket empty with HTTP 429 " +
      "`REQUEST_RATE_LIMITED` and `Retry-After` ([Rate limits](rate-limits.md)); `false` counts nothing. The buckets are kept in " +
      "the database on PostgreSQL (shared by every server process) and in the process on SQLite",
  }),
  rateLimitKeyActivities: setting({
    variable: "SIGIL_RATE_LIMIT_KEY_ACTIVITIES",
    group: RATE_LIMITS,
    kind: rate,
    default: "50/100",
    meaning:
      "activities one API key (a session key is one), passkey or attested identity may submit: requests a second and burst. Votes " +
      "(`approve_activity`, `reject_activity`) are counted in buckets of their own at the same rates",
  }),
  rateLimitSubOrganizationActivities: setting({
    variable: "SIGIL_RATE_LIMIT_SUB_ORGANIZATION_ACTIVITIES",
    group: RATE_LIMITS,
    kind: rate,
    default: "10/20",
    meaning: "activities the credentials of one sub-organization (an end user's keys, passkeys and sessions) may submit together",
  }),
  rateLimitOrganizationActivities: setting({
    variable: "SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES",
    group: RATE_LIMITS,
    kind: rate,
    default: "200/400",
    meaning:
      "activities a top-level organization's credentials and those of all its sub-organizations may submit together: creating " +
      "sub-organizations or keys does not raise it",
  }),
  rateLimitKeyQueries: setting({
    variable: "SIGIL_RATE_LIMIT_KEY_QUERIES",
    group: RATE_LIMITS,
    kind: rate,
    default: "100/200",
    meaning: "queries one API key, passkey or read-only session (counted as the credential that opened it) may send",
  }),
  rateLimitSubOrganizationQueries: setting({
    variable: "SIGIL_RATE_LIMIT_SUB_ORGANIZATION_QUERIES",
    group: RATE_LIMITS,
    kind: rate,
    default: "20/40",
    meaning: "queries the credentials of one sub-organization may send together",
  }),
  rateLimitOrganizationQueries: setting({
    variable: "SIGIL_RATE_LIMIT_ORGANIZATION_QUERIES",
    group: RATE_LIMITS,
    kind: rate,
    default: "500/1000",
    meaning: "queries a top-level organization's credentials and those of all its sub-organizations may send together",
  }),
  rateLimitRootReserve: setting({
    variable: "SIGIL_RATE_LIMIT_ROOT_RESERVE",
    group: RATE_LIMITS,
    kind: rate,
    default: "2/10",
    meaning:
      "per organization and per class (activities, votes, queries): what a member of its root quorum is counted against once the " +
      "organization's own bucket is spent (its key's bucket still counts), so that a runaway key cannot lock the root quorum out",
  }),

  webauthnRpIds: setting({
    variable: "SIGIL_WEBAUTHN_RP_IDS",
    group: LOGINS,
    kind: list(domain(false)),
    default: [],
    defaultText: "*(any)*",
    meaning: "comma-separated relying-party ids accepted in passkey stamps and registrations",
  }),
  webauthnOrigins: setting({
    variable: "SIGIL_WEBAUTHN_ORIGINS",
    group: LOGINS,
    kind: list(origin),
    default: [],
    defaultText: "*(any)*",
    meaning: "comma-separated origins accepted in passkey stamps and registrations",
  }),
  oauth2XTokenUrl: setting({
    variable: "SIGIL_OAUTH2_X_TOKEN_URL",
    group: LOGINS,
    kind: providerEndpoint,
    default: "https://api.x.com/2/oauth2/token",
    meaning:
      "X's OAuth 2.0 token endpoint: `oauth2_authenticate` exchanges X authorization codes there (client id and secret by HTTP Basic)",
  }),
  oauth2XUserInfoUrl: setting({
    variable: "SIGIL_OAUTH2_X_USERINFO_URL",
    group: LOGINS,
    kind: providerEndpoint,
    default: "https://api.x.com/2/users/me",
    meaning: "X's endpoint naming the user an access token belongs to (`data.id` becomes the OIDC token's subject `x:<id>`)",
  }),
  oauth2DiscordTokenUrl: setting({
    variable: "SIGIL_OAUTH2_DISCORD_TOKEN_URL",
    group: LOGINS,
    kind: providerEndpoint,
    default: "https://discord.com/api/oauth2/token",
    meaning:
      "Discord's OAuth 2.0 token endpoint: `oauth2_authenticate` exchanges Discord authorization codes there (client id and secret in the form)",
  }),
  oauth2DiscordUserInfoUrl: setting({
    variable: "SIGIL_OAUTH2_DISCORD_USERINFO_URL",
    group: LOGINS,
    kind: providerEndpoint,
    default: "https://discord.com/api/users/@me",
    meaning: "Discord's endpoint naming the user an access token belongs to (`id` becomes the OIDC token's subject `discord:<id>`)",
  }),
  oidcAllowedIssuers: setting({
    variable: "SIGIL_OIDC_ALLOWED_ISSUERS",
    group: LOGINS,
    kind: list(
      url(["https:", "http:"], {
        accepts: "with no query or fragment (an issuer's `iss`)",
        check: (issuer) => (issuer.search || issuer.hash ? "an issuer has no query or fragment" : null),
      }),
    ),
    default: [],
    defaultText: "*(none)*",
    meaning:
      "comma-separated OIDC issuers (exact `iss`, e.g. `https://accounts.google.com`) whose identity tokens log users in; no other " +
      "issuer is ever contacted",
  }),
  sessionDefaultSeconds: setting({
    variable: "SIGIL_SESSION_DEFAULT_SECONDS",
    group: LOGINS,
    kind: seconds(1),
    default: 15 * 60,
    meaning: "a login's session length when the request names none",
  }),
  sessionMaxSeconds: setting({
    variable: "SIGIL_SESSION_MAX_SECONDS",
    group: LOGINS,
    kind: seconds(1),
    default: 7 * 24 * 3600,
    meaning: "the longest session (`expirationSeconds`) a login may ask for",
  }),
  readOnlySessionSeconds: setting({
    variable: "SIGIL_READ_ONLY_SESSION_SECONDS",
    group: LOGINS,
    kind: seconds(1),
    default: 3600,
    meaning: "a read-only session's length",
  }),

  otpDefaultSeconds: setting({
    variable: "SIGIL_OTP_DEFAULT_SECONDS",
    group: OTP,
    kind: seconds(1),
    default: 300,
    meaning: "a one-time password's lifetime when the request names none (requests may ask up to 600)",
  }),
  otpMaxAttempts: setting({
    variable: "SIGIL_OTP_MAX_ATTEMPTS",
    group: OTP,
    kind: integer(1),
    default: 5,
    meaning: "wrong codes tried before a one-time password is burnt",
  }),
  verificationTokenSeconds: setting({
    variable: "SIGIL_VERIFICATION_TOKEN_SECONDS",
    group: OTP,
    kind: seconds(1),
    default: 3600,
    meaning: "a verification token's lifetime when `verify_otp` names none (requests may ask up to 86400)",
  }),
  otpPerContactLimit: setting({
    variable: "SIGIL_OTP_PER_CONTACT_LIMIT",
    group: OTP,
    kind: integer(1),
    default: 5,
    meaning:
      "codes one requesting organization may send one email address or phone number in ten minutes (the own credentials of " +
      "one top-level organization's sub-organizations together: twice that); every spelling of an inbox counts as one",
  }),
  otpPerOrganizationLimit: setting({
    variable: "SIGIL_OTP_PER_ORGANIZATION_LIMIT",
    group: OTP,
    kind: integer(1),
    default: 300,
    meaning:
      "codes (emails and SMS) a top-level organization and all its sub-organizations together may have sent per " +
      "`SIGIL_OTP_SEND_WINDOW_SECONDS`",
  }),
  otpPerCredentialLimit: setting({
    variable: "SIGIL_OTP_PER_CREDENTIAL_LIMIT",
    group: OTP,
    kind: integer(1),
    default: 300,
    meaning:
      "codes one API key or passkey of a top-level organization may have sent per `SIGIL_OTP_SEND_WINDOW_SECONDS` (lower it where " +
      "many keys may start logins)",
  }),
  otpPerEndUserLimit: setting({
    variable: "SIGIL_OTP_PER_END_USER_LIMIT",
    group: OTP,
    kind: integer(1),
    default: 20,
    meaning:
      "codes an end user's credentials may have sent per `SIGIL_OTP_SEND_WINDOW_SECONDS`: all API keys, passkeys and sessions of one " +
      "sub-organization share it",
  }),
  otpSendWindowSeconds: setting({
    variable: "SIGIL_OTP_SEND_WINDOW_SECONDS",
    group: OTP,
    kind: seconds(1),
    default: 3600,
    meaning: "the sliding window of the three budgets above (organization, credential, end user)",
  }),
  emailAllowedDomains: setting({
    variable: "SIGIL_EMAIL_ALLOWED_DOMAINS",
    group: OTP,
    kind: list(domain(true)),
    default: [],
    defaultText: "*(none)*",
    meaning:
      "comma-separated domains (subdomains included; a leading dot is ignored) whose https links and logos OTP emails may carry and " +
      "whose addresses may be their sender or reply-to; unset, requests may customize neither",
  }),

  smtpUrl: setting({
    variable: "SIGIL_SMTP_URL",
    group: MESSAGES,
    kind: url(["smtp:", "smtps:"]),
    default: null,
    defaultText: "*(unset: local outbox)*",
    meaning: "the SMTP relay emails go to, e.g. `smtp://127.0.0.1:2525`, `smtps://user:pass@mail.example.com`",
    secret: true,
  }),
  smtpFrom: setting({
    variable: "SIGIL_SMTP_FROM",
    group: MESSAGES,
    kind: mailbox,
    default: "Notifications <no-reply@localhost>",
    meaning: "the From of emails whose request names no sender",
  }),
  smsUrl: setting({
    variable: "SIGIL_SMS_URL",
    group: MESSAGES,
    kind: url(["https:", "http:"]),
    default: null,
    defaultText: "*(unset: local outbox)*",
    meaning:
      'the HTTP endpoint SMS are POSTed to as JSON `{"to","body"}`; a user name and password in it are sent as HTTP Basic authorization ' +
      "(unless `SIGIL_SMS_TOKEN` is set), and no log line or stored error repeats the URL",
    // It may carry a token in its query, or credentials.
    secret: true,
  }),
  smsToken: setting({
    variable: "SIGIL_SMS_TOKEN",
    group: MESSAGES,
    kind: headerValue,
    default: null,
    defaultText: "*(unset)*",
    meaning: "sent to the SMS endpoint as `Authorization: Bearer <token>`",
    secret: true,
  }),
  messagePollMs: setting({
    variable: "SIGIL_MESSAGE_POLL_MS",
    group: MESSAGES,
    kind: milliseconds(1),
    default: 1_000,
    meaning: "how often the message courier looks for messages to send",
  }),
  messageRetryBaseMs: setting({
    variable: "SIGIL_MESSAGE_RETRY_BASE_MS",
    group: MESSAGES,
    kind: milliseconds(1),
    default: 2_000,
    meaning: "wait before the courier's first retry of a message; each further retry waits twice as long (at most a minute)",
  }),
  messageMaxAttempts: setting({
    variable: "SIGIL_MESSAGE_MAX_ATTEMPTS",
    group: MESSAGES,
    kind: integer(1),
    default: 5,
    meaning: "a message is given up (`failed`) after this many attempts",
  }),
  messageTimeoutMs: setting({
    variable: "SIGIL_MESSAGE_TIMEOUT_MS",
    group: MESSAGES,
    // The courier gives the SMTP relay twice this long, on a timer.
    kind: milliseconds(1, Math.floor(TIMER_MAX_MS / 2)),
    default: 10_000,
    meaning:
      "one attempt to hand a message to the SMTP relay or the SMS endpoint: each step (connect, greeting, answer) may take this " +
      "long, the whole attempt twice as long",
  }),

  webhookAllowLoopback: setting({
    variable: "SIGIL_WEBHOOK_ALLOW_LOOPBACK",
    group: WEBHOOKS,
    kind: boolean,
    default: false,
    meaning: "let webhook URLs reach loopback addresses (`127.0.0.1`, `::1`, `localhost`)",
  }),
  webhookAllowPrivate: setting({
    variable: "SIGIL_WEBHOOK_ALLOW_PRIVATE",
    group: WEBHOOKS,
    kind: boolean,
    default: false,
    meaning: "let webhook URLs reach private addresses (10/8, 172.16/12, 192.168/16, fc00::/7, 100.64/10)",
  }),
  webhookRetryBaseMs: setting({
    variable: "SIGIL_WEBHOOK_RETRY_BASE_MS",
    group: WEBHOOKS,
    kind: milliseconds(1),
    default: 2_000,
    meaning: "wait before the first retry of a delivery; each further retry waits twice as long (at most an hour)",
  }),
  webhookMaxAttempts: setting({
    variable: "SIGIL_WEBHOOK_MAX_ATTEMPTS",
    group: WEBHOOKS,
    kind: integer(1),
    default: 12,
    meaning: "a delivery is given up (`failed`) after this many attempts",
  }),
  webhookTimeoutMs: setting({
    variable: "SIGIL_WEBHOOK_TIMEOUT_MS",
    group: WEBHOOKS,
    kind: milliseconds(1),
    default: 10_000,
    meaning: "one attempt (connect, send, answer) may take this long",
  }),
  webhookConcurrency: setting({
    variable: "SIGIL_WEBHOOK_CONCURRENCY",
    group: WEBHOOKS,
    kind: integer(1),
    default: 8,
    meaning: "deliveries one server process sends at a time",
  }),
  webhookPollMs: setting({
    variable: "SIGIL_WEBHOOK_POLL_MS",
    group: WEBHOOKS,
    kind: milliseconds(1),
    default: 1_000,
    meaning: "how often a server looks for due deliveries besides the ones it just queued",
  }),

  chainRpcUrls: setting({
    variable: "SIGIL_CHAIN_RPC_URLS",
    group: CHAINS,
    kind: chainEndpoints,
    default: null,
    defaultText: "*(unset: no chain)*",
    meaning:
      "the JSON-RPC node of each chain transactions may be sent to, e.g. `eip155:1=https://node.example,eip155:11155111=http://127.0.0.1:8545`; " +
      "Solana clusters by genesis-hash prefix or alias (`solana:devnet=https://…`, `solana:mainnet=…`). Sending, balances and history " +
      "refuse a chain not listed; a chain listed here may be named in requests though the API description does not list it " +
      "(`eip155:31337`, a private chain: see [Sending transactions](sending-transactions.md#which-chains-a-request-may-name))",
    // Hosted node URLs carry their API key in the path or query.
    secret: true,
  }),
  chainPollMs: setting({
    variable: "SIGIL_CHAIN_POLL_MS",
    group: CHAINS,
    kind: milliseconds(1),
    default: 2_000,
    meaning: "how often a sent transaction that is not yet final is looked at again (broadcast, receipt, dropped or replaced)",
  }),
  chainTimeoutMs: setting({
    variable: "SIGIL_CHAIN_TIMEOUT_MS",
    group: CHAINS,
    kind: milliseconds(1, Math.floor(TIMER_MAX_MS / 4)),
    default: 10_000,
    meaning: "one JSON-RPC request to a chain node may take this long",
  }),
  chainNonceWaitMs: setting({
    variable: "SIGIL_CHAIN_NONCE_WAIT_MS",
    group: CHAINS,
    kind: milliseconds(1),
    default: 600_000,
    meaning:
      "how long an Ethereum send whose nonce (named by the request) is ahead of the chain's next one waits for the nonces before it; " +
      "then it is FAILED, never signed for another nonce, and its nonce given back",
  }),
  chainAssets: setting({
    variable: "SIGIL_CHAIN_ASSETS",
    group: CHAINS,
    kind: chainAssets,
    default: null,
    defaultText: "*(unset: native assets only)*",
    meaning:
      "a JSON file listing, per chain, the tokens (ERC-20 contracts, SPL mints) whose balances `get_wallet_address_balances` reports " +
      "and `list_supported_assets` lists, beside the chain's native asset (see [Balances and assets](chain-assets.md))",
  }),

  invitationSeconds: setting({
    variable: "SIGIL_INVITATION_SECONDS",
    group: INVITATIONS,
    kind: seconds(1),
    default: 7 * 24 * 3600,
    meaning:
      "how long an invitation's link may be accepted (see [Invitations](invitations.md)); after that it stays listed as " +
      "`INVITATION_STATUS_CREATED` but is refused with `INVITATION_EXPIRED`",
  }),
  logName: setting({
    variable: "SIGIL_LOG_NAME",
    group: AUDIT_LOG,
    kind: logName,
    default: null,
    defaultText: "*(unset: the host and path of SIGIL_PUBLIC_URL, else `sigil-` and 16 hex digits of the log key's hash)*",
    meaning:
      "the name this deployment signs its organizations' log checkpoints with: the key name of the signed notes and the start " +
      "of each log's origin line, `<name>/organizations/<organization id>` (see [The audit log](audit-log.md#checkpoints)); " +
      "choose it once, as auditors' verifier keys carry it",
  }),
  logCheckpointSeconds: setting({
    variable: "SIGIL_LOG_CHECKPOINT_SECONDS",
    group: AUDIT_LOG,
    kind: integer(0, DURATION_MAX_SECONDS),
    default: 3600,
    meaning:
      "how often a server signs a checkpoint of every organization's log that grew since its last one; 0: only on demand " +
      "(`get_log_checkpoint`, `sigil audit export`)",
  }),
};

type Settings = typeof settings;
/** Each setting's value as read: what its kind parses, or its default. */
type SettingValues = { [K in keyof Settings]: Settings[K] extends Setting<infer T, infer D> ? T | D : never };

/** The ConfigFlags property a flag fills: --data-dir → dataDir. */
const flagProperty = (flag: string) => flag.slice(2).replace(/-([a-z])/g, (_, letter: string) => letter.toUpperCase()) as keyof ConfigFlags;

/** Reads every setting; refuses, all at once, every value that is not accepted. */
function readSettings(env: NodeJS.ProcessEnv, flags: ConfigFlags = {}, options: LoadOptions = {}): SettingValues {
  const problems: string[] = [];
  const values: Record<string, unknown> = {};
  for (const [key, declared] of Object.entries(settings) as [string, Setting<unknown, unknown>][]) {
    const fromFlag = declared.flag ? flags[flagProperty(declared.flag)] : undefined;
    const raw = fromFlag !== undefined ? String(fromFlag) : env[declared.variable];
    const name = fromFlag !== undefined ? `${declared.flag} (${declared.variable})` : declared.variable;
    values[key] = declared.default;
    if (raw === undefined) continue;
    if (raw === "") {
      // An empty variable counts as unset (docker-compose and shells make them easily), where that means the default.
      if (declared.ifEmpty) problems.push(`${name} is set but empty: ${declared.ifEmpty}`);
      continue;
    }
    const refuse = (detail?: string, { quote } = { quote: true }): never => {
      const value = quote && !declared.secret ? `, got ${JSON.stringify(raw)}` : "";
      const why = !detail ? "" : quote ? ` (${detail})` : `: ${detail}`;
      throw new ConfigError(`${name} must be ${declared.kind.accepts}${value}${why}`);
    };
    try {
      values[key] = declared.kind.parse(raw, { name, secret: declared.secret ?? false, refuse });
    } catch (error) {
      if (!(error instanceof ConfigError)) throw error;
      problems.push(error.message);
    }
  }
  const read = values as SettingValues;
  // node:http refuses to start otherwise: the headers are part of the request.
  const { headersTimeoutMs: headers, requestTimeoutMs: request } = read;
  if (headers > 0 && request > 0 && headers > request) {
    problems.push(`SIGIL_HEADERS_TIMEOUT_MS (${headers}) must not exceed SIGIL_REQUEST_TIMEOUT_MS (${request})`);
  }
  const metrics = metricsOf(read.metrics);
  if (metrics.serve === "listener" && metrics.host === read.host && metrics.port === read.port) {
    problems.push(
      `SIGIL_METRICS (${read.metrics}) must not be the main listener's address (SIGIL_HOST, SIGIL_PORT): write \`on\` to serve /metrics there`,
    );
  }
  problems.push(...tokenProblems(read, options));
  if (problems.length > 0) throw new ConfigError(problems.join("\n"));
  return read;
}

/** What loadConfig is asked to accept beyond a server's configuration. */
export interface LoadOptions {
  /** A master key file (or SIGIL_MASTER_KEY) beside a token: `sigil rotate-master-key` moves secrets between them. */
  fileKeyBesideToken?: boolean;
}

/** A token is named whole (module, token, key, one PIN) or not at all, and not beside a key file a server would also take for the master key. */
function tokenProblems(read: SettingValues, options: LoadOptions): string[] {
  const named = {
    SIGIL_PKCS11_MODULE: read.pkcs11Module,
    SIGIL_PKCS11_TOKEN_LABEL: read.pkcs11TokenLabel,
    SIGIL_PKCS11_KEY_LABEL: read.pkcs11KeyLabel,
  };
  const set = Object.entries(named).filter(([, value]) => value !== null);
  if (set.length === 0 && read.pkcs11Pin === null && read.pkcs11PinFile === null) return [];
  const problems: string[] = [];
  const missing = Object.entries(named)
    .filter(([, value]) => value === null)
    .map(([name]) => name);
  if (read.pkcs11Pin === null && read.pkcs11PinFile === null) missing.push("SIGIL_PKCS11_PIN or SIGIL_PKCS11_PIN_FILE");
  if (missing.length > 0)
    problems.push(
      `the master key in a PKCS#11 token needs SIGIL_PKCS11_MODULE, SIGIL_PKCS11_TOKEN_LABEL, SIGIL_PKCS11_KEY_LABEL and ` +
        `SIGIL_PKCS11_PIN or SIGIL_PKCS11_PIN_FILE: ${missing.join(", ")} ${missing.length === 1 ? "is" : "are"} not set`,
    );
  if (read.pkcs11Pin !== null && read.pkcs11PinFile !== null)
    problems.push(
      "SIGIL_PKCS11_PIN and SIGIL_PKCS11_PIN_FILE are both set: give the PIN one way (the file keeps it out of the environment)",
    );
  const fileKeys = [read.masterKey !== null && "SIGIL_MASTER_KEY", read.masterKeyFile !== null && "SIGIL_MASTER_KEY_FILE"].filter(Boolean);
  if (read.pkcs11Module !== null && fileKeys.length > 0 && !options.fileKeyBesideToken)
    problems.push(
      `SIGIL_PKCS11_MODULE and ${fileKeys.join(" and ")} are both set: the master key is either in a token or in a file. ` +
        `To move the secrets from the file key to the token run \`sigil rotate-master-key --to token\` with both set, then unset ${fileKeys.join(" and ")}; ` +
        "to keep the file key, unset the token settings (SIGIL_PKCS11_MODULE and the others)",
    );
  return problems;
}

/**
 * The default signature threads of each server process: the cores beyond the one event loop of the
 * single process (defaultSignatureThreads), or, with several workers, the cores beyond their event
 * loops shared between them, and at least one, so a signature never stalls the event loop that
 * verifies the next stamps. On 2 cores: 1 thread for 1 worker, and 1 for each of 2.
 */
function signatureThreadsPerWorker(workers: number): number {
  if (workers <= 1) return defaultSignatureThreads();
  return Math.min(4, Math.max(1, Math.floor((os.availableParallelism() - workers) / workers)));
}

export function loadConfig(env: NodeJS.ProcessEnv = process.env, flags: ConfigFlags = {}, options: LoadOptions = {}): Config {
  const s = readSettings(env, flags, options);
  const dataDir = path.resolve(s.dataDir);
  // SQLite gains nothing from several processes (docs/running.md#sqlite): `auto` is one there.
  const workers = s.workers === "auto" ? (s.databaseUrl ? Math.min(MAX_WORKERS, os.availableParallelism()) : 1) : s.workers;
  return {
    host: s.host,
    port: s.port,
    workers,
    shutdownDelayMs: s.shutdownDelayMs,
    dataDir,
    // readSettings took the flag over the variable, and an empty variable as unset.
    dataDirFrom: flags.dataDir !== undefined ? "--data-dir" : env.SIGIL_DATA_DIR ? "SIGIL_DATA_DIR" : "default",
    databaseUrl: s.databaseUrl,
    databasePoolSize: s.databasePoolSize,
    databasePreparedStatements: s.databasePreparedStatements,
    timestampWindowMs: s.timestampWindowSeconds * 1000,
    bodyLimitBytes: s.bodyLimitBytes,
    http: {
      headersTimeoutMs: s.headersTimeoutMs,
      requestTimeoutMs: s.requestTimeoutMs,
      keepAliveTimeoutMs: s.keepAliveTimeoutMs,
      maxConnections: s.maxConnections,
      maxConnectionsPerAddress: s.maxConnectionsPerAddress,
      trustedProxies: s.trustedProxies,
    },
    queryCredentialMaxAgeMs: s.queryCredentialMaxAgeSeconds * 1000 || null,
    webauthn: { rpIds: s.webauthnRpIds, origins: s.webauthnOrigins },
    logLevel: s.logLevel,
    masterKey: {
      key: s.masterKey,
      file: s.masterKeyFile ? path.resolve(s.masterKeyFile) : path.join(dataDir, "master.key"),
      fileIsDefault: !s.masterKeyFile,
      previous: s.masterKeyPrevious,
      token: s.pkcs11Module
        ? {
            module: path.resolve(s.pkcs11Module),
            tokenLabel: s.pkcs11TokenLabel!,
            keyLabel: s.pkcs11KeyLabel!,
            pin: s.pkcs11Pin,
            pinFile: s.pkcs11PinFile ? path.resolve(s.pkcs11PinFile) : null,
          }
        : null,
    },
    signatureThreads: s.signatureThreads ?? signatureThreadsPerWorker(workers),
    secp256k1: s.secp256k1,
    importTargetTtlMs: s.importTargetTtlSeconds * 1000,
    sessions: {
      defaultSeconds: s.sessionDefaultSeconds,
      maxSeconds: s.sessionMaxSeconds,
      readOnlySeconds: s.readOnlySessionSeconds,
    },
    messages: {
      smtpUrl: s.smtpUrl,
      smtpFrom: s.smtpFrom,
      smsUrl: s.smsUrl,
      smsToken: s.smsToken,
      pollMs: s.messagePollMs,
      retryBaseMs: s.messageRetryBaseMs,
      maxAttempts: s.messageMaxAttempts,
      timeoutMs: s.messageTimeoutMs,
    },
    otp: {
      defaultSeconds: s.otpDefaultSeconds,
      maxAttempts: s.otpMaxAttempts,
      verificationTokenSeconds: s.verificationTokenSeconds,
      perContactLimit: s.otpPerContactLimit,
      perOrganizationLimit: s.otpPerOrganizationLimit,
      perCredentialLimit: s.otpPerCredentialLimit,
      perEndUserLimit: s.otpPerEndUserLimit,
      sendWindowSeconds: s.otpSendWindowSeconds,
      emailAllowedDomains: s.emailAllowedDomains,
    },
    oidcAllowedIssuers: s.oidcAllowedIssuers,
    webhooks: {
      allowLoopback: s.webhookAllowLoopback,
      allowPrivate: s.webhookAllowPrivate,
      retryBaseMs: s.webhookRetryBaseMs,
      maxAttempts: s.webhookMaxAttempts,
      timeoutMs: s.webhookTimeoutMs,
      concurrency: s.webhookConcurrency,
      pollMs: s.webhookPollMs,
    },
    chains: {
      rpcUrls: s.chainRpcUrls ?? {},
      pollMs: s.chainPollMs,
      timeoutMs: s.chainTimeoutMs,
      nonceWaitMs: s.chainNonceWaitMs,
      assets: s.chainAssets ?? {},
    },
    // Without its trailing slash, so a path is appended to it as `${publicUrl}/invitations/accept`.
    invitations: { publicUrl: s.publicUrl?.replace(/\/+$/, "") ?? null, lifetimeMs: s.invitationSeconds * 1000 },
    transparencyLog: {
      name:
        s.logName ??
        (s.publicUrl
          ? s.publicUrl
              .replace(/^https?:\/\//, "")
              .replace(/\/+$/, "")
              .replace(/[^!-*,-~]/g, "-")
          : null),
      checkpointMs: s.logCheckpointSeconds * 1000,
    },
    oauth2Providers: {
      x: { tokenUrl: s.oauth2XTokenUrl, userInfoUrl: s.oauth2XUserInfoUrl },
      discord: { tokenUrl: s.oauth2DiscordTokenUrl, userInfoUrl: s.oauth2DiscordUserInfoUrl },
    },
    metrics: metricsOf(s.metrics),
    rateLimits: s.rateLimits
      ? {
          activities: {
            key: rateOf(s.rateLimitKeyActivities),
            subOrganization: rateOf(s.rateLimitSubOrganizationActivities),
            organization: rateOf(s.rateLimitOrganizationActivities),
          },
          queries: {
            key: rateOf(s.rateLimitKeyQueries),
            subOrganization: rateOf(s.rateLimitSubOrganizationQueries),
            organization: rateOf(s.rateLimitOrganizationQueries),
          },
          rootReserve: rateOf(s.rateLimitRootReserve),
        }
      : null,
  };
}
