"""umesrc and umercv: their flags, what they refuse before anything starts, their summary lines,
and umercv's counting of duplicates and verification (no Store needed)."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from tests.tools.toolproc import TIMEOUT, free_tcp_port, quiet_config, run_tool, start_tool
from umcore.tools import umercv, umesrc
from umcore.tools.common import make_verifiable

SRC_SUMMARY = re.compile(r"^umesrc: sent=(\d+) stable=(\d+) topic=(\S+) bytes=(\d+) ")
RCV_SUMMARY = re.compile(
    r"^umercv: messages=(\d+) unrecoverable=(\d+) duplicates=(\d+) recovered=(\d+) "
    r"verify_errors=(\d+) "
)


# --- flags -------------------------------------------------------------------------------------


def test_umesrc_flags_stand_for_configuration_lines() -> None:
    args = umesrc._parser().parse_args(
        ["-S", "127.0.0.1:14567", "-f", "50", "-j", "-R", "U1m/500k", "-M", "7", "-V", "t"]
    )
    assert umesrc.flag_lines(args) == [
        ("-S", "source ume_store 127.0.0.1:14567\n"),
        ("-f", "source ume_flight_size 50\n"),
        ("-j", "source ume_late_join 1\n"),
        (
            "-R",
            "source transport lbtru\n"
            "context transport_lbtru_data_rate_limit 1000000\n"
            "context transport_lbtru_retransmit_rate_limit 500000\n",
        ),
    ]
    assert (args.messages, args.verifiable, args.topic) == (7, True, "t")
    by_name = umesrc._parser().parse_args(["--storename", "store1:0:1", "--messages", "3", "t"])
    assert umesrc.flag_lines(by_name) == [("-t", "source ume_store_name store1:0:1\n")]
    assert by_name.messages == 3


def test_umercv_flags_stand_for_configuration_lines() -> None:
    args = umercv._parser().parse_args(
        ["--session-id", "0x10", "-u", "77", "-e", "5", "-r", "9", "-E", "-N", "2", "t"]
    )
    assert umercv.flag_lines(args) == [
        ("--session-id", "receiver ume_session_id 0x10\n"),
        ("-u", "context ume_user_receiver_registration_id 77\n"),
        ("-e", "receiver ume_explicit_ack_only 1\n"),
    ]
    assert (args.count, args.exit_on_eos, args.seqnum, args.regid_offset) == (9, True, 2, 1000)
    assert umercv._parser().parse_args(["-S", "-x", "t"]).exit_on_eos
    assert not umercv._parser().parse_args(["-x", "t"]).exit_on_reg_error


@pytest.mark.parametrize(
    ("parser", "argv"),
    [
        (umesrc._parser, ["-M", "-1", "t"]),
        (umesrc._parser, ["-l", "x", "t"]),
        (umesrc._parser, ["-L", "nan", "t"]),
        (umesrc._parser, ["-S", "1.2.3.4:5", "-t", "store1", "t"]),  # one or the other
        (umesrc._parser, ["-R", "fast", "t"]),
        (umesrc._parser, []),  # no topic
        (umercv._parser, ["-r", "-2", "t"]),
        (umercv._parser, ["-i", "one", "t"]),
        (umercv._parser, ["--no-such-flag", "t"]),
    ],
)
def test_bad_flags_exit_2(
    parser: object, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        parser().parse_args(argv)  # type: ignore[operator]
    assert exc.value.code == 2
    assert "error:" in capsys.readouterr().err


# --- umercv's counts ---------------------------------------------------------------------------


def test_counts_duplicates_recovered_and_serial_wrap() -> None:
    c = umercv.Counts()
    for sqn, rx in ((0xFFFFFFFE, True), (0xFFFFFFFF, True), (0, False), (1, False)):
        c.data("S1", sqn, b"x", rx, 1.0)
    c.data("S1", 0xFFFFFFFF, b"x", True, 2.0)  # before the highest (serially): a duplicate
    c.data("S1", 1, b"x", False, 2.0)  # the highest again: a duplicate
    c.data("S2", 1, b"x", False, 3.0)  # another source: its own sequence
    assert (c.messages, c.duplicates, c.recovered, c.bytes) == (7, 2, 3, 7)
    line = c.summary()
    found = RCV_SUMMARY.match(line)
    assert found and found.groups() == ("7", "0", "2", "3", "0"), line
    assert "seconds=2.000" in line


def test_counts_verify_payload_and_sequence_number() -> None:
    c = umercv.Counts(verify=True)
    c.data("S", 5, make_verifiable(5, 30), False, 0.0)  # the sqn it names: fine
    c.data("S", 6, make_verifiable(7, 30), False, 0.0)  # another message's payload
    bad = bytearray(make_verifiable(7, 30))
    bad[-1] ^= 1
    c.data("S", 7, bytes(bad), False, 0.0)  # a damaged payload
    c.data("S", 8, b"short", False, 0.0)  # not a verifiable message
    assert c.verify_errors == 3
    errors = c.take_errors()
    assert errors[0] == "SQN 6 carries message 7 from S"
    assert "CRC mismatch" in errors[1] and "shorter than a verifiable header" in errors[2]
    assert c.take_errors() == []
    unchecked = umercv.Counts()
    unchecked.data("S", 6, make_verifiable(7, 30), False, 0.0)
    assert unchecked.verify_errors == 0


# --- refused before anything starts ----------------------------------------------------------


async def test_umesrc_without_store_refuses(tmp_path: Path) -> None:
    cfg = quiet_config(tmp_path / "q.cfg")
    rc, lines = await run_tool("umesrc", "-c", str(cfg), "-M", "1", "t")
    assert rc == 1
    assert lines == [
        "umesrc: ume_store: no Store for topic 't': give -S IP:PORT, -t NAME, or a 'source "
        "ume_store IP:PORT' line in a -c file (to send without a Store, use lbmsrc)"
    ]


async def test_umesrc_bad_store_flag_names_the_flag(tmp_path: Path) -> None:
    rc, lines = await run_tool("umesrc", "-S", "127.0.0.1", "t")
    assert rc == 1 and len(lines) == 1
    assert lines[0].startswith("umesrc: command line -S:1: source ume_store: '127.0.0.1'")
    assert "IP:port" in lines[0]


async def test_umesrc_settings_a_store_refuses_fail_at_start(tmp_path: Path) -> None:
    cfg = tmp_path / "groups.cfg"
    cfg.write_text("source ume_store_group 0:1\nsource ume_store 0:127.0.0.1:14567:0:3\n")
    rc, lines = await run_tool("umesrc", "-c", str(cfg), "t")
    assert rc == 1 and len(lines) == 1
    assert "group 3" in lines[0] and "ume_store_group" in lines[0]


@pytest.mark.parametrize(
    ("argv", "text"),
    [
        (["-N"], "-N/--seqnum-info: per-send sequence number events"),
        (["-m", "100", "-P", "1"], "-m and -P are conflicting options"),
    ],
)
async def test_umesrc_unavailable_or_conflicting_flags(argv: list[str], text: str) -> None:
    rc, lines = await run_tool("umesrc", "-S", "127.0.0.1:14567", *argv, "t")
    assert rc == 1 and len(lines) == 1 and text in lines[0], lines


@pytest.mark.parametrize("tool", ["umesrc", "umercv"])
async def test_bad_configuration_file_is_one_line_and_status_1(tool: str, tmp_path: Path) -> None:
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("source ume_store 127.0.0.1:14567\ncontext no_such_option 1\n")
    rc, lines = await run_tool(tool, "-c", str(cfg), "t")
    assert rc == 1 and len(lines) == 1
    assert lines[0].startswith(f"{tool}: ") and "bad.cfg:2" in lines[0]
    assert "no_such_option" in lines[0]


async def test_umercv_bad_session_id_names_the_flag() -> None:
    rc, lines = await run_tool("umercv", "--session-id", "zz", "t")
    assert rc == 1 and len(lines) == 1
    assert lines[0].startswith("umercv: command line --session-id:1: receiver ume_session_id")


async def test_bad_flag_prints_usage_and_exits_2() -> None:
    rc, lines = await run_tool("umercv", "-Z", "t")
    assert rc == 2
    assert lines[0].startswith("usage: umercv") and "unrecognized arguments: -Z" in lines[-1]


# --- waiting for Stores, summary lines ---------------------------------------------------------


async def test_umesrc_waits_for_an_unanswering_store_then_prints_its_summary(
    tmp_path: Path,
) -> None:
    """Nothing answers at the Store's address: umesrc says what it waits for and, stopped,
    prints its summary with nothing sent (status 0, as UM's umesrc interrupted)."""
    cfg = quiet_config(tmp_path / "q.cfg")
    store = f"127.0.0.1:{free_tcp_port()}"
    src = await start_tool("umesrc", "-c", str(cfg), "-S", store, "-d", "0", "-M", "5", "t.wait")
    try:
        line = await src.wait_for_line(r"^umesrc: waiting for the stores: ", TIMEOUT)
        assert "registered with 0 of 1 store(s)" in line.string
        assert line.string.endswith("; waiting for a quorum of them to register")
        assert any(f"stores [{store}]" in x for x in src.all_lines())
        rc = await src.stop(signal.SIGINT)
    finally:
        await src.kill()
    assert rc == 0
    found = SRC_SUMMARY.match(src.all_lines()[-1])
    assert found and found.groups() == ("0", "0", "t.wait", "0"), src.all_lines()


async def test_umercv_summary_after_sigint(tmp_path: Path) -> None:
    cfg = quiet_config(tmp_path / "q.cfg")
    rcv = await start_tool("umercv", "-c", str(cfg), "-V", "t.none")
    try:
        line = await rcv.wait_for_line(r"^umercv: receiving topic ", TIMEOUT)
        assert line.string.endswith("; RegID offset 1000")
        rc = await rcv.stop(signal.SIGINT)
    finally:
        await rcv.kill()
    assert rc == 0
    found = RCV_SUMMARY.match(rcv.all_lines()[-1])
    assert found and found.groups() == ("0", "0", "0", "0", "0"), rcv.all_lines()
