"""A faithful fake of the GCE metadata server, with a control API and injectable faults (see server.py)."""
