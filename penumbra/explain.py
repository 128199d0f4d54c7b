"""How a match's probability came about, from the match's own events.

:func:`explain` takes a query, its streams and one match as the job wrote it (its events
by variable in the input's shape, :attr:`~penumbra.operator.Match.records`) and gives,
computed here with the operators' own kernels:

* a **join** (PTJoin paper): both events' histograms; ``P(|X_A - X_B| <= d)`` as
  ``P(X_A + d >= X_B) - P(X_A - d > X_B)`` (section 2); Lemma 2's reading, the later event
  against the satisfaction time of Definition 8 (``stime``: the latest max time at which
  an event of the later one's shape still meets the threshold is ``stime + d``); the
  first event's probing ranges LPR / SR / RPR (Theorem 3, or Eqs. 4-6 of the interval
  paper) with the range the second event's max time falls in, and the probability curve
  against the partner's max time (Figure 3);
* a **pattern** (imprecise-timestamps paper): the events' readings on the query's grid;
  the probability of each strict ordering of them (the possible worlds grouped by
  order), the pattern's order within the window W, and for *skip till next match* the
  remaining factor, the chance that no other qualifying event fell in between;
* a **lossy** sequence (AYAC paper): the observed events and the recorded factors, one per
  run of components between two observed ones (missed positives, negatives), each
  with its components' miss probabilities and the gap it was scored over.

Every number is a plain float; times are in the events' own unit.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Mapping

import numpy as np

from .engine import build_operator
from .errors import ValidationError
from .events import Streams, parse_event
from .probability import p_geq, p_within, stime
from .patterns.confidence import dynamic_programme
from .patterns.model import GridEvent, to_grid
from .query import parse

__all__ = ["MAX_ORDERED", "explain"]

#: A pattern match's orderings are listed for at most this many events (6! = 720).
MAX_ORDERED = 6


def explain(text: str, streams: Streams, match: Mapping[str, Any], threshold: float | None = None) -> dict[str, Any]:
    """The explanation of ``match`` (``events``, ``prob`` and ``records``; a lossy match's
    ``factors``) under the query ``text`` over ``streams``; ``threshold`` is the query's
    current one (its text's when None). Raises :class:`ValidationError` when the match
    does not carry its events."""
    query = parse(text)
    records = match.get("records")
    if not records:
        raise ValidationError("records", "this match was written without its events, so it cannot be explained")
    operator = build_operator(query, streams)
    if threshold is not None:
        operator.set_threshold(threshold)
    base = {"kind": query.kind, "prob": float(match["prob"]), "threshold": operator.threshold}
    if query.kind == "join":
        return {**base, **_join(operator, streams, records)}
    if query.kind == "pattern":
        return {**base, **_pattern(operator, streams, records, float(match["prob"]))}
    return {**base, **_lossy(operator, streams, records, match.get("factors") or [], float(match["prob"]))}


def _event(record: Mapping[str, Any], streams: Streams, var: str):
    try:
        return parse_event(record, streams)
    except ValidationError as error:
        raise error.within(f"records.{var}") from None


def _join(op, streams: Streams, records: Mapping[str, Any]) -> dict[str, Any]:
    (a, b), d = op.names, op.d
    events, histograms, parsed = [], [], []
    for k, var in enumerate((a, b)):
        event = _event(records[var], streams, var)
        parsed.append(event)
        admitted = op.sides[k].admit(event)
        if isinstance(admitted, str):
            raise ValidationError(f"records.{var}.ts", admitted)
        h = admitted[0]
        histograms.append(h)
        events.append({"var": var, "stream": event.stream, "id": event.id, "attrs": dict(event.attrs),
                       "ts": records[var]["ts"], "support": [h.lo, h.hi],
                       "density": {"edges": h.edges.tolist(), "probs": h.probs.tolist()}})
    ha, hb = histograms
    within = p_within(ha, hb, d)
    no_later = p_geq(ha, hb, d)       # P(X_B <= X_A + d)
    too_early = p_geq(ha, hb, -d)     # P(X_B < X_A - d)
    curve = op.probability_curve(parsed[0], partners=[parsed[1]])
    partner = curve["partners"][0]
    later, earlier = (1, 0) if hb.hi >= ha.hi else (0, 1)
    h_later, h_earlier = histograms[later], histograms[earlier]
    delta = op.threshold
    satisfaction = stime(h_earlier, h_later, delta) if 0 < delta <= 1 else None
    pis = [side.params.longest for side in op.sides]
    return {
        "window": d,
        "events": events,
        "probability": {
            "within": within, "no_later": no_later, "too_early": too_early,
            "formula": f"P(|X_{a} - X_{b}| <= d) = P(X_{a} + d >= X_{b}) - P(X_{a} - d > X_{b})",
        },
        "satisfaction": {
            "later": (a, b)[later], "earlier": (a, b)[earlier],
            "later_max_time": h_later.hi,
            "prob": p_geq(h_earlier, h_later, d),
            "stime": satisfaction,
            "latest_max_time": None if satisfaction is None else satisfaction + d,
            "meets": None if satisfaction is None else bool(p_geq(h_earlier, h_later, d) >= delta),
            # Lemma 2 reads the pair by the later event alone when d >= max(pi_A, pi_B)
            "lemma2": all(pi is not None for pi in pis) and d >= max(pis),
        },
        "partition": {
            "of": a, "partner": b, "partner_max_time": partner["x"], "range": partner["partition"],
            "lpr": curve["lpr"], "sr": curve["sr"], "rpr": curve["rpr"],
        },
        "curve": {"x": curve["x"], "curves": curve["curves"], "floor": curve["floor"]},
    }


def _grid_event(record: Mapping[str, Any], streams: Streams, var: str, unit: float):
    grid = record.get("grid")
    if grid:
        probs = None if grid.get("probs") is None else np.asarray(grid["probs"], dtype=float)
        return GridEvent(record["stream"], record["id"], record.get("attrs") or {}, int(grid["lo"]), int(grid["hi"]),
                         probs)
    return to_grid(_event(record, streams, var), unit)


def _pattern(op, streams: Streams, records: Mapping[str, Any], prob: float) -> dict[str, Any]:
    unit, window = op.unit, op.pattern.window
    variables = list(op.pattern.variables)
    returned = [v for v in variables if v in records]
    grid = {var: _grid_event(records[var], streams, var, unit) for var in returned}
    events = [{"var": var, "stream": e.stream, "id": e.id, "attrs": dict(e.attrs),
               "ts": records[var].get("ts"), "support": [e.lo * unit, e.hi * unit],
               "density": {"times": [(e.lo + k) * unit for k in range(e.hi - e.lo + 1)],
                           "probs": [float(p) for p in e.probs]}} for var, e in grid.items()]
    out: dict[str, Any] = {"window": window * unit, "unit": unit, "strategy": op.query.strategy, "events": events}
    if returned != variables:
        out["note"] = (f"the query returns {', '.join(returned)} of {', '.join(variables)}: the orderings and the "
                       f"window need every component's event")
        return out
    span = max(e.hi for e in grid.values()) - min(e.lo for e in grid.values()) + 2

    def weight(order: tuple[str, ...], steps: int) -> float:
        chain = [grid[v] for v in order]
        return dynamic_programme(chain, [e.lo for e in chain], [e.hi for e in chain], steps)[0]

    if len(variables) <= MAX_ORDERED:
        orderings = [{"order": list(order), "prob": weight(order, span), "pattern": list(order) == variables}
                     for order in itertools.permutations(variables)]
        orderings.sort(key=lambda o: (-o["prob"], o["order"]))
        out["orderings"] = orderings
        out["ties"] = max(0.0, 1.0 - math.fsum(o["prob"] for o in orderings))
    in_order = weight(tuple(variables), span)
    in_window = weight(tuple(variables), window)
    out["in_order"] = in_order
    out["in_window"] = in_window
    out["next_match"] = op.query.strategy != "skip_till_any_match"
    # skip till next match multiplies each point match by P(no other qualifying event between)
    out["no_other_between"] = (prob / in_window if in_window > 0 else None) if out["next_match"] else 1.0
    return out


def _lossy(op, streams: Streams, records: Mapping[str, Any], factors: list, prob: float) -> dict[str, Any]:
    events = []
    for var in op.state_vars:
        if var not in records:
            continue
        event = _event(records[var], streams, var)
        events.append({"var": var, "stream": event.stream, "id": event.id, "attrs": dict(event.attrs),
                       "ts": records[var]["ts"], "support": [event.ts.lo, event.ts.hi]})
    observed = {e["var"] for e in events}
    missed = [{"var": c.var, "stream": c.stream, "miss_prob": op.miss_probs[k]}
              for k, c in enumerate(op.query.components) if not c.negated and c.var not in observed]
    product = math.prod(float(f["score"]) for f in factors) if factors else 1.0
    return {"window": op.window, "events": events, "missed": missed, "factors": list(factors),
            "product": product}
