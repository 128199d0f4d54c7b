"""Hypothesis strategies shared by the tests: uncertain timestamps, and query texts."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from penumbra.timestamps import Histogram


@st.composite
def histograms(draw, max_buckets: int = 6, allow_zero: bool = True, origin=(-50.0, 50.0),
               min_width: float = 0.05, max_width: float = 20.0) -> Histogram:
    """A random histogram timestamp: 1..max_buckets buckets, widths and probabilities
    drawn independently (some buckets may have probability 0)."""
    n = draw(st.integers(1, max_buckets))
    start = draw(st.floats(*origin, allow_nan=False))
    widths = draw(st.lists(st.floats(min_width, max_width), min_size=n, max_size=n))
    weights = draw(st.lists(st.floats(0.0, 1.0) if allow_zero else st.floats(0.05, 1.0),
                            min_size=n, max_size=n))
    if sum(weights) <= 0:
        weights[0] = 1.0
    probs = np.array(weights) / sum(weights)
    return Histogram(start + np.concatenate(([0.0], np.cumsum(widths))), probs)


def random_histogram(rng: np.random.Generator, buckets: int, origin: float = 0.0) -> Histogram:
    """A random histogram for numpy-driven tests and benchmarks."""
    widths = rng.uniform(0.5, 10.0, buckets)
    return Histogram(origin + np.concatenate(([0.0], np.cumsum(widths))), rng.dirichlet(np.ones(buckets)))


# ---- queries drawn from the grammar's pieces, well-formed or not (what a careless analyst writes)

QUERY_STREAMS = {"sa": {"max_delay": 4, "pi": 6, "miss_prob": 0.1}, "sb": {"max_delay": 4, "pi": 6, "miss_prob": 0.1},
           "sc": {"max_delay": 4, "pi": 6}}
ATTRIBUTES = ("x", "k", "s")
NUMBERS = ("0", "1", "2.5", "-3", "1e3", "0.000001", "9" * 25, "1e999", "1e300", "9223372036854775807",
           "9223372036854775808")


def expressions(variables: tuple[str, ...]) -> st.SearchStrategy[str]:
    """Expressions of the common grammar over ``variables`` (and a stray ``Q``)."""
    names = st.sampled_from(variables + ("Q",))
    leaves = st.one_of(
        st.builds(lambda v, a: f"{v}.{a}", names, st.sampled_from(ATTRIBUTES)),
        st.sampled_from(NUMBERS), st.sampled_from(("'n1'", '"abc"', "TRUE", "false")),
        names,  # a bare variable
        st.builds(lambda f, v: f"{f}({v}.x)", st.sampled_from(("f", "abs", "window")), names))

    def extend(inner):
        return st.one_of(
            st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(("=", "!=", "<", ">=", "<>")), inner),
            st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(("+", "-", "*", "/", "%")), inner),
            st.builds(lambda a, op, b: f"{a} {op} {b}", inner, st.sampled_from(("AND", "OR")), inner),
            st.builds(lambda a: f"NOT {a}", inner), st.builds(lambda a: f"-{a}", inner),
            st.builds(lambda a: f"({a})", inner))
    return st.recursive(leaves, extend, max_leaves=8)


def nested(condition: str, depth: int) -> str:
    return "(" * depth + condition + ")" * depth if depth % 2 else "NOT " * depth + condition


windows = st.sampled_from(("0", "5", "2.5", "1e300", "-1", "9" * 30, "1e999", "20 s", "'x'"))
thresholds = st.sampled_from(("0.5", "1", "0.05", "0", "1.5", "1e-300"))


@st.composite
def joins(draw) -> str:
    conditions = draw(st.lists(expressions(("A", "B")), max_size=3))
    if draw(st.booleans()):
        conditions.append("A.k = B.k")
    if draw(st.integers(0, 9)) == 0:
        conditions.append(nested("A.x > 1", draw(st.sampled_from((3, 70, 300)))))
    where = " AND ".join([f"WINDOW(A, B) = {draw(windows)}"] + conditions)
    using = draw(st.sampled_from(("", " USING lazy", " USING lazy_lookup", " USING simple", " USING fast")))
    return f"SELECT * FROM SA A, SB B WHERE {where} WITH THRESHOLD {draw(thresholds)}{using}"


@st.composite
def patterns(draw) -> str:
    variables = ("a", "b", "c")[:draw(st.integers(2, 3))]
    components = ", ".join(f"S{'ABC'[i]} {v}" for i, v in enumerate(variables))
    conditions = draw(st.lists(expressions(variables), max_size=3))
    if draw(st.booleans()):
        conditions.append(f"{draw(st.sampled_from(('skip_till_any_match', 'skip_till_next_match')))}"
                          f"({', '.join(variables)})")
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    within = draw(st.sampled_from(("10", "3", "1e300", "0", "9" * 30, "1e999", "2 s")))
    tail = draw(st.sampled_from(("", " RETURN a", f" RETURN {variables[-1]}, a", " WITH CONFIDENCE 0.3",
                                 " WITH CONFIDENCE 2", " USING point", " USING any_state", " USING selectivity")))
    return f"PATTERN SEQ({components}){where} WITHIN {within}{tail}"


@st.composite
def sequences(draw) -> str:
    negated = draw(st.booleans())
    components = f"SA x, {'!' if negated else ''}SB y, SC z"
    conditions = draw(st.lists(expressions(("x", "y", "z")), max_size=2))
    where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
    default = draw(st.sampled_from(("", " DEFAULT y.k = x.k", " DEFAULT x.k = 1", " DEFAULT q.k = 2")))
    gap = draw(st.sampled_from(("", " GAP z = exponential(4)", " GAP z = uniform(1, 5)", " GAP z = f(1)",
                                " GAP x = exponential(4)")))
    within = draw(st.sampled_from(("20", "1", "0", "2.5", "1e300", "9" * 30)))
    return f"SEQUENCE({components}){where}{default}{gap} WITHIN {within} THRESHOLD {draw(thresholds)}"


def queries() -> st.SearchStrategy[str]:
    """Query texts of the three forms over the streams sa, sb and sc (:data:`QUERY_STREAMS`)."""
    return st.one_of(joins(), patterns(), sequences())
