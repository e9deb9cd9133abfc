"""Masking by name and by shape (core/redact.py): the names and shapes of issue 39,
each a case, and the ordinary names that must stay (usage counts above all)."""

from __future__ import annotations

from typing import Any

import pytest

from chaosproxy.core.redact import (
    MASK,
    MAX_MASK_DEPTH,
    is_secret_name,
    mask_headers,
    mask_json,
    redact_path,
    redact_text,
)

SECRET_NAMES = [
    "X-Amz-Credential",
    "X-Amz-Security-Token",
    "X-JWT-Assertion",
    "X-Client-Cert",
    "X-Client-Certificate",
    "openai_api_key",
    "secret_key",
    "aws_secret_access_key",
    "token",
    "access_token",
    "auth_header",
    "apiKey",
    "clientSecret",
    "JWTAssertion",
    "x-goog-api-key",
    "Proxy-Authorization",
    "Cookie",
    "session_id",
    "db.password",
    "private_key",
    "passphrase",
    "X-Signature",
    "key",
]
ORDINARY_NAMES = [
    "max_tokens",
    "max_completion_tokens",
    "maxOutputTokens",
    "tokens",
    "prompt_tokens",
    "input_tokens",
    "cache_read_input_tokens",
    "tokenizer",
    "keyword",
    "keys_pressed",
    "monkey",
    "author",
    "authors",
    "passage",
    "Content-Type",
    "X-Request-Id",
    "model",
    "messages",
    "certainty",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_names_that_say_secret_key_token_credential_password_cert_or_assertion(
    name: str,
) -> None:
    assert is_secret_name(name)
    if not any(c.isupper() for c in name[1:]) or "-" in name or "_" in name:
        assert is_secret_name(name.upper()) and is_secret_name(name.lower())


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_are_not_secret(name: str) -> None:
    assert not is_secret_name(name)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("key sk-proj-abcDEF123456ghiJKL789 here", "key sk-*** here"),
        ("sk-ant-api03-AbCdEfGhIjKlMnOp_qr-st", "sk-***"),
        ("sk-abcdefghijklmnopqrstuvwxyz0123456789", "sk-***"),
        ("aws AKIAIOSFODNN7EXAMPLE, temp ASIAIOSFODNN7EXAMPLE.", "aws AKIA***, temp ASIA***."),
        ("google AIzaSyA-1234567890abcdefghijklmnopqrstu", "google AIza***"),
        ("gh ghp_0123456789abcdefghijABCDEFGHIJ0123", "gh ghp_***"),
        ("slack xoxb-123456789012-abcdefghij", "slack xoxb-***"),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
            "jwt eyJ***",
        ),
        ("Authorization: Bearer abc.def-ghi", "Authorization: Bearer ***"),
        ("see /x?auth_header=Bearer%20abc&n=1", "see /x?auth_header=***&n=1"),
        ("see /x?X-Amz-Credential=AKIA%2F2024&n=1", "see /x?X-Amz-Credential=***&n=1"),
        # Not keys: too short, or a word that merely starts so.
        ("task-sk-1 and sk-short and skill", "task-sk-1 and sk-short and skill"),
        ("AKIA is a prefix, eyJ too", "AKIA is a prefix, eyJ too"),
        ("max_tokens=100&tokens=5", "max_tokens=100&tokens=5"),
    ],
)
def test_api_key_shapes_in_a_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_a_path_masks_names_and_shapes() -> None:
    assert redact_path(
        "/v1/chat?auth_header=Bearer+sk-proj-0123456789abc&max_tokens=5&token_count=3"
    ) == ("/v1/chat?auth_header=***&max_tokens=5&token_count=***")
    assert redact_path("/keys/sk-proj-0123456789abcdef/x?q=1") == "/keys/sk-***/x?q=1"
    assert redact_path("/v1/chat/completions") == "/v1/chat/completions"


def test_headers_by_name_and_by_shape() -> None:
    shown = mask_headers(
        [
            ("X-Amz-Credential", "AKIA/2024/us-east-1"),
            ("X-JWT-Assertion", "eyJ.x.y"),
            ("X-Client-Cert", "-----BEGIN CERTIFICATE-----"),
            ("X-Note", "for sk-ant-api03-0123456789abcdef"),
            ("Content-Type", "application/json"),
            ("X-Tenant", "acme"),
            ("X-Tenant", "blue"),
        ],
        always=frozenset({"x-tenant"}),
    )
    assert shown == {
        "x-amz-credential": MASK,
        "x-jwt-assertion": MASK,
        "x-client-cert": MASK,
        "x-note": "for sk-***",
        "content-type": "application/json",
        "x-tenant": "***, ***",
    }


def test_body_keys_by_name_whatever_their_value_but_numbers_stay() -> None:
    body: dict[str, Any] = {
        "model": "gpt-4o",
        "openai_api_key": "k1",
        "secret_key": "k2",
        "aws_secret_access_key": "k3",
        "token": {"access": "k4", "refresh": "k5"},
        "credentials": ["k6", "k7"],
        "max_tokens": 100,
        "token_count": 12,
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        "promptTokenCount": 9,
        "use_auth": True,
        "session": None,
        "messages": [{"role": "user", "content": "my key: sk-proj-0123456789abcdefgh"}],
    }
    assert mask_json(body) == {
        "model": "gpt-4o",
        "openai_api_key": MASK,
        "secret_key": MASK,
        "aws_secret_access_key": MASK,
        "token": MASK,
        "credentials": MASK,
        "max_tokens": 100,
        "token_count": 12,
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
        "promptTokenCount": 9,
        "use_auth": True,
        "session": None,
        "messages": [{"role": "user", "content": "my key: sk-***"}],
    }


def test_a_body_nested_past_the_depth_is_masked_not_a_recursion_error() -> None:
    deep: Any = "sk-proj-0123456789abcdefgh"
    for _ in range(5000):
        deep = [deep]
    shown = mask_json({"a": deep})
    for _ in range(MAX_MASK_DEPTH):  # (the body is level 0)
        shown = shown["a"] if isinstance(shown, dict) else shown[0]
    assert shown == MASK
