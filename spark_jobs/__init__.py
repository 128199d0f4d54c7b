"""Penumbra's Spark Structured Streaming job: Redis in, every operator as keyed state, Redis out.

The modules translate between the core (:mod:`penumbra`) and Spark and Redis; they hold
no probability math and no query semantics of their own. What the job shares with the
service and the command layer (key names, entry shapes, the registry, the shared
settings) is the Redis contract, :mod:`contract`; this package imports it and the core,
never the service (docs/architecture.md).
"""
