"""fake/accounts.py: one service account under both of its names, and which keys are its tokens."""

from __future__ import annotations

from watchdog.fake.accounts import DEFAULT_EMAIL, FAKE_TOKEN, account_keys, is_token


def test_an_account_is_served_under_default_and_under_its_email() -> None:
    keys = account_keys("trainer@my-project.iam.gserviceaccount.com", ("scope-a", "scope-b"))
    for name in ("default", "trainer@my-project.iam.gserviceaccount.com"):
        base = f"instance/service-accounts/{name}"
        assert keys[f"{base}/email"] == "trainer@my-project.iam.gserviceaccount.com"
        assert keys[f"{base}/scopes"] == ["scope-a", "scope-b"]
        assert keys[f"{base}/aliases"] == ["default"]
        assert keys[f"{base}/token"] == FAKE_TOKEN
    assert DEFAULT_EMAIL.endswith("-compute@developer.gserviceaccount.com")


def test_only_an_accounts_token_is_a_token() -> None:
    assert is_token("instance/service-accounts/default/token")
    assert is_token(f"instance/service-accounts/{DEFAULT_EMAIL}/token")
    assert not is_token("instance/service-accounts/default/email")
    assert not is_token("instance/attributes/token")
    assert not is_token("instance/service-accounts/default/token/x")
