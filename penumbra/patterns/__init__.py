"""Pattern queries over events with imprecise timestamps (Zhang, Diao and Immerman).

SASE patterns ``SEQ(E_1, ..., E_l)`` with predicates, a window and a selection strategy,
evaluated under possible-world semantics with match collapsing: each match signature
comes out once, with its time range and confidence. Four methods return the same matches:
``point`` (section 3), ``any_state`` (4.2), ``sorted`` (query order fed by sorting,
4.1 and 4.3) and ``selectivity`` (4.3).

>>> from penumbra.query import parse
>>> from penumbra.events import Event
>>> from penumbra.timestamps import Interval
>>> op = build_operator(parse("PATTERN SEQ(A a, B b) WITHIN 10"), None)
>>> _ = op.feed([Event("A", "a1", Interval(1, 2)), Event("B", "b1", Interval(2, 3))])
>>> [(m.events, m.prob, m.range) for m in op.flush().matches]
[({'a': 'a1', 'b': 'b1'}, 0.75, (1.0, 3.0))]
"""

from __future__ import annotations

from ..events import Streams
from ..query.pattern import PatternQuery
from .operator import PatternOperator

__all__ = ["PatternOperator", "build_operator"]


def build_operator(query: PatternQuery, streams: Streams | None) -> PatternOperator:
    """The operator evaluating ``query`` with the method it names (``USING``, default ``sorted``)."""
    return PatternOperator(query, streams)
