"""The SRS daemon's pieces without processes: CLI acceptance checks 1-4, the
statistics publisher (pb and JSON) and control requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemons.srs.__main__ import main
from daemons.srs.monitor import srs_publisher
from tests.srs.harness import Net, sir
from umcore.config import srs as srs_config
from umcore.monitor.attributes import decode_stats
from umcore.srs.client import SRSClient
from umcore.srs.server import SRSServer

SAMPLE = """<?xml version="1.0" encoding="UTF-8" ?>
<um-srs version="1.0">
  <daemon><log type="console"/><pid-file>srs.pid</pid-file></daemon>
  <srs>
    <interface>127.0.0.1</interface><port>12601</port>
    <state-lifetime>3600</state-lifetime>
    <application-id>srs1</application-id>
  </srs>
  <daemon-monitor topic="/29west/statistics">
    <ping-interval>5000</ping-interval>
    <publishing-interval><default>5000</default></publishing-interval>
    <lbm-attributes>
      <option scope="context" name="operational_mode" value="embedded"/>
    </lbm-attributes>
    <monitor-format>pb</monitor-format>
  </daemon-monitor>
</um-srs>
"""


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    out = capsys.readouterr()
    code = exc.value.code
    return (code if isinstance(code, int) else 0), out.out, out.err


def test_x_prints_the_xsd_and_v_accepts_the_sample(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(["-x"], capsys)
    assert code == 0 and "<xs:schema" in out
    cfg = tmp_path / "srs.xml"
    cfg.write_text(SAMPLE)
    assert run(["-v", str(cfg)], capsys)[0] == 0


BAD = [
    ("<srs><port>1</port><port>2</port></srs>", "duplicate port"),
    ("<srs><foo/></srs>", "unknown element"),
    ("<srs><port>70000</port></srs>", "port range"),
    ('<daemon-monitor topic="t"><ping-interval>0</ping-interval></daemon-monitor>', "ping 0"),
    (
        '<daemon-monitor topic="t"><publishing-interval><default>150</default>'
        "</publishing-interval></daemon-monitor>",
        "interval 150",
    ),
    (
        '<daemon-monitor topic="t"><publishing-interval><default>7776000001</default>'
        "</publishing-interval></daemon-monitor>",
        "interval too big",
    ),
    ("<srs><state-lifetime>20736001</state-lifetime></srs>", "lifetime"),
    ("<srs><source-leave-backoff>60001</source-leave-backoff></srs>", "backoff"),
    ('<daemon><log size="0" type="file">x</log></daemon>', "log size 0"),
    ('<daemon><log frequency="daily">x</log></daemon>', "log without type"),
    ('<daemon-monitor topic="t"><publish-connection-events/></daemon-monitor>', "no allow"),
    ("<debug-monitor><enabled>TRUE</enabled></debug-monitor>", "TRUE"),
    ('<daemon-monitor topic="t"><monitor-format>xml</monitor-format></daemon-monitor>', "xml"),
]


@pytest.mark.parametrize(("body", "why"), BAD, ids=[b[1] for b in BAD])
def test_v_refuses(body: str, why: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.xml"
    cfg.write_text(f'<?xml version="1.0" encoding="UTF-8" ?>\n<um-srs>{body}</um-srs>\n')
    code, _out, err = run(["-v", str(cfg)], capsys)
    assert code != 0, why
    assert "SRS: " in err and "bad.xml" in err


def test_v_accepts_any_order_and_interval_edges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for default in ("0", "200", "7776000000"):
        cfg = tmp_path / "ok.xml"
        cfg.write_text(
            '<?xml version="1.0" encoding="UTF-8" ?>\n<um-srs>'
            '<daemon-monitor topic="t"><monitor-format>pb</monitor-format>'
            f"<publishing-interval><default>{default}</default></publishing-interval>"
            "</daemon-monitor><srs><port>1</port><interface>localhost</interface></srs>"
            "</um-srs>\n"
        )
        assert run(["-v", str(cfg)], capsys)[0] == 0, default


def test_d_prints_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["-d"], capsys)
    assert code == 0
    for needle in (
        "<port>27000</port>",
        "<interface>localhost</interface>",
        "<source-state-lifetime>86400</source-state-lifetime>",
        "<route-state-lifetime>30</route-state-lifetime>",
        "<context-name-state-lifetime>86400</context-name-state-lifetime>",
        "<source-leave-backoff>500</source-leave-backoff>",
        "<ping-interval>60000</ping-interval>",
        "<monitor-format>json</monitor-format>",
    ):
        assert needle in out, needle


def test_h_prints_the_man_page(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["-h"], capsys)
    assert code == 0 and "Stateful Resolver Service" in out and "--validate" in out


def test_h_says_what_pyum_does_with_the_internal_elements(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _code, out, _ = run(["-h"], capsys)
    assert "<debug-monitor>" in out and "localhost:27001" in out
    assert "record-queue-service-interval" in out and "request-stream-max-msg-count" in out
    assert "<shards>" in out and "without effect" in out and "one map" in out


def _net_with_clients() -> tuple[Net, SRSServer]:
    net = Net()
    server = net.add_server(("127.0.0.1", 27000), SRSServer())
    for i in range(2):
        net.add_client(
            SRSClient(
                [("127.0.0.1", 27000)],
                session_id=i + 1,
                client_addr="10.0.0.1",
                client_port=14000 + i,
            )
        )
    net.pump()
    net.clients[0].send_source(sir("T", 1))
    net.clients[1].send_receiver("T")
    net.pump()
    return net, server


def _config(fmt: str, **extra: str) -> srs_config.SRSConfig:
    allow = "".join(f'<{k} allow="true"/>' for k in extra)
    return srs_config.load_text(
        '<?xml version="1.0" encoding="UTF-8" ?><um-srs>'
        "<srs><application-id>app1</application-id><interface>127.0.0.1</interface></srs>"
        '<daemon-monitor topic="/29west/statistics">'
        "<publishing-interval><default>1000</default></publishing-interval>"
        f"{allow}<monitor-format>{fmt}</monitor-format></daemon-monitor></um-srs>"
    )


def test_pb_publication_schedule_and_values() -> None:
    _net, server = _net_with_clients()
    out: list[bytes] = []
    mon = srs_publisher(
        _config("pb"), server, out.append, now=0.0, wall_clock=lambda: 1.7e9, pid=42
    )
    mon.handle_timer(0.0)
    first = [decode_stats(b).message for b in out]
    assert len(first) == 2  # CONFIG_OPTS and INTERNAL_CONFIG_OPTS at start
    assert first[0].configs.srs_application_id == "app1"
    assert first[1].configs.internal.srs_otidmap_shards == "4"
    assert first[1].configs.version == ""  # trap 18
    out.clear()
    mon.handle_timer(1.0)
    msgs = [decode_stats(b) for b in out]
    srs = [m.message.stats.srs for m in msgs if m.message.stats.HasField("srs")]
    assert srs[0].active_clients_count == 2 and srs[0].clients_active_sir_count == 1
    clients = [m.message.stats.um_client for m in msgs if m.message.stats.HasField("um_client")]
    assert sorted(c.um_client_info.session_id for c in clients) == ["0x00000001", "0x00000002"]
    assert not any(m.message.stats.HasField("srs_error") for m in msgs)  # all zero: skipped
    assert msgs[0].attributes.sender_ipv4 == "127.0.0.1"
    assert msgs[0].attributes.process_id == 42


def test_json_publication_only_changed_stats() -> None:
    net, server = _net_with_clients()
    out: list[bytes] = []
    mon = srs_publisher(_config("json"), server, out.append, now=0.0, wall_clock=lambda: 1.7e9)
    mon.handle_timer(1.0)
    docs = [json.loads(b) for b in out]
    first = next(d for d in docs if d["monitorInfoCategory"] == "SRS_STATS")
    assert {"name": "active.clients.count", "value": 2} in first["stats"]
    out.clear()
    net.clients[0].send_source(sir("U", 2))
    net.pump()
    mon.handle_timer(2.0)
    docs = [json.loads(b) for b in out]
    second = next(d for d in docs if d["monitorInfoCategory"] == "SRS_STATS")
    names = {s["name"] for s in second["stats"]}
    assert "clients.active.SIR.count" in names and "active.clients.count" not in names


def test_control_requests() -> None:
    _net, server = _net_with_clients()
    out: list[bytes] = []
    mon = srs_publisher(
        _config("pb", **{"remote-snapshot-request": "", "remote-config-changes-request": ""}),
        server,
        out.append,
        now=0.0,
        wall_clock=lambda: 1.7e9,
    )
    mon.handle_timer(0.0)
    out.clear()
    assert mon.receive_control(b'{"commandMessageType":"REPORT_SRS_VERSION"}', 0.1).startswith(
        b"SRS Version "
    )
    reply = mon.receive_control(
        b'{"commandMessageType":"REPORT_MONITOR_INFO","monitorInfoCategory":"SRS_STATS"}', 0.1
    )
    assert reply == b"snap SRS_STATS - OK!"
    mon.handle_timer(0.1)
    assert len(out) == 1 and decode_stats(out[0]).message.stats.HasField("srs")
    reply = mon.receive_control(
        b'{"commandMessageType":"SET_PUBLISHING_INTERVAL","monitorInfoCategory":"SRS_STATS",'
        b'"publishingInterval":60000}',
        0.2,
    )
    assert reply == b"SRS_STATS 60000 - OK!"
    assert mon.scheduler.interval("SRS_STATS") == 60000
    assert mon.receive_control(b"not json", 0.3).startswith(b"ERROR:")


def test_nothing_published_without_intervals() -> None:
    _net, server = _net_with_clients()
    cfg = srs_config.load_text(
        '<?xml version="1.0" encoding="UTF-8" ?><um-srs>'
        '<daemon-monitor topic="/29west/statistics"/></um-srs>'
    )
    out: list[bytes] = []
    mon = srs_publisher(cfg, server, out.append, now=0.0, wall_clock=lambda: 1.7e9)
    assert mon.next_timer() is None
    mon.handle_timer(1000.0)
    assert out == []
