"""The QUIC stacks behind the transport seam (:mod:`aqueduct.runtime.transport`).

One module per stack: :mod:`.aioquic` (the default, pure Python, with its
bounded server :mod:`.quic_server`, its TLS setup :mod:`.tls`, batched UDP
reads :mod:`.udp` and the private members it relies on,
:mod:`.aioquic_internals`) and :mod:`.aiopquic` (picoquic in C, Python >=
3.12). Each offers ``listen`` and ``dial`` and feeds the driver through the
seam; only :mod:`aqueduct.runtime.endpoints` picks one.
"""
