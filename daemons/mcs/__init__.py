"""MCS, the Monitoring Collector Service: every statistics message on the monitoring topic into
SQLite (UM's storage contract) or Parquet (pyum).  ``python -m daemons.mcs`` / ``MCS``."""
