"""Benchmarks (`make bench`): each bench_*.py writes JSON under bench/results/."""
