// SPL token transfers in list_sol_transaction_history: token transfers sent through sol_send_transaction
// and run by the real SPL Token program inside LiteSVM (test/helpers/solana-node.ts) are listed with
// their direction relative to the queried address, the owner of the other token account as the
// counterparty, and the asset's metadata when SIGIL_CHAIN_ASSETS lists the mint.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  address,
  appendTransactionMessageInstructions,
  compileTransaction,
  createNoopSigner,
  createTransactionMessage,
  generateKeyPairSigner,
  getTransactionEncoder,
  lamports,
  pipe,
  setTransactionMessageFeePayer,
  setTransactionMessageLifetimeUsingBlockhash,
  type Blockhash,
  type Instruction,
} from "@solana/kit";
import {
  AccountState,
  getMintEncoder,
  getMintSize,
  getTokenDecoder,
  getTokenEncoder,
  getTokenSize,
  getTransferCheckedInstruction,
  getTransferInstruction,
  TOKEN_PROGRAM_ADDRESS,
} from "@solana-program/token";
import { DEFAULT_SOLANA_ACCOUNTS } from "@turnkey/sdk-server";
import { startHarness, type Harness } from "./helpers/harness.js";
import { startSolanaNode, type SolanaNode } from "./helpers/solana-node.js";

type Sdk = ReturnType<Harness["sdk"]>;
type Caip2 = "solana:EtWTRABZaYq6iMfeYKouRu166VU2xqa1";
const SOL = 1_000_000_000n;

let node: SolanaNode;
let h: Harness;
let sdk: Sdk;
let assetsDir: string;
/** Wallet accounts of the organization: the fee payer whose history is read, and a second signer. */
let sender: string;
let second: string;
/** Someone outside the organization who receives tokens. */
let recipient: string;
/** The listed mint (TST, 6 decimals) and one no list names. */
let listedMint: string;
let otherMint: string;
const accounts: Record<string, string> = {};

const newAddress = async () => (await generateKeyPairSigner()).address as string;

function putMint(at: string, decimals: number) {
  const data = getMintEncoder().encode({
    mintAuthority: null,
    supply: 1_000_000_000_000n,
    decimals,
    isInitialized: true,
    freezeAuthority: null,
  });
  node.svm.setAccount({
    address: address(at),
    data: new Uint8Array(data),
    executable: false,
    lamports: lamports(1_461_600n),
    programAddress: TOKEN_PROGRAM_ADDRESS,
    space: BigInt(getMintSize()),
  });
}

/** An initialized token account of `mint` held by `owner`, created in the runtime as the token program lays it out. */
async function putTokenAccount(mint: string, owner: string, amount: bigint): Promise<string> {
  const at = await newAddress();
  const data = getTokenEncoder().encode({
    mint: address(mint),
    owner: address(owner),
    amount,
    delegate: null,
    state: AccountState.Initialized,
    isNative: null,
    delegatedAmount: 0n,
    closeAuthority: null,
  });
  node.svm.setAccount({
    address: address(at),
    data: new Uint8Array(data),
    executable: false,
    lamports: lamports(2_039_280n),
    programAddress: TOKEN_PROGRAM_ADDRESS,
    space: BigInt(getTokenSize()),
  });
  return at;
}

const tokenAmount = (at: string) => {
  const account = node.svm.getAccount(address(at));
  if (!account.exists) throw new Error(`no account ${at}`);
  return getTokenDecoder().decode(account.data).amount;
};

/** An unsigned transaction (hex) of these instructions, `feePayer` paying, Sigil attaching the blockhash. */
function unsigned(feePayer: string, instructions: Instruction[]): string {
  const message = pipe(
    createTransactionMessage({ version: 0 }),
    (m) => setTransactionMessageFeePayer(address(feePayer), m),
    (m) =>
      setTransactionMessageLifetimeUsingBlockhash(
        { blockhash: "11111111111111111111111111111111" as Blockhash, lastValidBlockHeight: 0n },
        m,
      ),
    (m) => appendTransactionMessageInstructions(instructions, m),
  );
  return Buffer.from(getTransactionEncoder().encode(compileTransaction(message))).toString("hex");
}

async function sendAndLand(instructions: Instruction[], signWiths: string[]): Promise<string> {
  const { sendTransactionStatusId } = await sdk.solSendTransaction({
    unsignedTransaction: unsigned(sender, instructions),
    signWiths,
    caip2: node.caip2 as Caip2,
  });
  const status = await sdk.pollTransactionStatus({ sendTransactionStatusId, pollingIntervalMs: 20, timeoutMs: 20_000 });
  expect(status.txStatus).toBe("INCLUDED");
  return status.solana!.signature!;
}

const TST = () => ({ caip19: `${node.caip2}/token:${listedMint}`, symbol: "TST", name: "Test SPL token", decimals: 6 });

beforeAll(async () => {
  node = await startSolanaNode();
  listedMint = await newAddress();
  otherMint = await newAddress();
  recipient = await newAddress();
  putMint(listedMint, 6);
  putMint(otherMint, 9);
  assetsDir = fs.mkdtempSync(path.join(os.tmpdir(), "sigil-assets-"));
  const assets = path.join(assetsDir, "assets.json");
  fs.writeFileSync(assets, JSON.stringify({ "solana:devnet": [{ ...TST(), caip19: `${node.caip2}/token:${listedMint}` }] }));
  h = await startHarness({
    SIGIL_CHAIN_RPC_URLS: `${node.caip2}=${node.url}`,
    SIGIL_CHAIN_POLL_MS: "20",
    SIGIL_CHAIN_TIMEOUT_MS: "5000",
    SIGIL_CHAIN_ASSETS: assets,
  });
  const org = await h.organization();
  sdk = h.sdk(org, org.key);
  const account = async (name: string) => (await sdk.createWallet({ walletName: name, accounts: DEFAULT_SOLANA_ACCOUNTS })).addresses[0]!;
  sender = await account("sender");
  second = await account("second");
  node.airdrop(sender, 2n * SOL);
  node.airdrop(second, SOL);
  accounts.sender = await putTokenAccount(listedMint, sender, 10_000_000n);
  accounts.second = await putTokenAccount(listedMint, second, 5_000_000n);
  accounts.recipient = await putTokenAccount(listedMint, recipient, 0n);
  accounts.senderOther = await putTokenAccount(otherMint, sender, 1_000n);
  accounts.recipientOther = await putTokenAccount(otherMint, recipient, 0n);
});
afterAll(async () => {
  await h?.close();
  await node?.stop();
  if (assetsDir) fs.rmSync(assetsDir, { recursive: true, force: true });
});

describe("list_sol_transaction_history with SPL token transfers", () => {
  let checked: string;
  let unchecked: string;
  let incoming: string;

  beforeAll(async () => {
    // TransferChecked of the listed token, run by the token program: 2.5 TST to the recipient.
    checked = await sendAndLand(
      [
        getTransferCheckedInstruction({
          source: address(accounts.sender!),
          mint: address(listedMint),
          destination: address(accounts.recipient!),
          authority: createNoopSigner(address(sender)),
          amount: 2_500_000n,
          decimals: 6,
        }),
      ],
      [sender],
    );
    // A plain Transfer (no mint in the instruction) of a mint no list names.
    unchecked = await sendAndLand(
      [
        getTransferInstruction({
          source: address(accounts.senderOther!),
          destination: address(accounts.recipientOther!),
          authority: createNoopSigner(address(sender)),
          amount: 700n,
        }),
      ],
      [sender],
    );
    // The sender pays the fee; the second signer moves tokens to the sender and to the recipient.
    incoming = await sendAndLand(
      [
        getTransferInstruction({
          source: address(accounts.second!),
          destination: address(accounts.sender!),
          authority: createNoopSigner(address(second)),
          amount: 1_000_000n,
        }),
        getTransferInstruction({
          source: address(accounts.second!),
          destination: address(accounts.recipient!),
          authority: createNoopSigner(address(second)),
          amount: 300_000n,
        }),
      ],
      [sender, second],
    );
  });

  it("the token program ran the transfers", () => {
    expect(tokenAmount(accounts.sender!)).toBe(10_000_000n - 2_500_000n + 1_000_000n);
    expect(tokenAmount(accounts.recipient!)).toBe(2_500_000n + 300_000n);
    expect(tokenAmount(accounts.second!)).toBe(5_000_000n - 1_300_000n);
    expect(tokenAmount(accounts.recipientOther!)).toBe(700n);
  });

  it("lists each transfer relative to the queried address, owners as counterparties, the listed asset's metadata", async () => {
    const { transactions } = await sdk.listSolTransactionHistory({ address: sender, caip2: node.caip2 as Caip2 });
    expect(transactions.map((t) => t.signature)).toEqual([incoming, unchecked, checked]);
    const [third, secondTx, first] = transactions;
    expect(first!.transfers).toEqual([
      { direction: "OUT", asset: TST(), amount: "2500000", counterparty: recipient, display: { crypto: "2.5" } },
    ]);
    // The mint is read from the source account; no list names it, so the asset is left out, as the API allows.
    expect(secondTx!.transfers).toEqual([{ direction: "OUT", amount: "700", counterparty: recipient }]);
    // Only the sender's side: the second signer's transfer to the recipient is not the sender's.
    expect(third!.transfers).toEqual([
      { direction: "IN", asset: TST(), amount: "1000000", counterparty: second, display: { crypto: "1" } },
    ]);
    // The second signer did not pay the fee: its history (fee payer's) is empty.
    expect((await sdk.listSolTransactionHistory({ address: second, caip2: node.caip2 as Caip2 })).transactions).toEqual([]);
  });

  it("a token account closed since is named by its address, the asset still known from the instruction", async () => {
    // The recipient's account is gone from the node (as after CloseAccount): the counterparty falls back to it.
    node.svm.setAccount({
      address: address(accounts.recipient!),
      data: new Uint8Array(),
      executable: false,
      lamports: lamports(0n),
      programAddress: address("11111111111111111111111111111111"),
      space: 0n,
    });
    const { transactions } = await sdk.listSolTransactionHistory({ address: sender, caip2: node.caip2 as Caip2 });
    expect(transactions.at(-1)!.transfers).toEqual([
      { direction: "OUT", asset: TST(), amount: "2500000", counterparty: accounts.recipient, display: { crypto: "2.5" } },
    ]);
  });
});
