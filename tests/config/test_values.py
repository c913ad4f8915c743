"""Single-value parsers: addresses, seconds, lists and hook commands, good and bad."""

from __future__ import annotations

import pytest

from watchdog.config import values as v


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9478", v.Address("127.0.0.1", 9478)),
        ("10.1.2.3:0", v.Address("10.1.2.3", 0)),
        ("[::1]:9478", v.Address("::1", 9478)),
        ("[0:0::1]:80", v.Address("::1", 80)),
        ("localhost:1", v.Address("localhost", 1)),
        ("tpu-vm-0.internal:8080", v.Address("tpu-vm-0.internal", 8080)),
    ],
)
def test_listen_addresses(text: str, expected: v.Address) -> None:
    assert v.listen_address(text) == expected


def test_an_address_prints_as_it_is_written() -> None:
    assert str(v.Address("::1", 9478)) == "[::1]:9478"
    assert str(v.Address("127.0.0.1", 9478)) == "127.0.0.1:9478"


@pytest.mark.parametrize(
    "text", ["127.0.0.1", "127.0.0.1:", "127.0.0.1:x", "1.2.3.4:65536", "::1:80", "[::1", "[nope]:80", ":80",
             "-bad-:80", "a..b:80", "[::1]x", "1.2.3.4:\u00b2", "1.2.3.4:\u0663"],
)  # fmt: skip
def test_bad_listen_addresses(text: str) -> None:
    with pytest.raises(v.BadValueError):
        v.listen_address(text)


@pytest.mark.parametrize(
    "text", ["169.254.169.254", "metadata.google.internal", "127.0.0.1:8080", "[fd20:ce::254]"]
)
def test_metadata_hosts(text: str) -> None:
    assert v.metadata_host(text) == text


@pytest.mark.parametrize("text", ["http://metadata", "host:0", "host:", "", "a b", "host:\u00b3"])
def test_bad_metadata_hosts(text: str) -> None:
    with pytest.raises(v.BadValueError):
        v.metadata_host(text)


def test_seconds_accept_numbers_and_reject_the_rest() -> None:
    assert v.seconds(5, maximum=10) == 5.0
    assert v.seconds(10, maximum=10) == 10.0
    assert v.seconds_text(" 2.5 ", maximum=10) == 2.5
    for bad in (-1, float("inf"), True, "5", None, 10.5):
        with pytest.raises(v.BadValueError):
            v.seconds(bad, maximum=10)
    with pytest.raises(v.BadValueError):
        v.seconds(0, maximum=10, positive=True)


def test_a_duration_past_its_maximum_says_the_bound() -> None:
    with pytest.raises(v.BadValueError, match=r"^1e\+12 is more than the maximum, 86400 s \(24 h\)$"):
        v.seconds_text("1e12", maximum=86400)
    assert v.duration(30 * 86400) == "2592000 s (30 d)"
    assert v.duration(3600) == "3600 s (1 h)"
    assert v.duration(90) == "90 s"


def test_integers_and_urls_have_a_maximum() -> None:
    assert v.integers([1, 7], minimum=1, maximum=7) == (1, 7)
    with pytest.raises(v.BadValueError, match="8 is more than the maximum, 7"):
        v.integers_text("1,8", minimum=1, maximum=7)
    with pytest.raises(v.BadValueError, match="3 URLs are more than the maximum, 2"):
        v.webhook_urls(["http://a", "http://b", "http://c"], maximum=2)


def test_a_path_longer_than_path_max_is_refused_here_not_by_the_kernel_later() -> None:
    assert v.string("/" + "a" * (v.PATH_MAX - 2), absolute_path=True)
    with pytest.raises(v.BadValueError, match="PATH_MAX"):
        v.string("/" + "a" * (v.PATH_MAX - 1), absolute_path=True)


def test_commands_from_text_are_split_without_a_shell() -> None:
    assert v.command_text("/bin/echo 'a b' $HOME") == ("/bin/echo", "a b", "$HOME")
    assert v.command_text('["/bin/echo", "x"]') == ("/bin/echo", "x")
    assert v.command_text("  ") is None
    assert v.command([]) is None


def test_lists_from_text() -> None:
    assert v.list_text("a, b,,c") == ["a", "b", "c"]
    assert v.list_text('["a,b", "c"]') == ["a,b", "c"]
    with pytest.raises(v.BadValueError):
        v.list_text('["a", ')
    with pytest.raises(v.BadValueError, match="nested too deeply"):
        v.list_text("[" * 1000)  # tomllib recurses per level: a RecursionError, not a BadValueError


def test_no_string_may_hold_a_nul() -> None:
    """The OS refuses NUL in a path or argument, with a ValueError far from the configuration."""
    for parse in (
        v.string,
        v.metadata_host,
        lambda value: v.strings([value]),
        lambda value: v.command([value]),
    ):
        with pytest.raises(v.BadValueError, match="NUL"):
            parse("/a\0b")


def test_show_writes_values_as_toml() -> None:
    assert v.show(300.0) == "300"
    assert v.show(2.5) == "2.5"
    assert v.show(("a", 'b"')) == '["a", "b\\""]'
    assert v.show(None) == "(unset)"
    assert v.show(False) == "false"


def test_webhook_urls_from_the_environment_never_quote_a_bad_array() -> None:
    """list_text's error quotes the text; for webhooks the text is secret URLs."""
    url = "https://hooks.example.com/services/T0/B0/s3cr3t"
    assert v.webhook_urls_text(f'["{url}"]', maximum=1) == (url,)
    with pytest.raises(v.BadValueError) as caught:
        v.webhook_urls_text(f'["{url}", ', maximum=1)
    assert "s3cr3t" not in str(caught.value)
    assert "is not a TOML array" in str(caught.value)
