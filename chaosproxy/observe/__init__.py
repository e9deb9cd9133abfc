"""Observation: the frame log, metrics, traces, the request store and journal, the event
loop's lag (docs/architecture.md, The rooms)."""
