"""Per-key image preprocessing of a flattened ``Dict`` observation (``collector.image_keys``).

A camera key of a ``Dict`` observation gets the Atari-style preprocessing the pixel envs of
:mod:`collector.atari` apply to a whole frame, chosen per key::

    collector:
      image_keys: {image: {grayscale: true, resize: [84, 84], frame_stack: 4}}

Each frame of the key, ``[H, W]``, ``[H, W, C]`` or ``[C, H, W]`` uint8, is turned to grayscale
(ITU-R 601 luma, as OpenCV's ``RGB2GRAY``), resized (OpenCV's ``INTER_AREA``, as gymnasium's
``AtariPreprocessing``; needs ``opencv-python-headless``, the ``atari`` extra) and the last
``frame_stack`` frames are stacked channels first, the first frame of an episode repeated (as
``FrameStackObservation`` does): the key becomes ``[frame_stack * channels, height, width]``
uint8, which the multi-input encoder takes with the CNN torso
(:mod:`collector.networks.encoders`).

The preprocessing is part of the run's :class:`~collector.envs.spaces.ObservationLayout`
(``layout.images``, bound to each key's raw shape), so collectors, evaluation and
``load_policy`` all build it from the network spec: :class:`ImageObservation` wraps the
flattened env, :class:`ImageInputs` preprocesses raw frames handed to ``Policy.act``.

Examples:
    >>> from collector.envs.spaces import FlatObservation
    >>> from collector.envs.testing import CameraEnv
    >>> images = parse({"image": {"grayscale": True, "resize": [36, 36], "frame_stack": 2}})
    >>> env = structured_images(FlatObservation(CameraEnv(size=48)), images)
    >>> obs, _ = env.reset(seed=0)
    >>> {k: (v.shape, v.dtype.name) for k, v in obs.items()}
    {'image': ((2, 36, 36), 'uint8'), 'state': ((4,), 'float32')}
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from collector.config import MIN_IMAGE_SIDE as MIN_SIDE
from collector.config import image_key_options

FIELD = "collector.image_keys"
LUMA = np.array([0.299, 0.587, 0.114], np.float32)


@dataclasses.dataclass(frozen=True)
class ImageKey:
    """The preprocessing of one image key.

    Attributes:
        key: The key path (``collector.envs.spaces``), e.g. ``image`` or ``cams.0``.
        grayscale: Turn ``C = 3`` (or 4, alpha dropped) channels into one.
        resize: ``(height, width)`` of the resized frame; ``()``: as it is.
        frame_stack: Frames per observation (1: no stacking).
        raw_shape: The env's shape of the key (set by :func:`bind`; ``()`` before).
    """

    key: str
    grayscale: bool = False
    resize: tuple[int, ...] = ()
    frame_stack: int = 1
    raw_shape: tuple[int, ...] = ()

    @property
    def raw_hwc(self) -> tuple[int, int, int]:
        """``(height, width, channels)`` of the raw frame."""
        from collector.envs.spaces import channels_last

        shape = self.raw_shape
        if len(shape) == 2:
            return shape[0], shape[1], 1
        if channels_last(shape):
            return shape[0], shape[1], shape[2]
        return shape[1], shape[2], shape[0]

    @property
    def frame_shape(self) -> tuple[int, int, int]:
        """``(channels, height, width)`` of one preprocessed frame."""
        height, width, channels = self.raw_hwc
        if self.resize:
            height, width = self.resize
        return (1 if self.grayscale else channels), height, width

    @property
    def shape(self) -> tuple[int, int, int]:
        """The key's shape as the network sees it: ``[frame_stack * channels, height, width]``."""
        channels, height, width = self.frame_shape
        return channels * self.frame_stack, height, width

    def frames(self, batch: np.ndarray) -> np.ndarray:
        """Raw frames ``[B, *raw_shape]`` -> preprocessed frames ``[B, C, H, W]`` uint8."""
        batch = np.asarray(batch, np.uint8)
        if len(self.raw_shape) == 2:
            batch = batch[..., None]
        elif not _channels_last(self.raw_shape):
            batch = batch.transpose(0, 2, 3, 1)
        if self.grayscale and batch.shape[-1] > 1:
            gray = batch[..., :3].astype(np.float32) @ LUMA
            batch = np.clip(np.rint(gray), 0, 255).astype(np.uint8)[..., None]
        if self.resize and tuple(batch.shape[1:3]) != tuple(self.resize):
            import cv2

            size = (self.resize[1], self.resize[0])  # OpenCV's (width, height)
            out = [
                cv2.resize(np.ascontiguousarray(frame), size, interpolation=cv2.INTER_AREA)
                for frame in batch
            ]
            batch = np.stack([o if o.ndim == 3 else o[..., None] for o in out])
        return np.ascontiguousarray(batch.transpose(0, 3, 1, 2))


def _channels_last(shape: tuple[int, ...]) -> bool:
    from collector.envs.spaces import channels_last

    return channels_last(shape)


def parse(options: Mapping[str, Any] | None) -> tuple[ImageKey, ...]:
    """``collector.image_keys`` as :class:`ImageKey` entries (not bound to an env yet).

    Raises:
        ValueError: ``image_keys: <key>: ...`` naming the key and the option
            (:func:`collector.config.image_key_options`).
    """
    return tuple(
        ImageKey(key, *image_key_options(key, opts)) for key, opts in dict(options or {}).items()
    )


def bind(layout, images: Sequence[ImageKey], *, env_id: str = "the env"):
    """``layout`` with each image key preprocessed (its leaf reshaped, ``layout.images`` set).

    Args:
        layout: The flattened observation's :class:`~collector.envs.spaces.ObservationLayout`.
        images: The keys to preprocess (:func:`parse`).
        env_id: Named in refusals.

    Raises:
        ValueError: Naming ``collector.image_keys`` and the key: not a key of the observation,
            not a uint8 image ``[H, W]``/``[H, W, C]``/``[C, H, W]``, smaller than the CNN
            takes, or resized without OpenCV.
    """
    from collector.envs.spaces import Leaf

    if not images:
        return layout
    if not layout.keyed:
        raise ValueError(
            f"{FIELD}: preprocesses keys of a Dict/Tuple observation; {env_id} has one "
            f"observation array (preprocess it in the env, as collector.atari does); got "
            f"{[image.key for image in images]}"
        )
    by_key = {leaf.key: leaf for leaf in layout.leaves}
    bound = {}
    for image in images:
        leaf = by_key.get(image.key)
        if leaf is None:
            raise ValueError(
                f"{FIELD}: {image.key!r} is not an observation key of {env_id} (its keys: "
                f"{sorted(by_key)})"
            )
        raw = tuple(leaf.shape)
        if leaf.dtype != "uint8" or len(raw) not in (2, 3):
            raise ValueError(
                f"{FIELD}: {image.key!r} of {env_id} is not an image (a uint8 Box [H, W], "
                f"[H, W, C] or [C, H, W]); it is {leaf.dtype} {list(raw)}"
            )
        image = dataclasses.replace(image, raw_shape=raw)
        if image.grayscale and image.raw_hwc[2] not in (1, 3, 4):
            raise ValueError(
                f"{FIELD}: {image.key!r}: grayscale takes 1, 3 or 4 channels, {env_id}'s "
                f"frames have {image.raw_hwc[2]}"
            )
        if min(image.shape[1:]) < MIN_SIDE:
            raise ValueError(
                f"{FIELD}: {image.key!r}: frames of {list(image.shape[1:])} are smaller than "
                f"the CNN takes ({MIN_SIDE} a side); resize them"
            )
        if image.resize:
            try:
                import cv2  # noqa: F401
            except ImportError:
                raise ValueError(
                    f'{FIELD}: {image.key!r}: resize needs OpenCV: pip install "relayrl[atari]"'
                ) from None
        bound[image.key] = image
    leaves = tuple(
        Leaf(leaf.key, "image", bound[leaf.key].shape, "uint8") if leaf.key in bound else leaf
        for leaf in layout.leaves
    )
    return dataclasses.replace(layout, leaves=leaves, images=tuple(bound.values()))


class FrameStacks:
    """The last ``frame_stack`` preprocessed frames of a batch of episodes, per image key.

    Args:
        images: Bound :class:`ImageKey` entries.
    """

    def __init__(self, images: Sequence[ImageKey]) -> None:
        self.images = {image.key: image for image in images}
        self.stacks: dict[str, np.ndarray] = {}

    def reset(self) -> None:
        """Forgets the frames: the next ones start episodes."""
        self.stacks.clear()

    def push(self, key: str, raw: np.ndarray) -> np.ndarray:
        """Preprocesses raw frames ``[B, *raw_shape]``; returns the stacks ``[B, *shape]``."""
        image = self.images[key]
        frames = image.frames(raw)
        size = image.frame_stack
        stack = self.stacks.get(key)
        if size == 1:
            return frames
        if stack is None or len(stack) != len(frames):
            stack = np.repeat(frames[:, None], size, axis=1)
        else:
            stack = np.concatenate([stack[:, 1:], frames[:, None]], axis=1)
        self.stacks[key] = stack
        return stack.reshape(len(frames), *image.shape)


class ImageObservation(gym.Wrapper):
    """Preprocesses the image keys of a flattened env's observations (see the module docstring).

    Args:
        env: An env returning flat observation dicts (:class:`collector.envs.spaces.
            FlatObservation`, whose ``layout`` it reads).
        images: The keys' preprocessing (:func:`parse`; bound here).
        env_id: Named in refusals.
    """

    def __init__(self, env: gym.Env, images: Sequence[ImageKey], *, env_id: str = "the env"):
        from collector.envs.spaces import flat_space

        super().__init__(env)
        self.layout = bind(env.layout, images, env_id=env_id)
        self.observation_space = flat_space(self.layout)
        self.stacks = FrameStacks(self.layout.images)

    def _observe(self, observation: dict) -> dict:
        out = dict(observation)
        for key in self.stacks.images:
            out[key] = self.stacks.push(key, np.asarray(observation[key])[None])[0]
        return out

    def reset(self, **kwargs):
        """Resets the env and the frame stacks."""
        observation, info = self.env.reset(**kwargs)
        self.stacks.reset()
        return self._observe(observation), info

    def step(self, action):
        """Steps the env; the newest frame joins each stack."""
        observation, reward, terminated, truncated, info = self.env.step(action)
        return self._observe(observation), reward, terminated, truncated, info


def structured_images(env: gym.Env, images: Sequence[ImageKey], *, env_id: str = "the env"):
    """``env`` (flattened) wrapped by :class:`ImageObservation` if ``images`` names keys."""
    return ImageObservation(env, images, env_id=env_id) if images else env


def images_of(spec: Any) -> tuple[ImageKey, ...]:
    """The bound image keys of a network spec's layout (a user's spec's base's); () if none."""
    layout = getattr(spec, "layout", None) or getattr(getattr(spec, "base", None), "layout", None)
    return tuple(getattr(layout, "images", ()) or ())


def frame_key_of(spec: Any, frame_stack: int) -> str:
    """The image key whose stacks a frame-deduplicated replay stores once (``""``: none).

    The one preprocessed key stacking ``frame_stack`` frames (``replay.frame_stack``).
    """
    keys = [i.key for i in images_of(spec) if frame_stack and i.frame_stack == frame_stack]
    return keys[0] if len(keys) == 1 else ""


class ImageInputs:
    """Preprocesses raw image keys handed to ``Policy.act`` (already preprocessed ones pass).

    A value of the key's raw shape (or ``[B, *raw_shape]``) is preprocessed and stacked with
    the frames before it, the episode's first frame repeated, until :meth:`reset`; one of the
    preprocessed shape is taken as it is (e.g. from envs built by the run's collectors).

    Args:
        images: The layout's bound image keys.
    """

    def __init__(self, images: Sequence[ImageKey]) -> None:
        self.stacks = FrameStacks(images)

    def reset(self) -> None:
        """A new episode: the frame stacks start again."""
        self.stacks.reset()

    def __call__(self, key: str, value: Any) -> Any:
        """``value`` of image ``key`` preprocessed if it has the raw shape, else as it is."""
        image = self.stacks.images.get(key)
        if image is None or image.raw_shape == image.shape:
            return value
        array = value.cpu().numpy() if hasattr(value, "cpu") else np.asarray(value)
        if tuple(array.shape) == image.raw_shape:
            return self.stacks.push(key, array[None])[0]
        if tuple(array.shape[1:]) == image.raw_shape:
            return self.stacks.push(key, array)
        return value
