"""Options reach the engine's cores from the registry only: typed values, units, no defaults
restated in code, and a misspelt name fails at construction."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from umcore.engine.options import Options
from umcore.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2] / "umcore"


def test_values_and_units_come_from_the_registry() -> None:
    o = Options("source", {"implicit_batching_interval": "250"})
    assert o.get("implicit_batching_interval") == 250  # UM's milliseconds, as typed
    assert o.seconds("implicit_batching_interval") == pytest.approx(0.25)
    c = Options("context", None)
    assert c.seconds("resolver_unicast_keepalive_interval") == pytest.approx(0.5)  # default 500 ms


def test_a_misspelt_option_is_an_error_not_a_default() -> None:
    o = Options("context", None)
    with pytest.raises(ConfigError):
        o.get("resolver_mulitcast_address")
    with pytest.raises(ConfigError):
        o.seconds("resolver_unicast_keepalive_intreval")
    with pytest.raises(ConfigError, match="not a time option"):
        o.seconds("resolver_multicast_address")


def test_an_option_of_another_scope_is_an_error() -> None:
    with pytest.raises(ConfigError):
        Options("receiver", None).get("transport_tcp_port_low")  # a context option


def _option_reads_with_defaults(root: Path) -> list[str]:
    """``x.get("name", default)`` calls on option readers (``options``, ``opts``, ``o``...)."""
    readers = {"o", "so", "ro", "ropts", "opts", "options", "wopts", "c"}
    out = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            f = node.func
            name = (
                f.value.attr if isinstance(f.value, ast.Attribute) else getattr(f.value, "id", "")
            )
            if f.attr == "get" and name in readers and len(node.args) == 2:
                arg = node.args[0]
                if (
                    isinstance(arg, ast.Constant)
                    and isinstance(arg.value, str)
                    and "_" in arg.value
                ):
                    out.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return out


def test_no_default_is_restated_where_options_are_read() -> None:
    # umcore/config parses XML attribute dictionaries with .get(key, default): not options.
    found = [x for x in _option_reads_with_defaults(ROOT) if not x.startswith("umcore/config/")]
    assert found == []


def test_the_rule_catches_a_restated_default(tmp_path: Path) -> None:
    pkg = tmp_path / "umcore"
    pkg.mkdir()
    (pkg / "m.py").write_text('def f(o):\n    return o.get("transport_tcp_port", 0)\n')
    assert _option_reads_with_defaults(pkg) == ["umcore/m.py:2"]


def test_each_core_builds_its_settings_from_the_registry() -> None:
    from umcore.resolver.core import ResolverConfig, wildcard_query_timings_from
    from umcore.resolver.schedule import advertisement_timings_from, query_timings_from
    from umcore.transport.lbt import ReceiverConfig, SourceConfig
    from umcore.transport.lbtru import RuReceiverConfig, RuSourceConfig
    from umcore.transport.ratelimit import RateLimiter
    from umcore.transport.tcp import TcpSourceSession

    ctx = Options("context", {"resolver_unicast_keepalive_interval": "750"})
    src = Options("source", {"implicit_batching_interval": "250"})
    rcv = Options("receiver", {"transport_lbtru_nak_backoff_interval": "300"})
    r = ResolverConfig.from_options(ctx)
    assert (r.multicast_address, r.multicast_port) == ("224.9.10.11", 12965)  # UM's defaults
    assert r.unicast_timings.keepalive_interval == pytest.approx(0.75)
    tcp = TcpSourceSession.from_options(7, src, ctx)
    assert tcp.batching_interval == pytest.approx(0.25) and tcp.batching_minimum_length == 2048
    rm = SourceConfig.from_options(src, ctx)
    assert rm.ignore_interval == pytest.approx(0.5) and rm.batching_interval == pytest.approx(0.25)
    ru = RuSourceConfig.from_options(src, ctx)
    assert ru.client_activity_timeout == pytest.approx(10.0)
    assert ReceiverConfig.from_options(rcv, ctx).nak_backoff_interval == pytest.approx(0.2)
    assert RuReceiverConfig.from_options(rcv, ctx).nak_backoff_interval == pytest.approx(0.3)
    limiter = RateLimiter.from_options("lbtrm", ctx, 0.0)  # 10 Mbit/s per 10 ms by default
    assert (limiter.data.interval, limiter.data.budget) == (pytest.approx(0.01), 12_500)
    adv = advertisement_timings_from(Options("source"))
    assert (adv.min_initial_interval, adv.initial_duration) == (pytest.approx(0.01), 5.0)
    assert query_timings_from(rcv).sustain_interval == pytest.approx(1.0)
    assert wildcard_query_timings_from(Options("wildcard_receiver")).sustain_interval == 0
