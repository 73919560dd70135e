"""The per-run progress line of `make demo` / `tokenlake run`: counts come from the task results as the
in-process executor finishes them; a non-TTY gets only the final line, a TTY a bar redrawn in place."""

from __future__ import annotations

import io

from iceberg_catalog.commit import TaskResult, WrittenFiles
from orchestration.progress import (
    MeteredExecutor,
    MeteredExecutorResource,
    RunMeter,
    amount,
    final_line,
    native_stderr_captured,
)
from resources.executor import InProcessExecutor, TaskExecutorResource


class _TTY(io.StringIO):
    def isatty(self) -> bool:
        return True


def _result(index: int, tokens: int, rows: int) -> TaskResult:
    files = (WrittenFiles("tokenized.documents", {"tokenizer_id": "t"}, index, (f"f{index}.parquet",), rows),)
    return TaskResult(index, files, {"tokens": tokens, "documents": rows})


def test_amount_counts_stats_or_written_rows():
    r = _result(0, tokens=120, rows=3)
    assert amount(r, "tokens") == 120
    assert amount(r, None) == 3  # rows of every file written (raw_ingest: records and rejects)
    assert amount(r, "absent") == 0


def test_in_process_tasks_report_their_results_while_the_map_runs():
    stream = io.StringIO()
    seen = []
    with RunMeter("tokenize seg|gpt2", "tokenize", stream=stream) as meter:
        executor = MeteredExecutor(InProcessExecutor())

        def task(i: int) -> TaskResult:
            seen.append(meter.n)  # what the meter had counted when this task started
            return _result(i, tokens=10 * (i + 1), rows=1)

        results = executor.map(task, [0, 1, 2])
    assert [r.task_index for r in results] == [0, 1, 2]
    assert seen == [0, 10, 30]  # counted as each task finished, not at the end
    assert (meter.n, meter.tasks_done, meter.tasks_planned) == (60, 3, 3)
    meter.close(ok=True)
    out = stream.getvalue()
    assert "\r" not in out and out.count("\n") == 1  # a non-TTY: the final line only
    assert out.startswith("  tokenize seg|gpt2 ") and " ok " in out and " 60 tokens " in out


def test_a_tty_gets_a_live_bar_and_the_same_final_line():
    stream = _TTY()
    with RunMeter("raw_ingest a/b", "raw_ingest", stream=stream) as meter:
        MeteredExecutor(InProcessExecutor()).map(lambda i: _result(i, 0, rows=7), [0, 1])
    meter.close(ok=True)
    out = stream.getvalue()
    assert "14 records" in out and "\r" in out  # the bar, redrawn in place
    assert out.rstrip().splitlines()[-1].lstrip("\r").startswith("  raw_ingest a/b")


def test_without_an_active_meter_the_executor_is_the_plain_one():
    assert MeteredExecutor(InProcessExecutor()).map(lambda i: i * 2, [1, 2]) == [2, 4]
    resource = MeteredExecutorResource.like(TaskExecutorResource(kind="in_process", num_cpus=2.0))
    assert resource.num_cpus == 2.0 and isinstance(resource.executor().inner, InProcessExecutor)


def test_a_run_without_tasks_shows_the_rows_it_materialised():
    stream = io.StringIO()
    with RunMeter("near_dedup", "near_dedup", stream=stream) as meter:
        pass
    meter.close(ok=False, rows=42)
    words = stream.getvalue().split()
    assert words[:4] == ["near_dedup", "FAILED", "42", "rows"] and words[-1] == "s"
    assert final_line("near_dedup", None, "rows", 1.0, True).split() == ["near_dedup", "ok", "1.0", "s"]


def test_native_stderr_noise_is_dropped_after_success_and_kept_after_failure(capfd):
    import os

    with native_stderr_captured():
        os.write(2, b"Loading the LM will be faster if you build a binary file.\nreal warning\n")
        os.write(2, b"INFO:alembic.runtime.migration:Context impl SQLiteImpl.\n")
        os.write(2, b"2026-12-03 14:57:01 +0000 - dagster - INFO - new crawl segments: ['a/b']\n")
        os.write(2, b"\x1b[32m2026-12-03 15:01:46 +0000\x1b[0m - dagster - \x1b[34mINFO\x1b[0m - new crawl segments\n")
    assert capfd.readouterr().err == "real warning\n"
    with native_stderr_captured() as captured:
        os.write(2, b"Loading the LM will be faster if you build a binary file.\n")
        captured.failed = True
    assert "Loading the LM" in capfd.readouterr().err
