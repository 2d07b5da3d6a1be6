"""The learner as a Ray task (``learner.placement: cluster``): placed by ``learner.num_cpus``,
``num_gpus`` and ``resources``, its metrics lines sent back to the driver through a Ray queue.

A lost learner raises :class:`LearnerLostError`, whose message ends with how to resume:

>>> print(resume_hint(Path("runs/train-grpo-1")))
the last checkpoint is in runs/train-grpo-1: evolve-envs train --resume runs/train-grpo-1
--address <cluster> continues it
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from evolve_envs.training.config import TrainConfig

if TYPE_CHECKING:
    from ray.util.queue import Queue

__all__ = ["LearnerLostError", "resume_hint", "run_loop_on_cluster"]


class LearnerLostError(RuntimeError):
    """The learner's Ray task died with its node or process (``learner.placement: cluster``)."""


def resume_hint(run_dir: Path) -> str:
    """How to continue the run from its last checkpoint on a cluster."""
    return (
        f"the last checkpoint is in {run_dir}: evolve-envs train --resume {run_dir} "
        "--address <cluster> continues it"
    )


class _LineQueue:
    """A text stream whose lines go into a Ray queue (the learner task's log, printed by the
    driver)."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue
        self.buffer = ""

    def write(self, text: str) -> int:
        self.buffer += text
        *lines, self.buffer = self.buffer.split("\n")
        for line in lines:
            with contextlib.suppress(Exception):  # a full queue drops a log line, never the run
                self.queue.put_nowait(line)
        return len(text)

    def flush(self) -> None:
        pass


def _learner_task(
    algo_name: str,
    worker_cfg: TrainConfig,
    cfg: TrainConfig,
    run_dir: str,
    state: dict[str, object] | None,
    lines: Queue,
) -> tuple[dict[str, int], dict[str, object]]:
    """The shared loop as a Ray task (``learner.placement: cluster``)."""
    from evolve_envs.training.algorithm import make_algorithm
    from evolve_envs.training.loop import run_loop

    return run_loop(
        make_algorithm(algo_name),
        worker_cfg,  # checked where the run loaded it: it travels typed
        cfg,
        Path(run_dir),
        state,
        _LineQueue(lines),  # type: ignore[arg-type]
        False,
    )


def run_loop_on_cluster(
    worker_cfg: TrainConfig,
    cfg: TrainConfig,
    run_dir: Path,
    state: dict[str, object] | None,
    log: TextIO,
) -> tuple[dict[str, int], dict[str, object]]:
    """Run the shared loop as a Ray task placed by ``learner.num_cpus``, ``num_gpus`` and
    ``resources``; its metrics lines come back to ``log``. ``run_dir`` must be a path the
    learner's node can write (the same disk on one machine; shared storage on a cluster)."""
    import ray
    from ray.util.queue import Empty, Queue

    from evolve_envs.training.runtime.placement import learner_request, on_this_node

    request = learner_request(cfg)
    lines = Queue(
        maxsize=10_000, actor_options={"num_cpus": 0, "scheduling_strategy": on_this_node()}
    )
    options: dict[str, object] = {
        "num_cpus": request.pop("CPU", 0.0),
        "num_gpus": request.pop("GPU", 0.0),
        "max_retries": 0,  # a lost learner stops the run; --resume continues from its checkpoint
    }
    if request:
        options["resources"] = request
    ref = (
        ray.remote(_learner_task)
        .options(**options)
        .remote(
            cfg.algo,
            worker_cfg,
            cfg,
            str(run_dir.resolve()),
            state,
            lines,
        )
    )

    def drain() -> None:
        while True:
            try:
                print(lines.get_nowait(), file=log, flush=True)
            except Empty:
                return

    try:
        while not ray.wait([ref], timeout=0.5)[0]:
            drain()
        drain()
        return ray.get(ref)
    except (ray.exceptions.NodeDiedError, ray.exceptions.WorkerCrashedError) as exc:
        raise LearnerLostError(
            f"the learner was lost ({type(exc).__name__}: its node or process died); "
            + resume_hint(run_dir)
        ) from exc
    except KeyboardInterrupt:
        ray.cancel(ref)  # the task's loop stops its workers on the way out
        raise
    finally:
        lines.shutdown()
