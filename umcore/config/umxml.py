"""UM XML configuration files (``um.xml``): templates, applications, contexts, topics, restrictions.

Theory of operation
-------------------
A ``um.xml`` file is a table of option *defaults* and *restrictions* keyed by application name,
context name, event-queue name and topic.  Loading (:meth:`UMXml.load` / :meth:`UMXml.from_text`)
validates the file against ``schemas/um.dtd``, checks every option name and value against the
registry, compiles topic patterns, and keeps each element's options as a *block*:
``{scope: {option: OptionRule}}``.  Nothing is applied at load time.

Resolving an object (:meth:`Application.resolve`) walks a chain of blocks, later ones winning:

- context ``N``: application templates → ``<contexts template>`` → every ``<context name=N>``
  (its templates, then its own ``<options>``);
- source/receiver topic ``T`` in context ``N``: the context chain above (``<options
  type="source">`` placed there apply to the context's sources) → ``<sources|receivers
  template>`` → every ``<topic>`` matching ``T`` in document order (``topicname`` exact, or
  ``pattern`` searched as a regular expression), each with its templates then its options;
- wildcard receiver with pattern ``P``: context chain → ``<wildcard-receivers template>`` →
  ``<wildcard-receiver pattern=P>`` (exact pattern string);
- event queue ``N``: application templates → ``<event-queues template>`` → ``<event-queue
  name=N>``.

A template list ``template="a,b"`` applies ``a`` then ``b``.  An element without ``name`` matches
only an object without a name.  Per option, the last ``default-value`` in the chain is the XML
default and the last ``<option>`` carrying ``order``/``<allow>``/``<deny>`` is the restriction.
Restriction semantics follow Apache's: ``order="deny,allow"`` (the default) rejects a value listed
in ``<deny>`` unless it is also listed in ``<allow>``; ``order="allow,deny"`` accepts only values
listed in ``<allow>`` and not in ``<deny>``.  Values are compared after parsing with the option's
type, so ``0x10`` and ``16`` are the same value.  Container ``order`` plus the children's ``rule``
decide whether an object may be created: the *last* matching element's rule wins; with no match,
``deny,allow`` allows and ``allow,deny`` denies.

Topic patterns: UM uses PCRE (and deprecated POSIX regex); pyum uses Python's :mod:`re`, searched
(unanchored) like PCRE.  Differences that matter in practice: no recursion ``(?R)``, no ``\\K``,
no callouts, no ``\\p{..}`` Unicode properties, and ``\\Z`` means end-of-string only.  A pattern
``re`` cannot compile is a load error naming the file and line.

Not supported: XInclude (refused, like every external reference), ``http://``/``ftp://`` URLs and
``<license>`` handling (kept as text).  ``<hfxs>`` topics resolve like sources for scope ``hfx``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lxml import etree

from umcore.config import xmlfile
from umcore.config.options import XML_SCOPES, Option, lookup, parse_value
from umcore.config.xmlfile import line_of
from umcore.errors import ConfigError

__all__ = ["Application", "OptionRule", "Resolution", "UMXml"]

SCHEMA = "um.dtd"
ORDERS = ("deny,allow", "allow,deny")
# UM's name limits (xmlconfigurationfiles.html).
MAX_OBJECT_NAME = 127
MAX_TEMPLATE_NAME = 99
_OBJECT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,127}$")
_PRINTABLE = re.compile(r"^[\x20-\x7e]{1,99}$")


class OptionRule:
    """One ``<option>`` element: an XML default and/or a restriction for one option."""

    __slots__ = (
        "allow",
        "default",
        "deny",
        "has_default",
        "line",
        "option",
        "order",
        "restricts",
        "source",
    )

    def __init__(self, option: Option, source: str, line: int | None) -> None:
        self.option = option
        self.source = source
        self.line = line
        self.has_default = False
        self.default: Any = None
        self.order = "deny,allow"
        self.allow: list[Any] = []
        self.deny: list[Any] = []
        self.restricts = False

    def permits(self, value: Any) -> bool:
        if not self.restricts:
            return True
        if self.order == "allow,deny":
            return value in self.allow and value not in self.deny
        return value not in self.deny or value in self.allow

    def describe(self) -> str:
        fmt = self.option.type.format
        if self.order == "allow,deny":
            return "only " + " | ".join(fmt(v) for v in self.allow if v not in self.deny)
        return "anything except " + " | ".join(fmt(v) for v in self.deny if v not in self.allow)


Block = dict[str, dict[str, OptionRule]]


class Resolution:
    """What the XML says about one object: defaults, restrictions, and whether it is denied."""

    __slots__ = ("defaults", "denied", "restrictions")

    def __init__(self) -> None:
        self.defaults: dict[str, OptionRule] = {}
        self.restrictions: dict[str, OptionRule] = {}
        self.denied: str | None = None

    def add(self, scope: str, blocks: Iterable[Block]) -> None:
        for block in blocks:
            for name, rule in block.get(scope, {}).items():
                if rule.has_default:
                    self.defaults[name] = rule
                if rule.restricts:
                    self.restrictions[name] = rule


class _Item:
    """A matchable element: context, event queue, topic or wildcard receiver."""

    __slots__ = ("blocks", "groups", "key", "line", "regex", "rule")

    def __init__(self, key: str | None, regex: re.Pattern[str] | None, rule: str, line: int | None):
        self.key = key
        self.regex = regex
        self.rule = rule
        self.line = line
        self.blocks: list[Block] = []
        self.groups: dict[
            str, _Group
        ] = {}  # for contexts: sources / receivers / wildcard-receivers

    def matches_name(self, name: str | None) -> bool:
        return self.key == name

    def matches_topic(self, topic: str) -> bool:
        if self.regex is not None:
            return self.regex.search(topic) is not None
        return self.key == topic


class _Group:
    """A container element (``<contexts>``, ``<sources>``, ...) with its order and template."""

    __slots__ = ("blocks", "exact", "items", "line", "order")

    def __init__(self, order: str, line: int | None) -> None:
        self.order = order
        self.line = line
        self.blocks: list[Block] = []
        self.items: list[_Item] = []
        # topicname -> True when any item has that exact topicname: lets a lookup skip the
        # scan when no pattern item exists and the name is absent.
        self.exact: set[str] = set()

    def match(self, key: str | None, *, topic: bool) -> tuple[list[_Item], str | None]:
        if topic:
            assert key is not None
            found = [item for item in self.items if item.matches_topic(key)]
        else:
            found = [item for item in self.items if item.matches_name(key)]
        if found:
            last = found[-1]
            denied = None if last.rule == "allow" else f'rule="deny" (line {last.line})'
            return found, denied
        if self.order == "allow,deny":
            return found, f'no matching element under order="allow,deny" (line {self.line})'
        return found, None


_EMPTY_GROUP = _Group("deny,allow", None)


class Application:
    """One ``<application>``: resolves options per context, topic, wildcard pattern, queue."""

    __slots__ = ("blocks", "contexts", "event_queues", "hfxs", "line", "name", "source")

    def __init__(self, name: str | None, source: str, line: int | None) -> None:
        self.name = name
        self.source = source
        self.line = line
        self.blocks: list[Block] = []
        self.contexts = _EMPTY_GROUP
        self.event_queues = _EMPTY_GROUP
        self.hfxs = _EMPTY_GROUP

    def resolve(
        self,
        scope: str,
        name: str | None = None,
        *,
        context_name: str | None = None,
    ) -> Resolution:
        """The XML defaults and restrictions for one object.

        ``name`` is the context or event queue name for those scopes, the topic for sources,
        receivers and HFX, and the pattern for wildcard receivers; ``context_name`` names the
        context a source/receiver/wildcard receiver is created in."""
        res = Resolution()
        res.add(scope, self.blocks)
        if scope == "event_queue":
            group = self.event_queues
            items, res.denied = group.match(name, topic=False)
            res.add(scope, group.blocks)
            for item in items:
                res.add(scope, item.blocks)
            return res
        if scope == "hfx":
            res.add(scope, self.hfxs.blocks)
            if name is not None:
                items, res.denied = self.hfxs.match(name, topic=True)
                for item in items:
                    res.add(scope, item.blocks)
            return res
        ctx_key = name if scope == "context" else context_name
        contexts, ctx_denied = self.contexts.match(ctx_key, topic=False)
        res.add(scope, self.contexts.blocks)
        for ctx in contexts:
            res.add(scope, ctx.blocks)
        if scope == "context":
            res.denied = ctx_denied
            return res
        group_name = {
            "source": "sources",
            "receiver": "receivers",
            "wildcard_receiver": "wildcard-receivers",
        }.get(scope)
        if group_name is None:
            return res
        is_topic = scope != "wildcard_receiver"
        groups = [ctx.groups[group_name] for ctx in contexts if group_name in ctx.groups]
        for group in groups:
            res.add(scope, group.blocks)
            if name is None:
                continue
            items, denied = group.match(name, topic=is_topic)
            if items or group.order == "allow,deny":
                res.denied = denied
            for item in items:
                res.add(scope, item.blocks)
        return res


class UMXml:
    """A loaded ``um.xml``: templates and applications, checked and ready to resolve."""

    __slots__ = ("applications", "source", "templates")

    def __init__(self, source: str) -> None:
        self.source = source
        self.templates: dict[str, Block] = {}
        self.applications: dict[str | None, Application] = {}

    @classmethod
    def load(cls, path: str | Path) -> UMXml:
        tree = xmlfile.load(path, SCHEMA)
        return cls._build(tree, str(path))

    @classmethod
    def from_text(cls, text: str | bytes, source: str = "<XML string>") -> UMXml:
        data = text.encode("utf-8") if isinstance(text, str) else text
        tree = xmlfile.parse_text(data, source)
        xmlfile.validate(tree, SCHEMA, source)
        return cls._build(tree, source)

    def application(self, name: str | None) -> Application:
        """The ``<application>`` for the running program; an unmatched name is an error
        (UM: the application fails to initialize)."""
        app = self.applications.get(name)
        if app is None:
            known = ", ".join(repr(n) if n is not None else "(unnamed)" for n in self.applications)
            label = repr(name) if name is not None else "an unnamed application"
            raise ConfigError(
                f"no <application> for {label}",
                source=self.source,
                what="<application>",
                allowed=known or "no applications defined",
            )
        return app

    # --- building ----------------------------------------------------------------------------

    @classmethod
    def _build(cls, tree: etree._ElementTree, source: str) -> UMXml:
        self = cls(source)
        root = tree.getroot()
        for templates in root.iterchildren("templates"):
            for tpl in templates.iterchildren("template"):
                name = self._template_name(tpl)
                self.templates[name] = self._options_block(tpl)
        for apps in root.iterchildren("applications"):
            for el in apps.iterchildren("application"):
                app = self._application(el)
                if app.name in self.applications:
                    raise self._error(el, f"duplicate application {app.name!r}")
                self.applications[app.name] = app
        return self

    def _error(self, el: etree._Element, message: str, allowed: str | None = None) -> ConfigError:
        return ConfigError(
            message, source=self.source, line=line_of(el), what=f"<{el.tag}>", allowed=allowed
        )

    def _template_name(self, el: etree._Element) -> str:
        name = el.get("name", "")
        if not _PRINTABLE.match(name):
            raise self._error(
                el, f"template name {name!r} must be 1..99 printable ASCII characters"
            )
        return name

    def _templates(self, el: etree._Element) -> list[Block]:
        spec = el.get("template")
        if spec is None:
            return []
        blocks = []
        for name in (n.strip() for n in spec.split(",")):
            if name not in self.templates:
                known = ", ".join(self.templates) or "none defined"
                raise self._error(el, f"unknown template {name!r}", allowed=known)
            blocks.append(self.templates[name])
        return blocks

    def _order(self, el: etree._Element) -> str:
        order = el.get("order", "deny,allow").replace(" ", "").lower()
        if order not in ORDERS:
            raise self._error(el, f'order="{el.get("order")}"', allowed=" | ".join(ORDERS))
        return order

    def _object_name(self, el: etree._Element) -> str | None:
        name = el.get("name")
        if name is not None and not _OBJECT_NAME.match(name):
            raise self._error(el, f"name {name!r} must be 1..127 characters of [A-Za-z0-9_-]")
        return name

    def _options_block(self, el: etree._Element) -> Block:
        block: Block = {}
        for options in el.iterchildren("options"):
            scope = XML_SCOPES[options.get("type", "")]
            rules = block.setdefault(scope, {})
            for opt_el in options.iterchildren("option"):
                rule = self._option(scope, opt_el)
                rules[rule.option.name] = rule
        return block

    def _option(self, scope: str, el: etree._Element) -> OptionRule:
        line = line_of(el)
        opt = lookup(scope, el.get("name", ""), source=self.source, line=line)
        rule = OptionRule(opt, self.source, line)
        text = el.get("default-value")
        if text is not None:
            rule.has_default = True
            rule.default = parse_value(opt, text, source=self.source, line=line)
            if opt.type.cumulative:
                rule.default = opt.type.merge((), rule.default)
        if el.get("order") is not None:
            rule.order = self._order(el)
            rule.restricts = True
        for child in el:
            if not isinstance(child.tag, str):
                continue
            value_text = child.text or ""
            if child.get("{http://www.w3.org/XML/1998/namespace}space", "default") != "preserve":
                value_text = " ".join(value_text.split())
            value = parse_value(opt, value_text, source=self.source, line=line_of(child))
            (rule.allow if child.tag == "allow" else rule.deny).append(value)
            rule.restricts = True
        if rule.has_default and not rule.permits(rule.default):
            raise self._error(
                el,
                f"default-value {text!r} of {opt.name} is not permitted by its own restriction",
                allowed=rule.describe(),
            )
        return rule

    def _element_blocks(self, el: etree._Element) -> list[Block]:
        return [*self._templates(el), self._options_block(el)]

    def _group(self, el: etree._Element) -> _Group:
        group = _Group(self._order(el), line_of(el))
        group.blocks = self._templates(el)
        return group

    def _application(self, el: etree._Element) -> Application:
        name = el.get("name")
        if name is not None and not _PRINTABLE.match(name):
            raise self._error(
                el, f"application name {name!r} must be 1..99 printable ASCII characters"
            )
        app = Application(name, self.source, line_of(el))
        app.blocks = self._templates(el)
        for child in el:
            if child.tag == "contexts":
                app.contexts = self._contexts(child)
            elif child.tag == "event-queues":
                group = self._group(child)
                for q in child.iterchildren("event-queue"):
                    item = _Item(self._object_name(q), None, q.get("rule", "allow"), line_of(q))
                    item.blocks = self._element_blocks(q)
                    group.items.append(item)
                app.event_queues = group
            elif child.tag == "hfxs":
                app.hfxs = self._topics(child)
        return app

    def _contexts(self, el: etree._Element) -> _Group:
        group = self._group(el)
        for ctx in el.iterchildren("context"):
            item = _Item(self._object_name(ctx), None, ctx.get("rule", "allow"), line_of(ctx))
            item.blocks = self._element_blocks(ctx)
            for sub in ctx:
                if sub.tag in ("sources", "receivers"):
                    item.groups[str(sub.tag)] = self._topics(sub)
                elif sub.tag == "wildcard-receivers":
                    wgroup = self._group(sub)
                    for w in sub.iterchildren("wildcard-receiver"):
                        witem = _Item(w.get("pattern"), None, w.get("rule", "allow"), line_of(w))
                        witem.blocks = self._element_blocks(w)
                        wgroup.items.append(witem)
                    item.groups["wildcard-receivers"] = wgroup
            group.items.append(item)
        return group

    def _topics(self, el: etree._Element) -> _Group:
        group = self._group(el)
        for t in el.iterchildren("topic"):
            topicname, pattern = t.get("topicname"), t.get("pattern")
            if (topicname is None) == (pattern is None):
                raise self._error(t, "a <topic> needs exactly one of topicname= and pattern=")
            regex = None
            if pattern is not None:
                try:
                    regex = re.compile(pattern)
                except re.error as exc:
                    raise self._error(t, f"pattern {pattern!r} does not compile: {exc}") from None
            else:
                group.exact.add(str(topicname))
            item = _Item(
                topicname if regex is None else pattern, regex, t.get("rule", "allow"), line_of(t)
            )
            item.blocks = self._element_blocks(t)
            group.items.append(item)
        return group
