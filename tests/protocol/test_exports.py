"""The protocol package's public face: every name exists, and each module's API is in it."""

from __future__ import annotations

from steadystream import protocol
from steadystream.protocol import chat, chunks, dialect, openai, sse


def test_the_package_exports_every_module_api_once() -> None:
    assert all(hasattr(protocol, name) for name in protocol.__all__)
    assert len(set(protocol.__all__)) == len(protocol.__all__)
    modules = set(sse.__all__) | set(chunks.__all__) | set(openai.__all__)
    modules |= set(chat.__all__) | set(dialect.__all__)
    assert modules == set(protocol.__all__)


def test_openai_re_exports_the_chunk_api() -> None:
    # Callers import the whole OpenAI-compatible surface from protocol.openai.
    assert set(chunks.__all__) <= set(openai.__all__)
    assert openai.parse_chunk is chunks.parse_chunk
