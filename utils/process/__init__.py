"""What makes a process: the registry of process kinds (:mod:`.kinds`), the loop both monitors
run and stop signals (:mod:`.loop`), the consumer workers' skeleton (:mod:`.worker`) and the one
plugin loader (:mod:`.plugins`)."""
