/*
 * steadystream.stamped._lane: the stamped connection's read path in C (Linux only).
 *
 * What it is for (docs/performance.md, "The native lane"): the gateway's hot path per
 * upstream read is a read callback, an HTTP parse, an SSE cut, a write to the client and a
 * few records. In Python that is some twenty calls per read; here it is one callback.
 *
 * What it does, and nothing more:
 *
 * - Lane.readable() reads the socket when the loop says it is readable (Reactor.run, which
 *   the loop calls for every lane of the loop at once). It reads as
 *   StampedConnection.pull() does (recvmsg with the kernel's receive stamp, or recv and the
 *   monotonic clock) and, when the connection is in its body and nothing waits before this
 *   read, feeds the bytes to the connection's own httptools parser as
 *   StampedConnection.drain() would. Any other case goes to the Python code unchanged: the
 *   read is queued as pull() queues it and drain() runs.
 * - Lane.on_body() is the parser's body callback. Once armed (the express lane of one
 *   upstream attempt, gateway/attempt.py), a body piece made only of whole content events
 *   that the client can take now is cut, written to the client as one HTTP/1.1 chunk
 *   (straight to its socket where nothing but TCP lies between, else through its transport)
 *   and recorded here, exactly as the Python lane would have; anything else (a role or
 *   finish chunk, [DONE], a comment, a half event, a busy client) goes to the connection's
 *   Python on_body, before anything was changed.
 * - The records wait here (both edges' times, sizes and texts) until Python takes them
 *   (Lane.take_records), which it does before it reads or adds to the stream's records.
 *
 * It holds the GIL throughout and keeps process-wide state (one read buffer, the orjson
 * function, the collector switched off for a moment): CPython with its GIL only.
 *
 * The Python objects stay the truth: this code reads their attributes (the reader's idle
 * flag, the buffer's queue, the client's write buffer) at each read, as the Python lane
 * does, and declines whenever one of them says no.
 */

#define _GNU_SOURCE /* memmem */
#include "_lane.h"

#include <structmember.h>

#define READ_SIZE (1 << 16)
#ifndef SO_TIMESTAMPNS
#define SO_TIMESTAMPNS 35
#endif

/* One read at a time: every call holds the GIL and none re-enters (the parser calls
 * on_body, never readable), so one buffer serves every lane of the process. */
static char read_buffer[READ_SIZE];

PyObject *orjson_loads;

/* interned attribute names (the chunk's keys shared with _lane_cut.c) */
PyObject *s_error_key, *s_usage, *s_choices, *s_object, *s_finish_reason, *s_delta, *s_role,
    *s_content, *s_text;
static PyObject *s_rescuer, *s_loop_work, *s_closed, *s_error, *s_complete, *s_stopped,
    *s_head, *s_sink, *s_parser, *s_taken, *s_draining,
    *s_stamp, *s_queueing, *s_unstamped_reads, *s_drain, *s_read_now, *s_let_go, *s_drained,
    *s_feed_failed, *s_on_body, *s_on_message_complete, *s_idle, *s_failure, *s_whole, *s_keep_raw, *s_envelope,
    *s_last_token_ns, *s_busy, *s_append;

typedef struct {
    PyObject_HEAD
    /* the connection's side, set when it is made */
    PyObject *conn;       /* StampedConnection */
    int fd;
    int kernel;           /* recvmsg with SO_TIMESTAMPNS, else recv and the clock */
    long long offset_ns;  /* wall-clock stamp -> monotonic clock */
    int pulling;          /* StampedConnection.pull() is reading the socket (the rescuer) */
    PyObject *pending;    /* conn._pending: reads waiting for drain() */
    PyObject *queued;     /* conn._queued: pieces waiting for the reader */
    PyObject *feed;       /* parser.feed_data, once bound */
    PyObject *rescuer;    /* conn._rescuer, once set (it never changes after) */
    int in_body;          /* head, sink and parser seen: only a close undoes it (release) */
    double last_activity; /* CLOCK_MONOTONIC seconds of the last read (the read timeout's) */
    /* the read being fed (feed_now), and what happened in it */
    int feeding;
    int fell_back;        /* Python code got a body piece: it may have changed anything */
    long long stamp;
    long takes;           /* pieces taken in C (conn._taken not counted: see feed_now) */
    long long taken_before; /* conn._taken when Python code first ran in the feed */
    Py_ssize_t queued_before;
    /* the express lane's side, set by arm() */
    int armed;
    int envelope_seen;
    int seen_token;
    long held;            /* the Python lane's reads whose records are still to come */
    int taking;           /* inside take(): a release() meanwhile waits for its end */
    int release_due;
    PyObject *attempt;
    PyObject *cutter;
    PyObject *watchdog;
    PyObject *waiting;    /* the stream buffer's queue */
    PyObject *outlet;
    int client_fd;        /* the client's socket, when nothing but TCP lies between; else -1 */
    PyObject *t_write;    /* the client's transport */
    PyObject *t_size;
    PyObject *t_closing;
    PyObject *scrub;      /* None, or bytes -> bytes */
    long long received_ns;
    Py_ssize_t max_event_bytes;
    /* records not yet taken */
    Py_ssize_t count, room;
    int64_t *up, *down;
    int32_t *wire, *text_bytes;
    PyObject *texts;      /* list of str */
    /* what it did, for tests and benchmarks */
    long long pieces_taken, events_taken;
} Lane;

static void release_all(Lane *self);

/* -- small helpers ----------------------------------------------------------------------- */


static inline long long
now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* time.perf_counter_ns on Linux */
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* 1 true, 0 false, -1 error */
static int
attr_truth(PyObject *obj, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

/* 1 None, 0 not None, -1 error */
static int
attr_is_none(PyObject *obj, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL)
        return -1;
    int none = value == Py_None;
    Py_DECREF(value);
    return none;
}

static int
set_bool(PyObject *obj, PyObject *name, int value)
{
    return PyObject_SetAttr(obj, name, value ? Py_True : Py_False);
}

static int
add_to_int_attr(PyObject *obj, PyObject *name, long long delta)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL)
        return -1;
    long long current = PyLong_AsLongLong(value);
    Py_DECREF(value);
    if (current == -1 && PyErr_Occurred())
        return -1;
    PyObject *next = PyLong_FromLongLong(current + delta);
    if (next == NULL)
        return -1;
    int rc = PyObject_SetAttr(obj, name, next);
    Py_DECREF(next);
    return rc;
}

static long long
int_attr(PyObject *obj, PyObject *name)
{
    PyObject *value = PyObject_GetAttr(obj, name);
    if (value == NULL)
        return -1;
    long long result = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return result;
}


/* -- records ------------------------------------------------------------------------------ */


static int
grow(Lane *self, Py_ssize_t need)
{
    if (self->count + need <= self->room)
        return 0;
    Py_ssize_t room = self->room ? self->room : 64;
    while (room < self->count + need)
        room *= 2;
    /* (each column is wider or as it was: room grows only once all four are) */
    int64_t *up, *down;
    int32_t *wire, *text_bytes;
    if ((up = PyMem_Realloc(self->up, room * sizeof *up)) != NULL)
        self->up = up;
    if ((down = PyMem_Realloc(self->down, room * sizeof *down)) != NULL)
        self->down = down;
    if ((wire = PyMem_Realloc(self->wire, room * sizeof *wire)) != NULL)
        self->wire = wire;
    if ((text_bytes = PyMem_Realloc(self->text_bytes, room * sizeof *text_bytes)) != NULL)
        self->text_bytes = text_bytes;
    if (up == NULL || down == NULL || wire == NULL || text_bytes == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    self->room = room;
    return 0;
}


/* -- the express lane ---------------------------------------------------------------------- */

/* Whether the lane may take a body piece now: what express_lane's take and
 * RawOutlet.write_now ask, in their order. 1 yes, 0 no, -1 error. */
static int
may_take(Lane *self)
{
    PyObject *conn = self->conn;
    int truth;
    Py_ssize_t size;
    if (self->held > 0)
        return 0; /* records of an earlier read are on their way: these must follow them */
    if (self->feeding && !self->fell_back) {
        /* Nothing but this code ran since feed_now looked: the connection is as it was. */
        if (self->queued_before)
            return 0;
    }
    else {
        if ((truth = attr_truth(conn, s_stopped)) != 0)
            return truth < 0 ? -1 : 0;
        if ((truth = attr_truth(conn, s_complete)) != 0)
            return truth < 0 ? -1 : 0;
        size = PyObject_Size(self->queued);
        if (size != 0)
            return size < 0 ? -1 : 0;
    }
    if ((truth = attr_truth(conn, s_queueing)) != 1) /* (set once, with the sink) */
        return truth;
    if ((truth = attr_truth(self->attempt, s_idle)) != 1)
        return truth;
    if ((truth = attr_is_none(self->attempt, s_failure)) != 1)
        return truth;
    size = PyObject_Size(self->waiting);
    if (size != 0)
        return size < 0 ? -1 : 0;
    if ((truth = attr_truth(self->cutter, s_whole)) != 1)
        return truth;
    if (!self->envelope_seen) {
        if ((truth = attr_is_none(self->cutter, s_envelope)) != 0)
            return truth < 0 ? -1 : 0;
        self->envelope_seen = 1; /* (never unset) */
    }
    if (!self->seen_token) {
        /* The first token moves the watchdog's deadline and wakes the guard: Python's. */
        if ((truth = attr_is_none(self->watchdog, s_last_token_ns)) != 0)
            return truth < 0 ? -1 : 0;
        self->seen_token = 1;
    }
    if ((truth = attr_truth(self->outlet, s_busy)) != 0)
        return truth < 0 ? -1 : 0;
    return 1;
}

/* The client's side of one take, held for its length: a Python call in it (a scrubber, a
 * transport's method) could release the lane, and with it the lane's own references. */
typedef struct {
    PyObject *write, *size, *closing, *scrub;
    int fd;
} Client;

static void
client_hold(Lane *self, Client *client)
{
    client->write = self->t_write;
    client->size = self->t_size;
    client->closing = self->t_closing;
    client->scrub = self->scrub;
    client->fd = self->client_fd;
    Py_INCREF(client->write);
    Py_INCREF(client->size);
    Py_INCREF(client->closing);
    Py_INCREF(client->scrub);
}

static void
client_let_go(Client *client)
{
    Py_DECREF(client->write);
    Py_DECREF(client->size);
    Py_DECREF(client->closing);
    Py_DECREF(client->scrub);
}

static int
client_free(Client *client)
{
    PyObject *closing = PyObject_CallNoArgs(client->closing);
    if (closing == NULL)
        return -1;
    int truth = PyObject_IsTrue(closing);
    Py_DECREF(closing);
    if (truth != 0)
        return truth < 0 ? -1 : 0;
    PyObject *unsent = PyObject_CallNoArgs(client->size);
    if (unsent == NULL)
        return -1;
    truth = PyObject_IsTrue(unsent);
    Py_DECREF(unsent);
    return truth < 0 ? -1 : !truth;
}

/* Hand the transport what the socket did not take (all of it when sent is 0). */
static int
write_rest(Client *client, const char *head, Py_ssize_t head_size, PyObject *body,
           Py_ssize_t sent)
{
    Py_ssize_t size = PyBytes_GET_SIZE(body);
    Py_ssize_t total = head_size + size + 2;
    PyObject *rest = PyBytes_FromStringAndSize(NULL, total - sent);
    if (rest == NULL)
        return -1;
    char *out = PyBytes_AS_STRING(rest);
    /* the frame is head, body, CRLF: copy the part of it from sent on */
    Py_ssize_t at = 0;
    for (int part = 0; part < 3; part++) {
        const char *data = part == 0 ? head : part == 1 ? PyBytes_AS_STRING(body) : "\r\n";
        Py_ssize_t length = part == 0 ? head_size : part == 1 ? size : 2;
        Py_ssize_t skip = sent > at ? (sent - at < length ? sent - at : length) : 0;
        memcpy(out, data + skip, length - skip);
        out += length - skip;
        at += length;
    }
    PyObject *done = PyObject_CallOneArg(client->write, rest);
    Py_DECREF(rest);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

/* Write body to the client as one chunk; 0 done, -1 error. The transport holds nothing
 * (client_free): on a plain TCP connection the frame goes to its socket at once, and only
 * what the socket did not take goes through the transport, after it; else all of it does. */
/* The body as it may go out: keys hidden (None, an error set, on failure). */
static PyObject *
scrubbed(Client *client, PyObject *body)
{
    if (client->scrub == Py_None)
        return Py_NewRef(body);
    PyObject *out = PyObject_CallOneArg(client->scrub, body);
    if (out != NULL && !PyBytes_Check(out)) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_TypeError, "the scrubber must return bytes");
        return NULL;
    }
    return out;
}

static int
write_chunk(Client *client, PyObject *body)
{
    Py_ssize_t size = PyBytes_GET_SIZE(body);
    char head[24];
    int head_size = 0;
    char digits[16];
    int count = 0;
    size_t left = (size_t)size;
    do {
        digits[count++] = "0123456789abcdef"[left & 0xf];
        left >>= 4;
    } while (left);
    while (count)
        head[head_size++] = digits[--count];
    head[head_size++] = '\r';
    head[head_size++] = '\n';
    Py_ssize_t sent = 0;
    if (client->fd >= 0) {
        struct iovec parts[3] = {
            {head, (size_t)head_size},
            {PyBytes_AS_STRING(body), (size_t)size},
            {"\r\n", 2},
        };
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = parts;
        msg.msg_iovlen = 3;
        ssize_t n;
        do {
            n = sendmsg(client->fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        } while (n < 0 && errno == EINTR);
        /* (an error is the transport's to meet and report: it gets the whole frame) */
        sent = n > 0 ? n : 0;
    }
    if (sent < head_size + size + 2)
        return write_rest(client, head, head_size, body, sent);
    return 0;
}

/* Take body whole: 1 taken, 0 not this lane's (nothing changed), -1 error. */
static int
take(Lane *self, PyObject *body)
{
    int ok = may_take(self);
    if (ok != 1)
        return ok;
    const char *data = PyBytes_AS_STRING(body);
    Py_ssize_t size = PyBytes_GET_SIZE(body);
    if (size < 2 || size > self->max_event_bytes || data[size - 2] != '\n' ||
        data[size - 1] != '\n' || memchr(data, '\r', size) != NULL)
        return 0;
    Cut cuts[MAX_CUTS];
    int count = cut_body(data, size, cuts);
    if (count <= 0)
        return count;
    int result = 0;
    if (!self->armed || self->conn == NULL) {
        /* (what it read could have run Python code, which let go of the lane) */
        for (int i = 0; i < count; i++)
            Py_DECREF(cuts[i].text);
        return 0;
    }
    PyObject *conn = self->conn;
    Py_INCREF(conn);
    Client client;
    client_hold(self, &client);
    PyObject *out = NULL;
    long long stamp = self->feeding ? self->stamp : int_attr(conn, s_stamp);
    if (stamp == -1 && PyErr_Occurred())
        goto error;
    if (grow(self, count) < 0)
        goto error;
    /* Scrubbed first: from the look at the client's connection to the write no Python code
     * runs (code that closed it would free its descriptor for another client's). */
    out = scrubbed(&client, body);
    if (out == NULL)
        goto error;
    ok = client_free(&client);
    if (ok != 1) {
        result = ok;
        goto done;
    }
    if (write_chunk(&client, out) < 0)
        goto error;
    long long sent = now_ns();
    for (int i = 0; i < count; i++) {
        Py_ssize_t at = self->count + i;
        self->up[at] = stamp - self->received_ns;
        self->down[at] = sent - self->received_ns;
        self->wire[at] = cuts[i].wire;
        self->text_bytes[at] = cuts[i].text_bytes;
        if (PyList_Append(self->texts, cuts[i].text) < 0) {
            /* the texts already appended stay with their records */
            self->count += i;
            goto error;
        }
    }
    self->count += count;
    self->pieces_taken++;
    self->events_taken += count;
    if (self->feeding)
        self->takes++; /* feed_now accounts for it */
    else if (add_to_int_attr(conn, s_taken, 1) < 0)
        goto error; /* (drain() reads it) */
    result = 1;
    goto done;
error:
    result = -1;
done:
    Py_XDECREF(out);
    client_let_go(&client);
    Py_DECREF(conn);
    for (int i = 0; i < count; i++)
        Py_DECREF(cuts[i].text);
    return result;
}

/* Python code is about to run inside feed_now: give the connection the state drain()
 * would have given it (the read's stamp, and that a drain runs). */
static int
before_python(Lane *self, PyObject *conn)
{
    if (!self->feeding)
        return 0;
    PyObject *stamp = PyLong_FromLongLong(self->stamp);
    if (stamp == NULL)
        return -1;
    int rc = PyObject_SetAttr(conn, s_stamp, stamp);
    Py_DECREF(stamp);
    if (rc < 0)
        return -1;
    if (!self->fell_back) {
        self->taken_before = int_attr(conn, s_taken);
        if (self->taken_before == -1 && PyErr_Occurred())
            return -1;
        self->fell_back = 1;
        if (set_bool(conn, s_draining, 1) < 0)
            return -1;
    }
    return 0;
}

static PyObject *
Lane_on_body(Lane *self, PyObject *body)
{
    PyObject *conn = self->conn;
    if (conn == NULL)
        Py_RETURN_NONE;
    Py_INCREF(conn);
    PyObject *result = NULL;
    if (self->armed && PyBytes_CheckExact(body)) {
        /* What take() reads and calls could let go of the lane (a property, a scrubber, a
         * transport's method): its references stay until take() is done with them. */
        self->taking++;
        int taken = take(self, body);
        if (--self->taking == 0 && self->release_due)
            release_all(self);
        if (taken < 0)
            goto out;
        if (taken) {
            result = Py_NewRef(Py_None);
            goto out;
        }
    }
    if (self->conn == NULL) /* released meanwhile: the connection let go of its parser too */
        result = Py_NewRef(Py_None);
    else if (before_python(self, conn) == 0)
        result = PyObject_CallMethodOneArg(conn, s_on_body, body);
out:
    Py_DECREF(conn);
    return result;
}

static PyObject *
Lane_on_message_complete(Lane *self, PyObject *Py_UNUSED(ignored))
{
    if (self->conn == NULL)
        Py_RETURN_NONE;
    PyObject *conn = self->conn;
    Py_INCREF(conn);
    PyObject *result =
        before_python(self, conn) < 0 ? NULL : PyObject_CallMethodNoArgs(conn, s_on_message_complete);
    Py_DECREF(conn);
    return result;
}

/* -- the read callback --------------------------------------------------------------------- */

/* From a read until it has its place (queued for drain(), or in the parser), no Python
 * code may run here: a collection could run a finalizer, the interpreter hand the GIL to
 * the stall rescuer's thread, and its pull() queue the read that came after this one
 * ahead of it. (pull() has the connection's lock for that; this code, its GIL.) Python
 * 3.11 collects on an allocation; 3.12 and later wait for the next bytecode, which none
 * runs here: there the hold costs two flag writes and guards nothing more. */
typedef struct {
    int held;
    int was_enabled;
} GcWindow;

static void
gc_hold(GcWindow *window)
{
    window->was_enabled = PyGC_Disable();
    window->held = 1;
}

static void
gc_release(GcWindow *window)
{
    if (window->held) {
        window->held = 0;
        if (window->was_enabled)
            PyGC_Enable();
    }
}

/* Queue a read as pull() does and let drain() handle it. */
static int
queue_and_drain(Lane *self, PyObject *conn, long long stamp, PyObject *data, GcWindow *window)
{
    PyObject *item = Py_BuildValue("(LO)", stamp, data);
    if (item == NULL)
        return -1;
    PyObject *done = PyObject_CallMethodOneArg(self->pending, s_append, item);
    Py_DECREF(item);
    gc_release(window);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    done = PyObject_CallMethodNoArgs(conn, s_drain);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

/* Whether drain() would feed this read to the parser at once: 1 yes, 0 no, -1 error. */
static int
feeds_at_once(Lane *self, PyObject *conn)
{
    int truth;
    if ((truth = attr_is_none(conn, s_error)) != 1)
        return truth;
    if ((truth = attr_truth(conn, s_complete)) != 0)
        return truth < 0 ? -1 : 0;
    if ((truth = attr_truth(conn, s_stopped)) != 0)
        return truth < 0 ? -1 : 0;
    if (!self->in_body) {
        if ((truth = attr_is_none(conn, s_head)) != 0)
            return truth < 0 ? -1 : 0;
        if ((truth = attr_is_none(conn, s_sink)) != 0)
            return truth < 0 ? -1 : 0;
        if ((truth = attr_is_none(conn, s_parser)) != 0)
            return truth < 0 ? -1 : 0;
        self->in_body = 1; /* (the three go only with the connection: _let_go) */
    }
    return 1;
}

/* Feed one read to the parser, as drain() does for a queue of one; the connection's
 * attributes drain() sets are set only when Python code may read them (before_python). */
static int
feed_now(Lane *self, PyObject *conn, long long stamp, PyObject *data, Py_ssize_t queued,
         GcWindow *window)
{
    self->last_activity = now_ns() / 1e9;
    self->feeding = 1;
    self->fell_back = 0;
    self->takes = 0;
    self->stamp = stamp;
    self->queued_before = queued;

    PyObject *feed = self->feed; /* (held: a close in a callback releases the lane) */
    Py_INCREF(feed);
    gc_release(window); /* in the parser, this read is in its place */
    PyObject *fed = PyObject_CallOneArg(feed, data);
    Py_DECREF(feed);
    self->feeding = 0;
    int fell_back = self->fell_back; /* (on_message_complete falls back too) */
    long takes = self->takes;
    PyObject *feed_error = NULL;
    if (fed == NULL) {
        feed_error = raised_take();
    }
    else {
        Py_DECREF(fed);
        if (!fell_back && takes > 0)
            return 0; /* the common case: every piece went to the client from here */
    }
    /* Else as drain() goes on: the connection learns what it has not seen yet. */
    PyObject *stamp_obj = PyLong_FromLongLong(stamp);
    int failed = stamp_obj == NULL || PyObject_SetAttr(conn, s_stamp, stamp_obj) < 0;
    Py_XDECREF(stamp_obj);
    if (!failed && feed_error != NULL) {
        PyObject *done = PyObject_CallMethodOneArg(conn, s_feed_failed, feed_error);
        if (done == NULL)
            failed = 1; /* raised again, as drain() would: kept for after the clean-up */
        else
            Py_DECREF(done);
    }
    Py_XDECREF(feed_error);

    /* drain()'s finally */
    PyObject *raised = failed ? raised_take() : NULL;
    int clean = fell_back ? set_bool(conn, s_draining, 0) : 0;
    if (clean == 0) {
        int closed = attr_truth(conn, s_closed);
        if (closed < 0)
            clean = -1;
        else if (closed) {
            PyObject *done = PyObject_CallMethodNoArgs(conn, s_let_go);
            if (done == NULL)
                clean = -1;
            else
                Py_DECREF(done);
        }
    }
    if (failed) {
        if (clean < 0)
            Py_XDECREF(raised); /* (the clean-up's own error is the one raised) */
        else
            raised_put(raised);
        return -1;
    }
    if (clean < 0)
        return -1;
    /* drain()'s end, with conn._taken as it was before the feed: the pieces taken here
     * were not counted in it, so they count off it, and _drained sees them as taken. */
    long long taken = fell_back ? self->taken_before : int_attr(conn, s_taken);
    if (taken == -1 && PyErr_Occurred())
        return -1;
    PyObject *taken_obj = PyLong_FromLongLong(taken - takes);
    PyObject *queued_obj = PyLong_FromSsize_t(queued);
    PyObject *done = NULL;
    if (taken_obj != NULL && queued_obj != NULL)
        done = PyObject_CallMethodObjArgs(conn, s_drained, taken_obj, queued_obj, NULL);
    Py_XDECREF(taken_obj);
    Py_XDECREF(queued_obj);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

/* Read the socket once: 1 read (*data, *stamp set), 0 nothing to read, -1 error set,
 * 2 the read failed (*data is the reason, as pull() queues it). */
static int
read_socket(Lane *self, PyObject **data, long long *stamp)
{
    ssize_t n;
    int error = 0;
    int stamped = 0;
    long long wall = 0;
    if (self->kernel) {
        union {
            char buf[CMSG_SPACE(sizeof(struct timespec))];
            struct cmsghdr align;
        } control;
        struct iovec iov = {read_buffer, READ_SIZE};
        struct msghdr msg;
        memset(&msg, 0, sizeof msg);
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.buf;
        msg.msg_controllen = sizeof control.buf;
        do {
            n = recvmsg(self->fd, &msg, 0);
        } while (n < 0 && errno == EINTR);
        error = errno;
        if (n >= 0) {
            for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS &&
                    c->cmsg_len >= CMSG_LEN(sizeof(struct timespec))) {
                    struct timespec ts;
                    memcpy(&ts, CMSG_DATA(c), sizeof ts);
                    wall = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
                    stamped = 1;
                    break;
                }
            }
        }
    }
    else {
        do {
            n = recv(self->fd, read_buffer, READ_SIZE, 0);
        } while (n < 0 && errno == EINTR);
        error = errno;
    }
    if (n < 0) {
        if (error == EAGAIN || error == EWOULDBLOCK)
            return 0;
        /* pull() queues target.reason(exc): os.strerror(errno), which this is; made here,
         * with no Python code run before the read is queued (see gc_hold) */
        *data = PyBytes_FromString(strerror(error));
        *stamp = -1;
        return *data == NULL ? -1 : 2;
    }
    /* Out of the shared buffer before any other call into Python (one could collect
     * garbage, and a finalizer run Python code). */
    *data = PyBytes_FromStringAndSize(read_buffer, n);
    if (*data == NULL)
        return -1;
    if (self->kernel && stamped) {
        *stamp = wall + self->offset_ns; /* (WallToClock.to_clock) */
    }
    else {
        *stamp = now_ns();
        /* (a count for the record: failing to keep it must not lose the read) */
        if (self->kernel && n > 0 && add_to_int_attr(self->conn, s_unstamped_reads, 1) < 0)
            PyErr_WriteUnraisable(self->conn);
    }
    return 1;
}

PyObject *
Lane_readable(PyObject *lane, PyObject *Py_UNUSED(ignored))
{
    Lane *self = (Lane *)lane;
    PyObject *conn = self->conn;
    if (conn == NULL || self->feed == NULL)
        Py_RETURN_NONE; /* released: the connection is closed */
    Py_INCREF(conn);
    PyObject *data = NULL;
    int rc = -1;
    GcWindow window = {0, 0};

    if (self->rescuer == NULL) {
        PyObject *rescuer = PyObject_GetAttr(conn, s_rescuer);
        if (rescuer == NULL)
            goto out;
        if (rescuer == Py_None)
            Py_DECREF(rescuer);
        else
            self->rescuer = rescuer;
    }
    /* the loop is working, not stalled (rescue.py) */
    if (self->rescuer != NULL && add_to_int_attr(self->rescuer, s_loop_work, 1) < 0)
        goto out;

    Py_ssize_t waiting = PyObject_Size(self->pending);
    if (waiting < 0)
        goto out;
    if (waiting > 0) { /* the rescuer's reads come first: Python keeps their order */
        PyObject *done = PyObject_CallMethodNoArgs(conn, s_read_now);
        if (done == NULL)
            goto out;
        Py_DECREF(done);
        rc = 0;
        goto out;
    }

    /* pull() reads under the connection's lock, without the GIL while in recvmsg: the
     * stall rescuer's thread may be in it now. Then this read waits for the lock (Python's
     * way), or it could overtake the rescuer's. Else no pull() can start before this read
     * is queued or parsed: this code holds the GIL throughout its recvmsg. */
    if (self->pulling) {
        PyObject *done = PyObject_CallMethodNoArgs(conn, s_read_now);
        if (done == NULL)
            goto out;
        Py_DECREF(done);
        rc = 0;
        goto out;
    }
    long long stamp = 0;
    int got;
    gc_hold(&window);
    int closed = attr_truth(conn, s_closed);
    if (closed != 0)
        got = closed < 0 ? -1 : 0;
    else
        got = read_socket(self, &data, &stamp);
    if (got < 0)
        goto out;
    if (got == 0) {
        rc = 0;
        goto out;
    }
    if (got == 2 || PyBytes_GET_SIZE(data) == 0) {
        rc = queue_and_drain(self, conn, stamp, data, &window);
        goto out;
    }
    int now = feeds_at_once(self, conn);
    Py_ssize_t queued = now > 0 ? PyObject_Size(self->queued) : 0;
    if (now < 0 || queued < 0) {
        /* The read is out of the socket: it is queued for drain() whatever failed here. */
        PyObject *raised = raised_take();
        PyObject *item = Py_BuildValue("(LO)", stamp, data);
        PyObject *done = NULL;
        if (item != NULL)
            done = PyObject_CallMethodOneArg(self->pending, s_append, item);
        Py_XDECREF(item);
        Py_XDECREF(done);
        if (done == NULL)
            PyErr_WriteUnraisable(conn); /* (no memory even for that: the read is lost) */
        raised_put(raised);
        goto out;
    }
    rc = now ? feed_now(self, conn, stamp, data, queued, &window)
             : queue_and_drain(self, conn, stamp, data, &window);
out:
    gc_release(&window);
    Py_XDECREF(data);
    Py_DECREF(conn);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* -- arming, records, release -------------------------------------------------------------- */

static void
disarm(Lane *self)
{
    self->armed = 0;
    self->client_fd = -1;
    self->held = 0;
    self->seen_token = 0;
    self->envelope_seen = 0;
    Py_CLEAR(self->attempt);
    Py_CLEAR(self->cutter);
    Py_CLEAR(self->watchdog);
    Py_CLEAR(self->waiting);
    Py_CLEAR(self->outlet);
    Py_CLEAR(self->t_write);
    Py_CLEAR(self->t_size);
    Py_CLEAR(self->t_closing);
    Py_CLEAR(self->scrub);
}

static PyObject *
Lane_arm(Lane *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"attempt", "cutter", "watchdog", "waiting", "outlet", "transport",
                            "scrub", "received_ns", "max_event_bytes", "client_fd", NULL};
    PyObject *attempt = NULL, *cutter = NULL, *watchdog = NULL, *waiting = NULL,
             *outlet = NULL, *transport = NULL, *scrub = NULL;
    long long received_ns = -1;
    Py_ssize_t max_event_bytes = -1;
    int client_fd = -1;
    /* (keyword-only arguments are optional to the parser: the required ones are checked) */
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOOOOLni:arm", names, &attempt, &cutter,
                                     &watchdog, &waiting, &outlet, &transport, &scrub,
                                     &received_ns, &max_event_bytes, &client_fd))
        return NULL;
    if (attempt == NULL || cutter == NULL || watchdog == NULL || waiting == NULL ||
        outlet == NULL || transport == NULL || scrub == NULL || received_ns < 0 ||
        max_event_bytes < 0) {
        PyErr_SetString(PyExc_TypeError,
                        "arm() needs attempt, cutter, watchdog, waiting, outlet, transport, "
                        "scrub, received_ns and max_event_bytes (received_ns and "
                        "max_event_bytes not negative)");
        return NULL;
    }
    if (self->conn == NULL || self->taking) {
        PyErr_SetString(PyExc_RuntimeError,
                        self->taking ? "the lane is taking a piece" : "the lane was released");
        return NULL;
    }
    if (scrub != Py_None && !PyCallable_Check(scrub)) {
        PyErr_SetString(PyExc_TypeError, "scrub must be None or a callable");
        return NULL;
    }
    int keep_raw = attr_truth(cutter, s_keep_raw);
    if (keep_raw < 0)
        return NULL;
    if (keep_raw) { /* each piece's own bytes are wanted: the Python cut keeps them */
        disarm(self);
        Py_RETURN_NONE;
    }
    PyObject *t_write = PyObject_GetAttrString(transport, "write");
    PyObject *t_size = PyObject_GetAttrString(transport, "get_write_buffer_size");
    PyObject *t_closing = PyObject_GetAttrString(transport, "is_closing");
    if (t_write == NULL || t_size == NULL || t_closing == NULL) {
        Py_XDECREF(t_write);
        Py_XDECREF(t_size);
        Py_XDECREF(t_closing);
        return NULL;
    }
    disarm(self);
    Py_INCREF(attempt);
    self->attempt = attempt;
    Py_INCREF(cutter);
    self->cutter = cutter;
    Py_INCREF(watchdog);
    self->watchdog = watchdog;
    Py_INCREF(waiting);
    self->waiting = waiting;
    Py_INCREF(outlet);
    self->outlet = outlet;
    self->t_write = t_write;
    self->t_size = t_size;
    self->t_closing = t_closing;
    Py_INCREF(scrub);
    self->scrub = scrub;
    self->received_ns = received_ns;
    self->max_event_bytes = max_event_bytes;
    self->client_fd = client_fd;
    self->armed = 1;
    Py_RETURN_NONE;
}

static PyObject *
Lane_hold(Lane *self, PyObject *Py_UNUSED(ignored))
{
    self->held++;
    Py_RETURN_NONE;
}

static PyObject *
Lane_resume(Lane *self, PyObject *Py_UNUSED(ignored))
{
    if (self->held > 0)
        self->held--;
    Py_RETURN_NONE;
}

static PyObject *
Lane_take_records(Lane *self, PyObject *Py_UNUSED(ignored))
{
    if (self->count == 0)
        Py_RETURN_NONE;
    Py_ssize_t n = self->count;
    PyObject *texts = PyList_New(0);
    if (texts == NULL)
        return NULL;
    PyObject *result = Py_BuildValue(
        "(y#y#y#y#O)", (const char *)self->up, n * (Py_ssize_t)sizeof(int64_t),
        (const char *)self->down, n * (Py_ssize_t)sizeof(int64_t), (const char *)self->wire,
        n * (Py_ssize_t)sizeof(int32_t), (const char *)self->text_bytes,
        n * (Py_ssize_t)sizeof(int32_t), self->texts);
    if (result == NULL) {
        Py_DECREF(texts);
        return NULL;
    }
    Py_SETREF(self->texts, texts);
    self->count = 0;
    return result;
}

static void
release_all(Lane *self)
{
    disarm(self);
    Py_CLEAR(self->conn);
    Py_CLEAR(self->pending);
    Py_CLEAR(self->queued);
    Py_CLEAR(self->feed);
    Py_CLEAR(self->rescuer);
    self->in_body = 0;
    self->release_due = 0;
}

static PyObject *
Lane_release(Lane *self, PyObject *Py_UNUSED(ignored))
{
    if (self->taking) { /* from inside a take: done at its end (Lane_on_body) */
        self->armed = 0;
        self->release_due = 1;
        Py_RETURN_NONE;
    }
    release_all(self); /* the records stay until taken */
    Py_RETURN_NONE;
}

static PyObject *
Lane_bind(Lane *self, PyObject *feed)
{
    if (!PyCallable_Check(feed)) {
        PyErr_SetString(PyExc_TypeError, "feed must be the parser's feed_data");
        return NULL;
    }
    Py_INCREF(feed);
    Py_XSETREF(self->feed, feed);
    Py_RETURN_NONE;
}

/* -- the type ------------------------------------------------------------------------------ */

static int
Lane_init(Lane *self, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {"conn", "fd", "kernel", "offset_ns", "pending", "queued", NULL};
    PyObject *conn, *pending, *queued;
    int fd, kernel;
    long long offset_ns;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O$ipLOO:Lane", names, &conn, &fd, &kernel,
                                     &offset_ns, &pending, &queued))
        return -1;
    if (self->taking) {
        PyErr_SetString(PyExc_RuntimeError, "the lane is taking a piece");
        return -1;
    }
    PyObject *texts = PyList_New(0);
    if (texts == NULL)
        return -1;
    release_all(self);
    Py_INCREF(conn);
    self->conn = conn;
    self->fd = fd;
    self->kernel = kernel;
    self->offset_ns = offset_ns;
    self->pulling = 0;
    self->client_fd = -1;
    Py_INCREF(pending);
    self->pending = pending;
    Py_INCREF(queued);
    self->queued = queued;
    Py_XSETREF(self->texts, texts);
    self->count = 0;
    return 0;
}

static int
Lane_traverse(Lane *self, visitproc visit, void *arg)
{
    Py_VISIT(self->conn);
    Py_VISIT(self->pending);
    Py_VISIT(self->queued);
    Py_VISIT(self->feed);
    Py_VISIT(self->rescuer);
    Py_VISIT(self->attempt);
    Py_VISIT(self->cutter);
    Py_VISIT(self->watchdog);
    Py_VISIT(self->waiting);
    Py_VISIT(self->outlet);
    Py_VISIT(self->t_write);
    Py_VISIT(self->t_size);
    Py_VISIT(self->t_closing);
    Py_VISIT(self->scrub);
    Py_VISIT(self->texts);
    return 0;
}

static int
Lane_clear(Lane *self)
{
    release_all(self);
    Py_CLEAR(self->texts);
    return 0;
}

static void
Lane_dealloc(Lane *self)
{
    PyObject_GC_UnTrack(self);
    Lane_clear(self);
    PyMem_Free(self->up);
    PyMem_Free(self->down);
    PyMem_Free(self->wire);
    PyMem_Free(self->text_bytes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Lane_get_pulling(Lane *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->pulling);
}

static int
Lane_set_pulling(Lane *self, PyObject *value, void *Py_UNUSED(closure))
{
    int truth = value == NULL ? 0 : PyObject_IsTrue(value);
    if (truth < 0)
        return -1;
    self->pulling = truth;
    return 0;
}

static PyObject *
Lane_get_armed(Lane *self, void *Py_UNUSED(closure))
{
    return PyBool_FromLong(self->armed);
}

static PyMethodDef Lane_methods[] = {
    {"readable", (PyCFunction)Lane_readable, METH_NOARGS,
     "The socket's read callback: read it once, and parse the read or queue it."},
    {"on_body", (PyCFunction)Lane_on_body, METH_O,
     "The parser's body callback: take the piece whole, or hand it to the connection."},
    {"on_message_complete", (PyCFunction)Lane_on_message_complete, METH_NOARGS,
     "The parser's end of the response: the connection's, with the read's stamp."},
    {"arm", (PyCFunction)(void (*)(void))Lane_arm, METH_VARARGS | METH_KEYWORDS,
     "Take body pieces for one upstream attempt's express lane."},
    {"hold", (PyCFunction)Lane_hold, METH_NOARGS,
     "A read went the Python way and its records come later: take nothing till resume()."},
    {"resume", (PyCFunction)Lane_resume, METH_NOARGS, "Those records are in: see hold()."},
    {"bind", (PyCFunction)Lane_bind, METH_O, "The parser's feed_data, to feed reads to."},
    {"take_records", (PyCFunction)Lane_take_records, METH_NOARGS,
     "The records of the pieces taken since the last call, or None: (upstream times, "
     "downstream times, wire bytes, text bytes, texts); times int64 and sizes int32, native "
     "order, offsets from received_ns."},
    {"release", (PyCFunction)Lane_release, METH_NOARGS,
     "Let go of the connection and the stream (the records stay until taken)."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Lane_members[] = {
    {"last_activity", T_DOUBLE, offsetof(Lane, last_activity), READONLY,
     "When it last fed a read to the parser (CLOCK_MONOTONIC seconds, the loop's clock)."},
    {"pieces_taken", T_LONGLONG, offsetof(Lane, pieces_taken), READONLY,
     "Body pieces it took whole."},
    {"events_taken", T_LONGLONG, offsetof(Lane, events_taken), READONLY,
     "Events in the pieces it took."},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef Lane_getset[] = {
    {"pulling", (getter)Lane_get_pulling, (setter)Lane_set_pulling,
     "StampedConnection.pull() is reading the socket: read through it meanwhile.", NULL},
    {"armed", (getter)Lane_get_armed, NULL, "Whether it takes body pieces.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "steadystream.stamped._lane.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The read path of one stamped connection, in C.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Lane_init,
    .tp_dealloc = (destructor)Lane_dealloc,
    .tp_traverse = (traverseproc)Lane_traverse,
    .tp_clear = (inquiry)Lane_clear,
    .tp_methods = Lane_methods,
    .tp_members = Lane_members,
    .tp_getset = Lane_getset,
};

static struct PyModuleDef lane_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "steadystream.stamped._lane",
    .m_doc = "The stamped connection's read path and the gateway's express lane, in C.",
    .m_size = -1,
};

#define INTERN(var, text)                                 \
    do {                                                  \
        if ((var = PyUnicode_InternFromString(text)) == NULL) \
            return NULL;                                  \
    } while (0)

PyMODINIT_FUNC
PyInit__lane(void)
{
    INTERN(s_rescuer, "_rescuer");
    INTERN(s_loop_work, "loop_work");
    INTERN(s_closed, "_closed");
    INTERN(s_error, "_error");
    INTERN(s_complete, "_complete");
    INTERN(s_stopped, "_stopped");
    INTERN(s_head, "_head");
    INTERN(s_sink, "_sink");
    INTERN(s_parser, "_parser");
    INTERN(s_taken, "_taken");
    INTERN(s_draining, "_draining");
    INTERN(s_stamp, "_stamp");
    INTERN(s_queueing, "_queueing");
    INTERN(s_unstamped_reads, "unstamped_reads");
    INTERN(s_drain, "drain");
    INTERN(s_read_now, "_read_now");
    INTERN(s_let_go, "_let_go");
    INTERN(s_drained, "_drained");
    INTERN(s_feed_failed, "_feed_failed");
    INTERN(s_on_body, "on_body");
    INTERN(s_on_message_complete, "on_message_complete");
    INTERN(s_idle, "idle");
    INTERN(s_failure, "failure");
    INTERN(s_whole, "_whole");
    INTERN(s_keep_raw, "keep_raw");
    INTERN(s_envelope, "envelope");
    INTERN(s_last_token_ns, "last_token_ns");
    INTERN(s_busy, "busy");
    INTERN(s_append, "append");
    INTERN(s_error_key, "error");
    INTERN(s_usage, "usage");
    INTERN(s_choices, "choices");
    INTERN(s_object, "object");
    INTERN(s_finish_reason, "finish_reason");
    INTERN(s_delta, "delta");
    INTERN(s_role, "role");
    INTERN(s_content, "content");
    INTERN(s_text, "text");

    PyObject *orjson = PyImport_ImportModule("orjson");
    if (orjson == NULL)
        return NULL;
    orjson_loads = PyObject_GetAttrString(orjson, "loads");
    Py_DECREF(orjson);
    if (orjson_loads == NULL)
        return NULL;

    if (PyType_Ready(&LaneType) < 0 || PyType_Ready(&ReactorType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&lane_module);
    if (module == NULL)
        return NULL;
    Py_INCREF(&LaneType);
    if (PyModule_AddObject(module, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(&LaneType);
        Py_DECREF(module);
        return NULL;
    }
    Py_INCREF(&ReactorType);
    if (PyModule_AddObject(module, "Reactor", (PyObject *)&ReactorType) < 0) {
        Py_DECREF(&ReactorType);
        Py_DECREF(module);
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "READ_SIZE", READ_SIZE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
