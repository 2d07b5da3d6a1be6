"""Config errors name what the user wrote: the environment variable, the env.* key, a close name."""

from __future__ import annotations

import pytest

from evolve_envs import ConfigError, load_config, make_env


def test_env_variable_error_names_the_variable() -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"reward_model": {"enable": True}}, environ={"VLAC_DONE_THRESHOLD": "95"})
    msg = str(err.value)
    assert msg.startswith("reward_model.done_threshold:")
    assert "VLAC_DONE_THRESHOLD='95'" in msg
    # an explicit override of the same key is not blamed on the variable
    with pytest.raises(ConfigError) as err:
        load_config(
            "libero_10",
            environ={"VLAC_DONE_THRESHOLD": "0.9"},
            overrides={"reward_model": {"done_threshold": 7}},
        )
    assert "VLAC_DONE_THRESHOLD" not in str(err.value)


def test_misspelt_embedded_backend_fails_at_config_time() -> None:
    with pytest.raises(ConfigError, match=r"reward_model\.embedded_backend: .*did you mean 'mock'"):
        load_config({"reward_model": {"embedded_backend": "mok"}})


@pytest.mark.parametrize(
    ("env", "path"),
    [
        ({"suite": "libero_100"}, "env.suite: "),
        ({"suite": "libero_10", "image_orientation": "sideways"}, "env.image_orientation: "),
        ({"suite": "libero_10", "num_settle_steps": -1}, "env.num_settle_steps: "),
    ],
)
def test_base_env_errors_carry_the_env_path(env: dict, path: str) -> None:
    with pytest.raises(ConfigError) as err:
        make_env({"env": env})
    assert str(err.value).startswith(path)
