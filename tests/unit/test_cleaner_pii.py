"""PII masking (cleaner/plugins/pii.py): what is masked, and that masking stays linear."""

from __future__ import annotations

import time

from crawlhive.cleaner.plugins.pii import mask


def _directory(size: int) -> str:
    """About *size* characters that are nothing but phone numbers (a benign directory page)."""
    rows, n, i = [], 0, 0
    while n < size:
        row = f"Office {i}: call +1 202-555-{i % 10000:04d} or (202) 555-{(i * 7) % 10000:04d}\n"
        rows.append(row)
        n, i = n + len(row), i + 1
    return "".join(rows)


def test_masking_800kb_of_phone_numbers_takes_well_under_a_second() -> None:
    """It took 6-17 s (each match was spliced into the whole string, and every number of the page
    was verified one by one), so the cleaner lost its group membership on such a page."""
    text = _directory(800_000)
    numbers = 2 * text.count("\n")
    started = time.perf_counter()
    masked, count = mask(text, "US")
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"{elapsed:.2f} s"
    assert count == numbers  # every number, verified or past MAX_VERIFIED
    assert numbers > 30_000
    assert "-555-" not in masked and "(202)" not in masked
    assert masked.splitlines()[-1].endswith(": call [phone] or [phone]")


def test_mask_replaces_emails_and_phone_numbers_and_counts_them() -> None:
    text = "Call +1 202-555-0143 or write to jane.doe@example.com; in 2024 we moved. Ref 12-34."
    assert mask(text, "US") == ("Call [phone] or write to [email]; in 2024 we moved. Ref 12-34.", 2)
    assert mask("Appelez le 01 42 68 53 00.", "FR") == ("Appelez le [phone].", 1)
    assert mask("nothing here", "US") == ("nothing here", 0)


def test_the_phone_search_by_line_finds_what_phonenumbers_finds_over_the_whole_text() -> None:
    """Only lines with 4+ digits go to phonenumbers (cleaner/plugins/pii.py, DIGITS): the spans are
    those of one matcher over the whole text, a 4-digit German number included."""
    import phonenumbers

    from crawlhive.cleaner.plugins.pii import _phone_spans

    text = (
        "A heading\nCall +1 202-555-0143 today.\nNo digits here at all.\nIn 2024, 3 of 12 moved.\n"
        "Kalorien 1694 kcal\nBüro: 030 1234567, Fax 030/7654321\n\n+33 1 42 68 53 00 (Paris)\nend"
    )
    for region in ("US", "DE", "FR"):
        whole = [(m.start, m.end) for m in phonenumbers.PhoneNumberMatcher(text, region)]
        assert _phone_spans(text, region) == whole, region
    assert len(_phone_spans(text, "DE")) >= 4
