"""The gap densities f_i the AYAC operator scores with (section 3).

f_i is the density of the time from the positive component before e_i to e_i (the
Markov property of section 3). It is fixed (by the query's ``GAP``, the caller or the
stream's ``gap``) or, for the components the NFA learns (:attr:`~.plan.NFA.learned_vars`),
"estimated from the history of previously detected complex events": gaps are sampled
as they are observed, and added to each component's :class:`~.model.GapHistogram` when
the operator moves its tables. A component neither fixed nor learned keeps the uniform
density of an empty histogram.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..events import Event
from ..query.sequence import SequenceComponent
from .model import GapHistogram

__all__ = ["GapDensities"]


@dataclass
class GapDensities:
    """The fixed densities (``fixed``, a pmf by variable), the learned ones
    (``learned``, a :class:`~.model.GapHistogram` by variable) and the gaps sampled
    since they last moved (``gap_samples`` by variable, ``sample_count`` in all), on
    gaps 0..``window``."""

    window: int
    fixed: dict[str, np.ndarray]
    learned: dict[str, GapHistogram]
    gap_samples: dict[str, list[int]]
    sample_count: int

    def pmf(self, var: str) -> np.ndarray:
        """f of the component ``var`` as it stands."""
        if var in self.fixed:
            return self.fixed[var]
        if var in self.learned:
            return self.learned[var].pmf()
        return GapHistogram(self.window).pmf()

    def pmfs(self, components: Sequence[SequenceComponent]) -> list[np.ndarray]:
        """f of each of ``components`` (the query's), in order."""
        return [self.pmf(c.var) for c in components]

    def sample(self, var: str, gaps: np.ndarray) -> None:
        """Gaps observed for ``var``, learned when the densities next move."""
        self.gap_samples[var] += gaps.tolist()
        self.sample_count += len(gaps)

    def observe(self, path: dict[int, tuple[int, Event]], state_vars: list[str]) -> None:
        """The gaps a reported match observed: between each two consecutive states it
        observed (a missed positive in between hides the gap)."""
        for s in range(1, len(state_vars)):
            var = state_vars[s]
            if s in path and s - 1 in path and var in self.learned:
                self.gap_samples[var].append(path[s][0] - path[s - 1][0])
                self.sample_count += 1

    def learn(self) -> None:
        """Add the gaps sampled since the last update to the estimates of f."""
        for var, gaps in self.gap_samples.items():
            if gaps:
                self.learned[var].add(np.asarray(gaps))
                gaps.clear()
        self.sample_count = 0
