// Bitcoin: a PSBT in (hex), the signer's signatures added to every input its key can spend
// (ECDSA partial signatures for P2PKH/P2WPKH/P2SH-P2WPKH/P2WSH, a BIP-341 key-path Schnorr signature
// for P2TR), the PSBT out — not finalized, as in the product. @scure/btc-signer does the work.
import { Transaction } from "@scure/btc-signer";

export class BitcoinError extends Error {
  override name = "BitcoinError";
}

export function signPsbt(unsignedHex: string, privateKey: Uint8Array, signerName: string): string {
  const hex = unsignedHex.startsWith("0x") ? unsignedHex.slice(2) : unsignedHex;
  if (!/^([0-9a-fA-F]{2})+$/.test(hex)) throw new BitcoinError("unsignedTransaction must be the hex of a PSBT");
  let transaction: Transaction;
  try {
    transaction = Transaction.fromPSBT(Buffer.from(hex, "hex"));
  } catch (error) {
    throw new BitcoinError(`unsignedTransaction is not a PSBT: ${(error as Error).message}`);
  }
  const nothingToSign = new BitcoinError(`no input of the PSBT is spendable by ${signerName}: each input needs its witness or previous transaction, and a script of this key`);
  let signed: number;
  try {
    signed = transaction.sign(privateKey);
  } catch (error) {
    // btc-signer reports "No inputs signed" as an error of its own.
    if (/no inputs signed/i.test((error as Error).message)) throw nothingToSign;
    throw new BitcoinError(`the PSBT cannot be signed: ${(error as Error).message}`);
  }
  if (signed === 0) throw nothingToSign;
  return Buffer.from(transaction.toPSBT()).toString("hex");
}
