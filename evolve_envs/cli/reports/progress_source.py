"""What a run's progress numbers are, in words, for reports and summaries.

>>> from evolve_envs.stack.loading import load_config
>>> progress_source(load_config("reach_place").reward_model, short=True)
'mock: scene rule reach_place'
"""

from __future__ import annotations

from evolve_envs.stack.config import RewardModelConfig

__all__ = ["MOCK_RULES", "progress_source"]

#: What each rule of the mock backend measures: a short label and the sentence a report prints.
#: The mock is a stand-in, so its number is named for what it is, never called task progress.
MOCK_RULES: dict[str, tuple[str, str]] = {
    "change": (
        "pixel change",
        "how far the camera image has moved from the episode's first frame: pixel change, not "
        "task progress (a flailing random policy scores high)",
    ),
    "intensity": ("brightness", "the frame's brightness (painted test frames), not task progress"),
    "reach_place": (
        "scene rule reach_place",
        "ReachPlace's ground truth read from the pixels (a right model)",
    ),
    "reach_place_hackable": (
        "scene rule reach_place_hackable",
        "the yellow distractor's distance to the green zone (a model a policy can game)",
    ),
    "random": ("random rule", "a number hashed from the frame's bytes (no judgement at all)"),
}


def progress_source(rm: RewardModelConfig, *, short: bool = False) -> str | None:
    """Where a stack's progress numbers come from, in words (None: no reward model); ``short``
    gives the label for narrow places.

    >>> from evolve_envs.stack.loading import load_config
    >>> progress_source(load_config("libero_10").reward_model, short=True)
    'mock: pixel change'
    """
    if not rm.enable:
        return None
    if rm.embedded and rm.embedded_backend == "mock":
        rule = str(rm.embedded_backend_kwargs.get("rule", "intensity"))
        label, meaning = MOCK_RULES.get(rule, (f"rule {rule}", f"the mock's rule {rule}"))
        return f"mock: {label}" if short else f"mock reward model, rule {rule}: {meaning}"
    if rm.embedded:
        return rm.embedded_backend if short else f"reward model {rm.embedded_backend} (embedded)"
    endpoint = rm.endpoint if isinstance(rm.endpoint, str) else ",".join(rm.endpoint)
    return "reward model" if short else f"reward model at {endpoint}"
