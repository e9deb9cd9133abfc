"""Control: starting a proxy and driving it at run time (the admin API, ``ChaosProxy``,
``ChaosClient``) (docs/architecture.md, The rooms)."""
