// Bitcoin: a PSBT in (hex); the signer's signature added to exactly the inputs that spend from the
// address the request names (an ECDSA partial signature for P2PKH/P2WPKH/P2SH-P2WPKH/P2WSH, a
// BIP-341 key-path Schnorr signature for P2TR); the PSBT out — not finalized, as in the product.
// Inputs of other scripts the key might also unlock (a multisig it belongs to, a script-path leaf)
// are left alone: a co-signer cannot slip them in. @scure/btc-signer does the work.
import { Address, NETWORK, OutScript, TEST_NETWORK, Transaction } from "@scure/btc-signer";

export class BitcoinError extends Error {
  override name = "BitcoinError";
}

const MAX_INPUTS = 256;
const NETWORKS: Record<string, typeof NETWORK> = { MAINNET: NETWORK, TESTNET: TEST_NETWORK, SIGNET: TEST_NETWORK, REGTEST: { ...TEST_NETWORK, bech32: "bcrt" } };

/** The output script of a Bitcoin address of the given ADDRESS_FORMAT_BITCOIN_<NETWORK>_<TYPE>. */
export function bitcoinScript(format: string, address: string): Uint8Array | undefined {
  const network = /^ADDRESS_FORMAT_BITCOIN_(MAINNET|TESTNET|SIGNET|REGTEST)_/.exec(format)?.[1];
  if (!network) return undefined;
  return OutScript.encode(Address(NETWORKS[network]!).decode(address));
}

/**
 * Whether an address format is a Taproot (P2TR) one. A signature for such an address is BIP-340
 * Schnorr by its BIP-86 output key, as in the product; every other Bitcoin format (P2PKH, P2SH-P2WPKH,
 * P2WPKH, P2WSH) is ECDSA by the account's own key.
 */
export const isTaprootFormat = (format: string | undefined) =>
  format !== undefined && /^ADDRESS_FORMAT_BITCOIN_(MAINNET|TESTNET|SIGNET|REGTEST)_P2TR$/.test(format);

const same = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);

export function signPsbt(unsignedHex: string, privateKey: Uint8Array, signerName: string, scripts: Uint8Array[]): string {
  const hex = unsignedHex.startsWith("0x") ? unsignedHex.slice(2) : unsignedHex;
  if (!/^([0-9a-fA-F]{2})+$/.test(hex)) throw new BitcoinError("unsignedTransaction must be the hex of a PSBT");
  if (scripts.length === 0) throw new BitcoinError(`${signerName} has no Bitcoin address: name the key by the Bitcoin address whose inputs it signs`);
  let transaction: Transaction;
  try {
    transaction = Transaction.fromPSBT(Buffer.from(hex, "hex"));
  } catch (error) {
    throw new BitcoinError(`unsignedTransaction is not a PSBT: ${(error as Error).message}`);
  }
  if (transaction.inputsLength > MAX_INPUTS) throw new BitcoinError(`the PSBT has ${transaction.inputsLength} inputs; at most ${MAX_INPUTS} are signed per request`);
  let signed = 0;
  for (let i = 0; i < transaction.inputsLength; i++) {
    const input = transaction.getInput(i);
    const previous = input.witnessUtxo?.script ?? (input.nonWitnessUtxo && input.index !== undefined ? input.nonWitnessUtxo.outputs[input.index]?.script : undefined);
    if (!previous || !scripts.some((script) => same(script, previous))) continue;
    // Key-path only: a taproot input naming script leaves or a merkle root commits to more than the key.
    if (input.tapLeafScript?.length || input.tapMerkleRoot?.length) throw new BitcoinError(`input ${i} spends a taproot output through a script path, which this server does not sign`);
    try {
      if (transaction.signIdx(privateKey, i)) signed += 1;
    } catch (error) {
      throw new BitcoinError(`input ${i} cannot be signed: ${(error as Error).message}`);
    }
  }
  if (signed === 0) throw new BitcoinError(`no input of the PSBT is spendable by ${signerName}: each input needs its witness or previous transaction, and the script of that address`);
  return Buffer.from(transaction.toPSBT()).toString("hex");
}
