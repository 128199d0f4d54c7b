"""Chaos: SIGKILL of a random part of ``penumbra up``, again and again, under steady REST load.

One ``python -m penumbra up`` on a temporary home (its own redis-server with AOF, the
Spark job, the API), and, from here:

- a client posting a keyed join's events through ``POST /api/events``, 50 every 100 ms, in
  order of time; a batch whose answer does not come (the API or Redis died, a 503) is
  posted again, as it was, until it is answered 2xx: every event is accepted once, none
  is lost, whatever the retries;
- ``--clients`` websocket clients on the join's matches and alarm, each resuming from its
  cursors after every reconnect;
- ``--rounds`` rounds: after a pause drawn by a generator seeded with ``--seed``, SIGKILL
  of one of the job's Python driver, one of its Python workers, the API or redis-server
  (drawn by the same generator), then a wait until the system is back (``/api/health``
  ok, and a micro-batch after the kill).

The verdict, once the matches stop coming: they equal ``penumbra eval``'s over every event
posted (pair by pair, probability by probability), none twice, none lost; the alarm's
instances (one per key) count exactly their key's matches; every websocket client received
every match once, in order, across its reconnects, and the latest state of every instance; ``/api/health`` names each restart ``penumbra up`` made, with the killed pid
and its cause. tests/system/test_chaos.py runs one round (seed 9: Redis); ten are this bench run, its
report in bench/out/chaos.md and docs/chaos.md.

    .venv/bin/python bench/chaos.py --rounds 10 --seed 1
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import redis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.e2e import Up  # noqa: E402
from bench.feed_client import ResumingClient  # noqa: E402
from bench.soak import home_processes  # noqa: E402
from contract import Keys  # noqa: E402

QUERY_ID = "chaos"
QUERY = "SELECT * FROM chaosA A, chaosB B WHERE WINDOW(A, B) = 100 AND A.k = B.k WITH THRESHOLD 0.5"
STREAMS = {"chaosA": {"pi": 40, "max_delay": 1000}, "chaosB": {"pi": 40, "max_delay": 1000}}
#: what a round may kill, and the kind of process (bench/soak.py's KINDS) it is
VICTIMS = {"driver": "job driver", "worker": "job workers", "api": "API", "redis": "redis"}
#: the part of penumbra up (its restart record's ``part``) each victim is, when up restarts it
PARTS = {"driver": "job", "api": "api", "redis": "redis"}
#: seconds the system has to come back after a kill
RECOVERY_SECONDS = 600.0


@dataclass
class Round:
    number: int
    victim: str
    pid: int | None
    at: float                       # seconds since the load began
    recovered_in: float | None = None


class Poster(threading.Thread):
    """50 events every 100 ms, in order of time, each batch posted until answered 2xx."""

    BATCH = 50

    def __init__(self, url: str, token: str, seed: int, keys: int = 200):
        super().__init__(daemon=True)
        self.url, self.token, self.keys = url, token, keys
        self.random = random.Random(seed)
        self.stop = threading.Event()
        self.events: list[dict] = []          # every event accepted, in the order posted
        self.accepted: list[tuple[float, int]] = []   # (monotonic time, events accepted so far)
        self.attempts = self.retried = self.duplicates = 0
        self.refused: list[str] = []          # answers no retry can mend (4xx): a failure of the run
        self.longest_wait = 0.0
        self.clock = 1_000_000.0              # event time, milliseconds

    def batch(self) -> list[dict]:
        out = []
        n = len(self.events)
        while len(out) < self.BATCH:
            n += 1
            self.clock += 2.0
            key, width = self.random.randrange(self.keys), self.random.uniform(5, 30)
            out.append({"stream": "chaosA", "id": f"a{n}", "ts": {"lo": self.clock, "hi": self.clock + width},
                        "attrs": {"k": key}})
            if self.random.random() < 0.15 and len(out) < self.BATCH:
                lo = self.clock + self.random.uniform(-40, 80)
                out.append({"stream": "chaosB", "id": f"b{n}", "ts": {"lo": lo, "hi": lo + self.random.uniform(5, 30)},
                            "attrs": {"k": key}})
        return out

    def _post(self, http: httpx.Client, events: list[dict]) -> bool:
        """Until it is answered 2xx (True), or answered what no retry mends (False)."""
        began = time.monotonic()
        first = True
        while True:
            self.attempts += 1
            self.retried += not first
            first = False
            try:
                answer = http.post("/api/events", json=events)
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code == 202:
                body = answer.json()
                if body["accepted"] + body["duplicates"] != len(events) or body.get("rejected"):
                    self.refused.append(answer.text[:300])
                    return False
                self.duplicates += body["duplicates"]
                self.longest_wait = max(self.longest_wait, time.monotonic() - began)
                return True
            if answer is not None and answer.status_code < 500 and answer.status_code not in (408, 429):
                self.refused.append(f"{answer.status_code} {answer.text[:300]}")
                return False
            if time.monotonic() - began > RECOVERY_SECONDS:
                self.refused.append(f"no 2xx within {RECOVERY_SECONDS:g} s")
                return False
            time.sleep(0.25)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30) as http:
            due = time.monotonic()
            while not self.stop.is_set():
                events = self.batch()
                if not self._post(http, events):
                    return
                self.events += events
                self.accepted.append((time.monotonic(), len(self.events)))
                due = max(due + 0.1, time.monotonic() - 1.0)   # after an outage: on, not a burst to catch up
                time.sleep(max(0.0, due - time.monotonic()))


class Listener(ResumingClient):
    """A websocket client of the join's matches and alarm; after any disconnect it
    reconnects and resumes from its cursors."""

    def __init__(self, url: str, token: str):
        super().__init__(url, token)
        self.ids: list[str] = []
        self.alarms: dict[str, dict] = {}      # alarm instance -> its latest message
        self.alarm_cursor: str | None = None
        self.gaps = 0

    def subscription(self) -> dict:
        since = {f"matches:{QUERY_ID}": self.ids[-1] if self.ids else "0-0"}
        if self.alarm_cursor:
            since[f"alarms:{QUERY_ID}"] = self.alarm_cursor
        return {"queries": [QUERY_ID], "kinds": ["matches", "alarms"], "since": since}

    def handle(self, message: dict) -> None:
        if message.get("type") == "matches":
            self.ids.append(message["id"])
        elif message.get("type") == "alarms":
            self.alarms[message["data"]["id"]] = message["data"]
            self.alarm_cursor = max(self.alarm_cursor or "0-0", message["id"] or "0-0", key=_cursor)
        elif message.get("type") == "gap":
            self.gaps += 1


def _cursor(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


@dataclass
class Outcome:
    rounds: list[Round]
    events: int
    expected: list[dict]
    found: list[dict]                 # the matches of the query's history (REST), in time order
    stream_ids: list[str]
    alarms: list[dict]                # the query's alarm instances, one per key, from REST
    posted: list[dict]                # every event posted
    clients: list[Listener]
    restarts: list[dict]
    poster: Poster
    seconds: float
    log: list[str] = field(default_factory=list)
    tail: list[str] = field(default_factory=list)   # ids of the live result stream at the end

    def problems(self) -> list[str]:
        """What the run got wrong; empty when nothing was lost, doubled or left unexplained."""
        out = []
        if self.poster.refused:
            out.append(f"posting failed: {self.poster.refused[:3]}")
        pair = lambda m: (m["events"]["A"], m["events"]["B"])  # noqa: E731
        found, expected = [pair(m) for m in self.found], {pair(m): m["prob"] for m in self.expected}
        twice = len(found) - len(set(found))
        if twice:
            out.append(f"{twice} matches written twice")
        missing, extra = set(expected) - set(found), set(found) - set(expected)
        if missing or extra:
            out.append(f"{len(missing)} matches of penumbra eval missing (e.g. {sorted(missing)[:3]}), "
                       f"{len(extra)} not in penumbra eval's (e.g. {sorted(extra)[:3]})")
        off = [(pair(m), m["prob"], expected[pair(m)]) for m in self.found
               if pair(m) in expected and abs(m["prob"] - expected[pair(m)]) > 1e-9]
        if off:
            out.append(f"{len(off)} probabilities differ from penumbra eval's, e.g. {off[:3]}")
        # one alarm instance per key, counting exactly its key's matches (keys from the events posted)
        key_of = {e["id"]: e["attrs"]["k"] for e in self.posted if e["stream"] == "chaosA"}
        wanted = Counter(key_of[m["events"]["A"]] for m in self.expected)
        counted = {a["key"]["k"]: a["matches"] for a in self.alarms if a["key"]}
        if counted != dict(wanted) or any(a["key"] is None for a in self.alarms):
            off = {k: (counted.get(k), n) for k, n in wanted.items() if counted.get(k) != n}
            out.append(f"alarm instances: {len(counted)} for {len(wanted)} keys, {len(off)} count another number "
                       f"of matches (e.g. {sorted(off.items())[:3]})")
        for n, client in enumerate(self.clients):
            if client.ids != self.stream_ids:
                seen = set(client.ids)
                out.append(f"websocket client {n}: {len(client.ids)} messages for {len(self.stream_ids)} matches, "
                           f"{len(client.ids) - len(seen)} twice, {len(set(self.stream_ids) - seen)} missed")
            latest = {i: a["matches"] for i, a in client.alarms.items()}
            if latest != {a["id"]: a["matches"] for a in self.alarms}:
                out.append(f"websocket client {n}: its latest alarm messages count {sum(latest.values())} matches "
                           f"over {len(latest)} instances, REST {sum(a['matches'] for a in self.alarms)} over "
                           f"{len(self.alarms)}")
        if self.tail and self.tail != self.stream_ids[-len(self.tail):]:
            out.append(f"the live result stream's {len(self.tail)} ids are not the history's latest")
        for round_ in self.rounds:
            part = PARTS.get(round_.victim)
            if part and not any(r["part"] == part and r["pid"] == round_.pid and r["cause"] == "was killed by SIGKILL"
                                for r in self.restarts):
                out.append(f"round {round_.number}: no restart of {part} (pid {round_.pid}) in /api/health")
        return out


def health(url: str) -> dict | None:
    try:
        answer = httpx.get(url + "/api/health", timeout=5)
    except httpx.HTTPError:
        return None
    return answer.json() if answer.status_code in (200, 503) else None


def last_batch(url: str) -> int:
    beat = health(url)
    job = beat and beat.get("job")
    return job["last_batch"] if job and job.get("last_batch") is not None else -1


def wait_recovered(url: str, after_batch: int, poster: Poster, timeout: float = RECOVERY_SECONDS) -> float:
    """Seconds until health is ok with a micro-batch newer than ``after_batch``."""
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        if poster.refused:
            raise RuntimeError(f"posting failed: {poster.refused[0]}")
        beat = health(url)
        job = beat and beat.get("job")
        if (beat and beat["status"] == "ok" and job and job.get("last_batch") is not None
                and job["last_batch"] > after_batch and (job.get("last_batch_age") or 0) < 10):
            return time.monotonic() - began
        time.sleep(0.5)
    raise RuntimeError(f"the system was not back within {timeout:g} s of a kill")


def kill_one(home: Path, victim: str, chooser: random.Random) -> int | None:
    """SIGKILL one live process of the victim's kind (drawn by ``chooser``, its own generator:
    how many workers run does not change the rounds after); its pid."""
    for _ in range(20):
        pids = sorted(pid for pid, kind, _ in home_processes(home) if kind == VICTIMS[victim])
        if pids:
            pid = chooser.choice(pids)
            try:
                os.kill(pid, signal.SIGKILL)
                return pid
            except ProcessLookupError:
                pass
        time.sleep(0.5)
    return None


def eval_matches(events: list[dict], folder: Path) -> list[dict]:
    """``penumbra eval`` over the events, as a user runs it."""
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (folder / "streams.json").write_text(json.dumps(STREAMS))
    done = subprocess.run([sys.executable, "-m", "penumbra", "eval", "--query", QUERY, "--streams",
                           str(folder / "streams.json"), "--events", str(folder / "events.jsonl")],
                          capture_output=True, text=True, check=True, cwd=ROOT, timeout=600)
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def stored_matches(up: Up, token: str) -> tuple[list[str], list[dict]]:
    """Every match of the query, as a REST client reads its history: pages of 500 from the
    archive and the live tail, following ``next`` until it is null."""
    ids, found, after = [], [], None
    with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        while True:
            answer = http.get(f"/api/queries/{QUERY_ID}/history",
                              params={"limit": 500, **({"next": after} if after else {})})
            answer.raise_for_status()
            page = answer.json()
            ids += [m["id"] for m in page["items"]]
            found += [{k: m[k] for k in ("events", "prob")} for m in page["items"]]
            after = page.get("next")
            if not after:
                return ids, found


def live_ids(up: Up, home: Path) -> list[str]:
    """The ids of the matches in the query's live result stream."""
    password = (home / "var" / "redis" / "password").read_text().strip()
    with redis.Redis(host="127.0.0.1", port=up.redis_port, password=password, socket_timeout=30) as client:
        return [i.decode() for i, _ in client.xrange(Keys().matches(QUERY_ID))]


def run(rounds: int, seed: int, clients: int = 3, pause: tuple[float, float] = (4.0, 12.0),
        say: Callable[[str], None] = print, home: Path | None = None, result_maxlen: int | None = None) -> Outcome:
    """One chaos run on ``home`` (a temporary folder by default); everything started is
    stopped. ``result_maxlen`` caps the live result stream (``PENUMBRA_RESULT_MAXLEN``)."""
    chooser = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="penumbra-chaos-") as scratch:
        home = home or Path(scratch)
        up = Up(home, extra_env={"PENUMBRA_RESULT_MAXLEN": str(result_maxlen)} if result_maxlen else None)
        poster, listeners = None, []
        try:
            token = up.ready()
            say(f"penumbra up ready on {up.url}")
            with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
                for name, params in STREAMS.items():
                    assert http.put(f"/api/streams/{name}", json=params).status_code == 200
                answer = http.post("/api/queries", json={"id": QUERY_ID, "text": QUERY})
                assert answer.status_code == 201, answer.text
            listeners = [Listener(up.url, token) for _ in range(clients)]
            for listener in listeners:
                listener.start()
            poster = Poster(up.url, token, seed)
            began = time.monotonic()
            poster.start()
            wait_recovered(up.url, -1, poster)
            done: list[Round] = []
            for number in range(1, rounds + 1):
                time.sleep(chooser.uniform(*pause))
                victim = chooser.choice(sorted(VICTIMS))
                before = last_batch(up.url)
                pid = kill_one(home, victim, random.Random(f"{seed}-{number}"))
                round_ = Round(number, victim, pid, time.monotonic() - began)
                done.append(round_)
                round_.recovered_in = wait_recovered(up.url, before, poster)
                say(f"round {number}: SIGKILL of the {victim} (pid {pid}) at {round_.at:.0f} s; "
                    f"back in {round_.recovered_in:.1f} s; {len(poster.events):,} events accepted so far")
            time.sleep(chooser.uniform(*pause))
            poster.stop.set()
            poster.join(RECOVERY_SECONDS + 60)
            seconds = time.monotonic() - began
            say(f"load stopped after {seconds:.0f} s: {len(poster.events):,} events in {len(poster.accepted):,} "
                f"batches, {poster.retried:,} retries, {poster.duplicates:,} events answered as duplicates")
            expected = eval_matches(poster.events, Path(scratch))
            say(f"penumbra eval: {len(expected):,} matches")
            ids, found = wait_settled(up, token, len(expected))
            tail = live_ids(up, home)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and any(len(c.ids) < len(ids) for c in listeners):
                time.sleep(0.5)
            time.sleep(2.0)     # anything sent twice would be here by now
            with httpx.Client(base_url=up.url, headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
                alarms = http.get("/api/alarms", params={"query": QUERY_ID, "limit": 1000}).json()["items"]
            restarts = (health(up.url) or {}).get("restarts", [])
            return Outcome(done, len(poster.events), expected, found, ids, alarms, poster.events, listeners, restarts,
                           poster, seconds, tail=tail)
        finally:
            if poster:
                poster.stop.set()
            for listener in listeners:
                listener.stop.set()
            up.stop()


def wait_settled(up: Up, token: str, count: int, quiet: float = 5.0, timeout: float = 300.0):
    """The stored matches once there are ``count`` of them (or more) and none came for
    ``quiet`` seconds, or at ``timeout``."""
    began = time.monotonic()
    ids, found = stored_matches(up, token)
    changed = time.monotonic()
    while time.monotonic() - began < timeout:
        time.sleep(1.0)
        now_ids, now_found = stored_matches(up, token)
        if len(now_ids) != len(ids):
            ids, found, changed = now_ids, now_found, time.monotonic()
        elif len(ids) >= count and time.monotonic() - changed >= quiet:
            break
    return ids, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=3, help="websocket clients")
    parser.add_argument("--result-maxlen", type=int, default=None, help=(
        "PENUMBRA_RESULT_MAXLEN, the live cap (the matches are read from the history either way)"))
    args = parser.parse_args()
    from bench.report import Report

    report = Report("chaos", f"Chaos: {args.rounds} rounds of SIGKILL under load (seed {args.seed})")
    report.say(f"`python bench/chaos.py --rounds {args.rounds} --seed {args.seed}`: penumbra up (local[2]), "
               f"query `{QUERY}`, 50 events every 100 ms through REST, {args.clients} websocket clients")
    outcome = run(args.rounds, args.seed, args.clients, say=report.say, result_maxlen=args.result_maxlen)
    report.say("")
    report.say("round  killed   pid      at (s)  back in (s)  restart in /api/health")
    for r in outcome.rounds:
        seen = next((x for x in outcome.restarts if x["pid"] == r.pid), None)
        report.say(f"{r.number:>5}  {r.victim:<7}  {r.pid or 0:>7}  {r.at:>6.0f}  {r.recovered_in or 0:>11.1f}  "
                   + (f"{seen['part']}: {seen['cause']}, had run {seen['uptime']:.0f} s" if seen else "—"))
    others = [x for x in outcome.restarts if x["pid"] not in {r.pid for r in outcome.rounds}]
    for x in others:
        report.say(f"       also restarted: {x['part']} (pid {x['pid']}): {x['cause']}, had run {x['uptime']:.0f} s")
    report.say("")
    report.say(f"events accepted: {outcome.events:,}; retries: {outcome.poster.retried:,}; answered as duplicates: "
               f"{outcome.poster.duplicates:,}; longest wait for a 2xx: {outcome.poster.longest_wait:.1f} s")
    report.say(f"matches: {len(outcome.found):,} stored, {len(outcome.expected):,} from penumbra eval; "
               f"{len(outcome.alarms)} alarm instances counting {sum(a['matches'] for a in outcome.alarms):,}")
    for n, client in enumerate(outcome.clients):
        report.say(f"websocket client {n}: {len(client.ids):,} matches, {client.reconnects} reconnects, "
                   f"{client.gaps} gaps")
    problems = outcome.problems()
    report.say("verdict: " + ("nothing lost, nothing twice, every restart named" if not problems
                              else "; ".join(problems)))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 3.5))
    start = outcome.poster.accepted[0][0] if outcome.poster.accepted else 0
    axis.plot([t - start for t, _ in outcome.poster.accepted], [n for _, n in outcome.poster.accepted], lw=1.2)
    colours = {"driver": "tab:red", "worker": "tab:orange", "api": "tab:green", "redis": "tab:purple"}
    for r in outcome.rounds:
        axis.axvspan(r.at, r.at + (r.recovered_in or 0), color=colours[r.victim], alpha=0.25,
                     label=r.victim if r.victim not in [x.victim for x in outcome.rounds[:r.number - 1]] else None)
    axis.set_xlabel("seconds since the load began")
    axis.set_ylabel("events accepted")
    axis.legend(loc="upper left", title="killed (until back)")
    report.save(figure)
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
