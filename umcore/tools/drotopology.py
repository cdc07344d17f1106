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

Two variants (issue 20's peer portals), TRD2 left out of both:

* ``--peer``: DRO1 (TRD1 and a ``<peer>`` portal accepting on 127.0.1.1) and DRO2 (a ``<peer>``
  portal connecting to it, and TRD3) joined by a DRO-to-DRO link (``<single-tcp>``); the
  wildcard receiver and lbmmon move to TRD3 and TRD1.
* ``--parallel``: DRO_A (TRD1) and DRO_B (TRD3) joined through two DROs with peer portals only,
  DRO_P (links of cost 2) and DRO_Q (cost 5), on 127.0.2.1.  The traffic takes P; after a
  third of the run DRO_P is SIGKILLed and the traffic moves to Q (the receiver sees EOS from
  the proxy source of the lost path, then BOS from the new one), after two thirds DRO_P is
  started again and the traffic moves back.  What was in flight on a path when the traffic
  moved is lost to the TCP receiver (its summary's ``unrecoverable``), so this variant ends when
  the source has finished (plus :data:`PARALLEL_GRACE_S`) with status 0.

Both use short route-information timers (:data:`_ROUTE_TIMERS`) and give the source more time
before its first send (:data:`SEND_DELAY_PEER_S`).  The source starts only once both receivers
exist (their readiness lines), so its delay is all for topic resolution and the DROs' joins.

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

from umcore.tools.children import Child, ChildFailed, pump_lines, spawn, wait_line
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
# lbmrcv / lbmwrcv: printed once the receiver exists (its topic resolution has begun).
_RECEIVER_READY = re.compile(rb"lbmrcv: receiving topic")
# lbmsrc: printed once the source exists.
_SOURCE_READY = re.compile(rb"lbmsrc: topic .* source ")
# lbmsrc -d: seconds between creating the source and its first send (see _run_children).
SEND_DELAY_S = 2
SEND_DELAY_PEER_S = 5
# The parallel variant's receiver runs without -E (see _run_children): it is stopped this long
# after the source finished.
PARALLEL_GRACE_S = 3.0
# The first peer-link port of the peer variants (inside the namespace nothing else listens).
PEER_PORT_BASE = 24510


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


def _endpoint(trd: Trd, cfg: Path) -> str:
    return (
        f"\n    <endpoint><name>TRD{trd.domain_id}</name><domain-id>{trd.domain_id}</domain-id>"
        f"<lbm-config>{cfg}</lbm-config></endpoint>"
    )


def _peer(name: str, cost: int, iface: str, port: int, connect_to: str | None = None) -> str:
    """A ``<peer>`` portal: the acceptor of ``iface:port``, or (``connect_to``) its initiator.
    Short keepalive and reconnect timers, so that a lost peer is seen and rejoined in seconds."""
    if connect_to is None:
        side = f"<acceptor><listen-port>{port}</listen-port></acceptor>"
    else:
        side = (
            f'<initiator reconnect-interval="1000"><address>{connect_to}</address>'
            f"<port>{port}</port></initiator>"
        )
    return (
        f"\n    <peer><name>{name}</name><cost>{cost}</cost>"
        f"<single-tcp><interface>{iface}</interface>{side}</single-tcp>"
        f'<gateway-keepalive idle="no" interval="1000" timeout="5000"/></peer>'
    )


# Route information timers of the peer variants (UM's defaults but a 1 s recalculation back-off
# instead of 5 s): the parallel-path demo moves traffic within about two seconds.
_ROUTE_TIMERS = (
    '\n    <route-info propagation-interval="1000" check-interval="750" timeout="4000"/>'
    '\n    <route-recalculation backoff-interval="1000" warning-interval="10000"/>'
)


def _dro_xml(
    tmp: Path, name: str, portals: str, stats: Path, ivl: int, route_timers: str = ""
) -> Path:
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
    </monitor>{route_timers}
  </daemon>
  <portals>{portals}
  </portals>
</tnw-gateway>
""",
        encoding="utf-8",
    )
    return path


def _dros(
    args: argparse.Namespace, tmp: Path, trd: tuple[Trd, Trd, Trd], cfg: tuple[Path, Path, Path]
) -> tuple[list[tuple[str, Path, str]], Path, Path]:
    """The DROs of the chosen variant, as ``(name, xml, what it joins)``; the configuration
    their statistics (and lbmmon) use; the configuration of the wildcard receiver's TRD."""
    (t1, t2, t3), (cfg1, cfg2, cfg3) = trd, cfg
    ivl = max(1, round(args.stats_interval))
    port = PEER_PORT_BASE if os.environ.get(NETNS_ENV) else 30000 + os.getpid() % 20000
    if args.peer:
        dro1 = _endpoint(t1, cfg1) + _peer("TO_DRO2", 1, t1.address, port)
        dro2 = _peer("TO_DRO1", 1, t3.address, port, connect_to=t1.address) + _endpoint(t3, cfg3)
        timers = _ROUTE_TIMERS
        return (
            [
                ("dro1", _dro_xml(tmp, "dro1", dro1, cfg1, ivl, timers), "TRD1 <-> peer link"),
                ("dro2", _dro_xml(tmp, "dro2", dro2, cfg1, ivl, timers), "peer link <-> TRD3"),
            ],
            cfg1,
            cfg3,
        )
    if args.parallel:
        wan = t2.address  # the address of the two middle DROs (no TRD2 in this variant)
        a = (
            _endpoint(t1, cfg1)
            + _peer("TO_P", 2, t1.address, port, connect_to=wan)
            + _peer("TO_Q", 5, t1.address, port + 1, connect_to=wan)
        )
        b = (
            _endpoint(t3, cfg3)
            + _peer("TO_P", 2, t3.address, port + 2, connect_to=wan)
            + _peer("TO_Q", 5, t3.address, port + 3, connect_to=wan)
        )
        mid = {
            "dro_p": _peer("TO_A", 2, wan, port) + _peer("TO_B", 2, wan, port + 2),
            "dro_q": _peer("TO_A", 5, wan, port + 1) + _peer("TO_B", 5, wan, port + 3),
        }
        out = [("dro_a", _dro_xml(tmp, "dro_a", a, cfg1, ivl, _ROUTE_TIMERS), "TRD1 <-> P, Q")]
        out += [
            (n, _dro_xml(tmp, n, x, cfg1, ivl, _ROUTE_TIMERS), f"A <-> B, cost {c}")
            for (n, x), c in zip(mid.items(), (2, 5), strict=True)
        ]
        out.append(("dro_b", _dro_xml(tmp, "dro_b", b, cfg1, ivl, _ROUTE_TIMERS), "P, Q <-> TRD3"))
        return out, cfg1, cfg3
    return (
        [
            ("dro1", _dro_xml(tmp, "dro1", _endpoint(t1, cfg1) + _endpoint(t2, cfg2), cfg2, ivl),
             "TRD1 <-> TRD2"),
            ("dro2", _dro_xml(tmp, "dro2", _endpoint(t2, cfg2) + _endpoint(t3, cfg3), cfg2, ivl),
             "TRD2 <-> TRD3"),
        ],
        cfg2,
        cfg2,
    )  # fmt: skip


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


async def _fail_over(children: list[Child], dro: Child, name: str, xml: Path, span: float) -> None:
    """The parallel variant's demo: kill the cheaper path's DRO after a third of the run (the
    traffic moves to the cost-5 path) and start it again after two thirds (the traffic moves
    back once its routes are known again)."""
    await asyncio.sleep(span / 3)
    print(f"[topo  ] killing {name} (SIGKILL): traffic moves to the cost-5 path", flush=True)
    with contextlib.suppress(ProcessLookupError):
        os.kill(dro.proc.pid, signal.SIGKILL)
    await asyncio.sleep(span / 3)
    ((again, _),) = await _start_all(
        children, (name, "-m", "daemons.tnwgd", str(xml)), ready=_DRO_READY
    )
    print(f"[topo  ] {name} restarted (pid {again.proc.pid}): traffic moves back", flush=True)


async def _source_done(src: Child) -> None:
    """The parallel variant's end: the source finished, and the last messages had time to cross."""
    await src.proc.wait()
    await asyncio.sleep(PARALLEL_GRACE_S)


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
    shape = (
        "TRD1 and TRD3 joined by a DRO-to-DRO peer link"
        if args.peer
        else "TRD1 and TRD3 joined by two parallel DRO paths"
        if args.parallel
        else "three TRDs and two DROs"
    )
    print(f"[topo  ] {shape} ({where})")
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
            if not (args.peer or args.parallel):
                print(f"[topo  ] TRD2     multicast {t2.mc_group}:{t2.mc_port} on {t2.address}")
            dros, stats_cfg, wild_cfg = _dros(args, tmp, (t1, t2, t3), (cfg1, cfg2, cfg3))
            await _start_all(
                children,
                ("lbmmon", "-m", "umcore.tools.lbmmon", "-c", str(stats_cfg)),
                ready=_LBMMON_READY,
            )
            up = await _start_all(
                children,
                *((name, "-m", "daemons.tnwgd", str(xml)) for name, xml, _ in dros),
                ready=_DRO_READY,
            )
            for (name, _, joins), (dro, _) in zip(dros, up, strict=True):
                print(f"[topo  ] {name:8} {joins} (pid {dro.proc.pid})")
            common = ["-V"]
            pause_ms = 1000.0 / args.rate if args.rate > 0 else 0.0
            # The source's first send waits for topic resolution across the DROs; across peer
            # links also for the first route information and its recalculation (see
            # _ROUTE_TIMERS).
            delay = SEND_DELAY_PEER_S if args.peer or args.parallel else SEND_DELAY_S
            # -E: exit at the source's end (EOS through every DRO).  Not in the parallel variant,
            # where losing the cheaper path ends the proxy source on that path (UM's final
            # advertisements: receivers see EOS, then BOS from the proxy of the other path).
            until_eos = [] if args.parallel else ["-E"]
            # The source's delay counts from its creation, so the receivers must exist by then:
            # each is started and waited for until its readiness line (on a loaded machine a
            # child's start-up alone can take longer than the delay).
            (rcv, _), (wrcv, _) = await _start_all(
                children,
                ("rcv3", "-m", "umcore.tools.lbmrcv", "-c", str(cfg3), *until_eos, *common, "-s",
                 TOPIC),
                ("wrcv", "-m", "umcore.tools.lbmwrcv", "-c", str(wild_cfg), *common, PATTERN),
                ready=_RECEIVER_READY,
            )  # fmt: skip
            ((src, _),) = await _start_all(
                children,
                ("src1", "-m", "umcore.tools.lbmsrc", "-c", str(cfg1), *common,
                 "-M", str(args.messages), "-l", str(args.length), "-P", f"{pause_ms:g}",
                 "-d", str(delay), "-L", "2", TOPIC),
                ready=_SOURCE_READY,
            )  # fmt: skip
            if args.parallel:
                name, xml, _ = dros[1]
                span = args.messages / args.rate if args.rate > 0 else 30.0
                failover = asyncio.create_task(_fail_over(children, up[1][0], name, xml, span))
            waiter = asyncio.create_task(stop.wait())
            done = asyncio.create_task(_source_done(src) if args.parallel else rcv.proc.wait())
            await asyncio.wait(
                {waiter, done},
                timeout=args.timeout if args.timeout > 0 else None,
                return_when=asyncio.FIRST_COMPLETED,
            )
            waiter.cancel()
            if args.parallel:
                failover.cancel()
            timed_out = not stop.is_set() and not done.done()
            if stop.is_set():
                reason = "Ctrl-C"
            elif timed_out:
                reason = f"--timeout {args.timeout:g} s: the TRD3 receiver did not finish"
            elif args.parallel:
                reason = "the source finished"
            else:
                reason = "the TRD3 receiver saw its source finish"
            print(f"[topo  ] stopping ({reason})")
            for child in (rcv, wrcv, src, *children):
                await stop_child(child)
            print(f"[topo  ] done; TRD3 lbmrcv exit status {rcv.proc.returncode}")
            if timed_out:
                return 1
            if args.parallel:
                # A path change is not loss-free: what was in flight on the old path when the
                # traffic moved is lost to a TCP receiver (UM recovers it only through late
                # join / OTR from the source); the receiver's summary above counts it.
                print(
                    "[topo  ] the receiver's 'unrecoverable' count is what was in flight on a "
                    "path when the traffic moved"
                )
                return 0
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
    variant = p.add_mutually_exclusive_group()
    variant.add_argument(
        "--peer",
        action="store_true",
        help="TRD2 replaced by a DRO-to-DRO peer link (single-tcp) between the two DROs",
    )
    variant.add_argument(
        "--parallel",
        action="store_true",
        help="two parallel DRO paths between TRD1 and TRD3 (peer links of cost 2 and 5); "
        "the cheaper one's DRO is killed after a third of the run and restarted after two",
    )
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
