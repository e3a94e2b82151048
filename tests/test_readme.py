"""Every command the README shows (`python train.py ...`, `python eval.py ...`) runs as written.

Each runs as a fresh subprocess with tiny settings appended (`debug=smoke`, its own run dir); `run_dir=...`
placeholders point at a run trained (and exported) beforehand, and catalog datasets (which download) run on
`tfds.testing.mock_data`. Lines using shell variables (the multi-process loop) are covered by test_distributed.py.
Commands quoted inline in the prose (`python train.py experiment=...`) run too; the inline `python -m zoo.bench...`
lines are the benchmarks, each run in its quick mode by its own tests/test_bench*.py (test_privacy.py for
zoo.bench.privacy), and `python serve.py` is the README's own serving block, which test_export.py runs.
docs/sweeps.md's commands run the same way, a placeholder `multirun/<date>/<time>` naming a sweep run beforehand.
"""
import os
import re
import shlex
import sys

import pytest

import commands
from conftest import ROOT, subprocess_env

CATALOG = ("dataset=mnist", "dataset=fashion_mnist", "dataset=cifar10")
MOCK_CATALOG = ("import runpy, sys, tensorflow_datasets as tfds\n"
                "sys.argv = sys.argv[1:]\n"
                "with tfds.testing.mock_data(num_examples=64):\n"
                "    runpy.run_path(sys.argv[0], run_name='__main__')\n")


def readme_commands(text: str) -> list:
    """Command lines of the README's code blocks and `python ...` quotes that start a zoo script or module."""
    commands = []

    def add(part: str, inline: bool = False):
        words = shlex.split(part)
        if len(words) < 2 or words[0] != "python" or "$" in part or words[1:3] == ["-m", "pytest"]:
            return
        script = words[1].endswith(".py") and (not inline or (ROOT / words[1]).is_file())
        module = words[1] == "-m" and words[2].startswith("zoo") and not inline
        if (script or module) and words[1:] not in commands:
            commands.append(words[1:])

    for language, block in re.findall(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        if language not in ("", "bash", "sh"):
            continue
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            for part in line.split("&&"):
                add(part)
    prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    for span in re.findall(r"`(python\s[^`]+)`", prose):  # commands quoted in the text, a line break being a space
        add(" ".join(span.split()), inline=True)
    return commands


COMMANDS = readme_commands((ROOT / "README.md").read_text())


def test_readme_commands_are_found():
    scripts = {c[0] if c[0] != "-m" else c[1] for c in COMMANDS}
    assert {"train.py", "eval.py"} <= scripts and len(COMMANDS) >= 10, COMMANDS
    assert readme_commands("```bash\npip install x && python train.py a=1  # note\n```\n") == [["train.py", "a=1"]]
    assert readme_commands("```python\nprint('x')\n```\n\n```bash\npython eval.py b=2\n```\n") == [["eval.py", "b=2"]]
    inline = "Run `python train.py c=3` or `python\ntrain.py d=4`; not `python serve.py X`, `python -m zoo.bench`.\n"
    assert readme_commands(inline) == [["train.py", "c=3"], ["train.py", "d=4"]]
    assert ["train.py", "experiment=digits_cnn_cosine"] in COMMANDS  # a command of the README's prose


@pytest.fixture(scope="module")
def trained_run(data_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("readme") / "trained"
    done = commands.run([sys.executable, "train.py", "debug=smoke", f"hydra.run.dir={run_dir}"], cwd=ROOT,
                        env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    exported = commands.run([sys.executable, "export.py", f"run_dir={run_dir}", f"hydra.run.dir={run_dir}-export"],
                            cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300)
    assert exported.returncode == 0, exported.stderr[-2000:]  # so predict.py's lines have a model in any order
    return run_dir


def with_tiny_settings(words: list, tmp_path, run_dir, sweep_dir=None) -> list:
    """The command with placeholders filled and tiny settings placed right after the script and its flags (a
    multirun's own directory and trial count last, so that they win over the command's)."""
    def filled(word: str) -> str:
        if word.startswith("run_dir="):
            return f"run_dir={run_dir}"
        if sweep_dir and re.fullmatch(r"multirun/\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", word):  # a sweep's directory
            return str(sweep_dir)
        return str(ROOT) + word[len("/path/to/zoo"):] if word.startswith("/path/to/zoo/") else word

    script, *rest = [filled(w) for w in words]
    if script == "-m":  # python -m zoo.<module>: its own quick mode
        quick = ["--quick", "--out", str(tmp_path / "bench.json")] if rest[0].startswith("zoo.bench") else []
        return [script, *rest, *quick]
    if script not in ("train.py", "eval.py", "export.py", "predict.py"):  # a script of its own: zoo/sweeps/report.py
        return [script, *rest]
    extra, last = [f"hydra.run.dir={tmp_path / 'run'}"], []
    flags = [w for w in rest if w in ("-m", "--multirun")]  # argparse wants the overrides in one run after them
    rest = [w for w in rest if w not in flags]
    if script == "train.py":
        extra = ["debug=smoke"]
        if any(w.startswith("trainer.early_stopping.") for w in rest):  # room for more periodic evals than patience
            extra += ["trainer.epochs=3", "trainer.max_steps=null"]
        if any(w.startswith("experiment=") for w in rest):  # room for the warmup of its schedule (50 steps)
            extra.append("trainer.max_steps=60")
        if flags:
            last.append(f"hydra.sweep.dir={tmp_path / 'sweep'}")
            if any(w.startswith("hparams_search=") for w in rest):
                last.append("hydra.sweeper.n_trials=2")
        else:
            extra.append(f"hydra.run.dir={tmp_path / 'run'}")
    return [script, *flags, *extra, *rest, *last]


def run_as_written(words, data_dir, tmp_path, trained_run, sweep_dir=None):
    args = with_tiny_settings(words, tmp_path, trained_run, sweep_dir)
    prefix = [sys.executable, "-c", MOCK_CATALOG] if any(a in CATALOG for a in args) else [sys.executable]
    cwd = tmp_path if os.path.isabs(args[0]) else ROOT  # a script given by its path: run from another directory
    done = commands.run(prefix + args, cwd=cwd, env=subprocess_env(data_dir), capture_output=True, text=True,
                        timeout=600)
    assert done.returncode == 0, f"python {' '.join(args)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    if args[0] == "train.py" and not {"--cfg", "--help"} & set(args):  # it trained: what a user would look at
        multirun = {"-m", "--multirun"} & set(args)
        assert (tmp_path / "sweep" / "summary.csv" if multirun else tmp_path / "run" / "results.json").is_file()
    if args[0] == "eval.py":
        assert re.search(r"^test @ step \d+: loss=", done.stdout, re.M), done.stdout
    return done


@pytest.mark.parametrize("words", COMMANDS, ids=[" ".join(c)[:80] for c in COMMANDS])
def test_readme_command_runs(words, data_dir, tmp_path, trained_run):
    run_as_written(words, data_dir, tmp_path, trained_run)


# docs/sweeps.md's commands that the README does not show. Its submitit sweeps are left to tests/test_submitit.py,
# which runs the submitit_local line (submitit_slurm needs SLURM), and `python train.py -m ... hydra/launcher=...`
# is a pattern, not a command.
SWEEPS_COMMANDS = [c for c in readme_commands((ROOT / "docs" / "sweeps.md").read_text())
                   if c not in COMMANDS and "..." not in c and
                   not ("-m" in c and any(w.startswith("hydra/launcher=submitit") for w in c))]


@pytest.fixture(scope="module")
def sweep_dir(data_dir, tmp_path_factory):
    sweep = tmp_path_factory.mktemp("sweeps_md") / "sweep"
    done = commands.run([sys.executable, "train.py", "-m", "debug=smoke", "seed=0,1", f"hydra.sweep.dir={sweep}"],
                        cwd=ROOT, env=subprocess_env(data_dir), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return sweep


def test_sweeps_md_commands_are_found():
    assert len(SWEEPS_COMMANDS) >= 10, SWEEPS_COMMANDS
    assert ["-m", "zoo.sweeps.report", "multirun/2025-01-01/12-00-00"] in SWEEPS_COMMANDS


@pytest.mark.parametrize("words", SWEEPS_COMMANDS, ids=[" ".join(c)[:80] for c in SWEEPS_COMMANDS])
def test_sweeps_md_command_runs(words, data_dir, tmp_path, trained_run, sweep_dir):
    done = run_as_written(words, data_dir, tmp_path, trained_run, sweep_dir)
    if "report" in " ".join(words):
        assert "summary written to" in done.stdout, done.stdout


def test_the_tests_the_docs_name_exist():
    """docs/errors.md names each row's test, README.md and docs/*.md name the tests behind their claims: a test
    renamed or merged left its old name there (a name ending in `_...` or `_…` names the tests it begins)."""
    defined = set(re.findall(r"^def (test_\w+)", "".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py")),
                             re.M))
    assert "test_the_tests_the_docs_name_exist" in defined
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name, prefix in re.findall(r"\b(test_\w+?)(_\.\.\.|_…)?(?![\w.])", doc.read_text()):
            if name.count("_") < 2:  # a setting or a key, such as dataset.test_fraction or test_units
                continue
            assert (any(d.startswith(name) for d in defined) if prefix else name in defined), \
                f"{doc.name} names {name}{prefix}, which no test in tests/ is"
