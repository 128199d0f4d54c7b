"""Uncertain timestamps.

Two readings of an event's occurrence time:

* :class:`Histogram` -- a histogram timestamp (Definition 1 of the PTJoin paper):
  buckets ``[e_k, e_{k+1})`` with probability ``p_k`` each, uniform inside a bucket.
  Joins read every timestamp this way (continuous time).
* :class:`Interval` -- ``[lo, hi]`` as written by a client. Joins read it as the
  uniform histogram over ``[lo, hi]``; pattern and lossy queries read it on a discrete
  grid (the instants ``lo, lo + unit, ..., hi``), uniform or weighted by ``pmf``.

:class:`HistogramBlock` packs many histograms into two numpy arrays so the
probability kernels evaluate a whole micro-batch of pairs at once.

>>> h = Histogram([0, 20, 30, 40], [0.1, 0.3, 0.6])
>>> h.shift(60 - h.hi).edges.tolist()      # Example 3: detected at 60 by sensor s1
[20.0, 40.0, 50.0, 60.0]
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .errors import ValidationError

__all__ = ["Histogram", "HistogramBlock", "Interval", "MAX_BUCKETS", "PROB_TOLERANCE"]

#: Probabilities may sum to 1 within this tolerance; they are then renormalised.
PROB_TOLERANCE = 1e-9
#: Largest number of buckets (or grid points of a pmf) one timestamp may have.
MAX_BUCKETS = 4096
_CERTAIN = np.ones(1)


def finite_number(value: object, field: str) -> float:
    """``value`` as a float; a clear error for bools, strings, NaN and infinities."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ValidationError(field, f"must be a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise ValidationError(field, "must be finite, got an integer beyond the range of a float") from None
    if not math.isfinite(number):
        raise ValidationError(field, f"must be finite, got {value!r}")
    return number


def not_continuous(lo: float, hi: float) -> str:
    """Why the interval ``[lo, hi]`` (finite floats, ``lo >= hi``) has no continuous reading:
    the message of the error its field ``hi`` is refused with."""
    return f"must be greater than lo for a continuous interval, got lo={lo!r}, hi={hi!r}"


def number_array(values: object, field: str, *, min_len: int = 1) -> np.ndarray:
    """A list of finite numbers as a float64 array, checked element by element."""
    if not isinstance(values, (list, tuple, np.ndarray)):
        raise ValidationError(field, f"must be a list of numbers, got {type(values).__name__}")
    if len(values) < min_len:
        raise ValidationError(field, f"must have at least {min_len} element(s), got {len(values)}")
    if len(values) > MAX_BUCKETS + 1:
        raise ValidationError(field, f"too long: {len(values)} elements, at most {MAX_BUCKETS + 1}")
    if isinstance(values, np.ndarray) and values.dtype.kind in "fiu":
        array = values.astype(np.float64, copy=True)
        bad = np.flatnonzero(~np.isfinite(array))
        if bad.size:
            raise ValidationError(f"{field}[{bad[0]}]", f"must be finite, got {float(array[bad[0]])!r}")
        return array
    return np.array([finite_number(v, f"{field}[{k}]") for k, v in enumerate(values)],
                    dtype=np.float64)


def probability_vector(values: object, field: str) -> np.ndarray:
    """Non-negative probabilities summing to 1 (within :data:`PROB_TOLERANCE`), renormalised."""
    probs = number_array(values, field)
    negative = np.flatnonzero(probs < 0)
    if negative.size:
        raise ValidationError(f"{field}[{negative[0]}]",
                              f"probabilities must be >= 0, got {float(probs[negative[0]])!r}")
    total = math.fsum(probs.tolist())
    if abs(total - 1.0) > PROB_TOLERANCE:
        raise ValidationError(field, f"must sum to 1 (within {PROB_TOLERANCE:g}), sums to {total!r}")
    return probs / total


class Histogram:
    """A histogram timestamp ``H = ((I_1, p_1), ..., (I_n, p_n))`` (PTJoin, Definition 1).

    ``edges`` are the ``n + 1`` strictly increasing bucket bounds, ``probs`` the ``n``
    bucket probabilities. Immutable; arrays are read-only.

    >>> Histogram.uniform(100, 120).cdf(105)
    0.25
    """

    __slots__ = ("edges", "probs")

    def __init__(self, edges: Sequence[float] | np.ndarray, probs: Sequence[float] | np.ndarray):
        edges = number_array(edges, "edges", min_len=2)
        with np.errstate(over="ignore"):
            steps = np.diff(edges)
        flat = np.flatnonzero(steps <= 0)
        if flat.size:
            k = flat[0] + 1
            raise ValidationError(f"edges[{k}]", f"edges must be strictly increasing, "
                                  f"got {float(edges[k])!r} after {float(edges[k - 1])!r}")
        if not np.isfinite(steps).all():
            raise ValidationError("edges", f"spans more than a float holds: from {float(edges[0])!r} "
                                           f"to {float(edges[-1])!r}")
        probs = probability_vector(probs, "probs")
        if len(probs) != len(edges) - 1:
            raise ValidationError("probs", f"needs one probability per bucket: "
                                  f"{len(edges) - 1} bucket(s), {len(probs)} probabilities")
        edges.flags.writeable = False
        probs.flags.writeable = False
        self.edges = edges
        self.probs = probs

    @classmethod
    def _checked(cls, edges: np.ndarray, probs: np.ndarray) -> Histogram:
        """A histogram from arrays already known to be valid."""
        histogram = cls.__new__(cls)
        edges.flags.writeable = False
        probs.flags.writeable = False
        histogram.edges = edges
        histogram.probs = probs
        return histogram

    @classmethod
    def uniform(cls, lo: float, hi: float) -> Histogram:
        """The uniform distribution over ``[lo, hi]`` (an interval timestamp), ``lo < hi``."""
        lo = finite_number(lo, "lo")
        hi = finite_number(hi, "hi")
        if not lo < hi:
            raise ValidationError("hi", not_continuous(lo, hi))
        return cls._checked(np.array([lo, hi]), _CERTAIN.copy())

    @classmethod
    def from_template(cls, template: Histogram, detected: float) -> Histogram:
        """``H = phi + t - max(phi)``: the occurrence time of an event detected at ``t`` (Example 3)."""
        return template.shift(finite_number(detected, "detected") - template.hi)

    @property
    def lo(self) -> float:
        """``min(H)``."""
        return float(self.edges[0])

    @property
    def hi(self) -> float:
        """``max(H)``."""
        return float(self.edges[-1])

    @property
    def length(self) -> float:
        """``len(H) = max(H) - min(H)``."""
        return self.hi - self.lo

    @property
    def buckets(self) -> int:
        """``|H|``, the number of buckets."""
        return len(self.probs)

    def shift(self, x: float) -> Histogram:
        """``H + x``."""
        return Histogram._checked(self.edges + float(x), self.probs)

    def cdf(self, t):
        """``P(X <= t)``, piecewise linear; ``t`` may be a scalar or an array."""
        cumulative = np.concatenate(([0.0], np.cumsum(self.probs)))
        cumulative[-1] = 1.0
        value = np.interp(t, self.edges, cumulative)
        return float(value) if np.ndim(value) == 0 else value

    def mean(self) -> float:
        """``E[X]``."""
        return float(np.dot(self.probs, (self.edges[:-1] + self.edges[1:]) / 2))

    def to_json(self) -> dict:
        return {"edges": self.edges.tolist(), "probs": self.probs.tolist()}

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Histogram) and np.array_equal(self.edges, other.edges)
                and np.array_equal(self.probs, other.probs))

    def __hash__(self) -> int:
        return hash((self.edges.tobytes(), self.probs.tobytes()))

    def __repr__(self) -> str:
        return f"Histogram(edges={self.edges.tolist()}, probs={self.probs.tolist()})"


@dataclass(frozen=True)
class Interval:
    """``{"lo": a, "hi": b}`` with an optional ``pmf`` over the grid instants ``a, a+1, ..., b``.

    ``lo == hi`` is a certain instant (on the grid); joins need ``lo < hi``.
    """

    lo: float
    hi: float
    pmf: tuple[float, ...] | None = None

    def __post_init__(self):
        lo = finite_number(self.lo, "lo")
        hi = finite_number(self.hi, "hi")
        if lo > hi:
            raise ValidationError("hi", f"must be >= lo, got lo={lo!r}, hi={hi!r}")
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        if self.pmf is not None:
            span = hi - lo
            if span == math.inf:     # two finite bounds further apart than any float
                raise ValidationError("pmf", f"too long: lo={lo!r} to hi={hi!r} is beyond {MAX_BUCKETS} instants")
            if span != round(span):
                raise ValidationError("pmf", f"needs an integral hi - lo (one weight per unit "
                                      f"instant), got hi - lo = {span!r}")
            if span + 1 > MAX_BUCKETS:
                raise ValidationError("pmf", f"too long: {int(span) + 1} instants, at most {MAX_BUCKETS}")
            weights = probability_vector(self.pmf, "pmf")
            if len(weights) != int(span) + 1:
                raise ValidationError("pmf", f"needs hi - lo + 1 = {int(span) + 1} weights, "
                                      f"got {len(weights)}")
            object.__setattr__(self, "pmf", tuple(weights.tolist()))

    @classmethod
    def _checked(cls, lo: float, hi: float) -> Interval:
        """An interval without a pmf from floats already known to be finite with ``lo <= hi``."""
        interval = object.__new__(cls)
        fields = interval.__dict__
        fields["lo"], fields["hi"], fields["pmf"] = lo, hi, None
        return interval

    @property
    def length(self) -> float:
        return self.hi - self.lo

    def as_histogram(self) -> Histogram:
        """The continuous reading: uniform over ``[lo, hi]``."""
        if self.pmf is not None:
            raise ValidationError("pmf", "a weighted interval is read on a discrete grid only; "
                                  "give a join an edges/probs histogram instead")
        return Histogram.uniform(self.lo, self.hi)

    def grid(self, unit: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """The discrete reading: instants ``lo, lo + unit, ..., hi`` and their probabilities."""
        steps = self.length / unit
        if abs(steps - round(steps)) > 1e-9 * max(1.0, steps):
            raise ValidationError("hi", f"hi - lo = {self.length!r} is not a multiple of the "
                                  f"time unit {unit!r}")
        count = int(round(steps)) + 1
        if count > MAX_BUCKETS:
            raise ValidationError("hi", f"too many instants on the grid: {count}, at most {MAX_BUCKETS}")
        if self.pmf is not None:
            if unit != 1.0:
                raise ValidationError("pmf", f"weights are per unit instant; the query's time "
                                      f"unit is {unit!r}")
            weights = np.array(self.pmf)
        else:
            weights = np.full(count, 1.0 / count)
        return self.lo + unit * np.arange(count), weights

    def to_json(self) -> dict:
        out = {"lo": self.lo, "hi": self.hi}
        if self.pmf is not None:
            out["pmf"] = list(self.pmf)
        return out


class HistogramBlock:
    """Many histogram timestamps as arrays, one column per histogram.

    ``edges`` is (K+1, N) and ``probs`` (K, N): bucket-major, so the kernels work on
    contiguous rows of N values. Histograms with fewer than K buckets are padded with
    zero-width, zero-probability buckets at their max, which change no probability.
    A block of one histogram pairs with a block of N in the kernels.
    """

    __slots__ = ("edges", "probs", "_derived")

    def __init__(self, edges: np.ndarray, probs: np.ndarray):
        self.edges = np.ascontiguousarray(edges, dtype=np.float64)
        self.probs = np.ascontiguousarray(probs, dtype=np.float64)
        if self.edges.ndim != 2 or self.probs.ndim != 2 or \
                self.edges.shape != (self.probs.shape[0] + 1, self.probs.shape[1]):
            raise ValueError(f"edges {self.edges.shape} and probs {self.probs.shape} "
                             f"are not (K+1, N) and (K, N)")
        self._derived: dict[str, np.ndarray] = {}

    @classmethod
    def from_histograms(cls, histograms: Iterable[Histogram], buckets: int | None = None) -> HistogramBlock:
        histograms = list(histograms)
        counts = [len(h.probs) for h in histograms]
        width = max(counts + [buckets or 1])
        edges = np.empty((width + 1, len(histograms)))
        probs = np.zeros((width, len(histograms)))
        # the histograms of each bucket count copied in together: one concatenation of their
        # arrays rather than three small copies per histogram
        by_count: dict[int, list[int]] = {}
        for col, n in enumerate(counts):
            by_count.setdefault(n, []).append(col)
        for n, cols in by_count.items():
            group = [histograms[col] for col in cols]
            columns = slice(None) if len(cols) == len(histograms) else cols
            group_edges = np.concatenate([h.edges for h in group]).reshape(len(group), n + 1).T
            edges[: n + 1, columns] = group_edges
            edges[n + 1:, columns] = group_edges[-1]
            probs[:n, columns] = np.concatenate([h.probs for h in group]).reshape(len(group), n).T
        return cls(edges, probs)

    @classmethod
    def uniform(cls, lo: np.ndarray, hi: np.ndarray) -> HistogramBlock:
        """A block of interval timestamps, uniform over ``[lo_r, hi_r]``."""
        lo = np.asarray(lo, dtype=np.float64)
        hi = np.asarray(hi, dtype=np.float64)
        return cls(np.stack([lo, hi]), np.ones((1, lo.shape[0])))

    @classmethod
    def concat(cls, blocks: Sequence[HistogramBlock]) -> HistogramBlock:
        """One block of all the columns of ``blocks``, padded to the widest."""
        width = max(b.buckets for b in blocks)
        return cls(np.concatenate([b.padded(width).edges for b in blocks], axis=1),
                   np.concatenate([b.padded(width).probs for b in blocks], axis=1))

    def padded(self, buckets: int) -> HistogramBlock:
        """The same histograms with ``buckets`` buckets each (padding at the max)."""
        extra = buckets - self.buckets
        if extra <= 0:
            return self
        return HistogramBlock(np.concatenate([self.edges, np.repeat(self.edges[-1:], extra, axis=0)]),
                              np.concatenate([self.probs, np.zeros((extra, len(self)))]))

    def __len__(self) -> int:
        return self.edges.shape[1]

    @property
    def buckets(self) -> int:
        return self.probs.shape[0]

    @property
    def lo(self) -> np.ndarray:
        return self.edges[0]

    @property
    def hi(self) -> np.ndarray:
        return self.edges[-1]

    def shift(self, x) -> HistogramBlock:
        """Every histogram shifted by ``x`` (a scalar or one value per histogram)."""
        return HistogramBlock(self.edges + x, self.probs)

    def take(self, columns) -> HistogramBlock:
        return HistogramBlock(self.edges[:, columns], self.probs[:, columns])

    def histogram(self, column: int) -> Histogram:
        """Column ``column`` as a :class:`Histogram`, padding removed."""
        edges = self.edges[:, column]
        keep = np.concatenate(([True], np.diff(edges) > 0))
        probs = self.probs[keep[1:], column]
        return Histogram(edges[keep], probs / probs.sum())

    def derived(self, name: str) -> np.ndarray:
        """Per-bucket arrays the kernels need, computed once per block: ``widths``,
        ``half_density`` (``p / 2 len``; 0 for padding) and ``density_jumps``
        (``dens[k-1] - dens[k]`` at each edge ``k``); and per histogram, as (1, N) rows,
        ``jump_mass`` (the jumps' absolute sum: how much the kernel's sum over edges may
        cancel) and where its mass lies: ``support_lo`` and ``support_hi``, its edges but
        for the zero-probability buckets at either end."""
        if not self._derived:
            widths = np.diff(self.edges, axis=0)
            with np.errstate(divide="ignore", invalid="ignore"):
                density = np.where(widths > 0, self.probs / widths, 0.0)
            zero = np.zeros((1, len(self)))
            jumps = -np.diff(np.concatenate([zero, density, zero]), axis=0)
            self._derived.update(widths=widths, half_density=0.5 * density, density_jumps=jumps,
                                 jump_mass=np.abs(jumps).sum(axis=0, keepdims=True))
        if name not in self._derived:
            self._derived.update(self._support())
        return self._derived[name]

    def _support(self) -> dict[str, np.ndarray]:
        """``support_lo``/``support_hi`` and ``narrower`` (whether some histogram's mass is
        narrower than its edges: a zero-probability bucket of positive width at an end)."""
        empty = self.probs <= 0
        if not empty.any():          # (the common block: no bucket without mass)
            return {"support_lo": self.edges[:1], "support_hi": self.edges[-1:], "narrower": False}
        columns = np.arange(len(self))
        first = np.argmax(~empty, axis=0)
        last = len(self.probs) - 1 - np.argmax(~empty[::-1], axis=0)
        lo, hi = self.edges[first, columns][None, :], self.edges[last + 1, columns][None, :]
        return {"support_lo": lo, "support_hi": hi,
                "narrower": bool(np.any(lo[0] != self.edges[0]) or np.any(hi[0] != self.edges[-1]))}

    def columns(self, start: int, stop: int, *names: str) -> list[np.ndarray]:
        """Columns ``start:stop`` of the named arrays; a one-histogram block repeats its column."""
        out = []
        for name in names:
            values = getattr(self, name) if name in ("edges", "probs") else self.derived(name)
            out.append(np.broadcast_to(values, (values.shape[0], stop - start)) if len(self) == 1
                       else values[:, start:stop])
        return out
