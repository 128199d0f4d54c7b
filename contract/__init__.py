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

from importlib import import_module

#: what the package offers, by the module that defines it: imported on first use, so that
#: a process that needs only the key names or the entries (a Spark job's Python worker)
#: does not import the registry's or the settings' dependencies as well
_DEFINED_IN = {"DEAD_RAW_BYTES": "entries", "dead_raw": "entries", "encode": "entries",
               "append_events": "ingest", "end_of_input": "ingest", "Keys": "keys",
               "Registry": "registry", "RegistryError": "registry", "SharedSettings": "settings"}

__all__ = sorted(_DEFINED_IN)


def __getattr__(name: str):
    if name not in _DEFINED_IN:
        raise AttributeError(f"module 'contract' has no attribute {name!r}")
    value = getattr(import_module(f".{_DEFINED_IN[name]}", __name__), name)
    globals()[name] = value
    return value
