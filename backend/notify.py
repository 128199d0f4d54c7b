"""The notifier: alarm notifications that leave the browser, delivered at least once.

It runs in each API process's lifespan (``PENUMBRA_NOTIFY``), and does three things in turn:

1. reads the alarm events the job writes (``pn:alarm-events``: an instance opened or
   reopened) in a consumer group, so that one process handles each; an instance silenced
   then notifies nobody; otherwise each contact point the routing rules name for its
   query and priority gets a notification queued (once: its id is the event's and the
   contact point's, and queuing it again adds nothing), and the event is acknowledged.
   Events a process took and did not acknowledge (it died) are taken over after a minute;
2. looks at the silences that ended (``pn:silence-ends``): an instance that matched while
   silenced notifies again (``silence_ended``);
3. delivers what is due: a POST of the notification's JSON to the webhook with
   ``Idempotency-Key`` (the notification's id, the same on every attempt) and
   ``X-Penumbra-Signature`` (HMAC-SHA256 of ``"<timestamp>.<body>"`` with the contact
   point's secret); a 2xx is delivered, anything else is tried again after 1, 2, 4, ...
   up to 60 seconds, until ``PENUMBRA_NOTIFY_GIVE_UP_MINUTES`` (15) have passed since the
   notification was made; then it is kept with its reason in ``pn:delivery-failures``.
   A delivery is leased while it is tried, so two processes never send it at once.

A contact point of kind ``alertmanager`` gets no POST per notification: every
``PENUMBRA_ALERTMANAGER_RESEND`` seconds (and at once when an instance routed to it
opens) it gets the instances its rules route to it as Alertmanager v2 alerts
(:func:`contract.notify.alert_of`): the open ones firing (ending by themselves if
Penumbra stops re-sending them), those resolved lately with their end; its grouping,
inhibition, silences and receivers take over from there.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import redis

from contract.alarms import query_of, silence_matches
from contract.entries import encode
from contract.notify import GROUP, SIGNATURE_HEADER, alert_of, claim_due, enqueue, routed_contacts, sign

from .deps import Service
from .records import alarm_views

__all__ = ["Notifier", "backoff"]

log = logging.getLogger("penumbra.notify")

#: seconds a delivery attempt holds its notification
LEASE_SECONDS = 30.0
#: an alarm event a notifier took this long ago without acknowledging it is taken over
TAKE_OVER_MS = 60_000
#: deliveries tried at once, per look
BATCH = 50
#: failures kept (MAXLEN ~)
FAILURES_MAXLEN = 10_000


def backoff(attempts: int) -> float:
    """Seconds before the next attempt after ``attempts`` failed ones: 1, 2, 4, ... 60."""
    return float(min(2 ** max(0, attempts - 1), 60))


class Notifier:
    def __init__(self, service: Service):
        self.service = service
        self.keys = service.keys
        self.consumer = f"{socket.gethostname()}-{os.getpid()}"
        self.task: asyncio.Task | None = None
        self.grouped = False
        #: threads of its own (the live feed's work on the shared ones does not delay a
        #: notification), made at each start: a lifespan run again starts a notifier again
        self.executor: ThreadPoolExecutor | None = None
        #: when the Alertmanager contact points are sent the active instances next (0: at once)
        self.alertmanager_at = 0.0

    async def start(self) -> None:
        if self.service.settings.notify:
            self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="notifier")
            self.grouped = False
            self.task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001 - stopping
                pass
            self.task = None
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)
            self.executor = None

    async def _call(self, function, *args):
        """``function(*args)`` (Redis calls, blocking) on the notifier's own threads."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, functools.partial(function, *args))

    async def _run(self) -> None:
        async with httpx.AsyncClient(timeout=self.service.settings.notify_timeout, trust_env=False) as http:
            while True:
                try:
                    await self._call(self._events)      # waits up to the poll interval for an event
                    await self._call(self._silence_ends)
                    await self._deliver(http)
                    await self._alertmanagers(http)
                except asyncio.CancelledError:
                    raise
                except redis.RedisError as error:
                    log.warning("notifier: Redis unavailable (%s); trying again", error)
                    self.grouped = False
                    await asyncio.sleep(1.0)
                except Exception:  # noqa: BLE001 - the notifier must outlive any one problem
                    log.exception("notifier: error")
                    await asyncio.sleep(1.0)

    # ---- 1. alarm events

    def _events(self) -> bool:
        client, keys = self.service.redis, self.keys
        if not self.grouped:
            try:
                client.xgroup_create(keys.alarm_events, GROUP, id="0", mkstream=True)
            except redis.ResponseError as error:
                if "BUSYGROUP" not in str(error):
                    raise
            self.grouped = True
        taken = client.xautoclaim(keys.alarm_events, GROUP, self.consumer, TAKE_OVER_MS, "0-0", count=BATCH)[1]
        # waits for a new event up to the poll interval: an opening is taken the moment it is written
        settings = self.service.settings
        wait = None if taken else max(1, int(min(settings.notify_poll, settings.redis_timeout / 2) * 1000))
        found = client.xreadgroup(GROUP, self.consumer, {keys.alarm_events: ">"}, count=BATCH, block=wait)
        entries = list(taken) + [e for _, items in found for e in items]
        if not entries:
            return False
        routes = self._routes()
        for entry_id, fields in entries:
            if fields:  # an entry trimmed away meanwhile comes back empty
                self._event(entry_id.decode(), {k.decode(): v.decode() for k, v in fields.items()}, routes)
            client.xack(keys.alarm_events, GROUP, entry_id)
        return True

    def _routes(self) -> list[dict]:
        return [json.loads(raw) for raw in self.service.redis.hvals(self.keys.routes)]

    def _view(self, instance: str) -> dict | None:
        query = query_of(instance)
        entry = self.service.registry.query(query)
        if entry is None:
            return None
        found = alarm_views(self.service, {query: entry}, {query: [instance]})
        return found[0] if found else None

    def _event(self, event_id: str, fields: dict, routes: list[dict]) -> None:
        view = self._view(fields.get("i", ""))
        if view is None or view["state"] == "silenced":
            return  # a removed query, or a silenced instance: nobody is told
        self._notify(event_id, fields.get("event", "opened"), view, routes)

    def _notify(self, notification: str, event: str, view: dict, routes: list[dict]) -> int:
        now = time.time()
        body = {"event": event, "at": now, "alarm": view, "link": f"{self.service.settings.public_url.rstrip('/')}"
                f"/#/alarms?query={view['query']}"}
        made = 0
        kinds = self._kinds()
        for contact in routed_contacts(routes, view["query"], view["priority"]):
            if kinds.get(contact) == "alertmanager":
                self.alertmanager_at = 0.0     # Alertmanager gets the instance with all the others, now
                continue
            made += enqueue(self.service.redis, self.keys, f"{notification}:{contact}", contact,
                            {**body, "id": f"{notification}:{contact}"}, now)
        return made

    def _kinds(self) -> dict[str, str]:
        return {json.loads(raw)["id"]: json.loads(raw).get("kind", "webhook")
                for raw in self.service.redis.hvals(self.keys.contacts)}

    # ---- 2. silences that ended

    def _silence_ends(self) -> bool:
        client, keys = self.service.redis, self.keys
        now = time.time()
        ended = client.zrangebyscore(keys.silence_ends, "-inf", now, start=0, num=BATCH, withscores=True)
        if not ended:
            return False
        routes = self._routes()
        for member, end in ended:
            if not client.zrem(keys.silence_ends, member):
                continue  # another notifier took it
            name = member.decode()
            kind, _, ref = name.partition(":")
            if kind == "i":
                views = [v for v in [self._view(ref)] if v is not None]
            else:
                views = self._matched_under(ref, end)
            for view in views:
                if view["state"] == "new":  # it matched while silenced
                    self._notify(f"silence-{name}-{end:.3f}", "silence_ended", view, routes)
        return True

    def _matched_under(self, silence_id: str, end: float) -> list[dict]:
        """The instances a matcher silence covered that matched while it was in force."""
        raw = self.service.redis.hget(self.keys.silences, silence_id)
        if raw is None:
            return []
        silence = json.loads(raw)
        entry = self.service.registry.query(silence["query"])
        if entry is None:
            return []
        return [v for v in alarm_views(self.service, {silence["query"]: entry})
                if silence_matches(silence, v["query"], v["key"]) and (v["last_at"] or 0) >= silence["start"]]

    # ---- Alertmanager: the active instances, re-sent while active

    async def _alertmanagers(self, http: httpx.AsyncClient) -> None:
        now = time.time()
        if now < self.alertmanager_at:
            return
        resend = self.service.settings.alertmanager_resend
        self.alertmanager_at = now + resend
        pushes = await self._call(self._alerts, now, resend)
        for contact, alerts in pushes:
            try:
                answer = await http.post(contact["url"].rstrip("/") + "/api/v2/alerts", json=alerts)
                if answer.status_code >= 300:
                    log.warning("notifier: Alertmanager %s answered %d", contact["name"], answer.status_code)
            except httpx.HTTPError as problem:
                log.warning("notifier: Alertmanager %s unreachable (%s); again in %g s", contact["name"], problem,
                            resend)

    def _alerts(self, now: float, resend: float) -> list[tuple[dict, list[dict]]]:
        """Per Alertmanager contact point, the instances its rules route to it as alerts: the
        open ones (new, acknowledged) firing, those resolved lately with their end; a silenced
        one is not sent (it notifies nobody)."""
        contacts = [json.loads(raw) for raw in self.service.redis.hvals(self.keys.contacts)]
        managers = [c for c in contacts if c.get("kind") == "alertmanager"]
        if not managers:
            return []
        routes = self._routes()
        _, queries, _ = self.service.snapshot()
        views = alarm_views(self.service, queries, now=now)
        base = self.service.settings.public_url.rstrip("/")
        out = []
        for contact in managers:
            alerts = []
            for view in views:
                if contact["id"] not in routed_contacts(routes, view["query"], view["priority"]):
                    continue
                if view["state"] == "silenced":
                    continue
                if view["state"] == "resolved" and now - (view.get("updated_at") or view.get("last_at") or 0) > 4 * resend:
                    continue
                alerts.append(alert_of(view, f"{base}/#/alarms?query={view['query']}", now, 4 * resend))
            if alerts:
                out.append((contact, alerts))
        return out

    # ---- 3. deliveries

    async def _deliver(self, http: httpx.AsyncClient) -> bool:
        client, keys = self.service.redis, self.keys
        due = await self._call(claim_due, client, keys, time.time(), LEASE_SECONDS, BATCH)
        if not due:
            return False
        await asyncio.gather(*(self._attempt(http, notification) for notification in due))
        return True

    async def _attempt(self, http: httpx.AsyncClient, notification: str) -> None:
        client, keys = self.service.redis, self.keys
        raw, contact_raw = await self._call(self._load, notification)
        if raw is None:
            await self._call(client.zrem, keys.deliveries_due, notification)
            return
        record = json.loads(raw)
        if contact_raw is None:
            await self._call(self._give_up, record, "its contact point was removed")
            return
        contact = json.loads(contact_raw)
        body = encode(record["body"])
        now = int(time.time())
        headers = {"Content-Type": "application/json", "Idempotency-Key": notification,
                   SIGNATURE_HEADER: sign(contact.get("secret") or "", now, body), "User-Agent": "penumbra-notifier"}
        try:
            answer = await http.post(contact["url"], content=body, headers=headers)
            error = None if 200 <= answer.status_code < 300 else f"answered {answer.status_code}"
        except httpx.HTTPError as problem:
            error = f"{type(problem).__name__}: {problem}" if str(problem) else type(problem).__name__
        if error is None:
            pipe = client.pipeline(transaction=True)
            pipe.hdel(keys.deliveries, notification)
            pipe.zrem(keys.deliveries_due, notification)
            await self._call(pipe.execute)
            return
        record["attempts"] += 1
        record["last_error"] = error
        if time.time() - record["created"] >= self.service.settings.notify_give_up_minutes * 60:
            await self._call(self._give_up, record, error)
            return
        pipe = client.pipeline(transaction=True)
        pipe.hset(keys.deliveries, notification, json.dumps(record))
        pipe.zadd(keys.deliveries_due, {notification: time.time() + backoff(record["attempts"])})
        await self._call(pipe.execute)

    def _load(self, notification: str) -> tuple[bytes | None, bytes | None]:
        raw = self.service.redis.hget(self.keys.deliveries, notification)
        if raw is None:
            return None, None
        return raw, self.service.redis.hget(self.keys.contacts, json.loads(raw)["contact"])

    def _give_up(self, record: dict, reason: str) -> None:
        client, keys = self.service.redis, self.keys
        pipe = client.pipeline(transaction=True)
        pipe.xadd(keys.delivery_failures, {"id": record["id"], "contact": record["contact"], "reason": reason,
                                           "attempts": record["attempts"], "created": record["created"],
                                           "at": time.time(), "body": encode(record["body"])[:4096]},
                  maxlen=FAILURES_MAXLEN, approximate=True)
        pipe.hdel(keys.deliveries, record["id"])
        pipe.zrem(keys.deliveries_due, record["id"])
        pipe.execute()
        log.warning("notifier: gave up on %s after %d attempts: %s", record["id"], record["attempts"], reason)
