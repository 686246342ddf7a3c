// A Solana transaction on its way to a node (sol_send_transaction): its blockhash attached, signed by
// several keys, encoded for sendTransaction, named by its signature, and read back for the history
// (its SOL and SPL token transfers).
// Every byte is decoded and encoded by @solana/kit; the message is changed only in its lifetime token.
import {
  getBase58Encoder,
  getBase64EncodedWireTransaction,
  getCompiledTransactionMessageDecoder,
  getCompiledTransactionMessageEncoder,
  getSignatureFromTransaction,
  getTransactionEncoder,
  type SignatureBytes,
  type Transaction,
} from "@solana/kit";
import {
  getTokenDecoder,
  getTokenSize,
  getTransferCheckedInstructionDataDecoder,
  getTransferInstructionDataDecoder,
  identifyTokenInstruction,
  TOKEN_PROGRAM_ADDRESS,
  TokenInstruction,
} from "@solana-program/token";
import type { RawSignature } from "../crypto/sign.js";
import { MESSAGE_UNREADABLE, SolanaError, decode } from "./solana.js";

const SYSTEM_PROGRAM = "11111111111111111111111111111111";

type CompiledMessage = ReturnType<ReturnType<typeof getCompiledTransactionMessageDecoder>["decode"]>;

function compiledMessage(transaction: Transaction): CompiledMessage {
  try {
    return getCompiledTransactionMessageDecoder().decode(transaction.messageBytes);
  } catch {
    throw new SolanaError(MESSAGE_UNREADABLE);
  }
}

/** The transaction of `unsignedHex`, with the addresses whose signatures it asks for, in message order. */
export function readUnsignedTransaction(unsignedHex: string): { transaction: Transaction; signers: string[]; blockhash: string } {
  const transaction = decode(unsignedHex);
  const message = compiledMessage(transaction);
  return { transaction, signers: Object.keys(transaction.signatures), blockhash: message.lifetimeToken as string };
}

/** Whether the message's lifetime is a durable nonce (its first instruction advances a nonce
 * account): its lifetime token is the nonce, which no blockhash may replace. */
export function usesDurableNonce(transaction: Transaction): boolean {
  return advanceNonceOf(transaction) !== null;
}

/** The nonce account a durable-nonce transaction advances (its first instruction's first account), or
 * null for a transaction on a blockhash. `account` is null when it is not among the message's static
 * accounts (behind an address lookup table): Sigil cannot name it then. */
export function durableNonceAccountOf(transaction: Transaction): { account: string | null } | null {
  const first = advanceNonceOf(transaction);
  if (!first) return null;
  return { account: first.staticAccounts[first.instruction.accountIndices?.[0] ?? -1] ?? null };
}

/** The message's first instruction when it is the System Program's AdvanceNonceAccount (index 4). */
function advanceNonceOf(transaction: Transaction) {
  const message = compiledMessage(transaction);
  if (!("instructions" in message)) return null;
  const instruction = message.instructions[0];
  if (!instruction) return null;
  const staticAccounts = message.staticAccounts as string[];
  const data = instruction.data ?? new Uint8Array();
  const advances =
    staticAccounts[instruction.programAddressIndex] === SYSTEM_PROGRAM && data.length >= 4 && Buffer.from(data).readUInt32LE(0) === 4;
  return advances ? { instruction, staticAccounts } : null;
}

/** A 32-byte base58 hash (a blockhash), or a SolanaError naming `field`. */
export function checkBlockhash(value: string, field: string): string {
  let bytes: Uint8Array | undefined;
  try {
    bytes = /^[1-9A-HJ-NP-Za-km-z]{32,44}$/.test(value) ? new Uint8Array(getBase58Encoder().encode(value)) : undefined;
  } catch {
    bytes = undefined;
  }
  if (bytes?.length !== 32)
    throw new SolanaError(`${field} must be a blockhash: 32 bytes in base58, got ${JSON.stringify(value.slice(0, 80))}`);
  return value;
}

/**
 * The transaction with `blockhash` as its lifetime, every signature slot empty: a signature made
 * before the blockhash changed would no longer verify, so none is kept.
 */
export function withBlockhash(transaction: Transaction, blockhash: string): Transaction {
  const message = compiledMessage(transaction);
  const messageBytes = getCompiledTransactionMessageEncoder().encode({ ...message, lifetimeToken: blockhash } as CompiledMessage);
  const signatures = Object.fromEntries(Object.keys(transaction.signatures).map((address) => [address, null]));
  return { messageBytes, signatures } as unknown as Transaction;
}

/** The transaction's hex (the form sign_transaction takes and policies read). */
export const transactionHex = (transaction: Transaction) => Buffer.from(getTransactionEncoder().encode(transaction)).toString("hex");

/** Fills the slot of each signer (address → ed25519 signature of the message bytes). */
export async function signWithEach(
  transaction: Transaction,
  signers: { address: string; sign: (message: Uint8Array) => Promise<RawSignature> }[],
): Promise<Transaction> {
  const signatures: Record<string, SignatureBytes | null> = { ...transaction.signatures };
  for (const { address, sign } of signers) {
    if (!(address in signatures)) throw new SolanaError(`the transaction asks no signature of ${address}`);
    const { r, s } = await sign(new Uint8Array(transaction.messageBytes));
    signatures[address] = new Uint8Array(Buffer.from(r + s, "hex")) as SignatureBytes;
  }
  return { ...transaction, signatures } as Transaction;
}

/** What sendTransaction takes (base64 wire format), and the transaction's name: its first signature, base58. */
export function wireOf(transaction: Transaction): { base64: string; signature: string } {
  return { base64: getBase64EncodedWireTransaction(transaction), signature: getSignatureFromTransaction(transaction) };
}

/** A transaction in base64 wire format, read back. */
export const fromWire = (base64: string): Transaction => decode(Buffer.from(base64, "base64").toString("hex"));

/** Its signers with whether each is writable, in message order (the history's `signers`). */
export function signersOf(transaction: Transaction): { address: string; writable: boolean }[] {
  const message = compiledMessage(transaction);
  const { numSignerAccounts, numReadonlySignerAccounts } = message.header;
  return (message.staticAccounts as string[])
    .slice(0, numSignerAccounts)
    .map((address, i) => ({ address, writable: i < numSignerAccounts - numReadonlySignerAccounts }));
}

/** Top-level System Program transfers (lamports), the history's native transfers. */
export function systemTransfersOf(transaction: Transaction): { from: string; to: string; lamports: bigint }[] {
  const message = compiledMessage(transaction);
  if (!("instructions" in message)) return [];
  const accounts = message.staticAccounts as string[];
  return message.instructions.flatMap((instruction) => {
    const data = Buffer.from(instruction.data ?? new Uint8Array());
    const indices = instruction.accountIndices ?? [];
    const [from, to] = [accounts[indices[0] ?? -1], accounts[indices[1] ?? -1]];
    // The System Program's Transfer (instruction 2: u32 index, u64 lamports; accounts from, to).
    if (accounts[instruction.programAddressIndex] !== SYSTEM_PROGRAM || data.length < 12 || data.readUInt32LE(0) !== 2) return [];
    return from && to ? [{ from, to, lamports: data.readBigUInt64LE(4) }] : [];
  });
}

/** The SPL Token program and Token-2022, whose Transfer and TransferChecked share one layout. */
const TOKEN_PROGRAMS = new Set<string>([TOKEN_PROGRAM_ADDRESS, "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb"]);

/** A top-level SPL token transfer: token accounts (not their owners), the signing authority, and the mint when the instruction names it. */
export interface TokenTransfer {
  source: string;
  destination: string;
  authority: string;
  amount: bigint;
  mint?: string;
}

/** Top-level Transfer and TransferChecked instructions of the token programs (the history's token transfers). */
export function tokenTransfersOf(transaction: Transaction): TokenTransfer[] {
  const message = compiledMessage(transaction);
  if (!("instructions" in message)) return [];
  const accounts = message.staticAccounts as string[];
  return message.instructions.flatMap((instruction): TokenTransfer[] => {
    if (!TOKEN_PROGRAMS.has(accounts[instruction.programAddressIndex]!) || !instruction.data) return [];
    // An account behind an address lookup table is not in the static list: such a transfer cannot be named here.
    const named = (instruction.accountIndices ?? []).map((i) => accounts[i]);
    try {
      switch (identifyTokenInstruction(instruction.data)) {
        case TokenInstruction.Transfer: {
          const [source, destination, authority] = named;
          const { amount } = getTransferInstructionDataDecoder().decode(instruction.data);
          return source && destination && authority ? [{ source, destination, authority, amount }] : [];
        }
        case TokenInstruction.TransferChecked: {
          const [source, mint, destination, authority] = named;
          const { amount } = getTransferCheckedInstructionDataDecoder().decode(instruction.data);
          return source && mint && destination && authority ? [{ source, destination, authority, amount, mint }] : [];
        }
        default:
          return [];
      }
    } catch {
      return []; // data the token program would refuse: the transaction did not move tokens through it
    }
  });
}

/** The mint and owner of an SPL token account's data (Token-2022 extensions follow the base layout), if it is one. */
export function tokenAccountOf(data: Uint8Array): { mint: string; owner: string } | undefined {
  const base = getTokenSize();
  if (data.length < base) return undefined;
  try {
    const { mint, owner } = getTokenDecoder().decode(data.subarray(0, base));
    return { mint, owner };
  } catch {
    return undefined;
  }
}
