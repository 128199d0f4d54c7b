"""The bodies the service reads and writes, one section per resource.

Every request body forbids unknown fields, NaN and infinities, and takes numbers as
JSON numbers only (``true`` is not 1). The core validates again what only it knows
(a query's meaning, a histogram's shape) and names the field.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
Probability = Annotated[float, Field(strict=True, gt=0, le=1, allow_inf_nan=False)]
Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z_][A-Za-z0-9_.\-]*$")]
Priority = Literal["critical", "warning", "info"]
AutoResolve = Annotated[float, Field(ge=0, le=525_600, allow_inf_nan=False)]
QueryId = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")]
#: The last millisecond of year 9999: the ids the system writes are <time in ms>-<n>, and
#: one beyond it names no time (Redis itself takes up to 2**64 - 1 in each part).
LAST_MS = 253402300799999


def entry_id(value: str) -> str:
    """An entry id the system could have written: its time at most :data:`LAST_MS`, its
    sequence below 2**64 (what Redis takes)."""
    ms, seq = (int(part) for part in value.split("-"))
    if ms > LAST_MS or seq >= 2 ** 64:
        raise ValueError(f"{value!r} is not an entry id: <time in ms, at most {LAST_MS}>-<sequence below 2**64>")
    return value


Cursor = Annotated[str, Field(pattern=r"^[0-9]{1,20}-[0-9]{1,20}$", description="a result stream entry id",
                              examples=["1718000000000-0"]), AfterValidator(entry_id)]


class Body(BaseModel):
    """A request body: unknown fields, NaN and infinities are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ErrorDetail(BaseModel):
    message: str = Field(description="what is wrong, in words")
    field: str | None = Field(None, description="dotted path of the offending value")
    line: int | None = Field(None, description="1-based line of a query error")
    column: int | None = Field(None, description="1-based column of a query error")
    model_config = ConfigDict(extra="allow")


class ErrorOut(BaseModel):
    """Every error the service answers."""

    error: ErrorDetail
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"error": {"message": "unexpected 'WHERE'; expected ','", "line": 2, "column": 5}}]})


# --- queries ---------------------------------------------------------------------------------

JOIN_EXAMPLE = "SELECT * FROM SEISMIC A, ACOUSTIC B WHERE WINDOW(A, B) = 2000 WITH THRESHOLD 0.6"


class QueryIn(Body):
    """A query to register: its text in the Penumbra query language (docs: joins, patterns, lossy)."""

    text: str = Field(min_length=1, max_length=20_000, description="the query", examples=[JOIN_EXAMPLE])
    id: QueryId | None = Field(None, description="its id (default: generated)", examples=["quakes"])
    name: Annotated[str, Field(min_length=1, max_length=200)] | None = Field(
        None, description="a name for people (default: the id)")
    threshold: Probability | None = Field(None, description="overrides the threshold written in the query")
    paused: Annotated[bool, Field(strict=True)] = Field(False, description="registered but fed no events")
    priority: Priority | None = Field(None, description="how its alarms rank (default: warning)")
    auto_resolve_minutes: AutoResolve | None = Field(None, description=(
        "resolve an alarm instance after this many minutes without a match (default, and 0: never)"))


class QueryPatch(Body):
    """What to change of a query; every field is optional, at least one is needed."""

    threshold: Probability | None = Field(None, description="the new threshold (a join's: at least its floor)",
                                          examples=[0.7])
    name: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    paused: Annotated[bool, Field(strict=True)] | None = None
    priority: Priority | None = None
    auto_resolve_minutes: AutoResolve | None = Field(None, description="0 turns auto-resolve off")


class QueryFailure(BaseModel):
    """Why the job quarantined a query: it skips the query until it is changed or removed."""

    error: str = Field(description="the error the job met running it")
    at: float = Field(description="seconds since the epoch")
    batch: int | None = Field(None, description="the micro-batch it failed in")


class QueryOut(BaseModel):
    id: str
    text: str
    kind: Literal["join", "pattern", "sequence"] = Field(description="the query's form")
    name: str
    threshold: float | None = Field(description="the threshold (or confidence) it matches at")
    paused: bool
    priority: Priority = Field("warning", description="how its alarms rank")
    auto_resolve_minutes: float | None = Field(None, description="alarm instances resolve after this quiet (null: never)")
    failed: QueryFailure | None = Field(None, description=(
        "set when the job could not run the query: it is skipped (the others go on) until a PATCH changes it "
        "or it is removed"))
    streams: dict[str, Any] = Field(description="parameters of the streams it reads, as when it was registered")
    version: int = Field(description="registry version of its last change")
    created: float = Field(description="seconds since the epoch")
    updated: float | None = Field(None, description="seconds since the epoch")


class QueryList(BaseModel):
    version: int = Field(description="the registry version")
    items: list[QueryOut]


# --- events ----------------------------------------------------------------------------------

class EventIn(BaseModel):
    """One event (DESIGN.md, "Events"). ``ts`` is ``{"lo", "hi"[, "pmf"]}``,
    ``{"edges", "probs"}`` or ``{"detected", "template"}``."""

    stream: str = Field(examples=["seismic"])
    id: str = Field(examples=["s-17"])
    ts: dict[str, Any] = Field(examples=[{"lo": 100.0, "hi": 120.0}])
    attrs: dict[str, Any] = Field(default_factory=dict, examples=[{"region": "north", "value": 97.5}])
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"stream": "seismic", "id": "s-17", "ts": {"lo": 100.0, "hi": 120.0}, "attrs": {"region": "north"}}]})


class Rejection(BaseModel):
    index: int = Field(description="position of the event in the request (0 for a single event)")
    field: str | None = Field(description="the offending field, when one is to blame")
    reason: str


class IngestOut(BaseModel):
    """What became of the posted events: the valid ones are in the ingest stream, in
    order; each rejected one is also in the dead-letter stream."""

    accepted: int = Field(description="events appended to the ingest stream")
    duplicates: int = Field(0, description=(
        "events whose stream and id came before with the same content (a retry): taken once, not appended again"))
    rejected: int = Field(description="invalid events and conflicts (a stream and id that came before with other "
                                      "content), each in errors and in the dead-letter stream")
    first_id: str | None = Field(description="ingest stream id of the entry holding the first accepted event "
                                             "(the events appended together share one entry, a block)")
    last_id: str | None = Field(description="ingest stream id of the entry holding the last accepted event")
    errors: list[Rejection]


# --- streams ---------------------------------------------------------------------------------

class Template(Body):
    edges: list[Number] = Field(min_length=2, description="strictly increasing bucket edges",
                                examples=[[0, 20, 30, 40]])
    probs: list[Number] = Field(min_length=1, description="bucket probabilities summing to 1",
                                examples=[[0.1, 0.3, 0.6]])


class HistogramGap(Body):
    width: Number
    weights: list[Number] = Field(min_length=1)


class Gap(Body):
    """One density of the gap between a stream's events (lossy CEP): exactly one field."""

    uniform: Annotated[list[Number], Field(min_length=2, max_length=2)] | None = None
    exponential: Number | None = None
    histogram: HistogramGap | None = None


class StreamIn(Body):
    """A stream's parameters (DESIGN.md, "Stream parameters")."""

    templates: dict[Name, Template] = Field(default_factory=dict, description="template histograms by name")
    max_delay: Annotated[Number, Field(ge=0)] = Field(0.0, description="D: the longest transmission delay")
    pi: Annotated[Number, Field(ge=0)] | None = Field(None, description="longest timestamp (no templates)")
    rho: Annotated[Number, Field(ge=0)] | None = Field(None, description="shortest timestamp (no templates)")
    miss_prob: Annotated[Number, Field(ge=0, lt=1)] = Field(0.0, description="epsilon: probability of a missed event")
    gap: Gap | None = Field(None, description="gap density for lossy CEP")
    model_config = ConfigDict(json_schema_extra={"examples": [
        {"templates": {"s1": {"edges": [0, 20, 30, 40], "probs": [0.1, 0.3, 0.6]}}, "max_delay": 500}]})


class StreamOut(BaseModel):
    name: str
    params: dict[str, Any] = Field(description="the stored parameters")
    attrs: list[str] = Field([], description="attribute names its events carried (as far as the service noted them)")
    seen: float | None = Field(None, description="when its last event came, seconds since the epoch (null: not noted)")


class StreamList(BaseModel):
    items: list[StreamOut]


# --- results ---------------------------------------------------------------------------------

class MatchOut(BaseModel):
    id: str = Field(description="the match's cursor (result stream id)")
    events: dict[str, Any] = Field(description="event id per variable (a lossy match may leave one out)")
    prob: float = Field(description="join probability, pattern confidence or lossy probability")
    range: list[float] | None = Field(None, description="a pattern match's time range")
    batch: int | None = Field(None, description="the micro-batch that found it")
    at: float = Field(description="when it was written, seconds since the epoch")
    alarm: str | None = Field(None, description="the alarm instance (query and key) it counts for")
    key: dict[str, Any] | None = Field(None, description="what it is about: its query's key, e.g. {\"region\": 17}")
    times: dict[str, list[float]] | None = Field(None, description=(
        "each matched event's time support by variable, [earliest, latest], in the events' own unit"))
    partition: Literal["lpr", "sr", "rpr"] | None = Field(None, description=(
        "a join match's probing range: the one of its first event's ranges that holds its second event's max time"))
    records: dict[str, dict[str, Any]] | None = Field(None, description=(
        "the matched events by variable, as read: stream, id, ts, attrs (null: written before matches kept them)"))


class ExplainedEvent(BaseModel):
    var: str
    stream: str
    id: str
    attrs: dict[str, Any]
    ts: dict[str, Any] | None = Field(description="the timestamp as the event gave it (a template: its name and detection time)")
    support: list[float] = Field(description="[earliest, latest] time, in the events' own unit")
    density: dict[str, list[float]] | None = Field(None, description=(
        "a join's histogram {edges, probs}; a pattern's reading on its grid {times, probs}"))


class ExplanationOut(BaseModel):
    """How a match's probability came about (docs/service.md, "Explaining a match"); the
    sections present depend on the query's kind."""

    query: str
    match: MatchOut
    kind: Literal["join", "pattern", "sequence"]
    prob: float = Field(description="the probability the job gave the match")
    threshold: float | None = Field(description="the query's threshold now")
    window: float = Field(description="d of a join, W of a pattern or a sequence, in the events' unit")
    events: list[ExplainedEvent]
    probability: dict[str, Any] | None = Field(None, description=(
        "join: within = P(|X_A - X_B| <= d) = no_later - too_early, recomputed from the events"))
    satisfaction: dict[str, Any] | None = Field(None, description=(
        "join: the later event against the satisfaction time stime (Definition 8); latest_max_time = stime + d"))
    partition: dict[str, Any] | None = Field(None, description=(
        "join: the first event's probing ranges lpr, sr, rpr on the partner's max time, and the one it falls in"))
    curve: dict[str, Any] | None = Field(None, description="join: the probability against the partner's max time")
    unit: float | None = Field(None, description="pattern: the grid's step")
    strategy: str | None = None
    orderings: list[dict[str, Any]] | None = Field(None, description=(
        "pattern: each strict ordering of the events with its probability; pattern marks the query's own"))
    ties: float | None = Field(None, description="pattern: the probability that two events share an instant")
    in_order: float | None = None
    in_window: float | None = Field(None, description="pattern: in the pattern's order and within the window")
    next_match: bool | None = None
    no_other_between: float | None = Field(None, description=(
        "pattern, skip till next match: the factor that no other qualifying event fell in between"))
    note: str | None = None
    factors: list[dict[str, Any]] | None = Field(None, description=(
        "sequence: one factor per run of unobserved components: after, before, components, gap, score; "
        "over imprecise timestamps one factor, the sum over the worlds, with gap null and worlds (the "
        "combinations of instants summed)"))
    missed: list[dict[str, Any]] | None = Field(None, description="sequence: positive components not observed")
    product: float | None = Field(None, description="sequence: the factors' product (the probability)")


class AuditOut(BaseModel):
    id: str = Field(description="the entry's cursor")
    at: float = Field(description="when, seconds since the epoch")
    who: str = Field(description="the label of the token that did it (or the registry's own name)")
    action: str = Field(description="register, update, remove, streams, alarm.acknowledged, token.create, ...")
    subject: str = Field(description="what it was done to: a query id, a stream, a token id")
    details: Any = Field(None, description="what changed, e.g. {\"threshold\": 0.7}")
    version: int | None = Field(None, description="the registry version it was made at")


class AuditPage(BaseModel):
    """Audit entries newest first; ``next`` is the ``before`` of the following (older) page."""

    items: list[AuditOut]
    next: str | None


class MatchPage(BaseModel):
    """Matches newest first; ``next`` is the ``before`` of the following (older) page."""

    items: list[MatchOut]
    next: str | None


class Unavailable(BaseModel):
    since: int = Field(description="milliseconds since the epoch")
    until: int = Field(description="milliseconds since the epoch (exclusive)")
    reason: str


class HistoryPage(BaseModel):
    """A period's matches in time order, archive and live tail together; pass ``next`` as
    ``next`` for the following page (null: none now)."""

    items: list[MatchOut]
    next: str | None
    unavailable: list[Unavailable] = Field(description="parts of the period the history cannot serve, and why")


class HistoryBucket(BaseModel):
    start: int = Field(description="the bucket's start, milliseconds since the epoch (UTC hours or days)")
    matches: int


class HistoryKey(BaseModel):
    key: dict[str, Any] | None
    matches: int


class HistorySummary(BaseModel):
    query: str
    since: int | None
    until: int
    bucket: Literal["hour", "day"]
    total: int
    buckets: list[HistoryBucket]
    keys: list[HistoryKey] = Field(description="matches per key, most first")
    unavailable: list[Unavailable]


class RateOut(BaseModel):
    query: str
    matches: int = Field(description="matches in the window")
    per_minute: float
    sources: dict[str, float | None] = Field(default_factory=dict, description=(
        "per stream it reads, when an event of it was last appended (seconds since the epoch; null: none yet)"))


class RatesOut(BaseModel):
    """Every registered query's matches over a window up to now, counted by the server."""

    since: int = Field(description="the window's start, milliseconds since the epoch")
    until: int
    items: list[RateOut]


class BacktestPoint(BaseModel):
    threshold: float
    matches: int = Field(description="the period's matches at or above the threshold (with near misses below the "
                                     "query's own)")
    alarms: int = Field(description="alarm episodes that would have opened: a key's first match, and again after "
                                    "the query's auto_resolve_minutes without one")
    exact: bool = Field(description="false below the query's threshold for alarms (near misses are archived by "
                                    "probability, without key: a lower bound)")
    judged: int = Field(description="judged matches at or above the threshold (verdicts real or false)")
    precision: float | None = Field(description="real among them")
    recall: float | None = Field(description="real ones at or above the threshold among all real judged")


class BacktestOut(BaseModel):
    """What each threshold would have raised over a period, from the archive."""

    query: str
    threshold: float | None = Field(description="the threshold now")
    floor: float = Field(description="the lowest threshold the archive answers for")
    since: int | None
    until: int
    matches: int = Field(description="matches archived in the period")
    near_misses: int = Field(description="near misses archived in the period (joins)")
    points: list[BacktestPoint]
    unavailable: list[Unavailable]


class ObservationOut(BaseModel):
    """What the job observed of a query in one micro-batch, combined over its key groups."""

    id: str
    batch: int | None
    at: float
    observations: dict[str, Any] = Field(description="buffers, bounds, watermark, counters, near misses, "
                                                     "partitions (joins); runs and queues (patterns, lossy)")


class ObservationList(BaseModel):
    items: list[ObservationOut]


class Projection(BaseModel):
    """One part of a query's latest observations (None before the job's first batch for it)."""

    id: str | None
    batch: int | None
    at: float | None
    value: Any = Field(description="the part")


class CurveIn(Body):
    event: dict[str, Any] = Field(description="an event of one of the join's streams",
                                  examples=[{"stream": "SEISMIC", "id": "s-1", "ts": {"lo": 100, "hi": 120}}])
    points: Annotated[int, Field(strict=True, ge=2, le=2000)] = Field(200, description="points on the curve")
    partners: list[dict[str, Any]] = Field([], max_length=200, description=(
        "events of the partner stream to place on the curve (e.g. the partitions' ``newly_buffered`` sample)"))


class CurvePartner(BaseModel):
    id: str
    x: float = Field(description="the partner's max time")
    prob: float = Field(description="P(|X_event - X_partner| <= d)")
    partition: Literal["lpr", "sr", "rpr"] | None = Field(description="the probing range x falls in (null: none)")


class CurveOut(BaseModel):
    """P(|X_event - X_partner| <= d) as the partner's max time x moves, one curve per
    partner template (or interval length), with the threshold and probing ranges."""

    x: list[float]
    curves: dict[str, list[float]]
    threshold: float
    floor: float
    lpr: list[float | None] = Field(description="left probing range [from, to] of the partner's max time; "
                                                "null: unbounded")
    sr: list[float | None]
    rpr: list[float | None]
    partners: list[CurvePartner] = Field([], description="the partners asked for, each at its max time")


class WhatIfPoint(BaseModel):
    threshold: float
    matches: float = Field(description="candidates at or above this threshold (an estimate when sampled)")


class WhatIfOut(BaseModel):
    """How many of the recent window's candidates would match at each threshold."""

    query: str
    threshold: float | None = Field(description="the threshold now")
    floor: float = Field(description="the lowest threshold the query keeps candidates for")
    batches: int = Field(description="micro-batches in the window")
    since: float | None = Field(None, description="when the window's first micro-batch was written (seconds since "
                                                  "the epoch)")
    until: float | None = Field(None, description="when its latest was written")
    matches: int = Field(description="matches found in the window")
    near_misses: int = Field(description="candidates between the floor and the threshold in the window")
    near_miss_samples: int = Field(description="near misses whose probability the job recorded")
    exact: bool = Field(description="true when every near miss is known by its probability or its "
                                    "hundredth of probability (the thresholds are then on that grid); false when "
                                    "some were only sampled and are scaled from the samples")
    points: list[WhatIfPoint]


# --- alarms ----------------------------------------------------------------------------------

AlarmState = Literal["new", "acknowledged", "silenced", "resolved"]


class AlarmOut(BaseModel):
    """An alarm instance: one query's matches about one key (its equality key's values;
    null for a query without one), since the instance last opened."""

    id: str = Field(description="the instance: the query's id for a query without key, else <query>:<digest of the key>")
    query: str
    name: str = Field(description="the query's name")
    key: dict[str, Any] | None = Field(description="what it is about, e.g. {\"region\": 17}; null: no key")
    state: AlarmState
    priority: Priority
    matches: int = Field(description="matches since the instance opened (exact)")
    episode: int = Field(description="how many times it opened (the first match, and each after a resolution)")
    opened_at: float | None = Field(description="when it opened, seconds since the epoch")
    last_at: float | None = Field(description="when its latest match was written")
    first: str | None = Field(description="cursor of its first match since it opened")
    last: str | None = Field(description="cursor of its latest match")
    last_prob: float | None
    high_prob: float | None = Field(description="the highest probability since it opened")
    silenced_until: float | None = None
    silence: str | None = Field(None, description="the silence (by matcher) that covers it")
    updated_by: str | None = Field(None, description="who acted on it last in this episode (auto: auto-resolve)")
    updated_at: float | None = None
    comment: str | None = None
    verdict: Literal["real", "false", "unknown"] | None = Field(None, description="given when it was resolved")


class AlarmList(BaseModel):
    items: list[AlarmOut] = Field(description="by priority, state, then latest match first")
    next: str | None = Field(None, description="give it as next for the following page; null: no more")


Comment = Annotated[str, Field(min_length=1, max_length=2000)]


class SilenceIn(Body):
    until: Annotated[float, Field(strict=True, allow_inf_nan=False)] = Field(
        description="seconds since the epoch; must be in the future", examples=[1893456000.0])
    comment: Comment | None = None


Verdict = Literal["real", "false", "unknown"]


class ResolveIn(Body):
    comment: Comment | None = None
    verdict: Verdict | None = Field(None, description="what was found: real, false (a false alarm) or unknown")


class VerdictIn(Body):
    """What was found of one match or one alarm instance (its current episode)."""

    match: Cursor | None = Field(None, description="the match's cursor")
    alarm: Annotated[str, Field(max_length=200)] | None = Field(None, description="the alarm instance's id")
    verdict: Verdict
    comment: Comment | None = None


class VerdictOut(BaseModel):
    subject: str = Field(description="m:<match cursor>, or a:<alarm id>:<episode>")
    verdict: Verdict
    prob: float = Field(description="the probability reported: the match's, or the alarm episode's highest")
    match: str | None = None
    alarm: str | None = None
    episode: int | None = None
    by: str
    at: float
    comment: str | None = None


class VerdictList(BaseModel):
    items: list[VerdictOut] = Field(description="newest first")


class CalibrationOut(BaseModel):
    verdicts: dict[str, int] = Field(description="how many of each verdict")
    reliability: dict[str, Any] = Field(description=(
        "bins of reported probability (lo, hi, count, mean_prob, real_share), the expected calibration error "
        "(ece), judged (real or false) and real"))
    precision: list[dict[str, Any]] = Field(description=(
        "per threshold (0 to 1 by 0.01): the verdicts at or above it, the real ones, their share"))
    threshold_for: float | None = Field(None, description="the smallest threshold reaching the precision asked")


class MatcherIn(Body):
    """A silence by matcher: a query and, optionally, some of its key's attributes."""

    query: QueryId
    key: dict[str, str | int | float | bool | None] | None = Field(None, description=(
        "attributes the instance's key must have (all of them); null: every instance of the query"),
        examples=[{"region": 17}])
    start: Annotated[float, Field(strict=False, allow_inf_nan=False)] | None = Field(
        None, description="seconds since the epoch (default: now)")
    end: Annotated[float, Field(strict=False, allow_inf_nan=False)] = Field(description="seconds since the epoch")
    comment: Comment | None = None


class MatcherOut(BaseModel):
    id: str
    query: str
    key: dict[str, Any] | None
    start: float
    end: float
    author: str
    comment: str | None = None
    created: float
    active: bool = Field(description="in force now")


class MatcherList(BaseModel):
    items: list[MatcherOut]


# --- notifications --------------------------------------------------------------------------

class ContactIn(Body):
    """A contact point: a webhook that gets each notification as a signed JSON POST, or a
    Prometheus Alertmanager that gets the active alarm instances as alerts."""

    name: Annotated[str, Field(min_length=1, max_length=200)]
    kind: Literal["webhook", "alertmanager"] = "webhook"
    url: Annotated[str, Field(min_length=8, max_length=2000, pattern=r"^https?://[^\s]+$")] = Field(
        description="http(s) URL the notifications are POSTed to (an Alertmanager's base URL)",
        examples=["https://ops.example/hooks/penumbra"])
    secret: Annotated[str, Field(min_length=16, max_length=256)] | None = Field(
        None, description="the HMAC-SHA256 key of the signature header (default: generated, shown once)")


class ContactInfo(BaseModel):
    id: str
    name: str
    kind: str
    url: str
    created: float
    by: str


class ContactOut(ContactInfo):
    secret: str = Field(description="the signature's key: shown in this answer only")


class ContactList(BaseModel):
    items: list[ContactInfo]


class RuleIn(Body):
    """Which notifications go to which contact points."""

    queries: list[QueryId] | None = Field(None, description="these queries' instances (null: any query)")
    priorities: list[Priority] | None = Field(None, description="of these priorities (null: any)")
    contacts: Annotated[list[str], Field(min_length=1, max_length=50)] = Field(description="contact point ids")


class RuleOut(BaseModel):
    id: str
    queries: list[str] | None
    priorities: list[str] | None
    contacts: list[str]
    created: float
    by: str


class RuleList(BaseModel):
    items: list[RuleOut]


class DeliveryOut(BaseModel):
    id: str = Field(description="the notification's id, also its Idempotency-Key")
    contact: str
    event: str | None = None
    alarm: str | None = None
    attempts: int
    last_error: str | None = None
    created: float
    reason: str | None = Field(None, description="a failed delivery: why it was given up")
    at: float | None = Field(None, description="a failed delivery: when it was given up")


class DeliveryList(BaseModel):
    pending: list[DeliveryOut] = Field(description="being delivered or retried, oldest first")
    failed: list[DeliveryOut] = Field(description="given up on, newest first")


# --- tokens ----------------------------------------------------------------------------------

RoleName = Literal["viewer", "analyst", "admin"]


class TokenIn(Body):
    role: RoleName
    label: Annotated[str, Field(min_length=1, max_length=100)] = Field(examples=["ops-dashboard"])


class TokenOut(BaseModel):
    id: str
    role: RoleName
    label: str
    created: float


class TokenCreated(TokenOut):
    token: str = Field(description="the bearer token: shown only now, store it")


class TokenList(BaseModel):
    items: list[TokenOut]


# --- health ----------------------------------------------------------------------------------

class JobHealth(BaseModel):
    alive: bool = Field(description="a heartbeat younger than 10 s")
    heartbeat_age: float | None = Field(description="seconds since the job's last heartbeat")
    active: bool | None = Field(description="the streaming query runs")
    last_batch: int | None
    last_batch_age: float | None = Field(description="seconds since the last micro-batch")
    master: str | None


class RestartOut(BaseModel):
    id: str = Field(description="entry id in the restart stream")
    part: str = Field(description="what died: redis, job or api")
    pid: int | None
    cause: str = Field(description="how it died, e.g. \"was killed by SIGKILL\" or \"not ready after 600 s\"")
    at: float = Field(description="when, seconds since the epoch")
    uptime: float | None = Field(description="seconds it had run")
    failures: int | None = Field(description="its failures in a row")
    restart_in: float | None = Field(description="seconds of back-off before it was started again")


class HealthOut(BaseModel):
    status: Literal["ok", "degraded", "down"] = Field(
        description="ok: Redis and the job; degraded: Redis only; down: no Redis")
    redis: bool
    redis_ms: float | None = Field(description="round trip to Redis, milliseconds")
    job: JobHealth | None
    lag_entries: int | None = Field(description="ingest entries not yet processed (last progress report)")
    lag_seconds: float | None
    ingest_length: int | None = Field(description="entries in the ingest stream")
    redis_memory: float | None = Field(None, description=(
        "Redis's memory in use as a share of its maxmemory (null: no limit set); Redis refuses writes at 1"))
    memory_warning: bool = Field(False, description="Redis is past 80 % of its maxmemory: make room before it refuses")
    failed_queries: int | None = Field(None, description=(
        "queries the job quarantined: it skips them while the others go on (GET /api/queries names them)"))
    restarts: list[RestartOut] = Field(default_factory=list, description=(
        "the latest 20 restarts of penumbra up's children, newest first, with their causes"))


class MetricsOut(BaseModel):
    counts: dict[str, int] = Field(description="running totals: matches, rejected, late")
    items: list[dict[str, Any]] = Field(description="the job's latest progress reports, newest first")
