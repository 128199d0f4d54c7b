"""Events and stream parameters read from JSON text: strict JSON, lines, blocks and files.

Reading a batch keeps every valid event and reports each rejected one with its line.
:func:`parse_events` reads a block (JSON lines as text or bytes, or decoded objects) for the
Spark pipeline and the service: events out, and a rejection per bad input, never a raise.
Lines are decoded with orjson where it is installed, with the json module's results.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import json
import math
import operator
import sys
import threading
from pathlib import Path
from typing import Any, Iterable, Mapping, NamedTuple, Sequence

from ..errors import ValidationError
from ..timestamps import Histogram
from .model import _WIDEST_INTEGER, Event, _TemplateBlock, _checked_event, _common, _event
from .streams import Streams, parse_streams

try:
    import orjson
except ImportError:  # the json module reads everything orjson would, about 4x slower
    orjson = None

__all__ = [
    "Admitted", "Rejected", "admit_contents", "admit_events", "collector_paused", "content_of", "load_events",
    "load_streams", "parse_event_line", "parse_event_lines", "parse_events", "read_events",
]

#: Lines of a file parsed as one block (:func:`read_events`).
_READ_BLOCK = 10_000
MAX_LINE_BYTES = 1 << 20


class Rejected(NamedTuple):
    """A rejected input line, with the reason."""

    line: int
    error: ValidationError
    raw: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.error}"


class _Constant(Exception):
    """NaN, Infinity or -Infinity met by the strict decoder."""


def _reject_constant(name: str):
    raise _Constant(name)


_STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant)
_LENIENT_DECODER = json.JSONDecoder()


#: In place of an integer literal of more digits than Python converts (``sys.get_int_max_str_digits``).
_TOO_LONG = object()


def _integer_or_too_long(text: str) -> Any:
    try:
        return int(text)
    except ValueError:
        return _TOO_LONG


_LONG_INTEGER_DECODER = json.JSONDecoder(parse_int=_integer_or_too_long)


def _constant_error(text: str, name: str) -> ValidationError:
    """The error for a NaN or an Infinity in ``text``, naming the field where the first
    stands (``ts.lo``, ``attrs.v``, ``ts.edges[2]``)."""
    path = _path_of(text, _LENIENT_DECODER, lambda value: isinstance(value, float) and not math.isfinite(value))
    return ValidationError(path or "", f"{name} is not allowed in JSON input (a number must be finite)")


def _long_integer_error(text: str) -> ValidationError:
    """The error for an integer literal in ``text`` too long to read, saying where the first
    stands (as JSON the reader cannot read: no field is judged)."""
    path = _path_of(text, _LONG_INTEGER_DECODER, lambda value: value is _TOO_LONG)
    return ValidationError("", f"invalid JSON: a number with more than {sys.get_int_max_str_digits()} digits"
                               + (f" at {path}" if path else ""))


def _path_of(text: str, decoder: json.JSONDecoder, found) -> str | None:
    """Where in ``text`` read by ``decoder`` the first value that is ``found`` stands, or None."""
    try:
        return _path_in(decoder.decode(text), found)
    except (ValueError, RecursionError):
        return None


def _path_in(value: Any, found, path: str = "") -> str | None:
    if found(value):
        return path
    if isinstance(value, dict):
        items = ((f"{path}.{key}" if path else str(key), item) for key, item in value.items())
    elif isinstance(value, list):
        items = ((f"{path}[{index}]", item) for index, item in enumerate(value))
    else:
        return None
    for where, item in items:
        at = _path_in(item, found, where)
        if at is not None:
            return at
    return None


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
    except _Constant as constant:
        raise _constant_error(text, str(constant)) from None
    except json.JSONDecodeError as error:
        raise ValidationError("", f"invalid JSON at column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise ValidationError("", "invalid JSON: nested too deeply") from None
    except ValidationError:
        raise
    except ValueError:  # an integer of more digits than Python converts
        raise _long_integer_error(text) from None


def loads_events(raw: bytes) -> Any:
    """A request body of events (one object or a list of them) read as :func:`loads` reads
    it, through orjson when it reads it the same way (see :func:`_decode_event`: what
    orjson rejects, and an attribute float too wide to be an exact integer, go to json)."""
    if orjson is None:
        return loads(raw)
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return loads(raw)
    if any(_wide_attribute(item) for item in (value if type(value) is list else (value,))):
        return loads(raw)
    return value


def _wide_attribute(value: Any) -> bool:
    """Whether an event object as orjson read it has an attribute float too wide to be the
    exact integer json would read."""
    attrs = value.get("attrs") if type(value) is dict else None
    return type(attrs) is dict and any(type(item) is float and not -_WIDEST_INTEGER < item < _WIDEST_INTEGER
                                       for item in attrs.values())


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
        return loads(raw) if _wide_attribute(value) else value
    return loads(raw)


def _decoded(raw: str | bytes | Mapping[str, Any]) -> tuple[Any, bool]:
    """A raw event as an object, and whether it was just decoded from JSON (so nobody else
    holds it); a decoded object is itself."""
    if isinstance(raw, str):
        # a character is at most 4 bytes of UTF-8: only long lines need encoding to measure
        if len(raw) > MAX_LINE_BYTES // 4 and len(raw.encode("utf-8", "surrogatepass")) > MAX_LINE_BYTES:
            raise ValidationError("", f"event too large: over {MAX_LINE_BYTES} bytes")
        return _decode_event(raw), True
    if isinstance(raw, (bytes, bytearray)):
        if len(raw) > MAX_LINE_BYTES:
            raise ValidationError("", f"event too large: over {MAX_LINE_BYTES} bytes")
        return _decode_event(raw), True
    return raw, False


def _common_line(raw: Any, streams: Any) -> tuple | None:
    """The common event's fields (:func:`~penumbra.events.model._common`) of a line (bytes,
    or text short enough to be within the size limit whatever its characters), read by
    orjson alone; None for anything else, which :func:`_decoded` reads. The common event's
    attributes hold no float as wide as an integer orjson reads wrongly, so orjson's reading
    of it is the json module's."""
    kind = type(raw)
    if orjson is not None and (kind is bytes and len(raw) <= MAX_LINE_BYTES
                               or kind is str and len(raw) <= MAX_LINE_BYTES // 4):
        try:
            return _common(orjson.loads(raw), streams)
        except orjson.JSONDecodeError:
            return None
    return None


def _read_common(raw: str | bytes | Mapping[str, Any], streams: Any) -> tuple[Any, bool, tuple | None]:
    """A raw event as ``(object, just decoded, the common event's fields or None)``: a
    common line read by orjson alone (its object is not needed then), else read in full."""
    common = _common_line(raw, streams)
    if common is not None:
        return None, True, common
    obj, decoded = _decoded(raw)
    return obj, decoded, _common(obj, streams)


def _parse_raw(raw: str | bytes | Mapping[str, Any], streams: Streams | None,
               block: _TemplateBlock | None = None) -> Event | None:
    obj, decoded, common = _read_common(raw, streams)
    return _event(obj, streams, decoded, block, common) if common is not None else _checked_event(obj, streams)


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


_pauses = 0                         # collector_paused blocks open, in any thread
_resume = False                     # the collector was on when the first of them opened
_pauses_lock = threading.Lock()


@contextlib.contextmanager
def collector_paused():
    """The cyclic garbage collector off for a batch. The objects a batch builds hold no
    cycles and outlive it, so a collection during it frees nothing; yet CPython would run
    one every few hundred allocations and move the survivors up to be scanned again, which
    costs about as much as the parsing itself. The collector is process-wide: it stays off
    until the last block open in any thread closes, and is on again then if it was on
    when the first opened."""
    global _pauses, _resume
    with _pauses_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pauses_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


_KINDS = {bool: "b", int: "i", float: "f", str: "s", type(None): "n"}


def _plain(value: Any) -> Any:
    return value + 0.0 if type(value) is float else value     # -0.0 says what 0.0 says


def content_of(event: Event) -> tuple:
    """What an event says beyond its identity (stream, id), as a tuple that compares and
    serialises alike in every process: its timestamp as sent (a template and detection
    time, or the interval or histogram) and its attributes with their JSON kinds (true is
    not 1, 1 is not 1.0)."""
    ts = event.ts
    if event.template is not None:
        stamp: tuple = ("template", event.template, _plain(event.detected))
    elif isinstance(ts, Histogram):
        stamp = ("histogram", tuple(map(_plain, ts.edges.tolist())), tuple(map(_plain, ts.probs.tolist())))
    else:
        stamp = ("interval", _plain(ts.lo), _plain(ts.hi),
                 tuple(_plain(float(p)) for p in ts.pmf) if ts.pmf is not None else None)
    return stamp, _attrs_content(event.attrs)


def _attrs_content(attrs: Mapping[str, Any]) -> tuple:
    return tuple(sorted((key, _KINDS.get(type(value), "?"), _plain(value)) for key, value in attrs.items()))


class Admitted(NamedTuple):
    """What a writer that keeps events as they came needs of a valid one (:func:`admit_contents`):
    its stream and id, its content (:func:`content_of`), its timestamp's length and its
    attributes (as decoded: not a copy, to be read only)."""

    stream: str
    id: str
    content: tuple
    length: float
    attrs: Mapping[str, Any]


def _admitted(raw: str | bytes | Mapping[str, Any], streams: Streams | None, bounds: dict) -> Admitted:
    """:class:`Admitted` of a raw event, or the :class:`ValidationError` that refuses it.
    The common event (:func:`~penumbra.events.model._common`) is not built: its content is
    read off its fields, and a template's length is the one its resolved histogram has
    (``phi`` shifted by ``detected - max(phi)``, edge by edge). ``bounds``: each template's
    ``(phi, min, max)`` read once."""
    if type(raw) is dict:
        obj, common = raw, _common(raw, streams)
    else:
        obj, _, common = _read_common(raw, streams)
    if common is None:
        event = _checked_event(obj, streams)
        return Admitted(event.stream, event.id, content_of(event), event.ts.length, event.attrs)
    stream, event_id, interval, template, attrs = common
    if interval is not None:
        lo, hi = interval.lo, interval.hi
        stamp, length = ("interval", lo + 0.0, hi + 0.0, None), hi - lo
    else:
        phi, name, detected = template
        known = bounds.get(id(phi))
        if known is None or known[0] is not phi:   # held with its bounds, so its id stays its own
            known = bounds[id(phi)] = (phi, phi.lo, phi.hi)
        _, lo, hi = known
        shift = detected - hi
        stamp, length = ("template", name, detected + 0.0), (hi + shift) - (lo + shift)
    return _new_admitted((stream, event_id, (stamp, _attrs_content(attrs) if attrs else ()), length, attrs))


_new_admitted = functools.partial(tuple.__new__, Admitted)


def admit_contents(raws: Sequence[str | bytes | Mapping], streams: Streams | None = None
                   ) -> list[Admitted | ValidationError | int]:
    """:func:`admit_events` for a writer that keeps the raw events as they came (the
    ingest): the same fates and errors, with an :class:`Admitted` in place of each event.
    A common event is checked without being built, in about half the time."""
    bounds: dict[int, tuple[Histogram, float, float]] = {}    # each template's (phi, min, max), by id
    parsed: list[Admitted | ValidationError] = []
    with collector_paused():
        for raw in raws:
            try:
                parsed.append(_admitted(raw, streams, bounds))
            except ValidationError as error:
                parsed.append(error)
        return _fates(parsed, _ADMITTED_CONTENT)


_ADMITTED_CONTENT = operator.attrgetter("content")


def _fates(parsed: Sequence, content) -> list:
    """Each parsed input's fate (:func:`admit_events`): the first coming of its identity, the
    index of that first coming for a repeat with the same ``content(...)``, a conflict for
    one with other content; an error stays as it is."""
    out: list = []
    seen: dict[tuple[str, str], int] = {}
    for index, item in enumerate(parsed):
        if isinstance(item, ValidationError):
            out.append(item)
            continue
        first = seen.setdefault((item.stream.casefold(), item.id), index)
        if first == index:
            out.append(item)
        elif content(out[first]) == content(item):
            out.append(first)
        else:
            out.append(_conflict(item))
    return out


def _conflict(event: Event | Admitted) -> ValidationError:
    return ValidationError("id", f"conflict: id {event.id!r} came before in stream {event.stream!r} with other "
                                 f"content (an id is unique within its stream; an event sent again must be the same)")


def admit_events(raws: Sequence[str | bytes | Mapping], streams: Streams | None = None
                 ) -> list[Event | ValidationError | int]:
    """Each raw event's fate in a block, by index: its :class:`Event` the first time its
    identity (stream, id) comes; the index of that first time when it comes again with the
    same content (a duplicate, taken once); a :class:`ValidationError` when it is invalid,
    or comes again with other content (a conflict)."""
    return _fates(parse_event_lines(raws, streams), content_of)


def parse_events(raws: Sequence[str | bytes | Mapping], streams: Streams | None = None
                 ) -> tuple[list[Event], list[tuple[int, ValidationError]]]:
    """A block of raw events (JSON lines as ``str`` or UTF-8 ``bytes``, or decoded objects):
    the valid events in input order, and ``(index, error)`` for every rejected input.

    Each identity (stream, id) is taken once (DESIGN.md): an event that came before in
    the block with the same content is a duplicate, left out (neither an event nor a
    rejection); with other content, a conflict, rejected. Never raises for bad input:
    whatever its shape, it comes back as a rejection naming the field.

    >>> events, rejected = parse_events(['{"stream": "A", "id": "a1", "ts": {"lo": 1, "hi": 2}}',
    ...                                  b'{"stream": "a", "ts": {"hi": 2, "lo": 1}, "id": "a1"}',
    ...                                  b'{"stream": "A", "id": "a1", "ts": {"lo": 3, "hi": 4}}', "[1]"])
    >>> [e.id for e in events], [(index, str(error)[:30]) for index, error in rejected]
    (['a1'], [(2, "id: conflict: id 'a1' came bef"), (3, 'must be a JSON object, got arr')])
    """
    events: list[Event] = []
    rejected: list[tuple[int, ValidationError]] = []
    for index, fate in enumerate(admit_events(raws, streams)):
        if isinstance(fate, Event):
            events.append(fate)
        elif isinstance(fate, ValidationError):
            rejected.append((index, fate))
    return events, rejected


def read_events(lines: Iterable[str | bytes], streams: Streams | None = None) -> tuple[list[Event], list[Rejected]]:
    """Decode a JSON-lines batch (text, or UTF-8 bytes checked line by line): every valid
    event, and every rejected line with its reason.

    Blank lines are skipped. Each identity is taken once, as in :func:`parse_events`.
    """
    events: list[Event] = []
    rejected: list[Rejected] = []
    seen: dict[tuple[str, str], tuple] = {}
    numbered = ((number, line) for number, line in enumerate(lines, start=1) if line and not line.isspace())
    while block := list(itertools.islice(numbered, _READ_BLOCK)):
        for (number, line), parsed in zip(block, parse_event_lines([line for _, line in block], streams)):
            if not isinstance(parsed, ValidationError):
                key, content = (parsed.stream.casefold(), parsed.id), content_of(parsed)
                first = seen.setdefault(key, content)
                if first is not content:
                    if first == content:
                        continue                # a duplicate: taken once
                    parsed = _conflict(parsed)
            if isinstance(parsed, ValidationError):
                raw = line if isinstance(line, str) else line.decode("utf-8", errors="replace")
                rejected.append(Rejected(number, parsed, raw.rstrip("\r\n")))
            else:
                events.append(parsed)
    return events, rejected


def load_events(path: str | Path, streams: Streams | None = None) -> tuple[list[Event], list[Rejected]]:
    """:func:`read_events` over a file's lines, split as the live path splits them (at
    ``\\n`` only: a CR within a line is JSON whitespace) and decoded line by line, so that
    a line that is not UTF-8 is rejected alone, with its number."""
    with open(path, "rb") as handle:
        return read_events(handle, streams)


def load_streams(path: str | Path) -> Streams:
    with open(path, encoding="utf-8") as handle:
        return parse_streams(loads(handle.read()))
