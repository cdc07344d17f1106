"""umcore.monitor: statistics, their protobuf shapes (generated from ../proto), and Prometheus."""
