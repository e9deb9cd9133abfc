"""The generic profile's classifier, apart from its profile so that it is compiled
with the hot modules (``chaosproxy/_build.py``): it runs on every event of a stream
whose provider is not known, and a profile is Python (a subclass of
:class:`~chaosproxy.core.providers.base.ProviderProfile`, which is not compiled).
:class:`~chaosproxy.core.providers.generic.GenericProfile` gives it as its
``classifier()``; the pipeline calls it directly (issue 34)."""

from __future__ import annotations

from typing import Final

from chaosproxy.core.frames import Frame
from chaosproxy.core.providers._wire import DONE_MARKER, OTHER, TERMINAL

# (Final: compiled code reads them directly, not through the module's dict.)
_OTHER: Final = OTHER
_TERMINAL: Final = TERMINAL
_DONE: Final = DONE_MARKER


def generic_kinds(frame: Frame) -> frozenset[str]:
    """Every event is ``other``, except ``data: [DONE]`` and a JSON object with
    ``"done": true``, which are ``terminal``."""
    data = frame.data
    if data is None:
        return _OTHER
    if data == _DONE or data.strip() == _DONE:  # is_done_marker, inlined
        return _TERMINAL
    # ``"done": true`` needs the literal ``true`` and the key spelled out (or
    # escaped): without them no parse can find it. Most events stop here.
    if "true" not in data or ("done" not in data and "\\" not in data):
        return _OTHER
    payload = frame.json()
    if isinstance(payload, dict) and payload.get("done") is True:
        return _TERMINAL
    return _OTHER
