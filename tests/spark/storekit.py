"""Store repositories on disk for the ``umestore`` data source tests, written by the Store's own
code: :class:`~umcore.store.repository.Repository` objects driven through a real
:class:`~umcore.aio.storeio.StoreIO` writer thread (as ``umestored`` does), and state files
made by :func:`~umcore.store.state.encode_state`."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

from umcore.aio.storeio import StoreIO
from umcore.store.io import IoDone
from umcore.store.repository import Repository, RepositoryConfig, make_repository
from umcore.store.state import ReceiverState, SourceState, encode_state
from umcore.wire import lbmc

# 16 KiB segments (the smallest: a segment is 1/8 of this, at least 16 KiB): several per source
SMALL_SEGMENTS = RepositoryConfig(kind="disk", size_threshold=1, disk_file_size_limit=128 * 1024)


@dataclass(frozen=True)
class Source:
    reg_id: int
    topic: str
    session_id: int
    sqns: range
    acks: tuple[tuple[int, int], ...] = ()  # (receiver RegID, high ACK sqn)


def payload(reg_id: int, sqn: int) -> bytes:
    return f"{reg_id}/{sqn}:".encode() + bytes([sqn & 0xFF]) * (40 + sqn % 60)


def frame(reg_id: int, sqn: int) -> bytes:
    return lbmc.encode_data(3, sqn, payload(reg_id, sqn))


async def _write(root: Path, sources: list[Source], config: RepositoryConfig, batch: int) -> None:
    cache, state = root / "cache", root / "state"
    cache.mkdir()
    state.mkdir()
    loop = asyncio.get_running_loop()
    repos: dict[int, Repository] = {}

    def on_done(done: IoDone) -> None:
        repo = repos.get(done.job.owner)
        if repo is not None:
            repo.io_done(done, loop.time())
            io.submit(repo.take_io())

    io = StoreIO(loop, on_done)
    for s in sources:
        repos[s.reg_id] = make_repository(
            s.reg_id, config, str(cache), loop.time(), wall_offset=time.time() - loop.time()
        )
        st = SourceState(
            s.reg_id, topic=s.topic, session_id=s.session_id, repository_type=config.kind,
            receivers=[ReceiverState(r, session_id=s.session_id + r, high_ack_sqn=a) for r, a in s.acks],
        )  # fmt: skip
        (state / f"{s.reg_id}-state").write_bytes(encode_state(st))
    for s in sources:
        repo = repos[s.reg_id]
        for start in range(s.sqns.start, s.sqns.stop, batch):
            sqns = range(start, min(start + batch, s.sqns.stop))
            frames = [frame(s.reg_id, q) for q in sqns]
            i = 0
            while i < len(frames):  # append_run takes the common case; append the rest
                k = repo.append_run(sqns.start + i, frames[i:], loop.time())
                if k == 0:
                    repo.append(sqns.start + i, frames[i], loop.time())
                    k = 1
                i += k
            io.submit(repo.take_io())
            await io.drain()
    await io.close()


def write_store(
    root: Path, sources: list[Source], config: RepositoryConfig = SMALL_SEGMENTS, batch: int = 200
) -> tuple[Path, Path]:
    """Write ``sources`` under ``root``: ``(cache directory, state directory)``."""
    asyncio.run(_write(root, sources, config, batch))
    return root / "cache", root / "state"
