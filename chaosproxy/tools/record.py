"""``chaosproxy record``: a proxy that records every streamed answer of a real upstream
into a mock fixture file (docs/mock.md, Recording).

Every request is forwarded to the upstream as the proxy forwards it, with no fault, and
its answer streamed back as it comes; a whole stream becomes a fixture appended to the
file (:class:`~chaosproxy.control.recording.AnswerRecorder`), which ``serve --mock-fixtures``
serves back offline.
"""

from __future__ import annotations

from aiohttp import web

from chaosproxy.control.recording import AnswerRecorder
from chaosproxy.server.net import hostport, listen

#: The largest request body forwarded (real prompts, with images, can be large).
MAX_BODY = 64 * 1024 * 1024


def create_record_app(recorder: AnswerRecorder) -> web.Application:
    """Every method and path forwarded to ``recorder``'s upstream and recorded."""

    async def forward(request: web.Request) -> web.StreamResponse:
        return await recorder.forward(request, await request.read())

    async def close(_app: web.Application) -> None:
        await recorder.close()

    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_route("*", "/{tail:.*}", forward)
    app.on_cleanup.append(close)
    return app


async def start_record(recorder: AnswerRecorder, host: str, port: int) -> tuple[web.AppRunner, str]:
    """Serve the recording proxy on ``host:port`` (0 for a free port); (runner, url)."""
    runner, bound = await listen(create_record_app(recorder), host, port)
    return runner, f"http://{hostport(host, bound)}"


__all__ = ["MAX_BODY", "create_record_app", "start_record"]
