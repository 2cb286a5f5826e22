"""Every name a doc cites must exist: the checker behind tests/unit/test_doc_references.py.

Docs are a reference, and a reference that names a module, class, method,
option or command that is gone sends a reader nowhere. This package reads
Markdown, picks out what looks like code (backticked spans, code blocks,
links) and resolves each against the repository as it is:

- ``aqueduct.x.y`` by import and ``getattr`` (then the code's own classes);
  an old path that moved (``OLD_PATHS`` of tests/unit/test_public_api.py)
  fails too, unless the sentence says it is the old one;
- ``Class``, ``Class.member``, ``Class.method(a, b=...)`` against every class
  and function defined in the repository's Python (an ``ast`` scan), the
  call's arguments against the definition's parameters;
- ``path/to/file.py``, ``module.py``, ``tests/x.py::test_name``, links;
- ``aqueduct-bridge serve --opt``, ``aqueduct-produce --opt``, ``aqueduct
  certs``, a lone ``--opt`` against the console scripts' real argparse
  parsers; ``python -m mod --opt`` against the module and its
  ``add_argument`` calls; ``make target`` against the Makefile;
  ``option("name")`` after ``format("aqueduct")`` against the source's options;
- a code-like word (``snake_case``, ``camelCase``) against the identifiers
  and string literals of the code (metric names, benchmark names live there);
- "`Name` in `aqueduct.mod`" against what ``mod`` itself defines.

Plain words in backticks (``log``, ``rate``, frame names in capitals) are
prose and pass. What is deliberately not this project's code (Spark's,
Kafka's, the operating system's names) is in :data:`.names.NOT_OURS`, each
with why.

Modules: :mod:`.code` (the repository's names: an ``ast`` index, imports),
:mod:`.commands` (command lines), :mod:`.names` (names and paths),
:mod:`.markdown` (pages, spans and code blocks).
"""

from tests.doc_references.markdown import Missing, check_docs, check_text

__all__ = ["Missing", "check_docs", "check_text"]
