"""LBT-IPC doorbells in one process: a receiver's eventfd handed to the source and rung when it
sleeps; offers the source must not take; eventfds of receivers that left closed."""

from __future__ import annotations

import array
import asyncio
import functools
import os
import socket
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest

from umcore.aio import shm as aio_shm
from umcore.transport import shmring

WAIT = 10.0


async def until(cond: Callable[[], bool]) -> None:
    """Wait for ``cond`` (checked once per loop pass), at most WAIT seconds."""

    async def poll() -> None:
        while not cond():
            await asyncio.sleep(0)

    await asyncio.wait_for(poll(), WAIT)


def delivered(got: list[bytes], n: int) -> bool:
    return len(got) == n


@pytest.fixture
async def ends() -> AsyncIterator[Callable[..., tuple[Any, Any, list[bytes]]]]:
    """A source end and factory of receiver ends on it, all closed afterwards."""
    made: list[Any] = []

    def make(
        source: aio_shm.ShmSourceEndpoint | None = None,
    ) -> tuple[aio_shm.ShmSourceEndpoint, aio_shm.ShmReceiverConnection, list[bytes]]:
        loop = asyncio.get_running_loop()
        if source is None:
            source = aio_shm.ShmSourceEndpoint(
                loop,
                SimpleNamespace(clients=0),
                kind=shmring.KIND_IPC,
                session_id=int.from_bytes(os.urandom(4), "big") | 1,
                xport_id=4242,
                data_size=1 << 16,
                max_receivers=4,
                max_record=1024,
                receiver_paced=False,
                sm_interval=1.0,
            )
            made.append(source)
        got: list[bytes] = []
        conn = aio_shm.ShmReceiverConnection(
            loop,
            source.name,
            on_record=lambda data: got.append(bytes(data)),
            on_end=lambda exc: None,
            linger=0,
        )
        made.append(conn)
        return source, conn, got

    yield make
    for end in reversed(made):
        if isinstance(end, aio_shm.ShmReceiverConnection):
            end.abort()
        else:
            await end.close(linger=0)


async def test_sleeping_receiver_is_woken_through_its_eventfd(ends: Any) -> None:
    src, conn, got = ends()
    await until(lambda: src.doorbell.knows(conn.doorbell.name))
    for i in range(3):
        await until(lambda: src.ring.sleeping)  # the receiver announced it sleeps
        before = conn.doorbell.eventfd_rings
        src.write(b"record %d" % i)
        await until(functools.partial(delivered, got, i + 1))
        assert conn.doorbell.eventfd_rings == before + 1
    assert got == [b"record 0", b"record 1", b"record 2"]
    assert conn.doorbell.rings == conn.doorbell.eventfd_rings  # never through the socket


async def test_offers_the_source_must_not_take_are_refused(ends: Any) -> None:
    src, conn, _ = ends()
    await until(lambda: src.doorbell.knows(conn.doorbell.name))
    # An end that is not attached to the ring offers an eventfd.
    stranger = aio_shm.Doorbell(asyncio.get_running_loop(), lambda: None)
    try:
        assert stranger.offer(src.doorbell.name)
        await until(lambda: src.doorbell.refused == 1)
    finally:
        stranger.close()
    # An attached receiver's name with something that is not an eventfd.
    r, w = os.pipe()
    try:
        rights = (socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w]).tobytes())
        conn.doorbell.sock.sendmsg([b"E"], [rights], 0, src.doorbell.name)
        await until(lambda: src.doorbell.refused == 2)
    finally:
        os.close(r)
        os.close(w)
    assert src.doorbell.peers == 1 and src.doorbell.knows(conn.doorbell.name)


async def test_eventfds_of_receivers_that_left_are_closed(ends: Any) -> None:
    src, conn, _ = ends()
    _, other, _ = ends(src)
    await until(lambda: src.doorbell.peers == 2)
    conn.abort()
    await until(lambda: src.doorbell.peers == 1)  # the source's liveness check
    assert src.doorbell.knows(other.doorbell.name)
    assert not src.doorbell.knows(conn.doorbell.name)
