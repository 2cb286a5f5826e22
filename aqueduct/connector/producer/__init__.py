"""The producer side: the connector library and ``aqueduct-produce``.

:mod:`.client` (``Connector``) drives the sans-IO
:class:`~aqueduct.connector.connector_session.ConnectorSession` over a link:
:mod:`.aqueduct_link` (QUIC) or :mod:`.tcp_link`, to one bridge of the
list :mod:`.bridges` checked, the one :mod:`.rotation` says (and when to
move to the next). :mod:`.cli` is the ``aqueduct-produce`` command.

Neighbours: the protocol core in :mod:`aqueduct.connector` below it, the
runtime for QUIC; it never imports the worker room.
"""
