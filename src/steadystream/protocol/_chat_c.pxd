# The compiled build of _chat_py.py (steadystream._build): the same source, these types.

cimport cython


cdef class ChatDialect:
    cdef object _envelope

    @cython.locals(payload=str, event=str)
    cpdef object decode(self, object item)

@cython.locals(chunk=dict, choices=list, choice=dict, delta=dict)
cdef object _content_of(object obj)
cdef object _general(object chunk, object obj, str payload)
