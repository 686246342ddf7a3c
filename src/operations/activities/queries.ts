// Reading the audit log: one activity, or a page of them.
import { defineQuery } from "../../registry/registry.js";
import { readPage } from "../resources.js";
import { renderActivity, renderPolicyEvaluation, requireActivity } from "./records.js";

export const activityQueries = [
  defineQuery({
    name: "get_policy_evaluations",
    summary: "How the organization's policies judged an activity: one evaluation per vote, with each policy's outcome.",
    async run(ctx, body) {
      const activity = await requireActivity(ctx.db, ctx.organizationId, body.activityId);
      const rows = await ctx.db
        .selectFrom("policy_evaluations")
        .selectAll()
        .where("activity_id", "=", activity.id)
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return { policyEvaluations: rows.map(renderPolicyEvaluation) };
    },
  }),

  defineQuery({
    name: "get_activity",
    summary: "One activity of the audit log.",
    async run(ctx, body) {
      const row = await requireActivity(ctx.db, ctx.organizationId, body.activityId);
      return { activity: renderActivity(row, await ctx.votingRights(row)) };
    },
  }),

  defineQuery({
    name: "list_activities",
    summary: "Activities newest first; `after` pages towards older ones, `before` towards newer ones.",
    async run(ctx, body) {
      let query = ctx.db.selectFrom("activities").selectAll().where("organization_id", "=", ctx.organizationId);
      if (body.filterByStatus?.length) query = query.where("status", "in", body.filterByStatus);
      if (body.filterByType?.length) query = query.where("type", "in", body.filterByType);
      const rows = await readPage(ctx.db, query, body.paginationOptions, {
        newestFirst: true,
        table: "activities",
        scope: "organization_id",
        owner: ctx.organizationId,
        cursorIs: "an activity of this organization",
      });
      const rendered = [];
      for (const row of rows) rendered.push(renderActivity(row, await ctx.votingRights(row)));
      return { activities: rendered };
    },
  }),
];
