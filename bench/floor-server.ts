// The bare floor: the least a server on this machine must do to answer one sign_raw_payload request
// over HTTP — read the body, verify its X-Stamp (parsed and checked as Sigil does), parse the JSON,
// hex-decode the payload, keccak-256 it and sign it with the fastest secp256k1 signer — with no
// database, no policy, no audit record. The bench starts it as its own process, like Sigil, and loads
// it with the same generator: Sigil's rate over the floor's is what the pipeline itself costs.
//
//   node --import tsx bench/floor-server.ts --port P --public-key HEX [--signer native|wasm|noble]
import crypto from "node:crypto";
import { parseArgs } from "node:util";
import Fastify, { type FastifyInstance } from "fastify";
import { keccak_256 } from "@noble/hashes/sha3.js";
import { secp256k1 } from "@noble/curves/secp256k1.js";
import { parseApiKeyStamp, verifyApiKeyStamp } from "../src/auth/stamps.js";
import { loadSigner, type RecoverableSigner, SIGNER_NAMES, type SignerName } from "./signers.js";

const HEX_BYTES = /^(?:[0-9a-fA-F]{2})*$/;

const refusal = (code: number, message: string) => ({ code, message, details: [] });

/**
 * The floor server: accepts requests stamped by `publicKey` (compressed P-256, hex) and signs with
 * `signer` under `signingKey` (a fresh one unless given).
 */
export function floorServer(publicKey: string, signer: RecoverableSigner, signingKey = secp256k1.utils.randomSecretKey()): FastifyInstance {
  const app = Fastify({ logger: false });
  const registeredKey = publicKey.toLowerCase();
  // The stamp signs the exact bytes sent: keep them raw, as Sigil does.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser("*", { parseAs: "buffer" }, (_request, body, done) => done(null, body));

  app.get("/health", async () => ({ ok: true }));

  app.post("/public/v1/submit/sign_raw_payload", async (request, reply) => {
    const bytes = request.body as Buffer;
    const header = request.headers["x-stamp"];
    if (typeof header !== "string") return reply.code(401).send(refusal(16, "request is not stamped: send X-Stamp"));
    let verified = false;
    try {
      const parsed = parseApiKeyStamp(header);
      verified = parsed.publicKey === registeredKey && (await verifyApiKeyStamp(parsed, bytes));
    } catch {
      // A malformed stamp proves nothing either.
    }
    if (!verified) return reply.code(401).send(refusal(16, "the stamp does not verify for a registered key"));
    let body: any;
    try {
      body = JSON.parse(bytes.toString("utf8"));
    } catch {
      return reply.code(400).send(refusal(3, "the body is not JSON"));
    }
    const parameters = body?.parameters;
    if (
      body?.type !== "ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2" ||
      typeof parameters?.payload !== "string" ||
      parameters.encoding !== "PAYLOAD_ENCODING_HEXADECIMAL" ||
      parameters.hashFunction !== "HASH_FUNCTION_KECCAK256" ||
      !HEX_BYTES.test(parameters.payload)
    )
      return reply.code(400).send(refusal(3, "the floor signs only a hex payload with keccak-256"));
    const digest = keccak_256(Buffer.from(parameters.payload, "hex"));
    const { signature, recoveryId } = signer.sign(digest, signingKey);
    const now = String(Date.now());
    return {
      activity: {
        id: crypto.randomUUID(),
        organizationId: body.organizationId,
        status: "ACTIVITY_STATUS_COMPLETED",
        type: body.type,
        intent: { signRawPayloadIntentV2: parameters },
        result: {
          signRawPayloadResult: {
            r: Buffer.from(signature.subarray(0, 32)).toString("hex"),
            s: Buffer.from(signature.subarray(32, 64)).toString("hex"),
            v: recoveryId.toString(16).padStart(2, "0"),
          },
        },
        createdAt: { seconds: now.slice(0, -3), nanos: "0" },
        updatedAt: { seconds: now.slice(0, -3), nanos: "0" },
      },
    };
  });
  return app;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({
    options: { port: { type: "string" }, "public-key": { type: "string" }, signer: { type: "string", default: "native" } },
  });
  if (!values.port || !values["public-key"] || !(SIGNER_NAMES as readonly string[]).includes(values.signer!))
    throw new Error("usage: floor-server.ts --port P --public-key HEX [--signer native|wasm|noble]");
  const app = floorServer(values["public-key"], await loadSigner(values.signer as SignerName));
  await app.listen({ host: "127.0.0.1", port: Number(values.port) });
  const stop = () => void app.close().then(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}
