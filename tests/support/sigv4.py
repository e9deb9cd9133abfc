"""Whether a request, as an upstream received it, carries a valid SigV4 signature: what
AWS checks, recomputed by botocore from what arrived (the headers its ``Authorization``
says were signed, the body), with the credentials the client signed with. For the
Bedrock client tests (docs/providers.md, "SigV4 and Host")."""

from __future__ import annotations

from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials


def signature_holds(
    path: str, headers: dict[str, str], body: bytes, credentials: Credentials
) -> bool:
    authorization = headers.get("Authorization") or headers["authorization"]
    signed = authorization.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";")
    lower = {k.lower(): v for k, v in headers.items()}
    request = AWSRequest(
        method="POST",
        url=f"http://{lower['host']}{path}",
        data=body,
        headers={name: lower[name] for name in signed if name in lower},
    )
    request.context["timestamp"] = lower["x-amz-date"]
    auth = SigV4Auth(credentials, "bedrock", "us-east-1")
    to_sign = auth.string_to_sign(request, auth.canonical_request(request))
    return bool(authorization.rsplit("Signature=", 1)[1] == auth.signature(to_sign, request))
