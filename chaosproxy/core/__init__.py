"""The sans-IO core: framers, provider profiles, faults and the pipeline.

Nothing in this package performs I/O, touches a clock or imports asyncio, aiohttp or
structlog (``tests/core/test_core_is_sans_io.py`` enforces it). Bytes and time go in as
data; frames and actions come out.
"""
