"""watchdog/host."""
