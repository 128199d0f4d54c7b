// Numbers and times for people: clock times (with the date when not today),
// probabilities as percentages with a word, counts grouped; as text, or as small pieces
// of HTML (a clock time with its full date on hover, a probability with its bar).

const COUNT = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const DECIMAL = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });
// one clock for the whole page: 24-hour, in the browser's zone
const CLOCK = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" });
const DATED = new Intl.DateTimeFormat(undefined, {
  month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
});

const PRECISE = new Intl.DateTimeFormat(undefined, {
  hour: "2-digit", minute: "2-digit", second: "2-digit", fractionalSecondDigits: 3, hourCycle: "h23",
});

/** Milliseconds since the epoch as a clock time to the millisecond (an event's time):
 *  "21:00:15.600", with the date when it is not today. */
export function preciseTime(ms) {
  if (ms === null || ms === undefined) return "—";
  const date = new Date(ms);
  const text = PRECISE.format(date);
  return date.toDateString() === new Date().toDateString() ? text
    : `${date.toLocaleDateString(undefined, { month: "short", day: "numeric" })}, ${text}`;
}

/** A count with its thousands grouped: 12 345. */
export function count(n) {
  return n === null || n === undefined || Number.isNaN(n) ? "—" : COUNT.format(n);
}

/** A plain number with at most two decimals. */
export function number(n) {
  return n === null || n === undefined || Number.isNaN(n) ? "—" : DECIMAL.format(n);
}

/** A probability as a percentage: 0.8734 -> "87.3 %" (one decimal below 100). */
export function percent(p, digits = 1) {
  if (p === null || p === undefined || Number.isNaN(p)) return "—";
  const value = p * 100;
  return `${value >= 99.95 && value < 100 ? "99.9" : value.toFixed(value === 100 ? 0 : digits)}\u00a0%`;
}

/** The words and the colour class of a probability (colour never stands alone). */
export function likelihood(p) {
  if (p >= 0.9) return { word: "very likely", cls: "p-high" };
  if (p >= 0.75) return { word: "likely", cls: "p-mid" };
  if (p >= 0.5) return { word: "possible", cls: "p-low" };
  return { word: "unlikely", cls: "p-min" };
}

/** A probability as HTML: the percentage, a bar and the word. */
export function probCell(p) {
  const { word, cls } = likelihood(p);
  return `<span class="prob ${cls}" title="probability ${percent(p, 2)} (${word})">
    <span class="pct">${percent(p)}</span><span class="bar" aria-hidden="true"><span style="width:${Math.max(2, p * 100)}%"></span></span>
    <span class="label">${word}</span></span>`;
}

/** Seconds since the epoch as a clock time, with the date when it is not today. */
export function clock(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  const date = new Date(seconds * 1000);
  const today = new Date();
  return date.toDateString() === today.toDateString() ? CLOCK.format(date) : DATED.format(date);
}

/** The full date and time (for a title attribute). */
export function fullTime(seconds) {
  return seconds === null || seconds === undefined ? "" : new Date(seconds * 1000).toLocaleString();
}

/** A clock time as HTML, the full date and time on hover; ``withAgo`` adds how long ago it
 *  was, ``cls`` a class. */
export function clockSpan(seconds, { withAgo = false, cls = "" } = {}) {
  const known = seconds !== null && seconds !== undefined;
  const text = known && withAgo ? `${clock(seconds)} (${ago(seconds)})` : clock(seconds);
  return `<span${cls ? ` class="${cls}"` : ""} title="${esc(fullTime(seconds))}">${text}</span>`;
}

/** A result stream id's time ("1718000000000-3" -> seconds). */
export function cursorTime(id) {
  return id ? Number(String(id).split("-")[0]) / 1000 : null;
}

/** How long ago, in words: "12 s ago", "3 min ago". */
export function ago(seconds) {
  if (seconds === null || seconds === undefined) return "—";
  return `${duration(Math.max(0, Date.now() / 1000 - seconds))} ago`;
}

/** A duration in seconds in words: "850 ms", "12 s", "3 min 5 s", "2 h 10 min". */
export function duration(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return "—";
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min${s % 60 >= 1 ? ` ${Math.floor(s % 60)} s` : ""}`;
  const h = Math.floor(m / 60);
  return `${h} h${m % 60 ? ` ${m % 60} min` : ""}`;
}

/** A data time: a clock time when it looks like seconds or milliseconds since the epoch
 *  (events' times are milliseconds in the simulators and most sensors), else the number. */
export function dataTime(t) {
  if (t === null || t === undefined) return "—";
  if (t > 1e9 && t < 1e10) return clock(t);
  if (t > 1e12 && t < 1e13) return clock(t / 1000);
  return number(t);
}

/** Text for HTML. */
export function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => ({
    "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;",
  })[c]);
}
