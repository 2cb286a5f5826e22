"""``python -m bench.token_cost``: what a producer token costs a bridge per HELLO, against the shared cookie.

Each HELLO under ``--token-key`` verifies one token (framing, JSON claims,
one Ed25519 signature, revocation and expiry checks); under the cookie it
is one constant-time compare. Measured in one process, the contenders
alternating from round to round so both see the same machine:

- **cookie**: :func:`hmac.compare_digest` of a 32-byte cookie (today's HELLO);
- **decode**: :func:`aqueduct.auth.decode_token` (everything but the signature);
- **verify**: :func:`aqueduct.auth.verify_token` against a ring of ``--keys``
  keys and a revocation list of ``--revoked`` token ids (what a HELLO costs);
- **notify**: one :meth:`Identity.check_notify` under the token's patterns
  (what each NOTIFY costs).

Prints checks per second (median of ``--repeat`` rounds) and the cost of
a verification in microseconds of one core; ``--json`` writes the summary.
The handshake rate of a whole fleet with tokens against the cookie, in
the same run: ``python -m bench.fleet --credentials cookie token``.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from aqueduct.auth import KeyRing, Revocations, decode_token, issue_token, verify_token


def rate(check: Callable[[], object], seconds: float) -> float:
    """Calls of ``check`` per second over about ``seconds``."""
    calls, start = 0, time.perf_counter()
    deadline = start + seconds
    while True:
        for _ in range(100):
            check()
        calls += 100
        now = time.perf_counter()
        if now >= deadline:
            return calls / (now - start)


def contenders(keys: int, revoked: int) -> dict[str, Callable[[], object]]:
    signer = Ed25519PrivateKey.generate()
    ring = KeyRing.of([signer.public_key()] + [Ed25519PrivateKey.generate().public_key() for _ in range(keys - 1)])
    now = int(time.time())
    token = issue_token(signer, subject="orders-host-17", streams=("orders-*", "audit"), now=now, lifetime=30 * 86400)
    revocations = Revocations(token_ids=frozenset(f"{i:016x}" for i in range(revoked)))
    identity = verify_token(token, ring, now, revocations).identity()
    cookie = os.urandom(32)
    sent = bytes(bytearray(cookie))  # a distinct object, as HELLO's decoded field is
    return {
        "cookie": lambda: hmac.compare_digest(sent, cookie),
        "decode": lambda: decode_token(token),
        "verify": lambda: verify_token(token, ring, now, revocations),
        "notify": lambda: identity.check_notify(7, "orders-eu"),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0].strip("`: "))
    ap.add_argument("--seconds", type=float, default=1.0, help="seconds per contender and round")
    ap.add_argument("--repeat", type=int, default=5, help="rounds")
    ap.add_argument("--keys", type=int, default=2, help="public keys the bridge holds (a rotation: 2)")
    ap.add_argument("--revoked", type=int, default=1000, help="revoked token ids in the revocation file")
    ap.add_argument("--json", type=Path, help="write the summary here")
    args = ap.parse_args(argv)
    checks = contenders(args.keys, args.revoked)
    rates: dict[str, list[float]] = {name: [] for name in checks}
    for r in range(args.repeat):
        for name in list(checks)[:: 1 if r % 2 else -1]:
            rates[name].append(rate(checks[name], args.seconds))
        print(f"round {r + 1}/{args.repeat} done", file=sys.stderr)
    med = {name: statistics.median(v) for name, v in rates.items()}
    summary: dict[str, Any] = {
        "per_second_median": med,
        "per_second": rates,
        "us_each": {name: 1e6 / value for name, value in med.items()},
        "args": {k: v for k, v in vars(args).items() if k != "json"},
    }
    us = summary["us_each"]
    for name, value in med.items():
        print(f"{name:7} {value:>14,.0f} /s   {us[name]:9.2f} us each")
    print(
        f"a token HELLO costs {us['verify']:.0f} us of one core ({us['verify'] / us['cookie']:,.0f}x a cookie "
        f"compare): 5,000 producers connecting at once spend {5000 * us['verify'] / 1e6:.2f} s verifying"
    )
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
