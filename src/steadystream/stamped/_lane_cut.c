/*
 * steadystream.stamped._lane: the cut of a body piece into whole content events, as the
 * gateway's EventCutter._feed_whole and _content_piece cut and read them (gateway/events.py),
 * for the lane to take (_lane.c). A piece that is anything else is declined whole.
 */

#define _GNU_SOURCE /* memmem */
#include "_lane.h"

/* UTF-8 size of a str, as len(text.encode()); -1: it holds a surrogate (encode would fail) */
static Py_ssize_t
utf8_size(PyObject *text)
{
    Py_ssize_t length = PyUnicode_GET_LENGTH(text);
    if (PyUnicode_IS_ASCII(text))
        return length;
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < length; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        if (c < 0x80)
            size += 1;
        else if (c < 0x800)
            size += 2;
        else if (c >= 0xD800 && c <= 0xDFFF)
            return -1;
        else if (c < 0x10000)
            size += 3;
        else
            size += 4;
    }
    return size;
}

/* -- the cut: a body piece of whole content events ----------------------------------------- */

/* Borrowed value of key in dict, or NULL (missing or None); *error set to 1 on failure. */
static PyObject *
get(PyObject *dict, PyObject *key, int *error)
{
    PyObject *value = PyDict_GetItemWithError(dict, key);
    if (value == NULL && PyErr_Occurred())
        *error = 1;
    return value == Py_None ? NULL : value;
}

/* The text of the common content chunk (gateway/events.py _content_piece), borrowed from
 * obj; NULL for any other shape (no error set) or on error (error set). */
static PyObject *
content_text(PyObject *obj)
{
    int error = 0;
    if (!PyDict_CheckExact(obj))
        return NULL;
    if (get(obj, s_error_key, &error) != NULL || error)
        return NULL;
    if (get(obj, s_usage, &error) != NULL || error)
        return NULL;
    PyObject *choices = get(obj, s_choices, &error);
    if (error || choices == NULL || !PyList_CheckExact(choices) || PyList_GET_SIZE(choices) != 1)
        return NULL;
    PyObject *what = get(obj, s_object, &error);
    if (error)
        return NULL;
    if (what != NULL && PyUnicode_CheckExact(what) &&
        PyUnicode_Compare(what, s_error_key) == 0)
        return NULL;
    PyObject *choice = PyList_GET_ITEM(choices, 0);
    if (!PyDict_CheckExact(choice))
        return NULL;
    if (get(choice, s_finish_reason, &error) != NULL || error)
        return NULL;
    PyObject *delta = get(choice, s_delta, &error);
    if (error)
        return NULL;
    PyObject *text;
    if (delta != NULL && PyDict_CheckExact(delta)) {
        Py_ssize_t keys = PyDict_GET_SIZE(delta);
        if (keys != 1) {
            int has_role = keys == 2 ? PyDict_Contains(delta, s_role) : 0;
            if (has_role < 0 || !has_role)
                return NULL;
        }
        text = get(delta, s_content, &error);
    }
    else if (delta == NULL) { /* the completions shape */
        text = get(choice, s_text, &error);
    }
    else {
        return NULL;
    }
    if (error || text == NULL || !PyUnicode_CheckExact(text) || PyUnicode_GET_LENGTH(text) == 0)
        return NULL;
    return text;
}

/* Cut body into content events, as EventCutter._feed_whole would: the number of events
 * (cuts filled, texts owned by the caller), 0 when the piece is not that, -1 on error. */
int
cut_body(const char *data, Py_ssize_t size, Cut *cuts)
{
    Py_ssize_t offset = 0;
    int count = 0;
    while (offset < size) {
        const char *start = data + offset;
        const char *end = memmem(start, size - offset, "\n\n", 2);
        if (end == NULL || count == MAX_CUTS)
            goto decline;
        Py_ssize_t length = end - start;
        if (length < 5 || memcmp(start, "data:", 5) != 0 || memchr(start, '\n', length) != NULL)
            goto decline;
        const char *payload = start + 5;
        Py_ssize_t payload_size = length - 5;
        if (payload_size > 0 && payload[0] == ' ') {
            payload++;
            payload_size--;
        }
        if (payload_size == 0 || payload[0] != '{')
            goto decline; /* [DONE], or what is not a chunk: Python's */
        PyObject *raw = PyBytes_FromStringAndSize(payload, payload_size);
        if (raw == NULL)
            goto error;
        PyObject *obj = PyObject_CallOneArg(orjson_loads, raw);
        Py_DECREF(raw);
        if (obj == NULL) {
            PyErr_Clear(); /* not JSON: the general path says what is wrong with it */
            goto decline;
        }
        PyObject *text = content_text(obj);
        if (text == NULL) {
            Py_DECREF(obj);
            if (PyErr_Occurred())
                goto error;
            goto decline;
        }
        Py_ssize_t text_bytes = utf8_size(text);
        if (text_bytes < 0 || length + 2 > INT32_MAX || text_bytes > INT32_MAX) {
            Py_DECREF(obj);
            goto decline;
        }
        Py_INCREF(text);
        Py_DECREF(obj);
        cuts[count].text = text;
        cuts[count].wire = (int32_t)(length + 2);
        cuts[count].text_bytes = (int32_t)text_bytes;
        count++;
        offset += length + 2;
    }
    return count;
decline:
    for (int i = 0; i < count; i++)
        Py_DECREF(cuts[i].text);
    return 0;
error:
    for (int i = 0; i < count; i++)
        Py_DECREF(cuts[i].text);
    return -1;
}
