"""What the validator accepts, the engine runs: queries drawn from the grammar's pieces
(well-formed and not: calls, bare variables, unknown variables, huge and non-finite
numbers, deep nesting), each checked by the registry's validator
(:func:`contract.registry.check_entry`, what the API and the job apply) and then run by
``penumbra eval`` over random events of its streams. An accepted query must run to the
end with exit 0; a refused one must be refused by ``penumbra eval`` too (exit 2), with a
line and a column, the same as the validator's."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contract.registry import check_entry
from penumbra.cli import main
from penumbra.errors import PenumbraError
from penumbra.query import QueryError
from tests.strategies import ATTRIBUTES, QUERY_STREAMS as STREAMS, queries

def events(seed: int, count: int = 120) -> list[str]:
    rng = random.Random(seed)
    out, t = [], 0
    for n in range(count):
        t += rng.randint(0, 3)
        stream = rng.choice(("sa", "sb", "sc"))
        attrs = {"x": rng.choice((0, 1, 2, 2.5, -1)), "k": rng.randint(0, 2), "s": rng.choice(("n1", "abc"))}
        if rng.random() < 0.1:
            del attrs[rng.choice(ATTRIBUTES)]
        out.append(json.dumps({"stream": stream, "id": f"e{n}", "ts": {"lo": t, "hi": t + rng.randint(0, 4)},
                               "attrs": attrs}))
    return out


def validated(text: str) -> QueryError | None:
    """The registry validator's verdict: None (accepted) or its error."""
    try:
        check_entry({"text": text, "threshold": None}, STREAMS)
    except QueryError as error:
        return error
    except PenumbraError as error:
        pytest.fail(f"{text!r}: refused without a line and column: {error}")
    return None


def run_eval(tmp_path, capsys, text: str, seed: int) -> tuple[int, str]:
    (tmp_path / "streams.json").write_text(json.dumps(STREAMS))
    (tmp_path / "events.jsonl").write_text("\n".join(events(seed)) + "\n")
    capsys.readouterr()
    code = main(["eval", "--query", text, "--streams", str(tmp_path / "streams.json"),
                 "--events", str(tmp_path / "events.jsonl"), "--block-size", "17", "--stats"])
    return code, capsys.readouterr().err


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=queries(), seed=st.integers(0, 2 ** 16))
def test_every_query_the_validator_accepts_runs_and_every_refusal_has_a_place(tmp_path, capsys, text, seed):
    error = validated(text)
    code, err = run_eval(tmp_path, capsys, text, seed)
    if error is None:
        assert code == 0, f"{text!r} was accepted but eval failed: {err}"
    else:
        assert error.line is not None and error.column is not None, (text, error)
        assert 1 <= error.column <= len(text.splitlines()[error.line - 1]) + 1, (text, error)
        assert code == 2 and f"line {error.line}, column {error.column}: {error.message}" in err, (text, err)


@pytest.mark.parametrize("text, place, words", [
    ("SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND f(A.x) = 1 WITH THRESHOLD 0.5", (1, 54),
     "unknown function 'f'"),
    ("SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND A.x = B WITH THRESHOLD 0.5", (1, 60),
     "a bare variable 'B' alone is not a value"),
    ("SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND " + "NOT " * 300 + "A.x = 1 WITH THRESHOLD 0.5", None,
     "nests too deeply"),
    ("SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = " + "9" * 300 + " WITH THRESHOLD 0.5", (1, 47),
     "is too large"),
    ("PATTERN SEQ(SA a, SB b) WITHIN " + "9" * 400, (1, 32), "is too large"),
    ("SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 10 AND A.x = " + "9" * 19000 + " WITH THRESHOLD 0.5",
     (1, 60), "19,000 characters"),
    ("SELECT * FROM SA A, SB B WHERE WINDOW(A, B) = 1e999 WITH THRESHOLD 0.5", (1, 47), "1e999 is too large"),
])
def test_the_probed_poison_queries_are_refused_where_they_go_wrong(text, place, words):
    error = validated(text)
    assert error is not None and words in error.message, error
    if place is not None:
        assert (error.line, error.column) == place
    else:
        assert error.line == 1 and error.column is not None
