"""redis-monitor: answers info/stop/expire/stats/domain-config, reclaims leases, emits completion."""
