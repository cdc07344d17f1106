"""``python -m umcore.spark``: the same as ``pyum-spark``."""

from umcore.spark.cli import main

main()
