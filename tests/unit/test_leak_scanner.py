"""The leak scanner the e2e tests rely on (tests/support/leaks.py): it finds a value wherever it
sits in a text — alone, inside a longer run of token characters, base64-encoded, next to
punctuation — and reports where without the value; the log tail reads each line once."""

from __future__ import annotations

import base64
import json
import secrets
from pathlib import Path

import pytest

from tests.support.leaks import LogTail, Minted, Scanner

TOKEN = secrets.token_urlsafe(30)
SESSION = "FwoGZXIvYXdzE" + secrets.token_hex(40) + "+/=="


@pytest.mark.parametrize(
    "text",
    [
        TOKEN,
        f"token={TOKEN}",
        f"xx{TOKEN}yy",
        f'{{"message": "Bearer {TOKEN}."}}',
        f"a\nb {base64.b64encode(TOKEN.encode()).decode()} c",
        f"'aws_session_token = {SESSION}\\nregion = us-east-1'",
    ],
    ids=["alone", "after =", "inside a run", "in JSON", "base64", "escaped newline"],
)
def test_a_value_is_found_wherever_it_sits(text: str) -> None:
    scanner = Scanner({"a stand-in": {TOKEN, SESSION}})
    assert len(scanner.leaks({"log": text})) == 1


def test_nothing_is_reported_for_a_clean_text_or_a_near_miss() -> None:
    scanner = Scanner({"a stand-in": {TOKEN}})
    assert scanner.leaks({"log": TOKEN[:-1] + " " + TOKEN[1:] + " " + "x" * 500}) == []


def test_values_with_other_characters_and_short_ones() -> None:
    scanner = Scanner({"the test": {"hunter2 with a space", "short"}})
    assert len(scanner.leaks({"log": "said hunter2 with a space"})) == 1
    assert scanner.leaks({"log": "short"}) == [], "too short to be a secret worth an alarm"


def test_the_report_names_origin_place_event_and_field_never_the_value() -> None:
    line = json.dumps({"event": "policy.minted", "detail": f"k = {TOKEN}", "level": "info"})
    (report,) = Scanner({"the STS stand-in": {TOKEN}}).leaks({"controller log": f"{{}}\n{line}"})
    assert TOKEN not in report
    assert report == (
        f"a secret value of length {len(TOKEN)} from the STS stand-in appears in the "
        "controller log (event 'policy.minted', field detail)"
    )


def test_minted_values_are_read_from_their_sources_at_scan_time() -> None:
    issued: set[str] = set()
    minted = Minted()
    minted.add_source("a stand-in", lambda: frozenset(issued))
    assert minted.values() == {"a stand-in": set()}
    issued.add(TOKEN)
    assert minted.values() == {"a stand-in": {TOKEN}}


def test_the_log_tail_reads_each_whole_line_once(tmp_path: Path) -> None:
    log = tmp_path / "controller-1.log"
    log.write_text("one\ntw")
    tail = LogTail()
    assert tail.new_text([log]) == "one\n"
    with log.open("a") as f:
        f.write("o\nthree\n")
    assert tail.new_text([log]) == "two\nthree\n"
    assert tail.new_text([log]) == ""
