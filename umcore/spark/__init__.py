"""The data pipeline on Spark: the collector's monitoring history and the Store's repositories as
DataFrames, and the operator's reports over them (issue 21).

Theory of operation
-------------------
Nothing here is imported by a daemon: ``pyspark`` and ``pyarrow`` (the ``spark`` extra) are
needed only by this package, so the daemons never need Java.

* :mod:`umcore.spark.inputs` reads what ``MCS`` wrote -- UM's SQLite database (one JSON row per
  message) or pyum's Parquet directory (the message as a nested struct) -- into one shape: key
  columns and the message as a struct whose type comes from the ``.proto`` descriptors.
* :mod:`umcore.spark.counters` is the shared counter handling: UM's statistics are cumulative
  counters, so a job differences consecutive samples of one object ordered by time; a negative
  difference is a restart (the object's counters began again), which starts a new series; UM's
  "no sample" sentinels are ignored.
* :mod:`umcore.spark.jobs` holds the operator's jobs by name; :mod:`umcore.spark.report` writes
  each job's table (Parquet and CSV), its chart (PNG) and an HTML page.
* :mod:`umcore.spark.umestore` is ``spark.read.format("umestore")``: the Store's repository files
  (``docs/store-format.md``) as a table, and its receivers' ACK positions from the state files.
* :mod:`umcore.spark.session` starts the session for any master URL, ships this package to the
  executors and makes the worker Python the one running the job; :mod:`umcore.spark.cli` is
  ``pyum-spark``.
"""
