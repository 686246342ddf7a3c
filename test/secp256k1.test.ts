// The signature libraries against @noble/curves, byte for byte, on thousands of random keys: each
// secp256k1 implementation (libsecp256k1 native, its WASM build, noble itself) for signatures with
// recovery id, verification and public keys; OpenSSL's ed25519 against noble's; OpenSSL's BIP-39
// PBKDF2 against @scure/bip39's. Every implementation is tested, not only the one in use.
import crypto from "node:crypto";
import { afterEach, describe, expect, it } from "vitest";
import { ed25519 } from "@noble/curves/ed25519.js";
import { secp256k1 as noble } from "@noble/curves/secp256k1.js";
import { keccak_256 } from "@noble/hashes/sha3.js";
import * as bip39 from "@scure/bip39";
import { wordlist as english } from "@scure/bip39/wordlists/english.js";
import { wordlist as japanese } from "@scure/bip39/wordlists/japanese.js";
import { wordlist as spanish } from "@scure/bip39/wordlists/spanish.js";
import {
  loadSecp256k1,
  SECP256K1_CHOICES,
  SECP256K1_NAMES,
  secp256k1,
  secp256k1Selection,
  selectSecp256k1,
  type Secp256k1Choice,
} from "../src/crypto/secp256k1.js";
import { signDigest, signEd25519 } from "../src/crypto/sign.js";
import { SignatureThreads } from "../src/crypto/signature-threads.js";
import { verifySecp256k1Der, verifySecp256k1Eip191Der, sha256 } from "../src/crypto/keys.js";
import { bip39Seed, keyPairFromPrivateKey, mnemonicToSeed } from "../src/crypto/hd.js";

// Thousands of cases each: 15 s on a quiet machine, over the suite's 30 s default on a loaded one.
const PROPERTY_TEST_TIMEOUT_MS = 120_000;

const N = noble.Point.CURVE().n;
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const libraries = SECP256K1_CHOICES.map((choice) => loadSecp256k1(choice));

/** A random valid private key (1 .. n-1); now and then one at the edges of the range. */
function randomKey(i: number): Uint8Array {
  if (i === 0) return noble.Point.Fn.toBytes(1n);
  if (i === 1) return noble.Point.Fn.toBytes(N - 1n);
  for (;;) {
    const key = crypto.randomBytes(32);
    if (noble.utils.isValidSecretKey(key)) return key;
  }
}

/** A random digest; now and then all zeros, all ones, or n itself and above (libsecp256k1 and noble
 * both reduce it mod n). */
function randomDigest(i: number): Uint8Array {
  if (i === 2) return new Uint8Array(32);
  if (i === 3) return new Uint8Array(32).fill(0xff);
  if (i === 4) return noble.Point.Fn.toBytes(N - 1n).map((b, j) => (j === 31 ? b + 1 : b)); // n
  return crypto.randomBytes(32);
}

afterEach(() => {
  selectSecp256k1();
});

describe("secp256k1 implementations", () => {
  it("all three load here, and the fastest is chosen when nothing forces one", () => {
    expect(libraries.map((l) => l.name)).toEqual(["libsecp256k1 (native)", "libsecp256k1 (wasm)", "@noble/curves"]);
    const selection = selectSecp256k1();
    expect(selection).toMatchObject({ fallbacks: [], forced: false });
    expect(selection.implementation.name).toBe(SECP256K1_NAMES.native);
  });

  it(
    "sign 5,000 random keys and digests to the bytes noble signs: r, s and the recovery id, low S",
    () => {
      for (let i = 0; i < 5000; i++) {
        const key = randomKey(i);
        const digest = randomDigest(i);
        const reference = noble.sign(digest, key, { prehash: false, format: "recovered" });
        const expected = { signature: hex(reference.subarray(1)), recovery: reference[0] };
        // noble's wrapper is noble's own sign again: checked on every tenth case, to keep the test short.
        for (const lib of libraries.filter((l) => l.choice !== "noble" || i % 10 === 0)) {
          const { signature, recovery } = lib.sign(digest, key);
          expect({ signature: hex(signature), recovery }, `${lib.name}, case ${i}`).toEqual(expected);
        }
        expect(BigInt(`0x${expected.signature.slice(64)}`) <= N / 2n).toBe(true);
      }
    },
    PROPERTY_TEST_TIMEOUT_MS,
  );

  it("sign digests at or above the group order n as noble does (a caller may send any 32 bytes): 500 of them", () => {
    // The native binding's libsecp256k1 would feed such a digest unreduced to its RFC 6979 nonce.
    for (let i = 0; i < 500; i++) {
      const key = randomKey(i + 5);
      const digest = noble.Point.Fn.toBytes(0n); // 32 bytes
      const value = N + BigInt(`0x${crypto.randomBytes(16).toString("hex")}`);
      digest.set(Buffer.from(value.toString(16).padStart(64, "0"), "hex"));
      const reference = noble.sign(digest, key, { prehash: false, format: "recovered" });
      for (const lib of libraries) {
        const { signature, recovery } = lib.sign(digest, key);
        expect(hex(Uint8Array.from([recovery, ...signature])), `${lib.name}, case ${i}`).toBe(hex(reference));
      }
    }
  });

  it("derive the public keys noble derives (compressed and uncompressed), on 1,000 random keys", () => {
    for (let i = 0; i < 1000; i++) {
      const key = randomKey(i);
      for (const lib of libraries) {
        expect(hex(lib.publicKey(key)), lib.name).toBe(hex(noble.getPublicKey(key, true)));
        if (i % 10 === 0) expect(hex(lib.publicKey(key, false)), lib.name).toBe(hex(noble.getPublicKey(key, false)));
      }
    }
  });

  it(
    "verify DER signatures as noble does: low S and high S accepted, another digest, key or signature refused",
    () => {
      // 300 cases: noble's verification is ~2 ms each, and every case verifies 4 times per library.
      for (let i = 0; i < 300; i++) {
        const key = randomKey(i + 5);
        const publicKey = noble.getPublicKey(key, i % 2 === 0);
        const digest = crypto.randomBytes(32);
        const signature = noble.sign(digest, key, { prehash: false, lowS: true, format: "der" });
        const parsed = noble.Signature.fromBytes(signature, "der");
        const highS = new noble.Signature(parsed.r, N - parsed.s).toBytes("der");
        const otherKey = noble.getPublicKey(randomKey(i + 5), true);
        for (const lib of libraries) {
          expect(lib.verifyDer(signature, digest, publicKey), lib.name).toBe(true);
          expect(lib.verifyDer(highS, digest, publicKey), `${lib.name}: high S`).toBe(true);
          expect(lib.verifyDer(signature, crypto.randomBytes(32), publicKey), `${lib.name}: another digest`).toBe(false);
          expect(lib.verifyDer(signature, digest, otherKey), `${lib.name}: another key`).toBe(false);
        }
      }
    },
    PROPERTY_TEST_TIMEOUT_MS,
  );

  it("agree with noble on every one-byte change to a DER signature and on malformed encodings and keys", () => {
    const key = randomKey(7);
    const publicKey = noble.getPublicKey(key, true);
    const digest = crypto.randomBytes(32);
    const der = noble.sign(digest, key, { prehash: false, format: "der" });
    const reference = (signature: Uint8Array, pub = publicKey) => {
      try {
        return noble.verify(signature, digest, pub, { format: "der", lowS: false, prehash: false });
      } catch {
        return false;
      }
    };
    const cases: Uint8Array[] = [];
    for (let at = 0; at < der.length; at++) {
      for (const value of [0x00, 0x01, 0x7f, 0x80, 0xff, der[at]! ^ 0x01]) {
        if (value === der[at]) continue;
        const changed = Uint8Array.from(der);
        changed[at] = value;
        cases.push(changed);
      }
    }
    const { r, s } = noble.Signature.fromBytes(der, "der");
    const int = (value: bigint, pad = "") => {
      const body = pad + value.toString(16).padStart(64, "0");
      return `02${(body.length / 2).toString(16).padStart(2, "0")}${body}`;
    };
    const sequence = (...ints: string[]) => {
      const body = ints.join("");
      return Buffer.from(`30${(body.length / 2).toString(16).padStart(2, "0")}${body}`, "hex");
    };
    cases.push(
      der.subarray(0, der.length - 1), // cut short
      Buffer.concat([der, Buffer.from([0])]), // a trailing byte
      new Uint8Array(0),
      sequence(int(r, "0000"), int(s)), // a needless leading zero
      sequence(int(0n), int(s)), // r = 0
      sequence(int(r), int(N)), // s = n
      sequence(int(r), int(s + N)), // s beyond n
      sequence(int(r)), // s missing
    );
    for (const signature of cases) {
      const expected = reference(signature);
      for (const lib of libraries) expect(lib.verifyDer(signature, digest, publicKey), `${lib.name}: ${hex(signature)}`).toBe(expected);
    }
    expect(cases.filter((c) => reference(c))).toEqual([]); // none of them is a valid signature
    // Keys that are not SEC 1 points on the curve: libsecp256k1's "hybrid" 06/07 form included.
    const uncompressed = noble.getPublicKey(key, false);
    for (const badKey of [
      Uint8Array.from([6 + (uncompressed[64]! & 1), ...uncompressed.subarray(1)]),
      publicKey.subarray(0, 32),
      Uint8Array.from([2, ...new Uint8Array(32).fill(0xff)]),
      new Uint8Array(33),
    ]) {
      for (const lib of libraries) expect(lib.verifyDer(der, digest, badKey), `${lib.name}: key ${hex(badKey)}`).toBe(false);
    }
  });

  it("a forced choice that is unknown is refused, naming the choices", () => {
    expect(() => selectSecp256k1("elliptic" as Secp256k1Choice)).toThrow(
      /unknown secp256k1 implementation "elliptic": use one of native, wasm, noble/,
    );
  });
});

describe("through signDigest, the stamp checks and key derivation, each choice forced", () => {
  for (const choice of SECP256K1_CHOICES) {
    it(`${choice}: the same signatures, verifications and public keys as noble`, async () => {
      const selection = selectSecp256k1(choice);
      expect(selection).toMatchObject({ forced: true, fallbacks: [] });
      expect(secp256k1().name).toBe(SECP256K1_NAMES[choice]);
      const threads = new SignatureThreads(1);
      try {
        for (let i = 0; i < 100; i++) {
          const key = randomKey(i + 5);
          const digest = crypto.randomBytes(32);
          const reference = noble.sign(digest, key, { prehash: false, format: "recovered" });
          const expected = { r: hex(reference.subarray(1, 33)), s: hex(reference.subarray(33)), v: `0${reference[0]}` };
          expect(signDigest("CURVE_SECP256K1", key, digest)).toEqual(expected);
          // Inline (native) or on a thread that chose the same library (wasm, noble).
          if (i % 10 === 0) expect(await threads.signDigest("CURVE_SECP256K1", key, digest)).toEqual(expected);
          expect(hex(keyPairFromPrivateKey("CURVE_SECP256K1", key).publicKey)).toBe(hex(noble.getPublicKey(key, true)));

          const body = crypto.randomBytes(100);
          const publicKey = hex(noble.getPublicKey(key, true));
          const stamp = noble.sign(sha256(body), key, { prehash: false, format: "der" });
          expect(verifySecp256k1Der(publicKey, body, stamp)).toBe(true);
          expect(verifySecp256k1Der(publicKey, crypto.randomBytes(100), stamp)).toBe(false);
          const eip191 = keccak_256(Buffer.concat([Buffer.from(`\x19Ethereum Signed Message:\n${body.length}`), body]));
          expect(verifySecp256k1Eip191Der(publicKey, body, noble.sign(eip191, key, { prehash: false, format: "der" }))).toBe(true);
          expect(verifySecp256k1Eip191Der(publicKey, body, stamp)).toBe(false);
        }
      } finally {
        await threads.close();
      }
    });
  }

  it("when nothing chose yet, the first use chooses the fastest", () => {
    expect(secp256k1Selection().implementation.choice).toBe("native");
  });
});

describe("ed25519 by OpenSSL", () => {
  it("signs 3,000 random keys and messages to the bytes noble signs (RFC 8032 is deterministic)", () => {
    for (let i = 0; i < 3000; i++) {
      const key = i === 0 ? new Uint8Array(32) : crypto.randomBytes(32);
      const message = crypto.randomBytes(i % 300);
      const { r, s, v } = signEd25519(key, message);
      expect(r + s, `case ${i}`).toBe(hex(ed25519.sign(message, key)));
      expect(v).toBe("00");
    }
  });

  it("RFC 8032 test 1 (empty message)", () => {
    const key = Buffer.from("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60", "hex");
    const { r, s } = signEd25519(key, new Uint8Array(0));
    expect(r + s).toBe(
      "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
    );
  });
});

describe("the BIP-39 seed by OpenSSL", () => {
  it("is @scure/bip39's seed for random mnemonics and passphrases, in several languages and scripts", () => {
    const passphrases = ["", "TREZOR", "pässwörd", "パスワード", " spaced  out ", "🔑"];
    for (let i = 0; i < 60; i++) {
      const list = [english, japanese, spanish][i % 3]!;
      const mnemonic = bip39.generateMnemonic(list, [128, 160, 192, 224, 256][i % 5]);
      const passphrase = passphrases[i % passphrases.length]!;
      expect(hex(bip39Seed(mnemonic.normalize("NFKD"), passphrase)), `case ${i}`).toBe(hex(bip39.mnemonicToSeedSync(mnemonic, passphrase)));
    }
  });

  it("the composed (NFC) passphrase gives the seed of its decomposed (NFKD) spelling", () => {
    const mnemonic = bip39.generateMnemonic(english, 128);
    expect(hex(mnemonicToSeed(mnemonic, "café".normalize("NFC")))).toBe(hex(mnemonicToSeed(mnemonic, "café".normalize("NFD"))));
    expect(hex(mnemonicToSeed(mnemonic, "café"))).toBe(hex(bip39.mnemonicToSeedSync(mnemonic, "café")));
  });
});
