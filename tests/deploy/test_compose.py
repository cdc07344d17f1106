"""docker/compose.yaml checked without a container engine: valid against the Compose
Specification's JSON schema (vendored in docker/schema/, see its README), and consistent with
the tree: every configuration file a service names exists in configs/ (the image copies configs/
to /etc/pyum) and loads, the Store is there, addresses lie in the network's subnet and are
unique, and each health check probes its own service's address.  A broken copy of the file is
refused, so the schema check can fail."""

from __future__ import annotations

import copy
import ipaddress
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml")
jsonschema = pytest.importorskip("jsonschema")

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker" / "compose.yaml"
SCHEMA = ROOT / "docker" / "schema" / "compose-spec.json"
# The image copies configs/ here (docker/Dockerfile).
IMAGE_CONFIGS = "/etc/pyum/"
# Each daemon's validate-only command line (UM's -v), by the word its service's command holds.
VALIDATE = {
    "lbmrd": ["daemons.lbmrd", "-v"],
    "SRS": ["daemons.srs", "-v"],
    "umestored": ["daemons.umestored", "-v"],
    "MCS": ["daemons.mcs", "-v"],
    "tnwgd": ["daemons.tnwgd", "-v"],
}


def load() -> dict[str, Any]:
    doc = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


def errors(doc: dict[str, Any]) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    validator = jsonschema.Draft7Validator(schema)
    return [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]


def test_compose_file_is_valid_against_the_compose_specification() -> None:
    assert errors(load()) == []


@pytest.mark.parametrize(
    "breakage",
    [
        lambda d: d["services"]["umestored"].update(restrat="always"),  # a misspelt key
        lambda d: d["services"]["lbmrd"].update(ports="15380:15380/udp"),  # not a list
        lambda d: d["services"]["srs"]["healthcheck"].update(intervall="30s"),
        lambda d: d.update(volumes=["umestored-data"]),  # a mapping in the specification
    ],
    ids=["misspelt-key", "ports-not-a-list", "healthcheck-misspelt", "volumes-as-list"],
)
def test_a_broken_compose_file_is_refused(breakage: Any) -> None:
    doc = copy.deepcopy(load())
    breakage(doc)
    assert errors(doc), "the schema check accepted a broken file"


def test_the_store_and_the_resolvers_are_services() -> None:
    services = load()["services"]
    assert {"lbmrd", "srs", "umestored", "mcs"} <= set(services)
    store = services["umestored"]
    assert any("umestored" in part for part in _command(store))
    assert store["stop_signal"] == "SIGINT"  # a clean shutdown finishes writes and state


def test_the_dro_joins_the_lbmrd_and_srs_domains() -> None:
    """The DRO's endpoints resolve through the compose lbmrd and SRS (two TRDs), its statistics
    go over UM with a configuration file that exists in the image, and its health check probes
    the web monitor it configures."""
    from daemons.tnwgd.monitor import monitor_settings
    from daemons.tnwgd.webmon import parse_web_monitor
    from umcore.config.dro import load as load_dro

    services = load()["services"]
    dro = services["tnwgd"]
    (name,) = _configs(dro)
    cfg = load_dro(ROOT / "configs" / name)
    lbmrd_ip = services["lbmrd"]["networks"]["pyum"]["ipv4_address"]
    srs_ip = services["srs"]["networks"]["pyum"]["ipv4_address"]
    resolvers = {
        (s.name, s.text)
        for ep in cfg.endpoints
        for s in ep.lbm_attributes
        if s.name in ("resolver_unicast_daemon", "resolver_service")
    }
    assert resolvers == {
        ("resolver_unicast_daemon", f"{lbmrd_ip}:15380"),
        ("resolver_service", f"{srs_ip}:27000"),
    }
    assert len({ep.domain_id for ep in cfg.endpoints}) == len(cfg.endpoints) == 2
    settings = monitor_settings(cfg)
    assert settings is not None
    mon_cfg = settings[1].config
    assert mon_cfg is not None and mon_cfg.startswith(IMAGE_CONFIGS)
    assert (ROOT / "configs" / mon_cfg[len(IMAGE_CONFIGS) :]).is_file()
    assert cfg.daemon.web_monitor is not None
    _host, port = parse_web_monitor(cfg.daemon.web_monitor)
    probe = " ".join(str(t) for t in dro["healthcheck"]["test"])
    assert f":{port}/" in probe
    assert any(str(p).endswith(f":{port}:{port}/tcp") for p in dro["ports"])
    assert set(dro["depends_on"]) >= {"lbmrd", "srs"}


def _command(service: dict[str, Any]) -> list[str]:
    cmd = service.get("command", [])
    return [cmd] if isinstance(cmd, str) else [str(c) for c in cmd]


def _configs(service: dict[str, Any]) -> list[str]:
    text = " ".join(_command(service))
    return re.findall(re.escape(IMAGE_CONFIGS) + r"([\w.-]+)", text)


def test_every_configuration_file_named_exists_and_loads() -> None:
    for name, service in load()["services"].items():
        files = _configs(service)
        assert files, f"service {name} names no configuration file"
        for f in files:
            path = ROOT / "configs" / f
            assert path.is_file(), f"{name}: {IMAGE_CONFIGS}{f} is not in configs/"
            daemon = next((d for d in VALIDATE if d in " ".join(_command(service))), None)
            if daemon is None:
                continue
            run = subprocess.run(
                [sys.executable, "-m", *VALIDATE[daemon], str(path)],
                capture_output=True, text=True, timeout=60, cwd=ROOT,
            )  # fmt: skip
            assert run.returncode == 0, f"{daemon} -v {f}: {run.stderr or run.stdout}"


def test_addresses_are_in_the_subnet_unique_and_health_checked() -> None:
    doc = load()
    subnet = ipaddress.ip_network(doc["networks"]["pyum"]["ipam"]["config"][0]["subnet"])
    seen: dict[str, str] = {}
    for name, service in doc["services"].items():
        addr = service["networks"]["pyum"]["ipv4_address"]
        assert ipaddress.ip_address(addr) in subnet, (name, addr)
        assert addr not in seen, f"{name} and {seen.get(addr)} share {addr}"
        seen[addr] = name
        probe = " ".join(str(t) for t in service["healthcheck"]["test"])
        assert addr in probe, f"{name}'s health check probes another address"


def test_published_host_ports_are_distinct() -> None:
    published: list[str] = []
    for service in load()["services"].values():
        for port in service.get("ports", []):
            host = str(port).rsplit(":", 1)[0]  # [ip:]host_port
            published.append(f"{host}/{'udp' if str(port).endswith('/udp') else 'tcp'}")
    assert len(published) == len(set(published)), published
