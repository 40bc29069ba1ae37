"""Access control: users and roles, API tokens, browser sessions, CSRF, security headers."""

from llmjudge.auth.schemas import CurrentPrincipal, Principal, RowId

__all__ = [
    "CurrentPrincipal",
    "Principal",
    "RowId",
]
