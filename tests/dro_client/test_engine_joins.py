"""Which joined sessions get the DRO-loss controller: a proxy source's TCP session with
``transport_tcp_dro_loss_recovery_timeout`` > 0, a proxy source's LBT-IPC session with
``transport_lbtipc_dro_loss_recovery_timeout`` > 0, nothing else."""

from __future__ import annotations

from typing import Any

import pytest

from umcore.api import Context
from umcore.engine.options import Options
from umcore.features.droloss import DroLossController
from umcore.resolver.core import SourceInfo
from umcore.transport.tcp import DeliveryController
from umcore.wire import lbmr

TCP = lbmr.TCPInfo("127.0.0.1", 1, 0x55)
IPC = lbmr.LBTIPCInfo(0x7FFFFFFE, 0x66, 3)  # another host's segment: nothing is opened


def _noop(*_a: Any) -> None:
    return None


@pytest.mark.parametrize(
    ("transport", "proxy", "options", "want"),
    [
        (TCP, True, {"transport_tcp_dro_loss_recovery_timeout": "500"}, DroLossController),
        (TCP, True, {}, DeliveryController),  # default 0: UM's immediate loss
        (TCP, False, {"transport_tcp_dro_loss_recovery_timeout": "500"}, DeliveryController),
        (IPC, True, {"transport_lbtipc_dro_loss_recovery_timeout": "500"}, DroLossController),
        (IPC, True, {"transport_tcp_dro_loss_recovery_timeout": "500"}, DeliveryController),
    ],
)
async def test_the_controller_a_join_gets(
    transport: Any, proxy: bool, options: dict[str, str], want: type
) -> None:
    ctx = await Context.create({"request_tcp_bind_request_port": "0"})
    try:
        info = SourceInfo("T", 1, transport, proxy=proxy)
        js = ctx.open_join(info, Options("receiver", options, "T"))
        dc = js.new_dc(1, "T", _noop, _noop, 1024)
        assert type(dc) is want
        if isinstance(dc, DroLossController):
            assert dc.timeout == pytest.approx(0.5)
        ctx.session_ended(js)
    finally:
        await ctx.close()


@pytest.mark.parametrize(("entries", "want"), [(None, 200_000), ("5000", 5000), ("0", 0)])
async def test_the_hold_bound_is_the_context_order_map_bound(
    entries: str | None, want: int
) -> None:
    """The controller holds at most ``delivery_control_maximum_total_map_entries`` (context;
    UM's bound on each delivery controller's order map, default 200000, 0 = unbounded)."""
    attrs = {"request_tcp_bind_request_port": "0"}
    if entries is not None:
        attrs["delivery_control_maximum_total_map_entries"] = entries
    ctx = await Context.create(attrs)
    try:
        info = SourceInfo("T", 1, TCP, proxy=True)
        opts = {"transport_tcp_dro_loss_recovery_timeout": "500"}
        js = ctx.open_join(info, Options("receiver", opts, "T"))
        dc = js.new_dc(1, "T", _noop, _noop, 1024)
        assert isinstance(dc, DroLossController) and dc.max_held == want
        ctx.session_ended(js)
    finally:
        await ctx.close()
