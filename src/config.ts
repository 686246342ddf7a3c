// Environment variables and command-line flags, resolved once into one typed object.
import path from "node:path";
import type { MasterKeyConfig } from "./crypto/master-key.js";
import { defaultSignatureThreads } from "./crypto/signature-threads.js";
import { checkDatabaseUrl } from "./store/database-url.js";

export interface Config {
  host: string;
  port: number;
  /** Directory of the embedded SQLite database and the default master key file. */
  dataDir: string;
  /** postgres://… or postgresql://… to keep all state in PostgreSQL instead of SQLite. */
  databaseUrl: string | null;
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
  webhooks: WebhookConfig;
  /** How long an import target from init_import_* stays usable, in milliseconds. */
  importTargetTtlMs: number;
  sessions: SessionConfig;
  messages: MessagingConfig;
  otp: OtpConfig;
  /** OIDC issuers whose identity tokens are accepted (exact `iss` values); no other is contacted. */
  oidcAllowedIssuers: string[];
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
  /** Codes one contact may be sent in ten minutes by one requesting organization (sub-organizations'
   * own requests together: twice that). */
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

export interface ConfigFlags {
  host?: string;
  port?: string | number;
  dataDir?: string;
}

function positiveInteger(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value <= 0) throw new Error(`${name} must be a positive integer, got "${raw}"`);
  return value;
}

function portNumber(name: string, raw: string | undefined, fallback: number): number {
  const value = positiveInteger(name, raw, fallback);
  if (value > 65_535) throw new Error(`${name} must be a port number from 1 to 65535, got "${raw}"`);
  return value;
}

function flag(name: string, raw: string | undefined): boolean {
  if (raw === undefined || raw === "" || raw === "false" || raw === "0") return false;
  if (raw === "true" || raw === "1") return true;
  throw new Error(`${name} must be true or false, got "${raw}"`);
}

function nonNegativeInteger(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${name} must be a whole number (0 or more), got "${raw}"`);
  return value;
}

function httpLimits(env: NodeJS.ProcessEnv): HttpLimits {
  const limits: HttpLimits = {
    headersTimeoutMs: nonNegativeInteger("SIGIL_HEADERS_TIMEOUT_MS", env.SIGIL_HEADERS_TIMEOUT_MS, 10_000),
    requestTimeoutMs: nonNegativeInteger("SIGIL_REQUEST_TIMEOUT_MS", env.SIGIL_REQUEST_TIMEOUT_MS, 30_000),
    keepAliveTimeoutMs: positiveInteger("SIGIL_KEEP_ALIVE_TIMEOUT_MS", env.SIGIL_KEEP_ALIVE_TIMEOUT_MS, 72_000),
    maxConnections: nonNegativeInteger("SIGIL_MAX_CONNECTIONS", env.SIGIL_MAX_CONNECTIONS, 1024),
    maxConnectionsPerAddress: nonNegativeInteger("SIGIL_MAX_CONNECTIONS_PER_ADDRESS", env.SIGIL_MAX_CONNECTIONS_PER_ADDRESS, 128),
  };
  // node:http refuses to start otherwise: the headers are part of the request.
  if (limits.headersTimeoutMs > 0 && limits.requestTimeoutMs > 0 && limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw new Error(`SIGIL_HEADERS_TIMEOUT_MS (${limits.headersTimeoutMs}) must not exceed SIGIL_REQUEST_TIMEOUT_MS (${limits.requestTimeoutMs})`);
  }
  return limits;
}

const list = (raw: string | undefined) => (raw ?? "").split(",").map((s) => s.trim()).filter(Boolean);

export function loadConfig(env: NodeJS.ProcessEnv = process.env, flags: ConfigFlags = {}): Config {
  const port = flags.port !== undefined ? portNumber("--port", String(flags.port), 8080) : portNumber("SIGIL_PORT", env.SIGIL_PORT, 8080);
  const dataDir = path.resolve(flags.dataDir ?? env.SIGIL_DATA_DIR ?? "data");
  // Refused here, at start, by name: anything else would reach pg and fail later, less clearly.
  if (env.SIGIL_DATABASE_URL) checkDatabaseUrl(env.SIGIL_DATABASE_URL);
  return {
    host: flags.host ?? env.SIGIL_HOST ?? "127.0.0.1",
    port,
    dataDir,
    databaseUrl: env.SIGIL_DATABASE_URL || null,
    timestampWindowMs: positiveInteger("SIGIL_TIMESTAMP_WINDOW_SECONDS", env.SIGIL_TIMESTAMP_WINDOW_SECONDS, 300) * 1000,
    bodyLimitBytes: positiveInteger("SIGIL_BODY_LIMIT_BYTES", env.SIGIL_BODY_LIMIT_BYTES, 1024 * 1024),
    http: httpLimits(env),
    queryCredentialMaxAgeMs: nonNegativeInteger("SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS", env.SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS, 0) * 1000 || null,
    webauthn: { rpIds: list(env.SIGIL_WEBAUTHN_RP_IDS), origins: list(env.SIGIL_WEBAUTHN_ORIGINS) },
    logLevel: env.SIGIL_LOG_LEVEL ?? "info",
    masterKey: {
      key: env.SIGIL_MASTER_KEY || null,
      file: env.SIGIL_MASTER_KEY_FILE ? path.resolve(env.SIGIL_MASTER_KEY_FILE) : path.join(dataDir, "master.key"),
      fileIsDefault: !env.SIGIL_MASTER_KEY_FILE,
      previous: list(env.SIGIL_MASTER_KEY_PREVIOUS),
    },
    signatureThreads: nonNegativeInteger("SIGIL_SIGNATURE_THREADS", env.SIGIL_SIGNATURE_THREADS, defaultSignatureThreads()),
    importTargetTtlMs: positiveInteger("SIGIL_IMPORT_TARGET_TTL_SECONDS", env.SIGIL_IMPORT_TARGET_TTL_SECONDS, 30 * 60) * 1000,
    sessions: {
      defaultSeconds: positiveInteger("SIGIL_SESSION_DEFAULT_SECONDS", env.SIGIL_SESSION_DEFAULT_SECONDS, 15 * 60),
      maxSeconds: positiveInteger("SIGIL_SESSION_MAX_SECONDS", env.SIGIL_SESSION_MAX_SECONDS, 7 * 24 * 3600),
      readOnlySeconds: positiveInteger("SIGIL_READ_ONLY_SESSION_SECONDS", env.SIGIL_READ_ONLY_SESSION_SECONDS, 3600),
    },
    messages: {
      smtpUrl: env.SIGIL_SMTP_URL || null,
      smtpFrom: env.SIGIL_SMTP_FROM || "Notifications <no-reply@localhost>",
      smsUrl: env.SIGIL_SMS_URL || null,
      smsToken: env.SIGIL_SMS_TOKEN || null,
      pollMs: positiveInteger("SIGIL_MESSAGE_POLL_MS", env.SIGIL_MESSAGE_POLL_MS, 1_000),
      retryBaseMs: positiveInteger("SIGIL_MESSAGE_RETRY_BASE_MS", env.SIGIL_MESSAGE_RETRY_BASE_MS, 2_000),
      maxAttempts: positiveInteger("SIGIL_MESSAGE_MAX_ATTEMPTS", env.SIGIL_MESSAGE_MAX_ATTEMPTS, 5),
      timeoutMs: positiveInteger("SIGIL_MESSAGE_TIMEOUT_MS", env.SIGIL_MESSAGE_TIMEOUT_MS, 10_000),
    },
    otp: {
      defaultSeconds: positiveInteger("SIGIL_OTP_DEFAULT_SECONDS", env.SIGIL_OTP_DEFAULT_SECONDS, 300),
      maxAttempts: positiveInteger("SIGIL_OTP_MAX_ATTEMPTS", env.SIGIL_OTP_MAX_ATTEMPTS, 5),
      verificationTokenSeconds: positiveInteger("SIGIL_VERIFICATION_TOKEN_SECONDS", env.SIGIL_VERIFICATION_TOKEN_SECONDS, 3600),
      perContactLimit: positiveInteger("SIGIL_OTP_PER_CONTACT_LIMIT", env.SIGIL_OTP_PER_CONTACT_LIMIT, 5),
      perOrganizationLimit: positiveInteger("SIGIL_OTP_PER_ORGANIZATION_LIMIT", env.SIGIL_OTP_PER_ORGANIZATION_LIMIT, 300),
      perCredentialLimit: positiveInteger("SIGIL_OTP_PER_CREDENTIAL_LIMIT", env.SIGIL_OTP_PER_CREDENTIAL_LIMIT, 300),
      perEndUserLimit: positiveInteger("SIGIL_OTP_PER_END_USER_LIMIT", env.SIGIL_OTP_PER_END_USER_LIMIT, 20),
      sendWindowSeconds: positiveInteger("SIGIL_OTP_SEND_WINDOW_SECONDS", env.SIGIL_OTP_SEND_WINDOW_SECONDS, 3600),
      emailAllowedDomains: list(env.SIGIL_EMAIL_ALLOWED_DOMAINS).map((d) => d.toLowerCase().replace(/^\./, "")),
    },
    oidcAllowedIssuers: list(env.SIGIL_OIDC_ALLOWED_ISSUERS),
    webhooks: {
      allowLoopback: flag("SIGIL_WEBHOOK_ALLOW_LOOPBACK", env.SIGIL_WEBHOOK_ALLOW_LOOPBACK),
      allowPrivate: flag("SIGIL_WEBHOOK_ALLOW_PRIVATE", env.SIGIL_WEBHOOK_ALLOW_PRIVATE),
      retryBaseMs: positiveInteger("SIGIL_WEBHOOK_RETRY_BASE_MS", env.SIGIL_WEBHOOK_RETRY_BASE_MS, 2_000),
      maxAttempts: positiveInteger("SIGIL_WEBHOOK_MAX_ATTEMPTS", env.SIGIL_WEBHOOK_MAX_ATTEMPTS, 12),
      timeoutMs: positiveInteger("SIGIL_WEBHOOK_TIMEOUT_MS", env.SIGIL_WEBHOOK_TIMEOUT_MS, 10_000),
      concurrency: positiveInteger("SIGIL_WEBHOOK_CONCURRENCY", env.SIGIL_WEBHOOK_CONCURRENCY, 8),
      pollMs: positiveInteger("SIGIL_WEBHOOK_POLL_MS", env.SIGIL_WEBHOOK_POLL_MS, 1_000),
    },
  };
}
