// Backups of an SQLite deployment (`sigil backup`, `sigil restore`) and, for PostgreSQL, what to run
// instead. One backup is one file:
//
//   SIGIL BACKUP 1\n                      what the file is, and the format's version
//   {"format":1,…,"databaseBytes":N}\n    the manifest, one JSON line (BackupManifest)
//   <N bytes>                             the SQLite database, as store/sqlite-copies.ts copied it
//   sha256 <64 hex digits>\n              the SHA-256 of every byte above
//
// The manifest says how long the database is, so a file cut short anywhere is told from a whole one by
// its size alone; the checksum covers the manifest and the database, so a changed byte anywhere is
// found. It guards against damage (a truncated upload, a bad disk, an edit by mistake), not against
// someone who may write the file: they can write a new checksum too. The master key is not in it.
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { z } from "zod";
import { syncDirectory } from "../crypto/master-key.js";
import { SQLITE_FILE_NAME } from "../store/database.js";
import { migrations } from "../store/migrations.js";
import { postgresBackupCommands } from "../store/database-url.js";
import { copySqliteDatabase, openSqliteCopy } from "../store/sqlite-copies.js";
import { keyIdsInUse } from "./sealed-secrets.js";

const MAGIC = "SIGIL BACKUP 1\n";
const SQLITE_MAGIC = "SQLite format 3\0";
/** "sha256 " + 64 hex digits + "\n" */
const TRAILER_BYTES = 72;
/** A manifest is a few hundred bytes; a longer second line is not one. */
const MAX_MANIFEST_BYTES = 64 * 1024;
const CHUNK = 1 << 20;

const manifestSchema = z.strictObject({
  format: z.literal(1),
  /** When the copy was taken: it holds everything committed before this instant. */
  createdAt: z.iso.datetime(),
  sigilVersion: z.string(),
  /** The database file copied. */
  source: z.string(),
  /** The migrations applied to the copied database, by name. */
  migrations: z.array(z.string()),
  /** The ids of the master keys the copy's secrets are sealed under: a server restored from it needs a key
   * holding them. Null for a database whose schema is older than the Sigil that took the copy. */
  masterKeyIds: z.array(z.string()).nullable(),
  databaseBytes: z.number().int().nonnegative(),
});
export type BackupManifest = z.infer<typeof manifestSchema>;

/** A file `sigil restore` will not restore from: not a backup, or not the backup `sigil backup` wrote. */
export class BackupRefused extends Error {}

export interface WrittenBackup {
  file: string;
  /** The whole file's size. */
  bytes: number;
  /** The checksum on its last line. */
  sha256: string;
  manifest: BackupManifest;
}

/**
 * Writes a backup of `<dataDir>/sigil.db` to the new file `out`, while servers may be running and
 * writing. `out` appears only once complete and synced to disk; an existing file (or link) there is never
 * replaced. Temporary files beside `out` (dot-files named after it) are removed, whatever happens.
 */
export async function writeBackup(options: { dataDir: string; out: string; sigilVersion: string }): Promise<WrittenBackup> {
  const out = path.resolve(options.out);
  const dir = path.dirname(out);
  if (lexists(out)) throw new Error(`${out} already exists: backup never overwrites a file; choose another name`);
  if (!fs.existsSync(dir)) throw new Error(`cannot create ${out}: the directory ${dir} does not exist`);
  const tag = crypto.randomBytes(6).toString("hex");
  const copied = path.join(dir, `.${path.basename(out)}.${tag}.copy`);
  const partial = path.join(dir, `.${path.basename(out)}.${tag}.partial`);
  try {
    const createdAt = new Date().toISOString();
    const { location } = copySqliteDatabase(path.resolve(options.dataDir), copied);
    const copy = openSqliteCopy(copied);
    let masterKeyIds: string[] | null = null;
    try {
      // An older schema may lack some of the tables holding secrets, which this version reads.
      const current = Object.keys(migrations).every((name) => copy.migrations.includes(name));
      if (current) masterKeyIds = (await keyIdsInUse(copy.db)).sort();
    } finally {
      await copy.close();
    }
    const manifest: BackupManifest = {
      format: 1,
      createdAt,
      sigilVersion: options.sigilVersion,
      source: location,
      migrations: copy.migrations,
      masterKeyIds,
      databaseBytes: fs.statSync(copied).size,
    };
    const sha256 = writeBackupFile(partial, manifest, copied);
    try {
      // link, unlike rename, fails where a file appeared at `out` meanwhile: it is never replaced.
      fs.linkSync(partial, out);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST")
        throw new Error(`${out} already exists: backup never overwrites a file; choose another name`);
      throw error;
    }
    syncDirectory(dir);
    return { file: out, bytes: fs.statSync(out).size, sha256, manifest };
  } finally {
    fs.rmSync(copied, { force: true });
    fs.rmSync(`${copied}-journal`, { force: true });
    fs.rmSync(partial, { force: true });
  }
}

function writeBackupFile(file: string, manifest: BackupManifest, database: string): string {
  const hash = crypto.createHash("sha256");
  // Mode 0600: the file holds everything the database does (sealed secrets, users, policies, the audit log).
  const fd = fs.openSync(file, "wx", 0o600);
  try {
    const header = Buffer.from(`${MAGIC}${JSON.stringify(manifest)}\n`);
    hash.update(header);
    fs.writeSync(fd, header);
    const source = fs.openSync(database, "r");
    try {
      const buffer = Buffer.allocUnsafe(CHUNK);
      let copied = 0;
      for (let read: number; (read = fs.readSync(source, buffer, 0, CHUNK, null)) > 0; copied += read) {
        hash.update(buffer.subarray(0, read));
        fs.writeSync(fd, buffer, 0, read);
      }
      if (copied !== manifest.databaseBytes) throw new Error(`the copy of the database changed size while being written (${database})`);
    } finally {
      fs.closeSync(source);
    }
    const sha256 = hash.digest("hex");
    fs.writeSync(fd, `sha256 ${sha256}\n`);
    fs.fsyncSync(fd);
    return sha256;
  } finally {
    fs.closeSync(fd);
  }
}

const lexists = (file: string) => {
  try {
    fs.lstatSync(file);
    return true;
  } catch {
    return false;
  }
};

export interface VerifiedBackup {
  file: string;
  manifest: BackupManifest;
  /** Where the database starts in the file. */
  databaseOffset: number;
  sha256: string;
}

/**
 * Reads the whole file and checks that it is a complete backup, as `sigil backup` wrote it: the format,
 * the manifest, the size the manifest implies and the checksum. Writes nothing; throws BackupRefused
 * saying what is wrong.
 */
export function verifyBackup(from: string): VerifiedBackup {
  const file = path.resolve(from);
  let fd: number;
  try {
    fd = fs.openSync(file, "r");
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    throw new BackupRefused(code === "ENOENT" ? `there is no file ${file}` : `cannot read ${file}: ${code ?? (error as Error).message}`);
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) throw new BackupRefused(`${file} is not a file`);
    const size = stat.size;
    const head = Buffer.alloc(Math.min(size, MAGIC.length + MAX_MANIFEST_BYTES + 1));
    fs.readSync(fd, head, 0, head.length, 0);
    const headText = head.toString("latin1");
    if (!headText.startsWith(MAGIC)) {
      if (headText.startsWith(SQLITE_MAGIC))
        throw new BackupRefused(`${file} is an SQLite database file, not a backup written by \`sigil backup\``);
      const other = /^SIGIL BACKUP (\d+)\n/.exec(headText);
      if (other) throw new BackupRefused(`${file} is a backup of format ${other[1]}; this version of Sigil reads format 1 only`);
      if (size < MAGIC.length && MAGIC.startsWith(headText)) throw truncated(file, "it ends inside its first line");
      throw new BackupRefused(`${file} is not a Sigil backup: it does not begin with "SIGIL BACKUP 1", as \`sigil backup\` writes it`);
    }
    const newline = head.indexOf(0x0a, MAGIC.length);
    if (newline < 0) {
      if (size === head.length) throw truncated(file, "it ends inside its manifest (the second line)");
      throw damaged(file, "its second line is not a manifest");
    }
    let manifest: BackupManifest;
    try {
      manifest = manifestSchema.parse(JSON.parse(head.subarray(MAGIC.length, newline).toString("utf8")));
    } catch {
      throw damaged(file, "its manifest (the second line) is not one `sigil backup` writes");
    }
    const databaseOffset = newline + 1;
    const expected = databaseOffset + manifest.databaseBytes + TRAILER_BYTES;
    if (size < expected) throw truncated(file, `its manifest makes it ${expected} bytes long, and it holds ${size}`);
    if (size > expected) throw damaged(file, `it holds ${size - expected} bytes more than its manifest makes it (${expected})`);
    const trailer = Buffer.alloc(TRAILER_BYTES);
    fs.readSync(fd, trailer, 0, TRAILER_BYTES, expected - TRAILER_BYTES);
    const written = /^sha256 ([0-9a-f]{64})\n$/.exec(trailer.toString("latin1"))?.[1];
    if (!written) throw damaged(file, "its last line is not its SHA-256 checksum");
    const actual = hashRange(fd, 0, expected - TRAILER_BYTES);
    if (actual !== written)
      throw new BackupRefused(
        `${file} does not match its SHA-256 checksum (the file's bytes hash to ${actual}, its last line says ${written}): ` +
          "it was altered or damaged after `sigil backup` wrote it",
      );
    return { file, manifest, databaseOffset, sha256: written };
  } finally {
    fs.closeSync(fd);
  }
}

const truncated = (file: string, how: string) =>
  new BackupRefused(`${file} is truncated (${how}): it is not a complete backup; use another copy of it`);
const damaged = (file: string, how: string) =>
  new BackupRefused(`${file} is damaged (${how}): it is not the file \`sigil backup\` wrote; use another copy of it`);

/** The SHA-256 of bytes [start, end) of the open file; with `into`, those bytes are also written there. */
function hashRange(fd: number, start: number, end: number, into?: { fd: number; from: number }): string {
  const hash = crypto.createHash("sha256");
  const buffer = Buffer.allocUnsafe(CHUNK);
  for (let at = start; at < end; ) {
    const read = fs.readSync(fd, buffer, 0, Math.min(CHUNK, end - at), at);
    if (read === 0) throw new BackupRefused(`the file ended early while being read: it changed since it was checked`);
    hash.update(buffer.subarray(0, read));
    if (into && at + read > into.from) {
      const skip = Math.max(0, into.from - at);
      fs.writeSync(into.fd, buffer, skip, read - skip);
    }
    at += read;
  }
  return hash.digest("hex");
}

export interface RestoredBackup {
  /** The database file written. */
  database: string;
  manifest: BackupManifest;
}

/**
 * Restores a backup into `dataDir`, which must be empty or absent (it is made, mode 0700): the backup is
 * checked whole first, and nothing is written unless it is complete and unaltered, holds a sound Sigil
 * database and was taken of a schema this version knows. The database appears as `sigil.db` only once
 * complete and synced; a failure leaves no file, nor a directory restore made.
 */
export async function restoreBackup(options: { from: string; dataDir: string }): Promise<RestoredBackup> {
  const target = path.resolve(options.dataDir);
  assertEmptyDirectory(target);
  const verified = verifyBackup(options.from);
  const { manifest } = verified;
  const made = fs.mkdirSync(target, { recursive: true, mode: 0o700 });
  const database = path.join(target, SQLITE_FILE_NAME);
  const temporary = path.join(target, `.${SQLITE_FILE_NAME}.restoring-${crypto.randomBytes(6).toString("hex")}`);
  try {
    const source = fs.openSync(verified.file, "r");
    const fd = fs.openSync(temporary, "wx", 0o600);
    try {
      // Hashed again while copied: the file must not have changed since it was checked.
      const end = verified.databaseOffset + manifest.databaseBytes;
      if (hashRange(source, 0, end, { fd, from: verified.databaseOffset }) !== verified.sha256)
        throw new BackupRefused(`${verified.file} changed while being restored: nothing was restored; run restore again`);
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
      fs.closeSync(source);
    }
    const copy = openSqliteCopy(temporary);
    await copy.close();
    if (copy.unknownMigrations.length > 0)
      throw new BackupRefused(
        `${verified.file} was taken of a database a newer Sigil migrated (migrations ${copy.unknownMigrations.join(", ")}): ` +
          `restore it with that version (it was made by Sigil ${manifest.sigilVersion})`,
      );
    try {
      fs.linkSync(temporary, database);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === "EEXIST")
        throw new BackupRefused(`${database} appeared while restoring: ${target} is not empty`);
      throw error;
    }
    fs.rmSync(temporary);
    syncDirectory(target);
    if (made) syncDirectory(path.dirname(made));
    return { database, manifest };
  } catch (error) {
    fs.rmSync(temporary, { force: true });
    if (made) removeMadeDirectories(target, made);
    throw error instanceof BackupRefused || !(error instanceof Error) ? error : new BackupRefused(restoreFailure(verified.file, error));
  }
}

function restoreFailure(file: string, error: Error): string {
  return error.message.startsWith("the database in it ")
    ? `${file} matches its checksum, but ${error.message}: it was not written by \`sigil backup\``
    : error.message;
}

function assertEmptyDirectory(target: string): void {
  let stat: fs.Stats;
  try {
    stat = fs.statSync(target);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return;
    throw error;
  }
  if (!stat.isDirectory()) throw new BackupRefused(`${target} is not a directory: restore writes into an empty (or absent) data directory`);
  const entries = fs.readdirSync(target);
  if (entries.length > 0) {
    const shown = entries.sort().slice(0, 3).join(", ") + (entries.length > 3 ? ", …" : "");
    throw new BackupRefused(
      `${target} is not empty (${shown}): restore writes only into an empty (or absent) data directory, and never over a deployment's files`,
    );
  }
}

/** The directories mkdirSync made for `target`, from it up to `made`, each only while empty. */
function removeMadeDirectories(target: string, made: string): void {
  for (let dir = target; ; dir = path.dirname(dir)) {
    try {
      fs.rmdirSync(dir);
    } catch {
      return;
    }
    if (dir === made) return;
  }
}

/**
 * What `sigil backup` says on PostgreSQL instead of writing a file: PostgreSQL's own tools take a
 * consistent copy of a database that is in use, and restore it; the exact commands for the database
 * `databaseUrl` names (never its password), and where point-in-time recovery comes from.
 */
export function postgresBackupAdvice(databaseUrl: string, out: string): string {
  const c = postgresBackupCommands(databaseUrl, path.resolve(out));
  return [
    `SIGIL_DATABASE_URL names a PostgreSQL database (${c.location}): \`sigil backup\` wrote nothing.`,
    "Back it up with PostgreSQL's pg_dump, which reads one consistent snapshot while the servers keep running and writing:",
    "",
    `  ${c.dump}`,
    "",
    "Restore it into a new database, then point SIGIL_DATABASE_URL at that database and start the servers with the",
    "same master key (it is not in the dump: SIGIL_MASTER_KEY, SIGIL_MASTER_KEY_FILE or master.key in the data directory):",
    "",
    `  ${c.createdb}`,
    `  ${c.restore}`,
    "",
    "The password is not printed: give it in PGPASSWORD or ~/.pgpass. Use pg_dump and pg_restore of the server's",
    "major version or newer." +
      (c.notCarried.length > 0
        ? ` The URL's ${c.notCarried.join(", ")} are not carried over: give them to the tools as libpq settings.`
        : ""),
    "",
    "A dump holds the database as of the moment it began. To recover to any moment (point-in-time recovery), the",
    "PostgreSQL server must archive its write-ahead log continuously (archive_mode and archive_command, or",
    "pg_receivewal) beside base backups (pg_basebackup), or use the managed service's own; docs/backups.md says how.",
  ].join("\n");
}
