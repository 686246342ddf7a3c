// The crypto ceiling: the work no server can avoid for one sign_raw_payload request, in this
// process on one core — verify the request's P-256 stamp (node:crypto, as Sigil does), keccak-256
// the payload, one secp256k1 signature with its recovery id — with the fastest signer this machine
// has, not the one Sigil happens to use.
import crypto from "node:crypto";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { parseApiKeyStamp, verifyApiKeyStampInline } from "../src/auth/stamps.js";
import { Keyring } from "../src/crypto/envelope.js";
import { bip39Seed, generateMnemonic, HdKeyTree } from "../src/crypto/hd.js";
import { loadSecp256k1 } from "../src/crypto/secp256k1.js";
import { apiKey, signRawPayloadParameters, stamp } from "./generator.js";
import { measure } from "./measure.js";
import { availableSigners, type RecoverableSigner, type SignerName } from "./signers.js";

export interface Ceiling {
  signer: SignerName;
  microsecondsPerRequest: number;
  singleCoreRequestsPerSecond: number;
}

/** A stamped sign_raw_payload body like the ones the generator sends, and a key to sign with. */
function sample() {
  const key = apiKey();
  const body = JSON.stringify({
    type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
    organizationId: crypto.randomUUID(),
    timestampMs: String(Date.now()),
    parameters: signRawPayloadParameters(`0x${"ab".repeat(20)}`, 1),
  });
  return { header: stamp(body, key), body: Buffer.from(body), payload: Buffer.from(signRawPayloadParameters("", 1).payload, "hex") };
}

export function measureCeiling(signer: RecoverableSigner, iterations = 2000): Ceiling {
  const { header, body, payload } = sample();
  const secret = secp256k1.utils.randomSecretKey();
  const nsPerOp = measure(`ceiling (${signer.name}): stamp verify + keccak + secp256k1 signature`, iterations, () => {
    if (!verifyApiKeyStampInline(parseApiKeyStamp(header), body)) throw new Error("stamp did not verify");
    signer.sign(keccak_256(payload), secret);
  });
  return {
    signer: signer.name,
    microsecondsPerRequest: Math.round(nsPerOp / 10) / 100,
    singleCoreRequestsPerSecond: Math.round(1e9 / nsPerOp),
  };
}

/**
 * Measures the signature alone and the whole ceiling with every signer that loads here, and picks
 * the fastest (by the whole ceiling). The slow pure-JS signer gets fewer iterations.
 */
export async function compareSigners() {
  const { signers, unavailable } = await availableSigners();
  const digest = keccak_256(Buffer.from("compare"));
  const secret = secp256k1.utils.randomSecretKey();
  const bySigner: Record<string, { library: string; signatureMicroseconds: number } & Ceiling> = {};
  let fastest: { signer: RecoverableSigner; ceiling: Ceiling } | undefined;
  for (const signer of signers) {
    const iterations = signer.name === "noble" ? 500 : 2000;
    const signatureNs = measure(`secp256k1 signature with recovery id (${signer.name})`, iterations, () => signer.sign(digest, secret));
    const ceiling = measureCeiling(signer, iterations);
    bySigner[signer.name] = { library: signer.library, signatureMicroseconds: Math.round(signatureNs / 10) / 100, ...ceiling };
    if (!fastest || ceiling.microsecondsPerRequest < fastest.ceiling.microsecondsPerRequest) fastest = { signer, ceiling };
  }
  if (!fastest) throw new Error(`no secp256k1 signer loads here: ${JSON.stringify(unavailable)}`);
  console.log(`fastest signer here: ${fastest.signer.library}\n`);
  return { fastest, bySigner, unavailable };
}

/** A create_sub_organization body as the signup scenario sends it: a root user holding a new API key,
 * and a wallet with one Ethereum account. */
export function signupParameters(unique: number, apiPublicKey: string) {
  return {
    subOrganizationName: `signup-${unique}-${crypto.randomUUID()}`,
    rootUsers: [
      {
        userName: "owner",
        apiKeys: [{ apiKeyName: "owner key", publicKey: apiPublicKey, curveType: "API_KEY_CURVE_P256" }],
        authenticators: [],
        oauthProviders: [],
      },
    ],
    rootQuorumThreshold: 1,
    wallet: {
      walletName: "default",
      accounts: [
        { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      ],
    },
  };
}

export interface SignupCeiling {
  /** What each part costs on one core (µs), and the whole. */
  microseconds: Record<"stamp" | "mnemonic" | "pbkdf2" | "derivation" | "address" | "sealing", number>;
  microsecondsPerSignup: number;
  singleCoreSignupsPerSecond: number;
}

/**
 * The sign-up ceiling: the crypto no server can avoid for one create_sub_organization with a wallet, on
 * one core, each part on the fastest library here — verify the request's P-256 stamp (node:crypto),
 * a 12-word mnemonic (@scure/bip39 over the CSPRNG), its BIP-39 seed (PBKDF2-HMAC-SHA512, 2048
 * rounds, OpenSSL), BIP-32 m/44'/60'/0'/0/0 (libsecp256k1's tweak-add when it loads), the Ethereum
 * address (libsecp256k1's uncompressed point, keccak-256), and sealing the mnemonic and the account
 * key (AES-256-GCM, node:crypto). Each part is timed alone; the ceiling is their sum.
 */
export function measureSignupCeiling(iterations = 400): SignupCeiling {
  const key = apiKey();
  const body = JSON.stringify({
    type: "ACTIVITY_TYPE_CREATE_SUB_ORGANIZATION_V7",
    organizationId: crypto.randomUUID(),
    timestampMs: String(Date.now()),
    parameters: signupParameters(1, key.publicKey),
  });
  const header = stamp(body, key);
  const bytes = Buffer.from(body);
  const lib = fastestSecp256k1();
  const mnemonic = generateMnemonic(12);
  const seed = bip39Seed(mnemonic);
  const pair = new HdKeyTree(seed, lib).derive("CURVE_SECP256K1", "m/44'/60'/0'/0/0");
  const keyring = new Keyring(crypto.randomBytes(32));
  const identity = { organizationId: crypto.randomUUID(), kind: "wallet.mnemonic", resourceId: crypto.randomUUID() };
  const part = (name: string, fn: () => void) => measure(`sign-up ceiling: ${name}`, iterations, fn) / 1000;
  const microseconds = {
    stamp: part("stamp verify (P-256, node:crypto)", () => {
      if (!verifyApiKeyStampInline(parseApiKeyStamp(header), bytes)) throw new Error("stamp did not verify");
    }),
    mnemonic: part("12-word mnemonic", () => generateMnemonic(12)),
    pbkdf2: part("BIP-39 seed (PBKDF2, OpenSSL)", () => bip39Seed(mnemonic)),
    derivation: part(`BIP-32 m/44'/60'/0'/0/0 (${lib.name})`, () => new HdKeyTree(seed, lib).derive("CURVE_SECP256K1", "m/44'/60'/0'/0/0")),
    address: part(`Ethereum address (${lib.name} + keccak-256)`, () => keccak_256(lib.publicKey(pair.privateKey, false).subarray(1))),
    sealing: part("seal mnemonic and account key (AES-256-GCM)", () => {
      keyring.seal(mnemonic, identity);
      keyring.seal(pair.privateKey, identity);
    }),
  };
  const total = Object.values(microseconds).reduce((sum, us) => sum + us, 0);
  return {
    microseconds: Object.fromEntries(
      Object.entries(microseconds).map(([k, us]) => [k, Math.round(us * 10) / 10]),
    ) as SignupCeiling["microseconds"],
    microsecondsPerSignup: Math.round(total * 10) / 10,
    singleCoreSignupsPerSecond: Math.round(1e6 / total),
  };
}

/** The fastest secp256k1 library that loads here (native libsecp256k1, else its WebAssembly build). */
function fastestSecp256k1() {
  for (const choice of ["native", "wasm"] as const) {
    try {
      return loadSecp256k1(choice);
    } catch {
      // the next one
    }
  }
  return loadSecp256k1("noble");
}
