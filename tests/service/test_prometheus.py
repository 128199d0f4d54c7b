"""``GET /api/metrics`` in Prometheus's text format: what promtool (Debian's, fetched by
scripts/system-deps.sh) accepts, with the figures Redis holds."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from contract.entries import metrics_entry

from .conftest import write_batch

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool") or str(ROOT / "var" / "tools" / "promtool")


def samples(text: str) -> dict[str, float]:
    """Every sample line, ``name{labels}`` to its value (independent of the code's writer)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_the_prometheus_text_passes_promtool_and_says_what_redis_holds(client, as_role, store, keys, join_query):
    query_id, _, _ = join_query
    write_batch(store, keys, 1, {query_id: [{"events": {"A": f"a{n}", "B": f"b{n}"}, "prob": 0.9} for n in range(3)]})
    store.xadd(keys.metrics, metrics_entry({"batch": 41, "lag_entries": 7, "lag_seconds": 0.25, "duration_ms": 1500,
                                            "processed_rate": 1234.5, "state_rows": 10, "state_bytes": 2048}))
    counts = {k.decode(): int(v) for k, v in store.hgetall(keys.counts).items()}
    answer = client.get("/api/metrics", params={"format": "prometheus"}, headers=as_role("viewer"))
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    found = samples(answer.text)
    assert found[f'penumbra_query_matches_total{{query="{query_id}"}}'] == 3
    assert found[f'penumbra_query_failed{{query="{query_id}"}}'] == 0
    assert found["penumbra_matches_total"] == counts.get("matches", 0)
    assert (found["penumbra_job_batch"], found["penumbra_job_lag_entries"],
            found["penumbra_job_batch_duration_seconds"]) == (41, 7, 1.5)
    # an Accept for text (a scraper's) gets the same; JSON stays the default
    scraped = client.get("/api/metrics", headers={**as_role("viewer"), "Accept": "text/plain;version=0.0.4"})
    assert samples(scraped.text).keys() == found.keys()
    assert "counts" in client.get("/api/metrics", headers=as_role("viewer")).json()
    if not Path(PROMTOOL).exists():
        pytest.skip("promtool is missing (scripts/system-deps.sh fetches it)")
    checked = subprocess.run([PROMTOOL, "check", "metrics"], input=answer.content, capture_output=True, timeout=60)
    assert checked.returncode == 0, checked.stdout + checked.stderr
