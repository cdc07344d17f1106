"""umcore.wire: sans-IO codecs for UM's wire protocols.

Modules (each opens with its own theory of operation and names where its layouts come from):

- ``lbmr``    topic resolution datagrams (TQR, TIR, keepalives, topic management, extended types)
- ``lbmc``    the message-control layer carried by every transport (data, control, UME headers)
- ``lbtrm``   LBT-RM reliable multicast datagrams
- ``lbtru``   LBT-RU reliable unicast datagrams
- ``lbttcp``  LBT-TCP: a stream of LBMC messages
- ``srs``     the Stateful Resolver Service protocol over RSocket
- ``pcap``    capture-file writer used with tshark, our independent oracle

Layouts follow Wireshark 4.0.17's 29West dissectors as recorded in shared/spec/wire-*.md; every
integer is big-endian.  Decoders raise only their codec's subclass of
:class:`umcore.errors.RemoteProtocolError`, whatever the input.
"""
