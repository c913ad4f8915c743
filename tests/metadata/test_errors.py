"""Error kinds are metric labels: their values are stable, and statuses map to the right kind."""

from __future__ import annotations

import pytest

from watchdog.metadata.errors import ErrorKind, MetadataError, kind_for_status


def test_kind_values_are_the_documented_label_set() -> None:
    assert [k.value for k in ErrorKind] == [
        "connection_refused",
        "connection_reset",
        "timeout",
        "dns",
        "http_5xx",
        "http_429",
        "http_403",
        "http_404",
        "http_4xx",
        "body_not_text",
        "body_too_large",
        "missing_flavor",
        "malformed_value",
        "other",
    ]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, ErrorKind.HTTP_4XX),
        (403, ErrorKind.HTTP_403),
        (404, ErrorKind.HTTP_404),
        (412, ErrorKind.HTTP_4XX),
        (429, ErrorKind.HTTP_429),
        (500, ErrorKind.HTTP_5XX),
        (503, ErrorKind.HTTP_5XX),
        (301, ErrorKind.OTHER),
    ],
)
def test_status_kinds(status: int, kind: ErrorKind) -> None:
    assert kind_for_status(status) is kind


def test_error_names_path_kind_and_detail() -> None:
    error = MetadataError(ErrorKind.HTTP_5XX, "instance/preempted", "HTTP 503", 503)
    assert str(error) == "instance/preempted: http_5xx: HTTP 503"
    assert (error.kind, error.path, error.status) == (ErrorKind.HTTP_5XX, "instance/preempted", 503)
