"""Simulated sensors that know the truth: the demo's scenarios and their ground truth.

A scenario is a world of real occurrences and the sensors that report them imprecisely:
its streams' parameters, its example queries, and a generator that draws the true times
first and then what the sensors report, the way each paper's model says they do. So the
simulator knows, for every query, which matches really happened: ``truth`` names them
by their events' ids (variable -> id, as a match's ``events`` does).

* ``intrusion`` (the PTJoin paper's Example 2; time in ms): seismic and acoustic sensors
  in eight regions. A detection at ``t`` with template ``phi`` means the occurrence time
  is ``phi + t - max(phi)``: the simulator draws the occurrence ``x``, then the
  detection delay from the template. Intrusions make a seismic and an acoustic
  occurrence 0-2.6 s apart in one region; the rest is background. Query: the keyed join
  within 2000 ms at threshold 0.6. True: the two occurrences were at most 2000 ms apart.
* ``cluster`` (the patterns paper's section 5.2; time in 0.1 s): tasks start and
  finish on ten nodes, logged with +-0.5 s of uncertainty; each node's CPU is sampled
  every 15 s and the sample is known only within its 15 s period. Query 1: a task that
  started, saw its node's CPU above 95%, and finished, in that order within 15 s. A true
  instant is uniform on the reported interval's grid, as the possible worlds assume.
  True: the three true instants are in that order and less than 15 s apart.
* ``shoplifting`` (AYAC; time in s): each visit is one tagged item read at the shelf;
  the customer would reach the counter 10-60 s later and the exit 15-90 s later (both
  uniform, independent, as the counter's gap density in the streams says). Reaching the
  exit first is a theft: the item leaves unpaid and no counter read happens. Each reader
  misses a read with its ``miss_prob``. Query: shelf, no counter read, exit, within
  120 s. True: the item really left before its counter visit (thefts whose shelf or exit
  read was missed are part of the truth, and of the recall).

:func:`generate` returns a :class:`Simulation` (events in arrival order with their
arrival offsets, and the truth); :func:`check` compares a query's matches with the truth:
precision and recall at the threshold, and the expected calibration error of the
reported probabilities over the alarms.

>>> sim = generate("intrusion", rate=50, duration=20, seed=1)
>>> len(sim.events) > 0 and sim.events[0]["stream"] in ("seismic", "acoustic")
True
>>> sorted(sim.truth) == ["intrusion"]
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

import numpy as np

from penumbra.errors import PenumbraError

__all__ = ["SCENARIOS", "Check", "Query", "Scenario", "Simulation", "check", "generate", "scenario"]


@dataclass(frozen=True)
class Query:
    """An example query of a scenario: registered under ``id``, alarms at ``threshold``."""

    id: str
    name: str
    text: str
    threshold: float
    meaning: str


@dataclass
class Simulation:
    """What a scenario's sensors reported, and what really happened.

    ``events`` are event objects (DESIGN.md's shape) in arrival order, their times on the
    scenario's clock from 0; ``arrivals`` the seconds after the start at which each one
    reaches Penumbra; ``truth`` maps each query id to the matches that really happened,
    each a mapping of the query's variables to event ids (ids of missed reads included);
    ``world`` is every real occurrence, reported or not: (id, stream, true time, attrs)."""

    scenario: str
    events: list[dict[str, Any]]
    arrivals: np.ndarray
    truth: dict[str, list[dict[str, str]]] = field(default_factory=dict)
    world: list[tuple[str, str, float, dict]] = field(default_factory=list)

    def shifted(self, origin: float, prefix: str = "") -> Simulation:
        """The same world, its clock starting at ``origin`` and every id prefixed: a run
        that follows another on the same Penumbra neither goes back in time nor reuses ids."""
        def move(event: dict) -> dict:
            ts = dict(event["ts"])
            for key in ("lo", "hi", "detected"):
                if key in ts:
                    ts[key] = ts[key] + origin
            return {**event, "id": prefix + event["id"], "ts": ts}

        truth = {q: [{v: prefix + i for v, i in match.items()} for match in matches]
                 for q, matches in self.truth.items()}
        world = [(prefix + i, stream, t + origin, attrs) for i, stream, t, attrs in self.world]
        return Simulation(self.scenario, [move(e) for e in self.events], self.arrivals, truth, world)


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    story: str
    #: the scenario's clock: units per second
    per_second: float
    unit: str
    streams: Mapping[str, Any]
    queries: tuple[Query, ...]
    draw: Callable[[np.random.Generator, float, float], Simulation]


def _uniform_in(rng: np.random.Generator, edges: np.ndarray, probs: np.ndarray, n: int) -> np.ndarray:
    """``n`` draws from the piecewise-uniform density of a histogram."""
    bucket = rng.choice(len(probs), size=n, p=probs)
    return edges[bucket] + rng.random(n) * (edges[bucket + 1] - edges[bucket])


# ---- intrusion detection (PTJoin, Example 2)

INTRUSION_STREAMS = {
    "seismic": {"templates": {"s1": {"edges": [0, 200, 300, 400], "probs": [0.1, 0.3, 0.6]},
                              "s2": {"edges": [0, 100, 200, 300, 400], "probs": [0.15, 0.3, 0.4, 0.15]}},
                "max_delay": 500},
    "acoustic": {"templates": {"m1": {"edges": [0, 150, 250], "probs": [0.3, 0.7]},
                               "m2": {"edges": [0, 50, 100, 300], "probs": [0.2, 0.5, 0.3]}},
                 "max_delay": 500},
}
#: sectors per event per second: few chance coincidences in a sector
SECTORS_PER_RATE = 40
#: share of events that belong to an intrusion (two per intrusion)
INTRUSION_SHARE = 0.2
#: an intrusion's acoustic occurrence follows the seismic one by up to this (ms)
INTRUSION_LAG = 2600.0
#: most network delay between detection and arrival (ms; within the streams' max_delay)
NETWORK_DELAY = 300.0
INTRUSION_WINDOW = 2000.0


def _draw_intrusion(rng: np.random.Generator, rate: float, duration: float) -> Simulation:
    horizon = duration * 1000.0
    n = int(rng.poisson(rate * duration))
    pairs = int(round(n * INTRUSION_SHARE / 2))
    singles = max(0, n - 2 * pairs)
    # occurrences: background singles, then intrusion pairs (seismic, acoustic)
    x = np.concatenate([rng.uniform(0, horizon, singles), np.repeat(rng.uniform(0, horizon, pairs), 2)])
    lag = np.zeros(len(x))
    lag[singles + 1::2] = rng.uniform(0, INTRUSION_LAG, pairs)
    x = x + lag
    seismic = np.concatenate([rng.random(singles) < 0.5, np.tile([True, False], pairs)])
    sectors = max(8, int(rate * SECTORS_PER_RATE))
    region = np.concatenate([rng.integers(0, sectors, singles), np.repeat(rng.integers(0, sectors, pairs), 2)])
    # detection: occurrence + (max(phi) - y), y drawn from the template phi
    template = rng.integers(0, 2, len(x))
    detected = np.empty(len(x))
    names = np.empty(len(x), dtype=object)
    for stream, flag in (("seismic", True), ("acoustic", False)):
        for k, (tname, spec) in enumerate(INTRUSION_STREAMS[stream]["templates"].items()):
            rows = np.flatnonzero((seismic == flag) & (template == k))
            edges, probs = np.asarray(spec["edges"], float), np.asarray(spec["probs"], float)
            detected[rows] = x[rows] + edges[-1] - _uniform_in(rng, edges, probs, len(rows))
            names[rows] = tname
    detected = np.round(detected)
    arrival = (detected + rng.uniform(0, NETWORK_DELAY, len(x))) / 1000.0
    order = np.argsort(arrival, kind="stable")
    ids = np.empty(len(x), dtype=object)
    events = []
    for rank, i in enumerate(order.tolist()):
        stream = "seismic" if seismic[i] else "acoustic"
        ids[i] = f"{stream[0]}{rank}"
        events.append({"stream": stream, "id": ids[i],
                       "ts": {"detected": float(detected[i]), "template": names[i]},
                       "attrs": {"region": f"sector-{region[i]}"}})
    truth = []
    # acoustic occurrences by (sector, time): each seismic one looks up its sector's window
    a = np.flatnonzero(~seismic)
    a = a[np.lexsort((x[a], region[a]))]
    s = np.flatnonzero(seismic)
    span = horizon + INTRUSION_LAG + 2 * INTRUSION_WINDOW + 1  # sectors never overlap
    keys = region[a] * span + x[a]
    lo = np.searchsorted(keys, region[s] * span + x[s] - INTRUSION_WINDOW, "left")
    hi = np.searchsorted(keys, region[s] * span + x[s] + INTRUSION_WINDOW, "right")
    for i, start, stop in zip(s.tolist(), lo.tolist(), hi.tolist()):
        truth += [{"A": ids[i], "B": ids[j]} for j in a[start:stop].tolist()]
    world = [(ids[i], "seismic" if seismic[i] else "acoustic", float(x[i]), {"region": f"sector-{region[i]}"})
             for i in range(len(x))]
    return Simulation("intrusion", events, np.maximum(arrival[order], 0.0), {"intrusion": truth}, world)


# ---- cluster monitoring (patterns paper, section 5.2)

CLUSTER_STREAMS = {"TaskStart": {"pi": 10, "max_delay": 20}, "TaskFinish": {"pi": 10, "max_delay": 20},
                   "CPU": {"pi": 150, "max_delay": 20}}
NODES = 10
CPU_PERIOD = 150  # 15 s in 0.1 s
TASK_HALF_WIDTH = 5  # +-0.5 s
CLUSTER_WINDOW = 150
#: share of CPU samples above 95%
SATURATED = 0.3


def _draw_cluster(rng: np.random.Generator, rate: float, duration: float) -> Simulation:
    horizon = int(duration * 10)
    samples = NODES * max(1, horizon // CPU_PERIOD)
    tasks = max(0, int(rng.poisson(max(rate * duration - samples, 0) / 2)))
    rows: list[tuple[float, str, int, int, int, dict]] = []  # (arrival, stream, true, lo, width, attrs)
    start = rng.integers(0, max(horizon, 1), tasks)
    length = rng.integers(20, 200, tasks)  # 2-20 s
    node = rng.integers(0, NODES, tasks)
    for task in range(tasks):
        for stream, true in (("TaskStart", start[task]), ("TaskFinish", start[task] + length[task])):
            if true >= horizon:
                continue
            width = 2 * TASK_HALF_WIDTH
            lo = int(true - rng.integers(0, width + 1))
            attrs = {"nodeId": f"n{node[task]}", "taskId": f"t{task}"}
            rows.append((lo + width + rng.uniform(0, 10), stream, int(true), lo, width, attrs))
    for n in range(NODES):
        phase = int(rng.integers(0, CPU_PERIOD))
        for period in range(phase, horizon, CPU_PERIOD):
            true = period + int(rng.integers(0, CPU_PERIOD))
            value = float(rng.uniform(96, 100)) if rng.random() < SATURATED else float(rng.uniform(5, 90))
            rows.append((period + CPU_PERIOD + rng.uniform(0, 10), "CPU", true, period, CPU_PERIOD - 1,
                         {"nodeId": f"n{n}", "value": round(value, 1)}))
    rows.sort(key=lambda row: row[0])
    events, truth_rows = [], []
    for rank, (arrive, stream, true, lo, width, attrs) in enumerate(rows):
        eid = f"{stream[0] if stream != 'TaskFinish' else 'F'}{rank}"
        events.append({"stream": stream, "id": eid, "ts": {"lo": lo, "hi": lo + width}, "attrs": attrs})
        truth_rows.append((stream, eid, true, attrs))
    by_task: dict[str, dict[str, tuple[str, int]]] = {}
    cpu: dict[str, list[tuple[int, str]]] = {}
    for stream, eid, true, attrs in truth_rows:
        if stream == "CPU":
            if attrs["value"] > 95:
                cpu.setdefault(attrs["nodeId"], []).append((true, eid))
        else:
            by_task.setdefault(attrs["taskId"], {"node": attrs["nodeId"]})[stream] = (eid, true)
    truth = []
    for task in by_task.values():
        if "TaskStart" in task and "TaskFinish" in task:
            (a, ta), (c, tc) = task["TaskStart"], task["TaskFinish"]
            if tc - ta < CLUSTER_WINDOW:
                truth += [{"a": a, "b": b, "c": c} for tb, b in cpu.get(task["node"], ()) if ta < tb < tc]
    arrivals = np.array([row[0] for row in rows], float) / 10.0
    world = [(eid, stream, float(true), attrs) for stream, eid, true, attrs in truth_rows]
    return Simulation("cluster", events, arrivals, {"cluster": truth}, world)


# ---- retail shoplifting (AYAC)

#: seconds from the shelf to the counter, and from the shelf to the exit (uniform, inclusive)
COUNTER_GAP = (10, 60)
EXIT_GAP = (15, 90)
SHOPLIFTING_STREAMS = {"shelf": {"miss_prob": 0.05, "max_delay": 2},
                       "counter": {"miss_prob": 0.1, "gap": {"uniform": list(COUNTER_GAP)}, "max_delay": 2},
                       "exit": {"miss_prob": 0.05, "max_delay": 2}}
SHOPLIFTING_WINDOW = 120


def _draw_shoplifting(rng: np.random.Generator, rate: float, duration: float) -> Simulation:
    visits = int(rng.poisson(rate * duration / 3))
    shelf = np.sort(rng.integers(0, max(int(duration), 1), visits))
    # the walk to the counter and the walk to the exit, independent: leaving first is a theft
    counter = shelf + rng.integers(COUNTER_GAP[0], COUNTER_GAP[1] + 1, visits)
    leave = shelf + rng.integers(EXIT_GAP[0], EXIT_GAP[1] + 1, visits)
    paid = counter < leave
    rows = []  # (time, stream, visit, observed)
    miss = {name: spec["miss_prob"] for name, spec in SHOPLIFTING_STREAMS.items()}
    for v in range(visits):
        for stream, t, real in (("shelf", shelf[v], True), ("counter", counter[v], paid[v]), ("exit", leave[v], True)):
            if real:
                rows.append((int(t), stream, v, rng.random() >= miss[stream]))
    rows.sort(key=lambda row: (row[0], row[2]))
    ids = {}
    events = []
    for rank, (t, stream, v, observed) in enumerate(rows):
        ids[(stream, v)] = f"{stream[0]}{rank}"
        if observed:
            events.append({"stream": stream, "id": ids[(stream, v)], "ts": {"lo": t, "hi": t},
                           "attrs": {"tag": f"tag{v}"}})
    arrivals = np.array([e["ts"]["lo"] for e in events], float)
    truth = [{"x": ids[("shelf", v)], "z": ids[("exit", v)]} for v in range(visits) if not paid[v]]
    world = [(ids[(stream, v)], stream, float(t), {"tag": f"tag{v}"}) for t, stream, v, _ in rows]
    return Simulation("shoplifting", events, arrivals, {"shoplifting": truth}, world)


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("intrusion", "Intrusion detection",
             "Seismic and acoustic sensors report detections whose occurrence time is known only "
             "through a detection-delay histogram. An alarm says a seismic and an acoustic event in "
             "the same region occurred within 2 s of each other with probability at least 0.6: "
             "someone is probably crossing the perimeter there.",
             1000.0, "ms", INTRUSION_STREAMS,
             (Query("intrusion", "Intrusion: seismic and acoustic within 2 s",
                    "SELECT * FROM SEISMIC A, ACOUSTIC B WHERE WINDOW(A, B) = 2000 AND A.region = B.region "
                    "WITH THRESHOLD 0.6", 0.6,
                    "a seismic (A) and an acoustic (B) event in one region occurred within 2000 ms"),),
             _draw_intrusion),
    Scenario("cluster", "Cluster monitoring",
             "Task logs carry start and finish times to within half a second; CPU load is sampled every "
             "15 s and known only within the sampling period. An alarm says a task probably ran while "
             "its node's CPU was saturated, all within 15 s.",
             10.0, "0.1 s", CLUSTER_STREAMS,
             (Query("cluster", "Query 1: a task ran while its node's CPU was saturated",
                    "PATTERN SEQ(TaskStart a, CPU b, TaskFinish c) WHERE a.nodeId = b.nodeId AND "
                    "b.nodeId = c.nodeId AND a.taskId = c.taskId AND b.value > 95 AND "
                    "skip_till_any_match(a, b, c) WITHIN 150 RETURN a, b, c WITH CONFIDENCE 0.5", 0.5,
                    "task a started, CPU sample b of its node was above 95%, task a finished (c), "
                    "in that order, within 15 s"),),
             _draw_cluster),
    Scenario("shoplifting", "Retail shoplifting",
             "RFID readers at the shelves, the counter and the exit miss reads now and then. An alarm "
             "says a tagged item left the shop without being paid for, with the probability that no "
             "counter read really happened (it may have been missed).",
             1.0, "s", SHOPLIFTING_STREAMS,
             (Query("shoplifting", "Shoplifting: shelf, no counter, exit",
                    "SEQUENCE(Shelf x, !Counter y, Exit z) WHERE x.tag = z.tag AND y.tag = x.tag "
                    f"WITHIN {SHOPLIFTING_WINDOW} THRESHOLD 0.5", 0.5,
                    "item x was taken from the shelf and left by the exit (z) with no counter read between"),),
             _draw_shoplifting),
)}


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise PenumbraError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}") from None


def generate(name: str, rate: float, duration: float, seed: int = 0) -> Simulation:
    """About ``rate`` events per second for ``duration`` seconds of the scenario ``name``."""
    if not (math.isfinite(rate) and rate > 0):
        raise PenumbraError(f"rate must be a positive number of events per second, got {rate!r}")
    if not (math.isfinite(duration) and duration > 0):
        raise PenumbraError(f"duration must be a positive number of seconds, got {duration!r}")
    return scenario(name).draw(np.random.default_rng(seed), float(rate), float(duration))


# ---- the check

@dataclass
class Check:
    """How a query's alarms compare with the truth."""

    query: str
    threshold: float
    alarms: int
    true_alarms: int
    truth: int
    #: per probability bin (tenths): [lower edge, alarms, mean probability, share true]
    bins: list[tuple[float, int, float, float]]

    @property
    def precision(self) -> float:
        return self.true_alarms / self.alarms if self.alarms else math.nan

    @property
    def recall(self) -> float:
        return self.true_alarms / self.truth if self.truth else math.nan

    @property
    def ece(self) -> float:
        """Expected calibration error over the alarms: sum over bins of the bin's share of
        the alarms times |mean reported probability - share that really happened|."""
        if not self.alarms:
            return math.nan
        return sum(n / self.alarms * abs(p - share) for _, n, p, share in self.bins)

    def to_json(self) -> dict[str, Any]:
        def number(value: float) -> float | None:
            return None if math.isnan(value) else round(value, 6)

        return {"query": self.query, "threshold": self.threshold, "alarms": self.alarms,
                "true_alarms": self.true_alarms, "truth": self.truth, "precision": number(self.precision),
                "recall": number(self.recall), "ece": number(self.ece),
                "bins": [{"from": lo, "alarms": n, "mean_prob": round(p, 6), "true_share": round(s, 6)}
                         for lo, n, p, s in self.bins]}


def check(query: str, truth: Iterable[Mapping[str, str]], matches: Iterable[Mapping[str, Any]],
          threshold: float) -> Check:
    """Compare matches (``{"events": {var: id}, "prob": p}``) with the true matches.

    An alarm is a match with ``prob >= threshold``; it is true when its events (the
    variables both name) are those of a true match. Each true match counts once."""
    real = {tuple(sorted(t.items())) for t in truth}
    variables = {v for t in real for v, _ in t}
    seen: dict[tuple, float] = {}
    for match in matches:
        prob = float(match["prob"])
        if prob >= threshold:
            key = tuple(sorted((v, i) for v, i in match["events"].items() if not variables or v in variables))
            seen[key] = max(prob, seen.get(key, 0.0))
    probs = np.array(list(seen.values()), float)
    hit = np.array([key in real for key in seen], bool)
    bins = []
    index = np.minimum((probs * 10).astype(int), 9)
    for b in range(10):
        inside = index == b
        if inside.any():
            bins.append((b / 10, int(inside.sum()), float(probs[inside].mean()), float(hit[inside].mean())))
    return Check(query, threshold, len(seen), int(hit.sum()), len(real), bins)
