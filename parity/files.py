"""Reading a file the user names (a results.csv, a case file), plain or gzipped (``.gz``, or gzip's
magic bytes): one :class:`parity.errors.UserError` naming the file when it cannot be read or decoded."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

from .errors import UserError


def read_text(path: Path | str) -> str:
    """The text of ``path`` (utf-8; gunzipped when it is gzip); a one-line :class:`UserError` naming it if not."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    gz = path.suffix == ".gz" or data[:2] == b"\x1f\x8b"
    try:
        return (gzip.decompress(data) if gz else data).decode("utf-8")
    except (OSError, EOFError, zlib.error, UnicodeDecodeError) as exc:
        kind = "gzip-compressed utf-8 text" if gz else "utf-8 text"
        raise UserError(f"{path}: cannot be decoded as {kind} ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
