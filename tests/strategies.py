"""Hypothesis strategies for uncertain timestamps, shared by the unit tests."""

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
