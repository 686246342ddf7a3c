// Votes on activities waiting for consensus. The pipeline applies them (Pipeline.vote); these
// declarations give them their routes, request validation and place in the docs.
import { defineVote } from "../../registry/registry.js";

export const voteOperations = [
  defineVote({
    name: "approve_activity",
    summary: "Approve a pending activity, named by its fingerprint; it runs once the approvals satisfy a policy or the root quorum.",
    selection: "VOTE_SELECTION_APPROVED",
  }),
  defineVote({
    name: "reject_activity",
    summary: "Reject a pending activity, named by its fingerprint; it is rejected once approval has become impossible.",
    selection: "VOTE_SELECTION_REJECTED",
  }),
];
