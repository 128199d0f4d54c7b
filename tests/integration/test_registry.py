"""The registry in a real Redis: versions as of each change, and how long each is kept."""

from __future__ import annotations

import pytest
import redis

from contract.keys import Keys
from contract.registry import Registry, VERSION_RETENTION_SECONDS
from penumbra.errors import ValidationError
from penumbra.events import parse_streams

STREAMS = {"sa": {"max_delay": 5, "pi": 10}, "sb": {"max_delay": 5, "pi": 10}}
JOIN = "SELECT * FROM sa A, sb B WHERE WINDOW(A, B) = 3 WITH THRESHOLD 0.5"


def test_each_version_reads_as_of_its_change_and_only_superseded_ones_expire(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys("pn-store-test")
    registry = Registry(client, keys)
    registry.put_streams(STREAMS)
    first = registry.version()
    registry.register(JOIN, query_id="q1")
    registry.update("q1", threshold=0.7)
    current = registry.version()
    assert current == first + 2
    assert registry.at(first)["queries"] == {}
    assert registry.at(first + 1)["queries"]["q1"]["threshold"] in (None, 0.5)
    assert registry.at(current)["queries"]["q1"]["threshold"] == 0.7
    # the current version never expires (a quiet registry stays readable); older ones do
    assert client.ttl(keys.registry_at(current)) == -1
    for old in (first, first + 1):
        assert 0 < client.ttl(keys.registry_at(old)) <= VERSION_RETENTION_SECONDS
    client.delete(*client.keys("pn-store-test:*"))
    client.close()


def test_versions_no_batch_can_read_again_are_released(redis_server):
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys("pn-release-test")
    registry = Registry(client, keys)
    registry.put_streams(STREAMS)
    for threshold in (0.5, 0.6, 0.7, 0.8):
        registry.register(JOIN, query_id=f"q{threshold}", threshold=threshold)
    current = registry.version()
    assert current == 5 and all(client.exists(keys.registry_at(v)) for v in range(1, 6))
    # the job committed a batch planned at version 3: versions 1 and 2 go, 3 and later stay
    assert registry.release(3) == 2
    assert [bool(client.exists(keys.registry_at(v))) for v in range(1, 6)] == [False, False, True, True, True]
    assert registry.at(3)["version"] == 3 and registry.current()["version"] == 5
    assert registry.release(2) == 0 and registry.release(3) == 0  # never back, never twice
    assert registry.release(5) == 2 and registry.current()["version"] == 5
    client.delete(*client.keys("pn-release-test:*"))
    client.close()


def test_streams_put_replace_their_own_and_refuse_a_name_registered_under_another_case(redis_server):
    """A change parses only the streams it puts: a name equal to a registered one but for
    case is still refused (names are case-insensitive), with the field named, and nothing
    is written; a stream put again under its own name is replaced."""
    client = redis.Redis.from_url(redis_server.url)
    keys = Keys("pn-case-test")
    registry = Registry(client, keys)
    registry.put_streams(STREAMS)
    registry.put_streams({"sc": {"max_delay": 1}})
    version = registry.version()
    for given in ({"SA": {"max_delay": 1}}, {"sd": {"max_delay": 1}, "Sc": {"max_delay": 2}}):
        with pytest.raises(ValidationError) as refused:
            registry.put_streams(given)
        spelled = next(name for name in given if name.casefold() in ("sa", "sc"))
        assert refused.value.field == spelled and "named twice" in refused.value.message, refused.value
        assert repr(spelled.casefold()) in refused.value.message
    assert registry.version() == version and set(registry.current()["streams"]) == {"sa", "sb", "sc"}
    registry.put_streams({"sa": {"max_delay": 9}, "se": {"max_delay": 1}})
    assert registry.current()["streams"]["sa"] == {"max_delay": 9}
    assert set(parse_streams(registry.current()["streams"])) == {"sa", "sb", "sc", "se"}
    client.delete(*client.keys("pn-case-test:*"))
    client.close()
