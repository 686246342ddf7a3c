// Where the master key comes from, in order: SIGIL_MASTER_KEY (hex or base64 of 32 bytes), the file
// SIGIL_MASTER_KEY_FILE, or — the embedded default — <data dir>/master.key, created on first start
// with mode 0600. Earlier keys (SIGIL_MASTER_KEY_PREVIOUS, or the files a rotation leaves beside the
// key) stay in the keyring so values sealed before a rotation still open.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { Keyring, MASTER_KEY_BYTES, SecretError, keyIdOf } from "./envelope.js";

export interface MasterKeyConfig {
  /** SIGIL_MASTER_KEY */
  key: string | null;
  /** SIGIL_MASTER_KEY_FILE, or <dataDir>/master.key */
  file: string;
  /** SIGIL_MASTER_KEY_PREVIOUS: earlier keys, comma separated */
  previous: string[];
  /** Whether `file` is the default in the data directory (then it may be created). */
  fileIsDefault: boolean;
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
