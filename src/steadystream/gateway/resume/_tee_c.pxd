# The compiled build of _tee_py.py (steadystream._build): the same source, these types.

cimport cython

# C constants in the compiled build: a byte of ``data`` is compared as a C integer.
cdef Py_ssize_t _COLON
cdef Py_ssize_t _LF


cdef class StreamLog:
    cdef public list events
    cdef public Py_ssize_t size
    cdef public Py_ssize_t max_bytes
    cdef public object ended
    cdef public long long ended_ns
    cdef public object gone
    cdef list _waiters
    cdef list _news
    cdef object _news_token

    cpdef void add(self, list events, Py_ssize_t size)
    cpdef void keep(self, bytes event)
    cdef void _too_large(self)
    cdef void _told(self)


@cython.locals(event=bytes)
cpdef tuple stamp_events(bytes data, long long next_id)

@cython.locals(size=Py_ssize_t)
cdef bint _one_event(bytes data)

cdef bytes _stamped_one(bytes data, long long event_id)


cdef class StreamTee:
    cdef public str stream_id
    cdef public long long next_id
    cdef object _local
    cdef object _shared
    cdef object _scrub
    cdef public object watch

    @cython.locals(first=cython.longlong, count=Py_ssize_t, size=Py_ssize_t, events=list, event=bytes)
    cpdef bytes stamp(self, bytes data)
