// Tags: named groups of users (policies read them: approvers.any(u, u.tags.contains(...))) and of
// private keys (private_key.tags). Both kinds work alike; each is described once below and its
// operations (create/update/delete/list) are made from that description.
import { serviceError } from "../../errors.js";
import type { Kysely } from "kysely";
import type { Db, Tx } from "../../store/handles.js";
import { defineActivity, defineQuery, type ActivityContext, type PolicyResource } from "../../registry/registry.js";
import { requireName } from "./credentials.js";
import { distinct, requireUsers, timestamp } from "../resources.js";
import { newId } from "../../store/ids.js";

interface TagKind {
  tagType: "TAG_TYPE_USER" | "TAG_TYPE_PRIVATE_KEY";
  /** Field-name stem of the API: userTagName / privateKeyTagName, userIds / privateKeyIds, … */
  field: "user" | "privateKey";
  /** Operation-name stem: create_user_tag / create_private_key_tag, … */
  operation: "user" | "private_key";
  /** Words for messages. */
  noun: "user" | "private key";
  /** The error codes (of the catalog) for a tag of this kind that exists already, or not at all. */
  errors: {
    exists: "USER_TAG_ALREADY_EXISTS" | "PRIVATE_KEY_TAG_ALREADY_EXISTS";
    notFound: "USER_TAG_NOT_FOUND" | "PRIVATE_KEY_TAG_NOT_FOUND";
  };
  resource: PolicyResource;
  members: { table: "user_tag_members"; column: "user_id" } | { table: "private_key_tag_members"; column: "private_key_id" };
  requireMembers(db: Db | Tx, organizationId: string, ids: string[]): Promise<void>;
}

/** The organization's tags, oldest first: of one kind, or (without `tagType`) of both. */
export async function listTags(db: Db | Tx, organizationId: string, tagType?: TagKind["tagType"]) {
  let query = db.selectFrom("tags").selectAll().where("organization_id", "=", organizationId);
  if (tagType) query = query.where("tag_type", "=", tagType);
  const rows = await query.orderBy("created_at").orderBy("id").execute();
  return rows.map((t) => ({
    tagId: t.id,
    tagName: t.name,
    tagType: t.tag_type,
    createdAt: timestamp(t.created_at),
    updatedAt: timestamp(t.updated_at),
  }));
}

/** userIds → addUserIds: typed as the template it is, so the field names it builds index the generated parameters. */
const capitalized = <S extends string>(s: S) => (s[0]!.toUpperCase() + s.slice(1)) as Capitalize<S>;

export async function requirePrivateKeys(db: Db | Tx, organizationId: string, ids: string[]): Promise<void> {
  if (ids.length === 0) return;
  const found = await db
    .selectFrom("private_keys")
    .select("id")
    .where("organization_id", "=", organizationId)
    .where("id", "in", ids)
    .execute();
  const missing = ids.find((id) => !found.some((f) => f.id === id));
  if (missing !== undefined) throw serviceError("PRIVATE_KEY_NOT_FOUND", `private key ${missing} not found`);
}

function tagOperationsFor(kind: TagKind) {
  const F = capitalized(kind.field);
  const { table, column } = kind.members;
  // The member table is chosen at run time; both have the same shape (tag_id, <member>_id).
  // biome-ignore lint/suspicious/noExplicitAny: the member table is chosen at run time (user or private key tags)
  const members = (trx: Tx) => trx as unknown as Kysely<any>;
  const memberRows = (tagId: string, ids: string[]) => ids.map((id) => ({ tag_id: tagId, [column]: id }));

  async function requireUniqueName(ctx: ActivityContext, name: string, exceptId?: string) {
    let query = ctx.trx
      .selectFrom("tags")
      .select("id")
      .where("organization_id", "=", ctx.organizationId)
      .where("tag_type", "=", kind.tagType)
      .where("name", "=", name);
    if (exceptId) query = query.where("id", "!=", exceptId);
    if (await query.executeTakeFirst()) throw serviceError(kind.errors.exists, `a ${kind.noun} tag named "${name}" already exists`);
  }

  async function requireTag(ctx: ActivityContext, tagId: string) {
    const tag = await ctx.trx
      .selectFrom("tags")
      .selectAll()
      .where("organization_id", "=", ctx.organizationId)
      .where("tag_type", "=", kind.tagType)
      .where("id", "=", tagId)
      .executeTakeFirst();
    if (!tag) throw serviceError(kind.errors.notFound, `${kind.noun} tag ${tagId} not found`);
    return tag;
  }

  return [
    defineActivity({
      name: `create_${kind.operation}_tag`,
      summary: `Create a ${kind.noun} tag and apply it to ${kind.noun}s.`,
      resource: kind.resource,
      action: "CREATE",
      async execute(ctx, p) {
        const name = requireName(p[`${kind.field}TagName`] as string, `${kind.field}TagName`);
        const ids = distinct(p[`${kind.field}Ids`] as string[], `${kind.field}Ids`);
        await requireUniqueName(ctx, name);
        await kind.requireMembers(ctx.trx, ctx.organizationId, ids);
        const id = newId();
        await ctx.trx
          .insertInto("tags")
          .values({ id, organization_id: ctx.organizationId, name, tag_type: kind.tagType, created_at: ctx.now, updated_at: ctx.now })
          .execute();
        if (ids.length) await members(ctx.trx).insertInto(table).values(memberRows(id, ids)).execute();
        return { [`${kind.field}TagId`]: id, [`${kind.field}Ids`]: ids };
      },
    }),

    defineActivity({
      name: `update_${kind.operation}_tag`,
      summary: `Rename a ${kind.noun} tag, or add and remove its ${kind.noun}s.`,
      resource: kind.resource,
      action: "UPDATE",
      async execute(ctx, p) {
        const tagId = p[`${kind.field}TagId`] as string;
        await requireTag(ctx, tagId);
        const add = distinct(p[`add${F}Ids`] as string[], `add${F}Ids`);
        const remove = distinct(p[`remove${F}Ids`] as string[], `remove${F}Ids`);
        const both = add.find((id) => remove.includes(id));
        if (both !== undefined) throw serviceError("REQUEST_INVALID", `${kind.noun} ${both} is in both add${F}Ids and remove${F}Ids`);
        await kind.requireMembers(ctx.trx, ctx.organizationId, [...add, ...remove]);
        const newName = p[`new${F}TagName`] as string | undefined;
        if (newName !== undefined && newName !== "") {
          const name = requireName(newName, `new${F}TagName`);
          await requireUniqueName(ctx, name, tagId);
          await ctx.trx.updateTable("tags").set({ name }).where("id", "=", tagId).execute();
        }
        const trx = members(ctx.trx);
        if (remove.length) await trx.deleteFrom(table).where("tag_id", "=", tagId).where(column, "in", remove).execute();
        if (add.length) {
          const present: Record<string, string>[] = await trx
            .selectFrom(table)
            .select(column)
            .where("tag_id", "=", tagId)
            .where(column, "in", add)
            .execute();
          const missing = add.filter((id) => !present.some((m) => m[column] === id));
          if (missing.length) await trx.insertInto(table).values(memberRows(tagId, missing)).execute();
        }
        await ctx.trx.updateTable("tags").set({ updated_at: ctx.now }).where("id", "=", tagId).execute();
        return { [`${kind.field}TagId`]: tagId };
      },
    }),

    defineActivity({
      name: `delete_${kind.operation}_tags`,
      summary: `Delete ${kind.noun} tags (the ${kind.noun}s stay).`,
      resource: kind.resource,
      action: "DELETE",
      async execute(ctx, p) {
        const ids = distinct(p[`${kind.field}TagIds`] as string[], `${kind.field}TagIds`);
        if (ids.length === 0) throw serviceError("REQUEST_INVALID", `${kind.field}TagIds must list at least one tag`);
        for (const id of ids) await requireTag(ctx, id);
        const trx = members(ctx.trx);
        const tagged: Record<string, string>[] = await trx
          .selectFrom(table)
          .select(column)
          .distinct()
          .where("tag_id", "in", ids)
          .orderBy(column)
          .execute();
        await trx.deleteFrom(table).where("tag_id", "in", ids).execute();
        await ctx.trx.deleteFrom("tags").where("id", "in", ids).execute();
        return { [`${kind.field}TagIds`]: ids, [`${kind.field}Ids`]: tagged.map((m) => m[column]) };
      },
    }),

    defineQuery({
      name: `list_${kind.operation}_tags`,
      summary: `Every ${kind.noun} tag of the organization.`,
      async run(ctx) {
        return { [`${kind.field}Tags`]: await listTags(ctx.db, ctx.organizationId, kind.tagType) };
      },
    }),
  ];
}

export const tagOperations = [
  ...tagOperationsFor({
    tagType: "TAG_TYPE_USER",
    field: "user",
    operation: "user",
    noun: "user",
    errors: { exists: "USER_TAG_ALREADY_EXISTS", notFound: "USER_TAG_NOT_FOUND" },
    resource: "USER",
    members: { table: "user_tag_members", column: "user_id" },
    requireMembers: requireUsers,
  }),
  ...tagOperationsFor({
    tagType: "TAG_TYPE_PRIVATE_KEY",
    field: "privateKey",
    operation: "private_key",
    noun: "private key",
    errors: { exists: "PRIVATE_KEY_TAG_ALREADY_EXISTS", notFound: "PRIVATE_KEY_TAG_NOT_FOUND" },
    resource: "PRIVATE_KEY",
    members: { table: "private_key_tag_members", column: "private_key_id" },
    requireMembers: requirePrivateKeys,
  }),
];
