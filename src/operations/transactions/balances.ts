// Balances and assets (docs/chain-assets.md): get_wallet_address_balances asks the chain's node for a
// wallet account's native balance (eth_getBalance, getBalance) and its balance of every token the
// deployment lists in SIGIL_CHAIN_ASSETS (ERC-20 balanceOf through viem, SPL token accounts by mint),
// answering the non-zero ones; list_supported_assets lists those assets. No price feed: no `usd`.
import { erc20Abi, getAddress, isAddress, type Hex } from "viem";
import { address as solanaAddress } from "@solana/kit";
import { canonicalCaip2 } from "../../config.js";
import { serviceError } from "../../errors.js";
import type { Db } from "../../store/handles.js";
import { chainAssets, displayAmount, tokenReference, type AssetMetadata } from "../../chains/assets.js";
import { defineQuery } from "../../registry/registry.js";
import { unavailable, type ChainRpc } from "../../services/chain-rpc.js";
import { solanaUnavailable } from "../../services/solana-rpc.js";

/** The namespaces whose balances and history are served. */
export type ChainNamespace = "eip155" | "solana";

export function namespaceOf(caip2: string): ChainNamespace {
  if (caip2.startsWith("eip155:")) return "eip155";
  if (caip2.startsWith("solana:")) return "solana";
  throw serviceError("REQUEST_INVALID", `caip2 ${caip2} is neither an EVM chain (eip155:…) nor a Solana cluster (solana:…)`);
}

const FORMAT_OF: Record<ChainNamespace, string> = { eip155: "ADDRESS_FORMAT_ETHEREUM", solana: "ADDRESS_FORMAT_SOLANA" };

/**
 * The wallet account `address` names on `caip2`'s chain: the API answers for wallet accounts only
 * (private key addresses are not supported), and the account's address must be of the chain's kind.
 */
export async function walletAccountOn(db: Db, organizationId: string, address: string, caip2: string): Promise<string> {
  const namespace = namespaceOf(caip2);
  let wanted = address;
  if (namespace === "eip155") {
    if (!isAddress(address, { strict: false }))
      throw serviceError(
        "REQUEST_INVALID",
        `address must be an Ethereum address (0x and 40 hex digits) on ${caip2}, got ${JSON.stringify(address.slice(0, 80))}`,
      );
    wanted = getAddress(address);
  }
  const account = await db
    .selectFrom("wallet_accounts")
    .select(["address", "address_format"])
    .where("organization_id", "=", organizationId)
    .where("address", "=", wanted)
    .executeTakeFirst();
  if (!account) {
    const privateKey = await db
      .selectFrom("private_key_addresses")
      .select("private_key_id")
      .where("organization_id", "=", organizationId)
      .where("address", "=", wanted)
      .executeTakeFirst();
    if (privateKey)
      throw serviceError(
        "REQUEST_INVALID",
        `${wanted} is an address of private key ${privateKey.private_key_id}; balances and history are answered for wallet accounts only (private key addresses are not supported)`,
      );
    throw serviceError("WALLET_ACCOUNT_NOT_FOUND", `no wallet account with address ${wanted} in organization ${organizationId}`);
  }
  if (account.address_format !== FORMAT_OF[namespace])
    throw serviceError(
      "REQUEST_INVALID",
      `${wanted} is an ${account.address_format} account; ${caip2} takes an ${FORMAT_OF[namespace]} account's address`,
    );
  return account.address;
}

/** The chain's assets, when it has a node here (an asset of a chain without one cannot be asked for). */
export function supportedAssets(chains: ChainRpc, caip2: string): AssetMetadata[] {
  namespaceOf(caip2);
  if (!chains.has(caip2)) throw chains.notConfigured(caip2);
  return chainAssets(caip2, chains.assets);
}

/** Every listed asset's balance of `owner`, in atomic units. */
async function balancesOf(chains: ChainRpc, caip2: string, owner: string, assets: AssetMetadata[]): Promise<bigint[]> {
  if (namespaceOf(caip2) === "eip155") {
    const { client } = await chains.evm(caip2);
    return Promise.all(
      assets.map(async (asset) => {
        const token = tokenReference(asset);
        try {
          if (!token) return await client.getBalance({ address: owner as Hex });
          return await client.readContract({
            address: token.address as Hex,
            abi: erc20Abi,
            functionName: "balanceOf",
            args: [owner as Hex],
          });
        } catch (error) {
          throw unavailable(caip2, error);
        }
      }),
    );
  }
  const { rpc } = await chains.solana(caip2);
  return Promise.all(
    assets.map(async (asset) => {
      const token = tokenReference(asset);
      try {
        if (!token) return (await rpc.getBalance(solanaAddress(owner)).send()).value;
        const { value } = await rpc
          .getTokenAccountsByOwner(solanaAddress(owner), { mint: solanaAddress(token.address) }, { encoding: "base64" })
          .send();
        // An SPL token account's amount: a u64 at byte 64 (after the mint and the owner).
        return value.reduce((sum, { account }) => sum + Buffer.from(account.data[0], "base64").readBigUInt64LE(64), 0n);
      } catch (error) {
        throw solanaUnavailable(caip2, error);
      }
    }),
  );
}

export const balanceOperations = [
  defineQuery({
    name: "get_wallet_address_balances",
    summary:
      "A wallet account's non-zero balances on a chain, from its node: the native coin and the tokens SIGIL_CHAIN_ASSETS lists (no USD values).",
    async run(ctx, body) {
      const caip2 = canonicalCaip2(body.caip2);
      const assets = supportedAssets(ctx.chains, caip2);
      const owner = await walletAccountOn(ctx.db, ctx.organizationId, body.address, caip2);
      const amounts = await balancesOf(ctx.chains, caip2, owner, assets);
      return {
        balances: assets.flatMap((asset, i) =>
          amounts[i]! > 0n
            ? [
                {
                  caip19: asset.caip19,
                  symbol: asset.symbol,
                  name: asset.name,
                  decimals: asset.decimals,
                  balance: amounts[i]!.toString(),
                  display: { crypto: displayAmount(amounts[i]!, asset.decimals) },
                },
              ]
            : [],
        ),
      };
    },
  }),

  defineQuery({
    name: "list_supported_assets",
    summary:
      "The assets whose balances this server reports on a chain with a node: its native coin and the tokens SIGIL_CHAIN_ASSETS lists.",
    async run(ctx, body) {
      const caip2 = canonicalCaip2(body.caip2);
      return {
        assets: supportedAssets(ctx.chains, caip2).map((asset) => ({
          caip19: asset.caip19,
          symbol: asset.symbol,
          name: asset.name,
          decimals: asset.decimals,
          ...(asset.logoUrl !== undefined ? { logoUrl: asset.logoUrl } : {}),
          stable: asset.stable ?? false,
        })),
      };
    },
  }),
];
