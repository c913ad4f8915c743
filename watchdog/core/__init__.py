"""watchdog/core."""
