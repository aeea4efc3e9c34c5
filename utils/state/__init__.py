"""Cluster state in Redis that processes publish and others read: rolling stats and heartbeats,
the control stream, response histograms, and the sinks' and proxies' published state."""
