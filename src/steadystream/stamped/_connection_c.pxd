# The compiled build of _connection_py.py (steadystream._build): the same source, these types.

cdef class StampedConnection:
    cdef public object target
    cdef public object clock
    cdef public object mode
    cdef public Py_ssize_t unstamped_reads
    cdef object _sock
    cdef object _tls
    cdef object _read_timeout_s
    cdef object _loop
    cdef object _wall
    cdef object _now_ns
    cdef long long _offset_ns
    cdef bint _draining
    cdef object _pending
    cdef object _lock
    cdef bint _reading
    cdef bint _hung_up
    cdef bint _closed
    cdef long long _stamp
    cdef Py_ssize_t _head_bytes
    cdef Py_ssize_t _head_read
    cdef dict _headers
    cdef bytes _header_name
    cdef object _head
    cdef bint _interim
    cdef bint _framed
    cdef list _early
    cdef Py_ssize_t _early_bytes
    cdef object _sink
    cdef bint _paused
    cdef bint _complete
    cdef bint _stopped
    cdef object _waiter
    cdef object _error
    cdef double _last_activity
    cdef object _timer
    cdef object _rescuer
    cdef object _parser

    cpdef bint pull(self)
    cdef bint _pull(self)
    cpdef void drain(self)
    cdef void _drain(self, object pending)
    cpdef void on_body(self, bytes body)
