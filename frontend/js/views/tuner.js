// Threshold tuner: how many of the recent window's candidates would match at each
// threshold (GET what-if), the current threshold marked, a slider whose preview moves
// before anything is applied; applying PATCHes the registry (the job takes it at its
// next micro-batch, and the audit stream records who: the "Changes" card lists it). The
// verdicts' reliability diagram and precision by threshold say how far to trust it.

import { get, patch, q, session } from "../api.js";
import { clock, count, duration, esc, fullTime, percent } from "../format.js";
import { draw, palette, purge } from "../charts.js";
import { bus, fillQuerySelect, refreshQueries, store } from "../store.js";
import { notify } from "../ui.js";

/** Thresholds applied from this tab, per query: [{batch, threshold}] (the rate chart's marks). */
const APPLIED = new Map();

/** Candidates at threshold ``t``, interpolated between the what-if's points. */
export function matchesAt(points, t) {
  if (!points.length) return 0;
  if (t <= points[0].threshold) return points[0].matches;
  for (let i = 1; i < points.length; i += 1) {
    const a = points[i - 1];
    const b = points[i];
    if (t <= b.threshold) return a.matches + ((b.matches - a.matches) * (t - a.threshold)) / (b.threshold - a.threshold || 1);
  }
  return points[points.length - 1].matches;
}

const PERIODS = { "1h": "last hour", "24h": "last day", "7d": "last week" };

/** A backtest's answer in the what-if's shape (its points keep their alarms). */
function asWhatIf(found) {
  return { ...found, batches: null, exact: true, near_miss_samples: 0 };  // matches: exact on the hundredths
}

export default {
  title: "Threshold tuner",
  mount(main, params) {
    main.innerHTML = `
      <div class="view-head"><h1>Threshold tuner</h1></div>
      <div class="filters"><div><label for="tune-query">Query</label><select id="tune-query"></select></div>
        <div><label for="tune-batches">Window</label><select id="tune-batches">
          <optgroup label="live">
          <option value="10">last 10 micro-batches</option><option value="50" selected>last 50 micro-batches</option>
          <option value="200">last 200 micro-batches</option></optgroup>
          <optgroup label="backtest over the archive">
          <option value="last:1h">last hour</option><option value="last:24h">last day</option>
          <option value="last:7d">last week</option></optgroup></select></div>
        <button type="button" id="tune-reload">Reload</button></div>
      <section class="card stack" aria-labelledby="tune-title">
        <h2 id="tune-title">Matches at each threshold</h2>
        <p class="muted small" id="tune-window"></p>
        <div class="chart" id="tune-chart" role="img" aria-label="Matches in the window against the threshold"></div>
        <div class="slider-row">
          <label for="tune-slider" class="inline">Threshold</label>
          <input type="range" id="tune-slider" min="0" max="100" step="0.5" value="60">
          <output id="tune-value" for="tune-slider" class="big">—</output>
        </div>
        <p id="tune-preview" aria-live="polite"></p>
        <div class="row" data-role="analyst">
          <button type="button" class="primary" id="tune-apply">Apply threshold</button>
          <button type="button" id="tune-reset">Back to current</button>
          <span id="tune-applied" class="muted" role="status"></span>
        </div>
      </section>
      <section class="card stack" aria-labelledby="calib-title">
        <h2 id="calib-title">What the verdicts say</h2>
        <p class="muted small" id="calib-summary">Verdicts (real or false, given to matches and to alarms when resolved)
          against the probabilities reported: a calibrated query has its bars on the diagonal.</p>
        <div class="charts">
          <div class="chart small" id="calib-chart" role="img" aria-label="Share judged real against the reported probability"></div>
          <div class="chart small" id="precision-chart" role="img" aria-label="Precision of the verdicts at each threshold"></div>
        </div>
        <div class="row"><label for="calib-target" class="inline">Precision wanted (%)</label>
          <input id="calib-target" type="number" min="1" max="100" step="1" value="90" inputmode="numeric">
          <span id="calib-threshold" role="status"></span></div>
      </section>
      <section class="card stack" data-role="analyst" aria-labelledby="audit-title">
        <h2 id="audit-title">Changes to this query</h2>
        <p class="muted small">The audit trail: who registered, retuned, paused or acted on it, newest first.</p>
        <ol id="tune-audit" class="audit" aria-live="polite"></ol>
      </section>
      <section class="card stack" aria-labelledby="rate-title">
        <h2 id="rate-title">Matches per micro-batch, live</h2>
        <p class="muted small">What this tab has received of the query's matches, by the micro-batch that found them;
          thresholds applied from this tab are marked.</p>
        <div class="chart small" id="tune-rate" role="img" aria-label="Matches per micro-batch with the threshold changes marked"></div>
      </section>`;

    const select = main.querySelector("#tune-query");
    const slider = main.querySelector("#tune-slider");
    const chart = main.querySelector("#tune-chart");
    const preview = main.querySelector("#tune-preview");
    const applyButton = main.querySelector("#tune-apply");
    const rateChart = main.querySelector("#tune-rate");
    let whatIf = null;
    let backtest = null;   // the archive's period ("1h", "24h", "7d"), or null: the live window
    let current = null;
    let drawn = false;
    const calibChart = main.querySelector("#calib-chart");
    const precisionChart = main.querySelector("#precision-chart");

    async function loadCalibration() {
      const id = select.value;
      if (!id) return;
      const target = Math.min(100, Math.max(1, Number(main.querySelector("#calib-target").value) || 90)) / 100;
      let found;
      try {
        found = await get(`${q(id)}/calibration?bins=10&precision=${target}`);
      } catch (error) {
        main.querySelector("#calib-threshold").textContent = `cannot be read: ${error.message}`;
        return;
      }
      const colours = palette();
      const bins = found.reliability.bins.filter((b) => b.count);
      const judged = found.reliability.judged;
      main.querySelector("#calib-summary").textContent = judged
        ? `${count(found.verdicts.real)} real, ${count(found.verdicts.false)} false, ${count(found.verdicts.unknown)} unknown; `
          + `expected calibration error ${percent(found.reliability.ece)}.`
        : "No verdict yet: judge matches or resolve alarms with a verdict to see how the probabilities hold up.";
      const note = judged ? {} : { annotations: [{ text: "no verdict yet", xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false }] };
      draw(calibChart, [
        { x: bins.map((b) => (b.lo + b.hi) * 50), y: bins.map((b) => b.real_share * 100), type: "bar", name: "judged real",
          width: 8, marker: { color: colours.accent }, text: bins.map((b) => `${b.count}`), textposition: "outside",
          hovertemplate: "reported %{x:.0f} %: %{y:.0f} % real (%{text} verdicts)<extra></extra>" },
        { x: [0, 100], y: [0, 100], type: "scatter", mode: "lines", name: "calibrated", line: { color: colours.muted, dash: "dot" } },
      ], { ...note, margin: { l: 52, r: 12, t: 12, b: 40 }, showlegend: false,
        xaxis: { title: { text: "reported probability (%)" }, range: [0, 100] },
        yaxis: { title: { text: "judged real (%)" }, range: [0, 105] } });
      const points = found.precision.filter((p) => p.precision !== null);
      draw(precisionChart, [{ x: points.map((p) => p.threshold * 100), y: points.map((p) => p.precision * 100),
        type: "scatter", mode: "lines", name: "precision", line: { color: colours.ok },
        hovertemplate: "threshold %{x:.0f} %: %{y:.0f} % real<extra></extra>" }],
      { ...note, margin: { l: 52, r: 12, t: 12, b: 40 }, showlegend: false,
        xaxis: { title: { text: "threshold (%)" }, range: [0, 100] }, yaxis: { title: { text: "precision (%)" }, range: [0, 105] },
        shapes: [{ type: "line", xref: "paper", x0: 0, x1: 1, y0: target * 100, y1: target * 100, line: { color: colours.warn, dash: "dash" } }] });
      main.querySelector("#calib-threshold").textContent = !judged ? ""
        : found.threshold_for === null ? `No threshold reaches ${percent(target, 0)} on these verdicts.`
          : `A threshold of ${percent(found.threshold_for)} reaches ${percent(target, 0)} precision on these verdicts.`;
    }

    const fillQueries = () => fillQuerySelect(select, params.get("query"));

    function shapes(t) {
      const colours = palette();
      const line = (x, colour, dash) => ({ type: "line", xref: "x", yref: "paper", x0: x, x1: x, y0: 0, y1: 1,
        line: { color: colour, width: 2, dash } });
      const out = [line(t * 100, colours.accent, "solid")];
      const notes = [{ x: t * 100, y: 1, yref: "paper", text: "preview", showarrow: false, yanchor: "bottom", font: { color: colours.accent } }];
      if (current !== null) {
        out.push(line(current * 100, colours.danger, "dash"));
        notes.push({ x: current * 100, y: 0.92, yref: "paper", text: "current", showarrow: false, xanchor: "left", font: { color: colours.danger } });
      }
      return { shapes: out, annotations: notes };
    }

    function updatePreview() {
      const t = Number(slider.value) / 100;
      main.querySelector("#tune-value").textContent = percent(t);
      if (!whatIf) return;
      const at = matchesAt(whatIf.points, t);
      const now = current !== null ? matchesAt(whatIf.points, current) : null;
      const approx = whatIf.exact ? "" : "about ";
      let change = "";
      if (now !== null && Math.abs(t - current) > 1e-9) {
        const delta = at - now;
        change = now > 0 ? ` — ${Math.abs(Math.round((delta / now) * 100))} % ${delta <= 0 ? "fewer" : "more"} than now`
          : ` — ${delta > 0 ? "more" : "no change"} than now`;
      }
      const alarms = backtest ? `, ${count(Math.round(matchesAt(whatIf.points.map((p) => ({ threshold: p.threshold, matches: p.alarms })), t)))} alarms` : "";
      preview.innerHTML = `At <strong>${percent(t)}</strong>: <strong data-testid="preview-count">${approx}${count(Math.round(at))}</strong>
        ${Math.round(at) === 1 ? "match" : "matches"}${alarms} in the ${backtest ? PERIODS[backtest] : "window"}${now !== null ? ` (now ${count(Math.round(now))} at ${percent(current)})` : ""}${change}.`;
      applyButton.disabled = current !== null && Math.abs(t - current) < 1e-9;
      if (drawn && chart.isConnected && chart._fullLayout) window.Plotly.relayout(chart, shapes(t));
    }

    const ACTIONS = { register: "registered", update: "changed", remove: "removed", "alarm.acknowledged": "acknowledged the alarm",
      "alarm.silenced": "silenced the alarm", "alarm.resolved": "resolved the alarm" };

    function describe(details) {
      if (!details || typeof details !== "object") return "";
      return Object.entries(details).map(([k, v]) => {
        if (k === "threshold" && typeof v === "number") return `threshold ${percent(v)}`;
        if ((k === "until" || k === "at") && typeof v === "number") return `${k} ${clock(v > 1e12 ? v / 1000 : v)}`;
        return `${k} ${typeof v === "object" ? JSON.stringify(v) : v}`;
      }).join(", ");
    }

    async function loadAudit() {
      const id = select.value;
      const list = main.querySelector("#tune-audit");
      if (!id || !session.can("analyst")) return;
      try {
        const page = await get(`/audit?subject=${encodeURIComponent(id)}&limit=10`);
        list.innerHTML = page.items.length ? page.items.map((e) => `<li data-action="${esc(e.action)}">
            <time datetime="${new Date(e.at * 1000).toISOString()}" title="${esc(fullTime(e.at))}">${esc(clock(e.at))}</time>
            <strong>${esc(e.who)}</strong> ${esc(ACTIONS[e.action] ?? e.action)}${describe(e.details) ? `: ${esc(describe(e.details))}` : ""}
          </li>`).join("") : `<li class="muted">No change recorded.</li>`;
      } catch (error) {
        list.innerHTML = `<li class="muted">The audit trail could not be read: ${esc(error.message)}</li>`;
      }
    }

    async function load() {
      const id = select.value;
      if (!id) return;
      loadAudit();
      const entry = store.queries.get(id);
      current = entry?.threshold ?? null;
      const windowed = main.querySelector("#tune-batches").value;
      backtest = windowed.startsWith("last:") ? windowed.slice(5) : null;
      try {
        whatIf = backtest ? asWhatIf(await get(`${q(id)}/backtest?steps=41&last=${encodeURIComponent(backtest)}`))
          : await get(`${q(id)}/what-if?steps=41&batches=${windowed}`);
      } catch (error) {
        notify(`What-if of ${id}: ${error.message}`, { bad: true });
        return;
      }
      current = whatIf.threshold ?? current;
      slider.min = String(Math.floor(whatIf.floor * 1000) / 10);
      slider.max = "100";
      slider.value = String((current ?? whatIf.floor) * 100);
      main.querySelector("#tune-window").textContent = backtest
        ? `Backtest over the ${PERIODS[backtest]} of the archive: ${count(whatIf.matches)} matches and `
          + `${count(whatIf.near_misses)} near misses; alarms are the episodes that would have opened`
          + `${whatIf.points.some((p) => !p.exact) ? " (at least that many where near misses reach the threshold: they carry no key)" : ""}.`
        : whatIf.batches
        ? `${count(whatIf.batches)} micro-batches${whatIf.since ? ` (written from ${clock(whatIf.since)} to ${clock(whatIf.until)}, `
            + `${duration(Math.max(0, whatIf.until - whatIf.since))})` : ""}: ${count(whatIf.matches)} matches and ${count(whatIf.near_misses)} near misses `
          + `(candidates between the floor ${percent(whatIf.floor)} and the threshold)${whatIf.exact ? "" : "; counts below the current threshold are scaled from samples"}.`
        : "No micro-batch observed for this query yet: the chart fills as the job runs.";
      if (entry && entry.kind !== "join") {
        main.querySelector("#tune-window").textContent += ` A ${entry.kind} query records no candidate below its threshold, `
          + "so only raising it can be previewed.";
      }
      const colours = palette();
      const t = Number(slider.value) / 100;
      const traces = [{
        x: whatIf.points.map((p) => p.threshold * 100), y: whatIf.points.map((p) => p.matches),
        type: "scatter", mode: "lines+markers", name: "matches", line: { color: colours.accent, shape: "linear" },
        hovertemplate: "%{x:.1f} %: %{y:,.0f} matches<extra></extra>",
      }];
      if (backtest) {
        traces.push({ x: whatIf.points.map((p) => p.threshold * 100), y: whatIf.points.map((p) => p.alarms),
          type: "scatter", mode: "lines+markers", name: "alarms", line: { color: colours.danger, dash: "dot" },
          hovertemplate: "%{x:.1f} %: %{y:,.0f} alarms<extra></extra>" });
      }
      await draw(chart, traces, {
        xaxis: { title: { text: "threshold (%)" }, range: [whatIf.floor * 100 - 1, 101] },
        yaxis: { title: { text: backtest ? `in the ${PERIODS[backtest]}` : "matches in the window" }, rangemode: "tozero" },
        showlegend: !!backtest, ...shapes(t),
      });
      drawn = true;
      updatePreview();
    }

    function drawRate() {
      const id = select.value;
      const perBatch = new Map();
      for (const match of store.matches) {
        if (match.query === id && match.batch !== null && match.batch !== undefined) {
          perBatch.set(match.batch, (perBatch.get(match.batch) ?? 0) + 1);
        }
      }
      const batches = [...perBatch.keys()].sort((a, b) => a - b).slice(-80);
      const colours = palette();
      const marks = (APPLIED.get(id) ?? []).filter((c) => !batches.length || c.batch >= batches[0]);
      draw(rateChart, [{ x: batches, y: batches.map((b) => perBatch.get(b)), type: "bar", name: "matches",
        marker: { color: colours.accent }, hovertemplate: "batch %{x}: %{y:,} matches<extra></extra>" }], {
        showlegend: false, margin: { l: 52, r: 12, t: 24, b: 40 },
        xaxis: { title: { text: "micro-batch" } }, yaxis: { title: { text: "matches" }, rangemode: "tozero" },
        shapes: marks.map((c) => ({ type: "line", xref: "x", yref: "paper", x0: c.batch + 0.5, x1: c.batch + 0.5, y0: 0, y1: 1,
          line: { color: colours.danger, dash: "dash", width: 2 } })),
        annotations: marks.map((c) => ({ x: c.batch + 0.5, y: 1, yref: "paper", yanchor: "bottom", showarrow: false,
          text: `→ ${percent(c.threshold)}`, font: { color: colours.danger } })),
      });
    }

    async function apply() {
      const id = select.value;
      const t = Math.round(Number(slider.value) * 10) / 1000;
      applyButton.disabled = true;
      try {
        const entry = await patch(q(id), { threshold: t });
        const seen = store.matches.find((m) => m.query === id && m.batch !== null && m.batch !== undefined);
        APPLIED.set(id, [...(APPLIED.get(id) ?? []), { batch: seen ? seen.batch : 0, threshold: entry.threshold }]);
        main.querySelector("#tune-applied").textContent =
          `Applied ${percent(entry.threshold)} (registry version ${count(entry.version)}); the job takes it at its next micro-batch.`;
        notify(`${entry.name}: threshold ${percent(entry.threshold)}`);
        await refreshQueries();
        await load();
        drawRate();
      } catch (error) {
        notify(`Threshold not applied: ${error.message}`, { bad: true });
        updatePreview();
      }
    }

    slider.addEventListener("input", updatePreview);
    select.addEventListener("change", () => { main.querySelector("#tune-applied").textContent = ""; load(); loadCalibration(); });
    main.querySelector("#calib-target").addEventListener("change", loadCalibration);
    main.querySelector("#tune-batches").addEventListener("change", load);
    main.querySelector("#tune-reload").addEventListener("click", load);
    main.querySelector("#tune-reset").addEventListener("click", () => {
      if (current !== null) slider.value = String(current * 100);
      updatePreview();
    });
    applyButton.addEventListener("click", apply);
    const onQueries = () => { const before = select.value; fillQueries(); if (select.value !== before) load(); };
    let ratePending = false;
    const onMatches = () => {
      if (ratePending) return;
      ratePending = true;
      setTimeout(() => { ratePending = false; drawRate(); }, 1000);
    };
    bus.addEventListener("queries", onQueries);
    bus.addEventListener("matches", onMatches);
    select.addEventListener("change", drawRate);
    fillQueries();
    load().then(drawRate);
    loadCalibration();
    return () => {
      bus.removeEventListener("queries", onQueries);
      bus.removeEventListener("matches", onMatches);
      purge(chart);
      purge(rateChart);
      purge(calibChart);
      purge(precisionChart);
    };
  },
};
