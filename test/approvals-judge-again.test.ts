// What is signed is what was judged, also when an approval runs an activity later. An approval of
// eth_send_transaction builds the transaction anew from the node (fees, gas, nonce as they are then),
// so the activity is judged again, in the approval's transaction, on the transaction it will sign:
// the requester's session-profile scope, the policies, and the requester's MFA policies
// (activities/pipeline.ts, decideAgain). The node's base fee is moved between the request and its
// approval, as a busy chain moves it, on a real node (Hardhat Network).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { DEFAULT_ETHEREUM_ACCOUNTS } from "@turnkey/sdk-server";
import { parseEther, parseGwei, type Hex } from "viem";
import { newKeyPair, startHarness, type Harness } from "./helpers/harness.js";
import { fastPoller, organizationWith } from "./helpers/organizations.js";
import { startEthereumNode, type EthereumNode } from "./helpers/ethereum-node.js";
import { backend } from "./helpers/backend.js";

let node: EthereumNode;
let h: Harness;

type Sdk = ReturnType<Harness["sdk"]>;
const RECIPIENT = "0x00000000000000000000000000000000000000bb" as Hex;
const API_KEY = "AUTHENTICATION_TYPE_API_KEY" as const;
const SESSION = "AUTHENTICATION_TYPE_SESSION" as const;
const SEND = "activity.type == 'ACTIVITY_TYPE_ETH_SEND_TRANSACTION_V2'";
/** 5 gwei: what the scopes and MFA conditions below draw the line at. */
const FIVE_GWEI = parseGwei("5").toString();

beforeAll(async () => {
  node = await startEthereumNode();
  h = await startHarness({ SIGIL_CHAIN_RPC_URLS: `${node.caip2}=${node.url}`, SIGIL_CHAIN_POLL_MS: "20", SIGIL_CHAIN_TIMEOUT_MS: "5000" });
});
afterAll(async () => {
  await h?.close();
  await node?.stop();
});

/** The next block's base fee, mined: what fee estimates read (viem asks ~1.2 × base + tip). */
async function baseFee(gwei: string) {
  await node.test.setNextBlockBaseFeePerGas({ baseFeePerGas: parseGwei(gwei) });
  await node.test.mine({ blocks: 1 });
}

async function fundedAccount(client: Sdk, name: string): Promise<Hex> {
  const { addresses } = await client.createWallet({ walletName: name, accounts: DEFAULT_ETHEREUM_ACCOUNTS });
  const address = addresses[0] as Hex;
  await node.fund(address, parseEther("10"));
  return address;
}

const send = (client: Sdk, organizationId: string, from: Hex) =>
  client.ethSendTransaction({ organizationId, from, caip2: node.caip2 as "eip155:11155111", calls: [{ to: RECIPIENT, value: "1" }] });

/** A session key of `userId`'s, issued by `login` (the user's own client) with the profile. */
async function sessionClient(organizationId: string, login: Sdk, sessionProfileId: string) {
  const key = newKeyPair();
  await login.stampLogin({ publicKey: key.publicKey, sessionProfileId });
  return h.sdk({ organizationId }, key, fastPoller);
}

/** Nothing was handed to the node for this address: its pending nonce and the sends Sigil keeps. */
async function nothingSent(organizationId: string, from: Hex, nonceBefore: number) {
  expect(await node.client.getTransactionCount({ address: from, blockTag: "pending" })).toBe(nonceBefore);
  const sent = await h.server.store.db.selectFrom("sent_transactions").select("id").where("organization_id", "=", organizationId).execute();
  expect(sent).toEqual([]);
}

/** An organization whose member ann sends from a funded wallet with ben's approval. */
async function sendsWithBensApproval(walletName: string) {
  const made = await organizationWith(h, ["ann", "ben"]);
  const from = await fundedAccount(made.root, walletName);
  await made.root.createPolicy({
    policyName: "ann sends with ben's approval",
    effect: "EFFECT_ALLOW",
    condition: SEND,
    consensus: `approvers.any(user, user.id == '${made.members.ben!.userId}')`,
    notes: "",
  });
  return { ...made, from };
}

const failureOf = (activity: { failure?: unknown }) => JSON.stringify(activity.failure ?? null);

describe(`an approval judges the transaction it will sign (${backend})`, () => {
  it("the requester's session scope: a send scoped to max fees of 5 gwei, approved after the base fee rose to 100 gwei, fails SESSION_SCOPE_DENIED and sends nothing", async () => {
    const { org, root, members, from } = await sendsWithBensApproval("scoped");
    const { sessionProfileId } = await root.createSessionProfile({
      sessionProfileName: "cheap sends",
      scope: `${SEND} && eth.tx.max_fee_per_gas <= ${FIVE_GWEI}`,
    });
    const ann = await sessionClient(org.organizationId, members.ann!.client, sessionProfileId);

    // At 1 gwei the send is in scope, waits for ben, and his approval sends it.
    await baseFee("1");
    const cheap = await send(ann, org.organizationId, from);
    expect(cheap.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    const sentCheap = await members.ben!.client.approveActivity({ fingerprint: cheap.activity.fingerprint });
    expect(sentCheap.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");

    const waiting = await send(ann, org.organizationId, from);
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    await baseFee("100");
    const nonce = await node.client.getTransactionCount({ address: from, blockTag: "pending" });
    const sentBefore = await h.server.store.db
      .selectFrom("sent_transactions")
      .select("id")
      .where("organization_id", "=", org.organizationId)
      .execute();
    const approved = await members.ben!.client.approveActivity({ fingerprint: waiting.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_FAILED");
    expect(failureOf(approved.activity)).toContain("SESSION_SCOPE_DENIED");
    expect(failureOf(approved.activity)).toContain(`outside the scope of session profile ${sessionProfileId}`);
    expect(await node.client.getTransactionCount({ address: from, blockTag: "pending" })).toBe(nonce);
    const sentAfter = await h.server.store.db
      .selectFrom("sent_transactions")
      .select("id")
      .where("organization_id", "=", org.organizationId)
      .execute();
    expect(sentAfter).toEqual(sentBefore);
  });

  it("the requester's MFA policies: one whose condition only the rebuilt transaction meets (max fee > 5 gwei) makes the approved send wait for the requester's proof, then it is sent", async () => {
    const { org, root, members, from } = await sendsWithBensApproval("stepped up");
    const second = newKeyPair();
    await members.ann!.client.createApiKeys({
      userId: members.ann!.userId,
      apiKeys: [{ apiKeyName: "ann's second key", publicKey: second.publicKey, curveType: "API_KEY_CURVE_P256" }],
    });
    const { mfaPolicyId } = await root.createMfaPolicy({
      userId: members.ann!.userId,
      mfaPolicyName: "expensive sends need a second key",
      condition: `${SEND} && eth.tx.max_fee_per_gas > ${FIVE_GWEI}`,
      requiredAuthenticationMethods: [{ any: [{ type: API_KEY }] }, { any: [{ type: API_KEY }] }],
      order: 0,
    });
    await baseFee("1");
    const waiting = await send(members.ann!.client, org.organizationId, from);
    // Cheap when requested: no MFA policy applies, only ben's approval is wanted.
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    await baseFee("100");
    const nonce = await node.client.getTransactionCount({ address: from, blockTag: "pending" });
    const approved = await members.ben!.client.approveActivity({ fingerprint: waiting.activity.fingerprint });
    expect(approved.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    await nothingSent(org.organizationId, from, nonce);
    const { mfaStatuses } = await root.getMfaStatus({ activityId: waiting.activity.id });
    expect(mfaStatuses).toEqual([expect.objectContaining({ mfaPolicyId, satisfied: false })]);

    // ann's second key proves the missing step: the send is decided once more, and goes.
    const proven = await h.sdk(org, second, fastPoller).approveActivity({ fingerprint: waiting.activity.fingerprint });
    expect(proven.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    const result = proven.activity.result as { ethSendTransactionResultV2?: { sendTransactionStatusId: string } };
    const { sendTransactionStatusId } = result.ethSendTransactionResultV2!;
    let status = await root.getSendTransactionStatus({ sendTransactionStatusId });
    while (status.txStatus !== "INCLUDED" && status.txStatus !== "FAILED") {
      await new Promise((resolve) => setTimeout(resolve, 20));
      status = await root.getSendTransactionStatus({ sendTransactionStatusId });
    }
    expect(status.txStatus).toBe("INCLUDED");
    const signed = await node.client.getTransaction({ hash: status.eth!.txHash as Hex });
    expect(signed.maxFeePerGas! > BigInt(FIVE_GWEI)).toBe(true);
  });

  it("the requester's session scope when their own MFA proof completes the send: the base fee rose meanwhile, so it fails SESSION_SCOPE_DENIED and sends nothing", async () => {
    const { org, root, members } = await organizationWith(h, ["ann"]);
    const from = await fundedAccount(root, "proof");
    await root.createPolicy({ policyName: "ann sends", effect: "EFFECT_ALLOW", condition: SEND, notes: "" });
    const { sessionProfileId } = await root.createSessionProfile({
      sessionProfileName: "cheap sends",
      scope: `${SEND} && eth.tx.max_fee_per_gas <= ${FIVE_GWEI}`,
    });
    await root.createMfaPolicy({
      userId: members.ann!.userId,
      mfaPolicyName: "sends need the session and a key",
      condition: SEND,
      requiredAuthenticationMethods: [{ any: [{ type: SESSION, id: sessionProfileId }] }, { any: [{ type: API_KEY }] }],
      order: 0,
    });
    const ann = await sessionClient(org.organizationId, members.ann!.client, sessionProfileId);
    await baseFee("1");
    const waiting = await send(ann, org.organizationId, from);
    expect(waiting.activity.status).toBe("ACTIVITY_STATUS_AUTHENTICATORS_NEEDED");
    await baseFee("100");
    const nonce = await node.client.getTransactionCount({ address: from, blockTag: "pending" });
    const proven = await members.ann!.client.approveActivity({ fingerprint: waiting.activity.fingerprint });
    expect(proven.activity.status).toBe("ACTIVITY_STATUS_FAILED");
    expect(failureOf(proven.activity)).toContain("SESSION_SCOPE_DENIED");
    await nothingSent(org.organizationId, from, nonce);
  });
});
