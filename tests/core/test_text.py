"""`valid_text`: what UTF-8 cannot carry is escaped, everything else is left as it is."""

from __future__ import annotations

from watchdog.core.text import valid_text


def test_lone_surrogates_are_escaped_and_valid_text_is_kept() -> None:
    assert valid_text(b"tr\xffin".decode("utf-8", "surrogateescape")) == "tr\\udcffin"
    assert valid_text("python3 \u00e9\u4e2d") == "python3 \u00e9\u4e2d"
    assert valid_text("") == ""
