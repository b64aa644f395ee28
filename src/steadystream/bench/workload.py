"""What to send: prompts from a JSONL file, the shipped prompt set, or synthetic prompts.

Token counts are given as people write them: ``256`` (fixed), ``uniform:100-400`` (whole
numbers, both ends included), ``normal:300,50`` (mean, standard deviation; rounded, at least
1). Request ``i`` draws everything from a generator seeded with ``(seed, i)``, so a run is
reproducible and any request can be rebuilt on its own.

Synthetic prompts are made of plain words, sized with the same estimate the timelines use
(about four characters a token): no tokenizer is downloaded. Each starts with its request
number, so a server's prefix cache cannot turn a load test into a cache test.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from steadystream._exceptions import InputError, SpecError
from steadystream.timeline import estimate_tokens

__all__ = [
    "MAX_TOKEN_COUNT",
    "Prompt",
    "RequestSpec",
    "TokenCount",
    "Workload",
    "builtin_prompts",
    "read_prompts",
]

_FIXED = re.compile(r"^\s*(\d+)\s*$")
_UNIFORM = re.compile(r"^\s*uniform\s*:\s*(\d+)\s*-\s*(\d+)\s*$", re.IGNORECASE)
_NORMAL = re.compile(
    r"^\s*normal\s*:\s*([0-9]*\.?[0-9]+)\s*,\s*([0-9]*\.?[0-9]+)\s*$", re.IGNORECASE
)


MAX_TOKEN_COUNT = 10_000_000
"""The largest token count a spec, a prompt file's ``max_tokens`` or ``--max-tokens`` may
ask for: past any model's context, and within what a request body can carry."""


def _bounded(value: float, name: str, text: str) -> None:
    if value > MAX_TOKEN_COUNT:
        raise SpecError(f"{name}: at most {MAX_TOKEN_COUNT:,} tokens, got {text!r}")


@dataclass(frozen=True, slots=True)
class TokenCount:
    """A token count: fixed, or drawn from a uniform or normal distribution."""

    kind: str  # "fixed", "uniform" or "normal"
    a: float
    b: float = 0.0

    @classmethod
    def parse(cls, text: str, *, name: str = "token count") -> TokenCount:
        if match := _FIXED.match(text):
            value = int(match[1])
            if value < 1:
                raise SpecError(f"{name}: must be at least 1, got {text!r}")
            _bounded(value, name, text)
            return cls("fixed", value)
        if match := _UNIFORM.match(text):
            low, high = int(match[1]), int(match[2])
            if not 1 <= low <= high:
                raise SpecError(f"{name}: uniform:LOW-HIGH needs 1 <= LOW <= HIGH, got {text!r}")
            _bounded(high, name, text)
            return cls("uniform", low, high)
        if match := _NORMAL.match(text):
            mean, sd = float(match[1]), float(match[2])
            if mean < 1:
                raise SpecError(f"{name}: normal:MEAN,SD needs MEAN >= 1, got {text!r}")
            _bounded(max(mean, sd), name, text)
            return cls("normal", mean, sd)
        raise SpecError(
            f"{name}: cannot read {text!r} (examples: 256, uniform:100-400, normal:300,50)"
        )

    def draw(self, rng: np.random.Generator) -> int:
        if self.kind == "fixed":
            return int(self.a)
        if self.kind == "uniform":
            return int(rng.integers(int(self.a), int(self.b) + 1))
        # A wide normal's tail is cut where a spec's own bound is: a draw never goes past it.
        return min(max(1, round(float(rng.normal(self.a, self.b)))), MAX_TOKEN_COUNT)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return str(int(self.a))
        if self.kind == "uniform":
            return f"uniform:{int(self.a)}-{int(self.b)}"
        return f"normal:{self.a:g},{self.b:g}"


@dataclass(frozen=True, slots=True)
class Prompt:
    """One prompt: chat messages, and the same text flattened for the completions endpoint."""

    messages: tuple[dict[str, str], ...]
    max_tokens: int | None = None

    @property
    def text(self) -> str:
        return "\n\n".join(m["content"] for m in self.messages)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """Everything about one request that does not depend on the endpoint's wire format."""

    index: int
    messages: tuple[dict[str, str], ...]
    max_tokens: int | None
    input_tokens: int  # estimated, for reports

    @property
    def prompt_text(self) -> str:
        return "\n\n".join(m["content"] for m in self.messages)


@dataclass(frozen=True, slots=True)
class Workload:
    """Builds request ``i`` of a run: a prompt, and how many tokens to ask for.

    ``prompts`` are used in a seeded random order; with ``input_tokens`` the prompts are
    synthetic instead. ``output_tokens`` draws each request's ``max_tokens``; ``max_tokens``
    caps it (and is the value sent when no distribution is given and the prompt has none).
    """

    prompts: tuple[Prompt, ...] = ()
    input_tokens: TokenCount | None = None
    output_tokens: TokenCount | None = None
    max_tokens: int | None = None
    seed: int = 0
    _words: tuple[str, ...] = field(default=(), repr=False)

    def __post_init__(self) -> None:
        if not self.prompts and self.input_tokens is None:
            raise SpecError("a workload needs prompts or --input-tokens")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise SpecError(f"--max-tokens must be at least 1, got {self.max_tokens}")
        if self.input_tokens is not None and not self._words:
            object.__setattr__(self, "_words", tuple(_word_pool()))

    def request(self, index: int) -> RequestSpec:
        rng = np.random.default_rng([self.seed, index])
        if self.input_tokens is not None:
            size = self.input_tokens.draw(rng)
            messages: tuple[dict[str, str], ...] = (
                {"role": "user", "content": self._synthetic(index, size, rng)},
            )
            prompt_max = None
        else:
            prompt = self.prompts[int(rng.integers(len(self.prompts)))]
            messages, prompt_max = prompt.messages, prompt.max_tokens
        wanted = self.output_tokens.draw(rng) if self.output_tokens is not None else prompt_max
        if wanted is None:
            wanted = self.max_tokens
        elif self.max_tokens is not None:
            wanted = min(wanted, self.max_tokens)
        size_estimate = sum(estimate_tokens(m["content"]) for m in messages)
        return RequestSpec(index, messages, wanted, size_estimate)

    def _synthetic(self, index: int, tokens: int, rng: np.random.Generator) -> str:
        words = self._words
        picks = rng.integers(len(words), size=tokens + 8)
        parts = [f"Request {index}."]
        chars, count = len(parts[0]), 1
        for pick in picks:
            # Same rule as estimate_tokens: the larger of words and characters / 4.
            if max(count, -(-chars // 4)) >= tokens:
                break
            word = words[int(pick)]
            parts.append(word)
            chars += len(word) + 1
            count += 1
        return " ".join(parts)

    def describe(self) -> str:
        if self.input_tokens is not None:
            source = f"synthetic prompts of {self.input_tokens} tokens"
        else:
            source = f"{len(self.prompts)} prompts"
        out = f", output {self.output_tokens}" if self.output_tokens is not None else ""
        cap = f", max_tokens {self.max_tokens}" if self.max_tokens is not None else ""
        return f"{source}{out}{cap}"


def builtin_prompts() -> tuple[Prompt, ...]:
    """The prompt set that ships with steadystream (varied tasks, short to long)."""
    data = resources.files("steadystream.bench").joinpath("prompts.jsonl").read_bytes()
    return _parse_prompts(data.splitlines(), "prompts.jsonl (built in)")


def read_prompts(path: str | Path) -> tuple[Prompt, ...]:
    """Prompts from a JSONL file: one object per line (docs/bench.md#prompt-files).

    Each line has ``messages`` (chat messages: ``role`` and ``content`` strings) or
    ``prompt`` (a string: one user message), and optionally ``max_tokens``.
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read prompts {path}: {exc.strerror}") from exc
    return _parse_prompts(data.splitlines(), str(path))


def _parse_prompts(lines: list[bytes], source: str) -> tuple[Prompt, ...]:
    prompts = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InputError(
                f"{where}: not UTF-8 text (byte 0x{line[exc.start]:02x} at column"
                f" {exc.start + 1}); a prompts file is JSONL in UTF-8"
            ) from None
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise InputError(f"{where}: not valid JSON ({exc})") from exc
        if not isinstance(record, dict):
            raise InputError(f"{where}: a line must hold a JSON object")
        prompts.append(_prompt(record, where))
    if not prompts:
        raise InputError(f"{source}: no prompts")
    return tuple(prompts)


def _prompt(record: dict[str, Any], where: str) -> Prompt:
    messages = record.get("messages")
    if messages is None:
        text = record.get("prompt")
        if not isinstance(text, str) or not text:
            raise InputError(f"{where}: needs 'messages' (a list) or 'prompt' (a string)")
        messages = [{"role": "user", "content": text}]
    if not isinstance(messages, list) or not messages:
        raise InputError(f"{where}: 'messages' must be a non-empty list")
    checked = []
    for message in messages:
        if not (
            isinstance(message, dict)
            and isinstance(message.get("role"), str)
            and isinstance(message.get("content"), str)
        ):
            raise InputError(f"{where}: each message needs 'role' and 'content' strings")
        checked.append({"role": message["role"], "content": message["content"]})
    max_tokens = record.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 1 <= max_tokens <= MAX_TOKEN_COUNT
    ):
        raise InputError(
            f"{where}: 'max_tokens' must be a whole number from 1 to {MAX_TOKEN_COUNT:,}"
        )
    return Prompt(tuple(checked), max_tokens)


def _word_pool() -> list[str]:
    # Words from the shipped prompts: synthetic text then reads like the real set, with its
    # mix of short and long words (which is what the four-characters-a-token rule assumes).
    words = {w.strip(".,;:!?()\"'").lower() for p in builtin_prompts() for w in p.text.split()}
    return sorted(w for w in words if w.isalpha())
