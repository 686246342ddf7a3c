// The plans of what an app with many end users sends, on a parent holding SUB_ORGANIZATIONS
// sub-organizations (bench/sub-organizations.ts fills them straight into the store, each a copy of a
// real sign-up): a sign-up, an end user's signature, whoami and get_wallets in its own
// sub-organization, the parent paging through its sub-organizations and finding one by email, and an
// OTP login. Each statement they send is read from the store's tally and explained: on PostgreSQL its
// generic plan (the one a prepared statement settles on) after ANALYZE, on SQLite EXPLAIN QUERY PLAN
// (SQLite keeps no statistics: the plan depends on the indexes alone). None may read a table of
// sub-organization size whole, nor sort or hash the parent's sub-organizations: that would cost time in
// proportion to the number of end users (docs/benchmarks.md#a-million-end-users).
import { sql } from "kysely";
import { ApiKeyStamper, SignatureFormat } from "@turnkey/api-key-stamper";
import { encryptOtpCodeToBundle, generateP256KeyPair } from "@turnkey/crypto";
import { getClientSignatureMessageForLogin } from "@turnkey/core/dist/utils.js";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { newKeyPair, signerPublicKeyOf, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";
import { startSmtp, until, type TestSmtp } from "./helpers/smtp.js";
import { nodesOf, postgresPlanOf, sqlitePlanOf, statementsOf, type PostgresPlanNode } from "./helpers/query-plans.js";
import { loadKeyring } from "../src/crypto/master-key.js";
import {
  fillerEmail,
  insertSubOrganizations,
  readSignUpTemplate,
  SUB_ORGANIZATION_TABLES,
  signUpParameters,
} from "../bench/sub-organizations.js";

/** Enough that PostgreSQL's planner prefers an index to reading a table whole wherever one serves. */
const SUB_ORGANIZATIONS = 20_000;
/** A table or a set of rows at least this large is of sub-organization size. */
const LARGE = 1_000;

let h: Harness;
let smtp: TestSmtp;
let parent: TestOrganization;
let parentSdk: ReturnType<Harness["sdk"]>;
let endUser: {
  subOrganizationId: string;
  userId: string;
  email: string;
  publicKey: string;
  signWith: string;
  sdk: ReturnType<Harness["sdk"]>;
};
let signerPublicKey: string;

let signUps = 0;
/** An app's sign-up: a root user with an email and an API key, a wallet with one Ethereum account. */
const signUp = (email: string, publicKey: string) =>
  parentSdk.createSubOrganization(signUpParameters(`sign-up ${signUps++}`, email, publicKey));

beforeAll(async () => {
  smtp = await startSmtp();
  h = await startHarness({ SIGIL_SMTP_URL: smtp.url, SIGIL_EMAIL_ALLOWED_DOMAINS: "example.com", SIGIL_MESSAGE_POLL_MS: "50" });
  parent = await h.organization("App backend");
  parentSdk = h.sdk(parent, parent.key, fastPoller);
  await parentSdk.setOrganizationFeature({ name: "FEATURE_NAME_OTP_EMAIL_AUTH", value: "" });
  signerPublicKey = await signerPublicKeyOf(h.url);
  const key = newKeyPair();
  const email = "template.user@example.com";
  const made = await signUp(email, key.publicKey);
  const db = h.server.store.db;
  const { keyring } = loadKeyring(h.config.masterKey);
  await insertSubOrganizations(
    db,
    keyring,
    await readSignUpTemplate(db, keyring, parent.organizationId, made.subOrganizationId),
    SUB_ORGANIZATIONS,
    0,
  );
  // What autovacuum does on PostgreSQL after a bulk load: statistics the planner reads.
  if (h.server.store.dialect === "postgres") await sql`analyze`.execute(db);
  endUser = {
    subOrganizationId: made.subOrganizationId,
    userId: made.rootUserIds![0]!,
    email,
    publicKey: key.publicKey,
    signWith: made.wallet!.addresses[0]!,
    sdk: h.sdk({ organizationId: made.subOrganizationId }, key, fastPoller),
  };
}, 600_000);
afterAll(async () => {
  await h?.close();
  await smtp?.close();
});

/** An identity token naming an issuer, a subject and an audience: list_suborgs reads them unverified. */
const UNSIGNED_OIDC_TOKEN = [
  { alg: "none", typ: "JWT" },
  { iss: "https://accounts.example.com", sub: "end-user-1", aud: "app" },
]
  .map((part) => Buffer.from(JSON.stringify(part)).toString("base64url"))
  .concat("")
  .join(".");

let n = 0;
/** init_otp to the end user's email, the code read from the mail, verify_otp, otp_login. */
async function otpLogin() {
  const before = smtp.mails.length;
  const sessionKey = generateP256KeyPair();
  const { otpId, otpEncryptionTargetBundle } = await parentSdk.initOtp({
    otpType: "OTP_TYPE_EMAIL",
    contact: endUser.email,
    appName: "Demo",
  });
  const mail = await until(() => smtp.mails.slice(before).find((m) => m.to === endUser.email), "the code's email");
  const code = /verification code is ([0-9A-Z]{6,9})/.exec(mail.raw.replace(/=\r?\n/g, ""))![1]!;
  const encryptedOtpBundle = await encryptOtpCodeToBundle(code, otpEncryptionTargetBundle, sessionKey.publicKey, signerPublicKey);
  const { verificationToken } = await parentSdk.verifyOtp({ otpId, encryptedOtpBundle });
  const { message, publicKey } = getClientSignatureMessageForLogin({ verificationToken });
  const signature = await new ApiKeyStamper({ apiPublicKey: sessionKey.publicKey, apiPrivateKey: sessionKey.privateKey }).sign(
    message,
    SignatureFormat.Raw,
  );
  await parentSdk.otpLogin({
    organizationId: endUser.subOrganizationId,
    verificationToken,
    publicKey: sessionKey.publicKey,
    clientSignature: { message, publicKey, scheme: "CLIENT_SIGNATURE_SCHEME_API_P256", signature },
  });
}

/** The operations measured at a million end users (bench/load.ts, scenario million), by name. */
const OPERATIONS: Record<string, () => Promise<unknown>> = {
  create_sub_organization: () => signUp(`new.user.${n++}@example.com`, newKeyPair().publicKey),
  sign_raw_payload: () =>
    endUser.sdk.signRawPayload({
      signWith: endUser.signWith,
      payload: Buffer.from(`plans ${n++}`).toString("hex"),
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    }),
  whoami: () => endUser.sdk.getWhoami({}),
  get_wallets: () => endUser.sdk.getWallets({}),
  list_suborgs_first_page: () => parentSdk.getSubOrgIds({ paginationOptions: { limit: "10" } }),
  list_suborgs_next_page: async () => {
    const first = await parentSdk.getSubOrgIds({ paginationOptions: { limit: "10" } });
    return parentSdk.getSubOrgIds({ paginationOptions: { limit: "10", after: first.organizationIds.at(-1)! } });
  },
  list_suborgs_by_email: () => parentSdk.getSubOrgIds({ filterType: "EMAIL", filterValue: fillerEmail(SUB_ORGANIZATIONS / 2) }),
  // The lookups of an app's logins: by the end user's API key (a wallet login), its address, a phone
  // number, a passkey's credential id and an OAuth identity (none of the last three held by anyone).
  list_suborgs_by_public_key: () => parentSdk.getSubOrgIds({ filterType: "PUBLIC_KEY", filterValue: endUser.publicKey }),
  list_suborgs_by_address: () => parentSdk.getSubOrgIds({ filterType: "WALLET_ACCOUNT_ADDRESS", filterValue: endUser.signWith }),
  list_suborgs_by_phone_number: () => parentSdk.getSubOrgIds({ filterType: "PHONE_NUMBER", filterValue: "+15550001234" }),
  list_verified_suborgs_by_phone_number: () => parentSdk.getVerifiedSubOrgIds({ filterType: "PHONE_NUMBER", filterValue: "+15550001234" }),
  list_suborgs_by_credential_id: () => parentSdk.getSubOrgIds({ filterType: "CREDENTIAL_ID", filterValue: "Y3JlZGVudGlhbA" }),
  list_suborgs_by_oidc_token: () => parentSdk.getSubOrgIds({ filterType: "OIDC_TOKEN", filterValue: UNSIGNED_OIDC_TOKEN }),
  otp_login: otpLogin,
};

/** What is wrong with a PostgreSQL plan: a large table read whole, a large set sorted or hashed, or a
 * large set walked other than in index order up to a LIMIT. A function's rows (the rate limits' charge)
 * are estimated at PostgreSQL's default of 1,000, and a LIMIT's at a tenth of its input: neither is read. */
function postgresProblems(plan: PostgresPlanNode, large: Set<string>): string[] {
  const problems: string[] = [];
  for (const [node, above] of nodesOf(plan)) {
    const type = node["Node Type"];
    const what = `${type}${node["Relation Name"] ? ` on ${node["Relation Name"]}` : ""}${node["Index Name"] ? ` using ${node["Index Name"]}` : ""} (${node["Plan Rows"]} rows)`;
    if (type === "Seq Scan" && large.has(node["Relation Name"]!)) problems.push(`reads a large table whole: ${what}`);
    else if (node["Plan Rows"] >= LARGE && type !== "Function Scan" && type !== "Limit") {
      const limited = above.some((a) => a["Node Type"] === "Limit");
      if (/Sort|Hash|Aggregate|Materialize/.test(type)) problems.push(`sorts or hashes a large set: ${what}`);
      else if (!limited) problems.push(`reads a large set with no LIMIT: ${what}`);
      else if (above.some((a) => /Sort|Hash|Aggregate/.test(a["Node Type"]))) problems.push(`sorts a large set for its LIMIT: ${what}`);
      // Walking an index in order up to the LIMIT reads a page, unless a condition skips rows on the
      // way: a deleted sub-organization (kept, marked, as its audit log's owner) is the one it may skip,
      // and, from a cursor's time on (the index condition), the rows of that same millisecond.
      else if (node.Filter && node.Filter !== "(deleted_at IS NULL)" && !/created_at [<>]= /.test(String(node["Index Cond"] ?? "")))
        problems.push(`walks a large set to filter it: ${what}, filter ${node.Filter}`);
    }
  }
  return problems;
}

/** The tables that grow with the number of sub-organizations: what a sign-up writes. */
const GROWING: readonly string[] = [...SUB_ORGANIZATION_TABLES, "activities", "policy_evaluations"];

/** What is wrong with a SQLite plan: a growing table read whole, or the parent's sub-organizations
 * walked (by organizations_by_parent) other than alone in index order — a page up to its LIMIT — so
 * with a sort or another table searched for each. */
function sqliteProblems(text: string, steps: string[]): string[] {
  const tables = new Map(GROWING.map((t) => [t, t]));
  for (const [, table, alias] of text.matchAll(/"(\w+)" as "(\w+)"/g)) tables.set(alias!, table!);
  const problems: string[] = [];
  const reads = steps.filter((step) => /^(SEARCH|SCAN) /.test(step));
  for (const step of reads) {
    const scanned = /^SCAN (\w+)/.exec(step)?.[1];
    if (scanned && GROWING.includes(tables.get(scanned) ?? "")) problems.push(`reads a growing table whole: ${step}`);
  }
  const byParent = steps.find((step) => step.includes("organizations_by_parent"));
  if (byParent && (reads.length > 1 || steps.some((s) => s.includes("TEMP B-TREE"))))
    problems.push(`walks the parent's sub-organizations: ${steps.join("; ")}`);
  // A page after a cursor starts the walk at the cursor, not at the parent's first sub-organization.
  if (byParent && /"created_at" [<>]/.test(text) && !/created_at[<>]/.test(byParent))
    problems.push(`walks the parent's sub-organizations up to the cursor: ${byParent}`);
  return problems;
}

describe(`the plans of an app's requests with ${SUB_ORGANIZATIONS.toLocaleString("en")} end users`, () => {
  it("the filled sub-organizations are real ones: found by email, listed by the parent", async () => {
    const found = await parentSdk.getSubOrgIds({ filterType: "EMAIL", filterValue: fillerEmail(123) });
    expect(found.organizationIds).toHaveLength(1);
    const count = await h.server.store.db
      .selectFrom("organizations")
      .select((eb) => eb.fn.countAll<number>().as("n"))
      .where("parent_organization_id", "=", parent.organizationId)
      .executeTakeFirstOrThrow();
    expect(Number(count.n)).toBeGreaterThanOrEqual(SUB_ORGANIZATIONS + 1);
    const wallets = await parentSdk.getWallets({ organizationId: found.organizationIds[0]! });
    expect(wallets.wallets).toHaveLength(1);
    // The end user is found by its API key and by its address, and nobody by a value nobody holds.
    for (const filter of [
      { filterType: "PUBLIC_KEY", filterValue: endUser.publicKey },
      { filterType: "WALLET_ACCOUNT_ADDRESS", filterValue: endUser.signWith },
    ])
      expect((await parentSdk.getSubOrgIds(filter)).organizationIds, filter.filterType).toEqual([endUser.subOrganizationId]);
    expect((await parentSdk.getSubOrgIds({ filterType: "PHONE_NUMBER", filterValue: "+15550001234" })).organizationIds).toEqual([]);
  });

  for (const [name, request] of Object.entries(OPERATIONS))
    it(`${name}: no statement reads a large table whole or sorts the parent's sub-organizations`, async () => {
      const texts = await statementsOf(h, request);
      expect(texts.length).toBeGreaterThan(0);
      if (h.server.store.dialect === "postgres") {
        const { rows } = await sql<{ relname: string }>`select relname from pg_class where relkind = 'r' and reltuples >= ${LARGE}`.execute(
          h.server.store.db,
        );
        const large = new Set(rows.map((r) => r.relname));
        expect(large).toContain("organizations");
        for (const text of texts) expect(postgresProblems(await postgresPlanOf(h, text), large), text).toEqual([]);
      } else {
        for (const text of texts) expect(sqliteProblems(text, await sqlitePlanOf(h, text)), text).toEqual([]);
      }
    }, 120_000);
});
