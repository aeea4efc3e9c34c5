"""The wire format (docs/contract.md): what crawlhive reads and writes on Kafka, in one place.

- :mod:`.topics`: topic names (§1);
- :mod:`.messages`: the kinds of incoming request, their JSON Schemas (``schemas/``) and checks (§2);
- :mod:`.validation`: parsing and validating an incoming request (§2.1, §2.6, §2.7);
- :mod:`.records`: the dead letters of every stage (§6), the cleaned record (§13), timestamps;
- :mod:`.encoding`: the one JSON encoding of every output;
- :mod:`.fit`: an outbound message cut to fit one Kafka record (§10.5);
- :mod:`.produce`: send records and wait for every acknowledgement.

Every service imports this package; no service imports another (``make lint`` checks it).
"""
