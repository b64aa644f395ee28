/*
 * steadystream.stamped._lane: the reactor, every native lane of one event loop read from
 * one epoll set whose descriptor the loop watches (stamped/native.py reactor_for).
 */

#define _GNU_SOURCE
#include "_lane.h"

/* One epoll set holds the sockets of a loop's native lanes; the loop watches its descriptor
 * (loop.add_reader) and calls run(), which reads every lane that is readable in one pass.
 * The loop's own way costs a callback through it per socket and per read; a burst of reads
 * (an engine step makes every stream readable at once) costs one here. */
typedef struct {
    PyObject_HEAD
    int epfd;
    PyObject *lanes; /* dict: fd -> Lane */
} Reactor;

#define REACTOR_BATCH 512

static PyObject *
Reactor_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) || (kwargs != NULL && PyDict_GET_SIZE(kwargs))) {
        PyErr_SetString(PyExc_TypeError, "Reactor() takes no arguments");
        return NULL;
    }
    Reactor *self = (Reactor *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->epfd = -1;
    self->lanes = PyDict_New();
    if (self->lanes == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (self->epfd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static PyObject *
Reactor_add(Reactor *self, PyObject *args)
{
    int fd;
    PyObject *lane;
    if (!PyArg_ParseTuple(args, "iO!:add", &fd, &LaneType, &lane))
        return NULL;
    if (self->epfd < 0) {
        PyErr_SetString(PyExc_RuntimeError, "the reactor is closed");
        return NULL;
    }
    struct epoll_event event;
    memset(&event, 0, sizeof event);
    event.events = EPOLLIN;
    event.data.fd = fd;
    if (epoll_ctl(self->epfd, EPOLL_CTL_ADD, fd, &event) < 0) {
        if (errno != EEXIST || epoll_ctl(self->epfd, EPOLL_CTL_MOD, fd, &event) < 0)
            return PyErr_SetFromErrno(PyExc_OSError);
    }
    PyObject *key = PyLong_FromLong(fd);
    if (key == NULL)
        return NULL;
    int rc = PyDict_SetItem(self->lanes, key, lane);
    Py_DECREF(key);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *
Reactor_remove(Reactor *self, PyObject *arg)
{
    int fd = PyLong_AsLong(arg);
    if (fd == -1 && PyErr_Occurred())
        return NULL;
    if (self->epfd >= 0)
        epoll_ctl(self->epfd, EPOLL_CTL_DEL, fd, NULL); /* (ENOENT, EBADF: not there) */
    if (PyDict_DelItem(self->lanes, arg) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            return NULL;
        PyErr_Clear();
    }
    Py_RETURN_NONE;
}

static PyObject *
Reactor_run(Reactor *self, PyObject *Py_UNUSED(ignored))
{
    if (self->epfd < 0)
        Py_RETURN_NONE;
    struct epoll_event events[REACTOR_BATCH];
    int n;
    do {
        n = epoll_wait(self->epfd, events, REACTOR_BATCH, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    PyObject *first_error = NULL;
    for (int i = 0; i < n; i++) {
        PyObject *key = PyLong_FromLong(events[i].data.fd);
        if (key == NULL)
            goto failed;
        /* Looked up now: a lane read before this one may have stopped this one's reading
         * (and its descriptor been reused): an event for a socket no lane reads is dropped. */
        PyObject *lane = PyDict_GetItemWithError(self->lanes, key);
        Py_DECREF(key);
        if (lane == NULL) {
            if (PyErr_Occurred())
                goto failed;
            continue;
        }
        Py_INCREF(lane);
        PyObject *done = Lane_readable(lane, NULL);
        Py_DECREF(lane);
        if (done != NULL) {
            Py_DECREF(done);
            continue;
        }
    failed:
        /* One lane's error is the loop's to report; the other lanes are still read. */
        if (first_error == NULL)
            first_error = raised_take();
        else
            PyErr_WriteUnraisable((PyObject *)self);
    }
    if (first_error != NULL) {
        raised_put(first_error);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
Reactor_fileno(Reactor *self, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLong(self->epfd);
}

static PyObject *
Reactor_close(Reactor *self, PyObject *Py_UNUSED(ignored))
{
    if (self->epfd >= 0) {
        close(self->epfd);
        self->epfd = -1;
    }
    PyDict_Clear(self->lanes);
    Py_RETURN_NONE;
}

static PyObject *
Reactor_len(Reactor *self, void *Py_UNUSED(closure))
{
    return PyLong_FromSsize_t(PyDict_GET_SIZE(self->lanes));
}

static int
Reactor_traverse(Reactor *self, visitproc visit, void *arg)
{
    Py_VISIT(self->lanes);
    return 0;
}

static int
Reactor_clear(Reactor *self)
{
    Py_CLEAR(self->lanes);
    return 0;
}

static void
Reactor_dealloc(Reactor *self)
{
    PyObject_GC_UnTrack(self);
    if (self->epfd >= 0)
        close(self->epfd);
    Reactor_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Reactor_methods[] = {
    {"add", (PyCFunction)Reactor_add, METH_VARARGS,
     "add(fd, lane): read fd with the lane whenever it is readable (level-triggered)."},
    {"remove", (PyCFunction)Reactor_remove, METH_O, "Stop reading fd (whatever its lane)."},
    {"run", (PyCFunction)Reactor_run, METH_NOARGS,
     "The loop's reader callback: read every readable lane once."},
    {"fileno", (PyCFunction)Reactor_fileno, METH_NOARGS, "The descriptor the loop watches."},
    {"close", (PyCFunction)Reactor_close, METH_NOARGS, "Close it, and forget every lane."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Reactor_getset[] = {
    {"watched", (getter)Reactor_len, NULL, "How many sockets it reads.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject ReactorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "steadystream.stamped._lane.Reactor",
    .tp_basicsize = sizeof(Reactor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The native lanes of one event loop, read from one epoll set.",
    .tp_new = Reactor_new,
    .tp_dealloc = (destructor)Reactor_dealloc,
    .tp_traverse = (traverseproc)Reactor_traverse,
    .tp_clear = (inquiry)Reactor_clear,
    .tp_methods = Reactor_methods,
    .tp_getset = Reactor_getset,
};
