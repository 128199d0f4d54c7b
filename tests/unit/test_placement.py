"""Key groups placed on shuffle partitions: the hash is Spark SQL's own (values computed
by Spark 4 with ``SELECT hash(qid, grp, slot)``), and each query's groups take the
partitions in turn."""

from __future__ import annotations

from collections import Counter

import pytest

from spark_jobs.placement import partition_of, slot, spark_hash, target

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
    assert spark_hash(query_id, group, slot_) == expected


def test_a_partition_is_sparks_pmod_of_the_hash():
    # pmod(-1558632185, 7) in Spark (Java): ((h % 7) + 7) % 7 = 2
    assert partition_of("j", 1, 0, 7) == 2
    assert partition_of("ab", 2, 5, 7) == 561010678 % 7


@pytest.mark.parametrize("partitions, groups", [(1, 2), (2, 4), (2, 2), (3, 6), (4, 8), (8, 16), (3, 4)])
def test_the_targets_of_a_querys_groups_take_the_partitions_in_turn(partitions, groups):
    for n in range(200):
        query_id = f"q-{n:03d}"
        targets = [target(query_id, g, partitions) for g in range(groups)]
        assert all(0 <= t < partitions for t in targets)
        assert all(targets[g + 1] == (targets[g] + 1) % partitions for g in range(groups - 1))
        load = Counter(targets)
        assert max(load.values()) - min(load.get(p, 0) for p in range(partitions)) <= 1


def test_single_group_queries_spread_over_the_partitions():
    starts = Counter(target(f"q-{n}", 0, 4) for n in range(400))
    assert set(starts) == {0, 1, 2, 3} and min(starts.values()) > 60


def test_a_slot_is_the_smallest_that_places_the_group_and_stays_small():
    for n in range(300):
        query_id, group, partitions = f"s{n}", n % 5, 1 + n % 4
        found = slot(query_id, group, partitions)
        want = target(query_id, group, partitions)
        assert partition_of(query_id, group, found, partitions) == want
        assert all(partition_of(query_id, group, s, partitions) != want for s in range(found))
        assert found < 64
