// The inspector's view of a lossy SEQUENCE match: its observed and missed components
// with the probability.

import { get, q } from "../../api.js";
import { clock, esc, likelihood, percent } from "../../format.js";
import { explainLink } from "../../ui.js";

/** Shows the recent matches of lossy query `entry` in `panel`, one at a time. */
export async function showSequence(panel, entry) {
  const $ = (s) => panel.querySelector(s);
  const components = [...(entry.text.match(/SEQUENCE\s*\(([^)]*)\)/i)?.[1] ?? "").split(",")]
    .map((part) => part.trim().match(/^(!?)\s*(\S+)\s+(\S+)$/)).filter(Boolean)
    .map(([, negated, stream, variable]) => ({ negated: !!negated, stream, variable }));
  let matches = [];
  try {
    matches = (await get(`${q(entry.id)}/matches?limit=50`)).items;
  } catch { /* shown as none */ }
  if (!matches.length) {
    panel.innerHTML = `<h2>Lossy matches</h2><p class="muted">No match yet.</p>`;
    return;
  }
  panel.innerHTML = `<h2>Lossy match</h2>
    <div><label for="ins-match">Match</label><select id="ins-match">${matches.map((m, i) =>
      `<option value="${i}">${clock(m.at)} · ${percent(m.prob)} · ${esc(Object.values(m.events).join(", "))}</option>`).join("")}</select></div>
    <div id="lossy-detail"></div>`;
  const show = () => {
    const m = matches[Number($("#ins-match").value)];
    const missed = components.filter((c) => !c.negated && !(c.variable in m.events));
    $("#lossy-detail").innerHTML = `<p>Probability <strong>${percent(m.prob)}</strong> (${likelihood(m.prob).word}) that the
      sequence happened, with ${missed.length ? `${missed.length} component${missed.length > 1 ? "s" : ""} missed by ${missed.length > 1 ? "their readers" : "its reader"}` : "every positive component observed"}.
      <a href="${explainLink(entry.id, m.id)}">How this probability came about</a></p>
      <table class="responsive"><thead><tr><th scope="col">Component</th><th scope="col">Stream</th><th scope="col">Event</th></tr></thead><tbody>`
      + components.map((c) => `<tr><td data-label="Component"><code>${c.negated ? "!" : ""}${esc(c.variable)}</code></td>
        <td data-label="Stream">${esc(c.stream)}</td><td data-label="Event">${c.negated ? "<span class=\"muted\">must not occur (negated)</span>"
          : c.variable in m.events ? `✓ observed: <code>${esc(m.events[c.variable])}</code>` : "<strong>✗ missed</strong> (not read; probability includes it)"}</td></tr>`).join("")
      + `</tbody></table>`;
  };
  $("#ins-match").addEventListener("change", show);
  show();
}
