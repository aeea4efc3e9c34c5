"""Configuration, the floor every process stands on: the settings (their declarations in
:mod:`.defaults`, generated types in :mod:`.setting_types`, precedence and typed reads in
:mod:`.settings`), logging and secret masking (:mod:`.log`) and the library's exceptions
(:mod:`.errors`)."""
