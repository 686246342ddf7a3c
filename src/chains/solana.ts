// Solana: a wire transaction in (hex; legacy or v0 message, empty signature slots), the signer's slot
// filled, the same transaction out — decoded and re-encoded by @solana/kit, so other signatures and
// every byte of the message are kept. Also `solana.tx` for policies, with the product's field names.
import {
  getBase58Decoder,
  getCompiledTransactionMessageDecoder,
  getTransactionDecoder,
  getTransactionEncoder,
  type SignatureBytes,
  type Transaction,
} from "@solana/kit";
import type { RawSignature } from "../crypto/sign.js";

export class SolanaError extends Error {
  override name = "SolanaError";
}

const SYSTEM_PROGRAM = "11111111111111111111111111111111";
const TOKEN_PROGRAMS = new Set(["TokenkegQfeZyiNwAJbNbGKPFXCWuBvf9Ss623VQ5DA", "TokenzQdBNbLqP5VEhdkAS6EPFLC1PHnBqCXEpPxuEb"]);
/** What the product calls an account that a v0 message takes from an address lookup table. */
const LOOKUP_PLACEHOLDER = "ADDRESS_TABLE_LOOKUP";

/** A message @solana/kit cannot decode, in the request's terms (its own errors name its decoders). */
export const MESSAGE_UNREADABLE =
  "the transaction's message cannot be read: its header, account keys, blockhash and instructions do not decode as a legacy or " +
  "v0 message (a count or a length runs past the end of its bytes)";

/** The wire transaction in `unsignedHex` (hex, with or without 0x), as @solana/kit reads it. */
export function decode(unsignedHex: string): Transaction {
  const hex = unsignedHex.startsWith("0x") ? unsignedHex.slice(2) : unsignedHex;
  if (!/^([0-9a-fA-F]{2})+$/.test(hex)) throw new SolanaError("unsignedTransaction must be the hex of a serialized Solana transaction");
  try {
    return getTransactionDecoder().decode(Buffer.from(hex, "hex"));
  } catch {
    throw new SolanaError(
      "unsignedTransaction is not a Solana transaction: its bytes do not decode as a wire transaction (the number of " +
        "signatures, that many 64-byte signature slots, then a legacy or v0 message)",
    );
  }
}

/** Fills the signature slot of `publicKeyHex` (the ed25519 key) and returns the transaction as hex. */
export async function signSolanaTransaction(
  unsignedHex: string,
  publicKeyHex: string,
  sign: (message: Uint8Array) => Promise<RawSignature>,
): Promise<string> {
  const transaction = decode(unsignedHex);
  const address = getBase58Decoder().decode(Buffer.from(publicKeyHex, "hex"));
  if (!(address in transaction.signatures)) {
    throw new SolanaError(
      `the transaction asks no signature of ${address} (its signers: ${Object.keys(transaction.signatures).join(", ")})`,
    );
  }
  const { r, s } = await sign(new Uint8Array(transaction.messageBytes));
  const signature = Buffer.from(r + s, "hex") as unknown as SignatureBytes;
  const signed: Transaction = { ...transaction, signatures: { ...transaction.signatures, [address]: signature } };
  return Buffer.from(getTransactionEncoder().encode(signed)).toString("hex");
}

const u64 = (data: Buffer, offset: number) => data.readBigUInt64LE(offset);

/** `solana.tx` of the policy language. */
export function solanaKeyword(unsignedHex: string): Record<string, unknown> {
  let decoded: ReturnType<ReturnType<typeof getCompiledTransactionMessageDecoder>["decode"]>;
  try {
    const messageBytes = decode(unsignedHex).messageBytes;
    let end: number;
    [decoded, end] = getCompiledTransactionMessageDecoder().read(messageBytes, 0);
    // The signature covers every message byte: bytes policies were not shown must not ride along.
    if (end !== messageBytes.length)
      throw new SolanaError(`the transaction's message has ${messageBytes.length - end} bytes after its last instruction`);
  } catch (error) {
    if (error instanceof SolanaError) throw error;
    throw new SolanaError(MESSAGE_UNREADABLE);
  }
  if (!("instructions" in decoded))
    throw new SolanaError(`Solana message version ${String(decoded.version)} is not supported: legacy and v0 messages are`);
  const message = decoded;
  const accounts = message.staticAccounts as string[];
  const { numSignerAccounts, numReadonlySignerAccounts, numReadonlyNonSignerAccounts } = message.header;
  const keyAt = (i: number) => accounts[i] ?? LOOKUP_PLACEHOLDER;
  const isSigner = (i: number) => i < numSignerAccounts;
  const isWritable = (i: number) =>
    i < numSignerAccounts ? i < numSignerAccounts - numReadonlySignerAccounts : i < accounts.length - numReadonlyNonSignerAccounts;
  const lookups = ("addressTableLookups" in message ? (message.addressTableLookups ?? []) : []).map((l) => ({
    address_table_key: l.lookupTableAddress as string,
    writable_indexes: l.writableIndexes.map(BigInt),
    readonly_indexes: l.readonlyIndexes.map(BigInt),
  }));
  const transfers: Record<string, unknown>[] = [];
  const splTransfers: Record<string, unknown>[] = [];
  const instructions = message.instructions.map((instruction) => {
    const program = keyAt(instruction.programAddressIndex);
    const indices = instruction.accountIndices ?? [];
    const data = Buffer.from(instruction.data ?? new Uint8Array());
    // Top-level native and SPL transfers, the ones the product's policies read.
    if (program === SYSTEM_PROGRAM && data.length >= 12 && data.readUInt32LE(0) === 2 && indices.length >= 2) {
      transfers.push({ from: keyAt(indices[0]!), to: keyAt(indices[1]!), amount: u64(data, 4) });
    }
    if (TOKEN_PROGRAMS.has(program) && data[0] === 3 && data.length >= 9 && indices.length >= 3) {
      splTransfers.push({
        from: keyAt(indices[0]!),
        to: keyAt(indices[1]!),
        amount: u64(data, 1),
        owner: keyAt(indices[2]!),
        signers: indices.slice(3).map(keyAt),
        token_mint: "",
      });
    }
    if (TOKEN_PROGRAMS.has(program) && data[0] === 12 && data.length >= 10 && indices.length >= 4) {
      splTransfers.push({
        from: keyAt(indices[0]!),
        to: keyAt(indices[2]!),
        amount: u64(data, 1),
        owner: keyAt(indices[3]!),
        signers: indices.slice(4).map(keyAt),
        token_mint: keyAt(indices[1]!),
      });
    }
    return {
      program_key: program,
      accounts: indices.map((i) => ({ account_key: keyAt(i), signer: isSigner(i), writable: isWritable(i) })),
      instruction_data_hex: data.toString("hex"),
      address_table_lookups: lookups,
    };
  });
  return {
    account_keys: accounts,
    program_keys: [...new Set(message.instructions.map((i) => keyAt(i.programAddressIndex)))],
    instructions,
    transfers,
    recent_blockhash: message.lifetimeToken as string,
    spl_transfers: splTransfers,
    address_table_lookups: lookups,
  };
}
