// Small pieces every page uses: the hash route, loading a query, showing an error, a JSON value.
import type { ComponentChildren } from "preact";
import { useCallback, useEffect, useState } from "preact/hooks";
import { ApiError } from "./api";

export interface Route {
  /** Path segments after "#/", e.g. ["activities", "<id>"]. */
  path: string[];
  params: URLSearchParams;
}

export function readRoute(): Route {
  const [path, search] = location.hash.replace(/^#\/?/, "").split("?");
  return { path: (path ?? "").split("/").filter(Boolean).map(decodeURIComponent), params: new URLSearchParams(search ?? "") };
}

export function useRoute(): Route {
  const [route, setRoute] = useState(readRoute);
  useEffect(() => {
    const changed = () => setRoute(readRoute());
    addEventListener("hashchange", changed);
    return () => removeEventListener("hashchange", changed);
  }, []);
  return route;
}

/** A link address for a page with query parameters (empty ones left out). */
export function href(path: string, params: Record<string, string | undefined> = {}): string {
  const search = new URLSearchParams(Object.entries(params).filter((e): e is [string, string] => !!e[1])).toString();
  return `#/${path}${search ? `?${search}` : ""}`;
}

export interface Loaded<T> {
  data?: T;
  error?: unknown;
  loading: boolean;
  reload(): void;
}

/** Runs `load` when `key` changes (and on reload()), keeping the last answer while the next loads. */
export function useLoad<T>(load: () => Promise<T>, key: string): Loaded<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: true });
  const [round, setRound] = useState(0);
  useEffect(() => {
    let current = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => current && setState({ data, loading: false }),
      (error) => current && setState({ error, loading: false }),
    );
    return () => {
      current = false;
    };
  }, [key, round]);
  const reload = useCallback(() => setRound((r) => r + 1), []);
  return { ...state, reload };
}

export const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error));

export function ErrorMessage({ error }: { error: unknown }) {
  if (!error) return null;
  const code = error instanceof ApiError && error.code ? ` (${error.code})` : "";
  return (
    <p class="error" role="alert">
      {messageOf(error)}
      {code}
    </p>
  );
}

export function Loading({ loaded }: { loaded: Loaded<unknown> }) {
  if (loaded.error) return <ErrorMessage error={loaded.error} />;
  return loaded.loading && loaded.data === undefined ? <p aria-live="polite">Loading…</p> : null;
}

export const Json = ({ value, label }: { value: unknown; label: string }) => (
  // A scrolling box is reached by the keyboard only if it takes focus (axe: scrollable-region-focusable).
  // biome-ignore lint/a11y/noNoninteractiveTabindex: a scrollable region must be focusable to be scrolled without a mouse
  <section class="json" aria-label={label} tabIndex={0}>
    <pre>{JSON.stringify(value, null, 2)}</pre>
  </section>
);

export function Page({ title, children }: { title: string; children: ComponentChildren }) {
  useEffect(() => {
    document.title = `${title} · Sigil console`;
  }, [title]);
  return (
    <section aria-labelledby="page-title">
      <h1 id="page-title">{title}</h1>
      {children}
    </section>
  );
}

/** Seconds-since-epoch timestamps as the API writes them ({seconds, nanos}), shown in UTC. */
export function when(timestamp: { seconds?: string } | undefined): string {
  if (!timestamp?.seconds) return "";
  return new Date(Number(timestamp.seconds) * 1000)
    .toISOString()
    .replace("T", " ")
    .replace(/\.\d+Z$/, " UTC");
}

export const shortType = (type: string) => type.replace(/^ACTIVITY_TYPE_/, "");
export const shortStatus = (status: string) => status.replace(/^ACTIVITY_STATUS_/, "");

/** Links to the pages before and after this one, named as the list reads ("Newer"/"Older" for the
 * activity log, "Previous"/"Next" for lists oldest first). */
export function Pager({ back, forward, names = ["Previous", "Next"] }: { back?: string; forward?: string; names?: [string, string] }) {
  if (!back && !forward) return null;
  return (
    <nav class="pager" aria-label="Pages">
      {back ? <a href={back}>{names[0]}</a> : null}
      {forward ? <a href={forward}>{names[1]}</a> : null}
    </nav>
  );
}

/**
 * One page of a list the API pages by id cursors, read with a limit one above the page size: the
 * extra row says the list goes on. `after` reads away from the cursor in the list's order, `before`
 * towards its start, nearest the cursor last, so there the extra row is the first.
 */
export function cursorPage<T>(rows: T[], cursor: { after?: string; before?: string }, size: number) {
  const extra = rows.length > size;
  const page = extra ? (cursor.before ? rows.slice(rows.length - size) : rows.slice(0, size)) : rows;
  return { page, back: cursor.before ? extra : !!cursor.after, forward: cursor.before ? true : extra };
}
