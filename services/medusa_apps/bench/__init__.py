"""Benchmarks: measured side by side in one run, reported as ratios, written as JSON and plots."""
