"""A connector's bridge list: every URL checked when the Connector is built, a bad one named with its place; when it moves."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.connector.producer.bridges import BridgeAddress, bridge_list
from aqueduct.connector.producer.client import Connector
from aqueduct.connector.producer.rotation import BridgeRotation, Moved
from aqueduct.runtime.retry_hint import RetryWindow

HINT = "(tcp://HOST:PORT, tcps://HOST:PORT or aqueduct://HOST:PORT)"


def test_one_url_a_sequence_and_a_comma_separated_string_name_the_same_bridges() -> None:
    expected = (
        BridgeAddress("tcp://a:7000", "tcp", "a", 7000),
        BridgeAddress("aqueduct://b.example:4433", "aqueduct", "b.example", 4433),
        BridgeAddress("aqueduct://[::1]:4433", "aqueduct", "::1", 4433),
    )
    assert bridge_list("tcp://a:7000, aqueduct://b.example:4433,aqueduct://[::1]:4433") == expected
    assert bridge_list(["tcp://a:7000", "aqueduct://b.example:4433", "aqueduct://[::1]:4433"]) == expected
    assert bridge_list("tcp://a:7000") == expected[:1]


@pytest.mark.parametrize(
    ("urls", "error"),
    [
        ("tcp://h:1,tcp://h:x,tcp://g:2", "bridge URL 2 of 3 'tcp://h:x': port must be an integer 1-65535"),
        ("tcp://h:0", "bridge URL 'tcp://h:0': port must be an integer 1-65535"),
        ("tcp://h:65536", "bridge URL 'tcp://h:65536': port must be an integer 1-65535"),
        ("tcp://h:1,tcp://h", f"bridge URL 2 of 2 'tcp://h': no port {HINT}"),
        ("tcp://:1", f"bridge URL 'tcp://:1': no host {HINT}"),
        ("tcp://h:1,http://g:2", f"bridge URL 2 of 2 'http://g:2': unknown scheme 'http' {HINT}"),
        ("h:1", f"bridge URL 'h:1': no scheme {HINT}"),
        ("localhost:27000", f"bridge URL 'localhost:27000': no scheme {HINT}"),  # not scheme 'localhost'
        ("tcp://h:1,localhost:27000", f"bridge URL 2 of 2 'localhost:27000': no scheme {HINT}"),
        ("tcp://h:1,,tcp://g:2", f"bridge URL 2 of 3 '': empty entry {HINT}"),
        ("tcp://h:1,", f"bridge URL 2 of 2 '': empty entry {HINT}"),
        ("tcp://h:1,aqueduct://h:1,tcp://H:1", "bridge URL 3 of 3 'tcp://H:1': the same bridge as URL 1"),
        ("tcp://h:1/x", f"bridge URL 'tcp://h:1/x': only HOST:PORT may follow the scheme {HINT}"),
        ([], f"no bridge URL given {HINT}"),
    ],
)  # fmt: skip
def test_a_bad_entry_gets_one_error_naming_it_and_its_place(urls: str | list[str], error: str) -> None:
    with pytest.raises(ValueError) as refused:
        Connector(urls)
    assert str(refused.value) == error


def test_a_client_certificate_over_a_tcp_bridge_of_the_list_is_refused_naming_it(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"tcp:// has no TLS\): 'tcp://b:2'$"):
        Connector("aqueduct://a:1,tcp://b:2", certfile=str(tmp_path / "c.pem"), keyfile=str(tmp_path / "k.pem"))


@pytest.mark.parametrize("move_after", [0.0, -1.0, float("nan")])
def test_move_after_must_be_above_zero(move_after: float) -> None:
    with pytest.raises(ValueError, match="move_after must be above 0 seconds"):
        Connector("tcp://a:1,tcp://b:2", move_after=move_after)


def test_the_connector_starts_on_the_first_bridge() -> None:
    conn = Connector(["tcp://a:1", "aqueduct://b:2"])
    assert conn.bridge == "tcp://a:1" and conn.url == "tcp://a:1,aqueduct://b:2" and conn.stats.moves == 0


# ---------------------------------------------------------------- properties

hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,10}(\.[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
)
addresses = st.tuples(st.sampled_from(["tcp", "aqueduct"]), hosts, st.integers(1, 65535))
valid_lists = st.lists(addresses, min_size=1, max_size=6, unique_by=lambda a: (a[0], a[1].lower(), a[2]))


@given(valid_lists, st.booleans())
def test_any_list_of_valid_urls_round_trips(addresses: list[tuple[str, str, int]], joined: bool) -> None:
    urls = [f"{scheme}://{host}:{port}" for scheme, host, port in addresses]
    bridges = bridge_list(",".join(urls) if joined else urls)
    assert [b.url for b in bridges] == urls
    assert [(b.scheme, b.host, b.port) for b in bridges] == [(s, h.strip("[]"), p) for s, h, p in addresses]


bad_entries = st.one_of(
    st.just(""),
    st.builds(lambda h, p: f"tcp://{h}:{p}", hosts, st.sampled_from(["x", "0", "65536", "-1", "1.5", "99999999"])),
    st.builds(lambda s, h: f"{s}://{h}:1", st.sampled_from(["http", "udp", "quic"]), hosts),
    st.builds(lambda h: f"{h}:7000", hosts.filter(lambda h: not h.startswith("["))),
    st.builds(lambda p: f"aqueduct://:{p}", st.integers(1, 65535)),
    st.builds(lambda h: f"tcp://{h}", hosts),
)


@given(valid_lists, bad_entries, st.data())
def test_any_bad_entry_is_named_with_its_place(addresses: list[tuple[str, str, int]], bad: str, data: st.DataObject) -> None:
    urls = [f"{scheme}://{host}:{port}" for scheme, host, port in addresses]
    place = data.draw(st.integers(0, len(urls)))
    urls.insert(place, bad)
    with pytest.raises(ValueError) as refused:
        bridge_list(",".join(urls))
    assert str(refused.value).startswith(f"bridge URL {place + 1} of {len(urls)} {bad!r}: ")


# ---------------------------------------------------------------- when to move (the time is passed in)

ONE, TWO, THREE = bridge_list("tcp://a:1,tcp://b:2,aqueduct://c:3")
BUSY = RetryWindow(4.0, 5.0)


def test_with_one_bridge_the_connector_never_moves() -> None:
    rotation = BridgeRotation((ONE,), 3.0, now=0.0)
    assert rotation.failed(100.0, None, "refused") is None
    assert rotation.failed(100.0, BUSY, "busy") is None
    assert rotation.current == ONE and rotation.time_left(100.0) == float("inf")


def test_a_bridge_unserved_for_move_after_is_left_for_the_next_round_robin() -> None:
    rotation = BridgeRotation((ONE, TWO, THREE), 3.0, now=0.0)
    assert rotation.failed(2.9, None, "refused") is None and rotation.time_left(2.9) == pytest.approx(0.1)
    assert rotation.failed(3.0, None, "refused") == Moved(
        ONE, TWO, "not served for 3.0 s (move_after 3 s; last: refused)"
    )
    assert rotation.failed(5.9, None, "refused") is None  # the new bridge gets its move_after from the move
    assert rotation.failed(6.0, None, "refused").after == THREE  # type: ignore[union-attr]
    assert rotation.failed(9.0, None, "refused").after == ONE  # type: ignore[union-attr]


def test_a_session_resets_the_time_unserved() -> None:
    rotation = BridgeRotation((ONE, TWO), 3.0, now=0.0)
    rotation.served(10.0)  # a session there ended at 10 s
    assert rotation.failed(12.9, None, "lost") is None
    assert rotation.failed(13.0, None, "lost") is not None


def test_a_busy_refusal_moves_at_once_and_a_round_of_them_waits_in_the_window() -> None:
    rotation = BridgeRotation((ONE, TWO), 3.0, now=0.0)
    first = rotation.failed(0.1, BUSY, "busy: retry within 5.00 s, not before 4.00 s")
    assert first == Moved(ONE, TWO, "refused as busy (busy: retry within 5.00 s, not before 4.00 s)")
    second = rotation.failed(0.2, BUSY, "busy")  # every bridge refused: wait inside the window
    assert second is not None and second.after == ONE and 4.0 <= second.wait <= 5.0
    assert rotation.failed(0.2 + second.wait + 2.9, None, "refused") is None  # unserved counts after the wait


def test_a_session_between_refusals_starts_the_round_again() -> None:
    rotation = BridgeRotation((ONE, TWO), 3.0, now=0.0)
    assert rotation.failed(0.1, BUSY, "busy").wait == 0.0  # type: ignore[union-attr]
    rotation.served(1.0)
    assert rotation.failed(1.1, BUSY, "busy").wait == 0.0  # type: ignore[union-attr]


def test_a_connection_moves_only_to_bridges_no_other_connection_serves() -> None:
    rotation = BridgeRotation((ONE, TWO, THREE), 3.0, now=0.0, at=0)
    moved = rotation.failed(3.0, None, "lost", taken=frozenset({1}))  # the other replica is on TWO
    assert moved is not None and moved.after == THREE
    assert rotation.failed(6.0, None, "lost", taken=frozenset({0, 1})) is None  # none free: stay, retry
    assert rotation.time_left(6.0, taken=frozenset({0, 1})) == float("inf")  # and no deadline to wake for
