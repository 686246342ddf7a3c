// An activity's intent, stored once. The requester's vote (the first of the activity's votes) keeps
// the exact body it signed whenever that body holds nothing the record leaves out (pipeline.ts,
// draftActivity), and that body's `parameters` are then most often the intent itself: the row stores
// its intent as "" and every reader takes it back from the vote, through intentText. "" is never JSON,
// so a row holding its intent whole (written before, or whose intent differs from what was signed)
// reads as it always did, and no migration tells the two apart.
//
// Why: the intent was a quarter of a sign-up's row, the row a third of a sub-organization's bytes,
// and PostgreSQL packs rows whole into 8 KiB pages (docs/storage.md).

/** The intent as a row stores it when its requester's vote holds it (never JSON, so never a whole intent). */
export const INTENT_IN_VOTE = "";

/** What readers of the intent need of a vote. */
interface VoteMessage {
  message?: string;
}

/** The text of the parameters a signed body holds, JSON.stringify(JSON.parse(message).parameters);
 * undefined when the message is no such body (empty, not JSON, without parameters). */
function signedParametersText(message: string | undefined): string | undefined {
  if (!message) return undefined;
  let body: unknown;
  try {
    body = JSON.parse(message);
  } catch {
    return undefined;
  }
  if (typeof body !== "object" || body === null || !Object.hasOwn(body, "parameters")) return undefined;
  const text = JSON.stringify((body as { parameters: unknown }).parameters);
  return typeof text === "string" ? text : undefined;
}

/**
 * The intent column of a new activity whose intent is `intent` (JSON text) and whose requester
 * signed `requesterMessage` (their vote's message, "" when it is not kept): INTENT_IN_VOTE when
 * reading the vote back gives this very text, byte for byte, or else the text itself. The check is
 * the reader's own computation, compared as strings: what is stored as "" always reads back the same.
 */
export function storedIntent(intent: string, requesterMessage: string): string {
  if (intent === INTENT_IN_VOTE) throw new Error("an activity's intent is JSON text, never empty");
  return signedParametersText(requesterMessage) === intent ? INTENT_IN_VOTE : intent;
}

/**
 * The intent of a stored activity as JSON text, exactly as it was recorded: the column itself, or,
 * when the row stores INTENT_IN_VOTE, the parameters of the body its requester signed. `votes` is the
 * row's JSON column, or the votes already parsed from it. A row whose vote cannot give the intent back
 * was changed by hand: it throws.
 */
export function intentText(row: { intent: string; votes: string }): string;
export function intentText(row: { intent: string }, votes: readonly VoteMessage[]): string;
export function intentText(row: { intent: string; votes?: string }, parsed?: readonly VoteMessage[]): string {
  if (row.intent !== INTENT_IN_VOTE) return row.intent;
  const votes = parsed ?? (JSON.parse(row.votes ?? "[]") as VoteMessage[]);
  const text = signedParametersText(Array.isArray(votes) ? votes[0]?.message : undefined);
  if (text === undefined) throw new Error("the activity's intent is kept in its requester's vote, which holds no signed parameters");
  return text;
}
