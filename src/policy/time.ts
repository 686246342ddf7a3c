// Time expressions: Timestamp('<rfc3339>') and CronSpan('<cron>', '<duration>', '<tz>').
// Time zone arithmetic (daylight saving) is luxon's; the strict cron subset is parsed here because
// general cron libraries accept steps, names and macros that the product's language refuses.
import { DateTime, IANAZone } from "luxon";
import { PolicyTimestamp } from "./types.js";

const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?([Zz]|[+-]00:00)$/;

/** Parses an RFC 3339 timestamp with a zero UTC offset, or returns the reason it is refused. */
export function parseTimestamp(text: string): PolicyTimestamp | string {
  const m = RFC3339.exec(text);
  if (!m) {
    if (/[+-]\d{2}:\d{2}$/.test(text)) return `timestamp '${text}' has a non-zero UTC offset; write it in UTC with 'Z'`;
    return `'${text}' is not an RFC 3339 timestamp such as '2025-01-01T00:00:00Z'`;
  }
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  // setUTCFullYear, not Date.UTC: Date.UTC reads years 0-99 as 1900-1999.
  const check = new Date(0);
  check.setUTCFullYear(year, month - 1, day);
  check.setUTCHours(hour, minute, second, 0);
  const ms = check.getTime();
  // Date.UTC rolls 2025-02-30 over to March; a timestamp naming a day that does not exist is refused.
  if (
    check.getUTCFullYear() !== year ||
    check.getUTCMonth() !== month - 1 ||
    check.getUTCDate() !== day ||
    hour > 23 ||
    minute > 59 ||
    second > 59
  ) {
    return `timestamp '${text}' names a date or time that does not exist`;
  }
  const fraction = BigInt((m[7] ?? "").padEnd(9, "0") || "0");
  return new PolicyTimestamp(BigInt(ms) * 1_000_000n + fraction);
}

interface CronField {
  name: string;
  min: number;
  max: number;
}
const FIELDS: CronField[] = [
  { name: "minute", min: 0, max: 59 },
  { name: "hour", min: 0, max: 23 },
  { name: "day-of-month", min: 1, max: 31 },
  { name: "month", min: 1, max: 12 },
  { name: "day-of-week", min: 0, max: 6 },
];

/** A compiled CronSpan: which local minutes fire, and how long each window stays open. */
export interface CronSpan {
  /** newest first, so the latest fire is found first */
  minutes: number[];
  hours: number[];
  daysOfMonth: Set<number>;
  months: Set<number>;
  daysOfWeek: Set<number>;
  domRestricted: boolean;
  dowRestricted: boolean;
  durationMs: number;
  zone: string;
  /** The last answer, for the minute it was computed in. */
  memo?: { minute: number; active: boolean };
}

function parseCronField(text: string, field: CronField): { values: Set<number>; restricted: boolean } | string {
  if (text === "*") {
    const values = new Set<number>();
    for (let v = field.min; v <= field.max; v++) values.add(v);
    return { values, restricted: false };
  }
  const values = new Set<number>();
  for (const part of text.split(",")) {
    const range = /^(\d{1,2})(?:-(\d{1,2}))?$/.exec(part);
    if (!range) {
      if (part.includes("/")) return `step values ("${part}") are not supported in the ${field.name} field`;
      if (/[A-Za-z]/.test(part)) return `names ("${part}") are not supported in the ${field.name} field: use numbers`;
      return `"${part}" is not a number, range or list in the ${field.name} field`;
    }
    const from = Number(range[1]);
    const to = range[2] === undefined ? from : Number(range[2]);
    if (from < field.min || to > field.max || from > to) return `"${part}" is outside ${field.min}-${field.max} in the ${field.name} field`;
    for (let v = from; v <= to; v++) values.add(v);
  }
  return { values, restricted: true };
}

const SEVEN_DAYS_MS = 7 * 24 * 60 * 60 * 1000;

/** Compiles CronSpan's three literal arguments, or returns the reason they are refused. */
export function compileCronSpan(cron: string, duration: string, zone: string): CronSpan | string {
  if (cron.trim().startsWith("@")) return `cron macros such as "${cron.trim()}" are not supported: write the 5 fields`;
  const parts = cron.trim().split(/\s+/);
  if (parts.length !== 5)
    return `cron expression '${cron}' must have 5 fields (minute hour day-of-month month day-of-week), found ${parts.length}`;
  const parsed = [];
  for (let i = 0; i < 5; i++) {
    const field = parseCronField(parts[i]!, FIELDS[i]!);
    if (typeof field === "string") return field;
    parsed.push(field);
  }
  const d = /^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?$/.exec(duration);
  if (!d || duration === "") return `duration '${duration}' must be whole days, hours and minutes such as '8h', '90m' or '1d12h'`;
  const durationMs = ((Number(d[1] ?? 0) * 24 + Number(d[2] ?? 0)) * 60 + Number(d[3] ?? 0)) * 60_000;
  if (durationMs <= 0 || durationMs > SEVEN_DAYS_MS) return `duration '${duration}' must be more than zero and at most 7 days`;
  if (!IANAZone.isValidZone(zone)) return `'${zone}' is not an IANA time zone name such as 'America/New_York'`;
  const [minutes, hours, dom, months, dow] = parsed as [
    (typeof parsed)[0],
    (typeof parsed)[0],
    (typeof parsed)[0],
    (typeof parsed)[0],
    (typeof parsed)[0],
  ];
  return {
    minutes: [...minutes.values].sort((a, b) => b - a),
    hours: [...hours.values].sort((a, b) => b - a),
    daysOfMonth: dom.values,
    months: months.values,
    daysOfWeek: dow.values,
    domRestricted: dom.restricted,
    dowRestricted: dow.restricted,
    durationMs,
    zone,
  };
}

interface LocalDay {
  year: number;
  month: number;
  day: number;
  /** 0 = Sunday, as cron counts */
  weekday: number;
}

function dayMatches(span: CronSpan, day: LocalDay): boolean {
  if (!span.months.has(day.month)) return false;
  const dom = span.daysOfMonth.has(day.day);
  const dow = span.daysOfWeek.has(day.weekday);
  // Standard cron: when both day fields are restricted, either one matching fires.
  if (span.domRestricted && span.dowRestricted) return dom || dow;
  return dom && dow;
}

const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;

/**
 * Whether `now` lies in [fire, fire + duration) for some fire of the schedule. Fires are local wall
 * times in the span's zone: a local time skipped by a daylight-saving change fires at the shifted
 * instant luxon gives it, one that occurs twice fires once. Only fires in the last 8 local days can
 * open a window that is still open (durations are at most 7 days), so only those are visited.
 */
export function inCronSpan(span: CronSpan, nowMs: number): boolean {
  // Every window opens and closes on a whole minute (fires are whole local minutes, zone offsets
  // whole minutes, durations whole minutes), so the answer holds for the rest of the minute; time
  // zone arithmetic is the costly part, and a busy server asks many times a minute.
  const minute = Math.floor(nowMs / 60_000);
  if (span.memo?.minute === minute) return span.memo.active;
  const active = computeInCronSpan(span, nowMs);
  span.memo = { minute, active };
  return active;
}

function computeInCronSpan(span: CronSpan, nowMs: number): boolean {
  const now = DateTime.fromMillis(nowMs, { zone: span.zone });
  // Wall-clock arithmetic is exact while the zone's offset holds; it is checked at both ends of the
  // stretch of time a window can come from. Across a daylight-saving change luxon resolves each
  // local fire time instead (a skipped time fires at the shifted instant, a repeated one once).
  const steady =
    DateTime.fromMillis(nowMs - 9 * DAY_MS, { zone: span.zone }).offset === now.offset &&
    DateTime.fromMillis(nowMs + 3 * HOUR_MS, { zone: span.zone }).offset === now.offset;
  const instant = (day: LocalDay, hour: number, minute: number) =>
    steady
      ? Date.UTC(day.year, day.month - 1, day.day, hour, minute) - now.offset * 60_000
      : DateTime.fromObject({ year: day.year, month: day.month, day: day.day, hour, minute }, { zone: span.zone }).toMillis();
  for (let back = 0; back <= 8; back++) {
    const date = new Date(Date.UTC(now.year, now.month - 1, now.day - back));
    const day: LocalDay = { year: date.getUTCFullYear(), month: date.getUTCMonth() + 1, day: date.getUTCDate(), weekday: date.getUTCDay() };
    if (!dayMatches(span, day)) continue;
    for (const hour of span.hours) {
      for (const minute of span.minutes) {
        // Today's fires later than now by the wall clock are in the future unless a daylight-saving
        // change lies between; two hours of slack cover any such shift.
        if (back === 0 && (hour - now.hour) * 60 + (minute - now.minute) > 120) continue;
        const fire = instant(day, hour, minute);
        if (fire > nowMs) continue;
        // Fires are visited newest first: the first one not after now decides.
        return nowMs < fire + span.durationMs;
      }
    }
  }
  return false;
}
