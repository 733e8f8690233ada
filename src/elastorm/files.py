"""Files a run shares between processes (drivers, bolts): written whole or not at all."""

from __future__ import annotations

import json
import os
from typing import Any

from elastorm.core.auth import Keyring


def write_json_atomic(path: str, obj: Any) -> None:
    """Write ``obj`` as JSON to ``path`` so readers see the old or the new file whole."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, separators=(",", ":"))
    os.replace(tmp, path)


class SecretFileError(ValueError):
    """A secret file cannot be read or holds nothing (one line: which file, why)."""


def read_secret(path: str) -> bytes:
    """The secret in file ``path``, without surrounding whitespace (a trailing newline)."""
    try:
        with open(path, "rb") as f:
            secret = f.read().strip()
    except OSError as exc:
        raise SecretFileError(f"secret file {path} is unreadable: {exc.strerror}") from None
    if not secret:
        raise SecretFileError(f"secret file {path} is empty")
    return secret


def load_keyring(secret_file: str | None, previous_file: str | None = None) -> Keyring | None:
    """The keyring of a secret file and, while rotating, the previous one; ``None``
    without a secret file (authentication off, as before it existed)."""
    if secret_file is None:
        return None
    previous = None if previous_file is None else read_secret(previous_file)
    return Keyring(current=read_secret(secret_file), previous=previous)
