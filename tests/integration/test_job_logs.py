"""The job's log is JSON lines, and its record of each micro-batch names the ingest entries
it read, (from_id, to_id]: an entry the API logged under a request's id is found in exactly
one batch's range."""

from __future__ import annotations

import json
import time

from contract.ingest import append_events


def entry(text: str) -> tuple[int, int]:
    millis, sequence = text.split("-")
    return int(millis), int(sequence)


def test_each_entry_is_in_exactly_one_logged_batch(pipeline):
    pipeline.registry.put_streams({"logA": {"pi": 5}})
    lines = [json.dumps({"stream": "logA", "id": f"x{n}", "ts": {"lo": n, "hi": n + 1}}) for n in range(40)]
    ids = append_events(pipeline.client, lines, pipeline.keys)
    pipeline.sync()
    deadline, batches = time.monotonic() + 30, []
    while time.monotonic() < deadline:
        records = [json.loads(line) for line in pipeline.job.log.read_text(errors="replace").splitlines()
                   if line.startswith("{")]
        batches = [r for r in records if "to_id" in r and r.get("to_id")]
        if batches and entry(batches[-1]["to_id"]) >= entry(ids[-1].decode()):
            break
        time.sleep(0.2)
    assert all(r["process"] == "job" and isinstance(r["batch"], int) for r in batches)
    for appended in (ids[0].decode(), ids[-1].decode()):
        holding = [r["batch"] for r in batches if (r["from_id"] is None or entry(r["from_id"]) < entry(appended))
                   and entry(appended) <= entry(r["to_id"])]
        assert len(holding) == 1, (appended, holding)
