"""API keys encrypted at rest (Fernet: AES-128-CBC + HMAC-SHA256).

The Fernet key comes from ``LLMJUDGE_SECRET_KEY`` (stretched with HKDF-SHA256), or, when that
is unset, from ``<data_dir>/secret.key``, generated on first use with 0600 permissions. Losing
or changing that secret makes stored API keys unreadable (re-enter them); nothing else is
affected. Plain keys are never logged, stored or returned; only their last four characters are.
"""

from __future__ import annotations

import base64
import os
import tempfile
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from llmjudge.infra.config import Settings

KEY_FILE = "secret.key"
_HKDF_SALT = b"llmjudge/api-keys/v1"
_HKDF_INFO = b"fernet"
# Below this length the last four characters would give away too much of the key.
_MIN_LEN_FOR_LAST4 = 8


class SecretKeyError(Exception):
    """A stored key cannot be decrypted with the current secret."""


def derive_key(secret: str) -> bytes:
    """A Fernet key (urlsafe base64 of 32 bytes) derived from a passphrase."""
    raw = HKDF(algorithm=hashes.SHA256(), length=32, salt=_HKDF_SALT, info=_HKDF_INFO).derive(
        secret.encode()
    )
    return base64.urlsafe_b64encode(raw)


def load_or_create_key_file(path: Path) -> bytes:
    """Read the key file, creating it (0600, atomically) when missing.

    Created through a temporary file and ``os.link`` so that concurrent starters (web and
    worker processes) never read a half-written file: one link wins, the others read it.
    """
    if path.exists():
        return path.read_bytes().strip()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".secret-")  # mkstemp creates it 0600
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(Fernet.generate_key())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
    return path.read_bytes().strip()


def last4(key: str) -> str:
    return key[-4:] if len(key) >= _MIN_LEN_FOR_LAST4 else ""


class KeyCipher:
    """Encrypts and decrypts provider API keys; loads its secret lazily on first use."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._fernet: Fernet | None = None

    @property
    def source(self) -> str:
        if self._settings.secret_key:
            return "LLMJUDGE_SECRET_KEY"
        return str(self._settings.data_dir / KEY_FILE)

    def _get(self) -> Fernet:
        if self._fernet is None:
            secret = self._settings.secret_key
            key = (
                derive_key(secret)
                if secret
                else load_or_create_key_file(self._settings.data_dir / KEY_FILE)
            )
            self._fernet = Fernet(key)
        return self._fernet

    def encrypt(self, plain: str) -> str:
        return self._get().encrypt(plain.encode()).decode("ascii")

    def decrypt(self, token: str, *, provider: str) -> str:
        try:
            return self._get().decrypt(token.encode("ascii")).decode()
        except (InvalidToken, ValueError):
            raise SecretKeyError(
                f"cannot decrypt API key for provider {provider}: LLMJUDGE_SECRET_KEY changed? "
                f"(keys are encrypted with {self.source}; re-enter the key to fix)"
            ) from None
