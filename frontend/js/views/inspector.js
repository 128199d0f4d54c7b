// Probability inspector: choose a query and see what the job knows of it, drawn by its
// kind's module: a join's probability curve and probing ranges (inspector/join.js), a
// pattern match's timeline (inspector/pattern.js), a lossy match's observed and missed
// components (inspector/lossy.js).

import { bus, fillQuerySelect, store } from "../store.js";
import { mountJoin } from "./inspector/join.js";
import { showSequence } from "./inspector/lossy.js";
import { purgePattern, showPattern } from "./inspector/pattern.js";

export default {
  title: "Probability inspector",
  mount(main, params) {
    main.innerHTML = `
      <div class="view-head"><h1>Probability inspector</h1></div>
      <div class="filters"><div><label for="ins-query">Query</label><select id="ins-query"></select></div></div>
      <div id="match-panel" class="card stack" hidden></div>
      <div id="join-panel" class="stack"></div>`;

    const $ = (s) => main.querySelector(s);
    const matchPanel = $("#match-panel");
    const join = mountJoin($("#join-panel"), () => $("#ins-query").value);

    const fillQueries = () => fillQuerySelect($("#ins-query"), params.get("query"));

    async function chooseQuery() {
      join.cancel();
      const entry = store.queries.get($("#ins-query").value);
      if (!entry) return;
      $("#join-panel").hidden = entry.kind !== "join";
      $("#match-panel").hidden = entry.kind === "join";
      if (entry.kind !== "join") {
        join.purge();
        await (entry.kind === "pattern" ? showPattern(matchPanel, entry) : showSequence(matchPanel, entry));
        return;
      }
      purgePattern(matchPanel);
      await join.show(entry);
    }

    $("#ins-query").addEventListener("change", chooseQuery);
    const onQueries = () => { const before = $("#ins-query").value; fillQueries(); if ($("#ins-query").value !== before) chooseQuery(); };
    bus.addEventListener("queries", onQueries);
    bus.addEventListener("partitions", join.onPartitions);
    fillQueries();
    chooseQuery();
    join.readPartitions();
    return () => {
      bus.removeEventListener("queries", onQueries);
      bus.removeEventListener("partitions", join.onPartitions);
      join.purge();
      purgePattern(matchPanel);
    };
  },
};
