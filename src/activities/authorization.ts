// The one place that decides whether a caller may do what it asks. Until the policy engine lands, the
// rule is: root-quorum users may do everything in their organization; other users may only read.
import type { Tx, Db } from "../store/database.js";
import type { Principal } from "../auth/authenticate.js";
import type { ActivityOperation } from "../operations/registry.js";
import { ServiceError, permissionDenied } from "../errors.js";
import { rootQuorumUserIds } from "../operations/organizations.js";

export type Decision = { allowed: true } | { allowed: false; error: ServiceError };

export async function authorizeActivity(trx: Tx, principal: Principal, organizationId: string, operation: ActivityOperation): Promise<Decision> {
  if (principal.organizationId !== organizationId) {
    return { allowed: false, error: permissionDenied(`credentials of organization ${principal.organizationId} cannot act in organization ${organizationId}`, "ORGANIZATION_MISMATCH") };
  }
  const root = await rootQuorumUserIds(trx, organizationId);
  if (root.includes(principal.userId)) return { allowed: true };
  return {
    allowed: false,
    error: permissionDenied(`user ${principal.userId} is not in the root quorum and may not perform ${operation.resource}/${operation.action} (${operation.name})`),
  };
}

/** Every user of an organization reads it. */
export async function authorizeQuery(_db: Db, principal: Principal, organizationId: string): Promise<Decision> {
  if (principal.organizationId === organizationId) return { allowed: true };
  return { allowed: false, error: permissionDenied(`credentials of organization ${principal.organizationId} cannot read organization ${organizationId}`, "ORGANIZATION_MISMATCH") };
}
