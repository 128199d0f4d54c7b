"""A block of events as columns: what a join reads of each event, built once.

A join works on arrays (its buffers are :class:`~penumbra.joins.rows.Rows`), so the events
of a block reach it as columns: their streams, ids, continuous timestamps as one
:class:`~penumbra.timestamps.HistogramBlock`, template names and attributes. The columns
are read straight from JSON lines (:meth:`EventColumns.parse`: the common event never
becomes an object) or built from parsed events (:meth:`EventColumns.from_events`), travel as bytes between
processes (:meth:`EventColumns.to_bytes`: the pipeline builds them where it parses, and
the stateful step never parses the events again), and give an event back where one is
needed (:meth:`EventColumns.event`, for late and rejected events).

>>> from penumbra.events import parse_event
>>> columns = EventColumns.from_events([parse_event({"stream": "S", "id": "a", "ts": {"lo": 1, "hi": 3},
...                                                  "attrs": {"k": 1}})])
>>> back = EventColumns.from_bytes(columns.to_bytes())
>>> back.ids.tolist(), back.block.lo.tolist(), back.block.hi.tolist(), back.event(0).attrs
(['a'], [1.0], [3.0], {'k': 1})
"""

from __future__ import annotations

import json
import pickle
from functools import cached_property
from types import MappingProxyType
from typing import Any, Mapping, Sequence

import numpy as np

try:
    import orjson
except ImportError:  # the core runs without it: the fields are pickled instead
    orjson = None

from ..errors import ValidationError
from ..timestamps import Histogram, HistogramBlock, Interval, not_continuous
from .codec import _read_common, collector_paused
from .model import _NO_ATTRS, Event, _checked_event, _TemplateBlock
from .streams import Streams

__all__ = ["EventColumns", "events_from_bytes"]

#: The timestamp kept for an event whose own has no continuous reading (never joined).
_PLACEHOLDER = Histogram([0.0, 1.0], [1.0])


def _objects(values: Sequence[Any]) -> np.ndarray:
    """A one-dimensional array of these values as they are (a tuple or list stays one
    element; built without numpy's look into each element, a tenth of assigning a list)."""
    return np.fromiter(values, dtype=object, count=len(values))


def _any_made(events: list[Event | None]) -> bool:
    """Whether an event of ``events`` is made: ``list.count(None)`` finds none made at C
    speed, but compares each one made with None by its dataclass equality, so a block of
    events made (instants, say) is answered by its first."""
    return bool(events) and (events[0] is not None or events.count(None) < len(events))


def _reading(event: Event) -> tuple[Histogram, str | None]:
    """An event's continuous timestamp, or the placeholder and why it has none."""
    if event.template is not None:
        return (event.ts if type(event.ts) is Histogram else event.histogram), None
    try:
        return event.histogram, None
    except ValidationError as error:
        return _PLACEHOLDER, str(error)


class EventColumns:
    """``n`` events as columns: ``streams`` and ``ids`` (as sent), ``block`` (each event's
    continuous timestamp; a placeholder where it has none), ``templates`` (the template
    name, or None for an explicit timestamp), ``problems`` (why an explicit timestamp has
    no continuous reading, else None) and ``attrs`` (plain dicts)."""

    def __init__(self, streams: np.ndarray, ids: np.ndarray, block: HistogramBlock, templates: np.ndarray,
                 problems: list[str | None], attrs: np.ndarray, events: Sequence[Event] | None = None,
                 parsed: tuple[np.ndarray, Streams | None] | None = None):
        self.streams, self.ids, self.block, self.templates = streams, ids, block, templates
        self.problems, self.attrs = problems, attrs
        self._events: list[Event | None] = list(events) if events is not None else [None] * len(ids)
        #: from :meth:`parse`: what makes each common event again, as a (2, n) array (an
        #: interval's or an instant's bounds; a template's detection time and NaN; NaN for any
        #: other event, made already), and the streams its templates were resolved with, so
        #: :meth:`event` makes it as the parser does
        self._parsed = parsed

    @classmethod
    def parse(cls, raws: Sequence[str | bytes | Mapping], streams: Streams | None = None
              ) -> tuple[EventColumns, np.ndarray, list[tuple[int, ValidationError]]]:
        """The columns of a block of raw events (JSON lines or decoded objects), read as
        :func:`~penumbra.events.parse_event_lines` reads them, without an event object for
        the common event (an interval of plain numbers, or a template timestamp the stream
        declares, with scalar attributes): its fields go straight to the columns, and the
        timestamps of each template and of the intervals into the block in one numpy
        operation each. Returns the columns of the valid events in input order, the input
        index of each, and ``(index, error)`` for each rejected input."""
        code_of: dict[str, int] = {}          # each stream name as sent, by first appearance
        codes: list[int] = []
        ids: list[str] = []
        attrs: list[dict] = []
        kept: list[int] = []
        errors: list[tuple[int, ValidationError]] = []
        intervals: tuple[list[int], list[float], list[float]] = ([], [], [])
        templates: dict[int, tuple[Histogram, str, list[int], list[float]]] = {}
        others: list[tuple[int, Event]] = []
        with collector_paused():
            for index, raw in enumerate(raws):
                try:
                    obj, decoded, common = _read_common(raw, streams)
                    if common is None:
                        # anything else, valid or not
                        event = _checked_event(obj, streams)
                        others.append((len(ids), event))
                        codes.append(code_of.setdefault(event.stream, len(code_of)))
                        ids.append(event.id)
                        attrs.append(dict(event.attrs))
                        kept.append(index)
                        continue
                except ValidationError as error:
                    errors.append((index, error))
                    continue
                stream, event_id, interval, template, values = common
                row = len(ids)
                code = code_of.get(stream)      # (setdefault would count the codes for every event)
                codes.append(code if code is not None else code_of.setdefault(stream, len(code_of)))
                ids.append(event_id)
                attrs.append(values if decoded and type(values) is dict else dict(values))
                kept.append(index)
                if interval is not None:
                    intervals[0].append(row)
                    intervals[1].append(interval.lo)
                    intervals[2].append(interval.hi)
                else:
                    phi, name, detected = template
                    group = templates.get(id(phi))
                    if group is None:
                        group = templates[id(phi)] = (phi, name, [], [])
                    group[2].append(row)
                    group[3].append(detected)
            coded = (list(code_of), np.asarray(codes, dtype=np.int64))
            return cls._assembled(coded, ids, attrs, intervals, templates, others, streams), \
                np.asarray(kept, dtype=np.int64), errors

    @classmethod
    def _assembled(cls, coded, ids, attrs, intervals, templates, others, streams) -> EventColumns:
        n = len(ids)
        histograms, problems, read = [], [None] * n, []
        events: list[Event | None] = [None] * n
        # what makes a common event again (see __init__): (lo, hi), or (detected, NaN)
        stamps = np.full((2, n), np.nan)
        for row, event in others:
            events[row] = event
            ts = event.ts
            if type(ts) is Interval and ts.pmf is None and not ts.lo < ts.hi:
                intervals[0].append(row)        # an instant made the long way: as the common ones
                intervals[1].append(ts.lo)
                intervals[2].append(ts.hi)
                continue
            histogram, problems[row] = _reading(event)
            histograms.append(histogram)
            read.append(row)
        rest = HistogramBlock.from_histograms(histograms) if histograms else None
        width = max([1, rest.buckets if rest is not None else 1] + [len(g[0].probs) for g in templates.values()])
        edges, probs = np.empty((width + 1, n)), np.zeros((width, n))
        names_of = np.full(n, None, dtype=object)
        if intervals[0]:
            rows = np.asarray(intervals[0], dtype=np.int64)
            stamps[:, rows] = intervals[1:]
            lows, highs = stamps[:, rows]
            edges[0, rows] = lows
            edges[1:, rows] = highs
            probs[0, rows] = 1.0
            # an instant (lo = hi: a lossy stream's read, say) has no continuous reading: the
            # placeholder, and the error Event.histogram raises for it (ts.hi), without raising it
            flat = ~(lows < highs)
            if flat.any():
                points = rows[flat]
                edges[0, points] = _PLACEHOLDER.edges[0]
                edges[1:, points] = _PLACEHOLDER.edges[1]
                for row, lo, hi in zip(points.tolist(), lows[flat].tolist(), highs[flat].tolist()):
                    problems[row] = "ts.hi: " + not_continuous(lo, hi)
        for phi, name, rows, moments in templates.values():
            rows, moments = np.asarray(rows, dtype=np.int64), np.asarray(moments)
            k = len(phi.probs)
            # the floats the parser's template block gives: phi.edges + (t - max(phi)), row by row
            shifted = phi.edges + (moments - phi.hi)[:, None]
            edges[:k + 1, rows] = shifted.T
            edges[k + 1:, rows] = shifted[:, -1]
            probs[:k, rows] = phi.probs[:, None]
            stamps[0, rows] = moments
            names_of[rows] = name
        if rest is not None:
            rows = np.asarray(read, dtype=np.int64)
            rest = rest.padded(width)
            edges[:, rows] = rest.edges
            probs[:, rows] = rest.probs
            names_of[rows] = [events[row].template for row in read]
        columns = cls(_objects(coded[0])[coded[1]], _objects(ids), HistogramBlock(edges, probs), names_of, problems,
                      _objects(attrs), events, (stamps, streams))
        columns.coded = coded
        return columns

    @classmethod
    def from_events(cls, events: Sequence[Event]) -> EventColumns:
        histograms, templates, problems = [], [], []
        for event in events:
            histogram, problem = _reading(event)
            histograms.append(histogram)
            templates.append(event.template)
            problems.append(problem)
        block = HistogramBlock.from_histograms(histograms) if histograms else \
            HistogramBlock(np.empty((2, 0)), np.empty((1, 0)))
        attrs = [a if type(a) is dict else dict(a) for a in (event.attrs for event in events)]
        return cls(_objects([e.stream for e in events]), _objects([e.id for e in events]), block,
                   _objects(templates), problems, _objects(attrs), events)

    def __len__(self) -> int:
        return len(self.ids)

    @cached_property
    def coded(self) -> tuple[list[str], np.ndarray]:
        """The streams as codes: the distinct names as sent, and each event's index into them
        (after :meth:`take`, its parent's names: some may have no event left)."""
        code_of: dict[str, int] = {}
        codes = [code_of.setdefault(name, len(code_of)) for name in self.streams.tolist()]
        return list(code_of), np.asarray(codes, dtype=np.int64)

    def rows_of(self, stream: str) -> np.ndarray:
        """The rows of the events of ``stream`` (a case-folded name, as queries name
        streams), ascending: found by stream code, never by comparing names row by row."""
        names, codes = self.coded
        found = [code for code, name in enumerate(names) if name.casefold() == stream]
        return np.flatnonzero(codes == found[0] if len(found) == 1 else np.isin(codes, found))

    def event(self, i: int) -> Event:
        """Event ``i`` (the one the columns were built from, or one made of the columns:
        its stream, id, continuous timestamp and attributes); the same object every time."""
        event = self._events[i]
        if event is None:
            event = self._events[i] = self._parsed_events([i])[0] if self._parsed is not None else \
                Event._checked(self.streams[i], self.ids[i], self.block.histogram(i), self.attrs[i], self.templates[i])
        return event

    def events(self) -> list[Event]:
        """Every event, as :meth:`event` gives it (those of a parsed block made together)."""
        if self._parsed is not None:
            missing = [i for i, event in enumerate(self._events) if event is None]
            for i, event in zip(missing, self._parsed_events(missing)):
                self._events[i] = event
        return [self.event(i) for i in range(len(self))]

    def bounds(self) -> np.ndarray:
        """Each event's timestamp bounds as a (2, n) array, ``lo`` over ``hi``, where its
        timestamp is an :class:`~penumbra.timestamps.Interval` (an instant too); NaN where it
        is not. What an operator's clock reads of a block, without making its events."""
        if self._parsed is None:
            out = np.full((2, len(self)), np.nan)
        else:
            out = self._parsed[0].copy()
            out[0, np.isnan(out[1])] = np.nan       # a template's detection time
        if self._parsed is None or _any_made(self._events):
            for i, event in enumerate(self._events):
                if event is None and self._parsed is None:
                    event = self.event(i)
                if event is not None and type(event.ts) is Interval:
                    out[:, i] = event.ts.lo, event.ts.hi
        return out

    def _parsed_events(self, rows: list[int]) -> list[Event]:
        """Events ``rows`` of columns from :meth:`parse` (a common event: an interval, or a
        template timestamp, resolved as the parser resolves a block's), equal to the ones the
        parser makes."""
        stamps, streams = self._parsed
        index = np.asarray(rows, dtype=np.int64)
        names, ids, attrs = self.templates[index].tolist(), self.ids[index].tolist(), self.attrs[index].tolist()
        stream_of = self.streams[index].tolist()
        lows, highs = stamps[0, index].tolist(), stamps[1, index].tolist()
        made: list = [None] * len(rows)
        templates = _TemplateBlock(made)
        for j, name in enumerate(names):
            values = MappingProxyType(attrs[j]) if attrs[j] else _NO_ATTRS
            if name is None:
                made[j] = Event._checked(stream_of[j], ids[j], Interval._checked(lows[j], highs[j]), values)
            else:
                templates.index = j
                templates.defer(streams._by_key[stream_of[j].casefold()].templates[name], stream_of[j], ids[j], values,
                                name, lows[j])
        templates.resolve()
        return made

    def take(self, index: np.ndarray) -> EventColumns:
        """The events at ``index``, in its order."""
        index = np.asarray(index, dtype=np.int64)
        parsed = (self._parsed[0][:, index], self._parsed[1]) if self._parsed is not None else None
        rows = index.tolist()
        # most blocks have no event made yet and no problem: those lists are taken whole
        problems = [self.problems[i] for i in rows] if self.problems.count(None) < len(self.problems) \
            else [None] * len(rows)
        events = [self._events[i] for i in rows] if _any_made(self._events) else None
        taken = EventColumns(self.streams[index], self.ids[index], self.block.take(index), self.templates[index],
                             problems, self.attrs[index], events, parsed)
        if "coded" in self.__dict__:
            taken.coded = (self.coded[0], self.coded[1][index])
        return taken

    @classmethod
    def concat(cls, parts: Sequence[EventColumns]) -> EventColumns:
        parts = [part for part in parts if len(part)]
        if not parts:
            return cls.from_events([])
        if len(parts) == 1:
            return parts[0]
        parsed = None
        if all(p._parsed is not None and p._parsed[1] is parts[0]._parsed[1] for p in parts):
            parsed = (np.concatenate([p._parsed[0] for p in parts], axis=1), parts[0]._parsed[1])
        # else a parsed part's events are made now, while it knows how
        events = [x for p in parts for x in (p._events if parsed is not None or p._parsed is None
                                              else [p.event(i) for i in range(len(p))])]
        return cls(np.concatenate([p.streams for p in parts]), np.concatenate([p.ids for p in parts]),
                   HistogramBlock.concat([p.block for p in parts]), np.concatenate([p.templates for p in parts]),
                   [x for p in parts for x in p.problems], np.concatenate([p.attrs for p in parts]), events, parsed)

    def to_bytes(self) -> bytes:
        """The columns as bytes (:meth:`from_bytes` reads them back; the events themselves
        stay). The stream names (each once, with each event's code), ids and attributes go
        as one JSON array where orjson writes them as they are (a third of pickle's time),
        else pickled (an integer beyond 64 bits, a lone surrogate); the codes and the
        timestamps as arrays."""
        names, codes = self.coded
        fields = [names, self.ids.tolist(), self.templates.tolist(), self.problems, self.attrs.tolist()]
        text = _as_text(fields)
        return pickle.dumps((text, codes, self.block.edges, self.block.probs), protocol=pickle.HIGHEST_PROTOCOL)

    def events_to_bytes(self) -> bytes:
        """The events themselves as bytes: :func:`events_from_bytes` gives back events equal
        to :meth:`event`'s, field for field, without parsing them again (a pattern's or a lossy
        query's operator reads events). An interval or an instant travels as its bounds, a
        template timestamp as its name and detection time (made again as the parser makes
        it), any other event as its fields."""
        # a common event's fields are the columns' (its stamps); any other event's, its own
        low, high = self._parsed[0].copy() if self._parsed is not None else np.full((2, len(self)), np.nan)
        others, rows, lows, highs = {}, [], [], []
        if self._parsed is None or _any_made(self._events):
            for i, event in enumerate(self._events):
                if event is None:
                    if self._parsed is not None:
                        continue
                    event = self.event(i)
                ts = event.ts
                if type(ts) is Interval and ts.pmf is None:
                    rows.append(i)
                    lows.append(ts.lo)
                    highs.append(ts.hi)
                else:
                    others[i] = (ts, event.template, event.detected)
        low[rows], high[rows] = lows, highs
        names, codes = self.coded
        fields = [names, self.ids.tolist(), self.templates.tolist(), self.attrs.tolist()]
        text = _as_text(fields)
        return pickle.dumps((text, codes, low, high, others), protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> EventColumns:
        text, codes, edges, probs = pickle.loads(data)
        names, ids, templates, problems, attrs = _from_text(text)
        columns = cls(_objects(names)[codes], _objects(ids), HistogramBlock(edges, probs), _objects(templates),
                      problems, _objects(attrs))
        columns.coded = (names, codes)
        return columns


def events_from_bytes(data: bytes, streams: Streams | None) -> list[Event]:
    """The events of :meth:`EventColumns.events_to_bytes`, their templates resolved with
    ``streams`` (the ones they were parsed with) as the parser resolves a block's."""
    text, codes, low, high, others = pickle.loads(data)
    names, ids, templates, attrs = _from_text(text)
    stream_of = [names[code] for code in codes.tolist()]
    lows, highs = low.tolist(), high.tolist()
    events: list = [None] * len(ids)
    block = _TemplateBlock(events)
    for i, name in enumerate(templates):
        values = MappingProxyType(attrs[i]) if attrs[i] else _NO_ATTRS
        if i in others:
            ts, template, detected = others[i]
            events[i] = Event._checked(stream_of[i], ids[i], ts, values, template, detected)
        elif name is None:
            events[i] = Event._checked(stream_of[i], ids[i], Interval._checked(lows[i], highs[i]), values)
        else:
            block.index = i
            block.defer(streams._by_key[stream_of[i].casefold()].templates[name], stream_of[i], ids[i], values, name,
                        lows[i])
    block.resolve()
    return events


def _as_text(fields: list) -> bytes | list:
    """``fields`` as orjson writes them, or as they are (pickled with the rest) where it
    cannot carry them exactly (an integer beyond 64 bits, a lone surrogate) or is not installed."""
    if orjson is None:
        return fields
    try:
        return orjson.dumps(fields)
    except TypeError:     # orjson.JSONEncodeError: what JSON cannot carry exactly
        return fields


def _from_text(text: bytes | list) -> list:
    if not isinstance(text, bytes):
        return text
    return orjson.loads(text) if orjson is not None else json.loads(text)
