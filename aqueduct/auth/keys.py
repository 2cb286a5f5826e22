"""The operator's Ed25519 key pair, and the ring of public keys a bridge verifies tokens with.

Each public key has a short **key id** (the first 8 bytes of the SHA-256 of
its raw 32 bytes, in hex) that every token names, so a bridge may hold
several keys at once: rotating means adding the new public key beside the
old one (one PEM file holding both, or ``--token-key`` given twice),
issuing with the new private key, and removing the old public key once its
tokens have expired. A token naming a key id the ring lacks is refused as
``unknown_key``, not tried against every key.

Parsing and serializing only: the files are read and written by the caller.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = ["KeyRing", "key_id", "load_private_key", "private_key_pem", "public_key_pem"]

_PEM_END = b"-----END PUBLIC KEY-----"


def key_id(public_key: Ed25519PublicKey) -> str:
    """The id a token names its signing key by (16 hex digits)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def private_key_pem(private_key: Ed25519PrivateKey) -> bytes:
    """PKCS#8 PEM, unencrypted: the file's mode (0600) is what protects it."""
    return private_key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(public_key: Ed25519PublicKey) -> bytes:
    """SubjectPublicKeyInfo PEM (``-----BEGIN PUBLIC KEY-----``)."""
    return public_key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    """The operator's signing key from PEM; ValueError if it is not an unencrypted Ed25519 key."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"not an unencrypted PEM private key ({exc})") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"not an Ed25519 key but {type(key).__name__}: make one with `aqueduct token keygen`")
    return key


@dataclass(frozen=True)
class KeyRing(Mapping[str, Ed25519PublicKey]):
    """Public keys by key id: everything a bridge needs to verify tokens."""

    keys: Mapping[str, Ed25519PublicKey] = field(default_factory=dict)

    @classmethod
    def of(cls, public_keys: Iterable[Ed25519PublicKey]) -> KeyRing:
        return cls({key_id(k): k for k in public_keys})

    @classmethod
    def from_pem(cls, pem: bytes) -> KeyRing:
        """Every ``PUBLIC KEY`` block of a PEM file (one or more); ValueError if none or one is not Ed25519."""
        keys = []
        for block in pem.split(_PEM_END)[:-1]:
            try:
                key = serialization.load_pem_public_key(block + _PEM_END)
            except ValueError as exc:
                raise ValueError(f"public key {len(keys) + 1} is not valid PEM ({exc})") from None
            if not isinstance(key, Ed25519PublicKey):
                raise ValueError(f"public key {len(keys) + 1} is {type(key).__name__}, not Ed25519")
            keys.append(key)
        if not keys:
            raise ValueError("no PEM public key (-----BEGIN PUBLIC KEY-----) found")
        return cls.of(keys)

    def merged(self, other: KeyRing) -> KeyRing:
        """Both rings' keys (``--token-key`` given several times)."""
        return KeyRing({**self.keys, **other.keys})

    def __getitem__(self, kid: str) -> Ed25519PublicKey:
        return self.keys[kid]

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys)

    def __len__(self) -> int:
        return len(self.keys)
