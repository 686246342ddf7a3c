// The secp256k1 fallbacks through the public API: a server started with SIGIL_SECP256K1=wasm or
// noble says so in its log, and sign_raw_payload answers with the bytes native libsecp256k1 gives
// (RFC 6979 is deterministic), which recover to the account's key; a secp256k1 API key's stamps verify.
import crypto from "node:crypto";
import { describe, expect, it } from "vitest";
import { secp256k1 as noble } from "@noble/curves/secp256k1.js";
import { selectSecp256k1 } from "../src/crypto/secp256k1.js";
import { startHarness } from "./helpers/harness.js";

const NAMES = { wasm: "libsecp256k1 (wasm)", noble: "@noble/curves" } as const;

describe.each(["wasm", "noble"] as const)("SIGIL_SECP256K1=%s", (choice) => {
  it("logs the library at start and signs through the API what native libsecp256k1 signs", async () => {
    const h = await startHarness({ SIGIL_SECP256K1: choice });
    try {
      const start = h.logLines.map((line) => JSON.parse(line)).find((line) => line.msg === "signature libraries");
      expect(start).toMatchObject({ secp256k1: NAMES[choice], ed25519: "node:crypto (OpenSSL)", p256: "@noble/curves" });
      // Forced, not fallen back to: no warning.
      expect(h.logLines.some((line) => line.includes("a faster library did not load"))).toBe(false);

      const org = await h.organization(`fallback ${choice}`);
      const client = h.sdk(org, org.key);
      const { walletId } = await client.createWallet({
        walletName: "fallback",
        accounts: [
          { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
        ],
      });
      const [account] = (await client.getWalletAccounts({ walletId })).accounts;
      const digests = [crypto.randomBytes(32), crypto.randomBytes(32), Buffer.alloc(32, 0xff)];
      const sign = (digest: Buffer) =>
        client.signRawPayload({
          signWith: account!.address,
          payload: digest.toString("hex"),
          encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
          hashFunction: "HASH_FUNCTION_NO_OP",
        });
      const signed = [];
      for (const digest of digests) {
        const { r, s, v } = await sign(digest);
        const recovered = new noble.Signature(BigInt(`0x${r}`), BigInt(`0x${s}`), Number.parseInt(v, 16)).recoverPublicKey(digest);
        expect(recovered.toHex(true)).toBe(account!.publicKey);
        signed.push({ r, s, v });
      }

      // The same process, native libsecp256k1: the same bytes.
      selectSecp256k1("native");
      for (const [i, digest] of digests.entries()) {
        const { r, s, v } = await sign(digest);
        expect({ r, s, v }).toEqual(signed[i]);
      }
      selectSecp256k1(choice);

      // A secp256k1 API key: its stamps are verified by the forced library, high S accepted as before.
      const secret = noble.utils.randomSecretKey();
      const publicKey = Buffer.from(noble.getPublicKey(secret, true)).toString("hex");
      await client.createApiKeys({ userId: org.userId, apiKeys: [{ apiKeyName: "k1", publicKey, curveType: "API_KEY_CURVE_SECP256K1" }] });
      const body = JSON.stringify({ organizationId: org.organizationId });
      const signature = noble.Signature.fromBytes(noble.sign(Buffer.from(body), secret, { format: "der" }), "der");
      const highS = new noble.Signature(signature.r, noble.Point.CURVE().n - signature.s);
      const whoami = (der: Uint8Array) =>
        h.post("/public/v1/query/whoami", body, {
          "X-Stamp": Buffer.from(
            JSON.stringify({ publicKey, scheme: "SIGNATURE_SCHEME_TK_API_SECP256K1", signature: Buffer.from(der).toString("hex") }),
          ).toString("base64url"),
        });
      for (const der of [signature.toBytes("der"), highS.toBytes("der")]) {
        const answer = await whoami(der);
        expect(answer.status).toBe(200);
        expect(answer.json.userId).toBe(org.userId);
      }
      const tampered = signature.toBytes("der");
      tampered[tampered.length - 1]! ^= 1;
      expect((await whoami(tampered)).status).toBe(401);
    } finally {
      selectSecp256k1();
      await h.close();
    }
  });
});
