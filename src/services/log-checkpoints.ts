// Signed checkpoints of the organizations' transparency logs, in the formats the transparency
// ecosystem shares (docs/audit-log.md#checkpoints):
//  - C2SP tlog-checkpoint: the origin line, the tree size in decimal, the root hash in base64, each
//    ending in a newline;
//  - C2SP signed-note: that text, a blank line, and one line per signature, "— <key name> <base64 of
//    the 4-byte key id and the Ed25519 signature>"; the key id is the first 4 bytes of
//    SHA-256(<key name> ‖ "\n" ‖ 0x01 ‖ public key), and the verifier key is published as
//    "<key name>+<key id, 8 hex digits>+<base64 of 0x01 ‖ public key>" (the form Go's
//    golang.org/x/mod/sumdb/note reads).
// One Ed25519 key of the deployment signs every organization's checkpoints (service-keys.ts: sealed
// under the master key like every secret); each log's origin is `<key name>/organizations/<id>`.
// The signature is node:crypto's Ed25519; only the text around it is written here.
import crypto from "node:crypto";
import type pino from "pino";
import type { Db, Tx } from "../store/handles.js";
import type { Store } from "../store/database.js";
import type { Keyring } from "../crypto/envelope.js";
import { readHead } from "../store/transparency-log.js";
import { logSigningKey } from "./service-keys.js";
import type { LogSequencer } from "./log-sequencer.js";

/** The signature type byte of Ed25519 in signed notes. */
const ED25519 = 0x01;

export interface LogSigner {
  /** The key name: the notes' signer, and the origins' first part. */
  name: string;
  publicKey: Buffer;
  /** The verifier key in the signed-note text form. */
  verifierKey: string;
  /** The checkpoint of `organizationId`'s log at (size, root), as a signed note. */
  checkpoint(organizationId: string, size: number, root: Buffer): string;
}

/** `sigil-` and 16 hex digits of the key's hash: the key name when the deployment names none. */
export const defaultLogName = (publicKey: Buffer) => `sigil-${crypto.createHash("sha256").update(publicKey).digest("hex").slice(0, 16)}`;

/** The origin line of an organization's log. */
export const originOf = (name: string, organizationId: string) => `${name}/organizations/${organizationId}`;

/** The 4-byte key id of an Ed25519 key named `name` (C2SP signed-note). */
export function keyIdOf(name: string, publicKey: Buffer): Buffer {
  return crypto.createHash("sha256").update(`${name}\n`, "utf8").update(Buffer.of(ED25519)).update(publicKey).digest().subarray(0, 4);
}

export const verifierKeyOf = (name: string, publicKey: Buffer) =>
  `${name}+${keyIdOf(name, publicKey).toString("hex")}+${Buffer.concat([Buffer.of(ED25519), publicKey]).toString("base64")}`;

/** The checkpoint body (C2SP tlog-checkpoint), without extension lines. */
export const checkpointText = (origin: string, size: number, root: Buffer) => `${origin}\n${size}\n${root.toString("base64")}\n`;

export async function logSigner(store: Store, keyring: Keyring, configuredName: string | null): Promise<LogSigner> {
  const key = await logSigningKey(store, keyring);
  const name = configuredName ?? defaultLogName(key.publicKey);
  const keyId = keyIdOf(name, key.publicKey);
  return {
    name,
    publicKey: key.publicKey,
    verifierKey: verifierKeyOf(name, key.publicKey),
    checkpoint(organizationId, size, root) {
      const text = checkpointText(originOf(name, organizationId), size, root);
      const signature = key.sign(Buffer.from(text, "utf8"));
      return `${text}\n\u2014 ${name} ${Buffer.concat([keyId, signature]).toString("base64")}\n`;
    },
  };
}

/** A verifier key in the signed-note text form, read. */
export interface Verifier {
  name: string;
  keyId: Buffer;
  publicKey: Buffer;
}

export class NoteError extends Error {
  override name = "NoteError";
}

export function parseVerifierKey(text: string): Verifier {
  // The key's base64 may hold '+' itself: the name and the id end at the first two.
  const trimmed = text.trim();
  const first = trimmed.indexOf("+");
  const second = trimmed.indexOf("+", first + 1);
  if (first <= 0 || second < 0) throw new NoteError("a verifier key is <name>+<key id>+<key>: three parts joined by '+'");
  const [name, hash, encoded] = [trimmed.slice(0, first), trimmed.slice(first + 1, second), trimmed.slice(second + 1)];
  const key = Buffer.from(encoded, "base64");
  if (!/^[0-9a-f]{8}$/.test(hash)) throw new NoteError("the verifier key's id is not 8 hex digits");
  if (key.length !== 33 || key[0] !== ED25519) throw new NoteError("the verifier key is not an Ed25519 key (type 0x01 and 32 bytes)");
  const publicKey = key.subarray(1);
  if (!keyIdOf(name, publicKey).equals(Buffer.from(hash, "hex")))
    throw new NoteError("the verifier key's id does not match its name and key");
  return { name, keyId: Buffer.from(hash, "hex"), publicKey };
}

/** The text of `note` if `verifier` signed it; NoteError saying what is wrong otherwise. */
export function openNote(note: string, verifier: Verifier): string {
  if (!note.endsWith("\n")) throw new NoteError("the note does not end with a newline");
  const split = note.lastIndexOf("\n\n");
  if (split < 0) throw new NoteError("the note has no signature block");
  const text = note.slice(0, split + 1);
  const lines = note.slice(split + 2, -1).split("\n");
  for (const line of lines) {
    const match = /^\u2014 (\S+) (\S+)$/.exec(line);
    if (!match) throw new NoteError("a signature line is malformed");
    const [, name, encoded] = match as unknown as [string, string, string];
    const bytes = Buffer.from(encoded, "base64");
    if (name !== verifier.name || bytes.length < 4 || !bytes.subarray(0, 4).equals(verifier.keyId)) continue;
    const key = crypto.createPublicKey({ key: { kty: "OKP", crv: "Ed25519", x: verifier.publicKey.toString("base64url") }, format: "jwk" });
    if (crypto.verify(null, Buffer.from(text, "utf8"), key, bytes.subarray(4))) return text;
    throw new NoteError(`the signature of ${name} does not verify`);
  }
  throw new NoteError(`the note is not signed by ${verifier.name}`);
}

/** A checkpoint's body, read. */
export function parseCheckpoint(text: string): { origin: string; size: number; root: Buffer } {
  const lines = text.split("\n");
  const [origin, size, root] = lines;
  if (lines.length < 4 || !origin || !/^(0|[1-9]\d{0,15})$/.test(size ?? "") || !root || Buffer.from(root, "base64").length !== 32)
    throw new NoteError("the checkpoint is not <origin>, <size>, <root hash> on three lines");
  return { origin, size: Number(size), root: Buffer.from(root, "base64") };
}

export interface StoredCheckpoint {
  organizationId: string;
  treeSize: number;
  rootHash: Buffer;
  note: string;
  createdAt: number;
}

const fromRow = (r: {
  organization_id: string;
  tree_size: number;
  root_hash: string;
  note: string;
  created_at: number;
}): StoredCheckpoint => ({
  organizationId: r.organization_id,
  treeSize: Number(r.tree_size),
  rootHash: Buffer.from(r.root_hash, "hex"),
  note: r.note,
  createdAt: Number(r.created_at),
});

/**
 * A checkpoint of the log as committed now: the stored one if the log has not grown since, else a new
 * one, signed and stored (several processes making the same one store it once: the note of a tree
 * size is the same text signed by the same key, and Ed25519 signatures are deterministic).
 */
export async function checkpointNow(store: Store, signer: LogSigner, organizationId: string, now: number): Promise<StoredCheckpoint> {
  const head = await readHead(store.db, organizationId);
  const stored = await store.db
    .selectFrom("transparency_log_checkpoints")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("tree_size", "=", head.size)
    .executeTakeFirst();
  if (stored) return fromRow(stored);
  const row = {
    organization_id: organizationId,
    tree_size: head.size,
    root_hash: head.root.toString("hex"),
    note: signer.checkpoint(organizationId, head.size, head.root),
    created_at: now,
  };
  await store.db
    .insertInto("transparency_log_checkpoints")
    .values(row)
    .onConflict((c) => c.columns(["organization_id", "tree_size"]).doNothing())
    .execute();
  return fromRow(row);
}

/** The organization's checkpoints, oldest first. */
export async function checkpointsOf(db: Db | Tx, organizationId: string): Promise<StoredCheckpoint[]> {
  const rows = await db
    .selectFrom("transparency_log_checkpoints")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .orderBy("tree_size")
    .execute();
  return rows.map(fromRow);
}

/** Signs a checkpoint of every log that grew since its last one. */
export async function checkpointGrownLogs(store: Store, signer: LogSigner, now: number): Promise<number> {
  const grown = await store.db
    .selectFrom("transparency_log_heads as h")
    .select("h.organization_id")
    .where("h.size", ">", (eb) =>
      eb
        .selectFrom("transparency_log_checkpoints as c")
        .select((e) => e.fn.coalesce(e.fn.max("c.tree_size"), e.lit(0)).as("latest"))
        .whereRef("c.organization_id", "=", "h.organization_id"),
    )
    .execute();
  for (const { organization_id } of grown) await checkpointNow(store, signer, organization_id, now);
  return grown.length;
}

/** Signs checkpoints every `intervalMs` (none when 0); returns the stop function. */
export function startCheckpoints(store: Store, signer: LogSigner, intervalMs: number, logger: pino.Logger): () => void {
  if (intervalMs <= 0) return () => undefined;
  let running: Promise<unknown> = Promise.resolve();
  const timer = setInterval(() => {
    running = running.then(() =>
      checkpointGrownLogs(store, signer, Date.now()).catch((error: unknown) =>
        logger.warn({ err: error }, "transparency log checkpoints could not be signed; trying again at the next interval"),
      ),
    );
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
}

/** What the queries of the log are given: the signer, checkpoints made on demand, and the sequencer. */
export interface TransparencyLog {
  signer: LogSigner;
  /** A checkpoint of the organization's log as committed now (checkpointNow). */
  checkpoint(organizationId: string, now: number): Promise<StoredCheckpoint>;
  /** Appends the organization's final activities not yet in its log, now; whether none is left. */
  sequence(organizationId: string): Promise<boolean>;
}

export const transparencyLogOf = (store: Store, signer: LogSigner, sequencer: LogSequencer): TransparencyLog => ({
  signer,
  checkpoint: (organizationId, now) => checkpointNow(store, signer, organizationId, now),
  sequence: (organizationId) => sequencer.sequenceOrganization(organizationId),
});
