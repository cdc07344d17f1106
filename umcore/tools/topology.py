"""The local demo topology of ``make run``: lbmrd, the SRS and a Store side by side, a
source/receiver pair resolving through lbmrd and through the SRS, and lbmmon showing the SRS's
live statistics.

Theory of operation
-------------------
Everything runs on loopback with embedded settings, so no file has to exist beforehand:

1. lbmrd (``python -m daemons.lbmrd -i 127.0.0.1 -p 0``) starts on a free UDP port; the port is
   read from its "listening on" log line.
2. The SRS (``python -m daemons.srs srs.xml``) starts on a free TCP port (``<port>0</port>``),
   read the same way.  Its ``<daemon-monitor>`` publishes pb statistics on
   ``/29west/statistics`` every ``--stats-interval`` seconds (default 5) from a monitoring
   context configured by ``<lbm-attributes>`` to resolve through the lbmrd; control requests
   are accepted at that context's request port (the SRS logs its address).
3. A Store (``python -m daemons.umestored``) starts from ``configs/umestored.xml`` in a
   working directory of its own (``store/``, where its cache and state directories are created
   first: the Store never creates them), with two changes written into a copy: the port is 0
   (a free one, read from its "listening on" line) and ``<lbm-config>`` names ``store.cfg``,
   which resolves through the lbmrd.  Its "ready to accept registrations" line is waited for.
4. Two flat UM configurations are written to a temporary directory: ``demo.cfg`` names the
   lbmrd (``context resolver_unicast_daemon 127.0.0.1:PORT``: unicast UDP topic resolution,
   multicast TR off) and ``srs.cfg`` names the SRS only (``context resolver_service
   127.0.0.1:PORT`` and ``context resolver_disable_udp_topic_resolution 1``: TCP-based TR, no
   UDP TR at all); interfaces are 127.0.0.1 and request and resolver ports ephemeral in both
   (UM's small default port ranges run out with seven programs on a busy host).
5. ``lbmmon -c demo.cfg`` starts and is waited for (its "receiving statistics" line), then two
   pairs, each ``lbmrcv -E -V -s`` (exit when the source stops, verify every message,
   statistics each second) and, a moment later, ``lbmsrc -V``: ``lbmrcv``/``lbmsrc`` on topic
   ``pyum.demo`` through the lbmrd, ``srsrcv``/``srssrc`` on ``pyum.demo.srs`` through the SRS.
   Every program's output is streamed here, each line prefixed with its name.

6. The persisted pair, through the Store, on topic ``orders`` (the Store's disk repository):
   ``umercv -V -r K`` (K = a quarter of ``--messages``), then ``umesrc -V -S 127.0.0.1:STORE``.
   The first umercv exits after K messages (all consumed: ACKed to the Store); it is down for
   ``RESTART_PAUSE_S`` seconds, longer than the receiver activity timeout ``ume.cfg`` gives it
   (so the Store lets its RegID go, keeping its state), then started again with ``-r`` the
   messages it has not consumed: it registers with the same RegID (UM's "source RegID + 1000"),
   the Store says where it stopped (``OLD[SQN K]``) and it recovers what it missed from the
   Store (``recovered=`` in its summary), then receives live.  When it is done, umesrc is
   stopped (its summary: ``sent=N stable=S``).

7. MCS, the Monitoring Collector Service (``python -m daemons.mcs``), collects every statistics
   message on ``/29west/statistics`` (the SRS's, and the lbmsrc/lbmrcv pair's: their
   ``apps.cfg`` turns on automatic monitoring every ``--stats-interval`` seconds) into UM's
   SQLite database at ``--mcs-db`` (``.run/ummon.db``; created with ``MCS --init-db`` when
   missing), which outlives the run: the commands that read it are printed at the end.

The run ends when both receivers have seen their sources finish (their summary lines) and the
persisted pair is done, or on
Ctrl-C / SIGTERM: every child then gets SIGINT, a bounded wait, then SIGKILL; no process is left
behind.  ``--messages``/``--rate``/``--length`` shape both sources (default: 10 minutes of 1000
messages/s, a "long run").

``--transport lbtrm`` (or ``lbtru``, ``lbtipc``, ``lbtsmx``; default ``tcp``) adds ``source transport ...`` to the written
configurations (LBT-RM: multicast on 127.0.0.1; LBT-RM and LBT-RU: a 3 s receiver activity
timeout so the receiver sees EOS soon after the source is deleted, and lbmsrc lingers 5 s, as
UM's does, so the last losses are repaired before that); ``--config FILE``
(repeatable) hands further flat configuration files to the four tools, after the written one, so
any option (``source transport lbtrm``, ``context pyum_fault_drop_receive 0.05``...) can be
switched by configuration alone.

``--tls`` encrypts the two pairs, the persisted pair and the Store (every TCP connection between
them: data, late join, registration, ACKs, recovery) with TLS 1.2 (seed 003 10.4): a self-signed
certificate and key are made for the run (:mod:`umcore.tools.certs`, OpenSSL's command line)
and a ``secure.cfg`` naming them (``use_tls 1``, ``tls_certificate``...) is handed to those
programs and written into the Store's ``store.cfg``; ``--compression lz4`` adds
``compression lz4`` (10.5) the same way.  lbmmon stays plain, as does the SRS's monitoring
context it listens to (topic resolution and UDP are never encrypted).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from lxml import etree

from umcore.tools import drotopology
from umcore.tools.certs import make_certificates
from umcore.tools.children import Child, pump_lines, spawn, started, wait_line
from umcore.tools.children import stop as stop_child

__all__ = ["main"]

TOPIC = "pyum.demo"
SRS_TOPIC = "pyum.demo.srs"
# The persisted pair's topic: configs/umestored.xml keeps "orders" in a disk repository (other
# topics get a small memory one, which keeps only the newest messages).
PERSIST_TOPIC = "orders"
# The restarted umercv: its first run's registration is let go by the Store after the receiver
# activity timeout below (the state kept for the state lifetime); the receiver is down longer
# than that.  A start the Store still refuses ("RegID is in use") is retried, at most
# MAX_RESTARTS times.
RCV_ACTIVITY_TIMEOUT_MS = 3000
RESTART_PAUSE_S = 4.0
MAX_RESTARTS = 3
# umesrc lingers at most this long after its last send: the topology stops it once the
# restarted umercv is done.
PERSIST_LINGER_S = 600
_UMERCV_LINES = (
    f"receiver ume_activity_timeout {RCV_ACTIVITY_TIMEOUT_MS}\n"
    "receiver ume_state_lifetime 3600000\n"
    "context ume_proactive_keepalive_interval 1500\n"
)
_UMERCV_SUMMARY = re.compile(rb"umercv: messages=(\d+) ")
_REGID_IN_USE = re.compile(rb"RegID is in use")
STATS_TOPIC = "/29west/statistics"
# How the collected statistics become a report (the Spark pipeline, pip install 'pyum[spark]').
REPORT_COMMAND = "python -m umcore.spark source-rates --input {db} --output {out}"
_LBMMON_READY = re.compile(rb"lbmmon: receiving statistics on")
_MCS_READY = re.compile(rb"collecting topic")
_LISTENING = re.compile(rb"listening on ([0-9.]+):(\d+)")
_STORE_READY = re.compile(rb"ready to accept registrations")
_STORE_WEB = re.compile(rb"store web monitor on (http://[0-9.]+:\d+)/")
_RECEIVER_READY = re.compile(rb"lbmrcv: receiving topic")
# The Store's configuration (the repository's, not installed with the package).
STORE_XML = Path(__file__).resolve().parents[2] / "configs" / "umestored.xml"


def _transport_lines(transport: str) -> str:
    if transport == "tcp":
        return ""
    if transport in ("lbtipc", "lbtsmx"):  # shared memory: a deleted source is seen at once
        return f"source transport {transport}\n"
    # No datagram tells a receiver that an LBT source was deleted: a 3 s activity timeout
    # gives lbmrcv -E its EOS soon after (the source's session messages, every <= 1.6 s until
    # lbmsrc's 5 s linger ends, keep the session alive until then).
    return f"source transport {transport}\nreceiver transport_{transport}_activity_timeout 3000\n"


def _srs_xml(tmp: Path, lbmrd_port: int, stats_ms: int) -> Path:
    options = (
        ("context", "resolver_unicast_daemon", f"127.0.0.1:{lbmrd_port}"),
        ("context", "resolver_unicast_interface", "127.0.0.1"),
        ("context", "resolver_unicast_port_low", "0"),
        ("context", "resolver_unicast_port_high", "0"),
        ("context", "request_tcp_interface", "127.0.0.1"),
        ("context", "request_tcp_port_low", "0"),
        ("context", "request_tcp_port_high", "0"),
        ("source", "transport_tcp_interface", "127.0.0.1"),
    )
    attrs = "\n      ".join(
        f'<option scope="{scope}" name="{name}" value="{value}"/>' for scope, name, value in options
    )
    path = tmp / "srs.xml"
    path.write_text(
        f"""<?xml version="1.0" encoding="UTF-8" ?>
<!-- written by umcore.tools.topology -->
<um-srs version="1.0">
  <daemon><pid-file>{tmp / "srs.pid"}</pid-file></daemon>
  <srs>
    <interface>127.0.0.1</interface>
    <port>0</port>
    <application-id>demo-srs</application-id>
    <source-state-lifetime>10</source-state-lifetime>
    <source-leave-backoff>100</source-leave-backoff>
  </srs>
  <daemon-monitor topic="{STATS_TOPIC}">
    <lbm-attributes>
      {attrs}
    </lbm-attributes>
    <publishing-interval><default>{stats_ms}</default></publishing-interval>
    <remote-snapshot-request allow="true"/>
    <remote-config-changes-request allow="true"/>
    <monitor-format>pb</monitor-format>
  </daemon-monitor>
</um-srs>
""",
        encoding="utf-8",
    )
    return path


def _store_dir(tmp: Path, resolver_lines: str) -> Path:
    """The Store's working directory: its cache and state directories, ``store.cfg`` and a copy
    of ``configs/umestored.xml`` on port 0 reading ``store.cfg`` (``<lbm-config>``)."""
    work = tmp / "store"
    tree = etree.parse(str(STORE_XML))
    root = tree.getroot()
    for store in root.iter("store"):
        store.set("port", "0")
        for option in store.iter("option"):
            if option.get("name") in ("disk-cache-directory", "disk-state-directory"):
                (work / str(option.get("value"))).mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    (work / "store.cfg").write_text(
        "# written by umcore.tools.topology: the Store resolves through the demo lbmrd\n"
        + resolver_lines
        + _INTERFACES
    )
    daemon = root.find("daemon")
    assert daemon is not None  # the DTD requires it
    lbm_config = etree.SubElement(daemon, "lbm-config")
    lbm_config.text = "store.cfg"
    # the Store web monitor on a free loopback port (its address is printed once it listens)
    etree.SubElement(daemon, "web-monitor").text = "127.0.0.1:0"
    tree.write(str(work / "umestored.xml"), xml_declaration=True, encoding="UTF-8")
    return work


async def _start_store(tmp: Path, resolver_lines: str) -> tuple[Child, int]:
    work = _store_dir(tmp, resolver_lines)
    child = await spawn("store", "-m", "daemons.umestored", "umestored.xml", cwd=work)
    child.stop_signal = signal.SIGTERM
    lines: asyncio.Queue[bytes] = asyncio.Queue()
    child.pump = asyncio.create_task(pump_lines(child, lines))
    try:
        found = await wait_line(child, lines, _LISTENING)
        web = await wait_line(child, lines, _STORE_WEB)
        await wait_line(child, lines, _STORE_READY)
    except BaseException:
        await stop_child(child)
        raise
    print(f"[topo  ] store    web monitor {web.group(1).decode()}/stores (pid {child.proc.pid})")
    return child, int(found.group(2))


# Ports: ephemeral request and resolver ports (UM's small default ranges run out with seven
# programs on one host); interfaces: loopback.
_INTERFACES = (
    "context request_tcp_port_low 0\n"
    "context request_tcp_port_high 0\n"
    "source transport_tcp_interface 127.0.0.1\n"
    "receiver transport_tcp_interface 127.0.0.1\n"
    "source transport_lbtru_interface 127.0.0.1\n"
    "receiver transport_lbtru_interface 127.0.0.1\n"
)


def _secure_lines(tmp: Path, args: argparse.Namespace) -> str:
    """The options of ``--tls`` / ``--compression`` (certificates made for this run), or ""."""
    lines = ""
    if args.tls:
        files = make_certificates(tmp / "tls", "pyum-topology")
        lines += "".join(f"context {k} {v}\n" for k, v in files.options().items())
        print(
            "[topo  ] tls      pairs, persisted pair and Store encrypted: TLS 1.2, "
            f"DHE-RSA-AES256-GCM-SHA384, self-signed certificate made for this run "
            f"({files.certificate})"
        )
    if args.compression != "none":
        lines += f"context compression {args.compression}\n"
        print(f"[topo  ] compress pairs, persisted pair and Store: {args.compression} on TCP")
    return lines


async def _start_mcs(tmp: Path, cfg: Path, db: Path) -> Child:
    """MCS collecting the statistics topic (resolved as ``cfg`` says) into the SQLite ``db``
    (created first when missing, as UM's MCS needs)."""
    db.parent.mkdir(parents=True, exist_ok=True)
    if not db.exists():
        init = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "daemons.mcs", "--init-db", str(db),
            stdout=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        if await init.wait() != 0:
            raise RuntimeError(f"MCS --init-db {db} failed")
    (tmp / "mcs.properties").write_text(f"sqlite_database_path={db.as_posix()}\n")
    xml = tmp / "mcs.xml"
    xml.write_text(
        '<?xml version="1.0" encoding="UTF-8" ?>\n<um-mcs version="1.0">\n'
        "  <connector><type>sqlite</type><properties-file>mcs.properties</properties-file>"
        "</connector>\n"
        f"  <receiver-transport-opts><topic>{STATS_TOPIC}</topic>"
        f"<config-file>{cfg}</config-file></receiver-transport-opts>\n</um-mcs>\n"
    )
    mcs, _ = await started("mcs", "-m", "daemons.mcs", str(xml), ready=_MCS_READY)
    return mcs


async def _pair(
    names: tuple[str, str], topic: str, cfg: Path, extra: list[str], args: argparse.Namespace
) -> tuple[Child, Child]:
    pause_ms = 1000.0 / args.rate if args.rate > 0 else 0.0
    rname, sname = names
    # The source sends a fixed delay (-d 1) after it starts: its receiver must be up by then
    # (a cold interpreter on a busy machine can take longer), or it misses the first messages.
    rcv, _ = await started(
        rname, "-m", "umcore.tools.lbmrcv", "-c", str(cfg), *extra, "-E", "-V", "-s", topic,
        ready=_RECEIVER_READY,
    )  # fmt: skip
    print(f"[topo  ] {rname:8} topic {topic!r} (pid {rcv.proc.pid})")
    src, _ = await started(
        sname, "-m", "umcore.tools.lbmsrc", "-c", str(cfg), *extra, "-V", "-v",
        "-M", str(args.messages), "-l", str(args.length), "-P", f"{pause_ms:g}",
        # UM's lbmsrc lingers 5 s (seed: wait 5-10 s before deleting a source), time for the
        # LBT receivers to repair their last losses; TCP needs no repair time.
        "-d", "1", "-L", "1" if args.transport == "tcp" else "5", topic,
    )  # fmt: skip
    print(
        f"[topo  ] {sname:8} topic {topic!r}, {args.messages} messages of {args.length} "
        f"bytes (pid {src.proc.pid}); transport {args.transport} (and --config files)"
    )
    return rcv, src


async def _watched(name: str, *args: str) -> tuple[Child, list[bytes]]:
    """A child whose output lines are also kept (for its summary line)."""
    child = await spawn(name, *args)
    lines: asyncio.Queue[bytes] = asyncio.Queue()
    child.pump = asyncio.create_task(pump_lines(child, lines))
    kept: list[bytes] = []

    async def keep() -> None:
        while True:
            kept.append(await lines.get())

    task = asyncio.create_task(keep())
    child.pump.add_done_callback(lambda _t: task.cancel())
    return child, kept


async def _persisted(
    tmp: Path,
    cfg: Path,
    extra: list[str],
    store_port: int,
    args: argparse.Namespace,
    children: list[Child],
) -> tuple[int | None, int | None]:
    """The persisted pair (module docstring, 6): the restarted umercv's and umesrc's exit
    statuses."""
    ume_cfg = tmp / "ume.cfg"
    ume_cfg.write_text(
        "# written by umcore.tools.topology: the Store lets a stopped umercv's RegID go soon\n"
        + _UMERCV_LINES
    )
    rcv_args = ("-m", "umcore.tools.umercv", "-c", str(cfg), "-c", str(ume_cfg), *extra)
    first_k = max(1, args.messages // 4)
    rcv, kept = await _watched("umercv", *rcv_args, "-V", "-s", "1", "-r", str(first_k),
                               PERSIST_TOPIC)  # fmt: skip
    children.append(rcv)
    print(
        f"[topo  ] umercv   topic {PERSIST_TOPIC!r} through the store, exits after {first_k} "
        f"messages (pid {rcv.proc.pid})"
    )
    pause_ms = 1000.0 / args.rate if args.rate > 0 else 0.0
    src, _ = await started(
        "umesrc", "-m", "umcore.tools.umesrc", "-c", str(cfg), *extra,
        "-S", f"127.0.0.1:{store_port}", "-V", "-s", "5", "-M", str(args.messages),
        "-l", str(max(args.length, 12)), "-P", f"{pause_ms:g}", "-d", "1",
        "-L", str(PERSIST_LINGER_S), PERSIST_TOPIC,
    )  # fmt: skip
    children.append(src)
    print(
        f"[topo  ] umesrc   topic {PERSIST_TOPIC!r}, {args.messages} persisted messages through "
        f"the store at 127.0.0.1:{store_port} (pid {src.proc.pid})"
    )
    await rcv.proc.wait()
    found = [m for line in kept if (m := _UMERCV_SUMMARY.search(line))]
    consumed = int(found[-1].group(1)) if found else 0
    status: int | None = None
    for _attempt in range(MAX_RESTARTS):
        await asyncio.sleep(RESTART_PAUSE_S)  # the receiver's downtime (see RESTART_PAUSE_S)
        rest = max(1, args.messages - consumed)
        again, kept = await _watched("umercv", *rcv_args, "-V", "-s", "1", "-E", "-r", str(rest),
                                     PERSIST_TOPIC)  # fmt: skip
        children.append(again)
        print(
            f"[topo  ] umercv   restarted after {consumed} messages: recovers what it missed "
            f"from the store, exits after {rest} more (pid {again.proc.pid})"
        )
        status = await again.proc.wait()
        if not (status == 2 and any(_REGID_IN_USE.search(line) for line in kept)):
            break
    await stop_child(src)
    return status, src.proc.returncode


async def _exits(*children: Child) -> None:
    for child in children:
        await child.proc.wait()


async def _run(args: argparse.Namespace) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    children: list[Child] = []
    try:
        with tempfile.TemporaryDirectory(prefix="pyum-topology-") as tmp:
            lbmrd, found = await started(
                "lbmrd", "-m", "daemons.lbmrd", "-i", "127.0.0.1", "-p", "0", ready=_LISTENING
            )
            children.append(lbmrd)
            assert found is not None
            port = int(found.group(2))
            print(f"[topo  ] lbmrd    udp 127.0.0.1:{port} (pid {lbmrd.proc.pid})")
            resolver = (
                f"context resolver_unicast_daemon 127.0.0.1:{port}\n"
                "context resolver_unicast_interface 127.0.0.1\n"
                "context resolver_unicast_port_low 0\n"
                "context resolver_unicast_port_high 0\n"
            )
            secure = _secure_lines(Path(tmp), args)
            store, store_port = await _start_store(Path(tmp), resolver + secure)
            children.append(store)
            print(
                f"[topo  ] store    tcp 127.0.0.1:{store_port} (pid {store.proc.pid}); "
                f"{STORE_XML.name}, ready to accept registrations, resolved through lbmrd"
            )
            stats_ms = max(200, round(args.stats_interval * 1000))
            xml = _srs_xml(Path(tmp), port, stats_ms)
            srs, found = await started("srs", "-m", "daemons.srs", str(xml), ready=_LISTENING)
            children.append(srs)
            assert found is not None
            srs_port = int(found.group(2))
            print(
                f"[topo  ] srs      tcp 127.0.0.1:{srs_port} (pid {srs.proc.pid}); pb statistics "
                f"on {STATS_TOPIC!r} every {stats_ms} ms, resolved through lbmrd"
            )
            transport = _transport_lines(args.transport)
            cfg = Path(tmp) / "demo.cfg"
            cfg.write_text(
                "# written by umcore.tools.topology: topic resolution through the demo lbmrd\n"
                + resolver
                + _INTERFACES
                + transport
            )
            srs_cfg = Path(tmp) / "srs.cfg"
            srs_cfg.write_text(
                "# written by umcore.tools.topology: TCP-based topic resolution through the SRS\n"
                f"context resolver_service 127.0.0.1:{srs_port}\n"
                "context resolver_disable_udp_topic_resolution 1\n"
                "context default_interface 127.0.0.1\n" + _INTERFACES + transport
            )
            extra = [a for f in args.config for a in ("-c", str(Path(f).resolve()))]
            if secure:
                secure_cfg = Path(tmp) / "secure.cfg"
                secure_cfg.write_text(secure)
                extra = ["-c", str(secure_cfg), *extra]
            mon, _ = await started(
                "lbmmon", "-m", "umcore.tools.lbmmon", "-c", str(cfg), ready=_LBMMON_READY
            )
            children.append(mon)
            print(f"[topo  ] lbmmon   topic {STATS_TOPIC!r} through lbmrd (pid {mon.proc.pid})")
            db = Path(args.mcs_db).resolve()
            mcs = await _start_mcs(Path(tmp), cfg, db)
            children.append(mcs)
            print(f"[topo  ] mcs      collecting {STATS_TOPIC!r} into {db} (pid {mcs.proc.pid})")
            apps = Path(tmp) / "apps.cfg"
            apps.write_text(
                "# written by umcore.tools.topology: the lbmsrc/lbmrcv pair publishes statistics\n"
                f"context monitor_interval {max(1, round(args.stats_interval))}\n"
                "context monitor_format pb\ncontext monitor_appid demo-pair\n"
            )
            rcv, src = await _pair(
                ("lbmrcv", "lbmsrc"), TOPIC, cfg, ["-c", str(apps), *extra], args
            )
            children += [rcv, src]
            srcv, ssrc = await _pair(("srsrcv", "srssrc"), SRS_TOPIC, srs_cfg, extra, args)
            children += [srcv, ssrc]
            persisted = asyncio.create_task(
                _persisted(Path(tmp), cfg, extra, store_port, args, children)
            )
            print(f"[topo  ] config   {cfg} and {srs_cfg}  (Ctrl-C stops everything)")
            waiter = asyncio.create_task(stop.wait())
            rcvs_done = asyncio.create_task(_exits(rcv, srcv))
            everything = asyncio.gather(rcvs_done, persisted)
            first: set[asyncio.Future[Any]] = {waiter, everything}
            await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if not everything.done():
                everything.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await everything
            reason = (
                "Ctrl-C"
                if stop.is_set()
                else "the receivers saw their sources finish, the persisted pair is done"
            )
            print(f"[topo  ] stopping ({reason})")
            # Receivers first: stopping a source first would race lbmrcv's own exit on EOS;
            # the persisted pair before the Store.
            ume = [c for c in children if c.name in ("umercv", "umesrc")]
            for child in (rcv, srcv, src, ssrc, *ume, mon, srs, store, mcs, lbmrd):
                await stop_child(child)
            rcs = (rcv.proc.returncode, srcv.proc.returncode)
            ume_rcs = persisted.result() if persisted.done() and not persisted.cancelled() else None
            print(
                f"[topo  ] done; lbmrcv exit status {rcs[0]}, srsrcv exit status {rcs[1]}, "
                f"restarted umercv and umesrc exit statuses {ume_rcs}"
            )
            print(
                f"[topo  ] statistics collected by MCS in {db}; read them with\n"
                f'[topo  ]   sqlite3 {db} "select count(*) from umsmonmsg"\n'
                f"[topo  ]   {REPORT_COMMAND.format(db=db, out=db.parent / 'report')}"
            )
            return 0 if stop.is_set() or (rcs == (0, 0) and ume_rcs == (0, 0)) else 1
    finally:
        for child in reversed(children):
            if child.proc.returncode is None:
                await stop_child(child)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--dro" in argv:  # three TRDs joined by two DROs: a topology of its own
        return drotopology.main(argv)
    p = argparse.ArgumentParser(
        prog="python -m umcore.tools.topology",
        description="Run lbmrd, the SRS and a Store (configs/umestored.xml) on loopback, an lbmsrc/lbmrcv pair resolving through "
        "each (the SRS pair with UDP topic resolution off), a umesrc/umercv pair persisting "
        "through the Store (the receiver restarted: it recovers what it missed) and lbmmon "
        "printing the SRS's live statistics (make run).  Ctrl-C stops everything.",
    )
    p.add_argument("--messages", type=int, default=600_000, help="messages to send (600000)")
    p.add_argument("--rate", type=float, default=1000.0, help="messages per second (1000)")
    p.add_argument("--length", type=int, default=64, help="message length (64)")
    p.add_argument(
        "--stats-interval",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="SRS statistics publishing interval shown by lbmmon (5; at least 0.2)",
    )
    p.add_argument(
        "--transport",
        choices=("tcp", "lbtru", "lbtrm", "lbtipc", "lbtsmx"),
        default="tcp",
        help="source transport: tcp (default), lbtru, lbtrm (LBT-RM over loopback multicast), "
        "lbtipc or lbtsmx (shared memory: every process runs on this host)",
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="extra flat UM configuration file for the four tools (repeatable), e.g. one with "
        "'source transport lbtrm'; pyum_fault_drop_send/_receive (pyum-only, not UM options) "
        "inject loss",
    )
    p.add_argument(
        "--tls",
        action="store_true",
        help="encrypt the pairs and the Store with TLS 1.2 (certificates made for the run)",
    )
    p.add_argument(
        "--compression",
        choices=("none", "lz4"),
        default="none",
        help="compress the pairs' and the Store's TCP connections (none)",
    )
    p.add_argument(
        "--dro",
        action="store_true",
        help="instead: three topic resolution domains joined by two DROs "
        "(umcore.tools.drotopology; its own options)",
    )
    p.add_argument(
        "--mcs-db",
        default=".run/ummon.db",
        metavar="PATH",
        help="the SQLite database MCS collects the statistics into; it outlives the run "
        "(.run/ummon.db)",
    )
    args = p.parse_args(argv)
    try:
        return asyncio.run(_run(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
