"""``GET /api/metrics`` in Prometheus's text format (version 0.0.4), so an existing monitoring
stack scrapes Penumbra (``?format=prometheus``, or an ``Accept`` that asks for text and not
JSON): the running totals of ``pn:counts``, the job's latest progress report, and per query
its matches and whether the job has it quarantined."""

from __future__ import annotations

import math
from typing import Any, Iterable

__all__ = ["CONTENT_TYPE", "exposition"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Totals of ``pn:counts``: (metric, count name, help).
TOTALS = (("penumbra_matches_total", "matches", "Matches the job wrote, all queries."),
          ("penumbra_events_rejected_total", "rejected", "Events refused (invalid, conflicts), each dead-lettered."),
          ("penumbra_events_late_total", "late", "Events a query did not process, late beyond the stream's delay."),
          ("penumbra_events_duplicate_total", "duplicates", "Events sent again (same stream, id and content), "
                                                             "taken once."))
#: Figures of the job's latest progress report: (metric, field, help).
PROGRESS = (("penumbra_job_batch", "batch", "The job's latest micro-batch."),
            ("penumbra_job_lag_entries", "lag_entries", "Ingest entries the job has not processed yet."),
            ("penumbra_job_lag_seconds", "lag_seconds", "Age of the oldest ingest entry not processed yet."),
            ("penumbra_job_batch_duration_seconds", "duration_ms", "Time the latest micro-batch took."),
            ("penumbra_job_processed_rate", "processed_rate", "Ingest entries per second of the latest batch."),
            ("penumbra_job_state_rows", "state_rows", "Rows in the job's state stores."),
            ("penumbra_job_state_bytes", "state_bytes", "Memory the job's state stores report."))


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: Any) -> str:
    number = float(value)
    if math.isnan(number):
        return "NaN"
    if math.isinf(number):
        return "+Inf" if number > 0 else "-Inf"
    return repr(int(number)) if number.is_integer() and abs(number) < 2 ** 53 else repr(number)


def _family(name: str, kind: str, help_text: str, samples: Iterable[tuple[str, Any]]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}",
            *(f"{name}{labels} {_number(value)}" for labels, value in samples)]


def exposition(counts: dict[str, int], progress: dict | None, queries: list[tuple[str, int, bool]]) -> str:
    """The text of a scrape: ``counts`` (``pn:counts``), the latest ``progress`` report (or
    None before the first), and per query (id, matches added, quarantined)."""
    lines: list[str] = []
    for name, field, help_text in TOTALS:
        lines += _family(name, "counter", help_text, [("", counts.get(field, 0))])
    for name, field, help_text in PROGRESS:
        value = (progress or {}).get(field)
        if value is None:
            continue
        if field == "duration_ms":
            value = float(value) / 1000.0
        lines += _family(name, "gauge", help_text, [("", value)])
    lines += _family("penumbra_query_matches_total", "counter", "Matches written to the query's result stream.",
                     [(f'{{query="{_label(q)}"}}', added) for q, added, _ in queries])
    lines += _family("penumbra_query_failed", "gauge", "1 while the job has the query quarantined.",
                     [(f'{{query="{_label(q)}"}}', int(failed)) for q, _, failed in queries])
    lines += _family("penumbra_queries", "gauge", "Registered queries.", [("", len(queries))])
    return "\n".join(lines) + "\n"
