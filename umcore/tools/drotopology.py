"""``make run ARGS="--dro"``: three topic resolution domains joined by two DROs, on one machine.

Theory of operation
-------------------
The topology of seed 003's "Routing Topologies" (a transit domain in the middle)::

    TRD1 (lbmrd)  --DRO1--  TRD2 (multicast)  --DRO2--  TRD3 (SRS)
    lbmsrc                  lbmwrcv 'pyum\\.dro.*'        lbmrcv pyum.dro

1. **Addresses.**  Each TRD has its own address, 127.0.N.1 (N = 1, 2, 3), its own multicast
   group and port ranges.  Run as root, the topology first re-executes itself inside a network
   namespace of its own (``unshare --net``), where it brings loopback up, adds the three
   addresses to it (``ip addr add 127.0.N.1/32 dev lo``) and routes multicast to it: nothing
   outside is touched and nothing is left behind when it exits.  Without root (or without
   ``unshare``/``ip``) every TRD uses 127.0.0.1 and only the separate lbmrd, SRS, multicast
   groups and ports keep the domains apart (``--no-netns`` forces this fallback).
2. **Resolvers.**  TRD1 has an lbmrd at 127.0.1.1, TRD3 an SRS at 127.0.3.1; TRD2 resolves by
   multicast on its own group.  A flat configuration per TRD (``trdN.cfg``) says so, and names
   the TRD's interface for every transport and port range.
3. **DROs.**  ``tnwgd`` DRO1 has endpoint portals TRD1 (domain 1) and TRD2 (domain 2), DRO2
   TRD2 and TRD3 (domain 3); each portal's ``<lbm-config>`` is its TRD's file.  Each DRO
   publishes its statistics (``<monitor>``, pb) into TRD2, where ``lbmmon`` shows them.
4. **Applications.**  ``lbmrcv -E -V`` on topic ``pyum.dro`` in TRD3, ``lbmwrcv`` on the pattern
   ``^pyum\\.dro`` in TRD2, then ``lbmsrc -V`` in TRD1: every message crosses DRO1 (TRD1 to TRD2,
   where the wildcard receiver takes it too) and DRO2 (TRD2 to TRD3).

The run ends when the TRD3 receiver has seen its source finish (EOS through both DROs), or on
Ctrl-C / SIGTERM, or after ``--timeout`` seconds (status 1); every child is stopped as in
``make run`` (:mod:`umcore.tools.children`).  A child that exits before its readiness line (or
prints none within the start-up bound) ends the run at once with status 1, its output above.
The exit status is the TRD3 receiver's: 0 when it saw every message and its source's end.
Outside the namespace, SIGINT/SIGTERM are passed on to the run inside it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from umcore.tools.children import Child, ChildFailed, pump_lines, spawn, started, wait_line
from umcore.tools.children import stop as stop_child

__all__ = ["Trd", "main", "trds"]

TOPIC = "pyum.dro"
PATTERN = r"^pyum\.dro"
STATS_TOPIC = "/29west/statistics"
# Set in the re-executed child so that it does not try to enter a namespace again.
NETNS_ENV = "PYUM_DRO_NETNS"
_LISTENING = re.compile(rb"listening on ([0-9.]+):(\d+)")
_DRO_READY = re.compile(rb"tnwgd running")
_LBMMON_READY = re.compile(rb"lbmmon: receiving statistics on")


@dataclass(frozen=True, slots=True)
class Trd:
    """One topic resolution domain of the demo: its id, address and the ports it owns."""

    domain_id: int
    address: str
    mc_group: str  # TRD2's topic resolution group; also the base of its LBT-RM groups
    mc_port: int  # resolver_multicast_port (TRD2) and the base of the TRD's port ranges

    def lines(self, resolver: str) -> str:
        """The TRD's flat configuration: ``resolver`` (how it resolves) plus its interfaces."""
        a = self.address
        return (
            f"# written by umcore.tools.drotopology: TRD{self.domain_id}\n"
            + resolver
            + f"context default_interface {a}\n"
            "context request_tcp_port_low 0\ncontext request_tcp_port_high 0\n"
            f"context request_tcp_interface {a}\n"
            f"source transport_tcp_interface {a}\nreceiver transport_tcp_interface {a}\n"
            f"source transport_lbtru_interface {a}\nreceiver transport_lbtru_interface {a}\n"
            f"context transport_lbtrm_multicast_address_low {self.mc_group}\n"
            f"context transport_lbtrm_multicast_address_high {self.mc_group}\n"
            f"context transport_lbtrm_source_port_low {self.mc_port + 100}\n"
            f"context transport_lbtrm_source_port_high {self.mc_port + 199}\n"
            f"context transport_lbtru_port_low {self.mc_port + 200}\n"
            f"context transport_lbtru_port_high {self.mc_port + 299}\n"
            f"context transport_tcp_port_low {self.mc_port + 300}\n"
            f"context transport_tcp_port_high {self.mc_port + 399}\n"
        )


def trds(separate_addresses: bool) -> tuple[Trd, Trd, Trd]:
    """The three TRDs: 127.0.N.1 each in the namespace, 127.0.0.1 for all in the fallback."""
    addr = [f"127.0.{n}.1" if separate_addresses else "127.0.0.1" for n in (1, 2, 3)]
    return (
        Trd(1, addr[0], "239.192.71.1", 21000),
        Trd(2, addr[1], "239.192.72.1", 22000),
        Trd(3, addr[2], "239.192.73.1", 23000),
    )


def _namespace_commands(domains: tuple[Trd, ...]) -> list[list[str]]:
    cmds = [["ip", "link", "set", "lo", "up"], ["ip", "link", "set", "lo", "multicast", "on"]]
    cmds += [["ip", "addr", "add", f"{t.address}/32", "dev", "lo"] for t in domains]
    cmds.append(["ip", "route", "add", "224.0.0.0/4", "dev", "lo"])
    return cmds


def _can_unshare() -> bool:
    return os.geteuid() == 0 and bool(shutil.which("unshare")) and bool(shutil.which("ip"))


def _srs_xml(tmp: Path, trd: Trd) -> Path:
    path = tmp / "srs-trd3.xml"
    path.write_text(
        f"""<?xml version="1.0" encoding="UTF-8" ?>
<!-- written by umcore.tools.drotopology: TRD3's SRS -->
<um-srs version="1.0">
  <daemon><pid-file>{tmp / "srs.pid"}</pid-file></daemon>
  <srs>
    <interface>{trd.address}</interface>
    <port>0</port>
    <application-id>trd3-srs</application-id>
  </srs>
</um-srs>
""",
        encoding="utf-8",
    )
    return path


def _dro_xml(
    tmp: Path, name: str, ends: tuple[tuple[Trd, Path], ...], stats: Path, ivl: int
) -> Path:
    portals = "".join(
        f"""
    <endpoint>
      <name>TRD{t.domain_id}</name>
      <domain-id>{t.domain_id}</domain-id>
      <lbm-config>{cfg}</lbm-config>
    </endpoint>"""
        for t, cfg in ends
    )
    path = tmp / f"{name}.xml"
    path.write_text(
        f"""<?xml version="1.0" encoding="UTF-8" ?>
<!-- written by umcore.tools.drotopology -->
<tnw-gateway version="1.0">
  <daemon>
    <name>{name}</name>
    <log type="console"/>
    <pidfile>{tmp / (name + ".pid")}</pidfile>
    <monitor interval="{ivl}">
      <transport-module module="lbm" options="config={stats};topic={STATS_TOPIC}"/>
      <format-module module="pb"/>
    </monitor>
  </daemon>
  <portals>{portals}
  </portals>
</tnw-gateway>
""",
        encoding="utf-8",
    )
    return path


async def _start_all(
    children: list[Child], *specs: tuple[str, ...], ready: re.Pattern[bytes]
) -> list[tuple[Child, re.Match[bytes] | None]]:
    """Start children at once (``(name, *args)`` each), each until its ``ready`` line; those
    that started join ``children`` (to be stopped) even when another failed, which raises."""

    async def one(spec: tuple[str, ...]) -> tuple[Child, re.Match[bytes] | None]:
        child = await spawn(spec[0], *spec[1:])
        children.append(child)
        lines: asyncio.Queue[bytes] = asyncio.Queue()
        child.pump = asyncio.create_task(pump_lines(child, lines))
        return child, await wait_line(child, lines, ready)

    results = await asyncio.gather(*(one(s) for s in specs), return_exceptions=True)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return results  # type: ignore[return-value]


async def _run(args: argparse.Namespace, separate: bool) -> int:
    try:
        return await _run_children(args, separate)
    except ChildFailed as exc:
        print(f"[topo  ] failed: {exc}", flush=True)
        return 1


async def _run_children(args: argparse.Namespace, separate: bool) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    t1, t2, t3 = trds(separate)
    children: list[Child] = []
    where = "own network namespace, one address per TRD" if separate else "127.0.0.1 for all"
    print(f"[topo  ] three TRDs and two DROs ({where})")
    try:
        with tempfile.TemporaryDirectory(prefix="pyum-dro-topology-") as tmpdir:
            tmp = Path(tmpdir)
            (_, found1), (_, found3) = await _start_all(
                children,
                ("lbmrd", "-m", "daemons.lbmrd", "-i", t1.address, "-p", "0"),
                ("srs", "-m", "daemons.srs", str(_srs_xml(tmp, t3))),
                ready=_LISTENING,
            )
            assert found1 is not None and found3 is not None
            lbmrd_port = int(found1.group(2))
            print(f"[topo  ] TRD1     lbmrd udp {t1.address}:{lbmrd_port}")
            srs_port = int(found3.group(2))
            print(f"[topo  ] TRD3     SRS tcp {t3.address}:{srs_port}")
            cfg1, cfg2, cfg3 = (tmp / f"trd{n}.cfg" for n in (1, 2, 3))
            cfg1.write_text(
                t1.lines(
                    f"context resolver_unicast_daemon {t1.address}:{lbmrd_port}\n"
                    f"context resolver_unicast_interface {t1.address}\n"
                    "context resolver_unicast_port_low 0\ncontext resolver_unicast_port_high 0\n"
                )
            )
            cfg2.write_text(
                t2.lines(
                    f"context resolver_multicast_address {t2.mc_group}\n"
                    f"context resolver_multicast_port {t2.mc_port}\n"
                    f"context resolver_multicast_interface {t2.address}\n"
                )
            )
            cfg3.write_text(
                t3.lines(
                    f"context resolver_service {t3.address}:{srs_port}\n"
                    "context resolver_disable_udp_topic_resolution 1\n"
                )
            )
            print(f"[topo  ] TRD2     multicast {t2.mc_group}:{t2.mc_port} on {t2.address}")
            ivl = max(1, round(args.stats_interval))
            await _start_all(
                children,
                ("lbmmon", "-m", "umcore.tools.lbmmon", "-c", str(cfg2)),
                ready=_LBMMON_READY,
            )
            dros = (("dro1", ((t1, cfg1), (t2, cfg2))), ("dro2", ((t2, cfg2), (t3, cfg3))))
            up = await _start_all(
                children,
                *(
                    (name, "-m", "daemons.tnwgd", str(_dro_xml(tmp, name, ends, cfg2, ivl)))
                    for name, ends in dros
                ),
                ready=_DRO_READY,
            )
            for (name, ends), (dro, _) in zip(dros, up, strict=True):
                a, b = (t.domain_id for t, _cfg in ends)
                print(f"[topo  ] {name}     TRD{a} <-> TRD{b} (pid {dro.proc.pid})")
            common = ["-V"]
            pause_ms = 1000.0 / args.rate if args.rate > 0 else 0.0
            rcv, _ = await started(
                "rcv3", "-m", "umcore.tools.lbmrcv", "-c", str(cfg3), "-E", *common, "-s", TOPIC
            )
            wrcv, _ = await started(
                "wrcv2", "-m", "umcore.tools.lbmwrcv", "-c", str(cfg2), *common, PATTERN
            )
            children += [rcv, wrcv]
            src, _ = await started(
                "src1", "-m", "umcore.tools.lbmsrc", "-c", str(cfg1), *common,
                "-M", str(args.messages), "-l", str(args.length), "-P", f"{pause_ms:g}",
                "-d", "2", "-L", "2", TOPIC,
            )  # fmt: skip
            children.append(src)
            waiter = asyncio.create_task(stop.wait())
            done = asyncio.create_task(rcv.proc.wait())
            await asyncio.wait(
                {waiter, done},
                timeout=args.timeout if args.timeout > 0 else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            waiter.cancel()
            timed_out = not stop.is_set() and not done.done()
            if stop.is_set():
                reason = "Ctrl-C"
            elif timed_out:
                reason = f"--timeout {args.timeout:g} s: the TRD3 receiver did not finish"
            else:
                reason = "the TRD3 receiver saw its source finish"
            print(f"[topo  ] stopping ({reason})")
            for child in (rcv, wrcv, src, *children):
                await stop_child(child)
            print(f"[topo  ] done; TRD3 lbmrcv exit status {rcv.proc.returncode}")
            if timed_out:
                return 1
            return 0 if stop.is_set() or rcv.proc.returncode == 0 else 1
    finally:
        for child in reversed(children):
            if child.proc.returncode is None:
                await stop_child(child)


def _enter_namespace(argv: list[str]) -> int | None:
    """Re-execute inside ``unshare --net`` with the TRDs' addresses; None: run here instead."""
    if os.environ.get(NETNS_ENV) or not _can_unshare():
        return None
    script = "; ".join(" ".join(c) for c in _namespace_commands(trds(True)))
    env = dict(os.environ, **{NETNS_ENV: "1"})
    cmd = [sys.executable, "-m", "umcore.tools.drotopology", *argv]
    inner = f"{script} && exec {' '.join(map(_quote, cmd))}"
    # unshare and sh exec: the child's pid is the run inside the namespace; pass signals on
    proc = subprocess.Popen(["unshare", "--net", "--", "sh", "-c", inner], env=env)

    def forward(sig: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, sig)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, forward)
    return proc.wait()


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="make run ARGS='--dro'",
        description="Three topic resolution domains joined by two DROs, on one machine.",
    )
    p.add_argument("--dro", action="store_true", help="(accepted: this is the --dro topology)")
    p.add_argument("--messages", type=int, default=600_000, help="messages to send (600000)")
    p.add_argument("--rate", type=float, default=1000.0, help="messages per second (1000)")
    p.add_argument("--length", type=int, default=64, help="message length (64)")
    p.add_argument("--stats-interval", type=float, default=5.0, help="DRO statistics (5 s)")
    p.add_argument(
        "--no-netns", action="store_true", help="stay in this namespace: every TRD on 127.0.0.1"
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=0.0,
        help="stop after this many seconds with status 1 if the TRD3 receiver has not "
        "finished (0: no limit)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if not args.no_netns:
        rc = _enter_namespace(argv)
        if rc is not None:
            return rc
    separate = bool(os.environ.get(NETNS_ENV)) and not args.no_netns
    try:
        return asyncio.run(_run(args, separate))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
