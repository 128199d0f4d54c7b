"""Key groups: how one query's state spreads over a cluster.

Every operator partitions its state by the query's equality key (a join's
``A.region = B.region``, a pattern's ``a.nodeId = b.nodeId`` chain, a lossy query's
hashed queues). A cluster hosts a query as ``count`` *key groups*: the group of a key
is a stable hash of its values modulo ``count``, so the number of operator snapshots
restored per micro-batch is bounded by the groups, not by the distinct keys.

An operator built for a group (``key_group=KeyGroup(index, count)``) keeps the state of
the keys its group owns and nothing else; an event reaches every group that owns one
of its keys (an event can play several roles, e.g. both sides of a self-join keyed on
different attributes), and every group when it plays a role that is not keyed (a
negative component not tied to the key). So the union of the groups' matches is the
one operator's, each match found exactly once.

>>> g = KeyGroup(0, 4)
>>> key_hash(("north",)) == key_hash(("north",)), key_hash((1,)) == key_hash((1.0,)) == key_hash((True,))
(True, True)
>>> g.owns(("north",)) == (key_hash(("north",)) % 4 == 0)
True
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

__all__ = ["KeyGroup", "Routing", "key_hash"]

#: Roles of each stream a query reads (case-folded stream name -> attribute tuples):
#: an event of the stream is keyed, in each role, by the values of those attributes;
#: an empty tuple is a role that is not keyed (its events concern every key).
Roles = Mapping[str, Sequence[tuple[str, ...]]]


def _canonical(value: Any) -> str:
    """One spelling per key the operators tell apart or not: the operators key dicts
    by value, where ``1 == 1.0 == True``, so those spell alike (a join that separates
    ``True`` from ``1`` still finds both in the same group)."""
    if value is None:
        return "z"
    if isinstance(value, str):
        return "s" + value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool):
        value = int(value)
    return "n" + (str(value) if isinstance(value, int) else repr(float(value)))


def key_hash(values: Iterable[Any]) -> int:
    """A 64-bit hash of a key's values, the same in every process and on every machine
    (Python's own ``hash`` of a string changes from process to process). Remembered for
    the last keys seen: values equal in Python (``1``, ``1.0``, ``True``) are one entry, as
    they spell alike."""
    key = values if type(values) is tuple else tuple(values)
    try:
        found = _HASHES.get(key)
    except TypeError:       # an unhashable value
        return _key_hash(key)
    if found is None:
        if len(_HASHES) >= _CACHED_HASHES:
            _HASHES.clear()
        found = _HASHES[key] = _key_hash(key)
    return found


def _key_hash(values: tuple) -> int:
    text = "\x1f".join(map(_canonical, values))
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


#: keys whose hashes are remembered (streams repeat a bounded set of keys: tags, regions)
_CACHED_HASHES = 1 << 16
_HASHES: dict[tuple, int] = {}


@dataclass(frozen=True)
class KeyGroup:
    """Group ``index`` of ``count``: the keys whose hash is ``index`` modulo ``count``."""

    index: int
    count: int

    def __post_init__(self):
        if not (isinstance(self.count, int) and self.count >= 1 and 0 <= self.index < self.count):
            raise ValueError(f"key group {self.index} of {self.count}: need 0 <= index < count")

    def owns(self, values: Iterable[Any]) -> bool:
        return self.count == 1 or key_hash(values) % self.count == self.index


class Routing:
    """Which key groups each event of a query must reach.

    ``roles`` comes from the operator (:meth:`~penumbra.operator.Operator.partition_keys`)
    and names every stream the query reads. When no role is keyed, the state cannot be
    split and the query has one group.
    """

    #: keys whose groups are remembered (streams repeat a bounded set of keys: tags, regions)
    CACHED_KEYS = 1 << 16

    def __init__(self, roles: Roles, count: int):
        self.roles = {stream.casefold(): tuple(attrs) for stream, attrs in roles.items()}
        keyed = any(attributes for attrs in self.roles.values() for attributes in attrs)
        self.count = count if keyed else 1
        #: each stream's key attributes, role after role (what a key's cache entry holds)
        self._names = {stream: [name for attributes in attrs for name in attributes]
                       for stream, attrs in self.roles.items()}
        self._known: dict[tuple, list[int]] = {}

    def groups(self, stream: str, attrs: Mapping[str, Any]) -> list[int]:
        """The groups an event of ``stream`` with these attributes must reach (none when
        the query does not read the stream)."""
        roles = self.roles.get(stream.casefold())
        if roles is None:
            return []
        if self.count == 1:
            return [0]
        # the key's values spell the same in the cache as in key_hash: 1, 1.0 and True alike
        names = self._names[stream.casefold()]
        return self._cached(roles, (stream.casefold(), *[attrs.get(name) for name in names]), names)

    def assign(self, stream: str, attrs: Sequence[Mapping[str, Any]]) -> dict[int, np.ndarray]:
        """:meth:`groups` for a block of events of ``stream`` with these attributes: each
        group's positions in the block, ascending (groups that get none left out). The
        groups are found once per key value the block holds, not once per event.

        >>> routing = Routing({"s": [("k",)]}, 4)
        >>> shares = routing.assign("s", [{"k": 1}, {"k": 2}, {"k": 1.0}])
        >>> sorted(shares[key_hash((1,)) % 4].tolist())
        [0, 2]
        """
        roles = self.roles.get(stream.casefold())
        n = len(attrs)
        if roles is None or n == 0:
            return {}
        if self.count == 1:
            return {0: np.arange(n)}
        folded = stream.casefold()
        names = self._names[folded]
        # a key value's code: values the operators take as one (1, 1.0, True) share it, as they share a group
        codes_of: dict = {}
        code = codes_of.setdefault
        if len(names) == 1:
            name = names[0]
            values = [code(a.get(name), len(codes_of)) for a in attrs]
        else:
            values = [code(tuple([a.get(name) for name in names]), len(codes_of)) for a in attrs]
        codes = np.asarray(values, dtype=np.int64)
        member = np.zeros((self.count, len(codes_of)), dtype=bool)
        for key, index in codes_of.items():
            member[self._cached(roles, (folded, key) if len(names) == 1 else (folded, *key), names), index] = True
        out = {}
        for group in range(self.count):
            positions = np.flatnonzero(member[group][codes])
            if len(positions):
                out[group] = positions
        return out

    def _cached(self, roles: Sequence[tuple[str, ...]], known: tuple, names: list[str]) -> list[int]:
        """The groups of the key ``known`` (the stream, then the values of ``names``), remembered."""
        found = self._known.get(known)
        if found is None:
            if len(self._known) >= self.CACHED_KEYS:
                self._known.clear()
            found = self._known[known] = self._groups(roles, dict(zip(names, known[1:])))
        return found

    def _groups(self, roles: Sequence[tuple[str, ...]], attrs: Mapping[str, Any]) -> list[int]:
        groups = set()
        for attributes in roles:
            if not attributes:
                return list(range(self.count))
            groups.add(key_hash(attrs.get(name) for name in attributes) % self.count)
        return sorted(groups)
