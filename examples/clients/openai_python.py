"""A `chaosproxy matrix` client: the Python `openai` SDK, as an application uses it.

Streams one chat completion from ``$CHAOSPROXY_URL/v1`` (any API key: the built-in mock
takes any), prints the assembled text on stdout and exits 0; when the SDK raises, prints
the error on stderr and exits 1. The SDK keeps its defaults (two retries, its own
timeouts), so the matrix judges the SDK as applications get it.

    chaosproxy matrix --client "python examples/clients/openai_python.py"
"""

from __future__ import annotations

import os
import sys

from openai import OpenAI


def main() -> int:
    client = OpenAI(
        base_url=os.environ["CHAOSPROXY_URL"].rstrip("/") + "/v1",
        api_key=os.environ.get("OPENAI_API_KEY", "dummy"),
    )
    parts: list[str] = []
    try:
        stream = client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "Plan my week, please."}],
            stream=True,
        )
        for chunk in stream:
            for choice in chunk.choices:
                if choice.delta is not None and choice.delta.content:
                    parts.append(choice.delta.content)
    except Exception as exc:  # whatever the SDK raised: the client noticed something
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    sys.stdout.buffer.write("".join(parts).encode("utf-8"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
