// Stored secrets: arbitrary secrets (passwords, card details, API keys) a client imports and exports
// through the secure channel (secure-channel.ts), as wallet keys travel. init_import_secrets hands the
// requesting user one-use targets, each in a signed bundle @turnkey/crypto's encryptSecretToBundle
// encrypts to; import_secrets opens each payload with the target it names (which is then discarded)
// and stores the secret sealed under the master key, bound to its organization and id; export_secrets
// seals each one to the key the request names, in a signed bundle decryptSecretBundle opens. A
// secret's name (unique in the organization) and static properties are fixed at import and are what
// policies read of it (`secret`); its plaintext is never logged, recorded or answered.
import type { Selectable } from "kysely";
import { serviceError } from "../../errors.js";
import { uncompressedP256 } from "../../crypto/hpke.js";
import { defineKeyword } from "../../policy/keywords.js";
import { T } from "../../policy/types.js";
import { defineActivity, defineQuery, type ActivityContext, type PolicyPart } from "../../registry/registry.js";
import type { Db, Tx } from "../../store/handles.js";
import type { SecretsTable } from "../../store/schema.js";
import { newId } from "../../store/ids.js";
import { requireName } from "../identity/credentials.js";
import { readPage } from "../resources.js";
import {
  discardImportTargets,
  exportBundle,
  issueImportTargets,
  openWithImportTarget,
  parseEncryptedPayload,
  policyTargetKey,
  requireLiveTarget,
  targetKey,
} from "../secure-channel.js";

/** How many secrets one request may name (targets, imports or exports): each costs a key agreement,
 * and each is judged by the policies on its own. */
const MAX_SECRETS_PER_REQUEST = 100;

defineKeyword({
  path: "secret",
  fields: ["condition"],
  type: T.struct("Secret", { id: T.string, name: T.string, static_properties: T.map(T.string) }),
  description:
    'The stored secret an import_secrets or export_secrets request is judged for: its id (export only), name ("" when it has none) and static properties. A request naming several secrets is judged once per secret, and allowed only when every one is.',
});

interface StaticProperty {
  key: string;
  value: string;
}

export const secretIdentity = (row: { id: string; organization_id: string }) => ({
  organizationId: row.organization_id,
  kind: "secret",
  resourceId: row.id,
});

function secretKeyword(secret: { id?: string; name: string | null; properties: StaticProperty[] }) {
  return {
    secret: {
      ...(secret.id !== undefined ? { id: secret.id } : {}),
      name: secret.name ?? "",
      static_properties: Object.fromEntries(secret.properties.map((p) => [p.key, p.value])),
    },
  };
}

const storedProperties = (row: Selectable<SecretsTable>) => JSON.parse(row.static_properties) as StaticProperty[];

function requireCount(count: number, field: string): void {
  if (!Number.isInteger(count) || count < 1 || count > MAX_SECRETS_PER_REQUEST)
    throw serviceError("REQUEST_INVALID", `${field} must be between 1 and ${MAX_SECRETS_PER_REQUEST}, got ${count}`);
}

/** The static properties as stored: each key named once, a missing value read as "". */
function staticProperties(properties: Array<{ key?: string; value?: string }> | undefined, field: string): StaticProperty[] {
  const seen = new Set<string>();
  return (properties ?? []).map((property, i) => {
    const key = property.key ?? "";
    if (key === "") throw serviceError("REQUEST_INVALID", `${field}[${i}].key must not be empty`);
    if (seen.has(key)) throw serviceError("REQUEST_INVALID", `${field} names the key "${key}" twice`);
    seen.add(key);
    return { key, value: property.value ?? "" };
  });
}

/** The optional name: trimmed, and refused when empty or too long (an absent name is null). */
const nameOf = (name: string | undefined, field: string) => (name === undefined ? null : requireName(name, field));

/** The target key as stored (uncompressed, lowercase hex), or undefined when it is not a P-256 key. */
function storedTargetKey(targetPublicKey: string): string | undefined {
  try {
    return Buffer.from(uncompressedP256(String(targetPublicKey ?? ""), "targetPublicKey")).toString("hex");
  } catch {
    return undefined;
  }
}

async function refuseTakenNames(trx: Tx, organizationId: string, names: string[]): Promise<void> {
  const seen = new Set<string>();
  for (const name of names) {
    if (seen.has(name)) throw serviceError("SECRET_ALREADY_EXISTS", `the import names the secret "${name}" twice: names are unique`);
    seen.add(name);
  }
  if (names.length === 0) return;
  const taken = await trx
    .selectFrom("secrets")
    .select(["id", "name"])
    .where("organization_id", "=", organizationId)
    .where("name", "in", names)
    .executeTakeFirst();
  if (taken) throw serviceError("SECRET_ALREADY_EXISTS", `the organization already has a secret named "${taken.name}" (${taken.id})`);
}

/** Opens one payload with the requester's live target it names; the target is used up. */
async function openPayload(ctx: ActivityContext, secret: { secretPayload: string; targetPublicKey: string }, i: number): Promise<Buffer> {
  const field = `secrets[${i}]`;
  const sealed = parseEncryptedPayload(secret.secretPayload, `${field}.secretPayload`, "encryptSecretToBundle");
  const publicKey = Buffer.from(targetKey(secret.targetPublicKey)).toString("hex");
  const target = await ctx.trx
    .selectFrom("import_targets")
    .selectAll()
    .where("organization_id", "=", ctx.organizationId)
    .where("kind", "=", "secret")
    .where("public_key", "=", publicKey)
    .executeTakeFirst();
  if (target && target.user_id !== ctx.principal.userId)
    throw serviceError(
      "IMPORT_USER_MISMATCH",
      `${field}.targetPublicKey is an import target of another user: an import must use a target init_import_secrets gave the requesting user (${ctx.principal.userId})`,
    );
  const live = requireLiveTarget(
    target,
    ctx.now,
    `${field}.targetPublicKey is not a live import target of user ${ctx.principal.userId}: call init_import_secrets first (a target serves one import)`,
    "init_import_secrets",
  );
  const plaintext = await openWithImportTarget(ctx, live, sealed, `${field}.secretPayload`);
  if (plaintext.length === 0) throw serviceError("INVALID_IMPORT_BUNDLE", `${field}.secretPayload holds an empty secret`);
  return plaintext;
}

async function findSecret(trx: Tx | Db, organizationId: string, secretId: string) {
  return trx.selectFrom("secrets").selectAll().where("organization_id", "=", organizationId).where("id", "=", secretId).executeTakeFirst();
}

export const secretOperations = [
  defineActivity({
    name: "init_import_secrets",
    summary: "Start a secrets import: numSecrets one-use target keys for the requesting user, each in a signed bundle.",
    resource: "SECRET",
    action: "IMPORT",
    async execute(ctx, p) {
      requireCount(p.numSecrets, "numSecrets");
      return { enclaveTargetMessages: await issueImportTargets(ctx, ctx.principal.userId, "secret", p.numSecrets) };
    },
  }),

  defineActivity({
    name: "import_secrets",
    summary:
      "Import secrets, each encrypted to a target from init_import_secrets; store them sealed, with their names and static properties.",
    resource: "SECRET",
    action: "IMPORT",
    // The payloads are not kept in the audit log, so the activity cannot wait for approvals.
    secretParameters: ["secrets[].secretPayload"],
    async policyContexts(_trx, _organizationId, p) {
      try {
        return p.secrets.map((s, i) => ({
          keywords: secretKeyword({
            name: nameOf(s.name, `secrets[${i}].name`),
            properties: staticProperties(s.staticProperties, `secrets[${i}].staticProperties`),
          }),
        }));
      } catch {
        // refused with its reason when the activity runs
        return [];
      }
    },
    // A failed import uses up the requester's targets it named, as a failed wallet import does.
    afterFailure: (ctx, p) =>
      discardImportTargets(
        ctx,
        ctx.principal.userId,
        "secret",
        p.secrets.map((s) => storedTargetKey(s.targetPublicKey)).filter((k): k is string => k !== undefined),
      ),
    async execute(ctx, p) {
      requireCount(p.secrets.length, "the number of secrets");
      const rows = p.secrets.map((s, i) => ({
        name: nameOf(s.name, `secrets[${i}].name`),
        properties: staticProperties(s.staticProperties, `secrets[${i}].staticProperties`),
      }));
      await refuseTakenNames(
        ctx.trx,
        ctx.organizationId,
        rows.flatMap((r) => (r.name === null ? [] : [r.name])),
      );
      const secretIds: string[] = [];
      for (const [i, secret] of p.secrets.entries()) {
        const plaintext = await openPayload(ctx, secret, i);
        const id = newId();
        try {
          await ctx.trx
            .insertInto("secrets")
            .values({
              id,
              organization_id: ctx.organizationId,
              name: rows[i]!.name,
              static_properties: JSON.stringify(rows[i]!.properties),
              sealed_secret: ctx.env.keyring.seal(plaintext, secretIdentity({ id, organization_id: ctx.organizationId })),
              imported_by: ctx.principal.userId,
              created_at: ctx.now,
            })
            .execute();
        } finally {
          plaintext.fill(0);
        }
        secretIds.push(id);
      }
      return { secretIds };
    },
  }),

  defineActivity({
    name: "export_secrets",
    summary: "Export stored secrets, each encrypted (HPKE) to the target public key named beside it, in signed bundles.",
    resource: "SECRET",
    action: "EXPORT",
    // Each secret goes to the target key named beside it, and each (secret, target key) pair is judged
    // as if it were exported alone: its `secret` and activity.params.target_public_key. The request is
    // allowed only when every pair is, so a deny on one key cannot be sidestepped by naming it beside
    // others. activity.params.target_public_key of the request as a whole is set when all pairs share it.
    policyParameters(p) {
      const keys = new Set(p.secrets.map((s) => policyTargetKey(s.targetPublicKey)));
      return keys.size === 1 ? { target_public_key: [...keys][0]! } : {};
    },
    async policyContexts(trx, organizationId, p) {
      const parts: PolicyPart[] = [];
      for (const { secretId, targetPublicKey } of p.secrets) {
        const row = await findSecret(trx, organizationId, secretId);
        // An unknown id leaves `secret` unset: a policy reading it cannot allow the request.
        parts.push({
          keywords: row ? secretKeyword({ id: row.id, name: row.name, properties: storedProperties(row) }) : {},
          params: { target_public_key: policyTargetKey(targetPublicKey) },
        });
      }
      return parts;
    },
    async execute(ctx, p) {
      requireCount(p.secrets.length, "the number of secrets");
      // Every target key is a key before any secret is opened.
      p.secrets.forEach((s, i) => targetKey(s.targetPublicKey, `secrets[${i}].targetPublicKey`));
      const rows: Selectable<SecretsTable>[] = [];
      for (const { secretId } of p.secrets) {
        const row = await findSecret(ctx.trx, ctx.organizationId, secretId);
        if (!row) throw serviceError("SECRET_NOT_FOUND", `no secret ${secretId} in organization ${ctx.organizationId}`);
        rows.push(row);
      }
      // All or nothing: every secret is sealed before any payload is answered.
      const secretPayloads: string[] = [];
      for (const [i, row] of rows.entries()) {
        secretPayloads.push(
          await exportBundle(ctx, p.secrets[i]!.targetPublicKey, ctx.env.keyring.open(row.sealed_secret, secretIdentity(row))),
        );
      }
      return { secretPayloads };
    },
  }),

  defineQuery({
    name: "list_secrets",
    summary: "Stored secrets' metadata (id, name, static properties, creation time), newest first; never a secret itself.",
    async run(ctx, body) {
      const query = ctx.db.selectFrom("secrets").selectAll().where("organization_id", "=", ctx.organizationId);
      const rows = await readPage(ctx.db, query, body.paginationOptions, {
        newestFirst: true,
        table: "secrets",
        scope: "organization_id",
        owner: ctx.organizationId,
        cursorIs: "a secret of this organization",
      });
      return {
        secrets: rows.map((row) => ({
          secretId: row.id,
          ...(row.name !== null ? { name: row.name } : {}),
          staticProperties: storedProperties(row),
          createdAtUnixMs: String(row.created_at),
        })),
      };
    },
  }),
];
