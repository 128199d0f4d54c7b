"""Penumbra's Redis contract: where the job, the service and the command layer meet.

Key names under one prefix (:mod:`~contract.keys`), the shape of every entry with one
encoder and decoder each (:mod:`~contract.entries`), the versioned registry with its
validation (:mod:`~contract.registry`), the one writer of the ingest stream
(:mod:`~contract.ingest`) taking each event's identity once (:mod:`~contract.identity`),
the dead-letter writers (:mod:`~contract.dead`), the job's match writes (:mod:`~contract.results`) and the
settings every process shares (:mod:`~contract.settings`). It imports the core and
nothing above it; docs/redis.md describes every key and docs/architecture.md the parts.

>>> from contract import Keys
>>> Keys().matches("intrusion")
'pn:out:matches:intrusion'
"""

from .entries import DEAD_RAW_BYTES, dead_raw, encode
from .ingest import append_events, end_of_input
from .keys import Keys
from .registry import Registry, RegistryError
from .settings import SharedSettings

__all__ = ["DEAD_RAW_BYTES", "Keys", "Registry", "RegistryError", "SharedSettings", "append_events", "dead_raw",
           "encode", "end_of_input"]
