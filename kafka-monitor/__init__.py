"""kafka-monitor: validates `<prefix>.incoming` requests and writes them into the Redis frontier."""
