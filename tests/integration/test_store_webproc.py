"""umestored's web monitor served from its child process (umcore.daemon.webproc), end to end: a
real Store with a persisted source, its pages fetched over HTTP from the child, the rate reset
run in the Store, and the child gone when the Store is killed (no orphan holds the port)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import aiohttp
import pytest

from tests.integration.helpers import until
from tests.integration.persistkit import WAIT, WEB, SourceEvents, Topology, source_attrs
from umcore.api import Context
from umcore.daemon import webproc

pytestmark = [
    pytest.mark.usefixtures("reset_configuration"),
    pytest.mark.skipif(not webproc.supported(), reason="pages are served in-process here"),
]


def alive(pid: int) -> bool:
    """Running (a zombie waiting for init to reap it has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


async def test_store_pages_come_from_the_child_process(topo: Topology) -> None:
    st = await topo.add_store("memory", web=True)
    assert st.proc is not None and st.web
    m = WEB.search("\n".join(st.lines()))
    assert m is not None and m.group(2), "the log names the process serving the pages"
    child = int(m.group(2))
    assert child != st.proc.proc.pid and alive(child)

    events = SourceEvents()
    async with await Context.create() as ctx:
        src = await ctx.create_source("persisted", attributes=source_attrs([st]), on_event=events)
        await asyncio.wait_for(src.wait_registered(), WAIT)
        async with aiohttp.ClientSession() as http:

            async def page(path: str) -> str:
                async with http.get(st.web + path) as r:
                    assert r.status == 200, (path, r.status)
                    return await r.text()

            async def store_page_lists_source() -> bool:
                return (
                    re.search(r'"persisted" -  <A HREF="/stores/0/(\d+)">', await page("/stores/0"))
                    is not None
                )

            async with asyncio.timeout(WAIT):  # a page's sample is at most a second old
                while not await store_page_lists_source():
                    await asyncio.sleep(0.2)
            body = await page("/stores/0")
            regid = re.search(r'<A HREF="/stores/0/(\d+)">', body)
            assert regid is not None
            source = await page(f"/stores/0/{regid.group(1)}")
            assert '<DD>Topic: "persisted"' in source
            async with http.post(st.web + "/stores/0/reset-rate-stats") as r:
                assert r.status == 200 and "Rate Statistics have been reset" in await r.text()
            async with http.get(st.web + "/stores/7") as r:
                assert r.status == 404
        await src.close()

    await st.kill()  # SIGKILL: the child's pipe closes and it exits by itself
    await until(lambda: not alive(child), "the web process exits with the Store", timeout=WAIT)
