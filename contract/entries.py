"""The shape of every entry Penumbra keeps in Redis: one encoder and one decoder each.

Writers build an entry's fields with the encoder (``*_entry``) and readers take them apart
with the decoder (``read_*``); docs/redis.md describes each shape. Redis hands fields back
as bytes, so decoders take ``{bytes: bytes}`` and return plain values.

>>> entry = match_entry(b'{"events":{"A":"a"},"prob":0.5}', 3, 0, "q", None)
>>> fields = {k.encode(): v if isinstance(v, bytes) else str(v).encode() for k, v in entry.items()}
>>> read_match(b"1700000000000-0", fields)["prob"]
0.5
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Iterable

import orjson

__all__ = ["BLOCK_FIELD", "BLOCK_MAX", "CONTROL_FIELD", "COUNT_FIELD", "DEAD_RAW_BYTES", "EVENT_FIELD",
           "alarm_action_entry", "audit_entry", "block_count", "block_entry", "control_entry", "decode", "dead_raw",
           "encode", "entry_time", "event_entry", "late_letter", "live_alarm",
           "live_batch", "live_metrics", "match_entry", "match_value", "metrics_entry", "observation_entry",
           "read_alarm_action", "read_audit", "read_dead", "read_end_mark", "read_ingest", "read_match",
           "read_metrics", "read_observation", "read_restart", "rejected_letter", "restart_entry"]

#: Bytes of a rejected entry its dead letter keeps (enough to see what it was): a flood of
#: huge entries cannot fill Redis, whose dead-letter stream is capped by count.
DEAD_RAW_BYTES = 8192

_ORJSON_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS


def _plain(value: Any) -> Any:
    """JSON-ready: numpy scalars as Python numbers, non-finite floats as null."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):  # a numpy array or scalar
        return _plain(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value


def encode(value: Any) -> bytes:
    """Compact JSON of an entry's value: numpy values as numbers, non-finite floats as null.
    Through orjson, which does all of it natively (a match in about a third of the time of
    the json module); the json module (ASCII escapes) for what orjson does not write:
    integers beyond 64 bits, lone surrogates.

    >>> encode({"prob": float("nan"), "n": 2 ** 70})
    b'{"prob":null,"n":1180591620717411303424}'
    """
    try:
        return orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError: a type or an integer orjson does not write
        return json.dumps(_plain(value), separators=(",", ":")).encode()


#: orjson reads an integer literal beyond 64 bits (19 digits or more) as a float
_LONG_DIGITS = re.compile(rb"\d{19}")
#: orjson reads nesting the json module refuses (beyond Python's recursion limit): a field
#: that could nest this deep goes to the json module
_DEEP = 256


def _loads(raw: bytes) -> Any:
    """What the json module reads of an entry's JSON field, through orjson where it reads it
    the same (a match's fields in about a third of the time): orjson refuses what only the
    json module reads (NaN, -Infinity, 1e999, lone surrogates), and a field with a run of 19
    digits or more (an integer orjson would read as a float) or brackets enough to nest
    :data:`_DEEP` deep goes to the json module."""
    if isinstance(raw, bytes) and _LONG_DIGITS.search(raw) is None \
            and (len(raw) < 2 * _DEEP or raw.count(b"[") + raw.count(b"{") < _DEEP):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
    return json.loads(raw)


def decode(raw: bytes | str | None) -> Any:
    """The value of an entry's JSON field (None when the field is absent). Observations
    hold -Infinity for "no bound yet": the json module reads it back."""
    return _loads(raw) if raw is not None else None


def entry_time(entry_id: bytes | str) -> float:
    """Seconds since the epoch at which Redis took a stream entry (its id's first part)."""
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.split("-", 1)[0]) / 1000.0


def _text(fields: dict, name: str, default: str | None = None) -> str | None:
    raw = fields.get(name.encode())
    return raw.decode(errors="replace") if raw is not None else default


def _number(fields: dict, name: str, kind=float):
    raw = fields.get(name.encode())
    try:
        return kind(raw) if raw is not None else None
    except ValueError:
        return None


# --- ingest (pn:in) -----------------------------------------------------------------------

#: An ingest entry's first field says what it holds: an event's JSON (``e``), a block of
#: events (``b``, their JSON texts one a line, then ``n``, how many), or a control mark
#: (``c``). The job's source reads them in the stream's order, field names and values as
#: they come.
EVENT_FIELD = "e"
BLOCK_FIELD = "b"
COUNT_FIELD = "n"
CONTROL_FIELD = "c"
#: Most events a block may hold (the job's plan reads its count as nine digits at most).
BLOCK_MAX = 999_999_999


def event_entry(line: bytes | str) -> dict:
    """An ingest entry holding one event's JSON (DESIGN.md's event shape)."""
    return {EVENT_FIELD: line}


def block_entry(lines: list[bytes]) -> dict:
    """An ingest entry holding several events, in order: their JSON texts one a line. A
    valid event's JSON holds no line break but as white space (a string cannot hold one
    raw), so a writer puts a space for each (:func:`contract.ingest.ingest` does).

    >>> block_entry([b'{"a": 1}', b'{"b": 2}'])
    {'b': b'{"a": 1}\\n{"b": 2}', 'n': 2}
    """
    if not 0 < len(lines) <= BLOCK_MAX or any(b"\n" in line for line in lines):
        raise ValueError(f"a block holds 1 to {BLOCK_MAX:,} events, none with a line break")
    return {BLOCK_FIELD: b"\n".join(lines), COUNT_FIELD: len(lines)}


def block_count(values: list[bytes]) -> int | None:
    """How many events an entry whose first field is ``b`` holds (its fields and values as
    XRANGE gives them, in order): its second field ``n``, a positive integer of at most nine
    digits; None when it says no such count (the job rejects that entry whole). The job's
    plan, a Lua script, reads the count by the same rule.

    >>> block_count([b"b", b"x", b"n", b"12"]), block_count([b"b", b"x", b"n", b"012"])
    (12, None)
    """
    if len(values) < 4 or values[2] != COUNT_FIELD.encode():
        return None
    count = values[3]
    if not (0 < len(count) <= 9 and count.isdigit() and count[:1] != b"0"):
        return None
    return int(count)


def read_ingest(entries: Iterable[tuple[bytes, dict]]) -> list[tuple[str, int | None, bytes]]:
    """The events of ingest entries as redis-py's ``XRANGE`` gives them (id, fields): per
    event the id of its entry, its place in a block (None: an entry of its own) and its JSON.
    Control marks and entries of no known shape (a block whose lines are not its count) are
    left out, as the job rejects them.

    >>> read_ingest([(b"1-0", {b"e": b"{}"}), (b"2-0", {b"b": b"[1]\\n[2]", b"n": b"2"}), (b"3-0", {b"c": b"{}"}),
    ...              (b"4-0", {b"b": b"[3]", b"n": b"2"})])
    [('1-0', None, b'{}'), ('2-0', 0, b'[1]'), ('2-0', 1, b'[2]')]
    """
    events = []
    for entry_id, fields in entries:
        text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        values = [part for pair in fields.items() for part in pair]
        if values[:1] == [EVENT_FIELD.encode()]:
            events.append((text, None, values[1]))
        elif values[:1] == [BLOCK_FIELD.encode()]:
            lines = values[1].split(b"\n")
            if len(lines) == block_count(values):   # else the job rejects it whole
                events += [(text, index, line) for index, line in enumerate(lines)]
    return events


def control_entry(end: Iterable[str]) -> dict:
    """An ingest entry marking the end of these queries' input (the job flushes them)."""
    return {CONTROL_FIELD: json.dumps({"end": sorted(end)})}


def read_end_mark(data: bytes) -> list[str]:
    """The query ids a control entry's ``c`` names (none when it is not a valid mark)."""
    try:
        queries = json.loads(data)["end"]
    except (ValueError, KeyError, TypeError):
        return []
    return [q for q in queries if isinstance(q, str)] if isinstance(queries, list) else []


# --- dead letters (pn:dead) ---------------------------------------------------------------

def dead_raw(raw: bytes) -> dict[str, bytes | int]:
    """A dead letter's ``raw``: the entry as it came, cut to :data:`DEAD_RAW_BYTES` (then
    with ``raw_bytes``, its whole length).

    >>> dead_raw(b"{oops"), dead_raw(b"x" * 9000)["raw_bytes"]
    ({'raw': b'{oops'}, 9000)
    """
    if len(raw) <= DEAD_RAW_BYTES:
        return {"raw": raw}
    return {"raw": raw[:DEAD_RAW_BYTES], "raw_bytes": len(raw)}


def rejected_letter(reason: str, raw: bytes, at: float, entry: str = "", **source: Any) -> dict:
    """A rejected entry: the ingest entry's id (empty when it never reached the stream),
    the reason, what came (cut), and where it came from (``source``, ``who``, ``index``
    for the API's; ``index`` alone for an event of a block: its place in the entry)."""
    return {"kind": "rejected", "entry": entry, "reason": reason, **dead_raw(raw), "at": at, **source}


def late_letter(query: str, stream: str, event_id: str, reason: str, at: float) -> dict:
    """An event a query's operator did not process (late beyond the stream's delay, ...)."""
    return {"kind": "late", "query": query, "stream": stream, "id": event_id, "reason": reason, "at": at}


def read_dead(fields: dict) -> dict:
    """A dead letter: ``kind`` and its fields as text (``raw`` as bytes, numbers as numbers)."""
    letter: dict[str, Any] = {k.decode(): v.decode(errors="replace") for k, v in fields.items()
                              if k not in (b"raw", b"at", b"raw_bytes", b"index")}
    letter["at"] = _number(fields, "at")
    for name in ("raw_bytes", "index"):
        if name.encode() in fields:
            letter[name] = _number(fields, name, int)
    if b"raw" in fields:
        letter["raw"] = fields[b"raw"]
    return letter


# --- results (pn:out:matches:<qid>, pn:out:obs:<qid>, pn:metrics) --------------------------

def match_entry(match: bytes, batch: int, group: int, instance: str, key: str | None,
                times: dict | None = None, partition: str | None = None, records: dict | None = None,
                factors: list | None = None) -> dict:
    """One match: its JSON as ``penumbra eval`` prints it (:func:`encode`), the micro-batch
    and the key group that found it, its alarm instance and the instance's key (canonical
    JSON, ``null`` for none: :mod:`contract.alarms`), its events' time supports by
    variable (:attr:`penumbra.operator.Match.times`, ``null`` when not known), a join
    match's probing range (:attr:`~penumbra.operator.Match.partition`, empty: none), and
    when known the matched events (``r``, :attr:`~penumbra.operator.Match.records`) and a
    lossy match's factors (``f``). The sink appends these by script
    (:func:`contract.results.queue_matches`), in this shape."""
    entry = {"m": match, "b": batch, "g": group, "i": instance, "k": key or "null", "t": encode(times),
             "p": partition or ""}
    if records:
        entry["r"] = encode(records)
    if factors:
        entry["f"] = encode(factors)
    return entry


def _batch(fields: dict) -> int | None:
    return _number(fields, "b", int)


def match_value(fields: dict) -> dict:
    """A match entry's match, as ``penumbra eval`` prints it."""
    return _loads(fields[b"m"])


def read_match(entry_id: bytes, fields: dict) -> dict:
    """One match entry: its cursor, events, probability, range (patterns), batch, time,
    alarm instance, key, events' time supports, probing range, and the matched events
    themselves and a lossy match's factors (for its explanation)."""
    match = match_value(fields)
    return {"id": entry_id.decode(), "events": match.get("events", {}), "prob": match["prob"],
            "range": match.get("range"), "batch": _batch(fields), "at": entry_time(entry_id),
            "alarm": _text(fields, "i"), "key": decode(fields.get(b"k")), "times": decode(fields.get(b"t")),
            "partition": _text(fields, "p") or None, "records": decode(fields.get(b"r")),
            "factors": decode(fields.get(b"f"))}


def observation_entry(record: dict, batch: int) -> dict:
    """A query's observations of one micro-batch, combined over its key groups."""
    return {"o": json.dumps(record), "b": batch}


def read_observation(entry_id: bytes, fields: dict) -> dict:
    """One observation entry: its cursor, batch, time and observations (unbounded as ±inf)."""
    return {"id": entry_id.decode(), "batch": _batch(fields), "at": entry_time(entry_id),
            "observations": _loads(fields[b"o"])}


def metrics_entry(metrics: dict) -> dict:
    """The job's progress report of one micro-batch."""
    return {"metrics": json.dumps(metrics)}


def read_metrics(fields: dict) -> dict:
    return _loads(fields[b"metrics"])


# --- pub/sub (pn:live): what changed, to wake the live feeds ---------------------------------

def live_batch(batch: int, at: float, matches: dict[str, int], observations: Iterable[str], dead: int) -> str:
    return json.dumps({"batch": batch, "at": at, "matches": matches, "observations": sorted(observations),
                       "dead": dead})


def live_metrics(metrics: dict) -> str:
    return json.dumps({"metrics": metrics})


def live_alarm(query: str) -> str:
    return json.dumps({"alarm": query})


# --- alarm actions (pn:alarm-actions; the instances' records and states: contract/alarms.py) ----

def alarm_action_entry(query: str, action: str, instance: str) -> dict:
    return {"q": query, "action": action, "i": instance}


def read_alarm_action(fields: dict) -> tuple[str | None, str | None, str | None]:
    """The query, action and alarm instance of an alarm-action entry."""
    return _text(fields, "q"), _text(fields, "action"), _text(fields, "i")


# --- audit (pn:audit) --------------------------------------------------------------------------

def audit_entry(at: float, who: str, action: str, subject: str, details: Any, version: int) -> dict:
    """Who changed what, when, and the registry version then."""
    return {"at": at, "who": who, "action": action, "subject": subject, "details": json.dumps(details),
            "version": version}


def read_audit(entry_id: bytes, fields: dict) -> dict:
    text = {k.decode(): v.decode(errors="replace") for k, v in fields.items()}
    try:
        details = json.loads(text.get("details", "null"))
    except ValueError:
        details = text.get("details")
    version = text.get("version")
    return {"id": entry_id.decode(), "at": float(text.get("at", 0)), "who": text.get("who", ""),
            "action": text.get("action", ""), "subject": text.get("subject", ""), "details": details,
            "version": int(version) if version and version.isdigit() else None}


# --- restarts (pn:restarts) ----------------------------------------------------------------------

def restart_entry(part: str, pid: int | None, cause: str, at: float, uptime: float, failures: int,
                  restart_in: float) -> dict:
    """A child of ``penumbra up`` that died (or never got ready) and when it starts again:
    ``part`` (redis, job, api), its ``pid``, the ``cause`` in words, ``at`` (seconds since
    the epoch), how long it ran, its ``failures`` in a row, and the back-off before its restart."""
    return {"part": part, "pid": pid if pid is not None else "", "cause": cause, "at": at, "uptime": round(uptime, 3),
            "failures": failures, "restart_in": restart_in}


def read_restart(entry_id: bytes, fields: dict) -> dict:
    return {"id": entry_id.decode(), "part": _text(fields, "part", ""), "pid": _number(fields, "pid", int),
            "cause": _text(fields, "cause", ""), "at": _number(fields, "at") or entry_time(entry_id),
            "uptime": _number(fields, "uptime"), "failures": _number(fields, "failures", int),
            "restart_in": _number(fields, "restart_in")}
