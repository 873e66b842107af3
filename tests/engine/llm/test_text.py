"""Text out of tokens: stop strings held back while they could still match, and incremental detokenization."""

from __future__ import annotations

from engine.llm.text import IncrementalText, StopMatcher


def test_it_cuts_at_a_stop_string_split_across_pieces():
    stops = StopMatcher(["END"])
    assert stops.feed("hello E") == ("hello ", False)
    assert stops.feed("N") == ("", False)
    assert stops.feed("D and more") == ("", True)


def test_it_releases_a_held_tail_that_did_not_become_a_stop():
    stops = StopMatcher(["END"])
    assert stops.feed("hello EN") == ("hello ", False)
    assert stops.feed("ough") == ("ENough", False)
    assert stops.feed("x E") == ("x ", False)
    assert stops.rest() == "E"


def test_the_earliest_of_several_stop_strings_wins():
    stops = StopMatcher(["b c", "a"])
    assert stops.feed("x a b c") == ("x ", True)


def test_without_stop_strings_every_piece_passes_at_once():
    assert StopMatcher([]).feed("any") == ("any", False)


class CharTokenizer:
    """Token i is byte i; decode as UTF-8 with replacement, like a byte-level BPE."""

    def decode(self, ids, skip_special_tokens=True):
        return bytes(ids).decode("utf-8", errors="replace")


def test_it_holds_an_incomplete_character_until_its_last_byte():
    text = IncrementalText(CharTokenizer(), list(b"say "))
    pieces = [text.feed(b) for b in "é!".encode()]
    assert pieces == ["", "é", "!"]


def test_flush_gives_what_an_unfinished_character_left():
    text = IncrementalText(CharTokenizer(), list(b"x"))
    assert text.feed(0xC3) == ""
    assert text.flush() == "\ufffd"
