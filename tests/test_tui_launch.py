"""``astrabox-sched-tui``'s command line: flags over environment, clean errors, no secrets shown."""

from __future__ import annotations

import pytest

from admin_tui.launch import build_parser, default_user, display_target, launch, settings_from
from nats_scheduler.seam import SchedulerConfigurationError


def _args(*argv: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(list(argv))


def test_flags_override_the_environment() -> None:
    env = {"ASTRABOX_NATS_URL": "nats://127.0.0.1:4222", "ASTRABOX_NATS_PREFIX": "ENVP",
           "ASTRABOX_NATS_USER": "env-user", "ASTRABOX_NATS_PASSWORD": "env-pw"}
    settings = settings_from(_args("--prefix", "FLAGP", "--user", "bob", "--password", "pw"),
                             env)
    assert (settings.url, settings.prefix) == ("nats://127.0.0.1:4222", "FLAGP")
    assert (settings.user, settings.password) == ("bob", "pw")


def test_settings_are_validated_before_connecting() -> None:
    with pytest.raises(SchedulerConfigurationError, match="ASTRABOX_NATS_URL"):
        settings_from(_args(), {})
    with pytest.raises(SchedulerConfigurationError, match="ASTRABOX_NATS_CREDS"):
        settings_from(_args("--url", "nats://127.0.0.1:1", "--creds", "/nonexistent"), {})


def test_a_bad_setting_is_one_line_and_exit_code_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ASTRABOX_NATS_URL", raising=False)
    monkeypatch.delenv("ASTRABOX_NATS_EMBEDDED", raising=False)
    assert launch([]) == 2
    err = capsys.readouterr().err
    assert err.startswith("astrabox-sched-tui: ") and "ASTRABOX_NATS_URL" in err
    assert "Traceback" not in err


def test_the_screen_never_shows_a_password() -> None:
    settings = settings_from(_args("--url", "nats://u:secret@127.0.0.1:4222,127.0.0.1:4223"), {})
    assert display_target(settings) == "nats://127.0.0.1:4222, nats://127.0.0.1:4223"


def test_actions_are_recorded_as_as_then_user_then_login() -> None:
    settings = settings_from(_args("--url", "nats://127.0.0.1:1", "--user", "op",
                                   "--password", "x"), {})
    assert default_user(_args("--as", "alice"), settings) == "alice"
    assert default_user(_args(), settings) == "op"
    assert default_user(_args(), settings.with_(user=None, password=None))
