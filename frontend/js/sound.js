// An optional sound when a critical alarm opens or reopens, whatever view is shown: two
// short tones made by the page (no file to fetch), switched on per browser.

import { bus } from "./store.js";

const SOUND_KEY = "penumbra.sound";
let audio = null;

const wanted = () => localStorage.getItem(SOUND_KEY) === "on";

/** Two short tones; each one played is counted on the document (data-chimed). */
export function chime() {
  try {
    audio = audio ?? new AudioContext();
    const start = audio.currentTime;
    for (const [offset, pitch] of [[0, 880], [0.18, 660]]) {
      const tone = audio.createOscillator();
      const gain = audio.createGain();
      tone.frequency.value = pitch;
      gain.gain.setValueAtTime(0.0001, start + offset);
      gain.gain.exponentialRampToValueAtTime(0.2, start + offset + 0.02);
      gain.gain.exponentialRampToValueAtTime(0.0001, start + offset + 0.16);
      tone.connect(gain).connect(audio.destination);
      tone.start(start + offset);
      tone.stop(start + offset + 0.17);
    }
    document.documentElement.dataset.chimed = String(Number(document.documentElement.dataset.chimed ?? 0) + 1);
  } catch { /* no audio here */ }
}

/** Makes ``checkbox`` the switch of the sound, kept in this browser's local storage. */
export function soundSwitch(checkbox) {
  checkbox.checked = wanted();
  checkbox.addEventListener("change", () => {
    localStorage.setItem(SOUND_KEY, checkbox.checked ? "on" : "off");
    if (checkbox.checked) chime();   // a sample, and browsers let a page play sound after a click
  });
}

bus.addEventListener("opened", (event) => {
  if (event.detail?.priority === "critical" && wanted()) chime();
});
