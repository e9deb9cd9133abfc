"""A `chaosproxy matrix` client for the tests: boto3's ``bedrock-runtime`` streaming one
answer through the proxy (``CHAOSPROXY_URL``) with dummy credentials, ``converse``
(``converse_stream``, the default) or ``invoke`` (``invoke_model_with_response_stream``
of an Anthropic model), as an application would: it joins the text deltas and trusts
boto3 to raise on a broken stream. Prints the text on stdout and exits 0, or prints the
text it had and the error on stderr and exits 1.

    chaosproxy matrix --client "python -m tests.clients.bedrock_boto3 converse"
"""

from __future__ import annotations

import json
import os
import sys

import boto3
from botocore.config import Config

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"


def main(operation: str) -> int:
    runtime = boto3.client(
        "bedrock-runtime",
        region_name="us-east-1",
        endpoint_url=os.environ["CHAOSPROXY_URL"],
        aws_access_key_id="AKIAIOSFODNN7EXAMPLE",
        aws_secret_access_key="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        config=Config(retries={"max_attempts": 1}, read_timeout=10),
    )
    text: list[str] = []
    try:
        if operation == "converse":
            reply = runtime.converse_stream(
                modelId=MODEL, messages=[{"role": "user", "content": [{"text": "Plan my week."}]}]
            )
            for event in reply["stream"]:
                delta = event.get("contentBlockDelta", {}).get("delta", {})
                text.append(delta.get("text", ""))
        else:
            body = {"max_tokens": 200, "messages": [{"role": "user", "content": "Plan my week."}]}
            reply = runtime.invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(body))
            for event in reply["body"]:
                chunk = json.loads(event["chunk"]["bytes"])
                if chunk.get("type") == "content_block_delta":
                    text.append(chunk["delta"].get("text", ""))
    except Exception as exc:  # what boto3 raised, reported as the matrix protocol asks
        print("".join(text))
        print(f"{type(exc).__module__}.{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print("".join(text))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "converse"))
