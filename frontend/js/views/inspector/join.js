// The inspector's view of a join: for an event of one of its streams,
// P(|X_event - X_partner| <= d) against the partner's max time, one line per partner
// template (or the shortest and longest interval), with the threshold and the probing
// ranges LPR / SR / RPR shaded and labelled (POST /api/queries/{id}/curve), and the
// probing ranges the job recorded for recently arrived events.

import { get, post, q } from "../../api.js";
import { count, dataTime, esc, percent } from "../../format.js";
import { TIME_AXIS, asDate, draw, epochMs, palette, purge } from "../../charts.js";
import { store } from "../../store.js";

const REGIONS = [["lpr", "LPR", "left probing range"], ["sr", "SR", "safe range"], ["rpr", "RPR", "right probing range"]];
const FILL = { lpr: "rgba(31,95,191,0.12)", sr: "rgba(47,111,62,0.14)", rpr: "rgba(192,91,0,0.12)" };
/** Buffered partners' markers: colour and shape per probing range (never colour alone). */
const MARKER = { lpr: ["#1f5fbf", "triangle-left"], sr: ["#2f6f3e", "circle"], rpr: ["#c05b00", "triangle-right"],
  none: ["#6b7280", "x"] };
/** Buffered events seen in the job's observations, per query (id -> event), newest last; at most this many. */
const POOL = new Map();
const POOL_SIZE = 200;

function remember(id, projection) {
  const pool = POOL.get(id) ?? new Map();
  const sample = projection?.value?.newly_buffered;
  for (const e of Array.isArray(sample) ? sample : []) {
    pool.delete(e.id);
    pool.set(e.id, e);
  }
  while (pool.size > POOL_SIZE) pool.delete(pool.keys().next().value);
  POOL.set(id, pool);
}

function paramsOf(entry, stream) {
  const found = Object.entries(entry.streams ?? {}).find(([name]) => name.toLowerCase() === stream.toLowerCase());
  return found ? found[1] : {};
}

/**
 * Draws the join's form, curve and samples into `panel`; `chosenQuery()` is the id of the
 * query chosen in the view. Returns what the view calls: `show(entry)` when a join is
 * chosen, `cancel()` when any query is, `purge()` when the panel is hidden or left,
 * `onPartitions` for the bus and `readPartitions()` once after the first choice.
 */
export function mountJoin(panel, chosenQuery) {
  panel.innerHTML = `
    <form class="card" id="inspect-form" novalidate>
      <div class="form-grid">
        <div><label for="ins-stream">Event's stream</label><select id="ins-stream"></select></div>
        <div><label for="ins-id">Event id</label><input id="ins-id" value="probe"></div>
        <div><label for="ins-kind">Timestamp</label><select id="ins-kind">
          <option value="template">detected time + template</option><option value="interval">interval</option></select></div>
        <div data-kind="template"><label for="ins-detected">Detected at</label><input id="ins-detected" type="number" step="any"></div>
        <div data-kind="template"><label for="ins-template">Template</label><select id="ins-template"></select></div>
        <div data-kind="interval"><label for="ins-lo">From</label><input id="ins-lo" type="number" step="any"></div>
        <div data-kind="interval"><label for="ins-hi">To</label><input id="ins-hi" type="number" step="any"></div>
      </div>
      <p id="ins-error" class="error" role="alert" hidden></p>
      <div class="row"><button type="submit" class="primary">Draw the curve</button></div>
    </form>
    <section class="card stack" aria-labelledby="curve-title">
      <h2 id="curve-title">Join probability against the partner's max time</h2>
      <p class="muted small" id="curve-note"></p>
      <div class="chart" id="ins-chart" role="img" aria-label="Join probability against the partner's max time"></div>
      <div id="ins-ranges"></div>
    </section>
    <section class="card" aria-labelledby="samples-title">
      <h2 id="samples-title">Probing ranges of recent events</h2>
      <div id="ins-samples"></div>
    </section>`;

  const $ = (s) => panel.querySelector(s);
  const chart = $("#ins-chart");

  function showKind() {
    const kind = $("#ins-kind").value;
    panel.querySelectorAll("[data-kind]").forEach((el) => { el.hidden = el.dataset.kind !== kind; });
  }

  function fillTemplates() {
    const entry = store.queries.get(chosenQuery());
    if (!entry) return;
    const templates = Object.keys(paramsOf(entry, $("#ins-stream").value).templates ?? {});
    $("#ins-template").innerHTML = templates.map((t) => `<option>${esc(t)}</option>`).join("");
    $("#ins-kind").value = templates.length ? "template" : "interval";
    $("#ins-kind").querySelector('[value="template"]').disabled = !templates.length;
    showKind();
  }

  // the latest request for a curve: an earlier one that answers later draws nothing, nor
  // does one still in flight when another query is chosen
  let latestCurve = 0;

  async function show(entry) {
    let streams;
    try {
      streams = (await post("/validate", { text: entry.text })).streams ?? [];
    } catch {
      streams = Object.keys(entry.streams ?? {});
    }
    $("#ins-stream").innerHTML = streams.map((s) => `<option>${esc(s)}</option>`).join("");
    const watermark = store.partitions.get(entry.id)?.value?.watermark;
    const at = Number.isFinite(watermark) ? watermark : 1000;
    $("#ins-detected").value = at;
    $("#ins-lo").value = at;
    $("#ins-hi").value = at + 10;
    fillTemplates();
    renderSamples();
    await drawCurve();
  }

  function event() {
    const ts = $("#ins-kind").value === "template"
      ? { detected: Number($("#ins-detected").value), template: $("#ins-template").value }
      : { lo: Number($("#ins-lo").value), hi: Number($("#ins-hi").value) };
    return { stream: $("#ins-stream").value, id: $("#ins-id").value || "probe", ts };
  }

  async function drawCurve() {
    const mine = ++latestCurve;
    const id = chosenQuery();
    // the form as it is now: the curve, its markers and its note all describe this event
    const probe = event();
    const error = $("#ins-error");
    error.hidden = true;
    if (!id || !$("#ins-stream").value) return;
    let curve;
    remember(id, store.partitions.get(id));
    if (!POOL.get(id)?.size) {
      // a quiet query (nothing buffered in the feed's messages since the page opened):
      // read what its last micro-batches buffered
      try {
        const recent = (await get(`${q(id)}/observations?limit=20`)).items;
        for (const record of [...recent].reverse()) remember(id, { value: record.observations });
      } catch { /* drawn without markers */ }
    }
    const own = probe.stream.toLowerCase();
    const partners = [...(POOL.get(id) ?? new Map()).values()].filter((e) => e.stream.toLowerCase() !== own)
      .slice(-POOL_SIZE);
    try {
      curve = await post(`${q(id)}/curve`, { event: probe, points: 240, partners });
    } catch (failure) {
      if (mine !== latestCurve) return;
      error.textContent = `No curve: ${failure.message}`;
      error.hidden = false;
      return;
    }
    if (mine !== latestCurve) return;
    const colours = palette();
    const xs = curve.x;
    const lo = xs[0];
    const hi = xs[xs.length - 1];
    // event times in milliseconds since the epoch are drawn as clock times
    const timed = epochMs([lo, hi]);
    const at = timed ? asDate : (v) => v;
    const clip = (v, fallback) => (v === null || v === undefined ? fallback : Math.min(hi, Math.max(lo, v)));
    const shapes = [];
    const annotations = [];
    for (const [key, label, words] of REGIONS) {
      const range = curve[key];
      if (!range) continue;
      const x0 = clip(range[0], lo);
      const x1 = clip(range[1], hi);
      if (x1 <= x0) continue;
      shapes.push({ type: "rect", xref: "x", yref: "paper", x0: at(x0), x1: at(x1), y0: 0, y1: 1, fillcolor: FILL[key],
        line: { width: 0 }, layer: "below" });
      annotations.push({ x: at((x0 + x1) / 2), y: 1, yref: "paper", yanchor: "bottom", showarrow: false, text: `<b>${label}</b>`,
        hovertext: words, font: { color: colours.text } });
    }
    shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: curve.threshold, y1: curve.threshold,
      line: { color: colours.danger, width: 2, dash: "dash" } });
    annotations.push({ xref: "paper", x: 1, y: curve.threshold, xanchor: "right", yanchor: "bottom", showarrow: false,
      text: `threshold ${percent(curve.threshold)}`, font: { color: colours.danger } });
    const dashes = ["solid", "dot", "dashdot", "longdash", "longdashdot"];
    const data = Object.entries(curve.curves).map(([name, ys], i) => ({
      x: xs.map(at), y: ys, type: "scatter", mode: "lines", name: `partner ${name}`, line: { width: 2, dash: dashes[i % dashes.length] },
      hovertemplate: `partner ${esc(name)}: %{y:.1%} at %{x${timed ? "" : ":,.1f"}}<extra></extra>`,
    }));
    const names = { lpr: "in LPR", sr: "in SR", rpr: "in RPR", none: "outside the ranges" };
    for (const key of ["lpr", "sr", "rpr", "none"]) {
      const points = (curve.partners ?? []).filter((p) => (p.partition ?? "none") === key && p.x >= lo && p.x <= hi);
      if (!points.length) continue;
      const [colour, symbol] = MARKER[key];
      data.push({ x: points.map((p) => at(p.x)), y: points.map((p) => p.prob), text: points.map((p) => p.id),
        type: "scatter", mode: "markers", name: `buffered partners ${names[key]}`,
        marker: { color: colour, symbol, size: 10, line: { width: 1, color: colours.text } },
        hovertemplate: `%{text}: %{y:.1%} at %{x${timed ? "" : ":,.1f"}} (${names[key]})<extra></extra>` });
    }
    await draw(chart, data, {
      xaxis: timed ? { ...TIME_AXIS, title: { text: "partner's max time (local clock)" } } : { title: { text: "partner's max time" } },
      yaxis: { title: { text: "join probability" }, range: [0, 1.05], tickformat: ".0%" },
      shapes, annotations, margin: { l: 60, r: 16, t: 36, b: 48 },
    }, () => mine === latestCurve);
    if (mine !== latestCurve) return;
    const shown = (curve.partners ?? []).filter((p) => p.x >= lo && p.x <= hi).length;
    $("#curve-note").textContent = `Event ${probe.id} of ${probe.stream}; ${Object.keys(curve.curves).length} partner `
      + `${Object.keys(curve.curves).length === 1 ? "shape" : "shapes"}; floor ${percent(curve.floor)}; `
      + `${count(shown)} of ${count((curve.partners ?? []).length)} buffered partners the job reported lie in view.`;
    $("#ins-ranges").innerHTML = `<table class="responsive"><thead><tr><th scope="col">Region</th><th scope="col">From</th><th scope="col">To</th></tr></thead><tbody>`
      + REGIONS.map(([key, label, words]) => `<tr><td data-label="Region"><strong>${label}</strong> <span class="muted small">${words}</span></td>`
        + `<td data-label="From" class="num">${curve[key]?.[0] === null ? "unbounded" : dataTime(curve[key]?.[0] ?? null)}</td>`
        + `<td data-label="To" class="num">${curve[key]?.[1] === null ? "unbounded" : dataTime(curve[key]?.[1] ?? null)}</td></tr>`).join("")
      + `</tbody></table>`;
  }

  function renderSamples() {
    const id = chosenQuery();
    const latest = store.partitions.get(id);
    const samples = latest?.value?.partitions ?? [];
    if (!samples.length) {
      $("#ins-samples").innerHTML = `<p class="muted">None recorded yet for this query (the job records a few arriving events per micro-batch).</p>`;
      return;
    }
    const cell = (r, i) => (r ? (r[i] === null ? "unbounded" : dataTime(r[i])) : "—");
    $("#ins-samples").innerHTML = `<p class="muted small">Micro-batch ${count(latest.batch)}, watermark ${dataTime(latest.value.watermark)}.</p>
      <table class="responsive"><thead><tr><th scope="col">Event</th><th scope="col">LPR</th><th scope="col">SR</th><th scope="col">RPR</th></tr></thead><tbody>`
      + samples.map((s) => `<tr><td data-label="Event">${esc(s.stream)} ${esc(s.id)}</td>`
        + ["lpr", "sr", "rpr"].map((k) => `<td data-label="${k.toUpperCase()}" class="num">${cell(s[k], 0)} – ${cell(s[k], 1)}</td>`).join("")
        + `</tr>`).join("") + `</tbody></table>`;
  }

  $("#ins-stream").addEventListener("change", () => { fillTemplates(); drawCurve(); });
  $("#ins-kind").addEventListener("change", showKind);
  $("#inspect-form").addEventListener("submit", (e) => { e.preventDefault(); drawCurve(); });

  const onPartitions = ({ detail }) => {
    remember(detail.query, store.partitions.get(detail.query));
    if (detail.query === chosenQuery()) renderSamples();
  };

  function readPartitions() {
    if (!store.partitions.size) {
      // before the feed's first partitions message: read the latest projection once
      const id = chosenQuery();
      if (id) get(`${q(id)}/partitions`).then((p) => { if (p.id) { store.partitions.set(id, p); renderSamples(); } }).catch(() => {});
    }
  }

  return {
    show,
    cancel() { latestCurve += 1; },
    purge() { purge(chart); },
    onPartitions,
    readPartitions,
  };
}
