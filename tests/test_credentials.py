"""controller.credentials: a token file re-read as client-go re-reads it (at most every
60 s, and after a 401), field report R11 (../shared/cases/field-reports.md)."""

from __future__ import annotations

import pytest

from controller.config import load_api_client_and_source
from controller.credentials import TOKEN_REREAD_PERIOD, RotatingTokenApiClient, TokenFile


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_token_is_cached_for_the_period_and_reread_after_it(tmp_path):
    f, clock = tmp_path / "token", Clock()
    f.write_text("one\n")
    t = TokenFile(f, clock=clock)
    assert t.header() == "Bearer one"
    f.write_text("two")
    clock.now += TOKEN_REREAD_PERIOD - 1
    assert t.header() == "Bearer one"  # client-go's cached file token source: one read per minute
    clock.now += 1
    assert t.header() == "Bearer two"


def test_a_401_rereads_at_once_and_says_whether_a_retry_is_worth_it(tmp_path):
    f, clock = tmp_path / "token", Clock()
    f.write_text("one")
    refused = []
    t = TokenFile(f, clock=clock, on_unauthorized=lambda: refused.append(1))
    sent = t.header()
    assert t.renew(sent) is False  # the file still holds the refused token: no retry
    f.write_text("two")
    assert t.renew(sent) is True and t.header() == "Bearer two"
    # A second request sent with the old token before the re-read: no new read, a retry.
    f.write_text("three")
    assert t.renew(sent) is True and t.header() == "Bearer two"
    assert len(refused) == 3  # one per 401


def test_a_file_being_rewritten_keeps_the_last_token_but_a_missing_file_at_start_is_an_error(tmp_path):
    f, clock = tmp_path / "token", Clock()
    with pytest.raises(FileNotFoundError):
        TokenFile(f, clock=clock).header()
    f.write_text("one")
    t = TokenFile(f, clock=clock)
    t.header()
    f.write_text("")
    clock.now += TOKEN_REREAD_PERIOD
    assert t.header() == "Bearer one"
    f.unlink()
    clock.now += TOKEN_REREAD_PERIOD
    assert t.header() == "Bearer one"


def kubeconfig(tmp_path, user: dict) -> str:
    import yaml

    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    return str(path)


def test_a_kubeconfig_token_file_is_rotated_and_a_static_token_is_not(tmp_path):
    (tmp_path / "sa-token").write_text("projected")
    api, source = load_api_client_and_source(kubeconfig(tmp_path, {"tokenFile": "sa-token"}))  # relative: kubectl's rule
    assert source == "kubeconfig" and isinstance(api, RotatingTokenApiClient)
    assert api.token.path == tmp_path / "sa-token"
    assert api.configuration.auth_settings()["BearerToken"]["value"] == "Bearer projected"
    (tmp_path / "sa-token").write_text("rotated")
    api.token.renew("Bearer projected")
    assert api.configuration.auth_settings()["BearerToken"]["value"] == "Bearer rotated"

    static, _ = load_api_client_and_source(kubeconfig(tmp_path, {"token": "fixed", "tokenFile": "sa-token"}))
    assert not isinstance(static, RotatingTokenApiClient)  # an inline token wins (client-go)
