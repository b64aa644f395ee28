"""Throwaway certificates for TLS tests (made by ``openssl``, valid for a day)."""

from __future__ import annotations

import subprocess
from pathlib import Path

__all__ = ["self_signed"]


def self_signed(
    folder: Path, name: str = "localhost", san: str = "IP:127.0.0.1"
) -> tuple[Path, Path]:
    """A self-signed certificate and its key, in ``folder``: ``(cert, key)``."""
    cert, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", f"/CN={name}", "-addext", f"subjectAltName={san}"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key
