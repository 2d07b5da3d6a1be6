"""R2 on a GPU: the fitted progress model fitted and served on CUDA beside the CPU, in one run.

Same recordings and options as ``r2_fitted_reward.py`` (its ``record`` phase), then:

* ``fit``: ``evolve-envs fit-reward`` of the training recording with ``--device cuda`` and with
  ``--device cpu``, one after the other, same seed and epochs (wall time, held-out numbers);
* ``calibrate``: the CUDA-fitted model scored on the held-out recording by the ``fitted``
  backend on the GPU, beside the rules (``r2_fitted_reward.calibrate``);
* ``latency``: P4's closed loop (``POST /pairwise-critic``, two 256² JPEG frames) against the
  ``fitted`` backend on CUDA and on the CPU, and the ``reach_place`` rule, 1 and 8 clients;
* ``backbone``: a head fitted with ``--backbone`` on a tiny randomly initialised ViT written
  by ``save_pretrained`` (nothing downloaded), on CUDA, and served there.

Writes ``r2_device.json`` under ``--out``; nothing is asserted.

    python bench/r2_device.py --out bench/results/r2_device
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from _common import ROOT, TASK, machine_note, scene_frames
from r2_fitted_reward import calibrate, record


def _fit(data: Path, model: Path, device: str, epochs: int, extra: list[str]) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "evolve_envs.cli.main",
        "fit-reward",
        str(data),
        "--out",
        str(model),
        "--epochs",
        str(epochs),
        "--device",
        device,
        "--no-progress",
        *extra,
    ]
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)
    report = json.loads((model / "report.json").read_text())
    return {
        "device": device,
        "wall_s": time.perf_counter() - t0,
        "fit_s": report["fit_s"],
        "held_out": report["held_out"],
        "content_hash": report["content_hash"],
        "parameters": report["parameters"],
        "size_bytes": report["size_bytes"],
    }


def _latency(services: dict[str, tuple[str, dict]], seconds: float) -> dict:
    from p4_service import load

    from evolve_envs.reward.clients.frame_encoding import encode_jpeg_b64
    from evolve_envs.reward.service.hosting.embedded import EmbeddedService

    frames = scene_frames(8, 256, seed=3)
    enc = [encode_jpeg_b64(f, 85) for f in frames]
    bodies = [
        json.dumps({"task": TASK, "image_a": enc[k], "image_b": enc[(k + 1) % 8]}).encode()
        for k in range(8)
    ]
    rows = {}
    for name, (backend, kwargs) in services.items():
        with EmbeddedService(backend, kwargs, startup_timeout=180) as svc:
            for clients in (1, 8):
                r = load(svc.url, bodies, clients, seconds)
                rows[f"{name}|{clients}"] = {
                    k: r[k] for k in ("req_s", "p50_ms", "p99_ms", "batch")
                }
                print(name, clients, rows[f"{name}|{clients}"], flush=True)
    return rows


def _tiny_vit(path: Path) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=32,
    )
    transformers.ViTModel(config).save_pretrained(str(path), safe_serialization=True)
    return path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "r2_device")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--seconds", type=float, default=5.0)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    import torch

    runs = ROOT / "runs" / "r2"
    body: dict = {
        "machine": machine_note(),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    }
    print(body, flush=True)
    record(args.out)
    body["fit"] = [
        _fit(runs / "train", runs / f"model_{d}", d, args.epochs, []) for d in ("cuda", "cpu")
    ]
    print(body["fit"], flush=True)
    calibrate(args.out, str(runs / "model_cuda"))
    body["latency"] = _latency(
        {
            "fitted cuda": ("fitted", {"ckpt_path": str(runs / "model_cuda"), "device": "cuda"}),
            "fitted cpu": ("fitted", {"ckpt_path": str(runs / "model_cuda"), "device": "cpu"}),
            "mock:reach_place": ("mock", {"rule": "reach_place"}),
        },
        args.seconds,
    )
    vit = _tiny_vit(runs / "tiny-vit")
    body["backbone"] = _fit(runs / "train", runs / "vit_head", "cuda", 3, ["--backbone", str(vit)])
    body["latency_backbone"] = _latency(
        {"fitted vit cuda": ("fitted", {"ckpt_path": str(runs / "vit_head"), "device": "cuda"})},
        args.seconds,
    )
    (args.out / "r2_device.json").write_text(json.dumps(body, indent=1, default=str) + "\n")
    print(json.dumps(body, indent=1, default=str))


if __name__ == "__main__":
    main()
