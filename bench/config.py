"""Benchmark: load a um.xml with 1,000 topic entries and resolve one topic's options.

Target: load + resolve in 1 s or less.  Baseline in the same run: a plain ``lxml.etree.parse``
of the same file (what any XML reader has to pay).  Also measured: option lookup on the send
path (``Attributes.get_typed``), a dictionary hit, against a plain ``dict`` lookup.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from lxml import etree

from umcore.config.attributes import Configuration, SourceAttributes

TARGET_S = 1.0
TOPICS = 1000
REPEAT = 5
LOOKUPS = 200_000


def _document() -> str:
    topics = []
    for i in range(TOPICS):
        kind = f'pattern="^feed{i}\\..*"' if i % 2 else f'topicname="topic{i}"'
        topics.append(
            f'<topic {kind}><options type="source">'
            f'<option name="transport_lbtrm_multicast_address" default-value="239.1.{i // 250}.{i % 250}"/>'
            f'<option name="ume_flight_size" default-value="{1000 + i}"/>'
            "</options></topic>"
        )
    return (
        '<?xml version="1.0" encoding="UTF-8" ?><um-configuration version="1.0"><templates>'
        '<template name="base"><options type="source"><option name="transport" default-value="lbtrm"/>'
        '</options><options type="context"><option name="default_interface" default-value="127.0.0.1"/>'
        "</options></template></templates><applications>"
        '<application name="bench" template="base"><contexts><context name="ctx"><sources>'
        + "".join(topics)
        + "</sources></context></contexts></application></applications></um-configuration>"
    )


def _best(fn, repeat: int = REPEAT) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "um.xml"
        path.write_text(_document())
        wanted = f"topic{TOPICS - 2}"

        def pyum() -> None:
            cfg = Configuration()
            cfg.config_xml_file(path, "bench")
            attrs = SourceAttributes.from_xml(wanted, context_name="ctx", config=cfg)
            assert attrs.get("ume_flight_size") == str(1000 + TOPICS - 2)

        def baseline() -> None:
            etree.parse(str(path))

        t_pyum = _best(pyum)
        t_base = _best(baseline)
    print(f"   um.xml with {TOPICS} topics: load + resolve {t_pyum * 1e3:.1f} ms")
    print(f"   ratio to the 1 s target: {t_pyum / TARGET_S:.3f} (<= 1.0 meets it)")
    print(f"   ratio to plain lxml.etree.parse ({t_base * 1e3:.1f} ms): {t_pyum / t_base:.1f}x")

    attrs = SourceAttributes()
    plain = {"implicit_batching_interval": 200}
    name = "implicit_batching_interval"

    def lookups() -> None:
        get = attrs.get_typed
        for _ in range(LOOKUPS):
            get(name)

    def dict_lookups() -> None:
        get = plain.__getitem__
        for _ in range(LOOKUPS):
            get(name)

    t_get = _best(lookups)
    t_dict = _best(dict_lookups)
    print(
        f"   option lookup: {t_get / LOOKUPS * 1e9:.0f} ns (plain dict {t_dict / LOOKUPS * 1e9:.0f} ns, "
        f"ratio {t_get / t_dict:.1f}x)"
    )
