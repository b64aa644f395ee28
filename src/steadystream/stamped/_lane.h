/*
 * What the sources of steadystream.stamped._lane share: the lane's read path (_lane.c),
 * its cut of a body piece (_lane_cut.c) and its reactor (_lane_reactor.c). One extension,
 * built from the three (setup.py); nothing here is seen outside it (-fvisibility=hidden).
 */

#ifndef STEADYSTREAM_LANE_H
#define STEADYSTREAM_LANE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>


/* the chunk's keys the cut reads (interned in _lane.c) */
extern PyObject *s_error_key, *s_usage, *s_choices, *s_object, *s_finish_reason, *s_delta,
    *s_role, *s_content, *s_text;
extern PyObject *orjson_loads;

/* The exception being raised, taken aside and put back (PyErr_Fetch/Restore before 3.12,
 * deprecated since: one object there). */
#if PY_VERSION_HEX >= 0x030C0000
static inline PyObject *
raised_take(void)
{
    return PyErr_GetRaisedException();
}

static inline void
raised_put(PyObject *exc)
{
    PyErr_SetRaisedException(exc);
}
#else
static inline PyObject *
raised_take(void)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    if (type == NULL)
        return NULL;
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL && value != NULL)
        PyException_SetTraceback(value, traceback);
    Py_XDECREF(type);
    Py_XDECREF(traceback);
    return value;
}

static inline void
raised_put(PyObject *exc)
{
    if (exc == NULL)
        return;
    PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
    Py_DECREF(exc);
}
#endif

/* -- the cut (_lane_cut.c) -- */

typedef struct {
    PyObject *text; /* new reference */
    int32_t wire;
    int32_t text_bytes;
} Cut;

#define MAX_CUTS 256 /* events in one body piece the lane takes; more goes to Python */

int cut_body(const char *data, Py_ssize_t size, Cut *cuts);

/* -- the lane, as the reactor calls it (_lane.c) -- */

extern PyTypeObject LaneType;
PyObject *Lane_readable(PyObject *self, PyObject *unused);

/* -- the reactor (_lane_reactor.c) -- */

extern PyTypeObject ReactorType;

#endif
