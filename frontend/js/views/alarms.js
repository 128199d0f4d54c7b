// Alarms: one instance per query and key (new / acknowledged / silenced / resolved) with
// its actions, grouped under its query (collapsible), the key named in words; and the
// live feed of matches, newest first. Filters: query, state, priority, key, probability.
// Only the first cards of a group and the first rows of the feed are rendered; "Show
// more" adds more, so thousands stay cheap.

import { del, get, post, session } from "../api.js";
import { clock, count, dataTime, duration, esc, fullTime, likelihood, percent } from "../format.js";
import { bus, keyText, refreshAlarms, setAlarm, store } from "../store.js";
import { applyRole, notify } from "../ui.js";

const PAGE = 100;
const CARDS = 50;
const STATES = ["new", "acknowledged", "silenced", "resolved"];
const PRIORITIES = ["critical", "warning", "info"];
const PRIORITY_TEXT = { critical: "▲▲ Critical", warning: "▲ Warning", info: "ℹ Info" };
const STATE_TEXT = { new: "◆ New", acknowledged: "✓ Acknowledged", silenced: "◔ Silenced", resolved: "○ Resolved" };
const SILENCE = [[900, "15 min"], [3600, "1 hour"], [4 * 3600, "4 hours"], [8 * 3600, "8 hours"], [86400, "24 hours"]];

export function stateBadge(alarm) {
  const state = alarm?.state ?? "none";
  if (state === "none") return `<span class="state state-resolved">No alarm</span>`;
  const until = state === "silenced" && alarm.silenced_until ? ` until ${clock(alarm.silenced_until)}` : "";
  return `<span class="state state-${state}" data-testid="state">${STATE_TEXT[state]}${until}</span>`;
}

export function probCell(p) {
  const { word, cls } = likelihood(p);
  return `<span class="prob ${cls}" title="probability ${percent(p, 2)} (${word})">
    <span class="pct">${percent(p)}</span><span class="bar" aria-hidden="true"><span style="width:${Math.max(2, p * 100)}%"></span></span>
    <span class="label">${word}</span></span>`;
}

function eventsText(match) {
  const parts = Object.entries(match.events ?? {}).map(([v, id]) => `${esc(v)} ${esc(id)}`);
  if (match.range) parts.push(`from ${match.range.map((x) => dataTime(Number(x))).join(" to ")}`);
  return parts.join(" · ");
}

/** The explanation view of one match. */
export function explainLink(query, match) {
  return `#/explain?query=${encodeURIComponent(query)}&match=${encodeURIComponent(match)}`;
}

export function priorityBadge(priority) {
  return `<span class="priority priority-${esc(priority)}" data-testid="priority">${PRIORITY_TEXT[priority] ?? esc(priority)}</span>`;
}

// ---- an optional sound when a critical alarm opens or reopens, from every view (kept per browser)
const SOUND_KEY = "penumbra.sound";
let audio = null;

/** Two short tones, made by the browser (no file to fetch). */
export function chime() {
  try {
    audio = audio ?? new AudioContext();
    const start = audio.currentTime;
    for (const [offset, pitch] of [[0, 880], [0.18, 660]]) {
      const tone = audio.createOscillator();
      const gain = audio.createGain();
      tone.frequency.value = pitch;
      gain.gain.setValueAtTime(0.0001, start + offset);
      gain.gain.exponentialRampToValueAtTime(0.2, start + offset + 0.02);
      gain.gain.exponentialRampToValueAtTime(0.0001, start + offset + 0.16);
      tone.connect(gain).connect(audio.destination);
      tone.start(start + offset);
      tone.stop(start + offset + 0.17);
    }
    document.documentElement.dataset.chimed = String(Number(document.documentElement.dataset.chimed ?? 0) + 1);
  } catch { /* no audio here */ }
}

bus.addEventListener("opened", (event) => {
  if (event.detail?.priority === "critical" && localStorage.getItem(SOUND_KEY) === "on") chime();
});

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

function matchRow(match, fresh) {
  const li = document.createElement("li");
  li.dataset.query = match.query;
  li.dataset.id = match.id;
  const silenced = store.alarms.get(match.alarm)?.state === "silenced";
  if (silenced) li.classList.add("silenced");
  else if (fresh) li.classList.add("fresh");
  const entry = store.queries.get(match.query);
  const about = keyText(match.key ?? store.alarms.get(match.alarm)?.key);
  li.innerHTML = `<span class="time" title="${esc(fullTime(match.at))}">${clock(match.at)}</span>
    <span class="query"><strong>${esc(entry?.name ?? match.query)}</strong>${about ? ` <span class="key">${esc(about)}</span>` : ""}</span>
    <span class="events">${eventsText(match)}</span>${probCell(match.prob)}${judgeCell(match)}
    <a class="small why" href="${explainLink(match.query, match.id)}" title="how this match's probability came about">why?</a>`;
  return li;
}

export default {
  title: "Alarms",
  mount(main, params) {
    main.innerHTML = `
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
      <details class="card" id="notify-panel" data-role="analyst">
        <summary><h2 id="notify-title">Notifications</h2> <span class="muted small" id="notify-summary"></span></summary>
        <div data-role="admin" class="stack">
          <h3>Contact points</h3>
          <ul id="contacts" class="plain"></ul>
          <form id="contact-form" class="filters" aria-label="Add a contact point">
            <div><label for="c-name">Name</label><input id="c-name" required maxlength="200"></div>
            <div><label for="c-kind">Kind</label><select id="c-kind"><option value="webhook">Webhook (signed POST)</option>
              <option value="alertmanager">Prometheus Alertmanager</option></select></div>
            <div><label for="c-url">URL</label><input id="c-url" type="url" required placeholder="a webhook or Alertmanager address"></div>
            <div><button type="submit">Add</button></div>
          </form>
          <p class="muted small" id="contact-secret" hidden></p>
          <h3>Routing rules</h3>
          <ul id="rules" class="plain"></ul>
          <form id="rule-form" class="filters" aria-label="Add a routing rule">
            <div><label for="r-query">Query</label><select id="r-query"><option value="">Any query</option></select></div>
            <div><label for="r-priority">Priority</label><select id="r-priority"><option value="">Any priority</option>
              ${PRIORITIES.map((p) => `<option value="${p}">${p}</option>`).join("")}</select></div>
            <div><label for="r-contact">To</label><select id="r-contact" required></select></div>
            <div><button type="submit">Add</button></div>
          </form>
        </div>
        <h3>Deliveries given up on</h3>
        <table class="responsive" id="failed"><thead><tr><th scope="col">When</th><th scope="col">Contact point</th>
          <th scope="col">Alarm</th><th scope="col">Attempts</th><th scope="col">Reason</th></tr></thead><tbody></tbody></table>
      </details>
      <section aria-labelledby="feed-title">
        <h2 id="feed-title">Matches <span class="muted small">newest first, live</span></h2>
        <ol class="feed" id="feed" aria-live="off"></ol>
        <button type="button" class="more" id="more" hidden>Show more</button>
      </section>`;
    const groups = main.querySelector("#groups");
    const feed = main.querySelector("#feed");
    const more = main.querySelector("#more");
    const fQuery = main.querySelector("#f-query");
    const fState = main.querySelector("#f-state");
    const fPriority = main.querySelector("#f-priority");
    const fKey = main.querySelector("#f-key");
    const fProb = main.querySelector("#f-prob");
    const cards = new Map();
    const sections = new Map();
    const shownPerQuery = new Map();
    let limit = PAGE;

    const filters = () => ({ query: fQuery.value, state: fState.value, priority: fPriority.value,
      key: fKey.value.trim().toLowerCase(), min: Math.max(0, Number(fProb.value) || 0) / 100 });
    const keyPasses = (alarm, f) => !f.key || keyText(alarm?.key).toLowerCase().includes(f.key);
    const alarmPasses = (a, f) => (!f.query || a.query === f.query) && (!f.state || a.state === f.state)
      && (!f.priority || a.priority === f.priority) && keyPasses(a, f);
    const passes = (match, f = filters()) => {
      if ((f.query && match.query !== f.query) || match.prob < f.min) return false;
      if (!f.state && !f.priority && !f.key) return true;
      const a = store.alarms.get(match.alarm);
      return !!a && alarmPasses(a, f);
    };

    const panel = main.querySelector("#notify-panel");
    let contacts = [];

    async function loadPanel() {
      if (!panel.open) return;
      try {
        const deliveries = await get("/deliveries");
        main.querySelector("#notify-summary").textContent =
          `${count(deliveries.pending.length)} being delivered · ${count(deliveries.failed.length)} given up on`;
        main.querySelector("#failed tbody").innerHTML = deliveries.failed.length ? deliveries.failed.map((d) => `<tr>
          <td data-label="When"><span title="${esc(fullTime(d.at))}">${clock(d.at)}</span></td>
          <td data-label="Contact point">${esc(contacts.find((c) => c.id === d.contact)?.name ?? d.contact)}</td>
          <td data-label="Alarm">${esc(d.alarm ?? d.event ?? "")}</td><td data-label="Attempts" class="num">${count(d.attempts)}</td>
          <td data-label="Reason">${esc(d.reason ?? d.last_error ?? "")}</td></tr>`).join("")
          : `<tr><td colspan="5" class="empty">None.</td></tr>`;
        if (!session.can("admin")) return;
        contacts = (await get("/contact-points")).items;
        const rules = (await get("/routing-rules")).items;
        main.querySelector("#contacts").innerHTML = contacts.map((c) => `<li data-contact="${esc(c.id)}">
          <strong>${esc(c.name)}</strong> <span class="muted small">${esc(c.kind)} · ${esc(c.url)}</span>
          <button type="button" data-test="${esc(c.id)}">Send a test</button>
          <button type="button" class="danger" data-remove-contact="${esc(c.id)}">Remove</button></li>`).join("")
          || `<li class="empty">No contact point.</li>`;
        const name = (id) => contacts.find((c) => c.id === id)?.name ?? id;
        main.querySelector("#rules").innerHTML = rules.map((r) => `<li data-rule="${esc(r.id)}">
          ${esc(r.queries ? r.queries.join(", ") : "any query")} · ${esc(r.priorities ? r.priorities.join(", ") : "any priority")}
          → ${esc(r.contacts.map(name).join(", "))}
          <button type="button" class="danger" data-remove-rule="${esc(r.id)}">Remove</button></li>`).join("")
          || `<li class="empty">No routing rule: nobody is notified.</li>`;
        main.querySelector("#r-contact").innerHTML = contacts.map((c) => `<option value="${esc(c.id)}">${esc(c.name)}</option>`).join("");
        main.querySelector("#r-query").innerHTML = `<option value="">Any query</option>` + [...store.queries.values()]
          .map((e) => `<option value="${esc(e.id)}">${esc(e.name)}</option>`).join("");
      } catch (error) {
        main.querySelector("#notify-summary").textContent = `cannot be read: ${error.message}`;
      }
    }

    panel.addEventListener("toggle", loadPanel);
    panel.addEventListener("click", async (event) => {
      const target = event.target.closest("button");
      if (!target) return;
      try {
        if (target.dataset.test) {
          await post(`/contact-points/${encodeURIComponent(target.dataset.test)}/test`);
          notify("A test notification is on its way");
        } else if (target.dataset.removeContact) {
          await del(`/contact-points/${encodeURIComponent(target.dataset.removeContact)}`);
        } else if (target.dataset.removeRule) {
          await del(`/routing-rules/${encodeURIComponent(target.dataset.removeRule)}`);
        } else {
          return;
        }
        loadPanel();
      } catch (error) {
        notify(error.message, { bad: true });
      }
    });
    main.querySelector("#contact-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      try {
        const made = await post("/contact-points", { name: main.querySelector("#c-name").value,
          kind: main.querySelector("#c-kind").value, url: main.querySelector("#c-url").value });
        const shown = main.querySelector("#contact-secret");
        shown.hidden = false;
        shown.textContent = `Signing secret of ${made.name} (shown once, keep it): ${made.secret}`;
        event.target.reset();
        loadPanel();
      } catch (error) {
        notify(`Could not add the contact point: ${error.message}`, { bad: true });
      }
    });
    main.querySelector("#rule-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const query = main.querySelector("#r-query").value;
      const priority = main.querySelector("#r-priority").value;
      try {
        await post("/routing-rules", { queries: query ? [query] : null, priorities: priority ? [priority] : null,
          contacts: [main.querySelector("#r-contact").value] });
        loadPanel();
      } catch (error) {
        notify(`Could not add the rule: ${error.message}`, { bad: true });
      }
    });
    const allow = main.querySelector("#allow-notifications");
    allow.hidden = typeof Notification === "undefined" || Notification.permission !== "default";
    allow.addEventListener("click", async () => {
      await Notification.requestPermission();
      allow.hidden = Notification.permission !== "default";
      notify(Notification.permission === "granted" ? "Critical alarms will notify you while this tab is hidden"
        : "Notifications are not allowed in this browser");
    });

    // the page's ?query= waits for its query to be known (the registry may still be on its
    // way when the view opens), unless someone picks a query first
    let wanted = params.get("query") ?? "";
    function fillQueryFilter() {
      const chosen = fQuery.value || wanted;
      const ids = [...new Set([...store.queries.keys(), ...[...store.alarms.values()].map((a) => a.query)])].sort();
      fQuery.innerHTML = `<option value="">All queries</option>` + ids.map((id) =>
        `<option value="${esc(id)}">${esc(store.queries.get(id)?.name ?? id)}</option>`).join("");
      fQuery.value = ids.includes(chosen) ? chosen : "";
      if (wanted && fQuery.value === wanted) {
        wanted = "";
        limit = PAGE;
        renderGroups();
        renderFeed();
      }
    }

    function card(alarm) {
      let element = cards.get(alarm.id);
      if (!element) {
        element = document.createElement("article");
        element.className = "card group";
        element.dataset.query = alarm.query;
        element.dataset.alarm = alarm.id;
        element.innerHTML = `<div class="summary"></div>
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
        element.querySelector(".actions").addEventListener("click", (event) => {
          const button = event.target.closest("button[data-act]");
          if (button) act(alarm.id, button.dataset.act, element);
        });
        applyRole(element);
        cards.set(alarm.id, element);
      }
      const a = store.alarms.get(alarm.id);
      const about = keyText(a.key);
      const name = store.queries.get(a.query)?.name ?? a.name;
      const keyParam = a.key ? Object.entries(a.key).map(([k, v]) => `${k}=${v}`).join(", ") : "";
      const history = `#/history?query=${encodeURIComponent(a.query)}${keyParam ? `&key=${encodeURIComponent(keyParam)}` : ""}`;
      const when = a.last_at ? ` at <span title="${esc(fullTime(a.last_at))}">${clock(a.last_at)}</span>` : "";
      const probs = `${a.high_prob !== null && a.high_prob !== undefined ? `highest ${percent(a.high_prob)}` : ""}`
        + `${a.last_prob !== null && a.last_prob !== undefined ? `, latest ${percent(a.last_prob)}${when}` : ""}`;
      const counted = `<span class="count" data-testid="count">${count(a.matches)}</span> ${a.matches === 1 ? "match" : "matches"}`;
      element.querySelector(".summary").innerHTML = `
        <header><h3>${about ? esc(about) : esc(name)}</h3>${stateBadge(a)}</header>
        <p>${a.state === "resolved"
          ? (a.matches ? `Its last episode had ${counted}${probs ? `: ${probs}` : ""}.` : `No match in this episode${probs ? ` (earlier: ${probs})` : ""}.`)
          : `${counted} since it opened${probs ? `; ${probs}` : ""}.`}
          <a href="${history}" class="small">all its matches</a>${a.last ? ` · <a href="${explainLink(a.query, a.last)}"
            class="small" data-testid="why">why it fired</a>` : ""}</p>
        ${a.silence ? `<p class="muted small">covered by a silence until ${clock(a.silenced_until)}</p>` : ""}
        ${a.updated_by ? `<p class="muted small">${esc(a.state)} by ${esc(a.updated_by)} at ${clock(a.updated_at)}${a.verdict ? ` (${a.verdict === "false" ? "false alarm" : esc(a.verdict)})` : ""}${a.comment ? `: ${esc(a.comment)}` : ""}</p>`
          : a.episode > 1 && a.state === "new" ? `<p class="muted small">reopened by the job at ${clock(a.opened_at)}</p>` : ""}`;
      element.querySelectorAll(".actions button, .actions select").forEach((control) => { control.disabled = false; });
      element.querySelector('[data-act="acknowledge"]').disabled = a.state !== "new";
      element.querySelector('[data-act="resolve"]').disabled = a.state === "resolved";
      return element;
    }

    function section(query, instances) {
      let element = sections.get(query);
      if (!element) {
        element = document.createElement("details");
        element.className = "query-group";
        element.dataset.query = query;
        element.open = true;
        element.innerHTML = `<summary></summary><div class="instances"></div><button type="button" class="more" hidden></button>`;
        element.querySelector(".more").addEventListener("click", () => {
          shownPerQuery.set(query, (shownPerQuery.get(query) ?? CARDS) + CARDS);
          renderGroups();
        });
        sections.set(query, element);
      }
      const entry = store.queries.get(query);
      const byState = STATES.map((s) => [s, instances.filter((a) => a.state === s).length]).filter(([, n]) => n);
      element.querySelector("summary").innerHTML = `<strong>${esc(entry?.name ?? query)}</strong>
        ${priorityBadge(instances[0]?.priority ?? entry?.priority ?? "warning")}
        <span class="muted small">${byState.map(([s, n]) => `${count(n)} ${s}`).join(" · ")}</span>`;
      const room = shownPerQuery.get(query) ?? CARDS;
      const focused = document.activeElement;
      element.querySelector(".instances").replaceChildren(...instances.slice(0, room).map(card));
      if (focused && element.contains(focused)) focused.focus();
      const more = element.querySelector(".more");
      more.hidden = instances.length <= room;
      more.textContent = `Show more (${count(instances.length - room)} not shown)`;
      return element;
    }

    async function act(alarmId, action, element) {
      const verdict = element.querySelector("[data-verdict]").value;
      const body = action === "silence"
        ? { until: Date.now() / 1000 + Number(element.querySelector("[data-silence]").value) }
        : action === "resolve" && verdict ? { verdict } : undefined;
      const buttons = element.querySelectorAll("button");
      buttons.forEach((b) => { b.disabled = true; });
      if (groups.contains(element)) freeze();
      try {
        const answer = await post(`/alarms/${encodeURIComponent(alarmId)}/${action}`, body);
        setAlarm(answer);
        const about = keyText(answer.key);
        const name = `${store.queries.get(answer.query)?.name ?? answer.query}${about ? ` (${about})` : ""}`;
        notify(action === "silence" ? `${name}: silenced for ${duration(Number(body.until - Date.now() / 1000))}`
          : `${name}: ${answer.state}`);
      } catch (error) {
        notify(`Could not ${action} the alarm ${alarmId}: ${error.message}`, { bad: true });
      } finally {
        renderGroups();
        // the focus stays in the card (its buttons were disabled meanwhile): on the same
        // control, or the first one still enabled
        const controls = [...element.querySelectorAll(".actions button, .actions select")].filter((c) => !c.disabled);
        (controls.find((c) => c.dataset.act === action) ?? controls[0])?.focus();
      }
    }

    // while someone acts on the cards, they keep their places: the order is frozen from the
    // first action until the focus leaves the list and a few seconds have passed
    let frozen = null;   // {order: Map(instance id -> place), until}
    const freeze = () => {
      const order = new Map([...groups.querySelectorAll("[data-alarm]")].map((el, i) => [el.dataset.alarm, i]));
      frozen = { order: frozen?.order ?? order, until: Date.now() + 8000 };
    };
    const thaw = () => {
      if (!frozen || groups.contains(document.activeElement) || Date.now() < frozen.until) return;
      frozen = null;
      renderGroups();
    };

    function renderGroups() {
      const f = filters();
      const rank = (list, value) => { const i = list.indexOf(value); return i < 0 ? list.length : i; };
      const place = (a) => frozen?.order.get(a.id) ?? Infinity;
      const passing = [...store.alarms.values()].filter((a) => alarmPasses(a, f))
        .sort((x, y) => (frozen ? place(x) - place(y) : 0)
          || rank(PRIORITIES, x.priority) - rank(PRIORITIES, y.priority)
          || rank(STATES, x.state) - rank(STATES, y.state) || (y.last_at ?? 0) - (x.last_at ?? 0)
          || x.id.localeCompare(y.id));
      // silenced instances have a list of their own (unless the filter asks for them), but a
      // card acted on stays where it is until the order thaws
      const own = (a) => a.state === "silenced" && f.state !== "silenced" && !(frozen && frozen.order.has(a.id));
      const shown = passing.filter((a) => !own(a));
      const silenced = passing.filter(own);
      const byQuery = new Map();
      for (const a of shown) {
        if (!byQuery.has(a.query)) byQuery.set(a.query, []);
        byQuery.get(a.query).push(a);
      }
      const focused = document.activeElement;
      groups.replaceChildren(...[...byQuery].map(([query, instances]) => section(query, instances)));
      if (focused && groups.contains(focused)) focused.focus();
      if (!shown.length) groups.innerHTML = `<p class="empty">No alarm${f.query || f.state || f.priority || f.key ? " matches these filters" : " yet"}.</p>`;
      const quiet = main.querySelector("#silenced-list");
      quiet.hidden = !silenced.length;
      main.querySelector("#silenced-summary").textContent = `${count(silenced.length)} ${silenced.length === 1 ? "instance" : "instances"}`;
      main.querySelector("#silenced-groups").replaceChildren(...silenced.slice(0, CARDS).map(card));
      const all = [...store.alarms.values()];
      const open = all.filter((a) => a.state === "new").length;
      const queries = new Set(all.map((a) => a.query)).size;
      main.querySelector("#alarm-summary").textContent =
        `${count(open)} new ${open === 1 ? "alarm" : "alarms"} · ${count(all.length)} ${all.length === 1 ? "instance" : "instances"} in ${count(queries)} ${queries === 1 ? "query" : "queries"}`;
    }

    function renderFeed() {
      const f = filters();
      const rows = [];
      let total = 0;
      for (const match of store.matches) {
        if (!passes(match, f)) continue;
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
        renderFeed();
        return;
      }
      const f = filters();
      const fresh = detail.fresh.filter((m) => passes(m, f));
      if (!fresh.length) return;
      feed.querySelector(".empty")?.remove();
      for (const match of fresh.slice(-limit)) feed.prepend(matchRow(match, true));
      while (feed.children.length > limit) feed.lastElementChild.remove();
      const total = store.matches.filter((m) => passes(m, f)).length;
      more.hidden = total <= feed.children.length;
      more.textContent = `Show more (${count(total - feed.children.length)} not shown)`;
    }

    const onAlarms = () => { fillQueryFilter(); renderGroups(); if (fState.value || fPriority.value || fKey.value) renderFeed(); };
    const onQueries = () => { fillQueryFilter(); };

    feed.addEventListener("click", async (event) => {
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
    });
    main.querySelector("#alarm-filters").addEventListener("input", () => { wanted = ""; limit = PAGE; renderGroups(); renderFeed(); });
    main.querySelector("#alarm-filters").addEventListener("submit", (event) => event.preventDefault());
    more.addEventListener("click", () => { limit += PAGE; renderFeed(); });

    const sound = main.querySelector("#alarm-sound");
    sound.checked = localStorage.getItem(SOUND_KEY) === "on";
    sound.addEventListener("change", () => {
      localStorage.setItem(SOUND_KEY, sound.checked ? "on" : "off");
      if (sound.checked) chime();   // a sample, and browsers let a page play sound after a click
    });
    groups.addEventListener("focusout", () => setTimeout(thaw, 0));
    const thawTimer = setInterval(thaw, 2000);

    bus.addEventListener("matches", onMatches);
    bus.addEventListener("alarms", onAlarms);
    bus.addEventListener("queries", onQueries);
    applyRole(main);
    fillQueryFilter();
    renderGroups();
    renderFeed();
    const tick = setInterval(() => { refreshAlarms().catch(() => {}); loadPanel(); }, 30000); // silences that run out, others' actions
    return () => {
      clearInterval(tick);
      clearInterval(thawTimer);
      bus.removeEventListener("matches", onMatches);
      bus.removeEventListener("alarms", onAlarms);
      bus.removeEventListener("queries", onQueries);
    };
  },
};
