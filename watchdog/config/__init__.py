"""watchdog/config."""
