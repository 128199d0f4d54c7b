"""The collector paused across threads: off while any thread's block is open, on again
when the last closes (the job's sink writes one batch in a thread while the next is
collected; the service parses requests in a thread pool)."""

from __future__ import annotations

import gc
import threading

import pytest

from penumbra.events import collector_paused


@pytest.fixture(autouse=True)
def collector_on():
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_overlapping_blocks_in_two_threads_keep_it_off_until_the_last_closes():
    first_open, second_open, first_closed, second_may_close = (threading.Event() for _ in range(4))
    seen: dict[str, bool] = {}

    def second():
        first_open.wait()
        with collector_paused():
            second_open.set()
            first_closed.wait()
            seen["after the first closed"] = gc.isenabled()
            second_may_close.wait()

    thread = threading.Thread(target=second)
    thread.start()
    with collector_paused():
        seen["in the first"] = gc.isenabled()
        first_open.set()
        second_open.wait()
    first_closed.set()
    seen["the second still open"] = gc.isenabled()
    second_may_close.set()
    thread.join()
    assert seen == {"in the first": False, "after the first closed": False, "the second still open": False}
    assert gc.isenabled()


def test_a_block_nested_in_the_same_thread_and_a_collector_left_off():
    with collector_paused():
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled(), "a collector that was off stays off"


def test_it_comes_back_on_after_an_error():
    with pytest.raises(ValueError):
        with collector_paused():
            raise ValueError("a bad batch")
    assert gc.isenabled()
