"""The wire protocols: server-sent events, the dialects a stream comes in, OpenAI chunks.

Pure code, no I/O: bytes in, events and timelines out (and the reverse for servers).
"""

from steadystream.protocol.chat import chat_dialect
from steadystream.protocol.chunks import (
    Chunk,
    chat_chunk,
    classify_chunk,
    completion_chunk,
    encode_chunk,
    error_payload,
    is_done,
    parse_chunk,
    usage_chunk,
)
from steadystream.protocol.dialect import Decoded, Dialect
from steadystream.protocol.openai import StreamRecorder, timeline_from_sse
from steadystream.protocol.sse import (
    DONE,
    SseComment,
    SseDecoder,
    SseEvent,
    SseItem,
    encode_comment,
    encode_event,
    new_decoder,
)

__all__ = [
    "DONE",
    "Chunk",
    "Decoded",
    "Dialect",
    "SseComment",
    "SseDecoder",
    "SseEvent",
    "SseItem",
    "StreamRecorder",
    "chat_chunk",
    "chat_dialect",
    "classify_chunk",
    "completion_chunk",
    "encode_chunk",
    "encode_comment",
    "encode_event",
    "error_payload",
    "is_done",
    "new_decoder",
    "parse_chunk",
    "timeline_from_sse",
    "usage_chunk",
]
