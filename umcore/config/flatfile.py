"""Plain-text ("flat") UM configuration files: ``scope option value`` per line.

Theory of operation
-------------------
A flat file holds one setting per line: a scope keyword (``context``, ``source``, ``receiver``,
``wildcard_receiver``, ``event_queue``; any case), the option name (any case) and its value.
``#`` starts a comment that runs to the end of the line; blank lines are ignored.  Fields are not
quoted, except that an interface given as a device name carries its own double quotes
(``context resolver_unicast_interface "eth0"``), which are part of the value.

:func:`parse_text` checks every line against the option registry and returns the settings with
their line numbers; it reads *all* lines and raises one :class:`~umcore.errors.ConfigError` for
the first bad one (saying how many others were bad), so nothing of a broken file is applied.
That is stricter than UM 6.13+, which logs bad lines and applies the rest: a daemon here must
refuse a broken configuration before it binds anything.  Applying settings (in order, later
wins, list options accumulate) is :class:`umcore.config.attributes.Configuration`'s job.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from umcore.config.options import lookup, normalize_scope, parse_value
from umcore.errors import ConfigError

__all__ = ["MAX_FLAT_BYTES", "Setting", "make_setting", "parse_file", "parse_text"]

# Far above any real option file; refuses a mistaken path (a log, a device) instead of reading it.
MAX_FLAT_BYTES = 4 * 1024 * 1024


class Setting(NamedTuple):
    """One option setting and where it came from."""

    scope: str
    name: str  # canonical (registry) spelling
    text: str  # the value as written
    value: object  # parsed
    source: str
    line: int | None


def parse_line(raw: str, source: str, line: int | None) -> Setting | None:
    """One line (comment and blank lines give None)."""
    text = raw.split("#", 1)[0].strip()
    if not text:
        return None
    fields = text.split(None, 2)
    if len(fields) < 3:
        raise ConfigError(
            "expected 'scope option value'",
            source=source,
            line=line,
            what=text,
            allowed="context|source|receiver|wildcard_receiver|event_queue option_name value",
        )
    scope = normalize_scope(fields[0], source=source, line=line)
    opt = lookup(scope, fields[1], source=source, line=line)
    value = parse_value(opt, fields[2], source=source, line=line)
    return Setting(scope, opt.name, fields[2].strip(), value, source, line)


def make_setting(
    scope: str,
    name: str,
    value: str,
    source: str,
    line: int | None,
    scopes: tuple[str, ...] | None = None,
) -> Setting:
    """A setting given as separate fields (a daemon's ``<option scope= name= value=>``);
    ``scopes`` limits the scopes that element may use."""
    key = normalize_scope(scope, source=source, line=line)
    if scopes is not None and key not in scopes:
        raise ConfigError(
            f"scope {scope!r} is not usable here",
            source=source,
            line=line,
            what=f"{scope} {name}",
            allowed=", ".join(scopes),
        )
    opt = lookup(key, name, source=source, line=line)
    parsed = parse_value(opt, value, source=source, line=line)
    return Setting(key, opt.name, value, parsed, source, line)


def parse_text(text: str, source: str) -> list[Setting]:
    """Every setting of a flat file's text, or one ConfigError for the first bad line."""
    settings: list[Setting] = []
    errors: list[ConfigError] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        try:
            setting = parse_line(raw, source, number)
        except ConfigError as exc:
            errors.append(exc)
            continue
        if setting is not None:
            settings.append(setting)
    if errors:
        first = errors[0]
        if len(errors) > 1:
            first.message += f" (and {len(errors) - 1} more bad line(s))"
            first.args = (str(first),)
        raise first
    return settings


def read_config_file(path: str | Path) -> str:
    """A configuration file's text with located errors (shared by flat and XML loading)."""
    source = str(path)
    if source.startswith(("http://", "ftp://", "https://")):
        raise ConfigError("configuration URLs are not supported; give a file path", source=source)
    try:
        with Path(path).open("rb") as fh:
            data = fh.read(MAX_FLAT_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read: {exc.strerror or exc}", source=source) from None
    if len(data) > MAX_FLAT_BYTES:
        raise ConfigError(f"larger than {MAX_FLAT_BYTES} bytes", source=source)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", source=source) from None


def parse_file(path: str | Path) -> list[Setting]:
    """Every setting of the flat file at ``path``."""
    return parse_text(read_config_file(path), str(path))
