"""Reference computations of the AYAC model for the tests, written from section 3 term
by term (loops over gaps), independent of penumbra.lossy.model."""

from __future__ import annotations

import numpy as np


def F(pmf, T):
    """P(gap < T), summed term by term."""
    return sum(pmf[d] for d in range(1, T))


def not_happened_given_unobserved(pmf, eps, T):
    """S^N(T): the negative did not happen within T, given it was not observed."""
    f = F(pmf, T)
    return 1.0 if eps * f + 1 - f == 0 else (1 - f) / (eps * f + 1 - f)


def enumerate_run(run, T):
    """S_run(T): sum over every placement 0 < t_1 < ... < t_r < T of the missed positives
    of run (items with ``positive``, ``pmf``, ``miss_prob``), each gap from the previous
    positive, negatives scored over their segment."""
    positives = [k for k, c in enumerate(run) if c.positive]

    def negatives_between(lo, hi, length):
        return np.prod([not_happened_given_unobserved(c.pmf, c.miss_prob, length) for c in run[lo:hi]
                        if not c.positive]) if hi > lo else 1.0

    total = 0.0

    def place(index, previous_time, previous_component, weight):
        nonlocal total
        if index == len(positives):
            if T > previous_time:
                total += weight * negatives_between(previous_component + 1, len(run), T - previous_time)
            return
        k = positives[index]
        for t in range(previous_time + 1, T):
            w = run[k].miss_prob * run[k].pmf[t - previous_time]
            if w:
                place(index + 1, t, k, weight * w * negatives_between(previous_component + 1, k, t - previous_time))

    place(0, 0, -1, 1.0)
    return total
