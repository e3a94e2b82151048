"""The per-mode benchmark runs every row (it asserts no speed: these are simulated devices)."""
import json

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
