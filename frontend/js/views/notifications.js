// Notifications, a collapsed panel of the Alarms view (analysts): the deliveries being
// retried and those given up on, with the reason; admins also list, add (the signing
// secret is shown once), test and remove contact points, and add and remove routing rules
// (a query or any, a priority or any, to a contact point).

import { del, get, post, session } from "../api.js";
import { clockSpan, count, esc } from "../format.js";
import { PRIORITIES, store } from "../store.js";
import { notify } from "../ui.js";

const REFRESH_MS = 30000;

const PANEL = `
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
  </details>`;

function failedRows(failed, contacts) {
  if (!failed.length) return `<tr><td colspan="5" class="empty">None.</td></tr>`;
  return failed.map((d) => `<tr>
    <td data-label="When">${clockSpan(d.at)}</td>
    <td data-label="Contact point">${esc(contacts.find((c) => c.id === d.contact)?.name ?? d.contact)}</td>
    <td data-label="Alarm">${esc(d.alarm ?? d.event ?? "")}</td><td data-label="Attempts" class="num">${count(d.attempts)}</td>
    <td data-label="Reason">${esc(d.reason ?? d.last_error ?? "")}</td></tr>`).join("");
}

function contactItems(contacts) {
  return contacts.map((c) => `<li data-contact="${esc(c.id)}">
    <strong>${esc(c.name)}</strong> <span class="muted small">${esc(c.kind)} · ${esc(c.url)}</span>
    <button type="button" data-test="${esc(c.id)}">Send a test</button>
    <button type="button" class="danger" data-remove-contact="${esc(c.id)}">Remove</button></li>`).join("")
    || `<li class="empty">No contact point.</li>`;
}

function ruleItems(rules, contacts) {
  const name = (id) => contacts.find((c) => c.id === id)?.name ?? id;
  return rules.map((r) => `<li data-rule="${esc(r.id)}">
    ${esc(r.queries ? r.queries.join(", ") : "any query")} · ${esc(r.priorities ? r.priorities.join(", ") : "any priority")}
    → ${esc(r.contacts.map(name).join(", "))}
    <button type="button" class="danger" data-remove-rule="${esc(r.id)}">Remove</button></li>`).join("")
    || `<li class="empty">No routing rule: nobody is notified.</li>`;
}

/** The panel in place of ``slot``, read when opened and every 30 s while open; returns
 *  what stops it. */
export function mountNotifications(slot) {
  const template = document.createElement("template");
  template.innerHTML = PANEL.trim();
  const panel = template.content.firstElementChild;
  slot.replaceWith(panel);
  const $ = (selector) => panel.querySelector(selector);
  let contacts = [];

  async function load() {
    if (!panel.open) return;
    try {
      const deliveries = await get("/deliveries");
      $("#notify-summary").textContent =
        `${count(deliveries.pending.length)} being delivered · ${count(deliveries.failed.length)} given up on`;
      $("#failed tbody").innerHTML = failedRows(deliveries.failed, contacts);
      if (!session.can("admin")) return;
      contacts = (await get("/contact-points")).items;
      const rules = (await get("/routing-rules")).items;
      $("#contacts").innerHTML = contactItems(contacts);
      $("#rules").innerHTML = ruleItems(rules, contacts);
      $("#r-contact").innerHTML = contacts.map((c) => `<option value="${esc(c.id)}">${esc(c.name)}</option>`).join("");
      $("#r-query").innerHTML = `<option value="">Any query</option>` + [...store.queries.values()]
        .map((e) => `<option value="${esc(e.id)}">${esc(e.name)}</option>`).join("");
    } catch (error) {
      $("#notify-summary").textContent = `cannot be read: ${error.message}`;
    }
  }

  /** A contact point's test or removal, or a rule's removal. */
  async function onClick(event) {
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
      load();
    } catch (error) {
      notify(error.message, { bad: true });
    }
  }

  async function addContact(event) {
    event.preventDefault();
    try {
      const made = await post("/contact-points", { name: $("#c-name").value, kind: $("#c-kind").value, url: $("#c-url").value });
      const shown = $("#contact-secret");
      shown.hidden = false;
      shown.textContent = `Signing secret of ${made.name} (shown once, keep it): ${made.secret}`;
      event.target.reset();
      load();
    } catch (error) {
      notify(`Could not add the contact point: ${error.message}`, { bad: true });
    }
  }

  async function addRule(event) {
    event.preventDefault();
    const query = $("#r-query").value;
    const priority = $("#r-priority").value;
    try {
      await post("/routing-rules", { queries: query ? [query] : null, priorities: priority ? [priority] : null,
        contacts: [$("#r-contact").value] });
      load();
    } catch (error) {
      notify(`Could not add the rule: ${error.message}`, { bad: true });
    }
  }

  panel.addEventListener("toggle", load);
  panel.addEventListener("click", onClick);
  $("#contact-form").addEventListener("submit", addContact);
  $("#rule-form").addEventListener("submit", addRule);
  const timer = setInterval(load, REFRESH_MS);
  return () => clearInterval(timer);
}
