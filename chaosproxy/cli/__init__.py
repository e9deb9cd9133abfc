"""The command line (``chaosproxy``, ``python -m chaosproxy``) and the container's health
check (docs/architecture.md, The rooms)."""
