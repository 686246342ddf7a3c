// User tags: named groups of users that policies refer to (approvers.any(u, u.tags.contains(...))).
import { alreadyExists, invalidArgument, notFound } from "../errors.js";
import { defineActivity, defineQuery, type ActivityContext } from "./registry.js";
import { requireName } from "./credentials.js";
import { distinct, newId, requireUsers, timestamp } from "./resources.js";

async function requireUniqueTagName(ctx: ActivityContext, name: string, exceptId?: string) {
  let query = ctx.trx.selectFrom("tags").select("id").where("organization_id", "=", ctx.organizationId).where("tag_type", "=", "TAG_TYPE_USER").where("name", "=", name);
  if (exceptId) query = query.where("id", "!=", exceptId);
  if (await query.executeTakeFirst()) throw alreadyExists(`a user tag named "${name}" already exists`, "USER_TAG_ALREADY_EXISTS");
}

async function requireUserTag(ctx: ActivityContext, tagId: string) {
  const tag = await ctx.trx
    .selectFrom("tags")
    .selectAll()
    .where("organization_id", "=", ctx.organizationId)
    .where("tag_type", "=", "TAG_TYPE_USER")
    .where("id", "=", tagId)
    .executeTakeFirst();
  if (!tag) throw notFound(`user tag ${tagId} not found`, "USER_TAG_NOT_FOUND");
  return tag;
}

export const tagOperations = [
  defineActivity<{ userTagName: string; userIds: string[] }>({
    name: "create_user_tag",
    summary: "Create a user tag and apply it to users.",
    resource: "USER",
    action: "CREATE",
    async execute(ctx, p) {
      const name = requireName(p.userTagName, "userTagName");
      const userIds = distinct(p.userIds, "userIds");
      await requireUniqueTagName(ctx, name);
      await requireUsers(ctx.trx, ctx.organizationId, userIds);
      const id = newId();
      await ctx.trx
        .insertInto("tags")
        .values({ id, organization_id: ctx.organizationId, name, tag_type: "TAG_TYPE_USER", created_at: ctx.now, updated_at: ctx.now })
        .execute();
      if (userIds.length) await ctx.trx.insertInto("user_tag_members").values(userIds.map((user_id) => ({ tag_id: id, user_id }))).execute();
      return { userTagId: id, userIds };
    },
  }),

  defineActivity<{ userTagId: string; newUserTagName?: string; addUserIds: string[]; removeUserIds: string[] }>({
    name: "update_user_tag",
    summary: "Rename a user tag, or add and remove its users.",
    resource: "USER",
    action: "UPDATE",
    async execute(ctx, p) {
      await requireUserTag(ctx, p.userTagId);
      const add = distinct(p.addUserIds, "addUserIds");
      const remove = distinct(p.removeUserIds, "removeUserIds");
      const both = add.find((id) => remove.includes(id));
      if (both) throw invalidArgument(`user ${both} is in both addUserIds and removeUserIds`);
      await requireUsers(ctx.trx, ctx.organizationId, [...add, ...remove]);
      if (p.newUserTagName !== undefined && p.newUserTagName !== "") {
        const name = requireName(p.newUserTagName, "newUserTagName");
        await requireUniqueTagName(ctx, name, p.userTagId);
        await ctx.trx.updateTable("tags").set({ name }).where("id", "=", p.userTagId).execute();
      }
      if (remove.length) await ctx.trx.deleteFrom("user_tag_members").where("tag_id", "=", p.userTagId).where("user_id", "in", remove).execute();
      if (add.length) {
        const present = await ctx.trx.selectFrom("user_tag_members").select("user_id").where("tag_id", "=", p.userTagId).where("user_id", "in", add).execute();
        const missing = add.filter((id) => !present.some((m) => m.user_id === id));
        if (missing.length) await ctx.trx.insertInto("user_tag_members").values(missing.map((user_id) => ({ tag_id: p.userTagId, user_id }))).execute();
      }
      await ctx.trx.updateTable("tags").set({ updated_at: ctx.now }).where("id", "=", p.userTagId).execute();
      return { userTagId: p.userTagId };
    },
  }),

  defineActivity<{ userTagIds: string[] }>({
    name: "delete_user_tags",
    summary: "Delete user tags (the users stay).",
    resource: "USER",
    action: "DELETE",
    async execute(ctx, p) {
      const ids = distinct(p.userTagIds, "userTagIds");
      if (ids.length === 0) throw invalidArgument("userTagIds must list at least one tag");
      for (const id of ids) await requireUserTag(ctx, id);
      const members = await ctx.trx.selectFrom("user_tag_members").select("user_id").distinct().where("tag_id", "in", ids).orderBy("user_id").execute();
      await ctx.trx.deleteFrom("user_tag_members").where("tag_id", "in", ids).execute();
      await ctx.trx.deleteFrom("tags").where("id", "in", ids).execute();
      return { userTagIds: ids, userIds: members.map((m) => m.user_id) };
    },
  }),

  defineQuery<{ organizationId: string }>({
    name: "list_user_tags",
    summary: "Every user tag of the organization.",
    async run(ctx) {
      const rows = await ctx.db
        .selectFrom("tags")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .where("tag_type", "=", "TAG_TYPE_USER")
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return {
        userTags: rows.map((t) => ({ tagId: t.id, tagName: t.name, tagType: t.tag_type, createdAt: timestamp(t.created_at), updatedAt: timestamp(t.updated_at) })),
      };
    },
  }),
];
