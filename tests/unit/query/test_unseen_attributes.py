"""The editor's warning for an attribute no event of its stream has carried: every
``var.attr`` outside strings and comments, with its line and column."""

from __future__ import annotations

from penumbra.query import parse
from penumbra.query.sources import unseen_attributes

PATTERN = """PATTERN SEQ(TaskStart a, CPU b, TaskFinish c)
WHERE a.taskId = c.taskid AND b.nodeId = a.nodeId   -- c.whatever is a comment
  AND b.value > 95.5 AND a.label != 'b.nodeid' AND skip_till_any_match(a, b, c)
WITHIN 150"""
SEEN = {"taskstart": ["taskId", "nodeId", "label"], "cpu": ["nodeId", "value"], "taskfinish": ["taskId"]}


def test_each_unseen_attribute_is_named_at_its_place():
    warnings = unseen_attributes(PATTERN, parse(PATTERN), SEEN)
    assert [(w.line, w.column) for w in warnings] == [(2, 18)]
    assert PATTERN.splitlines()[1][17:25] == "c.taskid"
    assert "'taskid'" in warnings[0].message and "did you mean 'taskId'" in warnings[0].message


def test_streams_without_events_and_known_attributes_say_nothing():
    assert unseen_attributes(PATTERN, parse(PATTERN), {**SEEN, "taskfinish": []}) == []
    assert unseen_attributes(PATTERN, parse(PATTERN), {}) == []
