"""watchdog/store."""
