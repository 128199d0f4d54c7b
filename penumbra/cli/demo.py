"""``penumbra up --demo``: the scenarios' streams and queries registered, their simulators run as children.

docs/demo.md tells the scenarios' stories.
"""

from __future__ import annotations

import sys

from contract.tokens import Role, TokenStore

from .feed import FeedError, api_call
from .processes import Child
from .scenarios import SCENARIOS
from .supervisor import Supervisor

__all__ = ["DEMO_LABEL", "Demo"]


#: the label of the demo's token: each `up --demo` revokes the one before and makes a new one
DEMO_LABEL = "demo"


class Demo:
    """``--demo``: the scenarios' streams and queries, and their simulators as children.

    Once everything is up, an analyst token labelled ``demo`` replaces the previous one
    (it is printed: the dashboard's sign-in takes it); the streams and queries are
    registered through the API with a short-lived admin token (a query registered before
    is kept as it is, tuned threshold and all); then one child per scenario runs
    ``penumbra simulate <scenario> --forever`` at ``PENUMBRA_DEMO_RATE`` events/s."""

    def __init__(self, supervisor: Supervisor):
        self.supervisor = supervisor
        self.scenarios = SCENARIOS
        self.token: str | None = None
        supervisor.on_ready.append(self.start)

    def _tokens(self):
        return TokenStore(self.supervisor.client, self.supervisor.keys)

    def start(self) -> None:
        supervisor = self.supervisor
        tokens = self._tokens()
        for record in tokens.records():
            if record["label"] in (DEMO_LABEL, DEMO_LABEL + " set-up"):
                tokens.revoke(record["id"])
        self.token, _ = tokens.create(Role.analyst, DEMO_LABEL)
        admin, record = tokens.create(Role.admin, DEMO_LABEL + " set-up")
        url = supervisor.settings.api_url
        try:
            for scenario in self.scenarios.values():
                for name, params in scenario.streams.items():
                    status, answer = api_call(url, "PUT", f"/api/streams/{name}", admin, params, patience=30)
                    if status != 200:
                        raise FeedError(f"PUT /api/streams/{name}: {status} {answer}")
                for query in scenario.queries:
                    status, answer = api_call(url, "POST", "/api/queries", admin,
                                              {"id": query.id, "name": query.name, "text": query.text,
                                               "threshold": query.threshold}, patience=30)
                    if status not in (201, 409):
                        raise FeedError(f"POST /api/queries ({query.id}): {status} {answer}")
        except FeedError as error:
            supervisor.say(f"demo: could not register the scenarios: {error}; the demo does not start")
            return
        finally:
            tokens.revoke(record["id"])
        for scenario in self.scenarios.values():
            supervisor.children.append(self._child(scenario.name))
        supervisor.say(f"demo: {', '.join(self.scenarios)} registered; their simulators send "
                f"{supervisor.settings.demo_rate:g} events/s each")
        supervisor.say(f"demo: open {url}/ and sign in with the demo token (analyst, new at each start):")
        supervisor.say(f"  demo token   {self.token}")
        supervisor.say("")

    def _child(self, name: str) -> Child:
        supervisor = self.supervisor
        argv = [sys.executable, "-m", "penumbra", "simulate", name, "--forever", "--duration", "60",
                "--rate", f"{supervisor.settings.demo_rate:g}", "--api", supervisor.settings.api_url, "--verdicts"]
        env = {**supervisor._env(), "PENUMBRA_TOKEN": self.token or ""}
        return Child(f"sim-{name}", f"the {name} simulator", argv, supervisor.settings.logs / f"sim-{name}.log", env,
                     supervisor.settings.var, probe=lambda child: True, waiting_for=f"the {name} simulator",
                     stop_seconds=10.0)
