// Standalone private keys: generated inside the service, sealed under the master key, with the
// addresses the caller asks for derived from the public key.
import { ActivityTypes } from "../../api/types.js";
import { serviceError } from "../../errors.js";
import type { Db, Tx } from "../../store/handles.js";
import type { PrivateKeysTable } from "../../store/schema.js";
import { generateKeyPair, type KeyPair } from "../../crypto/hd.js";
import { UnsupportedAddressError, address, type AddressFormat } from "../../crypto/addresses.js";
import type { SecretIdentity } from "../../crypto/envelope.js";
import { defineActivity, defineQuery, InMemoryOnly, type ActivityContext, type ParametersOf } from "../../registry/registry.js";
import { requireName } from "../identity/credentials.js";
import { distinct, MAX_ITEMS_PER_REQUEST, requireAtMost, timestamp } from "../resources.js";
import { newId } from "../../store/ids.js";

export type PrivateKeyParams = ParametersOf<"create_private_keys">["privateKeys"][number];

interface StoredAddress {
  format: AddressFormat;
  address: string;
}

export const privateKeyIdentity = (row: Pick<PrivateKeysTable, "organization_id" | "id">): SecretIdentity => ({
  organizationId: row.organization_id,
  kind: "private_key",
  resourceId: row.id,
});

export async function tagsOf(db: Db | Tx, ids: string[]): Promise<Map<string, string[]>> {
  const byKey = new Map<string, string[]>();
  if (ids.length === 0) return byKey;
  const rows = await db
    .selectFrom("private_key_tag_members")
    .select(["private_key_id", "tag_id"])
    .where("private_key_id", "in", ids)
    .orderBy("tag_id")
    .execute();
  for (const r of rows) byKey.set(r.private_key_id, [...(byKey.get(r.private_key_id) ?? []), r.tag_id]);
  return byKey;
}

export function renderPrivateKey(row: PrivateKeysTable, tags: string[]) {
  return {
    privateKeyId: row.id,
    publicKey: row.public_key,
    privateKeyName: row.name,
    curve: row.curve,
    addresses: JSON.parse(row.addresses) as StoredAddress[],
    privateKeyTags: tags,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
    exported: row.exported === 1,
    imported: row.imported === 1,
  };
}

/** Every private key of the organization, oldest first: public halves, addresses and tags. */
export async function listPrivateKeys(db: Db | Tx, organizationId: string) {
  const rows = await db
    .selectFrom("private_keys")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .orderBy("created_at")
    .orderBy("id")
    .execute();
  const tags = await tagsOf(
    db,
    rows.map((r) => r.id),
  );
  return rows.map((r) => renderPrivateKey(r, tags.get(r.id) ?? []));
}

/** `private_key` of the policy language. */
export const privateKeyKeyword = (row: PrivateKeysTable, tags: string[]) => ({
  id: row.id,
  tags,
  imported: row.imported === 1,
  exported: row.exported === 1,
  label: row.name,
});

export async function requirePrivateKey(db: Db | Tx, organizationId: string, privateKeyId: string): Promise<PrivateKeysTable> {
  const row = await db
    .selectFrom("private_keys")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", privateKeyId)
    .executeTakeFirst();
  if (!row) throw serviceError("PRIVATE_KEY_NOT_FOUND", `private key ${privateKeyId} not found`);
  return row;
}

/** A key pair generated before the organization's lock, for the key of that place in the request. */
export interface KeyAhead {
  curve: PrivateKeyParams["curve"];
  pair: KeyPair;
}

/**
 * The key pairs of a create_private_keys request (or a sub-organization's), generated before the
 * organization's lock is taken (a precheck's work): generating a P-256 or ed25519 key is pure
 * JavaScript, a millisecond or so on the event loop, which on SQLite would otherwise be spent holding
 * the database's one write lock. Between keys the event loop serves others. Nothing when execute
 * would refuse the list anyway; a key of an unknown curve is left out (execute refuses it).
 */
export async function keysAhead(keys: unknown): Promise<InMemoryOnly<Array<KeyAhead | undefined>> | undefined> {
  if (!Array.isArray(keys) || keys.length === 0 || keys.length > MAX_ITEMS_PER_REQUEST) return undefined;
  const pairs: Array<KeyAhead | undefined> = [];
  for (const key of keys as Partial<PrivateKeyParams>[]) {
    try {
      pairs.push({ curve: key.curve!, pair: generateKeyPair(key.curve!) });
    } catch {
      pairs.push(undefined); // execute generates it again and says what is wrong
    }
    await new Promise<void>((resolve) => setImmediate(resolve));
  }
  return new InMemoryOnly(pairs);
}

/** Creates private keys: fresh ones (`ahead`, generated before the lock, where they are of the curve
 * asked), or — for an import — the one key pair `supplied`. */
export async function createPrivateKeys(
  ctx: ActivityContext,
  keys: PrivateKeyParams[],
  supplied?: KeyPair,
  ahead?: Array<KeyAhead | undefined>,
) {
  if (keys.length === 0) throw serviceError("REQUEST_INVALID", "privateKeys must list at least one key");
  requireAtMost(keys, "privateKeys");
  const created: { privateKeyId: string; addresses: StoredAddress[] }[] = [];
  const names = new Set<string>();
  for (const [i, key] of keys.entries()) {
    const where = `privateKeys[${i}]`;
    const name = requireName(key.privateKeyName, `${where}.privateKeyName`);
    if (
      names.has(name) ||
      (await ctx.trx
        .selectFrom("private_keys")
        .select("id")
        .where("organization_id", "=", ctx.organizationId)
        .where("name", "=", name)
        .executeTakeFirst())
    ) {
      throw serviceError("PRIVATE_KEY_ALREADY_EXISTS", `a private key named "${name}" already exists`);
    }
    names.add(name);
    const tagIds = distinct(key.privateKeyTags, `${where}.privateKeyTags`);
    if (tagIds.length) {
      const found = await ctx.trx
        .selectFrom("tags")
        .select("id")
        .where("organization_id", "=", ctx.organizationId)
        .where("tag_type", "=", "TAG_TYPE_PRIVATE_KEY")
        .where("id", "in", tagIds)
        .execute();
      const missing = tagIds.find((id) => !found.some((f) => f.id === id));
      if (missing !== undefined)
        throw serviceError("PRIVATE_KEY_TAG_NOT_FOUND", `${where}.privateKeyTags: private key tag ${missing} not found`);
    }
    const formats = distinct(key.addressFormats, `${where}.addressFormats`) as AddressFormat[];
    const made = ahead?.[i];
    const pair = supplied ?? (made?.curve === key.curve ? made.pair : generateKeyPair(key.curve));
    const addresses = formats.map((format) => {
      try {
        return { format, address: address(key.curve, format, pair.publicKey) };
      } catch (error) {
        if (error instanceof UnsupportedAddressError)
          throw serviceError("UNSUPPORTED_ADDRESS_FORMAT", `${where}.addressFormats: ${error.message}`);
        throw error;
      }
    });
    const id = newId();
    await ctx.trx
      .insertInto("private_keys")
      .values({
        id,
        organization_id: ctx.organizationId,
        name,
        curve: key.curve,
        public_key: Buffer.from(pair.publicKey).toString("hex"),
        sealed_private_key: ctx.env.keyring.seal(pair.privateKey, {
          organizationId: ctx.organizationId,
          kind: "private_key",
          resourceId: id,
        }),
        addresses: JSON.stringify(addresses),
        imported: supplied ? 1 : 0,
        exported: 0,
        created_at: ctx.now,
        updated_at: ctx.now,
      })
      .execute();
    if (addresses.length) {
      await ctx.trx
        .insertInto("private_key_addresses")
        .values(addresses.map((a) => ({ private_key_id: id, organization_id: ctx.organizationId, format: a.format, address: a.address })))
        .execute();
    }
    if (tagIds.length)
      await ctx.trx
        .insertInto("private_key_tag_members")
        .values(tagIds.map((tag_id) => ({ tag_id, private_key_id: id })))
        .execute();
    created.push({ privateKeyId: id, addresses });
  }
  return created;
}

export const privateKeyOperations = [
  defineActivity({
    name: "create_private_keys",
    summary: "Generate private keys (sealed at rest) and derive the addresses asked for.",
    resource: "PRIVATE_KEY",
    action: "CREATE",
    precheck: async (p) => ({ keys: await keysAhead(p.privateKeys) }),
    async execute(ctx, p, type, prepared) {
      const created = await createPrivateKeys(ctx, p.privateKeys, undefined, prepared.keys?.value);
      // The first version answered with ids only; V2 with each key's addresses.
      return type === ActivityTypes.ACTIVITY_TYPE_CREATE_PRIVATE_KEYS
        ? { privateKeyIds: created.map((c) => c.privateKeyId) }
        : { privateKeys: created };
    },
  }),

  defineActivity({
    name: "delete_private_keys",
    summary: "Delete private keys; a key never exported needs deleteWithoutExport.",
    resource: "PRIVATE_KEY",
    action: "DELETE",
    async execute(ctx, p) {
      const ids = distinct(p.privateKeyIds, "privateKeyIds");
      if (ids.length === 0) throw serviceError("REQUEST_INVALID", "privateKeyIds must list at least one key");
      for (const id of ids) {
        const row = await requirePrivateKey(ctx.trx, ctx.organizationId, id);
        if (row.exported !== 1 && p.deleteWithoutExport !== true) {
          throw serviceError(
            "PRIVATE_KEY_NOT_EXPORTED",
            `private key ${id} has never been exported: deleting it loses it for good. Export it first, or pass deleteWithoutExport: true`,
          );
        }
      }
      await ctx.trx.deleteFrom("private_key_tag_members").where("private_key_id", "in", ids).execute();
      await ctx.trx.deleteFrom("private_key_addresses").where("private_key_id", "in", ids).execute();
      await ctx.trx.deleteFrom("private_keys").where("id", "in", ids).execute();
      return { privateKeyIds: ids };
    },
  }),

  defineQuery({
    name: "get_private_key",
    summary: "One private key (its public half and addresses).",
    async run(ctx, body) {
      const row = await requirePrivateKey(ctx.db, ctx.organizationId, body.privateKeyId);
      return { privateKey: renderPrivateKey(row, (await tagsOf(ctx.db, [row.id])).get(row.id) ?? []) };
    },
  }),

  defineQuery({
    name: "list_private_keys",
    summary: "Every private key of the organization, oldest first.",
    async run(ctx) {
      return { privateKeys: await listPrivateKeys(ctx.db, ctx.organizationId) };
    },
  }),
];
