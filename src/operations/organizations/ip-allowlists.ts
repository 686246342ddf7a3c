// IP allowlists (docs/ip-allowlists.md): the CIDR blocks an organization's API keys may send requests
// from, for the whole organization and for one API key (whose list, when it has rules, replaces the
// organization's for that key). Set and removed by activities that policies decide on; enforced by
// auth/ip-allowlists.ts on every request an API key stamps.
import type { Db, Tx } from "../../store/handles.js";
import { serviceError } from "../../errors.js";
import { defineActivity, defineQuery } from "../../registry/registry.js";
import { normalizeCidr, ORGANIZATION_LIST, type EvaluationErrorMode, type StoredRule } from "../../auth/ip-allowlists.js";

/** At most this many IPv4 blocks and this many IPv6 blocks per list (the product's limits). */
export const MAX_RULES_PER_FAMILY = 10;
const MAX_LABEL_LENGTH = 256;
const EVALUATION_ERROR_MODES: readonly EvaluationErrorMode[] = ["ALLOW", "DENY"];

/** Only a top-level organization has IP allowlists: a sub-organization's requests are never held to any. */
async function requireTopLevel(db: Db | Tx, organizationId: string): Promise<void> {
  const organization = await db
    .selectFrom("organizations")
    .select("parent_organization_id")
    .where("id", "=", organizationId)
    .executeTakeFirstOrThrow();
  if (organization.parent_organization_id !== null)
    throw serviceError(
      "IP_ALLOWLIST_PARENT_ONLY",
      `organization ${organizationId} is a sub-organization: IP allowlists belong to the parent organization, and a sub-organization's requests are not held to any`,
    );
}

/** The id of the organization's API key with this public key (any hex case); one of another
 * organization, or none, is refused alike. */
async function apiKeyIdOf(db: Db | Tx, organizationId: string, publicKey: string): Promise<string> {
  const key = await db
    .selectFrom("api_keys")
    .select("id")
    .where("organization_id", "=", organizationId)
    .where("public_key", "=", publicKey.toLowerCase())
    .executeTakeFirst();
  if (!key) throw serviceError("API_KEY_NOT_FOUND", `no API key with public key ${publicKey} in organization ${organizationId}`);
  return key.id;
}

/** The list a request names: the API key's when it gives a public key, else the organization's. */
async function listIdOf(db: Db | Tx, organizationId: string, publicKey: string | undefined): Promise<string> {
  return publicKey === undefined || publicKey === "" ? ORGANIZATION_LIST : apiKeyIdOf(db, organizationId, publicKey);
}

/**
 * The rules as stored: each CIDR normalized (host bits cleared), a block given twice kept once with
 * its first label, at most MAX_RULES_PER_FAMILY of each family. A block the list already had keeps its
 * createdAt; a new one is stamped `now`.
 */
export function normalizeRules(rules: Array<{ cidr: string; label?: string }>, previous: StoredRule[], now: number): StoredRule[] {
  const kept = new Map<string, StoredRule>();
  const counts = { ipv4: 0, ipv6: 0 };
  for (const [i, rule] of rules.entries()) {
    const normalized = normalizeCidr(rule.cidr);
    if (typeof normalized === "string")
      throw serviceError("REQUEST_INVALID", `rules[${i}].cidr ${JSON.stringify(rule.cidr)} ${normalized}`);
    const label = rule.label ?? "";
    if (label.length > MAX_LABEL_LENGTH)
      throw serviceError("REQUEST_INVALID", `rules[${i}].label is longer than ${MAX_LABEL_LENGTH} characters`);
    if (kept.has(normalized.cidr)) continue;
    counts[normalized.family] += 1;
    if (counts[normalized.family] > MAX_RULES_PER_FAMILY) {
      throw serviceError(
        "REQUEST_INVALID",
        `rules hold more than ${MAX_RULES_PER_FAMILY} distinct ${normalized.family === "ipv4" ? "IPv4" : "IPv6"} blocks ` +
          `(rules[${i}] is one too many): an allowlist holds at most ${MAX_RULES_PER_FAMILY} of each family`,
      );
    }
    const createdAt = previous.find((r) => r.cidr === normalized.cidr)?.createdAt ?? String(now);
    kept.set(normalized.cidr, { cidr: normalized.cidr, label, createdAt });
  }
  return [...kept.values()];
}

/** Removes the lists of API keys that are being deleted (their requests can no longer come). */
export async function forgetApiKeyAllowlists(trx: Tx, organizationId: string, apiKeyIds: string[]): Promise<void> {
  if (apiKeyIds.length === 0) return;
  await trx.deleteFrom("ip_allowlists").where("organization_id", "=", organizationId).where("api_key_id", "in", apiKeyIds).execute();
}

/**
 * Removes a list outside the API, for an operator whose organization locked itself out (`sigil
 * remove-ip-allowlist`): returns whether there was one.
 */
export async function removeIpAllowlist(trx: Tx, organizationId: string, apiKeyId: string): Promise<boolean> {
  const removed = await trx
    .deleteFrom("ip_allowlists")
    .where("organization_id", "=", organizationId)
    .where("api_key_id", "=", apiKeyId)
    .executeTakeFirst();
  return Number(removed.numDeletedRows) > 0;
}

export const ipAllowlistOperations = [
  defineActivity({
    name: "set_ip_allowlist",
    summary:
      "Create or replace the IP allowlist of the organization (no publicKey) or of one of its API keys: the CIDR blocks its API keys may send requests from.",
    resource: "CONFIG",
    action: "UPDATE",
    async execute(ctx, p) {
      await requireTopLevel(ctx.trx, ctx.organizationId);
      const listId = await listIdOf(ctx.trx, ctx.organizationId, p.publicKey);
      if (p.rules === undefined)
        throw serviceError("REQUEST_INVALID", "rules is required: the whole rule set, which replaces the current one (it may be empty)");
      if (listId === ORGANIZATION_LIST && p.enabled === undefined)
        throw serviceError(
          "REQUEST_INVALID",
          "enabled is required for the organization's allowlist: true enforces it, false stores it without enforcing it",
        );
      const mode = p.onEvaluationError ?? "DENY";
      if (!EVALUATION_ERROR_MODES.includes(mode as EvaluationErrorMode))
        throw serviceError("REQUEST_INVALID", `onEvaluationError ${JSON.stringify(mode)} is not ALLOW or DENY`);
      const existing = await ctx.trx
        .selectFrom("ip_allowlists")
        .select(["rules", "created_at"])
        .where("organization_id", "=", ctx.organizationId)
        .where("api_key_id", "=", listId)
        .executeTakeFirst();
      const rules = normalizeRules(p.rules, existing ? (JSON.parse(existing.rules) as StoredRule[]) : [], ctx.now);
      const row = {
        organization_id: ctx.organizationId,
        api_key_id: listId,
        // A key's list has no switch of its own: the organization's decides whether any list is enforced.
        enabled: listId === ORGANIZATION_LIST ? (p.enabled ? 1 : 0) : null,
        on_evaluation_error: mode,
        rules: JSON.stringify(rules),
        updated_at: ctx.now,
      };
      if (existing)
        await ctx.trx
          .updateTable("ip_allowlists")
          .set(row)
          .where("organization_id", "=", ctx.organizationId)
          .where("api_key_id", "=", listId)
          .execute();
      else
        await ctx.trx
          .insertInto("ip_allowlists")
          .values({ ...row, created_at: ctx.now })
          .execute();
      return {};
    },
  }),

  defineActivity({
    name: "remove_ip_allowlist",
    summary:
      "Remove the IP allowlist of the organization (no publicKey) or of one of its API keys; requests fall back to the next list, or to none.",
    resource: "CONFIG",
    action: "DELETE",
    async execute(ctx, p) {
      await requireTopLevel(ctx.trx, ctx.organizationId);
      const listId = await listIdOf(ctx.trx, ctx.organizationId, p.publicKey);
      if (!(await removeIpAllowlist(ctx.trx, ctx.organizationId, listId)))
        throw serviceError(
          "IP_ALLOWLIST_NOT_FOUND",
          listId === ORGANIZATION_LIST
            ? `organization ${ctx.organizationId} has no IP allowlist of its own`
            : `API key ${listId} has no IP allowlist`,
        );
      return {};
    },
  }),

  defineQuery({
    name: "get_ip_allowlist",
    summary: "The IP allowlist of the organization (no publicKey) or of one of its API keys; no list reads as one with no rules.",
    async run(ctx, body) {
      const listId = await listIdOf(ctx.db, ctx.organizationId, body.publicKey);
      const row = await ctx.db
        .selectFrom("ip_allowlists")
        .selectAll()
        .where("organization_id", "=", ctx.organizationId)
        .where("api_key_id", "=", listId)
        .executeTakeFirst();
      const publicKey = listId === ORGANIZATION_LIST ? {} : { publicKey: body.publicKey!.toLowerCase() };
      if (!row) return { allowlist: { organizationId: ctx.organizationId, ...publicKey, rules: [] } };
      return {
        allowlist: {
          organizationId: ctx.organizationId,
          ...publicKey,
          ...(row.enabled !== null ? { enabled: row.enabled === 1 } : {}),
          onEvaluationError: row.on_evaluation_error,
          rules: JSON.parse(row.rules) as StoredRule[],
        },
      };
    },
  }),
];
