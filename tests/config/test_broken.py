"""A corpus of broken files, each with its clean error; a bounded fuzz pass over mutated XML."""

from __future__ import annotations

import random
import zlib
from pathlib import Path

import pytest

from umcore.config import dro, srs, store
from umcore.config.attributes import Configuration
from umcore.config.umxml import UMXml
from umcore.errors import ConfigError

CONFIGS = Path(__file__).parents[2] / "configs"

UM_OK = (CONFIGS / "um.xml").read_text()

CORPUS = [
    # (loader, text, expected line, fragment of the message)
    (UMXml.from_text, "<um-configuration version='1.0'>", 1, "malformed XML"),
    (UMXml.from_text, "<um-configuration/>", 1, "version"),
    (
        UMXml.from_text,
        UM_OK.replace('name="transport" default', 'name="transprt" default', 1),
        None,
        "did you mean transport",
    ),
    (
        UMXml.from_text,
        UM_OK.replace('default-value="lbtrm"', 'default-value="lbtxx"'),
        None,
        "lbtrm",
    ),
    (
        UMXml.from_text,
        UM_OK.replace('template="persistent"', 'template="persistant"'),
        None,
        "unknown template",
    ),
    (
        UMXml.from_text,
        UM_OK.replace('pattern="^md\\."', 'pattern="^md\\.(("'),
        None,
        "does not compile",
    ),
    (
        UMXml.from_text,
        UM_OK.replace('order="allow,deny"', 'order="allow,maybe"'),
        None,
        "allow,deny",
    ),
    (
        UMXml.from_text,
        UM_OK.replace("<allow>14391</allow>", ""),
        None,
        "not permitted by its own restriction",
    ),
    (
        UMXml.from_text,
        UM_OK.replace('<context name="pub_ctx">', '<context name="pub ctx">'),
        None,
        "[A-Za-z0-9_-]",
    ),
    (UMXml.from_text, UM_OK.replace("<templates>", "<templates><bogus/>"), None, "bogus"),
    (srs.load_text, "<um-srs><srs><port>x</port></srs></um-srs>", 1, "port"),
    (srs.load_text, "<um-srs>\n<daemon>\n<log>f</log></daemon></um-srs>", 3, "type"),
    (store.load_text, "<ume-store version='1.3'><stores/></ume-store>", 1, "daemon"),
    (
        store.load_text,
        "<ume-store version='1.3'><daemon/><stores><store name='s' port='1'><ume-attributes><option type='store' name='keepalive-interval' value='-1'/></ume-attributes><topics><topic pattern='a'/></topics></store></stores></ume-store>",
        1,
        "keepalive-interval",
    ),
    (dro.load_text, "<tnw-gateway version='1.0'><portals/></tnw-gateway>", 1, "portals"),
    (
        dro.load_text,
        "<tnw-gateway version='1.0'><portals><endpoint><name>A</name><domain-id>-1</domain-id></endpoint></portals></tnw-gateway>",
        1,
        "domain-id",
    ),
    (
        dro.load_text,
        "<!DOCTYPE x [<!ENTITY e SYSTEM 'file:///etc/passwd'>]><tnw-gateway version='1.0'>&e;</tnw-gateway>",
        1,
        "",
    ),
]


@pytest.mark.parametrize(("loader", "text", "line", "needle"), CORPUS)
def test_corpus(loader, text, line, needle):
    with pytest.raises(ConfigError) as exc:
        loader(text, "broken.xml")
    err = exc.value
    assert err.source == "broken.xml"
    assert needle in str(err)
    if line is not None:
        assert err.line == line
    else:
        assert err.line is not None and err.line > 1
    assert "Traceback" not in str(err)


def test_unknown_option_in_flat_file_names_file_and_line(tmp_path):
    path = tmp_path / "x.cfg"
    path.write_text("context transport_tcp_port_low 1\nreceiver use_otr 3\n")
    with pytest.raises(ConfigError) as exc:
        Configuration().config_file(path)
    assert exc.value.line == 2 and exc.value.source == str(path)
    assert exc.value.allowed == "0 | 1 | 2"


def test_file_errors(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        dro.load(tmp_path)
    with pytest.raises(ConfigError, match="cannot read"):
        srs.load(tmp_path / "missing.xml")


SEEDS = [
    (UMXml.from_text, UM_OK),
    (srs.load_text, (CONFIGS / "srs.xml").read_text()),
    (store.load_text, (CONFIGS / "umestored.xml").read_text()),
    (dro.load_text, (CONFIGS / "dro.xml").read_text()),
]
# Bounded: 4 files x 150 mutants keeps the pass well under a few seconds.
FUZZ_ROUNDS = 150


def mutate(rng: random.Random, text: str) -> str:
    data = list(text)
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(4)
        pos = rng.randrange(len(data))
        if op == 0:
            del data[pos : pos + rng.randint(1, 20)]
        elif op == 1:
            data.insert(pos, rng.choice("<>/\"'=&;x09 -\n\x00é"))
        elif op == 2:
            data[pos] = rng.choice('0123456789abcz<>"')
        else:
            start = rng.randrange(len(data))
            data[pos:pos] = data[start : start + rng.randint(1, 40)]
    return "".join(data)


@pytest.mark.parametrize(("loader", "seed_text"), SEEDS)
def test_fuzz_only_config_errors(loader, seed_text):
    rng = random.Random(zlib.crc32(seed_text.encode()))
    refused = 0
    for _ in range(FUZZ_ROUNDS):
        text = mutate(rng, seed_text)
        try:
            loader(text, "fuzz.xml")
        except ConfigError as exc:
            refused += 1
            assert exc.source == "fuzz.xml"
    assert refused > 0
