"""The service fronts' shared main (umcore.daemon.winservice.service_main): -E with -U is a usage
error before anything else; without pywin32 one line and exit 1 (srsds, umestoreds, mcsds)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from umcore.daemon import winservice
from umcore.daemon.winservice import ServiceFront, service_main


def _main(**kw: object) -> None:
    args: dict[str, object] = {
        "service": ["install", "x.xml"], "config_file": None, "load_config": lambda _p: None,
        "event_log_level": None, "env_var_file": None, "unset_env_var_file": False,
    }  # fmt: skip
    args.update(kw)
    service_main("testds", ServiceFront, **args)  # type: ignore[arg-type]


def test_env_file_and_unset_together_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        _main(env_var_file="env.txt", unset_env_var_file=True)
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "testds: -E and -U cannot be combined\n"


@pytest.mark.skipif(winservice.HAVE_PYWIN32, reason="pywin32 installed: the front would act")
@pytest.mark.parametrize(
    "module", ["daemons.srs.service", "daemons.umestored.service", "daemons.mcs.service"]
)
def test_without_pywin32_each_front_says_so_and_exits_1(module: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", module, "-s", "install", "x.xml"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 1
    assert len(run.stderr.splitlines()) == 1 and "needs pywin32" in run.stderr
    with pytest.raises(SystemExit) as exit_:
        _main()
    assert exit_.value.code is not None and "needs pywin32" in str(exit_.value.code)
