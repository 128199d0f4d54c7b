// Small pieces the views share: notices, confirmation, hiding what the role may not use,
// links from one view to another.

import { session } from "./api.js";

const $ = (selector) => document.querySelector(selector);

let noticeTimer = null;
export function notify(text, { bad = false, sticky = false } = {}) {
  const box = $("#notice");
  box.textContent = text;
  box.classList.toggle("bad", bad);
  box.hidden = false;
  clearTimeout(noticeTimer);
  if (!sticky) noticeTimer = setTimeout(() => { box.hidden = true; }, 6000);
}

/** A modal confirmation; resolves true when confirmed. */
export function confirmAction(title, text, action = "Confirm") {
  const dialog = $("#confirm");
  $("#confirm-title").textContent = title;
  $("#confirm-text").textContent = text;
  $("#confirm-ok").textContent = action;
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.returnValue = "cancel";
    dialog.showModal();
    dialog.querySelector('button[value="cancel"]').focus();
  });
}

/** Hide what the role may not use: elements with data-role="analyst" or "admin". */
export function applyRole(root = document) {
  for (const element of root.querySelectorAll("[data-role]")) {
    element.hidden = !session.can(element.dataset.role);
  }
}

// ---- links to other views

/** The explanation view of one match. */
export function explainLink(query, match) {
  return `#/explain?query=${encodeURIComponent(query)}&match=${encodeURIComponent(match)}`;
}

/** The History view of a query, narrowed to one key ({region: 17} -> "region=17") when given. */
export function historyLink(query, key) {
  const keyParam = key ? Object.entries(key).map(([name, value]) => `${name}=${value}`).join(", ") : "";
  return `#/history?query=${encodeURIComponent(query)}${keyParam ? `&key=${encodeURIComponent(keyParam)}` : ""}`;
}
