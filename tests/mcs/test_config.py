"""The <um-mcs> file and its properties file: defaults, UM's elements, relative paths, and one
clear error (file, line, element, what, allowed values) for each kind of mistake."""

from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from umcore.config import mcs
from umcore.errors import ConfigError

FULL = """<?xml version="1.0" encoding="UTF-8" ?>
<um-mcs version="1.0">
  <daemon>
    <log type="file" frequency="daily" size="5" max-history="3">logs/mcs.log</log>
    <pid-file>mcs.pid</pid-file>
  </daemon>
  <connector>
    <type>{kind}</type>
    <properties-file>mcs.properties</properties-file>
  </connector>
  <receiver-transport-opts>
    <wildcard-topic>^/29west/.*</wildcard-topic>
    <config-file>mon.cfg</config-file>
  </receiver-transport-opts>
</um-mcs>
"""


def write(
    tmp: Path, kind: str = "sqlite", props: str = "sqlite_database_path=db/ummon.db\n"
) -> Path:
    (tmp / "mcs.properties").write_text(props)
    path = tmp / "mcs.xml"
    path.write_text(FULL.format(kind=kind))
    return path


def test_every_element_read_with_paths_relative_to_their_file(tmp_path: Path) -> None:
    cfg = mcs.load(write(tmp_path))
    assert cfg.connector == "sqlite"
    assert cfg.database == str(tmp_path / "db" / "ummon.db")
    assert cfg.log.type == "file" and cfg.log.file == str(tmp_path / "logs" / "mcs.log")
    assert (cfg.log.frequency, cfg.log.size, cfg.log.max_history) == ("daily", 5, 3)
    assert cfg.pid_file == str(tmp_path / "mcs.pid")
    assert cfg.wildcard_topic == "^/29west/.*" and cfg.topic == mcs.DEFAULT_TOPIC
    assert cfg.config_file == str(tmp_path / "mon.cfg")


def test_defaults() -> None:
    cfg = mcs.load_text('<um-mcs version="1.0"/>')
    assert (cfg.connector, cfg.topic, cfg.wildcard_topic) == ("sqlite", "/29west/statistics", None)
    assert cfg.database is None and cfg.log.type == "console" and cfg.pid_file is None


def test_parquet_connector(tmp_path: Path) -> None:
    cfg = mcs.load(write(tmp_path, "parquet", "# pyum's Parquet\nparquet_directory = out\n"))
    assert cfg.parquet_directory == str(tmp_path / "out")


def test_java_properties_forms(tmp_path: Path) -> None:
    p = tmp_path / "x.properties"
    p.write_text(
        "# comment\n! also a comment\n\n"
        "a=1\nb : two words\nc three\n"
        "d = C:\\\\data\\\\ummon.db\n"
        "e = first \\\n    second\n"
    )
    assert mcs.load_properties(p) == {
        "a": "1", "b": "two words", "c": "three", "d": "C:\\data\\ummon.db", "e": "first second",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "props", "match"),
    [
        ("hdfs", "x=1\n", "unknown connector type 'hdfs'.*use parquet.*allowed: sqlite, parquet"),
        ("mongo", "x=1\n", "<connector><type>.*unknown connector type 'mongo'"),
        (
            "sqlite",
            "sqlite_path=/x\n",
            "mcs.properties: sqlite_path: unknown property.*allowed: sqlite_database_path",
        ),
    ],
)
def test_connector_mistakes(tmp_path: Path, kind: str, props: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        mcs.load(write(tmp_path, kind, props))


def test_schema_mistakes_name_the_line_and_element(tmp_path: Path) -> None:
    path = tmp_path / "bad.xml"
    path.write_text(
        '<um-mcs version="1.0">\n  <connector>\n    <kind>sqlite</kind>\n  </connector>\n</um-mcs>\n'
    )
    with pytest.raises(ConfigError) as err:
        mcs.load(path)
    text = str(err.value)
    assert f"{path}:3" in text and "kind" in text
    with pytest.raises(ConfigError, match="cannot read the properties file"):
        mcs.load_text(
            "<um-mcs><connector><properties-file>/nonexistent/p</properties-file></connector></um-mcs>"
        )
    with pytest.raises(ConfigError, match='type="file" needs the log file name'):
        mcs.load_text('<um-mcs><daemon><log type="file"/></daemon></um-mcs>')


def test_the_xsd_is_a_schema_and_checks_the_documented_sample(tmp_path: Path) -> None:
    schema = etree.XMLSchema(etree.fromstring(mcs.xsd_text().encode()))
    assert schema.validate(etree.parse(str(write(tmp_path))))
