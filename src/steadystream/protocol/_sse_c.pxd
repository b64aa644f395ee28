# The compiled build of _sse_py.py (steadystream._build): the same source, these types.

cimport cython


cdef class SseDecoder:
    cdef bytearray _partial
    cdef bint _skip_lf
    cdef bint _bom_checked
    cdef list _data
    cdef bytes _event_type
    cdef bint _in_block
    cdef object _id_buffer
    cdef object _last_id
    cdef object _retry
    cdef object _retry_since_dispatch
    cdef Py_ssize_t _item_bytes
    cdef bint _closed
    cdef object _incomplete

    cpdef list feed(self, data)
    cpdef list close(self)
    cdef SseDecoder _copy(self)
    @cython.locals(segments=list, segment=bytes, value=bytes, out=list)
    cdef list _whole_events(self, bytes data)
    cdef list _take_lines(self, list lines)
    cdef object _event(self, Py_ssize_t wire_bytes)
