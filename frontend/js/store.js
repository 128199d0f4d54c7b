// What the dashboard knows: the registry, the alarms, the recent matches and the job's
// live series, kept current by the websocket /ws (with resume) and a few REST reads.
//
// Matches carry their result stream id, the feed's cursor. After a reconnect the
// subscription names each query's last cursor in ``since``, so the server sends every
// match after it once; the ids seen are kept too, so nothing is ever shown twice.

import { get, q, session } from "./api.js";
import { esc } from "./format.js";

export const MAX_MATCHES = 5000;
const MAX_SERIES = 600;
const KINDS = ["matches", "alarms", "partitions", "buffers", "metrics"];
const MAX_ALARMS = 20000;

export const bus = new EventTarget();
const emit = (type, detail) => bus.dispatchEvent(new CustomEvent(type, { detail }));

export const store = {
  queries: new Map(),     // id -> registry entry
  version: null,
  alarms: new Map(),      // alarm instance id -> instance (one per query and key)
  matches: [],            // newest first: {query, id, events, prob, range, batch, at}
  seen: new Set(),        // "query|id"
  cursors: {},            // feed name -> stream id
  metrics: [],            // the job's progress reports, oldest first
  buffers: new Map(),     // query id -> [{id, at, batch, value}], oldest first
  partitions: new Map(),  // query id -> latest projection
  health: [],             // [{at, ...GET /api/health}], oldest first
  connection: "connecting",
};

// ---- REST reads

export async function refreshQueries() {
  const answer = await get("/queries");
  store.version = answer.version;
  store.queries = new Map(answer.items.map((entry) => [entry.id, entry]));
  emit("queries");
  return store.queries;
}

/** Every alarm instance, page by page (at most MAX_ALARMS). An instance the feed brings while
 *  the pages are read wins over the read one when it is at least as recent. */
export async function refreshAlarms() {
  const arrivedMeanwhile = new Map();
  inflight.add(arrivedMeanwhile);
  const found = [];
  try {
    let next = null;
    do {
      const answer = await get(`/alarms?limit=1000${next ? `&next=${encodeURIComponent(next)}` : ""}`);
      found.push(...answer.items);
      next = answer.next;
    } while (next && found.length < MAX_ALARMS);
  } finally {
    inflight.delete(arrivedMeanwhile);
  }
  store.alarms = new Map(found.map((a) => [a.id, a]));
  for (const alarm of arrivedMeanwhile.values()) {
    const read = store.alarms.get(alarm.id);
    if (!read || !newer(read, alarm)) store.alarms.set(alarm.id, alarm);
  }
  for (const a of store.alarms.values()) episodes.set(a.id, Math.max(episodes.get(a.id) ?? 0, a.episode ?? 0));
  emit("alarms");
}

// the feed's instances that arrived while a refresh was reading its pages
const inflight = new Set();

/** Whether instance a is strictly more recent than b (a later episode, a later match, a later act). */
function newer(a, b) {
  if ((a.episode ?? 0) !== (b.episode ?? 0)) return (a.episode ?? 0) > (b.episode ?? 0);
  if (a.last && b.last && a.last !== b.last) return compareIds(a.last, b.last) > 0;
  if (!!a.last !== !!b.last) return !!a.last;
  return (a.updated_at ?? 0) > (b.updated_at ?? 0);
}

// the highest episode seen of each instance: an instance opens (again) when a later one comes
const episodes = new Map();

/** The priorities of alarms, most urgent first. */
export const PRIORITIES = ["critical", "warning", "info"];

export function setAlarm(alarm) {
  const seen = episodes.get(alarm.id);
  for (const meanwhile of inflight) meanwhile.set(alarm.id, alarm);
  store.alarms.set(alarm.id, alarm);
  episodes.set(alarm.id, Math.max(seen ?? 0, alarm.episode ?? 0));
  if (alarm.state === "new" && (seen === undefined || seen < (alarm.episode ?? 0))) emit("opened", alarm);
  emit("alarms");
}

/** Fills a query picker with the registered queries, keeping its choice (or ``wanted``,
 *  e.g. the page's ?query=) when it is still registered. */
export function fillQuerySelect(select, wanted) {
  const chosen = select.value || wanted;
  const entries = [...store.queries.values()];
  select.innerHTML = entries.length
    ? entries.map((e) => `<option value="${esc(e.id)}">${esc(e.name)} (${esc(e.kind)})</option>`).join("")
    : `<option value="">no query registered</option>`;
  if (entries.some((e) => e.id === chosen)) select.value = chosen;
}

/** What an alarm instance is about, in words: "region 17", "region 17 · floor 2"; "" without key. */
export function keyText(key) {
  if (!key) return "";
  return Object.entries(key).map(([name, value]) => `${name} ${value}`).join(" · ");
}

/** The recent page of each query without a cursor yet, whose newest id becomes its cursor
 *  ("0-0" for a query with no match yet: the feed then sends everything it gets). */
async function catchUpByRest() {
  const missing = [...store.queries.keys()].filter((id) => !store.cursors[`matches:${id}`]);
  await Promise.all(missing.map(async (id) => {
    try {
      const page = await get(`${q(id)}/matches?limit=100`);
      addMatches(page.items.map((m) => ({ ...m, query: id })).reverse(), false);
      store.cursors[`matches:${id}`] = page.items.length ? page.items[0].id : "0-0";
    } catch (error) {
      if (error.status !== 404) throw error;
    }
  }));
}

function compareIds(a, b) {
  const [am, as] = a.split("-").map(Number);
  const [bm, bs] = b.split("-").map(Number);
  return am - bm || as - bs;
}

/** Adds matches given oldest first; returns those that were new. */
function addMatches(found, live = true) {
  const fresh = [];
  for (const match of found) {
    const key = `${match.query}|${match.id}`;
    if (store.seen.has(key)) continue;
    store.seen.add(key);
    fresh.push(match);
  }
  if (!fresh.length) return fresh;
  store.matches.unshift(...[...fresh].reverse());
  if (!live) store.matches.sort((x, y) => y.at - x.at || compareIds(y.id, x.id));
  if (store.matches.length > MAX_MATCHES) {
    for (const dropped of store.matches.splice(MAX_MATCHES)) store.seen.delete(`${dropped.query}|${dropped.id}`);
  }
  emit("matches", { fresh, live });
  return fresh;
}

// ---- the live feed

let socket = null;
let retry = 0;
let retryTimer = null;
let pingTimer = null;
let stopped = true;

function setConnection(state, text) {
  store.connection = state;
  emit("connection", { state, text });
}

let registryTimer = null;
let registryPending = null;

/** Reads the registry again shortly (coalescing many calls into one read). */
function refreshSoon() {
  registryPending ??= setTimeout(() => {
    registryPending = null;
    refreshQueries().catch(() => {});
  }, 500);
}

export function startLive() {
  stopped = false;
  connect();
  // thresholds, pauses and queries changed by others
  registryTimer = setInterval(() => store.connection === "live" && refreshQueries().catch(() => {}), 30000);
}

export function stopLive() {
  stopped = true;
  clearTimeout(retryTimer);
  clearInterval(registryTimer);
  clearInterval(pingTimer);
  clearTimeout(arrivedTimer);
  arrivedTimer = null;
  arrived = [];
  if (socket) socket.close(1000, "signed out");
  socket = null;
}

async function connect() {
  clearTimeout(retryTimer);
  setConnection("connecting", retry ? "Reconnecting…" : "Connecting…");
  try {
    await refreshQueries();
    await catchUpByRest();
  } catch (error) {
    if (error.status === 401) return; // signed out by the API layer
    scheduleReconnect();
    return;
  }
  if (stopped) return;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/ws`);
  socket = ws;
  ws.onopen = () => ws.send(JSON.stringify({ token: session.token }));
  ws.onmessage = (event) => receive(ws, JSON.parse(event.data));
  ws.onclose = (event) => {
    if (socket !== ws) return;
    socket = null;
    clearInterval(pingTimer);
    if (stopped) return;
    if (event.code === 4401) {
      emit("unauthorized");
      return;
    }
    scheduleReconnect(event.code === 4008 ? "the feed was too fast for this tab" : null);
  };
}

// Live matches are added together every ARRIVED_MS: a burst of thousands is rendered a few
// times, not once per match.
const ARRIVED_MS = 50;
let arrived = [];
let arrivedTimer = null;

function addArrived() {
  arrivedTimer = null;
  const found = arrived;
  arrived = [];
  addMatches(found);
}

function scheduleReconnect(reason) {
  if (stopped) return;
  const delay = Math.min(15, 2 ** retry) * (0.8 + Math.random() * 0.4);
  retry += 1;
  setConnection("offline", `Offline${reason ? ` (${reason})` : ""}: retrying in ${Math.ceil(delay)} s`);
  retryTimer = setTimeout(connect, delay * 1000);
}

function subscribe(ws) {
  const since = {};
  for (const id of store.queries.keys()) {
    const cursor = store.cursors[`matches:${id}`];
    if (cursor) since[`matches:${id}`] = cursor;
  }
  ws.send(JSON.stringify({ type: "subscribe", queries: "*", kinds: KINDS, since }));
}

function receive(ws, message) {
  switch (message.type) {
    case "welcome":
      subscribe(ws);
      break;
    case "subscribed":
      retry = 0;
      setConnection("live", "Live");
      clearInterval(pingTimer);
      pingTimer = setInterval(() => ws.readyState === WebSocket.OPEN && ws.send('{"type":"ping"}'), 30000);
      refreshAlarms().catch(() => {});
      break;
    case "matches": {
      if (!store.queries.has(message.query)) refreshSoon(); // registered since the last read
      const name = `matches:${message.query}`;
      const current = store.cursors[name];
      if (!current || compareIds(message.id, current) > 0) store.cursors[name] = message.id;
      arrived.push({ ...message.data, query: message.query });
      arrivedTimer ??= setTimeout(addArrived, ARRIVED_MS);
      break;
    }
    case "alarms":
      setAlarm(message.data);
      break;
    case "buffers": {
      const series = store.buffers.get(message.query) ?? [];
      if (!series.length || series[series.length - 1].id !== message.id) series.push(message.data);
      if (series.length > MAX_SERIES) series.shift();
      store.buffers.set(message.query, series);
      emit("buffers", { query: message.query });
      break;
    }
    case "partitions":
      store.partitions.set(message.query, message.data);
      emit("partitions", { query: message.query });
      break;
    case "metrics":
      if (!store.metrics.length || store.metrics[store.metrics.length - 1].batch !== message.data.batch) {
        store.metrics.push(message.data);
        if (store.metrics.length > MAX_SERIES) store.metrics.shift();
      }
      emit("metrics");
      break;
    case "gap":
      emit("notice", { text: "Some matches were trimmed from the capped stream before this tab could read them." });
      break;
    case "error":
      if (message.field && message.field.startsWith("since.")) {
        // a query removed meanwhile: forget its cursor and subscribe again
        delete store.cursors[message.field.slice("since.".length)];
        subscribe(ws);
      } else {
        emit("notice", { text: `Live feed: ${message.message}` });
      }
      break;
    default:
      break;
  }
}

// ---- health, polled (the job's heartbeat is not on the feed)

let healthTimer = null;
export function startHealth(every = 5000) {
  clearInterval(healthTimer);
  const poll = async () => {
    try {
      const answer = await fetch("/api/health", { headers: { Accept: "application/json" } });
      const body = await answer.json();
      store.health.push({ at: Date.now() / 1000, ...body });
    } catch {
      store.health.push({ at: Date.now() / 1000, status: "unreachable", redis: false });
    }
    if (store.health.length > MAX_SERIES) store.health.shift();
    emit("health");
  };
  poll();
  healthTimer = setInterval(poll, every);
}

export function stopHealth() { clearInterval(healthTimer); }

/** Forget everything (sign-out). */
export function resetStore() {
  store.queries = new Map(); store.alarms = new Map(); store.matches = []; store.seen = new Set();
  store.cursors = {}; store.metrics = []; store.buffers = new Map(); store.partitions = new Map(); store.health = [];
}
