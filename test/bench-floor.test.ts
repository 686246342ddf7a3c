// The bench's bare floor (bench/floor-server.ts) signs what it is sent only under a stamp that
// verifies for its registered key, and signs it right with each secp256k1 signer the bench compares.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { keccak_256 } from "@noble/hashes/sha3.js";
import type { FastifyInstance } from "fastify";
import { floorServer } from "../bench/floor-server.js";
import { apiKey, signRawPayloadParameters, stamp } from "../bench/generator.js";
import { availableSigners, loadSigner } from "../bench/signers.js";

const key = apiKey();
const signingKey = secp256k1.utils.randomSecretKey();
const signingPublicKey = secp256k1.getPublicKey(signingKey, true);
let app: FastifyInstance;

const body = (unique: number) =>
  JSON.stringify({
    type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2",
    organizationId: "00000000-0000-4000-8000-000000000000",
    timestampMs: String(Date.now()),
    parameters: signRawPayloadParameters("0xab", unique),
  });

const send = (server: FastifyInstance, payload: string, header?: string) =>
  server.inject({
    method: "POST",
    url: "/public/v1/submit/sign_raw_payload",
    headers: { "content-type": "application/json", ...(header === undefined ? {} : { "x-stamp": header }) },
    payload,
  });

beforeAll(async () => {
  app = floorServer(key.publicKey, await loadSigner("noble"), signingKey);
  await app.ready();
});
afterAll(() => app.close());

describe("the bench's floor server", () => {
  it("signs keccak-256 of the payload under a stamp by its key, a new activity id each time", async () => {
    const first = body(1);
    const answer = await send(app, first, stamp(first, key));
    expect(answer.statusCode).toBe(200);
    const { activity } = answer.json();
    const { r, s, v } = activity.result.signRawPayloadResult;
    const digest = keccak_256(Buffer.from(signRawPayloadParameters("", 1).payload, "hex"));
    const signature = secp256k1.Signature.fromBytes(Buffer.from(r + s, "hex"), "compact").addRecoveryBit(Number.parseInt(v, 16));
    expect(signature.recoverPublicKey(digest).toBytes(true)).toEqual(signingPublicKey);
    // One text for body and stamp: body() reads the clock, and two calls may straddle a millisecond.
    const second = body(2);
    const again = await send(app, second, stamp(second, key));
    expect(again.statusCode).toBe(200);
    expect(again.json().activity.id).not.toBe(activity.id);
  });

  it("refuses with 401 a missing, malformed, foreign or non-matching stamp, and signs nothing", async () => {
    const text = body(3);
    const other = apiKey();
    for (const header of [undefined, "not base64url!", stamp(text, other), stamp(body(4), key)]) {
      const answer = await send(app, text, header);
      expect(answer.statusCode).toBe(401);
      expect(answer.json().activity).toBeUndefined();
    }
  });

  it("refuses with 400 a stamped body it does not sign (another hash function, a payload not hex)", async () => {
    for (const parameters of [
      { ...signRawPayloadParameters("0xab", 5), hashFunction: "HASH_FUNCTION_SHA256" },
      { ...signRawPayloadParameters("0xab", 6), payload: "xyz" },
    ]) {
      const text = JSON.stringify({ type: "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2", organizationId: "o", timestampMs: "1", parameters });
      expect((await send(app, text, stamp(text, key))).statusCode).toBe(400);
    }
  });

  it("gives the same signature with every signer that loads here (libsecp256k1 native, WASM, @noble/curves)", async () => {
    const { signers } = await availableSigners();
    expect(signers.map((s) => s.name)).toContain("noble");
    const text = body(7);
    const signatures = new Set<string>();
    for (const signer of signers) {
      const server = floorServer(key.publicKey, signer, signingKey);
      const answer = await send(server, text, stamp(text, key));
      await server.close();
      signatures.add(JSON.stringify(answer.json().activity.result));
    }
    expect(signatures.size).toBe(1);
  });
});
