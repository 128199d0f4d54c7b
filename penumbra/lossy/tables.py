"""The scoring tables of the AYAC NFA (section 4) and the bound u they give an arrival
(sections 4.1 and 5.1).

Each edge V_i -> V_j of the NFA is labelled with the scoring function H_{i,j}(T) of
the run of components between its positives (:func:`~.model.run_score`: missed
positives, S^P, and unobserved negatives, S^N), and G_{i,j}(T) = max_{t <= T}
H_{i,j}(t); the paper's "lookup tables", here arrays over T = 0..W. The run before the
first positive is scored from V_0, entered at t_last - W (footnote 2), and the run
after the last positive until t_first + W. Edges whose G_{i,j}(W) is below the
threshold are removed (:meth:`ScoringTables.incoming`).

The tables are computed from the gap densities in force (:mod:`.densities`) and are
computed again when learned densities move.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from ..probability import meets
from .model import RunComponent, run_score
from .plan import NFA
from .queues import Queue

__all__ = ["ScoringTables"]


class ScoringTables:
    """H_{i,j} (``score[i, j]``) and G_{i,j} (``best[i, j]``) for every edge between two
    states, the leading run's score (``leading``, over the time from t_last - W to the
    first arrival) and the trailing run's (``trailing``, over the time from the last
    arrival to t_first + W), for gap densities ``pmfs`` by component.
    ``non_increasing[i, j]`` says H_{i,j} never rises with T (runs of negatives alone,
    S^N); ``initial_bound`` is G_{0,1}(W), the bound u of every arrival at V_1."""

    def __init__(self, nfa: NFA, pmfs: Sequence[np.ndarray]):
        window = nfa.window
        run = [RunComponent(not c.negated, pmf, nfa.miss_probs[k])
               for k, (c, pmf) in enumerate(zip(nfa.query.components, pmfs))]
        states = nfa.positives
        self.window = window
        self.states = len(states)
        self.score = {(i, j): run_score(run[states[i] + 1:states[j]], window)
                      for i, j in itertools.combinations(range(len(states)), 2)}
        self.leading = run_score(run[:states[0]], window)
        self.trailing = run_score(run[states[-1] + 1:], window)
        self.best = {edge: np.maximum.accumulate(table) for edge, table in self.score.items()}
        self.non_increasing = {edge: bool(np.all(np.diff(table[1:]) <= 0)) for edge, table in self.score.items()}
        self.initial_bound = float(self.leading.max())
        self._incoming: dict[float, list[list[int]]] = {}

    def incoming(self, threshold: float) -> list[list[int]]:
        """For each state j, the states i whose edge V_i -> V_j is kept at ``threshold``:
        those whose G_{i,j}(W) reaches it (section 4)."""
        kept = self._incoming.get(threshold)
        if kept is None:
            kept = self._incoming[threshold] = [
                [i for i in range(j) if meets(self.best[i, j][self.window], threshold)] for j in range(self.states)]
        return kept

    def bounds(self, paqs: list[Queue], state: int, t: np.ndarray, key: np.ndarray) -> np.ndarray:
        """u for arrivals at V_state (sections 4.1 and 5.1): G_{0,1}(W) at the first state;
        else v_new = max_i (max_k u_{i,k}) G_{i,j}(t - t_{i,0}), with t_{i,0} V_i's oldest
        entry in (t - W, t) with the same key and max_k u_{i,k} over the key's entries of
        t's epoch of W so far and of the epoch before. When H_{i,j} is non-increasing
        (runs of negatives, S^N), the tighter H_{i,j}(t - t_{i,newest}) bounds every
        H_{i,j}(t - t_{i,k}) (the monotonic improvement of section 5.1)."""
        if state == 0:
            return np.full(len(t), self.initial_bound)
        window = self.window
        bound = np.zeros(len(t))
        # every edge that can score, not only those kept at this threshold: u stays an upper
        # bound if the threshold is lowered later
        for i in (i for i in range(state) if self.best[i, state][window] > 0):
            queue = paqs[i]
            start, stop = queue.find(key, t - window, t)
            inside = start < stop
            if self.non_increasing[i, state]:
                gap = t - queue.t[queue.order[np.maximum(stop - 1, 0)]] if len(queue) else np.zeros_like(t)
                factor = self.score[i, state][np.where(inside, gap, 0)]
            else:
                gap = t - queue.t[queue.order[np.minimum(start, len(queue) - 1)]] if len(queue) else np.zeros_like(t)
                factor = self.best[i, state][np.where(inside, gap, 0)]
            peak = queue.peak(queue.order[np.maximum(stop - 1, 0)]) if len(queue) else np.zeros(len(t))
            bound = np.maximum(bound, np.where(inside, peak * factor, 0.0))
        return bound
