# The compiled build of _tee_py.py (steadystream._build): the same source, these types.

cimport cython


@cython.locals(size=Py_ssize_t, start=Py_ssize_t, end=Py_ssize_t, cut=Py_ssize_t, event=bytes)
cpdef tuple stamp_events(bytes data, long long next_id)


cdef class StreamTee:
    cdef public str stream_id
    cdef public long long next_id
    cdef object _local
    cdef object _shared
    cdef object _scrub
    cdef public object watch

    @cython.locals(first=cython.longlong, count=Py_ssize_t, size=Py_ssize_t, events=list)
    cpdef bytes stamp(self, bytes data)
