"""Key names of Penumbra's Redis, under one prefix (docs/redis.md has a row for each).

>>> keys = Keys()
>>> keys.ingest, keys.matches("q1"), keys.registry_at(7)
('pn:in', 'pn:out:matches:q1', 'pn:registry:7')
>>> Keys("site-a").ingest
'site-a:in'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["DEFAULT_PREFIX", "Keys", "PREFIX_PATTERN"]

DEFAULT_PREFIX = "pn"
#: A prefix is one key segment: no ``:`` (it would read as two), no blanks or glob characters.
PREFIX_PATTERN = r"[A-Za-z0-9_.\-]{1,64}"
_PREFIX = re.compile(PREFIX_PATTERN + r"\Z")


@dataclass(frozen=True)
class Keys:
    """Key names, under one prefix (``pn`` by default)."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self):
        if not isinstance(self.prefix, str) or not _PREFIX.match(self.prefix):
            raise ValueError(f"a Redis key prefix is 1-64 letters, digits, '_', '.' or '-', not {self.prefix!r}")

    @property
    def ingest(self) -> str:
        return f"{self.prefix}:in"

    @property
    def queries(self) -> str:
        return f"{self.prefix}:queries"

    @property
    def streams(self) -> str:
        return f"{self.prefix}:streams"

    @property
    def version(self) -> str:
        return f"{self.prefix}:registry"

    def registry_at(self, version: int) -> str:
        return f"{self.prefix}:registry:{version}"

    @property
    def registry_released(self) -> str:
        return f"{self.prefix}:registry:released"

    @property
    def audit(self) -> str:
        return f"{self.prefix}:audit"

    @property
    def alarm_actions(self) -> str:
        return f"{self.prefix}:alarm-actions"

    def matches(self, query: str) -> str:
        return f"{self.prefix}:out:matches:{query}"

    def observations(self, query: str) -> str:
        return f"{self.prefix}:out:obs:{query}"

    def groups(self, query: str) -> str:
        return f"{self.prefix}:groups:{query}"

    @property
    def metrics(self) -> str:
        return f"{self.prefix}:metrics"

    @property
    def batches(self) -> str:
        return f"{self.prefix}:batches"

    def pending(self, job: str) -> str:
        """A checkpoint's micro-batch collected but not yet written (the sink writes behind)."""
        return f"{self.prefix}:pending:{job}"

    def stream_attrs(self, stream: str) -> str:
        """The attribute names events of a stream (case-folded) have carried."""
        return f"{self.prefix}:stream-attrs:{stream}"

    @property
    def stream_seen(self) -> str:
        """Stream (case-folded) -> when an event of it was last appended, seconds since the epoch."""
        return f"{self.prefix}:stream-seen"

    @property
    def archive_attempts(self) -> str:
        """Per job, its latest batch and that batch's time (the archive's rows name it)."""
        return f"{self.prefix}:archive:attempts"

    @property
    def live(self) -> str:
        return f"{self.prefix}:live"

    @property
    def dead(self) -> str:
        return f"{self.prefix}:dead"

    @property
    def counts(self) -> str:
        return f"{self.prefix}:counts"

    @property
    def ended(self) -> str:
        return f"{self.prefix}:ended"

    @property
    def heartbeat(self) -> str:
        return f"{self.prefix}:job"

    @property
    def restarts(self) -> str:
        """What ``penumbra up`` restarted, and why."""
        return f"{self.prefix}:restarts"

    def instances(self, query: str) -> str:
        """The job's records of a query's alarm instances (contract/alarms.py)."""
        return f"{self.prefix}:instances:{query}"

    def alarm_states(self, query: str) -> str:
        """What people did to a query's alarm instances (contract/alarms.py)."""
        return f"{self.prefix}:alarm-states:{query}"

    def verdicts(self, query: str) -> str:
        """What people found of a query's matches and alarms (real, false, unknown)."""
        return f"{self.prefix}:verdicts:{query}"

    @property
    def alarm_events(self) -> str:
        """Instances that opened or reopened, for the notifiers."""
        return f"{self.prefix}:alarm-events"

    @property
    def silences(self) -> str:
        return f"{self.prefix}:silences"

    @property
    def silence_ends(self) -> str:
        """Silences the notifier looks at when they end (contract/notify.py)."""
        return f"{self.prefix}:silence-ends"

    @property
    def contacts(self) -> str:
        return f"{self.prefix}:contacts"

    @property
    def routes(self) -> str:
        return f"{self.prefix}:routes"

    @property
    def deliveries(self) -> str:
        return f"{self.prefix}:deliveries"

    @property
    def deliveries_due(self) -> str:
        return f"{self.prefix}:deliveries:due"

    @property
    def delivery_failures(self) -> str:
        return f"{self.prefix}:delivery-failures"

    @property
    def tokens(self) -> str:
        return f"{self.prefix}:tokens"

    @property
    def tokens_bootstrap(self) -> str:
        return f"{self.prefix}:tokens:bootstrap"

    @property
    def identities(self) -> str:
        """The prefix of the identity hashes, ``<prefix><generation>:<bucket>`` (contract/identity.py)."""
        return f"{self.prefix}:ids:"

    def idempotency(self, owner: str, key: str) -> str:
        """The answer kept for a token's ``Idempotency-Key`` (backend/idempotency.py)."""
        return f"{self.prefix}:idem:{owner}:{key}"

    def rate(self, who: str, slot: int) -> str:
        return f"{self.prefix}:rate:{who}:{slot}"

    def auth_failures(self, address: str, slot: int) -> str:
        return f"{self.prefix}:auth-failures:{address}:{slot}"
