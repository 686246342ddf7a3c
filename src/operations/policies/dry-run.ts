// The policy dry run (docs/policy-testing.md): a query of Sigil's own that takes a would-be submit
// request and answers what the policy engine would decide, with every policy's verdict and the part
// of it that gave the verdict. The answer comes from the pipeline (QueryContext.wouldBeAnswered),
// which decides it with the submit's own code and changes nothing.
import { defineSigilQuery } from "../../registry/registry.js";

export interface EvaluatePoliciesBody {
  organizationId: string;
  type: string;
  parameters: Record<string, unknown>;
  actingUserId?: string;
}

export const policyDryRunQueries = [
  defineSigilQuery<EvaluatePoliciesBody>({
    name: "evaluate_policies",
    summary:
      "What the organization's policies and root quorum would decide on a would-be submit request (activity type and parameters, " +
      "optionally the acting user), with every policy's outcome and the part that gave it; records and consumes nothing.",
    schema: {
      type: "object",
      required: ["organizationId", "type", "parameters"],
      properties: {
        organizationId: { type: "string" },
        type: { type: "string", minLength: 1, description: "the activity type a submit would carry (ACTIVITY_TYPE_…)" },
        parameters: { type: "object", description: "the parameters a submit would carry, held to that type's schema" },
        actingUserId: {
          type: "string",
          minLength: 1,
          description: "the user the request would come from (a user of the organization); the caller when absent",
        },
      },
      additionalProperties: false,
    },
    run: (ctx, body) =>
      ctx.wouldBeAnswered({
        type: body.type,
        parameters: body.parameters,
        ...(body.actingUserId !== undefined ? { actingUserId: body.actingUserId } : {}),
      }),
  }),
];
