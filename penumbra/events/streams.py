"""Stream parameters, keyed by stream name, and the gap densities a stream or a query
declares; decoded and validated from the stream-parameter object of the contract."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..errors import ValidationError
from ..timestamps import MAX_BUCKETS, Histogram, finite_number
from .validation import _expect_object, _name, _reject_unknown

__all__ = ["GAP_FAMILIES", "StreamParams", "Streams", "gap_pmf", "gap_problem", "parse_streams"]


@dataclass(frozen=True)
class StreamParams:
    """Parameters of one stream (PTJoin, Definitions 4-6).

    ``templates`` are the template histograms phi (Definition 4); ``max_delay`` is D, the
    longest transmission delay (Definition 6); ``pi`` / ``rho`` the declared longest /
    shortest length of an explicit timestamp (Definition 5); ``miss_prob`` the
    probability that an event of the stream is lost (AYAC's epsilon); ``gap`` the
    density f of the time from the previous positive component of a ``SEQUENCE`` query
    to an event of this stream (AYAC section 3), as ``(family, params)`` of
    :data:`GAP_FAMILIES` (None: learned online).

    A stream that declares templates and no ``pi`` carries template timestamps only
    (what Theorem 4's tight buffers assume); declaring ``pi`` as well admits explicit ones.
    """

    name: str
    templates: Mapping[str, Histogram] = field(default_factory=dict)
    max_delay: float = 0.0
    pi: float | None = None
    rho: float | None = None
    miss_prob: float = 0.0
    gap: tuple[str, tuple[float, ...]] | None = None

    @property
    def longest(self) -> float | None:
        """pi: the longest timestamp the stream can carry (declared or from its templates)."""
        lengths = [h.length for h in self.templates.values()] + ([self.pi] if self.pi is not None else [])
        return max(lengths) if lengths else None

    @property
    def shortest(self) -> float | None:
        """rho: the shortest timestamp the stream can carry (declared or from its templates)."""
        lengths = [h.length for h in self.templates.values()] + ([self.rho] if self.rho is not None else [])
        return min(lengths) if lengths else None

    @property
    def template_only(self) -> bool:
        return bool(self.templates) and self.pi is None

    def too_wide(self, length: float) -> str | None:
        """Why a timestamp ``length`` long cannot be of this stream (longer than its declared
        pi, Definition 6 of the PTJoin paper), or None."""
        if self.pi is not None and length > self.pi * (1 + 1e-12):
            return f"length {length!r} exceeds the stream's pi {self.pi!r}"
        return None


class Streams(Mapping[str, StreamParams]):
    """Stream parameters keyed by stream name; names match case-insensitively, as in queries."""

    def __init__(self, params: Iterable[StreamParams] = ()):
        self._by_key: dict[str, StreamParams] = {}
        for p in params:
            key = p.name.casefold()
            if key in self._by_key:
                raise ValidationError(p.name, f"stream named twice (names are case-insensitive): "
                                      f"{self._by_key[key].name!r} and {p.name!r}")
            self._by_key[key] = p

    def __getitem__(self, name: str) -> StreamParams:
        return self._by_key[name.casefold()]

    def __iter__(self) -> Iterator[str]:
        return (p.name for p in self._by_key.values())

    def __len__(self) -> int:
        return len(self._by_key)

    def get_or_default(self, name: str) -> StreamParams:
        """The stream's parameters, or the defaults for a stream with none declared."""
        return self._by_key.get(name.casefold()) or StreamParams(name)

    def to_json(self) -> dict:
        out = {}
        for p in self._by_key.values():
            entry: dict[str, Any] = {"max_delay": p.max_delay}
            if p.templates:
                entry["templates"] = {k: h.to_json() for k, h in p.templates.items()}
            for key in ("pi", "rho"):
                if getattr(p, key) is not None:
                    entry[key] = getattr(p, key)
            if p.miss_prob:
                entry["miss_prob"] = p.miss_prob
            if p.gap is not None:
                entry["gap"] = _gap_to_json(*p.gap)
            out[p.name] = entry
        return out


def _non_negative(value: Any, field_name: str) -> float:
    number = finite_number(value, field_name)
    if number < 0:
        raise ValidationError(field_name, f"must be >= 0, got {number!r}")
    return number


def _stream_params(name: str, value: Any) -> StreamParams:
    spec = _expect_object(value, name)
    _reject_unknown(spec, {"templates", "max_delay", "pi", "rho", "miss_prob", "gap"}, name)
    templates: dict[str, Histogram] = {}
    for key, template in _expect_object(spec.get("templates", {}), f"{name}.templates").items():
        where = f"{name}.templates.{key}"
        _name(key, where)
        body = _expect_object(template, where)
        _reject_unknown(body, {"edges", "probs"}, where)
        if set(body) != {"edges", "probs"}:
            raise ValidationError(where, "a template needs both edges and probs")
        try:
            templates[key] = Histogram(body["edges"], body["probs"])
        except ValidationError as error:
            raise error.within(where) from None
        if not math.isfinite(templates[key].length):
            # every bucket fits in a float, but a timestamp's length (pi) would not
            raise ValidationError(f"{where}.edges", f"spans more than a float holds: from "
                                  f"{templates[key].lo!r} to {templates[key].hi!r}")
    max_delay = _non_negative(spec.get("max_delay", 0.0), f"{name}.max_delay")
    pi = _non_negative(spec["pi"], f"{name}.pi") if "pi" in spec else None
    rho = _non_negative(spec["rho"], f"{name}.rho") if "rho" in spec else None
    if pi is not None and rho is not None and rho > pi:
        raise ValidationError(f"{name}.rho", f"must be <= pi, got rho={rho!r}, pi={pi!r}")
    miss_prob = _non_negative(spec.get("miss_prob", 0.0), f"{name}.miss_prob")
    if miss_prob >= 1:
        raise ValidationError(f"{name}.miss_prob", f"must be < 1, got {miss_prob!r}")
    gap = _gap(spec["gap"], f"{name}.gap") if "gap" in spec else None
    return StreamParams(name, MappingProxyType(templates), max_delay, pi, rho, miss_prob, gap)


#: Gap densities (AYAC section 3) and their number of parameters (None: a bin width
#: and one or more weights), as written in a query's GAP clause or a stream's "gap".
GAP_FAMILIES = {"uniform": 2, "exponential": 1, "histogram": None}


def gap_problem(family: str, params: Sequence[float]) -> str | None:
    """What is wrong with the parameters of a gap density, or None."""
    if family == "uniform":
        lo, hi = params
        if lo != int(lo) or hi != int(hi) or not 1 <= lo <= hi:
            return f"uniform(lo, hi) needs integers 1 <= lo <= hi, got {lo:g}, {hi:g}"
    elif family == "exponential":
        if params[0] <= 0:
            return f"exponential(mean) needs mean > 0, got {params[0]:g}"
    else:
        width, weights = params[0], params[1:]
        if width != int(width) or width < 1:
            return f"histogram(width, ...) needs an integer width >= 1, got {width:g}"
        if min(weights) < 0 or sum(weights) <= 0:
            return "histogram weights must be >= 0 and not all 0"
    return None


def gap_pmf(family: str, params: Sequence[float], window: int) -> np.ndarray:
    """A gap density given in a query (``GAP z = exponential(40)``) on gaps 1..W-1.

    ``uniform(lo, hi)``: equal mass on lo..hi; ``exponential(mean)``: mass proportional
    to exp(-d / mean); ``histogram(width, w_1, ..., w_n)``: mass w_k spread evenly on the
    gaps of bin k, ((k-1) width, k width]. Mass beyond the window is cut and the rest
    renormalised; a density with no mass inside the window is an error.
    """
    gaps = np.arange(window + 1, dtype=float)
    if family == "uniform":
        lo, hi = params
        mass = ((gaps >= lo) & (gaps <= hi)).astype(float)
    elif family == "exponential":
        # exp(-(d - 1) / mean): gap 1 keeps mass 1 however small the mean (the other
        # gaps' mass then underflows to 0 through an infinite exponent)
        with np.errstate(over="ignore"):
            mass = np.exp(-np.maximum(gaps - 1, 0) / params[0])
    elif family == "histogram":
        # weights scaled by the largest: the same density, and sums that cannot overflow
        width, weights = int(params[0]), np.asarray(params[1:], dtype=float)
        weights = weights / weights.max() if weights.max() > 0 else weights
        bins = np.ceil(gaps / width).astype(int) - 1
        inside = (bins >= 0) & (bins < len(weights))
        mass = np.where(inside, weights[np.clip(bins, 0, len(weights) - 1)] / width, 0.0)
    else:
        raise ValueError(f"unknown gap density {family!r}")
    mass[0] = 0.0
    mass[window:] = 0.0
    total = mass.sum()
    if total <= 0:
        shown = ", ".join(f"{p:g}" for p in params)
        raise ValueError(f"{family}({shown}) puts no mass on gaps 1..{window - 1} (inside the window)")
    return mass / total


def _gap(value: Any, where: str) -> tuple[str, tuple[float, ...]]:
    """``{"uniform": [lo, hi]}``, ``{"exponential": mean}`` or
    ``{"histogram": {"width": w, "weights": [...]}}``."""
    spec = _expect_object(value, where)
    if len(spec) != 1 or next(iter(spec)) not in GAP_FAMILIES:
        raise ValidationError(where, "must name one density: {\"uniform\": [lo, hi]}, "
                              "{\"exponential\": mean} or {\"histogram\": {\"width\": w, \"weights\": [...]}}")
    family, body = next(iter(spec.items()))
    where = f"{where}.{family}"
    if family == "uniform":
        if not isinstance(body, list) or len(body) != 2:
            raise ValidationError(where, "must be [lo, hi]")
        params = [finite_number(v, f"{where}[{n}]") for n, v in enumerate(body)]
    elif family == "exponential":
        params = [finite_number(body, where)]
    else:
        body = _expect_object(body, where)
        _reject_unknown(body, {"width", "weights"}, where)
        weights = body.get("weights")
        if not isinstance(weights, list) or not weights or len(weights) > MAX_BUCKETS:
            raise ValidationError(f"{where}.weights", f"must be a list of 1 to {MAX_BUCKETS} numbers")
        params = [finite_number(body.get("width"), f"{where}.width")] + \
                 [finite_number(v, f"{where}.weights[{n}]") for n, v in enumerate(weights)]
    problem = gap_problem(family, params)
    if problem:
        raise ValidationError(where, problem)
    return family, tuple(float(v) for v in params)


def _gap_to_json(family: str, params: tuple[float, ...]) -> dict:
    if family == "uniform":
        return {"uniform": list(params)}
    if family == "exponential":
        return {"exponential": params[0]}
    return {"histogram": {"width": params[0], "weights": list(params[1:])}}


def parse_streams(obj: Any) -> Streams:
    """Decode and validate the stream-parameter object keyed by stream name."""
    spec = _expect_object(obj, "streams")
    return Streams(_stream_params(_name(name, name), value) for name, value in spec.items())
