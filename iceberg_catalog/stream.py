"""Reading one data file a bounded batch at a time.

pyiceberg 0.12's `ArrowScan.to_record_batches` materialises every batch of a data file before it yields the
first (it reads files on a thread pool), and its fragment scanner reads ahead up to 16 batches: a task that
streams a 256 MB file of signatures holds the whole file. A global step's task memory must not grow with the
size of a data file, so a plain file (no delete files, every needed column present under its field id) is read
here with a fragment scanner that reads no batch ahead: `batch_rows` rows at a time, no pre-buffering, row
groups pruned by their statistics and the row filter applied per batch. Anything else (delete files, a column
the file lacks or names otherwise) returns None and the caller takes pyiceberg's own path, which handles it. The
rows are the same either way (tests/iceberg_catalog/test_stream.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pyarrow.dataset as ds
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.expressions.visitors import bind, extract_field_ids
from pyiceberg.io import FileIO
from pyiceberg.schema import Schema
from pyiceberg.table import FileScanTask

FIELD_ID = b"PARQUET:field_id"
BATCH_ROWS = 65_536
READ_BUFFER = 1 << 20  # bytes a column reader buffers when it does not pre-buffer a whole row group
FORMAT = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(pre_buffer=False, buffer_size=READ_BUFFER)
)


def plain_file_batches(
    io: FileIO,
    task: FileScanTask,
    table_schema: Schema,
    projected: Schema,
    row_filter: BooleanExpression,
    target: pa.Schema,
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch] | None:
    """The rows of `task`'s file matching `row_filter`, projected to `projected` and cast to `target`, in
    batches of at most `batch_rows` rows; None when the file is not plain (see the module docstring)."""
    if task.delete_files or task.file.file_format.name != "PARQUET":
        return None
    bound = None if row_filter == AlwaysTrue() else bind(table_schema, row_filter, case_sensitive=True)
    wanted = {f.field_id for f in projected.fields} | (extract_field_ids(bound) if bound is not None else set())
    f = io.new_input(task.file.file_path).open(seekable=True)
    try:
        fragment = FORMAT.make_fragment(f)
        by_id = file_columns(fragment.physical_schema)
        if any(by_id.get(i) != table_schema.find_field(i).name for i in wanted):
            f.close()
            return None
    except BaseException:
        f.close()
        raise
    return _batches(f, fragment, table_schema, projected, bound, target, batch_rows)


def file_columns(schema: pa.Schema) -> dict[int, str]:
    """Top-level column name by Iceberg field id, from the Parquet file's field-id metadata."""
    return {int(f.metadata[FIELD_ID]): f.name for f in schema if f.metadata and FIELD_ID in f.metadata}


def _batches(f, fragment, table_schema, projected, bound, target, batch_rows) -> Iterator[pa.RecordBatch]:
    from pyiceberg.io.pyarrow import expression_to_pyarrow  # imports pandas: not for every reader

    scanner = ds.Scanner.from_fragment(
        fragment,
        schema=fragment.physical_schema,
        columns=[f.name for f in projected.fields],
        # row groups whose statistics rule the filter out are skipped, as in pyiceberg's scan
        filter=None if bound is None else expression_to_pyarrow(bound, table_schema),
        batch_size=batch_rows,
        batch_readahead=0,
        fragment_readahead=0,
        use_threads=False,
    )
    with f:
        for batch in scanner.to_batches():
            if batch.num_rows:
                yield batch.cast(target)
