"""The application layer: the ``crawlhive`` command and what only it uses.

* :mod:`.cli`: the command line (every subcommand, exit codes, logging set-up);
* :mod:`.cluster`: ``crawlhive up``: backing services, supervised components, status;
* :mod:`.demo` and :mod:`.demo_site`: ``crawlhive demo`` and the bundled site it crawls;
* :mod:`.embedded`: private ``redis-server`` and Tansu broker processes on loopback;
* :mod:`.state`: the state file through which other commands find a running ``up``.

The library layer (the rest of ``crawlhive.utils``) never imports from here.
"""
