"""What the cluster shows of its REST services (:mod:`crawlhive.utils.process.views`): the ``rest``
stats type is their live nodes only (REST keeps no rolling counters; its own metrics are those of
each process, ``rest/metrics.py``)."""

from __future__ import annotations

from typing import Any

from crawlhive.utils.process.views import KindView


class RestView(KindView):
    """``stats: rest``: ``nodes``, when any REST service is live."""

    def rest_body(self) -> dict[str, Any]:
        nodes = self.nodes()
        return {"nodes": nodes} if nodes else {}

    bodies = {"rest": rest_body}
