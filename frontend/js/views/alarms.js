// Alarms: one instance per query and key (new / acknowledged / silenced / resolved) with
// its actions, grouped under its query (collapsible), the key named in words; and the
// live feed of matches, newest first. Filters: query, state, priority, key, probability.
// Only the first cards of a group and the first rows of the feed are rendered; "Show
// more" adds more, so thousands stay cheap. The Notifications panel sits between the
// cards and the feed (views/notifications.js).

import { post, session } from "../api.js";
import { permissionButton } from "../browser-notifications.js";
import { clock, clockSpan, count, dataTime, duration, esc, percent, probCell } from "../format.js";
import { soundSwitch } from "../sound.js";
import { PRIORITIES, bus, keyText, refreshAlarms, setAlarm, store } from "../store.js";
import { applyRole, explainLink, historyLink, notify } from "../ui.js";
import { mountNotifications } from "./notifications.js";

const PAGE = 100;
const CARDS = 50;
const STATES = ["new", "acknowledged", "silenced", "resolved"];
const PRIORITY_TEXT = { critical: "▲▲ Critical", warning: "▲ Warning", info: "ℹ Info" };
const STATE_TEXT = { new: "◆ New", acknowledged: "✓ Acknowledged", silenced: "◔ Silenced", resolved: "○ Resolved" };
const SILENCE = [[900, "15 min"], [3600, "1 hour"], [4 * 3600, "4 hours"], [8 * 3600, "8 hours"], [86400, "24 hours"]];
/** How long the cards keep their places after the last action (milliseconds). */
const HOLD_MS = 8000;

const MARKUP = `
  <div class="view-head"><h1>Alarms</h1><p class="muted" id="alarm-summary" aria-live="polite"></p>
    <button type="button" id="allow-notifications" hidden>Notify me of critical alarms</button>
    <label class="inline"><input type="checkbox" id="alarm-sound"> Sound for critical alarms</label></div>
  <form class="filters" id="alarm-filters" role="search" aria-label="Filter alarms">
    <div><label for="f-query">Query</label><select id="f-query"><option value="">All queries</option></select></div>
    <div><label for="f-state">State</label><select id="f-state"><option value="">Any state</option>
      ${STATES.map((s) => `<option value="${s}">${STATE_TEXT[s].slice(2)}</option>`).join("")}</select></div>
    <div><label for="f-priority">Priority</label><select id="f-priority"><option value="">Any priority</option>
      ${PRIORITIES.map((p) => `<option value="${p}">${PRIORITY_TEXT[p].replace(/^\S+ /, "")}</option>`).join("")}</select></div>
    <div><label for="f-key">Key</label><input id="f-key" type="search" placeholder="e.g. region 17" autocomplete="off"></div>
    <div><label for="f-prob">Minimum probability (%)</label>
      <input id="f-prob" type="number" min="0" max="100" step="1" value="0" inputmode="numeric"></div>
  </form>
  <section aria-labelledby="groups-title">
    <h2 id="groups-title">By query and key</h2>
    <div class="groups" id="groups"></div>
    <details class="card" id="silenced-list" hidden>
      <summary><h2 id="silenced-title">Silenced</h2> <span class="muted small" id="silenced-summary"></span></summary>
      <p class="muted small">Instances under a silence leave the list above until it ends; their matches in the
        feed are dimmed.</p>
      <div class="groups" id="silenced-groups"></div>
    </details>
  </section>
  <div id="notify-slot" hidden></div>
  <section aria-labelledby="feed-title">
    <h2 id="feed-title">Matches <span class="muted small">newest first, live</span></h2>
    <ol class="feed" id="feed" aria-live="off"></ol>
    <button type="button" class="more" id="more" hidden>Show more</button>
  </section>`;

// ---- badges

export function stateBadge(alarm) {
  const state = alarm?.state ?? "none";
  if (state === "none") return `<span class="state state-resolved">No alarm</span>`;
  const until = state === "silenced" && alarm.silenced_until ? ` until ${clock(alarm.silenced_until)}` : "";
  return `<span class="state state-${state}" data-testid="state">${STATE_TEXT[state]}${until}</span>`;
}

export function priorityBadge(priority) {
  return `<span class="priority priority-${esc(priority)}" data-testid="priority">${PRIORITY_TEXT[priority] ?? esc(priority)}</span>`;
}

// ---- the filters

/** The filters' values: query, state, priority, key (lower case) and minimum probability. */
function readFilters(main) {
  const $ = (selector) => main.querySelector(selector);
  return { query: $("#f-query").value, state: $("#f-state").value, priority: $("#f-priority").value,
    key: $("#f-key").value.trim().toLowerCase(), min: Math.max(0, Number($("#f-prob").value) || 0) / 100 };
}

const keyPasses = (alarm, wanted) => !wanted.key || keyText(alarm?.key).toLowerCase().includes(wanted.key);

function alarmPasses(a, wanted) {
  return (!wanted.query || a.query === wanted.query) && (!wanted.state || a.state === wanted.state)
    && (!wanted.priority || a.priority === wanted.priority) && keyPasses(a, wanted);
}

/** Whether a match passes: its own query and probability, and its instance's state,
 *  priority and key when those are asked for. */
function matchPasses(match, wanted) {
  if ((wanted.query && match.query !== wanted.query) || match.prob < wanted.min) return false;
  if (!wanted.state && !wanted.priority && !wanted.key) return true;
  const a = store.alarms.get(match.alarm);
  return !!a && alarmPasses(a, wanted);
}

// ---- the cards

const rank = (list, value) => { const i = list.indexOf(value); return i < 0 ? list.length : i; };

/** Instances by priority, then state, then latest match; while ``held``, in their held
 *  places first. */
function byUrgency(held) {
  const place = (a) => held?.get(a.id) ?? Infinity;
  return (x, y) => (held ? place(x) - place(y) : 0)
    || rank(PRIORITIES, x.priority) - rank(PRIORITIES, y.priority)
    || rank(STATES, x.state) - rank(STATES, y.state) || (y.last_at ?? 0) - (x.last_at ?? 0)
    || x.id.localeCompare(y.id);
}

function groupByQuery(instances) {
  const byQuery = new Map();
  for (const a of instances) {
    if (!byQuery.has(a.query)) byQuery.set(a.query, []);
    byQuery.get(a.query).push(a);
  }
  return byQuery;
}

const CARD_ACTIONS = `
  <div class="actions" data-role="analyst">
    <button type="button" data-act="acknowledge">Acknowledge</button>
    <span class="row"><label class="inline"><span class="sr-only">Silence for</span>
      <select data-silence aria-label="Silence for">${SILENCE.map(([s, t]) =>
        `<option value="${s}"${s === 3600 ? " selected" : ""}>${t}</option>`).join("")}</select></label>
      <button type="button" data-act="silence">Silence</button></span>
    <span class="row"><label class="inline"><span class="sr-only">Verdict</span>
      <select data-verdict aria-label="Verdict"><option value="">no verdict</option><option value="real">real</option>
        <option value="false">false alarm</option><option value="unknown">unknown</option></select></label>
      <button type="button" data-act="resolve">Resolve</button></span>
  </div>`;

/** What a card says of its instance: what it is about, its state, its matches and
 *  probabilities, a silence over it, who acted last. */
function cardSummary(a) {
  const about = keyText(a.key);
  const name = store.queries.get(a.query)?.name ?? a.name;
  const when = a.last_at ? ` at ${clockSpan(a.last_at)}` : "";
  const probs = `${a.high_prob !== null && a.high_prob !== undefined ? `highest ${percent(a.high_prob)}` : ""}`
    + `${a.last_prob !== null && a.last_prob !== undefined ? `, latest ${percent(a.last_prob)}${when}` : ""}`;
  const counted = `<span class="count" data-testid="count">${count(a.matches)}</span> ${a.matches === 1 ? "match" : "matches"}`;
  return `
    <header><h3>${about ? esc(about) : esc(name)}</h3>${stateBadge(a)}</header>
    <p>${a.state === "resolved"
      ? (a.matches ? `Its last episode had ${counted}${probs ? `: ${probs}` : ""}.` : `No match in this episode${probs ? ` (earlier: ${probs})` : ""}.`)
      : `${counted} since it opened${probs ? `; ${probs}` : ""}.`}
      <a href="${historyLink(a.query, a.key)}" class="small">all its matches</a>${a.last ? ` · <a href="${explainLink(a.query, a.last)}"
        class="small" data-testid="why">why it fired</a>` : ""}</p>
    ${a.silence ? `<p class="muted small">covered by a silence until ${clock(a.silenced_until)}</p>` : ""}
    ${a.updated_by ? `<p class="muted small">${esc(a.state)} by ${esc(a.updated_by)} at ${clock(a.updated_at)}${a.verdict ? ` (${a.verdict === "false" ? "false alarm" : esc(a.verdict)})` : ""}${a.comment ? `: ${esc(a.comment)}` : ""}</p>`
      : a.episode > 1 && a.state === "new" ? `<p class="muted small">reopened by the job at ${clock(a.opened_at)}</p>` : ""}`;
}

/** Acknowledges, silences or resolves an instance as a card's controls say; tells how it went. */
async function act(alarmId, action, card) {
  const verdict = card.querySelector("[data-verdict]").value;
  const body = action === "silence"
    ? { until: Date.now() / 1000 + Number(card.querySelector("[data-silence]").value) }
    : action === "resolve" && verdict ? { verdict } : undefined;
  try {
    const answer = await post(`/alarms/${encodeURIComponent(alarmId)}/${action}`, body);
    setAlarm(answer);
    const about = keyText(answer.key);
    const name = `${store.queries.get(answer.query)?.name ?? answer.query}${about ? ` (${about})` : ""}`;
    notify(action === "silence" ? `${name}: silenced for ${duration(Number(body.until - Date.now() / 1000))}`
      : `${name}: ${answer.state}`);
  } catch (error) {
    notify(`Could not ${action} the alarm ${alarmId}: ${error.message}`, { bad: true });
  }
}

/** The cards, grouped by query, and the silenced ones in their own list: ``render()``
 *  draws them as the filters say; ``stop()`` ends the hold's timer. */
function mountCards(main, filters) {
  const groups = main.querySelector("#groups");
  const cards = new Map();
  const sections = new Map();
  const shownPerQuery = new Map();

  // while someone acts on the cards, they keep their places: the order is held from the
  // first action until the focus leaves the list and a few seconds have passed
  let held = null;   // {order: Map(instance id -> place), until}
  function hold() {
    const order = new Map([...groups.querySelectorAll("[data-alarm]")].map((el, i) => [el.dataset.alarm, i]));
    held = { order: held?.order ?? order, until: Date.now() + HOLD_MS };
  }
  function release() {
    if (!held || groups.contains(document.activeElement) || Date.now() < held.until) return;
    held = null;
    render();
  }

  async function onAction(alarmId, action, element) {
    element.querySelectorAll("button").forEach((b) => { b.disabled = true; });
    if (groups.contains(element)) hold();
    await act(alarmId, action, element);
    render();
    // the focus stays in the card (its buttons were disabled meanwhile): on the same
    // control, or the first one still enabled
    const controls = [...element.querySelectorAll(".actions button, .actions select")].filter((c) => !c.disabled);
    (controls.find((c) => c.dataset.act === action) ?? controls[0])?.focus();
  }

  function newCard(alarm) {
    const element = document.createElement("article");
    element.className = "card group";
    element.dataset.query = alarm.query;
    element.dataset.alarm = alarm.id;
    element.innerHTML = `<div class="summary"></div>${CARD_ACTIONS}`;
    element.querySelector(".actions").addEventListener("click", (event) => {
      const button = event.target.closest("button[data-act]");
      if (button) onAction(alarm.id, button.dataset.act, element);
    });
    applyRole(element);
    return element;
  }

  function card(alarm) {
    if (!cards.has(alarm.id)) cards.set(alarm.id, newCard(alarm));
    const element = cards.get(alarm.id);
    const a = store.alarms.get(alarm.id);
    element.querySelector(".summary").innerHTML = cardSummary(a);
    element.querySelectorAll(".actions button, .actions select").forEach((control) => { control.disabled = false; });
    element.querySelector('[data-act="acknowledge"]').disabled = a.state !== "new";
    element.querySelector('[data-act="resolve"]').disabled = a.state === "resolved";
    return element;
  }

  function newSection(query) {
    const element = document.createElement("details");
    element.className = "query-group";
    element.dataset.query = query;
    element.open = true;
    element.innerHTML = `<summary></summary><div class="instances"></div><button type="button" class="more" hidden></button>`;
    element.querySelector(".more").addEventListener("click", () => {
      shownPerQuery.set(query, (shownPerQuery.get(query) ?? CARDS) + CARDS);
      render();
    });
    return element;
  }

  function section(query, instances) {
    if (!sections.has(query)) sections.set(query, newSection(query));
    const element = sections.get(query);
    const entry = store.queries.get(query);
    const byState = STATES.map((s) => [s, instances.filter((a) => a.state === s).length]).filter(([, n]) => n);
    element.querySelector("summary").innerHTML = `<strong>${esc(entry?.name ?? query)}</strong>
      ${priorityBadge(instances[0]?.priority ?? entry?.priority ?? "warning")}
      <span class="muted small">${byState.map(([s, n]) => `${count(n)} ${s}`).join(" · ")}</span>`;
    const shownCards = shownPerQuery.get(query) ?? CARDS;
    const focused = document.activeElement;
    element.querySelector(".instances").replaceChildren(...instances.slice(0, shownCards).map(card));
    if (focused && element.contains(focused)) focused.focus();
    const more = element.querySelector(".more");
    more.hidden = instances.length <= shownCards;
    more.textContent = `Show more (${count(instances.length - shownCards)} not shown)`;
    return element;
  }

  function render() {
    const wanted = filters();
    const passing = [...store.alarms.values()].filter((a) => alarmPasses(a, wanted)).sort(byUrgency(held?.order));
    // silenced instances have a list of their own (unless the filter asks for them), but a
    // card acted on stays where it is until the hold is released
    const listedApart = (a) => a.state === "silenced" && wanted.state !== "silenced" && !(held && held.order.has(a.id));
    const shown = passing.filter((a) => !listedApart(a));
    const silenced = passing.filter(listedApart);
    const focused = document.activeElement;
    groups.replaceChildren(...[...groupByQuery(shown)].map(([query, instances]) => section(query, instances)));
    if (focused && groups.contains(focused)) focused.focus();
    if (!shown.length) groups.innerHTML = `<p class="empty">No alarm${wanted.query || wanted.state || wanted.priority || wanted.key ? " matches these filters" : " yet"}.</p>`;
    main.querySelector("#silenced-list").hidden = !silenced.length;
    main.querySelector("#silenced-summary").textContent = `${count(silenced.length)} ${silenced.length === 1 ? "instance" : "instances"}`;
    main.querySelector("#silenced-groups").replaceChildren(...silenced.slice(0, CARDS).map(card));
    main.querySelector("#alarm-summary").textContent = alarmSummary([...store.alarms.values()]);
  }

  groups.addEventListener("focusout", () => setTimeout(release, 0));
  const releaseTimer = setInterval(release, 2000);
  return { render, stop: () => clearInterval(releaseTimer) };
}

/** "3 new alarms · 12 instances in 2 queries" */
function alarmSummary(all) {
  const open = all.filter((a) => a.state === "new").length;
  const queries = new Set(all.map((a) => a.query)).size;
  return `${count(open)} new ${open === 1 ? "alarm" : "alarms"} · ${count(all.length)} ${all.length === 1 ? "instance" : "instances"}`
    + ` in ${count(queries)} ${queries === 1 ? "query" : "queries"}`;
}

// ---- the feed

// verdicts given from this tab, by query and match id (ids are per query's result stream;
// the feed's rows are made again as it scrolls)
const JUDGED = new Map();
const JUDGED_TEXT = { real: "✓ judged real", false: "✗ judged false" };

function judgeCell(match) {
  const given = JUDGED.get(`${match.query}|${match.id}`);
  if (given) return `<span class="judged">${JUDGED_TEXT[given]}</span>`;
  if (!session.can("analyst")) return "<span></span>";
  return `<span class="judge"><button type="button" data-judge="real" aria-label="Judge this match real">✓ real</button>
    <button type="button" data-judge="false" aria-label="Judge this match a false alarm">✗ false</button></span>`;
}

function eventsText(match) {
  const parts = Object.entries(match.events ?? {}).map(([v, id]) => `${esc(v)} ${esc(id)}`);
  if (match.range) parts.push(`from ${match.range.map((x) => dataTime(Number(x))).join(" to ")}`);
  return parts.join(" · ");
}

function matchRow(match, fresh) {
  const li = document.createElement("li");
  li.dataset.query = match.query;
  li.dataset.id = match.id;
  const silenced = store.alarms.get(match.alarm)?.state === "silenced";
  if (silenced) li.classList.add("silenced");
  else if (fresh) li.classList.add("fresh");
  const entry = store.queries.get(match.query);
  const about = keyText(match.key ?? store.alarms.get(match.alarm)?.key);
  li.innerHTML = `${clockSpan(match.at, { cls: "time" })}
    <span class="query"><strong>${esc(entry?.name ?? match.query)}</strong>${about ? ` <span class="key">${esc(about)}</span>` : ""}</span>
    <span class="events">${eventsText(match)}</span>${probCell(match.prob)}${judgeCell(match)}
    <a class="small why" href="${explainLink(match.query, match.id)}" title="how this match's probability came about">why?</a>`;
  return li;
}

/** A verdict on one match of the feed (✓ real / ✗ false), kept for the tab's later rows. */
async function judge(event) {
  const button = event.target.closest("button[data-judge]");
  if (!button) return;
  const row = button.closest("li");
  const verdict = button.dataset.judge;
  row.querySelectorAll(".judge button").forEach((b) => { b.disabled = true; });
  try {
    await post(`/queries/${encodeURIComponent(row.dataset.query)}/verdicts`, { match: row.dataset.id, verdict });
    JUDGED.set(`${row.dataset.query}|${row.dataset.id}`, verdict);
    row.querySelector(".judge").outerHTML = `<span class="judged" tabindex="-1">${JUDGED_TEXT[verdict]}</span>`;
    row.querySelector(".judged").focus();
  } catch (error) {
    row.querySelectorAll(".judge button").forEach((b) => { b.disabled = false; });
    notify(`Verdict not given: ${error.message}`, { bad: true });
  }
}

/** The feed of matches, ``limit`` rows at most (Show more adds a page): ``render()`` draws
 *  it again, ``restart()`` from its first page, ``onMatches`` takes the store's news. */
function mountFeed(main, filters) {
  const feed = main.querySelector("#feed");
  const more = main.querySelector("#more");
  let limit = PAGE;

  function render() {
    const wanted = filters();
    const rows = [];
    let total = 0;
    for (const match of store.matches) {
      if (!matchPasses(match, wanted)) continue;
      total += 1;
      if (rows.length < limit) rows.push(matchRow(match, false));
    }
    feed.replaceChildren(...rows);
    if (!rows.length) feed.innerHTML = `<li class="empty">No match${store.matches.length ? " passes these filters" : " yet"}.</li>`;
    more.hidden = total <= limit;
    more.textContent = `Show more (${count(total - rows.length)} not shown)`;
  }

  function onMatches({ detail }) {
    if (!detail.live) {
      render();
      return;
    }
    const wanted = filters();
    const fresh = detail.fresh.filter((m) => matchPasses(m, wanted));
    if (!fresh.length) return;
    feed.querySelector(".empty")?.remove();
    for (const match of fresh.slice(-limit)) feed.prepend(matchRow(match, true));
    while (feed.children.length > limit) feed.lastElementChild.remove();
    const total = store.matches.filter((m) => matchPasses(m, wanted)).length;
    more.hidden = total <= feed.children.length;
    more.textContent = `Show more (${count(total - feed.children.length)} not shown)`;
  }

  feed.addEventListener("click", judge);
  more.addEventListener("click", () => { limit += PAGE; render(); });
  return { render, onMatches, restart: () => { limit = PAGE; render(); } };
}

// ---- the view

export default {
  title: "Alarms",
  mount(main, params) {
    main.innerHTML = MARKUP;
    const stopNotifications = mountNotifications(main.querySelector("#notify-slot"));
    const filters = () => readFilters(main);
    const cards = mountCards(main, filters);
    const feed = mountFeed(main, filters);
    const querySelect = main.querySelector("#f-query");

    // the page's ?query= waits for its query to be known (the registry may still be on its
    // way when the view opens), unless someone picks a query first
    let linkedQuery = params.get("query") ?? "";
    function fillQueryFilter() {
      const chosen = querySelect.value || linkedQuery;
      const ids = [...new Set([...store.queries.keys(), ...[...store.alarms.values()].map((a) => a.query)])].sort();
      querySelect.innerHTML = `<option value="">All queries</option>` + ids.map((id) =>
        `<option value="${esc(id)}">${esc(store.queries.get(id)?.name ?? id)}</option>`).join("");
      querySelect.value = ids.includes(chosen) ? chosen : "";
      if (linkedQuery && querySelect.value === linkedQuery) {
        linkedQuery = "";
        cards.render();
        feed.restart();
      }
    }

    const form = main.querySelector("#alarm-filters");
    form.addEventListener("input", () => { linkedQuery = ""; cards.render(); feed.restart(); });
    form.addEventListener("submit", (event) => event.preventDefault());
    permissionButton(main.querySelector("#allow-notifications"));
    soundSwitch(main.querySelector("#alarm-sound"));

    // the feed's rows depend on the instances only through these filters
    const byInstance = ["#f-state", "#f-priority", "#f-key"].map((selector) => main.querySelector(selector));
    const onAlarms = () => {
      fillQueryFilter();
      cards.render();
      if (byInstance.some((input) => input.value)) feed.render();
    };
    bus.addEventListener("matches", feed.onMatches);
    bus.addEventListener("alarms", onAlarms);
    bus.addEventListener("queries", fillQueryFilter);
    applyRole(main);
    fillQueryFilter();
    cards.render();
    feed.render();
    const tick = setInterval(() => refreshAlarms().catch(() => {}), 30000); // silences that run out, others' actions
    return () => {
      clearInterval(tick);
      cards.stop();
      stopNotifications();
      bus.removeEventListener("matches", feed.onMatches);
      bus.removeEventListener("alarms", onAlarms);
      bus.removeEventListener("queries", fillQueryFilter);
    };
  },
};
