// Every operation the service offers. The HTTP routes, request validation, policy metadata and the
// operations table in docs/ are all derived from this list.
import type { Operation, QueryOperation, SubmitOperation } from "../operations/registry.js";
import { userOperations } from "../operations/users.js";
import { credentialOperations } from "../operations/credentials.js";
import { tagOperations } from "../operations/tags.js";
import { organizationOperations } from "../operations/organizations.js";
import { organizationDataOperations } from "../operations/organization-data.js";
import { policyOperations } from "../operations/policies.js";
import { walletOperations } from "../operations/wallets.js";
import { privateKeyOperations } from "../operations/private-keys.js";
import { signingOperations } from "../operations/signing.js";
import { subOrganizationOperations } from "../operations/sub-organizations.js";
import { featureOperations } from "../operations/features.js";
import { webhookOperations } from "../operations/webhooks.js";
import { exportOperations } from "../operations/exports.js";
import { importOperations } from "../operations/imports.js";
import { sessionOperations } from "../operations/sessions.js";
import { otpOperations } from "../operations/otp.js";
import { oauthOperations } from "../operations/oauth.js";
import { activityQueries } from "./queries.js";
import { voteOperations } from "./votes.js";

export const operations: Operation[] = [
  ...userOperations,
  ...credentialOperations,
  ...tagOperations,
  ...policyOperations,
  ...walletOperations,
  ...privateKeyOperations,
  ...signingOperations,
  ...exportOperations,
  ...importOperations,
  ...sessionOperations,
  ...otpOperations,
  ...oauthOperations,
  ...organizationOperations,
  ...organizationDataOperations,
  ...subOrganizationOperations,
  ...featureOperations,
  ...webhookOperations,
  ...voteOperations,
  ...activityQueries,
];

/** Everything served under /public/v1/submit/: activities and votes on them. */
export const activityOperations = operations.filter((op): op is SubmitOperation => op.kind !== "query");
export const queryOperations = operations.filter((op): op is QueryOperation => op.kind === "query");

/** Activity type -> the operation that accepts it, so a type sent to the wrong path gets a useful error. */
export const operationByActivityType = new Map<string, SubmitOperation>(
  activityOperations.flatMap((op) => op.types.map((t) => [t, op] as const)),
);
