// Transactions with chain id 0. `TurnkeySigner.signTransaction({ to, value, type: 2 })` from
// @turnkey/ethers, without a provider to fill the chain id (as the product's with-ethers example calls
// it), sends an EIP-1559 transaction whose chain id is 0, which RLP writes as the empty string. The
// typed transaction EIPs (2930, 1559, 4844, 7702) make chain_id a plain integer, ethers signs such a
// transaction, and so does the product's example: Sigil signs it too, for every transaction type, and
// policies see eth.tx.chain_id = 0. A legacy transaction with chain id 0 is serialized by ethers
// without one (before EIP-155) and signed so. No node accepts chain id 0; a policy can refuse it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeySigner } from "@turnkey/ethers";
import { Transaction, type TransactionRequest } from "ethers";
import { fromRlp, toRlp, type Hex } from "viem";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness } from "./helpers/harness.js";
import { ethereumAccountOrganization, type Member } from "./helpers/organizations.js";

let h: Harness;
let organizationId: string;
let root: ReturnType<Harness["sdk"]>;
let alice: Member;
let address: string;

const TO = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";

beforeAll(async () => {
  h = await startHarness();
  const made = await ethereumAccountOrganization(h, "no chain");
  ({ root, alice, address } = made);
  organizationId = made.org.organizationId;
});
afterAll(() => h?.close());

/** Every transaction type, as an application hands it to TurnkeySigner without a chain id. */
const requests: [string, TransactionRequest][] = [
  ["legacy", { to: TO, value: 1n, type: 0 }],
  ["EIP-2930", { to: TO, value: 1n, type: 1 }],
  ["EIP-1559", { to: TO, value: 1n, type: 2 }],
  ["EIP-4844", { to: TO, value: 1n, type: 3, blobVersionedHashes: [`0x01${"00".repeat(31)}`], maxFeePerBlobGas: 1n }],
  ["EIP-7702", { to: TO, value: 1n, type: 4, authorizationList: [] }],
];

describe("@turnkey/ethers' TurnkeySigner without a provider: chain id 0", () => {
  it("signs { to, value, type: 2 } exactly as the issue's user does; the signature recovers to the account", async () => {
    const signer = new TurnkeySigner({ client: root as any, organizationId, signWith: address });
    const signed = await signer.signTransaction({ to: TO, value: 10n ** 15n, type: 2 });
    const read = Transaction.from(signed);
    expect(read.from).toBe(address);
    expect(read.chainId).toBe(0n);
    expect(read.type).toBe(2);
    // The signature covers the very bytes sent: chain id 0 as RLP's empty string.
    expect(read.unsignedSerialized).toBe(Transaction.from({ to: TO, value: 10n ** 15n, type: 2 }).unsignedSerialized);
    // 0x02, a one-byte list header, then the chain id: 0x80, RLP's empty string.
    expect(read.unsignedSerialized).toMatch(/^0x02[c-f][0-9a-f]80/);
  });

  it("every transaction type, under a policy that reads eth.tx.chain_id; chain id 1 is not what it allows", async () => {
    await root.createPolicy({
      policyName: "alice signs for chain id 0 only",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.any(u, u.id == '${alice.userId}')`,
      condition: "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN' && eth.tx.chain_id == 0",
      notes: "",
    });
    const signer = new TurnkeySigner({ client: alice.client as any, organizationId, signWith: address });
    for (const [kind, request] of requests) {
      const signed = await signer.signTransaction(request);
      const read = Transaction.from(signed);
      expect(read.from, kind).toBe(address);
      expect(read.chainId, kind).toBe(0n);
      expect(read.type, kind).toBe(request.type);
      expect(read.unsignedSerialized, kind).toBe(Transaction.from(request as never).unsignedSerialized);
      // Legacy: ethers serializes chain id 0 as no chain id, so the signature is pre-EIP-155 (v 27 or 28).
      if (kind === "legacy") expect([27, 28]).toContain(read.signature!.v);
    }
    for (const [kind, request] of requests) {
      const { failure } = await refusedLeavingOnlyItsActivity(h, () => signer.signTransaction({ ...request, chainId: 1n }), {
        message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
      });
      expect(failure, kind).toMatchObject({ code: 7 });
    }
  });

  it("an EIP-4844 transaction in its network wrapper (blobs, commitments, proofs) with chain id 0: the transaction alone is signed", async () => {
    const request = requests.find(([kind]) => kind === "EIP-4844")![1];
    const unsigned = Transaction.from(request as never);
    const fields = fromRlp(`0x${unsigned.unsignedSerialized.slice(4)}`, "hex");
    const zeros = (bytes: number) => `0x${"00".repeat(bytes)}` as Hex;
    const wrapper = toRlp([fields as Hex[], [zeros(131_072)], [zeros(48)], [zeros(48)]]);
    const { signedTransaction } = await root.signTransaction({
      signWith: address,
      unsignedTransaction: `03${wrapper.slice(2)}`,
      type: "TRANSACTION_TYPE_ETHEREUM",
    });
    const read = Transaction.from(`0x${signedTransaction}`);
    expect(read.from).toBe(address);
    expect(read.chainId).toBe(0n);
    expect(read.unsignedSerialized).toBe(unsigned.unsignedSerialized);
  });
});
