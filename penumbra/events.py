"""Events and stream parameters, and their JSON codec (DESIGN.md, "Public contracts").

An event is one JSON object (one per line in ``.jsonl`` files, the same shape over
REST and in Redis)::

    {"stream": "seismic", "id": "s-17", "ts": {"lo": 100.0, "hi": 120.0},
     "attrs": {"region": "north", "value": 97.5}}

Bad input raises :class:`~penumbra.errors.ValidationError` naming the field; reading a
batch keeps every valid event and reports each rejected one with its line.
:func:`parse_events` reads a block (JSON lines as text or bytes, or decoded objects) for the
Spark pipeline and the service: events out, and a rejection per bad input, never a raise.
Lines are decoded with orjson where it is installed, with the json module's results.

>>> streams = parse_streams({"seismic": {"templates": {"s1": {"edges": [0, 20, 30, 40],
...                                                    "probs": [0.1, 0.3, 0.6]}}}})
>>> e = parse_event({"stream": "seismic", "id": "a1", "ts": {"detected": 60, "template": "s1"}},
...                 streams)
>>> e.histogram.edges.tolist(), e.template
([20.0, 40.0, 50.0, 60.0], 's1')
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import json
import math
import re
import sys
from collections.abc import Set
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Iterator, Mapping, NamedTuple, Sequence

import numpy as np

from .errors import ValidationError
from .timestamps import MAX_BUCKETS, Histogram, Interval, finite_number

try:
    import orjson
except ImportError:  # the json module reads everything orjson would, about 4x slower
    orjson = None

__all__ = [
    "GAP_FAMILIES", "Event", "Rejected", "StreamParams", "Streams", "gap_problem",
    "parse_event", "parse_event_line", "parse_event_lines", "parse_events", "read_events", "load_events",
    "parse_streams", "load_streams", "event_to_json", "collector_paused",
]

MAX_ID_LENGTH = 256
#: Lines of a file parsed as one block (:func:`read_events`).
_READ_BLOCK = 10_000
MAX_ATTRS = 64
MAX_STRING_LENGTH = 4096
MAX_LINE_BYTES = 1 << 20
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}\Z")

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


class Rejected(NamedTuple):
    """A rejected input line, with the reason."""

    line: int
    error: ValidationError
    raw: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.error}"


# --- decoding -------------------------------------------------------------------------
#
# Every check runs on the exact JSON types first (``type(x) is dict``, ``str``, ...), which
# is what decoded JSON holds, and only then on the abstract ones (any Mapping, subclasses),
# so a decoded event pays for no ``isinstance`` chain; the error for a value is the same
# whichever way it is reached.

_EVENT_FIELDS = frozenset({"stream", "id", "ts", "attrs"})
_MISSING = object()
_NO_ATTRS: Mapping[str, Scalar] = MappingProxyType({})
#: Stream names and attribute keys already found valid, so the pattern runs once per
#: distinct name, not once per event; bounded, as names come from the input.
_VALID_NAMES: set[str] = set()
_MAX_VALID_NAMES = 4096
#: orjson reads an integer literal beyond 64 bits as a float of this magnitude or more.
_WIDEST_INTEGER = float(2 ** 63)
_PLAIN_NUMBERS = (int, float)
_LARGEST = sys.float_info.max


def _expect_object(value: Any, field_name: str) -> Mapping[str, Any]:
    if type(value) is not dict and not isinstance(value, Mapping):
        raise ValidationError(field_name, f"must be a JSON object, got {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean",
            int: "number", float: "number", type(None): "null"}.get(type(value), type(value).__name__)


def _reject_unknown(obj: Mapping[str, Any], allowed: Set[str], where: str) -> None:
    unknown = sorted(set(obj) - allowed, key=str)
    if unknown:
        prefix = f"{where}." if where else ""
        raise ValidationError(f"{prefix}{unknown[0]}",
                              f"unknown field (expected one of: {', '.join(sorted(allowed))})")


def _name(value: Any, field_name: str) -> str:
    if type(value) is str and value in _VALID_NAMES:
        return value
    if not isinstance(value, str):
        raise ValidationError(field_name, f"must be a string, got {_json_type(value)}")
    if not _NAME.match(value):
        raise ValidationError(field_name, f"must be a name of letters, digits, '_', '.', '-' "
                              f"starting with a letter or '_' (at most 128), got {value!r}")
    if len(_VALID_NAMES) < _MAX_VALID_NAMES:
        _VALID_NAMES.add(value)
    return value


def _plain_interval(value: Any) -> Interval | None:
    """``{"lo": a, "hi": b}`` of plain finite numbers with ``a <= b`` as an interval, without
    the full checks; ``None`` for anything else."""
    if type(value) is dict and len(value) == 2:
        lo, hi = value.get("lo"), value.get("hi")
        if type(lo) in _PLAIN_NUMBERS and type(hi) in _PLAIN_NUMBERS and -_LARGEST <= lo <= hi <= _LARGEST:
            return Interval._checked(float(lo), float(hi))
    return None


def _timestamp(value: Any, stream: str, streams: Streams | Mapping[str, StreamParams] | None
               ) -> tuple[Histogram | Interval, str | None, float | None]:
    interval = _plain_interval(value)
    if interval is not None:
        return interval, None, None
    ts = _expect_object(value, "ts")
    keys = set(ts)
    try:
        if keys <= {"lo", "hi", "pmf"} and {"lo", "hi"} <= keys:
            return Interval(ts["lo"], ts["hi"], ts.get("pmf")), None, None
        if keys == {"edges", "probs"}:
            return Histogram(ts["edges"], ts["probs"]), None, None
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
            return Histogram.from_template(templates[name], detected), name, detected
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
           block: _TemplateBlock | None = None) -> Event | None:
    """:func:`parse_event`; ``decoded``: ``obj`` was just decoded from JSON, so nobody else
    holds its attributes and they need no copy.

    The common event -- names already seen, an interval of plain numbers, scalar
    attributes -- is accepted in one pass over exact JSON types; anything else, valid or
    not, takes the full checks, which name the field at fault. With ``block``, a common
    event with a template timestamp is left to the block to resolve (None is returned)."""
    if type(obj) is dict and 3 <= len(obj) <= 4:
        stream, event_id, attrs = obj.get("stream"), obj.get("id"), obj.get("attrs", _NO_ATTRS)
        if type(stream) is str and stream in _VALID_NAMES and type(event_id) is str \
                and 0 < len(event_id) <= MAX_ID_LENGTH and len(obj) == (4 if attrs is not _NO_ATTRS else 3):
            ts = obj.get("ts")
            interval = _plain_interval(ts)
            template = None if interval is not None else _plain_template(ts, stream, streams)
            if (interval is not None or template is not None) \
                    and (attrs is _NO_ATTRS or type(attrs) is dict and _plain_attrs(attrs)):
                attrs = MappingProxyType(attrs if decoded else dict(attrs)) if attrs else _NO_ATTRS
                if interval is not None:
                    return Event._checked(stream, event_id, interval, attrs)
                phi, name, detected = template
                if block is not None:
                    return block.defer(phi, stream, event_id, attrs, name, detected)
                return Event._checked(stream, event_id, phi.shift(detected - phi.hi), attrs, name, detected)
    return _checked_event(obj, streams)


def _plain_template(value: Any, stream: str, streams: Any) -> tuple[Histogram, str, float] | None:
    """``{"detected": t, "template": name}`` with a plain finite number and a template the
    stream declares: the template phi, its name and ``t`` as a float, without the full
    checks (the timestamp is ``phi + t - max(phi)``); ``None`` for anything else."""
    if type(value) is dict and len(value) == 2 and type(streams) is Streams:
        detected, name = value.get("detected"), value.get("template")
        if type(detected) in _PLAIN_NUMBERS and -_LARGEST <= detected <= _LARGEST and type(name) is str:
            params = streams._by_key.get(stream.casefold())
            template = params.templates.get(name) if params is not None else None
            if template is not None:
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
    type within bounds (else :func:`_attrs` says what is wrong, or accepts it the long way)."""
    if len(attrs) > MAX_ATTRS:
        return False
    for key, item in attrs.items():
        if key not in _VALID_NAMES:
            return False
        kind = type(item)
        if kind is float:
            if not -_LARGEST <= item <= _LARGEST:
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
    if type(event_id) is not str or not 0 < len(event_id) <= MAX_ID_LENGTH:
        _check_id(event_id)
    ts, template, detected = _timestamp(ts, stream, streams)
    attrs = obj.get("attrs", _MISSING)
    return Event._checked(stream, event_id, ts, _NO_ATTRS if attrs is _MISSING else _attrs(attrs), template, detected)


def _check_id(value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ValidationError("id", f"must be a non-empty string, got {_json_type(value)}")
    if len(value) > MAX_ID_LENGTH:
        raise ValidationError("id", f"too long: {len(value)} characters, at most {MAX_ID_LENGTH}")


def _reject_constant(name: str):
    raise ValidationError("", f"{name} is not allowed in JSON input")


_STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def loads(text: str | bytes) -> Any:
    """Strict JSON (bytes are UTF-8): NaN and Infinity are errors, not floats, and so is
    anything the json module cannot read; integers stay exact."""
    if not isinstance(text, str):
        try:
            text = bytes(text).decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValidationError("", f"not UTF-8: {error.reason} at byte {error.start}") from None
    if text.startswith("\ufeff"):
        raise ValidationError("", "invalid JSON at column 1: Unexpected UTF-8 BOM (decode using utf-8-sig)")
    try:
        return _STRICT_DECODER.decode(text)
    except json.JSONDecodeError as error:
        raise ValidationError("", f"invalid JSON at column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise ValidationError("", "invalid JSON: nested too deeply") from None
    except ValidationError:
        raise
    except ValueError as error:  # an integer of more digits than Python converts
        raise ValidationError("", f"invalid JSON: {error}") from None


def _decode_event(raw: str | bytes) -> Any:
    """:func:`loads`, through orjson when it is installed and reads ``raw`` the same way.

    Whatever orjson rejects (NaN, Infinity, lone surrogates, 1e999, ...) goes to the json
    module, so it is accepted or refused with the same words as ever. orjson also reads an
    integer beyond 64 bits as a float; of the values an event keeps, only an attribute
    would show it, so an event with an attribute float that wide is read again by json."""
    if orjson is not None:
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return loads(raw)
        attrs = value.get("attrs") if type(value) is dict else None
        if type(attrs) is dict:
            for item in attrs.values():
                if type(item) is float and not -_WIDEST_INTEGER < item < _WIDEST_INTEGER:
                    return loads(raw)
        return value
    return loads(raw)


def _parse_raw(raw: str | bytes | Mapping[str, Any], streams: Streams | None,
               block: _TemplateBlock | None = None) -> Event | None:
    if isinstance(raw, str):
        # a character is at most 4 bytes of UTF-8: only long lines need encoding to measure
        if len(raw) > MAX_LINE_BYTES // 4 and len(raw.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
            raise ValidationError("", f"event too large: over {MAX_LINE_BYTES} bytes")
        return _event(_decode_event(raw), streams, True, block)
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_LINE_BYTES:
            raise ValidationError("", f"event too large: over {MAX_LINE_BYTES} bytes")
        return _event(_decode_event(raw), streams, True, block)
    return _event(raw, streams, False, block)


def parse_event_line(line: str | bytes, streams: Streams | None = None) -> Event:
    """One event from one line of JSON."""
    return _parse_raw(line, streams)


def parse_event_lines(raws: Sequence[str | bytes | Mapping], streams: Streams | None = None
                      ) -> list[Event | ValidationError]:
    """:func:`parse_event_line` (or :func:`parse_event` for a decoded object) over a block:
    in each input's place its event, or the :class:`ValidationError` that refuses it.

    The same events, for less: the timestamps of each stream template are resolved for the
    whole block in one numpy operation rather than one per event (on this project's machine,
    a template event in 2.9-3.1 µs rather than 3.5-3.7). Runs with the collector paused.

    >>> streams = parse_streams({"S": {"templates": {"t": {"edges": [0, 1, 3], "probs": [0.5, 0.5]}}}})
    >>> [getattr(e, "ts", e) for e in parse_event_lines(
    ...     [b'{"stream": "S", "id": "a", "ts": {"detected": 10, "template": "t"}}', b'[1]'], streams)]
    [Histogram(edges=[7.0, 8.0, 10.0], probs=[0.5, 0.5]), ValidationError('must be a JSON object, got array')]
    """
    out: list = [None] * len(raws)
    block = _TemplateBlock(out)
    with collector_paused():
        for index, raw in enumerate(raws):
            block.index = index
            try:
                out[index] = _parse_raw(raw, streams, block)
            except ValidationError as error:
                out[index] = error
        block.resolve()
    return out


@contextlib.contextmanager
def collector_paused():
    """The cyclic garbage collector off for a batch. The objects a batch builds hold no
    cycles and outlive it, so a collection during it frees nothing; yet CPython would run
    one every few hundred allocations and move the survivors up to be scanned again, which
    costs about as much as the parsing itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _admit(parsed: Event | ValidationError, seen: set[tuple[str, str]]) -> Event | ValidationError:
    """A parsed event, unless its id was already seen in its stream (then the error that
    says so); an error as it is."""
    if isinstance(parsed, ValidationError):
        return parsed
    key = (parsed.stream.casefold(), parsed.id)
    if key in seen:
        return ValidationError("id", f"duplicate id {parsed.id!r} in stream {parsed.stream!r}")
    seen.add(key)
    return parsed


def parse_events(raws: Sequence[str | bytes | Mapping], streams: Streams | None = None
                 ) -> tuple[list[Event], list[tuple[int, ValidationError]]]:
    """A block of raw events (JSON lines as ``str`` or UTF-8 ``bytes``, or decoded objects):
    the valid events in input order, and ``(index, error)`` for every rejected input.

    An ``id`` seen twice in one stream within the block is rejected the second time. Never
    raises for bad input: whatever its shape, it comes back as a rejection naming the field.

    >>> events, rejected = parse_events(['{"stream": "A", "id": "a1", "ts": {"lo": 1, "hi": 2}}',
    ...                                  b'{"stream": "A", "id": "a1", "ts": {"lo": 3, "hi": 4}}', "[1]"])
    >>> [e.id for e in events], [(index, str(error)) for index, error in rejected]
    (['a1'], [(1, "id: duplicate id 'a1' in stream 'A'"), (2, 'must be a JSON object, got array')])
    """
    events: list[Event] = []
    rejected: list[tuple[int, ValidationError]] = []
    seen: set[tuple[str, str]] = set()
    for index, parsed in enumerate(parse_event_lines(raws, streams)):
        admitted = _admit(parsed, seen)
        if isinstance(admitted, ValidationError):
            rejected.append((index, admitted))
        else:
            events.append(admitted)
    return events, rejected


def read_events(lines: Iterable[str], streams: Streams | None = None) -> tuple[list[Event], list[Rejected]]:
    """Decode a JSON-lines batch: every valid event, and every rejected line with its reason.

    Blank lines are skipped. An ``id`` seen twice in one stream is rejected the second time.
    """
    events: list[Event] = []
    rejected: list[Rejected] = []
    seen: set[tuple[str, str]] = set()
    numbered = ((number, line) for number, line in enumerate(lines, start=1) if line and not line.isspace())
    while block := list(itertools.islice(numbered, _READ_BLOCK)):
        for (number, line), parsed in zip(block, parse_event_lines([line for _, line in block], streams)):
            admitted = _admit(parsed, seen)
            if isinstance(admitted, ValidationError):
                rejected.append(Rejected(number, admitted, line.rstrip("\n")))
            else:
                events.append(admitted)
    return events, rejected


def load_events(path: str | Path, streams: Streams | None = None) -> tuple[list[Event], list[Rejected]]:
    with open(path, encoding="utf-8") as handle:
        return read_events(handle, streams)


def event_to_json(event: Event) -> dict:
    """The event in the contract's JSON shape (a template timestamp stays a template)."""
    if event.template is not None:
        ts = {"detected": event.detected, "template": event.template}
    else:
        ts = event.ts.to_json()
    return {"stream": event.stream, "id": event.id, "ts": ts, "attrs": dict(event.attrs)}


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


def load_streams(path: str | Path) -> Streams:
    with open(path, encoding="utf-8") as handle:
        return parse_streams(loads(handle.read()))
