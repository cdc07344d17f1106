"""``delivery_control_maximum_total_map_entries`` (context) reaches each LBT delivery controller
(real contexts on loopback; the limit's behaviour is tested in memory in
``tests/transport/test_lbt_order_map_limit.py``)."""

from __future__ import annotations

import pytest

from tests.integration.helpers import lbt_lines, load_configuration, until
from umcore.api import Context, Message
from umcore.api import message as m

pytestmark = pytest.mark.usefixtures("reset_configuration")


@pytest.mark.parametrize("transport", ["lbtrm", "lbtru"])
async def test_context_option_sizes_every_dc_order_map(transport: str) -> None:
    load_configuration(
        lbt_lines(transport, resolver_group="224.9.10.97", data_group="224.10.77.8")
        + """
        context delivery_control_maximum_total_map_entries 1234
        """
    )
    async with await Context.create() as sctx, await Context.create() as rctx:
        got: list[Message] = []
        rcvs = [await rctx.create_receiver(t, got.append) for t in ("ml.a", "ml.b")]
        srcs = [await sctx.create_source(t) for t in ("ml.a", "ml.b")]
        await until(lambda: sum(x.type == m.MSG_BOS for x in got) >= 2, "two BOS")
        for s in srcs:
            await s.send(b"x", flush=True)
        await until(lambda: sum(x.type == m.MSG_DATA for x in got) >= 2, "two messages")
        dcs = [dc for js in rctx.joined.values() for dc in js.core.dcs.values()]
        assert len(dcs) == 2
        assert [dc.max_map_entries for dc in dcs] == [1234, 1234]
        for r in rcvs:
            await r.close()
        for s in srcs:
            await s.close()
