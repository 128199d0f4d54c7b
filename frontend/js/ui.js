// Small pieces the views share: notices, confirmation, hiding what the role may not use.

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

