"""What the AYAC operator plans from its ``SEQUENCE`` query before any event arrives.

:class:`NFA` is the query's NFA (section 4): a state V_1..V_l per positive component,
the negatives of the run on each edge V_i -> V_j, those before the first positive and
after the last, the hash attribute of each component (section 5.2), the trivial
predicates each state checks on arrival, and per DNF clause what backward match
generation (section 4.2, :mod:`.generation`) checks: the non-trivial predicates on
positive components (:class:`Literal`), and for each negative component the predicates
its NAQ search applies (:class:`NegativeCheck`). Also which components learn their gap
density online, and the DEFAULTs a missable component's predicates need (section 2.2).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ValidationError
from ..query.ast import Attr, Compare, Expr, attrs_of, equality_classes, evaluate, variables_of
from ..query.errors import QueryError
from ..query.sequence import SequenceQuery

__all__ = ["ClausePlan", "Literal", "NFA", "NegativeCheck", "check_defaults", "clause_plan", "key_attributes",
           "run_negatives"]


@dataclass(frozen=True)
class Literal:
    """A non-trivial predicate of one clause: the positive components it reads and
    whether it is an equality of hash attributes (true inside one hashed queue)."""

    expr: Expr
    needs: frozenset[str]
    implied: bool


@dataclass(frozen=True)
class NegativeCheck:
    """A negative component under one clause: its variable, whether its NAQs are hashed,
    the positive components its predicates read, the predicates, and those left once
    the hash-attribute equalities are known to hold (all its positives observed)."""

    var: str
    hashed: bool
    needs: frozenset[str]
    literals: tuple[Expr, ...]
    unimplied: tuple[Expr, ...]


@dataclass(frozen=True)
class ClausePlan:
    """What match generation checks for one DNF clause (bit ``bit`` of the masks)."""

    bit: int
    literals: tuple[Literal, ...]                  # on positive components only
    negatives: dict[int, NegativeCheck]            # by negative component index


def _equalities(literals) -> list[tuple[Attr, Attr]]:
    return [(lit.left, lit.right) for lit in literals
            if isinstance(lit, Compare) and lit.op == "=" and isinstance(lit.left, Attr)
            and isinstance(lit.right, Attr) and lit.left.var != lit.right.var]


def key_attributes(query: SequenceQuery, never_missed: set[str]) -> dict[str, str]:
    """The hash attribute of each component (section 5.2).

    Positive components are hashed when equalities between positives, in every clause,
    tie one attribute of each into one class; a negative is hashed on its attribute set
    equal to the key attribute of a positive that is ``never_missed`` (a missed one's
    DEFAULT could name another key). An equality through a negative does not tie
    positives (``x.tag = y.tag AND y.tag = z.tag`` with ``y`` negated says nothing of x and z).
    """
    common = _equalities(set(query.clauses[0].joint).intersection(*(c.joint for c in query.clauses[1:])))
    positives = {query.components[k].var for k in query.positives}
    for by_var in equality_classes((left, right) for left, right in common
                                   if left.var in positives and right.var in positives):
        if positives <= set(by_var) and all(len(by_var[v]) == 1 for v in positives):
            keys = {var: names[0] for var, names in by_var.items()}
            for left, right in common:
                for negative, other in ((left, right), (right, left)):
                    if negative.var not in positives and other.var in never_missed \
                            and keys.get(other.var) == other.name:
                        keys.setdefault(negative.var, negative.name)
            return keys
    return {}


def check_defaults(query: SequenceQuery, missable: set[str]) -> None:
    """A joint predicate on a positive component that may be missed needs a DEFAULT
    for each attribute it reads (section 2.2)."""
    for clause in query.clauses:
        for literal in clause.joint:
            for attr in attrs_of(literal):
                if attr.var in missable and attr.name not in query.defaults.get(attr.var, {}):
                    raise QueryError.at(attr, f"{attr.var} may be missed (miss_prob > 0): give "
                                        f"DEFAULT {attr.var}.{attr.name} = ...")


def _implied_by_key(key_attr: dict[str, str], literal: Expr) -> bool:
    """``x.tag = y.tag`` on the hash attributes always holds inside one hashed queue."""
    return (isinstance(literal, Compare) and literal.op == "=" and isinstance(literal.left, Attr)
            and isinstance(literal.right, Attr)
            and key_attr.get(literal.left.var) == literal.left.name
            and key_attr.get(literal.right.var) == literal.right.name)


def clause_plan(query: SequenceQuery, key_attr: dict[str, str], bit: int, clause) -> ClausePlan:
    """The plan of the DNF clause that is bit ``bit`` of the clause masks."""
    components = query.components
    negated = {c.var: k for k, c in enumerate(components) if c.negated}
    literals = []
    on_negative: dict[int, list[Literal]] = {k: [] for k in negated.values()}
    for expr in clause.joint:
        used = variables_of(expr)
        negative = used & set(negated)
        literal = Literal(expr, frozenset(used - negative), _implied_by_key(key_attr, expr))
        if negative:
            on_negative[negated[negative.pop()]].append(literal)
        else:
            literals.append(literal)
    checks = {k: NegativeCheck(components[k].var, components[k].var in key_attr,
                               frozenset().union(*(t.needs for t in terms)), tuple(t.expr for t in terms),
                               tuple(t.expr for t in terms if not t.implied))
              for k, terms in on_negative.items()}
    return ClausePlan(bit, tuple(literals), checks)


def run_negatives(query: SequenceQuery, i: int, j: int) -> tuple[int, ...]:
    """The negative components between the positives of V_i and V_j."""
    components = query.components
    return tuple(k for k in range(query.positives[i] + 1, query.positives[j]) if components[k].negated)


class NFA:
    """The NFA of a ``SEQUENCE`` query (section 4), with what it checks, planned once.

    State s (0-based: state 0 is the paper's V_1) stands for positive component
    ``positives[s]``, variable ``state_vars[s]``; V_0 and V_{l+1} have no state here. A
    negative has no state: those between the positives of V_i and V_j
    (``run_negatives[i, j]``) are scored on the edge V_i -> V_j, those before the first
    positive (``leading_negatives``) from V_0 at t_last - W, those after the last
    (``trailing_negatives``) until t_first + W. An event of a component joins it when
    its stream is the component's (``component_stream``) and it satisfies the component's
    trivial predicates of some clause (:meth:`clause_mask`; ``unconditional[k]`` is every
    clause's bit when component k has none). ``plans`` holds what match generation
    checks per DNF clause.

    Configured besides by each component's miss probability epsilon (``miss_probs``),
    the gap densities fixed by the caller, the query or the streams (``fixed_gaps``, a
    pmf by variable) and whether the others are learned online (``learn``): then
    ``learned_vars`` are the components whose f is learned, and ``anchor_state`` gives
    each negative component learned from its own events the state whose arrivals its
    gaps are measured from (the positive before it).
    """

    def __init__(self, query: SequenceQuery, miss_probs: Sequence[float], fixed_gaps: Mapping[str, np.ndarray],
                 learn: bool):
        components = query.components
        self.query = query
        self.window = query.window
        self.miss_probs = miss_probs
        self.fixed_gaps = fixed_gaps
        self.learn = learn
        self.positives = query.positives
        self.state_of = {k: s for s, k in enumerate(self.positives)}
        self.state_vars = [components[k].var for k in self.positives]
        unknown = set(fixed_gaps) - set(query.variables)
        if unknown:
            raise ValidationError("gaps", f"unknown component variable {sorted(unknown)[0]!r}")
        #: the hash attribute by component variable (section 5.2)
        self.key_attributes = key_attributes(query, {components[k].var for k in self.positives
                                                     if not self.may_miss(k)})
        #: (state, hash attribute) of each state whose component is hashed
        self.state_keys = [(s, self.key_attribute(k)) for s, k in enumerate(self.positives)
                           if self.key_attribute(k) is not None]
        # a negative's f is learned from its own events: the time since the newest arrival
        # at the positive before it with the same key (none before the first positive)
        anchor_state = {k: self.state_of[max(p for p in self.positives if p < k)]
                        for k, c in enumerate(components) if c.negated and k > self.positives[0]
                        and (self.key_attribute(k) is not None or not self.key_attributes)
                        and c.var not in fixed_gaps}
        learnable = [c.var for k, c in enumerate(components) if not c.negated and k != self.positives[0]
                     and c.var not in fixed_gaps] + [components[k].var for k in anchor_state]
        self.learned_vars = learnable if learn else []
        self.anchor_state = anchor_state if learn else {}
        streams = list(dict.fromkeys(c.stream.casefold() for c in components))
        #: stream name (case-folded) -> its index among the streams the query reads
        self.stream_index = {name: n for n, name in enumerate(streams)}
        self.component_stream = [self.stream_index[c.stream.casefold()] for c in components]
        #: per component, per clause: the trivial predicates it checks on arrival
        self.trivial = [[clause.trivial.get(c.var, ()) for clause in query.clauses] for c in components]
        everything = (1 << len(query.clauses)) - 1
        # components with no trivial predicate in any clause accept every event of their stream
        self.unconditional = [everything if not any(literals) else 0 for literals in self.trivial]
        check_defaults(query, {components[k].var for k in self.positives if self.may_miss(k)})
        self.plans = [clause_plan(query, self.key_attributes, bit, clause) for bit, clause in enumerate(query.clauses)]
        self.run_negatives = {(i, j): run_negatives(query, i, j)
                              for i, j in itertools.combinations(range(len(self.positives)), 2)}
        self.leading_negatives = range(self.positives[0])
        self.trailing_negatives = range(self.positives[-1] + 1, len(components))

    def may_miss(self, k: int) -> bool:
        """Whether positive component k may go unobserved in a match (the first and last
        positive must be observed, section 4.2)."""
        return k not in (self.positives[0], self.positives[-1]) and self.miss_probs[k] > 0

    def key_attribute(self, k: int) -> str | None:
        """The hash attribute of component k (None: its queues are not hashed)."""
        return self.key_attributes.get(self.query.components[k].var)

    def clause_mask(self, k: int, attrs) -> int:
        """Bit c set when an event with these attributes satisfies clause c's trivial
        predicates on component k."""
        var = self.query.components[k].var
        mask = 0
        for bit, literals in enumerate(self.trivial[k]):
            if all(evaluate(literal, {var: attrs}) is True for literal in literals):
                mask |= 1 << bit
        return mask

    def bind_defaults(self, binding: dict[str, Any], missed: list[str]) -> None:
        """Bind the missed components to their DEFAULT values (a default may name another
        missed component, hence one pass per missed component)."""
        values: dict[str, dict[str, Any]] = {var: {} for var in missed}
        binding.update(values)
        for _ in missed:
            for var in missed:
                for name, expr in self.query.defaults.get(var, {}).items():
                    values[var][name] = evaluate(expr, binding)
