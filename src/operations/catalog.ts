// Every operation the service offers. The HTTP routes, request validation, policy metadata and the
// operations table in docs/ are all derived from this list.
import type { Operation, QueryOperation, SubmitOperation } from "../registry/registry.js";
import { userOperations } from "./identity/users.js";
import { credentialOperations } from "./identity/credentials.js";
import { tagOperations } from "./identity/tags.js";
import { organizationOperations } from "./organizations/organizations.js";
import { organizationDataOperations } from "./organizations/organization-data.js";
import { policyOperations } from "./policies/policies.js";
import { policyDryRunQueries } from "./policies/dry-run.js";
import { mfaPolicyOperations } from "./mfa/mfa-policies.js";
import { walletOperations } from "./wallets/wallets.js";
import { privateKeyOperations } from "./wallets/private-keys.js";
import { signingOperations } from "./wallets/signing.js";
import { transactionOperations } from "./transactions/sending.js";
import { solanaSendingOperations } from "./transactions/solana-sending.js";
import { balanceOperations } from "./transactions/balances.js";
import { historyOperations } from "./transactions/history.js";
import { undelegationOperations } from "./transactions/undelegation.js";
import { subOrganizationOperations } from "./organizations/sub-organizations.js";
import { featureOperations } from "./organizations/features.js";
import { invitationOperations } from "./organizations/invitations.js";
import { ipAllowlistOperations } from "./organizations/ip-allowlists.js";
import { webhookOperations } from "./webhooks/webhooks.js";
import { exportOperations } from "./wallets/exports.js";
import { importOperations } from "./wallets/imports.js";
import { secretOperations } from "./secrets/secrets.js";
import { sessionOperations } from "./logins/sessions.js";
import { sessionProfileOperations } from "./logins/session-profiles.js";
import { otpOperations } from "./logins/otp.js";
import { oauthOperations } from "./logins/oauth.js";
import { oauth2Operations } from "./logins/oauth2.js";
import { emailCredentialOperations } from "./logins/email-credentials.js";
import { emailEventOperations } from "./logins/email-events.js";
import { activityQueries } from "./activities/queries.js";
import { transparencyLogQueries } from "./activities/transparency-log.js";
import { voteOperations } from "./activities/votes.js";
import { contractInterfaceOperations } from "./contracts/interfaces.js";

export const operations: Operation[] = [
  ...userOperations,
  ...credentialOperations,
  ...tagOperations,
  ...policyOperations,
  ...mfaPolicyOperations,
  ...walletOperations,
  ...privateKeyOperations,
  ...signingOperations,
  ...contractInterfaceOperations,
  ...transactionOperations,
  ...solanaSendingOperations,
  ...balanceOperations,
  ...historyOperations,
  ...undelegationOperations,
  ...exportOperations,
  ...importOperations,
  ...secretOperations,
  ...sessionOperations,
  ...sessionProfileOperations,
  ...otpOperations,
  ...oauthOperations,
  ...oauth2Operations,
  ...emailCredentialOperations,
  ...emailEventOperations,
  ...organizationOperations,
  ...organizationDataOperations,
  ...subOrganizationOperations,
  ...featureOperations,
  ...invitationOperations,
  ...ipAllowlistOperations,
  ...webhookOperations,
  ...voteOperations,
  ...activityQueries,
  ...transparencyLogQueries,
  ...policyDryRunQueries,
];

/** Everything served under /public/v1/submit/: activities and votes on them. */
export const activityOperations = operations.filter((op): op is SubmitOperation => op.kind !== "query");
export const queryOperations = operations.filter((op): op is QueryOperation => op.kind === "query");

/** Activity type -> the operation that accepts it, so a type sent to the wrong path gets a useful error. */
export const operationByActivityType = new Map<string, SubmitOperation>(
  activityOperations.flatMap((op) => op.types.map((t) => [t, op] as const)),
);
