"""A busy server's admission: each refused client is given a turn, kept across refusals, called at the server's capacity."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aqueduct.proto.errors import ConnectionLost
from aqueduct.runtime.retry_hint import (
    MAX_WINDOW,
    MIN_WINDOW,
    PRIOR_RATE,
    PROBE_WINDOW,
    Admitted,
    HandshakeAdmission,
    Refused,
    RetryWindow,
    busy_reason,
    retry_window,
    retry_within,
)

SLOTS = 64


def _measured(admission: HandshakeAdmission, rate: float, completions: int = 200, start: float = 0.0) -> float:
    """``completions`` handshakes completed ``1 / rate`` s apart with every slot taken; the time after the last."""
    now = start
    for _ in range(completions):
        now += 1.0 / rate
        admission.completed(admission.slots / rate, in_progress=admission.slots)  # Little's law, every slot taken
    return now


def _refused(admission: HandshakeAdmission, now: float, token: bytes = b"", in_progress: int = SLOTS) -> RetryWindow:
    decision = admission.admits(now, in_progress, token)
    assert isinstance(decision, Refused)
    return decision.window


def test_capacity_is_the_handshakes_in_progress_over_their_duration() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    assert admission.capacity == PRIOR_RATE  # nothing measured yet
    _measured(admission, rate=40.0)  # 64 at once, each 1.6 s
    assert admission.capacity == pytest.approx(40.0, rel=1e-3)
    for _ in range(300):  # called turns beyond the bound: 128 at once, each 1.6 s, is 80 a second
        admission.completed(1.6, in_progress=2 * SLOTS)
    assert admission.capacity == pytest.approx(80.0, rel=1e-3)
    for _ in range(300):  # slots free: 0.2 s each, what 64 slots could do is 320 a second (not the 3 running)
        admission.completed(0.2, in_progress=3)
    assert admission.capacity == pytest.approx(SLOTS / 0.2, rel=1e-3)


def test_with_slots_free_every_initial_is_admitted() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    assert admission.admits(0.0, SLOTS - 1, b"") == Admitted()
    assert admission.issued == 0


def test_the_refused_are_spread_over_exactly_the_time_the_server_needs_for_them() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    now = _measured(admission, rate=40.0)
    windows = [_refused(admission, now) for _ in range(200)]  # a crowd of 200 refused at once
    assert [w.not_before for w in windows] == pytest.approx([k / admission.capacity for k in range(200)])
    assert windows[-1].not_before == pytest.approx(199 / 40.0, rel=1e-3)  # 5 s at 40 a second, not 60
    assert all(w.within - w.not_before == pytest.approx(MIN_WINDOW) for w in windows)  # jitter inside the turn
    assert len({w.turn for w in windows}) == 200 and admission.issued == 200


def test_a_producer_refused_again_keeps_its_turn_and_the_queue_does_not_grow() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    now = _measured(admission, rate=40.0)
    windows = [_refused(admission, now) for _ in range(200)]
    again = _refused(admission, now + 1.0, windows[150].turn)  # back 1 s later, too soon
    assert again.turn == windows[150].turn and admission.issued == 200
    assert again.not_before == pytest.approx(windows[150].not_before - 1.0)  # the same moment, not a later one


def test_a_called_turn_is_admitted_beyond_the_bound_up_to_twice_it() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    now = _measured(admission, rate=40.0)
    windows = [_refused(admission, now) for _ in range(10)]
    later = now + windows[5].within  # turn 5 has come; the slots are still all taken
    assert admission.admits(later, SLOTS, windows[5].turn) == Admitted()
    assert admission.admits(later, 2 * SLOTS - 1, windows[4].turn) == Admitted()
    behind = _refused(admission, later, windows[3].turn, in_progress=2 * SLOTS)  # even a promise has a limit
    assert behind.turn == windows[3].turn and behind.not_before == 0.0
    assert behind.within == pytest.approx(SLOTS / admission.capacity)  # within one round of handshakes


def test_a_promise_not_kept_moves_every_later_turn_one_place_back() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    now = _measured(admission, rate=40.0)
    windows = [_refused(admission, now) for _ in range(100)]
    later = now + windows[10].within
    before = _refused(admission, later, windows[90].turn)
    _refused(admission, later, windows[3].turn, in_progress=2 * SLOTS)
    after = _refused(admission, later, windows[90].turn)
    assert after.not_before == pytest.approx(before.not_before + 1 / admission.capacity)


def test_a_turn_of_another_queue_counts_as_a_newcomer() -> None:
    old = HandshakeAdmission(now=0.0, slots=SLOTS)  # the server before a restart
    turn = _refused(old, 0.0).turn
    new = HandshakeAdmission(now=0.0, slots=SLOTS)
    assert _refused(new, 0.0).turn != turn
    assert _refused(new, 0.0, turn).turn != turn and new.issued == 2
    assert _refused(new, 0.0, b"not a turn").turn and new.issued == 3


def test_before_its_rate_is_measured_a_server_sends_nobody_far() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    windows = [_refused(admission, 0.0) for _ in range(2000)]
    assert max(w.within for w in windows) <= PROBE_WINDOW
    far = windows[-1]
    assert far.not_before >= PROBE_WINDOW / 2  # spread over the probe's second half, not all at its end
    now = far.not_before
    _measured(admission, rate=20.0, completions=SLOTS + 1)  # a round measured
    told = _refused(admission, now, far.turn)  # measured now: told when its turn really comes
    assert told.turn == far.turn and told.within > PROBE_WINDOW


def test_a_storm_after_a_quiet_spell_starts_from_the_prior_not_from_the_quiet_figures() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    now = _measured(admission, rate=40.0)  # an earlier storm
    _refused(admission, now)  # its end
    for _ in range(300):  # then quiet: one handshake at a time, 5 ms each
        now += 1.0
        assert admission.admits(now, 0, b"") == Admitted()
        admission.completed(0.005, in_progress=1)
    assert admission.capacity == pytest.approx(SLOTS / 0.005, rel=1e-3)  # 12,800 a second: no storm runs at that
    windows = [_refused(admission, now) for _ in range(2000)]  # a survivor takes a dead bridge's producers
    assert admission.capacity == PRIOR_RATE and not admission.trusted
    assert admission.issued == 2001
    assert windows[50].not_before == pytest.approx(50 / PRIOR_RATE)  # paced at the prior, not 2000 in 0.16 s
    assert max(w.within for w in windows) <= PROBE_WINDOW  # and asked again soon, as a restarted server does
    later = now + 1.0
    assert isinstance(admission.admits(later, SLOTS, windows[1000].turn), Refused)  # not called yet: not a herd
    now = _measured(admission, rate=20.0, completions=SLOTS + 1, start=later)  # the storm's own round
    assert admission.trusted and admission.capacity == pytest.approx(20.0, rel=0.05)


def test_the_rate_a_storm_was_paced_at_outlives_the_quiet_after_it() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    assert admission.paced_at is None  # nobody refused yet
    now = _measured(admission, rate=40.0)
    _refused(admission, now)
    for _ in range(300):  # the storm is over: quick handshakes, one at a time
        now += 1.0
        admission.completed(0.005, in_progress=1)
    assert admission.capacity > 1000  # what a server with every slot free would extrapolate to
    assert admission.paced_at == pytest.approx(40.0, rel=1e-3)  # what the refused were told


def test_a_storm_keeps_what_was_measured_with_every_slot_taken() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    now = _measured(admission, rate=40.0)
    _refused(admission, now)
    assert admission.capacity == pytest.approx(40.0, rel=1e-3) and admission.trusted


def test_within_a_storm_a_slot_free_for_a_moment_does_not_reset_the_estimate() -> None:
    admission = HandshakeAdmission(now=0.0, slots=SLOTS)
    now = _measured(admission, rate=40.0)
    _refused(admission, now)
    admission.completed(0.005, in_progress=SLOTS - 1)  # a slot free for a moment
    assert admission.admits(now + 0.1, SLOTS - 1, b"") == Admitted()
    _refused(admission, now + 0.2)  # refusing again, 0.2 s after the last refusal
    assert admission.trusted  # a reset would have made it start over from the prior


def test_nothing_is_promised_beyond_the_cap_and_the_capped_are_spread() -> None:
    admission = HandshakeAdmission(now=0.0, slots=1)
    now = _measured(admission, rate=1.0)  # one a second
    windows = [_refused(admission, now) for _ in range(1000)]
    capped = windows[int(MAX_WINDOW) :]  # turns more than 60 s away
    assert max(w.within for w in windows) <= MAX_WINDOW
    assert len({round(w.not_before) for w in capped}) >= 25  # over the cap's second half, not one herd at 60 s
    assert all(w.not_before >= MAX_WINDOW / 2 for w in capped)


@given(
    st.integers(min_value=1, max_value=128),
    st.lists(
        st.tuples(
            st.floats(min_value=0.0, max_value=5.0),  # seconds since the previous event
            st.integers(min_value=0, max_value=300),  # handshakes holding slots
            st.one_of(st.none(), st.integers(min_value=0, max_value=400)),  # completed, or an Initial naming a turn
        ),
        max_size=300,
    ),
)
def test_no_window_grows_from_repeats_nor_names_more_than_the_cap(
    slots: int, events: list[tuple[float, int, int | None]]
) -> None:
    admission = HandshakeAdmission(now=0.0, slots=slots)
    now = 0.0
    given_turns: list[bytes] = []  # the turns refusals named, in order: turn k is given_turns[k]
    promised: dict[bytes, float] = {}  # turn -> the latest moment it was told to come back by
    for gap, in_progress, which in events:
        now += gap
        if which is None:
            admission.completed(now, in_progress)
            continue
        token = given_turns[which] if which < len(given_turns) else b""
        issued, head, rate = admission.issued, admission.head, admission.capacity
        decision = admission.admits(now, in_progress, token)
        if isinstance(decision, Admitted):
            assert in_progress < slots or (token and in_progress < 2 * slots)
            continue
        window = decision.window
        assert 0.0 <= window.not_before < window.within <= MAX_WINDOW
        if token:
            assert window.turn == token and admission.issued == issued  # kept: the queue did not grow
            if window.within < MAX_WINDOW / 2 and rate == admission.capacity and admission.head >= head:
                assert now + window.not_before <= max(promised[token], now) + 1e-6  # never later than before
        else:
            assert admission.issued == issued + 1
            given_turns.append(window.turn)
        promised[window.turn] = now + window.within
    assert not hasattr(admission, "__dict__")  # O(1) state, no per-client memory: a few numbers


@given(st.floats(min_value=0.0, max_value=1e4), st.floats(min_value=0.0, max_value=1e4), st.binary(max_size=8))
def test_the_reason_phrase_carries_the_window_and_the_turn(not_before: float, width: float, turn: bytes) -> None:
    window = RetryWindow(not_before, not_before + width, turn)
    lost = ConnectionLost(f"connection closed (error code 2): {busy_reason(window)}", 2)
    parsed = retry_window(lost)
    assert parsed is not None
    assert abs(parsed.not_before - window.not_before) <= 0.005 and abs(parsed.within - window.within) <= 0.005
    assert parsed.turn == (turn if len(turn) == 8 else b"")  # only a turn of this server's form is sent back
    assert retry_within(lost) == parsed.within


def test_an_older_servers_phrase_means_from_now_on() -> None:
    lost = ConnectionLost("connection closed (error code 2): busy: retry within 4.20 s", 2)
    assert retry_window(lost) == RetryWindow(0.0, 4.2)


def test_other_closes_carry_no_window() -> None:
    assert retry_within(ConnectionLost("connection closed (error code 2): no reason given", 2)) is None
    refusal = busy_reason(RetryWindow(0.0, 3.0))
    assert retry_window(ConnectionLost(f"closed: {refusal}", 0x1)) is None  # not a refusal


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="^slots must be at least 1, got 0$"):
        HandshakeAdmission(now=0.0, slots=0)
