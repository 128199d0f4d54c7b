// Queries: an editor that validates as you type (through POST /api/validate) and
// marks the error's line and column in the text, starter templates for the three forms,
// the streams known to the system; the registry's list with pause / resume / delete.

import { del, get, patch, post, q, session } from "../api.js";
import { clock, clockSpan, count, duration, esc, number, percent } from "../format.js";
import { bus, refreshQueries, store } from "../store.js";
import { applyRole, confirmAction, notify } from "../ui.js";

const DEBOUNCE_MS = 300;

/** The key a template joins its streams on: an attribute every one of them carried,
 *  preferring the names such keys usually have. */
const KEY_NAMES = ["region", "sector", "zone", "site", "node", "host", "key", "tag", "id"];
function sharedKey(chosen) {
  const sets = chosen.map((s) => new Set(s.attrs ?? []));
  if (!sets.length || sets.some((set) => !set.size)) return null;
  const common = [...sets[0]].filter((name) => sets.every((set) => set.has(name)));
  return KEY_NAMES.find((name) => common.includes(name)) ?? common.sort()[0] ?? null;
}

/** Streams for a template: those fitting ``fits`` first, the most recently heard from
 *  first among them, then the rest, then placeholders. */
function pick(streams, count, fits, placeholders) {
  const recent = (x, y) => (y.seen ?? -1) - (x.seen ?? -1) || x.name.localeCompare(y.name);
  const ordered = [...streams.filter(fits).sort(recent), ...streams.filter((s) => !fits(s)).sort(recent)];
  return placeholders.map((name, k) => ordered[k] ?? { name, attrs: [] }).slice(0, count);
}

/** A join needs timestamps it can bound: templates or a declared pi. */
const joinable = (s) => !!(s.params && (Object.keys(s.params.templates ?? {}).length || s.params.pi));
const intervals = (s) => !!(s.params && !Object.keys(s.params.templates ?? {}).length);
const lossy = (s) => !!(s.params && s.params.miss_prob);

/** Starter queries built from the registered streams (``streams``: {name, params, attrs}),
 *  joined on an attribute they all carry; the demo's names when none is registered. */
export const TEMPLATES = {
  join(streams) {
    const [a, b] = pick(streams, 2, joinable, ["SEISMIC", "ACOUSTIC"]);
    const key = sharedKey([a, b]);
    const longest = Math.max(0, ...[a, b].map((s) => Math.max(0, s.params?.pi ?? 0,
      ...Object.values(s.params?.templates ?? {}).map((t) => t.edges[t.edges.length - 1] - t.edges[0]))));
    const window = longest ? Math.max(1, Math.round(longest * 5)) : 2000;
    return `SELECT * FROM ${a.name} A, ${b.name} B\nWHERE WINDOW(A, B) = ${window}${key ? ` AND A.${key} = B.${key}` : ""}`
      + "\nWITH THRESHOLD 0.6";
  },
  pattern(streams) {
    const [a, b, c] = pick(streams, 3, intervals, ["TaskStart", "CPU", "TaskFinish"]);
    const key = sharedKey([a, b, c]) ?? (streams.length ? null : "key");
    return `PATTERN SEQ(${a.name} a, ${b.name} b, ${c.name} c)\n`
      + `${key ? `WHERE a.${key} = b.${key} AND b.${key} = c.${key}\n` : ""}WITHIN 150 RETURN a, b, c WITH CONFIDENCE 0.5`;
  },
  sequence(streams) {
    const [x, y, z] = pick(streams, 3, lossy, ["Shelf", "Counter", "Exit"]);
    const key = sharedKey([x, y, z]) ?? (streams.length ? null : "tag");
    return `SEQUENCE(${x.name} x, !${y.name} y, ${z.name} z)\n`
      + `${key ? `WHERE x.${key} = z.${key} AND y.${key} = x.${key}\n` : ""}WITHIN 600 THRESHOLD 0.5`;
  },
};

/** The streams the system knows: the registered ones with the attributes their events
 *  carried (analysts may read them), else those the registered queries read. */
async function knownStreams() {
  const found = new Map();
  for (const entry of store.queries.values()) {
    Object.entries(entry.streams ?? {}).forEach(([name, params]) => found.set(name, { name, params, attrs: [] }));
  }
  if (session.can("analyst")) {
    try {
      (await get("/streams")).items.forEach((s) => found.set(s.name, s));
    } catch { /* listed from the queries only */ }
  }
  return [...found.values()].sort((x, y) => x.name.localeCompare(y.name));
}

/** The character offset of a 1-based line and column in ``text``. */
export function offsetOf(text, line, column) {
  const lines = text.split("\n");
  let offset = 0;
  for (let i = 0; i < Math.min(line - 1, lines.length); i += 1) offset += lines[i].length + 1;
  return offset + Math.max(0, (column ?? 1) - 1);
}

/** Matches of the last 15 minutes per query, counted by the server (GET /rates), and when
 *  they were read. */
const RATES = { counts: new Map(), at: null };
const RATE_WINDOW = "15m";

function matchRate(id) {
  let last = null;
  for (const match of store.matches) {
    if (match.query === id) { last = match.at; break; }
  }
  return { rate: RATES.counts.get(id) ?? null, last };
}

/** A source with no event for this long is flagged (seconds). */
const IDLE_AFTER = 300;

function rateCell(rate) {
  if (!rate) return `<span class="muted">—</span>`;
  const now = Date.now() / 1000;
  const idle = Object.entries(rate.sources ?? {}).filter(([, at]) => at === null || now - at > IDLE_AFTER);
  const flag = idle.length ? `<br><span class="idle" data-testid="idle">⚠ ${idle.map(([stream, at]) =>
    `${esc(stream)}: ${at === null ? "no event yet" : `no event for ${duration(now - at)}`}`).join("; ")}</span>` : "";
  return `${number(rate.per_minute)} / min <span class="muted small">(${count(rate.matches)} in 15 min)</span>${flag}`;
}

// a quarantined query says why: the job skips it (the others go on) until it is changed or deleted
function statusCell(entry) {
  if (entry.failed) {
    return `<span class="status status-failed">✖ Failed</span>
      <br><span class="small failure" title="${esc(entry.failed.error)}">${esc(entry.failed.error.slice(0, 160))}</span>`;
  }
  return `<span class="status status-${entry.paused ? "paused" : "running"}">${entry.paused ? "⏸ Paused" : "▶ Running"}</span>`;
}

export default {
  title: "Queries",
  mount(main) {
    main.innerHTML = `
      <div class="view-head"><h1>Queries</h1><p class="muted" id="registry-version"></p></div>
      <section class="card stack" data-role="analyst" aria-labelledby="editor-title">
        <h2 id="editor-title">Register a query</h2>
        <div class="row"><span class="muted small">Start from:</span>
          <button type="button" data-template="join">Join</button>
          <button type="button" data-template="pattern">PATTERN</button>
          <button type="button" data-template="sequence">SEQUENCE</button></div>
        <div><span class="muted small" id="streams-label">Known streams (insert at the cursor):</span>
          <div class="chips" id="streams" aria-labelledby="streams-label"></div></div>
        <form id="register" novalidate>
          <label for="query-text">Query</label>
          <div class="editor-wrap">
            <div class="editor-backdrop" id="backdrop" aria-hidden="true"></div>
            <textarea id="query-text" class="editor" rows="6" spellcheck="false" autocapitalize="off"
              aria-describedby="validation" required></textarea>
          </div>
          <p id="validation" class="validation" role="status" aria-live="polite"></p>
          <pre id="pointer" class="pointer" hidden></pre>
          <div class="form-grid">
            <div><label for="query-id">Id <span class="muted small">(optional)</span></label>
              <input id="query-id" pattern="[A-Za-z0-9_][A-Za-z0-9_.\\-]*" maxlength="64" placeholder="generated"></div>
            <div><label for="query-name">Name <span class="muted small">(optional)</span></label>
              <input id="query-name" maxlength="200" placeholder="the id"></div>
            <div><label for="query-threshold">Threshold % <span class="muted small">(optional)</span></label>
              <input id="query-threshold" type="number" min="0.1" max="100" step="0.1" placeholder="as written"></div>
          </div>
          <p id="register-error" class="error" role="alert" hidden></p>
          <div class="row"><button type="submit" class="primary" id="register-button">Register</button>
            <label class="inline"><input type="checkbox" id="query-paused"> Register paused</label></div>
        </form>
      </section>
      <section aria-labelledby="list-title">
        <h2 id="list-title">Registered</h2>
        <div id="query-list"></div>
      </section>`;

    const text = main.querySelector("#query-text");
    const backdrop = main.querySelector("#backdrop");
    const status = main.querySelector("#validation");
    const pointer = main.querySelector("#pointer");
    const thresholdInput = main.querySelector("#query-threshold");
    const list = main.querySelector("#query-list");
    let timer = null;
    let inFlight = null;
    let streams = [];

    // ---- the editor

    function mark(line, column) {
      const value = text.value;
      if (!line) {
        backdrop.textContent = value;
        return;
      }
      const at = Math.min(offsetOf(value, line, column), value.length);
      const lineStart = value.lastIndexOf("\n", at - 1) + 1;
      const lineEnd = value.indexOf("\n", at) === -1 ? value.length : value.indexOf("\n", at);
      const char = value.slice(at, at + 1);
      const marked = char && char !== "\n" ? esc(char) : " ";
      const after = char && char !== "\n" ? at + 1 : at;
      backdrop.innerHTML = `${esc(value.slice(0, lineStart))}<mark class="line">${esc(value.slice(lineStart, at))}</mark>`
        + `<mark class="err" data-line="${line}" data-column="${column ?? ""}">${marked}</mark>`
        + `<mark class="line">${esc(value.slice(after, Math.max(after, lineEnd)))}</mark>${esc(value.slice(Math.max(after, lineEnd)))}\n`;
      backdrop.scrollTop = text.scrollTop;
    }

    function showResult(result) {
      if (result.valid) {
        const warnings = result.warnings ?? [];
        const silent = Object.entries(result.idle ?? {}).filter(([, at]) => at === null).map(([s]) => s);
        status.className = warnings.length ? "validation warn" : "validation ok";
        status.textContent = `${warnings.length ? "⚠" : "✓"} Valid ${result.kind} query${result.streams?.length ? ` reading ${result.streams.join(", ")}` : ""}`
          + `${result.threshold !== null && result.threshold !== undefined ? `, threshold ${percent(result.threshold)}` : ""}.`
          + warnings.map((w) => ` Line ${w.line}, column ${w.column}: ${w.message}${/[.?!]$/.test(w.message) ? "" : "."}`).join("")
          + (silent.length ? ` No event of ${silent.join(", ")} has arrived yet.` : "");
        if (warnings.length) {
          const first = warnings[0];
          const source = text.value.split("\n")[first.line - 1] ?? "";
          pointer.textContent = `${String(first.line).padStart(3)} | ${source}\n    | ${" ".repeat(Math.max(0, first.column - 1))}^`;
          pointer.hidden = false;
          mark(first.line, first.column);
        } else {
          pointer.hidden = true;
          mark(null);
        }
        return;
      }
      status.className = "validation bad";
      const where = result.line ? `Line ${result.line}, column ${result.column}: ` : "";
      status.textContent = `✗ ${where}${result.message}`;
      if (result.line) {
        const source = text.value.split("\n")[result.line - 1] ?? "";
        pointer.textContent = `${String(result.line).padStart(3)} | ${source}\n    | ${" ".repeat(Math.max(0, result.column - 1))}^`;
        pointer.hidden = false;
      } else {
        pointer.hidden = true;
      }
      mark(result.line, result.column);
    }

    async function validate() {
      const value = text.value;
      if (!value.trim()) {
        status.className = "validation";
        status.textContent = "";
        pointer.hidden = true;
        mark(null);
        return;
      }
      inFlight?.abort();
      inFlight = new AbortController();
      const threshold = thresholdInput.value ? Number(thresholdInput.value) / 100 : undefined;
      try {
        const result = await post("/validate", { text: value, ...(threshold > 0 && threshold <= 1 ? { threshold } : {}) },
          { signal: inFlight.signal });
        if (text.value === value) showResult(result);
      } catch (error) {
        if (error.name === "AbortError") return;
        status.className = "validation bad";
        status.textContent = `Cannot validate now: ${error.message}`;
      }
    }

    function scheduleValidation() {
      mark(null);
      clearTimeout(timer);
      timer = setTimeout(validate, DEBOUNCE_MS);
    }

    text.addEventListener("input", scheduleValidation);
    thresholdInput.addEventListener("input", scheduleValidation);
    text.addEventListener("scroll", () => { backdrop.scrollTop = text.scrollTop; });

    main.querySelectorAll("[data-template]").forEach((button) => button.addEventListener("click", () => {
      text.value = TEMPLATES[button.dataset.template](streams);
      text.focus();
      scheduleValidation();
    }));

    async function fillStreams() {
      streams = await knownStreams();
      const box = main.querySelector("#streams");
      box.innerHTML = streams.length ? streams.map((s) => `<button type="button" data-stream="${esc(s.name)}"
        title="${esc(s.attrs?.length ? `attributes seen: ${s.attrs.join(", ")}` : "no attribute seen yet")}">${esc(s.name)}</button>`).join("")
        : `<span class="muted small">none yet (an admin sets stream parameters with PUT /api/streams/&lt;name&gt;)</span>`;
      box.querySelectorAll("[data-stream]").forEach((button) => button.addEventListener("click", () => {
        const start = text.selectionStart ?? text.value.length;
        text.setRangeText(button.dataset.stream, start, text.selectionEnd ?? start, "end");
        text.focus();
        scheduleValidation();
      }));
    }

    main.querySelector("#register").addEventListener("submit", async (event) => {
      event.preventDefault();
      const error = main.querySelector("#register-error");
      error.hidden = true;
      const body = { text: text.value };
      const id = main.querySelector("#query-id").value.trim();
      const name = main.querySelector("#query-name").value.trim();
      if (id) body.id = id;
      if (name) body.name = name;
      if (thresholdInput.value) body.threshold = Number(thresholdInput.value) / 100;
      if (main.querySelector("#query-paused").checked) body.paused = true;
      const button = main.querySelector("#register-button");
      button.disabled = true;
      try {
        const entry = await post("/queries", body);
        notify(`Registered ${entry.name} (${entry.kind}); the job starts it at its next micro-batch.`);
        main.querySelector("#register").reset();
        text.value = "";
        await validate();
        await refreshQueries();
      } catch (failure) {
        if (failure.detail?.line) {
          showResult({ valid: false, ...failure.detail });
          text.focus();
        } else {
          error.textContent = `Not registered: ${failure.message}`;
          error.hidden = false;
        }
      } finally {
        button.disabled = false;
      }
    });

    // ---- the list

    function renderList() {
      main.querySelector("#registry-version").textContent = store.version ? `registry version ${count(store.version)}` : "";
      const focusKey = document.activeElement?.dataset?.key;
      const entries = [...store.queries.values()];
      if (!entries.length) {
        list.innerHTML = `<p class="empty">No query registered yet.</p>`;
        return;
      }
      list.innerHTML = `<table class="responsive"><thead><tr><th scope="col">Query</th><th scope="col">Status</th>
        <th scope="col">Threshold</th><th scope="col">Matches, last 15 min</th><th scope="col">Last match</th><th scope="col">Actions</th></tr></thead>
        <tbody>${entries.map((e) => {
          const { rate, last } = matchRate(e.id);
          return `<tr data-query="${esc(e.id)}">
            <td data-label="Query"><strong>${esc(e.name)}</strong>${e.name !== e.id ? ` <span class="muted small">${esc(e.id)}</span>` : ""}
              <br><span class="muted small">${esc(e.kind)} · registered ${clock(e.created)}</span></td>
            <td data-label="Status">${statusCell(e)}</td>
            <td data-label="Threshold" class="num">${percent(e.threshold)}</td>
            <td data-label="Match rate" class="num">${rateCell(rate)}</td>
            <td data-label="Last match" class="num">${clockSpan(last, { withAgo: true })}</td>
            <td data-label="Actions"><div class="actions">
              ${e.failed
                ? `<button type="button" data-role="analyst" data-act="retry" data-key="${esc(e.id)}:retry">Retry</button>`
                : `<button type="button" data-role="analyst" data-act="pause" data-key="${esc(e.id)}:pause">${e.paused ? "Resume" : "Pause"}</button>`}
              <a href="#/tuner?query=${encodeURIComponent(e.id)}" data-key="${esc(e.id)}:tune">Tune</a>
              <a href="#/inspector?query=${encodeURIComponent(e.id)}" data-key="${esc(e.id)}:inspect">Inspect</a>
              <a href="#/history?query=${encodeURIComponent(e.id)}" data-key="${esc(e.id)}:history">History</a>
              <button type="button" class="danger" data-role="analyst" data-act="delete" data-key="${esc(e.id)}:delete">Delete</button>
            </div></td></tr>`;
        }).join("")}</tbody></table>`;
      applyRole(list);
      if (focusKey) list.querySelector(`[data-key="${CSS.escape(focusKey)}"]`)?.focus();
    }

    list.addEventListener("click", async (event) => {
      const button = event.target.closest("button[data-act]");
      if (!button) return;
      const id = button.closest("tr").dataset.query;
      const entry = store.queries.get(id);
      try {
        if (button.dataset.act === "pause") {
          await patch(q(id), { paused: !entry.paused });
          notify(`${entry.name} ${entry.paused ? "resumed" : "paused"}.`);
        } else if (button.dataset.act === "retry") {
          // any change brings a quarantined query back: the job runs it again from its state
          await patch(q(id), { paused: entry.paused });
          notify(`${entry.name}: the job runs it again from its next micro-batch.`);
        } else if (await confirmAction(`Delete ${entry.name}?`,
          "The job drops its state at its next micro-batch and its alarm goes; its results stay in their streams.", "Delete")) {
          await del(q(id));
          notify(`${entry.name} deleted.`);
        } else {
          return;
        }
        await refreshQueries();
      } catch (error) {
        notify(`${entry.name}: ${error.message}`, { bad: true });
      }
    });

    let pending = false;
    const scheduleList = () => {
      if (pending) return;
      pending = true;
      setTimeout(() => { pending = false; renderList(); }, 1000);
    };
    const onQueries = () => { renderList(); fillStreams(); };
    bus.addEventListener("queries", onQueries);
    bus.addEventListener("matches", scheduleList);
    async function readRates() {
      try {
        const found = await get(`/rates?last=${RATE_WINDOW}`);
        RATES.counts = new Map(found.items.map((item) => [item.query, item]));
        RATES.at = found.until;
        if (list.isConnected) renderList();
      } catch { /* the last counts stay */ }
    }
    const rateTimer = setInterval(readRates, 30_000);
    renderList();
    readRates();
    fillStreams();
    return () => {
      clearInterval(rateTimer);
      clearTimeout(timer);
      inFlight?.abort();
      bus.removeEventListener("queries", onQueries);
      bus.removeEventListener("matches", scheduleList);
    };
  },
};
