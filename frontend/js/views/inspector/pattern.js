// The inspector's view of a pattern match: a timeline of its events' uncertainty
// intervals and valid intervals with the match range and confidence (the job's
// observations).

import { get, q } from "../../api.js";
import { count, dataTime, esc, likelihood, percent } from "../../format.js";
import { TIME_AXIS, asDate, draw, epochMs, palette, purge } from "../../charts.js";

const matchChart = (panel) => panel.querySelector("#match-chart");

/** Shows the recent matches of pattern query `entry` in `panel`, one at a time. */
export async function showPattern(panel, entry) {
  const $ = (s) => panel.querySelector(s);
  let found = [];
  try {
    const records = (await get(`${q(entry.id)}/observations?limit=20`)).items;
    found = records.flatMap((r) => (r.observations?.matches ?? []).map((m) => ({ ...m, batch: r.batch })));
  } catch { /* shown as none */ }
  if (!found.length) {
    panel.innerHTML = `<h2>Pattern matches</h2><p class="muted">No match detail recorded yet (the job records
      the intervals of the first matches of each micro-batch).</p>`;
    return;
  }
  panel.innerHTML = `<h2>Pattern match</h2>
    <div><label for="ins-match">Match</label><select id="ins-match">${found.map((m, i) =>
      `<option value="${i}">${esc(Object.values(m.events).join(", "))} · ${percent(m.prob)} · batch ${count(m.batch)}</option>`).join("")}</select></div>
    <p id="match-note"></p>
    <div class="chart small" id="match-chart" role="img" aria-label="The match's events' uncertainty intervals on a timeline"></div>`;
  const drawMatch = () => {
    const m = found[Number($("#ins-match").value)];
    const variables = Object.keys(m.intervals ?? m.events);
    const colours = palette();
    // event times in milliseconds since the epoch are drawn as clock times
    const timed = epochMs([...(m.range ?? []), ...variables.flatMap((v) => m.intervals?.[v] ?? [])]);
    const at = timed ? asDate : (v) => v;
    const bar = (key, name, width, colour) => ({
      type: "bar", orientation: "h", name, y: variables,
      base: variables.map((v) => at(m[key]?.[v]?.[0] ?? null)),
      x: variables.map((v) => (m[key]?.[v] ? m[key][v][1] - m[key][v][0] || (timed ? 50 : 0.5) : null)),
      width, marker: { color: colour },
      hovertemplate: `%{y}: %{customdata[0]} – %{customdata[1]}<extra>${name}</extra>`,
      customdata: variables.map((v) => (m[key]?.[v] ? [dataTime(m[key][v][0]), dataTime(m[key][v][1])] : ["—", "—"])),
    });
    const shapes = m.range ? [{ type: "rect", xref: "x", yref: "paper", x0: at(m.range[0]), x1: at(m.range[1]), y0: 0, y1: 1,
      fillcolor: "rgba(31,95,191,0.10)", line: { color: colours.accent, dash: "dot" }, layer: "below" }] : [];
    draw(matchChart(panel), [bar("intervals", "occurrence interval", 0.6, colours.muted), bar("valid", "valid interval", 0.3, colours.accent)], {
      barmode: "overlay", xaxis: timed ? { ...TIME_AXIS, title: { text: "time (local clock)" } } : { title: { text: "time" } },
      yaxis: { autorange: "reversed", type: "category" },
      shapes, annotations: m.range ? [{ x: at((m.range[0] + m.range[1]) / 2), y: 1, yref: "paper", yanchor: "bottom", showarrow: false,
        text: `match range ${dataTime(m.range[0])} – ${dataTime(m.range[1])}` }] : [],
      margin: { l: 60, r: 16, t: 30, b: 48 },
    });
    $("#match-note").innerHTML = `Confidence <strong>${percent(m.prob)}</strong> (${likelihood(m.prob).word}) that
      ${variables.map(esc).join(" < ")} happened in this order within the window; events ${esc(Object.entries(m.events).map(([v, id]) => `${v} ${id}`).join(", "))}.`;
  };
  $("#ins-match").addEventListener("change", drawMatch);
  drawMatch();
}

/** Frees the match's chart, if one is drawn in `panel`. */
export function purgePattern(panel) {
  purge(matchChart(panel));
}
