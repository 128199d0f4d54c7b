"""Probabilistic complex event processing over lossy streams (the AYAC paper).

Events may be missed by their readers with probability epsilon (the stream's
``miss_prob``); a ``SEQUENCE`` query reports a match with the probability that the
complex event happened, given what was and was not observed. The query syntax
(negation, ``DEFAULT``, ``GAP``) is in :mod:`penumbra.query.sequence`, its gap
densities in :mod:`penumbra.events.streams`. Here:

* :mod:`.model`: the probabilistic model (section 3): F_i, S^P, S^N, S^{N...N} and any
  run's score, and the online estimate of a gap density;
* :mod:`.plan`: the NFA planned from the query (section 4): states, negatives, hash
  attributes (section 5.2) and what each DNF clause checks;
* :mod:`.densities`: the gap densities in force, fixed or learned online;
* :mod:`.tables`: the scoring tables H_{i,j} and G_{i,j} of the NFA's edges, and the
  bound u of an arrival (sections 4.1 and 5.1);
* :mod:`.queues`: the PAQs and NAQs as numpy columns, and the imprecise negative events;
* :mod:`.held`: the external buffer (section 2.1) and timestamps read on the grid;
* :mod:`.generation`: backward match generation (section 4.2);
* :mod:`.worlds`: a match's probability over the possible worlds of imprecise timestamps;
* :mod:`.waiting`: the matches waiting for their trailing negatives' window or their worlds;
* :mod:`.matches`: what a reported match holds, and its factors;
* :mod:`.operator`: :class:`LossyOperator`, which runs blocks of events through them.

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
