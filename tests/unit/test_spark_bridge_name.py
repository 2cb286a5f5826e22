"""The bridge in a user's Spark driver is ``SparkBridge``; its old name ``Receiver`` still imports, warning once.

``aqueduct.Receiver`` is the channel half; the bridge's class shared the
name until it was renamed, so code written against the old name keeps
running and is told, once, what to import instead.
"""

from __future__ import annotations

import warnings

import pytest

import aqueduct
from aqueduct.bridge.app import spark_bridge
from aqueduct.bridge.app.spark_bridge import SparkBridge, SparkBridgeError

OLD = (
    "aqueduct.bridge.Receiver is renamed SparkBridge (aqueduct.Receiver is the channel half); "
    "import SparkBridge instead"
)


def test_the_old_name_still_imports_from_both_places_and_warns_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_bridge, "_warned", set())
    with pytest.warns(DeprecationWarning) as caught:
        from aqueduct.bridge import Receiver
        from aqueduct.bridge.app.spark_bridge import Receiver as same
    assert Receiver is SparkBridge and same is SparkBridge
    assert [str(w.message) for w in caught] == [OLD]
    assert caught[0].filename == __file__  # it points at the import, not at the alias machinery
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from aqueduct.bridge import Receiver as again  # once is enough
    assert again is SparkBridge


def test_the_old_error_name_is_the_same_class(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spark_bridge, "_warned", set())
    with pytest.warns(DeprecationWarning, match="ReceiverError is renamed SparkBridgeError"):
        from aqueduct.bridge import ReceiverError
    assert ReceiverError is SparkBridgeError  # so `except ReceiverError` still catches


def test_the_new_names_and_the_channel_half_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from aqueduct.bridge import SparkBridge as bridge_class
        from aqueduct.bridge import SparkBridgeError as error_class
    assert (bridge_class, error_class) == (SparkBridge, SparkBridgeError)
    assert aqueduct.Receiver is not SparkBridge
    with pytest.raises(ImportError, match="cannot import name 'Reciever'"):
        from aqueduct.bridge import Reciever  # noqa: F401
