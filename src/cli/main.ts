// sigil serve | keygen | bootstrap | rotate-master-key | info | webhooks | outbox — thin: parse flags, call the library, print one result.
import { parseArgs } from "node:util";
import { loadConfig } from "../config.js";
import { startServer } from "../http/server.js";
import { openStore } from "../store/database.js";
import { generateP256KeyPair } from "../crypto/keys.js";
import { createOrganization } from "../operations/organizations.js";
import { resealAll } from "../operations/secrets.js";
import { renderDelivery } from "../operations/webhooks.js";
import { BUNDLE_SIGNER, SESSION_SIGNER, WEBHOOK_SIGNING } from "../operations/service-keys.js";
import { readOutbox } from "../messages/courier.js";
import { Keyring, MASTER_KEY_BYTES } from "../crypto/envelope.js";
import { loadKeyring, nextKeyFile, parseMasterKey, syncDirectory, writeKeyFile } from "../crypto/master-key.js";
import path from "node:path";
import crypto from "node:crypto";
import fs from "node:fs";

const USAGE = `usage:
  sigil serve [--host H] [--port P] [--data-dir D]
  sigil keygen
  sigil bootstrap --org-name N --user-name U --api-public-key K [--user-email E] [--api-key-name X] [--data-dir D]
  sigil rotate-master-key [--data-dir D] [--new-key-file F]
  sigil info [--data-dir D]
  sigil webhooks [--status pending|delivered|failed|cancelled] [--organization ID] [--limit N] [--data-dir D]
  sigil outbox [--organization ID] [--data-dir D]

Set SIGIL_DATABASE_URL=postgres://… to keep state in PostgreSQL instead of SQLite.`;

async function serve(args: string[]) {
  const { values } = parseArgs({ args, options: { host: { type: "string" }, port: { type: "string" }, "data-dir": { type: "string" } } });
  const config = loadConfig(process.env, { host: values.host, port: values.port, dataDir: values["data-dir"] });
  const server = await startServer(config);
  const stop = async (signal: string) => {
    server.app.log.info({ signal }, "shutting down");
    await server.close();
    process.exit(0);
  };
  process.once("SIGINT", () => void stop("SIGINT"));
  process.once("SIGTERM", () => void stop("SIGTERM"));
}

async function bootstrap(args: string[]) {
  const { values } = parseArgs({
    args,
    options: {
      "data-dir": { type: "string" },
      "org-name": { type: "string" },
      "user-name": { type: "string" },
      "user-email": { type: "string" },
      "api-public-key": { type: "string" },
      "api-key-name": { type: "string" },
    },
  });
  for (const required of ["org-name", "user-name", "api-public-key"] as const) {
    if (!values[required]) throw new Error(`bootstrap needs --${required}\n\n${USAGE}`);
  }
  const config = loadConfig(process.env, { dataDir: values["data-dir"] });
  const store = await openStore(config);
  try {
    const created = await createOrganization(store.db, {
      organizationName: values["org-name"]!,
      userName: values["user-name"]!,
      userEmail: values["user-email"],
      apiPublicKey: values["api-public-key"]!,
      apiKeyName: values["api-key-name"] ?? "bootstrap",
    });
    process.stdout.write(JSON.stringify(created) + "\n");
  } finally {
    await store.close();
  }
}

/**
 * Re-seals every stored secret under a new master key, in one transaction. With the default key file
 * the new key is generated into master.key.next first, so a crash at any point leaves every secret
 * readable (the keyring loads master.key, master.key.next and master.key.previous-*), and running the
 * command again finishes the job. With SIGIL_MASTER_KEY the new key comes from --new-key-file.
 */
async function rotateMasterKey(args: string[]) {
  const { values } = parseArgs({ args, options: { "data-dir": { type: "string" }, "new-key-file": { type: "string" } } });
  const config = loadConfig(process.env, { dataDir: values["data-dir"] });
  const { keyring: from } = loadKeyring(config.masterKey);
  const fileBased = !config.masterKey.key;
  let newKey: Buffer;
  if (values["new-key-file"]) {
    newKey = parseMasterKey(fs.readFileSync(values["new-key-file"], "utf8"), values["new-key-file"]);
  } else if (fileBased) {
    const next = nextKeyFile(config.masterKey.file);
    if (!fs.existsSync(next)) writeKeyFile(next, crypto.randomBytes(MASTER_KEY_BYTES));
    newKey = parseMasterKey(fs.readFileSync(next, "utf8"), next);
  } else {
    throw new Error(`SIGIL_MASTER_KEY is set: give the new key with --new-key-file F\n\n${USAGE}`);
  }
  const to = new Keyring(newKey);
  // One rotation at a time: a second one would re-seal under yet another key mid-way.
  const lock = `${config.masterKey.file}.rotating`;
  let lockFd: number;
  try {
    lockFd = fs.openSync(lock, "wx", 0o600);
  } catch {
    throw new Error(`another rotation holds ${lock}; if none is running (a crash), remove the file and run again`);
  }
  const store = await openStore(config).catch((error) => {
    fs.closeSync(lockFd);
    fs.rmSync(lock, { force: true });
    throw error;
  });
  let report;
  try {
    report = await resealAll(store.db, from, to);
  } finally {
    await store.close();
    fs.closeSync(lockFd);
    fs.rmSync(lock, { force: true });
  }
  if (fileBased && !values["new-key-file"]) {
    // Link, then rename over: master.key exists at every instant, holding the old key or the new.
    const file = config.masterKey.file;
    const previous = `${file}.previous-${from.currentKeyId}`;
    if (!fs.existsSync(previous)) fs.linkSync(file, previous);
    fs.renameSync(nextKeyFile(file), file);
    syncDirectory(path.dirname(file));
  }
  process.stdout.write(JSON.stringify({ resealed: report.resealed, sealedBefore: report.before, from: from.currentKeyId, to: to.currentKeyId }) + "\n");
  const after = fileBased && !values["new-key-file"]
    ? `The new key is ${config.masterKey.file}; the old one was kept as ${config.masterKey.file}.previous-${from.currentKeyId}. Restart every server.`
    : `Now set SIGIL_MASTER_KEY (or the key file) to the new key and keep the old one in SIGIL_MASTER_KEY_PREVIOUS until every server has restarted.`;
  process.stderr.write(after + "\n");
}

/** The deployment's public keys (made by the first `sigil serve`), as /.well-known/sigil.json shows them. */
async function info(args: string[]) {
  const { values } = parseArgs({ args, options: { "data-dir": { type: "string" } } });
  const config = loadConfig(process.env, { dataDir: values["data-dir"] });
  const store = await openStore(config);
  try {
    const keys = await store.reader.selectFrom("service_keys").select(["purpose", "public_key"]).execute();
    const of = (purpose: string) => keys.find((k) => k.purpose === purpose)?.public_key ?? null;
    if (!of(BUNDLE_SIGNER)) process.stderr.write("no service keys yet: they are made when `sigil serve` first starts\n");
    process.stdout.write(JSON.stringify({ database: store.location, signerPublicKey: of(BUNDLE_SIGNER), webhookSigningPublicKey: of(WEBHOOK_SIGNING), sessionSigningPublicKey: of(SESSION_SIGNER) }) + "\n");
  } finally {
    await store.close();
  }
}

/** The webhook delivery log, newest first, one JSON line per delivery (bodies are not printed). */
async function webhooks(args: string[]) {
  const { values } = parseArgs({ args, options: { "data-dir": { type: "string" }, status: { type: "string" }, organization: { type: "string" }, limit: { type: "string" } } });
  const statuses = ["pending", "delivered", "failed", "cancelled"];
  if (values.status && !statuses.includes(values.status)) throw new Error(`--status must be one of ${statuses.join(", ")}`);
  const limit = values.limit === undefined ? 50 : Number(values.limit);
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > 10_000) throw new Error("--limit must be a whole number from 1 to 10000");
  const config = loadConfig(process.env, { dataDir: values["data-dir"] });
  const store = await openStore(config);
  try {
    let query = store.reader.selectFrom("webhook_deliveries").selectAll();
    if (values.status) query = query.where("status", "=", values.status);
    if (values.organization) query = query.where((eb) => eb.or([eb("organization_id", "=", values.organization!), eb("event_organization_id", "=", values.organization!)]));
    const rows = await query.orderBy("created_at", "desc").orderBy("id", "desc").limit(limit).execute();
    for (const row of rows) process.stdout.write(JSON.stringify(renderDelivery(row)) + "\n");
  } finally {
    await store.close();
  }
}

/** Emails and SMS kept in the local outbox (no SMTP relay / SMS endpoint configured) whose codes are
 * still valid, oldest first, one JSON line each: what the operator hands to the user. */
async function outbox(args: string[]) {
  const { values } = parseArgs({ args, options: { "data-dir": { type: "string" }, organization: { type: "string" } } });
  const config = loadConfig(process.env, { dataDir: values["data-dir"] });
  // No master key yet means no server ever ran here, so no outbox either (and none is created).
  if (!config.masterKey.key && !fs.existsSync(config.masterKey.file)) {
    process.stderr.write("the outbox is empty: no server has run with this data directory\n");
    return;
  }
  const { keyring } = loadKeyring(config.masterKey);
  const store = await openStore(config);
  try {
    const messages = await readOutbox(store, keyring, Date.now());
    for (const message of messages) {
      if (values.organization && message.organizationId !== values.organization) continue;
      process.stdout.write(JSON.stringify(message) + "\n");
    }
    if (messages.length === 0) process.stderr.write("the outbox is empty (messages go out through SIGIL_SMTP_URL / SIGIL_SMS_URL when set)\n");
  } finally {
    await store.close();
  }
}

export async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  switch (command) {
    case "serve":
      return serve(rest);
    case "keygen":
      process.stdout.write(JSON.stringify(generateP256KeyPair()) + "\n");
      return;
    case "bootstrap":
      return bootstrap(rest);
    case "rotate-master-key":
      return rotateMasterKey(rest);
    case "webhooks":
      return webhooks(rest);
    case "info":
      return info(rest);
    case "outbox":
      return outbox(rest);
    case undefined:
    case "help":
    case "--help":
      process.stdout.write(USAGE + "\n");
      return;
    default:
      throw new Error(`unknown command "${command}"\n\n${USAGE}`);
  }
}
