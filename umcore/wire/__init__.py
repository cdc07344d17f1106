"""umcore.wire: sans-IO codecs for UM's wire protocols.

Modules (each opens with its own theory of operation and names where its layouts come from):

- ``lbmr``    topic resolution datagrams: TQR/TIR for every transport, topic and packet options,
              keepalives, topic management, queue resolution, extended types incl. DRO
              (helpers ``lbmr_base``, ``lbmr_options``, ``lbmr_ext``; import ``lbmr`` only)
- ``lbmc``    the message-control layer carried by every transport (data, control, UME headers)
- ``lbtrm``   LBT-RM reliable multicast datagrams
- ``lbtru``   LBT-RU reliable unicast datagrams
- ``lbttcp``  LBT-TCP: a stream of LBMC messages
- ``srs``     the Stateful Resolver Service protocol over RSocket
- ``pcap``    capture-file writer used with tshark, our independent oracle
- ``pdm``     UM's Pre-Defined Messages (application payloads, not framing; both byte orders,
              the writer's magic tells): definitions, messages, definition cache, dataclasses
- ``sdm``     Self-Describing Messages (pyum's own bytes: UM has not published SDM's)
- ``msgtypes`` the DECIMAL and TIMESTAMP values PDM and SDM share

Layouts follow Wireshark 4.0.17's 29West dissectors as recorded in shared/spec/wire-*.md; every
integer is big-endian.  Decoders raise only their codec's subclass of
:class:`umcore.errors.RemoteProtocolError`, whatever the input.

Inferred fields (LBMR) — the dissector does not interpret these, so we chose a value to write and
do not check it when reading; confirm against a real UM capture: the TIR ``ttl`` (kept verbatim,
0 by default), the topic-management block ``len`` (block incl. its 4-byte head), the TNWG header
``len`` and remote-context-info ``len`` (whole message from byte 0), the TNWG interest block
``len`` (incl. its 4-byte head), the remote-domain-route ``length`` (16 + 4 x domains), the PSER
option-header ``type`` (0), the packet-option ``VersionOption.version`` encoding, header version 1
for DRO-originated extended messages, and whether UM NUL-terminates the names held in
length-delimited fields (queue-info option, TNWG/remote-context name options, PSER topic,
context-info name, queue-management queue name): we always write the NUL and accept either.
"""
