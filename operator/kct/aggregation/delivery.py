"""A micro-batch's rows appended to a Parquet table once, however often Spark replays the batch.

Spark commits a Parquet write whole, but a micro-batch it had not committed when the driver died runs again
with the same id: an append the dead attempt had committed would be appended twice (the job's per-output
mark, written just after the append, leaves that gap). So the rows are first written to
`<table>/_staging/<batch id>` (on the table's own file system; Spark and Arrow readers skip folders named
`_...`), completed by a `_STAGED` file, then each file is renamed into the table at the same relative path
(its partition folder). A replay writes the staging again only when it is incomplete, and otherwise renames
just the files the dead attempt had not moved: no row lands twice, none is lost. The staging of earlier
batches (Spark committed them before this one ran) is deleted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["StagedAppend"]

_STAGED = "_STAGED"


def _hidden(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/"))


class StagedAppend:
    """Appends to the table at `table_path` (any Hadoop file system with an atomic rename)."""

    def __init__(self, spark: Any, table_path: str) -> None:
        self._root = table_path.rstrip("/")
        jvm = spark.sparkContext._jvm
        self._Path = jvm.org.apache.hadoop.fs.Path
        self._fs = self._Path(self._root).getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def staging(self, batch_id: int) -> str:
        return f"{self._root}/_staging/{batch_id}"

    def append(self, batch_id: int, write: Callable[[str], None]) -> int:
        """`write(path)` writes the batch's rows as Parquet to `path` (mode overwrite); they are then moved
        into the table. Returns how many files this call moved."""
        self._forget_before(batch_id)
        staging = self.staging(batch_id)
        staged = self._Path(f"{staging}/{_STAGED}")
        if not self._fs.exists(staged):
            write(staging)
            self._fs.create(staged, True).close()
        return self._publish(self._Path(staging))

    def _publish(self, staging: Any) -> int:
        prefix = self._fs.makeQualified(staging).toString().rstrip("/") + "/"
        listing = self._fs.listFiles(staging, True)
        files: list[tuple[Any, str]] = []
        while listing.hasNext():
            path = listing.next().getPath()
            relative = path.toString().removeprefix(prefix)
            if not _hidden(relative):
                files.append((path, relative))
        for path, relative in files:
            target = self._Path(f"{self._root}/{relative}")
            self._fs.mkdirs(target.getParent())
            if not self._fs.rename(path, target):
                raise OSError(f"could not move {path.toString()} to {target.toString()}")
        return len(files)

    def _forget_before(self, batch_id: int) -> None:
        folder = self._Path(f"{self._root}/_staging")
        if not self._fs.exists(folder):
            return
        for status in self._fs.listStatus(folder):
            name = status.getPath().getName()
            if name.isdigit() and int(name) < batch_id:
                self._fs.delete(status.getPath(), True)
