"""The extraction of a page's text (trafilatura), run in a child process with a deadline.

Why a child process: extraction is the one step whose cost a page controls (800 KB of markup took
trafilatura several seconds), and it is pure CPU in C (lxml) and Python. A thread cannot be stopped
and a signal alarm cannot interrupt lxml, so the only bound that holds whatever the page is a
process that is killed at the deadline (then started again for the next page). Bounding the input
size alone would not do: the cost of a page is not linear in its size. The child is a plain
``python -m crawlhive.cleaner.extractor`` (not a fork: no copy of the parent's Kafka threads and
locks; not multiprocessing's spawn: it would run the parent's ``__main__`` again), in a session of
its own (a Ctrl-C is the parent's), talking over two pipes with multiprocessing's ``Connection``
(framing, pickling, a poll with a timeout); it exits when the parent's end closes. No process-pool
library is used: a pool cannot kill the one worker that overran and go on.

The child logs nothing itself: what trafilatura, htmldate, justext and readability log (a warning
for every short page, "readability_lxml failed:", "discarding data: …") is library chatter about
normal pages; it is sent back with the result and the parent logs it at DEBUG.
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from typing import Any

from crawlhive.cleaner.markdown_links import MAX_URL_LENGTH, add_links

logger = logging.getLogger(__name__)

#: Seconds a new child may take to import trafilatura and say it is ready.
START_TIMEOUT_S = 60.0
#: A page the child extracts before it says it is ready.
WARM_UP = (
    "<html lang='en'><head><title>Warm-up</title><meta name='description' content='d'></head><body><nav>"
    "<a href='/'>Home</a></nav><article><h1>Warm-up</h1><p class='date'>Published 14 February 2023</p>"
    + "<p>A paragraph that is long enough to be the main text of this small page, twice over.</p>" * 3
    + "</article></body></html>"
)
#: Elements whose text a reader never sees.
_INVISIBLE = ("script", "style", "noscript", "template", "head", "svg", "iframe", "object")
#: Elements after which the visible text goes on on a new line.
_BLOCKS = (
    "p", "div", "br", "h1", "h2", "h3", "h4", "h5", "h6", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table",
    "section", "article", "header", "footer", "nav", "aside", "main", "blockquote", "pre", "form", "figure",
    "figcaption", "hr", "address", "details", "summary",
)  # fmt: skip


class ExtractionTimeout(Exception):  # noqa: N818 - the name says what happened
    """The extraction of a page did not finish before its deadline (the child was killed)."""


class ExtractionFailed(Exception):  # noqa: N818 - the name says what happened
    """The child failed on a page (an exception in trafilatura, or the child died)."""


_LOOKUP_SET: list[bool] = []
#: What the ``install`` of :mod:`crawlhive.cleaner.discard` (trafilatura's pruning expressions as
#: Python selectors) and of :mod:`crawlhive.cleaner.datesearch` (htmldate's candidate and pattern
#: scans, cheaper) did in this process, by module name (once :func:`parse` has run).
_INSTALLED: dict[str, dict[str, bool]] = {}


def _c_level_lookup() -> None:
    """Give trafilatura's HTML parser lxml's C-level element class lookup (every element an
    ``HtmlElement``) in place of lxml.html's Python one, which runs a Python method for each element
    object lxml creates: about 700,000 calls over the extraction corpus, 6 % of the extraction's CPU.
    The trees are the same (same parser options); only lxml.html's form, input and label element
    classes, which neither trafilatura nor htmldate use, are no longer given."""
    if _LOOKUP_SET:
        return
    import lxml.etree
    from lxml.html import HtmlComment, HtmlElement, HtmlEntity, HtmlProcessingInstruction
    from trafilatura.utils import HTML_PARSER

    HTML_PARSER.set_element_class_lookup(
        lxml.etree.ElementDefaultClassLookup(
            element=HtmlElement, comment=HtmlComment, pi=HtmlProcessingInstruction, entity=HtmlEntity
        )
    )
    _LOOKUP_SET.append(True)


def parse(html: str) -> Any:
    """The lxml tree of *html* as trafilatura parses it (its encoding and repair rules), or None
    when it is not HTML at all."""
    from trafilatura.utils import load_html

    _c_level_lookup()
    if not _INSTALLED:
        from crawlhive.cleaner import datesearch, discard

        _INSTALLED.update(discard=discard.install(), datesearch=datesearch.install())
    try:
        return load_html(html)
    except (ValueError, TypeError):
        return None


def visible_text(html: str, tree: Any = None) -> str:
    """The text a reader sees on *html* (or its parsed *tree*, which is changed): the body without
    scripts, styles and other invisible elements, one block element per line (the text of a page
    that has no main text)."""
    import lxml.etree
    import lxml.html

    if tree is None:
        try:
            try:
                tree = lxml.html.document_fromstring(html)
            except ValueError:  # lxml refuses a str with an XML encoding declaration (XHTML)
                tree = lxml.html.document_fromstring(html.encode("utf-8"))
        except (lxml.etree.ParserError, ValueError):
            return ""
    for element in list(tree.iter(*_INVISIBLE)):
        if element.getparent() is not None:
            element.drop_tree()
    for element in tree.iter(*_BLOCKS):
        element.text = "\n" + (element.text or "")
        element.tail = "\n" + (element.tail or "")
    body = tree.find("body")
    return str((body if body is not None else tree).text_content())


_SPACES = re.compile(r"\s+")


def metadata(tree: Any, url: str) -> dict[str, Any]:
    """``title``, ``description``, ``date`` and the declared ``language`` of a parsed page.

    The parts of trafilatura's metadata extraction the record uses, called one by one on the shared
    tree (meta tags and OpenGraph, JSON-LD, the title heuristics, htmldate's date search as
    trafilatura runs it), without the author, site name, categories, tags and licence searches that
    ``with_metadata=True`` adds: those took a third of the extraction's time and no field uses them.
    """
    from htmldate import find_date
    from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
    from trafilatura.settings import set_date_params

    document = examine_meta(tree)
    try:
        document = extract_meta_json(tree, document)
    except Exception:  # noqa: BLE001 - trafilatura's own guard: a broken JSON-LD block is no metadata
        logger.debug("JSON-LD metadata of %s not read", url)
    if not document.title:
        document.title = extract_title(tree)
    document.clean_and_trim()
    # The date search as trafilatura's bare_extraction(with_metadata=True) runs it (not extensive).
    date = find_date(tree, url=url, **set_date_params(False))
    declared = tree.get("lang") or tree.get("xml:lang")
    if not declared:
        for meta in tree.iterfind(".//head/meta[@http-equiv]"):
            if str(meta.get("http-equiv") or "").lower() == "content-language":
                declared = meta.get("content")
                break
    return {
        "title": document.title,
        "description": document.description,
        "date": date,
        "language": str(declared).strip()[:35] or None if declared else None,
    }


#: How trafilatura extracts the main text: its fast path (no second pass through readability and
#: jusText; on the extraction corpus its F1 is the same as the default's, at 0.7 of the CPU),
#: tables kept, comments and images left out.
EXTRACTION: dict[str, Any] = {"fast": True, "include_comments": False, "include_tables": True, "include_images": False}


def extract(html: str, url: str, markdown: bool = False, max_url_length: int = MAX_URL_LENGTH) -> dict[str, Any]:
    """The fields of *html*: ``title``, ``description``, ``date``, ``language`` (declared by the
    page) and ``text``, the main text by trafilatura, or the page's visible text when trafilatura
    found none (a short page: its text is what it shows).

    The page is parsed once; the metadata and the main text are read from that one tree
    (trafilatura works on a copy of a tree it is given). The extraction keeps formatting, whether
    *markdown* or not, and both serialisations come from its main-content tree: with *markdown*,
    ``markdown`` (docs/contract.md §20.6) as it is, and always the plain ``text`` from the same tree
    stripped of its formatting elements (their words kept). So ``text`` (and the ``content_hash``
    made of it) is the same byte for byte whichever CLEANER_MARKDOWN says (an extraction without
    formatting joins lines and lists differently: 111 of the corpus's 120 pages differed), and
    nothing is extracted twice. trafilatura is not asked for links: that changes which paragraphs it keeps
    (link-dense ones are dropped). The Markdown has them all the same: the links of the main
    content are mapped back onto it from the page's tree (:mod:`crawlhive.cleaner.markdown_links`;
    URLs longer than *max_url_length* stay text), and ``text`` is the same with or without them.
    """
    import trafilatura

    tree = parse(html) if html.strip() else None
    if tree is None:
        return {"text": visible_text(html) if html.strip() else ""}
    try:
        fields = metadata(tree, url)
    except (ValueError, TypeError, AttributeError):  # broken markup the metadata search gives up on
        fields = {}
    try:
        # (output_format "markdown": bare_extraction then leaves the serialising to us, which
        # serialises the Markdown only when it is asked for)
        document = trafilatura.bare_extraction(
            tree, url=url, include_formatting=True, include_links=False, output_format="markdown", **EXTRACTION
        )
    except (ValueError, TypeError, AttributeError):  # broken markup trafilatura gives up on
        document = None
    text = None
    body = getattr(document, "body", None)
    if body is not None:
        from lxml import etree
        from trafilatura.xml import xmltotxt

        # the Markdown of the body (xmltotxt with formatting: it works on a copy), then the plain
        # text from the body itself, in place (it is no longer needed after)
        if markdown:
            fields["markdown"] = str(xmltotxt(body, True) or "").strip() or None
        if fields.get("markdown"):  # the links of the main content, mapped back from the page's tree
            try:
                fields["markdown"] = add_links(fields["markdown"], tree, url, max_url_length)
            except Exception:  # noqa: BLE001 - a bug in the mapping costs the page its links, not its record
                logger.warning("links of %s not mapped onto its Markdown", url, exc_info=True)
        plain = body
        etree.strip_tags(plain, "hi")
        for element in plain.iter():  # white space as the plain extraction has it (one space)
            if element.text:
                element.text = _SPACES.sub(" ", element.text)
            if element.tail:
                element.tail = _SPACES.sub(" ", element.tail)
        text = xmltotxt(plain, False)
    fields["text"] = text if str(text or "").strip() else visible_text(html, tree)
    return fields


class _Capture(logging.Handler):
    """Keeps the child's log records of the current page, to send them to the parent."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[tuple[str, str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.lines.append((record.name, record.levelname, record.getMessage()))
        except Exception:  # noqa: BLE001 - a broken log call in a library must not fail the page
            self.lines.append((record.name, record.levelname, str(record.msg)))


def _serve(jobs: Connection, answers: Connection, capture_level: int) -> None:
    """The child: answer each ``(html, url, markdown, max_url_length)`` from *jobs* on *answers* with ``("ok", fields,
    logs)`` or ``("error", reason, logs)``, until None or the parent's end of the pipe closes."""
    import gc

    capture = _Capture()
    root = logging.getLogger()
    root.handlers[:] = [capture]
    root.setLevel(capture_level)
    # Imports and caches (trafilatura loads parts of itself on first use) warmed before "ready":
    # not counted in the first page's CLEANER_MAX_SECONDS.
    extract(WARM_UP, "http://localhost/")
    # The cyclic garbage collector ran every 700 allocations, thousands of times a page (lxml's
    # element objects, trafilatura's strings), for almost no cycles: the trees are freed by their
    # reference counts. Every 50,000 here (about 4 % of the extraction's CPU), the modules and
    # caches loaded so far left out of its passes for good.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    answers.send(("ready", None, []))
    while True:
        try:
            job = jobs.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if job is None:
            return
        capture.lines = []
        try:
            answer: tuple[str, Any, list[tuple[str, str, str]]] = ("ok", extract(*job), capture.lines)
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which dead-letters the page
            answer = ("error", f"{type(exc).__name__}: {exc}"[:300], capture.lines)
        answers.send(answer)


class Extractor:
    """One child process that extracts pages, each within a deadline (see the module docstring).

    :meth:`extract` is one page, waited for; :meth:`submit` then :meth:`collect` let the caller do
    other work (or keep other children busy: ``cleaner/plugins/extract.py``) while the child works,
    the deadline counting from the submit."""

    def __init__(self) -> None:
        self._process: subprocess.Popen[bytes] | None = None
        self._jobs: Connection | None = None
        self._answers: Connection | None = None
        #: When the page in the child was submitted (None: the child is idle), and its URL.
        self._submitted: float | None = None
        self._url = ""
        self._ready = False

    def start(self) -> None:
        """Start the child (if it is not running) and wait until it is ready.

        Raises:
            ExtractionFailed: it did not start within START_TIMEOUT_S.
        """
        self.launch()
        self.wait_ready()

    def launch(self) -> None:
        """Start the child if it is not running, without waiting for it (:meth:`wait_ready`): several
        children import trafilatura at once."""
        if self._process is not None and self._process.poll() is None:
            return
        self.close()
        job_read, job_write = os.pipe()
        answer_read, answer_write = os.pipe()
        capture = logging.DEBUG if logger.isEnabledFor(logging.DEBUG) else logging.WARNING
        command = [sys.executable, "-m", __name__, str(job_read), str(answer_write), str(capture)]
        try:
            self._process = subprocess.Popen(
                command, pass_fds=(job_read, answer_write), stdin=subprocess.DEVNULL, start_new_session=True
            )
        finally:
            os.close(job_read)
            os.close(answer_write)
        self._jobs = Connection(job_write, readable=False)
        self._answers = Connection(answer_read, writable=False)
        self._ready = False

    def wait_ready(self) -> None:
        """Wait until the child :meth:`launch` started says it is ready (at once if it did).

        Raises:
            ExtractionFailed: it did not start within START_TIMEOUT_S.
        """
        if self._ready:
            return
        assert self._answers is not None, "launch() first"
        try:
            ready = self._answers.poll(START_TIMEOUT_S) and self._answers.recv()
        except (EOFError, OSError) as exc:
            self.close(kill=True)
            raise ExtractionFailed(f"the extraction process failed to start ({exc!r})") from exc
        if not ready:
            self.close(kill=True)
            raise ExtractionFailed(f"the extraction process did not start within {START_TIMEOUT_S:g} s")
        self._ready = True

    @property
    def answers(self) -> Connection:
        """The pipe the child answers on (for :func:`multiprocessing.connection.wait`); after :meth:`submit`."""
        assert self._answers is not None, "submit() first"
        return self._answers

    @property
    def submitted(self) -> float | None:
        """When the page the child is working on was submitted (``time.monotonic()``); None if idle."""
        return self._submitted

    def extract(
        self, html: str, url: str, timeout: float, markdown: bool = False, max_url_length: int = MAX_URL_LENGTH
    ) -> dict[str, Any]:
        """:func:`extract` of *html* in the child, within *timeout* seconds.

        Raises:
            ExtractionTimeout: it took longer (the child is killed and another started).
            ExtractionFailed: the extraction raised, or the child died.
        """
        self.submit(html, url, markdown, max_url_length)
        return self.collect(timeout)

    def submit(self, html: str, url: str, markdown: bool = False, max_url_length: int = MAX_URL_LENGTH) -> None:
        """Hand *html* to the child (started if needed); :meth:`collect` its fields.

        Raises:
            ExtractionFailed: the child could not be started, or died.
        """
        self.start()
        assert self._jobs is not None
        self._submitted, self._url = time.monotonic(), url
        try:
            self._jobs.send((html, url, markdown, max_url_length))
        except (EOFError, OSError) as exc:
            self._submitted = None
            self._restart()
            raise ExtractionFailed(f"the extraction process died ({exc!r})") from exc

    def collect(self, timeout: float) -> dict[str, Any]:
        """The fields of the page :meth:`submit` handed over, waiting until *timeout* seconds after
        the submit at most.

        Raises:
            ExtractionTimeout: the time ran out (the child is killed and another started).
            ExtractionFailed: the extraction raised, or the child died.
        """
        assert self._answers is not None and self._submitted is not None, "submit() first"
        started, self._submitted = self._submitted, None
        try:
            left = max(0.0, timeout - (time.monotonic() - started))
            answer = self._answers.recv() if self._answers.poll(left) else None
        except (EOFError, OSError) as exc:
            self._restart()
            raise ExtractionFailed(f"the extraction process died ({exc!r})") from exc
        if answer is None:
            elapsed = time.monotonic() - started
            self._restart()
            raise ExtractionTimeout(f"{elapsed:.1f} s")
        status, value, lines = answer
        for name, level, message in lines:
            logger.debug("%s %s (%s): %s", name, level, self._url, message)
        if status != "ok":
            raise ExtractionFailed(str(value))
        return dict(value)

    def _restart(self) -> None:
        """Kill the child and start another now, so that its start-up (importing trafilatura) is not
        counted in the next page's time (if it fails, the next :meth:`extract` tries again)."""
        self.close(kill=True)
        try:
            self.start()
        except ExtractionFailed:
            logger.warning("the extraction process failed to start again; retrying with the next page")

    def close(self, kill: bool = False) -> None:
        """Stop the child: asked to (else killed after half a second), or at once with *kill*.
        Never raises."""
        process, jobs, answers = self._process, self._jobs, self._answers
        self._process = self._jobs = self._answers = None
        self._submitted, self._ready = None, False
        if kill and process is not None and process.poll() is None:
            process.kill()
        if jobs is not None:
            try:
                if process is not None and process.poll() is None:
                    jobs.send(None)
            except (OSError, ValueError):
                pass
            jobs.close()
        if answers is not None:
            answers.close()
        if process is not None:
            try:
                process.wait(0.5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


if __name__ == "__main__":
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False), int(sys.argv[3]))
