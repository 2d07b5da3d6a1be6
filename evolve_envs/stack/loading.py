"""Loading stack configs: YAML files and shipped names, layering, environment variables, overrides.

Sources are layered left to right (``OmegaConf.merge``), then the environment variables
(``VLAC_SERVICE_URL``, ``EVOLVE_REWARD_TOKEN`` ...; docs/PROTOCOLS.md lists them), then the
explicit overrides; the result is validated strictly against
:class:`~evolve_envs.stack.config.StackConfig`, each problem named by its key path.

>>> cfg = load_config("libero_10", "fast_dev", overrides={"reward_model": {"start_step": 8}},
...                   environ={})
>>> cfg.reward_model.kind, cfg.reward_model.call_every, cfg.reward_model.start_step
('progress', 32, 8)
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
from collections.abc import Mapping, Sequence
from importlib.resources.abc import Traversable
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from pydantic import BaseModel, TypeAdapter, ValidationError

from evolve_envs.progress.config_error import ConfigError
from evolve_envs.stack.config import REWARD_KINDS, StackConfig, kind_of

#: One layer of a stack config: a YAML path or shipped name, a mapping, an OmegaConf node, a model.
ConfigLayer = str | os.PathLike[str] | Mapping[str, object] | DictConfig | BaseModel

__all__ = [
    "CONFIG_DIR",
    "ENV_OVERRIDES",
    "env_key_error",
    "env_overrides",
    "format_validation_error",
    "load_config",
    "merge",
    "parse_override",
    "read_yaml",
    "resolve_config",
    "reward_model_source",
    "shipped_configs",
]

#: The ``configs/`` directory of a source checkout (YAMLs may also live anywhere else).
CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"

#: Environment variable -> (reward_model key, type).
ENV_OVERRIDES: dict[str, tuple[str, type]] = {
    "VLAC_SERVICE_URL": ("endpoint", str),
    "VLAC_SERVICE_NUM": ("service_num", int),
    "VLAC_DONE_THRESHOLD": ("done_threshold", float),
    "VLAC_OFFSET_CALL": ("call_every", int),
    "VLAC_START_STEP_CALL": ("start_step", int),
    "USE_DENSE_REWARD": ("dense_reward", bool),
    "USE_PROGRESSIVE_MAX_STEP": ("progressive_max_step", bool),
    "EVOLVE_REWARD_TOKEN": ("token", str),
}

_EXPECTED_ENV = {bool: "a boolean (1/0, true/false, yes/no, on/off)", int: "int", float: "float"}


def _parse_env_value(name: str, key: str, kind: type, text: str) -> object:
    """The variable's text as ``kind`` (pydantic's lax parsing); errors name the variable."""
    raw = text.strip()
    if kind is str:
        return raw
    try:
        return TypeAdapter(kind).validate_python(raw)
    except ValidationError:
        where = f"{name}={text!r} (reward_model.{key})"
        raise ConfigError(f"{where}: expected {_EXPECTED_ENV[kind]}, got {text!r}") from None


def env_overrides(environ: Mapping[str, str] | None = None) -> dict[str, object]:
    """The ``reward_model`` keys the environment variables set.

    >>> env_overrides({"VLAC_OFFSET_CALL": "8", "USE_DENSE_REWARD": "off", "HOME": "/root"})
    {'call_every': 8, 'dense_reward': False}
    """
    env = os.environ if environ is None else environ
    out: dict[str, object] = {}
    for name, (key, kind) in ENV_OVERRIDES.items():
        text = env.get(name)
        if text is None or text.strip() == "":
            continue
        out[key] = _parse_env_value(name, key, kind, text)
    return out


def shipped_configs() -> dict[str, Traversable]:
    """The stack configs shipped in ``evolve_envs/configs`` and its ``presets/``: name -> file."""
    try:
        root = importlib.resources.files("evolve_envs.configs")
    except ModuleNotFoundError:
        return {}
    out: dict[str, Traversable] = {}
    for sub in ("", "presets"):
        folder = root.joinpath(sub) if sub else root
        if not folder.is_dir():
            continue
        for item in sorted(folder.iterdir(), key=lambda t: t.name):
            if item.is_file() and item.name.endswith(".yaml"):
                stem = item.name.removesuffix(".yaml")
                if sub:
                    out[f"{sub}/{stem}"] = item
                out.setdefault(stem, item)
    return out


def shipped_key(text: str) -> str:
    """A config argument as the name of a shipped config (not checked).

    >>> shipped_key("../evolve_envs/configs/presets/fast_dev.yaml")
    'presets/fast_dev'
    """
    text = text.replace(os.sep, "/").split("evolve_envs/configs/")[-1]
    return text.removeprefix("configs/").removesuffix(".yaml").removesuffix(".yml")


def resolve_config(source: str | os.PathLike[str]) -> Path | Traversable:
    """A config argument as a file: an existing path, else a shipped config by name or path.

    >>> resolve_config("fast_dev").name
    'fast_dev.yaml'
    """
    p = Path(source)
    if p.is_file():
        return p
    text = os.fspath(source)
    if not p.is_absolute():
        key = shipped_key(text)
        found = shipped_configs().get(key)
        if found is not None:
            return found
    names = sorted(k for k in shipped_configs() if "/" not in k)
    close = difflib.get_close_matches(Path(text).stem, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    known = f"; shipped configs: {', '.join(names)}" if names else ""
    raise ConfigError(f"config file {text!r} not found{hint}{known}")


def read_yaml(path: str | os.PathLike[str]) -> dict[str, object]:
    """Read a YAML mapping from a path or a shipped config's name; errors name the file."""
    p = resolve_config(path)
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping at the top, got {type(data).__name__}")
    return data


def _as_mapping(source: ConfigLayer | None, what: str) -> dict[str, object]:
    if source is None:
        return {}
    if isinstance(source, str | os.PathLike):
        return read_yaml(source)
    if isinstance(source, DictConfig):
        return dict(OmegaConf.to_container(source, resolve=True))  # type: ignore[arg-type]
    if isinstance(source, BaseModel):
        return source.model_dump()
    if isinstance(source, Mapping):
        return dict(source)
    raise ConfigError(f"{what}: expected a YAML path or a mapping, got {type(source).__name__}")


def reward_model_source(block: ConfigLayer | None) -> dict[str, object] | None:
    """A ``reward_model`` argument (mapping, OmegaConf node, YAML path) as a config source.

    >>> reward_model_source({"call_every": 8})
    {'reward_model': {'call_every': 8}}
    """
    if block is None:
        return None
    data = _as_mapping(block, "reward_model")
    if isinstance(block, str | os.PathLike) and "reward_model" in data:
        data = data["reward_model"]
    return {"reward_model": data}


def merge(*layers: Mapping[str, object]) -> dict[str, object]:
    """Layer mappings left to right (``OmegaConf.merge``, no interpolation): lists replace.

    >>> merge({"reward_model": {"call_every": 16, "mode": "pairwise"}},
    ...       {"reward_model": {"call_every": 8}})
    {'reward_model': {'call_every': 8, 'mode': 'pairwise'}}
    """
    flags = {"allow_objects": True}
    merged = OmegaConf.merge(*(OmegaConf.create(dict(layer), flags=flags) for layer in layers))
    return OmegaConf.to_container(merged, resolve=False)  # type: ignore[return-value]


_EXPECTED = {
    "int_type": "int",
    "int_parsing": "int",
    "int_from_float": "int",
    "float_type": "float",
    "float_parsing": "float",
    "bool_type": "bool",
    "bool_parsing": "bool",
    "string_type": "str",
    "dict_type": "a mapping",
    "list_type": "a list",
    "model_type": "a mapping",
}


def _split_kind(loc: Sequence[int | str]) -> tuple[tuple[int | str, ...], str | None]:
    """``loc`` without the union tag pydantic puts after ``reward_model``, and that tag."""
    loc = tuple(loc)
    if len(loc) > 1 and loc[0] == "reward_model" and loc[1] in REWARD_KINDS:
        return (loc[0], *loc[2:]), str(loc[1])
    return loc, None


def _key_path(loc: Sequence[int | str]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        elif part in ("str", "list[str]", "int", "float", "none", "done-by-name", "done-rule"):
            continue  # union branch labels, not keys
        else:
            path += ("." if path else "") + str(part)
    return path or "<config>"


def _valid_keys(model: type[BaseModel], loc: Sequence[int | str]) -> list[str]:
    current: type[BaseModel] | None = model
    for part in loc[:-1]:
        if isinstance(part, int) or current is None:
            continue
        field = current.model_fields.get(part) if hasattr(current, "model_fields") else None
        if field is None:
            return []
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        candidates = [ann, *args]
        current = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return sorted(current.model_fields) if current is not None else []


def _other_kind(key: str, kind: str) -> str | None:
    """The reward kind that has ``key`` when ``kind`` does not (``None``: no kind has it)."""
    return next((k for k, m in REWARD_KINDS.items() if k != kind and key in m.model_fields), None)


#: keys that are fractions of 1 although progress is 0-100 on the wire and in the reports
_FRACTIONS = ("done_threshold", "success_progress")


def _percent(value: object) -> bool:
    return isinstance(value, int | float) and 1 < value <= 100


def format_validation_error(exc: ValidationError, model: type[BaseModel] = StackConfig) -> str:
    """One line per problem: ``<key path>: <what was expected>, got <value>``."""
    lines: list[str] = []
    seen: set[str] = set()
    for err in exc.errors():
        loc, kind_tag = _split_kind(err.get("loc", ()))
        path = _key_path(loc)
        kind = err.get("type", "")
        given = err.get("input")
        if path.endswith("token"):
            given = "<hidden>"  # never echo a secret, even a mistyped one
        if kind == "union_tag_invalid" and loc == ("reward_model",):
            tag = err["ctx"]["tag"]
            line = f"reward_model.kind: expected one of {', '.join(REWARD_KINDS)}, got {tag!r}"
        elif kind == "extra_forbidden":
            owner = _other_kind(str(loc[-1]), kind_tag) if kind_tag and len(loc) == 2 else None
            if owner is not None:
                line = f"{path}: `{loc[-1]}` is a {owner} key; reward_model.kind is {kind_tag}"
            else:
                within = REWARD_KINDS[kind_tag] if kind_tag else model
                valid = _valid_keys(within, loc[1:] if kind_tag else loc)
                close = difflib.get_close_matches(str(loc[-1]), valid, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                line = f"{path}: unknown key{hint}"
        elif path.endswith(_FRACTIONS) and kind in ("less_than_equal", "greater_than_equal"):
            hint = f" (did you mean {given / 100:g}?)" if _percent(given) else ""
            line = (
                f"{path}: expected a fraction in [0, 1] (0.95 is 95 % progress, the 0-100 "
                f"scale the service and the reports use){hint}, got {given!r}"
            )
        elif kind in _EXPECTED:
            line = f"{path}: expected {_EXPECTED[kind]}, got {given!r}"
        else:
            msg = str(err.get("msg", "invalid value"))
            msg = msg.removeprefix("Value error, ")
            line = f"{path}: {msg[0].lower() + msg[1:] if msg else msg}, got {given!r}"
        if path in seen and kind in _EXPECTED:
            continue  # one line per key for union types
        seen.add(path)
        lines.append(line)
    return "\n".join(lines)


def load_config(
    *sources: ConfigLayer | None,
    overrides: Mapping[str, object] | None = None,
    environ: Mapping[str, str] | None = None,
) -> StackConfig:
    """Layer ``sources``, apply environment variables, then ``overrides``, and validate.

    Raises :class:`ConfigError` naming the key path of every problem.
    """
    layers = [_as_mapping(source, f"config source {i}") for i, source in enumerate(sources)]
    extra = _as_mapping(overrides, "overrides") if overrides else {}
    from_env = env_overrides(environ)
    if from_env:  # the variables set the keys of the block's kind (they are progress keys)
        block = merge(*layers, extra).get("reward_model")
        model = REWARD_KINDS.get(kind_of(block if isinstance(block, Mapping) else {}))
        known = model.model_fields if model is not None else {}
        from_env = {k: v for k, v in from_env.items() if k in known}
    data = merge(*layers, {"reward_model": from_env} if from_env else {}, extra)
    try:
        return StackConfig.model_validate(data)
    except ValidationError as exc:
        message = format_validation_error(exc)
        set_by = _env_var_sources(environ, extra.get("reward_model") or {})
        raise ConfigError(_name_env_vars(message, set_by)) from None


def parse_override(text: str) -> dict[str, object]:
    """``"distrl.lr=1e-3"`` -> ``{"distrl": {"lr": 0.001}}`` (the value is read as YAML).

    >>> parse_override("workers.num_envs=4")
    {'workers': {'num_envs': 4}}
    """
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r}: expected KEY.PATH=VALUE")
    try:
        parsed = yaml.safe_load(value) if value.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{key}: invalid value {value!r}: {exc}") from None
    out: dict[str, object] = {}
    node = out
    parts = key.strip().split(".")
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = parsed
    return out


def _env_var_sources(environ: Mapping[str, str] | None, overridden: object) -> dict[str, str]:
    """``reward_model`` key -> ``NAME='value'`` of the environment variable that set it."""
    env = os.environ if environ is None else environ
    out: dict[str, str] = {}
    for name, (key, _kind) in ENV_OVERRIDES.items():
        text = env.get(name)
        if text is None or text.strip() == "":
            continue
        if isinstance(overridden, Mapping) and key in overridden:
            continue  # an explicit override replaced the variable's value
        out[key] = f"{name}={text!r}"
    return out


def _name_env_vars(message: str, set_by: Mapping[str, str]) -> str:
    """Append "(set by VAR='value')" to each error line about a key an env variable set."""
    lines = []
    for line in message.splitlines():
        for key, where in set_by.items():
            if line.startswith(f"reward_model.{key}:"):
                line = f"{line} (set by the environment variable {where})"
                break
        lines.append(line)
    return "\n".join(lines)


def env_key_error(exc: ValueError, env_kwargs: Mapping[str, object]) -> ConfigError:
    """The base env's rejection of an ``env`` argument, as a ``ConfigError`` naming ``env.<key>``.

    >>> str(env_key_error(ValueError("num_settle_steps must be >= 0, got -1"),
    ...                   {"suite": "libero_10", "num_settle_steps": -1}))
    'env.num_settle_steps: num_settle_steps must be >= 0, got -1'
    """
    if isinstance(exc, ConfigError):
        return exc
    text = str(exc)
    key = next((k for k in env_kwargs if text.startswith(k)), None)
    if key is None:  # the key whose value the message quotes first, else whose name it names
        by_value = [(text.find(repr(v)), k) for k, v in env_kwargs.items() if repr(v) in text]
        by_name = [(text.find(k), k) for k in env_kwargs if k in text]
        key = min(by_value)[1] if by_value else (min(by_name)[1] if by_name else None)
    return ConfigError(f"env.{key}: {text}" if key else f"env: {text}")
