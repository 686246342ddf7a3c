// The keyring of a deployment whose master key is in a PKCS#11 token (docs/hsm.md). Secrets are sealed
// under a 32-byte data key, as under a file key; the data key is stored in the database only wrapped
// by the token's key (table token_data_keys), and each process asks the token to unwrap it once, at
// start, then holds it in memory. The token is reached at start (and by a rotation) and never while
// serving, so a signature costs no token round trip and the token's sessions are not held.
import crypto from "node:crypto";
import { Keyring, MASTER_KEY_BYTES, keyIdOf } from "../crypto/envelope.js";
import { describeToken, parseMasterKey, type MasterKeyConfig, type TokenConfig } from "../crypto/master-key.js";
import { TokenError, withToken } from "../crypto/token-key.js";
import type { Db } from "../store/handles.js";
import type { Store } from "../store/database.js";
import type { TokenDataKeysTable } from "../store/schema.js";
import { keyIdsInUse } from "./sealed-secrets.js";

/** The one row of token_data_keys. */
export const DATA_KEY_SLOT = "master";

/** What the wrap is bound to: a wrapped key moved onto another key id's row does not open. */
const dataKeyAad = (keyId: string) => Buffer.from(`sigil data key\0${keyId}`, "utf8");

/**
 * Opens the token as configured (module, token label, PIN, key label) and closes it again: what can
 * be wrong with a token is found before the database is opened, so a refused start writes nothing.
 * Returns what the log should warn about the key (extractable, not sensitive).
 */
export function checkToken(token: TokenConfig): string[] {
  return withToken(token, (opened) => opened.warnings);
}

/** A new data key, and its row as the token wraps it. The key is the caller's to use, then forget. */
export function newWrappedDataKey(token: TokenConfig, now: number): { dataKey: Buffer; row: TokenDataKeysTable } {
  const dataKey = crypto.randomBytes(MASTER_KEY_BYTES);
  const keyId = keyIdOf(dataKey);
  const wrapped = withToken(token, (opened) => opened.wrap(dataKey, dataKeyAad(keyId)));
  return {
    dataKey,
    row: {
      slot: DATA_KEY_SLOT,
      key_id: keyId,
      wrapped_key: wrapped,
      token_label: token.tokenLabel,
      key_label: token.keyLabel,
      created_at: now,
    },
  };
}

export async function readDataKeyRow(db: Db): Promise<TokenDataKeysTable | undefined> {
  return db.selectFrom("token_data_keys").selectAll().where("slot", "=", DATA_KEY_SLOT).executeTakeFirst();
}

/** The data key in `row`, unwrapped by the token; refused when the token's key did not wrap it. */
export function unwrapDataKey(token: TokenConfig, row: TokenDataKeysTable): Buffer {
  let dataKey: Buffer;
  try {
    dataKey = withToken(token, (opened) => opened.unwrap(row.wrapped_key, dataKeyAad(row.key_id)));
  } catch (error) {
    if (!(error instanceof TokenError) || !/does not open/.test(error.message)) throw error;
    throw new TokenError(
      `the database's data key (key id ${row.key_id}) was wrapped by key "${row.key_label}" of token "${row.token_label}", ` +
        `and does not open under ${describeToken(token)}: SIGIL_PKCS11_TOKEN_LABEL and SIGIL_PKCS11_KEY_LABEL must name that key ` +
        "(or its copy in another token)",
    );
  }
  if (dataKey.length !== MASTER_KEY_BYTES || keyIdOf(dataKey) !== row.key_id)
    throw new TokenError(`the database's data key does not match its key id ${row.key_id}: the row was altered`);
  return dataKey;
}

export interface TokenKeyring {
  keyring: Keyring;
  /** For the start-up log line: the token, the key and the data key's id; never a key or the PIN. */
  source: string;
  /** The data key was made (and wrapped, and stored) by this start. */
  created: boolean;
}

/**
 * The keyring of a server whose master key is in the token: the database's data key, unwrapped, and
 * the earlier keys of SIGIL_MASTER_KEY_PREVIOUS. `create` (a first start): where the database has no
 * data key and no secret yet, one is made and stored; two processes doing so at once keep the first.
 * A database whose secrets are sealed under a file key is refused, writing nothing: they must first be
 * moved under the token (`sigil rotate-master-key --to token`).
 */
export async function tokenKeyring(store: Store, config: MasterKeyConfig, create: boolean): Promise<TokenKeyring> {
  const token = config.token!;
  const previous = config.previous.map((text, i) => parseMasterKey(text, `SIGIL_MASTER_KEY_PREVIOUS[${i}]`));
  let row = await readDataKeyRow(store.db);
  let created = false;
  if (!row) {
    const sealedUnder = await keyIdsInUse(store.db);
    if (sealedUnder.length > 0)
      throw new TokenError(
        `the database holds secrets sealed under master key ${sealedUnder.join(", ")}, and no data key wrapped by a token: ` +
          `they are sealed under a file key (SIGIL_MASTER_KEY_FILE, SIGIL_MASTER_KEY or master.key). Move them under ${describeToken(token)} ` +
          "with `sigil rotate-master-key --to token`, giving it that key; or start without the token settings (SIGIL_PKCS11_MODULE and the others), with that key",
      );
    if (!create) throw new TokenError("the database has no data key wrapped by the token yet: the first `sigil serve` makes it");
    const fresh = newWrappedDataKey(token, Date.now());
    fresh.dataKey.fill(0);
    await store.transact("exclusive", (trx) =>
      trx
        .insertInto("token_data_keys")
        .values(fresh.row)
        .onConflict((conflict) => conflict.column("slot").doNothing())
        .execute(),
    );
    row = (await readDataKeyRow(store.db))!;
    created = row.key_id === fresh.row.key_id;
  }
  // Unwrapped even when just made: what serves is what the database holds, as every later start reads it.
  const dataKey = unwrapDataKey(token, row);
  const keyring = new Keyring(dataKey, previous);
  dataKey.fill(0);
  return { keyring, source: `${describeToken(token)}, data key id ${row.key_id}`, created };
}
