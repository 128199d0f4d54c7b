"""Key groups placed on shuffle partitions: the hash is Spark SQL's own (values computed
by Spark 4 with ``SELECT hash(qid, grp, slot)``), and each query's groups take the
partitions in turn."""

from __future__ import annotations

from collections import Counter

import pytest

from spark_jobs.placement import key_hash, partition_of, slot, target

# computed by Spark: spark.createDataFrame(rows, "qid string, grp int, slot int").select(F.hash(...))
SPARK_HASHES = [
    ("j", 1, 0, -1558632185),
    ("ab", 2, 5, 561010678),
    ("abc", 3, 9, 1673058925),
    ("abcd", 0, 1, -348419445),
    ("intrusion", 3, 12, -917939582),
    ("t-1f2e3d4c", 7, 0, -1976301258),
    ("déjà-vu", 1, 2, -1016311546),
    ("ÿ€", 0, 3, -1838341987),
    ("shoplifting-exit", 5, 40, -1873462267),
    ("x", -1, 2147483647, -1427418518),
]


@pytest.mark.parametrize("query_id, group, slot_, expected", SPARK_HASHES)
def test_the_key_hash_is_spark_sqls_hash(query_id, group, slot_, expected):
    assert key_hash(query_id, group, slot_) == expected


def test_a_partition_is_the_non_negative_remainder_of_the_hash():
    assert partition_of("j", 1, 0, 7) == 2  # Spark: pmod(-1558632185, 7)
    assert all(0 <= partition_of(q, g, s, p) < p for q, g, s, _ in SPARK_HASHES for p in (1, 2, 3, 16))


@pytest.mark.parametrize("partitions, groups", [(1, 2), (2, 4), (2, 2), (3, 6), (4, 8), (8, 16), (5, 1)])
def test_each_querys_groups_take_the_partitions_in_turn(partitions, groups):
    for n in range(200):
        query_id = f"q-{n:03d}"
        placed = [partition_of(query_id, g, slot(query_id, g, partitions), partitions) for g in range(groups)]
        assert placed == [target(query_id, g, partitions) for g in range(groups)]
        assert all(placed[g + 1] == (placed[g] + 1) % partitions for g in range(groups - 1))
        load = Counter(placed)
        assert max(load.values()) - min(load.get(p, 0) for p in range(partitions)) <= 1


def test_single_group_queries_spread_over_the_partitions():
    starts = Counter(target(f"q-{n}", 0, 4) for n in range(400))
    assert set(starts) == {0, 1, 2, 3} and min(starts.values()) > 60


def test_a_slot_is_the_smallest_that_places_the_group():
    for n in range(100):
        query_id, partitions = f"s{n}", 3
        found = slot(query_id, 1, partitions)
        want = target(query_id, 1, partitions)
        assert all(partition_of(query_id, 1, s, partitions) != want for s in range(found))
        assert found < 64
