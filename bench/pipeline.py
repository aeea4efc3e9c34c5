"""The pipeline figure: pages per second per core for crawl and clean together.

Reads what ``bench/realweb.py`` and ``bench/clean.py`` measured earlier in the same ``make bench``
run (``/tmp/crawlhive-bench/*.json``) and adds up the CPU one page costs:

* **crawl**: one ``crawlhive crawler`` process on the real-web-like site (HTTPS, 500 hosts, ~90 KB
  pages), CPU ms per page of the crawler process, plus Redis's CPU per page in the same runs;
* **clean**: one ``crawlhive cleaner`` process on real pages (the extraction corpus), CPU ms per
  record of the process and its extraction child, Kafka and the dedupe included.

Pages per second per core = 1000 / (crawl + clean). Beside it, the same for the pair a user would
otherwise run: plain Scrapy on the same site plus a bare ``trafilatura.extract`` loop on the same
pages (no Redis, no Kafka). The broker's CPU and the web server's are not counted on either side.

Run: ``.venv/bin/python bench/pipeline.py`` after the two benches.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FIGURES = Path("/tmp/crawlhive-bench")


def main() -> int:
    try:
        crawl = json.loads((FIGURES / "realweb.json").read_text())
        clean = json.loads((FIGURES / "clean.json").read_text())
    except OSError as exc:
        print(f"run bench/realweb.py and bench/clean.py first ({exc})", file=sys.stderr)
        return 2
    ours = crawl["crawler_cpu_ms_per_page"] + crawl["redis_cpu_ms_per_page"] + clean["cleaner_cpu_ms_per_page"]
    theirs = crawl["plain_scrapy_cpu_ms_per_page"] + clean["bare_trafilatura_cpu_ms_per_page"]
    print(
        f"pipeline (crawl + clean): {1000 / ours:.1f} pages/s per core"
        f" (crawler {crawl['crawler_cpu_ms_per_page']:.2f} + Redis {crawl['redis_cpu_ms_per_page']:.2f}"
        f" + cleaner {clean['cleaner_cpu_ms_per_page']:.2f} = {ours:.2f} CPU ms per page);"
        f" plain Scrapy + bare trafilatura {1000 / theirs:.1f} pages/s per core"
        f" ({crawl['plain_scrapy_cpu_ms_per_page']:.2f} + {clean['bare_trafilatura_cpu_ms_per_page']:.2f}"
        f" = {theirs:.2f} ms): ratio {theirs / ours:.2f}"
        f" (target >= 2.0: {'met' if theirs >= 2.0 * ours else 'NOT met'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
