"""lbmrd's sans-IO core: the unicast topic-resolution relay.

Theory of operation
-------------------
lbmrd (the "LBM resolver daemon") relays the topic resolution datagrams of contexts that cannot
use multicast.  :mod:`umcore.lbmrd.core` holds the relay as a state machine that takes datagrams
and ``now`` and returns the datagrams to send; the asyncio adapter is the UDP drain loop in
:mod:`umcore.aio.udp`, and the shell (command line, XML configuration, run) is
``daemons/lbmrd``.  The client side of lbmrd (a context talking to one) is
:mod:`umcore.resolver.unicast`, not here.
"""

from umcore.lbmrd.core import LbmrdRelay, NatRule, NatTable

__all__ = ["LbmrdRelay", "NatRule", "NatTable"]
