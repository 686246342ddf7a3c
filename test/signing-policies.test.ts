// Signing under policies, driven the way users drive it: a NON-root user (the root quorum bypasses
// policies) signs with its own API key through @turnkey/sdk-server, @turnkey/viem and
// @turnkey/solana, while a root user writes the policies that allow or deny it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAccount } from "@turnkey/viem";
import { TurnkeySigner as SolanaSigner } from "@turnkey/solana";
import { createWalletClient, http as viemHttp, keccak256, parseEther, recoverAddress, recoverTransactionAddress, toHex, verifyTypedData, type Hex } from "viem";
import { mainnet } from "viem/chains";
import { Keypair, PublicKey, SystemProgram, Transaction, TransactionInstruction } from "@solana/web3.js";
import { ETHER_MAIL as MAIL, organizationWith, type Member } from "./helpers/organizations.js";
import { startHarness, type Harness } from "./helpers/harness.js";


type Client = ReturnType<Harness["sdk"]>;


let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());


/** A wallet (made by the root user) with one Ethereum and one Solana account. */
async function walletOf(root: Client, walletName: string) {
  const wallet = await root.createWallet({
    walletName,
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      { curve: "CURVE_ED25519", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/501'/0'/0'", addressFormat: "ADDRESS_FORMAT_SOLANA" },
    ],
  });
  const [ethAddress, solAddress] = wallet.addresses as [string, string];
  return { walletId: wallet.walletId, ethAddress: ethAddress as Hex, solAddress };
}

/** An allow policy whose consensus is the one user (its own request is its approval). */
async function allowFor(root: Client, member: Member, condition: string) {
  const { policyId } = await root.createPolicy({ policyName: `allow: ${condition}`, effect: "EFFECT_ALLOW", consensus: `approvers.any(u, u.id == '${member.userId}')`, condition, notes: "" });
  return policyId;
}

async function denyAll(root: Client, condition: string) {
  const { policyId } = await root.createPolicy({ policyName: `deny: ${condition}`, effect: "EFFECT_DENY", condition, notes: "" });
  return policyId;
}

const SIGN = "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'";

/**
 * Expects a policy denial (with the outcome in the message) and proves it stored nothing but the one
 * failed activity (and its evaluation): every other table is as it was. The failed activity's stored
 * failure is PermissionDenied (gRPC 7, HTTP 403), which holds even where a chain client (viem) wraps
 * the error. Returns the failed activity's id.
 */
async function expectDenied(attempt: () => Promise<unknown>, outcome: "OUTCOME_DENY_IMPLICIT" | "OUTCOME_DENY_EXPLICIT"): Promise<string> {
  const before = JSON.parse(await h.snapshot());
  await expect(attempt()).rejects.toMatchObject({ message: expect.stringContaining(outcome) });
  const after = JSON.parse(await h.snapshot());
  for (const table of Object.keys(before)) {
    if (table !== "activities" && table !== "policy_evaluations") expect(after[table], table).toEqual(before[table]);
  }
  const added = after.activities.filter((row: string) => !before.activities.includes(row)).map((row: string) => JSON.parse(row));
  expect(added).toHaveLength(1);
  expect(added[0]).toMatchObject({ status: "ACTIVITY_STATUS_FAILED" });
  expect(JSON.parse(added[0].failure)).toMatchObject({ code: 7, message: expect.stringContaining(outcome), details: [expect.objectContaining({ turnkeyErrorCode: "POLICY_DENIED" })] });
  return added[0].id;
}

/** The per-policy outcomes of an activity's (first) evaluation. */
async function verdicts(root: Client, activityId: string) {
  const { policyEvaluations } = await root.getPolicyEvaluations({ activityId });
  return policyEvaluations[0]!.policyEvaluations;
}

/** A KECCAK256 raw-payload signature, checked against the address it should recover to. */
async function signsAs(client: Client, signWith: string, address: string) {
  const payload = Buffer.from(`signed by ${signWith}`).toString("hex");
  const signature = await client.signRawPayload({ signWith, payload, encoding: "PAYLOAD_ENCODING_HEXADECIMAL", hashFunction: "HASH_FUNCTION_KECCAK256" });
  expect(signature.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  const recovered = await recoverAddress({ hash: keccak256(`0x${payload}`), signature: { r: `0x${signature.r}`, s: `0x${signature.s}`, yParity: Number(signature.v) } as any });
  expect(recovered).toBe(address);
}

const keccakPayload = (signWith: string) => ({ signWith, payload: "abcd", encoding: "PAYLOAD_ENCODING_HEXADECIMAL" as const, hashFunction: "HASH_FUNCTION_KECCAK256" as const });

describe("wallet keyword", () => {
  it("a non-root user is implicitly denied signing; an allow on wallet.id lets it sign with that wallet only", async () => {
    const { root, members } = await organizationWith(h, ["signer"]);
    const signer = members.signer!;
    const mine = await walletOf(root, "mine");
    const other = await walletOf(root, "other");

    await expectDenied(() => signer.client.signRawPayload(keccakPayload(mine.ethAddress)), "OUTCOME_DENY_IMPLICIT");

    const policyId = await allowFor(root, signer, `${SIGN} && wallet.id == '${mine.walletId}'`);
    await signsAs(signer.client, mine.ethAddress, mine.ethAddress);

    const deniedId = await expectDenied(() => signer.client.signRawPayload(keccakPayload(other.ethAddress)), "OUTCOME_DENY_IMPLICIT");
    // The official client sees the denial as PermissionDenied (HTTP 403).
    await expect(signer.client.signRawPayload(keccakPayload(other.ethAddress))).rejects.toMatchObject({ code: 7 });
    expect(await verdicts(root, deniedId)).toEqual([{ policyId, outcome: "OUTCOME_DENY_IMPLICIT" }]);
  });
});

describe("eth.tx through @turnkey/viem", () => {
  const RECIPIENT = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as Hex;
  const tx = (overrides: { to?: Hex; value?: bigint }) => ({
    type: "eip1559" as const,
    to: RECIPIENT,
    value: parseEther("0.1"),
    nonce: 0,
    gas: 21000n,
    chainId: 1,
    maxFeePerGas: 2n * 10n ** 9n,
    maxPriorityFeePerGas: 10n ** 9n,
    ...overrides,
  });

  async function ethTxSetup() {
    const { org, root, members } = await organizationWith(h, ["trader"]);
    const trader = members.trader!;
    const { ethAddress } = await walletOf(root, "hot");
    const allowId = await allowFor(root, trader, `eth.tx.to == '${RECIPIENT.toLowerCase()}' && eth.tx.value <= 1000000000000000000 && eth.tx.chain_id == 1`);
    const account = await createAccount({ client: trader.client as any, organizationId: org.organizationId, signWith: ethAddress });
    return { root, ethAddress, account, allowId };
  }

  it("an allow on to, value and chain_id lets a matching EIP-1559 transaction be signed, and nothing else", async () => {
    const { ethAddress, account } = await ethTxSetup();
    const signed = await account.signTransaction(tx({}));
    expect(await recoverTransactionAddress({ serializedTransaction: signed as any })).toBe(ethAddress);

    await expectDenied(() => account.signTransaction(tx({ to: "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC" })), "OUTCOME_DENY_IMPLICIT");
    await expectDenied(() => account.signTransaction(tx({ value: parseEther("1.5") })), "OUTCOME_DENY_IMPLICIT");
    // The limit is inclusive.
    expect(await recoverTransactionAddress({ serializedTransaction: (await account.signTransaction(tx({ value: parseEther("1") }))) as any })).toBe(ethAddress);
  });

  it("an explicit deny on value beats the allow, and the evaluation records both verdicts", async () => {
    const { root, account, allowId } = await ethTxSetup();
    const denyId = await denyAll(root, "eth.tx.value > 500000000000000000");
    const deniedId = await expectDenied(() => account.signTransaction(tx({ value: parseEther("0.6") })), "OUTCOME_DENY_EXPLICIT");
    const { policyEvaluations } = await root.getPolicyEvaluations({ activityId: deniedId });
    expect(policyEvaluations).toHaveLength(1);
    expect(policyEvaluations[0]).toMatchObject({ activityId: deniedId, outcome: "OUTCOME_DENY_EXPLICIT" });
    expect(policyEvaluations[0]!.policyEvaluations).toEqual([
      { policyId: allowId, outcome: "OUTCOME_ALLOW" },
      { policyId: denyId, outcome: "OUTCOME_DENY_EXPLICIT" },
    ]);
    // Below the deny's threshold the allow still applies.
    await expect(account.signTransaction(tx({ value: parseEther("0.5") }))).resolves.toMatch(/^0x02/);
  });
});

describe("eth.eip_712 through a viem wallet client", () => {

  it("allows typed data only for the named domain and primary type", async () => {
    const { org, root, members } = await organizationWith(h, ["dapp"]);
    const dapp = members.dapp!;
    const { ethAddress } = await walletOf(root, "typed");
    await allowFor(root, dapp, "eth.eip_712.domain.name == 'Ether Mail' && eth.eip_712.primary_type == 'Mail'");
    const account = await createAccount({ client: dapp.client as any, organizationId: org.organizationId, signWith: ethAddress });
    const walletClient = createWalletClient({ account, chain: mainnet, transport: viemHttp("http://127.0.0.1:1") });

    const signature = await walletClient.signTypedData(MAIL as any);
    expect(await verifyTypedData({ ...(MAIL as any), address: ethAddress, signature })).toBe(true);

    const phishing = { ...MAIL, domain: { ...MAIL.domain, name: "Evil Mail" } };
    await expectDenied(() => walletClient.signTypedData(phishing as any), "OUTCOME_DENY_IMPLICIT");
  });
});

describe("activity.params", () => {
  const DOCS_DENY = "activity.type == 'ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2' && activity.params.hash_function == 'HASH_FUNCTION_NO_OP' && activity.params.encoding != 'PAYLOAD_ENCODING_EIP712'";

  async function noOpDenied() {
    const { org, root, members } = await organizationWith(h, ["ops"]);
    const ops = members.ops!;
    const { ethAddress } = await walletOf(root, "raw");
    await allowFor(root, ops, SIGN);
    const denyId = await denyAll(root, DOCS_DENY);
    return { org, root, ops, ethAddress, denyId };
  }

  it("the docs' deny refuses a NO_OP hex payload but not a KECCAK256 one", async () => {
    const { root, ops, ethAddress, denyId } = await noOpDenied();
    const digest = keccak256(toHex("already hashed")).slice(2);
    const deniedId = await expectDenied(
      () => ops.client.signRawPayload({ signWith: ethAddress, payload: digest, encoding: "PAYLOAD_ENCODING_HEXADECIMAL", hashFunction: "HASH_FUNCTION_NO_OP" }),
      "OUTCOME_DENY_EXPLICIT",
    );
    expect(await verdicts(root, deniedId)).toContainEqual({ policyId: denyId, outcome: "OUTCOME_DENY_EXPLICIT" });
    await signsAs(ops.client, ethAddress, ethAddress);
  });

  it("the docs' deny lets EIP-712 typed data through (NO_OP is how clients send it)", async () => {
    const { org, ops, ethAddress } = await noOpDenied();
    const account = await createAccount({ client: ops.client as any, organizationId: org.organizationId, signWith: ethAddress });
    // Through a wallet client: it sends the EIP712Domain type, without which viem's serializer drops the domain.
    const walletClient = createWalletClient({ account, chain: mainnet, transport: viemHttp("http://127.0.0.1:1") });
    const typed = { domain: { name: "Allowed", version: "1", chainId: 1 }, types: { Note: [{ name: "text", type: "string" }] }, primaryType: "Note", message: { text: "hi" } } as const;
    const signature = await walletClient.signTypedData(typed);
    expect(await verifyTypedData({ ...typed, address: ethAddress, signature })).toBe(true);
  });

  it("the same deny does not block a non-signing activity the user is allowed: it evaluates to OUTCOME_ERROR there", async () => {
    const { root, ops, denyId } = await noOpDenied();
    await allowFor(root, ops, "activity.kind == 'CREATE_USER_TAG'");
    const done = await ops.client.createUserTag({ userTagName: "unaffected", userIds: [] });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(await verdicts(root, done.activity.id)).toContainEqual({ policyId: denyId, outcome: "OUTCOME_ERROR", error: expect.any(String) });
  });
});

describe("solana.tx through @turnkey/solana", () => {
  const blockhash = new PublicKey(Buffer.alloc(32, 9)).toBase58();
  const MEMO_PROGRAM = new PublicKey("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr");

  async function solanaSetup(condition: (recipient: string) => string) {
    const { org, root, members } = await organizationWith(h, ["payer"]);
    const payer = members.payer!;
    const { solAddress } = await walletOf(root, "sol");
    const recipient = Keypair.generate().publicKey;
    await allowFor(root, payer, condition(recipient.toBase58()));
    const signer = new SolanaSigner({ client: payer.client as any, organizationId: org.organizationId });
    const from = new PublicKey(solAddress);
    const transfer = (to: PublicKey, ...extra: TransactionInstruction[]) =>
      new Transaction({ recentBlockhash: blockhash, feePayer: from }).add(SystemProgram.transfer({ fromPubkey: from, toPubkey: to, lamports: 5000 }), ...extra);
    return { signer, solAddress, recipient, transfer };
  }

  it("transfers.all(t, t.to == recipient): a transfer to the recipient is signed, one elsewhere is denied", async () => {
    const { signer, solAddress, recipient, transfer } = await solanaSetup((to) => `solana.tx.transfers.all(t, t.to == '${to}')`);
    const signed = (await signer.signTransaction(transfer(recipient), solAddress)) as Transaction;
    expect(signed.verifySignatures()).toBe(true);

    const elsewhere = Keypair.generate().publicKey;
    await expectDenied(() => signer.signTransaction(transfer(elsewhere), solAddress), "OUTCOME_DENY_IMPLICIT");
    // Every transfer must go to the recipient: one stray transfer among allowed ones is enough to deny.
    const mixed = transfer(recipient, SystemProgram.transfer({ fromPubkey: new PublicKey(solAddress), toPubkey: elsewhere, lamports: 1 }));
    await expectDenied(() => signer.signTransaction(mixed, solAddress), "OUTCOME_DENY_IMPLICIT");
  });

  it("program_keys.all(p, p == system program): a plain transfer is signed, one calling another program is denied", async () => {
    const { signer, solAddress, recipient, transfer } = await solanaSetup(() => "solana.tx.program_keys.all(p, p == '11111111111111111111111111111111')");
    const signed = (await signer.signTransaction(transfer(recipient), solAddress)) as Transaction;
    expect(signed.verifySignatures()).toBe(true);

    const memo = new TransactionInstruction({ programId: MEMO_PROGRAM, keys: [], data: Buffer.from("hello") });
    await expectDenied(() => signer.signTransaction(transfer(recipient, memo), solAddress), "OUTCOME_DENY_IMPLICIT");
  });
});

describe("private_key keyword", () => {
  it("an allow on private_key.tags lets a tagged private key sign; an untagged one is denied", async () => {
    const { root, members } = await organizationWith(h, ["keyholder"]);
    const keyholder = members.keyholder!;
    const { privateKeyTagId } = await root.createPrivateKeyTag({ privateKeyTagName: "hot keys", privateKeyIds: [] });
    const { privateKeys } = await root.createPrivateKeys({
      privateKeys: [
        { privateKeyName: "tagged", curve: "CURVE_SECP256K1", privateKeyTags: [privateKeyTagId], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] },
        { privateKeyName: "untagged", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] },
      ],
    });
    const [tagged, untagged] = privateKeys.map((k) => ({ id: k.privateKeyId!, address: k.addresses![0]!.address! }));
    await allowFor(root, keyholder, `private_key.tags.contains('${privateKeyTagId}')`);

    await signsAs(keyholder.client, tagged!.id, tagged!.address);
    await signsAs(keyholder.client, tagged!.address, tagged!.address);
    await expectDenied(() => keyholder.client.signRawPayload(keccakPayload(untagged!.id)), "OUTCOME_DENY_IMPLICIT");
    await expectDenied(() => keyholder.client.signRawPayload(keccakPayload(untagged!.address)), "OUTCOME_DENY_IMPLICIT");
  });
});

describe("eth.tx.from with a private key", () => {
  it("is the key's Ethereum address whether @turnkey/viem names the key by address or by id", async () => {
    const { org, root, members } = await organizationWith(h, ["sender"]);
    const sender = members.sender!;
    const { privateKeys } = await root.createPrivateKeys({ privateKeys: [{ privateKeyName: "sender key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] }] });
    const privateKeyId = privateKeys[0]!.privateKeyId!;
    const address = privateKeys[0]!.addresses![0]!.address! as Hex;
    await allowFor(root, sender, `eth.tx.from == '${address.toLowerCase()}'`);
    const tx = { type: "eip1559" as const, to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as Hex, value: 1n, nonce: 0, gas: 21000n, chainId: 1, maxFeePerGas: 2n, maxPriorityFeePerGas: 1n };
    for (const signWith of [address, privateKeyId]) {
      const account = await createAccount({ client: sender.client as any, organizationId: org.organizationId, signWith });
      const signed = await account.signTransaction(tx);
      expect(await recoverTransactionAddress({ serializedTransaction: signed as any }), signWith).toBe(address);
    }
  });
});

describe("consensus on signing", () => {
  it("two tagged approvers: the signature waits (CONSENSUS_NEEDED) and comes back with the second approval", async () => {
    const { root, members } = await organizationWith(h, ["requester", "approver"]);
    const requester = members.requester!;
    const approver = members.approver!;
    const { ethAddress } = await walletOf(root, "treasury");
    const { userTagId } = await root.createUserTag({ userTagName: "signers", userIds: [requester.userId, approver.userId] });
    await root.createPolicy({ policyName: "two signers", effect: "EFFECT_ALLOW", consensus: `approvers.filter(u, u.tags.contains('${userTagId}')).count() >= 2`, condition: SIGN, notes: "" });

    const payload = Buffer.from("treasury transfer").toString("hex");
    const pending = await requester.client.signRawPayload({ signWith: ethAddress, payload, encoding: "PAYLOAD_ENCODING_HEXADECIMAL", hashFunction: "HASH_FUNCTION_KECCAK256" });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    expect(pending.r).toBeUndefined();

    const approved = await approver.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity).toMatchObject({ id: pending.activity.id, status: "ACTIVITY_STATUS_COMPLETED" });
    const { r, s, v } = (approved as any).signRawPayloadResult;
    const recovered = await recoverAddress({ hash: keccak256(`0x${payload}`), signature: { r: `0x${r}`, s: `0x${s}`, yParity: Number(v) } as any });
    expect(recovered).toBe(ethAddress);
  });
});
