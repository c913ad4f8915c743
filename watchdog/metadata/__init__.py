"""Watching the GCE metadata server: typed values, classified errors, transport, hanging-GET watches."""
