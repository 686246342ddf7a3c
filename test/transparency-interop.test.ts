// Sigil's transparency log checked by an implementation nobody here wrote: a small Go program
// (test/interop/tlog-verify) built against the Go project's golang.org/x/mod/sumdb/note and sumdb/tlog
// from Debian's golang-golang-x-mod-dev (installed with golang-go by .ci/run), in GOPATH mode, so
// nothing is downloaded. It opens the checkpoints get_log_checkpoint signs with the key
// /.well-known/sigil.json publishes, and checks get_inclusion_proof's and get_consistency_proof's
// proofs; and it refuses them once altered.
import { execFile, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { toHex } from "viem";
import { startHarness, signedRequest, type Harness, type ApiKeyPair } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";

const run = promisify(execFile);
const GOPATH = "/usr/share/gocode";
let verifierBinary: string;
let buildDir: string;
let h: Harness;

beforeAll(async () => {
  buildDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-tlog-go-"));
  verifierBinary = path.join(buildDir, "tlog-verify");
  // GOPATH mode against Debian's packaged sources: no module proxy, no network.
  await run("go", ["build", "-o", verifierBinary, path.resolve("test/interop/tlog-verify/main.go")], {
    env: { ...process.env, GO111MODULE: "off", GOPATH, GOFLAGS: "", GOCACHE: path.join(buildDir, "cache"), GOPROXY: "off" },
  });
  h = await startHarness();
}, 180_000);
afterAll(async () => {
  await h?.close();
  fs.rmSync(buildDir, { recursive: true, force: true });
});

interface Verdict {
  ok: boolean;
  error?: string;
  origin?: string;
  size?: number;
}

/** The Go program run on `input`: its exit code and output. */
async function goRun(input: unknown): Promise<{ code: unknown; stdout: string; stderr: string }> {
  const child = spawn(verifierBinary, [], { stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d) => (stdout += d));
  child.stderr.on("data", (d) => (stderr += d));
  child.stdin.end(JSON.stringify(input));
  const code = await new Promise((resolve) => child.on("exit", resolve));
  return { code, stdout, stderr };
}

/** What the Go program says of the checkpoints and proofs given. */
async function goVerify(input: unknown): Promise<{ checkpoints: Verdict[]; inclusions: Verdict[]; consistencies: Verdict[] }> {
  const { code, stdout, stderr } = await goRun(input);
  expect(code, stderr).toBe(0);
  return JSON.parse(stdout);
}

async function query(name: string, body: unknown, key: ApiKeyPair) {
  const request = signedRequest(body, key);
  const res = await fetch(`${h.url}/sigil/v1/query/${name}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...request.headers },
    body: request.body,
  });
  expect(res.status).toBe(200);
  return (await res.json()) as any;
}

describe("Go's sumdb/note and sumdb/tlog", () => {
  it("open Sigil's checkpoints with the published key and accept its inclusion and consistency proofs, and refuse altered ones", async () => {
    const { org, root } = await organizationWith(h, ["alice"]);
    const wallet = await root.createWallet({
      walletName: "w",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    });
    // Checkpoints are of the log as the server's sequencer left it (it appends after the commits).
    await h.server.logSequencer.flush();
    const old = await query("get_log_checkpoint", { organizationId: org.organizationId }, org.key);
    for (let i = 0; i < 9; i++)
      await root.signRawPayload({
        signWith: wallet.addresses[0]!,
        payload: toHex(`interop ${i}`).slice(2),
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_KECCAK256",
      });
    await h.server.logSequencer.flush();
    const latest = await query("get_log_checkpoint", { organizationId: org.organizationId }, org.key);
    const { transparencyLogVerifierKey } = (await (await fetch(`${h.url}/.well-known/sigil.json`)).json()) as any;
    expect(latest.verifierKey).toBe(transparencyLogVerifierKey);
    expect([old.checkpoint.treeSize, latest.checkpoint.treeSize]).toEqual([2, 11]);

    const activities = await h.server.store.db
      .selectFrom("transparency_log_leaves")
      .select(["leaf_index", "activity_id"])
      .where("organization_id", "=", org.organizationId)
      .orderBy("leaf_index")
      .execute();
    const inclusions = [];
    for (const { activity_id } of activities) {
      const proof = await query(
        "get_inclusion_proof",
        { organizationId: org.organizationId, activityId: activity_id, treeSize: latest.checkpoint.treeSize },
        org.key,
      );
      inclusions.push({ checkpoint: 1, index: proof.leafIndex, entry: proof.entry, proof: proof.proof });
    }
    // The first entries are in the old checkpoint too.
    for (const { activity_id } of activities.slice(0, 2)) {
      const proof = await query(
        "get_inclusion_proof",
        { organizationId: org.organizationId, activityId: activity_id, treeSize: 2 },
        org.key,
      );
      inclusions.push({ checkpoint: 0, index: proof.leafIndex, entry: proof.entry, proof: proof.proof });
    }
    const consistency = await query(
      "get_consistency_proof",
      { organizationId: org.organizationId, fromSize: 2, toSize: latest.checkpoint.treeSize },
      org.key,
    );
    const checkpoints = [old.checkpoint.note, latest.checkpoint.note];
    const good = await goVerify({
      verifierKey: transparencyLogVerifierKey,
      checkpoints,
      inclusions,
      consistencies: [{ from: 0, to: 1, proof: consistency.proof }],
    });
    expect(good.checkpoints).toEqual([
      { ok: true, origin: old.checkpoint.origin, size: 2 },
      { ok: true, origin: latest.checkpoint.origin, size: 11 },
    ]);
    expect(good.inclusions).toEqual(inclusions.map(() => ({ ok: true })));
    expect(good.consistencies).toEqual([{ ok: true }]);

    // Altered: a checkpoint's root (its signature no longer holds), an entry, a proof's hash, and
    // checkpoints given in the wrong order (the "old" one is not a prefix of the "new").
    const forgedRoot = latest.checkpoint.note.replace(latest.checkpoint.rootHash, old.checkpoint.rootHash);
    const alteredEntry = inclusions[3]!.entry.replace('"status":"ACTIVITY_STATUS_COMPLETED"', '"status":"ACTIVITY_STATUS_FAILED"');
    expect(alteredEntry).not.toBe(inclusions[3]!.entry);
    const flipped = (hash: string) => Buffer.from(Buffer.from(hash, "base64").map((b) => b ^ 1)).toString("base64");
    const bad = await goVerify({
      verifierKey: transparencyLogVerifierKey,
      checkpoints: [...checkpoints, forgedRoot],
      inclusions: [
        { ...inclusions[3]!, entry: alteredEntry },
        { ...inclusions[4]!, proof: [flipped(inclusions[4]!.proof[0]), ...inclusions[4]!.proof.slice(1)] },
        { ...inclusions[5]!, index: inclusions[5]!.index + 1 },
      ],
      consistencies: [
        { from: 0, to: 1, proof: [flipped(consistency.proof[0]), ...consistency.proof.slice(1)] },
        { from: 1, to: 0, proof: consistency.proof },
      ],
    });
    expect(bad.checkpoints[2]).toMatchObject({ ok: false, error: expect.stringContaining("invalid signature") });
    expect(bad.inclusions.map((v) => v.ok)).toEqual([false, false, false]);
    expect(bad.consistencies.map((v) => v.ok)).toEqual([false, false]);

    // Another deployment's key (same name and id, another key) opens none of them. The key's own
    // base64 may hold "+" (or end with one), so the parts are cut at the first two only.
    const [keyName, keyId] = transparencyLogVerifierKey.split("+");
    const otherKey = `${keyName}+${keyId}+${Buffer.concat([Buffer.of(1), Buffer.alloc(32, 7)]).toString("base64")}`;
    expect(otherKey).not.toBe(transparencyLogVerifierKey);
    const other = await goRun({ verifierKey: otherKey, checkpoints });
    // The key's id no longer matches the key: Go refuses the key itself.
    expect(other.code).toBe(2);
    expect(other.stderr).toContain("verifier key");
  });
});
