"""Sans-IO Aqueduct state machines (see docs/protocol.md).

Entry point: :class:`aqueduct.proto.connection.ConnectionMachine` with a
:class:`aqueduct.proto.config.ProtoConfig`; events and actions are in
:mod:`aqueduct.proto.events`, errors in :mod:`aqueduct.proto.errors`,
sender modes in :class:`aqueduct.wire.modes.Mode`, and
:class:`aqueduct.proto.pair.Pair` wires two connections together in memory.
"""
