"""Fixtures of the encrypted/compressed TCP tests: certificates made for the session, an lbmrd.

The certificates are self-signed, made by :func:`umcore.tools.certs.make_certificates` (OpenSSL's
command line) in a temporary folder: ``certs`` (shared by every context, also the trusted file),
``stranger`` (a certificate the others do not trust) and ``locked`` (its key under a password).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.conftest import lbmrd, reset_configuration
from umcore.tools.certs import CertFiles, make_certificates

__all__ = ["certs", "lbmrd", "locked", "reset_configuration", "stranger"]

PASSWORD = "s3cret-pass"


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tls-certs")


@pytest.fixture(scope="session")
def certs(cert_dir: Path) -> CertFiles:
    return make_certificates(cert_dir, "pyum-test")


@pytest.fixture(scope="session")
def stranger(cert_dir: Path) -> CertFiles:
    return make_certificates(cert_dir, "stranger")


@pytest.fixture(scope="session")
def locked(cert_dir: Path) -> CertFiles:
    return make_certificates(cert_dir, "locked", password=PASSWORD)
