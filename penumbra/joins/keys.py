"""The join's equality key (``A.region = B.region``): an event's key values, the key the
join takes them as, and one code per key for a whole block.

Two events are partners only when their keys are one key: equal values, neither absent,
and a boolean equal only to a boolean (1, 1.0 and -0.0/0.0 alike, but True is not 1).
A key is ``((is_boolean, value), ...)``, one item per key attribute, so a dict or an
equality test tells keys apart exactly as the join does. The buffers hold their rows by
the code of that key (:mod:`.held`).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

__all__ = ["join_key", "key_codes", "key_values"]


def key_values(attrs: list[Mapping[str, Any]], names: tuple[str, ...]) -> list:
    """Each event's key values: with one name the value itself, with several their tuple;
    None for an event without one of them (missing or null)."""
    if len(names) == 1:
        name = names[0]
        return [values.get(name) for values in attrs]
    found = [tuple([values.get(name) for name in names]) for values in attrs]
    return [None if None in values else values for values in found]


def key_codes(values: list) -> tuple[np.ndarray, list[tuple | None]]:
    """Each event's code for its key values (:func:`key_values`), and for each code in order
    of first appearance the join's key (:func:`join_key`; None: no key). Values the join
    takes as one key share a code.

    Values are coded as they are, in one dict pass; only when a boolean may hide behind an
    equal number (some key equal to 0 or 1, or a tuple) are they looked at one by one.

    >>> codes, keys = key_codes(["n", 1, None, 1.0, True, "n"])
    >>> codes.tolist(), keys
    ([0, 1, 2, 1, 3, 0], [((False, 'n'),), ((False, 1),), None, ((True, True),)])
    """
    first: dict = {}
    codes = [first.setdefault(value, len(first)) for value in values]
    if (0 in first or 1 in first or any(type(value) is tuple for value in first)) \
            and any(_holds_boolean(value) for value in values):
        first = {}
        codes = [first.setdefault(join_key(value), len(first)) for value in values]
        distinct = list(first)
    else:
        distinct = [join_key(value) for value in first]
    return np.asarray(codes, dtype=np.int64), distinct


def join_key(value: Any) -> tuple | None:
    """The join's key of an event's key values, ``((is_boolean, value), ...)``; None for none."""
    if value is None:
        return None
    return tuple([(type(item) is bool, item) for item in (value if type(value) is tuple else (value,))])


def _holds_boolean(value: Any) -> bool:
    return type(value) is bool or type(value) is tuple and any(type(item) is bool for item in value)
