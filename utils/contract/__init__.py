"""The wire format (docs/contract.md): what crawlhive reads and writes on Kafka, in one place.

- :mod:`.topics`: topic names (§1);
- :mod:`.messages`: the kinds of incoming request, their JSON Schemas (``schemas/``) and checks (§2),
  and the limits a validating process passes in (:class:`~.messages.RequestLimits`, §2.7);
- :mod:`.validation`: parsing and validating an incoming request (§2.1, §2.6, §2.7);
- :mod:`.hosts`, :mod:`.recrawl`: request-field rules (host names, §2.6; ``recrawl``, §19.1);
- :mod:`.text`: a client's value quoted in a reason (§6);
- :mod:`.records`: the shapes of the crawled item (§5), the dead letters of every stage (§6) and
  the cleaned record (§13), their builders, timestamps;
- :mod:`.encoding`: the one JSON encoding of every output;
- :mod:`.fit`: an outbound message cut to fit one Kafka record (§10.5);
- :mod:`.produce`: send records and wait for every acknowledgement.

Every service imports this package; no service imports another. It is the floor of the library: it
imports nothing else of crawlhive, only the standard library and third-party packages (``make lint``
checks both).
"""
