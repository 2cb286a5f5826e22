"""The JVM options of the Spark JVMs the tests start (set up in ``tests/conftest.py``)."""

#: JVM options of every Spark driver and executor the tests start: the JIT's first tier only
#: (C1) and the serial collector, as ``serve`` gives its own driver
#: (:data:`aqueduct.bridge.app.jvm.DRIVER_JAVA_OPTIONS`). A test's JVM lives seconds to a
#: minute, and C2's compiler threads would spend most of its CPU compiling code that barely
#: runs again: on two cores C1 alone costs a quarter less CPU per Spark test
#: (tests/spark/test_receiver.py with a ``serve`` start: 60 s against 79 s).
#:
#: Set through ``PYSPARK_SUBMIT_ARGS``, they reach the ``spark`` fixture's session and user
#: jobs too; a ``serve`` that finds the variable set adds nothing of its own, so the tests'
#: bridges also map no class-data-sharing archive (``app/class_archive.py``, unit-tested in
#: ``tests/unit/test_class_archive.py``) and their stops never wait for one to be written.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
