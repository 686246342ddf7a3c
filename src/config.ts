// Environment variables and command-line flags, resolved once into one typed object.
import path from "node:path";
import type { MasterKeyConfig } from "./crypto/master-key.js";
import { defaultSignatureThreads } from "./crypto/signature-threads.js";

export interface Config {
  host: string;
  port: number;
  /** Directory of the embedded SQLite database and the default master key file. */
  dataDir: string;
  /** postgres://… to keep all state in PostgreSQL instead of SQLite. */
  databaseUrl: string | null;
  /** A request's timestampMs must lie within this many milliseconds of the server's clock, either side. */
  timestampWindowMs: number;
  /** Largest accepted request body, in bytes. */
  bodyLimitBytes: number;
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

function nonNegativeInteger(name: string, raw: string | undefined, fallback: number): number {
  if (raw === undefined || raw === "") return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 0) throw new Error(`${name} must be a whole number (0 or more), got "${raw}"`);
  return value;
}

const list = (raw: string | undefined) => (raw ?? "").split(",").map((s) => s.trim()).filter(Boolean);

export function loadConfig(env: NodeJS.ProcessEnv = process.env, flags: ConfigFlags = {}): Config {
  const port = positiveInteger("port", flags.port !== undefined ? String(flags.port) : env.SIGIL_PORT, 8080);
  const dataDir = path.resolve(flags.dataDir ?? env.SIGIL_DATA_DIR ?? "data");
  return {
    host: flags.host ?? env.SIGIL_HOST ?? "127.0.0.1",
    port,
    dataDir,
    databaseUrl: env.SIGIL_DATABASE_URL || null,
    timestampWindowMs: positiveInteger("SIGIL_TIMESTAMP_WINDOW_SECONDS", env.SIGIL_TIMESTAMP_WINDOW_SECONDS, 300) * 1000,
    bodyLimitBytes: positiveInteger("SIGIL_BODY_LIMIT_BYTES", env.SIGIL_BODY_LIMIT_BYTES, 1024 * 1024),
    webauthn: { rpIds: list(env.SIGIL_WEBAUTHN_RP_IDS), origins: list(env.SIGIL_WEBAUTHN_ORIGINS) },
    logLevel: env.SIGIL_LOG_LEVEL ?? "info",
    masterKey: {
      key: env.SIGIL_MASTER_KEY || null,
      file: env.SIGIL_MASTER_KEY_FILE ? path.resolve(env.SIGIL_MASTER_KEY_FILE) : path.join(dataDir, "master.key"),
      fileIsDefault: !env.SIGIL_MASTER_KEY_FILE,
      previous: list(env.SIGIL_MASTER_KEY_PREVIOUS),
    },
    signatureThreads: nonNegativeInteger("SIGIL_SIGNATURE_THREADS", env.SIGIL_SIGNATURE_THREADS, defaultSignatureThreads()),
  };
}
