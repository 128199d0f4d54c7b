// The dashboard's shell: sign-in, the role, the views behind #/<name>, the connection
// indicator, notices and confirmation.

import { get, onUnauthorized, session } from "./api.js";
import { esc } from "./format.js";
import { applyRole, notify } from "./ui.js";
import { bus, resetStore, startHealth, startLive, stopHealth, stopLive } from "./store.js";
import alarms from "./views/alarms.js";
import health from "./views/health.js";
import inspector from "./views/inspector.js";
import queries from "./views/queries.js";
import tuner from "./views/tuner.js";

const VIEWS = { alarms, queries, tuner, inspector, health };
const $ = (selector) => document.querySelector(selector);

let unmount = null;

// ---- sign-in

async function signIn(token) {
  const me = await get("/me", { token });
  session.save(token);
  session.me = me;
  return me;
}

function showSignIn(message) {
  stopLive();
  stopHealth();
  resetStore();
  $("#shell").hidden = true;
  $("#signin").hidden = false;
  const error = $("#signin-error");
  error.textContent = message ?? "";
  error.hidden = !message;
  $("#token").value = "";
  $("#token").focus();
}

function signOut(message) {
  if (unmount) unmount();
  unmount = null;
  $("#main").replaceChildren();
  session.clear();
  showSignIn(message);
}

function showShell() {
  $("#signin").hidden = true;
  $("#shell").hidden = false;
  const { role, label } = session.me;
  $("#who").innerHTML = `<span class="sr-label">${esc(label)}</span> <span class="role" data-testid="role"
    title="what this token may do">${esc(role)}</span>`;
  startLive();
  startHealth();
  route();
}

$("#signin-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const token = $("#token").value.trim();
  const error = $("#signin-error");
  if (!token) {
    error.textContent = "Enter a token.";
    error.hidden = false;
    return;
  }
  try {
    await signIn(token);
    showShell();
  } catch (failure) {
    error.textContent = failure.status === 401 ? "That token is not valid (unknown or revoked)."
      : `Sign-in failed: ${failure.message}`;
    error.hidden = false;
    $("#token").focus();
  }
});

$("#signout").addEventListener("click", () => signOut());
onUnauthorized(() => signOut("Your token is no longer accepted; sign in again."));
bus.addEventListener("unauthorized", () => signOut("Your token is no longer accepted; sign in again."));

// ---- the connection indicator and notices from the feed

bus.addEventListener("connection", ({ detail }) => {
  const box = $("#connection");
  box.dataset.state = detail.state;
  box.querySelector(".conn-text").textContent = detail.text;
});
bus.addEventListener("notice", ({ detail }) => notify(detail.text));

// ---- views

function route() {
  if (!session.me) return;
  const name = (location.hash.match(/^#\/(\w+)/) ?? [])[1];
  const view = VIEWS[name] ? name : "alarms";
  if (!VIEWS[name]) {
    history.replaceState(null, "", "#/alarms");
  }
  for (const link of document.querySelectorAll(".tabs a")) {
    if (link.dataset.view === view) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  if (unmount) unmount();
  // each view gets its own element: a late answer for a view left meanwhile lands in a
  // detached element instead of the next view
  const root = document.createElement("div");
  $("#main").replaceChildren(root);
  const params = new URLSearchParams(location.hash.split("?")[1] ?? "");
  unmount = VIEWS[view].mount(root, params) ?? null;
  applyRole(root);
  document.title = `${VIEWS[view].title} · Penumbra`;
}

window.addEventListener("hashchange", () => {
  route();
  $("#main").focus({ preventScroll: true });
});

// ---- start: a token kept in this tab's session signs in by itself

(async () => {
  if (!session.token) {
    showSignIn();
    return;
  }
  try {
    await signIn(session.token);
    showShell();
  } catch (failure) {
    session.clear();
    showSignIn(failure.status === 401 ? "Your token is no longer accepted; sign in again." : failure.message);
  }
})();
