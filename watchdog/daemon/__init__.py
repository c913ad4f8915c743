"""watchdog/daemon."""
