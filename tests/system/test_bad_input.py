"""Bad input to the parsers of the state file and the configuration (file, environment, flags): each gives a
value or raises its one documented error; nothing else escapes. Property-based (hypothesis), with real files.
/proc: test_bad_procfs.py; the command line: test_bad_usage.py."""

from __future__ import annotations

import argparse
import copy
import gc
import glob
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.support.bad_input import FEW, SOME, clean_text, json_values
from watchdog.config.schema import BY_ENV, BY_KEY, SECTIONS
from watchdog.config.settings import ConfigError, add_config_arguments, load_config
from watchdog.core.lifecycle import ActiveDrain, Event
from watchdog.core.process import ProcessIdentity
from watchdog.store.records import SavedState, SignalRecord, StateFormatError
from watchdog.store.statefile import STATE_FILE, StateStore

# --- the state file ---------------------------------------------------------------------------------
GOOD_STATE = SavedState(
    "b",
    (
        Event(
            "ev", "maintenance-event", "TERMINATE_ON_HOST_MAINTENANCE", 100.0, False, 400.0, confirmed=False
        ),
    ),
    ActiveDrain(["ev"], 101.0, 401.0),
    last_outcome="drained",
    signals=(
        SignalRecord(ProcessIdentity(10, 5), "python3", "SIGTERM", 102.0, 102.5, "sent"),
        SignalRecord(ProcessIdentity(11, 6), "", "SIGKILL", 402.0),
    ),
)
BAD_VALUES = st.one_of(
    json_values,
    st.sampled_from([-1, -1e300, float("nan"), float("inf"), float("-inf"), 10**400, -(10**400), 0, 2**63]),
    st.sampled_from(["SIGNOPE", "sigterm", "", "SIG_DFL", "SIGRTMIN+1", "15", "x" * 100_000, "\udc80"]),
    st.sampled_from([[], {}, [{}], {"format": "tpu-watchdog-state"}, True]),
)


def _paths(document: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document: dict keys and list indices, nested."""
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, item in document.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(document, list):
        for index, item in enumerate(document):
            found += _paths(item, (*prefix, index))
    return found


@st.composite
def mutated_states(draw: st.DrawFn) -> object:
    """The valid document with one to three places replaced by a wrong value, or deleted."""
    document: Any = copy.deepcopy(GOOD_STATE.to_json(written_at=500.0))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(document)
        if not paths:
            break
        *parents, last = draw(st.sampled_from(paths))
        holder = document
        for step in parents:
            holder = holder[step]
        if draw(st.booleans()) and isinstance(holder, dict):
            del holder[last]
        else:
            holder[last] = copy.deepcopy(draw(BAD_VALUES))  # a later step must not change the strategy's own
    return document


def _state_or_format_error(document: object) -> SavedState | None:
    try:
        state = SavedState.from_json(document)
    except StateFormatError:
        return None
    # What is accepted is a state the daemon can write back and read again: nothing non-finite in it.
    again = json.loads(json.dumps(state.to_json(written_at=1.0), allow_nan=False))
    assert SavedState.from_json(again) == state
    return state


@SOME
@given(json_values | st.fixed_dictionaries({"format": st.just("tpu-watchdog-state"), "version": st.just(1)}))
def test_state_from_any_json_is_a_state_or_a_format_error(document: object) -> None:
    _state_or_format_error(document)


@SOME
@given(mutated_states())
def test_state_with_wrong_fields_is_a_state_or_a_format_error(document: object) -> None:
    """Wrong types, negative, NaN, infinite and huge numbers, huge strings, unknown signal names, missing
    fields: found by the field check, never as a KeyError, TypeError or OverflowError."""
    _state_or_format_error(document)
    text = json.dumps(document)  # as the store reads it: NaN and Infinity are JSON to Python
    _state_or_format_error(json.loads(text))


def test_state_huge_integer_time_is_a_format_error() -> None:
    """Found by the property above: a time too large for a float raised OverflowError out of the store."""
    document = GOOD_STATE.to_json(written_at=1.0)
    document["drain"]["deadline_at"] = 10**400  # type: ignore[index]
    with pytest.raises(StateFormatError, match=r"drain\.deadline_at: expected a number"):
        SavedState.from_json(json.loads(json.dumps(document)))
    document = GOOD_STATE.to_json(written_at=1.0) | {"version": True}
    with pytest.raises(StateFormatError, match="version: expected 1"):
        SavedState.from_json(document)


state_bytes = st.one_of(
    st.binary(max_size=300),
    mutated_states().map(lambda d: json.dumps(d).encode()),
    json_values.map(lambda d: json.dumps(d).encode()),
    st.just(json.dumps(GOOD_STATE.to_json(1.0)).encode("utf-16")),
)


@FEW
@given(state_bytes)
def test_state_store_sets_any_bad_file_aside_and_starts_clean(raw: bytes) -> None:
    try:
        expected: SavedState | None = SavedState.from_json(json.loads(raw))
    except (ValueError, RecursionError):
        expected = None
    with tempfile.TemporaryDirectory() as state_dir:
        path = os.path.join(state_dir, STATE_FILE)
        Path(path).write_bytes(raw)
        store = StateStore(state_dir, boot_id="b")
        if expected is None:
            assert store.state == SavedState("b")
            assert not os.path.exists(path)
            (aside,) = glob.glob(path + ".corrupt-*")
            assert Path(aside).read_bytes() == raw  # kept for a post-mortem
        elif expected.boot_id == "b":
            assert store.state == expected
        else:
            assert store.state == SavedState("b")


# --- the configuration ------------------------------------------------------------------------------
def _string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but TOML wants DEL escaped too and no surrogates."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _toml(value: object) -> str:
    """A TOML value: inline arrays and tables, every string as an escaped basic string."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return {"nan": "nan", "inf": "inf", "-inf": "-inf"}.get(repr(value), repr(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_string(k)} = {_toml(item)}" for k, item in value.items()) + "}"
    return str(value)  # a datetime literal


def _document(entries: dict[str, object]) -> str:
    """A TOML file from dotted keys (the section once, as a [table])."""
    top = [f"{_string(key)} = {_toml(value)}" for key, value in entries.items() if "." not in key]
    sections: dict[str, list[str]] = {}
    for key, value in entries.items():
        if "." in key:
            section, _, leaf = key.partition(".")
            sections.setdefault(section, []).append(f"{_string(leaf)} = {_toml(value)}")
    tables = [f"[{_string(name)}]\n" + "\n".join(lines) for name, lines in sections.items()]
    return "\n".join(top) + "\n" + "\n".join(tables) + "\n"


GOOD_VALUES: dict[str, object] = {
    "state_dir": "/var/lib/tpu-watchdog", "listen": "127.0.0.1:0", "log_level": "info", "dry_run": True,
    "metadata.host": "127.0.0.1:8080", "devices.patterns": ["/dev/accel*"], "devices.extra_paths": [],
    "exclude.pids": [1], "exclude.names": ["sshd"], "exclude.uids": [0], "drain.maintenance_grace": 1.5,
    "drain.preemption_grace": 0, "drain.on_timeout": "leave", "events.migrate": "drain",
    "events.unknown": "ignore", "upcoming_maintenance.drain_before_window": 0,
    "upcoming_maintenance.drain_when_ongoing": False, "hooks.on_event_start": ["/bin/true", "x"],
    "hooks.on_drain_end": [], "hooks.on_event_clear": ["true"], "hooks.timeout": 5,
}  # fmt: skip
toml_scalars = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(),
    clean_text,
    st.sampled_from(
        ["", " ", "/", "relative", "/a\x00b", "127.0.0.1:\u00b2", "[::1]:99999", "KILL", "a:b:c"]
    ),
    st.datetimes(),
)
toml_values = st.recursive(
    toml_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(clean_text, inner, max_size=2),
    max_leaves=6,
)


def _load(contents: str | bytes, environ: dict[str, str] | None = None, *argv: str) -> str | None:
    """Load a configuration file holding `contents`; the ConfigError's message, or None if it loaded."""
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "config.toml"
        path.write_bytes(contents.encode() if isinstance(contents, str) else contents)
        parser = argparse.ArgumentParser()
        add_config_arguments(parser)
        try:
            load_config(parser.parse_args(["--config", str(path), *argv]), environ or {})
        except ConfigError as error:
            return str(error)
        return None


@SOME
@given(st.sampled_from(sorted(BY_KEY)), toml_values, st.sets(st.sampled_from(sorted(GOOD_VALUES))))
def test_a_bad_value_in_the_file_is_a_config_error_naming_its_key(
    key: str, value: object, others: set[str]
) -> None:
    """Every real key given a wrong-typed or out-of-range value (beside good values for other keys)."""
    entries = {name: GOOD_VALUES[name] for name in others if name != key}
    entries[key] = value
    message = _load(_document(entries))
    assert message is None or key in message, message


@SOME
@given(
    st.dictionaries(
        st.sampled_from([*sorted(BY_KEY), *sorted(SECTIONS)]) | clean_text.filter(lambda k: k not in BY_KEY),
        toml_values,
        min_size=1,
        max_size=4,
    )
)
def test_unknown_keys_and_misplaced_tables_are_config_errors_naming_a_key(entries: dict[str, object]) -> None:
    """Unknown keys (top-level or in a table), tables where values belong and values where tables do."""
    lines = [f"{_string(key)} = {_toml(value)}" for key, value in entries.items()]
    message = _load("\n".join(lines) + "\n")
    assert message is None or any(key in message or repr(key) in message for key in entries), message


@SOME
@given(
    st.one_of(
        st.text(max_size=200).map(lambda t: t.encode("utf-8", "surrogatepass")), st.binary(max_size=200)
    )
)
def test_any_file_contents_load_or_are_a_config_error_naming_the_file(raw: bytes) -> None:
    message = _load(raw)
    assert message is None or "config.toml" in message


@pytest.mark.parametrize(
    ("contents", "expected"),
    [
        ('listen = "127.0.0.1:\u00b2"', "listen"),  # int("²") raised ValueError out of the loader
        ('[metadata]\nhost = "h:\u00b3"', "metadata.host"),
        ('state_dir = "/var/lib/a\\u0000b"', "state_dir"),  # accepted; os.makedirs raised ValueError later
        ('[devices]\nextra_paths = ["/tmp/a\\u0000"]', "devices.extra_paths"),
        ("state_dir = " + "[" * 600 + "]" * 600, "nested too deeply"),  # RecursionError in tomllib
    ],
)
def test_inputs_that_used_to_escape_the_loader(contents: str, expected: str) -> None:
    # The deepest input parses at the recursion limit. A garbage collection there would run the finalizers
    # of what earlier tests in this process left (an urllib3 pool's, in a parallel run) at that depth: a
    # RecursionError in them, "Exception ignored". So the garbage goes first, and none is collected meanwhile.
    gc.collect()
    gc.disable()
    try:
        message = _load(contents)
    finally:
        gc.enable()
    assert message is not None
    assert expected in message


@SOME
@given(
    st.sampled_from(sorted(BY_ENV)),
    st.text(max_size=40) | st.sampled_from(["[" * 600, "1.2.3.4:\u00b2", "nan"]),
)
def test_any_environment_value_is_a_config_error_naming_variable_and_key(name: str, value: str) -> None:
    message = _load("", {name: value})
    assert message is None or (name in message and BY_ENV[name].key in message), message


@pytest.mark.parametrize(
    "flag", ["--exclude", "--device", "--webhook", "--grace", "--metadata-host", "--listen", "--on-timeout"]
)
def test_a_flag_given_double_dash_is_a_config_error_quoting_it(flag: str) -> None:
    """argparse hands `--flag=--` over as [], not "--" (Hypothesis found --exclude=-- crashing the load)."""
    message = _load("", None, f"{flag}=--")
    assert message is not None
    assert f"flag {flag}" in message
    shown = "redacted" if flag == "--webhook" else "--"  # a webhook URL is a secret, even a wrong one
    assert shown in message.removeprefix(f"flag {flag}")
    assert "[]" not in message


@FEW
@given(st.lists(st.text(max_size=12), min_size=1, max_size=3))
def test_any_exclude_flag_is_a_config_error_naming_the_flag(values: list[str]) -> None:
    message = _load("", None, *(f"--exclude={value}" for value in values))
    assert message is None or "--exclude" in message
