"""The tools built on the proxy: simulate, replay, report, the matrix, explore and the
pytest plugin (docs/architecture.md, The rooms)."""
