"""``benchmarks/bench_langgraph.py`` runs as its README says, and its interleaved step
figures (median, p95, paired ratios) are computed as it prints them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_langgraph  # noqa: E402

from tests.bench_scripts import run_bench  # noqa: E402
from tests.stores.conftest import require_url  # noqa: E402


def num(text: str) -> float:
    """A figure as the benches print it: thousands grouped with commas (a slow host's
    microseconds pass 1,000)."""
    return float(text.replace(",", ""))


def test_p95_is_the_nearest_rank() -> None:
    assert bench_langgraph._p95([3.0]) == 3.0
    assert bench_langgraph._p95([5.0, 1.0, 4.0, 2.0, 3.0]) == 5.0  # below 20 samples: the largest
    assert bench_langgraph._p95([float(i) for i in range(1, 101)]) == 95.0


def test_a_paired_ratio_is_the_median_of_the_invoke_by_invoke_ratios() -> None:
    """A slow minute that hits both savers of a pair cancels out; a saver twice as slow
    in every pair is 2x, whatever the disk did between the pairs."""
    fast = {"step_samples": [1.0, 5.0, 1.0]}
    slow = {"step_samples": [2.0, 10.0, 2.0]}
    assert bench_langgraph.paired(slow, fast) == 2.0
    with pytest.raises(ValueError):  # every saver ran the same number of invokes
        bench_langgraph.paired(slow, {"step_samples": [1.0]})


def test_a_cold_read_is_paired_with_sqlitesavers_made_beside_it_in_both_orders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a host that slows down 1.5x from one read to the next, a TetherSaver that costs
    what SqliteSaver does reads 1/1.5x SqliteSaver's when it goes first and 1.5x when it
    goes second: the target's figure takes a pair in each order together (which goes first
    alternating rep by rep), so it is 1.0, not the 1.5**k of reads made k apart, nor
    either order's bias."""
    calls: list[str] = []

    def run(argv: list[str], **_: object) -> subprocess.CompletedProcess[str]:
        calls.append(argv[argv.index("--cold-read") + 1])
        faults = 1500 if "SqliteSaver" in argv else 1700
        return subprocess.CompletedProcess(argv, 0, stdout=f"{0.02 * 1.5 ** len(calls)} 5 0.1 {faults}")

    monkeypatch.setattr(bench_langgraph.subprocess, "run", run)
    names = ("TetherSaver redis", "SqliteSaver")
    chosen = [s for s in bench_langgraph.subjects(tmp_path, None, None) if s.name in names]
    rows: dict[str, dict[str, Any]] = {s.name: {"thread": "t", "final": 5} for s in chosen}
    bench_langgraph.cold_reads(chosen, rows, 5, tmp_path)
    assert calls.count("TetherSaver redis") == 5 and calls.count("SqliteSaver") == 5 + 5
    assert rows["TetherSaver redis"]["cold_paired"] == pytest.approx(1.0)
    assert rows["TetherSaver redis"]["cold_orders"] == pytest.approx((1 / 1.5, 1.5))
    assert "cold_paired" not in rows["SqliteSaver"]  # the reference is not paired with itself
    # each saver's page faults: its own reads only (SqliteSaver's paired reads are not its own)
    assert rows["TetherSaver redis"]["cold_faults"] == 1700 and rows["SqliteSaver"]["cold_faults"] == 1500
    bench_langgraph.cold_reads(
        chosen, rows := {s.name: {"thread": "t", "final": 5} for s in chosen}, 1, tmp_path
    )
    assert "cold_paired" not in rows["TetherSaver redis"]  # one order only: no figure


def test_every_cold_read_starts_at_the_same_moment_after_its_opening_on_a_busy_cpu() -> None:
    """A saver that opened fast waits until the others would have opened, then every saver's
    read has the CPU kept busy first; an opening slower than that is not waited for again."""
    t0 = time.perf_counter()
    started = time.thread_time()
    bench_langgraph.settle_before_read(t0)
    took = time.perf_counter() - t0
    assert took >= bench_langgraph.READ_AT + bench_langgraph.BUSY_BEFORE_READ
    # busy, not asleep: a sleep takes no CPU time (a busy host may give the loop only part of a core)
    assert time.thread_time() - started >= 0.2 * bench_langgraph.BUSY_BEFORE_READ
    t0 = time.perf_counter()
    bench_langgraph.settle_before_read(t0 - 2 * bench_langgraph.READ_AT)  # opened long ago
    assert time.perf_counter() - t0 < bench_langgraph.READ_AT


def test_the_idle_probe_times_the_same_decode_straight_away_and_later() -> None:
    out = run_bench("probe_idle.py", "--quick", "--processes", "1", timeout=300)
    assert "page-fault probe " in out and " µs a page (" in out
    lines = {m[1]: float(m[2]) for m in re.finditer(r"  decode (.+?)\s{2,}([\d.]+) ms", out)}
    assert set(lines) == {
        "straight after the imports",
        "after a 1 ms sleep",
        "after 50 ms of busy CPU",
        "after a 1 s sleep",
        "after 1 s of busy CPU",
        "after a 0.5 s sleep, then 50 ms busy",
    }, out
    assert all(ms > 0 for ms in lines.values()), lines
    assert "1.00x straight away" in out


def test_the_chat_holds_ids_as_a_langgraph_state_holds_them() -> None:
    """Assistant messages keep the id they were built with (LangChain's run id shape); the
    user's and the tools' got theirs on entering the state; all distinct, the same every run,
    and a step's answer gets a new one."""
    chat = bench_langgraph.chat(40_000)
    again = bench_langgraph.chat(40_000)
    assert [m.id for m in chat] == [m.id for m in again]
    assert len({m.id for m in chat}) == len(chat)
    kinds = {m.type: m.id for m in chat}
    assert kinds["ai"].startswith("run-") and kinds["ai"].endswith("-0")
    assert not kinds["human"].startswith("run-") and len(kinds["human"]) == 36
    assert bench_langgraph.message(len(chat)).id not in {m.id for m in chat}
    short = bench_langgraph.chat(40_000, lambda i: f"m-{i}")
    assert [m.id for m in short] == [f"m-{i}" for i in range(len(short))]


def test_the_handout_bench_compares_the_copy_with_the_savers_objects() -> None:
    out = run_bench("bench_handout.py", "--quick", "--ids", "state,short", "--rounds", "1")
    for ids in ("state", "short"):
        assert f"### message ids: {ids}" in out
    assert out.count("1MB: add_messages, tether: the copy handed out") == 2
    assert "its ids made afresh" in out and "1MB: tether / baseline" in out


def test_the_script_runs_its_savers_interleaved_and_prints_each_step_beside_its_floor(
    tmp_path: Path,
) -> None:
    out = run_bench(
        "bench_langgraph.py",
        *("--quick", "--sizes", "1MB", "--steps", "2", "--reps", "2", "--cold-reads", "2"),
        *("--only", "tethersaver sqlite,floor sqlite,sqlitesaver,langgraph alone"),
        tmp=tmp_path,
    )
    assert "2 steps per invoke, 2 invokes per saver (interleaved)" in out
    step = next(line for line in out.splitlines() if "1MB TetherSaver sqlite: step  " in line)
    assert "p95 " in step and "floor " in step and "base " in step, step
    cold = next(line for line in out.splitlines() if "TetherSaver sqlite: get_state warm / cold" in line)
    assert "SqliteSaver cold" in cold and "opening the saver" in cold, cold
    # the page faults of each saver's reads: a 1 MB chat fills hundreds of pages
    faults = re.search(r"; ([\d,]+) page faults \(SqliteSaver ([\d,]+)\)", cold)
    assert faults and num(faults[1]) > 100 and num(faults[2]) > 100, cold
    for target in ("step / its floor", "step / SqliteSaver's", "cold get_state / SqliteSaver's"):
        assert f"1MB TetherSaver sqlite: {target}" in out
    # the cold target is the quotient of reads made side by side; the medians' one is printed too
    medians = next(
        line for line in out.splitlines() if "TetherSaver sqlite: cold medians / SqliteSaver's" in line
    )
    assert "seconds apart" in medians, medians


def test_the_trace_shows_the_puts_waiting_for_the_graph_and_what_a_step_stores(tmp_path: Path) -> None:
    """``benchmarks/trace_langgraph.py`` runs as the README says: its timeline counts every
    put of an invoke and how many started after the graph's last node, and ``--bytes``
    reads back, by key, what a thread stored per step, the appended message the largest."""

    def trace(*args: str) -> str:
        return run_bench("trace_langgraph.py", "--steps", "4", "--invokes", "1", *args, tmp=tmp_path)

    out = trace("--only", "tether-sqlite,floor-sqlite")
    for subject in ("tether-sqlite", "floor-sqlite"):
        line = next(
            line for line in out.splitlines() if f"{subject}: puts started after the last node" in line
        )
        after, total = int(num(line.split()[-4])), int(num(line.split()[-2]))
        assert total == 4 + 2, line  # a put per step, the input's and the last one
        assert 0 <= after <= total, line

    def value(subject: str, what: str) -> float:
        line = next(line for line in out.splitlines() if f"{subject}: {what}" in line)
        return num(line.split(what)[1].split()[0])

    for subject in ("tether-sqlite", "floor-sqlite"):
        # the graph's thread ran on the CPU for part of each step, never for more than all of it
        assert 0 < value(subject, "graph's thread CPU per step") <= value(subject, "step") * 1.05, out
    # TetherSaver's get_tuple hands out a copy of the 1 MB chat; the floor's its references
    assert value("tether-sqlite", "get_tuple at the invoke's start") > value(
        "floor-sqlite", "get_tuple at the invoke's start"
    ), out
    for subject in ("tether-sqlite", "floor-sqlite"):  # collections ran within the step's time
        assert 0 <= value(subject, "garbage collector per step") <= value(subject, "step"), out
    out = trace("--bytes")
    steps = next(line for line in out.splitlines() if "steps read back" in line)
    assert int(steps.split()[3]) >= 4, steps
    per_key = [line for line in out.splitlines() if "bytes/step" in line]
    assert "c:messages (append)" in per_key[0], per_key  # the ~1 KB message leads
    # (spread over every version read back, the input's and the last put's among them)
    assert num(per_key[0].split()[-2]) > 500, per_key[0]
    out = trace("--replay", "--rounds", "2", "--only", "sqlite")
    replayed = next(line for line in out.splitlines() if "calls replayed" in line)
    assert int(replayed.split()[2]) == 4 + 2, replayed  # the same puts as the timeline's invoke
    cpu = {}
    for subject in ("tether-sqlite", "floor-sqlite"):
        line = next(line for line in out.splitlines() if f"{subject}: puts and writes per step, CPU" in line)
        cpu[subject] = num(line.split("CPU")[1].split()[0])
        wall = num(line.split("wall ")[1].split()[0])
        assert 0 < cpu[subject] <= wall * 1.05, line  # one thread: its CPU within its wall time
    ratio = next(line for line in out.splitlines() if "tether-sqlite: CPU per step / its floor's" in line)
    assert abs(num(ratio.split()[-5]) - cpu["tether-sqlite"] / cpu["floor-sqlite"]) < 0.02, ratio
    # the floor's bytes written through TetherSaver's own store: the store's transaction costs
    # more than the floor's one INSERT, and less than the saver's whole puts
    line = next(line for line in out.splitlines() if "store-sqlite: puts and writes per step, CPU" in line)
    store = num(line.split("CPU")[1].split()[0])
    assert cpu["floor-sqlite"] < store < cpu["tether-sqlite"], out
    ratio = next(line for line in out.splitlines() if "the floor's through its store" in line)
    assert abs(num(ratio.split("store")[1].split()[0]) - cpu["tether-sqlite"] / store) < 0.02, ratio
    assert "the server's" not in out  # SQLite keeps no count of what it wrote


def test_the_replay_counts_what_the_servers_wrote_and_received_for_the_puts(tmp_path: Path) -> None:
    """``trace_langgraph --replay`` reads PostgreSQL's write-ahead log position and Redis's
    count of bytes received around each subject's puts: per step, TetherSaver's beside its
    floor's, and their quotient as printed."""
    require_url("postgresql", tmp_path)  # (the bench reads the same variables)
    require_url("redis", tmp_path)
    out = run_bench(
        "trace_langgraph.py",
        *("--steps", "4", "--replay", "--rounds", "1", "--only", "postgres,redis"),
        tmp=tmp_path,
    )
    counts: dict[str, float] = {}
    for subject, what in (("postgres", "WAL written"), ("redis", "bytes received")):
        for kind in ("tether", "floor"):
            name = f"{kind}-{subject}"
            line = next(line for line in out.splitlines() if f"{name}: the server's {what} per step" in line)
            counts[name] = num(line.split("per step")[1].split()[0])
            # a step's puts hand the server at least the ~1 KB message they append (the
            # counts are the server's own, so a test on the other worker may only add to them)
            assert counts[name] > 1000, line
        ratio = next(
            line for line in out.splitlines() if f"tether-{subject}: the server's bytes per step /" in line
        )
        expected = counts[f"tether-{subject}"] / counts[f"floor-{subject}"]
        assert abs(num(ratio.split()[-3]) - expected) < 0.01, ratio


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
    reason="trace_langgraph --cold counts with valgrind's callgrind (Debian's valgrind package)",
)
def test_the_trace_counts_a_cold_get_state_against_sqlitesavers(tmp_path: Path) -> None:
    """``trace_langgraph --cold`` counts the instructions of a cold ``get_state`` on each saver
    and prints TetherSaver's over SqliteSaver's."""
    out = run_bench(
        "trace_langgraph.py",
        *("--cold", "--only", "tether-sqlite,sqlitesaver", "--steps", "2", "--invokes", "1"),
        timeout=600,
        tmp=tmp_path,
    )
    counts = {
        line.split(":")[0].strip(): num(line.split()[-5])
        for line in out.splitlines()
        if ": cold get_state  " in line
    }
    assert set(counts) == {"tether-sqlite", "sqlitesaver"}, out
    assert all(c > 1 for c in counts.values()), counts  # millions: a 1 MB chat decoded
    alone = next(line for line in out.splitlines() if "tether-sqlite: the store's read alone" in line)
    part = num(alone.split("read alone")[1].split("M instr")[0])
    assert 0 < part < counts["tether-sqlite"], alone  # a part of the whole read
    ratio = next(line for line in out.splitlines() if "tether-sqlite: cold get_state / SqliteSaver's" in line)
    assert abs(num(ratio.split()[-3]) - counts["tether-sqlite"] / counts["sqlitesaver"]) < 0.01, ratio


@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("callgrind_control") is None,
    reason="trace_langgraph --ops counts with valgrind's callgrind (Debian's valgrind package)",
)
def test_the_trace_counts_a_commit_by_the_shape_of_a_steps_ops(tmp_path: Path) -> None:
    """``trace_langgraph --ops`` counts the store's commits for each shape of a step's ops:
    the same data as separate ops costs more than the appends alone, and each shape's
    quotient is printed as its counts say."""
    out = run_bench("trace_langgraph.py", "--ops", "--steps", "8", timeout=600, tmp=tmp_path)
    counts = {
        line.split(":")[0].strip(): num(line.split("a commit")[1].split()[0])
        for line in out.splitlines()
        if ": a commit  " in line
    }
    assert set(counts) == {"appends", "langgraph", "folded", "packed"}, out
    assert 0 < counts["appends"] < counts["langgraph"], counts  # five more ops, and their data
    for shape in ("appends", "folded", "packed"):
        line = next(line for line in out.splitlines() if f"{shape} / langgraph" in line)
        assert abs(num(line.split()[-4]) - counts[shape] / counts["langgraph"]) < 0.02, line


def test_the_long_thread_bench_compares_each_window_with_the_first_and_the_floor(tmp_path: Path) -> None:
    """``bench_langgraph_long.py`` runs a thread window by window on TetherSaver, the floor and
    ``SqliteSaver``, and prints each subject's last window against its first and against the
    floor's, as its window lines say."""
    out = run_bench(
        "bench_langgraph_long.py", "--windows", "2", "--steps", "6", "--start", "4000", tmp=tmp_path
    )
    subjects = ("tether-sqlite", "floor-sqlite", "sqlitesaver")
    cpu: dict[str, list[float]] = {s: [] for s in subjects}
    step: dict[str, list[float]] = {s: [] for s in subjects}
    for line in out.splitlines():
        for s in subjects:
            if line.strip().startswith(f"{s}: put CPU (median)"):
                cpu[s].append(num(line.split("(median)")[1].split()[0]))
                step[s].append(num(line.split("(step ")[1].split()[0]))
    assert all(len(cpu[s]) == 2 and min(cpu[s]) > 0 for s in subjects), out  # one line a window
    for s in subjects:
        line = next(line for line in out.splitlines() if f"{s}: put CPU, last window / first" in line)
        assert abs(num(line.split("/ first")[1].split()[0]) - cpu[s][1] / cpu[s][0]) < 0.02, line
    for s in ("tether-sqlite", "sqlitesaver"):  # (the floor is not compared with itself)
        line = next(line for line in out.splitlines() if f"{s}: step, last window / floor-sqlite's" in line)
        ratio = num(line.split("floor-sqlite's")[1].split()[0])
        assert abs(ratio - step[s][1] / step["floor-sqlite"][1]) < 0.02 + 0.01 * ratio, line
    assert "floor-sqlite: step, last window" not in out


@pytest.mark.parametrize("flags", [("--windows", "1"), ("--windows", "0"), ("--steps", "0")])
def test_the_long_thread_bench_refuses_fewer_than_two_windows_or_no_steps(flags: tuple[str, str]) -> None:
    """The last window is compared with the first: fewer than two windows, or windows of no
    step, are refused with a message (not run with the defaults instead)."""
    done = subprocess.run(
        [sys.executable, str(BENCH / "bench_langgraph_long.py"), *flags],
        env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{BENCH}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0
    assert "--windows must be 2 or more" in done.stderr
    assert "window 1 of" not in done.stdout  # nothing measured


def test_the_parts_of_a_put_add_up_within_its_whole(tmp_path: Path) -> None:
    """``trace_langgraph --parts`` times each part of a put inside the whole put: every part
    is within the part that holds it, and the backend's write (its SQL and fsync'd commit) is
    the bulk of a SQLite commit's CPU. The plain replay's figures are printed beside, for
    TetherSaver and its floor; the floor's parts are not timed."""
    out = run_bench(
        "trace_langgraph.py",
        *("--steps", "4", "--parts", "--rounds", "1", "--only", "sqlite"),
        tmp=tmp_path,
    )

    def part(label: str) -> float:  # (a part is indented under the one that holds it)
        line = next(line for line in out.splitlines() if "tether-sqlite: " in line and label in line)
        return num(line.split(label)[1].split(")")[-1].split()[0])

    whole = part("put (the saver's, whole)")
    own = part("the put's own work")
    commit = part("the store's commit")
    write = part("the backend's write")
    assert 0 < write < commit < own <= whole, out
    assert write > 0.4 * commit, out
    for inner in ("planning the row", "serialising values", "copying what the graph handed over"):
        assert 0 < part(inner) < own, (inner, out)
    assert 0 < part("serialising the writes") <= part("put_writes (the saver's, whole)"), out
    for subject in ("tether-sqlite", "floor-sqlite"):
        assert f"{subject}: puts and writes per step, CPU" in out, out
    assert "floor-sqlite: put (the saver's" not in out  # the floors are timed whole only


def test_the_parts_wrappers_are_put_back() -> None:
    """The timing wrappers of ``--parts`` replace functions only while they time."""
    import trace_langgraph

    from tether.integrations.langgraph._put import Puts
    from tether.stores._chain import ChainEngine

    before = (Puts.put_once, ChainEngine.plan)
    cpu: dict[str, float] = {}
    with trace_langgraph.timed_parts(cpu):
        assert Puts.put_once is not before[0]
        assert ChainEngine.plan is not before[1]
    assert (Puts.put_once, ChainEngine.plan) == before
