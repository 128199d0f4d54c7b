"""What the AYAC operator plans from its ``SEQUENCE`` query before any event arrives.

The hash attribute of each component (section 5.2), and per DNF clause what backward
match generation (section 4.2, :mod:`.matches`) checks: the non-trivial predicates on
positive components, and for each negative component the predicates its NAQ search
applies. Also which negatives lie between two positives (the runs of the NFA's edges),
and the DEFAULTs a missable component's predicates need (section 2.2).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..query.ast import Attr, Compare, Expr, attrs_of, equality_classes, variables_of
from ..query.errors import QueryError
from ..query.sequence import SequenceQuery

__all__ = ["ClausePlan", "Literal", "NegativeCheck", "check_defaults", "clause_plan", "key_attributes",
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
