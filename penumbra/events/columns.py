"""A block of events as columns: what a join reads of each event, built once.

A join works on arrays (its buffers are :class:`~penumbra.joins.rows.Rows`), so the events
of a block reach it as columns: their streams, ids, continuous timestamps as one
:class:`~penumbra.timestamps.HistogramBlock`, template names and attributes. The columns
are built from parsed events (:meth:`EventColumns.from_events`), travel as bytes between
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

import pickle
from functools import cached_property
from typing import Any, Sequence

import numpy as np
import orjson

from ..errors import ValidationError
from ..timestamps import Histogram, HistogramBlock
from .model import Event

__all__ = ["EventColumns"]

#: The timestamp kept for an event whose own has no continuous reading (never joined).
_PLACEHOLDER = Histogram([0.0, 1.0], [1.0])


def _objects(values: Sequence[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = list(values)
    return out


class EventColumns:
    """``n`` events as columns: ``streams`` and ``ids`` (as sent), ``block`` (each event's
    continuous timestamp; a placeholder where it has none), ``templates`` (the template
    name, or None for an explicit timestamp), ``problems`` (why an explicit timestamp has
    no continuous reading, else None) and ``attrs`` (plain dicts)."""

    def __init__(self, streams: np.ndarray, ids: np.ndarray, block: HistogramBlock, templates: np.ndarray,
                 problems: list[str | None], attrs: np.ndarray, events: Sequence[Event] | None = None):
        self.streams, self.ids, self.block, self.templates = streams, ids, block, templates
        self.problems, self.attrs = problems, attrs
        self._events: list[Event | None] = list(events) if events is not None else [None] * len(ids)

    @classmethod
    def from_events(cls, events: Sequence[Event]) -> EventColumns:
        histograms, templates, problems = [], [], []
        for event in events:
            problem = None
            if event.template is not None:
                ts = event.ts
                histogram = ts if type(ts) is Histogram else event.histogram
            else:
                try:
                    histogram = event.histogram
                except ValidationError as error:
                    histogram, problem = _PLACEHOLDER, str(error)
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
    def folded(self) -> np.ndarray:
        """Each event's stream name, case folded (as queries name streams)."""
        names = {name: name.casefold() for name in set(self.streams.tolist())}
        return _objects([names[name] for name in self.streams.tolist()])

    def event(self, i: int) -> Event:
        """Event ``i`` (the one the columns were built from, or one made of the columns:
        its stream, id, continuous timestamp and attributes); the same object every time."""
        event = self._events[i]
        if event is None:
            ts = self.block.histogram(i)
            event = self._events[i] = Event._checked(self.streams[i], self.ids[i], ts, self.attrs[i],
                                                     self.templates[i])
        return event

    def take(self, index: np.ndarray) -> EventColumns:
        """The events at ``index``, in its order."""
        index = np.asarray(index, dtype=np.int64)
        return EventColumns(self.streams[index], self.ids[index], self.block.take(index), self.templates[index],
                            [self.problems[i] for i in index.tolist()], self.attrs[index],
                            [self._events[i] for i in index.tolist()])

    @classmethod
    def concat(cls, parts: Sequence[EventColumns]) -> EventColumns:
        parts = [part for part in parts if len(part)]
        if not parts:
            return cls.from_events([])
        if len(parts) == 1:
            return parts[0]
        return cls(np.concatenate([p.streams for p in parts]), np.concatenate([p.ids for p in parts]),
                   HistogramBlock.concat([p.block for p in parts]), np.concatenate([p.templates for p in parts]),
                   [x for p in parts for x in p.problems], np.concatenate([p.attrs for p in parts]),
                   [x for p in parts for x in p._events])

    def to_bytes(self) -> bytes:
        """The columns as bytes (:meth:`from_bytes` reads them back; the events themselves
        stay). The names, ids and attributes go as one JSON array where orjson writes them
        as they are (a third of pickle's time), else pickled (an integer beyond 64 bits, a
        lone surrogate); the timestamps as the block's arrays."""
        fields = [self.streams.tolist(), self.ids.tolist(), self.templates.tolist(), self.problems,
                  self.attrs.tolist()]
        try:
            text: bytes | list = orjson.dumps(fields)
        except TypeError:     # orjson.JSONEncodeError: what JSON cannot carry exactly
            text = fields
        return pickle.dumps((text, self.block.edges, self.block.probs), protocol=pickle.HIGHEST_PROTOCOL)

    @classmethod
    def from_bytes(cls, data: bytes) -> EventColumns:
        text, edges, probs = pickle.loads(data)
        streams, ids, templates, problems, attrs = orjson.loads(text) if isinstance(text, bytes) else text
        return cls(_objects(streams), _objects(ids), HistogramBlock(edges, probs), _objects(templates), problems,
                   _objects(attrs))
