"""A checkpoint a SIGKILL cut short is repaired without touching what Spark recorded."""

from __future__ import annotations

from pathlib import Path

from aqueduct.bridge import repair_checkpoint


def test_torn_temporary_writes_go_and_recorded_entries_stay(tmp_path: Path) -> None:
    ck = tmp_path / "ck"
    for log in ("offsets", "commits"):
        (ck / log).mkdir(parents=True)
        (ck / log / "0").write_text("v1")  # a recorded batch
        (ck / log / ".1.5f0c.tmp").write_text("half")  # the rename never happened
        (ck / log / ".1.5f0c.tmp.crc").write_text("crc")
    (ck / "metadata").write_text("{}")
    assert repair_checkpoint(ck) == str(ck)
    assert sorted(str(p.relative_to(ck)) for p in ck.rglob("*") if p.is_file()) == [
        "commits/0", "metadata", "offsets/0",
    ]  # fmt: skip
    assert repair_checkpoint(tmp_path / "new") == str(tmp_path / "new")  # nothing there yet: fine
