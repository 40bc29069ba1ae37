"""Who may call what: one table of path patterns, evaluated for every request.

Pure: no I/O, no FastAPI. The middleware asks `required_role(method, path)` before any
route runs, so routes added later are protected without being edited. A pattern is a path
whose segments are literals, `{name}` (one segment) or a final `**` (any rest, including
none). The first matching rule wins; a path no rule names falls back to `DEFAULT_RULE`
(reviewers read, researchers write), and the route-walking test fails on such a route so
that each new prefix gets classified on purpose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum

__all__ = [
    "DEFAULT_RULE",
    "POLICY",
    "SAFE_METHODS",
    "Role",
    "Rule",
    "can",
    "is_api_path",
    "match_rule",
    "normalise_path",
    "required_role",
]

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


class Role(StrEnum):
    reviewer = "reviewer"
    researcher = "researcher"
    admin = "admin"

    @property
    def rank(self) -> int:
        return _RANK[self]

    def covers(self, needed: Role) -> bool:
        """True when this role may do what `needed` may (admin > researcher > reviewer)."""
        return self.rank >= needed.rank

    @classmethod
    def lowest(cls, a: Role, b: Role) -> Role:
        return a if a.rank <= b.rank else b


_RANK = {Role.reviewer: 1, Role.researcher: 2, Role.admin: 3}


def _compile(pattern: str) -> re.Pattern[str]:
    parts = [p for p in pattern.split("/") if p]
    rest = bool(parts) and parts[-1] == "**"
    if rest:
        parts = parts[:-1]
    if any("**" in p for p in parts):
        raise ValueError(f"'**' may only end a pattern: {pattern}")
    body = "".join(
        "/[^/]+" if p.startswith("{") and p.endswith("}") else "/" + re.escape(p) for p in parts
    )
    return re.compile(f"^{body}(?:/.*)?$" if rest else f"^{body or '/'}$")


@dataclass(frozen=True)
class Rule:
    """`read` applies to GET/HEAD/OPTIONS, `write` to every other method; None = public."""

    pattern: str
    read: Role | None
    write: Role | None
    regex: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "regex", _compile(self.pattern))

    def role_for(self, method: str) -> Role | None:
        return self.read if method.upper() in SAFE_METHODS else self.write


_PUBLIC = (None, None)
_SIGNED_IN = (Role.reviewer, Role.reviewer)
_DOMAIN = (Role.reviewer, Role.researcher)
_ADMIN_WRITES = (Role.reviewer, Role.admin)
_ADMIN = (Role.admin, Role.admin)

POLICY: tuple[Rule, ...] = tuple(
    Rule(pattern, *access)
    for pattern, access in (
        # Public: health, sign-in, static assets, and the API description (it holds no data,
        # the code is open, and clients generate from it; calls still need a token).
        ("/healthz", _PUBLIC),
        ("/static/**", _PUBLIC),
        ("/login", _PUBLIC),
        ("/login/one-time", _PUBLIC),
        ("/openapi.json", _PUBLIC),
        ("/docs", _PUBLIC),
        ("/docs/oauth2-redirect", _PUBLIC),
        # One's own account; the service keeps non-admins to their own tokens.
        ("/logout", _SIGNED_IN),
        ("/account/**", _SIGNED_IN),
        ("/api/me/**", _SIGNED_IN),
        ("/api/tokens/**", _SIGNED_IN),
        # Human review of a persona's decisions is what reviewers are for.
        ("/api/personas/{id}/decisions/{did}/feedback", _SIGNED_IN),
        ("/api/personas/{id}/iterations/{n}/feedback", _SIGNED_IN),
        ("/personas/{id}/review/**", _SIGNED_IN),
        # ...and so is labelling a session's pairs; the queue's settings are a researcher's.
        ("/sessions/{id}/review/settings", _DOMAIN),
        ("/sessions/{id}/review/**", _SIGNED_IN),
        ("/api/sessions/{id}/review/settings", _DOMAIN),
        ("/api/sessions/{id}/review/**", _SIGNED_IN),
        # Administration. Provider base URLs are an SSRF lever: only admins change them.
        ("/api/users/**", _ADMIN),
        ("/settings/**", _ADMIN),
        ("/api/providers/**", _ADMIN_WRITES),
        ("/api/models/**", _ADMIN_WRITES),
        # The research domains: everyone signed in reads, researchers change.
        ("/", _DOMAIN),
        ("/demo", _DOMAIN),
        ("/import", _DOMAIN),
        ("/pillars/**", _DOMAIN),
        ("/threads/**", _DOMAIN),
        ("/sessions/**", _DOMAIN),
        ("/personas/**", _DOMAIN),
        ("/api/demo", _DOMAIN),
        ("/api/pillars/**", _DOMAIN),
        ("/api/threads/**", _DOMAIN),
        ("/api/sessions/**", _DOMAIN),
        ("/api/references/**", _DOMAIN),
        ("/api/personas/**", _DOMAIN),
    )
)

DEFAULT_RULE = Rule("/**", *_DOMAIN)

_SLASHES = re.compile(r"/{2,}")


def normalise_path(path: str) -> str:
    """Collapse repeated slashes and drop a trailing one, so `//api/users/` is `/api/users`."""
    path = _SLASHES.sub("/", "/" + path)
    return path.rstrip("/") or "/"


def match_rule(path: str) -> Rule | None:
    """The first rule of `POLICY` naming this path (a concrete path or a route template)."""
    path = normalise_path(path)
    return next((rule for rule in POLICY if rule.regex.match(path)), None)


def required_role(method: str, path: str) -> Role | None:
    """The least role allowed to send `method` to `path`; None when the route is public."""
    return (match_rule(path) or DEFAULT_RULE).role_for(method)


def is_api_path(path: str) -> bool:
    """API paths answer 401 JSON; everything else is a page that redirects to /login."""
    path = normalise_path(path)
    return path == "/api" or path.startswith("/api/")


def can(role: Role | None, method: str, path: str) -> bool:
    """Whether a principal of `role` (None: signed out) may send `method` to `path`.

    The pages ask this before offering an action, so a button shows exactly when the
    middleware would let its request through.
    """
    needed = required_role(method, path)
    if needed is None:
        return True
    return role is not None and role.covers(needed)
