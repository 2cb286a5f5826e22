"""Identities and what they may write: HELLO and NOTIFY checks, the ACL file, the revocation file.

Certificate subjects come from real certificates (``aqueduct certs``'s
generator); the parsers are fuzzed: any text is a result or an
``AuthFileError`` naming its line, nothing else.
"""

from __future__ import annotations

import pytest
from cryptography import x509
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aqueduct.auth import (
    ANONYMOUS,
    AuthFileError,
    Denied,
    Identity,
    IdRange,
    Method,
    Permissions,
    Refusal,
    certificate_subject,
    parse_acl,
    parse_id_ranges,
    parse_patterns,
    parse_revocations,
)
from aqueduct.runtime.certs import generate_certs

FUZZ = settings(max_examples=800, suppress_health_check=[HealthCheck.too_slow], deadline=None)

ACL = """\
# billing's hosts: their own program and streams, ids 1000-1999
allow "CN=billing-*,O=Acme"   programs=billing/*  streams=billing-*,audit  ids=1000-1999

allow CN=admin,O=Acme programs=*  streams=*
   # indented comment
allow "CN=*" programs=misc/* streams=misc-*
"""


def test_anonymous_may_do_everything_as_under_the_cookie_today():
    assert ANONYMOUS.method is Method.ANONYMOUS and str(ANONYMOUS) == "anonymous"
    assert ANONYMOUS.check_hello("billing", "p0") is None
    assert ANONYMOUS.check_notify(2**64 - 1, "anything/at all") is None


def test_a_hello_outside_the_programs_is_refused_naming_the_rule():
    who = Identity("orders", Method.TOKEN, Permissions(("orders/*",), ("orders-*",), None, "token t1 (subject 'orders')"))
    assert who.check_hello("orders", "p7") is None
    denied = who.check_hello("billing", "p0")
    assert isinstance(denied, Denied) and denied.reason is Refusal.PROGRAM_NOT_ALLOWED
    assert str(denied) == (
        "program_not_allowed: program 'billing/p0' is not in programs orders/* of token t1 (subject 'orders')"
    )
    assert str(who) == "token:orders"


def test_a_notify_needs_both_a_permitted_name_and_a_permitted_id():
    perms = Permissions(("*",), ("orders-*", "audit"), (IdRange(10, 19), IdRange(40, 40)), "acl:3")
    assert perms.check_stream(10, "orders-eu") is None and perms.check_stream(40, "audit") is None
    name = perms.check_stream(10, "billing-1")
    assert name.reason is Refusal.STREAM_NOT_ALLOWED
    assert str(name) == "stream_not_allowed: stream 'billing-1' (id 10) is not in streams orders-*,audit of acl:3"
    ids = perms.check_stream(20, "orders-eu")
    assert ids.reason is Refusal.STREAM_ID_NOT_ALLOWED and "10-19,40 of acl:3" in str(ids)


def test_patterns_are_case_sensitive_globs_over_the_whole_name():
    perms = Permissions(("*",), ("orders-?", "[ab]x"), None, "t")
    assert perms.check_stream(1, "orders-1") is None and perms.check_stream(1, "bx") is None
    for refused in ("Orders-1", "orders-12", "xorders-1", "cx"):
        assert perms.check_stream(1, refused) is not None


@pytest.mark.parametrize(
    "text, expected",
    [("7", (IdRange(7, 7),)), ("0-99, 500", (IdRange(0, 99), IdRange(500, 500)))],
)
def test_id_ranges_parse(text, expected):
    assert parse_id_ranges(text) == expected


@pytest.mark.parametrize("text", ["", "5-1", "a-b", "1-2-3", "-4", "1,", "²", "18446744073709551616"])
def test_bad_id_ranges_are_value_errors(text):
    with pytest.raises(ValueError):
        parse_id_ranges(text)


def test_patterns_parse_and_an_empty_one_is_an_error():
    assert parse_patterns(" orders-* , audit") == ("orders-*", "audit")
    for bad in ("", "a,,b", " , "):
        with pytest.raises(ValueError):
            parse_patterns(bad)


def test_acl_first_matching_line_decides():
    acl = parse_acl(ACL, "acl.conf")
    billing = acl.identity_for("CN=billing-3,O=Acme")
    assert isinstance(billing, Identity) and billing.method is Method.CERTIFICATE
    assert billing.check_hello("billing", "p0") is None
    assert billing.check_notify(1500, "billing-eu") is None
    assert str(billing.check_notify(1500, "orders-eu")).endswith("of acl.conf:2")
    assert billing.check_notify(5, "audit").reason is Refusal.STREAM_ID_NOT_ALLOWED
    admin = acl.identity_for("CN=admin,O=Acme")
    assert admin.check_notify(5, "orders-eu") is None and admin.permissions.source == "acl.conf:4"
    other = acl.identity_for("CN=someone")
    assert other.check_hello("billing", "p0").reason is Refusal.PROGRAM_NOT_ALLOWED
    assert other.check_hello("misc", "p0") is None


def test_a_subject_no_line_matches_is_refused():
    denied = parse_acl("allow CN=a programs=* streams=*\n", "acl.conf").identity_for("CN=b")
    assert isinstance(denied, Denied) and denied.reason is Refusal.NO_ACL_ENTRY
    assert str(denied) == "no_acl_entry: certificate subject 'CN=b' matches no line of acl.conf"
    assert isinstance(parse_acl("# nobody yet\n").identity_for("CN=a"), Denied)


def test_a_real_client_certificate_maps_through_the_acl(tmp_path):
    paths = generate_certs(tmp_path)
    subject = certificate_subject(x509.load_pem_x509_certificate(paths.client_cert.read_bytes()))
    assert subject == "CN=aqueduct-client,O=aqueduct local"
    acl = parse_acl('allow "CN=aqueduct-client,O=aqueduct local" programs=demo/* streams=demo-*\n')
    identity = acl.identity_for(subject)
    assert identity.subject == subject and identity.check_notify(1, "demo-1") is None


@pytest.mark.parametrize(
    "text, error",
    [
        ("deny CN=a programs=* streams=*", "acl:1: expected `allow SUBJECT-PATTERN"),
        ("allow", "acl:1: expected `allow SUBJECT-PATTERN"),
        ("\n\nallow CN=a streams=*", "acl:3: missing programs="),
        ("allow CN=a", "acl:1: missing programs= and streams="),
        ("allow CN=a programs=* streams=* stream=x", "acl:1: unknown setting 'stream=x'"),
        ("allow CN=a programs=* streams=* streams=y", "acl:1: streams= given twice"),
        ("allow CN=a programs=* streams=a,,b", "acl:1: expected comma-separated patterns"),
        ("allow CN=a programs=* streams=* ids=9-1", "acl:1: stream id range 9-1"),
        ('# ok\nallow "CN=a programs=* streams=*', "acl:2: no closing quotation"),
    ],
)
def test_acl_errors_name_the_line(text, error):
    with pytest.raises(AuthFileError) as caught:
        parse_acl(text, "acl")
    assert str(caught.value).startswith(error)
    assert caught.value.line == int(error.split(":")[1])


def test_revocations_by_token_id_and_subject():
    revoked = parse_revocations(
        "# leaked 2026-11-20\ntoken 3f9c2a1b0d4e5f60\nsubject orders-host-17\n"
        'subject "CN=billing-1,O=Acme"\n\n',
        "revoked",
    )
    assert revoked.revokes("3f9c2a1b0d4e5f60", "orders") == "token id revoked"
    assert revoked.revokes("other", "orders-host-17") == "subject revoked"
    assert revoked.revokes(None, "CN=billing-1,O=Acme") == "subject revoked"  # a certificate's subject
    assert revoked.revokes("other", "orders") is None


@pytest.mark.parametrize("text", ["token", "token a b", "jti a", "subject 'x"])
def test_revocation_errors_name_the_line(text):
    with pytest.raises(AuthFileError, match=r"^revoked:2: "):
        parse_revocations("# first\n" + text, "revoked")


WORDS = st.sampled_from(["allow", "token", "subject", "programs=", "streams=", "ids=", "*", "a", "1-2", ",", '"', "'", "#", "\\", " ", "\n", "=", "-", "\t"])
TEXT = st.one_of(st.text(), st.lists(WORDS, max_size=30).map("".join))


@FUZZ
@given(TEXT, st.text(max_size=20))
def test_fuzzed_acl_files_parse_or_name_a_line(text, subject):
    try:
        acl = parse_acl(text, "acl")
    except AuthFileError as exc:
        assert 1 <= exc.line <= max(1, len(text.splitlines()))
        return
    result = acl.identity_for(subject)
    if isinstance(result, Identity):
        result.check_hello("p", "i")
        result.check_notify(0, subject)


@FUZZ
@given(TEXT)
def test_fuzzed_revocation_files_parse_or_name_a_line(text):
    try:
        parse_revocations(text, "revoked")
    except AuthFileError as exc:
        assert 1 <= exc.line <= max(1, len(text.splitlines()))
