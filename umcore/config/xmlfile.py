"""Load an XML configuration file and validate it against the schema a daemon ships.

Theory of operation
-------------------
UM's daemons are configured by XML files checked against a DTD (lbmrd, umestored, tnwgd) or an
XSD (SRS).  We parse with lxml, keeping line numbers, refuse anything that could reach outside the
file (no network, no external entities, no XInclude — UM's daemons do not process XInclude), and
validate against the schema text shipped in ``umcore/config/schemas``.  Every failure becomes one
:class:`~umcore.errors.ConfigError` naming the file, the line, the element and what is wrong, so a
daemon can print one line and exit 1 before binding anything.  After validation, loaders read
values with :func:`text_of` / :func:`int_of`, which also produce located errors.
"""

from __future__ import annotations

import io
from importlib import resources
from pathlib import Path

from lxml import etree

from umcore.errors import ConfigError

__all__ = ["int_of", "line_of", "load", "parse_text", "schema_text", "text_of", "validate"]

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


def parse_text(data: bytes, source: str) -> etree._ElementTree:
    """Parse XML bytes; syntax errors become a ConfigError located at ``source``."""
    try:
        return etree.ElementTree(etree.fromstring(data, _parser()))
    except etree.XMLSyntaxError as exc:
        line = exc.lineno if exc.lineno else None
        msg = exc.msg or str(exc)
        # lxml appends ", line N, column M" to its messages; we print the line ourselves.
        msg = msg.split(", line ")[0]
        raise ConfigError(f"malformed XML: {msg}", source=source, line=line) from None


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
    element = _element_at(tree, first.line)
    raise ConfigError(
        first.message,
        source=source,
        line=first.line or None,
        what=f"<{element}>" if element else None,
    )


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
