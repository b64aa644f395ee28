"""Peers' tools and their files: where `make peers` put each tool, and the fixtures' folder.

A peer's tool lives in its own virtual environment, once per machine, in the user's cache
(``$XDG_CACHE_HOME`` or ``~/.cache``, then ``steadystream/peers/NAME-VERSION``), or where
``STEADYSTREAM_<NAME>`` names its executable; the Makefile's ``peers`` target makes them.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from steadystream.timeline import Timeline

__all__ = ["AIPERF_VERSION", "BYTE_TOKENIZER", "DATA", "aiperf", "gaps_ns", "peer_tool"]

DATA = Path(__file__).parents[1] / "data" / "peers"
AIPERF_VERSION = "0.13.0"

BYTE_TOKENIZER = """\
import sys
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast
vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(sys.argv[1])
"""
"""A byte-level tokenizer built on the spot: AIPerf needs one, and none may be downloaded."""


def peer_tool(name: str, version: str, executable: str) -> Path:
    """The executable of a peer's tool: ``STEADYSTREAM_<NAME>``, else `make peers`' venv."""
    given = os.environ.get(f"STEADYSTREAM_{name.upper().replace('-', '_')}")
    if given:
        path = Path(given)
    else:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        path = cache / "steadystream" / "peers" / f"{name}-{version}" / "bin" / executable
    if not path.is_file():
        pytest.fail(f"{name} {version} is not installed ({path}): run `make peers`")
    return path


def aiperf() -> Path:
    """AIPerf's ``aiperf`` command, at the version the Makefile pins."""
    return peer_tool("aiperf", AIPERF_VERSION, "aiperf")


def gaps_ns(timeline: Timeline) -> np.ndarray:
    """The gaps between a stream's text events, in nanoseconds."""
    return np.diff(timeline.times[timeline.text_mask])
