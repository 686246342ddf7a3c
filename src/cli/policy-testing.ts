// `sigil policy test CASES_FILE [--policies POLICIES_FILE]` (docs/policy-testing.md): policies as code,
// for CI. Each case is a would-be request, its acting user and expected outcome; it is decided offline
// — no server, no database of the deployment's — by the submit's own code (activities/
// policy-evaluation.ts). The organization a case is decided in is made up from the file: its users
// and their tags, its root quorum, its wallets. It lives in a SQLite database in a temporary
// directory for the length of the run, so the policy context (wallet, eth.tx, …) is read exactly as
// a submit reads it, and is removed afterwards.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import type { Node } from "jsonc-parser";
import { openStore, type Store } from "../store/database.js";
import { ServiceError } from "../errors.js";
import { address as addressOf, type AddressFormat } from "../crypto/addresses.js";
import type { Curve } from "../crypto/hd.js";
import { voteOf } from "../activities/pipeline.js";
import { actingAs, explainDecision, readWouldBe, wouldBeSubject, type Explanation, type Verdict } from "../activities/policy-evaluation.js";
import type { ServedChains } from "../registry/validation.js";
import type { ReplayReport } from "../activities/policy-replay.js";
import {
  PolicyFileError,
  SourceFile,
  expectKind,
  onlyKeys,
  property,
  readPolicies,
  stringOf,
  jsonValueOf,
  type ProposedPolicy,
} from "./policy-files.js";

const ORGANIZATION = "policy-test-organization";
const VERDICTS: readonly Verdict[] = ["ALLOW", "DENY", "NEEDS_CONSENSUS", "NEEDS_ROOT_QUORUM"];

interface TestUser {
  name: string;
  tags: string[];
  root: boolean;
  email: string | null;
}

interface TestAccount {
  address: string;
  curve: string;
  addressFormat: string;
  publicKey: string;
  path: string;
}

interface TestWallet {
  id: string;
  name: string;
  accounts: TestAccount[];
}

interface TestCase {
  name: string;
  user: string;
  approvers: string[];
  at?: number;
  request: { type: string; parameters: unknown };
  expect: Verdict;
  expectPolicies?: string[];
  node: Node;
}

interface CasesFile {
  users: Map<string, TestUser>;
  threshold: number;
  wallets: TestWallet[];
  cases: TestCase[];
  /** The policies the file names (a path next to it, or a list), when --policies does not. */
  policies?: ProposedPolicy[];
}

export interface CaseResult {
  name: string;
  passed: boolean;
  expected: Verdict;
  got?: Verdict;
  decidedBy: string;
  /** Why it failed, besides the outcome (a request refused, policies other than those expected). */
  problems: string[];
  explanation?: Explanation;
}

const stringList = (file: SourceFile, parent: Node, key: string, what: string): string[] => {
  const node = property(parent, key);
  if (!node) return [];
  expectKind(file, node, "array", `${what}: "${key}"`, parent);
  return (node.children ?? []).map((item) => {
    if (item.type !== "string") throw file.fail(item, `${what}: every entry of "${key}" must be a string`);
    return item.value as string;
  });
};

function readUser(file: SourceFile, node: Node, what: string): TestUser {
  expectKind(file, node, "object", what, node);
  onlyKeys(file, node, ["name", "tags", "root", "email"], what);
  const root = property(node, "root");
  if (root && root.type !== "boolean") throw file.fail(root, `${what}: "root" must be true or false`);
  return {
    name: stringOf(file, node, "name", what, true)!,
    tags: stringList(file, node, "tags", what),
    root: root?.value === true,
    email: stringOf(file, node, "email", what) ?? null,
  };
}

function readWallet(file: SourceFile, node: Node, index: number): TestWallet {
  const what = `wallet ${index + 1}`;
  expectKind(file, node, "object", what, node);
  onlyKeys(file, node, ["id", "name", "accounts"], what);
  const name = stringOf(file, node, "name", what, true)!;
  const id = stringOf(file, node, "id", what) ?? name;
  const accounts = expectKind(file, property(node, "accounts"), "array", `${what}: "accounts"`, node);
  return {
    id,
    name,
    accounts: (accounts.children ?? []).map((account, i) => {
      const named = `${what}, account ${i + 1}`;
      expectKind(file, account, "object", named, accounts);
      onlyKeys(file, account, ["address", "curve", "addressFormat", "publicKey", "path"], named);
      const curve = stringOf(file, account, "curve", named, true)!;
      const addressFormat = stringOf(file, account, "addressFormat", named, true)!;
      const publicKey = stringOf(file, account, "publicKey", named, true)!;
      let address = stringOf(file, account, "address", named);
      if (address === undefined) {
        try {
          address = addressOf(curve as Curve, addressFormat as AddressFormat, Buffer.from(publicKey, "hex"));
        } catch (error) {
          throw file.fail(account, `${named}: no address can be made of its publicKey (${(error as Error).message}); give "address"`);
        }
      }
      return { address, curve, addressFormat, publicKey, path: stringOf(file, account, "path", named) ?? "" };
    }),
  };
}

/** Reads and checks the cases file whole before anything is decided: a mistake names its line. */
export function readCasesFile(file: SourceFile): CasesFile {
  const root = file.root;
  if (root.type !== "object") throw file.fail(root, 'a cases file is an object with a "cases" list');
  onlyKeys(file, root, ["policies", "users", "rootQuorum", "wallets", "cases"], "the cases file");
  const users = new Map<string, TestUser>();
  const define = (user: TestUser, node: Node) => {
    const known = users.get(user.name);
    if (known && JSON.stringify(known) !== JSON.stringify(user)) throw file.fail(node, `user "${user.name}" is defined twice, differently`);
    users.set(user.name, user);
  };
  const usersNode = property(root, "users");
  if (usersNode) {
    expectKind(file, usersNode, "array", '"users"', root);
    (usersNode.children ?? []).forEach((node, i) => define(readUser(file, node, `user ${i + 1}`), node));
  }
  let threshold = 1;
  const quorum = property(root, "rootQuorum");
  if (quorum) {
    expectKind(file, quorum, "object", '"rootQuorum"', root);
    onlyKeys(file, quorum, ["threshold"], '"rootQuorum"');
    const t = property(quorum, "threshold");
    if (t?.type !== "number" || !Number.isInteger(t.value) || t.value < 1)
      throw file.fail(t ?? quorum, '"rootQuorum": "threshold" must be a whole number of at least 1');
    threshold = t.value as number;
  }
  const walletsNode = property(root, "wallets");
  const wallets = walletsNode
    ? (expectKind(file, walletsNode, "array", '"wallets"', root).children ?? []).map((node, i) => readWallet(file, node, i))
    : [];
  const casesNode = expectKind(file, property(root, "cases"), "array", '"cases"', root);
  if ((casesNode.children ?? []).length === 0) throw file.fail(casesNode, '"cases" lists no case');
  const names = new Set<string>();
  const cases = (casesNode.children ?? []).map((node, i): TestCase => {
    const what = `case ${i + 1}`;
    expectKind(file, node, "object", what, casesNode);
    onlyKeys(file, node, ["name", "user", "approvers", "at", "request", "expect", "expectPolicies"], what);
    const name = stringOf(file, node, "name", what, true)!;
    const named = `case "${name}"`;
    if (names.has(name)) throw file.fail(node, `${named}: another case has the same name`);
    names.add(name);
    const userNode = property(node, "user");
    if (!userNode) throw file.fail(node, `${named}: "user" (the acting user: a name from "users", or {"name", "tags", "root"}) is missing`);
    let user: string;
    if (userNode.type === "string") user = userNode.value as string;
    else {
      const inline = readUser(file, userNode, `${named}: "user"`);
      define(inline, userNode);
      user = inline.name;
    }
    const approvers = stringList(file, node, "approvers", named);
    for (const [who, at] of [[user, userNode] as const, ...approvers.map((a) => [a, property(node, "approvers")!] as const)])
      if (!users.has(who)) throw file.fail(at, `${named}: no user "${who}" is defined (define it in "users")`);
    const atText = stringOf(file, node, "at", named);
    const atMs = atText !== undefined ? Date.parse(atText) : undefined;
    if (atText !== undefined && (!/^\d{4}-\d\d-\d\dT/.test(atText) || Number.isNaN(atMs)))
      throw file.fail(property(node, "at")!, `${named}: "at" must be an RFC 3339 time such as 2026-01-31T12:00:00Z, not "${atText}"`);
    const request = expectKind(file, property(node, "request"), "object", `${named}: "request"`, node);
    onlyKeys(file, request, ["type", "parameters"], `${named}: "request"`);
    const type = stringOf(file, request, "type", `${named}: "request"`, true)!;
    const parameters = expectKind(file, property(request, "parameters"), "object", `${named}: "request": "parameters"`, request);
    const expected = stringOf(file, node, "expect", named, true)!;
    if (!VERDICTS.includes(expected as Verdict))
      throw file.fail(property(node, "expect")!, `${named}: "expect" must be one of ${VERDICTS.join(", ")}, not "${expected}"`);
    const expectPolicies = property(node, "expectPolicies") ? stringList(file, node, "expectPolicies", named) : undefined;
    return {
      name,
      user,
      approvers,
      ...(atMs !== undefined ? { at: atMs } : {}),
      request: { type, parameters: jsonValueOf(parameters) },
      expect: expected as Verdict,
      ...(expectPolicies ? { expectPolicies } : {}),
      node,
    };
  });
  const result: CasesFile = { users, threshold, wallets, cases };
  const policies = property(root, "policies");
  if (policies) {
    if (policies.type === "string") {
      const named = path.resolve(path.dirname(file.name), policies.value as string);
      result.policies = readPolicies(SourceFile.read(path.relative(process.cwd(), named) || named));
    } else result.policies = readPolicies(file, policies);
  }
  return result;
}

/** The organization the cases are decided in, written into the temporary database. */
async function seed(store: Store, cases: CasesFile, now: number): Promise<void> {
  await store.transact("exclusive", async (trx) => {
    await trx
      .insertInto("organizations")
      .values({
        id: ORGANIZATION,
        name: "policy test",
        parent_organization_id: null,
        root_quorum_threshold: cases.threshold,
        created_at: now,
        updated_at: now,
      })
      .execute();
    const users = [...cases.users.values()];
    const tags = [...new Set(users.flatMap((u) => u.tags))];
    if (users.length)
      await trx
        .insertInto("users")
        .values(
          users.map((u) => ({
            id: u.name,
            organization_id: ORGANIZATION,
            name: u.name,
            email: u.email,
            phone_number: null,
            created_at: now,
            updated_at: now,
          })),
        )
        .execute();
    if (tags.length)
      await trx
        .insertInto("tags")
        .values(
          tags.map((t) => ({ id: t, organization_id: ORGANIZATION, name: t, tag_type: "TAG_TYPE_USER", created_at: now, updated_at: now })),
        )
        .execute();
    const members = users.flatMap((u) => u.tags.map((t) => ({ tag_id: t, user_id: u.name })));
    if (members.length) await trx.insertInto("user_tag_members").values(members).execute();
    const roots = users.filter((u) => u.root).map((u) => ({ organization_id: ORGANIZATION, user_id: u.name }));
    if (roots.length) await trx.insertInto("root_quorum_members").values(roots).execute();
    for (const wallet of cases.wallets) {
      await trx
        .insertInto("wallets")
        .values({
          id: wallet.id,
          organization_id: ORGANIZATION,
          name: wallet.name,
          // A made-up wallet: nothing is ever signed with it, so it holds no secret.
          sealed_mnemonic: "",
          mnemonic_language: "MNEMONIC_LANGUAGE_ENGLISH",
          imported: 0,
          exported: 0,
          created_at: now,
          updated_at: now,
        })
        .execute();
      if (wallet.accounts.length)
        await trx
          .insertInto("wallet_accounts")
          .values(
            wallet.accounts.map((a, i) => ({
              id: `${wallet.id}/${i}`,
              organization_id: ORGANIZATION,
              wallet_id: wallet.id,
              curve: a.curve,
              path_format: "PATH_FORMAT_BIP32",
              path: a.path,
              address_format: a.addressFormat,
              address: a.address,
              public_key: a.publicKey,
              sealed_private_key: "",
              name: null,
              created_at: now,
              updated_at: now,
            })),
          )
          .execute();
    }
  });
}

/** Offline, only the chains the API lists are served: no operator configured any other. */
const apiChainsOnly: ServedChains = {
  configures: () => false,
  notConfigured: (caip2) => new ServiceError("InvalidArgument", "REQUEST_INVALID", `chain ${caip2} is not one the API lists`),
};

function decidedByText(explanation: Explanation): string {
  const deciding = explanation.policyEvaluations.filter((p) => p.deciding);
  if (deciding.length) return deciding.map((p) => `${p.policyName ?? p.policyId} (${p.part})`).join(", ");
  return (
    {
      ROOT_QUORUM: "root quorum",
      ROOT_ONLY: "root quorum only",
      SESSION_SCOPE: "session scope",
      OWN_CREDENTIALS: "own credentials",
      BUDGET: "step budget",
      NO_POLICY: "no policy allows it",
      POLICIES: "policies",
    } as const
  )[explanation.decidedBy];
}

/** Decides every case; the cases file and the policies are read and checked first (PolicyFileError). */
export async function runPolicyTests(casesPath: string, policiesPath?: string): Promise<CaseResult[]> {
  const casesFile = SourceFile.read(casesPath);
  const cases = readCasesFile(casesFile);
  const policies = policiesPath !== undefined ? readPolicies(SourceFile.read(policiesPath)) : cases.policies;
  if (!policies)
    throw new PolicyFileError(`${casesPath}: no policies to test: give --policies POLICIES_FILE, or "policies" in the cases file`);
  const names = new Map(policies.map((p) => [p.id, p.name]));
  const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-policy-test-"));
  const now = Date.now();
  const store = await openStore({ databaseUrl: null, dataDir, mode: "create" });
  try {
    await seed(store, cases, now);
    const results: CaseResult[] = [];
    for (const c of cases.cases) {
      const at = c.at ?? now;
      const user = cases.users.get(c.user)!;
      const base: Omit<CaseResult, "passed" | "decidedBy"> = { name: c.name, expected: c.expect, problems: [] };
      let wouldBe;
      try {
        wouldBe = readWouldBe({ organizationId: ORGANIZATION, ...c.request }, apiChainsOnly);
      } catch (error) {
        if (!(error instanceof ServiceError)) throw error;
        results.push({ ...base, passed: false, decidedBy: "-", problems: [`the request is refused before any policy: ${error.message}`] });
        continue;
      }
      const principal = actingAs(ORGANIZATION, { id: user.name, name: user.name, email: user.email });
      const subject = wouldBeSubject(ORGANIZATION, wouldBe, principal, at);
      const approvals = c.approvers.map((name) =>
        voteOf(actingAs(ORGANIZATION, { id: name, name, email: null }), "dry-run", "VOTE_SELECTION_APPROVED", "", at),
      );
      const judged = {
        ...subject,
        votes: [...subject.votes, ...approvals],
        confirmed: [...(subject.confirmed ?? []), ...approvals.map((v) => v.credentialId)],
      };
      const explanation = await store.readSnapshot((trx) => explainDecision(trx, judged, policies, names));
      const problems: string[] = [];
      if (explanation.verdict !== c.expect) problems.push(`expected ${c.expect}, got ${explanation.verdict}: ${explanation.reason}`);
      if (c.expectPolicies) {
        const deciding = explanation.policyEvaluations.filter((p) => p.deciding).map((p) => p.policyName ?? p.policyId);
        if (JSON.stringify([...deciding].sort()) !== JSON.stringify([...c.expectPolicies].sort()))
          problems.push(
            `expected the deciding policies to be ${c.expectPolicies.map((p) => `"${p}"`).join(", ") || "none"}, got ${deciding.map((p) => `"${p}"`).join(", ") || "none"}`,
          );
      }
      if (problems.length)
        for (const p of explanation.policyEvaluations.filter((v) => v.outcome === "OUTCOME_ERROR"))
          problems.push(`policy "${p.policyName ?? p.policyId}" failed to evaluate (${p.part}): ${p.error}`);
      results.push({
        ...base,
        passed: problems.length === 0,
        got: explanation.verdict,
        decidedBy: decidedByText(explanation),
        problems,
        explanation,
      });
    }
    return results;
  } finally {
    await store.close();
    fs.rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The table `sigil policy test` prints: one line per case, then what each failure was, then the count. */
export function renderResults(results: CaseResult[]): string {
  const rows = [["RESULT", "CASE", "EXPECTED", "GOT", "DECIDED BY"]];
  for (const r of results) rows.push([r.passed ? "PASS" : "FAIL", r.name, r.expected, r.got ?? "-", r.decidedBy]);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => Array.from(row[i]!).length)));
  const lines = rows.map((row) =>
    row
      .map((cell, i) => (i === row.length - 1 ? cell : cell + " ".repeat(widths[i]! - Array.from(cell).length)))
      .join("  ")
      .trimEnd(),
  );
  const failed = results.filter((r) => !r.passed);
  if (failed.length) {
    lines.push("");
    for (const r of failed) {
      lines.push(`FAIL ${r.name}`);
      for (const p of r.problems) lines.push(`  ${p}`);
    }
  }
  lines.push("", `${results.length - failed.length} passed, ${failed.length} failed`);
  return lines.join("\n");
}

/** What `sigil policy replay` prints: every changed activity, newest first, then the summary. */
export function renderReplay(report: ReplayReport): string {
  const rows = [["ACTIVITY", "RECORDED", "TYPE", "NOW", "PROPOSED", "DECIDED BY"]];
  for (const a of report.changed)
    rows.push([a.activityId, new Date(a.createdAt).toISOString(), a.type, a.current, a.proposed, a.decidedBy]);
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((row) => Array.from(row[i]!).length)));
  const lines: string[] = [];
  if (report.changed.length) {
    rows.forEach((row, r) => {
      lines.push(
        row
          .map((cell, i) => (i === row.length - 1 ? cell : cell + " ".repeat(widths[i]! - Array.from(cell).length)))
          .join("  ")
          .trimEnd(),
      );
      for (const missing of r > 0 ? (report.changed[r - 1]!.unavailable ?? []) : []) lines.push(`  not rebuilt: ${missing}`);
    });
    lines.push("");
  }
  for (const n of report.notReplayed) lines.push(`not replayed: ${n.activityId} (${n.type}): ${n.why}`);
  if (report.notReplayed.length) lines.push("");
  const s = report.summary;
  lines.push(
    `${report.activities} activities of organization ${report.organizationId} read, ${report.replayed} replayed: ` +
      `${report.changed.length} would change (${s.ALLOWED_TO_DENIED} allowed → denied, ${s.DENIED_TO_ALLOWED} denied → allowed, ` +
      `${s.NOW_NEEDS_CONSENSUS} now need consensus, ${s.NOW_NEEDS_ROOT_QUORUM} now need the root quorum, ` +
      `${s.NO_LONGER_WAITS} no longer wait for approvals), ${s.unchanged} unchanged`,
  );
  if (s.withUnavailableContext)
    lines.push(`${s.withUnavailableContext} of the changes rest on something that could not be rebuilt (see "not rebuilt")`);
  if (s.decidedOtherwiseToday)
    lines.push(`${s.decidedOtherwiseToday} activities would be decided otherwise today than when submitted, even on the current policies`);
  return lines.join("\n");
}
