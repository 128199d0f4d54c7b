// Buffers and health: whether the system keeps up at a glance (Redis, the job's
// heartbeat, lag), the job's micro-batch duration, input rate and lag as live series
// (the metrics feed), and per query its buffers against their theoretical bounds,
// evictions, late events and near misses (its recent observations), and what
// `penumbra up` restarted, when and why.

import { get, q } from "../api.js";
import { ago, clock, clockSpan, count, duration, esc, fullTime, number } from "../format.js";
import { draw, epochMs, palette, purge } from "../charts.js";
import { bus, fillQuerySelect, store } from "../store.js";

const POLL_MS = 5000;

/** The verdict of a health answer and the latest progress report: words and a class. */
export function verdict(health, latest) {
  if (!health || health.status === "unreachable") return ["The service cannot be reached", "bad"];
  if (health.status === "down") return ["Redis is down: nothing is ingested or matched", "bad"];
  if (!health.job || !health.job.alive) return ["The Spark job is not running: events wait in the ingest stream", "bad"];
  const lag = health.lag_seconds ?? latest?.lag_seconds ?? 0;
  const batch = (latest?.duration_ms ?? 0) / 1000;
  const age = health.job.last_batch_age;
  const waiting = health.lag_entries ?? latest?.lag_entries ?? 0;
  // "keeping up" only on a recent micro-batch: a job with events waiting and no batch is stalled
  if (age === null || age === undefined) {
    return waiting ? [`No micro-batch yet; ${count(waiting)} events wait`, "meh"] : ["Running; no micro-batch yet (no events so far)", "meh"];
  }
  if (waiting && age > Math.max(30, 3 * batch)) return [`No micro-batch for ${duration(age)} while ${count(waiting)} events wait`, "bad"];
  if (lag > Math.max(10, 3 * batch)) return [`Falling behind: ${duration(lag)} of events wait`, "meh"];
  if (health.memory_warning) {
    return [`Redis holds ${Math.round(100 * health.redis_memory)} % of its memory: make room before it refuses writes`, "meh"];
  }
  if (health.failed_queries) {
    return [`${health.failed_queries} failed ${health.failed_queries === 1 ? "query is" : "queries are"} skipped; the others keep up`, "meh"];
  }
  if (age > 60) return [`Keeping up: idle, no events for ${duration(age)}`, "good"];
  return ["Keeping up", "good"];
}

/** A series with a break (null) wherever two points are further apart than ``gap``
 *  seconds: an outage shows as a gap, not as a straight line across it. */
export function withGaps(series, gap) {
  const out = [];
  for (const [i, m] of series.entries()) {
    if (i && m.at - series[i - 1].at > gap) out.push({ at: (m.at + series[i - 1].at) / 2, gap: true });
    out.push(m);
  }
  return out;
}

const time = (s) => new Date(s * 1000);

// the parts penumbra up runs, as the Restarts table names them
const PART_NAMES = { redis: "Redis", job: "Spark job", api: "API" };

// the queries the job quarantined, by name (the Queries view says why and retries them)
const failedNames = () => [...store.queries.values()].filter((e) => e.failed).map((e) => e.name).join(", ");

/** A source with no event for this long is flagged (seconds), as on the query list. */
const IDLE_SECONDS = 300;

export default {
  title: "Buffers and health",
  mount(main, params) {
    main.innerHTML = `
      <div class="view-head"><h1>Buffers and health</h1></div>
      <section class="card stack" aria-labelledby="now-title">
        <h2 id="now-title">Now: <span id="verdict" data-testid="verdict">…</span></h2>
        <div class="stat-grid" id="stats"></div>
      </section>
      <section aria-labelledby="job-title" class="stack">
        <h2 id="job-title">The job</h2>
        <div class="charts">
          <div class="card"><h3>Micro-batch duration</h3><div class="chart small" id="c-duration" role="img" aria-label="Micro-batch duration over time"></div></div>
          <div class="card"><h3>Input and processing rate</h3><div class="chart small" id="c-rate" role="img" aria-label="Input and processed rows per second over time"></div></div>
          <div class="card"><h3>Lag</h3><div class="chart small" id="c-lag" role="img" aria-label="Lag in seconds over time"></div></div>
        </div>
      </section>
      <section aria-labelledby="sources-title" class="stack">
        <h2 id="sources-title">Sources</h2>
        <div class="card" id="sources" data-testid="sources"><p class="muted">Loading…</p></div>
      </section>
      <section aria-labelledby="restarts-title" class="stack">
        <h2 id="restarts-title">Restarts</h2>
        <div class="card" id="restarts" data-testid="restarts"></div>
      </section>
      <section aria-labelledby="buf-title" class="stack">
        <h2 id="buf-title">Per query</h2>
        <div class="filters"><div><label for="h-query">Query</label><select id="h-query"></select></div></div>
        <div class="charts">
          <div class="card"><h3>Buffer length per stream and how far back its bound keeps it</h3><div class="chart small" id="c-buffers" role="img" aria-label="Buffer length per stream, and how far behind the watermark its bound (Theorem 4) keeps events"></div></div>
          <div class="card"><h3>Evictions, late events, near misses per micro-batch</h3><div class="chart small" id="c-counters" role="img" aria-label="Evictions, late events and near misses per micro-batch"></div></div>
        </div>
      </section>`;
    const $ = (s) => main.querySelector(s);
    const charts = ["#c-duration", "#c-rate", "#c-lag", "#c-buffers", "#c-counters"].map($);
    let observations = [];
    let history = [];
    let shownRestarts = "";

    function renderStats() {
      const health = store.health[store.health.length - 1];
      const latest = store.metrics[store.metrics.length - 1] ?? history[0];
      const [words, cls] = verdict(health, latest);
      const box = $("#verdict");
      box.textContent = `${cls === "good" ? "✓" : cls === "meh" ? "▲" : "✗"} ${words}`;
      box.className = cls;
      const job = health?.job;
      const tiles = [
        ["Redis", health?.redis ? `reachable, ${number(health.redis_ms)} ms` : "unreachable", health?.redis ? "good" : "bad"],
        ["Spark job", job ? (job.alive ? `alive (beat ${ago(Date.now() / 1000 - job.heartbeat_age)})` : "stopped") : "never seen", job?.alive ? "good" : "bad"],
        ["Last micro-batch", job?.last_batch !== null && job?.last_batch !== undefined ? `#${count(job.last_batch)}, ${duration(job.last_batch_age)} ago` : "—", ""],
        ["Lag", health?.lag_seconds !== null && health?.lag_seconds !== undefined
          ? `${duration(health.lag_seconds)} · ${count(health.lag_entries)} entries` : "—", ""],
        ["Ingest stream", `${count(health?.ingest_length)} entries`, ""],
        ["Input rate", latest ? `${count(latest.input_rate)} events/s` : "—", ""],
        ["Failed queries", failedNames() || "none", health?.failed_queries ? "bad" : ""],
        ["Redis memory", health?.redis_memory !== null && health?.redis_memory !== undefined
          ? `${Math.round(100 * health.redis_memory)} % of its limit` : "no limit", health?.memory_warning ? "bad" : ""],
      ];
      $("#stats").innerHTML = tiles.map(([k, v, c]) => `<div class="card stat"><div class="k">${k}</div><div class="v ${c}">${esc(v)}</div></div>`).join("");
    }

    function renderRestarts() {
      const health = store.health[store.health.length - 1];
      const restarts = health?.status === "down" ? null : health?.restarts;
      const box = $("#restarts");
      const html = !restarts ? `<p class="empty">Not known while the service or Redis cannot be reached.</p>`
        : !restarts.length ? `<p class="empty">No part of Penumbra was restarted.</p>`
        : `<table class="responsive"><thead><tr><th scope="col">When</th><th scope="col">Part</th>
        <th scope="col">Cause</th><th scope="col">Had run</th><th scope="col">Started again after</th></tr></thead>
        <tbody>${restarts.map((r) => `<tr data-restart="${esc(r.id)}">
          <td data-label="When" class="num">${clockSpan(r.at, { withAgo: true })}</td>
          <td data-label="Part">${esc(PART_NAMES[r.part] ?? r.part)}${r.pid ? ` <span class="muted small">pid ${r.pid}</span>` : ""}</td>
          <td data-label="Cause">${esc(r.cause)}${r.failures > 1 ? ` <span class="muted small">(${r.failures} failures in a row)</span>` : ""}</td>
          <td data-label="Had run" class="num">${duration(r.uptime)}</td>
          <td data-label="Started again after" class="num">${duration(r.restart_in)}</td></tr>`).join("")}</tbody></table>`;
      if (html !== shownRestarts) box.innerHTML = shownRestarts = html;  // unchanged: nothing moves under a reader
    }

    function renderJob() {
      const seen = new Map();
      for (const m of [...history].reverse().concat(store.metrics)) if (m && m.at) seen.set(m.batch ?? m.at, m);
      const ordered = [...seen.values()].sort((a, b) => a.at - b.at);
      const steps = ordered.slice(1).map((m, i) => m.at - ordered[i].at).sort((a, b) => a - b);
      const typical = steps.length ? steps[Math.floor(steps.length / 2)] : 1;
      const series = withGaps(ordered, Math.max(30, 10 * typical));
      const x = series.map((m) => time(m.at));
      const colours = palette();
      const common = { margin: { l: 52, r: 12, t: 8, b: 36 }, xaxis: { type: "date" } };
      const empty = !series.length;
      const note = empty ? { annotations: [{ text: "no progress report yet", xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false }] } : {};
      draw(charts[0], [{ x, y: series.map((m) => m.gap ? null : m.duration_ms), name: "duration", type: "scatter", mode: "lines",
        line: { color: colours.accent }, hovertemplate: "%{y:,.0f} ms<extra></extra>" }],
      { ...common, ...note, showlegend: false, yaxis: { title: { text: "ms" }, rangemode: "tozero" } });
      draw(charts[1], [
        { x, y: series.map((m) => m.gap ? null : m.input_rate), name: "input", type: "scatter", mode: "lines", line: { color: colours.accent } },
        { x, y: series.map((m) => m.gap ? null : m.processed_rate), name: "processed", type: "scatter", mode: "lines", line: { color: colours.ok, dash: "dot" } },
      ], { ...common, ...note, yaxis: { title: { text: "events/s" }, rangemode: "tozero" } });
      draw(charts[2], [{ x, y: series.map((m) => m.gap ? null : m.lag_seconds ?? null), name: "lag", type: "scatter", mode: "lines",
        line: { color: colours.warn }, hovertemplate: "%{y:,.1f} s<extra></extra>" }],
      { ...common, showlegend: false, yaxis: { title: { text: "seconds" }, rangemode: "tozero" } });
    }

    function renderQuery() {
      const colours = palette();
      const rows = [...observations].reverse();
      const x = rows.map((o) => time(o.at));
      const streams = [...new Set(rows.flatMap((o) => Object.keys(o.observations?.buffers ?? {})))];
      const lines = [];
      const cycle = [colours.accent, colours.warn, colours.ok, colours.danger];
      // Theorem 4's bound, per side: the max time below which a buffered event is obsolete,
      // drawn as how far back (behind the watermark) the buffer must keep, on its own axis
      const spans = streams.map((s, i) => rows.map((o) => {
        const bound = o.observations?.buffer_bounds?.[i];
        const mark = o.observations?.watermark;
        return Number.isFinite(bound) && Number.isFinite(mark) ? mark - bound : null;
      }));
      const ms = rows.some((o) => epochMs([o.observations?.watermark]));
      streams.forEach((s, i) => {
        lines.push({ x, y: rows.map((o) => o.observations?.buffers?.[s] ?? null), name: `${s} buffered`, type: "scatter", mode: "lines",
          line: { color: cycle[i % cycle.length] } });
        if (spans[i].some((v) => v !== null)) {
          lines.push({ x, y: spans[i].map((v) => (v === null ? null : ms ? v / 1000 : v)), name: `${s} kept back (bound)`,
            type: "scatter", mode: "lines", yaxis: "y2", line: { color: cycle[i % cycle.length], dash: "dash" },
            hovertemplate: `%{y:,.1f}${ms ? " s" : ""}<extra>${esc(s)}: kept back at most</extra>` });
        }
      });
      const common = { margin: { l: 52, r: 12, t: 8, b: 36 }, xaxis: { type: "date" } };
      const note = rows.length ? {} : { annotations: [{ text: "no observation yet", xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false }] };
      draw(charts[3], lines, { ...common, ...note, yaxis: { title: { text: "events" }, rangemode: "tozero" },
        yaxis2: { title: { text: ms ? "kept back (s)" : "kept back" }, overlaying: "y", side: "right", rangemode: "tozero", automargin: true,
          showgrid: false } });
      const counter = (name) => rows.map((o) => o.observations?.counters?.[name] ?? 0);
      draw(charts[4], [
        { x, y: counter("evicted"), name: "evicted", type: "bar", marker: { color: colours.muted } },
        { x, y: counter("late"), name: "late", type: "bar", marker: { color: colours.danger } },
        { x, y: counter("near_misses"), name: "near misses", type: "bar", marker: { color: colours.warn } },
      ], { ...common, ...note, barmode: "group", yaxis: { title: { text: "per micro-batch" }, rangemode: "tozero" } });
    }

    const fillQueries = () => fillQuerySelect($("#h-query"), params.get("query"));

    // the streams the queries read, when each was last heard from (GET /rates), a silent one flagged
    async function loadSources() {
      const box = $("#sources");
      let found;
      try {
        found = await get("/rates?last=15m");
      } catch (error) {
        box.innerHTML = `<p class="empty">Not known now: ${esc(error.message)}</p>`;
        return;
      }
      const readers = new Map();
      for (const item of found.items) {
        for (const [stream, at] of Object.entries(item.sources ?? {})) {
          const seen = readers.get(stream) ?? { at, queries: [] };
          seen.queries.push(store.queries.get(item.query)?.name ?? item.query);
          readers.set(stream, seen);
        }
      }
      const now = Date.now() / 1000;
      box.innerHTML = !readers.size ? `<p class="empty">No query reads a stream yet.</p>`
        : `<table class="responsive"><thead><tr><th scope="col">Stream</th><th scope="col">Last event</th>
          <th scope="col">Read by</th></tr></thead><tbody>${[...readers].sort(([a], [b]) => a.localeCompare(b)).map(([stream, seen]) => {
            const idle = seen.at === null || now - seen.at > IDLE_SECONDS;
            return `<tr data-stream="${esc(stream)}"${idle ? ' class="idle-row"' : ""}><td data-label="Stream">${esc(stream)}</td>
              <td data-label="Last event">${seen.at === null ? '<span class="idle">⚠ none yet</span>'
                : `<span title="${esc(fullTime(seen.at))}"${idle ? ' class="idle"' : ""}>${idle ? "⚠ " : ""}${clock(seen.at)} (${ago(seen.at)})</span>`}</td>
              <td data-label="Read by">${esc(seen.queries.join(", "))}</td></tr>`;
          }).join("")}</tbody></table>`;
    }

    async function loadQuery() {
      const id = $("#h-query").value;
      if (!id) { observations = []; renderQuery(); return; }
      try {
        observations = (await get(`${q(id)}/observations?limit=100`)).items;
      } catch {
        observations = [];
      }
      renderQuery();
    }

    async function loadHistory() {
      try {
        history = (await get("/metrics?limit=200")).items;
      } catch {
        history = [];
      }
      renderJob();
      renderStats();
    }

    const onHealth = () => { renderStats(); renderRestarts(); };
    const onMetrics = () => { renderStats(); renderJob(); };
    const onQueries = () => { const before = $("#h-query").value; fillQueries(); if ($("#h-query").value !== before) loadQuery(); };
    $("#h-query").addEventListener("change", loadQuery);
    bus.addEventListener("health", onHealth);
    bus.addEventListener("metrics", onMetrics);
    bus.addEventListener("queries", onQueries);
    fillQueries();
    renderStats();
    renderRestarts();
    loadHistory();
    loadQuery();
    loadSources();
    const timer = setInterval(() => { loadQuery(); renderJob(); }, POLL_MS);
    const sourcesTimer = setInterval(loadSources, 30_000);
    return () => {
      clearInterval(timer);
      clearInterval(sourcesTimer);
      bus.removeEventListener("health", onHealth);
      bus.removeEventListener("metrics", onMetrics);
      bus.removeEventListener("queries", onQueries);
      charts.forEach(purge);
    };
  },
};
