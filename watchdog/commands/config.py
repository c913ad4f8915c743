"""`tpu-watchdog config`: the effective configuration, one setting per line, with where each value came from.

Takes the same flags as `run`, so an SRE can check a command line before starting the daemon with it.
The text output is a valid TOML file (dotted keys) apart from unset values, so it can seed a config file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from watchdog.config import values as config_values
from watchdog.config.schema import SETTINGS
from watchdog.config.settings import (
    DEFAULT_CONFIG_PATH,
    Config,
    add_config_arguments,
    as_dict,
    displayed,
    environment_help,
    load_config_or_exit,
)
from watchdog.exitcodes import EXIT_OK


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = environment_help()
    parser.add_argument(
        "--json", action="store_true", help="print JSON: value, source, env var and flag per key"
    )
    add_config_arguments(parser)


def _text(config: Config) -> str:
    if config.config_file is not None:
        header = f"# config file: {config.config_file}"
    else:
        header = f"# config file: none ({DEFAULT_CONFIG_PATH} not found; built-in defaults)"
    rows = [
        (f"{s.key} = {config_values.show(_plain(displayed(config, s)))}", str(config.source(s.key)))
        for s in SETTINGS
    ]
    width = max(len(assignment) for assignment, _ in rows)
    lines = [header] + [f"{assignment:<{width}}  # {source}" for assignment, source in rows]
    return "\n".join(lines) + "\n"


def _plain(value: object) -> object:
    return str(value) if isinstance(value, config_values.Address) else value


def run(args: argparse.Namespace) -> int:
    config = load_config_or_exit(args, os.environ)
    if isinstance(config, int):
        return config
    for warning in config.warnings:  # what `run` would log at start
        sys.stderr.write(f"tpu-watchdog: warning: {warning}\n")
    if args.json:
        document = {"config_file": config.config_file, "settings": as_dict(config)}
        sys.stdout.write(json.dumps(document, indent=2) + "\n")
    else:
        sys.stdout.write(_text(config))
    return EXIT_OK
