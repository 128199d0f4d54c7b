"""Workloads for the pattern benchmarks (imprecise-timestamps paper, section 5).

* ``synthetic``: section 5.1's generator. One stream ``E`` of events with one attribute
  ``value`` counting 1..1000 and wrapping; event ``t`` arrives at time ``t`` with the
  uncertainty interval ``[t - delta, t + delta]``. Queries are
  ``SEQ(E e1, ..., E el) WHERE e1.value % v1 = 0 AND ... WITHIN W``.
* ``dense``: denser in matches than ``synthetic``. Streams ``A``, ``B``, ``C`` take turns;
  the gap between events is drawn from ``1 .. 2 * spacing - 1``; each event's ``value`` is
  drawn from 0..9 and a component takes ``value < 3``, so about one event in ten can match
  each component. ``SEQ(A a, B b, C c)``, skip till any match, ``WITHIN 100``: at spacing
  5 and half-width 5, about 0.3 matches per event. Half-widths are fixed or drawn per event.
* ``cluster``: a Hadoop cluster in the spirit of section 5.2. Ten nodes; map tasks
  start and finish (``TaskStart`` / ``TaskFinish``, delta 0.5 s); Ganglia measures each
  node's CPU load every 15 s (``CPU``, delta 7.5 s); the rest of the job's log
  (``HadoopLog``: pulls, merges, ...) fills the stream to 778 events/s. Time is in
  deciseconds (the paper's 0.1 s unit), so W = 15 s is ``WITHIN 150``.

Run it to print what a workload looks like: ``python bench/patterns_workloads.py``.
"""

from __future__ import annotations

import argparse

import numpy as np

from penumbra.events import Event, StreamParams, Streams
from penumbra.timestamps import Interval

#: Default selectivities v_j: component j matches values divisible by v_j.
SELECTIVITIES = (40, 50, 60, 70, 80, 90)
CLUSTER_RATE = 778
CLUSTER_QUERY = (
    "PATTERN SEQ(TaskStart a, CPU b, TaskFinish c, CPU d) "
    "WHERE a.taskId = c.taskId AND b.nodeId = a.nodeId AND d.nodeId = a.nodeId "
    "AND b.value > 95 AND d.value <= 70 AND skip_till_any_match(a, b, c, d) "
    "WITHIN 150 RETURN a, b, c USING {method}")


def synthetic_events(count: int, delta: int) -> list[Event]:
    return [Event("E", str(t), Interval(t - delta, t + delta), {"value": t % 1000 + 1})
            for t in range(count)]


def synthetic_streams(delta: int) -> Streams:
    return Streams([StreamParams("E", pi=2 * delta)])


def synthetic_query(method: str, length: int = 3, window: int = 100,
                    strategy: str = "skip_till_any_match", selectivities=None) -> str:
    values = selectivities or SELECTIVITIES[:length]
    variables = [f"e{j + 1}" for j in range(length)]
    conditions = [f"{v}.value % {s} = 0" for v, s in zip(variables, values)]
    conditions.append(f"{strategy}({', '.join(variables)})")
    return (f"PATTERN SEQ({', '.join(f'E {v}' for v in variables)}) WHERE {' AND '.join(conditions)} "
            f"WITHIN {window} USING {method}")


DENSE_QUERY = ("PATTERN SEQ(A a, B b, C c) WHERE a.value < 3 AND b.value < 3 AND c.value < 3 "
               "AND {strategy}(a, b, c) WITHIN 100 USING {method}")


def dense_events(count: int, half_widths: tuple[int, int] = (5, 5), spacing: float = 5,
                 seed: int = 3) -> list[Event]:
    """``count`` events of the dense workload in arrival order; each event's half-width is
    drawn from ``half_widths[0] .. half_widths[1]``."""
    rng = np.random.default_rng(seed)
    times = np.cumsum(rng.integers(1, max(2, round(2 * spacing)), count))
    values = rng.integers(0, 10, count)
    half = rng.integers(half_widths[0], half_widths[1] + 1, count)
    return [Event("ABC"[k % 3], f"e{k}", Interval(t - h, t + h), {"value": v})
            for k, (t, v, h) in enumerate(zip(times.tolist(), values.tolist(), half.tolist()))]


def dense_streams(half_widths: tuple[int, int] = (5, 5)) -> Streams:
    return Streams([StreamParams(name, pi=2 * half_widths[1]) for name in "ABC"])


def cluster_events(seconds: float, seed: int = 7, nodes: int = 10, tasks_per_second: float = 5.0
                   ) -> list[Event]:
    """``seconds`` of the cluster's merged trace, in arrival (occurrence-time) order."""
    rng = np.random.default_rng(seed)
    horizon = int(seconds * 10)
    rows: list[tuple[int, str, dict, int]] = []
    starts = np.sort(rng.integers(0, horizon, int(seconds * tasks_per_second)))
    for task, start in enumerate(starts.tolist()):
        node = int(rng.integers(nodes))
        finish = start + int(rng.integers(20, 300))
        rows.append((start, "TaskStart", {"taskId": task, "nodeId": node}, 5))
        if finish < horizon:
            rows.append((finish, "TaskFinish", {"taskId": task, "nodeId": node}, 5))
    for node in range(nodes):
        phase = int(rng.integers(150))
        for t in range(phase, horizon, 150):
            load = 100.0 if rng.random() < 0.15 else float(rng.uniform(10, 90))
            rows.append((t, "CPU", {"nodeId": node, "value": load}, 75))
    other = CLUSTER_RATE * seconds - len(rows)
    for t in np.sort(rng.integers(0, horizon, max(0, int(other)))).tolist():
        rows.append((t, "HadoopLog", {"op": "pull"}, 5))
    rows.sort(key=lambda row: row[0])
    return [Event(stream, f"{stream[0]}{k}", Interval(t - delta, t + delta), attrs)
            for k, (t, stream, attrs, delta) in enumerate(rows)]


def cluster_streams() -> Streams:
    return Streams([StreamParams("TaskStart", pi=10), StreamParams("TaskFinish", pi=10),
                    StreamParams("CPU", pi=150), StreamParams("HadoopLog", pi=10)])


def _describe(events: list[Event]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for e in events:
        counts[e.stream] = counts.get(e.stream, 0) + 1
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small samples")
    args = parser.parse_args()
    seconds = 10 if args.quick else 60
    events = cluster_events(seconds)
    print(f"cluster: {len(events)} events in {seconds} s ({len(events) / seconds:.0f}/s): "
          f"{_describe(events)}")
    synthetic = synthetic_events(1000, 5)
    for length in (2, 3, 4):
        matching = [sum(1 for e in synthetic if e.attrs["value"] % s == 0) for s in SELECTIVITIES[:length]]
        print(f"synthetic l={length}: events matching each component per 1000: {matching}")
    print("query 1:", CLUSTER_QUERY.format(method="sorted"))
    dense = dense_events(30_000)
    matching = {name: sum(1 for e in dense if e.stream == name and e.attrs["value"] < 3) * 1000 // len(dense)
                for name in "ABC"}
    print(f"dense: {_describe(dense)}; events matching each component per 1000: {matching}")


if __name__ == "__main__":
    main()
