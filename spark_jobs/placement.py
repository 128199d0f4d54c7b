"""Key groups placed evenly on Spark's shuffle partitions.

Spark puts the key ``(qid, grp)`` of the stateful step on shuffle partition
``pmod(murmur3(qid, grp), partitions)`` (its ``HashPartitioning``, seed 42). With a few
groups per query that hash often places them unevenly: four groups on two partitions fall
two and two for only three ids in eight (three and one with probability 1/2, all four on
one with 1/8), and then one core does most of the work.

The job therefore keys the step by ``(qid, grp, slot)``: ``slot`` is the smallest
non-negative integer that sends the group to partition ``(grp + offset(qid)) mod
partitions``, so a query's groups take the partitions in turn, and queries with fewer
groups than partitions start at different partitions. ``slot`` is a function of the
query id, the group and the partition count alone, computed where rows are made (on
executors) without asking Spark.
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["murmur3_bytes", "murmur3_int", "partition_of", "slot", "spark_hash", "target"]

_SEED = 42
_C1, _C2, _MASK = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    return (_rotl((k1 * _C1) & _MASK, 15) * _C2) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    return (_rotl(h1 ^ k1, 13) * 5 + 0xE6546B64) & _MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    return h1 ^ (h1 >> 16)


def murmur3_bytes(data: bytes, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashUnsafeBytes`` (a string column): little-endian words,
    then each trailing byte, sign-extended, as a word of its own."""
    h1 = seed & _MASK
    aligned = len(data) - len(data) % 4
    for i in range(0, aligned, 4):
        h1 = _mix_h1(h1, _mix_k1(int.from_bytes(data[i:i + 4], "little")))
    for byte in data[aligned:]:
        h1 = _mix_h1(h1, _mix_k1((byte - 256 if byte > 127 else byte) & _MASK))
    return _fmix(h1, len(data))


def murmur3_int(value: int, seed: int) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (an int column)."""
    return _fmix(_mix_h1(seed & _MASK, _mix_k1(value & _MASK)), 4)


def _signed(h: int) -> int:
    return h - (1 << 32) if h & 0x80000000 else h


def spark_hash(query_id: str, group: int, slot_: int) -> int:
    """Spark SQL's ``hash(qid, grp, slot)`` of a string and two int columns (signed)."""
    h = murmur3_bytes(query_id.encode(), _SEED)
    h = murmur3_int(group, h)
    return _signed(murmur3_int(slot_, h))


def partition_of(query_id: str, group: int, slot_: int, partitions: int) -> int:
    """The shuffle partition Spark gives the key ``(query_id, group, slot_)``:
    ``pmod(hash(qid, grp, slot), partitions)``."""
    return spark_hash(query_id, group, slot_) % partitions


def target(query_id: str, group: int, partitions: int) -> int:
    """The partition a query's group is meant for: the groups in turn from an offset that
    depends on the query (so single-group queries spread too)."""
    return (group + murmur3_bytes(query_id.encode(), 0) % partitions) % partitions


@lru_cache(maxsize=65536)
def slot(query_id: str, group: int, partitions: int) -> int:
    """The smallest slot that places ``(query_id, group)`` on its :func:`target`
    partition (on average ``partitions`` tries)."""
    want = target(query_id, group, partitions)
    candidate = 0
    while partition_of(query_id, group, candidate, partitions) != want:
        candidate += 1
    return candidate
