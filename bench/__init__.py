"""Benchmarks: `make bench` (python -m bench) runs every benchmark and prints ratios."""
