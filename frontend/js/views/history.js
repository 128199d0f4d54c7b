// History: a query's matches over any period, from the archive and the live tail
// (GET /history, /history/summary, /history/export). A period is a preset (last hour,
// day, week) or two local times; a key filter narrows it to one watched thing. Matches
// per hour (or day) as bars, the page of matches in time order with clock times, more on
// demand, and the period's matches as CSV or Parquet.

import { ApiError, get, q, session } from "../api.js";
import { clock, count, esc, likelihood, percent } from "../format.js";
import { draw, palette, purge } from "../charts.js";
import { bus, fillQuerySelect, keyText, store } from "../store.js";
import { explainLink } from "../ui.js";

const PRESETS = { "1h": 3_600_000, "24h": 86_400_000, "7d": 7 * 86_400_000 };
const PAGE = 100;

/** A local date-time input's value for a time in ms (the browser's zone). */
function localValue(ms) {
  const d = new Date(ms);
  const pad = (n) => String(n).padStart(2, "0");
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

export default {
  title: "History",
  mount(main, params) {
    main.innerHTML = `
      <div class="view-head"><h1>History</h1></div>
      <form class="filters" id="hist-form">
        <div><label for="hist-query">Query</label><select id="hist-query"></select></div>
        <div><label for="hist-preset">Period</label><select id="hist-preset">
          <option value="1h">last hour</option><option value="24h" selected>last day</option>
          <option value="7d">last week</option><option value="custom">from … to …</option></select></div>
        <div><label for="hist-since">From (local time)</label><input type="datetime-local" id="hist-since"></div>
        <div><label for="hist-until">To (local time)</label><input type="datetime-local" id="hist-until"></div>
        <div><label for="hist-key">Key</label><input id="hist-key" placeholder='e.g. region=17' size="14"
          aria-describedby="hist-key-help"></div>
        <button type="submit" class="primary">Show</button>
      </form>
      <p id="hist-key-help" class="muted small">Key: attribute=value, several separated by commas; times are
        in your browser's zone (UTC when you hover one).</p>
      <p id="hist-gaps" class="notice" role="status" hidden></p>
      <section class="card stack" aria-labelledby="hist-chart-title">
        <h2 id="hist-chart-title">Matches over the period</h2>
        <p class="muted small" id="hist-total" aria-live="polite">Loading…</p>
        <div class="chart small" id="hist-chart" role="img" aria-label="Matches per hour or day over the period"></div>
      </section>
      <section class="card stack" aria-labelledby="hist-list-title">
        <div class="row"><h2 id="hist-list-title">Matches</h2>
          <span class="spacer"></span>
          <button type="button" id="hist-csv">Download CSV</button>
          <button type="button" id="hist-parquet">Download Parquet</button></div>
        <table class="responsive" id="hist-table"><thead><tr><th scope="col">When</th><th scope="col">About</th>
          <th scope="col">Events</th><th scope="col">Probability</th><th scope="col"><span class="sr-only">Explanation</span></th></tr></thead><tbody></tbody></table>
        <p class="muted small" id="hist-status" role="status"></p>
        <button type="button" id="hist-more" hidden>Show more</button>
      </section>`;

    const $ = (s) => main.querySelector(s);
    const chart = $("#hist-chart");
    const rows = $("#hist-table tbody");
    let next = null;
    let shown = 0;
    let current = null;   // the shown period's query string (more pages and downloads keep it)
    let generation = 0;

    const fillQueries = () => fillQuerySelect($("#hist-query"), params.get("query"));

    function keyFilter() {
      const text = $("#hist-key").value.trim();
      if (!text) return null;
      const out = {};
      for (const part of text.split(",")) {
        const [name, ...rest] = part.split("=");
        if (!name.trim() || !rest.length) throw new Error(`key: "${part.trim()}" is not attribute=value`);
        const raw = rest.join("=").trim();
        const number = Number(raw);
        out[name.trim()] = raw !== "" && !Number.isNaN(number) ? number : raw;
      }
      return out;
    }

    /** The period's query string (since/until in ms), or throws with what is wrong. */
    function period() {
      const preset = $("#hist-preset").value;
      const search = new URLSearchParams();
      if (preset === "custom") {
        const since = $("#hist-since").value ? new Date($("#hist-since").value).getTime() : null;
        const until = $("#hist-until").value ? new Date($("#hist-until").value).getTime() : null;
        if (since === null) throw new Error("From: choose a time");
        if (until !== null && until <= since) throw new Error("To must be after From");
        search.set("since", String(since));
        if (until !== null) search.set("until", String(until));
      } else {
        const until = Date.now();
        search.set("since", String(until - PRESETS[preset]));
        search.set("until", String(until + 1));
        $("#hist-since").value = localValue(until - PRESETS[preset]);
        $("#hist-until").value = localValue(until);
      }
      const key = keyFilter();
      if (key) search.set("key", JSON.stringify(key));
      return search;
    }

    function row(m) {
      const { word, cls } = likelihood(m.prob);
      const about = keyText(m.key);
      const events = Object.entries(m.events).map(([v, id]) => `${esc(v)} <code>${esc(id)}</code>`).join(" · ");
      return `<tr data-match="${esc(m.id)}">
        <td data-label="When" class="num"><time datetime="${new Date(m.at * 1000).toISOString()}"
          title="${esc(new Date(m.at * 1000).toISOString().replace("T", " ").replace(".000Z", " UTC"))}">${esc(clock(m.at))}</time></td>
        <td data-label="About">${about ? esc(about) : '<span class="muted">—</span>'}</td>
        <td data-label="Events">${events}</td>
        <td data-label="Probability"><span class="prob ${cls}">${percent(m.prob)}</span> <span class="muted small">${word}</span></td>
        <td data-label="Why"><a class="small" href="${explainLink($("#hist-query").value, m.id)}">why?</a></td>
      </tr>`;
    }

    async function loadPage(search, mine) {
      const more = new URLSearchParams(search);
      more.set("limit", String(PAGE));
      if (next) more.set("next", next);
      const page = await get(`${q($("#hist-query").value)}/history?${more}`);
      if (mine !== generation) return;
      rows.insertAdjacentHTML("beforeend", page.items.map(row).join(""));
      shown += page.items.length;
      next = page.next;
      $("#hist-more").hidden = !next;
      $("#hist-status").textContent = shown ? `${count(shown)} shown${next ? ", more in the period" : ", all of the period"}.`
        : "No match in this period.";
    }

    async function show() {
      const id = $("#hist-query").value;
      if (!id) return;
      const mine = ++generation;
      let search;
      try {
        search = period();
      } catch (error) {
        $("#hist-status").textContent = error.message;
        return;
      }
      current = search;
      rows.innerHTML = "";
      next = null;
      shown = 0;
      $("#hist-total").textContent = "Loading…";
      $("#hist-status").textContent = "Loading…";
      try {
        const summary = await get(`${q(id)}/history/summary?${search}`);
        if (mine !== generation) return;
        const gaps = summary.unavailable ?? [];
        $("#hist-gaps").hidden = !gaps.length;
        $("#hist-gaps").textContent = gaps.map((g) => `Not available from ${clock(g.since / 1000)} to ${clock(g.until / 1000)}: ${g.reason}.`).join(" ");
        const unit = summary.bucket === "hour" ? "hour" : "day";
        $("#hist-total").textContent = `${count(summary.total)} ${summary.total === 1 ? "match" : "matches"} from `
          + `${clock(Number(search.get("since")) / 1000)} to ${clock(summary.until / 1000)}; per ${unit}`
          + (summary.keys.length > 1 ? `, over ${count(summary.keys.length)} keys.` : ".");
        const colours = palette();
        draw(chart, [{
          x: summary.buckets.map((b) => new Date(b.start)), y: summary.buckets.map((b) => b.matches), type: "bar",
          marker: { color: colours.accent }, name: "matches", offset: 0,
          width: summary.buckets.map(() => (unit === "hour" ? 3_600_000 : 86_400_000) * 0.9),
          hovertemplate: `%{x|%Y-%m-%d %H:%M}: %{y:,} matches<extra></extra>`,
        }], { showlegend: false, margin: { l: 52, r: 12, t: 12, b: 48 },
          xaxis: { type: "date", title: { text: "local time" }, hoverformat: "%Y-%m-%d %H:%M",
            range: [new Date(Number(search.get("since"))), new Date(summary.until)] },
          yaxis: { title: { text: `matches per ${unit}` }, rangemode: "tozero" } }, () => mine === generation);
        await loadPage(search, mine);
      } catch (error) {
        if (mine !== generation) return;
        const where = error instanceof ApiError && error.detail.field ? ` (${error.detail.field})` : "";
        $("#hist-total").textContent = "";
        $("#hist-status").textContent = `The history could not be read${where}: ${error.message}`;
      }
    }

    async function download(format) {
      const id = $("#hist-query").value;
      if (!id || !current) return;
      const search = new URLSearchParams(current);
      search.set("format", format);
      $("#hist-status").textContent = `Preparing the ${format.toUpperCase()} file…`;
      const response = await fetch(`/api${q(id)}/history/export?${search}`, { headers: { Authorization: `Bearer ${session.token}` } });
      if (!response.ok) {
        const body = await response.json().catch(() => null);
        $("#hist-status").textContent = `Download failed: ${body?.error?.message ?? response.status}`;
        return;
      }
      const link = document.createElement("a");
      link.href = URL.createObjectURL(await response.blob());
      link.download = `${id}-history.${format}`;
      document.body.append(link);
      link.click();
      link.remove();
      setTimeout(() => URL.revokeObjectURL(link.href), 10_000);
      $("#hist-status").textContent = `Downloaded ${link.download}.`;
    }

    $("#hist-form").addEventListener("submit", (event) => { event.preventDefault(); show(); });
    $("#hist-preset").addEventListener("change", () => { if ($("#hist-preset").value !== "custom") show(); });
    for (const input of ["#hist-since", "#hist-until"]) {
      $(input).addEventListener("change", () => { $("#hist-preset").value = "custom"; });
    }
    $("#hist-query").addEventListener("change", show);
    $("#hist-more").addEventListener("click", () => {
      if (current) loadPage(current, generation).catch((error) => { $("#hist-status").textContent = error.message; });
    });
    $("#hist-csv").addEventListener("click", () => download("csv"));
    $("#hist-parquet").addEventListener("click", () => download("parquet"));
    if (params.get("key")) $("#hist-key").value = params.get("key");
    const onQueries = () => { const before = $("#hist-query").value; fillQueries(); if ($("#hist-query").value !== before) show(); };
    bus.addEventListener("queries", onQueries);
    fillQueries();
    show();
    return () => {
      bus.removeEventListener("queries", onQueries);
      purge(chart);
    };
  },
};
