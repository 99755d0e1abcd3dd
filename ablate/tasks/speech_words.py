"""Spoken-keyword classification from raw audio, synthesised offline with espeak-ng.

An offline stand-in for Speech Commands: each of ``words`` is rendered by espeak-ng for every
combination of ``voices``, ``speeds`` (words per minute) and ``pitches`` (0 … 99), resampled to
``sample_rate``. Renders, not samples, are split between train / validation / test (seeded), so
no recording appears in two splits. Each example places one render of its split at a random
offset in a ``duration``-second window (cropped if longer), with a random gain and white noise
at a random SNR in [``snr_min``, ``snr_max``] dB. Inputs are one feature per sample (16-bit,
standardised when loaded); sequences are ``sample_rate × duration`` long (8,000 by default).

Requires the ``espeak-ng`` program (``apt-get install espeak-ng``). Its output may differ
between espeak-ng versions; the version used is recorded in the cached file's metadata.
"""

from __future__ import annotations

import io
import itertools
import os
import shutil
import subprocess
import wave
from concurrent.futures import ThreadPoolExecutor
from math import gcd

import numpy as np
from pydantic import Field, field_validator, model_validator

from ablate.tasks.data import BuildContext, Generated
from ablate.tasks.registration import TaskParams, register_task

WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-029", "en-us+f2", "en-gb+f4", "en-us+m3", "en-gb-x-rp+f3")


class SpeechWordsParams(TaskParams):
    words: list[str] = Field(list(WORDS), min_length=2, description="the classes, in label order")
    voices: list[str] = Field(list(VOICES), min_length=1, description="espeak-ng voices (+variants)")
    speeds: list[int] = Field([130, 160, 190], min_length=1, description="speaking rates, words per minute")
    pitches: list[int] = Field([35, 50, 65], min_length=1, description="espeak-ng pitches, 0 … 99")
    sample_rate: int = Field(8_000, ge=1_000, le=22_050, description="Hz; espeak-ng renders at 22,050")
    duration: float = Field(1.0, gt=0.0, le=10.0, description="seconds per example")
    train_size: int = Field(2_000, ge=1)
    val_size: int = Field(250, ge=1)
    test_size: int = Field(250, ge=1)
    val_fraction: float = Field(0.1, gt=0.0, lt=0.5, description="share of renders kept for validation")
    test_fraction: float = Field(0.1, gt=0.0, lt=0.5, description="share of renders kept for testing")
    snr_min: float = Field(5.0, description="lowest signal-to-noise ratio, dB")
    snr_max: float = Field(30.0, description="highest signal-to-noise ratio, dB")

    def data_shape(self) -> tuple[int, int, int]:
        return self.train_size + self.val_size + self.test_size, int(self.sample_rate * self.duration), 1

    @field_validator("words")
    @classmethod
    def _words(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("words must be distinct")
        if any(not w.strip() or w.startswith("-") for w in v):
            raise ValueError("words must be non-empty text not starting with '-'")
        return v

    @field_validator("pitches")
    @classmethod
    def _pitch_range(cls, v: list[int]) -> list[int]:
        if any(not 0 <= q <= 99 for q in v):
            raise ValueError("espeak-ng pitches lie in 0 … 99")
        return v

    @field_validator("speeds")
    @classmethod
    def _speed_range(cls, v: list[int]) -> list[int]:
        if any(not 80 <= q <= 450 for q in v):
            raise ValueError("espeak-ng speeds lie in 80 … 450 words per minute")
        return v

    @model_validator(mode="after")
    def _ranges(self) -> SpeechWordsParams:
        if self.snr_min > self.snr_max:
            raise ValueError(f"snr_min ({self.snr_min}) must not exceed snr_max ({self.snr_max})")
        renders = len(self.voices) * len(self.speeds) * len(self.pitches)
        if round(renders * self.val_fraction) < 1 or round(renders * self.test_fraction) < 1:
            raise ValueError(
                f"{renders} renders per word leave none for validation or testing; "
                "add voices, speeds or pitches, or raise val_fraction / test_fraction"
            )
        return self

    @property
    def length(self) -> int:
        return round(self.sample_rate * self.duration)


def espeak() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise FileNotFoundError(
            "speech_words needs the espeak-ng program: `sudo apt-get install espeak-ng` (Debian/Ubuntu)"
        )
    return path


def espeak_version() -> str:
    return subprocess.run([espeak(), "--version"], capture_output=True, text=True).stdout.strip()


def render(word: str, voice: str, speed: int, pitch: int, sample_rate: int) -> np.ndarray:
    """One utterance as float32 in [-1, 1] at ``sample_rate``, leading/trailing silence trimmed."""
    from scipy.signal import resample_poly  # only when generating

    cmd = [espeak(), "-v", voice, "-s", str(speed), "-p", str(pitch), "--stdout", word]
    out = subprocess.run(cmd, capture_output=True, check=False)
    if out.returncode != 0 or len(out.stdout) < 100:
        raise RuntimeError(f"`{' '.join(cmd)}` failed: {out.stderr.decode(errors='replace')[-500:]}")
    with wave.open(io.BytesIO(out.stdout)) as w:
        rate = w.getframerate()
        audio = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768
    loud = np.flatnonzero(np.abs(audio) > 0.01)
    audio = audio[loud[0] : loud[-1] + 1] if len(loud) else audio
    g = gcd(sample_rate, rate)
    return resample_poly(audio, sample_rate // g, rate // g).astype(np.float32)


def place(
    rng: np.random.Generator, audio: np.ndarray, length: int, snr_min: float, snr_max: float
) -> np.ndarray:
    """``audio`` at a random offset in a window of ``length`` with random gain and white noise."""
    out = np.zeros(length, dtype=np.float32)
    if len(audio) > length:
        start = rng.integers(0, len(audio) - length + 1)
        audio = audio[start : start + length]
    offset = rng.integers(0, length - len(audio) + 1)
    gain = rng.uniform(0.3, 1.0) / max(float(np.abs(audio).max()), 1e-6)
    out[offset : offset + len(audio)] = audio * gain
    power = float(np.mean((audio * gain) ** 2))
    snr = rng.uniform(snr_min, snr_max)
    out += rng.normal(0.0, np.sqrt(power / 10 ** (snr / 10)), size=length).astype(np.float32)
    return out


@register_task("speech_words", SpeechWordsParams, version=1)
def build(p: SpeechWordsParams, ctx: BuildContext) -> Generated:
    combos = list(itertools.product(p.voices, p.speeds, p.pitches))
    jobs = [(w, *c) for w in p.words for c in combos]
    ctx.reporter.stage("speaking", total=len(jobs))
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1)) as pool:
        audio = []
        for a in pool.map(lambda j: render(*j, p.sample_rate), jobs):
            audio.append(a)
            ctx.reporter.advance()

    rng = np.random.default_rng(np.random.SeedSequence([p.seed, 0]))
    n_val, n_test = round(len(combos) * p.val_fraction), round(len(combos) * p.test_fraction)
    # Each word's renders are split separately, so every split has every word.
    pools: dict[str, list[np.ndarray]] = {"train": [], "val": [], "test": []}
    for label in range(len(p.words)):
        order = label * len(combos) + rng.permutation(len(combos))
        pools["test"].append(order[:n_test])
        pools["val"].append(order[n_test : n_test + n_val])
        pools["train"].append(order[n_test + n_val :])

    sizes = {"train": p.train_size, "val": p.val_size, "test": p.test_size}
    ctx.reporter.stage("mixing", total=sum(sizes.values()))
    splits = {}
    for stream, split in enumerate(("train", "val", "test"), start=1):
        split_rng = np.random.default_rng(np.random.SeedSequence([p.seed, stream]))
        y = split_rng.permutation(np.resize(np.arange(len(p.words), dtype=np.int16), sizes[split]))
        x = np.empty((sizes[split], p.length), dtype=np.int16)
        used = np.zeros(len(p.words), dtype=np.int64)
        for row, label in enumerate(y):  # classes balanced, and each class's renders used in turn
            renders = pools[split][label]
            wave_ = place(
                split_rng, audio[renders[used[label] % len(renders)]], p.length, p.snr_min, p.snr_max
            )
            used[label] += 1
            x[row] = np.clip(np.round(wave_ * 32767), -32768, 32767)
            ctx.reporter.advance()
        splits[split] = (x, y)
    scale = float(np.std(splits["train"][0].astype(np.float64))) or 1.0
    return Generated(
        splits=splits,
        input_kind="continuous",
        num_classes=len(p.words),
        output_kind="classification",
        x_scale=scale,
        extra={"espeak_ng": espeak_version(), "words": p.words},
    )
