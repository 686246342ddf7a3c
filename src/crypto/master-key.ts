// Where the master key comes from: a PKCS#11 token (SIGIL_PKCS11_MODULE …, crypto/token-key.ts: the key
// there wraps a data key kept in the database), or, in order, SIGIL_MASTER_KEY (hex or base64 of 32
// bytes), the file SIGIL_MASTER_KEY_FILE, or — the embedded default — <data dir>/master.key, created
// on first start with mode 0600. Earlier keys (SIGIL_MASTER_KEY_PREVIOUS, or the files a rotation leaves beside the
// key) stay in the keyring so values sealed before a rotation still open.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { Keyring, MASTER_KEY_BYTES, SecretError, keyIdOf } from "./envelope.js";

/** The master key in a PKCS#11 token (crypto/token-key.ts uses it; declared here so that reading the
 * configuration does not load the native PKCS#11 binding). */
export interface TokenConfig {
  /** SIGIL_PKCS11_MODULE: the PKCS#11 library (libsofthsm2.so, a vendor's .so). */
  module: string;
  /** SIGIL_PKCS11_TOKEN_LABEL */
  tokenLabel: string;
  /** SIGIL_PKCS11_PIN (or null when the PIN is in a file). */
  pin: string | null;
  /** SIGIL_PKCS11_PIN_FILE */
  pinFile: string | null;
  /** SIGIL_PKCS11_KEY_LABEL: the CKA_LABEL of the AES key in the token. */
  keyLabel: string;
}

/** Where a token or key came from, for log lines and messages (never the PIN). */
export const describeToken = (config: TokenConfig) => `key "${config.keyLabel}" of PKCS#11 token "${config.tokenLabel}" (${config.module})`;

export interface MasterKeyConfig {
  /** SIGIL_MASTER_KEY */
  key: string | null;
  /** SIGIL_MASTER_KEY_FILE, or <dataDir>/master.key */
  file: string;
  /** SIGIL_MASTER_KEY_PREVIOUS: earlier keys, comma separated */
  previous: string[];
  /** Whether `file` is the default in the data directory (then it may be created). */
  fileIsDefault: boolean;
  /** SIGIL_PKCS11_MODULE and the other token settings: the master key is this token's key, and `key` / `file` are not used (but by a rotation). */
  token: TokenConfig | null;
}

export function parseMasterKey(text: string, where: string): Buffer {
  const trimmed = text.trim();
  const hex = /^[0-9a-fA-F]{64}$/.test(trimmed);
  const bytes = hex ? Buffer.from(trimmed, "hex") : Buffer.from(trimmed, "base64");
  // Buffer.from(…, "base64") skips what is not base64: re-encoding shows whether the text was.
  const canonical = hex || bytes.toString("base64").replace(/=+$/, "") === trimmed.replace(/=+$/, "");
  if (bytes.length !== MASTER_KEY_BYTES || !canonical)
    throw new SecretError(`${where} must hold a ${MASTER_KEY_BYTES}-byte key as 64 hex digits or base64`);
  return bytes;
}

/** Files a file-based rotation leaves: the key being rotated to, and the keys rotated away from. */
export const nextKeyFile = (file: string) => `${file}.next`;
const previousKeyFiles = (file: string) => {
  const dir = path.dirname(file);
  const prefix = `${path.basename(file)}.previous-`;
  return fs.existsSync(dir)
    ? fs
        .readdirSync(dir)
        .filter((f) => f.startsWith(prefix))
        .map((f) => path.join(dir, f))
    : [];
};

/** Makes a rename or a new file in `dir` survive a power loss (the directory entry is on disk). */
export function syncDirectory(dir: string): void {
  const fd = fs.openSync(dir, "r");
  try {
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** Writes a new key file; returns the first directory it had to make for it, if any. */
export function writeKeyFile(file: string, key: Uint8Array): string | undefined {
  const madeDirectory = fs.mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 });
  // "wx": two servers starting on a fresh data directory must not each write a different key.
  const fd = fs.openSync(file, "wx", 0o600);
  try {
    fs.writeSync(fd, Buffer.from(key).toString("hex") + "\n");
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  syncDirectory(path.dirname(file));
  return madeDirectory;
}

export interface LoadedKeyring {
  keyring: Keyring;
  /** For the start-up log line: where the key came from, never the key. */
  source: string;
  created: boolean;
  /** The first directory made for the new key file (the data directory, or a parent of it), if any. */
  madeDirectory?: string;
}

export function loadKeyring(config: MasterKeyConfig): LoadedKeyring {
  const previous = config.previous.map((text, i) => parseMasterKey(text, `SIGIL_MASTER_KEY_PREVIOUS[${i}]`));
  if (config.key) {
    const key = parseMasterKey(config.key, "SIGIL_MASTER_KEY");
    return { keyring: new Keyring(key, previous), source: `SIGIL_MASTER_KEY (key id ${keyIdOf(key)})`, created: false };
  }
  let created = false;
  let madeDirectory: string | undefined;
  if (!fs.existsSync(config.file)) {
    if (!config.fileIsDefault) throw new SecretError(`master key file ${config.file} (SIGIL_MASTER_KEY_FILE) does not exist`);
    try {
      madeDirectory = writeKeyFile(config.file, crypto.randomBytes(MASTER_KEY_BYTES));
      created = true;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error;
    }
  }
  const key = parseMasterKey(fs.readFileSync(config.file, "utf8"), config.file);
  const others = [nextKeyFile(config.file), ...previousKeyFiles(config.file)]
    .filter((f) => fs.existsSync(f))
    .map((f) => parseMasterKey(fs.readFileSync(f, "utf8"), f));
  return { keyring: new Keyring(key, [...others, ...previous]), source: `${config.file} (key id ${keyIdOf(key)})`, created, madeDirectory };
}

/**
 * Undoes what loadKeyring made for a deployment that then failed to open: a fresh key left behind
 * would be mistaken for the real one on the next start, and an empty data directory for a deployment.
 * The directories it made go too, each only while empty (another process may be using it by now),
 * from the key file's up to the first one made.
 */
export function forgetNewKey(file: string, loaded: LoadedKeyring): void {
  if (!loaded.created) return;
  fs.rmSync(file, { force: true });
  if (!loaded.madeDirectory) return;
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    try {
      fs.rmdirSync(dir);
    } catch {
      return;
    }
    if (dir === loaded.madeDirectory) return;
  }
}

/** What named the data directory (Config.dataDirFrom), when the key file is the default one in it. */
export type DataDirOrigin = "--data-dir" | "SIGIL_DATA_DIR" | "default";

/**
 * Why a server will not start with the master key it was given: the database's secrets are sealed under
 * `missing`, which its keyring does not hold. Names the setting the key came from and the one to change,
 * so an operator starting a restored or moved deployment knows where to put the key. `created`: the
 * default key file did not exist and was made just now (it is removed again).
 */
export function wrongMasterKeyMessage(
  config: MasterKeyConfig,
  dataDirOrigin: DataDirOrigin,
  facts: { missing: string[]; keyId: string; created: boolean },
): string {
  const sealed = `the database holds secrets sealed under master key ${facts.missing.join(", ")}, which this server was not given`;
  const previous = "or, if it is an older key, add it to SIGIL_MASTER_KEY_PREVIOUS";
  if (config.token)
    return (
      `${sealed}: its key (key id ${facts.keyId}) is the data key wrapped by ${describeToken(config.token)}. ` +
      "Move the secrets under the token with `sigil rotate-master-key --to token`, giving it the key they are sealed under " +
      `(SIGIL_MASTER_KEY_FILE, SIGIL_MASTER_KEY or master.key in the data directory), ${previous}.`
    );
  if (config.key)
    return `${sealed}: its key (key id ${facts.keyId}) comes from SIGIL_MASTER_KEY. Set SIGIL_MASTER_KEY to the key the database was sealed with, ${previous}.`;
  if (!config.fileIsDefault)
    return (
      `${sealed}: its key (key id ${facts.keyId}) is the file SIGIL_MASTER_KEY_FILE names, ${config.file}. ` +
      `Set SIGIL_MASTER_KEY_FILE to the file holding the key the database was sealed with (or SIGIL_MASTER_KEY to that key), ${previous}.`
    );
  const directory =
    dataDirOrigin === "default"
      ? "the default data directory ./data: no --data-dir, no SIGIL_DATA_DIR"
      : `the data directory ${dataDirOrigin} names`;
  const where = `${config.file}, in ${directory}, as no SIGIL_MASTER_KEY or SIGIL_MASTER_KEY_FILE is set`;
  return facts.created
    ? `${sealed}: there was no master key at ${where}, and a new key opens nothing here (it was not kept). ` +
        "Copy the deployment's master.key there, or name its file with SIGIL_MASTER_KEY_FILE (or give the key in SIGIL_MASTER_KEY)."
    : `${sealed}: its key (key id ${facts.keyId}) is ${where}. ` +
        `Put the deployment's master.key there, or name its file with SIGIL_MASTER_KEY_FILE (or give the key in SIGIL_MASTER_KEY), ${previous}.`;
}
