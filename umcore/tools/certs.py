"""Throw-away X.509 certificates for encrypted TCP on one machine (``make run ARGS="--tls"``, tests).

Theory of operation
-------------------
UM's TLS needs a certificate and key for every context and a trusted-certificates file to
verify peers (seed 003 10.4.1); UM ships no tool for them.  :func:`make_certificates` writes a
self-signed RSA 2048 certificate (``CN`` given, valid two days) and its key into a folder, with
OpenSSL's command line (``openssl req -x509``), which Debian and every CI image here has; the
certificate is also the trusted file, since contexts may share one certificate (10.4.1).  A key
protected by a password is written when one is given (AES-256, PKCS#8).  For real deployments
use your organisation's certificates: these are for a local topology and tests only.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from umcore.errors import ConfigError

__all__ = ["CertFiles", "make_certificates"]

# Bound on one openssl run (RSA 2048 key generation takes well under a second).
OPENSSL_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class CertFiles:
    """A certificate, its key and the trusted file, as paths (``password``: the key's)."""

    certificate: Path
    key: Path
    trusted: Path
    password: str | None = None

    def options(self) -> dict[str, str]:
        """The context options that use these files (``use_tls`` 1)."""
        opts = {
            "use_tls": "1",
            "tls_certificate": str(self.certificate),
            "tls_certificate_key": str(self.key),
            "tls_trusted_certificates": str(self.trusted),
        }
        if self.password:
            opts["tls_certificate_key_password"] = self.password
        return opts


def make_certificates(
    folder: Path, name: str = "pyum", *, password: str | None = None
) -> CertFiles:
    """A self-signed certificate ``<name>.crt`` and key ``<name>.key`` in ``folder``."""
    openssl = shutil.which("openssl")
    if openssl is None:
        raise ConfigError(
            "the openssl command is needed to make certificates (apt-get install openssl)",
            what="openssl",
        )
    folder.mkdir(parents=True, exist_ok=True)
    cert = folder / f"{name}.crt"
    key = folder / f"{name}.key"
    cmd = [
        openssl, "req", "-x509", "-newkey", "rsa:2048", "-sha256", "-days", "2",
        "-subj", f"/CN={name}", "-keyout", str(key), "-out", str(cert),
    ]  # fmt: skip
    cmd += ["-passout", f"pass:{password}"] if password else ["-nodes"]
    done = subprocess.run(cmd, capture_output=True, timeout=OPENSSL_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise ConfigError(
            f"openssl could not make a certificate: {done.stderr.decode(errors='replace')}",
            what="openssl",
        )
    key.chmod(0o600)
    return CertFiles(cert, key, cert, password)
