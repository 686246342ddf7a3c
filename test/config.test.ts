// The settings catalog in src/config.ts: every SIGIL_ variable named in src/ is declared there; with
// nothing set the defaults are the ones Sigil always had; every setting reaches the Config; each kind of
// value refuses bad text with a message naming the variable (and the flag) and what is expected, never
// repeating a secret; and `sigil serve` given a bad value stops at start, having created nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import crypto from "node:crypto";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import pg from "pg";
import pino from "pino";
import { ConfigError, LOG_LEVELS, loadConfig, settings, type Config, type Setting } from "../src/config.js";
import { backend, createTestDatabase, type TestDatabase } from "./helpers/backend.js";
import { freePort } from "./helpers/processes.js";

const declared = Object.values(settings) as Setting<unknown, unknown>[];
const KEY = crypto.randomBytes(32).toString("hex");
const SECRET = "never-shown-3f9a";

/** What loadConfig refuses `env` with (the test fails if it accepts it). */
function refusal(env: NodeJS.ProcessEnv, flags = {}): string {
  try {
    loadConfig(env, flags);
  } catch (error) {
    expect(error).toBeInstanceOf(ConfigError);
    return (error as Error).message;
  }
  throw new Error(`accepted ${JSON.stringify(env)} ${JSON.stringify(flags)}`);
}

/** Every file under `dir`, with its text. */
const filesUnder = (dir: string): [string, string][] =>
  fs.readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    return entry.isDirectory() ? filesUnder(file) : [[file, fs.readFileSync(file, "utf8")] as [string, string]];
  });

describe("the catalog", () => {
  it("declares every SIGIL_ variable named anywhere in src/, so none can be read without being declared and documented", () => {
    const named = new Set(filesUnder("src").flatMap(([, text]) => [...text.matchAll(/SIGIL_[A-Z0-9_]*[A-Z0-9]/g)].map(([name]) => name)));
    expect(named.size).toBeGreaterThan(40);
    const variables = new Set(declared.map((s) => s.variable));
    expect([...named].filter((name) => !variables.has(name as `SIGIL_${string}`)).sort()).toEqual([]);
  });

  it("is the only reader of SIGIL_ variables in src/ (the CLI hands process.env to loadConfig)", () => {
    const readers = filesUnder("src").filter(([file, text]) => file !== path.join("src", "config.ts") && /\benv(\.SIGIL_|\[)/.test(text));
    expect(readers.map(([file]) => file)).toEqual([]);
  });

  it("declares each variable and each flag once", () => {
    const variables = declared.map((s) => s.variable);
    const flags = declared.flatMap((s) => (s.flag ? [s.flag] : []));
    expect(new Set(variables).size).toBe(variables.length);
    expect(new Set(flags).size).toBe(flags.length);
    expect(flags.sort()).toEqual(["--data-dir", "--host", "--port", "--workers"]);
  });

  it("each default is a value its own kind accepts, written the same way", () => {
    const reading = (name: string) => ({
      name,
      secret: false,
      refuse: () => {
        throw new Error(`${name}'s default is refused`);
      },
    });
    for (const s of declared) {
      if (s.default === null || Array.isArray(s.default)) continue;
      expect(s.kind.parse(String(s.default), reading(s.variable)), s.variable).toBe(s.default);
    }
  });

  it("SIGIL_LOG_LEVEL accepts pino's levels and silent", () => {
    expect([...LOG_LEVELS].sort()).toEqual([...Object.keys(pino.levels.values), "silent"].sort());
  });
});

describe("defaults", () => {
  const today = (): Config => ({
    transparencyLog: { name: null, checkpointMs: 3_600_000 },
    host: "127.0.0.1",
    port: 8080,
    workers: 1,
    shutdownDelayMs: 0,
    dataDir: path.resolve("data"),
    dataDirFrom: "default",
    databaseUrl: null,
    databasePoolSize: 10,
    databasePreparedStatements: true,
    timestampWindowMs: 300_000,
    bodyLimitBytes: 1_048_576,
    http: {
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      keepAliveTimeoutMs: 72_000,
      maxConnections: 1024,
      maxConnectionsPerAddress: 128,
      trustedProxies: [],
    },
    queryCredentialMaxAgeMs: null,
    webauthn: { rpIds: [], origins: [] },
    logLevel: "info",
    masterKey: { key: null, file: path.resolve("data", "master.key"), fileIsDefault: true, previous: [], token: null },
    signatureThreads: Math.min(4, Math.max(1, os.availableParallelism() - 1)),
    secp256k1: null,
    importTargetTtlMs: 1_800_000,
    sessions: { defaultSeconds: 900, maxSeconds: 604_800, readOnlySeconds: 3600 },
    messages: {
      smtpUrl: null,
      smtpFrom: "Notifications <no-reply@localhost>",
      smsUrl: null,
      smsToken: null,
      pollMs: 1000,
      retryBaseMs: 2000,
      maxAttempts: 5,
      timeoutMs: 10_000,
    },
    otp: {
      defaultSeconds: 300,
      maxAttempts: 5,
      verificationTokenSeconds: 3600,
      perContactLimit: 5,
      perOrganizationLimit: 300,
      perCredentialLimit: 300,
      perEndUserLimit: 20,
      sendWindowSeconds: 3600,
      emailAllowedDomains: [],
    },
    oidcAllowedIssuers: [],
    webhooks: {
      allowLoopback: false,
      allowPrivate: false,
      retryBaseMs: 2000,
      maxAttempts: 12,
      timeoutMs: 10_000,
      concurrency: 8,
      pollMs: 1000,
    },
    chains: { rpcUrls: {}, pollMs: 2000, timeoutMs: 10_000, nonceWaitMs: 600_000, assets: {} },
    invitations: { publicUrl: null, lifetimeMs: 604_800_000 },
    metrics: { serve: "main" },
    oauth2Providers: {
      x: { tokenUrl: "https://api.x.com/2/oauth2/token", userInfoUrl: "https://api.x.com/2/users/me" },
      discord: { tokenUrl: "https://discord.com/api/oauth2/token", userInfoUrl: "https://discord.com/api/users/@me" },
    },
    rateLimits: {
      activities: {
        key: { perSecond: 50, burst: 100 },
        subOrganization: { perSecond: 10, burst: 20 },
        organization: { perSecond: 200, burst: 400 },
      },
      queries: {
        key: { perSecond: 100, burst: 200 },
        subOrganization: { perSecond: 20, burst: 40 },
        organization: { perSecond: 500, burst: 1000 },
      },
      rootReserve: { perSecond: 2, burst: 10 },
    },
  });

  it("with nothing set, every setting has the default Sigil had before the catalog", () => {
    expect(loadConfig({}, {})).toEqual(today());
  });

  it("an empty variable counts as unset (but for SIGIL_HOST and SIGIL_DATA_DIR, refused below)", () => {
    const empty = Object.fromEntries(declared.filter((s) => !s.ifEmpty).map((s) => [s.variable, ""]));
    expect(Object.keys(empty)).toHaveLength(declared.length - 2);
    expect(loadConfig(empty, {})).toEqual(today());
  });
});

describe("accepted values", () => {
  // A value for each setting that differs from its default: a setting added to the catalog needs one here.
  const samples: Record<string, string> = {
    SIGIL_HOST: "0.0.0.0",
    SIGIL_PORT: "9090",
    SIGIL_WORKERS: "3",
    SIGIL_SHUTDOWN_DELAY_MS: "15000",
    SIGIL_DATA_DIR: "/srv/sigil",
    SIGIL_DATABASE_URL: "postgres://sigil@db.example.com:5432/sigil",
    SIGIL_DATABASE_POOL_SIZE: "24",
    SIGIL_LOG_LEVEL: "debug",
    SIGIL_SIGNATURE_THREADS: "0",
    SIGIL_SECP256K1: "Wasm",
    SIGIL_MASTER_KEY: KEY,
    SIGIL_MASTER_KEY_FILE: "/srv/keys/master.key",
    SIGIL_MASTER_KEY_PREVIOUS: KEY,
    SIGIL_IMPORT_TARGET_TTL_SECONDS: "60",
    SIGIL_TIMESTAMP_WINDOW_SECONDS: "60",
    SIGIL_TRUSTED_PROXIES: "10.0.0.0/8, fd00::/8,192.0.2.7",
    SIGIL_BODY_LIMIT_BYTES: "2048",
    SIGIL_HEADERS_TIMEOUT_MS: "2000",
    SIGIL_REQUEST_TIMEOUT_MS: "60000",
    SIGIL_KEEP_ALIVE_TIMEOUT_MS: "2000",
    SIGIL_MAX_CONNECTIONS: "5",
    SIGIL_MAX_CONNECTIONS_PER_ADDRESS: "3",
    SIGIL_QUERY_CREDENTIAL_MAX_AGE_SECONDS: "3600",
    SIGIL_WEBAUTHN_RP_IDS: "app.example.com",
    SIGIL_WEBAUTHN_ORIGINS: "https://app.example.com",
    SIGIL_OIDC_ALLOWED_ISSUERS: "https://accounts.example.com",
    SIGIL_OAUTH2_X_TOKEN_URL: "http://127.0.0.1:7001/2/oauth2/token",
    SIGIL_OAUTH2_X_USERINFO_URL: "http://127.0.0.1:7001/2/users/me",
    SIGIL_OAUTH2_DISCORD_TOKEN_URL: "http://127.0.0.1:7002/api/oauth2/token",
    SIGIL_OAUTH2_DISCORD_USERINFO_URL: "http://127.0.0.1:7002/api/users/@me",
    SIGIL_SESSION_DEFAULT_SECONDS: "60",
    SIGIL_SESSION_MAX_SECONDS: "86400",
    SIGIL_READ_ONLY_SESSION_SECONDS: "60",
    SIGIL_OTP_DEFAULT_SECONDS: "60",
    SIGIL_OTP_MAX_ATTEMPTS: "3",
    SIGIL_VERIFICATION_TOKEN_SECONDS: "60",
    SIGIL_OTP_PER_CONTACT_LIMIT: "3",
    SIGIL_OTP_PER_ORGANIZATION_LIMIT: "8",
    SIGIL_OTP_PER_CREDENTIAL_LIMIT: "2",
    SIGIL_OTP_PER_END_USER_LIMIT: "3",
    SIGIL_OTP_SEND_WINDOW_SECONDS: "60",
    SIGIL_EMAIL_ALLOWED_DOMAINS: "example.com",
    SIGIL_SMTP_URL: "smtp://127.0.0.1:2525",
    SIGIL_SMTP_FROM: "Wallet <no-reply@example.com>",
    SIGIL_SMS_URL: "http://127.0.0.1:9999/sms",
    SIGIL_SMS_TOKEN: "sms-token",
    SIGIL_MESSAGE_POLL_MS: "50",
    SIGIL_MESSAGE_RETRY_BASE_MS: "30",
    SIGIL_MESSAGE_MAX_ATTEMPTS: "2",
    SIGIL_MESSAGE_TIMEOUT_MS: "500",
    SIGIL_WEBHOOK_ALLOW_LOOPBACK: "true",
    SIGIL_WEBHOOK_ALLOW_PRIVATE: "1",
    SIGIL_DATABASE_PREPARED_STATEMENTS: "false",
    SIGIL_WEBHOOK_RETRY_BASE_MS: "30",
    SIGIL_WEBHOOK_MAX_ATTEMPTS: "3",
    SIGIL_WEBHOOK_TIMEOUT_MS: "500",
    SIGIL_WEBHOOK_CONCURRENCY: "2",
    SIGIL_WEBHOOK_POLL_MS: "50",
    SIGIL_CHAIN_RPC_URLS: "eip155:11155111=http://127.0.0.1:8545, eip155:1=https://node.example.com/v3/key",
    SIGIL_CHAIN_POLL_MS: "100",
    SIGIL_CHAIN_TIMEOUT_MS: "500",
    SIGIL_CHAIN_NONCE_WAIT_MS: "60000",
    SIGIL_CHAIN_ASSETS: "test/fixtures/chain-assets.json",
    SIGIL_PUBLIC_URL: "https://wallet.example.com/sigil/",
    SIGIL_INVITATION_SECONDS: "3600",
    SIGIL_LOG_NAME: "audit.wallet.example.com",
    SIGIL_LOG_CHECKPOINT_SECONDS: "600",
    SIGIL_RATE_LIMITS: "false",
    SIGIL_RATE_LIMIT_KEY_ACTIVITIES: "5/6",
    SIGIL_RATE_LIMIT_SUB_ORGANIZATION_ACTIVITIES: "0.5/2",
    SIGIL_RATE_LIMIT_ORGANIZATION_ACTIVITIES: "off",
    SIGIL_RATE_LIMIT_KEY_QUERIES: " 7 / 8 ",
    SIGIL_RATE_LIMIT_SUB_ORGANIZATION_QUERIES: "OFF",
    SIGIL_RATE_LIMIT_ORGANIZATION_QUERIES: "1000000/1000000",
    SIGIL_RATE_LIMIT_ROOT_RESERVE: "0.25/1",
    SIGIL_METRICS: "127.0.0.1:9464",
    SIGIL_PKCS11_MODULE: "/opt/hsm/libvendor-pkcs11.so",
    SIGIL_PKCS11_TOKEN_LABEL: "other token",
    SIGIL_PKCS11_KEY_LABEL: "other key",
    SIGIL_PKCS11_PIN: "5678",
    SIGIL_PKCS11_PIN_FILE: "/run/secrets/hsm-pin",
  };
  // The token settings are accepted only together (and not beside a key file): each is changed within a whole token configuration.
  const token = (variable: string): Record<string, string> => ({
    SIGIL_PKCS11_MODULE: "/usr/lib/softhsm/libsofthsm2.so",
    SIGIL_PKCS11_TOKEN_LABEL: "sigil",
    SIGIL_PKCS11_KEY_LABEL: "master",
    ...(variable === "SIGIL_PKCS11_PIN_FILE" ? { SIGIL_PKCS11_PIN_FILE: "/run/pin" } : { SIGIL_PKCS11_PIN: "1234" }),
  });
  const withoutToken = Object.fromEntries(Object.entries(samples).filter(([variable]) => !variable.startsWith("SIGIL_PKCS11_")));

  it("every declared setting reaches the Config: setting it alone changes it", () => {
    expect(Object.keys(samples).sort()).toEqual(declared.map((s) => s.variable).sort());
    const unchanged = Object.entries(samples).filter(([variable, value]) => {
      const base = variable.startsWith("SIGIL_PKCS11_") ? token(variable) : {};
      return JSON.stringify(loadConfig({ ...base, [variable]: value }, {})) === JSON.stringify(loadConfig(base, {}));
    });
    expect(unchanged.map(([variable]) => variable)).toEqual([]);
  });

  it("all of them together make the Config they say", () => {
    const config = loadConfig(withoutToken, {});
    expect(config).toMatchObject({
      host: "0.0.0.0",
      port: 9090,
      workers: 3,
      shutdownDelayMs: 15_000,
      dataDir: "/srv/sigil",
      dataDirFrom: "SIGIL_DATA_DIR",
      databasePoolSize: 24,
      databasePreparedStatements: false,
      timestampWindowMs: 60_000,
      queryCredentialMaxAgeMs: 3_600_000,
      importTargetTtlMs: 60_000,
      masterKey: { key: KEY, file: "/srv/keys/master.key", fileIsDefault: false, previous: [KEY] },
      signatureThreads: 0,
      secp256k1: "wasm",
      webhooks: { allowLoopback: true, allowPrivate: true, concurrency: 2 },
      // Off: none of the buckets set is counted.
      rateLimits: null,
      metrics: { serve: "listener", host: "127.0.0.1", port: 9464 },
      // The trailing slash goes: links are built as `${publicUrl}/invitations/accept`.
      invitations: { publicUrl: "https://wallet.example.com/sigil", lifetimeMs: 3_600_000 },
      transparencyLog: { name: "audit.wallet.example.com", checkpointMs: 600_000 },
      messages: { smtpFrom: "Wallet <no-reply@example.com>", smsToken: "sms-token", timeoutMs: 500 },
      chains: {
        rpcUrls: { "eip155:11155111": "http://127.0.0.1:8545", "eip155:1": "https://node.example.com/v3/key" },
        pollMs: 100,
        timeoutMs: 500,
        nonceWaitMs: 60_000,
        assets: {
          "eip155:11155111": [{ symbol: "USDC", decimals: 6, stable: true }],
          // The alias is read as the cluster's CAIP-2 id.
          "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1": [{ symbol: "USDC", decimals: 6 }],
        },
      },
    });
  });

  it("reads SIGIL_METRICS as the main listener, none, or a listener of its own (an IPv6 address in brackets)", () => {
    const read = (value: string) => loadConfig({ SIGIL_METRICS: value }, {}).metrics;
    expect(read("on")).toEqual({ serve: "main" });
    expect(read(" OFF ")).toEqual({ serve: "off" });
    expect(read("0.0.0.0:9464")).toEqual({ serve: "listener", host: "0.0.0.0", port: 9464 });
    expect(read("[::1]:9100")).toEqual({ serve: "listener", host: "::1", port: 9100 });
    expect(read("metrics.internal:1")).toEqual({ serve: "listener", host: "metrics.internal", port: 1 });
    // The main listener's own port on another address is another listener.
    expect(loadConfig({ SIGIL_METRICS: "127.0.0.2:8080" }, {}).metrics).toEqual({ serve: "listener", host: "127.0.0.2", port: 8080 });
  });

  it("reads the token settings into the master key's configuration, paths resolved", () => {
    const { SIGIL_PKCS11_PIN_FILE: _pinFile, ...tokenSamples } = Object.fromEntries(
      Object.entries(samples).filter(([variable]) => variable.startsWith("SIGIL_PKCS11_")),
    );
    expect(loadConfig(tokenSamples, {}).masterKey.token).toEqual({
      module: "/opt/hsm/libvendor-pkcs11.so",
      tokenLabel: "other token",
      keyLabel: "other key",
      pin: "5678",
      pinFile: null,
    });
    expect(loadConfig({ ...token("SIGIL_PKCS11_PIN_FILE"), SIGIL_PKCS11_PIN_FILE: "pin" }, {}).masterKey.token).toMatchObject({
      pin: null,
      pinFile: path.resolve("pin"),
    });
    expect(loadConfig({}, {}).masterKey.token).toBeNull();
  });

  it("reads each rate limit as requests a second and a burst, `off` as a bucket not counted, and SIGIL_RATE_LIMITS=false as none", () => {
    const rateSamples = Object.fromEntries(Object.entries(samples).filter(([variable]) => variable.startsWith("SIGIL_RATE_LIMIT_")));
    expect(loadConfig(rateSamples, {}).rateLimits).toEqual({
      activities: { key: { perSecond: 5, burst: 6 }, subOrganization: { perSecond: 0.5, burst: 2 }, organization: null },
      queries: { key: { perSecond: 7, burst: 8 }, subOrganization: null, organization: { perSecond: 1_000_000, burst: 1_000_000 } },
      rootReserve: { perSecond: 0.25, burst: 1 },
    });
    expect(loadConfig({ ...rateSamples, SIGIL_RATE_LIMITS: "0" }, {}).rateLimits).toBeNull();
    expect(loadConfig({ SIGIL_RATE_LIMIT_KEY_ACTIVITIES: "010.50/03" }, {}).rateLimits?.activities.key).toEqual({
      perSecond: 10.5,
      burst: 3,
    });
  });

  it("keeps accepting what it accepted before the catalog", () => {
    const config = loadConfig(
      {
        SIGIL_PORT: " 8081 ",
        SIGIL_BODY_LIMIT_BYTES: "1e3",
        SIGIL_MAX_CONNECTIONS: "0x10",
        SIGIL_MAX_CONNECTIONS_PER_ADDRESS: "0",
        SIGIL_HEADERS_TIMEOUT_MS: "0",
        SIGIL_REQUEST_TIMEOUT_MS: "0",
        SIGIL_WEBHOOK_ALLOW_LOOPBACK: "0",
        SIGIL_WEBHOOK_ALLOW_PRIVATE: "false",
        SIGIL_LOG_LEVEL: "WARN",
        SIGIL_MASTER_KEY: crypto.randomBytes(32).toString("base64"),
        SIGIL_MASTER_KEY_FILE: "keys/master.key",
        SIGIL_EMAIL_ALLOWED_DOMAINS: " Example.COM, ,.mail.example.org,",
        SIGIL_WEBAUTHN_ORIGINS: "https://app.example.com, http://localhost:3000,android:apk-key-hash:AbC-_9,chrome-extension://abcdefgh",
        SIGIL_OIDC_ALLOWED_ISSUERS: "https://accounts.google.com,http://127.0.0.1:4444/realms/x",
        SIGIL_SMTP_URL: "smtps://user:pass@mail.example.com:465?tls.rejectUnauthorized=false",
        SIGIL_SMTP_FROM: "no-reply@localhost",
        SIGIL_HOST: "localhost",
      },
      { dataDir: "somewhere" },
    );
    expect(config).toMatchObject({
      port: 8081,
      bodyLimitBytes: 1000,
      http: { maxConnections: 16, maxConnectionsPerAddress: 0, headersTimeoutMs: 0, requestTimeoutMs: 0 },
      webhooks: { allowLoopback: false, allowPrivate: false },
      logLevel: "warn",
      dataDir: path.resolve("somewhere"),
      masterKey: { file: path.resolve("keys/master.key"), fileIsDefault: false },
      otp: { emailAllowedDomains: ["example.com", "mail.example.org"] },
      webauthn: {
        origins: ["https://app.example.com", "http://localhost:3000", "android:apk-key-hash:AbC-_9", "chrome-extension://abcdefgh"],
      },
      oidcAllowedIssuers: ["https://accounts.google.com", "http://127.0.0.1:4444/realms/x"],
      host: "localhost",
    });
  });

  it("flags win over their variables, whose values are then not read", () => {
    const config = loadConfig(
      { SIGIL_HOST: "::1", SIGIL_PORT: "not a port", SIGIL_DATA_DIR: "", SIGIL_WORKERS: "none" },
      { host: "0.0.0.0", port: 7070, dataDir: "flagged", workers: 2 },
    );
    expect(config).toMatchObject({ host: "0.0.0.0", port: 7070, dataDir: path.resolve("flagged"), dataDirFrom: "--data-dir", workers: 2 });
  });

  it("SIGIL_WORKERS=auto is one worker per available core (at most 64) on PostgreSQL, one on SQLite; each has a share of the spare cores as signature threads", () => {
    const cores = os.availableParallelism();
    const postgres = { SIGIL_DATABASE_URL: "postgres://sigil@db.example.com:5432/sigil" };
    expect(loadConfig({ ...postgres, SIGIL_WORKERS: "auto" }, {}).workers).toBe(Math.min(64, cores));
    expect(loadConfig(postgres, { workers: "auto" }).workers).toBe(Math.min(64, cores));
    expect(loadConfig({ SIGIL_WORKERS: "auto" }, {}).workers).toBe(1);
    // The cores beyond the workers' event loops, shared between them; at least one thread each.
    expect(loadConfig({ SIGIL_WORKERS: "2" }, {}).signatureThreads).toBe(Math.min(4, Math.max(1, Math.floor((cores - 2) / 2))));
    expect(loadConfig({ SIGIL_WORKERS: "64" }, {}).signatureThreads).toBe(1);
    expect(loadConfig({ SIGIL_WORKERS: "2", SIGIL_SIGNATURE_THREADS: "3" }, {}).signatureThreads).toBe(3);
  });
});

describe("refused values: the message names the variable and what is expected", () => {
  const RATE =
    "`<rate>/<burst>` such as `10/20`: the requests a second the bucket refills with (above 0; `0.5` is one every 2 s) and the requests it holds (a whole number, 1 or more), each at most 1,000,000; or `off` (not counted)";
  const LEVELS = "`fatal`, `error`, `warn`, `info`, `debug`, `trace`, `silent`";
  const ISSUERS =
    "SIGIL_OIDC_ALLOWED_ISSUERS must be a comma-separated list, each item an `https://` or `http://` URL, with no query or fragment " +
    "(an issuer's `iss`)";
  const PUBLIC_URL =
    "an `https://` or `http://` URL, with no query, fragment or user name (a path is allowed: `https://wallet.example.com/sigil`)";
  // [environment, the whole message (or a pattern of it)]: one or more cases for each kind of value.
  const METRICS =
    "SIGIL_METRICS must be `on` (served at `/metrics` on the main listener), `off`, or `HOST:PORT` for a listener of its own (`127.0.0.1:9464`, `[::1]:9464`): an IP address (IPv6 in brackets) or a host name, and a port from 1 to 65535";
  const cases: [Record<string, string>, string | RegExp][] = [
    [{ SIGIL_PORT: "0" }, 'SIGIL_PORT must be a whole number from 1 to 65535, got "0"'],
    [{ SIGIL_METRICS: "yes" }, `${METRICS}, got "yes"`],
    [{ SIGIL_METRICS: "9464" }, `${METRICS}, got "9464"`],
    [{ SIGIL_METRICS: ":9464" }, `${METRICS}, got ":9464"`],
    [{ SIGIL_METRICS: "127.0.0.1:0" }, `${METRICS}, got "127.0.0.1:0" (the port must be from 1 to 65535)`],
    [{ SIGIL_METRICS: "127.0.0.1:65536" }, `${METRICS}, got "127.0.0.1:65536" (the port must be from 1 to 65535)`],
    [{ SIGIL_METRICS: "::1:9464" }, `${METRICS}, got "::1:9464"`],
    [{ SIGIL_METRICS: "[127.0.0.1]:9464" }, `${METRICS}, got "[127.0.0.1]:9464" (only an IPv6 address is written in brackets)`],
    [{ SIGIL_METRICS: "http://metrics:9464" }, `${METRICS}, got "http://metrics:9464"`],
    [{ SIGIL_METRICS: "bad_host:9464" }, `${METRICS}, got "bad_host:9464"`],
    [
      { SIGIL_METRICS: "127.0.0.1:8080" },
      "SIGIL_METRICS (127.0.0.1:8080) must not be the main listener's address (SIGIL_HOST, SIGIL_PORT): write `on` to serve /metrics there",
    ],
    // The URLs may carry a node provider's API key: never repeated; the chain ids are named.
    [
      { SIGIL_CHAIN_RPC_URLS: "http://127.0.0.1:8545" },
      /^SIGIL_CHAIN_RPC_URLS must be a comma-separated list of `<caip2>=<url>` pairs.*: item 1 does not start with a CAIP-2 chain id and "="$/,
    ],
    [
      { SIGIL_CHAIN_RPC_URLS: "eip155:1=ftp://node.example/secret-key" },
      /: the URL of eip155:1 is not an http:\/\/ or https:\/\/ URL \(not ftp:\/\/\)$/,
    ],
    [{ SIGIL_CHAIN_RPC_URLS: "eip155:1=http://a.example,eip155:1=http://b.example" }, /: eip155:1 is named twice$/],
    [{ SIGIL_CHAIN_RPC_URLS: "eip155:1=" }, /: the URL of eip155:1 is not an http:\/\/ or https:\/\/ URL \(it is not a URL\)$/],
    [{ SIGIL_PORT: "65536" }, 'SIGIL_PORT must be a whole number from 1 to 65535, got "65536"'],
    [{ SIGIL_PORT: "80a" }, 'SIGIL_PORT must be a whole number from 1 to 65535, got "80a"'],
    ...["0", "-1", "1.5", "65", "1e2", "two", "AUTO"].map((workers): [Record<string, string>, string] => [
      { SIGIL_WORKERS: workers },
      `SIGIL_WORKERS must be a whole number from 1 to 64, or \`auto\` (one per available core on PostgreSQL, 1 on SQLite), got "${workers}"`,
    ]),
    [{ SIGIL_BODY_LIMIT_BYTES: "1.5" }, 'SIGIL_BODY_LIMIT_BYTES must be a whole number, 1 or more, got "1.5"'],
    [{ SIGIL_MAX_CONNECTIONS: "-1" }, 'SIGIL_MAX_CONNECTIONS must be a whole number, 0 or more, got "-1"'],
    // A blank was read as 0 (no limit) before the catalog.
    [{ SIGIL_MAX_CONNECTIONS: " " }, 'SIGIL_MAX_CONNECTIONS must be a whole number, 0 or more, got " "'],
    [
      { SIGIL_WEBHOOK_CONCURRENCY: "9007199254740993" },
      'SIGIL_WEBHOOK_CONCURRENCY must be a whole number, 1 or more, got "9007199254740993"',
    ],
    // Longer than a Node.js timer waits: it fired at once (polling every millisecond) before the catalog.
    [{ SIGIL_WEBHOOK_POLL_MS: "2147483648" }, 'SIGIL_WEBHOOK_POLL_MS must be a whole number from 1 to 2147483647, got "2147483648"'],
    [{ SIGIL_MESSAGE_TIMEOUT_MS: "1073741824" }, 'SIGIL_MESSAGE_TIMEOUT_MS must be a whole number from 1 to 1073741823, got "1073741824"'],
    [
      { SIGIL_KEEP_ALIVE_TIMEOUT_MS: "2147482648" },
      'SIGIL_KEEP_ALIVE_TIMEOUT_MS must be a whole number from 1 to 2147482647, got "2147482648"',
    ],
    [
      { SIGIL_SESSION_MAX_SECONDS: "3155760001" },
      'SIGIL_SESSION_MAX_SECONDS must be a whole number from 1 to 3155760000, got "3155760001"',
    ],
    [{ SIGIL_SIGNATURE_THREADS: "100000000000" }, 'SIGIL_SIGNATURE_THREADS must be a whole number from 0 to 256, got "100000000000"'],
    [{ SIGIL_DATABASE_POOL_SIZE: "0" }, 'SIGIL_DATABASE_POOL_SIZE must be a whole number from 1 to 1000, got "0"'],
    [
      { SIGIL_DATABASE_PREPARED_STATEMENTS: "off" },
      'SIGIL_DATABASE_PREPARED_STATEMENTS must be `true` or `false` (`1` and `0` are accepted too), got "off"',
    ],
    [{ SIGIL_OTP_MAX_ATTEMPTS: "0" }, 'SIGIL_OTP_MAX_ATTEMPTS must be a whole number, 1 or more, got "0"'],
    [
      { SIGIL_WEBHOOK_ALLOW_LOOPBACK: "yes" },
      'SIGIL_WEBHOOK_ALLOW_LOOPBACK must be `true` or `false` (`1` and `0` are accepted too), got "yes"',
    ],
    [
      { SIGIL_WEBHOOK_ALLOW_PRIVATE: "TRUE" },
      'SIGIL_WEBHOOK_ALLOW_PRIVATE must be `true` or `false` (`1` and `0` are accepted too), got "TRUE"',
    ],
    [{ SIGIL_LOG_LEVEL: "verbose" }, `SIGIL_LOG_LEVEL must be one of ${LEVELS} (any case), got "verbose"`],
    [{ SIGIL_SECP256K1: "elliptic" }, 'SIGIL_SECP256K1 must be one of `native`, `wasm`, `noble`, got "elliptic"'],
    [{ SIGIL_HOST: "[::1]" }, 'SIGIL_HOST must be an IP address or a host name (`0.0.0.0` or `::` listens on every address), got "[::1]"'],
    [{ SIGIL_HOST: "http://localhost" }, /^SIGIL_HOST must be an IP address or a host name .*, got "http:\/\/localhost"$/],
    // Empty, these two listened on every address and kept the database in the working directory before the catalog.
    [{ SIGIL_HOST: "" }, "SIGIL_HOST is set but empty: unset it to listen on 127.0.0.1, or write 0.0.0.0 or :: to listen on every address"],
    [{ SIGIL_DATA_DIR: "" }, "SIGIL_DATA_DIR is set but empty: unset it for ./data, or write . for the working directory"],
    [
      { SIGIL_OIDC_ALLOWED_ISSUERS: "https://a.example.com,accounts.google.com" },
      `${ISSUERS}: item 2 "accounts.google.com" is not (it is not a URL)`,
    ],
    [
      { SIGIL_OIDC_ALLOWED_ISSUERS: "https://a.example.com/?tenant=1" },
      `${ISSUERS}: item 1 "https://a.example.com/?tenant=1" is not (an issuer has no query or fragment)`,
    ],
    // The base of the links in emails: an absolute http(s) URL to which a path can be appended.
    [{ SIGIL_PUBLIC_URL: "wallet.example.com" }, `SIGIL_PUBLIC_URL must be ${PUBLIC_URL}, got "wallet.example.com" (it is not a URL)`],
    [
      { SIGIL_PUBLIC_URL: "ftp://wallet.example.com" },
      `SIGIL_PUBLIC_URL must be ${PUBLIC_URL}, got "ftp://wallet.example.com" (not ftp://)`,
    ],
    [
      { SIGIL_PUBLIC_URL: "https://wallet.example.com/?x=1" },
      `SIGIL_PUBLIC_URL must be ${PUBLIC_URL}, got "https://wallet.example.com/?x=1" (a base URL has no query or fragment)`,
    ],
    [
      { SIGIL_PUBLIC_URL: "https://wallet.example.com/#accept" },
      `SIGIL_PUBLIC_URL must be ${PUBLIC_URL}, got "https://wallet.example.com/#accept" (a base URL has no query or fragment)`,
    ],
    [
      { SIGIL_PUBLIC_URL: "https://admin:pw@wallet.example.com" },
      `SIGIL_PUBLIC_URL must be ${PUBLIC_URL}, got "https://admin:pw@wallet.example.com" (no user name or password)`,
    ],
    [{ SIGIL_INVITATION_SECONDS: "0" }, /^SIGIL_INVITATION_SECONDS must be a whole number from 1 to \d+, got "0"$/],
    [{ SIGIL_LOG_NAME: "my log" }, /^SIGIL_LOG_NAME must be .* without spaces or `\+`.*, got "my log"$/],
    [{ SIGIL_LOG_NAME: "a+b" }, /^SIGIL_LOG_NAME must be .*, got "a\+b"$/],
    [{ SIGIL_LOG_CHECKPOINT_SECONDS: "-1" }, /^SIGIL_LOG_CHECKPOINT_SECONDS must be a whole number from 0 to \d+, got "-1"$/],
    [
      { SIGIL_WEBAUTHN_ORIGINS: "https://app.example.com/" },
      /^SIGIL_WEBAUTHN_ORIGINS must be .* an origin .*: item 1 "https:\/\/app.example.com\/" is not \(write it as https:\/\/app.example.com\)$/,
    ],
    [
      { SIGIL_WEBAUTHN_ORIGINS: "https://App.Example.com" },
      /: item 1 "https:\/\/App.Example.com" is not \(write it as https:\/\/app.example.com\)$/,
    ],
    [{ SIGIL_WEBAUTHN_ORIGINS: "app.example.com" }, /^SIGIL_WEBAUTHN_ORIGINS must be .*: item 1 "app.example.com" is not$/],
    [
      { SIGIL_TRUSTED_PROXIES: "10.0.0.0/8,10.0.0.0/33" },
      /^SIGIL_TRUSTED_PROXIES must be .* a CIDR block .*: item 2 "10.0.0.0\/33" is not$/,
    ],
    [{ SIGIL_TRUSTED_PROXIES: "proxy.internal" }, /^SIGIL_TRUSTED_PROXIES must be .*: item 1 "proxy.internal" is not$/],
    [
      { SIGIL_TRUSTED_PROXIES: "10.0.0.0/8,0.0.0.0/0" },
      /^SIGIL_TRUSTED_PROXIES must be .*: item 2 "0.0.0.0\/0" is not \(a \/0 block trusts every peer to name the client: list the proxies' own addresses\)$/,
    ],
    [{ SIGIL_TRUSTED_PROXIES: "::/0" }, /^SIGIL_TRUSTED_PROXIES must be .*: item 1 "::\/0" is not \(a \/0 block trusts every peer/],
    [{ SIGIL_TRUSTED_PROXIES: "010.0.0.1" }, /^SIGIL_TRUSTED_PROXIES must be .*: item 1 "010.0.0.1" is not$/],
    [{ SIGIL_TRUSTED_PROXIES: "10.0.0.0/08" }, /^SIGIL_TRUSTED_PROXIES must be .*: item 1 "10.0.0.0\/08" is not$/],
    [
      { SIGIL_WEBAUTHN_RP_IDS: "https://app.example.com" },
      /^SIGIL_WEBAUTHN_RP_IDS must be .* a domain name .*: item 1 "https:\/\/app.example.com" is not$/,
    ],
    [
      { SIGIL_EMAIL_ALLOWED_DOMAINS: "example.com,*.example.org" },
      /^SIGIL_EMAIL_ALLOWED_DOMAINS must be .*: item 2 "\*.example.org" is not$/,
    ],
    [{ SIGIL_SMTP_FROM: "Notifications" }, /^SIGIL_SMTP_FROM must be one email address, with or without a name: .*, got "Notifications"$/],
    [{ SIGIL_SMTP_FROM: "a@example.com, b@example.com" }, /^SIGIL_SMTP_FROM must be one email address/],
    [{ SIGIL_SMTP_URL: "relay.example.com:25" }, "SIGIL_SMTP_URL must be an `smtp://` or `smtps://` URL (it is not a URL)"],
    [{ SIGIL_SMTP_URL: "http://relay.example.com" }, "SIGIL_SMTP_URL must be an `smtp://` or `smtps://` URL (not http://)"],
    [{ SIGIL_SMS_URL: "ftp://sms.example.com" }, "SIGIL_SMS_URL must be an `https://` or `http://` URL (not ftp://)"],
    [{ SIGIL_SMS_URL: "not a url" }, "SIGIL_SMS_URL must be an `https://` or `http://` URL (it is not a URL)"],
    [{ SIGIL_MASTER_KEY: "abc" }, "SIGIL_MASTER_KEY must be a 32-byte key: 64 hex digits or base64"],
    [
      { SIGIL_MASTER_KEY_PREVIOUS: `${KEY},abc` },
      "SIGIL_MASTER_KEY_PREVIOUS must be a comma-separated list, each item a 32-byte key: 64 hex digits or base64: item 2 is not",
    ],
    [
      { SIGIL_DATABASE_URL: "mysql://root@127.0.0.1/sigil" },
      /^SIGIL_DATABASE_URL must be a postgres:\/\/ or postgresql:\/\/ URL, not mysql:\/\//,
    ],
    // A bucket is a rate and a burst, both above 0 and bounded; a whole number alone says no burst.
    ...["0/10", "10/0", "10", "-1/2", "1e3/10", "1,5/3", "2/1.5", "1000001/10", "10/1000001", "0.0000001/1", "none", "10/20/30"].map(
      (value): [Record<string, string>, string] => [
        { SIGIL_RATE_LIMIT_KEY_ACTIVITIES: value },
        `SIGIL_RATE_LIMIT_KEY_ACTIVITIES must be ${RATE}, got "${value}"`,
      ],
    ),
    [{ SIGIL_RATE_LIMITS: "on" }, 'SIGIL_RATE_LIMITS must be `true` or `false` (`1` and `0` are accepted too), got "on"'],
    [
      { SIGIL_HEADERS_TIMEOUT_MS: "5000", SIGIL_REQUEST_TIMEOUT_MS: "4000" },
      "SIGIL_HEADERS_TIMEOUT_MS (5000) must not exceed SIGIL_REQUEST_TIMEOUT_MS (4000)",
    ],
  ];

  it.each(cases)("refuses %j", (env, message) => {
    if (typeof message === "string") expect(refusal(env)).toBe(message);
    else expect(refusal(env)).toMatch(message);
  });

  it("a value from a flag is named by the flag and its variable", () => {
    expect(refusal({ SIGIL_PORT: "8080" }, { port: "70000" })).toBe(
      '--port (SIGIL_PORT) must be a whole number from 1 to 65535, got "70000"',
    );
    expect(refusal({}, { host: "not a host" })).toMatch(/^--host \(SIGIL_HOST\) must be an IP address or a host name/);
    expect(refusal({}, { dataDir: "" })).toBe(
      "--data-dir (SIGIL_DATA_DIR) is set but empty: unset it for ./data, or write . for the working directory",
    );
  });

  it("every bad value is named at once, one line each, in the catalog's order", () => {
    expect(
      refusal({ SIGIL_WEBHOOK_POLL_MS: "soon", SIGIL_PORT: "0", SIGIL_LOG_LEVEL: "loud" })
        .split("\n")
        .map((line) => line.split(" ")[0]),
    ).toEqual(["SIGIL_PORT", "SIGIL_LOG_LEVEL", "SIGIL_WEBHOOK_POLL_MS"]);
  });

  it("a value that is or may hold a secret is never repeated", () => {
    const secrets: Record<string, string> = {
      SIGIL_MASTER_KEY: `${SECRET}${KEY}`,
      SIGIL_MASTER_KEY_PREVIOUS: `${KEY}, ${SECRET}`,
      SIGIL_DATABASE_URL: `mysql://root:${SECRET}@127.0.0.1/sigil`,
      SIGIL_SMTP_URL: `https://relay:${SECRET}@mail.example.com`,
      SIGIL_SMS_URL: `ftp://sms.example.com/?token=${SECRET}`,
      SIGIL_SMS_TOKEN: `${SECRET}\n`,
      SIGIL_CHAIN_RPC_URLS: `eip155:1=ftp://node.example.com/v3/${SECRET}`,
    };
    for (const [variable, value] of Object.entries(secrets)) {
      const message = refusal({ [variable]: value });
      expect(message, variable).toMatch(new RegExp(`^${variable} must`));
      expect(message, variable).not.toContain(SECRET);
    }
  });
});

describe("sigil serve with a bad setting", () => {
  let database: TestDatabase;
  beforeAll(async () => {
    database = await createTestDatabase();
  });
  afterAll(async () => {
    await database.drop();
  });

  it("stops at start with exit 1 and the message, having created no data directory, key or table", async () => {
    const dataDir = path.join(database.dataDir, "data");
    const base: NodeJS.ProcessEnv = { ...process.env, SIGIL_LOG_LEVEL: "warn" };
    for (const name of Object.keys(base)) if (name.startsWith("SIGIL_") && name !== "SIGIL_TEST_BACKEND") delete base[name];
    if (database.databaseUrl) base.SIGIL_DATABASE_URL = database.databaseUrl;
    const cases: [NodeJS.ProcessEnv, string][] = [
      [{ SIGIL_WEBHOOK_POLL_MS: "3000000000" }, 'SIGIL_WEBHOOK_POLL_MS must be a whole number from 1 to 2147483647, got "3000000000"'],
      [
        { SIGIL_WORKERS: "0" },
        'SIGIL_WORKERS must be a whole number from 1 to 64, or `auto` (one per available core on PostgreSQL, 1 on SQLite), got "0"',
      ],
      [
        { SIGIL_HOST: "" },
        "SIGIL_HOST is set but empty: unset it to listen on 127.0.0.1, or write 0.0.0.0 or :: to listen on every address",
      ],
      [
        { SIGIL_SMTP_URL: `smtp:relay.example.com`, SIGIL_SMS_TOKEN: `Bearer\t${SECRET}`, SIGIL_LOG_LEVEL: "chatty" },
        [
          'SIGIL_LOG_LEVEL must be one of `fatal`, `error`, `warn`, `info`, `debug`, `trace`, `silent` (any case), got "chatty"',
          "SIGIL_SMTP_URL must be an `smtp://` or `smtps://` URL (it is not a URL)",
          "SIGIL_SMS_TOKEN must be printable ASCII with no space at either end (it is sent in an HTTP header)",
        ].join("\n"),
      ],
    ];
    const run = promisify(execFile);
    for (const [env, message] of cases) {
      const args = [path.resolve("bin/sigil.js"), "serve", "--port", String(await freePort()), "--data-dir", dataDir];
      const outcome = await run(process.execPath, args, { env: { ...base, ...env }, timeout: 30_000 }).then(
        () => ({ code: 0, stderr: "" }),
        (error: { code: number; stderr: string }) => error,
      );
      expect(outcome.code, message).toBe(1);
      expect(outcome.stderr, message).toBe(`${message}\n`);
    }
    expect(fs.existsSync(dataDir)).toBe(false);
    if (backend === "postgres") {
      const client = new pg.Client({ connectionString: database.databaseUrl! });
      await client.connect();
      try {
        expect((await client.query("select table_name from information_schema.tables where table_schema = 'public'")).rows).toEqual([]);
      } finally {
        await client.end();
      }
    }
  });

  it("--help of serve names each flag's variable and default as the catalog declares them", async () => {
    const { stdout } = await promisify(execFile)(process.execPath, [path.resolve("bin/sigil.js"), "serve", "--help"]);
    for (const s of declared.filter((setting) => setting.flag)) {
      const line = stdout.split("\n").find((l) => l.trimStart().startsWith(`${s.flag} `));
      const shown = (s.defaultText ?? String(s.default)).replaceAll("`", "");
      expect(line, s.flag).toContain(`(default: ${s.variable}, else ${shown})`);
    }
  });
});
