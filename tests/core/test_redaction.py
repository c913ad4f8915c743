"""A secret URL shows only its scheme and host."""

from __future__ import annotations

import pytest

from watchdog.core.redaction import redacted_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.slack.com/services/T0/B0/XYZ", "https://hooks.slack.com/…redacted"),
        (
            "https://chat.googleapis.com/v1/spaces/AAA/messages?key=K&token=T",
            "https://chat.googleapis.com/…redacted",
        ),
        ("http://user:pass@relay.example:8080/hook#frag", "http://relay.example:8080/…redacted"),
        ("http://[::1]:9000/x", "http://[::1]:9000/…redacted"),
        ("not a url at all", "…redacted"),
        ("https://host:notaport/secret", "…redacted"),
        ("", "…redacted"),
    ],
)
def test_only_scheme_and_host_are_shown(url: str, shown: str) -> None:
    assert redacted_url(url) == shown
