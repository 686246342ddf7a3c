// Stored rows rendered as the API's resource objects, and the look-ups operations share.
import { sql, type ExpressionBuilder, type SelectQueryBuilder } from "kysely";
import type { Db, Tx } from "../store/handles.js";
import type { Selectable } from "kysely";
import type { ApiKeysTable, AuthenticatorsTable, MfaPoliciesTable, OauthProvidersTable, UsersTable } from "../store/schema.js";
import { serviceError, type ServiceError } from "../errors.js";
import { API_KEY_CREDENTIAL_TYPES } from "../auth/authenticate.js";

// Operations take ids from here with the rest of what they share; store/ids.ts declares them.

export interface Timestamp {
  seconds: string;
  nanos: string;
}

export function timestamp(ms: number): Timestamp {
  return { seconds: String(Math.floor(ms / 1000)), nanos: String((ms % 1000) * 1_000_000) };
}

export function renderApiKey(row: Selectable<ApiKeysTable>) {
  return {
    credential: {
      publicKey: row.public_key,
      type: API_KEY_CREDENTIAL_TYPES[row.curve],
      ...(row.session_profile_id ? { sessionProfileId: row.session_profile_id } : {}),
    },
    apiKeyId: row.id,
    apiKeyName: row.name,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
    ...(row.expiration_seconds !== null ? { expirationSeconds: row.expiration_seconds } : {}),
  };
}

export function renderAuthenticator(row: AuthenticatorsTable) {
  return {
    transports: JSON.parse(row.transports) as string[],
    attestationType: row.attestation_type,
    aaguid: row.aaguid,
    credentialId: row.credential_id,
    model: row.model,
    credential: { publicKey: row.public_key, type: "CREDENTIAL_TYPE_WEBAUTHN_AUTHENTICATOR" },
    authenticatorId: row.id,
    authenticatorName: row.name,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
  };
}

export function renderOauthProvider(row: OauthProvidersTable) {
  return {
    providerId: row.id,
    providerName: row.name,
    issuer: row.issuer,
    audience: row.audience,
    subject: row.subject,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
  };
}

/** An MFA policy as the API shows it (its steps are stored as they are shown). */
export function renderMfaPolicy(row: MfaPoliciesTable) {
  return {
    mfaPolicyId: row.id,
    mfaPolicyName: row.name,
    condition: row.condition,
    requiredAuthenticationMethods: JSON.parse(row.required_methods) as Array<{ any: Array<{ type: string; id?: string }> }>,
    order: row.evaluation_order,
    notes: row.notes,
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
  };
}

/** Users with their credentials and tags, in creation order, loaded in a fixed number of queries. */
export async function loadUsers(db: Db | Tx, organizationId: string, userIds?: string[]) {
  if (userIds && userIds.length === 0) return [];
  let usersQuery = db.selectFrom("users").selectAll().where("organization_id", "=", organizationId);
  if (userIds) usersQuery = usersQuery.where("id", "in", userIds);
  const users = await usersQuery.orderBy("created_at").orderBy("id").execute();
  if (users.length === 0) return [];
  const ids = users.map((u) => u.id);
  const [apiKeys, authenticators, providers, tags, mfaPolicies] = await Promise.all([
    db.selectFrom("api_keys").selectAll().where("user_id", "in", ids).orderBy("created_at").orderBy("id").execute(),
    db.selectFrom("authenticators").selectAll().where("user_id", "in", ids).orderBy("created_at").orderBy("id").execute(),
    db.selectFrom("oauth_providers").selectAll().where("user_id", "in", ids).orderBy("created_at").orderBy("id").execute(),
    db.selectFrom("user_tag_members").select(["user_id", "tag_id"]).where("user_id", "in", ids).orderBy("tag_id").execute(),
    db
      .selectFrom("mfa_policies")
      .selectAll()
      .where("user_id", "in", ids)
      .orderBy("evaluation_order")
      .orderBy("created_at")
      .orderBy("id")
      .execute(),
  ]);
  const byUser = <T extends { user_id: string }>(rows: T[]) => {
    const map = new Map<string, T[]>();
    for (const row of rows) {
      const list = map.get(row.user_id);
      if (list) list.push(row);
      else map.set(row.user_id, [row]);
    }
    return map;
  };
  const keysBy = byUser(apiKeys),
    authsBy = byUser(authenticators),
    providersBy = byUser(providers),
    tagsBy = byUser(tags),
    mfaPoliciesBy = byUser(mfaPolicies);
  return users.map((user: Selectable<UsersTable>) => ({
    userId: user.id,
    userName: user.name,
    ...(user.email !== null ? { userEmail: user.email } : {}),
    ...(user.phone_number !== null ? { userPhoneNumber: user.phone_number } : {}),
    authenticators: (authsBy.get(user.id) ?? []).map(renderAuthenticator),
    apiKeys: (keysBy.get(user.id) ?? []).map(renderApiKey),
    userTags: (tagsBy.get(user.id) ?? []).map((t) => t.tag_id),
    oauthProviders: (providersBy.get(user.id) ?? []).map(renderOauthProvider),
    mfaPolicies: (mfaPoliciesBy.get(user.id) ?? []).map(renderMfaPolicy),
    createdAt: timestamp(user.created_at),
    updatedAt: timestamp(user.updated_at),
  }));
}

export async function requireUser(db: Db | Tx, organizationId: string, userId: string): Promise<Selectable<UsersTable>> {
  const user = await db
    .selectFrom("users")
    .selectAll()
    .where("organization_id", "=", organizationId)
    .where("id", "=", userId)
    .executeTakeFirst();
  if (!user) throw serviceError("USER_NOT_FOUND", `user ${userId} not found in organization ${organizationId}`);
  return user;
}

/** Throws NotFound naming the first id that is not a user of the organization. */
export async function requireUsers(db: Db | Tx, organizationId: string, userIds: string[]): Promise<void> {
  if (userIds.length === 0) return;
  const found = await db
    .selectFrom("users")
    .select("id")
    .where("organization_id", "=", organizationId)
    .where("id", "in", userIds)
    .execute();
  const known = new Set(found.map((u) => u.id));
  const missing = userIds.find((id) => !known.has(id));
  // Compared with undefined: an empty id is missing too, and a truthiness test let it through to
  // the insert, where the foreign key refused it (500).
  if (missing !== undefined) throw serviceError("USER_NOT_FOUND", `user ${missing} not found in organization ${organizationId}`);
}

/** Throws NotFound naming the first id that is not a user tag of the organization. */
export async function requireUserTags(db: Db | Tx, organizationId: string, tagIds: string[]): Promise<void> {
  if (tagIds.length === 0) return;
  const found = await db
    .selectFrom("tags")
    .select("id")
    .where("organization_id", "=", organizationId)
    .where("tag_type", "=", "TAG_TYPE_USER")
    .where("id", "in", tagIds)
    .execute();
  const known = new Set(found.map((t) => t.id));
  const missing = tagIds.find((id) => !known.has(id));
  if (missing !== undefined) throw serviceError("USER_TAG_NOT_FOUND", `user tag ${missing} not found in organization ${organizationId}`);
}

/** Rejects a list that names the same id twice: the caller almost certainly meant something else. */
export function distinct(ids: string[], what: string): string[] {
  const seen = new Set<string>();
  for (const id of ids) {
    if (seen.has(id)) throw serviceError("REQUEST_INVALID", `${what} lists ${id} more than once`);
    seen.add(id);
  }
  return ids;
}

export interface Pagination {
  limit?: string;
  before?: string;
  after?: string;
}

/** paginationOptions.limit of the list queries: 1 to 100, 10 when absent. */
export function pageSize(limit: string | undefined): number {
  if (limit === undefined || limit === "") return 10;
  const n = Number(limit);
  if (!/^\d+$/.test(limit) || n < 1 || n > 100)
    throw serviceError("REQUEST_INVALID", `paginationOptions.limit must be between 1 and 100, got "${limit}"`);
  return n;
}

/** What a seconds parameter may be (secondsParameter). */
export interface SecondsRule {
  /** The field's name in the request, for messages: "expirationSeconds", "apiKeys[0].expirationSeconds". */
  field: string;
  max: number;
  /** What the lifetime is of, for messages: "a one-time password". */
  of?: string;
  /** The error code of a refusal (the API's: INVALID_EXPIRATION, REQUEST_INVALID for API keys). */
  code: "INVALID_EXPIRATION" | "REQUEST_INVALID";
  /** A refusal of its own for a whole number above max (given as sent): where max is this server's setting, not the API's. */
  tooLong?: (value: string) => ServiceError;
}

/**
 * The one rule for lifetimes given in seconds (expirationSeconds and its like): the API sends them as
 * strings of digits; absent or "" is "not given" (undefined: the caller's default applies), anything
 * else must be a whole number of seconds from 1 to the rule's max.
 */
export function secondsParameter(value: string | undefined, rule: SecondsRule): number | undefined {
  if (value === undefined || value === "") return undefined;
  const seconds = /^\d+$/.test(value) ? Number(value) : 0;
  if (seconds >= 1 && seconds <= rule.max) return seconds;
  if (seconds > rule.max && rule.tooLong) throw rule.tooLong(value);
  throw serviceError(
    rule.code,
    `${rule.field} must be a whole number of seconds from 1 to ${rule.max}${rule.of ? ` for ${rule.of}` : ""}, got "${value}"`,
  );
}

/**
 * Requests that make the service derive or sign once per item hold their organization's lock while
 * they do; a bound per request keeps one caller from holding it for long. Larger jobs are split.
 */
export const MAX_ITEMS_PER_REQUEST = 100;

export function requireAtMost(items: unknown[], field: string, max = MAX_ITEMS_PER_REQUEST): void {
  if (items.length > max)
    throw serviceError("TOO_MANY_ITEMS", `${field} lists ${items.length} items; at most ${max} per request: send several requests`);
}

/**
 * Keyset pagination over (created_at, id), for lists ordered newest first (the audit log) or oldest
 * first (wallet accounts): `after` pages along that order, `before` against it. Returns the filter
 * that starts the page at the cursor, the direction to read in, and whether to reverse what was read.
 */
function keysetPage(cursor: { created_at: number; id: string } | undefined, side: "after" | "before", newestFirst: boolean) {
  const forward = side === "after";
  const descending = newestFirst === forward;
  const op = descending ? "<" : ">";
  return {
    filter: cursor
      ? // biome-ignore lint/suspicious/noExplicitAny: the keyset filter applies to any table with created_at and id, which Kysely cannot name generically
        (eb: ExpressionBuilder<any, any>) =>
          eb.and([
            // Redundant with the next condition, but an index on (owner, created_at, id) serves it as
            // a range, where it served the OR alone as a filter on every row before the cursor.
            eb("created_at", `${op}=`, cursor.created_at),
            eb.or([eb("created_at", op, cursor.created_at), eb.and([eb("created_at", "=", cursor.created_at), eb("id", op, cursor.id)])]),
          ])
      : undefined,
    direction: (descending ? "desc" : "asc") as "desc" | "asc",
    reverse: !forward,
  };
}

/** What a paged list says of itself (readPage). */
export interface PagedList {
  newestFirst: boolean;
  /** Where the list's rows are, for the cursor: a row of `table` whose `scope` column is `owner`. */
  table: "activities" | "wallet_accounts" | "organizations" | "email_events" | "secrets" | "webhook_deliveries";
  scope: "organization_id" | "parent_organization_id";
  owner: string;
  /** What a cursor must name, for the refusal of one that does not: "an activity of this organization". */
  cursorIs: string;
}

/**
 * One page of a list query whose rows have created_at and id: the paginationOptions checked (`before`
 * or `after`, not both; "" is absent, as for the limit), the cursor looked up among the list's rows,
 * and the page read in the list's order whichever way it pages.
 */
export async function readPage<Row>(
  db: Db,
  // biome-ignore lint/suspicious/noExplicitAny: a page of any table with created_at and id; Kysely cannot name such a table generically
  query: SelectQueryBuilder<any, any, Row>,
  pagination: Pagination | undefined,
  list: PagedList,
): Promise<Row[]> {
  const { limit, before, after } = pagination ?? {};
  if (before && after) throw serviceError("REQUEST_INVALID", "paginationOptions takes before or after, not both");
  const size = pageSize(limit);
  const cursorId = before || after;
  const cursor = cursorId
    ? await db
        .selectFrom(list.table)
        .select(["created_at", "id"])
        .where(sql.ref(list.scope), "=", list.owner)
        .where("id", "=", cursorId)
        .executeTakeFirst()
    : undefined;
  if (cursorId && !cursor) throw serviceError("REQUEST_INVALID", `pagination cursor ${cursorId} is not ${list.cursorIs}`);
  const page = keysetPage(cursor, before ? "before" : "after", list.newestFirst);
  const from = page.filter ? query.where(page.filter) : query;
  const rows = await from.orderBy("created_at", page.direction).orderBy("id", page.direction).limit(size).execute();
  if (page.reverse) rows.reverse();
  return rows;
}

/**
 * What an activity prepares once per request and reads twice: its policy keywords (before the decision)
 * and its execution (after it) share one preparation, keyed by the request's parameters object, so what
 * policies allowed is exactly what runs. A failed preparation is reported by whichever step awaits it.
 */
export function oncePerRequest<P extends object, T>(): (p: P, prepare: () => Promise<T>) => Promise<T> {
  const prepared = new WeakMap<P, Promise<T>>();
  return (p, prepare) => {
    let preparing = prepared.get(p);
    if (!preparing) {
      preparing = prepare();
      prepared.set(p, preparing);
      preparing.catch(() => undefined);
    }
    return preparing;
  };
}
