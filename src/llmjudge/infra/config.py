"""Settings from the environment (prefix LLMJUDGE_) with documented defaults."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


def _project_root() -> Path:
    """Where templates/, static/, alembic/ and alembic.ini are.

    A checkout (or an editable install) runs from the repository beside src/; a wheel carries
    a copy under llmjudge/_resources/ (setup.py puts it there at build time). The packaged
    copy wins when present: it was built with this exact code.
    """
    package = Path(__file__).resolve().parents[1]  # src/llmjudge
    packaged = package / "_resources"
    if (packaged / "alembic.ini").is_file():
        return packaged
    return package.parents[1]


PROJECT_ROOT = _project_root()


def default_data_dir() -> Path:
    """Where the embedded PostgreSQL and generated keys live.

    Never inside the source tree. As root we avoid /root: the embedded server runs as an
    unprivileged system user and must be able to traverse every parent directory.
    """
    if os.name != "nt" and os.geteuid() == 0:
        return Path("/var/lib/llmjudge")
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "llmjudge"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="LLMJUDGE_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="postgresql+asyncpg://user:pass@host/db; unset = embedded PostgreSQL",
    )
    # PostgreSQL behind a pooler (README "PostgreSQL poolers"): PgBouncer in transaction mode
    # hands each transaction to any server connection, so no prepared statement may outlive
    # one, and LISTEN/NOTIFY and session-level advisory locks need a connection of their own.
    database_pooled: bool = Field(
        default=False,
        description="database_url goes through a transaction-mode pooler (PgBouncer): "
        "statement caches off, prepared statements named per use",
    )
    database_direct_url: str | None = Field(
        default=None,
        description="unpooled URL for LISTEN/NOTIFY, advisory locks and migrations "
        "(default: database_url); required with database_pooled",
    )
    data_dir: Path = Field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = 8000
    secret_key: str | None = None
    # Imports: a whole file is validated before anything is stored.
    max_upload_bytes: int = 50 * 1024 * 1024
    max_import_rows: int = 100_000
    max_field_chars: int = 500_000
    # Uploads parsed at once per process (threads, judgments, labels, persona pairs); one
    # more is answered 503 with Retry-After, so parallel uploads cannot add up in memory.
    max_concurrent_imports: int = Field(default=2, ge=1)
    # Comparisons one session may plan (pillars x samples x repetitions grow fast); checked
    # from the closed-form count before a plan is built. Below 2**31: queue positions are int4.
    max_comparisons_per_session: int = Field(default=2_000_000, ge=1, le=2_000_000_000)
    # `llmjudge serve`: idle keep-alive connections close after this; beyond max_connections
    # (SSE streams included) new requests get a 503 instead of exhausting file descriptors.
    keep_alive_timeout_s: int = Field(default=5, ge=1)
    max_connections: int = Field(default=1000, ge=10)
    # Open SSE streams re-check their token or session (revoked, user deactivated) this often.
    sse_recheck_s: float = Field(default=30.0, gt=0)
    # Workers started inside the web process (0 = serve pages only).
    workers_enabled: bool = True
    db_pool_size: int = 20
    # A claimed comparison's lease without a heartbeat: how long the items of a dead worker
    # process wait before another worker takes them.
    lease_seconds: float = Field(default=30.0, gt=0)
    # Identical consecutive provider setup errors (auth, connection, unknown model) that
    # pause a session instead of burning its queue; 0 turns the breaker off.
    breaker_errors: int = Field(default=5, ge=0)
    # Batch sessions: the first wait between polls of a provider batch job; it doubles while
    # nothing changes, up to batch_poll_max_seconds (a job may take up to 24 hours).
    batch_poll_seconds: float = Field(default=30.0, gt=0)
    batch_poll_max_seconds: float = Field(default=600.0, gt=0)
    # llm_calls and llm_cache rows older than this are deleted hourly (0: keep forever).
    retention_days: int = Field(default=90, ge=0)
    # Access control (see README "Users, roles and tokens").
    admin_token: SecretStr | None = Field(
        default=None,
        description="accepted as an admin API token (automation); at least 16 characters",
    )
    public_url: str | None = Field(
        default=None, description="external base URL for printed links, e.g. https://judge.example"
    )
    session_cookie_name: str = "llmjudge_session"
    # None: Secure exactly when the request came over https (behind a proxy, run uvicorn with
    # --proxy-headers or set this to true).
    session_cookie_secure: bool | None = None
    session_hours: int = Field(default=168, ge=1)
    login_attempts_per_minute: int = Field(default=10, ge=1)

    @field_validator("admin_token")
    @classmethod
    def strong_admin_token(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and len(v.get_secret_value()) < 16:
            raise ValueError("LLMJUDGE_ADMIN_TOKEN must be at least 16 characters")
        return v

    @model_validator(mode="after")
    def pooled_needs_direct(self) -> Settings:
        # Fail at start, not silently later: through a transaction pooler the event listener
        # would hear nothing and persona locks would be released at once.
        if self.database_pooled and self.database_url and not self.database_direct_url:
            raise ValueError(
                "LLMJUDGE_DATABASE_POOLED needs LLMJUDGE_DATABASE_DIRECT_URL, an unpooled URL "
                "for LISTEN/NOTIFY and advisory locks"
            )
        return self

    @property
    def direct_database_url(self) -> str:
        """Where the event listener, the persona locks and the migrations connect."""
        return self.database_direct_url or self.database_url or ""

    @property
    def templates_dir(self) -> Path:
        return PROJECT_ROOT / "templates"

    @property
    def static_dir(self) -> Path:
        return PROJECT_ROOT / "static"

    @property
    def pgdata(self) -> Path:
        return self.data_dir / "pgdata"


@lru_cache
def get_settings() -> Settings:
    return Settings()
