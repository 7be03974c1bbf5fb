"""Benchmarks and reproductions of the papers' results: `python -m bench NAME`."""
