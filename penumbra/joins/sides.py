"""One source of a join: the stream a query variable reads, with what the join needs of it.

A side holds its stream's parameters (the longest timestamp pi, the templates phi_u of a
template stream, the max delay D), its one-source filters and its key attributes, and
decides which events it can join: a template event (PTJoin's ``a |= phi_u``: the
template's histogram at its detection time), or an explicit histogram no longer than the
stream's pi. A stream that declares templates and no pi is template-only, which Theorem 4's
buffer bound relies on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import ValidationError
from ..events import Event, StreamParams
from ..events.columns import EventColumns
from ..timestamps import Histogram

__all__ = ["Side"]


@dataclass
class Side:
    """One source of the join: its variable (``A``), stream (case-folded), parameters,
    filters and key attributes; its templates by index (``template_names[u]`` is phi_u)."""

    var: str
    stream: str
    params: StreamParams
    filters: tuple = ()
    key: tuple[str, ...] = ()
    template_names: list[str] = field(init=False)

    def __post_init__(self):
        self.template_names = list(self.params.templates)
        self.template_index = {name: k for k, name in enumerate(self.template_names)}
        self.templates = [self.params.templates[name] for name in self.template_names]

    @property
    def longest_timestamp(self) -> float | None:
        """pi: the longest timestamp the stream can give (None: no bound)."""
        return self.params.longest

    def admit(self, event: Event) -> tuple[Histogram, int] | str:
        """The event's histogram and template index (-1 for an explicit timestamp), or why
        it cannot be joined."""
        if event.template is not None:
            if event.template not in self.template_index:
                return self._unknown_template(event.template)
            ts = event.ts
            return ts if type(ts) is Histogram else event.histogram, self.template_index[event.template]
        if self.params.template_only:
            return self._template_only()
        try:
            histogram = event.histogram
        except ValidationError as error:
            return str(error)
        problem = self.params.too_wide(histogram.length)
        if problem is not None:
            return f"ts: {problem}"
        return histogram, -1

    def admit_columns(self, columns: EventColumns, rows: np.ndarray) -> tuple[np.ndarray, list[str | None]]:
        """:meth:`admit` for the events ``rows`` of a block: each one's template index (-1
        for an explicit timestamp, -2 when it cannot be joined) and the reason where it
        cannot (else None)."""
        names = columns.templates[rows].tolist()
        template = np.fromiter((-1 if name is None else self.template_index.get(name, -2) for name in names),
                               dtype=np.int64, count=len(names))
        reasons: list[str | None] = [None] * len(names)
        for j in np.flatnonzero(template < 0).tolist():
            i, name = int(rows[j]), names[j]
            if name is not None:
                reasons[j] = self._unknown_template(name)
            elif self.params.template_only:
                reasons[j] = self._template_only()
            elif columns.problems[i] is not None:
                reasons[j] = columns.problems[i]
            else:
                problem = self.params.too_wide(float(columns.block.hi[i] - columns.block.lo[i]))
                if problem is None:
                    continue
                reasons[j] = f"ts: {problem}"
            template[j] = -2
        return template, reasons

    def _unknown_template(self, name: str) -> str:
        return f"ts.template: unknown template {name!r} for stream {self.params.name!r}"

    def _template_only(self) -> str:
        return (f"ts: stream {self.params.name!r} declares templates and no pi, so a join reads "
                f"only template timestamps from it")
