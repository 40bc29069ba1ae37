"""Settings from the environment (prefix LLMJUDGE_) with documented defaults."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# Editable installs (the README's path) keep templates, static files and migrations in the
# repository beside src/; the Dockerfile installs the same way.
PROJECT_ROOT = Path(__file__).resolve().parents[2]


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
    data_dir: Path = Field(default_factory=default_data_dir)
    host: str = "127.0.0.1"
    port: int = 8000
    secret_key: str | None = None
    # Imports: a whole file is validated before anything is stored.
    max_upload_bytes: int = 50 * 1024 * 1024
    max_import_rows: int = 100_000
    max_field_chars: int = 500_000
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
