// Addresses for a public key, per ADDRESS_FORMAT_*. Hashes come from @noble/hashes, encodings from
// @scure/base, Bitcoin scripts from @scure/btc-signer, EIP-55 from viem and TON wallet contracts from
// @ton/ton; only the Stellar CRC16 (a checksum, not cryptography, and in no installed library) is
// written here.
//
// What the product documents (tkhq/docs features/wallets.mdx "Address formats and curves" and
// features/networks/*.mdx), and what we do with it:
// - COMPRESSED is offered on CURVE_SECP256K1 and CURVE_ED25519, UNCOMPRESSED on CURVE_SECP256K1 only.
//   On ed25519 the "address" is the public key itself (canton.mdx, cardano.mdx: "returns the public
//   key", usable as signWith), i.e. hex of the 32-byte key; ed25519 has no uncompressed form, so
//   UNCOMPRESSED is refused there. The docs say nothing for P-256; we give its hex key in both forms,
//   since "use ADDRESS_FORMAT_COMPRESSED if your network is not listed" is the only way to a P-256 key.
// - P2SH: default path m/49'/… (BIP-49) and the SDK's examples/with-bitcoin/src/p2sh build it as
//   p2sh(p2wpkh(pubkey)), so P2SH means P2SH-P2WPKH here.
// - P2WSH: default path m/48'/…/2'/0/0 (BIP-48 native-segwit script type) but no page names the
//   witness script for one key. We use the plain single-key script wsh(pk(K)) = <K> OP_CHECKSIG;
//   if the product turns out to use a 1-of-1 multisig instead, these addresses will differ.
// - SEI: the wallets.mdx table lists CURVE_ED25519, but sei.mdx ("derived using the SECP256k1
//   curve"), the SDK's default SEI account and the chain itself (a Cosmos SDK chain) say secp256k1.
// - TON_V3R2 / TON_V4R2 / TON_V5R1 (ed25519 only): the address of the standard wallet contract of that
//   version for the key, built by @ton/ton (the TON Foundation's library, which the product's own
//   examples/with-ton uses: WalletContractV4.create({ workchain: 0, publicKey })): workchain 0 and each
//   contract's default wallet id (698983191 for V3R2/V4R2; for V5R1 the mainnet id, network -239,
//   subwallet 0, i.e. 2147483409). The product's docs do not say which of the four user-friendly
//   spellings of that address it answers; we give the mainnet, non-bounceable, URL-safe form ("UQ…"),
//   the form TEP-0002 and wallet apps use for wallet addresses. Any spelling names the same account to
//   TON libraries (Address.parse), but signWith must be the spelling we answered.
// - SPARK_MAINNET / SPARK_REGTEST (secp256k1 only; spark.mdx: "ed25519 keys will be rejected"): the
//   Spark SDK's encodeSparkAddress, i.e. bech32m with HRP "spark" / "sparkrt" (spark.mdx's table) of
//   the SparkAddress protobuf holding only the identity key: field 1, length 33, the compressed key.
import { bech32, bech32m, base32nopad, base58, base58xrp, createBase58check, hex } from "@scure/base";
import { NETWORK, TEST_NETWORK, p2pk, p2pkh, p2sh, p2tr, p2wpkh, p2wsh } from "@scure/btc-signer";
import { ed25519 } from "@noble/curves/ed25519.js";
import { p256 } from "@noble/curves/nist.js";
import { blake2b } from "@noble/hashes/blake2.js";
import { ripemd160 } from "@noble/hashes/legacy.js";
import { sha256 } from "@noble/hashes/sha2.js";
import { keccak_256, sha3_256 } from "@noble/hashes/sha3.js";
import { concatBytes as concat } from "@noble/hashes/utils.js";
import { createRequire } from "node:module";
import { publicKeyToAddress } from "viem/accounts";
import type { Curve } from "./hd.js";
import { secp256k1 as fastSecp256k1 } from "./secp256k1.js";

const BITCOIN_NETWORKS = ["MAINNET", "TESTNET", "SIGNET", "REGTEST"] as const;
const BITCOIN_SCRIPTS = ["P2PKH", "P2SH", "P2WPKH", "P2WSH", "P2TR"] as const;
type BitcoinFormat = `ADDRESS_FORMAT_BITCOIN_${(typeof BITCOIN_NETWORKS)[number]}_${(typeof BITCOIN_SCRIPTS)[number]}`;

export type AddressFormat =
  | "ADDRESS_FORMAT_UNCOMPRESSED"
  | "ADDRESS_FORMAT_COMPRESSED"
  | "ADDRESS_FORMAT_ETHEREUM"
  | "ADDRESS_FORMAT_SOLANA"
  | "ADDRESS_FORMAT_COSMOS"
  | "ADDRESS_FORMAT_TRON"
  | "ADDRESS_FORMAT_SUI"
  | "ADDRESS_FORMAT_APTOS"
  | BitcoinFormat
  | "ADDRESS_FORMAT_SEI"
  | "ADDRESS_FORMAT_XLM"
  | "ADDRESS_FORMAT_DOGE_MAINNET"
  | "ADDRESS_FORMAT_DOGE_TESTNET"
  | "ADDRESS_FORMAT_TON_V3R2"
  | "ADDRESS_FORMAT_TON_V4R2"
  | "ADDRESS_FORMAT_TON_V5R1"
  | "ADDRESS_FORMAT_XRP"
  | "ADDRESS_FORMAT_SPARK_MAINNET"
  | "ADDRESS_FORMAT_SPARK_REGTEST";

/** The curve/format pair makes no sense, or the format is not implemented; the message lists what is. */
export class UnsupportedAddressError extends Error {
  override name = "UnsupportedAddressError";
}

/** A public key parsed once: raw 32 bytes for ed25519, both point encodings for the ECDSA curves. */
interface Key {
  raw: Uint8Array;
  compressed: Uint8Array;
  uncompressed: Uint8Array;
}

const hash160 = (data: Uint8Array) => ripemd160(sha256(data));
const base58check = createBase58check(sha256);

// Testnet and signet share prefixes (BIP-173 'tb'); regtest differs only in its bech32 prefix.
const REGTEST_NETWORK = { ...TEST_NETWORK, bech32: "bcrt" };
const BTC_NETWORK = { MAINNET: NETWORK, TESTNET: TEST_NETWORK, SIGNET: TEST_NETWORK, REGTEST: REGTEST_NETWORK };
// Dogecoin chainparams.cpp base58 prefixes; btc-signer's p2pkh takes any version byte.
const DOGE_MAINNET = { bech32: "", pubKeyHash: 0x1e, scriptHash: 0x16, wif: 0x9e };
const DOGE_TESTNET = { bech32: "", pubKeyHash: 0x71, scriptHash: 0xc4, wif: 0xf1 };

function bitcoinAddress(network: (typeof BITCOIN_NETWORKS)[number], script: (typeof BITCOIN_SCRIPTS)[number], key: Key): string {
  const net = BTC_NETWORK[network];
  const pub = key.compressed;
  switch (script) {
    case "P2PKH":
      return p2pkh(pub, net).address!;
    case "P2SH":
      return p2sh(p2wpkh(pub, net), net).address!;
    case "P2WPKH":
      return p2wpkh(pub, net).address!;
    case "P2WSH":
      return p2wsh(p2pk(pub, net), net).address!;
    case "P2TR":
      // Key-path only: btc-signer applies the BIP-86 tweak (no script tree) to the x-only key.
      return p2tr(pub.subarray(1), undefined, net).address!;
  }
}

// XRP: base58check over the ripple alphabet of 0x00 ‖ hash160(key). @scure/base's base58check is
// fixed to the bitcoin alphabet, so the 4-byte double-SHA-256 checksum is appended here.
function xrpAddress(key: Key): string {
  const payload = concat(Uint8Array.of(0x00), hash160(key.compressed));
  return base58xrp.encode(concat(payload, sha256(sha256(payload)).subarray(0, 4)));
}

// CRC-16/XMODEM (poly 0x1021, init 0): Stellar's strkey checksum. Not cryptographic, and no
// installed library exports it.
function crc16xmodem(data: Uint8Array): number {
  let crc = 0;
  for (const byte of data) {
    crc ^= byte << 8;
    for (let bit = 0; bit < 8; bit++) crc = crc & 0x8000 ? ((crc << 1) ^ 0x1021) & 0xffff : (crc << 1) & 0xffff;
  }
  return crc;
}

// SEP-0023 strkey for an ed25519 account: base32(version 6<<3 ‖ key ‖ CRC16 little-endian), "G…".
function stellarAddress(key: Key): string {
  const payload = concat(Uint8Array.of(6 << 3), key.raw);
  const crc = crc16xmodem(payload);
  return base32nopad.encode(concat(payload, Uint8Array.of(crc & 0xff, crc >> 8)));
}

// Tron: base58check(0x41 ‖ last 20 bytes of keccak256(x ‖ y)), the Ethereum account hash.
const tronAddress = (key: Key) => base58check.encode(concat(Uint8Array.of(0x41), keccak_256(key.uncompressed.subarray(1)).subarray(12)));

// Sui: 0x ‖ hex(blake2b-256(scheme flag ‖ public key)), flag 0x00 ed25519, 0x01 secp256k1 (compressed).
const suiAddress = (flag: number, pub: Uint8Array) => `0x${hex.encode(blake2b(concat(Uint8Array.of(flag), pub), { dkLen: 32 }))}`;

// TON: the wallet contract's address (hash of its code and initial data, which hold the key and the
// wallet id) on workchain 0, spelled for mainnet, non-bounceable, URL-safe.
// @ton/ton (CommonJS) is loaded on the first TON address, not at start: it brings its network client
// along, which would add a second to every process start for a format most deployments never use.
const requireFromHere = createRequire(import.meta.url);
let tonLibrary: typeof import("@ton/ton") | undefined;
const ton = () => (tonLibrary ??= requireFromHere("@ton/ton") as typeof import("@ton/ton"));
const TON_WALLETS = {
  V3R2: (publicKey: Buffer) => ton().WalletContractV3R2.create({ workchain: 0, publicKey }),
  V4R2: (publicKey: Buffer) => ton().WalletContractV4.create({ workchain: 0, publicKey }),
  V5R1: (publicKey: Buffer) => ton().WalletContractV5R1.create({ workchain: 0, publicKey }),
};
const tonAddress = (version: keyof typeof TON_WALLETS) => (key: Key) =>
  TON_WALLETS[version](Buffer.from(key.raw)).address.toString({ bounceable: false, urlSafe: true, testOnly: false });

// Spark: bech32m of the SparkAddress protobuf { identity_public_key (field 1, bytes) = compressed key }.
// Tag 0x0a (field 1, length-delimited) and length 0x21 are the whole protobuf framing of one 33-byte
// field; the Spark SDK allows 200 characters where BIP-350 stops at 90.
const SPARK_ADDRESS_LIMIT = 200;
const sparkAddress = (hrp: "spark" | "sparkrt") => (key: Key) =>
  bech32m.encode(hrp, bech32m.toWords(concat(Uint8Array.of(0x0a, key.compressed.length), key.compressed)), SPARK_ADDRESS_LIMIT);

const cosmosStyle = (prefix: string) => (key: Key) => bech32.encode(prefix, bech32.toWords(hash160(key.compressed)));

type Encoder = Partial<Record<Curve, (key: Key) => string>>;
const ECDSA_CURVES: Curve[] = ["CURVE_SECP256K1", "CURVE_P256"];
const onEcdsa = (fn: (key: Key) => string): Encoder => Object.fromEntries(ECDSA_CURVES.map((c) => [c, fn]));

const ENCODERS: Record<AddressFormat, Encoder> = {
  ADDRESS_FORMAT_UNCOMPRESSED: onEcdsa((k) => hex.encode(k.uncompressed)),
  ADDRESS_FORMAT_COMPRESSED: { ...onEcdsa((k) => hex.encode(k.compressed)), CURVE_ED25519: (k) => hex.encode(k.raw) },
  // viem hashes x ‖ y with keccak-256 and applies the EIP-55 checksum.
  ADDRESS_FORMAT_ETHEREUM: { CURVE_SECP256K1: (k) => publicKeyToAddress(`0x${hex.encode(k.uncompressed)}`) },
  ADDRESS_FORMAT_SOLANA: { CURVE_ED25519: (k) => base58.encode(k.raw) },
  ADDRESS_FORMAT_COSMOS: { CURVE_SECP256K1: cosmosStyle("cosmos") },
  ADDRESS_FORMAT_SEI: { CURVE_SECP256K1: cosmosStyle("sei") },
  ADDRESS_FORMAT_TRON: { CURVE_SECP256K1: tronAddress },
  ADDRESS_FORMAT_SUI: { CURVE_ED25519: (k) => suiAddress(0x00, k.raw), CURVE_SECP256K1: (k) => suiAddress(0x01, k.compressed) },
  // Aptos single-signer ed25519 authentication key: sha3-256(key ‖ scheme 0x00), full 32 bytes.
  ADDRESS_FORMAT_APTOS: { CURVE_ED25519: (k) => `0x${hex.encode(sha3_256(concat(k.raw, Uint8Array.of(0x00))))}` },
  ADDRESS_FORMAT_XLM: { CURVE_ED25519: stellarAddress },
  ADDRESS_FORMAT_DOGE_MAINNET: { CURVE_SECP256K1: (k) => p2pkh(k.compressed, DOGE_MAINNET).address! },
  ADDRESS_FORMAT_DOGE_TESTNET: { CURVE_SECP256K1: (k) => p2pkh(k.compressed, DOGE_TESTNET).address! },
  ADDRESS_FORMAT_XRP: { CURVE_SECP256K1: xrpAddress },
  ADDRESS_FORMAT_TON_V3R2: { CURVE_ED25519: tonAddress("V3R2") },
  ADDRESS_FORMAT_TON_V4R2: { CURVE_ED25519: tonAddress("V4R2") },
  ADDRESS_FORMAT_TON_V5R1: { CURVE_ED25519: tonAddress("V5R1") },
  ADDRESS_FORMAT_SPARK_MAINNET: { CURVE_SECP256K1: sparkAddress("spark") },
  ADDRESS_FORMAT_SPARK_REGTEST: { CURVE_SECP256K1: sparkAddress("sparkrt") },
  ...(Object.fromEntries(
    BITCOIN_NETWORKS.flatMap((network) =>
      BITCOIN_SCRIPTS.map((script) => [
        `ADDRESS_FORMAT_BITCOIN_${network}_${script}`,
        { CURVE_SECP256K1: (k: Key) => bitcoinAddress(network, script, k) },
      ]),
    ),
  ) as Record<BitcoinFormat, Encoder>),
};

export const ADDRESS_FORMATS = Object.keys(ENCODERS) as AddressFormat[];
const CURVES: Curve[] = ["CURVE_SECP256K1", "CURVE_ED25519", "CURVE_P256"];

/** Formats this server can derive for a key on `curve`. */
export function supportedFormats(curve: Curve): AddressFormat[] {
  return ADDRESS_FORMATS.filter((format) => ENCODERS[format][curve] !== undefined);
}

function parseKey(curve: Curve, publicKey: Uint8Array): Key {
  if (!(publicKey instanceof Uint8Array)) throw new TypeError("public key must be a Uint8Array");
  try {
    if (curve === "CURVE_ED25519") {
      if (publicKey.length !== 32) throw new Error("length");
      ed25519.Point.fromBytes(publicKey); // rejects encodings that are not on the curve
      return { raw: publicKey, compressed: publicKey, uncompressed: publicKey };
    }
    if (curve === "CURVE_SECP256K1") {
      // libsecp256k1 where it loads (crypto/secp256k1.ts): a few µs, against ~0.1 ms for noble's square root.
      const lib = fastSecp256k1();
      return { raw: publicKey, compressed: lib.convertPublicKey(publicKey, true), uncompressed: lib.convertPublicKey(publicKey, false) };
    }
    const point = p256.Point.fromBytes(publicKey);
    return { raw: publicKey, compressed: point.toBytes(true), uncompressed: point.toBytes(false) };
  } catch {
    const expected = curve === "CURVE_ED25519" ? "32 bytes" : "a 33-byte compressed or 65-byte uncompressed point";
    throw new TypeError(`public key is not a valid ${curve.replace("CURVE_", "")} key: expected ${expected} on the curve`);
  }
}

export function address(curve: Curve, format: AddressFormat, publicKey: Uint8Array): string {
  if (!CURVES.includes(curve)) throw new UnsupportedAddressError(`unknown curve ${String(curve)}: use one of ${CURVES.join(", ")}`);
  const encoders = ENCODERS[format] as Encoder | undefined;
  if (!encoders) throw new UnsupportedAddressError(`unknown address format ${String(format)}`);
  const encode = encoders[curve];
  if (!encode) {
    // Every format has at least one curve (the tests hold ENCODERS to that).
    const curves = CURVES.filter((c) => encoders[c]);
    throw new UnsupportedAddressError(`${format} needs ${curves.join(" or ")}. ${curve} supports: ${supportedFormats(curve).join(", ")}`);
  }
  return encode(parseKey(curve, publicKey));
}
