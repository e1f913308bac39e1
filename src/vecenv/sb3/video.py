"""Record rendered frames of a VecEnv to mp4 files: :class:`VecVideoRecorder` (extra ``video``)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.error import DependencyNotInstalled

from vecenv.sb3.base import AssertionValueError, VecEnv, VecEnvObs, VecEnvStepReturn, VecEnvWrapper


class VideoDependencyNotInstalled(DependencyNotInstalled, ImportError):
    """The video extra is missing (SB3 raises gymnasium's ``DependencyNotInstalled``)."""


class VecVideoRecorder(VecEnvWrapper):
    """Save the tiled ``render()`` image of the envs as mp4 clips of ``video_length`` steps.

    A clip starts whenever ``record_video_trigger(step)`` is true (``step`` counts the
    ``step_wait`` calls since creation; it is checked at every reset too) and is written to
    ``<video_folder>/<name_prefix>-step-<start>-to-step-<end>.mp4``. The envs must use
    ``render_mode="rgb_array"``. Call ``close()`` to flush a clip still being recorded.
    """

    video_name: str
    video_path: str

    def __init__(self, venv: VecEnv, video_folder: str, record_video_trigger: Callable[[int], bool],
                 video_length: int = 200, name_prefix: str = "rl-video") -> None:
        VecEnvWrapper.__init__(self, venv)
        self.env = venv
        if self.env.render_mode != "rgb_array":
            raise AssertionValueError(
                f"The render_mode must be 'rgb_array', not {self.env.render_mode}"
            )
        try:
            import imageio.v2 as imageio
            import imageio_ffmpeg  # noqa: F401 - the mp4 backend imageio uses
        except ImportError as exc:
            raise VideoDependencyNotInstalled(
                "VecVideoRecorder needs imageio with ffmpeg: pip install 'vecenv[video]'"
            ) from exc
        self._imageio: Any = imageio
        metadata = getattr(venv.unwrapped, "metadata", None) or {}
        self.frames_per_sec = metadata.get("render_fps", 30)
        self.record_video_trigger = record_video_trigger
        self.video_folder = os.path.abspath(video_folder)
        os.makedirs(self.video_folder, exist_ok=True)
        self.name_prefix = name_prefix
        self.step_id = 0
        self.video_length = video_length
        self.recording = False
        self.recorded_frames: list[np.ndarray] = []

    def reset(self) -> VecEnvObs:
        obs = self.venv.reset()
        if self.record_video_trigger(self.step_id):
            self._start_video_recorder()
        return obs

    def step_wait(self) -> VecEnvStepReturn:
        result = self.venv.step_wait()
        self.step_id += 1
        if self.recording:
            self._capture_frame()
            if len(self.recorded_frames) > self.video_length:
                self._stop_recording()
        elif self.record_video_trigger(self.step_id):
            self._start_video_recorder()
        return result

    def _start_video_recorder(self) -> None:
        if self.recording:
            self._stop_recording()
        start, end = self.step_id, self.step_id + self.video_length
        self.video_name = f"{self.name_prefix}-step-{start}-to-step-{end}.mp4"
        self.video_path = os.path.join(self.video_folder, self.video_name)
        self.recording = True
        self._capture_frame()

    def _capture_frame(self) -> None:
        frame = self.env.render()
        if isinstance(frame, np.ndarray):
            self.recorded_frames.append(frame)
        else:
            warnings.warn(
                f"Recording stopped: render() returned {type(frame).__name__}, not an image",
                stacklevel=2,
            )
            self._stop_recording()

    def _stop_recording(self) -> None:
        frames, self.recorded_frames = self.recorded_frames, []
        self.recording = False
        if not frames:
            warnings.warn("No frames recorded; no video written", stacklevel=2)
            return
        with self._imageio.get_writer(
            self.video_path, fps=self.frames_per_sec, macro_block_size=1
        ) as writer:
            for frame in frames:
                height, width = np.shape(frame)[:2]  # padded with black to even sizes for H.264
                pad = ((0, height % 2), (0, width % 2), (0, 0))
                writer.append_data(np.pad(np.asarray(frame, dtype=np.uint8), pad))

    def close(self) -> None:
        """Close the envs, then write the clip being recorded, if any."""
        VecEnvWrapper.close(self)
        if self.recording:
            self._stop_recording()
