// The HTTP face of the service: one route per registered operation, the error body the official
// clients parse, body, time and connection limits, request ids, /health and /ready. No SQL and no
// business rules live here.
import cluster from "node:cluster";
import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance, type FastifyReply, type FastifyRequest } from "fastify";
import pino from "pino";
import { ConfigError, type Config } from "../config.js";
import { ServiceError, serviceError } from "../errors.js";
import { RETRY_INFO_TYPE } from "../services/send-budgets.js";
import { openStore, type Store } from "../store/database.js";
import { Pipeline } from "../activities/pipeline.js";
import { rateLimiter } from "../services/rate-limits.js";
import type { Keyring } from "../crypto/envelope.js";
import { type OperationEnvironment, queryPath } from "../registry/registry.js";
import { answerDryRun } from "../activities/policy-evaluation.js";
import { SignatureThreads } from "../crypto/signature-threads.js";
import { selectSecp256k1, type Secp256k1Selection } from "../crypto/secp256k1.js";
import { signatureLibraries } from "../crypto/sign.js";
import {
  bundleSigner,
  clientSecretKey,
  identityTokenSigner,
  otpCodeHasher,
  serviceSigningKey,
  sessionSigner,
  type BundleSigner,
  type ClientSecretKey,
  type IdentityTokenSigner,
  type ServiceSigningKey,
  type SessionSigner,
} from "../services/service-keys.js";
import { logSigner, startCheckpoints, transparencyLogOf, type LogSigner } from "../services/log-checkpoints.js";
import { LogSequencer } from "../services/log-sequencer.js";
import { WebhookDispatcher } from "../services/webhook-dispatcher.js";
import { MessageCourier } from "../services/message-courier.js";
import { ChainBroadcaster } from "../services/chain-broadcaster.js";
import { ChainRpc, type ContractAbiLookup } from "../services/chain-rpc.js";
import { uploadedAbi } from "../operations/contracts/contract-calls.js";
import { oidcVerifier } from "../auth/oidc.js";
import { trustedProxyTest } from "../auth/ip-allowlists.js";
import { oauth2Providers } from "../services/oauth2-providers.js";
import { purgeExpiredImportTargets } from "../operations/secure-channel.js";
import { describeToken, forgetNewKey, loadKeyring } from "../crypto/master-key.js";
import { assertKeyringOpensStore } from "../services/sealed-secrets.js";
import { activityOperations, queryOperations } from "../operations/catalog.js";
import { notServedError, notServedOperations } from "../operations/not-served.js";
import { ACCEPT_PATH } from "../operations/organizations/invitations.js";
import { buildOpenApiDocument } from "./openapi.js";
import { serveConsole } from "./console.js";
import { clientErrorHandler, limitConnections, timeoutOptions } from "./limits.js";
import { REQUEST_ID_LOG_LABEL, requestContextOf, requestIdOptions, traceRequests } from "./request-ids.js";
import { Readiness, readyRoute, SCRAPE_READINESS_MAX_AGE_MS } from "./readiness.js";
import { outageError } from "../services/database-outages.js";
import { Metrics } from "../services/metrics.js";
import { listenForScrapes, recordRequests, refusalOf, scrapeSource, serveMetrics, shareWithPrimary } from "./metrics.js";
import packageJson from "../../package.json" with { type: "json" };

export interface RunningServer {
  app: FastifyInstance;
  store: Store;
  /** Base URL the server answers on, e.g. http://127.0.0.1:8080 */
  url: string;
  /** Where its metrics are scraped (SIGIL_METRICS), when they are served. */
  metricsUrl?: string;
  /** This process's sequencer of the transparency logs (its flush appends what is pending now). */
  logSequencer: LogSequencer;
  /** Turns /ready to 503 (shutdown) while everything else is served as before: close() does it first. */
  drain(): void;
  /** The graceful stop (docs/running.md#readiness-and-shutdown): /ready answers 503, then, after
   * SIGIL_SHUTDOWN_DELAY_MS, no new connection is accepted, the requests in flight are finished, the
   * outbox workers finish what they are sending, and the database and signature threads are closed. */
  close(): Promise<void>;
}

/** The Retry-After (whole seconds) of a 429 or 503 whose error body carries a google.rpc.RetryInfo
 * detail: a client told "too many" or "unavailable" is also told when to come back. */
function retryAfterOf(status: number, body: unknown): string | undefined {
  if (status !== 429 && status !== 503) return undefined;
  const details = (body as { details?: Array<{ "@type"?: unknown; retryDelay?: unknown }> } | null)?.details;
  const delay = Array.isArray(details) ? details.find((d) => d?.["@type"] === RETRY_INFO_TYPE)?.retryDelay : undefined;
  const seconds = typeof delay === "string" && /^\d+(\.\d+)?s$/.test(delay) ? Math.ceil(Number(delay.slice(0, -1))) : undefined;
  return seconds !== undefined ? String(Math.max(1, seconds)) : undefined;
}

/** A URL as logs and error messages show it: a `token` in its query is a credential (an invitation
 * link's, which a browser opening the emailed link sends to /invitations/accept), so it is redacted. */
const shownUrl = (url: string) => url.replace(/([?&]token=)[^&#]*/gi, "$1<redacted>");

/** What a browser opening an invitation link sees: acceptance registers a key, which a page cannot
 * do without a program behind it. It does not repeat the token; no-referrer keeps the address (and
 * the token in it) from being sent to any site the page might lead to. */
const ACCEPT_PAGE = [
  "<!doctype html>",
  '<html lang="en"><head><meta charset="utf-8"><meta name="referrer" content="no-referrer"><title>Invitation</title></head><body>',
  "<h1>Invitation</h1>",
  "<p>This link accepts an invitation to join an organization. Accepting it registers an API key for you: your organization's",
  'application does it by sending <code>POST</code> to this address with <code>{"token", "apiKey"}</code>, stamped by that key.</p>',
  "<p>Keep this link to yourself: it can be used once.</p>",
  "</body></html>",
].join("\n");

/** Where the keys of the OIDC tokens Sigil issues are published (the discovery document names it). */
const IDENTITY_JWKS_PATH = "/oauth2/jwks";

export function createLogger(config: Pick<Config, "logLevel">): pino.Logger {
  return pino({ level: config.logLevel, base: { service: "sigil" } });
}

export interface ServerOptions {
  /** The trusted server time (liveness window, policies' time.now). Tests replace it to move time. */
  clock?: () => number;
  /** Set in a worker of `sigil serve --workers N`: its primary has made the database, the master key
   * and the deployment's keys (prepareDeployment), so this process only opens them. */
  prepared?: boolean;
  /** SQLite: how a commit's write-ahead log reaches the disk. Tests hold it to watch what waits for it. */
  flushWal?: (file: string) => Promise<void>;
}

export interface ServerParts {
  store: Store;
  keyring: Keyring;
  signatures: SignatureThreads;
  /** The key webhook deliveries are signed with; its public half is published. */
  webhookKey: ServiceSigningKey;
  /** Signs export and import bundles; its public half is published as `signerPublicKey`. */
  bundles: BundleSigner;
  /** Signs session JWTs; published as a JWKS. */
  sessions: SessionSigner;
  /** The key OAuth 2.0 client secrets arrive encrypted to; published as `tlsFetcherEncryptPublicKey`. */
  clientSecrets: ClientSecretKey;
  /** Signs the OIDC tokens oauth2_authenticate issues; published in Sigil's issuer JWKS. */
  identityTokens: IdentityTokenSigner;
  /** Signs the organizations' log checkpoints; its verifier key is published. */
  logSigner: LogSigner;
  /** Appends final activities to their organizations' logs after they commit. */
  logSequencer: LogSequencer;
  /** HMAC under the deployment's OTP key (codes are stored only as such hashes). */
  otpCodeHash: (message: string) => string;
  /** The chain nodes (SIGIL_CHAIN_RPC_URLS). */
  chains: ChainRpc;
  /** What GET /ready checks, and whether a shutdown has begun. */
  readiness: Readiness;
  onWebhookEventsQueued?: () => void;
  onMessagesQueued?: () => void;
  onBroadcastsQueued?: () => void;
  /** The process's metrics (SIGIL_METRICS not off): requests and activities are recorded in them. */
  metrics?: Metrics;
}

/**
 * Where a contract's ABI is found, to name the custom errors it reverts with: both the activities
 * (a reverted simulation) and the broadcaster (a transaction reverted on chain) ask it. One place to
 * wire the smart contract interfaces' look-up in (uploadedAbi: a stored ABI that no longer passes the
 * checks names nothing, rather than failing the activity or the broadcaster's look).
 */
const findContractAbi: ContractAbiLookup = uploadedAbi;

export function buildApp(
  config: Config,
  {
    store,
    keyring,
    signatures,
    webhookKey,
    bundles,
    sessions,
    clientSecrets,
    identityTokens,
    logSigner,
    logSequencer,
    otpCodeHash,
    chains,
    readiness,
    onWebhookEventsQueued,
    onMessagesQueued,
    onBroadcastsQueued,
    metrics,
  }: ServerParts,
  logger: pino.Logger,
  options: ServerOptions = {},
): FastifyInstance {
  const app = Fastify({
    loggerInstance: logger as unknown as FastifyBaseLogger,
    bodyLimit: config.bodyLimitBytes,
    ...timeoutOptions(config.http),
    clientErrorHandler: clientErrorHandler(config.http, metrics),
    // Per-request lines come from the onResponse hook below, at debug level; activities log themselves.
    logController: new LogController({ disableRequestLogging: true, requestIdLogLabel: REQUEST_ID_LOG_LABEL }),
    ...requestIdOptions,
    // request.ip is the client: the TCP peer, or, when the peer is a trusted proxy (SIGIL_TRUSTED_PROXIES),
    // the right-most X-Forwarded-For address that is not one. Never trusted by default: anyone can write
    // the header, and IP allowlists are checked against this address. A function, so that addresses are
    // read as the allowlists read them (auth/ip-allowlists.ts), not by proxy-addr's parser.
    trustProxy: config.http.trustedProxies.length > 0 ? trustedProxyTest(config.http.trustedProxies) : false,
  });
  limitConnections(app.server, config.http, logger, metrics);
  traceRequests(app);
  // Before any route is registered: each route's series are bound to it as it is.
  if (metrics) recordRequests(app, metrics);
  const issuer = config.invitations.publicUrl;
  const env: OperationEnvironment = {
    webauthn: config.webauthn,
    keyring,
    signatures,
    webhooks: config.webhooks,
    bundles,
    importTargetTtlMs: config.importTargetTtlMs,
    sessions: { ...config.sessions, signer: sessions },
    otp: { ...config.otp, codeHash: otpCodeHash, messaging: config.messages },
    // Sigil's own issuer is verified like any other: through its discovery document and JWKS.
    oidc: oidcVerifier([...config.oidcAllowedIssuers, ...(issuer ? [issuer] : [])], { clock: options.clock }),
    chains,
    findContractAbi,
    invitations: config.invitations,
    oauth2: { providers: oauth2Providers(config.oauth2Providers), clientSecrets, issuer, identityTokens },
    transparencyLog: transparencyLogOf(store, logSigner, logSequencer),
  };
  const pipeline = new Pipeline({
    store,
    timestampWindowMs: config.timestampWindowMs,
    queryCredentialMaxAgeMs: config.queryCredentialMaxAgeMs,
    env,
    logger,
    clock: options.clock,
    onWebhookEventsQueued,
    onMessagesQueued,
    onBroadcastsQueued,
    onFinalActivity: () => logSequencer.notify(),
    rateLimits: rateLimiter(config.rateLimits, store, logger),
    dryRun: answerDryRun,
    ...(metrics ? { metrics } : {}),
  });

  // Bodies stay raw bytes: the stamp signs, and the fingerprint hashes, the exact bytes sent.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_req, body, done) => done(null, body));

  // A refused request (4xx, and 501 for an operation Sigil does not serve) is logged at info, the
  // default level, with its code: an operator sees why a client is failing without turning on debug.
  // Another 5xx the service chose (Unavailable…) is a warning. The body is never logged; messages
  // never carry secrets.
  const refuse = (request: FastifyRequest, reply: FastifyReply, error: ServiceError) => {
    const body = error.toBody();
    const fields = {
      method: request.method,
      url: shownUrl(request.url),
      ip: request.ip,
      status: error.httpStatus,
      errorCode: error.turnkeyErrorCode,
      error: error.message,
      // What the service's words stand for (a lost connection's driver error): for the log only.
      ...(error.cause instanceof Error ? { cause: error.cause.message || (error.cause as { code?: string }).code } : {}),
    };
    if (error.httpStatus < 500 || error.httpStatus === 501) request.log.info(fields, "request refused");
    else request.log.warn(fields, "request failed");
    const refusal = metrics && refusalOf(error.turnkeyErrorCode);
    if (refusal) metrics.refused(refusal);
    const retryAfter = retryAfterOf(error.httpStatus, body);
    if (retryAfter) reply.header("retry-after", retryAfter);
    return reply.status(error.httpStatus).send(body);
  };

  app.setErrorHandler((error, request, reply) => {
    if (error instanceof ServiceError) return refuse(request, reply, error);
    const outage = outageError(error);
    if (outage) return refuse(request, reply, outage);
    const fastifyError = error as { code?: string; statusCode?: number; message: string };
    if (fastifyError.code === "FST_ERR_CTP_BODY_TOO_LARGE") {
      return refuse(request, reply, serviceError("REQUEST_TOO_LARGE", `request body exceeds the limit of ${config.bodyLimitBytes} bytes`));
    }
    if (fastifyError.statusCode && fastifyError.statusCode < 500) {
      return refuse(request, reply, new ServiceError("InvalidArgument", "REQUEST_INVALID", fastifyError.message, fastifyError.statusCode));
    }
    request.log.error({ err: error }, "unhandled error");
    return reply.status(500).send(serviceError("INTERNAL", "internal error").toBody());
  });

  app.setNotFoundHandler((request, reply) =>
    refuse(request, reply, serviceError("ENDPOINT_NOT_FOUND", `no endpoint ${request.method} ${shownUrl(request.url)}`)),
  );

  // An answer shows what the database holds. On SQLite a transaction is readable a moment before its
  // write-ahead log is on disk (store/wal-flush.ts): no answer leaves before that flush is done.
  app.addHook("onSend", async (_request, _reply, payload) => {
    await store.settled();
    return payload;
  });

  app.addHook("onResponse", (request, reply, done) => {
    request.log.debug(
      { method: request.method, url: shownUrl(request.url), status: reply.statusCode, ms: Math.round(reply.elapsedTime) },
      "request",
    );
    done();
  });

  // Liveness: 200 while the process answers, whatever the database does (a restart would not bring
  // the database back). Whether to send it traffic is /ready's answer (readiness.ts).
  app.get("/health", async () => ({ status: "ok" }));
  readyRoute(app, readiness);
  // What a client or receiver needs to know of this deployment's own keys (no authentication).
  const webhookVerificationKey = { keyId: webhookKey.keyId, publicKey: webhookKey.publicKey, algorithm: "ed25519", signatureVersion: "v1" };
  // signerPublicKey: what clients pass as dangerouslyOverrideSignerPublicKey to open export bundles.
  // sessionJwks: the keys session JWTs and verification tokens are signed with (ES256), also at
  // /.well-known/jwks.json for libraries that want a JWKS URL.
  const sessionJwks = { keys: [sessions.jwk] };
  // tlsFetcherEncryptPublicKey: what clients pass to encryptOauth2ClientSecret (the product's name).
  app.get("/.well-known/sigil.json", async () => ({
    signerPublicKey: bundles.publicKey,
    webhookVerificationKeys: [webhookVerificationKey],
    sessionJwks,
    tlsFetcherEncryptPublicKey: clientSecrets.publicKey,
    // The key the organizations' log checkpoints are signed with, as a signed-note verifier key
    // (docs/audit-log.md): what an auditor opens checkpoints with.
    transparencyLogVerifierKey: logSigner.verifierKey,
  }));
  // Sigil as an OIDC issuer (the tokens oauth2_authenticate issues): the discovery document at
  // <SIGIL_PUBLIC_URL>/.well-known/openid-configuration, where verifiers (Sigil's own included) find
  // the JWKS. Without SIGIL_PUBLIC_URL there is no issuer, and no document.
  const identityJwks = { keys: [identityTokens.jwk] };
  app.get(IDENTITY_JWKS_PATH, async (_request, reply) => {
    reply.header("cache-control", "public, max-age=3600");
    return identityJwks;
  });
  if (issuer) {
    const discovery = {
      issuer,
      jwks_uri: `${issuer}${IDENTITY_JWKS_PATH}`,
      response_types_supported: ["id_token"],
      subject_types_supported: ["public"],
      id_token_signing_alg_values_supported: ["ES256"],
      claims_supported: [
        "iss",
        "sub",
        "aud",
        "exp",
        "iat",
        "nonce",
        "preferred_username",
        "name",
        "email",
        "email_verified",
        "encrypted_bearer_token",
      ],
    };
    app.get("/.well-known/openid-configuration", async (_request, reply) => {
      reply.header("cache-control", "public, max-age=3600");
      return discovery;
    });
  }
  app.get("/.well-known/jwks.json", async (_request, reply) => {
    reply.header("cache-control", "public, max-age=3600");
    return sessionJwks;
  });
  // The product's key-discovery document for webhook receivers, in JWKS form.
  app.get("/public/v1/discovery/webhooks/jwks", async (_request, reply) => {
    reply.header("cache-control", "public, max-age=3600");
    return {
      keys: [
        {
          kid: webhookKey.keyId,
          kty: "OKP",
          crv: "Ed25519",
          alg: "EdDSA",
          use: "sig",
          x: Buffer.from(webhookKey.publicKey, "hex").toString("base64url"),
          turnkey_signature_algorithm: "ed25519",
          turnkey_signature_version: "v1",
        },
      ],
    };
  });
  const openApi = buildOpenApiDocument(packageJson.version);
  app.get("/openapi.json", async () => openApi);
  // The web console, when `npm run build` has built it (docs/console.md).
  if (!serveConsole(app)) logger.debug("the web console is not built (npm run build): /console is not served");
  if (metrics && config.metrics.serve === "main") serveMetrics(app, scrapeSource(metrics), metrics.contentType);

  const raw = (body: unknown) => (Buffer.isBuffer(body) ? body : Buffer.alloc(0));
  for (const operation of activityOperations) {
    app.post(`/public/v1/submit/${operation.name}`, async (request, reply) => {
      const response = await pipeline.submit(
        operation,
        raw(request.body),
        request.raw.headersDistinct,
        request.ip,
        requestContextOf(request),
      );
      const retryAfter = retryAfterOf(response.status, response.body);
      if (retryAfter) reply.header("retry-after", retryAfter);
      return reply.status(response.status).send(response.body);
    });
  }
  for (const operation of queryOperations) {
    app.post(queryPath(operation), async (request, reply) => {
      const response = await pipeline.query(operation, raw(request.body), request.raw.headersDistinct, request.ip);
      return reply.status(response.status).send(response.body);
    });
  }
  // Sigil's own acceptance of an invitation (docs/invitations.md): the link in the invitation email
  // points here; a program or a console page POSTs the token with the key to register, stamped by it.
  app.post(ACCEPT_PATH, async (request, reply) => {
    const response = await pipeline.acceptInvitation(raw(request.body), request.raw.headersDistinct, request.ip, requestContextOf(request));
    return reply.status(response.status).send(response.body);
  });
  app.get(ACCEPT_PATH, async (_request, reply) =>
    reply.header("cache-control", "no-store").header("referrer-policy", "no-referrer").type("text/html; charset=utf-8").send(ACCEPT_PAGE),
  );
  // The product's hosted-only services: 501, before the stamp or the body is looked at (the answer
  // says only what the product's public API description says, so an unauthenticated probe learns
  // nothing more; and a caller is not made to fix a request that can never succeed).
  for (const operation of notServedOperations) {
    app.post(operation.path, async () => {
      throw notServedError(operation);
    });
  }
  return app;
}

/**
 * Chooses the secp256k1 library (SIGIL_SECP256K1, else the fastest that loads) before anything is
 * created: a library the operator named that does not load stops the start. A fallback is a warning;
 * the choice itself is said at `level` (a cluster's primary says it once for its workers).
 */
function chooseSignatureLibraries(config: Config, logger: pino.Logger, level: "info" | "debug"): void {
  let secp256k1: Secp256k1Selection;
  try {
    secp256k1 = selectSecp256k1(config.secp256k1);
  } catch (error) {
    throw new ConfigError(`SIGIL_SECP256K1 is ${config.secp256k1}, but ${(error as Error).message}`);
  }
  if (secp256k1.fallbacks.length > 0) {
    logger.warn({ secp256k1: secp256k1.implementation.name, notLoaded: secp256k1.fallbacks }, "secp256k1: a faster library did not load");
  }
  logger[level](signatureLibraries(), "signature libraries");
}

/**
 * Opens the deployment's database and master key and checks that the key opens what the database
 * holds. `create`: makes whichever is missing (the first start). A key made just now for a database
 * that cannot be opened, or that already has secrets sealed under another key, is useless: it is not
 * left behind to be mistaken for the real one.
 */
async function openDeployment(
  config: Config,
  logger: pino.Logger,
  mode: "create" | "existing",
  flushWal?: (file: string) => Promise<void>,
  metrics?: Metrics,
) {
  if (config.masterKey.token) return openTokenDeployment(config, logger, mode, flushWal);
  const loaded = loadKeyring(config.masterKey);
  const { keyring, source, created } = loaded;
  const forget = () => forgetNewKey(config.masterKey.file, loaded);
  let store: Store;
  try {
    store = await openStore({
      ...config,
      mode,
      flushWal,
      ...(metrics ? { transactionObserver: metrics.transactionObserver } : {}),
      onConnectionError: (err) => logger.warn({ err }, "database connection lost; the pool will reconnect"),
    });
  } catch (error) {
    forget();
    throw error;
  }
  try {
    await assertKeyringOpensStore(store.db, keyring, { masterKey: config.masterKey, dataDirOrigin: config.dataDirFrom, created });
  } catch (error) {
    forget();
    await store.close();
    throw error;
  }
  return { store, keyring, source, created };
}

/**
 * openDeployment with the master key in a PKCS#11 token: the token is checked (module, token, PIN,
 * key) before the database is opened, so a start refused for it creates and writes nothing; then the
 * database's data key is unwrapped (made, on a first start) and checked against what the database holds.
 */
async function openTokenDeployment(
  config: Config,
  logger: pino.Logger,
  mode: "create" | "existing",
  flushWal?: (file: string) => Promise<void>,
) {
  // Loaded here only: a deployment with a key file never loads the native PKCS#11 binding.
  const { checkToken, tokenKeyring } = await import("../services/token-keyring.js");
  const warnings = checkToken(config.masterKey.token!);
  for (const warning of warnings) logger.warn({ masterKey: describeToken(config.masterKey.token!) }, `master key: ${warning}`);
  const store = await openStore({
    ...config,
    mode,
    flushWal,
    onConnectionError: (err) => logger.warn({ err }, "database connection lost; the pool will reconnect"),
  });
  try {
    const { keyring, source, created } = await tokenKeyring(store, config.masterKey, mode === "create");
    await assertKeyringOpensStore(store.db, keyring, { masterKey: config.masterKey, dataDirOrigin: config.dataDirFrom, created: false });
    return { store, keyring, source, created };
  } catch (error) {
    await store.close();
    throw error;
  }
}

/** The deployment's own keys, made (sealed) on the first start, and the expired import targets
 * dropped: what any start does once before serving. */
async function deploymentKeys(config: Config, store: Store, keyring: Keyring, clock: () => number) {
  const keys = {
    webhookKey: await serviceSigningKey(store, keyring),
    bundles: await bundleSigner(store, keyring),
    sessions: await sessionSigner(store, keyring),
    otpCodeHash: await otpCodeHasher(store, keyring),
    clientSecrets: await clientSecretKey(store, keyring),
    identityTokens: await identityTokenSigner(store, keyring),
    logSigner: await logSigner(store, keyring, config.transparencyLog.name),
  };
  // Import targets that expired while no server ran are of no use to anyone: drop them.
  await store.transact("exclusive", (trx) => purgeExpiredImportTargets(trx, clock()));
  return keys;
}

const logMasterKey = (config: Config, logger: pino.Logger, source: string, created: boolean) =>
  config.masterKey.token
    ? created
      ? logger.info({ masterKey: source }, "made the data key and stored it wrapped by the token's key")
      : logger.info({ masterKey: source }, "master key: the data key was unwrapped by the token")
    : created
      ? logger.warn({ masterKey: source }, "created a new master key: back it up, every stored secret is sealed under it")
      : logger.info({ masterKey: source }, "master key loaded");

/**
 * What the primary of `sigil serve --workers N` does once before it starts its workers, so that they
 * do not race each other on a fresh deployment: makes and migrates the database, makes the master
 * key, checks that the key opens the database, and makes the deployment's keys. It serves nothing.
 */
export async function prepareDeployment(config: Config, logger: pino.Logger): Promise<{ location: string }> {
  chooseSignatureLibraries(config, logger, "info");
  const { store, keyring, source, created } = await openDeployment(config, logger, "create");
  try {
    await deploymentKeys(config, store, keyring, Date.now);
  } finally {
    await store.close();
  }
  logMasterKey(config, logger, source, created);
  return { location: store.location };
}

export async function startServer(config: Config, logger = createLogger(config), options: ServerOptions = {}): Promise<RunningServer> {
  chooseSignatureLibraries(config, logger, options.prepared ? "debug" : "info");
  // Off, nothing is collected at all.
  const metrics = config.metrics.serve === "off" ? undefined : new Metrics();
  // A worker's deployment was made by its primary (prepareDeployment): it opens, never creates.
  const { store, keyring, source, created } = await openDeployment(
    config,
    logger,
    options.prepared ? "existing" : "create",
    options.flushWal,
    metrics,
  );
  if (options.prepared) logger.debug({ masterKey: source }, "master key loaded");
  else logMasterKey(config, logger, source, created);
  const signatures = new SignatureThreads(config.signatureThreads, metrics ? { onWait: metrics.onSignatureWait } : {});
  let dispatcher: WebhookDispatcher;
  let courier: MessageCourier;
  let broadcaster: ChainBroadcaster;
  let readiness: Readiness;
  let app: FastifyInstance;
  let checkpointSigner: LogSigner;
  let logSequencer: LogSequencer;
  let scrapes: { url: string; close(): Promise<void> } | undefined;
  /** The app once it listens: to be closed again if the start fails after that. */
  let listening: FastifyInstance | undefined;
  try {
    const { webhookKey, bundles, sessions, otpCodeHash, clientSecrets, identityTokens, logSigner } = await deploymentKeys(
      config,
      store,
      keyring,
      options.clock ?? Date.now,
    );
    checkpointSigner = logSigner;
    logSequencer = new LogSequencer(store, logger, options.clock);
    dispatcher = new WebhookDispatcher(store, webhookKey, config.webhooks, logger, options.clock);
    courier = new MessageCourier(store, keyring, config.messages, logger, options.clock);
    const chains = new ChainRpc(config.chains);
    broadcaster = new ChainBroadcaster(store, chains, findContractAbi, config.chains, logger, options.clock);
    readiness = new Readiness({ store, keyring, outboxes: { webhooks: dispatcher, messages: courier, broadcasts: broadcaster } }, logger);
    if (metrics) {
      const ready = async () => Object.keys(await readiness.recently(SCRAPE_READINESS_MAX_AGE_MS)).length === 0;
      metrics.watch({ store, signatures, logger, version: packageJson.version, ready, ...(options.clock ? { clock: options.clock } : {}) });
      dispatcher.observeAttempts(metrics.outboxRecorder("webhooks"));
      courier.observeAttempts(metrics.outboxRecorder("messages"));
      broadcaster.observeAttempts(metrics.outboxRecorder("broadcasts"));
    }
    app = buildApp(
      config,
      {
        store,
        keyring,
        signatures,
        webhookKey,
        bundles,
        sessions,
        clientSecrets,
        identityTokens,
        logSigner,
        logSequencer,
        otpCodeHash,
        onWebhookEventsQueued: () => dispatcher.notify(),
        chains,
        onMessagesQueued: () => courier.notify(),
        onBroadcastsQueued: () => broadcaster.notify(),
        readiness,
        ...(metrics ? { metrics } : {}),
      },
      logger,
      options,
    );
    await app.listen({ host: config.host, port: config.port });
    listening = app;
    // A worker of `serve --workers N` answers its primary, which gathers and serves the cluster's.
    if (metrics && cluster.isWorker) shareWithPrimary(metrics);
    else if (metrics && config.metrics.serve === "listener")
      scrapes = await listenForScrapes(config.metrics, () => metrics.scrape(), metrics.contentType, logger);
  } catch (error) {
    await listening?.close();
    await store.close();
    await signatures.close();
    throw error;
  }
  // Deliveries left by an earlier run (or by other processes) go out from now on.
  dispatcher.start();
  courier.start();
  broadcaster.start();
  // Final activities left unsequenced (by other processes, or before a crash) are appended from now on.
  logSequencer.start();
  // Checkpoints of the logs that grew, signed every SIGIL_LOG_CHECKPOINT_SECONDS.
  const stopCheckpoints = startCheckpoints(store, checkpointSigner, config.transparencyLog.checkpointMs, logger);
  const address = app.server.address();
  const port = typeof address === "object" && address ? address.port : config.port;
  const host = config.host.includes(":") ? `[${config.host}]` : config.host;
  // A worker's primary says it once for all of them.
  logger[options.prepared ? "debug" : "info"](
    { url: `http://${host}:${port}`, database: store.location, ...(scrapes ? { metrics: scrapes.url } : {}) },
    "sigil is accepting requests",
  );
  const metricsUrl = scrapes?.url ?? (metrics && config.metrics.serve === "main" ? `http://${host}:${port}/metrics` : undefined);
  return {
    app,
    store,
    url: `http://${host}:${port}`,
    ...(metricsUrl ? { metricsUrl } : {}),
    logSequencer,
    drain: () => readiness.drain(),
    async close() {
      readiness.drain();
      if (config.shutdownDelayMs > 0) {
        logger.info({ delayMs: config.shutdownDelayMs }, "shutting down: /ready answers 503; requests are served until the delay ends");
        await new Promise((resolve) => setTimeout(resolve, config.shutdownDelayMs));
      }
      stopCheckpoints();
      await scrapes?.close();
      await app.close();
      await dispatcher.close();
      await courier.close();
      await broadcaster.close();
      // After the app: the activities it committed last are appended before the database closes.
      await logSequencer.flush().catch(() => undefined);
      await logSequencer.close();
      await store.close();
      await signatures.close();
    },
  };
}
