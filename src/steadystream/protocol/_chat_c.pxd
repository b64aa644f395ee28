# The compiled build of _chat_py.py (steadystream._build): the same source, these types.

cdef class ChatDialect:
    cdef object _envelope

    cpdef object decode(self, object item)

cdef object _content_of(object obj)
cdef object _general(object chunk, object obj, str payload)
