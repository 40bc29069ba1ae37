"""Secrets and their checks: password hashing, opaque tokens, CSRF, headers, rate limits.

Tokens (API tokens, session ids, one-time links) are 256 random bits, so a plain SHA-256
is enough to store them: there is nothing to brute-force. Passwords are low-entropy and
get argon2id (argon2-cffi's defaults).
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

__all__ = [
    "API_TOKEN_PREFIX",
    "CSP",
    "SECURITY_HEADERS",
    "SlidingWindowLimiter",
    "hash_password",
    "hash_token",
    "new_api_token",
    "new_secret",
    "safe_next",
    "same_origin",
    "secrets_equal",
    "token_prefix",
    "verify_password",
]

API_TOKEN_PREFIX = "lj_"
PASSWORD_MIN, PASSWORD_MAX = 10, 1024

_hasher = PasswordHasher()
# Verified against when the user does not exist, so a wrong name costs as long as a wrong
# password and response times do not reveal which usernames exist.
_DUMMY_HASH = _hasher.hash(secrets.token_urlsafe(16))


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(password_hash: str | None, password: str) -> bool:
    try:
        return _hasher.verify(password_hash or _DUMMY_HASH, password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False


def new_secret() -> str:
    """256 random bits, URL-safe (session ids, one-time links, CSRF tokens)."""
    return secrets.token_urlsafe(32)


def new_api_token() -> str:
    """A personal API token: a recognisable prefix (for secret scanners) and 256 bits."""
    return API_TOKEN_PREFIX + new_secret()


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def token_prefix(token: str) -> str:
    """The part of a token safe to show in lists, to tell tokens apart."""
    return token[: len(API_TOKEN_PREFIX) + 6]


def secrets_equal(a: str | None, b: str | None) -> bool:
    """Constant-time comparison; a missing value never matches."""
    if not a or not b:
        return False
    return hmac.compare_digest(a.encode(), b.encode())


def safe_next(target: str | None, default: str = "/") -> str:
    """A local path to go to after login; anything that could leave the site is refused."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return default
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or any(c in target for c in "\r\n\\"):
        return default
    return target


def same_origin(origin: str | None, host: str | None) -> bool:
    """True unless a browser said the request came from another site (Origin header)."""
    if not origin:
        return True
    return bool(host) and urlsplit(origin).netloc.lower() == (host or "").lower()


CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'"
)

SECURITY_HEADERS: dict[str, str] = {
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
}


@dataclass
class SlidingWindowLimiter:
    """At most `limit` recorded events per `window` seconds per key (one process, in memory).

    Login counts failed attempts only: `retry_after` says how long a key set must wait
    (0 = go ahead), `record` counts an attempt before the password is checked (so a burst
    of parallel guesses is counted at once) and `forget` takes a successful one back. Keys
    whose window has passed are dropped now and then, so memory stays bounded.
    """

    limit: int
    window: float = 60.0
    _events: dict[str, deque[float]] = field(default_factory=dict, repr=False)
    _next_sweep: float = 0.0

    def _recent(self, key: str, now: float) -> deque[float]:
        events = self._events.get(key, deque())
        while events and events[0] <= now - self.window:
            events.popleft()
        return events

    def retry_after(self, *keys: str, now: float) -> int:
        """Whole seconds until every key is under its limit again (0 = allowed now)."""
        waits = [0.0]
        for key in keys:
            events = self._recent(key, now)
            if len(events) >= self.limit:
                # At the limit means a wait, even when rounding makes the remainder 0.0.
                waits.append(max(events[-self.limit] + self.window - now, 1e-9))
        return math.ceil(max(waits))

    def record(self, *keys: str, now: float) -> None:
        self._sweep(now)
        for key in keys:
            self._events.setdefault(key, deque()).append(now)

    def forget(self, *keys: str, at: float) -> None:
        for key in keys:
            events = self._events.get(key)
            if events is not None and at in events:
                events.remove(at)

    def _sweep(self, now: float) -> None:
        if now < self._next_sweep:
            return
        self._next_sweep = now + self.window
        stale = [k for k, ev in self._events.items() if not ev or ev[-1] <= now - self.window]
        for k in stale:
            del self._events[k]
