"""The checkpoint's identity (penumbra.json): written at the first start, kept by every
restart whatever the settings say now, with a warning where they differ."""

from __future__ import annotations

import json
import logging

from spark_jobs.job import Job
from spark_jobs.settings import JobSettings


def job(tmp_path, **settings) -> Job:
    # the identity needs neither Spark nor a reachable Redis
    return Job(None, JobSettings(home=tmp_path, redis_url="redis://127.0.0.1:1/0", **settings))


def test_the_first_start_records_groups_and_placement(tmp_path):
    first = job(tmp_path, shuffle_partitions=3)
    assert first.identity["key_groups"] == 6 and first.identity["placed"] == 3
    unplaced = job(tmp_path / "other", shuffle_partitions=3, place_groups=False)
    assert unplaced.identity["placed"] == 0


def test_a_restart_keeps_the_checkpoints_identity_and_says_what_differs(tmp_path, caplog):
    first = job(tmp_path, shuffle_partitions=2)
    with caplog.at_level(logging.WARNING):
        again = job(tmp_path, shuffle_partitions=2)
    assert again.identity == first.identity and not caplog.records
    with caplog.at_level(logging.WARNING):
        changed = job(tmp_path, shuffle_partitions=4, place_groups=False)
    assert changed.identity == first.identity
    said = " ".join(r.getMessage() for r in caplog.records)
    assert "4 key groups; keeping them (setting asks for 8)" in said
    assert "2 shuffle partitions in turn; keeping that (settings ask for partitions by Spark's hash)" in said


def test_a_checkpoint_from_before_placement_keeps_sparks_placement(tmp_path, caplog):
    folder = tmp_path / "var" / "checkpoint"
    folder.mkdir(parents=True)
    (folder / "penumbra.json").write_text(json.dumps({"job": "old", "key_groups": 4}))
    with caplog.at_level(logging.WARNING):
        old = job(tmp_path, shuffle_partitions=2)
    assert old.identity == {"job": "old", "key_groups": 4}
    assert "partitions by Spark's hash; keeping that" in " ".join(r.getMessage() for r in caplog.records)
