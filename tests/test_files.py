"""zoo.files.replacing: a file written under another name and renamed over its path; what a killed writer left
beside it is removed by the next write, what a running one is writing is not."""
import json
import os
import signal
import subprocess
import sys
import textwrap

from zoo.files import load_json, write_json

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# A writer that stops inside replacing(), its staging file half-written, until it is killed
WRITER = textwrap.dedent("""
    import sys, time
    from zoo.files import replacing
    with replacing(sys.argv[1]) as staging:
        with open(staging, "w") as f:
            f.write('{"half": ')
        print("writing", flush=True)
        time.sleep(60)
""")


def _start_writer(path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.stdout.readline() == "writing\n"
    return proc


def _staging(path) -> set:
    return {p.name for p in path.parent.glob(path.name + ".*.tmp")}


def test_the_staging_file_of_a_killed_writer_is_removed_by_the_next_write_and_a_running_writers_is_kept(tmp_path):
    path = tmp_path / "results.json"
    write_json(str(path), {"step": 1})
    killed, running = _start_writer(path), _start_writer(path)
    try:
        left = _staging(path)
        assert len(left) == 2
        killed.send_signal(signal.SIGKILL)
        killed.wait()
        write_json(str(path), {"step": 2})
        assert load_json(str(path)) == {"step": 2}
        kept = _staging(path)
        assert len(kept) == 1 and kept < left and f"-{running.pid}-" in kept.pop()
    finally:
        running.kill()
        running.wait()


def test_only_the_staging_files_of_the_path_written_are_removed(tmp_path):
    """Another file's leftovers in the folder, and a file merely named like a staging file of another host, stay."""
    path = tmp_path / "summary.csv"
    other = tmp_path / "results.json"
    killed = _start_writer(other)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    foreign = tmp_path / f"summary.csv.another-host-{killed.pid}-1.tmp"
    foreign.write_text("{}")
    write_json(str(path), {"rows": []})
    assert json.loads(path.read_text()) == {"rows": []}
    assert len(_staging(other)) == 1 and foreign.exists()
