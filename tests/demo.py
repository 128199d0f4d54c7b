"""One ``penumbra up --demo`` for the session, shared by the browser tests (tests/e2e/)
and the fault tests (tests/system/test_demo.py), which run one after the other.

It is started as a user starts it (``python -m penumbra up --demo`` on a fresh home with
free loopback ports) by the session fixture ``demo`` (tests/conftest.py) and is ready
when ``up`` has printed both tokens. The last fault test stops it with SIGTERM; the
fixture's teardown stops whatever is left, by pid, also after a failure.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import pytest
import redis

from contract import Keys
from tests.system.conftest import Up, UpRun, bearer, http, up_environment

START_TIMEOUT = 300.0
ALARM_TIMEOUT = 240.0
KEYS = Keys()


@dataclass
class Demo(UpRun):
    up: Up | None = None
    admin: str = ""
    token: str = ""

    def ready(self) -> Demo:
        """Until ``up`` has printed the admin token and the demo token."""
        self.up.wait_for(r"^Penumbra is up", START_TIMEOUT)
        self.admin = self.up.wait_for(r"^\s+admin token\s+(pn_\S+)", 5).group(1)
        self.token = self.up.wait_for(r"^\s+demo token\s+(pn_\S+)", 60).group(1)
        return self


    def api_pid(self) -> int:
        """The pid of the API that up started last (it prints each start)."""
        found = [line for line in self.up.lines if line.startswith("api: starting")]
        return int(found[-1].rsplit("pid ", 1)[1].split(",")[0])


def launch(home) -> Demo:
    """``penumbra up --demo`` started on ``home`` (not waited for: see :meth:`Demo.ready`)."""
    port, redis_port, env = up_environment(home, demo_rate="20")
    demo = Demo(home, port, redis_port, env)
    demo.up = Up(home, env, [sys.executable, "-m", "penumbra", "up", "--demo"])
    return demo


def matches_of(demo: Demo, query: str, token: str | None = None) -> list[dict]:
    """Every match of ``query`` over REST, oldest first."""
    items, before = [], None
    with http(demo.base) as client:
        while True:
            params = {"limit": 1000, **({"before": before} if before else {})}
            answer = client.get(f"/api/queries/{query}/matches", params=params, headers=bearer(token or demo.token))
            assert answer.status_code == 200, answer.text
            page = answer.json()
            items += page["items"]
            before = page["next"]
            if not before:
                return items[::-1]


def wait(what: str, check, timeout: float, demo: Demo, every: float = 1.0):
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except (OSError, redis.RedisError, AssertionError) as error:  # a part restarting
            found, last = None, error
        else:
            last = None
        if found:
            return found
        assert demo.up.process.poll() is None, demo.up.output
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:g} s (last error: {last})\n{demo.up.output[-3000:]}\n"
                        f"{demo.up.logs()}")
        time.sleep(every)


def heartbeat(demo: Demo) -> dict[str, str]:
    with demo.redis() as client:
        return {k.decode(): v.decode() for k, v in client.hgetall(KEYS.heartbeat).items()}


