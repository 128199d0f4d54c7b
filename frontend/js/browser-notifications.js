// Browser notifications: once the user allowed them, a critical alarm that opens (or
// reopens) while the tab is hidden raises one naming its query and key; a click on it
// brings the tab back on the query's alarms.

import { bus, keyText } from "./store.js";
import { notify } from "./ui.js";

/** A browser notification for ``alarm`` when it is critical and the tab is hidden. */
export function notifyOpened(alarm) {
  if (alarm.priority !== "critical" || !document.hidden) return;
  if (typeof Notification === "undefined" || Notification.permission !== "granted") return;
  const about = keyText(alarm.key);
  const note = new Notification(`Critical alarm: ${alarm.name}${about ? ` (${about})` : ""}`, {
    body: `${alarm.matches} ${alarm.matches === 1 ? "match" : "matches"}, latest ${Math.round(1000 * (alarm.last_prob ?? 0)) / 10} %`,
    tag: alarm.id,
  });
  note.onclick = () => { window.focus(); location.hash = `#/alarms?query=${encodeURIComponent(alarm.query)}`; };
}

/** Makes ``button`` ask the browser's permission; shown only while it has not been asked. */
export function permissionButton(button) {
  button.hidden = typeof Notification === "undefined" || Notification.permission !== "default";
  button.addEventListener("click", async () => {
    await Notification.requestPermission();
    button.hidden = Notification.permission !== "default";
    notify(Notification.permission === "granted" ? "Critical alarms will notify you while this tab is hidden"
      : "Notifications are not allowed in this browser");
  });
}

bus.addEventListener("opened", (event) => notifyOpened(event.detail));
