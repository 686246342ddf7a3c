// `sigil policy test` (docs/policy-testing.md): the example shipped in docs/policy-tests runs here, as
// the built CLI runs it in CI, and every kind of unusable file is refused naming its line and column.
// The cases are decided offline, so this file needs no server: the backend it runs on plays no part.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { runPolicyTests } from "../src/cli/policy-testing.js";
import { PolicyFileError, SourceFile, readPolicies } from "../src/cli/policy-files.js";

const run = promisify(execFile);
const CLI = path.resolve("bin/sigil.js");
const EXAMPLE = "docs/policy-tests/cases.json";
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-policy-cases-"));
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Writes a file into this test's directory and returns its path. */
function write(name: string, content: unknown): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, typeof content === "string" ? content : JSON.stringify(content, null, 2));
  return file;
}

async function sigil(args: string[]) {
  return run(process.execPath, [CLI, ...args], { timeout: 60_000 }).then(
    ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
    (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
  );
}

async function refusal(casesFile: string, policiesFile?: string): Promise<string> {
  const error = await runPolicyTests(casesFile, policiesFile).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(PolicyFileError);
  return (error as Error).message;
}

const TAG = { type: "ACTIVITY_TYPE_CREATE_USER_TAG", parameters: { userTagName: "t", userIds: [] } };
const allowTags = [{ policyName: "tags", effect: "EFFECT_ALLOW", condition: "activity.resource == 'USER'" }];

describe("the example in docs/policy-tests", () => {
  it("passes, every case decided as it says, by the policy it names", async () => {
    const results = await runPolicyTests(EXAMPLE);
    expect(results.map((r) => [r.name, r.passed, r.got])).toEqual([
      ["finance pays payroll half an ether", true, "ALLOW"],
      ["two ether from one approver is denied", true, "DENY"],
      ["two ether approved by bob too is allowed", true, "ALLOW"],
      ["a payment elsewhere is allowed by no policy", true, "DENY"],
      ["mallory's payroll payment waits for finance", true, "NEEDS_CONSENSUS"],
      ["a new user needs a second security approver", true, "NEEDS_CONSENSUS"],
      ["the root user needs no policy", true, "ALLOW"],
      ["only the root quorum changes the root quorum", true, "DENY"],
    ]);
    // eth.tx and wallet were built from the request and the file's wallet, as a submit builds them.
    const paid = results[0]!.explanation!.policyEvaluations;
    expect(paid[0]).toMatchObject({ policyName: "payments to the payroll address", outcome: "OUTCOME_ALLOW", part: "effect" });
    expect(paid[1]).toMatchObject({ policyName: "large payments need two approvers", outcome: "OUTCOME_DENY_IMPLICIT", part: "condition" });
  });

  it("the built CLI prints the table and exits 0; a failing case makes it exit 1 with what failed", async () => {
    write("wallets-only.json", [{ policyName: "wallets only", effect: "EFFECT_ALLOW", condition: "activity.resource == 'WALLET'" }]);
    const failing = write("failing.json", {
      policies: "wallets-only.json",
      users: [{ name: "alice", tags: ["finance"] }],
      cases: [
        { name: "tags are allowed", user: "alice", request: TAG, expect: "ALLOW" },
        { name: "names a policy", user: "alice", request: TAG, expect: "DENY", expectPolicies: ["wallets only"] },
      ],
    });
    const [passing, failed] = await Promise.all([sigil(["policy", "test", EXAMPLE]), sigil(["policy", "test", failing])]);
    expect(passing.code).toBe(0);
    expect(passing.stdout).toMatch(/^RESULT +CASE +EXPECTED +GOT +DECIDED BY\n/);
    expect(passing.stdout).toMatch(
      /\nPASS +finance pays payroll half an ether +ALLOW +ALLOW +payments to the payroll address \(effect\)\n/,
    );
    expect(passing.stdout).toContain("\n8 passed, 0 failed\n");
    expect(failed.code).toBe(1);
    expect(failed.stdout).toMatch(/\nFAIL +tags are allowed +ALLOW +DENY +no policy allows it\n/);
    expect(failed.stdout).toContain("FAIL tags are allowed\n  expected ALLOW, got DENY: no policy allows it\n");
    expect(failed.stdout).toContain('FAIL names a policy\n  expected the deciding policies to be "wallets only", got none\n');
    expect(failed.stdout).toContain("\n0 passed, 2 failed\n");
  });
});

describe("cases decided against --policies", () => {
  it("a request refused before any policy fails its case with the refusal: unknown type, parameters its schema refuses", async () => {
    const policies = write("allow-tags.json", allowTags);
    const cases = write("refused.json", {
      users: [{ name: "alice" }],
      cases: [
        { name: "coffee", user: "alice", request: { type: "ACTIVITY_TYPE_MAKE_COFFEE", parameters: {} }, expect: "ALLOW" },
        {
          name: "no name",
          user: "alice",
          request: { type: "ACTIVITY_TYPE_CREATE_USER_TAG", parameters: { userIds: [] } },
          expect: "ALLOW",
        },
        { name: "allowed", user: { name: "bob", tags: ["x"] }, request: TAG, expect: "ALLOW", expectPolicies: ["tags"] },
      ],
    });
    const results = await runPolicyTests(cases, policies);
    expect(results.map((r) => [r.name, r.passed])).toEqual([
      ["coffee", false],
      ["no name", false],
      ["allowed", true],
    ]);
    expect(results[0]!.problems).toEqual([
      "the request is refused before any policy: unknown activity type ACTIVITY_TYPE_MAKE_COFFEE: name an activity type a submit endpoint accepts",
    ]);
    expect(results[1]!.problems[0]).toMatch(/^the request is refused before any policy: invalid request: .*userTagName/);
  });

  it("a time-bound policy is judged at the case's time", async () => {
    const policies = write("office-hours.json", {
      policies: [
        {
          policyName: "2026 only",
          effect: "EFFECT_ALLOW",
          condition: "activity.resource == 'USER'",
          time: "time.now < Timestamp('2027-01-01T00:00:00Z')",
        },
      ],
    });
    const cases = write("times.json", {
      users: [{ name: "alice" }],
      cases: [
        { name: "in 2026", user: "alice", at: "2026-06-01T00:00:00Z", request: TAG, expect: "ALLOW" },
        { name: "in 2027", user: "alice", at: "2027-06-01T00:00:00Z", request: TAG, expect: "DENY" },
      ],
    });
    const results = await runPolicyTests(cases, policies);
    expect(results.map((r) => r.passed)).toEqual([true, true]);
    expect(results[1]!.explanation!.policyEvaluations[0]).toMatchObject({ outcome: "OUTCOME_TIME_INACTIVE", part: "time" });
  });
});

describe("an unusable file is refused naming its line and column, deciding nothing", () => {
  it("a cases file that is not JSON", async () => {
    const cases = write("broken.json", '{\n  "cases": [\n    { "name": "a", }\n  ]\n}\n');
    expect(await refusal(cases)).toBe(`${cases}:3:20: not valid JSON: a property name (in double quotes) was expected`);
    expect(await refusal(path.join(dir, "absent.json"))).toBe(`${path.join(dir, "absent.json")}: cannot read it (no such file)`);
  });

  it("a case naming a user nobody defined, an unknown outcome, an unknown field, a bad time, no cases", async () => {
    const policies = write("p.json", allowTags);
    const base = { users: [{ name: "alice" }] };
    const one = (c: object) => write("case.json", { ...base, cases: [c] });
    const good = { name: "c", user: "alice", request: TAG, expect: "ALLOW" };
    expect(await refusal(one({ ...good, user: "nobody" }), policies)).toMatch(/case\.json:\d+:\d+: case "c": no user "nobody" is defined/);
    expect(await refusal(one({ ...good, expect: "MAYBE" }), policies)).toMatch(
      /case\.json:\d+:\d+: case "c": "expect" must be one of ALLOW, DENY, NEEDS_CONSENSUS, NEEDS_ROOT_QUORUM, not "MAYBE"/,
    );
    expect(await refusal(one({ ...good, expected: "ALLOW" }), policies)).toMatch(/case\.json:\d+:\d+: case 1 has no field "expected"/);
    expect(await refusal(one({ ...good, at: "tomorrow" }), policies)).toMatch(/"at" must be an RFC 3339 time/);
    expect(await refusal(write("none.json", { ...base, cases: [] }), policies)).toMatch(/none\.json:\d+:\d+: "cases" lists no case/);
    expect(await refusal(write("nopolicies.json", { ...base, cases: [good] }))).toMatch(/no policies to test: give --policies/);
    // The line is the very line of the mistake.
    const text = JSON.stringify({ ...base, cases: [{ ...good, user: "nobody" }] }, null, 2);
    const line = text.split("\n").findIndex((l) => l.includes('"nobody"')) + 1;
    expect(await refusal(write("lined.json", text), policies)).toContain(`lined.json:${line}:`);
  });

  it("a policy that does not compile: the line and column of the character that does not", async () => {
    const cases = write("ok.json", { users: [{ name: "alice" }], cases: [{ name: "c", user: "alice", request: TAG, expect: "ALLOW" }] });
    const policies = write(
      "bad-policy.json",
      [
        "{",
        '  "policies": [',
        '    { "policyName": "fine", "effect": "EFFECT_ALLOW", "condition": "true" },',
        '    { "policyName": "typo", "effect": "EFFECT_ALLOW",',
        "      \"condition\": \"activity.type == 'caf\\u00e9\\t' && activity.typ == 'y'\" }",
        "  ]",
        "}",
      ].join("\n"),
    );
    const message = await refusal(cases, policies);
    // Line 5, at `typ` however many characters the escapes before it take in the file (\u00e9 is one
    // character of the expression, six of the file).
    expect(message).toMatch(new RegExp(`^${policies.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:5:\\d+: policy "typo", condition: `));
    const column = Number(/:5:(\d+):/.exec(message)![1]);
    const written = fs.readFileSync(policies, "utf8").split("\n")[4]!;
    expect(written.slice(column - 1)).toBe(`typ == 'y'" }`);
    expect(await refusal(cases, write("bad-effect.json", [{ policyName: "p", effect: "EFFECT_MAYBE" }]))).toMatch(
      /bad-effect\.json:\d+:\d+: policy "p": effect must be EFFECT_ALLOW or EFFECT_DENY, not "EFFECT_MAYBE"/,
    );
    expect(await refusal(cases, write("twice.json", [allowTags[0], allowTags[0]]))).toMatch(
      /policy "tags": another policy .* has the same name/,
    );
  });

  it("the built CLI exits 2 on an unusable file and names it on stderr", async () => {
    const broken = write("cli-broken.json", "{ nope");
    const outcome = await sigil(["policy", "test", broken]);
    expect(outcome.code).toBe(2);
    expect(outcome.stdout).toBe("");
    expect(outcome.stderr).toMatch(new RegExp(`^sigil policy test: ${broken.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:1:3: not valid JSON`));
  });

  it("readPolicies reads what create_policy takes, and a bare list", () => {
    const file = SourceFile.parse("inline.json", JSON.stringify(allowTags));
    expect(readPolicies(file)).toEqual([
      { id: "tags", name: "tags", effect: "EFFECT_ALLOW", condition: "activity.resource == 'USER'", consensus: null, time: null },
    ]);
  });
});
