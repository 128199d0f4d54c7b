"""Penumbra: monitoring live events whose timestamps are uncertain.

The core: timestamps as intervals or histograms, the exact probability kernels of the
PTJoin paper, and one operator interface over joins, patterns and lossy CEP, driven a
block of events at a time.

>>> streams = parse_streams({"S": {"pi": 10}, "T": {"pi": 10}})
>>> op = compile_query("SELECT * FROM S A, T B WHERE WINDOW(A, B) = 5 WITH THRESHOLD 0.5", streams)
>>> events = [parse_event({"stream": "S", "id": "s1", "ts": {"lo": 0, "hi": 4}}, streams),
...           parse_event({"stream": "T", "id": "t1", "ts": {"lo": 2, "hi": 6}}, streams)]
>>> [m.to_json() for m in op.feed(events).matches]
[{'events': {'A': 's1', 'B': 't1'}, 'prob': 0.96875}]
>>> round(p_within(Histogram.uniform(0, 4), Histogram.uniform(2, 6), 5), 5)
0.96875
"""

from .engine import compile_query
from .errors import PenumbraError, ValidationError
from .events import parse_event, parse_streams
from .operator import Match, Operator
from .probability import p_geq, p_within, stime
from .query import QueryError
from .timestamps import Histogram

__all__ = ["Histogram", "Match", "Operator", "PenumbraError", "QueryError", "ValidationError", "compile_query",
           "p_geq", "p_within", "parse_event", "parse_streams", "stime"]

__version__ = "0.1.0"
