"""The VM's service account as the metadata server serves it, so Google's client libraries on a rehearsal
find credentials: `instance/service-accounts/{default,EMAIL}/{aliases,email,scopes,token}`.

The token is obviously fake and never a secret: a fixed string no Google API accepts (a job that calls a
real API with it gets a 401). It is served in the real shape (`access_token`, `expires_in`, `token_type`),
as JSON by default, and left out of recursive answers, as the real server does.
"""

from __future__ import annotations

import re

from watchdog.fake.vm_identity import PROJECT_NUMBER

ACCOUNTS = "instance/service-accounts"
DEFAULT_EMAIL = f"{PROJECT_NUMBER}-compute@developer.gserviceaccount.com"  # the Compute default account
DEFAULT_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
FAKE_TOKEN = {
    "access_token": "fake-access-token-from-tpu-watchdog-fake-metadata-not-a-secret",
    "expires_in": 3599,
    "token_type": "Bearer",
}
_TOKEN_KEY = re.compile(rf"^{ACCOUNTS}/[^/]+/token$")


def is_token(key: str) -> bool:
    """Whether `key` is an account's token: JSON by default, never in a recursive answer."""
    return _TOKEN_KEY.match(key) is not None


def account_keys(
    email: str = DEFAULT_EMAIL, scopes: tuple[str, ...] = DEFAULT_SCOPES
) -> dict[str, str | list[str] | dict[str, object]]:
    """Every key of one service account, under `default` and under its email (the real server serves it
    under both names)."""
    keys: dict[str, str | list[str] | dict[str, object]] = {}
    for alias in ("default", email):
        base = f"{ACCOUNTS}/{alias}"
        keys[f"{base}/aliases"] = ["default"]
        keys[f"{base}/email"] = email
        keys[f"{base}/scopes"] = list(scopes)
        keys[f"{base}/token"] = dict(FAKE_TOKEN)
    return keys
