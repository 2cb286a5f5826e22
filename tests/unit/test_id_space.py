"""The failover rules in points of reference: coverage, gaps, cutting, translation, offsets, the bridge list."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aqueduct.bridge.source.bridge_list import (
    BridgeEntry,
    BridgeListError,
    Membership,
    parse_bridge_list,
)
from aqueduct.bridge.source.id_space import (
    BEFORE_ALL,
    Copy,
    EpochCarry,
    Gap,
    Piece,
    belongs,
    commit_offset,
    copy_start,
    cut,
    epoch_points,
    gap_records,
    holds_stable,
    reach,
    read_span,
    refused_mode,
)
from aqueduct.bridge.source.options import AqueductOptionError, SourceOptions
from aqueduct.bridge.source.points import PER_LOG_MET, parse_points, spark_points
from aqueduct.bridge.storage.index import IndexEntry
from aqueduct.bridge.storage.offset import ID_SPACE_MET, OffsetError, SourceOffset
from aqueduct.bridge.storage.view import FORMAT_FILE, FORMAT_TEXT
from aqueduct.wire.modes import Mode


def entry(first: int, count: int, before: int, after: int, complete: int) -> IndexEntry:
    return IndexEntry(0, 0, 0, first, count, before, after, complete, 0, 0, 0, True, 0)


def test_a_record_belongs_to_the_range_its_reference_closes() -> None:
    assert [r for r in range(0, 8) if belongs(r, True, 2, 5)] == [3, 4, 5]
    # one without a stable id goes with the stable record before it (whose point it carries)
    assert [r for r in range(0, 8) if belongs(r, False, 2, 5)] == [2, 3, 4]
    assert belongs(0, False, BEFORE_ALL, 4)  # opening the stream


def test_a_copy_from_the_stream_start_takes_in_everything() -> None:
    assert copy_start([entry(0, 3, 0, 3, 3)]) == BEFORE_ALL
    assert copy_start([entry(0, 3, 7, 10, 3)]) == 7  # created at a NOTIFY point
    assert copy_start([entry(5, 3, 9, 12, 8)]) == 9  # truncated


def test_reach_follows_the_furthest_copy_and_reports_gaps() -> None:
    a, b = Copy("a", BEFORE_ALL, 10), Copy("b", 4, 20)
    assert reach([a, b], BEFORE_ALL) == (20, [])
    assert reach([Copy("a", 0, 10), Copy("b", 15, 30)], 0) == (30, [(10, 15)])
    assert reach([Copy("b", 15, 30)], 10, held=[Copy("a", 0, 20)]) == (10, [])  # waits for the held bridge
    assert reach([Copy("b", 15, 30)], 30) == (30, [])
    assert reach([], 5) == (5, [])


def test_cut_gives_pieces_each_whole_on_a_copy_in_preference_order() -> None:
    copies = [Copy("b", 4, 20), Copy("a", BEFORE_ALL, 12), Copy("c", 12, 30)]
    assert cut(7, BEFORE_ALL, 30, copies, ["a", "b", "c"]) == [
        Piece(7, BEFORE_ALL, 12, ("a",)),
        Piece(7, 12, 30, ("c",)),  # the copy going furthest from 12
    ]
    assert cut(7, 5, 12, copies, ["c", "b", "a"]) == [Piece(7, 5, 12, ("b", "a"))]


def test_cut_reports_a_gap_and_leaves_an_unheld_tail_to_the_reader() -> None:
    assert cut(1, 0, 30, [Copy("a", 0, 10), Copy("b", 15, 30)], ["a", "b"]) == [
        Piece(1, 0, 10, ("a",)),
        Gap(1, 10, 15),
        Piece(1, 15, 30, ("b",)),
    ]
    assert cut(1, 0, 30, [Copy("a", 0, 10)], ["a"]) == [Piece(1, 0, 10, ("a",)), Piece(1, 10, 30, ())]


# Records: ids 0..9, each a stable record; group commits of 3, 4, 3; epochs end after ids 1, 4, 8.
ENTRIES = [entry(0, 3, 0, 3, 2), entry(3, 4, 3, 7, 5), entry(7, 3, 7, 10, 9)]


def reference_at(offset: int) -> int:
    return offset  # id i at offset i: the point after it is i + 1


def test_commit_offset_is_the_last_epoch_end_not_past_the_point() -> None:
    assert commit_offset(ENTRIES, 7, reference_at) == 5  # the entry ending at 7 closed epochs up to 5
    assert commit_offset(ENTRIES, 9, reference_at) == 9  # the epoch end inside the next entry, by one lookup
    assert commit_offset(ENTRIES, 8, reference_at) == 5
    assert commit_offset(ENTRIES, 1, reference_at) is None  # no epoch end at or below 1
    assert commit_offset([], 5, reference_at) is None
    for point in range(0, 12):
        offset = commit_offset(ENTRIES, point, reference_at)
        assert offset is None or reference_at(offset) <= point


def test_read_span_holds_the_range_in_whole_entries_and_closed_epochs() -> None:
    assert read_span(ENTRIES, 3, 7, 9) == (0, 9)  # entries reaching point 3 or starting at 7 may hold its records
    assert read_span(ENTRIES, 2, 3, 9) == (0, 7)  # ref 3 may be in either entry: both
    assert read_span(ENTRIES, 3, 3, 9)[0] == 0  # a record without a stable id at point 3 may end the first
    assert read_span(ENTRIES, 8, 12, 9) == (7, 9)  # never past the closed epochs


def test_points_offsets_and_per_log_offsets_cannot_be_taken_for_each_other() -> None:
    doc = spark_points({12: 5, 3: BEFORE_ALL})
    assert doc == {"by_id": {"3": -1, "12": 5}}
    assert parse_points(doc) == {3: -1, 12: 5}
    with pytest.raises(OffsetError) as e:
        parse_points({"7": 120})
    assert str(e.value) == PER_LOG_MET
    with pytest.raises(OffsetError) as e:
        SourceOffset.parse(doc)
    assert str(e.value) == ID_SPACE_MET
    with pytest.raises(OffsetError, match="an integer >= -1"):
        parse_points({"by_id": {"3": -5}})


def test_bridge_list_lines_and_their_errors() -> None:
    text = "# bridges\n\neu-1 10.0.0.5:8815 token=/t ca=/c  # first\neu-2 [::1]:9\n"
    assert parse_bridge_list(text, "'f'") == (
        BridgeEntry("eu-1", "10.0.0.5:8815", "/t", "/c"),
        BridgeEntry("eu-2", "[::1]:9"),
    )
    cases = {
        "eu-1\n": "line 1: a bridge needs a name and an address",
        "ok h:1\nbad/name h:1\n": "line 2: the name 'bad/name' must be",
        "eu h:port\n": "line 1: a bridge address is HOST:PORT, got 'h:port'",
        "eu h:1 tokn=/x\n": "line 1: unknown field 'tokn=/x'",
        "eu h:1\neu h:2\n": "line 2: bridge 'eu' is listed twice",
    }
    for text, wanted in cases.items():
        with pytest.raises(BridgeListError) as e:
            parse_bridge_list(text, "'f'")
        assert str(e.value).startswith(f"bridge list 'f' {wanted}"), str(e.value)


def test_a_failing_bridge_is_held_then_left_out() -> None:
    m = Membership(timeout=10)
    m.failed("a", now=100)
    assert m.held("a", 105) and not m.left_out("a", 105)
    m.failed("a", now=109)  # still the first failure's clock
    assert m.left_out("a", 110) and not m.held("a", 110)
    m.answered("a")
    assert not m.held("a", 111) and not m.left_out("a", 111)


def a_log(path: Path) -> str:
    path.mkdir()
    (path / FORMAT_FILE).write_text(FORMAT_TEXT)
    return str(path)


def test_failover_options(tmp_path: Path) -> None:
    log = a_log(tmp_path / "a")
    o = SourceOptions.parse({"bridge": "a=h:1,b=h:2", "failover": "true", "bridgeTimeout": "3s"})
    assert o.failover and o.bridge_timeout == 3.0 and not o.qualified and o.bridge_connect_timeout == 2.0
    o = SourceOptions.parse({"bridge": "a=h:1", "failover": "true", "bridgeConnectTimeout": "500ms"})
    assert o.bridge_connect_timeout == 0.5
    listed = tmp_path / "bridges"
    listed.write_text("x h:3\n")
    assert SourceOptions.parse({"bridgeList": str(listed)}).failover
    assert SourceOptions.parse({"log": log}).bridge_timeout == 10.0
    errors = {
        (("log", log), ("bridgeTimeout", "5s")): "aqueduct source: bridgeTimeout only applies with failover=true (or bridgeList)",
        (("log", log), ("failover", "true"), ("bridgeTimeout", "0s")): "aqueduct source: bridgeTimeout must be a positive duration, got '0s'",
        (("log", log), ("bridgeConnectTimeout", "1s")): "aqueduct source: bridgeConnectTimeout only applies with failover=true (or bridgeList)",
        (("log", log), ("failover", "true"), ("bridgeConnectTimeout", "0s")): (
            "aqueduct source: bridgeConnectTimeout must be a positive duration, got '0s'"
        ),
        (("log", log), ("failover", "yes")): "aqueduct source: failover must be 'true' or 'false', got 'yes'",
        (("bridgeList", str(listed)), ("failover", "false")): "aqueduct source: bridgeList implies failover; remove failover=false",
        (("log", log), ("failover", "true"), ("maxRecordsPerTrigger", "5")): (
            "aqueduct source: maxRecordsPerTrigger not supported with failover (budgets count log offsets, "
            "which differ between bridges); every trigger reads all complete epochs"
        ),
        (("bridgeList", str(tmp_path / "none")),): f"aqueduct source: cannot read bridge list {str(tmp_path / 'none')!r}: No such file or directory",
    }  # fmt: skip
    for given, wanted in errors.items():
        with pytest.raises(AqueductOptionError) as e:
            SourceOptions.parse(dict(given))
        assert str(e.value) == wanted
    with pytest.raises(AqueductOptionError, match="names x, also named by option log or bridge"):
        SourceOptions.parse({"bridgeList": str(listed), "bridge": "x=h:1,y=h:2"})
    listed.write_text("x h:3 oops\n")
    with pytest.raises(AqueductOptionError, match=r"line 1: unknown field 'oops'"):
        SourceOptions.parse({"bridgeList": str(listed)})


def points_of(epochs: list[int], references: list[int], carry: EpochCarry) -> tuple[list[int], EpochCarry]:
    out, carry = epoch_points(np.array(epochs), np.array(references), carry)
    return out.tolist(), carry


def test_an_epoch_is_the_point_where_it_starts_whatever_the_copy_counts_or_how_it_is_cut() -> None:
    # ids 4..11, BOUNDARY at 7 and 11 (references are id + 1); piece (4, 12] starts at the end of the epoch before
    refs = list(range(5, 13))
    want = [4, 4, 4, 4, 8, 8, 8, 8]
    assert points_of([1, 1, 1, 1, 2, 2, 2, 2], refs, EpochCarry.at(4))[0] == want
    # another copy counting from 0, read in two record batches carried across
    first, carry = points_of([0, 0, 0], refs[:3], EpochCarry.at(4))
    second, _ = points_of([0, 1, 1, 1, 1], refs[3:], carry)
    assert first + second == want
    # a copy whose read starts earlier (ids 0..3 of the epoch before, left out later by the range)
    assert points_of([5] * 4 + [6] * 4 + [7] * 4, list(range(1, 13)), EpochCarry.at(4))[0][4:] == want


def test_a_stream_without_boundaries_has_an_epoch_per_record() -> None:
    assert points_of([9, 10, 11], [5, 6, 7], EpochCarry.at(4))[0] == [4, 5, 6]


def test_epochs_go_on_in_another_copy_from_where_the_failed_one_stopped() -> None:
    refs = list(range(5, 13))  # as above: epochs start at 4 and 8
    read, carry = points_of([1, 1], refs[:2], EpochCarry.at(4))  # ids 4, 5, then the copy fails mid-epoch
    on = carry.other_copy(closed=False)
    assert read + points_of([0, 0, 1, 1, 1, 1], refs[2:], on)[0] == [4, 4, 4, 4, 8, 8, 8, 8]
    # it failed right after the BOUNDARY (id 7): the next copy's first row starts an epoch
    read, carry = points_of([1, 1, 1, 1], refs[:4], EpochCarry.at(4))
    assert points_of([0, 0, 0, 0], refs[4:], carry.other_copy(closed=True))[0] == [8, 8, 8, 8]


def test_only_ordered_streams_are_read_in_points_of_reference() -> None:
    assert refused_mode(Mode.ORDERED) is None
    for mode in (Mode.UNORDERED, Mode.UNRELIABLE):
        why = refused_mode(mode)
        assert why is not None and why.startswith(f"{mode.name}: a failover query reads ORDERED streams only")


def test_a_copy_holds_a_stable_record_when_its_point_moved() -> None:
    assert holds_stable([entry(0, 3, 0, 3, 3)])
    assert holds_stable([entry(0, 2, 7, 7, 2), entry(2, 1, 7, 8, 3)])  # unstable records, then a stable one
    assert not holds_stable([entry(0, 2, 0, 0, 2), entry(2, 2, 0, 0, 4)])  # EPHEMERAL only
    assert not holds_stable([entry(5, 2, 9, 9, 7)])  # truncated down to records without a stable id
    assert not holds_stable([])


def test_a_gap_counts_one_record_per_message_id_in_it() -> None:
    assert gap_records(0, 8) == 8  # ids 0..7
    assert gap_records(BEFORE_ALL, 8) == 8  # from the stream's start: ids 0..7 too
    assert gap_records(10, 15) == 5
