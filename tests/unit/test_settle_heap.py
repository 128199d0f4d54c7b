"""What an executor process keeps leaves the collector's sight at each task, and a cycle
among it is reclaimed at the next review."""

from __future__ import annotations

import gc
import weakref

import pytest

from spark_jobs import routing


class Node:
    pass


@pytest.fixture
def tasks(monkeypatch):
    monkeypatch.setattr(routing, "REVIEW_TASKS", 4)
    monkeypatch.setattr(routing, "_tasks", 1)      # the first task, with its review, is behind
    yield
    gc.unfreeze()


def test_what_a_task_starts_with_is_frozen_and_a_cycle_among_it_is_reviewed(tasks):
    kept = [Node() for _ in range(1_000)]
    before = gc.get_freeze_count()
    routing.settle_heap()                   # task 2
    assert gc.get_freeze_count() >= before + len(kept)
    cycle = Node()
    cycle.me = cycle
    alive = weakref.ref(cycle)
    routing.settle_heap()                   # task 3: the cycle is frozen with the rest
    del cycle
    gc.collect()
    assert alive() is not None, "a frozen cycle is out of the collector's sight"
    routing.settle_heap()                   # task 4
    assert alive() is not None
    routing.settle_heap()                   # task 5: the review (every 4) unfreezes and collects
    assert alive() is None
    assert all(isinstance(node, Node) for node in kept)


def test_an_object_frozen_is_still_freed_with_its_last_reference(tasks):
    node = Node()
    alive = weakref.ref(node)
    routing.settle_heap()
    del node
    assert alive() is None
