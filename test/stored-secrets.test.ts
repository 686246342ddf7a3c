// Stored secrets through the official clients: init_import_secrets hands out signed targets,
// @turnkey/crypto's encryptSecretToBundle encrypts to them, import_secrets stores the secrets sealed,
// list_secrets shows their metadata, and export_secrets seals them to a client key that
// decryptSecretBundle opens. Policies read `secret.*` and decide exports as they decide key exports
// (consensus included). Every way an import or export can be wrong, each changing nothing else; the
// plaintext found nowhere but in the export bundle; the master key rotation re-sealing them.
import fs from "node:fs";
import path from "node:path";
import crypto from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "kysely";
import { decryptSecretBundle, encryptSecretToBundle, generateP256KeyPair } from "@turnkey/crypto";
import {
  newKeyPair,
  refusedLeavingOnlyItsActivity,
  signedRequest,
  signerPublicKeyOf,
  startHarness,
  type Harness,
} from "./helpers/harness.js";
import { fastPoller, organizationWith, type Member } from "./helpers/organizations.js";
import { backend } from "./helpers/backend.js";
import { Keyring } from "../src/crypto/envelope.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import { SECRET_COLUMNS, resealAll } from "../src/services/sealed-secrets.js";
import { secretIdentity } from "../src/operations/secrets/secrets.js";

const SUITE = "TRANSPORT_ENCRYPTION_SUITE_ENCLAVE_ENCRYPT_V1" as const;

type Client = ReturnType<Harness["sdk"]>;

let h: Harness;
let signerPublicKey: string;

beforeAll(async () => {
  h = await startHarness({ SIGIL_IMPORT_TARGET_TTL_SECONDS: "600" });
  signerPublicKey = await signerPublicKeyOf(h.url);
});
afterAll(() => h.close());

/** init_import_secrets, as the product's SDK calls it (no generated method yet): the raw command. */
async function initTargets(client: Client, organizationId: string, numSecrets: number): Promise<string[]> {
  const result = await client.command<unknown, { enclaveTargetMessages: string[] }>(
    "/public/v1/submit/init_import_secrets",
    {
      type: "ACTIVITY_TYPE_INIT_IMPORT_SECRETS",
      timestampMs: String(Date.now()),
      organizationId,
      parameters: { encryptionSuite: SUITE, numSecrets },
    },
    "initImportSecretsResult",
  );
  return result.enclaveTargetMessages;
}

/** One secret encrypted to a target bundle: what import_secrets takes for it. */
async function sealedFor(ingressTargetBundle: string, organizationId: string, plaintext: string) {
  return encryptSecretToBundle({ plaintext, ingressTargetBundle, organizationId, dangerouslyOverrideSignerPublicKey: signerPublicKey });
}

interface SecretInput {
  plaintext: string;
  name?: string;
  properties?: Record<string, string>;
}

const propertiesOf = (properties: Record<string, string> = {}) => Object.entries(properties).map(([key, value]) => ({ key, value }));

/** The importSecret flow of the product's SDK, for several secrets in one import. */
async function importSecrets(client: Client, organizationId: string, secrets: SecretInput[]): Promise<string[]> {
  const targets = await initTargets(client, organizationId, secrets.length);
  const params = [];
  for (const [i, secret] of secrets.entries()) {
    const { secretPayload, targetPublicKey } = await sealedFor(targets[i]!, organizationId, secret.plaintext);
    params.push({
      ...(secret.name !== undefined ? { name: secret.name } : {}),
      secretPayload,
      targetPublicKey,
      encryptionSuite: SUITE,
      staticProperties: propertiesOf(secret.properties),
    });
  }
  const { secretIds } = await client.importSecrets({ organizationId, secrets: params });
  return secretIds;
}

/** export_secrets to a fresh key, and the plaintexts decryptSecretBundle opens. */
async function exportSecrets(client: Client, organizationId: string, secretIds: string[]): Promise<string[]> {
  const target = generateP256KeyPair();
  const { secretPayloads } = await client.exportSecrets({
    organizationId,
    secrets: secretIds.map((secretId) => ({ secretId, targetPublicKey: target.publicKeyUncompressed, encryptionSuite: SUITE })),
  });
  return Promise.all(
    secretPayloads.map((secretPayload) =>
      decryptSecretBundle({
        secretPayload,
        embeddedPrivateKey: target.privateKey,
        organizationId,
        dangerouslyOverrideSignerPublicKey: signerPublicKey,
      }),
    ),
  );
}

/**
 * A refused import: the activity is recorded FAILED with `code`, and every other table is as it was
 * except import_targets, where exactly the requester's targets the request named are used up (one
 * attempt per target).
 */
async function refusedImportIn(
  harness: Harness,
  client: Client,
  request: { organizationId: string; secrets: Array<Record<string, unknown>>; timestampMs?: string },
  code: string,
  usedUp: string[],
  message?: string | RegExp,
): Promise<void> {
  const before = JSON.parse(await harness.snapshot());
  const attempt = client.importSecrets(request as any);
  await expect(attempt).rejects.toMatchObject({ message: expect.stringMatching(message ?? /./) });
  const after = JSON.parse(await harness.snapshot());
  for (const table of Object.keys(before)) {
    if (table === "activities" || table === "policy_evaluations" || table === "import_targets") continue;
    expect(after[table], table).toEqual(before[table]);
  }
  const spent = (row: string) => usedUp.includes(JSON.parse(row).public_key);
  expect(after.import_targets).toEqual(before.import_targets.filter((row: string) => !spent(row)));
  expect(before.import_targets.filter(spent)).toHaveLength(usedUp.length);
  const added = after.activities.filter((row: string) => !before.activities.includes(row)).map((row: string) => JSON.parse(row));
  expect(added).toHaveLength(1);
  expect(added[0]).toMatchObject({ status: "ACTIVITY_STATUS_FAILED", type: "ACTIVITY_TYPE_IMPORT_SECRETS" });
  expect(JSON.parse(added[0].failure).details[0].turnkeyErrorCode).toBe(code);
}

const unique = (label: string) => `${label}-${crypto.randomBytes(4).toString("hex")}`;

describe("stored secrets through the official clients", () => {
  it("imports secrets with names and static properties, lists their metadata, and exports the very plaintexts", async () => {
    const { org, root } = await organizationWith(h, []);
    const card = JSON.stringify({ number: "4242 4242 4242 4242", exp: "11/29", cvv: "123" });
    const note = "ünïcødé secret 🔑 with\nnew lines";
    const ids = await importSecrets(root, org.organizationId, [
      { plaintext: card, name: "corporateVisa", properties: { kind: "creditCard", requiresConsensus: "true" } },
      { plaintext: note },
    ]);
    expect(ids).toHaveLength(2);
    expect(new Set(ids).size).toBe(2);

    const { secrets } = await root.listSecrets({ organizationId: org.organizationId });
    expect(secrets).toHaveLength(2);
    const byId = new Map(secrets.map((s) => [s.secretId, s]));
    expect(byId.get(ids[0]!)).toEqual({
      secretId: ids[0],
      name: "corporateVisa",
      staticProperties: [
        { key: "kind", value: "creditCard" },
        { key: "requiresConsensus", value: "true" },
      ],
      createdAtUnixMs: expect.stringMatching(/^\d+$/),
    });
    // A secret imported without a name has none (the field is absent), and no properties.
    expect(byId.get(ids[1]!)).toEqual({ secretId: ids[1], staticProperties: [], createdAtUnixMs: expect.stringMatching(/^\d+$/) });
    expect(JSON.stringify(secrets)).not.toContain("4242");

    expect(await exportSecrets(root, org.organizationId, ids)).toEqual([card, note]);
    // In the order asked, the same secret twice included.
    expect(await exportSecrets(root, org.organizationId, [ids[1]!, ids[0]!, ids[1]!])).toEqual([note, card, note]);
  });

  it("lists newest first, paged by cursor, and only the organization's own", async () => {
    const { org, root } = await organizationWith(h, []);
    const ids: string[] = [];
    for (const name of ["first", "second", "third"])
      ids.push(...(await importSecrets(root, org.organizationId, [{ plaintext: name, name }])));
    const other = await organizationWith(h, []);
    await importSecrets(other.root, other.org.organizationId, [{ plaintext: "elsewhere", name: "first" }]);

    const all = await root.listSecrets({ organizationId: org.organizationId });
    expect(all.secrets.map((s) => s.secretId)).toEqual([...ids].reverse());
    const page = await root.listSecrets({ organizationId: org.organizationId, paginationOptions: { limit: "1", after: ids[2]! } });
    expect(page.secrets.map((s) => s.name)).toEqual(["second"]);
    await expect(
      root.listSecrets({
        organizationId: org.organizationId,
        paginationOptions: { after: (await other.root.listSecrets({})).secrets[0]!.secretId },
      }),
    ).rejects.toMatchObject({ message: expect.stringContaining("is not a secret of this organization") });
  });
});

/** The plaintext of one export payload, opened with the private key it was sealed to. */
const opened = (secretPayload: string, privateKey: string, organizationId: string) =>
  decryptSecretBundle({
    secretPayload,
    embeddedPrivateKey: privateKey,
    organizationId,
    dangerouslyOverrideSignerPublicKey: signerPublicKey,
  });

describe("one export, a target key per secret", () => {
  const EXPORT = "activity.resource == 'SECRET' && activity.action == 'EXPORT'";

  it("each secret is sealed to the key named beside it, and opens with that key only", async () => {
    const { org, root } = await organizationWith(h, []);
    const [first, second] = await importSecrets(root, org.organizationId, [{ plaintext: "first" }, { plaintext: "second" }]);
    const [alice, bob] = [generateP256KeyPair(), generateP256KeyPair()];
    const { secretPayloads } = await root.exportSecrets({
      secrets: [
        { secretId: first!, targetPublicKey: alice.publicKeyUncompressed, encryptionSuite: SUITE },
        { secretId: second!, targetPublicKey: bob.publicKey, encryptionSuite: SUITE },
        { secretId: first!, targetPublicKey: bob.publicKeyUncompressed, encryptionSuite: SUITE },
      ],
    });
    expect(await opened(secretPayloads[0]!, alice.privateKey, org.organizationId)).toBe("first");
    expect(await opened(secretPayloads[1]!, bob.privateKey, org.organizationId)).toBe("second");
    expect(await opened(secretPayloads[2]!, bob.privateKey, org.organizationId)).toBe("first");
    await expect(opened(secretPayloads[0]!, bob.privateKey, org.organizationId)).rejects.toThrow();
  });

  it("each (secret, target key) pair is judged as if exported alone; a deny on any pair refuses the whole request", async () => {
    const { org, root, members } = await organizationWith(h, ["agent"]);
    const agent = members.agent!;
    const [card, apiKey] = await importSecrets(root, org.organizationId, [
      { plaintext: "card data", name: "card" },
      { plaintext: "exchange key", name: "exchange" },
    ]);
    const [cardHolder, exchangeBot, stranger] = [generateP256KeyPair(), generateP256KeyPair(), generateP256KeyPair()];
    // The card may go to the card holder's key only, the exchange key to the bot's only.
    await root.createPolicy({
      policyName: "card to its holder",
      effect: "EFFECT_ALLOW",
      condition: `${EXPORT} && secret.name == 'card' && activity.params.target_public_key == '${cardHolder.publicKeyUncompressed}'`,
      notes: "",
    });
    await root.createPolicy({
      policyName: "exchange key to the bot",
      effect: "EFFECT_ALLOW",
      condition: `${EXPORT} && secret.name == 'exchange' && activity.params.target_public_key == '${exchangeBot.publicKeyUncompressed}'`,
      notes: "",
    });
    const exportTo = (pairs: [string, string][]) => () =>
      agent.client.exportSecrets({
        secrets: pairs.map(([secretId, targetPublicKey]) => ({ secretId, targetPublicKey, encryptionSuite: SUITE })),
      });

    // Each pair allowed alone: allowed together, each to its own key.
    const { secretPayloads } = await exportTo([
      [card!, cardHolder.publicKey],
      [apiKey!, exchangeBot.publicKeyUncompressed],
    ])();
    expect(await opened(secretPayloads[0]!, cardHolder.privateKey, org.organizationId)).toBe("card data");
    expect(await opened(secretPayloads[1]!, exchangeBot.privateKey, org.organizationId)).toBe("exchange key");

    // The same two secrets and keys, crossed: neither pair is allowed alone, so neither together.
    await refusedLeavingOnlyItsActivity(
      h,
      exportTo([
        [card!, exchangeBot.publicKey],
        [apiKey!, cardHolder.publicKey],
      ]),
      { message: expect.stringContaining("OUTCOME_DENY_IMPLICIT") },
    );
    // One allowed pair does not carry another key along.
    await refusedLeavingOnlyItsActivity(
      h,
      exportTo([
        [card!, cardHolder.publicKey],
        [card!, stranger.publicKey],
      ]),
      { message: expect.stringContaining("OUTCOME_DENY_IMPLICIT") },
    );

    // An explicit deny on one key refuses the request that names it beside allowed pairs.
    await root.createPolicy({
      policyName: "never the bot's key for the card",
      effect: "EFFECT_DENY",
      condition: `${EXPORT} && activity.params.target_public_key == '${exchangeBot.publicKeyUncompressed}' && secret.name == 'card'`,
      notes: "",
    });
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      exportTo([
        [card!, cardHolder.publicKey],
        [apiKey!, exchangeBot.publicKey],
        [card!, exchangeBot.publicKey],
      ]),
      { message: expect.stringContaining("OUTCOME_DENY_EXPLICIT") },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
  });
});

describe("stored secrets of a sub-organization", () => {
  it("are its own (its parent's credential cannot export them) and go with it when it is deleted", async () => {
    const { org, root } = await organizationWith(h, []);
    const key = newKeyPair();
    const sub = await root.createSubOrganization({
      subOrganizationName: unique("vault"),
      rootQuorumThreshold: 1,
      rootUsers: [
        {
          userName: "vault owner",
          apiKeys: [{ apiKeyName: "owner key", publicKey: key.publicKey, curveType: "API_KEY_CURVE_P256" }],
          authenticators: [],
          oauthProviders: [],
        },
      ],
    });
    const subId = sub.subOrganizationId;
    const owner = h.sdk({ organizationId: subId }, key, fastPoller);
    const [secretId] = await importSecrets(owner, subId, [{ plaintext: "sub secret", name: "shared name" }]);
    // Names are unique per organization: the parent may use the same one.
    await importSecrets(root, org.organizationId, [{ plaintext: "parent secret", name: "shared name" }]);
    await expect(exportSecrets(root, subId, [secretId!])).rejects.toMatchObject({
      code: 7,
      message: expect.stringContaining("cannot write in them"),
    });
    expect((await root.listSecrets({ organizationId: subId })).secrets.map((s) => s.secretId)).toEqual([secretId]);
    expect(await exportSecrets(owner, subId, [secretId!])).toEqual(["sub secret"]);

    await owner.deleteSubOrganization({ organizationId: subId, deleteWithoutExport: true });
    const db = h.server.store.db;
    expect(await db.selectFrom("secrets").select("id").where("organization_id", "=", subId).execute()).toEqual([]);
    expect(await db.selectFrom("secrets").select("id").where("organization_id", "=", org.organizationId).execute()).toHaveLength(1);
  });
});

describe("policies on stored secrets", () => {
  const EXPORT = "activity.resource == 'SECRET' && activity.action == 'EXPORT'";

  it("a member exports only what a policy on secret.static_properties allows; a batch with one refused secret exports none", async () => {
    const { org, root, members } = await organizationWith(h, ["agent"]);
    const agent = members.agent!;
    const [card, apiKey] = await importSecrets(root, org.organizationId, [
      { plaintext: "card data", name: "card", properties: { kind: "creditCard" } },
      { plaintext: "exchange key", name: "exchange", properties: { kind: "exchangeApiKey" } },
    ]);
    // Without a policy a member exports nothing.
    await refusedLeavingOnlyItsActivity(h, () => exportSecrets(agent.client, org.organizationId, [card!]), {
      message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
    });
    await root.createPolicy({
      policyName: "agent exports cards",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${agent.userId}')`,
      condition: `${EXPORT} && secret.static_properties['kind'] == 'creditCard' && activity.type == 'ACTIVITY_TYPE_EXPORT_SECRETS'`,
      notes: "",
    });
    expect(await exportSecrets(agent.client, org.organizationId, [card!])).toEqual(["card data"]);
    const { failure } = await refusedLeavingOnlyItsActivity(h, () => exportSecrets(agent.client, org.organizationId, [apiKey!]), {
      code: 7,
    });
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
    // All or nothing: the allowed card does not leave beside the refused key.
    await refusedLeavingOnlyItsActivity(h, () => exportSecrets(agent.client, org.organizationId, [card!, apiKey!]), { code: 7 });

    // The target key is activity.params.target_public_key, in one spelling however it was sent.
    const watched = generateP256KeyPair();
    await root.createPolicy({
      policyName: "not to the watched key",
      effect: "EFFECT_DENY",
      condition: `${EXPORT} && activity.params.target_public_key == '${watched.publicKeyUncompressed}'`,
      notes: "",
    });
    await refusedLeavingOnlyItsActivity(
      h,
      () =>
        agent.client.exportSecrets({
          secrets: [{ secretId: card!, targetPublicKey: watched.publicKey, encryptionSuite: SUITE }],
        }),
      { message: expect.stringContaining("OUTCOME_DENY_EXPLICIT") },
    );

    // secret.name and secret.id are there to be named too; a deny wins over the allow.
    await root.createPolicy({
      policyName: "never the card by name",
      effect: "EFFECT_DENY",
      condition: `${EXPORT} && secret.name == 'card' && secret.id == '${card}'`,
      notes: "",
    });
    await refusedLeavingOnlyItsActivity(h, () => exportSecrets(agent.client, org.organizationId, [card!]), {
      message: expect.stringContaining("OUTCOME_DENY_EXPLICIT"),
    });
  });

  it("an export a policy puts to consensus waits, and the approval's answer carries the payload for the requester's key", async () => {
    const { org, root, members } = await organizationWith(h, ["payments", "browser"]);
    const payments = members.payments!;
    const browser = members.browser!;
    const [card] = await importSecrets(root, org.organizationId, [
      { plaintext: "the card", properties: { kind: "creditCard", requiresConsensus: "true" } },
    ]);
    await root.createPolicy({
      policyName: "both agents",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${payments.userId}') && approvers.any(u, u.id == '${browser.userId}')`,
      condition: `${EXPORT} && secret.static_properties['requiresConsensus'] == 'true'`,
      notes: "",
    });
    const target = generateP256KeyPair();
    const pending = (await payments.client.exportSecrets({
      secrets: [{ secretId: card!, targetPublicKey: target.publicKeyUncompressed, encryptionSuite: SUITE }],
    })) as any;
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    expect(pending.secretPayloads).toBeUndefined();

    const approved = (await browser.client.approveActivity({ fingerprint: pending.activity.fingerprint })) as any;
    expect(approved.activity).toMatchObject({ id: pending.activity.id, status: "ACTIVITY_STATUS_COMPLETED" });
    const [secretPayload] = approved.activity.result.exportSecretsResult.secretPayloads;

    // The byte-identical body stamped by the other agent is refused, not counted as its approval.
    const body = JSON.stringify({
      type: "ACTIVITY_TYPE_EXPORT_SECRETS",
      timestampMs: String(Date.now()),
      organizationId: org.organizationId,
      parameters: { secrets: [{ secretId: card!, targetPublicKey: target.publicKeyUncompressed, encryptionSuite: SUITE }] },
    });
    const first = signedRequest(body, payments.key);
    expect((await h.post("/public/v1/submit/export_secrets", first.body, first.headers)).json.activity.status).toBe(
      "ACTIVITY_STATUS_CONSENSUS_NEEDED",
    );
    const second = signedRequest(body, browser.key);
    const duplicate = await h.post("/public/v1/submit/export_secrets", second.body, second.headers);
    expect(duplicate.status).toBe(409);
    expect(duplicate.json.details[0].turnkeyErrorCode).toBe("DUPLICATE_REQUEST");
    expect(
      await decryptSecretBundle({
        secretPayload,
        embeddedPrivateKey: target.privateKey,
        organizationId: org.organizationId,
        dangerouslyOverrideSignerPublicKey: signerPublicKey,
      }),
    ).toBe("the card");
  });

  it("imports are judged per secret by their static properties; init and import are SECRET / IMPORT", async () => {
    const { org, root, members } = await organizationWith(h, ["importer"]);
    const importer: Member = members.importer!;
    // Two policies: the language evaluates every operand of || (a missing `secret` is an error even
    // beside a true one), and an init has no secret to read.
    for (const [policyName, condition] of [
      ["importer starts imports", "activity.type == 'ACTIVITY_TYPE_INIT_IMPORT_SECRETS'"],
      ["importer brings notes", "activity.type == 'ACTIVITY_TYPE_IMPORT_SECRETS' && secret.static_properties['kind'] == 'note'"],
    ]) {
      await root.createPolicy({
        policyName: policyName!,
        effect: "EFFECT_ALLOW",
        consensus: `approvers.any(u, u.id == '${importer.userId}')`,
        condition: `activity.resource == 'SECRET' && activity.action == 'IMPORT' && ${condition}`,
        notes: "",
      });
    }
    const [noteId] = await importSecrets(importer.client, org.organizationId, [{ plaintext: "a note", properties: { kind: "note" } }]);
    expect(await exportSecrets(root, org.organizationId, [noteId!])).toEqual(["a note"]);
    const [target] = await initTargets(importer.client, org.organizationId, 1);
    const sealed = await sealedFor(target!, org.organizationId, "a card");
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () =>
        importer.client.importSecrets({
          secrets: [{ ...sealed, encryptionSuite: SUITE, staticProperties: propertiesOf({ kind: "creditCard" }) }],
        }),
      { code: 7 },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("POLICY_DENIED");
  });
});

describe("refusals", () => {
  let org: Awaited<ReturnType<typeof organizationWith>>["org"];
  let root: Client;
  let other: Member;

  beforeAll(async () => {
    const made = await organizationWith(h, ["other"]);
    org = made.org;
    root = made.root;
    other = made.members.other!;
    await root.createPolicy({
      policyName: "other starts imports",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${other.userId}')`,
      condition: "activity.resource == 'SECRET' && activity.action == 'IMPORT' && activity.type == 'ACTIVITY_TYPE_INIT_IMPORT_SECRETS'",
      notes: "",
    });
  });

  /** The organization's import targets, as stored rows. */
  const targetRows = async () => (JSON.parse(await h.snapshot()).import_targets as string[]).map((r) => JSON.parse(r));

  const refusedImport = (
    client: Client,
    secrets: Array<Record<string, unknown>>,
    code: string,
    usedUp: string[],
    message?: string | RegExp,
  ) => refusedImportIn(h, client, { organizationId: org.organizationId, secrets }, code, usedUp, message);

  async function oneSealed(plaintext = "refused secret") {
    const [target] = await initTargets(root, org.organizationId, 1);
    return { ...(await sealedFor(target!, org.organizationId, plaintext)), encryptionSuite: SUITE };
  }

  it("a name the organization already has, or one named twice: SECRET_ALREADY_EXISTS, the targets used up", async () => {
    const name = unique("taken");
    await importSecrets(root, org.organizationId, [{ plaintext: "first", name }]);
    const sealed = await oneSealed();
    await refusedImport(root, [{ ...sealed, name }], "SECRET_ALREADY_EXISTS", [sealed.targetPublicKey], `a secret named "${name}"`);
    // The name is matched as stored (trimmed).
    const again = await oneSealed();
    await refusedImport(root, [{ ...again, name: ` ${name} ` }], "SECRET_ALREADY_EXISTS", [again.targetPublicKey]);

    const [a, b] = await initTargets(root, org.organizationId, 2);
    const twice = unique("twice");
    const first = await sealedFor(a!, org.organizationId, "one");
    const second = await sealedFor(b!, org.organizationId, "two");
    await refusedImport(
      root,
      [
        { ...first, encryptionSuite: SUITE, name: twice },
        { ...second, encryptionSuite: SUITE, name: twice },
      ],
      "SECRET_ALREADY_EXISTS",
      [first.targetPublicKey, second.targetPublicKey],
      "twice",
    );
  });

  it("a payload not encrypted to the target it names, a target that is none, a used target: refused", async () => {
    const [a, b] = await initTargets(root, org.organizationId, 2);
    const toA = await sealedFor(a!, org.organizationId, "meant for a");
    const toB = await sealedFor(b!, org.organizationId, "meant for b");
    // Encrypted to A, naming B: it does not open with B's key.
    await refusedImport(
      root,
      [{ secretPayload: toA.secretPayload, targetPublicKey: toB.targetPublicKey, encryptionSuite: SUITE }],
      "INVALID_IMPORT_BUNDLE",
      [toB.targetPublicKey],
      "does not decrypt",
    );
    // A key the service never issued.
    await refusedImport(
      root,
      [{ secretPayload: toA.secretPayload, targetPublicKey: generateP256KeyPair().publicKeyUncompressed, encryptionSuite: SUITE }],
      "IMPORT_TARGET_NOT_FOUND",
      [],
    );
    // A target once used (B above) serves no second import, not even with its own payload.
    await refusedImport(root, [{ ...toB, encryptionSuite: SUITE }], "IMPORT_TARGET_NOT_FOUND", []);
    // A newer init replaces the earlier targets: A stopped working too.
    await initTargets(root, org.organizationId, 1);
    await refusedImport(root, [{ ...toA, encryptionSuite: SUITE }], "IMPORT_TARGET_NOT_FOUND", []);
    // Not a key at all.
    const sealed = await oneSealed();
    await refusedImport(root, [{ ...sealed, targetPublicKey: "04abcd" }], "INVALID_TARGET_PUBLIC_KEY", []);
  });

  it("a target of another user: IMPORT_USER_MISMATCH, and that user's target is left alone", async () => {
    const [theirs] = await initTargets(other.client, org.organizationId, 1);
    const sealed = await sealedFor(theirs!, org.organizationId, "not yours");
    await refusedImport(root, [{ ...sealed, encryptionSuite: SUITE }], "IMPORT_USER_MISMATCH", [], "another user");
    expect((await targetRows()).some((row) => row.public_key === sealed.targetPublicKey && row.user_id === other.userId)).toBe(true);
  });

  it("a malformed payload: INVALID_IMPORT_BUNDLE whatever is wrong with it", async () => {
    for (const broken of [
      () => "not json",
      () => JSON.stringify({ ciphertext: "00" }),
      (payload: string) => {
        const parsed = JSON.parse(payload);
        return JSON.stringify({ ...parsed, ciphertext: (parsed.ciphertext[0] === "0" ? "1" : "0") + parsed.ciphertext.slice(1) });
      },
      (payload: string) => JSON.stringify({ ...JSON.parse(payload), ciphertext: "zz" }),
      (payload: string) => JSON.stringify({ ...JSON.parse(payload), encappedPublic: "04" }),
    ]) {
      const sealed = await oneSealed();
      await refusedImport(root, [{ ...sealed, secretPayload: broken(sealed.secretPayload) }], "INVALID_IMPORT_BUNDLE", [
        sealed.targetPublicKey,
      ]);
    }
    // An empty secret is no secret.
    const empty = await oneSealed("");
    await refusedImport(root, [empty], "INVALID_IMPORT_BUNDLE", [empty.targetPublicKey], "empty secret");
  });

  it("bad names, static properties and counts: REQUEST_INVALID", async () => {
    for (const [change, message] of [
      [{ name: "  " }, "name must not be empty"],
      [{ name: "n".repeat(257) }, "at most 256 characters"],
      [{ staticProperties: [{ key: "", value: "x" }] }, "key must not be empty"],
      [{ staticProperties: [{ value: "x" }] }, "key must not be empty"],
      [
        {
          staticProperties: [
            { key: "kind", value: "a" },
            { key: "kind", value: "b" },
          ],
        },
        'names the key "kind" twice',
      ],
    ] as const) {
      const sealed = await oneSealed();
      await refusedImport(root, [{ ...sealed, ...change }], "REQUEST_INVALID", [sealed.targetPublicKey], message);
    }
    for (const numSecrets of [0, 101]) {
      await refusedLeavingOnlyItsActivity(
        h,
        () =>
          root.command(
            "/public/v1/submit/init_import_secrets",
            {
              type: "ACTIVITY_TYPE_INIT_IMPORT_SECRETS",
              timestampMs: String(Date.now()),
              organizationId: org.organizationId,
              parameters: { encryptionSuite: SUITE, numSecrets },
            },
            "initImportSecretsResult",
          ),
        { code: 3, message: expect.stringContaining("numSecrets must be between 1 and 100") },
      );
    }
    await refusedLeavingOnlyItsActivity(h, () => root.importSecrets({ secrets: [] }), { code: 3 });
    await refusedLeavingOnlyItsActivity(h, () => root.exportSecrets({ secrets: [] }), { code: 3 });
  });

  it("an encryption suite outside the enum is refused before any activity is recorded", async () => {
    const sealed = await oneSealed();
    const [secretId] = await importSecrets(root, org.organizationId, [{ plaintext: "kept" }]);
    const before = await h.snapshot();
    const bad = "TRANSPORT_ENCRYPTION_SUITE_PLAINTEXT";
    for (const attempt of [
      () => root.importSecrets({ secrets: [{ ...sealed, encryptionSuite: bad as any }] }),
      () =>
        root.exportSecrets({ secrets: [{ secretId: secretId!, targetPublicKey: sealed.targetPublicKey, encryptionSuite: bad as any }] }),
      () =>
        root.command(
          "/public/v1/submit/init_import_secrets",
          {
            type: "ACTIVITY_TYPE_INIT_IMPORT_SECRETS",
            timestampMs: String(Date.now()),
            organizationId: org.organizationId,
            parameters: { encryptionSuite: bad, numSecrets: 1 },
          },
          "initImportSecretsResult",
        ),
    ]) {
      await expect(attempt()).rejects.toMatchObject({ code: 3, message: expect.stringContaining("encryptionSuite") });
    }
    expect(await h.snapshot()).toBe(before);
  });

  it("export: an unknown id, another organization's secret, a bad target key", async () => {
    const [mine] = await importSecrets(root, org.organizationId, [{ plaintext: "mine" }]);
    const elsewhere = await organizationWith(h, []);
    const [theirs] = await importSecrets(elsewhere.root, elsewhere.org.organizationId, [{ plaintext: "theirs" }]);
    const key = generateP256KeyPair().publicKeyUncompressed;
    for (const secretId of ["no-such-secret", theirs!]) {
      const { failure } = await refusedLeavingOnlyItsActivity(
        h,
        () =>
          root.exportSecrets({
            secrets: [
              { secretId: mine!, targetPublicKey: key, encryptionSuite: SUITE },
              { secretId, targetPublicKey: key, encryptionSuite: SUITE },
            ],
          }),
        { code: 5, message: expect.stringContaining(`no secret ${secretId}`) },
      );
      expect(failure.details[0].turnkeyErrorCode).toBe("SECRET_NOT_FOUND");
    }
    const { failure } = await refusedLeavingOnlyItsActivity(
      h,
      () => root.exportSecrets({ secrets: [{ secretId: mine!, targetPublicKey: "02abc", encryptionSuite: SUITE }] }),
      { code: 3 },
    );
    expect(failure.details[0].turnkeyErrorCode).toBe("INVALID_TARGET_PUBLIC_KEY");
    // A bad target key beside a good one refuses the whole export.
    await refusedLeavingOnlyItsActivity(
      h,
      () =>
        root.exportSecrets({
          secrets: [
            { secretId: mine!, targetPublicKey: key, encryptionSuite: SUITE },
            { secretId: mine!, targetPublicKey: "02abc", encryptionSuite: SUITE },
          ],
        }),
      { code: 3, message: expect.stringContaining("secrets[1].targetPublicKey") },
    );
  });

  it("an expired target: IMPORT_TARGET_EXPIRED, the target used up, nothing stored", async () => {
    let now = Date.now();
    const timed = await startHarness({ SIGIL_IMPORT_TARGET_TTL_SECONDS: "60" }, { clock: () => now });
    try {
      const organization = await timed.organization("Expiry");
      const client = timed.sdk(organization, organization.key, fastPoller);
      const key = await signerPublicKeyOf(timed.url);
      const [target] = await initTargets(client, organization.organizationId, 1);
      const sealed = await encryptSecretToBundle({
        plaintext: "too late",
        ingressTargetBundle: target!,
        organizationId: organization.organizationId,
        dangerouslyOverrideSignerPublicKey: key,
      });
      now += 61_000;
      await refusedImportIn(
        timed,
        client,
        { organizationId: organization.organizationId, timestampMs: String(now), secrets: [{ ...sealed, encryptionSuite: SUITE }] },
        "IMPORT_TARGET_EXPIRED",
        [sealed.targetPublicKey],
        "expired",
      );
    } finally {
      await timed.close();
    }
  });
});

describe("the plaintext stays secret", () => {
  it("is in no log line, table, activity record or response but the export bundle, nor in the database files", async () => {
    const { org, root } = await organizationWith(h, []);
    const plaintext = `sk_live_${crypto.randomBytes(24).toString("hex")}`;
    const [target] = await initTargets(root, org.organizationId, 1);
    const sealed = await sealedFor(target!, org.organizationId, plaintext);
    const imported = await root.importSecrets({ secrets: [{ ...sealed, name: "exchange", encryptionSuite: SUITE }] });
    const secretId = imported.secretIds[0]!;
    const responses: unknown[] = [imported];
    responses.push(await root.listSecrets({}));
    responses.push(await root.getActivity({ activityId: imported.activity.id }));
    responses.push(await root.getActivities({}));
    expect(await exportSecrets(root, org.organizationId, [secretId])).toEqual([plaintext]);

    // Neither the plaintext nor the payload it travelled in is kept: the intent holds "<redacted>".
    const { activity } = await root.getActivity({ activityId: imported.activity.id });
    expect((activity.intent as any).importSecretsIntent.secrets[0]).toMatchObject({ secretPayload: "<redacted>", name: "exchange" });
    const ciphertext = JSON.parse(sealed.secretPayload).ciphertext;
    const everything = await h.snapshot();
    for (const needle of [plaintext, ciphertext]) {
      expect(everything).not.toContain(needle);
      expect(h.logLines.join("\n")).not.toContain(needle);
      expect(JSON.stringify(responses)).not.toContain(needle);
    }
    // Sealed under the master key, bound to the secret's organization and id.
    const row = await h.server.store.db.selectFrom("secrets").selectAll().where("id", "=", secretId).executeTakeFirstOrThrow();
    const keyring = loadKeyring(h.config.masterKey).keyring;
    expect(keyring.open(row.sealed_secret, secretIdentity(row)).toString()).toBe(plaintext);
    expect(() => keyring.open(row.sealed_secret, secretIdentity({ ...row, id: "another" }))).toThrow(/does not open/);
    if (backend === "sqlite") {
      await sql`pragma wal_checkpoint(TRUNCATE)`.execute(h.server.store.db);
      for (const file of fs.readdirSync(h.config.dataDir).filter((f) => f.startsWith("sigil.db"))) {
        expect(fs.readFileSync(path.join(h.config.dataDir, file)).toString("latin1").includes(plaintext), file).toBe(false);
      }
    }
  });

  it("the master key rotation re-seals stored secrets with every other sealed column", async () => {
    // Every column of the schema holding a sealed value is one the rotation walks.
    const tables = await h.server.store.db.introspection.getTables();
    const sealedColumns = tables.flatMap((t) => t.columns.filter((c) => c.name.startsWith("sealed_")).map((c) => `${t.name}.${c.name}`));
    expect(sealedColumns.sort()).toEqual(SECRET_COLUMNS.map((c) => `${c.table}.${c.column}`).sort());

    const { org, root } = await organizationWith(h, []);
    const [secretId] = await importSecrets(root, org.organizationId, [{ plaintext: "rotate me" }]);
    const db = h.server.store.db;
    const from = loadKeyring(h.config.masterKey).keyring;
    const to = new Keyring(crypto.randomBytes(32));
    const report = await resealAll(db, from, to);
    expect(report.resealed).toBeGreaterThan(0);
    const row = await db.selectFrom("secrets").selectAll().where("id", "=", secretId!).executeTakeFirstOrThrow();
    expect(Keyring.keyIdOf(row.sealed_secret)).toBe(to.currentKeyId);
    expect(to.open(row.sealed_secret, secretIdentity(row)).toString()).toBe("rotate me");
    // Back under the server's key, so the rest of the suite's server opens what it stored.
    await resealAll(db, to, from);
  });
});
