// Malformed chain data: what the libraries that read it (viem, ox, @scure/btc-signer, @solana/kit,
// protobufjs, abitype) refuse is answered in the request's terms — the field, and what is wrong with
// it — never in the library's own words ("Cannot convert 0x to a BigInt", "Invalid RLP prefix",
// "index out of range: 5 + 10 > 12", "Invalid input"). Each is sent and refused with 400, recording
// only the failed activity.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { TurnkeySigner } from "@turnkey/ethers";
import { serializeTransaction, toRlp, type Hex } from "viem";
import { refusedLeavingOnlyItsActivity, startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";
import { organizationWith } from "./helpers/organizations.js";

let h: Harness;
let organizationId: string;
let org: TestOrganization;
let root: ReturnType<Harness["sdk"]>;
const addresses: Record<string, string> = {};

/** Words of the libraries' own errors, none of which may reach an error body. */
const LIBRARY_WORDS =
  /BigInt|viem can|viem@|Cannot convert|\box\b|Invalid input|RLP prefix|out of bounds|index out of range|invalid wire type|Version: |Details: |PSBT: |Reader|Unexpected|expected .*, received|Solana error|decode this error|@solana|@scure|protobuf\.js|zod/i;

beforeAll(async () => {
  h = await startHarness();
  const made = await organizationWith(h, []);
  ({ root } = made);
  org = made.org;
  organizationId = made.org.organizationId;
  const accounts = [
    ["ethereum", "CURVE_SECP256K1", "m/44'/60'/0'/0/0", "ADDRESS_FORMAT_ETHEREUM"],
    ["bitcoin", "CURVE_SECP256K1", "m/84'/1'/0'/0/0", "ADDRESS_FORMAT_BITCOIN_TESTNET_P2WPKH"],
    ["solana", "CURVE_ED25519", "m/44'/501'/0'/0'", "ADDRESS_FORMAT_SOLANA"],
    ["tron", "CURVE_SECP256K1", "m/44'/195'/0'/0/0", "ADDRESS_FORMAT_TRON"],
  ] as const;
  const wallet = await root.createWallet({
    walletName: "parsers",
    accounts: accounts.map(([, curve, path, addressFormat]) => ({ curve, pathFormat: "PATH_FORMAT_BIP32" as const, path, addressFormat })),
  });
  accounts.forEach(([name], i) => (addresses[name] = wallet.addresses[i]!));
});
afterAll(() => h?.close());

/** Refused with 400 `code` saying `words`, in no library's words, leaving only the failed activity. */
async function refusedInOwnWords(attempt: () => Promise<unknown>, words: string, code = "REQUEST_INVALID") {
  const { failure } = await refusedLeavingOnlyItsActivity(h, attempt, { code: 3 });
  expect(failure.details[0].turnkeyErrorCode).toBe(code);
  expect(failure.message).toContain(words);
  expect(failure.message).not.toMatch(LIBRARY_WORDS);
  return failure.message as string;
}

const TO = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8" as Hex;
const eip1559 = (fields: Partial<Record<"chainId" | "tip" | "cap" | "to", Hex>> = {}) =>
  `0x02${toRlp([fields.chainId ?? "0x01", "0x", fields.tip ?? "0x01", fields.cap ?? "0x02", "0x5208", fields.to ?? TO, "0x01", "0x", []]).slice(2)}`;

describe("Ethereum transactions (sign_transaction)", () => {
  const sign = (unsignedTransaction: string) => () =>
    root.signTransaction({ signWith: addresses.ethereum!, unsignedTransaction, type: "TRANSACTION_TYPE_ETHEREUM" });
  const valid = serializeTransaction({
    type: "eip1559",
    chainId: 1,
    to: TO,
    value: 1n,
    gas: 21000n,
    maxFeePerGas: 2n,
    maxPriorityFeePerGas: 1n,
  });

  it("each malformed transaction is named by what is wrong with it", async () => {
    expect(eip1559()).toBe(valid);
    const cases: [string, string][] = [
      ["05c0", "starts with 0x05, which is neither a transaction type this server signs"],
      ["76c0", "76 is Tempo: send it as TRANSACTION_TYPE_TEMPO"],
      ["02c0", "is not a valid EIP-1559 transaction: it needs 9 fields unsigned (chainId, nonce, maxPriorityFeePerGas"],
      ["c0", "is not a valid legacy transaction: it needs 6 fields unsigned"],
      ["02ff", "is not a valid EIP-1559 transaction: its bytes are not well-formed RLP"],
      [`${valid}00`, "is not a valid EIP-1559 transaction: bytes follow the end of its RLP list"],
      [eip1559({ tip: "0x03", cap: "0x02" }), "maxPriorityFeePerGas is above maxFeePerGas"],
      [eip1559({ to: "0x123456" }), "an address in it (to, an access list entry or an authorization) is not 20 bytes"],
      [eip1559({ chainId: "0x20000000000000" }), "a chain id or nonce in it is above 2^53 - 1"],
    ];
    for (const [unsigned, words] of cases)
      expect(await refusedInOwnWords(sign(unsigned.replace(/^0x/, "")), words)).toMatch(/^unsignedTransaction: unsignedTransaction /);
  });
});

describe("eth_send_raw_transaction", () => {
  const send = (signedTransaction: string) => () =>
    h.http(org.key).ethSendRawTransaction({
      type: "ACTIVITY_TYPE_ETH_SEND_RAW_TRANSACTION",
      timestampMs: String(Date.now()),
      organizationId,
      parameters: { signedTransaction, caip2: "eip155:11155111" },
    });

  it("a malformed signed transaction, an unsigned one, and one signed for chain id 0", async () => {
    await refusedInOwnWords(send("0x02c0"), "signedTransaction is not a valid EIP-1559 transaction: it needs 9 fields unsigned");
    await refusedInOwnWords(send(eip1559()), "signedTransaction carries no signature");
    const signer = new TurnkeySigner({ client: root as any, organizationId, signWith: addresses.ethereum! });
    const chainless = await signer.signTransaction({ to: TO, value: 1n, type: 2 });
    await refusedInOwnWords(send(chainless), "signedTransaction is signed for chain id 0, which names no chain");
  });
});

describe("other chains' transactions and contract interfaces", () => {
  const sign = (signWith: string, unsignedTransaction: string, type: string) => () =>
    root.signTransaction({ signWith, unsignedTransaction, type: type as "TRANSACTION_TYPE_ETHEREUM" });

  it("Bitcoin, Solana, Tron and Tempo bytes that do not decode", async () => {
    await refusedInOwnWords(
      sign(addresses.bitcoin!, "00", "TRANSACTION_TYPE_BITCOIN"),
      "unsignedTransaction is not a PSBT this server can sign: its bytes do not decode as a PSBT",
    );
    await refusedInOwnWords(
      sign(addresses.solana!, "01ff00", "TRANSACTION_TYPE_SOLANA"),
      "unsignedTransaction is not a Solana transaction: its bytes do not decode as a wire transaction",
    );
    await refusedInOwnWords(
      sign(addresses.tron!, "0aff", "TRANSACTION_TYPE_TRON"),
      "is not a protobuf TransactionRaw: its bytes do not decode as protobuf",
    );
    await refusedInOwnWords(
      sign(addresses.ethereum!, "76ff", "TRANSACTION_TYPE_TEMPO"),
      "unsignedTransaction is not a valid Tempo transaction",
    );
  });

  it("an Ethereum ABI whose item breaks the ABI format", async () => {
    const upload = (smartContractInterface: string) => () =>
      root.createSmartContractInterface({
        type: "SMART_CONTRACT_INTERFACE_TYPE_ETHEREUM",
        smartContractAddress: "0x1111111111111111111111111111111111111111",
        smartContractInterface,
        label: "bad",
        notes: "",
      } as Parameters<typeof root.createSmartContractInterface>[0]);
    await refusedInOwnWords(
      upload('[{"type":"function","name":"f","inputs":[],"outputs":[],"stateMutability":"sometimes"}]'),
      '[0].stateMutability must be "pure" or "view" or "nonpayable" or "payable"',
      "SMART_CONTRACT_INTERFACE_INVALID",
    );
    await refusedInOwnWords(
      upload('[{"type":"event","name":"E","inputs":[{"name":"a","type":"uint256","indexed":"yes"}]}]'),
      "[0].inputs[0].indexed must be true or false",
      "SMART_CONTRACT_INTERFACE_INVALID",
    );
  });
});
