// Policies reading decoded contract calls, driven as users drive them: a root user uploads an ABI or
// IDL and writes the policies, a NON-root user (the root quorum bypasses policies) signs through
// @turnkey/sdk-server's signTransaction. Ethereum: ERC-20 transfer(address,uint256) calls built by
// viem, every signature recovered to the account. Solana: an Anchor instruction built with
// @solana/web3.js, every signature verified.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  encodeFunctionData,
  erc20Abi,
  getAddress,
  parseTransaction,
  recoverTransactionAddress,
  serializeTransaction,
  type Hex,
  type TransactionSerializable,
} from "viem";
import { Keypair, PublicKey, Transaction, TransactionInstruction } from "@solana/web3.js";
import { createHash } from "node:crypto";
import { findContractInterface } from "../src/operations/contracts/interfaces.js";
import { organizationWith, type Member } from "./helpers/organizations.js";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness } from "./helpers/harness.js";

type Client = ReturnType<Harness["sdk"]>;

const ETHEREUM = "SMART_CONTRACT_INTERFACE_TYPE_ETHEREUM";
const SOLANA = "SMART_CONTRACT_INTERFACE_TYPE_SOLANA";
/** USDC on Ethereum mainnet (6 decimals), as block explorers write it. */
const USDC = "0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48";
/** Two payees, written in policies with their EIP-55 checksums, and one nobody allowed. */
const TREASURY = "0x08d2b0a37F869FF76BACB5Bab3278E26ab7067B7";
const PAYROLL = "0xbBbBBBBbbBBBbbbBbbBbbbbBBbBbbbbBbBbbBBbB";
const STRANGER = "0x1111111111111111111111111111111111111111";
const THOUSAND_USDC = 1_000_000_000n;
const MAX_UINT256 = 2n ** 256n - 1n;

let h: Harness;
beforeAll(async () => {
  h = await startHarness();
});
afterAll(() => h.close());

async function allowFor(root: Client, member: Member, condition: string) {
  const { policyId } = await root.createPolicy({
    policyName: `allow: ${condition}`.slice(0, 256),
    effect: "EFFECT_ALLOW",
    consensus: `approvers.any(u, u.id == '${member.userId}')`,
    condition,
    notes: "",
  });
  return policyId;
}

async function expectDenied(attempt: () => Promise<unknown>) {
  const { id, failure } = await refusedLeavingOnlyItsActivity(h, attempt, {
    code: 7,
    message: expect.stringContaining("OUTCOME_DENY_IMPLICIT"),
  });
  expect(failure).toMatchObject({ details: [expect.objectContaining({ turnkeyErrorCode: "POLICY_DENIED" })] });
  return id;
}

/** The per-policy outcomes of an activity's evaluation. */
async function verdicts(root: Client, activityId: string) {
  const { policyEvaluations } = await root.getPolicyEvaluations({ activityId });
  return policyEvaluations[0]!.policyEvaluations;
}

/** An organization whose non-root spender has an Ethereum account, with USDC's ABI uploaded. */
async function spender() {
  const { root, members } = await organizationWith(h, ["spender"]);
  const { addresses } = await root.createWallet({
    walletName: "spending",
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  });
  const { smartContractInterfaceId } = await root.createSmartContractInterface({
    type: ETHEREUM,
    smartContractAddress: USDC,
    smartContractInterface: JSON.stringify(erc20Abi),
    label: "USDC",
  });
  return { root, spender: members.spender!, from: addresses[0] as Hex, interfaceId: smartContractInterfaceId };
}

/** An unsigned EIP-1559 transaction calling USDC's transfer(to, amount). */
function transfer(to: string, amount: bigint, token: string = USDC): string {
  const transaction: TransactionSerializable = {
    type: "eip1559",
    chainId: 1,
    nonce: 0,
    to: token as Hex,
    data: encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [to as Hex, amount] }),
    value: 0n,
    gas: 60_000n,
    maxFeePerGas: 30_000_000_000n,
    maxPriorityFeePerGas: 1_000_000_000n,
  };
  return serializeTransaction(transaction).slice(2);
}

/** Signs as the member, and checks the signed transaction recovers to the account and is the one sent. */
async function signs(member: Member, from: Hex, unsignedTransaction: string) {
  const { signedTransaction, activity } = await member.client.signTransaction({
    signWith: from,
    unsignedTransaction,
    type: "TRANSACTION_TYPE_ETHEREUM",
  });
  expect(activity.status).toBe("ACTIVITY_STATUS_COMPLETED");
  const signed = `0x${signedTransaction}` as Hex;
  expect(await recoverTransactionAddress({ serializedTransaction: signed as never })).toBe(from);
  expect(parseTransaction(signed).data).toBe(parseTransaction(`0x${unsignedTransaction}`).data);
}

const sign = (member: Member, from: Hex, unsignedTransaction: string) =>
  member.client.signTransaction({ signWith: from, unsignedTransaction, type: "TRANSACTION_TYPE_ETHEREUM" });

/** The policy of docs/contract-policies.md: transfer at most 1,000 USDC to these addresses. */
const AT_MOST_1000_USDC_TO_PAYEES =
  `eth.tx.to == '${USDC}' && eth.tx.function_name == 'transfer' && eth.tx.function_signature == '0xa9059cbb' && ` +
  `eth.tx.contract_call_args['amount'] <= ${THOUSAND_USDC} && eth.tx.contract_call_args['recipient'] in ['${TREASURY}', '${PAYROLL}']`;

describe("eth.tx.function_name, function_signature and contract_call_args", () => {
  it("allows a transfer within the limit to an allowed payee; denies one over the limit or to anyone else", async () => {
    const { root, spender: member, from } = await spender();
    await allowFor(root, member, AT_MOST_1000_USDC_TO_PAYEES);

    await signs(member, from, transfer(TREASURY, THOUSAND_USDC));
    // The payee written in lower case is the same address as the policy's checksummed one.
    await signs(member, from, transfer(PAYROLL.toLowerCase(), 1n));

    await expectDenied(() => sign(member, from, transfer(TREASURY, THOUSAND_USDC + 1n)));
    await expectDenied(() => sign(member, from, transfer(STRANGER, 1n)));
    // The same call to a token with no uploaded ABI: nothing is decoded, and eth.tx.to differs anyway.
    await expectDenied(() => sign(member, from, transfer(TREASURY, 1n, STRANGER)));
  });

  it("after delete_smart_contract_interface the keywords are gone: the allow policy errors and denies nothing else", async () => {
    const { root, spender: member, from, interfaceId } = await spender();
    const policyId = await allowFor(root, member, AT_MOST_1000_USDC_TO_PAYEES);
    await signs(member, from, transfer(TREASURY, 5n));

    await root.deleteSmartContractInterface({ smartContractInterfaceId: interfaceId });
    const denied = await expectDenied(() => sign(member, from, transfer(TREASURY, 5n)));
    const [verdict] = (await verdicts(root, denied)).filter((v) => v.policyId === policyId);
    expect(verdict).toMatchObject({ outcome: "OUTCOME_ERROR" });

    // Uploaded again (with the address in lower case), the same call is allowed again.
    await root.createSmartContractInterface({
      type: ETHEREUM,
      smartContractAddress: USDC.toLowerCase(),
      smartContractInterface: JSON.stringify(erc20Abi),
      label: "USDC again",
    });
    await signs(member, from, transfer(TREASURY, 5n));
  });

  it("compares uint256 arguments exactly, at 2^256 - 1 and at 2^53 + 1 (where a double would round)", async () => {
    const { root, spender: member, from } = await spender();
    await allowFor(root, member, `eth.tx.contract_call_args['amount'] == ${MAX_UINT256}`);
    await allowFor(root, member, `eth.tx.contract_call_args['amount'] == ${2n ** 53n + 1n}`);
    await allowFor(
      root,
      member,
      `eth.tx.contract_call_args['amount'] > ${MAX_UINT256 - 2n} && eth.tx.contract_call_args['amount'] < ${MAX_UINT256}`,
    );

    await signs(member, from, transfer(TREASURY, MAX_UINT256));
    await signs(member, from, transfer(TREASURY, MAX_UINT256 - 1n));
    await expectDenied(() => sign(member, from, transfer(TREASURY, MAX_UINT256 - 2n)));
    await signs(member, from, transfer(TREASURY, 2n ** 53n + 1n));
    await expectDenied(() => sign(member, from, transfer(TREASURY, 2n ** 53n)));
    await expectDenied(() => sign(member, from, transfer(TREASURY, 2n ** 53n + 2n)));
  });

  it("a deny on the decoded call wins over a broad allow; without the ABI the deny errors and does not deny", async () => {
    const { root, spender: member, from, interfaceId } = await spender();
    await allowFor(root, member, "activity.resource == 'PRIVATE_KEY' && activity.action == 'SIGN'");
    await root.createPolicy({
      policyName: "never approve",
      effect: "EFFECT_DENY",
      condition: "eth.tx.function_name == 'approve'",
      notes: "",
    });
    const approve = serializeTransaction({
      type: "eip1559",
      chainId: 1,
      to: USDC,
      data: encodeFunctionData({ abi: erc20Abi, functionName: "approve", args: [STRANGER, MAX_UINT256] }),
      maxFeePerGas: 1n,
    }).slice(2);
    const { failure } = await refusedLeavingOnlyItsActivity(h, () => sign(member, from, approve), { code: 7 });
    expect(failure.message).toContain("OUTCOME_DENY_EXPLICIT");
    await signs(member, from, transfer(STRANGER, 1n));
    // The deny can only read function_name where the ABI is uploaded (documented: write denies over
    // what every transaction has, such as eth.tx.data[0..10], to cover contracts without one).
    await root.deleteSmartContractInterface({ smartContractInterfaceId: interfaceId });
    await signs(member, from, approve);
  });
});

describe("only Ethereum addresses compare in any letter case: not text that looks like one", () => {
  const PAY_ABI = [
    {
      type: "function",
      name: "pay",
      stateMutability: "nonpayable",
      outputs: [],
      inputs: [
        { name: "to", type: "address" },
        { name: "memo", type: "string" },
      ],
    },
  ] as const;
  const CONTRACT = "0x2222222222222222222222222222222222222222";
  const pay = (to: string, memo: string) =>
    serializeTransaction({
      type: "eip1559",
      chainId: 1,
      to: CONTRACT,
      data: encodeFunctionData({ abi: PAY_ABI, functionName: "pay", args: [to as Hex, memo] }),
      maxFeePerGas: 1n,
    }).slice(2);

  it("an address argument matches a checksummed literal in any case; a string argument holding 0x and 40 hex digits does not", async () => {
    const { root, spender: member, from } = await spender();
    await root.createSmartContractInterface({
      type: ETHEREUM,
      smartContractAddress: CONTRACT,
      smartContractInterface: JSON.stringify(PAY_ABI),
      label: "pay",
    });
    // The memo is text (a TEXT field that happens to hold an address-like reference): compared exactly.
    await allowFor(root, member, `eth.tx.contract_call_args['to'] == '${TREASURY}' && eth.tx.contract_call_args['memo'] == '${PAYROLL}'`);

    await signs(member, from, pay(TREASURY.toLowerCase(), PAYROLL));
    await expectDenied(() => sign(member, from, pay(TREASURY, PAYROLL.toLowerCase())));
    await expectDenied(() => sign(member, from, pay(STRANGER, PAYROLL)));
  });

  it("an Ethereum wallet account's address and eth.tx.to match in any case", async () => {
    const { root, spender: member, from } = await spender();
    const upper = (address: string) => `0x${getAddress(address).slice(2).toUpperCase()}`;
    await allowFor(root, member, `wallet_account.address == '${upper(from)}' && eth.tx.to == '${upper(USDC)}'`);
    await signs(member, from, transfer(TREASURY, 1n));
    await expectDenied(() => sign(member, from, transfer(TREASURY, 1n, STRANGER)));
  });
});

describe("solana.tx.instructions[i].parsed_instruction_data", () => {
  const PROGRAM = new PublicKey("JUP6LkbZbjS1jKKwapdHNy74zcZ3tLUZoi5QNyVTaV4");
  const blockhash = new PublicKey(Buffer.alloc(32, 9)).toBase58();
  // The product's example IDL (legacy Anchor format, no discriminators: Anchor's default ones apply).
  const IDL = {
    instructions: [
      {
        name: "initialize",
        accounts: [{ name: "authority", isMut: false, isSigner: true, isOptional: false }],
        args: [{ name: "amount", type: "u64" }],
      },
    ],
    types: [{ name: "MyStruct", type: { kind: "struct", fields: [{ name: "value", type: "u64" }] } }],
  };
  const discriminator = createHash("sha256").update("global:initialize").digest().subarray(0, 8);

  function initialize(authority: string, amount: bigint): string {
    const data = Buffer.alloc(16);
    discriminator.copy(data);
    data.writeBigUInt64LE(amount, 8);
    const signer = new PublicKey(authority);
    const transaction = new Transaction({ recentBlockhash: blockhash, feePayer: signer }).add(
      new TransactionInstruction({ programId: PROGRAM, keys: [{ pubkey: signer, isSigner: true, isWritable: false }], data }),
    );
    return transaction.serialize({ requireAllSignatures: false, verifySignatures: false }).toString("hex");
  }

  it("reads the instruction's name, arguments and named accounts; deleting the IDL takes them away", async () => {
    const { root, members } = await organizationWith(h, ["payer"]);
    const payer = members.payer!;
    const { addresses } = await root.createWallet({
      walletName: "sol",
      accounts: [
        { curve: "CURVE_ED25519", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/501'/0'/0'", addressFormat: "ADDRESS_FORMAT_SOLANA" },
      ],
    });
    const solAddress = addresses[0]!;
    const { smartContractInterfaceId } = await root.createSmartContractInterface({
      type: SOLANA,
      smartContractAddress: PROGRAM.toBase58(),
      smartContractInterface: JSON.stringify(IDL),
      label: "the product's example program",
    });
    // The product's documented form, and named accounts under both of its documented spellings.
    const policyId = await allowFor(
      root,
      payer,
      `solana.tx.instructions.any(i, i.program_key == '${PROGRAM.toBase58()}' && i.parsed_instruction_data.instruction_name == 'initialize' ` +
        `&& i.parsed_instruction_data.program_call_args['amount'] <= 18446744073709551615 ` +
        `&& i.parsed_instruction_data.discriminator == '${discriminator.toString("hex")}' ` +
        `&& i.parsed_instruction_data.named_accounts['authority'] == '${solAddress}' && i.parsed_instruction_data.named_account['authority'] == '${solAddress}') ` +
        `&& solana.tx.instructions[0].parsed_instruction_data.program_call_args['amount'] != 7`,
    );
    const sign = (unsignedTransaction: string) =>
      payer.client.signTransaction({ signWith: solAddress, unsignedTransaction, type: "TRANSACTION_TYPE_SOLANA" });

    const { signedTransaction } = await sign(initialize(solAddress, 2n ** 64n - 1n));
    const signed = Transaction.from(Buffer.from(signedTransaction, "hex"));
    expect(signed.verifySignatures()).toBe(true);
    await expectDenied(() => sign(initialize(solAddress, 7n)));
    // Data the IDL does not read (too short for its u64): no parsed_instruction_data, so no allow.
    const short = Transaction.from(Buffer.from(initialize(solAddress, 1n), "hex"));
    short.instructions[0]!.data = short.instructions[0]!.data.subarray(0, 12);
    await expectDenied(() => sign(short.serialize({ requireAllSignatures: false, verifySignatures: false }).toString("hex")));

    // Beside an instruction of another program, the documented any() form errors (evaluation does not
    // short-circuit, and that instruction has no parsed_instruction_data); filtering by program first
    // reads parsed data only where there is some (docs/contract-policies.md).
    const withMemo = Transaction.from(Buffer.from(initialize(solAddress, 1n), "hex"));
    withMemo.add(
      new TransactionInstruction({
        programId: new PublicKey("MemoSq4gqABAXKb96qnH8TysNcWxMyWCqXgDLGmfcHr"),
        keys: [],
        data: Buffer.from("hi"),
      }),
    );
    const twoInstructions = withMemo.serialize({ requireAllSignatures: false, verifySignatures: false }).toString("hex");
    const erroring = await expectDenied(() => sign(twoInstructions));
    expect((await verdicts(root, erroring)).find((v) => v.policyId === policyId)).toMatchObject({ outcome: "OUTCOME_ERROR" });
    await allowFor(
      root,
      payer,
      `solana.tx.instructions.filter(i, i.program_key == '${PROGRAM.toBase58()}').all(i, i.parsed_instruction_data.program_call_args['amount'] < 10)`,
    );
    expect((await sign(twoInstructions)).activity.status).toBe("ACTIVITY_STATUS_COMPLETED");

    await root.deleteSmartContractInterface({ smartContractInterfaceId });
    const denied = await expectDenied(() => sign(initialize(solAddress, 1n)));
    expect((await verdicts(root, denied)).find((v) => v.policyId === policyId)).toMatchObject({ outcome: "OUTCOME_ERROR" });
  });

  it("findContractInterface: an Ethereum address matches in any case, a Solana program id only exactly", async () => {
    const { org, root } = await organizationWith(h, []);
    const program = Keypair.generate().publicKey.toBase58();
    await root.createSmartContractInterface({
      type: SOLANA,
      smartContractAddress: program,
      smartContractInterface: JSON.stringify(IDL),
      label: "x",
    });
    await root.createSmartContractInterface({
      type: ETHEREUM,
      smartContractAddress: USDC,
      smartContractInterface: JSON.stringify(erc20Abi),
      label: "y",
    });
    const db = h.server.store.db;
    const id = org.organizationId;
    for (const spelling of [USDC, USDC.toLowerCase(), USDC.toUpperCase().replace("0X", "0x")])
      expect((await findContractInterface(db, id, ETHEREUM, spelling))?.abi).toEqual(erc20Abi);
    expect((await findContractInterface(db, id, SOLANA, program))?.idl.instructions.map((i) => i.name)).toEqual(["initialize"]);
    // Base58 is case-sensitive: the id with one letter's case changed names another key.
    const swapped = program.replace(/[a-z]/, (c) => c.toUpperCase());
    expect(swapped).not.toBe(program);
    expect(await findContractInterface(db, id, SOLANA, swapped)).toBeUndefined();
    // Another organization's interface is not found.
    const { org: other } = await organizationWith(h, []);
    expect(await findContractInterface(db, other.organizationId, ETHEREUM, USDC)).toBeUndefined();
  });
});
