"""umercv: receive a persisted topic, with the flags of UM's example persistent receiver.

Theory of operation
-------------------
As :mod:`umcore.tools.lbmrcv` (``-c``, ``-r N``, ``-E``, ``-v``, ``-V`` mean the same), for
sources with Stores.  The receiver registers with the Stores of every source it joins (the
SRI names them), recovers from them what it has not consumed, and receives: messages recovered
from a Store carry ``MSG_FLAG_RETRANSMIT`` (``-RX-`` in ``-vv`` output, ``recovered`` in the
summary).  Every data message is consumed when its callback returns (UM's implicit ACK), unless
``-e N``: then ``ume_explicit_ack_only`` is on and every message whose sequence number is a
multiple of N is ACKed explicitly (with everything before it).

UM's umercv options, applied after the ``-c`` files: ``-i OFFSET`` (default 1000, as UM's)
requests the RegID "source RegID + OFFSET" at each Store (``ume_registration_extended_function``;
0: the Store assigns one), so a restarted umercv is the same receiver to the Stores and recovers
exactly what it missed; ``--session-id`` (``receiver ume_session_id``) and a context or receiver
session ID from the files replace that.  ``-N X`` prints the recovery range each source's Stores
give and starts recovery at its low sequence number + X
(``ume_recovery_sequence_number_info_function``).  ``-u`` sets
``ume_user_receiver_registration_id``, ``-D N`` deregisters after N messages, ``-A`` prints
payloads as text, ``-s N`` prints counts every N seconds, ``-S`` is ``-E``.  Registration
events are always printed (as UM's umercv does); a registration error ends umercv (status 2)
unless ``-x``.

Per source (UM's source string) umercv tracks the highest sequence number delivered: a data
message at or below it is a *duplicate*.  ``-V`` checks verifiable messages (see
:mod:`umcore.tools.common`): the CRC, and that the counter is the message's sequence number
(what ``umesrc -V`` writes).  ``unrecoverable`` counts the messages the loss events report.
SIGINT/SIGTERM end it too.  The last line on stdout is the summary scripts read::

    umercv: messages=N unrecoverable=U duplicates=D recovered=R verify_errors=E bursts=K bos=X eos=Y bytes=B seconds=S rate=R
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from umcore.tools.common import (
    add_config_option,
    apply_flag,
    count,
    load_attributes,
    signal_event,
    tool_main,
    verify,
)

__all__ = ["Counts", "main"]

_M32 = 0xFFFFFFFF
_HALF = 0x80000000
# UM's umercv: "-i, --regid-offset" defaults to 1000.
DEFAULT_REGID_OFFSET = 1000
# Verification errors printed one by one before umercv only counts them.
MAX_PRINTED_ERRORS = 10


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="umercv",
        description="Receive persisted messages on a topic, registering with the sources' UM "
        "Stores and recovering from them (UM example persistent receiver).",
        epilog="The last line is 'umercv: messages=N unrecoverable=U duplicates=D ...'.",
    )
    add_config_option(p, "--config")
    p.add_argument(
        "-r",
        "--msgs",
        dest="count",
        type=count,
        default=0,
        metavar="N",
        help="exit after receiving N messages",
    )
    p.add_argument(
        "-E",
        "--exit",
        dest="exit_on_eos",
        action="store_true",
        help="exit when the sources stop (end of stream)",
    )
    p.add_argument(
        "-S",
        "--stop",
        dest="exit_on_eos",
        action="store_true",
        help="as -E (UM: exit after the source ends, print a summary; umercv always does)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        dest="verbose",
        action="count",
        default=0,
        help="be verbose: events (-v), every message (-vv)",
    )
    p.add_argument(
        "-V",
        "--verify",
        dest="verify",
        action="store_true",
        help="verify message contents and sequence numbers (sent by umesrc -V)",
    )
    p.add_argument(
        "-A",
        "--ascii",
        dest="ascii",
        action="count",
        default=0,
        help="print payloads as text (-A -A: a newline after each)",
    )
    p.add_argument(
        "-D",
        "--deregister",
        dest="deregister",
        type=count,
        metavar="NUM",
        help="deregister the receiver from the Stores after NUM messages",
    )
    p.add_argument(
        "-e",
        "--explicit-ack",
        dest="explicit_ack",
        type=count,
        default=0,
        metavar="N",
        help="ACK explicitly every message whose sequence number is a multiple of N "
        "(ume_explicit_ack_only 1)",
    )
    p.add_argument(
        "-i",
        "--regid-offset",
        dest="regid_offset",
        type=count,
        default=DEFAULT_REGID_OFFSET,
        metavar="OFFSET",
        help="request RegID = source RegID + OFFSET at each Store (default 1000; 0: the Store "
        "assigns one); ignored with a session ID",
    )
    p.add_argument(
        "-N",
        "--seqnum",
        dest="seqnum",
        type=count,
        metavar="X",
        help="print each source's recovery range and start recovery at its low + X",
    )
    p.add_argument(
        "--session-id",
        dest="session_id",
        metavar="NUM",
        help="use Session ID NUM (receiver ume_session_id) instead of RegIDs",
    )
    p.add_argument(
        "-u",
        "--uregid",
        dest="uregid",
        type=count,
        metavar="NUM",
        help="context ume_user_receiver_registration_id NUM (in delivery confirmations)",
    )
    p.add_argument(
        "-x",
        "--no-exit-on-reg-error",
        dest="exit_on_reg_error",
        action="store_false",
        help="keep running after a registration error (default: exit, status 2)",
    )
    p.add_argument(
        "-s",
        "--statistics",
        dest="stats",
        type=count,
        default=0,
        metavar="NUM",
        help="print counts every NUM seconds",
    )
    p.add_argument(
        "--max-sources",
        dest="max_sources",
        type=count,
        metavar="NUM",
        help="accepted for UM's scripts; no effect (pyum's statistics have no fixed array)",
    )
    p.add_argument("topic")
    return p


def flag_lines(args: argparse.Namespace) -> list[tuple[str, str]]:
    """(flag, flat configuration lines) the command line stands for."""
    out: list[tuple[str, str]] = []
    if args.session_id is not None:
        out.append(("--session-id", f"receiver ume_session_id {args.session_id}\n"))
    if args.uregid is not None:
        out.append(("-u", f"context ume_user_receiver_registration_id {args.uregid}\n"))
    if args.explicit_ack:
        out.append(("-e", "receiver ume_explicit_ack_only 1\n"))
    return out


def _serial_gt(a: int, b: int) -> bool:
    """a after b in 32-bit serial arithmetic."""
    return 0 < ((a - b) & _M32) < _HALF


class Counts:
    """What umercv counts (module docstring); :meth:`data` takes one data message."""

    def __init__(self, verify: bool = False) -> None:
        self.check = verify
        self.messages = 0
        self.bytes = 0
        self.recovered = 0
        self.duplicates = 0
        self.unrecoverable = 0
        self.bursts = 0
        self.verify_errors = 0
        self.bos = 0
        self.eos = 0
        self.first: float | None = None
        self.last = 0.0
        self.high: dict[str, int] = {}
        self.sessions: set[str] = set()
        self.errors: list[str] = []

    def data(self, source: str, sqn: int, payload: bytes, retransmit: bool, now: float) -> None:
        self.messages += 1
        self.bytes += len(payload)
        self.last = now
        if self.first is None:
            self.first = now
        if retransmit:
            self.recovered += 1
        high = self.high.get(source)
        if high is not None and not _serial_gt(sqn, high):
            self.duplicates += 1
        else:
            self.high[source] = sqn
        if self.check:
            counter, err = verify(payload, None)
            if err is None and counter != sqn:
                err = f"SQN {sqn} carries message {counter}"
            if err is not None:
                self.verify_errors += 1
                if len(self.errors) < MAX_PRINTED_ERRORS:
                    self.errors.append(f"{err} from {source}")

    def take_errors(self) -> list[str]:
        errors, self.errors = self.errors, []
        return errors

    def summary(self) -> str:
        secs = (self.last - self.first) if self.first is not None else 0.0
        rate = self.messages / secs if secs > 0 else 0.0
        return (
            f"umercv: messages={self.messages} unrecoverable={self.unrecoverable} "
            f"duplicates={self.duplicates} recovered={self.recovered} "
            f"verify_errors={self.verify_errors} bursts={self.bursts} bos={self.bos} "
            f"eos={self.eos} bytes={self.bytes} seconds={secs:.3f} rate={rate:.0f}"
        )


def _out(text: str) -> None:
    print(f"umercv: {text}", flush=True)


def _flag_names(flags: int, names: tuple[tuple[int, str], ...]) -> str:
    return "".join(f" {name}" for bit, name in names if flags & bit)


def _describe_ume(msg: Any) -> str | None:
    """The line UM's umercv prints for a persistence event (None: not one)."""
    from umcore.persist import events as ev

    t, info = msg.type, msg.info
    head = f"[{msg.topic}][{msg.source}]"
    if t == ev.MSG_UME_REGISTRATION_SUCCESS_EX:
        flags = info.flags
        extra = f" OLD[SQN {info.sequence_number}]" if flags & ev.RCV_REG_FLAG_OLD else ""
        extra += _flag_names(flags, ((ev.RCV_REG_FLAG_NOCACHE, "NOCACHE"),))
        if flags & ev.RCV_REG_FLAG_RPP:
            nb = flags & ev.RCV_REG_FLAG_RPP_IS_NON_BLOCKING
            extra += f" RPP is {'non-blocking' if nb else 'blocking'}"
        if flags & ev.RCV_REG_FLAG_SRC_SID:
            extra += f" SRC Session ID {info.src_session_id}"
        return (
            f"{head} store {info.store_index}: {info.store} UME registration successful. "
            f"SrcRegID {info.src_registration_id} RcvRegID {info.rcv_registration_id}. "
            f"Flags 0x{flags:x}{extra}"
        )
    if t == ev.MSG_UME_REGISTRATION_COMPLETE_EX:
        extra = _flag_names(
            info.flags,
            ((ev.RCV_COMPLETE_FLAG_QUORUM, "QUORUM"), (ev.RCV_COMPLETE_FLAG_RXREQMAX, "RXREQMAX")),
        )
        if info.flags & ev.RCV_COMPLETE_FLAG_SRC_SID:
            extra += f" SRC Session ID {info.src_session_id}"
        return (
            f"{head} UME registration complete. SQN {info.sequence_number}. "
            f"Flags 0x{info.flags:x}{extra}"
        )
    if t == ev.MSG_UME_REGISTRATION_ERROR:
        return f"{head} UME registration error: {info.text}"
    if t == ev.MSG_UME_REGISTRATION_CHANGE:
        return f"{head} UME registration change: {info.text}"
    if t == ev.MSG_UME_DEREGISTRATION_SUCCESS_EX:
        return (
            f"{head} store {info.store_index}: {info.store} UME deregistration successful. "
            f"SrcRegID {info.src_registration_id} RcvRegID {info.rcv_registration_id}. "
            f"Flags 0x{info.flags:x}"
        )
    if t == ev.MSG_UME_DEREGISTRATION_COMPLETE_EX:
        return f"{head} UME deregistration complete."
    return None


async def _main(args: argparse.Namespace) -> int:
    from umcore.api import Context
    from umcore.api import message as m
    from umcore.engine.options import Options
    from umcore.persist import events as ev

    load_attributes(args.config)
    for flag, lines in flag_lines(args):
        apply_flag(flag, lines)
    # The session IDs the configuration gives (ConfigError before anything starts).
    sid = int(Options("receiver", None, args.topic).get("ume_session_id") or 0)
    ctx_sid = int(Options("context").get("ume_session_id") or 0)
    offset = args.regid_offset

    done = signal_event()
    c = Counts(args.verify)
    status = 0
    verbose, limit, ascii_ = args.verbose, args.count, args.ascii
    exack = args.explicit_ack
    dereg_at = args.deregister
    holder: list[Any] = []
    tasks: set[asyncio.Task[None]] = set()

    def on_registration(src_reg_id: int, store_index: int, store: str, source: str) -> int:
        regid: int = (src_reg_id + offset) & _M32
        if verbose:
            _out(f"store {store_index}: {store} [{source}][{src_reg_id}] requesting RegID {regid}")
        return regid

    def on_recovery(info: Any) -> int | None:
        new_lo: int = (info.low_sequence_number + args.seqnum) & _M32
        sid_text = f" SRC Session ID {info.src_session_id}" if info.src_session_id else ""
        _out(
            f"[{info.source}] Low SQN {info.low_sequence_number} (will set to {new_lo}), Low "
            f"rxreq max SQN {info.low_rxreq_max_sequence_number}, High SQN "
            f"{info.high_sequence_number}{sid_text}"
        )
        return new_lo

    def on_message(msg: m.Message) -> None:
        nonlocal status
        t = msg.type
        if t == m.MSG_DATA:
            data = msg.data
            sqn = msg.sequence_number
            flags = msg.flags
            c.data(msg.source, sqn, data, bool(flags & m.MSG_FLAG_RETRANSMIT), time.monotonic())
            if c.errors:
                for err in c.take_errors():
                    _out(f"verify: {err}")
            if ascii_:
                text = bytes(data).decode(errors="replace")
                sys.stdout.write(text + "\n" if ascii_ > 1 else text)
            if verbose > 1:
                rx = "-RX-" if flags & m.MSG_FLAG_RETRANSMIT else ""
                otr = "-OTR-" if flags & m.MSG_FLAG_OTR else ""
                _out(f"[{msg.topic}][{msg.source}][{sqn}]{rx}{otr}, {len(data)} bytes")
            if exack and sqn % exack == 0 and holder:
                if verbose:
                    _out(f"sending explicit ACK for SQN {sqn}")
                holder[0].explicit_ack(msg)
            if dereg_at is not None and c.messages == dereg_at and holder:
                _out(f"deregistering after {c.messages} messages")
                task = asyncio.ensure_future(holder[0].deregister())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            if limit and c.messages >= limit:
                done.set()
            return
        line = _describe_ume(msg)
        if line is not None:
            _out(line)
            if t == ev.MSG_UME_REGISTRATION_ERROR and args.exit_on_reg_error:
                status = 2
                done.set()
            return
        key = msg.source + msg.topic
        if t == m.MSG_BOS:
            c.bos += 1
            c.sessions.add(key)
            _out(f"[{msg.topic}][{msg.source}], Beginning of Transport Session")
            return
        if t == m.MSG_EOS:
            c.eos += 1
            c.sessions.discard(key)
            _out(f"[{msg.topic}][{msg.source}], End of Transport Session")
            if args.exit_on_eos and not c.sessions:
                done.set()
            return
        if t == m.MSG_UNRECOVERABLE_LOSS:
            c.unrecoverable += msg.count or 1
        elif t == m.MSG_UNRECOVERABLE_LOSS_BURST:
            c.bursts += 1
            c.unrecoverable += msg.count
        if verbose:
            _out(f"[{msg.topic}][{msg.source}] {msg.type_name} sqn={msg.sequence_number}")

    async def stats() -> None:
        prev = 0
        while True:
            await asyncio.sleep(args.stats)
            n = c.messages
            _out(
                f"{(n - prev) / args.stats:.0f} msgs/s, total {n} messages ({c.recovered} "
                f"recovered), {c.unrecoverable} unrecoverable, {c.duplicates} duplicates"
            )
            prev = n

    use_regid = not (sid or ctx_sid) and offset != 0
    async with await Context.create(None) as ctx:
        rcv = await ctx.create_receiver(
            args.topic,
            on_message,
            on_registration=on_registration if use_regid else None,
            on_recovery_sequence=on_recovery if args.seqnum is not None else None,
        )
        holder.append(rcv)
        if sid or ctx_sid:
            who = "receiver" if sid else "context"
            ids = f"{who} session ID {sid or ctx_sid} (RegIDs are ignored)"
        elif use_regid:
            ids = f"RegID offset {offset}"
        else:
            ids = "RegIDs assigned by the stores"
        _out(f"receiving topic {args.topic!r}; {ids}")
        stats_task = asyncio.create_task(stats()) if args.stats else None
        await done.wait()
        if stats_task is not None:
            stats_task.cancel()
        for task in list(tasks):
            await task
    print(c.summary(), flush=True)
    if status:
        return status
    return 1 if c.verify_errors else 0


def main(argv: list[str] | None = None) -> int:
    return tool_main("umercv", _main(_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
