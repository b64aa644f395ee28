# The compiled build of _line_py.py (steadystream._build): the same source, these types.

cimport cython


cdef class EventCutter:
    cdef object _decoder
    cdef object _dialect
    cdef bytearray _carry
    cdef public bint keep_raw
    cdef public Py_ssize_t max_event_bytes
    cdef public long long max_stream_events
    cdef long long _events

    @cython.locals(
        items=list, pieces=list, buf=bytes, offset=Py_ssize_t, end=Py_ssize_t,
        wire=Py_ssize_t, complete=Py_ssize_t, pending=Py_ssize_t, limit=Py_ssize_t,
        keep_raw=bint,
    )
    cpdef object feed(self, bytes data)


cdef class StreamLine:
    cdef object _attempt
    cdef object _buffer
    cdef object _ctx
    cdef EventCutter _cutter
    cdef object _now_ns
    cdef object _outlet
    cdef object _pause
    cdef bint _paused
    cdef object _progress
    cdef long long _received_ns
    cdef object _record
    cdef object _resume
    cdef object _rewriter
    cdef object _stamp
    cdef object _up
    cdef long long _usage_base
    cdef object _wake_guard
    cdef object _watchdog

    cpdef bint feed(self, long long stamp, bytes data)
    cdef void _arrived(self, object attempt, EventCutter cutter, long long now, object result)
    cdef void _advance(self, object attempt, object watchdog, long long now, list pieces)
    cdef void _hand_over(self, object watchdog, object out, long long now)
