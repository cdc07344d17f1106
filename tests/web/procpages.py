"""Pages for the web-process tests: one registration function for the daemon (with a model whose
data it serves) and for the child process (``child``, the factory it imports: no model)."""

from __future__ import annotations

import time
from typing import Any

from umcore.daemon.web import Block, Html, Para, Table, WebPages


class Model:
    """What the "daemon" holds: named counters, and how often each page's data was taken."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {"alpha": 1, "beta": 2}
        self.taken = 0

    def overview(self) -> dict[str, Any]:
        self.taken += 1
        return {"counters": dict(self.counters), "note": "<b>escaped</b>"}

    def counter(self, params: dict[str, str]) -> dict[str, Any] | None:
        self.taken += 1
        name = params["name"]
        return {"name": name, "value": self.counters[name]} if name in self.counters else None

    def bump(self, params: dict[str, str]) -> dict[str, Any] | None:
        name = params["name"]
        if name not in self.counters:
            return None
        self.counters[name] += 1
        return {"name": name, "value": self.counters[name]}


def overview_blocks(d: dict[str, Any]) -> list[Block]:
    return [
        Para(d["note"]),
        Table(["counter", "value"], [[k, v] for k, v in sorted(d["counters"].items())]),
    ]


def counter_blocks(d: dict[str, Any]) -> list[Block]:
    return [Html("<P>Counter {} = {}</P>\n", d["name"], d["value"])]


def build(model: Model | None) -> WebPages:
    pages = WebPages(monotonic=time.monotonic, label="test monitor", title="testd", daemon="testd")

    def need() -> Model:
        assert model is not None, "the child never takes data itself"
        return model

    pages.add_page("/", title="testd", data=lambda: need().overview(), render=overview_blocks)
    pages.add_route(
        "/counters/{name}",
        title="Counter {name}",
        data=lambda p: need().counter(p),
        render=counter_blocks,
    )
    pages.add_action(
        "/counters/{name}/bump",
        title="Counter {name} bumped",
        run=lambda p: need().bump(p),
        render=counter_blocks,
    )
    return pages


def child() -> WebPages:
    """The factory the child process imports (``tests.web.procpages:child``)."""
    return build(None)
