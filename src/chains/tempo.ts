// Tempo: an unsigned Tempo transaction in (type 0x76, RLP hex, as @turnkey/viem sends it with
// TRANSACTION_TYPE_TEMPO), the same transaction with the sender's secp256k1 signature out. Also
// `tempo.tx` for policies, with the product's field names. ox (the library under viem, whose
// tempo module viem's Tempo chains serialize with) parses, hashes and serializes.
import type { TxEnvelopeTempo } from "ox/tempo";
import { getAddress, hexToBytes } from "viem";
import { MAX_NESTING, rlpDepth } from "./nesting.js";

// ox/tempo is loaded on the first Tempo transaction rather than at every process start.
let oxTempo: Promise<typeof import("ox/tempo")> | undefined;
const tempoLibrary = () => (oxTempo ??= import("ox/tempo"));

export class TempoError extends Error {
  override name = "TempoError";
}

export interface ParsedTempoTransaction {
  envelope: TxEnvelopeTempo.TxEnvelopeTempo;
  /** What the sender signs: keccak256 of the envelope's signing encoding. */
  digest: Uint8Array;
  /** The fee token's address, when the transaction names one. */
  feeToken?: string;
  library: typeof import("ox/tempo");
}

/** What ox refused in a Tempo transaction, in the request's terms (ox's messages name its own internals). */
function tempoProblem(error: unknown): string {
  switch ((error as { name?: string }).name) {
    case "TransactionEnvelope.InvalidSerializedError":
      return (
        "its RLP list does not hold a Tempo transaction's fields (chainId, maxPriorityFeePerGas, maxFeePerGas, gas, calls, " +
        "accessList, nonceKey, nonce, validBefore, validAfter, feeToken, feePayerSignature, authorizationList)"
      );
    case "TxEnvelopeTempo.CallsEmptyError":
      return "calls is empty: a Tempo transaction makes at least one call";
    case "TxEnvelopeTempo.InvalidValidityBoundError":
      return "validBefore or validAfter is not a whole number of seconds below 2^53";
    case "TxEnvelopeTempo.InvalidValidityWindowError":
      return "validBefore is not after validAfter";
    case "TransactionEnvelope.InvalidChainIdError":
      return "its chain id is 0 or not below 2^53";
    case "TransactionEnvelope.FeeCapTooHighError":
      return "maxFeePerGas is above 2^256 - 1";
    case "TransactionEnvelope.TipAboveFeeCapError":
      return "maxPriorityFeePerGas is above maxFeePerGas";
    case "Address.InvalidAddressError":
      return "an address in it (a call's to, an access list entry, the fee token) is not 20 bytes";
    case "Hex.IntegerOutOfRangeError":
      return "a chain id, nonce or validity time in it is not below 2^53, the largest read";
    default:
      if (/^Signature\./.test((error as { name?: string }).name ?? ""))
        return "a signature in it (feePayerSignature, an authorization's) is not valid";
      return "its bytes do not decode as one (RLP of the type 0x76 fields, as viem's Tempo serializer writes them)";
  }
}

/**
 * Reads an unsigned Tempo transaction. It must be exactly what ox serializes for the envelope it
 * decodes to, so policies (shown that envelope) see every byte that is signed.
 */
export async function parseTempoTransaction(unsigned: string): Promise<ParsedTempoTransaction> {
  const text = (unsigned.startsWith("0x") ? unsigned.slice(2) : unsigned).toLowerCase();
  if (!/^([0-9a-f]{2})+$/.test(text) || !text.startsWith("76"))
    throw new TempoError("unsignedTransaction must be the hex of a Tempo transaction (type 0x76), as @turnkey/viem sends it");
  // ox reads RLP lists by recursion with no limit of its own (100,000 levels took 7.5 s and overflowed
  // the stack); a Tempo transaction nests a few.
  if (rlpDepth(Buffer.from(text.slice(2), "hex"), MAX_NESTING) > MAX_NESTING)
    throw new TempoError(`unsignedTransaction nests RLP lists more than ${MAX_NESTING} levels deep: it is not a Tempo transaction`);
  const library = await tempoLibrary();
  const { TokenId, TxEnvelopeTempo } = library;
  const serialized = `0x${text}` as TxEnvelopeTempo.Serialized;
  let envelope: TxEnvelopeTempo.TxEnvelopeTempo;
  try {
    envelope = TxEnvelopeTempo.deserialize(serialized);
  } catch (error) {
    throw new TempoError(`unsignedTransaction is not a valid Tempo transaction: ${tempoProblem(error)}`);
  }
  if (envelope.signature) throw new TempoError("unsignedTransaction is already signed");
  let canonical: string;
  try {
    canonical = TxEnvelopeTempo.serialize(envelope);
  } catch (error) {
    throw new TempoError(`unsignedTransaction cannot be signed as it stands: ${tempoProblem(error)}`);
  }
  if (canonical !== serialized)
    throw new TempoError(
      "unsignedTransaction is not in the canonical encoding of the transaction it describes: send it as viem serializes it",
    );
  return {
    envelope,
    digest: hexToBytes(TxEnvelopeTempo.getSignPayload(envelope)),
    ...(envelope.feeToken === undefined ? {} : { feeToken: TokenId.toAddress(envelope.feeToken) }),
    library,
  };
}

/** The signed transaction, without 0x (the form the clients expect, as for Ethereum). */
export function serializeSignedTempo(parsed: ParsedTempoTransaction, signature: { r: string; s: string; recovery: number }): string {
  const { SignatureEnvelope, TxEnvelopeTempo } = parsed.library;
  const envelope = SignatureEnvelope.from({ r: BigInt(`0x${signature.r}`), s: BigInt(`0x${signature.s}`), yParity: signature.recovery });
  return TxEnvelopeTempo.serialize(parsed.envelope, { signature: envelope }).slice(2);
}

const checksummed = (address: string | undefined) => (address ? getAddress(address) : "");

/**
 * `tempo.tx` of the policy language. Addresses are EIP-55 checksummed, as the product's Tempo policy
 * examples write them; `input` is the call data in lower-case hex with 0x, so the product's slices
 * (`input[34..74]` is the first address argument) fall where its docs say.
 */
export function tempoKeyword(parsed: ParsedTempoTransaction, from: string): Record<string, unknown> {
  const e = parsed.envelope;
  return {
    chain_id: BigInt(e.chainId),
    from: checksummed(from),
    nonce: e.nonce ?? 0n,
    gas_limit: e.gas ?? 0n,
    max_fee_per_gas: e.maxFeePerGas ?? 0n,
    max_priority_fee_per_gas: e.maxPriorityFeePerGas ?? 0n,
    fee_token: checksummed(parsed.feeToken),
    valid_before: BigInt(e.validBefore ?? 0),
    valid_after: BigInt(e.validAfter ?? 0),
    calls: e.calls.map((call) => {
      const input = (call.data ?? "0x").toLowerCase();
      return { to: checksummed(call.to), input, function_signature: input.length >= 10 ? input.slice(0, 10) : "" };
    }),
  };
}
