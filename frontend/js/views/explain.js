// Why a match: its events (stream, key, attributes), their timestamp distributions on one
// time axis with the window, and how the probability came about, as the server recomputes
// it from the match's own events (GET /api/queries/{id}/matches/{match}/explanation):
// a join's probability, satisfaction time and probing ranges with its curve, a pattern's
// orderings with their weights, a lossy sequence's missed-event factors. Every term of
// the papers is explained where it appears.

import { get, q } from "../api.js";
import { duration, esc, number, percent, preciseTime } from "../format.js";
import { TIME_AXIS, asDate, draw, epochMs, palette, purge } from "../charts.js";
import { keyText, store } from "../store.js";

/** What each term means, shown beside it. */
const TERMS = {
  window: "the time the events must fall within of each other",
  threshold: "a match is reported when its probability is at least this",
  support: "the earliest and latest time the event can have happened",
  stime: "the satisfaction time (PTJoin paper, Definition 8): the latest point at which a partner of this shape, "
    + "moved later, still meets the threshold",
  lpr: "left probing range: partners whose latest time falls here may or may not meet the threshold, so each is computed",
  sr: "safe range: every partner whose latest time falls here meets the threshold without computing it",
  rpr: "right probing range: partners whose latest time falls here may or may not meet the threshold, so each is computed",
  lemma2: "when the window is at least the longest timestamp, the pair is decided by the later event alone (PTJoin, Lemma 2)",
  ordering: "each possible world puts the events in one order; an ordering's weight is the chance of the worlds with that order",
  nextMatch: "skip till next match: no other qualifying event may fall between two matched ones",
  miss: "the chance that the reader missed an event of this stream",
  run: "the components between two observed events: positives that were missed, negatives that did not happen",
};

const term = (name, text) => `<abbr class="term" title="${esc(TERMS[name])}">${esc(text)}</abbr>`;
/** A clock-time axis, to the millisecond when what it spans is short. */
function fineAxis(times) {
  const finite = times.filter((t) => Number.isFinite(t));
  const short = finite.length && Math.max(...finite) - Math.min(...finite) < 60_000;
  return short ? { ...TIME_AXIS, tickformat: "%H:%M:%S.%L" } : TIME_AXIS;
}

const RANGE_NAME = { lpr: "left probing range (LPR)", sr: "safe range (SR)", rpr: "right probing range (RPR)" };

export default {
  title: "Why this match",
  mount(main, params) {
    const queryId = params.get("query") ?? "";
    const matchId = params.get("match") ?? "";
    main.innerHTML = `
      <div class="view-head"><h1>Why this match</h1><p class="muted" id="ex-sub"></p></div>
      <p id="ex-loading" class="muted" role="status">Loading the explanation…</p>
      <p id="ex-error" class="error" role="alert" hidden></p>
      <section class="card stack" id="ex-events" aria-labelledby="ex-events-title" hidden>
        <h2 id="ex-events-title">The events</h2><div id="ex-event-table"></div></section>
      <section class="card stack" id="ex-times" aria-labelledby="ex-times-title" hidden>
        <h2 id="ex-times-title">When they happened</h2><p class="muted small" id="ex-times-note"></p>
        <div class="chart" id="ex-chart" role="img" aria-label="The events' timestamp distributions on one time axis"></div></section>
      <section class="card stack" id="ex-how" aria-labelledby="ex-how-title" hidden>
        <h2 id="ex-how-title">How the probability came about</h2><div id="ex-body"></div></section>
      <section class="card stack" id="ex-curve-card" aria-labelledby="ex-curve-title" hidden>
        <h2 id="ex-curve-title">Probability against the partner's latest time</h2>
        <p class="muted small" id="ex-curve-note"></p>
        <div class="chart" id="ex-curve" role="img" aria-label="Join probability against the partner's latest time"></div></section>`;
    const $ = (s) => main.querySelector(s);
    let live = true;
    const charts = [$("#ex-chart"), $("#ex-curve")];

    async function load() {
      if (!queryId || !matchId) {
        fail("Open a match's explanation from an alarm, the feed or the history.");
        return;
      }
      try {
        const got = await get(`${q(queryId)}/matches/${encodeURIComponent(matchId)}/explanation`);
        if (!live) return;
        show(got);
      } catch (failure) {
        if (live) fail(failure.status === 404 ? "This match is no longer kept, live or archived." : failure.message);
      }
    }

    function fail(text) {
      $("#ex-loading").hidden = true;
      $("#ex-error").textContent = text;
      $("#ex-error").hidden = false;
    }

    function show(got) {
      $("#ex-loading").hidden = true;
      const entry = store.queries.get(got.query);
      const times = got.events.flatMap((e) => e.support);
      const clockTimes = epochMs(times);
      const at = (t) => (clockTimes ? preciseTime(t) : number(t));
      const span = (d) => (clockTimes ? duration(d / 1000) : `${number(d)} (the events' unit)`);
      const about = keyText(got.match.key);
      $("#ex-sub").innerHTML = `${esc(entry?.name ?? got.query)}${about ? ` · <strong>${esc(about)}</strong>` : ""} ·
        probability <strong data-testid="explained-prob">${percent(got.prob, 2)}</strong> ·
        ${term("threshold", "threshold")} ${got.threshold === null ? "none" : percent(got.threshold)} ·
        ${term("window", "window")} ${span(got.window)}`;
      eventsTable(got, at);
      timeline(got, clockTimes);
      $("#ex-how").hidden = false;
      const body = $("#ex-body");
      if (got.kind === "join") body.innerHTML = joinText(got, at, span);
      else if (got.kind === "pattern") body.innerHTML = patternText(got);
      else body.innerHTML = lossyText(got, span);
      if (got.kind === "join") curve(got, clockTimes, at);
    }

    function eventsTable(got, at) {
      $("#ex-events").hidden = false;
      $("#ex-event-table").innerHTML = `<table class="responsive" data-testid="explained-events"><thead><tr>
        <th scope="col">Variable</th><th scope="col">Stream</th><th scope="col">Event</th>
        <th scope="col">${term("support", "Could have happened")}</th><th scope="col">Attributes</th></tr></thead><tbody>
        ${got.events.map((e) => `<tr><td data-label="Variable">${esc(e.var)}</td><td data-label="Stream">${esc(e.stream)}</td>
          <td data-label="Event"><code>${esc(e.id)}</code>${e.ts?.template ? ` <span class="muted small">template ${esc(e.ts.template)}</span>` : ""}</td>
          <td data-label="Could have happened">${at(e.support[0])} to ${at(e.support[1])}</td>
          <td data-label="Attributes">${Object.entries(e.attrs ?? {}).map(([k, v]) => `${esc(k)} <strong>${esc(v)}</strong>`).join(" · ") || '<span class="muted">none</span>'}</td></tr>`).join("")}
        </tbody></table>`;
    }

    function timeline(got, clockTimes) {
      $("#ex-times").hidden = false;
      const x = (t) => (clockTimes ? asDate(t) : t);
      const colours = ["#1f5fbf", "#c05b00", "#2f6f3e", "#7b3fa0", "#8a6d00", "#b0306a"];
      const data = got.events.map((e, k) => {
        const colour = colours[k % colours.length];
        if (e.density?.edges) {              // a histogram: its density, piecewise constant
          const { edges, probs } = e.density;
          const ys = probs.map((p, i) => p / Math.max(edges[i + 1] - edges[i], 1e-12));
          const peak = Math.max(...ys, 1e-12);
          return { x: edges.map(x), y: [...ys, ys[ys.length - 1]].map((y) => y / peak), name: `${e.var} (${e.stream})`,
            type: "scatter", mode: "lines", line: { shape: "hv", color: colour }, fill: "tozeroy" };
        }
        if (e.density?.times) {              // a pattern's reading on its grid: mass per instant
          const peak = Math.max(...e.density.probs, 1e-12);
          return { x: e.density.times.map(x), y: e.density.probs.map((p) => p / peak), name: `${e.var} (${e.stream})`,
            type: "bar", marker: { color: colour }, opacity: 0.6 };
        }
        return { x: [x(e.support[0])], y: [1], name: `${e.var} (${e.stream})`, type: "scatter", mode: "markers",
          marker: { color: colour, size: 12 } };
      });
      const first = got.events[0];
      let band = null;
      if (got.kind === "join") band = [first.support[0] - got.window, first.support[1] + got.window, `within the window of ${first.var}`];
      else if (first) band = [first.support[0], first.support[0] + got.window, "the window from the first event"];
      $("#ex-times-note").textContent = "Each event's chance of having happened at each time, scaled to its peak; "
        + (band ? `the band marks ${band[2]}.` : "");
      const shapes = band ? [{ type: "rect", xref: "x", yref: "paper", x0: x(band[0]), x1: x(band[1]), y0: 0, y1: 1,
        fillcolor: "rgba(107,114,128,0.10)", line: { width: 0 } }] : [];
      draw($("#ex-chart"), data, {
        xaxis: clockTimes ? { ...fineAxis(got.events.flatMap((e) => e.support)), title: { text: "time" } } : { title: { text: "time (the events' unit)" } },
        yaxis: { title: { text: "relative chance" }, range: [0, 1.08] }, shapes, barmode: "overlay",
      }, () => live);
    }

    function joinText(got, at, span) {
      const [a, b] = got.events.map((e) => e.var);
      const p = got.probability;
      const s = got.satisfaction;
      const part = got.partition;
      const range = part.range;
      const rows = ["lpr", "sr", "rpr"].map((name) => `<tr${name === range ? ' class="chosen"' : ""}>
        <td data-label="Range">${term(name, RANGE_NAME[name])}${name === range ? ` <strong>← ${esc(b)} is here</strong>` : ""}</td>
        <td data-label="From">${part[name][0] === null ? "no bound" : at(part[name][0])}</td>
        <td data-label="To">${part[name][1] === null ? "no bound" : at(part[name][1])}</td></tr>`).join("");
      return `
        <p data-testid="join-formula">The chance that ${esc(a)} and ${esc(b)} happened within ${span(got.window)} of each other is
          P(${esc(b)} no later than ${span(got.window)} after ${esc(a)}) − P(${esc(b)} more than ${span(got.window)} before ${esc(a)})
          = ${percent(p.no_later, 2)} − ${percent(p.too_early, 2)} = <strong>${percent(p.within, 2)}</strong>
          (the job gave it ${percent(got.prob, 2)}).</p>
        ${s.stime === null ? "" : `<p data-testid="satisfaction">${esc(s.later)} has the later latest time, ${at(s.later_max_time)}.
          Against ${esc(s.earlier)}, an event of its shape meets the threshold as long as its latest time is at most
          <strong>${at(s.latest_max_time)}</strong>: the ${term("stime", "satisfaction time")} ${at(s.stime)} plus the window.
          ${s.meets ? "It is earlier, so the pair meets the threshold" : "It is later, so by this reading alone the pair misses the threshold"}
          ${s.lemma2 ? `(${term("lemma2", "decided by the later event")}).` : "(the window is shorter than the longest timestamp, so the exact probability above decides)."}</p>`}
        <p>Where ${esc(b)}'s latest time falls among ${esc(a)}'s probing ranges
          ${range ? `is the <strong>${term(range, RANGE_NAME[range])}</strong>.` : "is outside them all."}</p>
        <table class="responsive" data-testid="ranges"><thead><tr><th scope="col">Range of ${esc(a)}</th>
          <th scope="col">From</th><th scope="col">To</th></tr></thead><tbody>${rows}</tbody></table>`;
    }

    function patternText(got) {
      if (!got.orderings && got.in_window === undefined) return `<p>${esc(got.note ?? "")}</p>`;
      const order = (o) => o.map(esc).join(" → ");
      const rows = (got.orderings ?? []).map((o) => `<tr${o.pattern ? ' class="chosen"' : ""}>
        <td data-label="Ordering">${order(o.order)}${o.pattern ? " <strong>(the pattern's)</strong>" : ""}</td>
        <td data-label="Weight" class="num">${percent(o.prob, 2)}</td></tr>`).join("");
      return `
        <p>The events' times are uncertain, so several orders are possible; each ${term("ordering", "ordering")}
          is weighed by the worlds that produce it. The pattern needs its own order
          (${percent(got.in_order, 2)}) and all within the window: <strong>${percent(got.in_window, 2)}</strong>.</p>
        ${got.next_match ? `<p>With ${term("nextMatch", "skip till next match")}, the chance that no other qualifying event fell
          in between is ${percent(got.no_other_between, 2)}, which gives ${percent(got.prob, 2)}.</p>` : ""}
        ${rows ? `<table class="responsive" data-testid="orderings"><thead><tr><th scope="col">Ordering</th>
          <th scope="col">Weight</th></tr></thead><tbody>${rows}</tbody></table>
          <p class="muted small">Two events at the same instant: ${percent(got.ties, 2)}.</p>` : ""}`;
    }

    function lossyText(got, span) {
      const missed = got.missed.length
        ? `<p>Not observed: ${got.missed.map((m) => `${esc(m.var)} (${esc(m.stream)}, ${term("miss", "missed")} with chance ${percent(m.miss_prob)})`).join(", ")}.</p>`
        : "<p>Every positive component was observed.</p>";
      const worlds = got.factors.find((f) => f.worlds != null);
      if (worlds) {
        return `${missed}
        <p>The events' times are uncertain: the probability is a sum over ${number(worlds.worlds)} combinations of
          their possible instants, each weighed by its chance and scored by the runs of unobserved components
          between them: <strong>${percent(got.prob, 2)}</strong>.</p>`;
      }
      const rows = got.factors.map((f) => `<tr>
        <td data-label="Between">${f.after ? esc(f.after) : "window start"} → ${f.before ? esc(f.before) : "window end"}</td>
        <td data-label="Components">${f.components.map((c) => c.negated
          ? `no ${esc(c.var)} (${esc(c.stream)})` : `${esc(c.var)} (${esc(c.stream)}) missed, ε ${percent(c.miss_prob)}`).join("; ")}</td>
        <td data-label="Over" class="num">${span(f.gap)}</td>
        <td data-label="Factor" class="num">${percent(f.score, 2)}</td></tr>`).join("");
      return `${missed}
        <p>The probability is the product of one factor per ${term("run", "run")} of unobserved components:
          <strong>${percent(got.product, 2)}</strong> (the job gave it ${percent(got.prob, 2)}).</p>
        ${rows ? `<table class="responsive" data-testid="factors"><thead><tr><th scope="col">Between</th><th scope="col">Components</th>
          <th scope="col">Over</th><th scope="col">Factor</th></tr></thead><tbody>${rows}</tbody></table>` : ""}`;
    }

    function curve(got, clockTimes, at) {
      $("#ex-curve-card").hidden = false;
      const x = (t) => (clockTimes ? asDate(t) : t);
      const colours = palette();
      const part = got.partition;
      const data = Object.entries(got.curve.curves).map(([name, ys]) => ({
        x: got.curve.x.map(x), y: ys, name: `partner shape ${name}`, type: "scatter", mode: "lines" }));
      data.push({ x: [x(part.partner_max_time)], y: [got.probability.within], name: `${part.partner} (this match)`,
        type: "scatter", mode: "markers", marker: { size: 12, color: colours.danger, symbol: "diamond" } });
      const shapes = [];
      const fills = { lpr: "rgba(31,95,191,0.10)", sr: "rgba(47,111,62,0.12)", rpr: "rgba(192,91,0,0.10)" };
      const lo = got.curve.x[0];
      const hi = got.curve.x[got.curve.x.length - 1];
      for (const name of ["lpr", "sr", "rpr"]) {
        const [from, to] = part[name];
        shapes.push({ type: "rect", xref: "x", yref: "paper", x0: x(from ?? lo), x1: x(to ?? hi), y0: 0, y1: 1,
          fillcolor: fills[name], line: { width: 0 } });
      }
      if (got.threshold !== null) {
        shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: got.threshold, y1: got.threshold,
          line: { dash: "dash", color: colours.muted } });
      }
      $("#ex-curve-note").innerHTML = `The chance of meeting ${esc(got.events[0].var)} as a partner of each shape moves later;
        the shaded bands are ${term("lpr", "LPR")}, ${term("sr", "SR")} and ${term("rpr", "RPR")}, the dashed line the threshold;
        the diamond is ${esc(part.partner)} at ${at(part.partner_max_time)}.`;
      draw($("#ex-curve"), data, {
        xaxis: clockTimes ? { ...fineAxis(got.curve.x), title: { text: "partner's latest time" } } : { title: { text: "partner's latest time" } },
        yaxis: { title: { text: "probability" }, range: [0, 1.02], tickformat: ".0%" }, shapes,
      }, () => live);
    }

    load();
    return () => {
      live = false;
      charts.forEach(purge);
    };
  },
};
