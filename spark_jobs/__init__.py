"""Penumbra's Spark Structured Streaming job: Redis in, every operator as keyed state, Redis out.

The modules translate between the core (:mod:`penumbra`) and Spark and Redis; they hold
no probability math and no query semantics of their own. :mod:`spark_jobs.store` (the
Redis schema) and :mod:`spark_jobs.settings` import no pyspark, so the service and the
command line use them without starting Spark.
"""
