// Plotly.js, loaded on first use from the app's own origin (/static/plotly.min.js, the
// copy inside the installed plotly Python package), with the page's colours.

let loading = null;

/** Resolves to window.Plotly, loading it once. */
export function plotly() {
  if (window.Plotly) return Promise.resolve(window.Plotly);
  if (!loading) {
    loading = new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = "/static/plotly.min.js";
      script.onload = () => resolve(window.Plotly);
      script.onerror = () => { loading = null; reject(new Error("Plotly.js could not be loaded (is the plotly package installed?)")); };
      document.head.append(script);
    });
  }
  return loading;
}

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

/** A layout in the page's colours; ``extra`` is merged in. */
export function layout(extra = {}) {
  const text = cssVar("--text");
  const grid = cssVar("--line");
  const axis = { gridcolor: grid, zerolinecolor: grid, linecolor: grid, color: text, automargin: true };
  return {
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    font: { family: "system-ui, sans-serif", size: 12, color: text },
    margin: { l: 56, r: 16, t: 28, b: 48 }, hovermode: "x unified",
    legend: { orientation: "h", y: -0.22 },
    ...extra,
    xaxis: { ...axis, ...(extra.xaxis ?? {}) },
    yaxis: { ...axis, ...(extra.yaxis ?? {}) },
  };
}

export const CONFIG = { responsive: true, displaylogo: false, modeBarButtonsToRemove: ["lasso2d", "select2d"] };

export const palette = () => ({
  accent: cssVar("--accent"), danger: cssVar("--danger"), ok: cssVar("--ok"), warn: cssVar("--warn"),
  muted: cssVar("--muted"), text: cssVar("--text"),
});

/**
 * Draws (or redraws) a chart; shows a note in the element if Plotly is missing. `wanted`
 * is asked once Plotly is ready: a chart that is no longer wanted is not drawn. Resolves
 * to whether it was drawn.
 */
export async function draw(element, data, extraLayout, wanted = () => true) {
  try {
    const Plotly = await plotly();
    if (!element.isConnected || !wanted()) return false;
    await Plotly.react(element, data, layout(extraLayout), CONFIG);
    return true;
  } catch (error) {
    element.textContent = error.message;
    return false;
  }
}

export function purge(element) {
  if (window.Plotly && element && element._fullLayout) window.Plotly.purge(element);
}

/** Whether values look like milliseconds since the epoch (sensors' event times). */
export function epochMs(values) {
  const known = values.filter((v) => typeof v === "number" && Number.isFinite(v));
  return known.length > 0 && known.every((v) => v > 1e12 && v < 1e13);
}

/** Milliseconds since the epoch as a Date, which Plotly draws in the browser's zone. */
export const asDate = (ms) => (ms === null || ms === undefined ? ms : new Date(ms));

/** An x axis of clock times (24-hour, the browser's zone). */
export const TIME_AXIS = { type: "date", tickformat: "%H:%M:%S", hoverformat: "%H:%M:%S.%L" };
