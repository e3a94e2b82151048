"""The per-mode benchmark runs every row (it asserts no speed: these are simulated devices)."""
import json

import pytest

from zoo.bench.modes import main


def test_bench_modes_quick_has_every_row(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("TFDS_DATA_DIR", data_dir)
    out = tmp_path / "bench_modes.json"
    main(["--quick", "--devices", "2", "--out", str(out)])
    result = json.loads(out.read_text())
    assert set(result["modes"]) == {"none", "pmap", "sharded", "sharded+fsdp"}
    for row in result["modes"].values():
        assert row["compile_s"] > 0 and row["steps_per_s"] > 0
    assert len(result["checkpointing"]) == 2


def test_bench_modes_refuses_devices_that_do_not_split_its_batch(tmp_path, capsys):
    out = tmp_path / "bench_modes.json"
    for devices in ("3", "0"):
        with pytest.raises(SystemExit) as e:
            main(["--quick", "--devices", devices, "--out", str(out)])
        assert e.value.code == 2
        err = capsys.readouterr().err
        assert f"--devices {devices}" in err and "1, 2, 4, 8, 16, 32 or 64" in err and "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize("flag,value", [("--steps", "0"), ("--steps", "-3"), ("--checkpoint-every", "0")])
def test_bench_modes_refuses_a_count_below_one(tmp_path, capsys, flag, value):
    """--steps 0 printed 0.0 steps/s for every mode; --steps -3 and --checkpoint-every 0 ended in a UserError
    traceback from the run they configured."""
    out = tmp_path / "bench_modes.json"
    with pytest.raises(SystemExit) as e:
        main([flag, value, "--devices", "2", "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {flag} must be at least 1, got {value}" in err and "Traceback" not in err
    assert not out.exists()
