"""Load an XML configuration file and validate it against the schema a daemon ships.

Theory of operation
-------------------
UM's daemons are configured by XML files checked against a DTD (lbmrd, umestored, tnwgd) or an
XSD (SRS).  We parse with lxml, keeping line numbers, refuse anything that could reach outside the
file (no network, no external entities, no XInclude — UM's daemons do not process XInclude), and
validate against the schema text shipped in ``umcore/config/schemas``.

**Hostile documents.**  Before lxml sees the bytes, :func:`refuse_doctype` looks for a
``<!DOCTYPE``: entity declarations (internal or external, general or parameter), an external DTD
(``SYSTEM``/``PUBLIC``) and any internal DTD subset are refused with one located line, so nothing
is read through an entity, nothing is fetched and nothing is expanded (billion laughs costs a
scan of the bytes).  A bare ``<!DOCTYPE root>`` is harmless and accepted.  The parser is also
built not to resolve entities, load DTDs or touch the network, and the parsed tree is checked
again (:func:`_refuse_parsed`: a DTD or an entity left in it) for encodings the byte scan does
not read; libxml2's own amplification bound stops an expansion in that last case.  Every failure becomes one
:class:`~umcore.errors.ConfigError` naming the file, the line, the element and what is wrong, so a
daemon can print one line and exit 1 before binding anything.  After validation, loaders read
values with :func:`text_of` / :func:`int_of`, which also produce located errors.
"""

from __future__ import annotations

import io
import re
from importlib import resources
from pathlib import Path
from typing import Any

from lxml import etree

from umcore.errors import ConfigError

__all__ = [
    "child",
    "int_of",
    "line_of",
    "load",
    "parse_text",
    "refuse_doctype",
    "schema_text",
    "text_of",
    "validate",
]

# Larger than any real daemon configuration by orders of magnitude; a bound so a mistaken path
# (a log file, a device) is refused instead of read into memory.
MAX_CONFIG_BYTES = 16 * 1024 * 1024


def schema_text(name: str) -> str:
    """The text of a shipped schema, e.g. ``schema_text("lbmrd.dtd")``."""
    return resources.files("umcore.config").joinpath("schemas", name).read_text("utf-8")


def _parser() -> etree.XMLParser:
    return etree.XMLParser(
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        remove_comments=True,
        huge_tree=False,
    )


# What the one-line refusals say (tests check the wording).
REFUSE_ENTITY = (
    "entity declarations are not allowed in a configuration file (nothing was read or expanded)"
)
REFUSE_EXTERNAL_DTD = "an external DTD is not allowed (nothing was fetched; the daemon validates against the schema it ships)"
REFUSE_INTERNAL_SUBSET = (
    "an internal DTD subset is not allowed (the daemon validates against the schema it ships)"
)
REFUSE_ENTITY_REFERENCE = "entity references are not allowed in a configuration file"

_BOMS = (
    (b"\xef\xbb\xbf", "utf-8"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\xfe\xff", "utf-16-be"),
    (b"\xff\xfe", "utf-16-le"),
)
_DOCTYPE = re.compile(
    r"<!DOCTYPE\s+[^\s\[>]+\s*(?P<external>(?:SYSTEM|PUBLIC)\b)?[^\[>]*(?P<subset>\[)?"
)

# The root element's start tag: the prolog (where a DOCTYPE may stand) ends there.
_ROOT_TAG = re.compile(r"<[A-Za-z_:]")


def _as_text(data: bytes) -> str:
    """The bytes as text for :func:`refuse_doctype`: by BOM, by the UTF-16/32 patterns of a
    leading ``<``, else Latin-1 (every ASCII-compatible encoding keeps ``<!DOCTYPE`` readable)."""
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(codec, "replace")
    for head, codec in (
        (b"\x00\x00\x00<", "utf-32-be"),
        (b"<\x00\x00\x00", "utf-32-le"),
        (b"\x00<", "utf-16-be"),
        (b"<\x00", "utf-16-le"),
    ):
        if data.startswith(head):
            return data.decode(codec, "replace")
    return data.decode("latin-1")


def refuse_doctype(data: bytes, source: str) -> None:
    """Refuse, before any parsing, a DOCTYPE with entity declarations, an external DTD or an
    internal subset: one ConfigError located at the declaration (the first ``<!ENTITY`` for
    entities).  Costs one scan of the bytes, whatever the entities would expand to."""
    text = _as_text(data)
    root = _ROOT_TAG.search(text)
    # A DOCTYPE is only one before the root element (after it, it is text lxml refuses).
    prolog = text[: root.start()] if root is not None else text
    doctype = prolog.find("<!DOCTYPE")
    if doctype < 0:
        return
    match = _DOCTYPE.search(prolog, doctype)
    if match is None or match.group("subset"):
        # An internal subset (or a DOCTYPE our pattern does not read: lxml names its syntax
        # error, unless it declares entities).
        entity = prolog.find("<!ENTITY", doctype)
        if entity >= 0:
            raise ConfigError(
                REFUSE_ENTITY,
                source=source,
                line=prolog.count("\n", 0, entity) + 1,
                what="<!DOCTYPE>",
            )
    if match is None:
        return
    line = prolog.count("\n", 0, match.start()) + 1
    if match.group("external"):
        raise ConfigError(REFUSE_EXTERNAL_DTD, source=source, line=line, what="<!DOCTYPE>")
    if match.group("subset"):
        raise ConfigError(REFUSE_INTERNAL_SUBSET, source=source, line=line, what="<!DOCTYPE>")


def _refuse_parsed(tree: etree._ElementTree, source: str) -> None:
    """The second check, on the parsed tree (an encoding the byte scan could not read)."""
    info: Any = tree.docinfo  # lxml-stubs lack DocInfo.system_url and DTD.entities()
    dtd: Any = info.internalDTD
    if dtd is not None:  # a bare <!DOCTYPE root> gives an empty one: accepted
        if list(dtd.entities()):
            raise ConfigError(REFUSE_ENTITY, source=source, what="<!DOCTYPE>")
        if list(dtd.elements()):
            raise ConfigError(REFUSE_INTERNAL_SUBSET, source=source, what="<!DOCTYPE>")
    if info.system_url or info.public_id:
        raise ConfigError(REFUSE_EXTERNAL_DTD, source=source, what="<!DOCTYPE>")
    for node in tree.iter(etree.Entity):
        parent = node.getparent()
        raise ConfigError(
            REFUSE_ENTITY_REFERENCE,
            source=source,
            line=line_of(node) or (line_of(parent) if parent is not None else None),
            what=f"<{parent.tag}>" if parent is not None else None,
        )


def parse_text(data: bytes, source: str) -> etree._ElementTree:
    """Parse XML bytes; a DOCTYPE with entities, an external DTD or an internal subset and
    syntax errors become a ConfigError located at ``source``."""
    refuse_doctype(data, source)
    try:
        tree = etree.ElementTree(etree.fromstring(data, _parser()))
    except etree.XMLSyntaxError as exc:
        line = exc.lineno if exc.lineno else None
        msg = exc.msg or str(exc)
        # lxml appends ", line N, column M" to its messages; we print the line ourselves.
        msg = msg.split(", line ")[0]
        raise ConfigError(f"malformed XML: {msg}", source=source, line=line) from None
    _refuse_parsed(tree, source)
    return tree


def _validator(schema: str) -> etree.DTD | etree.XMLSchema:
    text = schema_text(schema)
    if schema.endswith(".dtd"):
        return etree.DTD(_as_file(text))
    return etree.XMLSchema(etree.fromstring(text.encode()))


def _as_file(text: str) -> io.StringIO:
    return io.StringIO(text)


def line_of(el: etree._Element) -> int | None:
    """The 1-based source line of an element (lxml-stubs mistype ``sourceline``)."""
    line = getattr(el, "sourceline", None)
    return line if isinstance(line, int) else None


def load(path: str | Path, schema: str) -> etree._ElementTree:
    """Read, parse and validate ``path`` against the shipped schema named ``schema``.

    Raises ConfigError (file, line, element, what) on any failure."""
    source = str(path)
    try:
        p = Path(path)
        if p.is_dir():
            raise ConfigError("is a directory, not a configuration file", source=source)
        with p.open("rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=source) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(f"larger than {MAX_CONFIG_BYTES} bytes", source=source)
    tree = parse_text(data, source)
    validate(tree, schema, source)
    return tree


def validate(tree: etree._ElementTree, schema: str, source: str) -> None:
    """Validate a parsed tree; the first schema error becomes a located ConfigError."""
    validator = _validator(schema)
    if validator.validate(tree):
        return
    errors = list(iter(validator.error_log))  # type: ignore[call-overload]
    first = errors[0] if errors else None
    if first is None:  # pragma: no cover - lxml always logs why validation failed
        raise ConfigError(f"does not conform to {schema}", source=source)
    at_fault = _element_of(tree, first.path)
    if at_fault is not None:
        element: str | None = str(at_fault.tag)
        line = line_of(at_fault) or first.line or None
    else:
        element, line = _element_at(tree, first.line), first.line or None
    raise ConfigError(
        first.message,
        source=source,
        line=line,
        what=f"<{element}>" if element else None,
    )


def _element_of(tree: etree._ElementTree, path: str | None) -> etree._Element | None:
    """The element a validation error names by its XPath (``/lbmrd/daemon/bogus``): the one at
    fault even when several elements share a line."""
    if not path:
        return None
    try:
        found = tree.xpath(path)
    except etree.XPathError:
        return None
    if isinstance(found, list) and found and isinstance(found[0], etree._Element):
        return found[0]
    return None


def _element_at(tree: etree._ElementTree, line: int) -> str | None:
    best: str | None = None
    for el in tree.iter():
        if not isinstance(el.tag, str):
            continue
        at = line_of(el)
        if at is not None and at <= line:
            best = el.tag
        elif at is not None and at > line:
            break
    return best


def child(el: etree._Element | None, tag: str) -> etree._Element | None:
    """The first ``tag`` child of ``el`` (None when ``el`` is None or has none)."""
    if el is None:
        return None
    return next(el.iterchildren(tag), None)


def text_of(el: etree._Element, source: str) -> str:
    """The stripped text of an element; empty text is an error naming the element."""
    text = (el.text or "").strip()
    if not text:
        raise ConfigError("must not be empty", source=source, line=line_of(el), what=f"<{el.tag}>")
    return text


def int_of(
    el: etree._Element, source: str, *, low: int | None = None, high: int | None = None
) -> int:
    """An element's text as an integer within [low, high], with a located error otherwise."""
    text = text_of(el, source)
    allowed = _range_text(low, high)
    try:
        value = int(text, 10)
    except ValueError:
        raise ConfigError(
            f"{text!r} is not an integer",
            source=source,
            line=line_of(el),
            what=f"<{el.tag}>",
            allowed=allowed,
        ) from None
    if (low is not None and value < low) or (high is not None and value > high):
        raise ConfigError(
            f"{value} is out of range",
            source=source,
            line=line_of(el),
            what=f"<{el.tag}>",
            allowed=allowed,
        )
    return value


def _range_text(low: int | None, high: int | None) -> str:
    if low is not None and high is not None:
        return f"integers {low}..{high}"
    if low is not None:
        return f"integers >= {low}"
    if high is not None:
        return f"integers <= {high}"
    return "integers"
