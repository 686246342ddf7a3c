// Signing through the chain clients users already have — @turnkey/viem, @turnkey/ethers and
// @turnkey/solana pointed at Sigil — with every signature checked by the chain's own library.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createAccount } from "@turnkey/viem";
import { TurnkeySigner as EthersSigner } from "@turnkey/ethers";
import { TurnkeySigner as SolanaSigner } from "@turnkey/solana";
import {
  createWalletClient,
  http as viemHttp,
  parseEther,
  parseTransaction,
  recoverAddress,
  recoverMessageAddress,
  recoverTransactionAddress,
  verifyTypedData,
  keccak256,
  serializeTransaction,
  type Hex,
} from "viem";
import { mainnet } from "viem/chains";
import { ethers } from "ethers";
import { Keypair, PublicKey, SystemProgram, Transaction, TransactionMessage, VersionedTransaction } from "@solana/web3.js";
import { ed25519 } from "@noble/curves/ed25519.js";
import { ETHER_MAIL as TYPED } from "./helpers/organizations.js";
import { startHarness, type Harness, type TestOrganization } from "./helpers/harness.js";

let h: Harness;
let org: TestOrganization;
let client: ReturnType<Harness["sdk"]>;
let ethAddress: string;
let solAddress: string;
let privateKeyId: string;
let privateKeyAddress: string;

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Signers");
  client = h.sdk(org, org.key);
  const wallet = await client.createWallet({
    walletName: "signing",
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
      { curve: "CURVE_ED25519", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/501'/0'/0'", addressFormat: "ADDRESS_FORMAT_SOLANA" },
    ],
  });
  [ethAddress, solAddress] = wallet.addresses as [string, string];
  const keys = await client.createPrivateKeys({
    privateKeys: [{ privateKeyName: "eth key", curve: "CURVE_SECP256K1", privateKeyTags: [], addressFormats: ["ADDRESS_FORMAT_ETHEREUM"] }],
  });
  privateKeyId = keys.privateKeys[0]!.privateKeyId!;
  privateKeyAddress = keys.privateKeys[0]!.addresses![0]!.address!;
});
afterAll(() => h.close());

describe("@turnkey/viem", () => {
  for (const via of ["@turnkey/sdk-server", "@turnkey/http"] as const) {
    it(`signs messages, typed data and every transaction type, through ${via}`, async () => {
      const turnkeyClient = via === "@turnkey/http" ? h.http(org.key) : client;
      const account = await createAccount({ client: turnkeyClient as any, organizationId: org.organizationId, signWith: ethAddress });
      expect(account.address).toBe(ethAddress);

      const signature = await account.signMessage({ message: "hello sigil" });
      expect(await recoverMessageAddress({ message: "hello sigil", signature })).toBe(ethAddress);

      // Through a wallet client, as applications call it: viem then sends the EIP712Domain type too.
      const walletClient = createWalletClient({ account, chain: mainnet, transport: viemHttp("http://127.0.0.1:1") });
      const typedSignature = await walletClient.signTypedData(TYPED as any);
      expect(await verifyTypedData({ ...(TYPED as any), address: ethAddress as Hex, signature: typedSignature })).toBe(true);

      const base = {
        to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" as Hex,
        value: parseEther("0.01"),
        nonce: 3,
        gas: 21000n,
        chainId: 1,
      };
      const transactions = [
        { ...base, type: "legacy" as const, gasPrice: 10n ** 9n },
        { ...base, type: "eip2930" as const, gasPrice: 10n ** 9n, accessList: [] },
        { ...base, type: "eip1559" as const, maxFeePerGas: 2n * 10n ** 9n, maxPriorityFeePerGas: 10n ** 9n },
        {
          ...base,
          type: "eip4844" as const,
          maxFeePerGas: 2n,
          maxPriorityFeePerGas: 1n,
          maxFeePerBlobGas: 1n,
          blobVersionedHashes: [`0x01${"00".repeat(31)}` as Hex],
        },
        {
          ...base,
          type: "eip7702" as const,
          maxFeePerGas: 2n,
          maxPriorityFeePerGas: 1n,
          authorizationList: [
            await account.signAuthorization!({ address: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", chainId: 1, nonce: 4 } as any),
          ],
        },
      ];
      for (const transaction of transactions) {
        const signed = await account.signTransaction(transaction);
        expect(await recoverTransactionAddress({ serializedTransaction: signed as any })).toBe(ethAddress);
        expect(parseTransaction(signed)).toMatchObject({ type: transaction.type, nonce: 3, chainId: 1 });
      }
    });
  }

  it("signs an EIP-7702 authorization whose signer recovers to the account", async () => {
    const account = await createAccount({ client: client as any, organizationId: org.organizationId, signWith: ethAddress });
    const authorization = await account.signAuthorization!({
      address: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      chainId: 1,
      nonce: 0,
    } as any);
    const { hashAuthorization } = await import("viem/utils");
    const hash = hashAuthorization({ contractAddress: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8", chainId: 1, nonce: 0 });
    expect(
      await recoverAddress({ hash, signature: { r: authorization.r, s: authorization.s, yParity: authorization.yParity! } as any }),
    ).toBe(ethAddress);
  });

  it("signs with a private key named by its id (the client looks the address up)", async () => {
    const account = await createAccount({ client: client as any, organizationId: org.organizationId, signWith: privateKeyId });
    expect(account.address).toBe(privateKeyAddress);
    const signature = await account.signMessage({ message: "by id" });
    expect(await recoverMessageAddress({ message: "by id", signature })).toBe(privateKeyAddress);
  });

  it("works as a viem wallet client's account", async () => {
    const account = await createAccount({ client: client as any, organizationId: org.organizationId, signWith: ethAddress });
    const walletClient = createWalletClient({ account, chain: mainnet, transport: viemHttp("http://127.0.0.1:1") });
    const signature = await walletClient.signMessage({ message: "wallet client" });
    expect(await recoverMessageAddress({ message: "wallet client", signature })).toBe(ethAddress);
  });
});

describe("@turnkey/ethers", () => {
  it("signs messages, typed data and transactions as an ethers Signer", async () => {
    const signer = new EthersSigner({ client: client as any, organizationId: org.organizationId, signWith: ethAddress });
    expect(await signer.getAddress()).toBe(ethAddress);
    const signature = await signer.signMessage("hello ethers");
    expect(ethers.verifyMessage("hello ethers", signature)).toBe(ethAddress);
    const typedSignature = await signer.signTypedData(
      TYPED.domain,
      { Person: [...TYPED.types.Person], Mail: [...TYPED.types.Mail] },
      TYPED.message,
    );
    expect(
      ethers.verifyTypedData(TYPED.domain, { Person: [...TYPED.types.Person], Mail: [...TYPED.types.Mail] }, TYPED.message, typedSignature),
    ).toBe(ethAddress);
    const signed = await signer.signTransaction({
      to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      value: 1n,
      nonce: 0,
      gasLimit: 21000n,
      chainId: 1n,
      maxFeePerGas: 2n,
      maxPriorityFeePerGas: 1n,
      type: 2,
    });
    expect(ethers.Transaction.from(signed).from).toBe(ethAddress);
  });
});

describe("@turnkey/solana", () => {
  const blockhash = new PublicKey(Buffer.alloc(32, 7)).toBase58();
  it("signs legacy and v0 transactions, keeping other signers' slots, and messages", async () => {
    const signer = new SolanaSigner({ client: client as any, organizationId: org.organizationId });
    const from = new PublicKey(solAddress);
    const to = Keypair.generate().publicKey;

    const legacy = new Transaction({ recentBlockhash: blockhash, feePayer: from }).add(
      SystemProgram.transfer({ fromPubkey: from, toPubkey: to, lamports: 5000 }),
    );
    const signedLegacy = (await signer.signTransaction(legacy, solAddress)) as Transaction;
    expect(signedLegacy.verifySignatures()).toBe(true);

    const coSigner = Keypair.generate();
    const message = new TransactionMessage({
      payerKey: from,
      recentBlockhash: blockhash,
      instructions: [
        SystemProgram.transfer({ fromPubkey: from, toPubkey: to, lamports: 1 }),
        SystemProgram.transfer({ fromPubkey: coSigner.publicKey, toPubkey: to, lamports: 1 }),
      ],
    }).compileToV0Message();
    const v0 = new VersionedTransaction(message);
    v0.sign([coSigner]);
    const coSignature = Buffer.from(v0.signatures[1]!);
    const signedV0 = (await signer.signTransaction(v0, solAddress)) as VersionedTransaction;
    expect(Buffer.from(signedV0.signatures[1]!)).toEqual(coSignature);
    expect(ed25519.verify(signedV0.signatures[0]!, signedV0.message.serialize(), from.toBytes())).toBe(true);

    const text = new TextEncoder().encode("hello solana");
    const signature = await signer.signMessage(text, solAddress);
    expect(ed25519.verify(signature, text, from.toBytes())).toBe(true);
  });
});

describe("bitcoin", () => {
  it("signs the PSBT inputs its key can spend (P2WPKH with ECDSA, P2TR with BIP-341 Schnorr); the PSBT finalizes", async () => {
    const btc = await import("@scure/btc-signer");
    const { secp256k1, schnorr } = await import("@noble/curves/secp256k1.js");
    const { walletId } = await client.createWallet({
      walletName: "bitcoin",
      accounts: [
        {
          curve: "CURVE_SECP256K1",
          pathFormat: "PATH_FORMAT_BIP32",
          path: "m/84'/0'/0'/0/0",
          addressFormat: "ADDRESS_FORMAT_BITCOIN_MAINNET_P2WPKH",
        },
        {
          curve: "CURVE_SECP256K1",
          pathFormat: "PATH_FORMAT_BIP32",
          path: "m/86'/0'/0'/0/0",
          addressFormat: "ADDRESS_FORMAT_BITCOIN_MAINNET_P2TR",
        },
      ],
    });
    const { accounts } = await client.getWalletAccounts({ walletId });
    // A Taproot input is signed whether or not its builder named the internal key (BIP-86: our own).
    const cases = accounts.flatMap((account) =>
      (account.addressFormat.endsWith("P2TR") ? [true, false] : [true]).map((namesInternalKey) => ({ account, namesInternalKey })),
    );
    for (const { account, namesInternalKey } of cases) {
      const publicKey = Buffer.from(account.publicKey!, "hex");
      const taproot = account.addressFormat.endsWith("P2TR");
      const payment = taproot ? btc.p2tr(publicKey.subarray(1)) : btc.p2wpkh(publicKey);
      expect(payment.address).toBe(account.address);
      const tx = new btc.Transaction();
      tx.addInput({
        txid: Buffer.alloc(32, 1),
        index: 0,
        witnessUtxo: { script: payment.script, amount: 100_000n },
        ...(taproot && namesInternalKey ? { tapInternalKey: publicKey.subarray(1) } : {}),
      });
      tx.addOutputAddress("bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu", 90_000n);
      const { signedTransaction } = await client.signTransaction({
        signWith: account.address,
        unsignedTransaction: Buffer.from(tx.toPSBT()).toString("hex"),
        type: "TRANSACTION_TYPE_BITCOIN",
      });
      const signed = btc.Transaction.fromPSBT(Buffer.from(signedTransaction, "hex"));
      const input = signed.getInput(0);
      if (taproot) {
        const preimage = signed.preimageWitnessV1(0, [payment.script], btc.SigHash.DEFAULT, [100_000n]);
        expect(schnorr.verify(input.tapKeySig!, preimage, (payment as { tweakedPubkey: Uint8Array }).tweakedPubkey)).toBe(true);
      } else {
        const [[key, sig]] = input.partialSig! as [Uint8Array, Uint8Array][];
        expect(Buffer.from(key!)).toEqual(publicKey);
        const preimage = signed.preimageWitnessV0(0, btc.p2pkh(publicKey).script, btc.SigHash.ALL, 100_000n);
        expect(secp256k1.verify(sig!.subarray(0, -1), preimage, publicKey, { format: "der", prehash: false })).toBe(true);
      }
      expect(signed.isFinal).toBe(false);
      signed.finalize();
      expect(signed.hex.length).toBeGreaterThan(0);
    }
  });

  it("signs only the inputs of the address it is named by, not other scripts of the same key", async () => {
    const btc = await import("@scure/btc-signer");
    const { addresses, walletId } = await client.createWallet({
      walletName: "bitcoin narrow",
      accounts: [
        {
          curve: "CURVE_SECP256K1",
          pathFormat: "PATH_FORMAT_BIP32",
          path: "m/84'/0'/0'/0/0",
          addressFormat: "ADDRESS_FORMAT_BITCOIN_MAINNET_P2WPKH",
        },
      ],
    });
    const { account } = await client.getWalletAccount({ walletId, address: addresses[0]! });
    const publicKey = Buffer.from(account.publicKey!, "hex");
    const tx = new btc.Transaction();
    tx.addInput({ txid: Buffer.alloc(32, 3), index: 0, witnessUtxo: { script: btc.p2wpkh(publicKey).script, amount: 1000n } });
    // The same key's P2SH-P2WPKH output: the key could sign it, but the request named the P2WPKH address.
    const nested = btc.p2sh(btc.p2wpkh(publicKey));
    tx.addInput({
      txid: Buffer.alloc(32, 4),
      index: 0,
      witnessUtxo: { script: nested.script, amount: 1000n },
      redeemScript: nested.redeemScript,
    });
    tx.addOutputAddress("bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu", 1500n);
    const { signedTransaction } = await client.signTransaction({
      signWith: addresses[0]!,
      unsignedTransaction: Buffer.from(tx.toPSBT()).toString("hex"),
      type: "TRANSACTION_TYPE_BITCOIN",
    });
    const signed = btc.Transaction.fromPSBT(Buffer.from(signedTransaction, "hex"));
    expect(signed.getInput(0).partialSig).toHaveLength(1);
    expect(signed.getInput(1).partialSig ?? []).toHaveLength(0);
  });

  it("refuses a PSBT none of whose inputs the key can spend", async () => {
    const btc = await import("@scure/btc-signer");
    const { secp256k1 } = await import("@noble/curves/secp256k1.js");
    const stranger = btc.p2wpkh(secp256k1.getPublicKey(secp256k1.utils.randomSecretKey(), true));
    const tx = new btc.Transaction();
    tx.addInput({ txid: Buffer.alloc(32, 2), index: 0, witnessUtxo: { script: stranger.script, amount: 1000n } });
    tx.addOutputAddress("bc1qcr8te4kr609gcawutmrza0j4xv80jy8z306fyu", 500n);
    const { addresses } = await client.createWallet({
      walletName: "bitcoin stranger",
      accounts: [
        {
          curve: "CURVE_SECP256K1",
          pathFormat: "PATH_FORMAT_BIP32",
          path: "m/84'/0'/0'/0/0",
          addressFormat: "ADDRESS_FORMAT_BITCOIN_MAINNET_P2WPKH",
        },
      ],
    });
    const attempt = client.signTransaction({
      signWith: addresses[0]!,
      unsignedTransaction: Buffer.from(tx.toPSBT()).toString("hex"),
      type: "TRANSACTION_TYPE_BITCOIN",
    });
    await expect(attempt).rejects.toMatchObject({ code: 3, message: expect.stringContaining("no input of the PSBT is spendable") });
  });
});

describe("raw payloads", () => {
  it("signs hex, text and pre-hashed payloads with each hash function; many at once", async () => {
    const payload = Buffer.from("sigil").toString("hex");
    const keccak = await client.signRawPayload({
      signWith: ethAddress,
      payload,
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    });
    expect(keccak.r).toMatch(/^[0-9a-f]{64}$/);
    expect(keccak.v).toMatch(/^0[01]$/);
    const recovered = await recoverAddress({
      hash: keccak256(`0x${payload}`),
      signature: { r: `0x${keccak.r}`, s: `0x${keccak.s}`, yParity: Number(keccak.v) } as any,
    });
    expect(recovered).toBe(ethAddress);

    const text = await client.signRawPayload({
      signWith: ethAddress,
      payload: "sigil",
      encoding: "PAYLOAD_ENCODING_TEXT_UTF8",
      hashFunction: "HASH_FUNCTION_KECCAK256",
    });
    expect(text.r).toBe(keccak.r);

    const many = await client.signRawPayloads({
      signWith: solAddress,
      payloads: ["00", "0x0102"],
      encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
      hashFunction: "HASH_FUNCTION_NOT_APPLICABLE",
    });
    expect(many.signatures).toHaveLength(2);
    expect(
      ed25519.verify(
        Buffer.from(many.signatures![1]!.r + many.signatures![1]!.s, "hex"),
        Buffer.from("0102", "hex"),
        new PublicKey(solAddress).toBytes(),
      ),
    ).toBe(true);
    expect(many.signatures![0]!.v).toBe("00");
  });

  it("records sign_transaction V2's intent under both keys: the spec's (privateKeyId) and the swagger's (signWith)", async () => {
    const unsignedTransaction = serializeTransaction({
      to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      chainId: 1,
      nonce: 9,
      gas: 21000n,
      maxFeePerGas: 1n,
      maxPriorityFeePerGas: 1n,
      type: "eip1559",
    }).slice(2);
    const { activity } = await client.signTransaction({ signWith: ethAddress, unsignedTransaction, type: "TRANSACTION_TYPE_ETHEREUM" });
    expect((activity.intent as any).signTransactionIntent).toMatchObject({
      privateKeyId: ethAddress,
      unsignedTransaction,
      type: "TRANSACTION_TYPE_ETHEREUM",
    });
    expect((activity.intent as any).signTransactionIntentV2).toMatchObject({ signWith: ethAddress, unsignedTransaction });
  });

  it("refuses what a key cannot sign, recording a failed activity and storing nothing else", async () => {
    const before = JSON.parse(await h.snapshot());
    // Thunks, sent one at a time: a rejected promise nobody awaits yet is an unhandled rejection.
    const refusals: [() => Promise<unknown>, RegExp][] = [
      [
        () =>
          client.signRawPayload({
            signWith: ethAddress,
            payload: "abcd",
            encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
            hashFunction: "HASH_FUNCTION_NO_OP",
          }),
        /32-byte digest/,
      ],
      [
        () =>
          client.signRawPayload({
            signWith: solAddress,
            payload: "abcd",
            encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
            hashFunction: "HASH_FUNCTION_SHA256",
          }),
        /HASH_FUNCTION_NOT_APPLICABLE/,
      ],
      [
        () =>
          client.signRawPayload({
            signWith: ethAddress,
            payload: "xyz",
            encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
            hashFunction: "HASH_FUNCTION_SHA256",
          }),
        /not hexadecimal/,
      ],
      [
        () =>
          client.signRawPayload({
            signWith: "0x0000000000000000000000000000000000000001",
            payload: "00",
            encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
            hashFunction: "HASH_FUNCTION_SHA256",
          }),
        /neither a wallet account address/,
      ],
      [
        () => client.signTransaction({ signWith: ethAddress, unsignedTransaction: "deadbeef", type: "TRANSACTION_TYPE_ETHEREUM" }),
        /unsignedTransaction is not a valid legacy transaction: its bytes are not well-formed RLP/,
      ],
      [
        () =>
          client.signTransaction({
            signWith: solAddress,
            unsignedTransaction: serializeTransaction({
              to: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
              chainId: 1,
              nonce: 0,
              gas: 21000n,
              maxFeePerGas: 1n,
              maxPriorityFeePerGas: 1n,
              type: "eip1559",
            }).slice(2),
            type: "TRANSACTION_TYPE_ETHEREUM",
          }),
        /secp256k1/,
      ],
      [
        () => client.signTransaction({ signWith: ethAddress, unsignedTransaction: "00", type: "TRANSACTION_TYPE_TRON" }),
        /not a protobuf TransactionRaw/,
      ],
    ];
    for (const [attempt, message] of refusals) await expect(attempt()).rejects.toMatchObject({ message: expect.stringMatching(message) });
    const after = JSON.parse(await h.snapshot());
    for (const table of ["wallets", "wallet_accounts", "private_keys", "users"]) expect(after[table], table).toEqual(before[table]);
    const failed = after.activities.filter((row: string) => !before.activities.includes(row)).map((row: string) => JSON.parse(row));
    expect(failed).toHaveLength(refusals.length);
    expect(failed.every((a: { status: string }) => a.status === "ACTIVITY_STATUS_FAILED")).toBe(true);
  });

  it("review hardening: batch typed data, oversized batches, and messages policies cannot read are refused", async () => {
    const before = JSON.parse(await h.snapshot());
    await expect(
      client.signRawPayloads({
        signWith: ethAddress,
        payloads: [JSON.stringify({ ...TYPED, types: { ...TYPED.types } })],
        encoding: "PAYLOAD_ENCODING_EIP712",
        hashFunction: "HASH_FUNCTION_NO_OP",
      }),
    ).rejects.toMatchObject({ code: 3, message: expect.stringContaining("one at a time") });
    await expect(
      client.signRawPayloads({
        signWith: solAddress,
        payloads: Array.from({ length: 101 }, () => "00"),
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_NOT_APPLICABLE",
      }),
    ).rejects.toMatchObject({ code: 3, details: [expect.objectContaining({ turnkeyErrorCode: "TOO_MANY_ITEMS" })] });
    await expect(
      client.createWallet({
        walletName: "too many",
        accounts: Array.from({ length: 101 }, (_, i) => ({
          curve: "CURVE_SECP256K1" as const,
          pathFormat: "PATH_FORMAT_BIP32" as const,
          path: `m/44'/60'/0'/0/${i}`,
          addressFormat: "ADDRESS_FORMAT_ETHEREUM" as const,
        })),
      }),
    ).rejects.toMatchObject({ code: 3, message: expect.stringContaining("at most 100") });
    // A Solana message of a version the policy context cannot read is not signed either.
    const from = new PublicKey(solAddress);
    const v0 = new VersionedTransaction(
      new TransactionMessage({
        payerKey: from,
        recentBlockhash: new PublicKey(Buffer.alloc(32, 7)).toBase58(),
        instructions: [SystemProgram.transfer({ fromPubkey: from, toPubkey: from, lamports: 1 })],
      }).compileToV0Message(),
    );
    const wire = Buffer.from(v0.serialize());
    wire[65] = 0x81; // the version byte after one empty signature slot: "v1"
    await expect(
      client.signTransaction({ signWith: solAddress, unsignedTransaction: wire.toString("hex"), type: "TRANSACTION_TYPE_SOLANA" }),
    ).rejects.toMatchObject({ code: 3 });
    const after = JSON.parse(await h.snapshot());
    for (const table of ["wallets", "wallet_accounts", "private_keys"]) expect(after[table], table).toEqual(before[table]);
  });

  it("another organization cannot sign with this organization's keys", async () => {
    const other = await h.organization("Thief");
    const thief = h.sdk(other, other.key);
    await expect(
      thief.signRawPayload({
        signWith: ethAddress,
        payload: "00",
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_SHA256",
      }),
    ).rejects.toMatchObject({ code: 5 });
    await expect(
      thief.signRawPayload({
        signWith: privateKeyId,
        payload: "00",
        encoding: "PAYLOAD_ENCODING_HEXADECIMAL",
        hashFunction: "HASH_FUNCTION_SHA256",
      }),
    ).rejects.toMatchObject({ code: 5 });
  });
});
