"""The server: the aiohttp proxy and everything one proxied request goes through in the
shell (docs/architecture.md, The rooms)."""
