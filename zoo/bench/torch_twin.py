"""What users would pick instead: the same MLP and CNN written in PyTorch (CPU), batch 128, AdamW, timed
interleaved with the zoo's compiled step on the same batches. torch stays out of requirements.txt; without it
the row says it was skipped. It is loaded with importlib, by name, because it is an optional comparison and
no part of the zoo imports it.
"""
import importlib
import importlib.util
import math

from zoo.bench.reference import DROPOUT
from zoo.bench.util import interleave, median, ratios, row

TARGET = {"cnn": (">=", 0.7)}  # zoo samples/s over torch samples/s


def torch_model(kind: str, in_shape: tuple, out: int, cfg_model):
    """The twin of zoo.models.MLP / zoo.models.CNN: same layer sizes, BatchNorm, dropout and pooling."""
    nn = importlib.import_module("torch.nn")
    if kind == "mlp":
        sizes, layers = [math.prod(in_shape), *cfg_model.hidden], [nn.Flatten()]
        for a, b in zip(sizes[:-1], sizes[1:]):
            layers += [nn.Linear(a, b), nn.ReLU(), nn.Dropout(DROPOUT)]
        return nn.Sequential(*layers, nn.Linear(sizes[-1], out))
    h, w, c = in_shape
    channels, layers = [c, *cfg_model.channels], []
    for a, b in zip(channels[:-1], channels[1:]):  # flax BatchNorm momentum 0.99 is torch's 0.01
        layers += [nn.Conv2d(a, b, 3, padding=1), nn.BatchNorm2d(b, eps=1e-5, momentum=0.01), nn.ReLU()]
    flat = (h // 2) * (w // 2) * channels[-1]
    return nn.Sequential(*layers, nn.MaxPool2d(2), nn.Flatten(), nn.Linear(flat, cfg_model.dense), nn.ReLU(),
                         nn.Dropout(DROPOUT), nn.Linear(cfg_model.dense, out))


def torch_twin_row(kind: str, cfg, run, host_batches: list, zoo_fn, rounds: int) -> dict:
    """zoo samples/s / torch samples/s per round pair over the same `host_batches` ({"x": (1, B, ...), "y"})."""
    row_id = f"torch_twin/{kind}"
    if importlib.util.find_spec("torch") is None:
        return row(row_id, None, "x", note="skipped: torch not installed")
    torch = importlib.import_module("torch")

    model = torch_model(kind, run.data.input_shape, run.data.out_features, cfg.model)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optimizer.learning_rate,
                            weight_decay=cfg.optimizer.weight_decay)
    nchw = (lambda x: x.permute(0, 3, 1, 2).contiguous()) if kind == "cnn" else (lambda x: x)
    batches = [(nchw(torch.from_numpy(b["x"][0])), torch.from_numpy(b["y"][0]).long()) for b in host_batches]
    model.train()

    def torch_steps():
        for x, y in batches:
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        return None

    t = interleave({"zoo": zoo_fn, "torch": torch_steps}, rounds)
    samples = len(batches) * batches[0][0].shape[0]
    zoo_sps, torch_sps = [samples / s for s in t["zoo"]], [samples / s for s in t["torch"]]
    return row(row_id, ratios(t["torch"], t["zoo"]), "x", target=TARGET.get(kind),
               note=f"zoo {median(zoo_sps):,.0f} vs torch {torch.__version__} {median(torch_sps):,.0f} samples/s, "
                    f"batch {batches[0][0].shape[0]}, AdamW", zoo_samples_per_s=zoo_sps, torch_samples_per_s=torch_sps)
