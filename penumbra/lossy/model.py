"""The probabilistic model of AYAC (section 3) on the unit time grid.

Time is discrete (instants on the grid of unit 1; imprecise timestamps are summed over
their possible worlds in :mod:`.worlds`). A gap density f_i is a probability mass
function over the integer gaps d = 1, 2, ..., W - 1 between component e_i and the
positive component before it (the Markov property of section 3), stored as an array
``pmf`` indexed by d = 0..W with ``pmf[0] = 0``. Components of one complex
event are strictly ordered in time, so "e_i happens between e_{i-1} and e_{i+1}, T
apart" means its gap is below T, and the cumulative function the paper calls F_i(T) is

    F_i(T) = P(gap_i < T) = sum_{d < T} f_i(d)        (:func:`cdf_before`)

The scoring functions of section 3 are tables over T = 0..W (the paper's "lookup
tables"), each the probability that the components of one *run*, between two observed
positive components T apart, went unobserved as the query needs:

* S^P(T)  = eps F_i(T)                                  missing positive (3.1)
* S^N(T)  = (1 - F_i(T)) / (eps F_i(T) + 1 - F_i(T))   missing negative (3.2)
* S^{N...N}(T) = prod_k S^N_k(T)                       several negatives (3.3)
* S^PP, S^{N...NPN...N} and every other run by :func:`run_score`, one numeric form on
  the grid. It follows the Markov property: a missed positive e_m at gap t starts a new
  segment, so negatives before it are scored over t and those after it over the rest,

      S_run(T) = sum over 0 < t_1 < ... < t_r < T of
                 prod_j eps_j f_j(t_j - t_{j-1}) prod_{negatives n of segment s} S^N_n(len_s),

  giving S^PP(T) = eps_i eps_{i+1} P(gap_i + gap_{i+1} < T) and
  S^{N..NPN..N}(T) = eps sum_t prod S^N_before(t) f(t) prod S^N_after(T - t). (The paper
  prints f_{i+1}(t) F_i(t) and S^N(T) throughout, which measures every gap from the
  last observed component; that contradicts its own Markov definition of f_i, so the
  Markov form is used and reduces to the printed S^P, S^N and S^{N...N} exactly.)

:class:`GapHistogram` is the online estimator of f_i: a histogram of observed gaps with
a uniform prior, so it is usable before the first completed match.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = [
    "GapHistogram", "RunComponent", "cdf_before", "run_score",
    "s_negative", "s_negatives", "s_positive", "s_positive_pair", "s_positive_within_negatives",
]

#: Below this length a convolution is done directly (exact sums), above it by FFT.
_DIRECT_CONVOLUTION = 4096


def cdf_before(pmf: np.ndarray) -> np.ndarray:
    """F(T) = P(gap < T) for T = 0..W (section 3's F_i on the grid)."""
    return np.minimum(np.concatenate(([0.0], np.cumsum(pmf)[:-1])), 1.0)


def s_positive(pmf: np.ndarray, eps: float) -> np.ndarray:
    """S^P(T) = eps F_i(T): e_i happened within T and was missed (section 3.1)."""
    return eps * cdf_before(pmf)


def s_negative(pmf: np.ndarray, eps: float) -> np.ndarray:
    """S^N(T) = (1 - F_i(T)) / (eps F_i(T) + 1 - F_i(T)) (section 3.2): negative e_i did
    not happen, given that it was not observed. Where the denominator is 0 (eps = 0 and
    F = 1) nothing can go unobserved, so an unobserved negative did not happen: 1."""
    absent = 1.0 - cdf_before(pmf)
    unobserved = eps * (1.0 - absent) + absent
    safe = np.where(unobserved > 0, unobserved, 1.0)
    return np.where(unobserved > 0, absent / safe, 1.0)


def s_negatives(negatives: Sequence[tuple[np.ndarray, float]], window: int) -> np.ndarray:
    """S^{N...N}(T) = prod_k S^N_k(T) (section 3.3); 1 for no negatives."""
    score = np.ones(window + 1)
    for pmf, eps in negatives:
        score *= s_negative(pmf, eps)
    return score


@dataclass(frozen=True)
class RunComponent:
    """A component inside a run: positive (missed) or negative (not observed)."""

    positive: bool
    pmf: np.ndarray
    miss_prob: float


def _convolve(a: np.ndarray, b: np.ndarray, size: int) -> np.ndarray:
    """The first ``size`` terms of the convolution of ``a`` and ``b`` (non-negative)."""
    if size <= _DIRECT_CONVOLUTION:
        return np.convolve(a, b)[:size]
    length = 1 << (2 * size - 1).bit_length()
    out = np.fft.irfft(np.fft.rfft(a, length) * np.fft.rfft(b, length), length)[:size]
    return np.maximum(out, 0.0)


def run_score(run: Sequence[RunComponent], window: int) -> np.ndarray:
    """S_run(T), T = 0..W, for any run of missed positives and unobserved negatives
    between two observed positive components (see the module docstring).

    Dynamic programming over the missed positives: ``reach[t]`` is the score of the run
    so far with its last missed positive at gap t; each missed positive convolves it with
    the kernel eps_m f_m(d) prod S^N(d) of its segment. Two convolutions have a closed
    form, exact where an FFT (long windows) would round: the first missed positive's, of
    the unit impulse at gap 0 (``reach`` is its kernel), and the closing one without
    negatives, of 1 on every gap > 0 (``reach`` summed below T). The tables of a
    ``SEQUENCE`` with at most one missed positive per run then need no convolution at all.
    """
    size = window + 1
    reach = None            # the unit impulse at gap 0: no missed positive yet
    negatives: list[tuple[np.ndarray, float]] = []
    for component in run:
        if component.positive:
            kernel = component.miss_prob * component.pmf[:size] * s_negatives(negatives, window)
            reach = kernel if reach is None else _convolve(reach, kernel, size)
            negatives = []
        else:
            negatives.append((component.pmf, component.miss_prob))
    closing = s_negatives(negatives, window)
    closing[0] = 0.0
    if reach is None:
        return closing          # S^{N...N}: nothing to convolve
    if not negatives:
        return cdf_before(reach)
    return np.clip(_convolve(reach, closing, size), 0.0, 1.0)


def s_positive_pair(first: RunComponent, second: RunComponent, window: int) -> np.ndarray:
    """S^PP(T) = eps_i eps_{i+1} P(gap_i + gap_{i+1} < T) (section 3.3, Markov form)."""
    return run_score([first, second], window)


def s_positive_within_negatives(before: Sequence[RunComponent], missed: RunComponent,
                                after: Sequence[RunComponent], window: int) -> np.ndarray:
    """S^{N...NPN...N}(T) (section 3.3, Markov form): negatives ``before`` the missed
    positive are scored over its gap t, those ``after`` over T - t."""
    return run_score([*before, missed, *after], window)


class GapHistogram:
    """Online histogram estimate of a gap density f_i (section 3: "estimated from the
    history of previously detected complex events").

    Gaps 1..W-1 fall in ``bins`` equal bins; the estimate is the posterior mean under a
    uniform prior of weight ``prior`` pseudo-observations spread over the gaps:

        f(d) = (prior / (W - 1) + count(bin(d)) / width(bin(d))) / (prior + n).
    """

    def __init__(self, window: int, bins: int = 64, prior: float = 1.0):
        if window < 2:
            raise ValueError("a gap density needs a window of at least 2 time units")
        self.window = window
        self.prior = prior
        self.edges = np.unique(np.linspace(1, window, min(bins, window - 1) + 1).round().astype(int))
        self.counts = np.zeros(len(self.edges) - 1)

    def add(self, gaps: np.ndarray) -> None:
        """Record observed gaps (values outside 1..W-1 are ignored)."""
        gaps = np.asarray(gaps)
        gaps = gaps[(gaps >= 1) & (gaps < self.window)]
        np.add.at(self.counts, np.searchsorted(self.edges, gaps, side="right") - 1, 1.0)

    @property
    def observations(self) -> int:
        return int(self.counts.sum())

    def pmf(self) -> np.ndarray:
        pmf = np.zeros(self.window + 1)
        widths = np.diff(self.edges)
        per_gap = np.repeat(self.counts / widths, widths)
        pmf[1:self.window] = (self.prior / (self.window - 1) + per_gap) / (self.prior + self.counts.sum())
        return pmf
