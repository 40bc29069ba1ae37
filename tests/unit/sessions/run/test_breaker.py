"""The circuit breaker's bookkeeping (sessions.jobs.Breaker): pure, no database."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llmjudge.sessions.run.jobs import Breaker, is_setup_error

KEY = "invalid API key for provider openai-main"
REFUSED = "connection error: ConnectError: [Errno 111] Connection refused"
MODEL = "model not found (or wrong base URL): 'gpt-9': no such model"


def test_setup_errors_are_recognised_and_others_are_not():
    assert all(is_setup_error(e) for e in (KEY, REFUSED, MODEL))
    for other in (None, "rate limited (429)", "server error (503): busy", "timeout after 60s"):
        assert not is_setup_error(other)


def test_trips_on_the_nth_identical_error_and_names_it():
    b = Breaker(3)
    assert b.record(1, KEY) is None
    assert b.record(1, KEY) is None
    reason = b.record(1, KEY)
    assert reason is not None and "3 identical provider errors" in reason and KEY in reason
    # The count starts again after a trip (a resumed session gets N more tries).
    assert b.record(1, KEY) is None


def test_a_verdict_or_another_error_resets_the_run():
    b = Breaker(2)
    assert b.record(1, KEY) is None
    assert b.record(1, None) is None  # a verdict
    assert b.record(1, KEY) is None
    assert b.record(1, REFUSED) is None  # a different error: a run of one
    assert b.record(1, "rate limited (429)") is None  # not a setup error: resets
    assert b.record(1, REFUSED) is None
    assert b.record(1, REFUSED) is not None


def test_sessions_are_counted_apart_and_zero_turns_it_off():
    b = Breaker(2)
    assert b.record(1, KEY) is None
    assert b.record(2, KEY) is None
    assert b.record(1, KEY) is not None
    off = Breaker(0)
    assert all(off.record(1, KEY) is None for _ in range(50))


@given(st.lists(st.sampled_from([None, KEY, REFUSED, "rate limited (429)"]), max_size=60))
def test_trips_exactly_when_n_identical_setup_errors_end_the_run(errors: list[str | None]):
    n = 3
    b = Breaker(n)
    run_error, run = None, 0
    for e in errors:
        tripped = b.record(7, e) is not None
        if is_setup_error(e):
            run = run + 1 if e == run_error else 1
            run_error = e
        else:
            run_error, run = None, 0
        assert tripped is (run == n)
        if tripped:
            run_error, run = None, 0
