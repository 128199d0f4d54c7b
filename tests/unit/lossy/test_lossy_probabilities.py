"""With epsilon > 0 the operator reports every path (observed events, missed positives
skipped) whose probability reaches the threshold, with the probability of the model:
the product, over the runs between consecutive observed positives and the runs before
the first and after the last, of the run scores of section 3. Checked against an
enumeration of every assignment of events to components, scored term by term."""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import example, given, settings

from lossy_reference import enumerate_run
from penumbra.events import Event, parse_streams
from penumbra.lossy import build_operator
from penumbra.query import parse
from penumbra.timestamps import Interval

STREAMS = ("A", "B", "C")
THRESHOLD = 0.001


@dataclass
class Part:
    positive: bool
    pmf: np.ndarray
    miss_prob: float


def scenario(seed: int) -> dict:
    """A random query and stream, dense enough that most have matches."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 5))
    negated = (rng.random(size) < 0.4).tolist()
    if all(negated):
        negated[int(rng.integers(size))] = False
    window = int(rng.integers(5, 13))
    weights = [rng.integers(0, 4, window - 1).tolist() for _ in range(size)]
    for w in weights:
        w[int(rng.integers(window - 1))] += 1
    streams = rng.choice(STREAMS, size).tolist()
    return dict(
        negated=negated, window=window, weights=weights, streams=streams,
        eps={s: float(rng.choice([0.3, 0.6, 0.0], p=[0.4, 0.4, 0.2])) for s in STREAMS},
        events=[(str(rng.choice(streams)), f"e{n}", int(rng.integers(0, 15)), int(rng.integers(0, 2)))
                for n in range(int(rng.integers(6, 21)))],
        blocks=int(rng.integers(1, 4)))


def query_text(s):
    names = [f"c{k}" for k in range(len(s["negated"]))]
    first = names[s["negated"].index(False)]
    parts = ", ".join(("!" if neg else "") + f"{stream} {name}"
                      for neg, stream, name in zip(s["negated"], s["streams"], names))
    where = " AND ".join(f"{first}.tag = {n}.tag" for n in names if n != first)
    interior = [n for n, neg in zip(names, s["negated"]) if not neg and n != first]
    defaults = f" DEFAULT {', '.join(f'{n}.tag = {first}.tag' for n in interior)}" if interior else ""
    gaps = ", ".join(f"{n} = histogram(1, {', '.join(map(str, w))})"
                     for n, w in zip(names, s["weights"]) if n != first)
    return (f"SEQUENCE({parts}) WHERE {where}{defaults} GAP {gaps} "
            f"WITHIN {s['window']} THRESHOLD {THRESHOLD}")


def model_parts(s) -> list[Part]:
    """Each component's model: positive or not, its gap pmf (the query's histogram GAP),
    its stream's miss probability."""
    window = s["window"]
    parts = []
    for weights, stream, neg in zip(s["weights"], s["streams"], s["negated"]):
        pmf = np.zeros(window + 1)
        pmf[1:window] = np.array(weights) / sum(weights)
        parts.append(Part(not neg, pmf, s["eps"][stream]))
    return parts


def reference(s):
    """Every assignment of events to the positive components, first and last observed,
    interior ones observed or missed, scored from the model."""
    negated, window, streams = s["negated"], s["window"], s["streams"]
    names = [f"c{k}" for k in range(len(negated))]
    parts = model_parts(s)
    positives = [k for k, neg in enumerate(negated) if not neg]
    events = [dict(stream=e[0], id=e[1], t=e[2], tag=e[3]) for e in s["events"]]
    found = {}
    choices = [events] + [events + [None]] * (len(positives) - 2) + ([events] if len(positives) > 1 else [])
    for chosen in itertools.product(*choices):
        observed = [(k, e) for k, e in zip(positives, chosen) if e is not None]
        times = [e["t"] for _, e in observed]
        if any(a >= b for a, b in zip(times, times[1:])) or times[-1] - times[0] >= window:
            continue
        if any(e["stream"] != streams[k] for k, e in observed) or len({e["tag"] for _, e in observed}) > 1:
            continue
        tag, t_first, t_last = observed[0][1]["tag"], times[0], times[-1]
        # the observed positives bound the runs; V_0 opens at t_last - W, V_{l+1} closes at t_first + W
        bounds = [(-1, t_last - window)] + [(k, e["t"]) for k, e in observed] + \
                 [(len(negated), t_first + window)]
        score = 1.0
        violated = False
        for (a, t_a), (b, t_b) in zip(bounds, bounds[1:]):
            score *= enumerate_run(parts[a + 1:b], t_b - t_a)
            for n in range(a + 1, b):
                if negated[n]:
                    violated |= any(e["stream"] == streams[n] and e["tag"] == tag and t_a < e["t"] < t_b
                                    for e in events)
        if not violated and score >= THRESHOLD * (1 - 1e-9):
            found[tuple(sorted((names[k], e["id"]) for k, e in observed))] = score
    return found


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_probabilities_equal_the_model(seed):
    s = scenario(seed)
    op = build_operator(parse(query_text(s)), parse_streams({name: {"miss_prob": e} for name, e in s["eps"].items()}))
    events = sorted((Event(stream, ident, Interval(float(t), float(t)), {"tag": tag})
                     for stream, ident, t, tag in s["events"]), key=lambda e: e.ts.lo)
    size = max(1, -(-len(events) // s["blocks"]))
    matches = []
    for start in range(0, len(events), size):
        matches += op.feed(events[start:start + size]).matches
    matches += op.flush().matches
    got = {tuple(sorted(m.events.items())): m.prob for m in matches}
    assert len(got) == len(matches)
    expected = reference(s)
    near_threshold = {key for key, p in expected.items() if abs(p - THRESHOLD) < 1e-9}
    assert set(got) - near_threshold == set(expected) - near_threshold
    for key, prob in got.items():
        assert prob == pytest.approx(expected[key], rel=1e-9, abs=1e-12)


# --- WHERE with OR and NOT, predicates on negatives, DEFAULTs of missed components ------------
#
# The expected matches are found by brute force over the assignments of events to the
# positive components (interior ones observed or missed), the WHERE converted to DNF here
# and every literal evaluated in Python, following the documented semantics: in a clause,
# a literal on one missed positive component holds, the other literals on positives read
# the missed components' DEFAULT values, and the literals naming a negative component say
# which of its events (inside its interval) break the match under that clause. A path is
# reported, once, when some clause accepts it and its score reaches the threshold.

COMPARE = {"=": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le,
           ">": operator.gt, ">=": operator.ge}


def expr_text(e) -> str:
    """Query text of an expression: ("cmp", op, left, right), ("and" | "or", operands),
    ("not", operand); terms ("attr", var, name) or ("const", value)."""
    if e[0] == "cmp":
        return f"{term_text(e[2])} {e[1]} {term_text(e[3])}"
    if e[0] == "not":
        return f"NOT ({expr_text(e[1])})"
    return "(" + f" {e[0].upper()} ".join(expr_text(x) for x in e[1]) + ")"


def term_text(t) -> str:
    return f"{t[1]}.{t[2]}" if t[0] == "attr" else str(t[1])


def to_dnf(e, negate=False) -> list[list[tuple[bool, tuple]]]:
    """Clauses (lists of literals (negated, comparison)) whose OR is ``e``."""
    if e[0] == "not":
        return to_dnf(e[1], not negate)
    if e[0] == "cmp":
        return [[(negate, e)]]
    parts = [to_dnf(x, negate) for x in e[1]]
    if (e[0] == "or") != negate:
        return [clause for part in parts for clause in part]
    return [[lit for clause in combo for lit in clause] for combo in itertools.product(*parts)]


def literal_vars(literal) -> set[str]:
    _, (_, _, left, right) = literal
    return {t[1] for t in (left, right) if t[0] == "attr"}


def literal_holds(literal, bindings) -> bool:
    negated, (_, op, left, right) = literal
    value = lambda t: bindings[t[1]][t[2]] if t[0] == "attr" else t[1]
    return COMPARE[op](value(left), value(right)) != negated


def rich_scenario(seed: int) -> dict:
    """A random query with tag ties (most components), a random AND/OR/NOT condition on
    v (and sometimes tag) over positives and negatives, DEFAULTs for the interior
    positives, and a random stream of events with tag 0..1 and v 0..2."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(2, 6))
    negated = (rng.random(size) < 0.35).tolist()
    if all(negated):
        negated[int(rng.integers(size))] = False
    names = [f"c{k}" for k in range(size)]
    positives = [k for k in range(size) if not negated[k]]
    negatives = [k for k in range(size) if negated[k]]
    first = names[positives[0]]
    interior = [names[k] for k in positives[1:-1]]
    window = int(rng.integers(5, 13))
    weights = [rng.integers(0, 4, window - 1).tolist() for _ in range(size)]
    for w in weights:
        w[int(rng.integers(window - 1))] += 1
    streams = rng.choice(STREAMS, size).tolist()
    pick = lambda seq: seq[int(rng.integers(len(seq)))]
    attr = lambda: "v" if rng.random() < 0.8 else "tag"
    op = lambda: str(rng.choice(["=", "!=", "<", ">="], p=[0.45, 0.25, 0.15, 0.15]))

    # the tag ties, ANDed with the rest (so in every clause): most components tied to a positive
    ties = []
    for k in range(size):
        if names[k] != first and rng.random() < 0.8:
            other = first if not negated[k] or rng.random() < 0.6 else names[pick(positives)]
            ties.append(("cmp", "=", ("attr", other, "tag"), ("attr", names[k], "tag")))

    def atom():
        kinds = ["trivial"] + (["joint"] if len(positives) > 1 else []) + \
                (["negative", "negative joint"] if negatives else [])
        kind = pick(kinds)
        if kind == "trivial":
            return ("cmp", op(), ("attr", names[pick(positives)], attr()), ("const", int(rng.integers(0, 3))))
        if kind == "negative":
            return ("cmp", op(), ("attr", names[pick(negatives)], attr()), ("const", int(rng.integers(0, 3))))
        if kind == "negative joint":
            name = attr()
            return ("cmp", op(), ("attr", names[pick(negatives)], name),
                    ("attr", names[pick(positives)], name if rng.random() < 0.7 else attr()))
        # joint on positives, an interior one (which may be missed) more often than not
        if interior and rng.random() < 0.7:
            a = pick(interior)
            b = pick([names[k] for k in positives if names[k] != a])
        else:
            a, b = (names[k] for k in rng.choice(positives, 2, replace=False))
        name = attr()
        return ("cmp", op(), ("attr", a, name), ("attr", b, name if rng.random() < 0.7 else attr()))

    def condition(depth):
        if depth == 0 or rng.random() < 0.35:
            return atom()
        if rng.random() < 0.2:
            return ("not", condition(depth - 1))
        return (pick(["and", "or", "or"]), tuple(condition(depth - 1) for _ in range(int(rng.integers(2, 4)))))

    extra = [condition(2) for _ in range(int(rng.integers(0, 3)))]
    while extra and len(to_dnf(("and", tuple(extra)))) > 32:     # the parser allows 64 clauses
        extra.pop()
    where = ("and", tuple(ties + extra)) if ties or extra else None

    # DEFAULTs for every interior positive: constants, the first or last positive, or an
    # earlier interior positive (which may be missed too: a chain of defaults)
    defaults = {}
    for n, var in enumerate(interior):
        choices = [("const", int(rng.integers(0, 2))), ("attr", first, "tag"),
                   ("attr", names[positives[-1]], "tag")] + [("attr", v, "tag") for v in interior[:n]]
        tag = ("attr", first, "tag") if rng.random() < 0.6 else pick(choices)
        choices = [("const", int(rng.integers(0, 3))), ("attr", first, "v"),
                   ("attr", names[positives[-1]], "v")] + [("attr", v, "v") for v in interior[:n]]
        defaults[var] = {"tag": tag, "v": pick(choices)}
    return dict(
        negated=negated, window=window, weights=weights, streams=streams, where=where, defaults=defaults,
        eps={s: float(rng.choice([0.3, 0.6, 0.0], p=[0.4, 0.4, 0.2])) for s in STREAMS},
        events=[(str(rng.choice(streams)), f"e{n}", int(rng.integers(0, 16)), int(rng.integers(0, 2)),
                 int(rng.integers(0, 3))) for n in range(int(rng.integers(6, 19)))],
        blocks=int(rng.integers(1, 4)))


def rich_query_text(s) -> str:
    names = [f"c{k}" for k in range(len(s["negated"]))]
    first = names[s["negated"].index(False)]
    parts = ", ".join(("!" if neg else "") + f"{stream} {name}"
                      for neg, stream, name in zip(s["negated"], s["streams"], names))
    where = f" WHERE {expr_text(s['where'])}" if s["where"] else ""
    defaults = ", ".join(f"{var}.{attr} = {term_text(t)}" for var, d in s["defaults"].items() for attr, t in d.items())
    defaults = f" DEFAULT {defaults}" if defaults else ""
    gaps = ", ".join(f"{n} = histogram(1, {', '.join(map(str, w))})"
                     for n, w in zip(names, s["weights"]) if n != first)
    return f"SEQUENCE({parts}){where}{defaults} GAP {gaps} WITHIN {s['window']} THRESHOLD {THRESHOLD}"


def rich_reference(s, threshold: float | None = THRESHOLD) -> dict:
    """Every assignment of events to the positive components, first and last observed,
    interior ones observed or missed, in increasing time within the window; accepted
    when one DNF clause holds (negatives absent under it); scored as ``reference``, and
    kept from ``threshold`` on (None: every accepted assignment, whatever its score)."""
    negated, window, streams = s["negated"], s["window"], s["streams"]
    names = [f"c{k}" for k in range(len(negated))]
    parts = model_parts(s)
    positives = [k for k, neg in enumerate(negated) if not neg]
    events = sorted((dict(stream=e[0], id=e[1], t=e[2], tag=e[3], v=e[4]) for e in s["events"]),
                    key=lambda e: e["t"])
    of_stream = {name: [e for e in events if e["stream"] == name] for name in STREAMS}
    clauses = to_dnf(s["where"]) if s["where"] else [[]]
    runs = {}

    def run_score(a, b, length):
        if (a, b, length) not in runs:
            runs[a, b, length] = enumerate_run(parts[a + 1:b], length)
        return runs[a, b, length]

    def assignments(index, chosen, t_prev, t_first):
        if index == len(positives):
            yield chosen
            return
        k = positives[index]
        if 0 < index < len(positives) - 1:
            yield from assignments(index + 1, chosen + [None], t_prev, t_first)
        for e in of_stream[streams[k]]:
            if e["t"] > t_prev and (t_first is None or e["t"] - t_first < window):
                yield from assignments(index + 1, chosen + [e], e["t"], e["t"] if t_first is None else t_first)

    def value(var, attr, bound):
        if var in bound:
            return bound[var][attr]
        kind, *rest = s["defaults"][var][attr]
        return rest[0] if kind == "const" else value(rest[0], rest[1], bound)

    found = {}
    for chosen in assignments(0, [], -1, None):
        observed = [(k, e) for k, e in zip(positives, chosen) if e is not None]
        t_first, t_last = observed[0][1]["t"], observed[-1][1]["t"]
        bounds = [(-1, t_last - window)] + [(k, e["t"]) for k, e in observed] + [(len(negated), t_first + window)]
        score = 1.0
        interval = {}
        for (a, t_a), (b, t_b) in zip(bounds, bounds[1:]):
            score *= run_score(a, b, t_b - t_a)
            interval.update({n: (t_a, t_b) for n in range(a + 1, b) if negated[n]})
        if threshold is not None and score < threshold - 1e-9:          # within 1e-9 of it: either way
            continue
        bound = {names[k]: {"tag": e["tag"], "v": e["v"]} for k, e in observed}
        missed = [names[k] for k, e in zip(positives, chosen) if e is None]
        bindings = {**bound, **{var: {attr: value(var, attr, bound) for attr in ("tag", "v")} for var in missed}}

        def accepts(clause):
            on_negative = {n: [] for n in interval}
            for literal in clause:
                used = literal_vars(literal)
                negative = [n for n in interval if names[n] in used]
                if negative:
                    on_negative[negative[0]].append(literal)
                elif len(used) == 1 and used <= set(missed):
                    continue            # a trivial literal of a missed component holds
                elif not literal_holds(literal, bindings):
                    return False
            for n, literals in on_negative.items():
                lo, hi = interval[n]
                for e in of_stream[streams[n]]:
                    scope = {**bindings, names[n]: {"tag": e["tag"], "v": e["v"]}}
                    if lo < e["t"] < hi and all(literal_holds(lit, scope) for lit in literals):
                        return False
            return True

        if any(accepts(clause) for clause in clauses):
            found[tuple(sorted((names[k], e["id"]) for k, e in observed))] = score
    return found


def run_rich(s) -> list:
    op = build_operator(parse(rich_query_text(s)),
                        parse_streams({name: {"miss_prob": e} for name, e in s["eps"].items()}))
    events = sorted((Event(stream, ident, Interval(float(t), float(t)), {"tag": tag, "v": v})
                     for stream, ident, t, tag, v in s["events"]), key=lambda e: e.ts.lo)
    size = max(1, -(-len(events) // s["blocks"]))
    matches = []
    for start in range(0, len(events), size):
        matches += op.feed(events[start:start + size]).matches
    return matches + op.flush().matches


def assert_matches(matches: list, expected: dict, threshold: float) -> None:
    """The matches are those of ``expected`` (observed events -> probability) from the
    threshold on (either way within 1e-9 of it), each once, with its probability."""
    got = {tuple(sorted(m.events.items())): m.prob for m in matches}
    assert len(got) == len(matches), "a path reported twice"
    near_threshold = {key for key, p in expected.items() if abs(p - threshold) < 1e-9}
    wanted = {key for key, p in expected.items() if p >= threshold}
    assert set(got) - near_threshold == wanted - near_threshold
    for key, prob in got.items():
        assert prob == pytest.approx(expected[key], rel=1e-9, abs=1e-12)


def check_rich(s) -> None:
    assert_matches(run_rich(s), rich_reference(s), THRESHOLD)


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 2**32 - 1))
# seeds on which an oracle that ignored, in turn, the literals on negatives, all clauses
# but the first, the defaults of a missed component, or the rule that its trivial
# literals hold, would disagree with the operator
@example(3).via("a negative's own literals; an OR of clauses")
@example(7).via("clauses beyond the first")
@example(18).via("a joint literal on a missed component, read through its DEFAULT")
@example(26).via("a constant DEFAULT")
@example(96).via("a trivial literal of a missed component holds")
def test_clauses_negative_predicates_and_defaults_equal_the_model(seed):
    """OR / NOT in WHERE (several DNF clauses), predicates on negative components beyond
    the tag, joint predicates on interior positives that may be missed (their DEFAULT
    values), v in 0..2 and tag in 0..1, several blocks: the operator's matches and
    probabilities equal the brute-force enumeration."""
    check_rich(rich_scenario(seed))
