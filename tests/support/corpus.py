"""The extraction corpus (real pages with their main text) and the article-body token F1.

``tests/data/extraction/pages.jsonl.xz`` holds one JSON object a line: ``url``, ``html`` and
``text`` (the page's main text: see ``tests/data/extraction/README.md`` for where the pages come
from and their licence). :func:`load` reads it, or a directory in the layout of a public article
extraction benchmark (``ground-truth.json`` mapping an id to ``{"url", "articleBody"}``, and
``html/<id>.html.gz``), so that the bench can also run on pages that are not committed here.

The score is the one extraction benchmarks use: the bag of word tokens (lower case, ``\\w+``) of
the extracted text against that of the ground truth, precision, recall and F1 per page, averaged
over the pages (a page with an empty extraction scores 0).
"""

from __future__ import annotations

import gzip
import json
import lzma
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "data" / "extraction" / "pages.jsonl.xz"
_TOKEN = re.compile(r"\w+")


@dataclass(frozen=True)
class Sample:
    url: str
    html: str
    text: str


def load(path: Path = CORPUS) -> list[Sample]:
    """The samples of the committed corpus, or of a benchmark directory (see the module)."""
    if path.is_dir():
        truth = json.loads((path / "ground-truth.json").read_text(encoding="utf-8"))
        samples = []
        for key in sorted(truth):
            raw = gzip.decompress((path / "html" / f"{key}.html.gz").read_bytes())
            samples.append(Sample(truth[key]["url"], raw.decode("utf-8", "replace"), truth[key]["articleBody"]))
        return samples
    with lzma.open(path, "rt", encoding="utf-8") as lines:
        return [Sample(**json.loads(line)) for line in lines]


def tokens(text: str | None) -> Counter[str]:
    return Counter(_TOKEN.findall((text or "").lower()))


def prf(extracted: str | None, truth: str) -> tuple[float, float, float]:
    """Precision, recall and F1 of *extracted* against *truth* (bags of tokens)."""
    got, want = tokens(extracted), tokens(truth)
    common = sum((got & want).values())
    if not common:
        return 0.0, 0.0, 0.0
    precision, recall = common / sum(got.values()), common / sum(want.values())
    return precision, recall, 2 * precision * recall / (precision + recall)


def mean_f1(extracted: list[str | None], samples: list[Sample]) -> float:
    """The mean per-page F1 of *extracted* (in the order of *samples*)."""
    return sum(prf(e, s.text)[2] for e, s in zip(extracted, samples, strict=True)) / len(samples)
