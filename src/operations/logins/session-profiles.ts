// Session profiles: what a login may narrow a session to. A profile names a scope (a condition in the
// policy language) that every activity requested with a session key issued under it must satisfy, and
// the longest such a session may last. Profiles are immutable (the product offers no update or delete),
// and a sub-organization's logins may use its parent's, as the product's docs describe: the parent
// makes the profiles its end users' sessions are issued with.
import { serviceError } from "../../errors.js";
import { InvalidPolicyError, compileField, present } from "../../policy/engine.js";
import { defineActivity, defineQuery } from "../../registry/registry.js";
import type { Db, Tx } from "../../store/handles.js";
import type { SessionProfilesTable } from "../../store/schema.js";
import { newId } from "../../store/ids.js";
import { requireName } from "../identity/credentials.js";
import { secondsParameter, timestamp } from "../resources.js";

/** The organizations whose profiles `organizationId` may use and read: its own and its parent's. */
async function profileOwners(db: Db | Tx, organizationId: string): Promise<string[]> {
  const organization = await db
    .selectFrom("organizations")
    .select("parent_organization_id")
    .where("id", "=", organizationId)
    .executeTakeFirst();
  return organization?.parent_organization_id ? [organizationId, organization.parent_organization_id] : [organizationId];
}

/** The profile `id` if `organizationId` may use it (its own, or its parent's), else SESSION_PROFILE_NOT_FOUND:
 * a profile of an unrelated organization is as unknown as one that never existed. */
export async function usableSessionProfile(db: Db | Tx, organizationId: string, id: string): Promise<SessionProfilesTable> {
  const row = await db
    .selectFrom("session_profiles")
    .selectAll()
    .where("id", "=", id)
    .where("organization_id", "in", await profileOwners(db, organizationId))
    .executeTakeFirst();
  if (!row)
    throw serviceError(
      "SESSION_PROFILE_NOT_FOUND",
      `no session profile ${id} in organization ${organizationId} or its parent organization`,
    );
  return row;
}

/** The scope of the profile a session key was issued with (profiles never change, so the id suffices). */
export async function sessionProfileScope(db: Db | Tx, id: string): Promise<string | undefined> {
  const row = await db.selectFrom("session_profiles").select("scope").where("id", "=", id).executeTakeFirst();
  return row?.scope;
}

/** A session profile as the API renders it (v1SessionProfile). */
function renderSessionProfile(row: SessionProfilesTable) {
  return {
    sessionProfileId: row.id,
    sessionProfileName: row.name,
    scope: row.scope,
    ...(row.expiration_seconds !== null ? { expirationSeconds: row.expiration_seconds } : {}),
    ...(row.notes !== null ? { notes: row.notes } : {}),
    createdAt: timestamp(row.created_at),
    updatedAt: timestamp(row.updated_at),
  };
}

/** A scope must compile as a policy condition: it is evaluated like one on every activity of the session. */
function checkScope(scope: string): string {
  if (!present(scope))
    throw serviceError("REQUEST_INVALID", "scope must not be empty: it is a policy condition, and `true` allows every activity");
  try {
    compileField("condition", scope);
  } catch (error) {
    if (error instanceof InvalidPolicyError)
      throw serviceError("POLICY_INVALID", `scope is not a valid policy condition: ${error.problem.message}`);
    throw error;
  }
  return scope;
}

const MAX_NOTES = 1024;

/** The prefix of the product's session types (SESSION_TYPE_READ_WRITE, SESSION_TYPE_READ_ONLY). */
const RESERVED_NAME_PREFIX = "SESSION_TYPE_";

export const sessionProfileOperations = [
  defineActivity({
    name: "create_session_profile",
    summary:
      "A session profile: a scope (a policy condition) every activity of the sessions issued with it must satisfy, and their longest lifetime.",
    resource: "SESSION_PROFILE",
    action: "CREATE",
    async execute(ctx, p) {
      const name = requireName(p.sessionProfileName, "sessionProfileName");
      // The name becomes the session JWT's session_type: one spelled like the product's own types would
      // make a client take a scoped session for an unscoped one.
      if (name.startsWith(RESERVED_NAME_PREFIX))
        throw serviceError(
          "REQUEST_INVALID",
          `sessionProfileName may not start with "${RESERVED_NAME_PREFIX}": the name is the session JWT's session_type, and those are the product's own session types`,
        );
      const scope = checkScope(p.scope);
      const { maxSeconds } = ctx.env.sessions;
      // A profile's lifetime is a session's: within what this server grants any session.
      const seconds = secondsParameter(p.expirationSeconds, {
        field: "expirationSeconds",
        max: maxSeconds,
        of: "a session",
        code: "INVALID_EXPIRATION",
        tooLong: (value) =>
          serviceError(
            "SESSION_EXPIRATION_TOO_LONG",
            `expirationSeconds ${value} exceeds the longest session this server grants (${maxSeconds} seconds, SIGIL_SESSION_MAX_SECONDS)`,
          ),
      });
      if (p.notes !== undefined && p.notes.length > MAX_NOTES)
        throw serviceError("REQUEST_INVALID", `notes must be at most ${MAX_NOTES} characters`);
      const taken = await ctx.trx
        .selectFrom("session_profiles")
        .select("id")
        .where("organization_id", "=", ctx.organizationId)
        .where("name", "=", name)
        .executeTakeFirst();
      // The name is the session JWT's session_type, by which a client tells its sessions apart.
      if (taken)
        throw serviceError(
          "SESSION_PROFILE_ALREADY_EXISTS",
          `organization ${ctx.organizationId} already has a session profile named "${name}"`,
        );
      const id = newId();
      await ctx.trx
        .insertInto("session_profiles")
        .values({
          id,
          organization_id: ctx.organizationId,
          name,
          scope,
          expiration_seconds: seconds === undefined ? null : String(seconds),
          notes: p.notes ?? null,
          created_at: ctx.now,
          updated_at: ctx.now,
        })
        .execute();
      return { sessionProfileId: id };
    },
  }),

  defineQuery({
    name: "get_session_profile",
    summary: "One session profile of the organization or of its parent organization.",
    async run(ctx, body) {
      return { sessionProfile: renderSessionProfile(await usableSessionProfile(ctx.db, ctx.organizationId, body.sessionProfileId)) };
    },
  }),

  defineQuery({
    name: "get_session_profiles",
    summary: "The session profiles the organization's logins may use: its own and its parent organization's, oldest first.",
    async run(ctx) {
      const rows = await ctx.db
        .selectFrom("session_profiles")
        .selectAll()
        .where("organization_id", "in", await profileOwners(ctx.db, ctx.organizationId))
        .orderBy("created_at")
        .orderBy("id")
        .execute();
      return { sessionProfiles: rows.map(renderSessionProfile) };
    },
  }),
];
