// Signing under policies, driven the way users drive it: a NON-root user (the root quorum bypasses
// policies) signs with its own API key through @turnkey/sdk-server, @turnkey/viem and
// @turnkey/solana, while a root user writes the policies that allow or deny it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAccount } from "@turnkey/viem";
import { TurnkeySigner as SolanaSigner } from "@turnkey/solana";
import {
  createWalletClient,
  http as viemHttp,
  keccak256,
  parseEther,
  recoverAddress,
  recoverTransactionAddress,
  toHex,
  verifyTypedData,
  type Hex,
} from "viem";
import { mainnet } from "viem/chains";
import { Keypair, PublicKey, SystemProgram, Transaction, TransactionInstruction } from "@solana/web3.js";
import { ETHER_MAIL as MAIL, organizationWith, type Member } from "./helpers/organizations.js";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness } from "./helpers/harness.js";

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
  const { policyId } = await root.createPolicy({
    policyName: `allow: ${condition}`,
    effect: "EFFECT_ALLOW",
    consensus: `approvers.any(u, u.id == '${member.userId}')`,
    condition,
    notes: "",
  });
  return policyId;
}

async function denyAll(root: Client, condition: string) {
  const { policyId } = await root.createPolicy({ policyName: `deny: ${condition}`, effect: "EFFECT_DENY", condition, notes: "" });
  return policyId;
}

const SIGN = "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'";

/**
 * Expects a policy denial (with the outcome in the message) that changed nothing else. The failed
 * activity's stored failure is PermissionDenied (gRPC 7, HTTP 403), which holds even where a chain
 * client (viem) wraps the error. Returns the failed activity's id.
 */
async function expectDenied(attempt: () => Promise<unknown>, outcome: "OUTCOME_DENY_IMPLICIT" | "OUTCOME_DENY_EXPLICIT"): Promise<string> {
  const { id, failure } = await refusedLeavingOnlyItsActivity(h, attempt, { message: expect.stringContaining(outcome) });
  expect(failure).toMatchObject({
    code: 7,
    message: expect.stringContaining(outcome),
    details: [expect.objectContaining({ turnkeyErrorCode: "POLICY_DENIED" })],
  });
  return id;
}

/** The per-policy outcomes of an activity's (first) evaluation. */
async function verdicts(root: Client, activityId: string) {
  const { policyEvaluations } = await root.getPolicyEvaluations({ activityId });
  return policyEvaluations[0]!.policyEvaluations;
}

/** A KECCAK256 raw-payload signature, checked against the address it should recover to. */
async function signsAs(client: Client, signWith: string, address: string) {
  const payload = Buffer.from(`signed by ${signWith}`).toString("hex");
  const signature = await client.signRawPayload({
    signWith,
    payload,
    encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
    hashFunction: "HASH_FUNCTION_KECCAK256",
  });
  expect(signature.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  const recovered = await recoverAddress({
    hash: keccak256(`0x${payload}`),
    signature: { r: `0x${signature.r}`, s: `0x${signature.s}`, yParity: Number(signature.v) } as any,
  });
  expect(recovered).toBe(address);
}

const keccakPayload = (signWith: string) => ({
  signWith,
  payload: "abcd",
  encoding: "PAYLOAD_ENCODING_HEXADECIMAL" as const,
  hashFunction: "HASH_FUNCTION_KECCAK256" as const,
});

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
    const allowId = await allowFor(
      root,
      trader,
      `eth.tx.to == '${RECIPIENT.toLowerCase()}' && eth.tx.value <= 1000000000000000000 && eth.tx.chain_id == 1`,
    );
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
    expect(
      await recoverTransactionAddress({ serializedTransaction: (await account.signTransaction(tx({ value: parseEther("1") }))) as any }),
    ).toBe(ethAddress);
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
  const DOCS_DENY =
    "activity.type == 'ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2' && activity.params.hash_function == 'HASH_FUNCTION_NO_OP' && activity.params.encoding != 'PAYLOAD_ENCODING_EIP712'";

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
      () =>
        ops.client.signRawPayload({
          signWith: ethAddress,
          payload: digest,
          encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
          hashFunction: "HASH_FUNCTION_NO_OP",
        }),
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
    const typed = {
      domain: { name: "Allowed", version: "1", chainId: 1 },
      types: { Note: [{ name: "text", type: "string" }] },
      primaryType: "Note",
      message: { text: "hi" },
    } as const;
    const signature = await walletClient.signTypedData(typed);
    expect(await verifyTypedData({ ...typed, address: ethAddress, signature })).toBe(true);
  });

  it("the same deny does not block a non-signing activity the user is allowed: it evaluates to OUTCOME_ERROR there", async () => {
    const { root, ops, denyId } = await noOpDenied();
    await allowFor(root, ops, "activity.kind == 'CREATE_USER_TAG'");
    const done = await ops.client.createUserTag({ userTagName: "unaffected", userIds: [] });
    expect(done.activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
    expect(await verdicts(root, done.activity.id)).toContainEqual({
      policyId: denyId,
      outcome: "OUTCOME_ERROR",
      error: expect.any(String),
    });
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
      new Transaction({ recentBlockhash: blockhash, feePayer: from }).add(
        SystemProgram.transfer({ fromPubkey: from, toPubkey: to, lamports: 5000 }),
        ...extra,
      );
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
    const { signer, solAddress, recipient, transfer } = await solanaSetup(
      () => "solana.tx.program_keys.all(p, p == '11111111111111111111111111111111')",
    );
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
        {
          privateKeyName: "tagged",
          curve: "CURVE_SECP256K1",
          privateKeyTags: [privateKeyTagId],
          addressFormats: ["ADDRESS_FORMAT_ETHEREUM"],
        },
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
    const { privateKeys } = await root.createPrivateKeys({
      privateKeys: [
        { privateKeyName: "sender key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] },
      ],
    });
    const privateKeyId = privateKeys[0]!.privateKeyId!;
    const address = privateKeys[0]!.addresses![0]!.address! as Hex;
    await allowFor(root, sender, `eth.tx.from == '${address.toLowerCase()}'`);
    const tx = {
      type: "eip1559" as const,
      to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as Hex,
      value: 1n,
      nonce: 0,
      gas: 21000n,
      chainId: 1,
      maxFeePerGas: 2n,
      maxPriorityFeePerGas: 1n,
    };
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
    await root.createPolicy({
      policyName: "two signers",
      effect: "EFFECT_ALLOW",
      consensus: `approvers.filter(u, u.tags.contains('${userTagId}')).count() >= 2`,
      condition: SIGN,
      notes: "",
    });

    const payload = Buffer.from("treasury transfer").toString("hex");
    const pending = await requester.client.signRawPayload({
      signWith: ethAddress,
      payload,
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    });
    expect(pending.activity.status).toBe("ACTIVITY_STATUS_CONSENSUS_NEEDED");
    expect(pending.r).toBeUndefined();

    const approved = await approver.client.approveActivity({ fingerprint: pending.activity.fingerprint });
    expect(approved.activity).toMatchObject({ id: pending.activity.id, status: "ACTIVITY_STATUS_COMPLETED" });
    const { r, s, v } = (approved as any).signRawPayloadResult;
    const recovered = await recoverAddress({
      hash: keccak256(`0x${payload}`),
      signature: { r: `0x${r}`, s: `0x${s}`, yParity: Number(v) } as any,
    });
    expect(recovered).toBe(ethAddress);
  });
});

/** Expects the request to be refused as malformed (InvalidArgument, never an internal error), changing nothing else. */
async function expectInvalid(attempt: () => Promise<unknown>, message: string | RegExp): Promise<void> {
  const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, {
    code: 3,
    message: typeof message === "string" ? expect.stringContaining(message) : expect.stringMatching(message),
  });
  expect(failure).toMatchObject({ code: 3 });
}

describe("what policies see is what is signed", () => {
  // A contract the organization forbids delegating to, in every spelling a library accepts.
  const DENIED = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
  const ALLOWED = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8";
  const spellings = (address: string) => [address, address.toLowerCase(), `0x${address.slice(2).toUpperCase()}`];

  async function delegatorSetup(deny: string) {
    const { root, members } = await organizationWith(h, ["delegator"]);
    const delegator = members.delegator!;
    const { ethAddress } = await walletOf(root, "delegating");
    await allowFor(root, delegator, SIGN);
    const denyId = await denyAll(root, deny);
    const sign = (payload: unknown, encoding: "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION" | "PAYLOAD_ENCODING_EIP712") =>
      delegator.client.signRawPayload({
        signWith: ethAddress,
        payload: typeof payload === "string" ? payload : JSON.stringify(payload),
        encoding,
        hashFunction: "HASH_FUNCTION_NO_OP",
      });
    return { root, ethAddress, denyId, sign };
  }

  it("EIP-7702: a deny on the delegate address holds for every spelling of it, and unreadable addresses are refused, not signed", async () => {
    const { root, ethAddress, denyId, sign } = await delegatorSetup(`eth.eip_7702_authorization.address == '${DENIED.toLowerCase()}'`);
    const authorize = (fields: Record<string, unknown>) => sign(fields, "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION");
    for (const address of spellings(DENIED)) {
      for (const chainId of [1, "1", "0x1"]) {
        const deniedId = await expectDenied(() => authorize({ address, chainId, nonce: 0 }), "OUTCOME_DENY_EXPLICIT");
        expect(await verdicts(root, deniedId)).toContainEqual({ policyId: denyId, outcome: "OUTCOME_DENY_EXPLICIT" });
      }
      await expectDenied(() => authorize({ contractAddress: address, chainId: 1, nonce: 0 }), "OUTCOME_DENY_EXPLICIT");
    }
    // The attack: two characters other than 0x in front of the denied address were once shown to
    // policies as written and signed as the address behind them.
    for (const address of [`zz${DENIED.slice(2)}`, "zz", `0X${DENIED.slice(2)}`, DENIED.slice(2), `${DENIED}00`, ` ${DENIED}`]) {
      await expectInvalid(() => authorize({ address, chainId: 1, nonce: 0 }), "address must be an address: 0x followed by 40 hex digits");
    }
    // Mixed case that is not the EIP-55 checksum is a typo, refused as libraries refuse it.
    const letter = DENIED.search(/[A-F]/);
    const badChecksum = `${DENIED.slice(0, letter)}${DENIED[letter]!.toLowerCase()}${DENIED.slice(letter + 1)}`;
    await expectInvalid(() => authorize({ address: badChecksum, chainId: 1, nonce: 0 }), "EIP-55 checksum");
    await expectInvalid(
      () => authorize({ address: DENIED, contractAddress: ALLOWED, chainId: 1, nonce: 0 }),
      "both address and contractAddress",
    );
    await expectInvalid(
      () => authorize({ address: ALLOWED, chainId: 1, nonce: 0, yParity: 1 }),
      "fields an authorization does not sign: yParity",
    );

    // Another address signs, over the authorization for exactly that address.
    const { hashAuthorization } = await import("viem/utils");
    for (const [chainId, nonce] of [
      [1, 7],
      ["0x1", "7"],
      [0, "0x0"],
    ] as const) {
      const signature = await authorize({ address: ALLOWED.toLowerCase(), chainId, nonce });
      const hash = hashAuthorization({ contractAddress: ALLOWED, chainId: Number(chainId), nonce: Number(nonce) });
      expect(
        await recoverAddress({ hash, signature: { r: `0x${signature.r}`, s: `0x${signature.s}`, yParity: Number(signature.v) } as any }),
      ).toBe(ethAddress);
    }
  });

  it("EIP-7702: malformed numbers are refused as invalid arguments, never internal errors", async () => {
    const { sign } = await delegatorSetup("false");
    const authorize = (fields: Record<string, unknown>) =>
      sign({ address: ALLOWED, chainId: 1, nonce: 0, ...fields }, "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION");
    for (const nonce of [1.5, -1, "1e3", "-1", "01", " 1", "0xzz", "18446744073709551616", true, null, [], {}]) {
      await expectInvalid(
        () => authorize({ nonce }),
        /nonce (must be an integer|is out of range for uint64)|needs address, chainId and nonce/,
      );
    }
    for (const chainId of ["abc", 2 ** 60, "1.0", `0x1${"0".repeat(64)}`]) {
      await expectInvalid(() => authorize({ chainId }), /chainId (must be an integer|is out of range for uint256)/);
    }
    // Numbers JSON cannot hold exactly (1e400 parses to Infinity).
    await expectInvalid(
      () => sign(`{"address":"${ALLOWED}","chainId":1e400,"nonce":0}`, "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION"),
      "chainId must be an integer",
    );
    await expectInvalid(() => sign("not json", "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION"), "as JSON");
    await expectInvalid(() => sign("[1,2]", "PAYLOAD_ENCODING_EIP7702_AUTHORIZATION"), "as a JSON object");
  });

  const permit = (domain: Record<string, unknown>, message: Record<string, unknown>) => ({
    types: {
      EIP712Domain: [
        { name: "name", type: "string" },
        { name: "chainId", type: "uint256" },
        { name: "verifyingContract", type: "address" },
      ],
      Permit: [
        { name: "spender", type: "address" },
        { name: "value", type: "uint256" },
        { name: "deadline", type: "uint64" },
      ],
    },
    primaryType: "Permit",
    domain: { name: "Token", chainId: 1, verifyingContract: ALLOWED, ...domain },
    message: { spender: ALLOWED, value: 5, deadline: 1, ...message },
  });

  it("EIP-712: denies on the domain's contract and on message numbers hold for every spelling; what is signed is what was judged", async () => {
    const { ethAddress, sign } = await delegatorSetup(
      `eth.eip_712.domain.verifying_contract == '${DENIED.toLowerCase()}' || eth.eip_712.message['spender'] == '${DENIED.toLowerCase()}' || eth.eip_712.message['value'] > 1000`,
    );
    const signTyped = (typed: unknown) => sign(typed, "PAYLOAD_ENCODING_EIP712");
    for (const address of spellings(DENIED)) {
      await expectDenied(() => signTyped(permit({ verifyingContract: address }, {})), "OUTCOME_DENY_EXPLICIT");
      await expectDenied(() => signTyped(permit({}, { spender: address })), "OUTCOME_DENY_EXPLICIT");
    }
    for (const value of [1001, "1001", "0x3e9", `0x${"f".repeat(64)}`])
      await expectDenied(() => signTyped(permit({}, { value })), "OUTCOME_DENY_EXPLICIT");
    // The same typed data as hex (how @turnkey/viem sends it) is judged the same.
    await expectDenied(
      () => signTyped(Buffer.from(JSON.stringify(permit({}, { value: "0x3e9" }))).toString("hex")),
      "OUTCOME_DENY_EXPLICIT",
    );

    // Within the limits, any spelling of a number signs the canonical value.
    for (const value of [1000, "1000", "0x3e8"]) {
      const signature = await signTyped(permit({ chainId: "0x1" }, { value }));
      const typed = permit({}, { value: 1000n }) as any;
      expect(
        await verifyTypedData({
          ...typed,
          address: ethAddress,
          signature: `0x${signature.r}${signature.s}${Number(signature.v) ? "1c" : "1b"}`,
        }),
      ).toBe(true);
    }
  });

  it("EIP-712: unreadable addresses, numbers, bytes and types are refused as invalid arguments", async () => {
    const { sign } = await delegatorSetup("false");
    const signTyped = (typed: unknown) => sign(typed, "PAYLOAD_ENCODING_EIP712");
    const refused: Array<[unknown, string | RegExp]> = [
      [permit({ verifyingContract: `zz${DENIED.slice(2)}` }, {}), "domain.verifyingContract must be an address"],
      [permit({}, { spender: "zz" }), "message.spender must be an address"],
      [permit({ chainId: "abc" }, {}), "domain.chainId must be an integer"],
      [permit({ chainId: "1.5" }, {}), "domain.chainId must be an integer"],
      [permit({ chainId: -1 }, {}), "domain.chainId is out of range for uint256"],
      [permit({}, { value: "0xzz" }), "message.value must be an integer"],
      [permit({}, { value: 1e21 }), "message.value must be an integer; send integers beyond 2^53"],
      [permit({}, { deadline: "18446744073709551616" }), "message.deadline is out of range for uint64"],
      [permit({}, { deadline: undefined }), "message.deadline is missing"],
      [{ ...permit({}, {}), primaryType: "Nothing" }, "primaryType Nothing is not one of the struct types"],
      [
        { ...permit({}, {}), types: { ...permit({}, {}).types, Permit: [{ name: "value", type: "uint7" }] } },
        "neither an EIP-712 type nor a struct",
      ],
      [
        { ...permit({}, {}), types: { ...permit({}, {}).types, EIP712Domain: [{ name: "chainId", type: "string" }] } },
        "not an EIP-712 domain field",
      ],
      [
        { ...permit({}, {}), types: { Permit: permit({}, {}).types.Permit }, domain: { name: "Token", evil: "x" } },
        "domain.evil is not an EIP-712 domain field",
      ],
      [
        {
          types: {
            EIP712Domain: [],
            Data: [
              { name: "blob", type: "bytes32" },
              { name: "flag", type: "bool" },
            ],
          },
          primaryType: "Data",
          domain: {},
          message: { blob: "0x12", flag: true },
        },
        "message.blob must be exactly 32 bytes",
      ],
      [
        {
          types: { EIP712Domain: [], Data: [{ name: "flag", type: "bool" }] },
          primaryType: "Data",
          domain: {},
          message: { flag: "false" },
        },
        "message.flag must be true or false",
      ],
      [
        {
          types: { EIP712Domain: [], Data: [{ name: "list", type: "uint8[2]" }] },
          primaryType: "Data",
          domain: {},
          message: { list: [1] },
        },
        "message.list must hold exactly 2 items",
      ],
      [
        {
          types: { EIP712Domain: [], Data: [{ name: "list", type: "uint8[]" }] },
          primaryType: "Data",
          domain: {},
          message: { list: [1, 256] },
        },
        "message.list[1] is out of range for uint8",
      ],
      // Names Object.prototype has: only what the caller declared counts as a type or a field.
      [
        { types: { M: [] }, primaryType: "constructor", domain: { name: "X" }, message: {} },
        "primaryType constructor is not one of the struct types",
      ],
      [
        { types: { EIP712Domain: [], M: [{ name: "f", type: "toString" }] }, primaryType: "M", domain: {}, message: { f: {} } },
        "neither an EIP-712 type nor a struct",
      ],
      [
        { types: { EIP712Domain: [], M: [{ name: "constructor", type: "string" }] }, primaryType: "M", domain: {}, message: {} },
        "message.constructor is missing",
      ],
      // viem would hash an unpaired surrogate as U+FFFD, the same as a real U+FFFD policies see differently.
      [
        `{"types":{"EIP712Domain":[],"M":[{"name":"s","type":"string"}]},"primaryType":"M","domain":{},"message":{"s":"\\ud800"}}`,
        "unpaired UTF-16 surrogate",
      ],
      [
        {
          types: { EIP712Domain: [], M: [{ name: "a,uint256 b", type: "string" }] },
          primaryType: "M",
          domain: {},
          message: { "a,uint256 b": "x" },
        },
        "name must be an identifier",
      ],
    ];
    for (const [typed, message] of refused) await expectInvalid(() => signTyped(typed), message);
  });
});

describe("solana.tx shows the whole signed message", () => {
  it("a message with bytes after its last instruction is refused, not signed over bytes policies never saw", async () => {
    const { root, members } = await organizationWith(h, ["payer"]);
    const payer = members.payer!;
    const { solAddress } = await walletOf(root, "sol");
    await allowFor(root, payer, SIGN);
    const from = new PublicKey(solAddress);
    const transaction = new Transaction({ recentBlockhash: new PublicKey(Buffer.alloc(32, 3)).toBase58(), feePayer: from }).add(
      SystemProgram.transfer({ fromPubkey: from, toPubkey: Keypair.generate().publicKey, lamports: 5000 }),
    );
    const wire = transaction.serialize({ requireAllSignatures: false, verifySignatures: false });
    const sign = (bytes: Buffer) =>
      payer.client.signTransaction({ signWith: solAddress, unsignedTransaction: bytes.toString("hex"), type: "TRANSACTION_TYPE_SOLANA" });
    expect((await sign(Buffer.from(wire))).signedTransaction).toMatch(/^[0-9a-f]+$/);
    await expectInvalid(() => sign(Buffer.concat([wire, Buffer.from([2, 0, 0, 0])])), "4 bytes after its last instruction");
  });
});
