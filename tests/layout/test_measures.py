"""How far one idea spreads: the reward formula and the alarm's feed are written once, and
``reward_model.call_every`` is named by at most 10 modules on its way from the config to the
HTTP call. Each measure is shown catching a planted copy."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.layout import measures as m

REWARD_STEP = "evolve_envs/progress/reward_step.py"


def test_the_reward_formula_is_written_once() -> None:
    sites = m.formula_sites()
    assert list(sites) == [REWARD_STEP] and len(sites[REWARD_STEP]) == 1, sites


def test_the_alarm_is_fed_in_one_place() -> None:
    feeds = m.alarm_feeds()
    assert list(feeds) == [REWARD_STEP] and len(feeds[REWARD_STEP]) == 1, feeds


def test_call_every_is_named_by_at_most_ten_modules() -> None:
    files = m.files_naming("call_every")
    assert "evolve_envs/progress/check_schedule.py" in files  # where it decides a check
    assert len(files) <= 10, files


def test_the_measures_catch_a_planted_copy(tmp_path: Path) -> None:
    copy = tmp_path / "evolve_envs"
    shutil.copytree(m.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    target = copy / "wrappers" / "frame_cache.py"
    target.write_text(
        target.read_text()
        + "\n\ndef _pay(self, env, model):\n"
        + "    self.alarm.add('t', 0.5, False)\n"
        + "    _ = self.reward_model.call_every\n"
        + "    return self.env_reward_weight * env + self.reward_weight * model\n"
    )
    assert "evolve_envs/wrappers/frame_cache.py" in m.formula_sites(copy)
    assert "evolve_envs/wrappers/frame_cache.py" in m.alarm_feeds(copy)
    assert len(m.files_naming("call_every", copy)) == len(m.files_naming("call_every")) + 1
    assert not m.names_setting('"""call_every in a docstring"""\n', "call_every")
