// The paginationOptions every list shares (one rule, readPage in src/operations/resources.ts), over raw
// HTTP for each paged list: the audit log (newest first), a wallet's accounts and the sub-organizations
// (oldest first). Pages follow each other whichever way they are read; bad options are refused with
// 400 REQUEST_INVALID, naming the problem, and change nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { signedRequest, startHarness, newKeyPair, type Harness, type TestOrganization } from "./helpers/harness.js";
import { fastPoller } from "./helpers/organizations.js";

let h: Harness;
let org: TestOrganization;
let other: TestOrganization;
let walletId: string;
let otherWalletAccountId: string;

interface List {
  name: string;
  query: string;
  body: () => Record<string, unknown>;
  ids: (json: any) => string[];
  cursorIs: string;
}

const lists: List[] = [
  {
    name: "the audit log",
    query: "list_activities",
    body: () => ({ organizationId: org.organizationId }),
    ids: (json) => json.activities.map((a: { id: string }) => a.id),
    cursorIs: "an activity of this organization",
  },
  {
    name: "a wallet's accounts",
    query: "list_wallet_accounts",
    body: () => ({ organizationId: org.organizationId, walletId }),
    ids: (json) => json.accounts.map((a: { walletAccountId: string }) => a.walletAccountId),
    cursorIs: "a wallet account of this organization",
  },
  {
    name: "the sub-organizations",
    query: "list_suborgs",
    body: () => ({ organizationId: org.organizationId }),
    ids: (json) => json.organizationIds,
    cursorIs: "a sub-organization of",
  },
];

beforeAll(async () => {
  h = await startHarness();
  org = await h.organization("Paged");
  other = await h.organization("Elsewhere");
  const sdk = h.sdk(org, org.key, fastPoller);
  for (const name of ["one", "two", "three", "four"]) await sdk.createUserTag({ userTagName: name, userIds: [] });
  const account = { curve: "CURVE_SECP256K1", pathFormat: "PATH_FORMAT_BIP32", addressFormat: "ADDRESS_FORMAT_ETHEREUM" } as const;
  const accounts = [0, 1, 2, 3, 4].map((i) => ({ ...account, path: `m/44'/60'/0'/0/${i}` }));
  walletId = (await sdk.createWallet({ walletName: "paged", accounts })).walletId;
  for (const n of [1, 2, 3, 4, 5]) {
    const apiKeys = [{ apiKeyName: "root key", publicKey: newKeyPair().publicKey, curveType: "API_KEY_CURVE_P256" as const }];
    const rootUsers = [{ userName: "root", apiKeys, authenticators: [], oauthProviders: [] }];
    await sdk.createSubOrganization({ subOrganizationName: `sub ${n}`, rootQuorumThreshold: 1, rootUsers });
  }
  const elsewhere = h.sdk(other, other.key, fastPoller);
  const { addresses } = await elsewhere.createWallet({ walletName: "theirs", accounts: [{ ...account, path: "m/44'/60'/0'/0/0" }] });
  const theirs = await elsewhere.getWalletAccounts({ walletId: (await elsewhere.getWallets({})).wallets[0]!.walletId });
  otherWalletAccountId = theirs.accounts.find((a) => a.address === addresses[0])!.walletAccountId;
});
afterAll(() => h?.close());

async function query(list: List, paginationOptions: Record<string, string>, by: TestOrganization = org) {
  const { body, headers } = signedRequest(
    { ...list.body(), ...(by === org ? {} : { organizationId: by.organizationId }), paginationOptions },
    by.key,
  );
  return h.post(`/public/v1/query/${list.query}`, body, headers);
}

async function page(list: List, paginationOptions: Record<string, string>): Promise<string[]> {
  const response = await query(list, paginationOptions);
  expect(response.status, JSON.stringify(response.json)).toBe(200);
  return list.ids(response.json);
}

/** Sends options that must be refused: 400 REQUEST_INVALID with `message`, and no row changed. */
async function refused(list: List, paginationOptions: Record<string, string>, message: string | RegExp) {
  const before = await h.snapshot();
  const response = await query(list, paginationOptions);
  expect(response.status, JSON.stringify(response.json)).toBe(400);
  expect(response.json.details[0].turnkeyErrorCode).toBe("REQUEST_INVALID");
  if (typeof message === "string") expect(response.json.message).toContain(message);
  else expect(response.json.message).toMatch(message);
  expect(await h.snapshot()).toBe(before);
}

describe.each(lists)("paging $name", (list) => {
  it("reads the list a page at a time: after goes on, before comes back; an empty cursor is no cursor", async () => {
    const all = await page(list, { limit: "100" });
    expect(all.length).toBeGreaterThanOrEqual(4);
    expect(await page(list, {})).toEqual(all.slice(0, 10));
    const first = await page(list, { limit: "2" });
    expect(first).toEqual(all.slice(0, 2));
    const second = await page(list, { limit: "2", after: first[1]! });
    expect(second).toEqual(all.slice(2, 4));
    expect(await page(list, { limit: "2", before: second[0]! })).toEqual(all.slice(0, 2));
    expect(await page(list, { limit: "1", before: second[1]! })).toEqual(all.slice(2, 3));
    expect(await page(list, { limit: "2", before: "", after: first[1]! })).toEqual(second);
    expect(await page(list, { limit: "1", before: second[0]!, after: "" })).toEqual(all.slice(1, 2));
    expect(await page(list, { limit: "100", after: all.at(-1)! })).toEqual([]);
  });

  it("refuses before and after together, a limit outside 1 to 100, and a cursor that is not one of the list's rows", async () => {
    const [a, b] = await page(list, { limit: "2" });
    await refused(list, { before: a!, after: b! }, "paginationOptions takes before or after, not both");
    for (const limit of ["0", "101", "-1", "1.5", "ten"])
      await refused(list, { limit }, `paginationOptions.limit must be between 1 and 100, got "${limit}"`);
    await refused(
      list,
      { after: "00000000-0000-0000-0000-000000000000" },
      `pagination cursor 00000000-0000-0000-0000-000000000000 is not ${list.cursorIs}`,
    );
    // Another organization's row is no cursor here (the lists' own rows only).
    const foreign =
      { list_wallet_accounts: otherWalletAccountId, list_suborgs: other.organizationId }[list.query] ?? (await foreignActivity());
    await refused(list, { before: foreign }, `pagination cursor ${foreign} is not ${list.cursorIs}`);
  });
});

async function foreignActivity(): Promise<string> {
  const activities = lists[0]!;
  const response = await query(activities, { limit: "1" }, other);
  return activities.ids(response.json)[0]!;
}
