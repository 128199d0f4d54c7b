// The dashboard's shell: sign-in, the role, the views behind #/<name>, the connection
// indicator, notices and confirmation.

import { get, onUnauthorized, session } from "./api.js";
import { esc } from "./format.js";
import { applyRole, notify } from "./ui.js";
import { bus, resetStore, startHealth, startLive, stopHealth, stopLive, store } from "./store.js";
import alarms from "./views/alarms.js";
import explain from "./views/explain.js";
import health from "./views/health.js";
import historyView from "./views/history.js";
import inspector from "./views/inspector.js";
import queries from "./views/queries.js";
import tuner from "./views/tuner.js";

const VIEWS = { alarms, queries, tuner, history: historyView, inspector, health, explain };
const $ = (selector) => document.querySelector(selector);

let unmount = null;
let viewTitle = "Alarms";

// ---- tabs of this browser share the session: a new tab asks the others for the token
// (it is never stored beyond a tab's session), and signing out signs every tab out

const tabs = typeof BroadcastChannel === "undefined" ? null : new BroadcastChannel("penumbra.session");

function askOtherTabs(wait = 300) {
  if (!tabs) return Promise.resolve(null);
  return new Promise((resolve) => {
    const answered = (event) => {
      if (event.data?.type === "token" && event.data.token) {
        tabs.removeEventListener("message", answered);
        resolve(event.data.token);
      }
    };
    tabs.addEventListener("message", answered);
    tabs.postMessage({ type: "who" });
    setTimeout(() => { tabs.removeEventListener("message", answered); resolve(null); }, wait);
  });
}

// an answer that comes after the wait (the other tab was busy) still signs this tab in, as
// long as it shows the sign-in form and no one has signed in here meanwhile
function takeLateAnswer() {
  if (!tabs) return;
  const late = async (event) => {
    if (event.data?.type !== "token" || !event.data.token) return;
    tabs.removeEventListener("message", late);
    if (session.me || $("#signin").hidden) return;
    try {
      await signIn(event.data.token);
      showShell();
    } catch {
      // not accepted (revoked meanwhile): the form stays as it was
    }
  };
  tabs.addEventListener("message", late);
}

tabs?.addEventListener("message", (event) => {
  if (event.data?.type === "who" && session.token && session.me) tabs.postMessage({ type: "token", token: session.token });
  if (event.data?.type === "signout" && session.me) signOut("Signed out in another tab.", false);
});

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

function signOut(message, everywhere = true) {
  if (unmount) unmount();
  unmount = null;
  $("#main").replaceChildren();
  session.clear();
  if (everywhere) tabs?.postMessage({ type: "signout" });
  showSignIn(message);
  showAttention();
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
// (a request still in flight when this tab signed out answers 401 too: it changes nothing)
onUnauthorized(() => { if (session.me) signOut("Your token is no longer accepted; sign in again.", false); });
bus.addEventListener("unauthorized", () => {
  if (session.me) signOut("Your token is no longer accepted; sign in again.", false);
});

// ---- attention: new alarm instances counted in the title and on the Alarms tab, from every view

function showAttention() {
  const open = session.me ? [...store.alarms.values()].filter((a) => a.state === "new").length : 0;
  document.title = `${open ? `(${open}) ` : ""}${viewTitle} · Penumbra`;
  const link = document.querySelector('.tabs a[data-view="alarms"]');
  if (!link) return;
  link.querySelector(".attention")?.remove();
  if (open) {
    link.insertAdjacentHTML("beforeend", ` <span class="attention" data-testid="new-alarms"
      aria-label="${open} new ${open === 1 ? "alarm" : "alarms"}">${open > 999 ? "999+" : open}</span>`);
  }
}
bus.addEventListener("alarms", showAttention);

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
  viewTitle = VIEWS[view].title;
  showAttention();
}

window.addEventListener("hashchange", () => {
  route();
  $("#main").focus({ preventScroll: true });
});

// ---- start: a token kept in this tab's session, or one another tab of this browser has,
// signs in by itself

(async () => {
  if (!session.token) {
    const shared = await askOtherTabs();
    if (shared) session.token = shared;
  }
  if (!session.token) {
    showSignIn();
    takeLateAnswer();
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
