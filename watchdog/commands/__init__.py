"""One module per `tpu-watchdog` sub-command; each has `add_arguments(parser)` and `run(args) -> int`.

`watchdog.cli` imports only the module of the command being run, so a light command such as `holders`
does not pay for the daemon's imports at start-up.
"""
