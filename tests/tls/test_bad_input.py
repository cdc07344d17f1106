"""Bad TLS settings: one ConfigError at context creation, naming the option and the file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.tls.conftest import PASSWORD
from umcore.api import Context
from umcore.errors import ConfigError
from umcore.tools.certs import CertFiles


async def create(opts: dict[str, str]) -> None:
    ctx = await Context.create(opts)
    await ctx.close()


async def test_good_settings_create(certs: CertFiles, locked: CertFiles) -> None:
    await create(certs.options())
    await create(locked.options())  # the right password
    await create({**certs.options(), "compression": "LZ4"})  # UM spells it LZ4 too


@pytest.mark.parametrize(
    ("option", "missing"),
    [("tls_certificate", "cert"), ("tls_certificate_key", "key")],
)
async def test_use_tls_needs_certificate_and_key(
    certs: CertFiles, option: str, missing: str
) -> None:
    opts = certs.options()
    del opts[option]
    with pytest.raises(ConfigError, match=f"use_tls 1 needs {option}") as info:
        await create(opts)
    assert info.value.what == option


@pytest.mark.parametrize(
    "option", ["tls_certificate", "tls_certificate_key", "tls_trusted_certificates"]
)
async def test_missing_file(certs: CertFiles, tmp_path: Path, option: str) -> None:
    path = tmp_path / "nowhere" / "file.pem"
    with pytest.raises(ConfigError) as info:
        await create({**certs.options(), option: str(path)})
    assert info.value.what == option
    assert f"cannot read {option} file {str(path)!r}" in str(info.value)
    assert "No such file" in str(info.value)


async def test_unreadable_file(certs: CertFiles, tmp_path: Path) -> None:
    # a folder where the file should be: unreadable as a file even for root
    with pytest.raises(ConfigError, match="cannot read tls_certificate file") as info:
        await create({**certs.options(), "tls_certificate": str(tmp_path)})
    assert str(tmp_path) in str(info.value)


async def test_key_of_another_certificate(certs: CertFiles, stranger: CertFiles) -> None:
    with pytest.raises(ConfigError) as info:
        await create({**certs.options(), "tls_certificate_key": str(stranger.key)})
    assert info.value.what == "tls_certificate_key"
    assert str(stranger.key) in str(info.value) and str(certs.certificate) in str(info.value)
    assert "is not the key of tls_certificate" in str(info.value)


async def test_wrong_password(locked: CertFiles) -> None:
    with pytest.raises(ConfigError, match="tls_certificate_key_password is wrong") as info:
        await create({**locked.options(), "tls_certificate_key_password": PASSWORD + "x"})
    assert info.value.what == "tls_certificate_key_password"
    assert str(locked.key) in str(info.value)


async def test_missing_password(locked: CertFiles) -> None:
    opts = locked.options()
    del opts["tls_certificate_key_password"]
    with pytest.raises(ConfigError, match="tls_certificate_key_password is not set"):
        await create(opts)


async def test_certificate_file_that_is_not_a_certificate(certs: CertFiles, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(ConfigError, match="not a PEM certificate") as info:
        await create({**certs.options(), "tls_certificate": str(junk)})
    assert str(junk) in str(info.value)


async def test_trusted_file_without_certificates(certs: CertFiles, tmp_path: Path) -> None:
    junk = tmp_path / "trusted.pem"
    shutil.copy(certs.key, junk)  # a key, no certificate
    with pytest.raises(ConfigError, match="tls_trusted_certificates") as info:
        await create({**certs.options(), "tls_trusted_certificates": str(junk)})
    assert str(junk) in str(info.value)


@pytest.mark.parametrize(
    ("suites", "needle"),
    [
        ("DHE-RSA-AES256-GCM-SHA385", "unknown TLS 1.2 cipher suite 'DHE-RSA-AES256-GCM-SHA385'"),
        ("TLS_DHE_RSA_WITH_AES_256_GCM_SHA384", "IANA name"),
        ("DHE-RSA-AES256-GCM-SHA384,BOGUS", "'BOGUS'"),
        ("TLS_AES_256_GCM_SHA384", "unknown TLS 1.2 cipher suite"),  # a TLS 1.3 suite
        ("HIGH", "unknown TLS 1.2 cipher suite 'HIGH'"),  # a cipher-string keyword, no suite
        (" , ", "tls_cipher_suites is empty"),
    ],
)
async def test_unknown_cipher_suite(certs: CertFiles, suites: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        await create({**certs.options(), "tls_cipher_suites": suites})
    assert needle in str(info.value)
    assert info.value.what == "tls_cipher_suites"


async def test_close_suggestion(certs: CertFiles) -> None:
    with pytest.raises(ConfigError) as info:
        await create({**certs.options(), "tls_cipher_suites": "DHE-RSA-AES256-GCM-SHA385"})
    assert "DHE-RSA-AES256-GCM-SHA384" in str(info.value.allowed)


async def test_bad_compression_value() -> None:
    with pytest.raises(ConfigError, match="compression"):
        await create({"compression": "zstd"})
