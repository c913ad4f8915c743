"""Every exit status of `tpu-watchdog`, each defined once: systemd, scripts and the man page depend on them.

Where a status means something outside the program it follows sysexits(3): 78 (EX_CONFIG) is a bad
configuration, so the unit's RestartPreventExitStatus stops a restart loop on it, and 73 (EX_CANTCREAT) an
unusable state directory. 2 is argparse's own status for a bad command line. The small numbers say what a
command found, for scripts to test; their meaning is per command.
"""

EXIT_OK = 0
EXIT_CANNOT_LISTEN = 1  # fake-metadata: the listen address cannot be bound (run binds again later instead)
EXIT_USAGE = 2  # a bad command line
EXIT_CANTCREAT = 73  # run: the state directory is unusable
EXIT_LOCKED = 75  # run (EX_TEMPFAIL): another daemon holds the state directory; systemd's Restart= retries
EXIT_CONFIG = 78  # a configuration error: "tpu-watchdog: configuration error: WHERE: KEY: ..."
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it

EXIT_NO_HOLDERS = 1  # holders: nothing holds a TPU device (like grep finding nothing)
EXIT_LOST = 1  # drill, readiness: at least one holder would have lost (or will lose) its checkpoint
EXIT_NOTHING_TO_DRILL = 3  # drill, readiness: nothing holds a TPU device, so nothing was rehearsed or judged
EXIT_DRILL_DRY_RUN = 4  # drill --dry-run: nothing was signalled; it listed what a real drill would signal
EXIT_DRILL_DECLINED = 5  # drill: not confirmed at the prompt, so nothing was signalled
EXIT_NO_ANSWER = 1  # status: neither the daemon nor its state file could be read
EXIT_FROM_STATE_FILE = 3  # status: the daemon did not answer; this is what its state file says
EXIT_NO_HISTORY = 1  # history: the history file exists but cannot be read
EXIT_DEMO_FAILED = 1  # demo: the sample job did not exit cleanly with a checkpoint saved on SIGTERM
EXIT_DEMO_NEEDS = 3  # demo --multihost: jax, orbax, root or unshare missing here (it says how to get them)
