"""The Penumbra query language: one lark grammar, errors with line and column.

>>> q = parse("SELECT * FROM SEISMIC A, ACOUSTIC B WHERE WINDOW(A, B) = 2000 WITH THRESHOLD 0.6")
>>> q.kind, q.window, q.threshold
('join', 2000.0, 0.6)
"""

from .errors import QueryError
from .join import JOIN_STRATEGIES, JoinQuery, Source
from .parser import parse, parse_expression
from .pattern import PATTERN_METHODS, PATTERN_STRATEGIES, PatternComponent, PatternQuery
from .sequence import GapSpec, SequenceComponent, SequenceQuery
from .sources import AttributeWarning, check_registered, unseen_attributes

__all__ = ["AttributeWarning", "GapSpec", "JOIN_STRATEGIES", "JoinQuery", "PATTERN_METHODS", "PATTERN_STRATEGIES",
           "PatternComponent", "PatternQuery", "QueryError", "SequenceComponent", "SequenceQuery", "Source",
           "check_registered", "parse", "parse_expression", "unseen_attributes"]
