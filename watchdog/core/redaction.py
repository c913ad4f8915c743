"""How a secret URL is shown: a webhook URL (Slack, Google Chat) lets whoever holds it post, so only its
scheme and host ever appear in a log line, /status, `status --json` or `tpu-watchdog config`. Pure."""

from __future__ import annotations

from urllib.parse import urlsplit

REDACTED = "…redacted"


def redacted_url(url: str) -> str:
    """`https://hooks.slack.com/services/T0/B0/XYZ` -> `https://hooks.slack.com/…redacted`: the scheme and
    host (and port) are kept to tell webhooks apart; user, path, query and fragment never are."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is no number: nothing of it is trusted to be harmless
        return REDACTED
    if not parts.scheme or not host or not host.isprintable():
        return REDACTED
    shown_host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{shown_host}{port}/{REDACTED}"
