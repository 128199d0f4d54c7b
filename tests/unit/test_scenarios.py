"""The demo's scenarios: their truth, recomputed here by brute force from the simulated
world, and the calibration of the engine's probabilities against it.

A scenario draws the true times first and the sensors' reports from the papers' models,
so a reported probability is the real chance that the match happened: over many alarms,
the number that really happened must be the sum of their probabilities, within the
binomial spread. That checks the whole chain (timestamps, kernels, operators) against
the simulated world, which no part of the engine sees.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from penumbra import cli
from penumbra.cli import scenarios
from penumbra.engine import compile_query
from penumbra.events import parse_events, parse_streams


def brute_truth(sim: scenarios.Simulation) -> set[tuple]:
    """Every true match of the scenario's query, by trying every combination."""
    world = {i: (stream, t, attrs) for i, stream, t, attrs in sim.world}
    by_stream: dict[str, list[str]] = {}
    for i, (stream, _, _) in world.items():
        by_stream.setdefault(stream, []).append(i)
    out = set()
    if sim.scenario == "intrusion":
        for s, a in itertools.product(by_stream.get("seismic", []), by_stream.get("acoustic", [])):
            if world[s][2] == world[a][2] and abs(world[s][1] - world[a][1]) <= 2000:
                out.add((("A", s), ("B", a)))
    elif sim.scenario == "cluster":
        saturated = [b for b in by_stream.get("CPU", []) if world[b][2]["value"] > 95]
        for a, b, c in itertools.product(by_stream.get("TaskStart", []), saturated, by_stream.get("TaskFinish", [])):
            (_, ta, aa), (_, tb, ab), (_, tc, ac) = world[a], world[b], world[c]
            if (aa["nodeId"] == ab["nodeId"] == ac["nodeId"] and aa["taskId"] == ac["taskId"]
                    and ta < tb < tc and tc - ta < 150):
                out.add((("a", a), ("b", b), ("c", c)))
    else:
        counters = {world[y][2]["tag"] for y in by_stream.get("counter", [])}
        for x, z in itertools.product(by_stream.get("shelf", []), by_stream.get("exit", [])):
            tag = world[x][2]["tag"]
            if tag == world[z][2]["tag"] and tag not in counters and 0 < world[z][1] - world[x][1] < 120:
                out.add((("x", x), ("z", z)))
    return out


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_the_truth_is_every_true_match_and_nothing_else(name):
    sim = scenarios.generate(name, rate=20, duration=60 if name == "cluster" else 120, seed=3)
    truth = {tuple(sorted(t.items())) for t in sim.truth[name]}
    assert truth == brute_truth(sim) and len(truth) > 10


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_the_same_seed_draws_the_same_world(name):
    one, two = (scenarios.generate(name, 30, 40, seed=5) for _ in range(2))
    other = scenarios.generate(name, 30, 40, seed=6)
    assert one.events == two.events and one.truth == two.truth and one.events != other.events
    assert np.all(np.diff(one.arrivals) >= 0), "events come in arrival order"
    assert len(one.events) == pytest.approx(30 * 40, rel=0.25)


@pytest.mark.parametrize("name", sorted(scenarios.SCENARIOS))
def test_every_event_is_valid_and_arrives_within_its_streams_delay(name):
    sc = scenarios.scenario(name)
    sim = scenarios.generate(name, 40, 120, seed=2)
    events, rejected = parse_events(sim.events, parse_streams(sc.streams))
    assert rejected == []
    operator = compile_query(sc.queries[0].text, parse_streams(sc.streams))
    late = []
    for start in range(0, len(events), 200):
        late += operator.feed(events[start:start + 200]).late
    assert late + operator.flush().late == []


def run_local(sim: scenarios.Simulation, sc: scenarios.Scenario) -> list[dict]:
    streams = parse_streams(sc.streams)
    operator = compile_query(sc.queries[0].text, streams)
    events, _ = parse_events(sim.events, streams)
    matches = []
    for start in range(0, len(events), 500):
        matches += [m.to_json() for m in operator.feed(events[start:start + 500]).matches]
    return matches + [m.to_json() for m in operator.flush().matches]


@pytest.mark.parametrize("name, rate, duration", [("intrusion", 50, 400), ("cluster", 40, 600),
                                                  ("shoplifting", 20, 1500)])
def test_the_reported_probabilities_are_calibrated_against_the_simulated_world(name, rate, duration):
    sc = scenarios.scenario(name)
    sim = scenarios.generate(name, rate, duration, seed=11)
    matches = run_local(sim, sc)
    real = {tuple(sorted(t.items())) for t in sim.truth[name]}
    probs = np.array([m["prob"] for m in matches])
    hits = np.array([tuple(sorted(m["events"].items())) in real for m in matches])
    assert len(matches) > 300
    # the number that happened is the sum of the probabilities, within 4 binomial deviations
    spread = math.sqrt(float(np.sum(probs * (1 - probs))))
    assert abs(hits.sum() - probs.sum()) <= 4 * max(spread, 1.0), (hits.sum(), probs.sum(), spread)
    result = scenarios.check(name, sim.truth[name], matches, sc.queries[0].threshold)
    assert result.ece < 0.06 and result.precision > 0.6 and 0.3 < result.recall <= 1


def test_check_counts_by_hand():
    truth = [{"A": "s1", "B": "a1"}, {"A": "s2", "B": "a2"}, {"A": "s3", "B": "a3"}]
    matches = [{"events": {"A": "s1", "B": "a1"}, "prob": 0.95},   # true, bin 0.9
               {"events": {"A": "s2", "B": "a9"}, "prob": 0.91},   # false, bin 0.9
               {"events": {"A": "s2", "B": "a2"}, "prob": 0.65},   # true, bin 0.6
               {"events": {"A": "s3", "B": "a3"}, "prob": 0.5},    # below the threshold: no alarm
               {"events": {"A": "s1", "B": "a1"}, "prob": 0.95}]   # the same match again: counted once
    result = scenarios.check("q", truth, matches, 0.6)
    assert (result.alarms, result.true_alarms, result.truth) == (3, 2, 3)
    assert result.precision == pytest.approx(2 / 3) and result.recall == pytest.approx(2 / 3)
    # bin 0.9: mean 0.93, half true -> 0.43 over 2 of 3; bin 0.6: 0.65 vs 1 -> 0.35 over 1 of 3
    assert result.ece == pytest.approx(2 / 3 * 0.43 + 1 / 3 * 0.35)
    assert [(b["from"], b["alarms"]) for b in result.to_json()["bins"]] == [(0.6, 1), (0.9, 2)]
    empty = scenarios.check("q", truth, [], 0.6).to_json()
    assert (empty["alarms"], empty["precision"], empty["recall"], empty["ece"]) == (0, None, 0.0, None)


def test_a_shifted_run_moves_every_time_and_prefixes_every_id():
    sim = scenarios.generate("intrusion", 20, 30, seed=1)
    moved = sim.shifted(1_000_000.0, "r1.")
    assert all(m["id"] == "r1." + e["id"] and m["ts"]["detected"] == e["ts"]["detected"] + 1_000_000
               for e, m in zip(sim.events, moved.events))
    assert moved.truth["intrusion"][0] == {v: "r1." + i for v, i in sim.truth["intrusion"][0].items()}
    assert brute_truth(moved) == {tuple(sorted(t.items())) for t in moved.truth["intrusion"]}


def test_bad_scenario_arguments_are_named():
    with pytest.raises(Exception, match="unknown scenario 'nope'; known: intrusion, cluster, shoplifting"):
        scenarios.generate("nope", 1, 1)
    for rate, duration, word in ((0, 1, "rate"), (float("nan"), 1, "rate"), (1, -1, "duration")):
        with pytest.raises(Exception, match=word):
            scenarios.generate("intrusion", rate, duration)


def test_simulate_eval_and_check_from_the_command_line(tmp_path, capsys):
    events, truth, streams = tmp_path / "e.jsonl", tmp_path / "t.json", tmp_path / "s.json"
    assert cli.main(["simulate", "shoplifting", "--rate", "20", "--duration", "300", "--seed", "4",
                     "--out", str(events), "--truth", str(truth), "--streams-out", str(streams)]) == 0
    capsys.readouterr()
    query = json.loads(truth.read_text())["queries"]["shoplifting"]
    assert cli.main(["eval", "--query", query["text"], "--streams", str(streams), "--events", str(events)]) == 0
    matches = tmp_path / "m.jsonl"
    matches.write_text(capsys.readouterr().out)
    assert cli.main(["check", str(truth), "--matches", str(matches)]) == 0
    report = json.loads(capsys.readouterr().out)
    sim = scenarios.generate("shoplifting", 20, 300, seed=4)
    assert report["truth"] == len(brute_truth(sim)) and report["alarms"] == len(matches.read_text().splitlines())
    assert 0 < report["precision"] <= 1 and 0 < report["recall"] <= 1


@pytest.mark.parametrize("argv, message", [
    (["simulate", "nope"], "invalid choice: 'nope'"),
    (["simulate", "intrusion", "--rate", "-5", "--out", "x"], "--rate must be a positive number"),
    (["simulate", "intrusion", "--forever", "--out", "x"], "--forever runs until stopped"),
    (["replay", "/nonexistent/events.jsonl"], "cannot read events file"),
    (["replay", "x", "--rate", "0"], "--rate must be a positive"),
    (["check", "/nonexistent/truth.json"], "cannot read truth file"),
])
def test_bad_options_exit_2_with_one_line(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
