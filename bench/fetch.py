"""The impersonated fetch against the plain one (docs/contract.md §25, docs/operations.md).

The real-web-like site of ``bench/realweb.py`` (HTTPS, 500 loopback hosts, ~100 KB pages, a private
nginx) with HTTP/2 offered by ALPN, as most of the web does: one ``crawlhive crawler`` process
with FETCH=plain (Scrapy's HTTP/1.1 client over Twisted and OpenSSL) and one with
FETCH=impersonate (curl_cffi under the Chrome profile: its TLS ClientHello, HTTP/2, headers),
``--pairs`` times in turn, each stopping after ``--pages`` responses: pages/s and crawler CPU ms
per page of each, and the median ratio.

Run: ``.venv/bin/python bench/fetch.py [--pages 2000] [--pairs 3] [--conc 32]`` (needs nginx and
openssl: ``apt-get install nginx-light openssl``).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import tempfile
from pathlib import Path

from realweb import SITE, build_site, run_crawlhive

from crawlhive.app.embedded import EmbeddedCluster


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=2000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--conc", type=int, default=32)
    parser.add_argument("--no-h2", action="store_true", help="serve HTTP/1.1 only")
    args = parser.parse_args()
    build_site()
    if not args.no_h2:  # nginx 1.22's syntax (listen ... http2), every host
        conf = SITE / "nginx.conf"
        conf.write_text(conf.read_text().replace(" ssl;\n", " ssl http2;\n"))
    subprocess.run(["nginx", "-p", str(SITE), "-c", str(SITE / "nginx.conf")], check=True)
    try:
        with tempfile.TemporaryDirectory(prefix="crawlhive-fetch-") as tmp, EmbeddedCluster() as cluster:
            work = Path(tmp)
            ratios: list[tuple[float, float, float, float, float]] = []
            for run in range(args.pairs):
                got = {}
                for fetch in ("plain", "impersonate"):
                    result = run_crawlhive(cluster, work, f"{fetch[:3]}{run}", args.pages, args.conc, None, FETCH=fetch)
                    got[fetch] = (result["pages_per_s"], result["cpu_s"] * 1000 / max(1, result["pages"]))
                    rate, ms = got[fetch]
                    print(f"pair {run + 1}: FETCH={fetch:<11} {rate:6.1f} pages/s, {ms:.2f} CPU ms per page")
                (plain_rate, plain_ms), (imp_rate, imp_ms) = got["plain"], got["impersonate"]
                ratios.append((imp_ms / plain_ms, imp_rate / plain_rate, plain_ms, imp_ms, imp_rate))
            cpu, rate, plain_ms, imp_ms, imp_rate = sorted(ratios)[len(ratios) // 2]
            print(
                f"impersonate / plain, median of {len(ratios)} pairs: CPU per page x{cpu:.2f} ({imp_ms:.2f} ms against"
                f" {plain_ms:.2f}), pages/s x{rate:.2f} ({imp_rate:.1f})"
            )
    finally:
        pid = int((SITE / "nginx.pid").read_text()) if (SITE / "nginx.pid").exists() else 0
        if pid:
            os.kill(pid, signal.SIGTERM)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
