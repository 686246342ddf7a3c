// HD wallet plumbing: BIP-39 mnemonics, BIP-32 paths and key derivation per curve. Every primitive
// comes from a library: @scure/bip39 (wordlists, checksums), node:crypto (the seed's PBKDF2, OpenSSL's:
// 7x @scure/bip39's pure-JS one, the largest cost of create_wallet; its asynchronous form runs on
// libuv's threads), secp256k1 BIP-32 on libsecp256k1 (the binding signatures use, crypto/secp256k1.ts:
// its tweak-add and public key, node:crypto's HMAC-SHA512; about 20x @scure/bip32's pure-JS derivation
// of m/44'/60'/0'/0/0 here) with @scure/bip32 where libsecp256k1 does not load, and as the oracle tests
// hold the fast one to; SLIP-10 for ed25519 and P-256 composed from node:crypto (HMAC-SHA512, OpenSSL's
// public keys) and, for P-256, @noble/curves' scalar field (micro-key-producer's slip10, pure
// JavaScript, is the ed25519 oracle in the tests; no library implements SLIP-10 P-256); @noble/curves
// for standalone keys' randomness and range checks.
//
// What the product documents (tkhq/docs features/wallets.mdx, networks/*.mdx, public_api.swagger.json):
// wallets are BIP-39 seeds of 12/15/18/21/24 words (default 12); "the Wallet seed and Account curve
// are used to create a root key pair", then the BIP-32 path derives the account key. It names the
// curves (SECP256K1, ED25519, P256) but never says which HD scheme P-256 accounts use; we use SLIP-10.
import crypto from "node:crypto";
import { HDKey as Bip32Key } from "@scure/bip32";
import * as bip39 from "@scure/bip39";
import { wordlist as czech } from "@scure/bip39/wordlists/czech.js";
import { wordlist as english } from "@scure/bip39/wordlists/english.js";
import { wordlist as french } from "@scure/bip39/wordlists/french.js";
import { wordlist as italian } from "@scure/bip39/wordlists/italian.js";
import { wordlist as japanese } from "@scure/bip39/wordlists/japanese.js";
import { wordlist as korean } from "@scure/bip39/wordlists/korean.js";
import { wordlist as simplifiedChinese } from "@scure/bip39/wordlists/simplified-chinese.js";
import { wordlist as spanish } from "@scure/bip39/wordlists/spanish.js";
import { wordlist as traditionalChinese } from "@scure/bip39/wordlists/traditional-chinese.js";
import { ed25519 } from "@noble/curves/ed25519.js";
import { p256 } from "@noble/curves/nist.js";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { bytesToNumberBE } from "@noble/curves/utils.js";
import { concatBytes, utf8ToBytes } from "@noble/hashes/utils.js";
import { secp256k1 as fastSecp256k1, type Secp256k1 } from "./secp256k1.js";

export type Curve = "CURVE_SECP256K1" | "CURVE_ED25519" | "CURVE_P256";

export type MnemonicLanguage =
  | "MNEMONIC_LANGUAGE_ENGLISH"
  | "MNEMONIC_LANGUAGE_SIMPLIFIED_CHINESE"
  | "MNEMONIC_LANGUAGE_TRADITIONAL_CHINESE"
  | "MNEMONIC_LANGUAGE_CZECH"
  | "MNEMONIC_LANGUAGE_FRENCH"
  | "MNEMONIC_LANGUAGE_ITALIAN"
  | "MNEMONIC_LANGUAGE_JAPANESE"
  | "MNEMONIC_LANGUAGE_KOREAN"
  | "MNEMONIC_LANGUAGE_SPANISH";

export interface KeyPair {
  privateKey: Uint8Array;
  /** secp256k1 / P-256: 33-byte compressed point; ed25519: the 32-byte key. */
  publicKey: Uint8Array;
}

/** Anything wrong with a mnemonic, a path, a seed or key material; the message says how to fix it. */
export class DerivationError extends Error {
  override name = "DerivationError";
}

// English first: it is the default, and detection reports the first list a phrase fits.
const WORDLISTS: Record<MnemonicLanguage, string[]> = {
  MNEMONIC_LANGUAGE_ENGLISH: english,
  MNEMONIC_LANGUAGE_SIMPLIFIED_CHINESE: simplifiedChinese,
  MNEMONIC_LANGUAGE_TRADITIONAL_CHINESE: traditionalChinese,
  MNEMONIC_LANGUAGE_CZECH: czech,
  MNEMONIC_LANGUAGE_FRENCH: french,
  MNEMONIC_LANGUAGE_ITALIAN: italian,
  MNEMONIC_LANGUAGE_JAPANESE: japanese,
  MNEMONIC_LANGUAGE_KOREAN: korean,
  MNEMONIC_LANGUAGE_SPANISH: spanish,
};
export const MNEMONIC_LANGUAGES = Object.keys(WORDLISTS) as MnemonicLanguage[];

const WORD_COUNTS = [12, 15, 18, 21, 24] as const;
export type MnemonicLength = (typeof WORD_COUNTS)[number];

function wordlistFor(language: MnemonicLanguage): string[] {
  const list = WORDLISTS[language];
  if (!list) throw new DerivationError(`unknown mnemonic language ${String(language)}: use one of ${MNEMONIC_LANGUAGES.join(", ")}`);
  return list;
}

export function generateMnemonic(words: MnemonicLength = 12, language: MnemonicLanguage = "MNEMONIC_LANGUAGE_ENGLISH"): string {
  if (!WORD_COUNTS.includes(words)) throw new DerivationError(`a mnemonic has 12, 15, 18, 21 or 24 words, not ${words}`);
  // 11 bits per word, one checksum bit per 32 bits of entropy: 12 words carry 128 bits, 24 carry 256.
  return bip39.generateMnemonic(wordlistFor(language), (words / 3) * 32);
}

// BIP-39 hashes the NFKD form of the sentence. Collapsing runs of whitespace (which also turns the
// Japanese ideographic space into the ASCII one, exactly as NFKD does) lets a pasted phrase with a
// stray space or newline give the same seed as its canonical spelling instead of silently another.
function normalizeMnemonic(mnemonic: string): string {
  if (typeof mnemonic !== "string") throw new DerivationError("mnemonic must be a string of words separated by spaces");
  return mnemonic.normalize("NFKD").trim().split(/\s+/u).join(" ");
}

/** Why the phrase is not a BIP-39 mnemonic in `language` (any supported list when omitted), or null. */
function mnemonicProblem(mnemonic: string, language?: MnemonicLanguage): string | null {
  const phrase = normalizeMnemonic(mnemonic);
  const words = phrase === "" ? [] : phrase.split(" ");
  if (!(WORD_COUNTS as readonly number[]).includes(words.length)) {
    return `mnemonic has ${words.length} words; a BIP-39 mnemonic has 12, 15, 18, 21 or 24`;
  }
  const languages = language ? [language] : MNEMONIC_LANGUAGES;
  for (const lang of languages) if (bip39.validateMnemonic(phrase, wordlistFor(lang))) return null;
  // The closest list decides the message: it knows every word (so the checksum failed), most words
  // (so name the misspelt ones), or too few to call it that language.
  const where = language ? `the ${languageName(language)} wordlist` : "any supported wordlist";
  let best: { lang: MnemonicLanguage; unknown: string[] } | undefined;
  for (const lang of languages) {
    const list = new Set(wordlistFor(lang));
    const unknown = words.filter((w) => !list.has(w));
    if (!best || unknown.length < best.unknown.length) best = { lang, unknown };
  }
  if (best && best.unknown.length === 0) {
    return `mnemonic words are all in the ${languageName(best.lang)} wordlist but the checksum does not match: a word is wrong or out of order`;
  }
  if (best && best.unknown.length < words.length / 2) {
    // Positions, never the words: a mnemonic is a secret, and this message may reach a log.
    const positions = best.unknown.map((w) => words.indexOf(w) + 1);
    return `mnemonic word${positions.length > 1 ? "s" : ""} at position${positions.length > 1 ? "s" : ""} ${positions.join(", ")} ${positions.length > 1 ? "are" : "is"} not in ${language ? where : `the ${languageName(best.lang)} wordlist`}; check the spelling`;
  }
  return `mnemonic is not made of words from ${where}`;
}

const languageName = (language: MnemonicLanguage) => language.replace("MNEMONIC_LANGUAGE_", "").toLowerCase().replace("_", " ");

/** True when the phrase is a valid BIP-39 mnemonic (word list and checksum) in `language`, or in
 * any supported language when it is omitted; use detectMnemonicLanguage to learn which. */
export function validateMnemonic(mnemonic: string, language?: MnemonicLanguage): boolean {
  try {
    return mnemonicProblem(mnemonic, language) === null;
  } catch {
    return false;
  }
}

/** The wordlist a valid mnemonic is written in, or undefined when it is valid in none. A phrase
 * valid in several lists (they share a few words) reports the first in MNEMONIC_LANGUAGES order. */
export function detectMnemonicLanguage(mnemonic: string): MnemonicLanguage | undefined {
  const phrase = normalizeMnemonic(mnemonic);
  return MNEMONIC_LANGUAGES.find((lang) => bip39.validateMnemonic(phrase, WORDLISTS[lang]));
}

/** The 64-byte BIP-39 seed. Refuses phrases that fail the checksum: BIP-39 would still hash them,
 * but a typo would then silently open an empty wallet instead of the user's. */
export function mnemonicToSeed(mnemonic: string, passphrase = ""): Uint8Array {
  const problem = mnemonicProblem(mnemonic);
  if (problem) throw new DerivationError(problem);
  return bip39Seed(normalizeMnemonic(mnemonic), passphrase);
}

/** BIP-39's seed: PBKDF2-HMAC-SHA512, 2048 rounds, 64 bytes, of the NFKD sentence with the salt
 * "mnemonic" + the NFKD passphrase; what @scure/bip39's mnemonicToSeedSync computes (a test holds
 * them to the same bytes and to the BIP-39 vectors), by OpenSSL. */
export function bip39Seed(normalizedMnemonic: string, passphrase = ""): Uint8Array {
  const seed = crypto.pbkdf2Sync(...pbkdf2Inputs(normalizedMnemonic, passphrase), 2048, 64, "sha512");
  return new Uint8Array(seed.buffer, seed.byteOffset, seed.length);
}

function pbkdf2Inputs(normalizedMnemonic: string, passphrase: string): [Buffer, Buffer] {
  if (typeof passphrase !== "string") throw new DerivationError("passphrase must be a string");
  return [Buffer.from(normalizedMnemonic.normalize("NFKD"), "utf8"), Buffer.from(`mnemonic${passphrase}`.normalize("NFKD"), "utf8")];
}

/** mnemonicToSeed, its PBKDF2 on one of libuv's threads: the event loop serves other requests for the
 * millisecond or two it takes (what work before an activity's transaction uses; the same bytes). */
export async function mnemonicToSeedAsync(mnemonic: string, passphrase = ""): Promise<Uint8Array> {
  const problem = mnemonicProblem(mnemonic);
  if (problem) throw new DerivationError(problem);
  return bip39SeedAsync(normalizeMnemonic(mnemonic), passphrase);
}

/** bip39Seed on one of libuv's threads (for a phrase already valid, such as one just generated). */
export async function bip39SeedAsync(normalizedMnemonic: string, passphrase = ""): Promise<Uint8Array> {
  const [password, salt] = pbkdf2Inputs(normalizedMnemonic, passphrase);
  const seed = await new Promise<Buffer>((resolve, reject) =>
    crypto.pbkdf2(password, salt, 2048, 64, "sha512", (error, key) => (error ? reject(error) : resolve(key))),
  );
  return new Uint8Array(seed.buffer, seed.byteOffset, seed.length);
}

export const HARDENED = 0x80000000;
// BIP-32 allows 255 levels; real paths use 3 to 6. Each level costs a derivation while the
// organization's lock is held, so a bound keeps one request from holding it for long.
const MAX_DEPTH = 16;
const PATH_EXAMPLE = "path must look like m/44'/60'/0'/0/0";

/** BIP-32 path to child indexes (hardened ones have 2^31 added). Accepts ', h and H as markers. */
export function parsePath(path: string): number[] {
  if (typeof path !== "string" || !/^m(\/|$)/.test(path)) {
    throw new DerivationError(`${PATH_EXAMPLE} (got ${JSON.stringify(path)})`);
  }
  if (path === "m") return [];
  const steps = path.slice(2).split("/");
  if (steps.length > MAX_DEPTH) throw new DerivationError(`path is ${steps.length} steps deep; BIP-32 allows at most ${MAX_DEPTH} here`);
  return steps.map((step) => {
    const match = /^(\d+)(['hH]?)$/.exec(step);
    if (!match) {
      throw new DerivationError(`path step ${JSON.stringify(step)} is not an index: ${PATH_EXAMPLE}, with ' or h after hardened steps`);
    }
    const index = Number(match[1]);
    if (!Number.isSafeInteger(index) || index >= HARDENED) {
      throw new DerivationError(
        `path step ${match[1]} is out of range: each index must be below 2^31 (${HARDENED}); write a hardened step as 0' rather than adding 2^31`,
      );
    }
    return match[2] ? index + HARDENED : index;
  });
}

const formatPath = (indexes: number[]) => ["m", ...indexes.map((i) => (i >= HARDENED ? `${i - HARDENED}'` : String(i)))].join("/");

/** The compressed P-256 public key of a valid private key, by OpenSSL (node:crypto's ECDH): ~25x
 * @noble/curves' point multiplication here, the same SEC 1 bytes. */
export function p256PublicKey(privateKey: Uint8Array): Uint8Array {
  const ecdh = crypto.createECDH("prime256v1");
  ecdh.setPrivateKey(privateKey);
  return new Uint8Array(ecdh.getPublicKey(null, "compressed"));
}

/** The ed25519 public key of a 32-byte private key (RFC 8032's seed), by OpenSSL (node:crypto): a JWK
 * with only `d` (as signEd25519 imports one; Node derives the public key itself). */
export function ed25519PublicKey(privateKey: Uint8Array): Uint8Array {
  const key = crypto.createPrivateKey({
    key: { kty: "OKP", crv: "Ed25519", d: Buffer.from(privateKey.buffer, privateKey.byteOffset, 32).toString("base64url"), x: "" },
    format: "jwk",
  });
  return new Uint8Array(Buffer.from(crypto.createPublicKey(key).export({ format: "jwk" }).x!, "base64url"));
}

// SLIP-10 for NIST P-256 (satoshilabs/slips slip-0010.md), composed from node:crypto (HMAC-SHA512,
// and OpenSSL's P-256 public keys) and @noble/curves (the scalar field mod n): no well-kept library
// implements it (@scure/bip32 is secp256k1 only, micro-key-producer's slip10 ed25519 only), so only
// the SLIP-10 steps are written here.
interface Slip10P256Key {
  scalar: bigint;
  chainCode: Uint8Array;
}

const P256_ORDER = p256.Point.Fn.ORDER;
const NIST256P1_SEED_KEY = utf8ToBytes("Nist256p1 seed");
const ED25519_SEED_KEY = utf8ToBytes("ed25519 seed");

function ser32(index: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, index, false);
  return out;
}

/** Master key: I = HMAC-SHA512("Nist256p1 seed", S); while I_L is 0 or >= n, S := I and repeat. */
function slip10P256Master(seed: Uint8Array): Slip10P256Key {
  let data = seed;
  for (;;) {
    const i = hmacSha512(NIST256P1_SEED_KEY, data);
    const scalar = bytesToNumberBE(i.subarray(0, 32));
    if (scalar !== 0n && scalar < P256_ORDER) return { scalar, chainCode: i.slice(32) };
    data = i;
  }
}

/** CKDpriv: hardened steps hash 0x00 || ser256(k), normal steps serP(point(k)); when I_L >= n or
 * the child is 0, SLIP-10 (unlike BIP-32, which skips the index) rehashes 0x01 || I_R || ser32(i). */
function slip10P256Child(parent: Slip10P256Key, index: number): Slip10P256Key {
  const parentBytes = p256.Point.Fn.toBytes(parent.scalar);
  const head = index >= HARDENED ? concatBytes(new Uint8Array([0]), parentBytes) : p256PublicKey(parentBytes);
  let i = hmacSha512(parent.chainCode, head, ser32(index));
  for (;;) {
    const tweak = bytesToNumberBE(i.subarray(0, 32));
    const scalar = p256.Point.Fn.create(tweak + parent.scalar);
    if (tweak < P256_ORDER && scalar !== 0n) return { scalar, chainCode: i.slice(32) };
    i = hmacSha512(parent.chainCode, new Uint8Array([1]), i.subarray(32), ser32(index));
  }
}

/** The SLIP-10 nist256p1 key at `indexes` (from parsePath) with its chain code; the chain code is
 * exported for the spec's test vectors, the server only needs the key pair. */
export function slip10P256Derive(seed: Uint8Array, indexes: number[]): KeyPair & { chainCode: Uint8Array } {
  let key = slip10P256Master(seed);
  for (const index of indexes) key = slip10P256Child(key, index);
  const privateKey = p256.Point.Fn.toBytes(key.scalar);
  return { privateKey, publicKey: p256PublicKey(privateKey), chainCode: key.chainCode };
}

// BIP-32 for secp256k1 on libsecp256k1 (bitcoin/bips bip-0032.mediawiki, "Private parent key → private
// child key"): each step is node:crypto's HMAC-SHA512 and the library's tweak-add (child = I_L + k_par
// mod n, refused when I_L >= n or the child is zero) and, for a non-hardened step, the parent's public
// key; no curve arithmetic here. @scure/bip32 computes the same (a property test compares them).
interface Bip32NativeNode {
  privateKey: Uint8Array;
  chainCode: Uint8Array;
  /** The compressed public key, made when a non-hardened child or the caller first needs it. */
  publicKey?: Uint8Array;
}

/** The implementations that can add to a private key (libsecp256k1, native or WebAssembly). */
type TweakingSecp256k1 = Secp256k1 & Required<Pick<Secp256k1, "privateKeyTweakAdd">>;

const BITCOIN_SEED_KEY = Buffer.from("Bitcoin seed", "utf8");
const hmacSha512 = (key: Uint8Array, ...data: Uint8Array[]) => {
  const mac = crypto.createHmac("sha512", key);
  for (const part of data) mac.update(part);
  return new Uint8Array(mac.digest());
};

function bip32NativeMaster(lib: TweakingSecp256k1, seed: Uint8Array): Bip32NativeNode {
  const i = hmacSha512(BITCOIN_SEED_KEY, seed);
  const privateKey = i.slice(0, 32);
  // I_L must be a key (1 .. n-1); adding zero checks that with the library's own range check.
  if (!lib.privateKeyTweakAdd(privateKey, new Uint8Array(32)))
    throw new DerivationError("BIP-32 has no master key for this seed (I_L is out of range)");
  return { privateKey, chainCode: i.slice(32) };
}

function bip32NativePublicKey(lib: TweakingSecp256k1, node: Bip32NativeNode): Uint8Array {
  node.publicKey ??= lib.publicKey(node.privateKey, true);
  return node.publicKey;
}

function bip32NativeChild(lib: TweakingSecp256k1, parent: Bip32NativeNode, index: number, path: string): Bip32NativeNode {
  const head = index >= HARDENED ? concatBytes(new Uint8Array([0]), parent.privateKey) : bip32NativePublicKey(lib, parent);
  const i = hmacSha512(parent.chainCode, head, ser32(index));
  const privateKey = lib.privateKeyTweakAdd(parent.privateKey, i.subarray(0, 32));
  // Only when I_L >= n or the child is zero (odds ~2^-127); BIP-32 says skip the index.
  if (!privateKey) throw new DerivationError(`BIP-32 has no key at ${path} (the derived key is out of range); use the next index`);
  return { privateKey, chainCode: i.slice(32) };
}

// SLIP-10 for ed25519 (satoshilabs/slips slip-0010.md): hardened steps only, each I = HMAC-SHA512(c,
// 0x00 ‖ k ‖ ser32(i)), the child's key I_L and chain code I_R; the public key is OpenSSL's. Every
// step is node:crypto's: ~20x micro-key-producer's slip10 (pure JavaScript, which computes each
// level's public key) here; micro-key-producer stays as the oracle the tests hold this to.
interface Slip10Ed25519Node {
  privateKey: Uint8Array;
  chainCode: Uint8Array;
}

function slip10Ed25519Master(seed: Uint8Array): Slip10Ed25519Node {
  const i = hmacSha512(ED25519_SEED_KEY, seed);
  return { privateKey: i.slice(0, 32), chainCode: i.slice(32) };
}

function slip10Ed25519Child(parent: Slip10Ed25519Node, index: number): Slip10Ed25519Node {
  const i = hmacSha512(parent.chainCode, new Uint8Array([0]), parent.privateKey, ser32(index));
  return { privateKey: i.slice(0, 32), chainCode: i.slice(32) };
}

/** A node of one curve's tree: secp256k1 (libsecp256k1, or @scure/bip32), ed25519 and P-256 (SLIP-10 above). */
type TreeNode = Bip32NativeNode | Bip32Key | Slip10Ed25519Node | Slip10P256Key;

/**
 * One wallet seed's keys, derived along their paths with each node kept: the accounts of one request
 * share most of their path (m/44'/60'/0'/0/0, …/1, …/2), and every level of a path costs a point
 * multiplication, so deriving the shared levels once makes an account of such a request cost one level
 * instead of five. The nodes hold private keys: a tree lives as long as the request deriving from it.
 * Each level is the library's own child derivation, exactly as a fresh derivation takes it.
 */
export class HdKeyTree {
  private readonly nodes = new Map<string, TreeNode>();
  /** The secp256k1 library that derives this tree's keys, when it can (chosen once: the nodes are its). */
  private readonly secp256k1: TweakingSecp256k1 | undefined;

  /** `secp256k1`: the library for secp256k1 keys; the process's choice (crypto/secp256k1.ts) by
   * default, @scure/bip32 when that one cannot add to a key (pure JavaScript) or when `"scure"`. */
  constructor(
    private readonly seed: Uint8Array,
    secp256k1: Secp256k1 | "scure" = fastSecp256k1(),
  ) {
    if (!(seed instanceof Uint8Array) || seed.length < 16 || seed.length > 64) {
      throw new DerivationError("seed must be 16 to 64 bytes (a BIP-39 seed is 64)");
    }
    this.secp256k1 = secp256k1 !== "scure" && secp256k1.privateKeyTweakAdd ? (secp256k1 as TweakingSecp256k1) : undefined;
  }

  derive(curve: Curve, path: string): KeyPair {
    const indexes = parsePath(path);
    switch (curve) {
      case "CURVE_SECP256K1": {
        const lib = this.secp256k1;
        if (lib) {
          const node = this.node(
            curve,
            indexes,
            () => bip32NativeMaster(lib, this.seed),
            (parent: Bip32NativeNode, index) => bip32NativeChild(lib, parent, index, path),
          );
          return { privateKey: Uint8Array.from(node.privateKey), publicKey: Uint8Array.from(bip32NativePublicKey(lib, node)) };
        }
        const key = this.node(
          curve,
          indexes,
          () => Bip32Key.fromMasterSeed(this.seed),
          (parent: Bip32Key, index) => {
            try {
              return parent.deriveChild(index);
            } catch {
              // Only reachable when I_L >= n or the child is zero (odds ~2^-127); BIP-32 says skip the index.
              throw new DerivationError(`BIP-32 has no key at ${path} (the derived key is out of range); use the next index`);
            }
          },
        );
        return { privateKey: Uint8Array.from(key.privateKey!), publicKey: Uint8Array.from(key.publicKey!) };
      }
      case "CURVE_ED25519": {
        // SLIP-10 ed25519 defines only hardened children. The product's docs list ed25519 paths with
        // plain steps (wallets.mdx: Solana m/44'/501'/0'/0, Sui m/44'/784'/0'/0/0; canton.mdx creates
        // m/44'/0'/0'/0/0) without saying how it treats them, so rather than guess (and hand out an
        // address the product would not) we refuse and name the all-hardened spelling.
        if (indexes.some((i) => i < HARDENED)) {
          throw new DerivationError(
            `ed25519 derivation (SLIP-10) supports only hardened steps: write ${formatPath(indexes.map((i) => (i >= HARDENED ? i : i + HARDENED)))}`,
          );
        }
        const key = this.node(curve, indexes, () => slip10Ed25519Master(this.seed), slip10Ed25519Child);
        return { privateKey: Uint8Array.from(key.privateKey), publicKey: ed25519PublicKey(key.privateKey) };
      }
      case "CURVE_P256": {
        // SLIP-10 nist256p1: the only standard HD scheme for P-256. The product names no scheme for
        // its P-256 wallet accounts (its SDK's jwtSigning() helper creates them at m/44'/1'/0'/0/0), so
        // equality with its derivation is unconfirmed; see docs/wallets.md.
        const key = this.node(curve, indexes, () => slip10P256Master(this.seed), slip10P256Child);
        const privateKey = p256.Point.Fn.toBytes(key.scalar);
        return { privateKey, publicKey: p256PublicKey(privateKey) };
      }
      default:
        throw new DerivationError(`unknown curve ${String(curve)}: use CURVE_SECP256K1, CURVE_ED25519 or CURVE_P256`);
    }
  }

  /** The node at `indexes`, from the deepest one already derived on the way. */
  private node<N extends TreeNode>(curve: Curve, indexes: number[], master: () => N, child: (parent: N, index: number) => N): N {
    const at = (depth: number) => `${curve} ${indexes.slice(0, depth).join("/")}`;
    let depth = indexes.length;
    while (depth > 0 && !this.nodes.has(at(depth))) depth--;
    let node = (this.nodes.get(at(depth)) as N | undefined) ?? master();
    if (depth === 0) this.nodes.set(at(0), node);
    for (; depth < indexes.length; depth++) {
      node = child(node, indexes[depth]!);
      this.nodes.set(at(depth + 1), node);
    }
    return node;
  }
}

/** The key pair at `path` of `seed` on `curve` (one derivation; HdKeyTree derives many). */
export function deriveKeyPair(seed: Uint8Array, curve: Curve, path: string): KeyPair {
  return new HdKeyTree(seed).derive(curve, path);
}

/** Public key for a standalone private key (32 bytes on every curve). */
export function keyPairFromPrivateKey(curve: Curve, privateKey: Uint8Array): KeyPair {
  if (!(privateKey instanceof Uint8Array) || privateKey.length !== 32) {
    throw new DerivationError("private key must be 32 bytes");
  }
  const copy = Uint8Array.from(privateKey);
  switch (curve) {
    case "CURVE_SECP256K1":
    case "CURVE_P256": {
      const ecdsa = curve === "CURVE_SECP256K1" ? secp256k1 : p256;
      // Zero and values >= the group order are not keys; the library checks the range.
      if (!ecdsa.utils.isValidSecretKey(copy)) {
        throw new DerivationError(`private key is not a valid ${curve.replace("CURVE_", "")} scalar (must be 1 .. n-1)`);
      }
      return {
        privateKey: copy,
        publicKey: curve === "CURVE_SECP256K1" ? fastSecp256k1().publicKey(copy) : p256PublicKey(copy),
      };
    }
    case "CURVE_ED25519":
      return { privateKey: copy, publicKey: ed25519PublicKey(copy) };
    default:
      throw new DerivationError(`unknown curve ${String(curve)}: use CURVE_SECP256K1, CURVE_ED25519 or CURVE_P256`);
  }
}

/** A fresh standalone key pair from the platform CSPRNG (via @noble/curves). */
export function generatePrivateKey(curve: Curve): KeyPair {
  switch (curve) {
    case "CURVE_SECP256K1":
      return keyPairFromPrivateKey(curve, secp256k1.utils.randomSecretKey());
    case "CURVE_P256":
      return keyPairFromPrivateKey(curve, p256.utils.randomSecretKey());
    case "CURVE_ED25519":
      return keyPairFromPrivateKey(curve, ed25519.utils.randomSecretKey());
    default:
      throw new DerivationError(`unknown curve ${String(curve)}: use CURVE_SECP256K1, CURVE_ED25519 or CURVE_P256`);
  }
}

/** Same as generatePrivateKey; the name src/operations/wallets/private-keys.ts imports. */
export const generateKeyPair = generatePrivateKey;
