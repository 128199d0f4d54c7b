"""The event, and the checks that make one from a decoded JSON object.

An event is one JSON object (one per line in ``.jsonl`` files, the same shape over
REST and in Redis)::

    {"stream": "seismic", "id": "s-17", "ts": {"lo": 100.0, "hi": 120.0},
     "attrs": {"region": "north", "value": 97.5}}

Bad input raises :class:`~penumbra.errors.ValidationError` naming the field.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import ValidationError
from ..timestamps import Histogram, Interval, finite_number
from .streams import StreamParams, Streams
from .validation import _VALID_NAMES, _expect_object, _json_type, _name, _reject_unknown

__all__ = ["Event", "event_to_json", "parse_event"]

MAX_ID_LENGTH = 256
MAX_ATTRS = 64
MAX_STRING_LENGTH = 4096

Scalar = str | int | float | bool | None


@dataclass(frozen=True)
class Event:
    """One event. ``ts`` is a :class:`Histogram` or an :class:`Interval`; ``template`` and
    ``detected`` are kept when the timestamp was resolved from a stream template."""

    stream: str
    id: str
    ts: Histogram | Interval
    attrs: Mapping[str, Scalar] = field(default_factory=dict)
    template: str | None = None
    detected: float | None = None

    @classmethod
    def _checked(cls, stream: str, event_id: str, ts: Histogram | Interval, attrs: Mapping[str, Scalar],
                 template: str | None = None, detected: float | None = None) -> Event:
        """An event from fields already validated."""
        event = object.__new__(cls)
        fields = event.__dict__
        fields["stream"], fields["id"], fields["ts"], fields["attrs"] = stream, event_id, ts, attrs
        fields["template"], fields["detected"] = template, detected
        return event

    @cached_property
    def histogram(self) -> Histogram:
        """The continuous reading of the timestamp (what joins use)."""
        if isinstance(self.ts, Histogram):
            return self.ts
        try:
            return self.ts.as_histogram()
        except ValidationError as error:
            raise error.within("ts") from None


# --- decoding -------------------------------------------------------------------------
#
# Every check runs on the exact JSON types first (``type(x) is dict``, ``str``, ...), which
# is what decoded JSON holds, and only then on the abstract ones (any Mapping, subclasses),
# so a decoded event pays for no ``isinstance`` chain; the error for a value is the same
# whichever way it is reached.

_EVENT_FIELDS = frozenset({"stream", "id", "ts", "attrs"})
_MISSING = object()
_NO_ATTRS: Mapping[str, Scalar] = MappingProxyType({})
_PLAIN_NUMBERS = (int, float)
_LARGEST = sys.float_info.max
#: orjson reads an integer literal beyond 64 bits as a float of this magnitude or more.
_WIDEST_INTEGER = float(2 ** 63)
#: Per template (by identity, the template kept with it): the detection times up to which
#: ``phi + t - max(phi)`` surely keeps its buckets apart.
_REACH: dict[int, tuple[Histogram, float]] = {}


def _template_reach(phi: Histogram) -> float:
    """The largest ``|t|`` surely safe to resolve ``phi`` at: below it a float's spacing
    stays under half the narrowest bucket, and every edge stays within half the largest
    float (past it the edges are checked one by one)."""
    found = _REACH.get(id(phi))
    if found is None or found[0] is not phi:
        if len(_REACH) > 4096:
            _REACH.clear()
        reach = min(float(np.diff(phi.edges).min()) * 2.0 ** 51 - phi.length,
                    _LARGEST / 2 - 2 * float(np.abs(phi.edges).max()))
        found = _REACH[id(phi)] = (phi, reach)
    return found[1]


def _resolved(phi: Histogram, name: str, detected: float) -> Histogram:
    """``phi + t - max(phi)``, or why not: at a detection time so large that its times
    would be beyond the floats, or its buckets collapse into one value."""
    if abs(detected) > _template_reach(phi):
        edges = phi.edges + (detected - phi.hi)
        if not np.isfinite(edges).all():
            raise ValidationError("detected", f"{detected!r} is too large for template {name!r}: its times "
                                              "would be beyond what a float holds")
        if not (np.diff(edges) > 0).all():
            raise ValidationError("detected", f"{detected!r} is too large for template {name!r}: its buckets "
                                              "would collapse into one time")
    return Histogram.from_template(phi, detected)


def _plain_interval(value: Any) -> Interval | None:
    """``{"lo": a, "hi": b}`` of plain finite numbers with ``a <= b`` and a finite length as
    an interval, without the full checks; ``None`` for anything else."""
    if type(value) is dict and len(value) == 2:
        lo, hi = value.get("lo"), value.get("hi")
        if type(lo) in _PLAIN_NUMBERS and type(hi) in _PLAIN_NUMBERS and -_LARGEST <= lo <= hi <= _LARGEST:
            lo, hi = float(lo), float(hi)
            if hi - lo <= _LARGEST:
                return Interval._checked(lo, hi)
    return None


def _finite_length(ts: Histogram | Interval) -> Histogram | Interval:
    """``ts``, whose length ``max - min`` must be a float too: two finite bounds further apart
    than any float (``-1e308`` to ``1e308``) leave every probability of it undefined."""
    if ts.length > _LARGEST:
        field_name = "hi" if isinstance(ts, Interval) else "edges"
        raise ValidationError(field_name, f"spans more than a float holds: from {ts.lo!r} to {ts.hi!r}")
    return ts


def _timestamp(value: Any, stream: str, streams: Streams | Mapping[str, StreamParams] | None
               ) -> tuple[Histogram | Interval, str | None, float | None]:
    interval = _plain_interval(value)
    if interval is not None:
        return interval, None, None
    ts = _expect_object(value, "ts")
    keys = set(ts)
    try:
        if keys <= {"lo", "hi", "pmf"} and {"lo", "hi"} <= keys:
            return _finite_length(Interval(ts["lo"], ts["hi"], ts.get("pmf"))), None, None
        if keys == {"edges", "probs"}:
            return _finite_length(Histogram(ts["edges"], ts["probs"])), None, None
        if keys == {"detected", "template"}:
            name = ts["template"]
            if not isinstance(name, str):
                raise ValidationError("template", f"must be a string, got {_json_type(name)}")
            params = None
            if streams is not None:
                params = streams.get_or_default(stream) if isinstance(streams, Streams) else streams.get(stream)
            templates = params.templates if params else {}
            if name not in templates:
                known = ", ".join(sorted(templates)) or "none declared"
                where = params.name if params else "this stream"
                raise ValidationError("template", f"unknown template {name!r} for stream "
                                      f"{where!r} (known: {known})")
            detected = finite_number(ts["detected"], "detected")
            return _resolved(templates[name], name, detected), name, detected
    except ValidationError as error:
        raise error.within("ts") from None
    raise ValidationError("ts", "must be one of {lo, hi[, pmf]}, {edges, probs} or "
                          f"{{detected, template}}; got fields {sorted(keys, key=str)}")


def _attrs(value: Any) -> Mapping[str, Scalar]:
    attrs = value if type(value) is dict else _expect_object(value, "attrs")
    if len(attrs) > MAX_ATTRS:
        raise ValidationError("attrs", f"too many attributes: {len(attrs)}, at most {MAX_ATTRS}")
    for key, item in attrs.items():
        if type(key) is not str or key not in _VALID_NAMES:
            _name(key, f"attrs.{key}")
        kind = type(item)
        if kind is int or kind is bool or item is None:
            continue
        if kind is float or isinstance(item, float):
            if not math.isfinite(item):
                raise ValidationError(f"attrs.{key}", f"must be finite, got {item!r}")
        elif kind is str or isinstance(item, str):
            if len(item) > MAX_STRING_LENGTH:
                raise ValidationError(f"attrs.{key}", f"string too long: {len(item)}, "
                                      f"at most {MAX_STRING_LENGTH}")
        elif not isinstance(item, int):
            raise ValidationError(f"attrs.{key}", f"must be a string, number, boolean or null, "
                                  f"got {_json_type(item)}")
    return MappingProxyType(dict(attrs)) if attrs else _NO_ATTRS


def parse_event(obj: Any, streams: Streams | Mapping[str, StreamParams] | None = None) -> Event:
    """Decode and validate one event object; template timestamps are resolved with ``streams``."""
    return _event(obj, streams, decoded=False)


def _event(obj: Any, streams: Streams | Mapping[str, StreamParams] | None, decoded: bool,
           block: _TemplateBlock | None = None, common: tuple | None = None) -> Event | None:
    """:func:`parse_event`; ``decoded``: ``obj`` was just decoded from JSON, so nobody else
    holds its attributes and they need no copy.

    The common event -- names already seen, an interval of plain numbers, scalar
    attributes -- is accepted in one pass over exact JSON types; anything else, valid or
    not, takes the full checks, which name the field at fault. With ``block``, a common
    event with a template timestamp is left to the block to resolve (None is returned).
    ``common``: the common event's fields, found already (``obj`` is then not needed)."""
    if common is None:
        common = _common(obj, streams)
    if common is None:
        return _checked_event(obj, streams)
    stream, event_id, interval, template, attrs = common
    attrs = MappingProxyType(attrs if decoded else dict(attrs)) if attrs else _NO_ATTRS
    if interval is not None:
        return Event._checked(stream, event_id, interval, attrs)
    phi, name, detected = template
    if block is not None:
        return block.defer(phi, stream, event_id, attrs, name, detected)
    return Event._checked(stream, event_id, phi.shift(detected - phi.hi), attrs, name, detected)


def _common(obj: Any, streams: Any) -> tuple[str, str, Interval | None, tuple | None, Mapping] | None:
    """The common event's fields -- stream, id, its interval or ``(phi, name, detected)``
    of its template, and its attributes as decoded -- when ``obj`` is one (names already
    seen, an interval of plain numbers or a template the stream declares, scalar
    attributes); ``None`` for anything else, valid or not, which takes the full checks."""
    if type(obj) is dict and 3 <= len(obj) <= 4:
        stream, event_id, attrs = obj.get("stream"), obj.get("id"), obj.get("attrs", _NO_ATTRS)
        if type(stream) is str and stream in _VALID_NAMES and type(event_id) is str \
                and 0 < len(event_id) <= MAX_ID_LENGTH and event_id.isprintable() \
                and len(obj) == (4 if attrs is not _NO_ATTRS else 3):
            ts = obj.get("ts")
            if type(ts) is dict and "template" in ts:
                interval, template = None, _plain_template(ts, stream, streams)
            else:
                interval, template = _plain_interval(ts), None
            if (interval is not None or template is not None) \
                    and (attrs is _NO_ATTRS or type(attrs) is dict and _plain_attrs(attrs)):
                return stream, event_id, interval, template, attrs
    return None


def _plain_template(value: Any, stream: str, streams: Any) -> tuple[Histogram, str, float] | None:
    """``{"detected": t, "template": name}`` with a plain finite number and a template the
    stream declares: the template phi, its name and ``t`` as a float, without the full
    checks (the timestamp is ``phi + t - max(phi)``); ``None`` for anything else."""
    if type(value) is dict and len(value) == 2 and type(streams) is Streams:
        detected, name = value.get("detected"), value.get("template")
        if type(detected) in _PLAIN_NUMBERS and -_LARGEST <= detected <= _LARGEST and type(name) is str:
            params = streams._by_key.get(stream.casefold())
            template = params.templates.get(name) if params is not None else None
            if template is not None and abs(detected) <= _template_reach(template):
                return template, name, float(detected)
    return None


class _TemplateBlock:
    """The template timestamps of a block of events, resolved together: for each template,
    one numpy operation gives every event's edges (row ``i`` of ``phi.edges + shifts[:, None]``
    is ``phi.edges + shifts[i]``, the same floats one event at a time gives)."""

    def __init__(self, out: list):
        self.out, self.index = out, 0
        self.pending: dict[int, tuple[Histogram, list[int], list[float], list[tuple]]] = {}

    def defer(self, phi: Histogram, stream: str, event_id: str, attrs, name: str, detected: float) -> None:
        entry = self.pending.get(id(phi))
        if entry is None:
            entry = self.pending[id(phi)] = (phi, [], [], [])
        entry[1].append(self.index)
        entry[2].append(detected)
        entry[3].append((stream, event_id, attrs, name))

    def resolve(self) -> None:
        out, checked, histogram = self.out, Event._checked, Histogram.__new__
        for phi, indices, detected, parts in self.pending.values():
            edges = phi.edges + (np.array(detected) - phi.hi)[:, None]
            edges.flags.writeable = False  # and so is every row of it
            for index, row, moment, (stream, event_id, attrs, name) in zip(indices, edges, detected, parts):
                ts = histogram(Histogram)
                ts.edges, ts.probs = row, phi.probs
                out[index] = checked(stream, event_id, ts, attrs, name, moment)
        self.pending.clear()


def _plain_attrs(attrs: dict) -> bool:
    """Whether every attribute has a name already seen and a value of an exact JSON scalar
    type within bounds (else :func:`_attrs` says what is wrong, or accepts it the long way).
    A float as wide as an integer beyond 64 bits takes the long way too: orjson reads such
    an integer as that float, so a line orjson read with one is read again (codec)."""
    if len(attrs) > MAX_ATTRS:
        return False
    for key, item in attrs.items():
        if key not in _VALID_NAMES:
            return False
        kind = type(item)
        if kind is float:
            if not -_WIDEST_INTEGER < item < _WIDEST_INTEGER:
                return False
        elif kind is str:
            if len(item) > MAX_STRING_LENGTH:
                return False
        elif not (kind is int or kind is bool or item is None):
            return False
    return True


def _checked_event(obj: Any, streams: Streams | Mapping[str, StreamParams] | None) -> Event:
    if type(obj) is not dict:
        obj = _expect_object(obj, "")
    if not _EVENT_FIELDS.issuperset(obj):
        _reject_unknown(obj, _EVENT_FIELDS, "")
    stream, event_id, ts = obj.get("stream", _MISSING), obj.get("id", _MISSING), obj.get("ts", _MISSING)
    if stream is _MISSING or event_id is _MISSING or ts is _MISSING:
        missing = next(name for name in ("stream", "id", "ts") if name not in obj)
        raise ValidationError(missing, "missing required field")
    if type(stream) is not str or stream not in _VALID_NAMES:
        _name(stream, "stream")
    if type(event_id) is not str or not 0 < len(event_id) <= MAX_ID_LENGTH or not event_id.isprintable():
        _check_id(event_id)
    ts, template, detected = _timestamp(ts, stream, streams)
    attrs = obj.get("attrs", _MISSING)
    return Event._checked(stream, event_id, ts, _NO_ATTRS if attrs is _MISSING else _attrs(attrs), template, detected)


def _check_id(value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError("id", f"must be a non-empty string, got {_json_type(value)}")
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError("id", f"too long: {len(value)} characters, at most {MAX_ID_LENGTH}")
    # an id comes back in matches, logs and the dashboard: no control, format (a
    # right-to-left override) or separator character that would change what is shown
    for at, char in enumerate(value):
        if not char.isprintable():
            raise ValidationError("id", f"must hold printable characters only: U+{ord(char):04X} at position {at}")


def event_to_json(event: Event) -> dict:
    """The event in the contract's JSON shape (a template timestamp stays a template)."""
    if event.template is not None:
        ts = {"detected": event.detected, "template": event.template}
    else:
        ts = event.ts.to_json()
    return {"stream": event.stream, "id": event.id, "ts": ts, "attrs": dict(event.attrs)}
