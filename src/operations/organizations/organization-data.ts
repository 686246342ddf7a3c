// get_organization: the whole organization in one object, the view programs written against
// @turnkey/http's older API still read. Built from the same loaders as the list queries, so it shows
// exactly what they show: public halves of keys, never a secret.
import { defineQuery } from "../../registry/registry.js";
import { loadUsers } from "../resources.js";
import { listPolicies } from "../policies/policies.js";
import { listPrivateKeys } from "../wallets/private-keys.js";
import { listWallets } from "../wallets/wallets.js";
import { listTags } from "../identity/tags.js";
import { featuresOf } from "./features.js";
import { rootQuorumUserIds } from "./organizations.js";
import { interfaceReferences } from "../contracts/interfaces.js";
import { listInvitations } from "./invitations.js";

export const organizationDataOperations = [
  defineQuery({
    name: "get_organization",
    summary:
      "The whole organization in one object (`organizationData`): name, root quorum, users with their credentials, policies, wallets, " +
      "private keys (public halves), invitations with their status, tags, features and smart contract interface references (id, address, digest).",
    async run(ctx) {
      // One snapshot: the root quorum names only users listed, the tags only tags listed.
      const organizationData = await ctx.readSnapshot(async (db) => {
        const organization = await db
          .selectFrom("organizations")
          .select(["id", "name", "root_quorum_threshold"])
          .where("id", "=", ctx.organizationId)
          .executeTakeFirstOrThrow();
        return {
          organizationId: organization.id,
          name: organization.name,
          users: await loadUsers(db, organization.id),
          policies: await listPolicies(db, organization.id),
          privateKeys: await listPrivateKeys(db, organization.id),
          invitations: await listInvitations(db, organization.id),
          tags: await listTags(db, organization.id),
          rootQuorum: { threshold: organization.root_quorum_threshold, userIds: await rootQuorumUserIds(db, organization.id) },
          features: await featuresOf(db, organization.id),
          wallets: await listWallets(db, organization.id),
          smartContractInterfaceReferences: await interfaceReferences(db, organization.id),
        };
      });
      return { organizationData };
    },
  }),
];
