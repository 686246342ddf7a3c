// The transparency log's queries (docs/audit-log.md), in Sigil's own namespace (/sigil/v1/query/):
// the latest checkpoint, an activity's inclusion proof, and a consistency proof between two sizes.
// Hashes are base64 (as in the checkpoints); each answer carries the signed checkpoint it is
// relative to, so a client checks it against the published verifier key without another request.
import { defineSigilQuery, type QueryContext } from "../../registry/registry.js";
import { serviceError } from "../../errors.js";
import { foldRange, planConsistency, planInclusion, rangeSubtrees, type Hash } from "../../store/merkle.js";
import { entryBytes, isFinal, leafOfActivity, logEntry, readHead, readProof, readSubtrees } from "../../store/transparency-log.js";
import { originOf } from "../../services/log-checkpoints.js";
import { requireActivity } from "./records.js";

const b64 = (hash: Hash) => hash.toString("base64");

const size = { type: "integer", minimum: 0, maximum: Number.MAX_SAFE_INTEGER } as const;

/** The checkpoint an answer is relative to: of the size asked, or (none asked) one made now. */
async function checkpointAt(
  ctx: QueryContext,
  treeSize: number | undefined,
): Promise<{ treeSize: number; rootHash: Hash; note: string | null }> {
  const log = ctx.transparencyLog;
  if (treeSize === undefined) {
    const made = await log.checkpoint(ctx.organizationId, ctx.now);
    return { treeSize: made.treeSize, rootHash: made.rootHash, note: made.note };
  }
  const current = (await readHead(ctx.db, ctx.organizationId)).size;
  if (treeSize > current)
    throw serviceError("LOG_SIZE_INVALID", `treeSize ${treeSize} is larger than the organization's log, which has ${current} entries`);
  const stored = await ctx.db
    .selectFrom("transparency_log_checkpoints")
    .select(["note", "root_hash"])
    .where("organization_id", "=", ctx.organizationId)
    .where("tree_size", "=", treeSize)
    .executeTakeFirst();
  if (stored) return { treeSize, rootHash: Buffer.from(stored.root_hash, "hex"), note: stored.note };
  // A size no checkpoint was signed at: its root, from the complete subtrees that make it up.
  const parts = rangeSubtrees(0, treeSize);
  const read = await readSubtrees(ctx.db, ctx.organizationId, parts);
  return { treeSize, rootHash: foldRange(parts.map((p) => read.get(`${p.level}/${p.index}`)!)), note: null };
}

const renderCheckpoint = (ctx: QueryContext, c: { treeSize: number; rootHash: Hash; note: string | null }) => ({
  origin: originOf(ctx.transparencyLog.signer.name, ctx.organizationId),
  treeSize: c.treeSize,
  rootHash: b64(c.rootHash),
  // Null for a size no checkpoint was signed at (the root is then the server's word only).
  note: c.note,
});

export const transparencyLogQueries = [
  defineSigilQuery<{ organizationId: string }>({
    name: "get_log_checkpoint",
    summary:
      "The organization's transparency log as it stands: its latest checkpoint (C2SP tlog-checkpoint, signed note), signed now if the log grew since the last one, and the verifier key.",
    schema: {
      type: "object",
      required: ["organizationId"],
      properties: { organizationId: { type: "string", minLength: 1 } },
      additionalProperties: false,
    },
    async run(ctx) {
      const checkpoint = await checkpointAt(ctx, undefined);
      return { checkpoint: renderCheckpoint(ctx, checkpoint), verifierKey: ctx.transparencyLog.signer.verifierKey };
    },
  }),

  defineSigilQuery<{ organizationId: string; activityId: string; treeSize?: number }>({
    name: "get_inclusion_proof",
    summary:
      "The proof that an activity is in the organization's transparency log (RFC 9162): its entry, leaf index and audit path, and the checkpoint they lead to (of treeSize, or signed now).",
    schema: {
      type: "object",
      required: ["organizationId", "activityId"],
      properties: { organizationId: { type: "string", minLength: 1 }, activityId: { type: "string", minLength: 1 }, treeSize: size },
      additionalProperties: false,
    },
    async run(ctx, body) {
      const activity = await requireActivity(ctx.db, ctx.organizationId, body.activityId);
      let leaf = await leafOfActivity(ctx.db, ctx.organizationId, activity.id);
      if (!leaf && !isFinal(activity.status))
        throw serviceError(
          "LOG_ENTRY_NOT_FOUND",
          `activity ${activity.id} is not in the transparency log: it is ${activity.status}, and only activities that have reached a final status are`,
        );
      if (!leaf) {
        // Final, and not appended yet (the sequencer runs just after the commit): appended now, so that
        // whoever asks right after their activity completed gets its proof.
        await ctx.transparencyLog.sequence(ctx.organizationId);
        leaf = await leafOfActivity(ctx.db, ctx.organizationId, activity.id);
        if (!leaf)
          throw serviceError(
            "LOG_ENTRY_PENDING",
            `activity ${activity.id} is ${activity.status} but not in the transparency log yet: ask again (it is appended within the maximum merge delay)`,
          );
      }
      const checkpoint = await checkpointAt(ctx, body.treeSize);
      if (leaf.leafIndex >= checkpoint.treeSize)
        throw serviceError(
          "LOG_SIZE_INVALID",
          `activity ${activity.id} is entry ${leaf.leafIndex} of the log: a tree of ${checkpoint.treeSize} entries does not hold it`,
        );
      const proof = await readProof(ctx.db, ctx.organizationId, planInclusion(leaf.leafIndex, checkpoint.treeSize));
      return {
        leafIndex: leaf.leafIndex,
        // The entry as rebuilt from the activity: its leaf hash is SHA-256(0x00 ‖ entry).
        entry: entryBytes(logEntry(activity, leaf.leafIndex)).toString("utf8"),
        leafHash: b64(leaf.leafHash),
        proof: proof.map(b64),
        checkpoint: renderCheckpoint(ctx, checkpoint),
      };
    },
  }),

  defineSigilQuery<{ organizationId: string; fromSize: number; toSize?: number }>({
    name: "get_consistency_proof",
    summary:
      "The proof that the organization's transparency log of toSize entries (or as it stands, signed now) extends the log of fromSize entries (RFC 9162): it only grew.",
    schema: {
      type: "object",
      required: ["organizationId", "fromSize"],
      properties: { organizationId: { type: "string", minLength: 1 }, fromSize: size, toSize: size },
      additionalProperties: false,
    },
    async run(ctx, body) {
      const to = await checkpointAt(ctx, body.toSize);
      if (body.fromSize > to.treeSize)
        throw serviceError("LOG_SIZE_INVALID", `fromSize ${body.fromSize} is larger than toSize ${to.treeSize}`);
      const proof = await readProof(ctx.db, ctx.organizationId, planConsistency(body.fromSize, to.treeSize));
      return { fromSize: body.fromSize, proof: proof.map(b64), checkpoint: renderCheckpoint(ctx, to) };
    },
  }),
];
