"""Two processes on localhost (gloo collectives) compute what one process computes."""
import json
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import commands
from conftest import ROOT, subprocess_env
from zoo.train import train

# sgd: Adam divides by sqrt(v), which magnifies reduction-order rounding in the first steps
# K=3 steps per call and logs every 4 steps: calls of 3, 1 and 2 steps, metric sums carried across calls.
ARGS = ["debug=smoke", "model=cnn", "model.dropout=0.0", "optimizer=sgd", "parallel=sharded", "trainer.batch_size=32",
        "trainer.eval_batch_size=50", "trainer.checkpoint_every=3", "trainer.log_every=4", "trainer.steps_per_call=3"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def start_two(script: str, args: list, data_dir, cpu_devices=(2, 2), stderr=subprocess.STDOUT) -> list:
    """`script` started as processes 0 and 1 of one jax.distributed group; their stderr into their stdout unless
    `stderr` says otherwise."""
    port = free_port()
    return [commands.Popen(
        [sys.executable, script, *args, f"parallel.cpu_devices={cpu_devices[i]}", "distributed=explicit",
         f"distributed.coordinator_address=localhost:{port}", "distributed.num_processes=2",
         f"distributed.process_id={i}"],
        cwd=ROOT, env=subprocess_env(data_dir), stdout=subprocess.PIPE, stderr=stderr, text=True)
        for i in range(2)]


def two_processes(script: str, args: list, data_dir, cpu_devices=(2, 2), returncode: int = 0) -> list:
    """`script` run as processes 0 and 1 of one jax.distributed group; their outputs, once both exited
    `returncode`."""
    procs = start_two(script, args, data_dir, cpu_devices)
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [returncode] * 2, outputs[0][-3000:] + outputs[1][-3000:]
    return outputs


def test_two_processes_equal_one(data_dir, make_cfg, tmp_path):
    one = train(make_cfg(*ARGS, "parallel.cpu_devices=4", out="one"))
    run_dir = tmp_path / "two"
    trained = two_processes("train.py", [*ARGS, f"hydra.run.dir={run_dir}"], data_dir)
    # process 0 alone says what the run did; the others' consoles keep their warnings and errors only
    assert [sum(line.split(" - ", 1)[-1].startswith(("test:", "run directory:")) for line in out.splitlines())
            for out in trained] == [2, 0], trained[1][-3000:]
    two = json.loads((run_dir / "results.json").read_text())
    assert two["devices"] == 4 and two["test"]["count"] == one["test"]["count"] == 359
    np.testing.assert_allclose(two["test"]["loss"], one["test"]["loss"], rtol=1e-5)
    losses = lambda d: [r["loss"] for r in map(json.loads, open(d / "metrics.jsonl")) if r["split"] == "train"]  # noqa: E731
    np.testing.assert_allclose(losses(run_dir), losses(tmp_path / "one"), rtol=1e-5)
    # only process 0 wrote: one record per event, not two
    assert len(losses(run_dir)) == 2  # steps 4 and 6
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["3", "6"]
    assert (run_dir / "train.log").read_text().count("run directory:") == 1  # process 0's lines alone
    # export.py of that run from two processes: both compute, process 0 alone writes the export and says so
    outputs = two_processes("export.py", [f"run_dir={run_dir}", "parallel=sharded", f"hydra.run.dir={tmp_path}/x"],
                            data_dir)
    assert [sum("exported step 6 to" in line for line in out.splitlines()) for out in outputs] == [1, 0]
    assert sorted(p.name for p in (run_dir / "export").iterdir()) == ["model.jax", "signature.json"]
    assert not [p.name for p in run_dir.iterdir() if p.name.startswith(".export")]  # no staging left behind


def test_a_two_process_eval_prints_its_result_alone_on_stdout(data_dir, make_cfg, tmp_path):
    """Gloo writes a line on stdout for every group of devices it connects: they go to stderr, with the logs."""
    train(make_cfg("debug=smoke"))
    procs = start_two("eval.py", [f"run_dir={tmp_path / 'run'}", "parallel=sharded", f"hydra.run.dir={tmp_path}/x"],
                      data_dir, stderr=subprocess.PIPE)
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    (out0, err0), (out1, err1) = outputs
    assert re.fullmatch(r"test @ step 6: loss=\S+, accuracy=\S+, count=359\n", out0), out0
    assert out1 == ""
    assert "[Gloo] Rank 0 is connected to" in err0 and "[Gloo] Rank 1 is connected to" in err1  # moved, not hidden


def run_alone(data_dir, tmp_path, port: int, process_id: int) -> subprocess.CompletedProcess:
    """train.py as process `process_id` of two, with no other process started."""
    return commands.run([sys.executable, "train.py", "debug=smoke", "parallel=sharded", "distributed=explicit",
                           f"distributed.coordinator_address=localhost:{port}", "distributed.num_processes=2",
                           f"distributed.process_id={process_id}", "distributed.timeout_s=3",
                           f"hydra.run.dir={tmp_path / 'run'}"],
                        cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)


def test_a_coordinator_port_in_use_is_refused_in_one_sentence(data_dir, tmp_path):
    """Process 0 serves the coordinator on the address's port: with the port taken, gRPC failed to listen and the
    process segfaulted about one time in two (exit 139), else said to check all three distributed settings."""
    with socket.create_server(("localhost", 0)) as taken:
        port = taken.getsockname()[1]
        done = run_alone(data_dir, tmp_path, port, process_id=0)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: distributed.coordinator_address=localhost:{port}: process 0 cannot listen on port {port} (Address "
        f"already in use); choose a free port, the same for every process.")
    assert not (tmp_path / "run" / "checkpoints").exists()


@pytest.mark.parametrize("process_id", [0, 1])
def test_a_process_whose_peers_never_join_ends_in_one_sentence(data_dir, tmp_path, process_id):
    """Process 0 alone waits for process 1, process 1 alone for the coordinator process 0 serves: JAX's client gave
    up once distributed.timeout_s was out and aborted the process from C++ (exit 134, a native stack)."""
    done = run_alone(data_dir, tmp_path, free_port(), process_id)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Check failure" not in done.stderr and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"error: not all distributed.num_processes=2 processes joined within distributed.timeout_s=3 (1 started in "
        f"{tmp_path / 'run'}: distributed.process_id {process_id}); start every "
        "one with the same distributed.coordinator_address (process 0's host and a port free there) and "
        "num_processes, each with its own distributed.process_id from 0 to 1, or raise distributed.timeout_s.")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_cluster_task_whose_peers_never_join_ends_in_one_sentence(data_dir, tmp_path):
    """distributed=auto as task 1 of 2 of a SLURM job whose task 0 never starts."""
    slurm = dict(SLURM_JOB_ID="12345", SLURM_STEP_NODELIST="localhost", SLURM_NTASKS="2", SLURM_PROCID="1",
                 SLURM_LOCALID="0", SLURM_STEP_NUM_NODES="1", SLURM_STEP_TASKS_PER_NODE="2")
    done = commands.run([sys.executable, "train.py", "debug=smoke", "parallel=sharded", "distributed=auto",
                           "distributed.timeout_s=3", f"hydra.run.dir={tmp_path / 'run'}"],
                        cwd=ROOT, env={**subprocess_env(data_dir), **slurm}, capture_output=True, text=True,
                        timeout=120)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip().splitlines()[-1] == (
        "error: not all the processes of this cluster job joined within distributed.timeout_s=3 (distributed=auto); "
        "check that every task of the job runs this command, or raise distributed.timeout_s.")


def test_a_timeout_beyond_what_jax_takes_waits_as_long_as_it_can(data_dir, tmp_path):
    """JAX takes the timeout as a C int: distributed.timeout_s=30000000000 (950 years) was refused in nanobind's list
    of get_distributed_runtime_client's signatures, with advice to check the three other distributed settings."""
    done = commands.run([sys.executable, "train.py", "debug=smoke", "parallel=sharded", "distributed=explicit",
                           f"distributed.coordinator_address=localhost:{free_port()}", "distributed.num_processes=1",
                           "distributed.process_id=0", "distributed.timeout_s=30000000000",
                           f"hydra.run.dir={tmp_path / 'run'}"],
                        cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "results.json").read_text())["test"]["count"] == 359


def test_a_multiruns_jobs_after_one_whose_peers_never_joined_fail_with_its_sentence(data_dir, tmp_path):
    """The jobs of a multirun share one process, and JAX's client: the next job found it set (never connected),
    skipped joining and failed in a RuntimeError from the CPU backend, which could not reach the coordinator."""
    sweep = tmp_path / "sweep"
    commands.run([sys.executable, "train.py", "-m", "debug=smoke", "parallel=sharded", "distributed=explicit",
                    f"distributed.coordinator_address=localhost:{free_port()}", "distributed.num_processes=2",
                    "distributed.process_id=1", "distributed.timeout_s=3", "seed=0,1", f"hydra.sweep.dir={sweep}"],
                 cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
    failures = [json.loads((sweep / job / "failure.json").read_text()) for job in ("0", "1")]
    assert [(f["error"], f["user_error"]) for f in failures] == [("ProcessesNotJoined", True)] * 2, failures[1]
    assert failures[1]["reason"] == failures[0]["reason"]
    assert failures[0]["reason"].startswith("not all distributed.num_processes=2 processes joined within")


def test_processes_with_unequal_device_counts_are_refused_in_one_sentence(data_dir, tmp_path):
    outputs = two_processes("train.py", [*ARGS, f"hydra.run.dir={tmp_path / 'run'}"], data_dir, cpu_devices=(2, 1),
                            returncode=2)
    for out in outputs:
        assert "(process 0 has 2, process 1 has 1); give every process the same parallel.cpu_devices" in out
        assert "Traceback" not in out


def test_a_signal_to_one_process_stops_every_process_at_the_same_saved_step(data_dir, tmp_path):
    from test_cli import wait_for_lines
    from zoo.checkpoint import Checkpoints

    run_dir = tmp_path / "run"
    args = ["debug=smoke", "parallel=sharded", "trainer.epochs=1000", "trainer.max_steps=100000", "trainer.log_every=1",
            "trainer.checkpoint_every=100000", "trainer.steps_per_call=1", f"hydra.run.dir={run_dir}"]
    procs = start_two("train.py", args, data_dir)
    wait_for_lines(run_dir / "metrics.jsonl", 20, procs[0])
    procs[1].send_signal(signal.SIGTERM)  # the other process gets no signal (its pod or task was not told)
    try:
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:  # processes that deadlocked take no SIGTERM any more
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [128 + signal.SIGTERM] * 2, outputs[0][-2000:] + outputs[1][-2000:]
    steps = Checkpoints(str(run_dir / "checkpoints"), read_only=True).steps()
    assert len(steps) == 1 and all(f"stopped by SIGTERM at step {steps[0]};" in out for out in outputs)


SIGTERM_AFTER_JOINING = """
import os, signal, sys, time
from omegaconf import OmegaConf
from zoo.parallel.distributed import init_distributed
signal.signal(signal.SIGTERM, lambda *args: os._exit(3))  # the zoo's handlers, as train.py and eval.py install them
init_distributed(OmegaConf.create(dict(mode="explicit", coordinator_address="localhost:" + sys.argv[1],
                                       num_processes=1, process_id=0, timeout_s=30, lost_after_s=30)))
os.kill(os.getpid(), signal.SIGTERM)
time.sleep(2)
"""


def test_a_sigterm_after_joining_reaches_the_zoos_handler(data_dir):
    """jax.distributed.initialize started JAX's preemption service, whose C++ handler took SIGTERM over: a SIGTERM
    between joining and the train loop (loading data, compiling) was logged as 'SIGTERM caught' and the run trained
    to its end, exit 0 (train.py and eval.py alike)."""
    done = subprocess.run([sys.executable, "-c", SIGTERM_AFTER_JOINING, str(free_port())], cwd=ROOT,
                          env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and "SIGTERM caught" not in done.stderr, done.stderr[-2000:]


def test_a_dataset_process_0_cannot_load_ends_every_process_in_one_sentence(data_dir, tmp_path):
    """Process 1 waits for process 0 to prepare the data; it waited 30 s more and ended in a gloo traceback."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    args = ["debug=smoke", "model=linear", "dataset=diabetes", "parallel=sharded", f"paths.data_dir={blocker}",
            f"hydra.run.dir={tmp_path / 'run'}"]
    outputs = two_processes("train.py", args, data_dir, cpu_devices=(1, 1), returncode=2)
    assert "a_file is a file, not a directory" in outputs[0]
    assert "Traceback" not in outputs[1]
    assert re.search(r"error: process 0 could not load dataset=diabetes \(its output says why\)", outputs[1])


def test_a_dataset_process_1_cannot_load_ends_process_0_in_one_sentence(data_dir, tmp_path):
    """Process 1 reads the data after process 0 (another host may have another data dir); process 0 went on."""
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    args = ["train.py", "debug=smoke", "model=linear", "dataset=diabetes", "parallel=sharded", "parallel.cpu_devices=1",
            "distributed=explicit", f"distributed.coordinator_address=localhost:{free_port()}",
            "distributed.num_processes=2", f"hydra.run.dir={tmp_path / 'run'}"]
    procs = [commands.Popen([sys.executable, *args, f"distributed.process_id={i}", f"paths.data_dir={where}"],
                            cwd=ROOT, env=subprocess_env(data_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
             for i, where in enumerate([data_dir, blocker])]
    try:  # process 0 waited at its next collective, and process 1 at its exit, for distributed.timeout_s (300 s)
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [2, 2], outputs
    assert "a_file is a file, not a directory" in outputs[1]
    assert "error: process 1 could not load dataset=diabetes (its output says why)" in outputs[0]
    assert "Traceback" not in outputs[0]


def two_with(data_dir, args: list, each: list, script: str = "train.py") -> list:
    """`script` as processes 0 and 1, with `args` and each its own `each[i]`; their outputs, once both exited 2."""
    args = [script, *args, "parallel=sharded", "parallel.cpu_devices=1", "distributed=explicit",
            f"distributed.coordinator_address=localhost:{free_port()}", "distributed.num_processes=2"]
    procs = [commands.Popen([sys.executable, *args, *each[i], f"distributed.process_id={i}"], cwd=ROOT,
                            env=subprocess_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for i in range(2)]
    try:
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [2, 2], outputs
    assert not any("Traceback" in out for out in outputs), outputs
    return outputs


def test_processes_given_different_run_dirs_are_refused_in_one_sentence(data_dir, tmp_path):
    """Each trained in its own dir, only process 0's had checkpoints: rerun, process 0 resumed and process 1 started
    at step 0, and they ended in a gloo traceback and a sentence calling the checkpoint unreadable."""
    outputs = two_with(data_dir, ["debug=smoke"], [[f"hydra.run.dir={tmp_path}/r{i}"] for i in range(2)])
    for out in outputs:
        assert (f"error: the processes of a multi-process run were given different hydra.run.dir (process 0: "
                f"{tmp_path}/r0, process 1: {tmp_path}/r1); give every process the same one") in out, out[-2000:]
    assert not (tmp_path / "r0" / "checkpoints").exists() and not (tmp_path / "r1" / "checkpoints").exists()


def test_processes_given_different_settings_are_refused_in_one_sentence(data_dir, tmp_path):
    """Processes with batch sizes 16 and 32 trained together without a word, each feeding its share of another
    run's batches, and results.json named process 0's batch size."""
    outputs = two_with(data_dir, ["debug=smoke", f"hydra.run.dir={tmp_path}/run"],
                       [["trainer.batch_size=16"], ["trainer.batch_size=32"]])
    for out in outputs:
        assert ("error: the processes of a multi-process run were given different settings: trainer.batch_size "
                "(process 0: 16, process 1: 32); give every process the same command line but "
                "distributed.process_id.") in out, out[-2000:]
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_a_two_process_eval_given_different_run_dirs_is_refused_in_one_sentence(data_dir, make_cfg, tmp_path):
    """Each process restored its own run's checkpoint: they waited out distributed.timeout_s (300 s) and aborted
    from C++ (exit 134)."""
    for name in ("a", "b"):
        train(make_cfg("debug=smoke", out=name))
    outputs = two_with(data_dir, [], [[f"run_dir={tmp_path / name}", f"hydra.run.dir={tmp_path}/x{i}"]
                                      for i, name in enumerate("ab")], script="eval.py")
    for out in outputs:
        assert (f"error: the processes of a multi-process run were given different settings: run_dir (process 0: "
                f"{tmp_path / 'a'}, process 1: {tmp_path / 'b'}); give every process the same command line") in out
        assert "Traceback" not in out


def test_a_process_lost_mid_run_ends_the_other_in_one_sentence_with_its_checkpoints_kept(data_dir, tmp_path):
    """kill -9 (or the OOM killer) on process 1: process 0's next collective failed in a gloo traceback and, its
    exit waiting for the lost process in JAX's shutdown, it was aborted from C++ 100 s later (exit 134). (Process 0
    lost, process 1 races JAX's client, which aborts it as the coordinator's connection closes: docs/errors.md's
    Known gaps.)"""
    from test_cli import wait_for_lines
    from zoo.checkpoint import Checkpoints

    run_dir = tmp_path / "run"
    args = ["debug=smoke", "parallel=sharded", "trainer.epochs=1000", "trainer.max_steps=100000", "trainer.log_every=1",
            "trainer.checkpoint_every=5", "trainer.steps_per_call=1", f"hydra.run.dir={run_dir}"]
    procs = start_two("train.py", args, data_dir, cpu_devices=(1, 1))  # with more, gloo can wait: heartbeats, below
    try:
        wait_for_lines(run_dir / "metrics.jsonl", 12, procs[0])
        procs[1].kill()
        out = procs[0].communicate(timeout=90)[0]
    finally:
        for p in procs:
            p.kill()
    assert procs[0].returncode == 2, out[-3000:]
    assert "Traceback" not in out and "Check failure" not in out, out[-3000:]
    # gloo's failed collective names the loss first, as a rule; on a loaded machine gloo has waited past the
    # heartbeats' distributed.lost_after_s (30 s), which then name it (seen once in a fresh-clone CI run)
    assert re.fullmatch(
        r"error: another process of this multi-process run stopped mid-run \(killed, or out of memory; "
        r"(gloo: [^()]+|no word from process 1 for 30 s)\), "
        r"and this one stops with it; its checkpoints in " + re.escape(str(run_dir / "checkpoints")) + r" are kept: "
        r"start every process again with the same command to resume\.", out.strip().splitlines()[-1]), out[-3000:]
    assert Checkpoints(str(run_dir / "checkpoints"), read_only=True).steps()


def test_a_process_that_stops_answering_ends_the_others_in_one_sentence_after_distributed_lost_after_s(data_dir,
                                                                                                        tmp_path):
    """With two CPU devices a process, gloo's collective waited for a lost process without end (a process stopped
    with SIGSTOP keeps its connections open: the same wait, every time). Its heartbeat stops, and the other ends."""
    from test_cli import wait_for_lines
    from zoo.checkpoint import Checkpoints

    run_dir = tmp_path / "run"
    args = ["debug=smoke", "parallel=sharded", "trainer.epochs=1000", "trainer.max_steps=100000", "trainer.log_every=1",
            "trainer.checkpoint_every=5", "trainer.steps_per_call=1", "distributed.lost_after_s=5",
            f"hydra.run.dir={run_dir}"]
    procs = start_two("train.py", args, data_dir, cpu_devices=(2, 2))
    try:
        wait_for_lines(run_dir / "metrics.jsonl", 12, procs[0])
        procs[1].send_signal(signal.SIGSTOP)
    except BaseException:
        _end(procs)
        raise
    waited = _ended_by_the_silence_of_process_1(procs, run_dir)
    assert 3 < waited < 30  # its last heartbeat was seen up to a second before it stopped
    assert Checkpoints(str(run_dir / "checkpoints"), read_only=True).steps()


def _end(procs: list) -> None:
    for p in procs:
        p.kill()


def _ended_by_the_silence_of_process_1(procs: list, run_dir) -> float:
    """Seconds until process 0 ended, from now, in the sentence of a process lost to its heartbeat; every process
    is killed after."""
    start = time.monotonic()
    try:
        out = procs[0].communicate(timeout=60)[0]
    finally:
        _end(procs)
    assert procs[0].returncode == 2, out[-3000:]
    assert "Traceback" not in out, out[-3000:]
    assert re.fullmatch(
        r"error: another process of this multi-process run stopped mid-run \(killed, or out of memory; no word from "
        r"process 1 for \d+ s\), and this one stops with it; its checkpoints in "
        + re.escape(str(run_dir / "checkpoints")) + r" are kept: start every process again with the same command to "
        r"resume\.", out.strip().splitlines()[-1]), out[-3000:]
    return time.monotonic() - start


# train.py whose process dies (SIGKILL) once its checkpoint of step DIE_AFTER has been handed to orbax: its
# write goes on in the background, where the other process's write waits for it in orbax's barrier
DIES_AFTER_A_SAVE = """
import os, runpy, signal, sys
import orbax.checkpoint as ocp
save = ocp.CheckpointManager.save
def save_then_die(self, step, *args, **kwargs):
    saved = save(self, step, *args, **kwargs)
    if step == int(os.environ["DIE_AFTER"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return saved
ocp.CheckpointManager.save = save_then_die
sys.argv = ["train.py", *sys.argv[1:]]
runpy.run_path("train.py", run_name="__main__")
"""


def test_a_process_lost_while_the_other_waits_for_its_checkpoint_write_ends_it_after_lost_after_s(data_dir, tmp_path):
    """Process 1 dies while its final checkpoint is written: process 0, meeting no collective any more, waited in
    orbax's barrier until JAX's coordination service noticed the missing heartbeats (100 s) and aborted it from C++
    (exit 134)."""
    run_dir, port = tmp_path / "run", free_port()
    args = ["debug=smoke", "parallel=sharded", "parallel.cpu_devices=1", "trainer.max_steps=30",
            "trainer.checkpoint_every=5", "distributed.lost_after_s=5", "distributed=explicit",
            f"distributed.coordinator_address=localhost:{port}", "distributed.num_processes=2",
            f"hydra.run.dir={run_dir}"]
    env = subprocess_env(data_dir)
    procs = [commands.Popen([sys.executable, *(["train.py"] if i == 0 else ["-c", DIES_AFTER_A_SAVE]), *args,
                             f"distributed.process_id={i}"], cwd=ROOT, env=dict(env, DIE_AFTER="30"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    try:
        assert procs[1].wait(timeout=120) == -signal.SIGKILL
    except BaseException:
        _end(procs)
        raise
    assert _ended_by_the_silence_of_process_1(procs, run_dir) < 30


def start_told(counts: list, run_dir, data_dir, *extra) -> list:
    """Processes 0, 1, ... of one run, on one free port, process i told distributed.num_processes=counts[i]."""
    port = free_port()
    return [commands.Popen([sys.executable, "train.py", "debug=smoke", "parallel=sharded", "parallel.cpu_devices=1",
                              "distributed=explicit", f"distributed.coordinator_address=localhost:{port}",
                              f"distributed.num_processes={n}", f"distributed.process_id={i}", *extra,
                              f"hydra.run.dir={run_dir}"],
                           cwd=ROOT, env=subprocess_env(data_dir), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
            for i, n in enumerate(counts)]


def outputs_of(procs: list, timeout: float) -> list:
    """Their outputs once they exit; any still running after `timeout` is killed."""
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()


def test_processes_given_different_num_processes_are_refused_in_one_sentence(data_dir, tmp_path):
    """The coordinator waits for process 0's distributed.num_processes alone: process 1 given 3 joined a group of 2
    and trained without a word."""
    procs = start_told([2, 3], tmp_path / "run", data_dir)
    outputs = outputs_of(procs, timeout=120)
    assert [p.returncode for p in procs] == [2, 2], outputs
    for out in outputs:
        assert "Traceback" not in out
        assert out.strip().splitlines()[-1] == (
            "error: the processes of a multi-process run were given different distributed.num_processes (process 0: "
            "2, process 1: 3); give every process the same "
            "distributed.num_processes, the number of processes started."), out[-2000:]
    assert not (tmp_path / "run" / "checkpoints").exists() and not (tmp_path / "run" / "results.json").exists()


def test_a_process_id_given_twice_is_refused_in_one_sentence_and_the_run_goes_on(data_dir, tmp_path):
    """A third process started as process 1 of a run of two that trains: JAX's coordinator took it for process 1
    restarted and aborted every process from C++ at once (exit 134); a second process 0 was told its port was in
    use."""
    from test_cli import wait_for_lines

    run_dir = tmp_path / "run"
    args = ["debug=smoke", "parallel=sharded", "trainer.epochs=1000", "trainer.max_steps=100000", "trainer.log_every=1",
            "trainer.checkpoint_every=100000", "trainer.steps_per_call=1", f"hydra.run.dir={run_dir}"]
    procs = start_two("train.py", args, data_dir)
    try:
        wait_for_lines(run_dir / "metrics.jsonl", 5, procs[0])
        port = procs[0].args[-3].rpartition(":")[2]
        for process_id in (1, 0):
            done = commands.run([sys.executable, "train.py", *args, "parallel.cpu_devices=2", "distributed=explicit",
                                   f"distributed.coordinator_address=localhost:{port}", "distributed.num_processes=2",
                                   f"distributed.process_id={process_id}"],
                                cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=120)
            assert done.returncode == 2, done.stderr[-3000:]
            assert done.stderr.strip().splitlines()[-1] == (
                f"error: distributed.process_id={process_id} is taken by another process running now in "
                f"{run_dir}; give each process of the run its own distributed.process_id, from 0 to 1."
            ), done.stderr[-3000:]
            assert all(p.poll() is None for p in procs)  # the run trains on
        procs[1].send_signal(signal.SIGTERM)
        outputs = [p.communicate(timeout=120)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [128 + signal.SIGTERM] * 2, outputs[0][-2000:] + outputs[1][-2000:]


@pytest.mark.parametrize("counts,refused_while_joining", [({0: 2, 1: 3}, False), ({0: 3, 1: 2}, True)])
def test_only_process_0s_larger_count_is_refused_while_joining(monkeypatch, counts, refused_while_joining):
    """Process 0 given 2 and process 1 given 3: every process joins (the coordinator waits for process 0's count),
    and all are refused together after joining (check_num_processes). Process 1 refused while joining had left
    process 0 waiting in its first collective until the coordinator aborted it (exit -6, after ~100 s). Process 0
    given the larger count: the join never completes, and the difference is refused while waiting."""
    from omegaconf import OmegaConf

    from zoo.errors import ProcessesNotJoined
    from zoo.parallel import distributed

    monkeypatch.setattr(distributed, "_started_now", lambda ids: counts)
    monkeypatch.setattr(distributed, "_LINGER_S", 0)
    monkeypatch.setattr(distributed, "_not_joined", None)  # a refusal is kept for this process's later JAX calls
    monkeypatch.setattr(distributed.jax.distributed, "initialize", lambda **kwargs: time.sleep(2))  # joins in 2 s
    cfg = OmegaConf.create({"mode": "explicit", "num_processes": counts[1], "process_id": 1, "timeout_s": 30})
    if refused_while_joining:
        with pytest.raises(ProcessesNotJoined, match=r"\(process 0: 3, process 1: 2\)"):
            distributed._join_within(cfg, {})
    else:
        distributed._join_within(cfg, {})


def test_processes_given_different_num_processes_while_joining_are_refused_at_once(data_dir, tmp_path):
    """Process 0 given the larger distributed.num_processes: the coordinator waits for a process that never comes,
    and both waited out distributed.timeout_s (300 s) for a sentence each naming its own count."""
    started = time.monotonic()
    procs = start_told([3, 2], tmp_path / "run", data_dir, "distributed.timeout_s=200")
    outputs = outputs_of(procs, timeout=150)
    assert [p.returncode for p in procs] == [2, 2], outputs
    assert time.monotonic() - started < 150
    for out in outputs:
        assert out.strip().splitlines()[-1] == (
            "error: the processes of a multi-process run were given different distributed.num_processes (process 0: "
            "3, process 1: 2); give every process the same distributed.num_processes, the number of processes "
            "started."), out[-2000:]
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_fewer_processes_than_num_processes_say_how_many_started(data_dir, tmp_path):
    """Two started of distributed.num_processes=3: the sentence named the count given, not the count started."""
    procs = start_told([3, 3], tmp_path / "run", data_dir, "distributed.timeout_s=15")
    outputs = outputs_of(procs, timeout=150)
    assert [p.returncode for p in procs] == [2, 2], outputs
    for out in outputs:
        assert out.strip().splitlines()[-1] == (
            f"error: not all distributed.num_processes=3 processes joined within distributed.timeout_s=15 (2 started "
            f"in {tmp_path / 'run'}: distributed.process_id 0, 1); start every one with the same "
            "distributed.coordinator_address (process 0's host and a port free there) and num_processes, each with "
            "its own distributed.process_id from 0 to 2, or raise distributed.timeout_s."), out[-2000:]
