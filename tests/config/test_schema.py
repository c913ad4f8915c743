"""The one table of settings: names derived one way (environment, sections), each default what its own
parser makes of its spelling, choices and ranges enforced, and every flag it names a real flag of `run`."""

from __future__ import annotations

import argparse

import pytest

from watchdog.config import schema
from watchdog.config.schema import BY_ENV, BY_KEY, SECTIONS, SETTINGS
from watchdog.config.settings import add_config_arguments
from watchdog.config.values import Address, BadValueError


def test_environment_names_and_sections_come_from_the_key() -> None:
    grace = BY_KEY["drain.maintenance_grace"]
    assert grace.env == "TPU_WATCHDOG_DRAIN_MAINTENANCE_GRACE"
    assert grace.section == "drain"
    assert BY_KEY["upcoming_maintenance.drain_before_window"].env == (
        "TPU_WATCHDOG_UPCOMING_MAINTENANCE_DRAIN_BEFORE_WINDOW"
    )
    assert (BY_KEY["state_dir"].env, BY_KEY["state_dir"].section) == ("TPU_WATCHDOG_STATE_DIR", "")
    assert all(BY_ENV[s.env] is s and BY_KEY[s.key] is s for s in SETTINGS)  # no two settings share a name
    assert len({s.attr for s in SETTINGS}) == len(SETTINGS)
    assert frozenset(
        {
            "metadata",
            "devices",
            "exclude",
            "drain",
            "events",
            "upcoming_maintenance",
            "hooks",
            "http",
            "notify",
        }
    ) == (SECTIONS)


def spelled(default: object) -> object:
    """The default as a TOML file (or, for an address, the environment) would spell it."""
    if isinstance(default, tuple):
        return list(default)
    return str(default) if isinstance(default, Address) else default


@pytest.mark.parametrize("setting", [s for s in SETTINGS if s.default is not None], ids=lambda s: s.key)
def test_each_default_is_what_its_parser_makes_of_it(setting: schema.Setting) -> None:
    assert setting.parse(spelled(setting.default)) == setting.default


def test_unset_defaults_are_what_off_parses_to() -> None:
    assert BY_KEY["upcoming_maintenance.drain_before_window"].parse(0) is None  # 0 = off
    assert BY_KEY["upcoming_maintenance.drain_before_window"].parse_text("off") is None
    for hook in ("hooks.on_event_start", "hooks.on_drain_end", "hooks.on_event_clear"):
        assert BY_KEY[hook].parse([]) is None  # an empty command: no hook
        assert BY_KEY[hook].parse_text("") is None


@pytest.mark.parametrize(
    ("key", "allowed"),
    [
        ("log_level", schema.LOG_LEVELS),
        ("drain.on_timeout", schema.ON_TIMEOUT),
        ("events.migrate", schema.MIGRATE_ACTIONS),
        ("events.unknown", schema.UNKNOWN_EVENT_ACTIONS),
    ],
)
def test_a_choice_takes_its_values_in_any_case_and_nothing_else(key: str, allowed: tuple[str, ...]) -> None:
    setting = BY_KEY[key]
    assert setting.allowed == " | ".join(allowed)  # what error messages and help show
    assert setting.default in allowed
    for word in allowed:
        assert setting.parse(word.upper()) == word
        assert setting.parse_text(f" {word} ") == word
    with pytest.raises(BadValueError):
        setting.parse("sometimes")


def test_ranges_seconds_and_lists() -> None:
    assert BY_KEY["drain.maintenance_grace"].parse(0) == 0.0  # SIGKILL at once is allowed
    with pytest.raises(BadValueError):
        BY_KEY["hooks.timeout"].parse(0)  # a hook with no time at all would always be killed
    with pytest.raises(BadValueError):
        BY_KEY["drain.preemption_grace"].parse_text("-1")
    assert BY_KEY["devices.patterns"].parse_text("/dev/accel*, /dev/vfio/*") == ("/dev/accel*", "/dev/vfio/*")
    with pytest.raises(BadValueError):
        BY_KEY["devices.patterns"].parse([])  # no devices: nothing would ever be drained
    with pytest.raises(BadValueError):
        BY_KEY["devices.patterns"].parse(["accel*"])  # relative
    assert BY_KEY["exclude.uids"].parse_text("0,1000") == (0, 1000)
    with pytest.raises(BadValueError):
        BY_KEY["exclude.pids"].parse_text("0")  # pid 0 names no process


def test_every_flag_the_table_names_is_a_flag_of_run_and_no_flag_is_missing() -> None:
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    flags = {option for action in parser._actions for option in action.option_strings}
    assert {s.flag for s in SETTINGS if s.flag} == flags - {"-h", "--help", "--config"}


def test_device_numbers_are_major_minor_normalised_and_never_one_everyone_holds() -> None:
    allow = BY_KEY["devices.allow_numbers"]
    assert allow.parse(["240:0", " 240:0", "121:3"]) == ("240:0", "121:3")
    assert allow.parse_text("240:0, 1:7") == ("240:0", "1:7")
    refused = [("240", "not a device number"), ("a:b", "not a device number"), ("4096:0", "out of range"),
               ("1:3", "nearly every process holds"), ("136:4", "nearly every process holds")]  # fmt: skip
    for bad, said in refused:
        with pytest.raises(BadValueError, match=said):
            allow.parse([bad])
    with pytest.raises(BadValueError):
        allow.parse("240:0")  # a string, not a list
