"""An HF source in its own process, for the failover test: ``python -m
tests.features_spectrum_hf.hf_source_proc PORT TOPIC COUNT``.

It joins the test's multicast topic resolution (group 224.9.10.99, port PORT, as
tests.api.conftest.mcast_config), waits for one receiver, then sends HF sequence numbers
0..COUNT-1 (payload = the number, 4 bytes), one every millisecond, and prints ``ready`` once the
receiver is connected.  The test kills it with SIGKILL mid-stream."""

from __future__ import annotations

import asyncio
import sys

from umcore.api import Context
from umcore.config.attributes import Configuration, reset_global_configuration


async def main(port: int, topic: str, count: int) -> None:
    cfg = Configuration()
    cfg.config_text(
        f"""
        context resolver_multicast_interface 127.0.0.1
        context resolver_multicast_address 224.9.10.99
        context resolver_multicast_port {port}
        context transport_tcp_port_low 0
        context transport_tcp_port_high 0
        source transport_tcp_interface 127.0.0.1
        """,
        "hf_source_proc",
    )
    reset_global_configuration(cfg)
    ctx = await Context.create()
    src = await ctx.create_hf_source(topic)
    async with asyncio.timeout(20):
        while src.receivers < 1:
            await asyncio.sleep(0.01)
    print("ready", flush=True)
    for i in range(count):
        await src.send_hf(i.to_bytes(4, "big"), i, flush=True)
        await asyncio.sleep(0.001)
    await asyncio.sleep(30)  # killed before this ends


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], int(sys.argv[3])))
