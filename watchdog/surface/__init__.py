"""watchdog/surface."""
