"""EnvPool's Atari ids (``"Pong-v5"``): :class:`AtariEnv` drives the ALE with EnvPool's Atari
preprocessing and defaults (docs/envpool.md); ids and options are checked in the calling process."""

from __future__ import annotations

import numbers
import re
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecenv.engine.checks import check_count

#: EnvPool's Atari task options and their defaults, in EnvPool's config order
ATARI_DEFAULTS: dict[str, Any] = {
    "stack_num": 4, "frame_skip": 4, "noop_max": 30, "zero_discount_on_life_loss": False,
    "episodic_life": False, "reward_clip": False, "use_fire_reset": True, "img_height": 84,
    "img_width": 84, "mode": -1, "difficulty": -1, "full_action_space": False,
    "repeat_action_probability": 0.0, "use_inter_area_resize": True, "gray_scale": True,
}
#: an Atari id's episode limit unless make's ``max_episode_steps`` says otherwise (EnvPool's)
ATARI_MAX_EPISODE_STEPS = 27000
_COUNTS = ("stack_num", "frame_skip", "noop_max", "img_height", "img_width")
_FLAGS = ("zero_discount_on_life_loss", "episodic_life", "reward_clip", "use_fire_reset",
          "full_action_space", "use_inter_area_resize", "gray_scale")
_OTHER = ("render_mode",)  # keywords an Atari id takes beyond EnvPool's task options
_ID = re.compile(r"([A-Z][A-Za-z0-9]*)-v5")
_EXTRA = 'pip install "vecenv[sims]"'
_FIRE = 1  # ALE's action FIRE


def is_int(value: Any) -> bool:
    """An integral number (a numpy integer too), never a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _ale() -> Any:
    """``ale_py`` and ``cv2``, or an ImportError naming the extra that installs them."""
    try:
        import ale_py
        import cv2  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"EnvPool's Atari ids need ale_py and opencv ({exc.name} is not "
                          f"installed): {_EXTRA}") from exc
    ale_py.ALEInterface.setLoggerMode(ale_py.LoggerMode.Error)  # no banner per env
    return ale_py


def _rom_ids() -> dict[str, str]:
    """EnvPool's game names (``"MontezumaRevenge"``) to ALE's ROM ids (``"montezuma_revenge"``)."""
    from ale_py import roms

    return {"".join(part.capitalize() for part in rom.split("_")): rom
            for rom in roms.get_all_rom_ids()}


def atari_ids() -> list[str]:
    """EnvPool's Atari ids (``"Pong-v5"``, ...); empty when ale_py is not installed."""
    try:
        _ale()
    except ImportError:
        return []
    return sorted(f"{name}-v5" for name in _rom_ids())


def atari_game(task_id: str) -> str | None:
    """The ROM id ``task_id`` names in EnvPool's form (``"Pong-v5"`` -> ``"pong"``), else None;
    an ImportError naming the extra where ale_py or opencv is missing."""
    match = _ID.fullmatch(task_id)
    if match is None:
        return None
    try:
        _ale()
    except ImportError as exc:
        raise ImportError(f"{task_id!r} is not a registered gymnasium id; as EnvPool's Atari id "
                          f"it needs ale_py and opencv: {_EXTRA}") from exc
    return _rom_ids().get(match.group(1))


def check_atari_options(game: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """make's keywords for an Atari id, checked (ValueError / TypeError naming the option): every
    option with its value, defaults filled; ``mode`` and ``difficulty`` -1 or one the ROM has."""
    unknown = [key for key in kwargs if key not in ATARI_DEFAULTS and key not in _OTHER]
    if unknown:
        raise ValueError(f"{unknown[0]!r}: not an option of EnvPool's Atari envs; accepted: "
                         f"{', '.join([*ATARI_DEFAULTS, *_OTHER])}")
    options = {**ATARI_DEFAULTS, **kwargs}
    for key in _COUNTS:
        options[key] = check_count(key, options[key], None)
    for key in _FLAGS:
        value = options[key]
        if not isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{key}: expected a bool, got {value!r}")
        options[key] = bool(value)
    p = options["repeat_action_probability"]
    if isinstance(p, (bool, np.bool_)) or not isinstance(p, numbers.Real) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"repeat_action_probability: expected a number in [0, 1], got {p!r}")
    options["repeat_action_probability"] = float(p)
    for key in ("mode", "difficulty"):
        value = options[key]
        if not is_int(value) or value < -1:
            raise ValueError(f"{key}: expected -1 (the game's default) or an int >= 0, got {value!r}")
        options[key] = int(value)
    if options["mode"] != -1 or options["difficulty"] != -1:
        ale_py = _ale()
        ale = ale_py.ALEInterface()
        ale.loadROM(ale_py.roms.get_rom_path(game))
        offered = {"mode": ale.getAvailableModes(), "difficulty": ale.getAvailableDifficulties()}
        for key, values in offered.items():
            available = sorted(int(v) for v in values)
            if options[key] != -1 and options[key] not in available:
                raise ValueError(f"{key}: {game} offers {available} (or -1 for its default), "
                                 f"got {options[key]}")
    if options.get("render_mode") not in (None, "rgb_array"):
        raise ValueError(f"render_mode: expected None or 'rgb_array' for an Atari id, "
                         f"got {options['render_mode']!r}")
    return options


def atari_config(game: str, options: dict[str, Any]) -> dict[str, Any]:
    """The checked task options as EnvPool's config shows them: ``task`` (the ROM id) after
    ``img_width``, ``render_mode`` left out."""
    keys = list(ATARI_DEFAULTS)
    at = keys.index("img_width") + 1
    return {**{k: options[k] for k in keys[:at]}, "task": game, **{k: options[k] for k in keys[at:]}}


class AtariEnv(gym.Env):
    """One ALE game with EnvPool's Atari preprocessing (no-op starts, fire reset, frame skip with a
    max over the last two frames, resize, channel-first frame stacking, optional episodic life and
    reward clipping): EnvPool's shapes, dtypes, keys and semantics, not its exact values.

    Observations: uint8 ``(stack_num * channels, img_height, img_width)``, oldest frame first.
    Infos: ``lives`` (int32), ``reward`` (float32, unclipped), ``terminated`` (int32, the game is
    over), ``ram`` (uint8 ``(128,)``), ``elapsed_step`` (int32, kept by an episodic-life reset).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, game: str, *, max_episode_steps: int = ATARI_MAX_EPISODE_STEPS,
                 render_mode: str | None = None, **options: Any) -> None:
        unknown = [key for key in options if key not in ATARI_DEFAULTS]
        if unknown:
            raise TypeError(f"AtariEnv: unknown option {unknown[0]!r}; accepted: {', '.join(ATARI_DEFAULTS)}")
        o = {**ATARI_DEFAULTS, **options}
        ale_py = _ale()
        import cv2

        self._cv2 = cv2
        self._game = ale_py.env.AtariEnv(
            game=game, obs_type="grayscale" if o["gray_scale"] else "rgb", frameskip=1,
            repeat_action_probability=float(o["repeat_action_probability"]),
            full_action_space=bool(o["full_action_space"]),
            mode=None if o["mode"] == -1 else int(o["mode"]),
            difficulty=None if o["difficulty"] == -1 else int(o["difficulty"]))
        self.ale = self._game.ale
        self.render_mode = render_mode
        ale = self.ale
        self._actions = list(ale.getLegalActionSet() if o["full_action_space"] else ale.getMinimalActionSet())
        self._noop, self._fire = ale_py.Action.NOOP, ale_py.Action(_FIRE)
        self._fire_reset = bool(o["use_fire_reset"]) and self._fire in self._actions
        self._skip, self._noop_max = int(o["frame_skip"]), int(o["noop_max"])
        self._episodic_life, self._reward_clip = bool(o["episodic_life"]), bool(o["reward_clip"])
        self._max_steps = int(max_episode_steps)
        self._gray = bool(o["gray_scale"])
        height, width = int(o["img_height"]), int(o["img_width"])
        self._channels = 1 if self._gray else 3
        self._interpolation = cv2.INTER_AREA if o["use_inter_area_resize"] else cv2.INTER_LINEAR
        screen = tuple(self._game.observation_space.shape)
        self._frames = (np.zeros(screen, np.uint8), np.zeros(screen, np.uint8))  # the last two
        self._resize = screen[:2] != (height, width)
        self._small = np.zeros((height, width, *screen[2:]), np.uint8)
        self._size = (width, height)
        self._stack = np.zeros((int(o["stack_num"]) * self._channels, height, width), np.uint8)
        self.observation_space = spaces.Box(0, 255, self._stack.shape, np.uint8)
        self.action_space = spaces.Discrete(len(self._actions))
        self._elapsed = 0
        self._lives = 0
        self._started = False

    # ================================================================ gymnasium's API
    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode: a new game (unless episodic life and a life lost), then no-ops and FIRE."""
        super().reset(seed=seed)
        ale = self.ale
        whole = (seed is not None or not self._started or not self._episodic_life
                 or ale.game_over() or self._elapsed >= self._max_steps)
        if whole:
            if seed is not None:
                self._game.seed_game(seed)
                self._game.load_game()
            ale.reset_game()
            self._elapsed = 0
            self._started = True
        noops = int(self.np_random.integers(1, self._noop_max + 1)) - self._fire_reset
        for _ in range(noops):
            ale.act(self._noop)
            if ale.game_over():
                ale.reset_game()
        if self._fire_reset:
            ale.act(self._fire)
        self._grab(0)
        self._push(self._frames[0], whole)
        self._lives = ale.lives()
        return self._stack.copy(), self._info(0.0)

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Repeat ``action`` for ``frame_skip`` frames (fewer if the game ends) and push a frame."""
        index = int(action)
        if not 0 <= index < len(self._actions):
            raise ValueError(f"action: expected an int in [0, {len(self._actions)}), got {action!r}")
        ale, act, skip = self.ale, self._actions[index], self._skip
        reward = 0.0
        ran = 0
        while ran < skip:
            reward += ale.act(act)
            ran += 1
            if ran == skip - 1:
                self._grab(1)  # the second-to-last frame, for the max over the last two
            if ale.game_over():
                break
        self._grab(0)
        frame = self._frames[0]
        if ran == skip and skip > 1:
            np.maximum(frame, self._frames[1], out=frame)
        self._push(frame, False)
        self._elapsed += 1
        lives, over = ale.lives(), ale.game_over()
        truncated = self._elapsed >= self._max_steps
        done = over or truncated or (self._episodic_life and 0 < lives < self._lives)
        self._lives = lives
        clipped = float(np.sign(reward)) if self._reward_clip else reward
        return self._stack.copy(), clipped, bool(done and not truncated), bool(truncated), \
            self._info(reward)

    def render(self) -> np.ndarray | None:  # type: ignore[override]
        """The ALE screen as RGB ``(210, 160, 3)`` with ``render_mode="rgb_array"``, else None."""
        return self.ale.getScreenRGB() if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        """Release the ALE."""
        self._game.close()

    # ================================================================ internals
    def _grab(self, frame: int) -> None:
        """Copy the screen into frame buffer ``frame`` (0: the last frame, 1: the one before)."""
        grab = self.ale.getScreenGrayscale if self._gray else self.ale.getScreenRGB
        grab(self._frames[frame])

    def _push(self, frame: np.ndarray, whole: bool) -> None:
        """Resize ``frame`` and push it on the stack (``whole``: into every slot)."""
        if self._resize:
            frame = self._cv2.resize(frame, self._size, dst=self._small,
                                     interpolation=self._interpolation)
        planes = frame[None] if self._gray else frame.transpose(2, 0, 1)
        c, stack = self._channels, self._stack
        if whole:
            stack.reshape(-1, c, *stack.shape[1:])[...] = planes
        else:
            stack[:-c] = stack[c:]
            stack[-c:] = planes

    def _info(self, reward: float) -> dict[str, Any]:
        ale = self.ale
        return {"lives": np.int32(ale.lives()), "reward": np.float32(reward),
                "terminated": np.int32(ale.game_over()), "ram": ale.getRAM(),
                "elapsed_step": np.int32(self._elapsed)}
