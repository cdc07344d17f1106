"""A scraper written the way UM users write them against UM's store web monitor: fetch
``/stores``, each ``/stores/N`` and each ``/stores/N/REGID`` it links to, joining the base URL
and the link with a slash, and read the HTML line by line with regular expressions (the markers
Informatica's public ``store_scraper`` relies on).  What it extracts -- store names, topics,
RegIDs, session ids, sync positions -- must equal what the Store holds."""

from __future__ import annotations

import re
from pathlib import Path

import aiohttp

from tests.web.storekit import NASTY, Clock, build_store, monitor

STORE_LINK = re.compile(r'>Store \d+:<A HREF="([^"]+)"')
STORE_NAME = re.compile(r"H3>Store \d+: ([^<]+)<")
# one topic line: '<LI>"topic" -  <A HREF="...">REGID(SESSION)</A>  <A ...>...</A> ...'
TOPIC_LINK = re.compile(r'(LI>"[^"]+" - +)<A HREF="([^"]+)">[^/]+/A> ')
LINK_TEXT = re.compile(r'<A HREF="[^"]+">(\d+)\((\d+)\)</A>')
TOPIC_OF_LINE = re.compile(r'LI>"([^"]+)" - ')
SRC_REGID = re.compile(r"H3>(\d+):")
SRC_CTX = re.compile(r"H3>\d+: Source \[\d+ ([^ ]+) ")
TOPIC = re.compile(r'DD>Topic: "([^"]+)"')
SESSION = re.compile(r"DD>Session ID: (\d+)")
SYNC = re.compile(r"LI>Sync: \[([^\]]+)\]")
TRANSPORT = re.compile(r"DD>LBM Stats: \[([^\]]+)\]")


def _unescape(text: str) -> str:
    import html

    return html.unescape(text)


async def scrape(base: str) -> list[dict[str, object]]:
    out: list[dict[str, object]] = []
    async with aiohttp.ClientSession() as http:

        async def curl(path: str) -> list[str]:
            async with http.get(f"{base}/{path}") as r:  # "$W/$S": a double slash, as curl sends
                assert r.status == 200, path
                return (await r.text()).splitlines()

        for line in await curl("stores"):
            for store_href in STORE_LINK.findall(line):
                store_lines = await curl(store_href)
                name = next(m.group(1) for ln in store_lines if (m := STORE_NAME.search(ln)))
                ids: list[tuple[str, str, str, str]] = []
                for ln in store_lines:
                    topic_m = TOPIC_OF_LINE.search(ln)
                    rest = ln
                    while (m := TOPIC_LINK.search(rest)) is not None:
                        link = rest[m.end(1) : m.end()]
                        reg, sess = LINK_TEXT.search(link).groups()  # type: ignore[union-attr]
                        assert topic_m is not None
                        ids.append((m.group(2), _unescape(topic_m.group(1)), reg, sess))
                        rest = rest[: m.start()] + m.group(1) + rest[m.end() :]
                for href, listed_topic, reg, sess in ids:
                    src = "\n".join(await curl(href))
                    row: dict[str, object] = {"store": name, "listed": (listed_topic, reg, sess)}
                    for key, rx in (("regid", SRC_REGID), ("srcctx", SRC_CTX), ("topic", TOPIC),
                                    ("sessid", SESSION), ("sync", SYNC), ("transp", TRANSPORT)):  # fmt: skip
                        m2 = rx.search(src)
                        row[key] = _unescape(m2.group(1)) if m2 else None
                    out.append(row)
    return out


async def test_a_regex_scraper_reads_what_the_store_holds(tmp_path: Path) -> None:
    held = build_store(tmp_path)
    mon = monitor(held, Clock(), name="tst")
    host, port = await mon.start("127.0.0.1", 0)
    try:
        rows = await scrape(f"http://{host}:{port}")
    finally:
        await mon.close()
    core = held.rig.core
    expected = {}
    for src in core.registry.sources.values():
        st = src.repository.stats()
        sync = ", ".join(f"{st[k]:x}" for k in ("sync_complete_sqn", "sync_sqn", "contig_sqn"))
        expected[str(src.reg_id)] = {
            "store": "tst",
            "listed": (src.topic, str(src.reg_id), str(src.session_id)),
            "regid": str(src.reg_id),
            "srcctx": f"{src.reply_to[0]}.{src.reply_to[1]}",
            "topic": src.topic,
            "sessid": str(src.session_id),
            "sync": sync,
        }
    got = {str(r["regid"]): {k: v for k, v in r.items() if k != "transp"} for r in rows}
    assert got == expected
    assert len(rows) == 4 and NASTY in {r["topic"] for r in rows}
    s1 = held.sources[0]
    by_reg = {r["regid"]: r for r in rows}
    assert by_reg[str(s1.reg_id)]["sessid"] == "4242"
    assert by_reg[str(s1.reg_id)]["sync"] == "13, 13, 13"
    assert by_reg[str(s1.reg_id)]["transp"] == s1.session.source_string
