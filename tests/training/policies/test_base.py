"""Policy interface, the CNN Gaussian policy, and the Trajectory record."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest
import torch
from gymnasium import spaces

from evolve_envs.training.common.trajectory import Trajectory, stack_obs
from evolve_envs.training.policies.base import CNNGaussianPolicy, Policy, downscale_images


def libero_like_obs(b: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "agentview_image": rng.integers(0, 256, size=(b, 128, 128, 3), dtype=np.uint8),
        "wrist_image": rng.integers(0, 256, size=(b, 128, 128, 3), dtype=np.uint8),
        "state": rng.normal(size=(b, 8)).astype(np.float32),
    }


def test_libero_shaped_policy_shapes_and_log_probs():
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    pol = CNNGaussianPolicy(7, 8, image_key="agentview_image", image_size=32)
    inputs = pol.encode_obs(libero_like_obs(5, rng))
    assert set(inputs) == {"agentview_image", "state"}  # the wrist camera is not used
    assert inputs["agentview_image"].shape == (5, 32, 32, 3)
    assert inputs["agentview_image"].dtype == np.uint8
    assert inputs["state"].shape == (5, 8) and inputs["state"].dtype == np.float32

    actions, logp = pol.act(inputs)
    assert actions.shape == (5, 7) and actions.dtype == np.float32
    assert logp.shape == (5,) and logp.dtype == np.float32
    dist, value = pol(pol.to_inputs(inputs))
    assert value.shape == (5,)
    assert dist.log_prob(torch.as_tensor(actions)).shape == (5,)
    assert dist.entropy().shape == (5,)
    # behaviour log-probs are the log-density of the returned actions under the same weights
    np.testing.assert_allclose(
        dist.log_prob(torch.as_tensor(actions)).detach().numpy(), logp, rtol=1e-5, atol=1e-5
    )
    # and match the closed-form diagonal Gaussian density
    mu = dist.mean.detach().numpy()
    std = pol.log_std.exp().detach().numpy()
    manual = (-0.5 * ((actions - mu) / std) ** 2 - np.log(std) - 0.5 * np.log(2 * np.pi)).sum(-1)
    np.testing.assert_allclose(manual, logp, rtol=1e-4, atol=1e-4)

    a1, lp1 = pol.act(inputs, deterministic=True)
    a2, _ = pol.act(inputs, deterministic=True)
    np.testing.assert_array_equal(a1, a2)
    np.testing.assert_allclose(a1, mu, rtol=1e-6)


def test_weights_round_trip_through_state_dict():
    torch.manual_seed(1)
    rng = np.random.default_rng(1)
    a = CNNGaussianPolicy(7, 8, image_key="agentview_image")
    b = CNNGaussianPolicy(7, 8, image_key="agentview_image")
    inputs = a.encode_obs(libero_like_obs(3, rng))
    assert not np.allclose(a.value(inputs), b.value(inputs))
    b.load_state_dict({k: v.clone() for k, v in a.state_dict().items()})
    np.testing.assert_array_equal(a.value(inputs), b.value(inputs))
    np.testing.assert_array_equal(
        a.act(inputs, deterministic=True)[0], b.act(inputs, deterministic=True)[0]
    )
    assert all(t.device.type == "cpu" for t in a.state_dict().values())


def test_to_inputs_accepts_read_only_arrays_and_tensors():
    import warnings

    pol = CNNGaussianPolicy(2, 3, image_key=None, hidden=8)
    arr = np.ones((4, 3), np.float32)
    arr.flags.writeable = False  # what ray.get returns for NumPy arrays
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        inputs = pol.to_inputs({"state": arr})
    assert inputs["state"].shape == (4, 3)
    again = pol.to_inputs(inputs)
    assert again["state"] is inputs["state"]


def test_from_spaces():
    img = spaces.Box(0, 255, (64, 64, 3), np.uint8)
    st = spaces.Box(-np.inf, np.inf, (4,), np.float32)
    act = spaces.Box(-1.0, 1.0, (2,), np.float32)
    pol = CNNGaussianPolicy.from_spaces(spaces.Dict({"image": img, "state": st}), act)
    assert (pol.action_dim, pol.state_dim, pol.image_key) == (2, 4, "image")
    only_state = CNNGaussianPolicy.from_spaces(spaces.Dict({"state": st}), act)
    assert only_state.image_key is None
    flat = CNNGaussianPolicy.from_spaces(spaces.Box(-1, 1, (6,), np.float32), act, hidden=16)
    a, lp = flat.act(flat.encode_obs(np.zeros((2, 6), np.float32)))
    assert a.shape == (2, 2) and lp.shape == (2,)
    gray = CNNGaussianPolicy.from_spaces(
        spaces.Dict({"image": spaces.Box(0, 255, (40, 40, 1), np.uint8)}), act, image_size=16
    )
    a, _ = gray.act(gray.encode_obs({"image": np.zeros((3, 40, 40, 1), np.uint8)}))
    assert a.shape == (3, 2)
    with pytest.raises(ValueError, match="Box action space"):
        CNNGaussianPolicy.from_spaces(spaces.Dict({"state": st}), spaces.Discrete(3))


def test_encode_obs_errors():
    pol = CNNGaussianPolicy(2, 3)
    with pytest.raises(KeyError, match="image"):
        pol.encode_obs({"state": np.zeros((1, 3))})
    with pytest.raises(ValueError, match="expected 3 values"):
        pol.encode_obs({"image": np.zeros((1, 32, 32, 3), np.uint8), "state": np.zeros((1, 4))})


def test_downscale_images():
    img = np.zeros((1, 4, 4, 1), np.uint8)
    img[0, :2, :2, 0] = 200
    img[0, :2, 2:, 0] = 100
    out = downscale_images(img, 2)
    np.testing.assert_array_equal(out[0, :, :, 0], [[200, 100], [0, 0]])
    img[0, 0, 0, 0] = 0  # area average, not subsampling
    assert downscale_images(img, 2)[0, 0, 0, 0] == 150
    odd = downscale_images(np.arange(5 * 5).reshape(1, 5, 5, 1).astype(np.uint8), 2)
    assert odd.shape == (1, 2, 2, 1)
    with pytest.raises(ValueError, match="B, H, W, C"):
        downscale_images(np.zeros((4, 4, 3), np.uint8), 2)


def test_policy_is_abstract():
    with pytest.raises(TypeError):
        Policy()  # type: ignore[abstract]


def make_traj(t: int = 3, **over) -> Trajectory:
    fields = dict(
        obs={
            "state": np.zeros((t + 1, 2), np.float32),
            "image": np.zeros((t + 1, 4, 4, 3), np.uint8),
        },
        actions=np.zeros((t, 1), np.float32),
        behaviour_logp=np.zeros(t, np.float32),
        rewards=np.zeros(t, np.float32),
        dones=np.zeros(t, bool),
        policy_version=0,
    )
    fields.update(over)
    return Trajectory(**fields)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("obs", {"state": np.zeros((3, 2), np.float32)}, r"obs\['state'\]: leading dimension 3"),
        ("obs", {}, "Trajectory.obs"),
        ("actions", np.zeros((3,), np.float32), "Trajectory.actions"),
        ("actions", np.zeros((2, 1), np.float32), "Trajectory.actions"),
        ("actions", np.full((3, 1), np.nan, np.float32), "actions: contains non-finite"),
        ("behaviour_logp", np.zeros(4, np.float32), "Trajectory.behaviour_logp"),
        ("rewards", np.array([0.0, np.inf, 0.0], np.float32), "rewards: contains non-finite"),
        ("rewards", np.zeros((3, 1), np.float32), "Trajectory.rewards"),
        ("dones", np.zeros(3, np.float32), "Trajectory.dones: expected dtype bool"),
        ("dones", np.zeros(2, bool), "Trajectory.dones"),
        ("policy_version", -1, "Trajectory.policy_version"),
        ("rewards", [0.0, 0.0, 0.0], "Trajectory.rewards: expected a NumPy array"),
    ],
)
def test_trajectory_validate_names_the_field(field, value, message):
    make_traj().validate()
    with pytest.raises(ValueError, match=message):
        make_traj(**{field: value}).validate()


def test_trajectory_helpers():
    tr = make_traj(3, dones=np.array([False, False, True]))
    assert len(tr) == 3 and tr.action_dim == 1 and tr.terminated
    assert tr.nbytes == 4 * 2 * 4 + 4 * 48 + 3 * 4 + 3 * 4 + 3 * 4 + 3
    assert tr.step_obs()["state"].shape == (3, 2)
    both = stack_obs([tr, make_traj(5)])
    assert both["state"].shape == (10, 2) and both["image"].shape == (10, 4, 4, 3)
    assert stack_obs([tr, make_traj(5)], include_last=False)["state"].shape == (8, 2)
    with pytest.raises(ValueError, match="keys differ"):
        stack_obs([tr, make_traj(obs={"state": np.zeros((4, 2), np.float32)})])


@pytest.mark.parametrize(
    "module",
    [
        "training.common.trajectory",
        "training.policies.base",
        "training.distrl.replay",
        "training.distrl.retrace",
        "training.common.validators",
        "training.distrl.loss",
    ],
)
def test_docstring_examples_run(module):
    mod = importlib.import_module(f"evolve_envs.{module}")
    result = doctest.testmod(mod, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
