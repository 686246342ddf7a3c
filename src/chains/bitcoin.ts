// Bitcoin: a PSBT in (hex); the signer's signature added to exactly the inputs that spend from the
// address the request names (an ECDSA partial signature for P2PKH/P2WPKH/P2SH-P2WPKH/P2WSH, a
// BIP-341 key-path Schnorr signature for P2TR); the PSBT out — not finalized, as in the product.
// Inputs of other scripts the key might also unlock (a multisig it belongs to, a script-path leaf)
// are left alone: a co-signer cannot slip them in. Also `bitcoin.tx` for policies, with the
// product's field names, read from the very Transaction object that is then signed.
// @scure/btc-signer does the work.
import { schnorr } from "@noble/curves/secp256k1.js";
import { Address, DEFAULT_SEQUENCE, NETWORK, OutScript, SigHash, TEST_NETWORK, Transaction } from "@scure/btc-signer";

export class BitcoinError extends Error {
  override name = "BitcoinError";
}

type Network = typeof NETWORK;

const MAX_INPUTS = 256;
const NETWORKS: Record<string, Network> = {
  MAINNET: NETWORK,
  TESTNET: TEST_NETWORK,
  SIGNET: TEST_NETWORK,
  REGTEST: { ...TEST_NETWORK, bech32: "bcrt" },
};
const FORMAT = /^ADDRESS_FORMAT_BITCOIN_(MAINNET|TESTNET|SIGNET|REGTEST)_/;
/** A locktime below this is a block height, from it on a Unix time (BIP-65, Bitcoin Core's LOCKTIME_THRESHOLD). */
const LOCKTIME_THRESHOLD = 500_000_000;
/** `address_type` of an output, by @scure/btc-signer's name for its script: the product's names of the address derivation types. */
const ADDRESS_TYPES: Record<string, string> = { pkh: "P2PKH", sh: "P2SH", wpkh: "P2WPKH", wsh: "P2WSH", tr: "P2TR", p2a: "P2A" };

/** The output script of a Bitcoin address of the given ADDRESS_FORMAT_BITCOIN_<NETWORK>_<TYPE>. */
function bitcoinScript(format: string, address: string): Uint8Array | undefined {
  const network = FORMAT.exec(format)?.[1];
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
const hexOf = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");

/** A PSBT read once: what policies see (`keyword`) and what `signPsbt` signs both come from `transaction`. */
export interface ParsedPsbt {
  transaction: Transaction;
  /** The output scripts of the addresses the request names: inputs spending one of them are signed. */
  scripts: Uint8Array[];
  /** `bitcoin.tx` of the policy language. */
  keyword: Record<string, unknown>;
}

/**
 * Reads a PSBT for the addresses `signWith` stands for. Output addresses are written for those
 * addresses' network (mainnet `bc1…`/`1…`/`3…`; testnet and signet `tb1…`/`m…`/`n…`/`2…`; regtest
 * `bcrt1…`), the network a policy author names them in. A key whose addresses span networks would
 * make that ambiguous, so it must be named by one address.
 */
export function parsePsbt(unsignedHex: string, addresses: { format: string; address: string }[], signerName: string): ParsedPsbt {
  const hex = unsignedHex.startsWith("0x") ? unsignedHex.slice(2) : unsignedHex;
  if (!/^([0-9a-fA-F]{2})+$/.test(hex)) throw new BitcoinError("unsignedTransaction must be the hex of a PSBT");
  const bitcoin = addresses.filter(({ format }) => FORMAT.test(format));
  if (bitcoin.length === 0)
    throw new BitcoinError(`${signerName} has no Bitcoin address: name the key by the Bitcoin address whose inputs it signs`);
  const networks = new Map<Network, string>();
  for (const { format } of bitcoin) {
    const name = FORMAT.exec(format)![1]!;
    networks.set(NETWORKS[name]!, name);
  }
  if (networks.size > 1) {
    throw new BitcoinError(
      `${signerName} has Bitcoin addresses of several networks (${[...networks.values()].join(", ")}): ` +
        "name the key by the address whose inputs it signs, so that policies see output addresses of one network",
    );
  }
  const [network] = networks.keys();
  let transaction: Transaction;
  try {
    transaction = Transaction.fromPSBT(Buffer.from(hex, "hex"));
  } catch (error) {
    throw new BitcoinError(`unsignedTransaction is not a PSBT this server can sign: ${psbtProblem(error)}`);
  }
  if (transaction.inputsLength > MAX_INPUTS)
    throw new BitcoinError(`the PSBT has ${transaction.inputsLength} inputs; at most ${MAX_INPUTS} are signed per request`);
  const scripts = bitcoin.map(({ format, address }) => bitcoinScript(format, address)!);
  return { transaction, scripts, keyword: transactionKeyword(transaction, network!) };
}

/**
 * What @scure/btc-signer found wrong in a PSBT, in the request's terms (its own messages name its
 * internals). Its errors carry no code, so the checks a well-formed PSBT can fail are told apart by
 * their text; any other failure, or a reworded one, is told as not decoding.
 */
function psbtProblem(error: unknown): string {
  const message = error instanceof Error ? error.message : "";
  if (/wrong txid/.test(message)) return "an input's nonWitnessUtxo (the previous transaction) does not hash to the txid the input spends";
  if (/witnessUtxo different from nonWitnessUtxo/.test(message))
    return "an input's witnessUtxo is not the output its nonWitnessUtxo holds at the index it spends";
  if (/not in nonWitnessUtxo|output index/.test(message))
    return "an input spends an output index its nonWitnessUtxo (the previous transaction) does not have";
  if (/Taproot|tapInternalKey|tapMerkleRoot/.test(message))
    return "an input's Taproot fields (tapInternalKey, tapMerkleRoot, tapLeafScript) do not match the output it spends";
  return "its bytes do not decode as a PSBT (BIP-174 or BIP-370): send the hex of the binary PSBT, which starts with 70736274ff";
}

const SIGHASH_NAMES: Record<number, string> = Object.fromEntries(
  Object.entries(SigHash).map(([name, value]) => [value, `SIGHASH_${name}`]),
);

/** The output an input spends, as the PSBT states it (@scure/btc-signer has checked that a previous
 * transaction hashes to the input's txid, and that a witnessUtxo beside it agrees). */
function previousOutput(input: ReturnType<Transaction["getInput"]>): { script: Uint8Array; amount: bigint } | undefined {
  if (input.nonWitnessUtxo && input.index !== undefined) return input.nonWitnessUtxo.outputs[input.index];
  return input.witnessUtxo;
}

/** An output's address in `network`, and its type; a script with no address form (OP_RETURN data,
 * bare public keys and multisig, unknown witness versions, bytes that are no script) has neither. */
function addressOf(script: Uint8Array, network: Network): { address: string; address_type: string } {
  try {
    const decoded = OutScript.decode(script);
    const type = ADDRESS_TYPES[decoded.type];
    if (type) return { address: Address(network).encode(decoded), address_type: type };
  } catch {
    // not a script @scure/btc-signer can read: no address
  }
  return { address: "", address_type: "" };
}

/**
 * `bitcoin.tx` of the policy language: every field the signature (SIGHASH_ALL, or Taproot's
 * SIGHASH_DEFAULT, the only ones signed) commits to — version, each input's outpoint and sequence,
 * each output, the locktime — and the fee. Amounts are satoshis, as exact integers.
 */
function transactionKeyword(transaction: Transaction, network: Network): Record<string, unknown> {
  let fee = 0n;
  const inputs = [];
  for (let i = 0; i < transaction.inputsLength; i++) {
    const input = transaction.getInput(i);
    if (!input.txid || input.index === undefined) throw new BitcoinError(`input ${i} names no previous output`);
    const previous = previousOutput(input);
    // Policies are shown the fee: without every input's value it would be a guess.
    if (!previous) {
      throw new BitcoinError(
        `input ${i} states neither its previous output (witnessUtxo) nor its previous transaction (nonWitnessUtxo): ` +
          "policies see the fee, which needs every input's value",
      );
    }
    fee += previous.amount;
    inputs.push({ tx_id: hexOf(input.txid), vout: BigInt(input.index), sequence: BigInt(input.sequence ?? DEFAULT_SEQUENCE) });
  }
  const outputs = [];
  for (let i = 0; i < transaction.outputsLength; i++) {
    const { script, amount } = transaction.getOutput(i);
    if (!script || amount === undefined) throw new BitcoinError(`output ${i} has no script or no amount`);
    fee -= amount;
    outputs.push({ value: amount, script_pubkey: hexOf(script), ...addressOf(script, network) });
  }
  const lockTime = transaction.lockTime;
  return {
    version: String(transaction.version),
    inputs,
    outputs,
    locktime: { amount: BigInt(lockTime), type: lockTime < LOCKTIME_THRESHOLD ? "Blocks" : "Seconds" },
    fee,
  };
}

/** Signs the inputs of `parsed` that spend from its scripts, and returns the PSBT as hex. */
export function signPsbt(parsed: ParsedPsbt, privateKey: Uint8Array, signerName: string): string {
  const { transaction, scripts } = parsed;
  let signed = 0;
  for (let i = 0; i < transaction.inputsLength; i++) {
    const input = transaction.getInput(i);
    const previous = previousOutput(input)?.script;
    if (!previous || !scripts.some((script) => same(script, previous))) continue;
    // Key-path only: a taproot input naming script leaves or a merkle root commits to more than the key.
    if (input.tapLeafScript?.length || input.tapMerkleRoot?.length)
      throw new BitcoinError(`input ${i} spends a taproot output through a script path, which this server does not sign`);
    // A key-path input of our own P2TR address needs no tapInternalKey from its builder: the address
    // is the BIP-86 output key of this key (no script tree), so the internal key is this key's own.
    if (!input.tapInternalKey && OutScript.decode(previous).type === "tr") {
      transaction.updateInput(i, { tapInternalKey: schnorr.getPublicKey(privateKey) }, true);
    }
    // Only each input type's default sighash (ALL; Taproot's DEFAULT) is signed, so the signature
    // commits to every input and output policies were shown; a PSBT asking another is refused.
    const sighash = input.sighashType;
    const taproot = OutScript.decode(previous).type === "tr";
    if (sighash !== undefined && sighash !== (taproot ? SigHash.DEFAULT : SigHash.ALL))
      throw new BitcoinError(
        `input ${i} asks for ${SIGHASH_NAMES[sighash] ?? `sighash type 0x${sighash.toString(16)}`}: only ` +
          `${taproot ? "SIGHASH_DEFAULT (a Taproot input's default)" : "SIGHASH_ALL"} is signed, so that the signature covers every input and output policies saw`,
      );
    try {
      if (transaction.signIdx(privateKey, i)) signed += 1;
    } catch {
      throw new BitcoinError(
        `input ${i} cannot be signed with this key: its script needs what the PSBT does not give (a P2SH input's redeemScript, ` +
          "a P2WSH input's witnessScript), or names another key",
      );
    }
  }
  if (signed === 0)
    throw new BitcoinError(
      `no input of the PSBT is spendable by ${signerName}: each input needs its witness or previous transaction, and the script of that address`,
    );
  return Buffer.from(transaction.toPSBT()).toString("hex");
}
