// Shared fixtures of the policy and signing suites: organizations with non-root members (each with
// its own API key and client), and the EIP-712 "Ether Mail" example used across the signing tests.
import { newKeyPair, type ApiKeyPair, type Harness } from "./harness.js";

/** sdk-server polls CONSENSUS_NEEDED activities; tests keep that short. */
export const fastPoller = { activityPoller: { intervalMs: 10, numRetries: 1 } };
export const noCredentials = { authenticators: [], oauthProviders: [], userTags: [] };

export interface Member {
  userId: string;
  key: ApiKeyPair;
  client: ReturnType<Harness["sdk"]>;
}

/** A fresh organization with a root user and the named non-root users, each holding an API key. */
export async function organizationWith(h: Harness, names: string[], keyOptions: { expirationSeconds?: string } = {}) {
  const org = await h.organization();
  const root = h.sdk(org, org.key, fastPoller);
  const members: Record<string, Member> = {};
  if (names.length === 0) return { org, root, members };
  const keys = names.map(() => newKeyPair());
  const { userIds } = await root.createUsers({
    users: names.map((userName, i) => ({
      userName,
      apiKeys: [{ apiKeyName: `${userName} key`, publicKey: keys[i]!.publicKey, curveType: "API_KEY_CURVE_P256" as const, ...keyOptions }],
      ...noCredentials,
    })),
  });
  names.forEach((name, i) => (members[name] = { userId: userIds[i]!, key: keys[i]!, client: h.sdk(org, keys[i]!, fastPoller) }));
  return { org, root, members };
}

/**
 * An organization whose root user holds a wallet with one Ethereum account, and a member, alice, whom
 * a policy allows to sign raw payloads with it: both ways a signature is allowed (the root user's by
 * the root quorum, alice's by a policy).
 */
export async function signingOrganization(h: Harness, walletName: string) {
  const made = await ethereumAccountOrganization(h, walletName);
  const { alice } = made;
  await made.root.createPolicy({
    policyName: "alice signs",
    effect: "EFFECT_ALLOW",
    condition: "activity.type == 'ACTIVITY_TYPE_SIGN_RAW_PAYLOAD_V2'",
    consensus: `approvers.any(user, user.id == '${alice.userId}')`,
    notes: "",
  });
  return { org: made.org, root: made.root, alice, signWith: made.address };
}

/** An organization with a member alice (no policy) and a wallet of one Ethereum account, m/44'/60'/0'/0/0. */
export async function ethereumAccountOrganization(h: Harness, walletName: string) {
  const made = await organizationWith(h, ["alice"]);
  const wallet = await made.root.createWallet({
    walletName,
    accounts: [
      { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", path: "m/44'/60'/0'/0/0", addressFormat: "ADDRESS_FORMAT_ETHEREUM" },
    ],
  });
  return { org: made.org, root: made.root, alice: made.members.alice!, address: wallet.addresses[0]! };
}

/** The EIP-712 specification's example message. */
export const ETHER_MAIL = {
  domain: { name: "Ether Mail", version: "1", chainId: 1, verifyingContract: "0xCcCCccccCCCCcCCCCCCcCcCccCcCCCcCcccccccC" },
  types: {
    Person: [
      { name: "name", type: "string" },
      { name: "wallet", type: "address" },
    ],
    Mail: [
      { name: "from", type: "Person" },
      { name: "to", type: "Person" },
      { name: "contents", type: "string" },
    ],
  },
  primaryType: "Mail",
  message: {
    from: { name: "Cow", wallet: "0xCD2a3d9F938E13CD947Ec05AbC7FE734Df8DD826" },
    to: { name: "Bob", wallet: "0xbBbBBBBbbBBBbbbBbbBbbbbBBbBbbbbBbBbbBBbB" },
    contents: "Hello, Bob!",
  },
} as const;
