"""The JVM options of the Spark JVMs the tests start (set up in ``tests/conftest.py``)."""

#: JVM options of every Spark driver and executor the tests start: the JIT's first tier only (C1).
#: A test's JVM lives seconds to a minute, and C2's compiler threads would spend most of its
#: CPU compiling code that barely runs again: on two cores C1 alone costs a quarter less CPU
#: per Spark test (tests/spark/test_receiver.py with a ``serve`` start: 60 s against 79 s)
#: and runs every test the same. The product itself keeps the JVM's defaults.
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"
