"""Probabilistic complex event processing over lossy streams (the AYAC paper).

Events may be missed by their readers with probability epsilon (the stream's
``miss_prob``); a ``SEQUENCE`` query reports a match with the probability that the
complex event happened, given what was and was not observed. The query syntax
(negation, ``DEFAULT``, ``GAP``) is in :mod:`penumbra.query.sequence`; the model and
its scoring functions in :mod:`.model`; the NFA in :mod:`.operator`, its queues in
:mod:`.queues`, what it plans from the query in :mod:`.plan` and its backward match
generation in :mod:`.matches`.

>>> from penumbra.query import parse
>>> from penumbra.events import parse_streams
>>> op = build_operator(parse("SEQUENCE(Shelf x, !Counter y, Exit z) "
...                           "WHERE x.tag = z.tag AND y.tag = x.tag WITHIN 100 THRESHOLD 0.5"),
...                     parse_streams({"counter": {"miss_prob": 0.1}}))
>>> type(op).__name__
'LossyOperator'
"""

from __future__ import annotations

from .model import GapHistogram, RunComponent, run_score, s_negative, s_negatives, s_positive
from .operator import LossyOperator

__all__ = ["GapHistogram", "LossyOperator", "RunComponent", "build_operator", "run_score",
           "s_negative", "s_negatives", "s_positive"]


def build_operator(query, streams) -> LossyOperator:
    """The operator for a parsed ``SEQUENCE`` query over streams with these parameters."""
    return LossyOperator(query, streams)
