"""Access control: users and roles, API tokens, browser sessions, CSRF, security headers."""

from llmjudge.infra.exports import public

__all__, __getattr__ = public(
    __name__,
    {
        "llmjudge.auth.schemas": (
            "CurrentPrincipal",
            "Principal",
            "RowId",
        ),
    },
)
