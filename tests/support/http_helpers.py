"""HTTP helpers for the fake's tests: a flavored GET, and a GET that hangs in a background thread."""

from __future__ import annotations

import threading
from collections.abc import Callable

import requests

from watchdog.fake.server import FakeMetadataServer

FLAVOR = {"Metadata-Flavor": "Google"}
ME = "instance/maintenance-event"
UPCOMING = "instance/upcoming-maintenance"


def get(fake: FakeMetadataServer, session: requests.Session, path: str, **params: str) -> requests.Response:
    """GET a metadata path with the flavor header (a 10 s client timeout guards against a hang)."""
    url = f"{fake.url}/computeMetadata/v1/{path}"
    return session.get(url, params=params, headers=FLAVOR, timeout=10, allow_redirects=False)


class Background:
    """A request running in a thread, so the test can change the fake while it hangs."""

    def __init__(self, call: Callable[[], requests.Response]) -> None:
        self.response: requests.Response | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,))
        self._thread.start()

    def _run(self, call: Callable[[], requests.Response]) -> None:
        try:
            self.response = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread to assert on
            self.error = exc

    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout: float = 10) -> requests.Response:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the request did not return"
        if self.error is not None:
            raise self.error
        assert self.response is not None
        return self.response


def hang(fake: FakeMetadataServer, path: str, **params: str) -> Background:
    """A wait_for_change GET in the background, with its own session (closed when it returns)."""

    def call() -> requests.Response:
        with requests.Session() as s:
            s.trust_env = False
            return get(fake, s, path, wait_for_change="true", **params)

    return Background(call)
