"""The access policy and the pure security helpers (tokens, redirects, rate limits, CSV)."""

from __future__ import annotations

import csv
import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llmjudge.auth.security import (
    CSP,
    SlidingWindowLimiter,
    hash_password,
    hash_token,
    new_api_token,
    safe_next,
    same_origin,
    secrets_equal,
    token_prefix,
    verify_password,
)
from llmjudge.core.access import (
    DEFAULT_RULE,
    POLICY,
    SAFE_METHODS,
    Role,
    Rule,
    can,
    is_api_path,
    match_rule,
    normalise_path,
    required_role,
)
from llmjudge.core.text.csvsafe import FORMULA_PREFIXES, safe_cell, write_csv

R, S, A = Role.reviewer, Role.researcher, Role.admin
METHODS = ("GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE")
PUBLIC_PATHS = {
    "/healthz",
    "/login",
    "/login/one-time",
    "/openapi.json",
    "/docs",
    "/docs/oauth2-redirect",
}

CASES = [
    # public
    ("GET", "/healthz", None),
    ("GET", "/static/app.css", None),
    ("GET", "/static/vendor/htmx-2.0.11.min.js", None),
    ("POST", "/login", None),
    ("GET", "/login/one-time", None),
    ("GET", "/openapi.json", None),
    ("GET", "/docs", None),
    # admin
    ("POST", "/api/providers", A),
    ("PATCH", "/api/providers/3", A),
    ("POST", "/api/providers/3/test", A),
    ("DELETE", "/api/models/9", A),
    ("GET", "/api/users", A),
    ("POST", "/api/users/4/login-link", A),
    ("GET", "/settings/providers", A),
    ("POST", "/settings/providers/2/delete", A),
    ("GET", "/settings/users", A),
    # reads of provider and model lists: any signed-in user (keys are never returned)
    ("GET", "/api/providers", R),
    ("GET", "/api/models/2", R),
    # human review: reviewers may write
    ("POST", "/api/personas/3/decisions/17/feedback", R),
    ("POST", "/api/personas/3/iterations/2/feedback", R),
    ("POST", "/personas/3/review", R),
    ("POST", "/personas/3/review/decisions/17", R),
    # human review of a session's pairs: reviewers label, researchers set the queue up
    ("GET", "/sessions/3/review", R),
    ("POST", "/sessions/3/review/label", R),
    ("POST", "/sessions/3/review/skip", R),
    ("POST", "/sessions/3/review/settings", S),
    ("GET", "/api/sessions/3/review/next", R),
    ("POST", "/api/sessions/3/review", R),
    ("POST", "/api/sessions/3/review/skip", R),
    ("GET", "/api/sessions/3/review/settings", R),
    ("PUT", "/api/sessions/3/review/settings", S),
    ("POST", "/api/sessions/3/reviewers", S),
    ("POST", "/sessions/3/review-ish", S),
    # everything else of the personas domain: researchers write
    ("POST", "/api/personas/3/train", S),
    ("POST", "/api/personas/3/decisions/17", S),
    ("GET", "/api/personas/3/decisions", R),
    ("POST", "/personas/3/settings", S),
    # research domains
    ("GET", "/", R),
    ("POST", "/demo", S),
    ("POST", "/import", S),
    ("GET", "/threads/5", R),
    ("POST", "/api/threads/import", S),
    ("DELETE", "/api/pillars/1", S),
    ("POST", "/api/sessions", S),
    ("GET", "/api/sessions/1/leaderboard", R),
    ("POST", "/sessions/1/start", S),
    # own account
    ("POST", "/logout", R),
    ("GET", "/account", R),
    ("POST", "/account/tokens", R),
    ("POST", "/api/tokens", R),
    ("DELETE", "/api/tokens/3", R),
    ("POST", "/api/me/password", R),
    ("GET", "/api/me", R),
    # unknown paths fall back to the default: reviewers read, researchers write
    ("GET", "/nothing/here", R),
    ("POST", "/api/brand-new-thing", S),
]


@pytest.mark.parametrize(("method", "path", "role"), CASES)
def test_policy_table(method: str, path: str, role: Role | None) -> None:
    assert required_role(method, path) == role


def test_reviewer_cannot_create_providers_but_can_give_feedback() -> None:
    assert not R.covers(required_role("POST", "/api/providers"))
    assert R.covers(required_role("POST", "/api/personas/1/decisions/2/feedback"))
    assert not S.covers(required_role("POST", "/api/providers"))
    assert A.covers(required_role("POST", "/api/providers"))


def test_role_order() -> None:
    assert [r.rank for r in (R, S, A)] == [1, 2, 3]
    assert A.covers(S) and S.covers(R) and A.covers(R)
    assert not R.covers(S) and not S.covers(A)
    assert Role.lowest(A, R) is R and Role.lowest(S, A) is S


def test_every_rule_writes_at_least_as_strictly_as_it_reads() -> None:
    for rule in (*POLICY, DEFAULT_RULE):
        if rule.read is None:
            assert rule.write is None, rule
        else:
            assert rule.write is not None and rule.write.covers(rule.read), rule


def test_public_rules_are_exactly_the_documented_ones() -> None:
    public = {rule.pattern for rule in POLICY if rule.read is None or rule.write is None}
    assert public == PUBLIC_PATHS | {"/static/**"}


def test_pattern_syntax() -> None:
    rule = Rule("/a/{x}/b/**", R, S)
    assert rule.regex.match("/a/1/b") and rule.regex.match("/a/1/b/c/d")
    assert not rule.regex.match("/a/1/2/b") and not rule.regex.match("/a/b")
    assert not rule.regex.match("/a/1/bc")
    with pytest.raises(ValueError):
        Rule("/a/**/b", R, R)
    assert Rule("/", R, R).regex.match("/") and not Rule("/", R, R).regex.match("/x")


def test_route_templates_match_like_concrete_paths() -> None:
    assert match_rule("/api/personas/{persona_id}/decisions/{decision_id}/feedback") is not None
    assert required_role("POST", "/api/personas/{persona_id}/decisions/{decision_id}/feedback") == R
    assert match_rule("/nowhere") is None


segment = st.text(alphabet="abcxyz019-_.{}", min_size=1, max_size=8)
paths = st.lists(segment, min_size=0, max_size=6).map(lambda parts: "/" + "/".join(parts))


@given(paths, st.sampled_from(METHODS), st.integers(1, 3), st.booleans())
def test_slashes_never_change_the_decision(path: str, method: str, k: int, trailing: bool) -> None:
    messy = path.replace("/", "/" * k) + ("/" if trailing else "")
    assert required_role(method, messy) == required_role(method, path)
    assert normalise_path(normalise_path(messy)) == normalise_path(messy)


@given(paths, st.sampled_from(METHODS))
def test_only_listed_paths_are_public(path: str, method: str) -> None:
    role = required_role(method, path)
    norm = normalise_path(path)
    if role is None:
        assert norm in PUBLIC_PATHS or norm == "/static" or norm.startswith("/static/")
    if method not in SAFE_METHODS and role is not None:
        # A write needs at least what a read of the same path needs.
        read = required_role("GET", path)
        assert read is not None and role.covers(read)


@given(st.lists(segment, min_size=0, max_size=4), st.sampled_from(METHODS))
def test_admin_areas_need_admin_for_writes(rest: list[str], method: str) -> None:
    tail = "".join("/" + s for s in rest)
    for base in ("/api/providers", "/api/models", "/api/users", "/settings"):
        role = required_role(method, base + tail)
        if method not in SAFE_METHODS or base in ("/api/users", "/settings"):
            assert role is A, (method, base + tail)


def test_is_api_path() -> None:
    assert is_api_path("/api") and is_api_path("/api/pillars") and is_api_path("//api/x/")
    assert not is_api_path("/apix") and not is_api_path("/pillars") and not is_api_path("/")


# --- security helpers -----------------------------------------------------------------------


def test_api_tokens_are_prefixed_random_and_hashed() -> None:
    a, b = new_api_token(), new_api_token()
    assert a != b and a.startswith("lj_") and len(a) >= 40
    assert re.fullmatch(r"[0-9a-f]{64}", hash_token(a)) and hash_token(a) == hash_token(a)
    assert hash_token(a) != hash_token(b)
    assert a.startswith(token_prefix(a)) and len(token_prefix(a)) < len(a) // 3


def test_secrets_equal() -> None:
    assert secrets_equal("abc", "abc")
    assert not secrets_equal("abc", "abd")
    assert not secrets_equal(None, None) and not secrets_equal("", "")
    assert not secrets_equal("abc", None)


def test_password_hashing() -> None:
    hashed = hash_password("correct horse battery")
    assert hashed.startswith("$argon2id$") and "correct" not in hashed
    assert verify_password(hashed, "correct horse battery")
    assert not verify_password(hashed, "correct horse batterY")
    assert not verify_password(None, "anything at all")
    assert not verify_password("not a hash", "anything at all")


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("/threads?q=1", "/threads?q=1"),
        ("/", "/"),
        (None, "/"),
        ("", "/"),
        ("https://evil.example/", "/"),
        ("//evil.example/x", "/"),
        ("/\\evil.example", "/"),
        ("javascript:alert(1)", "/"),
        ("/ok\r\nSet-Cookie: x=1", "/"),
        ("threads", "/"),
    ],
)
def test_safe_next(target: str | None, expected: str) -> None:
    assert safe_next(target) == expected


@given(st.text(max_size=40))
def test_safe_next_always_stays_on_site(target: str) -> None:
    result = safe_next(target)
    assert result.startswith("/") and not result.startswith(("//", "/\\"))
    assert result in ("/", target)


def test_same_origin() -> None:
    assert same_origin(None, "judge.local:8000")
    assert same_origin("http://judge.local:8000", "judge.local:8000")
    assert not same_origin("https://evil.example", "judge.local:8000")
    assert not same_origin("http://judge.local:8000", None)


def test_csp() -> None:
    assert "'unsafe-inline'" not in CSP and "frame-ancestors 'none'" in CSP
    assert "script-src 'self';" in CSP


def test_limiter_blocks_after_limit_failures_until_the_window_passes() -> None:
    lim = SlidingWindowLimiter(limit=3, window=60)
    for t in (0, 1, 2):
        assert lim.retry_after("ip:1", "user:a", now=t) == 0
        lim.record("ip:1", "user:a", now=t)
    assert lim.retry_after("ip:1", "user:a", now=3) == 57  # the oldest failure leaves at 60
    assert lim.retry_after("ip:2", "user:b", now=3) == 0  # other keys are unaffected
    assert lim.retry_after("ip:2", "user:a", now=4) == 56  # the username alone blocks
    assert lim.retry_after("ip:1", "user:c", now=60.5) == 0


def test_limiter_forgets_successes() -> None:
    lim = SlidingWindowLimiter(limit=2, window=60)
    for t in (0, 1, 2, 3):
        lim.record("k", now=t)
        lim.forget("k", at=t)
    assert lim.retry_after("k", now=4) == 0
    lim.record("k", now=5)
    lim.record("k", now=6)
    assert lim.retry_after("k", now=7) == 58


def test_limiter_drops_idle_keys() -> None:
    lim = SlidingWindowLimiter(limit=2, window=10)
    for i in range(1000):
        lim.record(f"k{i}", now=0)
    lim.record("late", now=25)
    assert set(lim._events) == {"late"}


@given(st.lists(st.floats(0, 300), min_size=1, max_size=60), st.integers(1, 5))
def test_limiter_never_allows_more_than_limit_per_window(times: list[float], limit: int) -> None:
    lim = SlidingWindowLimiter(limit=limit, window=60)
    allowed = []
    for t in sorted(times):
        if lim.retry_after("k", now=t) == 0:
            lim.record("k", now=t)
            allowed.append(t)
        else:
            assert sum(1 for u in allowed if t - 60 < u <= t) >= limit
    for t in allowed:
        assert sum(1 for u in allowed if t - 60 < u <= t) <= limit


# --- CSV formula injection ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('=HYPERLINK("http://x")', '\'=HYPERLINK("http://x")'),
        ("+1+2", "'+1+2"),
        ("-2+3", "'-2+3"),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("\t=1", "'\t=1"),
        ("\r=1", "'\r=1"),
        ("plain", "plain"),
        ("a=b", "a=b"),
        (-5, "-5"),
        (0.25, "0.25"),
        (None, ""),
        (True, "True"),
    ],
)
def test_safe_cell(value: object, expected: str) -> None:
    assert safe_cell(value) == expected


@given(st.lists(st.text(max_size=20), min_size=1, max_size=5))
def test_write_csv_round_trips_and_never_starts_a_formula(texts: list[str]) -> None:
    columns = [f"c{i}" for i in range(len(texts))]
    out = write_csv([dict(zip(columns, texts, strict=True)), {}], columns)
    rows = list(csv.reader(io.StringIO(out, newline="")))
    assert rows[0] == columns and rows[2] == [""] * len(columns)
    for cell, text in zip(rows[1], texts, strict=True):
        assert not cell.startswith(FORMULA_PREFIXES)
        assert cell == ("'" + text if text.startswith(FORMULA_PREFIXES) else text)


# -- can(): what the pages offer ------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "method", "path", "allowed"),
    [
        (None, "GET", "/healthz", True),
        (None, "GET", "/sessions/1", False),
        (Role.reviewer, "GET", "/sessions/1", True),
        (Role.reviewer, "POST", "/sessions/1/start", False),
        (Role.reviewer, "POST", "/sessions/1/review/3", True),
        (Role.researcher, "POST", "/sessions/1/start", True),
        (Role.researcher, "POST", "/import", True),
        (Role.researcher, "PATCH", "/api/providers/1", False),
        (Role.admin, "PATCH", "/api/providers/1", True),
    ],
)
def test_can_follows_the_policy(role: Role | None, method: str, path: str, allowed: bool):
    assert can(role, method, path) is allowed


@given(
    st.sampled_from([None, *Role]),
    st.sampled_from(["GET", "POST", "PATCH", "DELETE"]),
    st.sampled_from([r.pattern.replace("**", "x").replace("{id}", "1") for r in POLICY]),
)
def test_can_is_what_the_middleware_lets_through(role: Role | None, method: str, path: str):
    needed = required_role(method, path)
    expected = needed is None or (role is not None and role.covers(needed))
    assert can(role, method, path) is expected
    # A higher role can do at least as much.
    if role is not None and can(role, method, path):
        assert all(can(r, method, path) for r in Role if r.covers(role))
