/* The CPython side of pygrpc-native: converts between Python objects and
 * calls into the Go core (libpgn, a Go c-archive; see go/capi/exports.go).
 *
 * Rules this file keeps:
 *  - It only converts. Every protocol decision is made in Go.
 *  - The GIL is released around every Go call that can block (binding,
 *    waiting for events, stopping, sending into a full call buffer). Short
 *    Go calls keep it: releasing costs more than they take.
 *  - Misuse raises a Python exception. A handle is never freed while the
 *    object lives, and Go validates every call id, so a bad id cannot reach
 *    freed memory.
 *  - Only the stable ABI of CPython 3.10 is used, so one build serves every
 *    CPython >= 3.10.
 */
#ifndef Py_LIMITED_API
#define Py_LIMITED_API 0x030A0000
#endif
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "libpgn.h"

/* How long one wait in Go lasts before Python gets a chance to run signal
 * handlers (Ctrl+C) while recv_batch blocks. */
#define RECV_SLICE_NS 100000000LL

/* Set in a child process after fork(). The Go runtime's threads do not
 * survive fork, so any call into Go from the child would hang. */
static volatile int forked_child = 0;

static void mark_forked_child(void) { forked_child = 1; }

static int check_not_forked(void) {
    if (forked_child) {
        PyErr_SetString(PyExc_RuntimeError,
                        "pygrpc_native cannot be used in a process forked after its Go core was "
                        "loaded (by a server, a NativeGrpcFront or ssl_server_credentials() made "
                        "before the fork): the Go runtime does not survive fork(). Make them in the "
                        "child only, or use the 'spawn' start method");
        return -1;
    }
    return 0;
}

typedef struct {
    PyObject_HEAD
    int64_t handle; /* 0 until __init__ succeeds */
    int blocking;   /* sends wait for room in a full call buffer (default) */
    int event_fd;   /* the front's event descriptor once asked for, else -1 */
    dev_t event_dev; /* and what it was then (fstat), so that the object */
    ino_t event_ino; /* closes it only if the user hasn't replaced it */
    /* Held sends (_hold_writes): the ops that end a call (respond, finish)
     * made on hold_thread (an event loop's; 0: none) leave their frames in Go
     * (PGN_SEND_HELD); the first such op after a flush calls
     * call_soon(self._flush_writes), so that the loop writes them all out
     * once, on its next turn. flush_due: that call is pending. All three are
     * read and written with the GIL held. */
    unsigned long hold_thread;
    PyObject *call_soon;
    int flush_due;
} FrontObject;

static int64_t front_handle(PyObject *self) {
    int64_t h = ((FrontObject *)self)->handle;
    if (check_not_forked() < 0) {
        return 0;
    }
    if (h <= 0) {
        PyErr_SetString(PyExc_RuntimeError, "the front was not initialized");
        return 0;
    }
    return h;
}

/* ---- results (pgn.h: one pgn_result per export) -------------------------- */

/* The switch below names every pgn_result: a code added to pgn.h without a
 * case here fails the build rather than reaching Python unmapped. */
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wswitch"

/* pygrpc_native._errors.SendLimitError, raised for PGN_TOO_LARGE; looked up
 * once, when the module loads. */
static PyObject *send_limit_error;

/* result_to_py turns an export's result into Python, for the operations on
 * call `id`: True when handed to the call, False when the call had already
 * ended, None when its buffer is full and the front doesn't block, and for
 * every other code the exception it means, with Go's message (err, which it
 * frees) where the code carries one. */
static PyObject *result_to_py(int r, uint64_t id, char *err) {
    const char *msg = err ? err : "unknown error in the Go core";
    PyObject *value = NULL;
    switch ((pgn_result)r) {
    case PGN_OK:
        value = Py_True;
        break;
    case PGN_ENDED:
        value = Py_False;
        break;
    case PGN_WOULD_BLOCK:
        value = Py_None;
        break;
    case PGN_UNKNOWN:
        PyErr_Format(PyExc_ValueError, "unknown call id %llu: this front never issued it", (unsigned long long)id);
        break;
    case PGN_STOPPED:
        PyErr_SetString(PyExc_RuntimeError, "the front is stopped: every call has ended");
        break;
    case PGN_TOO_LARGE:
        PyErr_Format(send_limit_error,
                     "call %llu: the message is larger than grpc.max_send_message_length; the call was ended with "
                     "RESOURCE_EXHAUSTED",
                     (unsigned long long)id);
        break;
    case PGN_BAD_HANDLE:
        PyErr_SetString(PyExc_RuntimeError, "the front is closed");
        break;
    case PGN_UNKNOWN_METHOD:
        PyErr_Format(PyExc_ValueError, "cannot route call %llu: %s", (unsigned long long)id, msg);
        break;
    case PGN_INVALID_METADATA:
        PyErr_Format(PyExc_ValueError, "%s (the call was ended with INTERNAL)", msg);
        break;
    case PGN_INVALID_ARGUMENT:
        PyErr_SetString(PyExc_ValueError, msg);
        break;
    case PGN_OS_ERROR:
        PyErr_SetString(PyExc_OSError, msg);
        break;
    case PGN_FAILED:
        PyErr_SetString(PyExc_RuntimeError, msg);
        break;
    }
    free(err);
    if (value == NULL && !PyErr_Occurred()) {
        PyErr_Format(PyExc_RuntimeError, "pygrpc_native: result %d from the Go core is not in pgn.h (a bug; please report it)",
                     r);
    }
    Py_XINCREF(value);
    return value;
}

#pragma GCC diagnostic pop

/* failed is 0 when an export that is not an operation on a call returned
 * PGN_OK; otherwise it raises what the result means (result_to_py; any
 * other code is a broken contract, RuntimeError) and is -1. It frees *err,
 * the export's message (err NULL: the export takes none). err is passed by
 * address so that failed(pgn_x(..., &msg), &msg) reads msg after the call
 * set it. */
static int failed(int r, char **err) {
    char *msg = err ? *err : NULL;
    if (r == PGN_OK) {
        free(msg);
        return 0;
    }
    PyObject *unexpected = result_to_py(r, 0, msg);
    if (unexpected != NULL) {
        Py_DECREF(unexpected);
        PyErr_Format(PyExc_RuntimeError, "pygrpc_native: unexpected result %d from the Go core (a bug; please report it)", r);
    }
    return -1;
}

/* ---- argument conversion ------------------------------------------------ */

static int get_call_id(PyObject *o, uint64_t *id) {
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "call_id must be an int, not %S", (PyObject *)Py_TYPE(o));
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "unknown call id %R: this front never issued it", o);
        return -1;
    }
    *id = (uint64_t)v;
    return 0;
}

/* as_bytes returns a new reference to an immutable bytes copy of any
 * bytes-like object (bytes itself is returned as is), or NULL with a
 * TypeError saying "<what> must be <expected>". Immutability matters: the
 * buffer is read with the GIL released when a send has to wait. */
static PyObject *as_bytes(PyObject *o, const char *what, const char *expected) {
    if (PyBytes_Check(o)) {
        Py_INCREF(o);
        return o;
    }
    if (PyUnicode_Check(o) || PyLong_Check(o)) {
        return PyErr_Format(PyExc_TypeError, "%s must be %s, not %S", what, expected, (PyObject *)Py_TYPE(o));
    }
    PyObject *view = PyMemoryView_FromObject(o);
    if (view == NULL) {
        PyErr_Clear();
        return PyErr_Format(PyExc_TypeError, "%s must be %s, not %S", what, expected, (PyObject *)Py_TYPE(o));
    }
    PyObject *b = PyObject_Bytes(view);
    Py_DECREF(view);
    return b;
}

/* Metadata as Go reads it (pgn_metadata): pairs that point into Python
 * objects, which refs holds until metadata_free, two a pair (the owners of
 * the key's and the value's bytes). The objects are immutable (str, bytes),
 * so Go may read them while a blocking call has released the GIL. Up to
 * METADATA_INLINE pairs, the common case, live in the struct itself (on the
 * caller's stack): no allocation per call. */
#define METADATA_INLINE 8
typedef struct {
    pgn_metadata md;
    PyObject **refs;
    pgn_pair inline_pairs[METADATA_INLINE];
    PyObject *inline_refs[2 * METADATA_INLINE];
} Metadata;

static void metadata_free(Metadata *m) {
    for (size_t i = 0; i < 2 * m->md.count; i++) {
        Py_DECREF(m->refs[i]);
    }
    if (m->refs != m->inline_refs) {
        PyMem_Free(m->refs);
        PyMem_Free(m->md.pairs);
    }
    m->md.pairs = NULL;
    m->md.count = 0;
    m->refs = NULL;
}

/* metadata_text points b at the bytes of a metadata key or value: a str's
 * UTF-8, or a bytes object's contents (any bytes-like value is copied into
 * one; keys must be str or bytes, as grpcio's, and are sent as they are).
 * A None value is empty, as grpcio encodes it.
 * Returns the object that owns the bytes (a new reference), or NULL. */
static PyObject *metadata_text(PyObject *o, int is_key, pgn_bytes *b) {
    PyObject *owner;
    if (o == Py_None && !is_key) {
        b->data = "";
        b->len = 0;
        Py_INCREF(o);
        return o;
    }
    if (PyUnicode_Check(o)) {
        Py_ssize_t n;
        b->data = PyUnicode_AsUTF8AndSize(o, &n);
        b->len = (size_t)n;
        if (b->data == NULL) {
            return NULL;
        }
        Py_INCREF(o);
        return o;
    }
    if (is_key && !PyBytes_Check(o)) {
        return PyErr_Format(PyExc_TypeError, "metadata keys must be str or bytes, got %R", o);
    }
    owner = as_bytes(o, "metadata values", "str or bytes-like");
    if (owner == NULL) {
        return NULL;
    }
    b->data = PyBytes_AsString(owner);
    b->len = (size_t)PyBytes_Size(owner);
    return owner;
}

/* metadata_pair reads one (key, value) item into *pair and refs[0..1]. */
static int metadata_pair(PyObject *item, pgn_pair *pair, PyObject **refs) {
    if (PyUnicode_Check(item) || PyBytes_Check(item) || PySequence_Check(item) != 1 || PySequence_Size(item) != 2) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "metadata entries must be (key, value) pairs, got %R", item);
        return -1;
    }
    PyObject *key = PySequence_GetItem(item, 0);
    PyObject *value = key ? PySequence_GetItem(item, 1) : NULL;
    refs[0] = key ? metadata_text(key, 1, &pair->key) : NULL;
    refs[1] = refs[0] && value ? metadata_text(value, 0, &pair->value) : NULL;
    Py_XDECREF(key);
    Py_XDECREF(value);
    if (refs[1] == NULL) {
        Py_XDECREF(refs[0]);
        return -1;
    }
    return 0;
}

/* metadata_arg reads a sequence (or any iterable) of (str | bytes key,
 * str | bytes value) pairs for Go; None is no metadata. -1 with an
 * exception set if it isn't one; out then holds nothing to free. */
static int metadata_arg(PyObject *md, Metadata *out) {
    out->md.pairs = NULL;
    out->md.count = 0;
    out->refs = NULL;
    if (md == NULL || md == Py_None) {
        return 0;
    }
    PyObject *items = md;
    if (PyList_Check(md) || PyTuple_Check(md)) {
        Py_INCREF(items);
    } else {
        PyObject *it = PyObject_GetIter(md);
        if (it == NULL) {
            PyErr_Format(PyExc_TypeError, "metadata must be a sequence of (key, value) pairs, not %S",
                         (PyObject *)Py_TYPE(md));
            return -1;
        }
        items = PySequence_List(it);
        Py_DECREF(it);
        if (items == NULL) {
            return -1;
        }
    }
    Py_ssize_t n = PySequence_Size(items);
    int rc = n < 0 ? -1 : 0;
    if (rc == 0 && n <= METADATA_INLINE) {
        out->md.pairs = out->inline_pairs;
        out->refs = out->inline_refs;
    } else if (rc == 0) {
        out->md.pairs = PyMem_Malloc((size_t)n * sizeof(pgn_pair));
        out->refs = PyMem_Malloc((size_t)n * 2 * sizeof(PyObject *));
        if (out->md.pairs == NULL || out->refs == NULL) {
            PyErr_NoMemory();
            rc = -1;
        }
    }
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        PyObject *item = PySequence_GetItem(items, i);
        rc = item ? metadata_pair(item, &out->md.pairs[i], &out->refs[2 * i]) : -1;
        Py_XDECREF(item);
        out->md.count += rc == 0;
    }
    Py_DECREF(items);
    if (rc < 0) {
        metadata_free(out);
    }
    return rc;
}

/* ---- decoding Go's results (format: go/capi/encode.go) ------------------- */

typedef struct {
    const char *p, *end;
} Reader;

static int read_u32(Reader *r, uint32_t *v) {
    if (r->end - r->p < 4) {
        return -1;
    }
    memcpy(v, r->p, 4);
    r->p += 4;
    return 0;
}

static PyObject *corrupt(void) {
    PyErr_SetString(PyExc_RuntimeError, "pygrpc_native: malformed result from the Go core (a bug; please report it)");
    return NULL;
}

static PyObject *decode_value(Reader *r) {
    if (r->p >= r->end) {
        return corrupt();
    }
    char tag = *r->p++;
    uint32_t n;
    switch (tag) {
    case 'N':
        Py_RETURN_NONE;
    case 'T':
        Py_RETURN_TRUE;
    case 'F':
        Py_RETURN_FALSE;
    case 'i': {
        int64_t v;
        if (r->end - r->p < 8) {
            return corrupt();
        }
        memcpy(&v, r->p, 8);
        r->p += 8;
        return PyLong_FromLongLong(v);
    }
    case 'd': {
        double v;
        if (r->end - r->p < 8) {
            return corrupt();
        }
        memcpy(&v, r->p, 8);
        r->p += 8;
        return PyFloat_FromDouble(v);
    }
    case 'b':
    case 's': {
        if (read_u32(r, &n) < 0 || (uint32_t)(r->end - r->p) < n) {
            return corrupt();
        }
        const char *s = r->p;
        r->p += n;
        if (tag == 'b') {
            return PyBytes_FromStringAndSize(s, n);
        }
        return PyUnicode_DecodeUTF8(s, n, "surrogateescape");
    }
    case 't':
    case 'l': {
        if (read_u32(r, &n) < 0 || (uint32_t)(r->end - r->p) < n) {
            return corrupt();
        }
        PyObject *seq = tag == 't' ? PyTuple_New(n) : PyList_New(n);
        if (seq == NULL) {
            return NULL;
        }
        for (uint32_t i = 0; i < n; i++) {
            PyObject *v = decode_value(r);
            if (v == NULL) {
                Py_DECREF(seq);
                return NULL;
            }
            if ((tag == 't' ? PyTuple_SetItem(seq, i, v) : PyList_SetItem(seq, i, v)) < 0) {
                Py_DECREF(seq);
                return NULL;
            }
        }
        return seq;
    }
    case 'm': {
        if (read_u32(r, &n) < 0) {
            return corrupt();
        }
        PyObject *d = PyDict_New();
        if (d == NULL) {
            return NULL;
        }
        for (uint32_t i = 0; i < n; i++) {
            PyObject *k = decode_value(r);
            PyObject *v = k ? decode_value(r) : NULL;
            int rc = (k && v) ? PyDict_SetItem(d, k, v) : -1;
            Py_XDECREF(k);
            Py_XDECREF(v);
            if (rc < 0) {
                Py_DECREF(d);
                return NULL;
            }
        }
        return d;
    }
    default:
        return corrupt();
    }
}

/* decode_and_free turns a buffer Go malloc'ed into a Python object. */
static PyObject *decode_and_free(pgn_buffer buf) {
    Reader r = {buf.data, buf.data + buf.len};
    PyObject *v = decode_value(&r);
    free(buf.data);
    return v;
}

/* str_arg reads a str argument as UTF-8, borrowed from o. The '#' formats of
 * PyArg_ParseTuple are avoided: which symbol they bind to depends on
 * PY_SSIZE_T_CLEAN, which CPython >= 3.13 headers no longer honour, so an
 * abi3 build made with new headers would fail on 3.10-3.12. */
static int str_arg(PyObject *o, const char *what, pgn_bytes *b) {
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %S", what, (PyObject *)Py_TYPE(o));
        return -1;
    }
    Py_ssize_t len;
    b->data = PyUnicode_AsUTF8AndSize(o, &len);
    b->len = (size_t)len;
    return b->data == NULL ? -1 : 0;
}

/* A call as the operations on one name it: the front's handle and the
 * call's id. */
typedef struct {
    int64_t h;
    uint64_t id;
} CallRef;

/* call_ref reads self's handle and a call id argument, the prologue of
 * every operation on a call: -1 with an exception set if either is bad. */
static int call_ref(PyObject *self, PyObject *id_obj, CallRef *c) {
    c->h = front_handle(self);
    return c->h == 0 || get_call_id(id_obj, &c->id) < 0 ? -1 : 0;
}

/* front_str_args parses (str[, int]) arguments by fmt ("O" or "Op"/"Oi"
 * plus the method's name), reads the str as UTF-8 (named `what` in
 * errors) and self's handle: the prologue of the methods that hand the front
 * a name. -1 with an exception set on any failure. */
static int front_str_args(PyObject *self, PyObject *args, const char *fmt, const char *what, int64_t *h,
                          pgn_bytes *s, int *number) {
    PyObject *o;
    if (!PyArg_ParseTuple(args, fmt, &o, number) || str_arg(o, what, s) < 0) {
        return -1;
    }
    *h = front_handle(self);
    return *h == 0 ? -1 : 0;
}

/* ---- Front methods ------------------------------------------------------- */

static int Front_init(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"config_json", NULL};
    PyObject *cfg_obj;
    pgn_bytes cfg;
    FrontObject *f = (FrontObject *)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", kwlist, &cfg_obj) || str_arg(cfg_obj, "config_json", &cfg) < 0 ||
        check_not_forked() < 0) {
        return -1;
    }
    if (f->handle != 0) {
        PyErr_SetString(PyExc_RuntimeError, "the front is already initialized");
        return -1;
    }
    char *err = NULL;
    int64_t h = 0;
    if (failed(pgn_new(cfg, &h, &err), &err) < 0) {
        return -1;
    }
    f->handle = h;
    f->blocking = 1;
    f->event_fd = -1;
    return 0;
}

static void Front_dealloc(PyObject *self) {
    FrontObject *f = (FrontObject *)self;
    Py_CLEAR(f->call_soon);
    struct stat st;
    if (f->handle != 0 && f->event_fd >= 0 && fstat(f->event_fd, &st) == 0 && st.st_dev == f->event_dev &&
        st.st_ino == f->event_ino) {
        /* Ours still (without a handle, __init__ never ran or failed, and
         * event_fd isn't one of ours; closed by the user, the number may
         * be another file's now). */
        close(f->event_fd);
    }
    f->event_fd = -1;
    int64_t h = f->handle;
    f->handle = 0;
    if (h > 0 && !forked_child) {
        Py_BEGIN_ALLOW_THREADS
        pgn_release(h);
        Py_END_ALLOW_THREADS
    }
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

static PyObject *Front_start(PyObject *self, PyObject *unused) {
    int64_t h = front_handle(self);
    if (h == 0) {
        return NULL;
    }
    char *err = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pgn_start(h, &err);
    Py_END_ALLOW_THREADS
    if (failed(rc, &err) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Front_bind(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"address", NULL};
    PyObject *addr_obj = Py_None;
    pgn_bytes addr = {NULL, 0};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O:bind", kwlist, &addr_obj) ||
        (addr_obj != Py_None && str_arg(addr_obj, "address", &addr) < 0)) {
        return NULL;
    }
    int64_t h = front_handle(self);
    if (h == 0) {
        return NULL;
    }
    char *err = NULL;
    int rc;
    int32_t port = 0;
    Py_BEGIN_ALLOW_THREADS
    rc = pgn_bind(h, addr, &port, &err);
    Py_END_ALLOW_THREADS
    if (failed(rc, &err) < 0) {
        return NULL;
    }
    return PyLong_FromLong(port);
}

static PyObject *Front_add_method(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"path", "server_streaming", "client_streaming", NULL};
    PyObject *o;
    int streaming, client_streaming = 0;
    pgn_bytes path;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "Op|p:add_method", kwlist, &o, &streaming, &client_streaming) ||
        str_arg(o, "path", &path) < 0) {
        return NULL;
    }
    int64_t h = front_handle(self);
    if (h == 0) {
        return NULL;
    }
    int32_t method_id = 0;
    char *err = NULL;
    if (failed(pgn_add_method(h, path, streaming, client_streaming, &method_id, &err), &err) < 0) {
        return NULL;
    }
    return PyLong_FromLong(method_id);
}

static PyObject *Front_add_fallback_method(PyObject *self, PyObject *args) {
    int64_t h;
    pgn_bytes path;
    char *err = NULL;
    if (front_str_args(self, args, "O:add_fallback_method", "path", &h, &path, NULL) < 0 ||
        failed(pgn_add_fallback_method(h, path, &err), &err) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Front_route(PyObject *self, PyObject *args) {
    PyObject *id_obj;
    int method_id;
    CallRef c;
    if (!PyArg_ParseTuple(args, "Oi:route", &id_obj, &method_id) || call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    int rc;
    char *err = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = pgn_route(c.h, c.id, method_id, &err);
    Py_END_ALLOW_THREADS
    return result_to_py(rc, c.id, err);
}

static PyObject *Front_get_port(PyObject *self, void *closure) {
    int64_t h = front_handle(self);
    if (h == 0) {
        return NULL;
    }
    int32_t port = 0;
    if (failed(pgn_port(h, &port), NULL) < 0) {
        return NULL;
    }
    return PyLong_FromLong(port);
}

/* seconds_to_ns reads an optional non-negative number of seconds;
 * None gives `none_value`. */
static int seconds_to_ns(PyObject *o, const char *what, long long none_value, long long *ns) {
    if (o == NULL || o == Py_None) {
        *ns = none_value;
        return 0;
    }
    double s = PyFloat_AsDouble(o);
    if (s == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a number of seconds or None, not %S", what, (PyObject *)Py_TYPE(o));
        return -1;
    }
    if (!(s >= 0)) {
        PyErr_Format(PyExc_ValueError, "%s must not be negative, got %R", what, o);
        return -1;
    }
    *ns = s > 9e9 ? (long long)9e18 : (long long)(s * 1e9);
    return 0;
}

static PyObject *Front_stop(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"grace", "wait", NULL};
    PyObject *grace = Py_None;
    int wait = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Op", kwlist, &grace, &wait)) {
        return NULL;
    }
    int64_t h = front_handle(self);
    long long ns;
    if (h == 0 || seconds_to_ns(grace, "grace", -1, &ns) < 0) {
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pgn_stop(h, ns, wait);
    Py_END_ALLOW_THREADS
    if (failed(rc, NULL) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- taking events -------------------------------------------------------- */

/* Most events one pgn_recv describes, whatever max_events asks: the arrays
 * below are allocated per batch. */
#define RECV_MAX_EVENTS 1024
/* Payload bytes per batch (unless the first event alone has more), so that
 * a burst of large requests is handed over in pieces a handler can start on
 * rather than as one multi-MiB batch. */
#define RECV_MAX_BYTES (1LL << 20)

/* The per-batch arrays: Go's description of each event, where its payload
 * goes, and the Python object that owns that memory. */
typedef struct {
    pgn_event *events;
    char **dsts;
    PyObject **payloads;
} BatchArrays;

static int batch_arrays_alloc(BatchArrays *b, int n) {
    b->events = PyMem_Malloc((size_t)n * sizeof(pgn_event));
    b->dsts = PyMem_Malloc((size_t)n * sizeof(char *));
    b->payloads = PyMem_Malloc((size_t)n * sizeof(PyObject *));
    if (b->events == NULL || b->dsts == NULL || b->payloads == NULL) {
        PyMem_Free(b->events);
        PyMem_Free(b->dsts);
        PyMem_Free(b->payloads);
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static void batch_arrays_free(BatchArrays *b) {
    PyMem_Free(b->events);
    PyMem_Free(b->dsts);
    PyMem_Free(b->payloads);
}

/* key_object returns a new reference to the client key at key (len bytes),
 * reusing *last when the previous key had the same text: the keys of one
 * batch mostly come from a few connections. */
static PyObject *key_object(const char *key, uint64_t len, const char **last_key, uint64_t *last_len,
                            PyObject **last) {
    if (*last != NULL && *last_len == len && memcmp(*last_key, key, (size_t)len) == 0) {
        Py_INCREF(*last);
        return *last;
    }
    PyObject *u = PyUnicode_DecodeUTF8(key, (Py_ssize_t)len, "surrogateescape");
    if (u != NULL) {
        *last_key = key;
        *last_len = len;
        *last = u;
    }
    return u;
}

/* event_list turns a batch pgn_recv described into a list of event tuples
 * (kind, call_id, method_id, payload, client_key): it allocates each
 * payload as a bytes object, has Go copy the payloads (and keys) straight
 * into them (pgn_fill), then builds the tuples. pgn_fill runs exactly once
 * whatever fails: a payload that could not be allocated ends its call with
 * RESOURCE_EXHAUSTED in Go, and calls taken but not handed to Python are
 * cancelled, so nothing is lost unseen. */
static PyObject *event_list(int64_t h, pgn_recv_args *a, BatchArrays *b) {
    int n = a->count;
    int alloc_failed = 0;
    char *keys = NULL;
    if (a->with_keys && a->keys_len > 0) {
        keys = PyMem_Malloc((size_t)a->keys_len);
        alloc_failed = keys == NULL;
    }
    for (int i = 0; i < n; i++) {
        b->payloads[i] = NULL;
        b->dsts[i] = NULL;
        if (alloc_failed || !b->events[i].has_payload) {
            continue;
        }
        PyObject *p = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)b->events[i].payload_len);
        if (p == NULL) {
            alloc_failed = 1;
            continue;
        }
        b->payloads[i] = p;
        b->dsts[i] = PyBytes_AsString(p);
    }
    if (alloc_failed) {
        /* Every call of the batch is ended in Go rather than half-delivered. */
        for (int i = 0; i < n; i++) {
            b->dsts[i] = NULL;
        }
    }
    pgn_fill(a->batch, b->dsts, keys);
    PyObject *list = alloc_failed ? NULL : PyList_New(n);
    const char *last_key = NULL, *key = keys;
    uint64_t last_len = 0;
    PyObject *last = NULL;
    int built = 0;
    for (; list != NULL && built < n; built++) {
        pgn_event *e = &b->events[built];
        PyObject *payload = b->payloads[built] ? b->payloads[built] : Py_None;
        PyObject *k = Py_None;
        if (keys != NULL) {
            k = key_object(key, e->key_len, &last_key, &last_len, &last);
            key += e->key_len;
        } else if (a->with_keys) {
            k = PyUnicode_FromString("");
        } else {
            Py_INCREF(k);
        }
        PyObject *t = PyTuple_New(5);
        PyObject *kind = PyLong_FromLong(e->kind);
        PyObject *id = PyLong_FromUnsignedLongLong(e->call_id);
        PyObject *method = PyLong_FromLong(e->method_id);
        if (t == NULL || kind == NULL || id == NULL || method == NULL || k == NULL) {
            Py_XDECREF(t);
            Py_XDECREF(kind);
            Py_XDECREF(id);
            Py_XDECREF(method);
            Py_XDECREF(k);
            Py_CLEAR(list);
            break;
        }
        Py_INCREF(payload);
        PyTuple_SetItem(t, 0, kind);
        PyTuple_SetItem(t, 1, id);
        PyTuple_SetItem(t, 2, method);
        PyTuple_SetItem(t, 3, payload);
        PyTuple_SetItem(t, 4, k);
        PyList_SetItem(list, built, t);
    }
    for (int i = 0; i < n; i++) {
        Py_XDECREF(b->payloads[i]);
    }
    PyMem_Free(keys);
    if (list == NULL) {
        if (!alloc_failed) {
            /* Calls already taken from Go but not handed to Python. Any
             * result will do (ended, or already ended): the exception
             * raised is the outcome. */
            for (int i = 0; i < n; i++) {
                if (b->events[i].kind != PGN_EVENT_CANCEL) {
                    (void)pgn_cancel(h, b->events[i].call_id);
                }
            }
        }
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
    }
    return list;
}

static PyObject *recv_main(PyObject *self, int64_t h, pgn_recv_args *a, BatchArrays *b, long long left);
static PyObject *recv_in_go(int64_t h, pgn_recv_args *a, BatchArrays *b, long long left);

/* recv_events implements recv_batch, (max_events, timeout=None,
 * client_keys=True), and recv_watched, (max_events, timeout=None).
 * Keywords are allowed; parsed by hand because it runs once per batch on
 * the hot path. */
static PyObject *recv_events(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                             int queue) {
    static const char *names[] = {"max_events", "timeout", "client_keys"};
    Py_ssize_t nparams = queue == PGN_QUEUE_MAIN ? 3 : 2;
    PyObject *vals[3] = {NULL, NULL, NULL};
    Py_ssize_t nkw = kwnames ? PyTuple_Size(kwnames) : 0;
    if (nargs > nparams) {
        return PyErr_Format(PyExc_TypeError, "takes at most %zd arguments (%zd given)", nparams, nargs);
    }
    for (Py_ssize_t i = 0; i < nargs; i++) {
        vals[i] = args[i];
    }
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GetItem(kwnames, i);
        Py_ssize_t j = 0;
        while (j < nparams && PyUnicode_CompareWithASCIIString(name, names[j]) != 0) {
            j++;
        }
        if (j == nparams) {
            return PyErr_Format(PyExc_TypeError, "got an unexpected keyword argument %R", name);
        }
        if (vals[j] != NULL) {
            return PyErr_Format(PyExc_TypeError, "got multiple values for argument %R", name);
        }
        vals[j] = args[nargs + i];
    }
    if (vals[0] == NULL) {
        PyErr_SetString(PyExc_TypeError, "missing required argument 'max_events'");
        return NULL;
    }
    int with_keys = 1;
    if (vals[2] != NULL && (with_keys = PyObject_IsTrue(vals[2])) < 0) {
        return NULL;
    }
    int64_t h = front_handle(self);
    if (h == 0) {
        return NULL;
    }
    if (!PyLong_Check(vals[0])) {
        return PyErr_Format(PyExc_TypeError, "max_events must be an int, not %S", (PyObject *)Py_TYPE(vals[0]));
    }
    long max_events = PyLong_AsLong(vals[0]);
    if (max_events == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (max_events < 1 || max_events > 1000000) {
        return PyErr_Format(PyExc_ValueError, "max_events must be between 1 and 1000000, got %ld", max_events);
    }
    long long left;
    if (seconds_to_ns(vals[1], "timeout", -1, &left) < 0) {
        return NULL;
    }
    int room = max_events < RECV_MAX_EVENTS ? (int)max_events : RECV_MAX_EVENTS;
    BatchArrays b;
    if (batch_arrays_alloc(&b, room) < 0) {
        return NULL;
    }
    pgn_recv_args a = {.queue = queue, .max_events = room, .max_bytes = RECV_MAX_BYTES, .with_keys = with_keys,
                       .events = b.events};
    PyObject *result = NULL;
    if (queue == PGN_QUEUE_MAIN) {
        result = recv_main(self, h, &a, &b, left);
    } else {
        result = recv_in_go(h, &a, &b, left);
    }
    batch_arrays_free(&b);
    return result;
}

/* batch_result is a pgn_recv's outcome as recv_batch returns it: the
 * batch's events, or None once the front has stopped. A PGN_OK without
 * events (the wait timed out) is not an outcome; the callers wait again. */
static PyObject *batch_result(int rc, int64_t h, pgn_recv_args *a, BatchArrays *b) {
    if (rc == PGN_OK) {
        return event_list(h, a, b);
    }
    if (rc == PGN_STOPPED) {
        Py_RETURN_NONE;
    }
    failed(rc, NULL);
    return NULL;
}

/* front_event_fd is the front's event descriptor: a duplicate of Go's
 * (pgn_event_fd), made once, kept and closed with the object. Python and
 * recv_main see only the duplicate, so that a user who closes it (the docs
 * say not to) closes nothing of Go's: Go goes on reading its own descriptor,
 * never a file that later took the number. -1 with an exception set if
 * there is none. */
static int front_event_fd(PyObject *self, int64_t h) {
    FrontObject *f = (FrontObject *)self;
    if (f->event_fd < 0) {
        char *err = NULL;
        int32_t fd = -1;
        if (failed(pgn_event_fd(h, &fd, &err), &err) < 0) {
            return -1;
        }
        int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
        struct stat st;
        if (dup < 0 || fstat(dup, &st) < 0) {
            PyErr_SetFromErrno(PyExc_OSError);
            if (dup >= 0) {
                close(dup);
            }
            return -1;
        }
        f->event_fd = dup;
        f->event_dev = st.st_dev;
        f->event_ino = st.st_ino;
    }
    return f->event_fd;
}

static long long monotonic_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* recv_main waits for the main queue on the front's event descriptor, in C
 * with the GIL released, and takes events with a zero timeout. A thread
 * parked inside Go instead is a cgo callback's thread, locked to its
 * goroutine: waking it makes Go's scheduler hand its P over and put the
 * waking thread to sleep, two context switches per batch, where the
 * descriptor costs Go one write and this thread one wake-up. */
static PyObject *recv_main(PyObject *self, int64_t h, pgn_recv_args *a, BatchArrays *b, long long left) {
    int fd = front_event_fd(self, h);
    if (fd < 0) {
        return NULL;
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    long long deadline = left < 0 ? -1 : monotonic_ns() + left;
    for (;;) {
        a->timeout_ns = 0;
        int rc = pgn_recv(h, a);
        if (rc != PGN_OK || a->count > 0) {
            return batch_result(rc, h, a, b);
        }
        if (deadline >= 0) {
            left = deadline - monotonic_ns();
            if (left <= 0) {
                return PyList_New(0);
            }
        }
        long long slice = (left < 0 || left > RECV_SLICE_NS) ? RECV_SLICE_NS : left;
        int ms = (int)((slice + 999999) / 1000000);
        Py_BEGIN_ALLOW_THREADS
        poll(&pfd, 1, ms);
        Py_END_ALLOW_THREADS
        if (pfd.revents & POLLNVAL) {
            return PyErr_Format(PyExc_RuntimeError,
                                "the front's event descriptor %d was closed; it is the front's own "
                                "(event_fd()): stop watching it instead of closing it",
                                fd);
        }
        if (PyErr_CheckSignals() < 0) {
            return NULL;
        }
    }
}

/* recv_in_go waits inside Go (pgn_recv with a timeout), in slices so that
 * signal handlers run: for the watched queue, which has no descriptor. */
static PyObject *recv_in_go(int64_t h, pgn_recv_args *a, BatchArrays *b, long long left) {
    for (;;) {
        a->timeout_ns = (left < 0 || left > RECV_SLICE_NS) ? RECV_SLICE_NS : left;
        int rc;
        Py_BEGIN_ALLOW_THREADS
        rc = pgn_recv(h, a);
        Py_END_ALLOW_THREADS
        if (rc != PGN_OK || a->count > 0) {
            return batch_result(rc, h, a, b);
        }
        if (PyErr_CheckSignals() < 0) {
            return NULL;
        }
        if (left >= 0) {
            left -= a->timeout_ns;
            if (left <= 0) {
                return PyList_New(0);
            }
        }
    }
}

static PyObject *Front_recv_batch(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return recv_events(self, args, nargs, kwnames, PGN_QUEUE_MAIN);
}

static PyObject *Front_recv_watched(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    return recv_events(self, args, nargs, kwnames, PGN_QUEUE_WATCHED);
}

/* flush_held writes out the frames of the front's held sends, without the
 * GIL; the Go call never waits for the peer. */
static void flush_held(FrontObject *f) {
    int64_t h = f->handle;
    f->flush_due = 0;
    if (h > 0 && !forked_child) {
        Py_BEGIN_ALLOW_THREADS
        pgn_flush_held(h);
        Py_END_ALLOW_THREADS
    }
}

/* held_sent follows a send that left its frames in Go (PGN_SEND_HELD): the
 * first after a flush has the loop flush on its next turn. Should call_soon
 * fail (the loop is closed), the frames are written at once instead: the
 * send itself succeeded, so its caller is not told. */
static void held_sent(FrontObject *f) {
    if (f->flush_due) {
        return;
    }
    f->flush_due = 1;
    PyObject *flush = PyObject_GetAttrString((PyObject *)f, "_flush_writes");
    PyObject *r = flush == NULL ? NULL : PyObject_CallFunctionObjArgs(f->call_soon, flush, NULL);
    Py_XDECREF(flush);
    if (r == NULL) {
        PyErr_Clear();
        flush_held(f);
        return;
    }
    Py_DECREF(r);
}

/* op_was_posted: whether a send's result means Go took the op (which may
 * end the call): OK, and the results that report what the op does besides
 * (the message over the send limit, metadata refused: the call ends with a
 * status the op's frames carry). A held op that was posted must be flushed
 * like any other, or its frames, and every later held op of its connection,
 * wait for another call's flush. */
static int op_was_posted(int rc) {
    return rc == PGN_OK || rc == PGN_TOO_LARGE || rc == PGN_INVALID_METADATA;
}

/* Runs a Go call that may report PGN_WOULD_BLOCK first without releasing the
 * GIL (the common case: room in the call's buffer), then, if the front
 * blocks, again with the GIL released, waiting for room. A front that
 * doesn't block (an event loop's) gets PGN_WOULD_BLOCK back: None.
 *
 * ends_call: the op may end the call (respond, finish). On the thread whose
 * sends are held (_hold_writes), such an op holds its frames for the loop's
 * next turn: its handler is done, so nothing of its own can keep the loop
 * from that turn. A message or headers are not held: a coroutine may still
 * block the loop after writing them, and its client must get them first,
 * as grpc.aio's does. */
#define CALL_MAYBE_BLOCKING(rc, ends_call, expr_with_block)                                          \
    do {                                                                                             \
        FrontObject *f_ = (FrontObject *)self;                                                       \
        int block = PGN_SEND_NO_WAIT;                                                                \
        if ((ends_call) && f_->hold_thread != 0 && f_->hold_thread == PyThread_get_thread_ident()) { \
            block = PGN_SEND_HELD;                                                                   \
        }                                                                                            \
        rc = (expr_with_block);                                                                      \
        if (block == PGN_SEND_HELD && op_was_posted(rc)) {                                           \
            held_sent(f_);                                                                           \
        } else if (rc == PGN_WOULD_BLOCK && f_->blocking) {                                          \
            block = PGN_SEND_WAIT;                                                                   \
            Py_BEGIN_ALLOW_THREADS rc = (expr_with_block);                                           \
            Py_END_ALLOW_THREADS                                                                     \
        }                                                                                            \
    } while (0)

/* payload_call implements respond and send_message, the per-message path. */
static PyObject *payload_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs, const char *name,
                              int (*fn)(int64_t, uint64_t, pgn_bytes, int32_t), int ends_call) {
    if (nargs != 2) {
        return PyErr_Format(PyExc_TypeError, "%s(call_id, payload) takes exactly 2 arguments (%zd given)", name, nargs);
    }
    CallRef c;
    if (call_ref(self, args[0], &c) < 0) {
        return NULL;
    }
    PyObject *b = as_bytes(args[1], "payload", "bytes-like");
    if (b == NULL) {
        return NULL;
    }
    char *p;
    Py_ssize_t n;
    if (PyBytes_AsStringAndSize(b, &p, &n) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    pgn_bytes msg = {p, (size_t)n};
    int rc;
    CALL_MAYBE_BLOCKING(rc, ends_call, fn(c.h, c.id, msg, block));
    Py_DECREF(b);
    return result_to_py(rc, c.id, NULL);
}

static PyObject *Front_respond(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return payload_call(self, args, nargs, "respond", pgn_respond, 1);
}

static PyObject *Front_send_message(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return payload_call(self, args, nargs, "send_message", pgn_send, 0);
}

static PyObject *Front_send_initial_metadata(PyObject *self, PyObject *args) {
    PyObject *id_obj, *md;
    CallRef c;
    Metadata m;
    if (!PyArg_ParseTuple(args, "OO:send_initial_metadata", &id_obj, &md) || call_ref(self, id_obj, &c) < 0 ||
        metadata_arg(md, &m) < 0) {
        return NULL;
    }
    int rc;
    char *err = NULL;
    CALL_MAYBE_BLOCKING(rc, 0, pgn_send_header(c.h, c.id, m.md, block, &err));
    metadata_free(&m);
    return result_to_py(rc, c.id, err);
}

/* status_code reads finish()'s code: an int from 0 to 16, 0 when absent. */
static int status_code(PyObject *o, int32_t *code) {
    *code = 0;
    if (o == NULL) {
        return 0;
    }
    if (!PyLong_Check(o)) {
        PyErr_Format(PyExc_TypeError, "code must be an int status code, not %S", (PyObject *)Py_TYPE(o));
        return -1;
    }
    long v = PyLong_AsLong(o);
    if ((v == -1 && PyErr_Occurred()) || v < 0 || v > 16) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "code must be a gRPC status code between 0 and 16, got %R", o);
        return -1;
    }
    *code = (int32_t)v;
    return 0;
}

/* optional_text reads a str (as UTF-8), bytes (as they are: grpcio sends a
 * status message given as bytes unchanged) or None (empty) argument. */
static int optional_text(PyObject *o, const char *what, pgn_bytes *b) {
    b->data = "";
    b->len = 0;
    if (o == Py_None) {
        return 0;
    }
    if (PyBytes_Check(o)) {
        char *data;
        Py_ssize_t len;
        if (PyBytes_AsStringAndSize(o, &data, &len) < 0) {
            return -1;
        }
        b->data = data;
        b->len = (size_t)len;
        return 0;
    }
    if (!PyUnicode_Check(o)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, bytes or None, not %S", what, (PyObject *)Py_TYPE(o));
        return -1;
    }
    return str_arg(o, what, b);
}

static PyObject *Front_finish(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"call_id", "code", "details", "trailing_metadata", "payload", NULL};
    PyObject *id_obj, *code_obj = NULL, *details_obj = Py_None, *md = Py_None, *payload_obj = Py_None;
    CallRef c;
    pgn_finish_args a = {.payload = {NULL, 0}};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|OOOO:finish", kwlist, &id_obj, &code_obj, &details_obj, &md,
                                     &payload_obj) ||
        call_ref(self, id_obj, &c) < 0 || status_code(code_obj, &a.code) < 0 ||
        optional_text(details_obj, "details", &a.details) < 0) {
        return NULL;
    }
    PyObject *payload = NULL;
    if (payload_obj != Py_None) {
        char *p;
        Py_ssize_t n;
        payload = as_bytes(payload_obj, "payload", "bytes-like");
        if (payload == NULL || PyBytes_AsStringAndSize(payload, &p, &n) < 0) {
            Py_XDECREF(payload);
            return NULL;
        }
        a.payload.data = p;
        a.payload.len = (size_t)n;
    }
    Metadata m;
    if (metadata_arg(md, &m) < 0) {
        Py_XDECREF(payload);
        return NULL;
    }
    a.metadata = m.md;
    int rc;
    char *err = NULL;
    CALL_MAYBE_BLOCKING(rc, 1, pgn_finish(c.h, c.id, &a, block, &err));
    metadata_free(&m);
    Py_XDECREF(payload);
    return result_to_py(rc, c.id, err);
}

/* Front_set_compression: set_compression(call_id, name), name "" (none),
 * "deflate" or "gzip"; ValueError for another name. */
static PyObject *Front_set_compression(PyObject *self, PyObject *args) {
    PyObject *id_obj, *name_obj;
    CallRef c;
    pgn_bytes name;
    if (!PyArg_ParseTuple(args, "OO:set_compression", &id_obj, &name_obj) || call_ref(self, id_obj, &c) < 0 ||
        str_arg(name_obj, "name", &name) < 0) {
        return NULL;
    }
    int rc;
    char *err = NULL;
    CALL_MAYBE_BLOCKING(rc, 0, pgn_set_compression(c.h, c.id, name, block, &err));
    return result_to_py(rc, c.id, err);
}

static PyObject *Front_disable_next_message_compression(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    int rc;
    CALL_MAYBE_BLOCKING(rc, 0, pgn_disable_next_compression(c.h, c.id, block));
    return result_to_py(rc, c.id, NULL);
}

/* Front_hold_writes: _hold_writes(call_soon) from an event loop's thread
 * holds that thread's sends for one flush per turn of the loop (see
 * FrontObject); call_soon is the loop's. _hold_writes(None) writes out what
 * is held and sends as before. */
static PyObject *Front_hold_writes(PyObject *self, PyObject *call_soon) {
    FrontObject *f = (FrontObject *)self;
    if (front_handle(self) == 0) {
        return NULL;
    }
    if (call_soon != Py_None && !PyCallable_Check(call_soon)) {
        return PyErr_Format(PyExc_TypeError, "_hold_writes takes the loop's call_soon or None, not %S",
                            (PyObject *)Py_TYPE(call_soon));
    }
    if (call_soon == Py_None) {
        f->hold_thread = 0;
        Py_CLEAR(f->call_soon);
        flush_held(f);
        Py_RETURN_NONE;
    }
    PyObject *old = f->call_soon;
    Py_INCREF(call_soon);
    f->call_soon = call_soon;
    Py_XDECREF(old);
    f->hold_thread = PyThread_get_thread_ident();
    Py_RETURN_NONE;
}

static PyObject *Front_flush_writes(PyObject *self, PyObject *unused) {
    if (front_handle(self) == 0) {
        return NULL;
    }
    flush_held((FrontObject *)self);
    Py_RETURN_NONE;
}

static PyObject *Front_cancel(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pgn_cancel(c.h, c.id);
    Py_END_ALLOW_THREADS
    return result_to_py(rc, c.id, NULL);
}

static PyObject *Front_request_messages(PyObject *self, PyObject *args) {
    PyObject *id_obj;
    int n = 1;
    CallRef c;
    if (!PyArg_ParseTuple(args, "O|i:request_messages", &id_obj, &n) || call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    char *err = NULL;
    int rc = pgn_request_messages(c.h, c.id, n, &err); /* before err is read */
    return result_to_py(rc, c.id, err);
}

/* Request messages up to this size are copied by pgn_read straight into the
 * reading thread's stack, then into their bytes object. */
#define READ_BUF_BYTES 4096

/* read_message takes the next request message of a client-streaming call,
 * waiting for it with the GIL released, on a waiter in C (pgn.h: why not
 * in Go): bytes, None once the client has half-closed and everything was
 * read, False once the call has ended. The first look hands Go the waiter
 * already, so a message that isn't there yet costs two calls into Go. */
static PyObject *Front_read_message(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    char buf[READ_BUF_BYTES];
    pgn_waiter w;
    pgn_read_args a = {.waiter = &w, .buf = buf, .buf_cap = sizeof buf};
    char *err = NULL;
    int rc;
    pgn_waiter_init(&w);
    rc = pgn_read(c.h, c.id, &a, &err);
    if (rc == PGN_WOULD_BLOCK) {
        Py_BEGIN_ALLOW_THREADS
        do {
            pgn_waiter_wait(&w);
            pgn_waiter_destroy(&w);
            pgn_waiter_init(&w);
            rc = pgn_read(c.h, c.id, &a, &err);
        } while (rc == PGN_WOULD_BLOCK);
        Py_END_ALLOW_THREADS
    }
    pgn_waiter_destroy(&w);
    if (rc != PGN_OK) {
        return result_to_py(rc, c.id, err);
    }
    if (a.eof) {
        Py_RETURN_NONE;
    }
    if (a.batch == 0) {
        return PyBytes_FromStringAndSize(buf, (Py_ssize_t)a.payload_len);
    }
    PyObject *p = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)a.payload_len);
    char *dst = p == NULL ? NULL : PyBytes_AsString(p);
    /* Exactly once, even without memory: Go then ends the call with
     * RESOURCE_EXHAUSTED. */
    pgn_fill(a.batch, &dst, NULL);
    return p;
}

static PyObject *Front_handler_done(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    return result_to_py(pgn_handler_done(c.h, c.id), c.id, NULL);
}

static PyObject *Front_wait_room(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pgn_wait_room(c.h, c.id);
    Py_END_ALLOW_THREADS
    return result_to_py(rc, c.id, NULL);
}

static PyObject *Front_notify_room(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    return result_to_py(pgn_notify_room(c.h, c.id), c.id, NULL);
}

static PyObject *Front_event_fd(PyObject *self, PyObject *unused) {
    int64_t h = front_handle(self);
    int fd = h == 0 ? -1 : front_event_fd(self, h);
    return fd < 0 ? NULL : PyLong_FromLong(fd);
}

static PyObject *Front_watch(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    return result_to_py(pgn_watch(c.h, c.id), c.id, NULL);
}

static PyObject *Front_is_active(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    int32_t active = 0;
    int rc = pgn_is_active(c.h, c.id, &active);
    return rc == PGN_OK ? PyBool_FromLong(active) : result_to_py(rc, c.id, NULL);
}

static PyObject *Front_time_remaining(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    int64_t ns = -1;
    int rc = pgn_time_remaining(c.h, c.id, &ns);
    if (rc == PGN_ENDED) {
        return PyFloat_FromDouble(0.0);
    }
    if (rc != PGN_OK) {
        return result_to_py(rc, c.id, NULL);
    }
    if (ns < 0) {
        Py_RETURN_NONE;
    }
    return PyFloat_FromDouble((double)ns / 1e9);
}

/* call_details and metrics return what Go encoded; see decode_value. */
static PyObject *Front_call_details(PyObject *self, PyObject *id_obj) {
    CallRef c;
    if (call_ref(self, id_obj, &c) < 0) {
        return NULL;
    }
    pgn_buffer out = {NULL, 0};
    int rc = pgn_call_details(c.h, c.id, &out);
    if (rc == PGN_ENDED) {
        return PyErr_Format(PyExc_LookupError, "call %llu has ended; read its details while it is active",
                            (unsigned long long)c.id);
    }
    if (rc != PGN_OK) {
        return result_to_py(rc, c.id, NULL);
    }
    return decode_and_free(out);
}

/* _set_tls(tls_json) replaces the TLS credentials before start(): the JSON
 * of pygrpc_native's ServerCredentials, or "null" for plaintext. Used by
 * server().add_secure_port(); the low-level API takes `credentials=` at
 * creation. */
static PyObject *Front_set_tls(PyObject *self, PyObject *arg) {
    int64_t h = front_handle(self);
    pgn_bytes doc;
    char *err = NULL;
    if (h == 0 || str_arg(arg, "tls_json", &doc) < 0 || failed(pgn_set_tls(h, doc, &err), &err) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* _update_tls(material_json) replaces the key material of the front's TLS
 * ports for handshakes from now on (NativeGrpcFront.update_credentials). */
static PyObject *Front_update_tls(PyObject *self, PyObject *arg) {
    int64_t h = front_handle(self);
    pgn_bytes doc;
    char *err = NULL;
    if (h == 0 || str_arg(arg, "material_json", &doc) < 0 || failed(pgn_tls_update(h, doc, &err), &err) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Front_metrics(PyObject *self, PyObject *unused) {
    int64_t h = front_handle(self);
    pgn_buffer out = {NULL, 0};
    if (h == 0 || failed(pgn_metrics(h, &out), NULL) < 0) {
        return NULL;
    }
    return decode_and_free(out);
}

/* ---- native health service (grpc.health.v1.Health) --------------------- */

static PyObject *Front_enable_health(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"changes_only", "check", "watch", NULL};
    int changes_only = 0, check = 1, watch = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|p$pp:enable_health", kwlist, &changes_only, &check, &watch)) {
        return NULL;
    }
    uint32_t methods = (check ? PGN_HEALTH_CHECK : 0) | (watch ? PGN_HEALTH_WATCH : 0);
    int64_t h = front_handle(self);
    if (h == 0 || failed(pgn_enable_health(h, changes_only, methods), NULL) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Front_set_health(PyObject *self, PyObject *args) {
    int64_t h;
    pgn_bytes service;
    int status;
    char *err = NULL;
    if (front_str_args(self, args, "Oi:set_health", "service", &h, &service, &status) < 0 ||
        failed(pgn_set_health(h, service, (int32_t)status, &err), &err) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Front_enter_health_shutdown(PyObject *self, PyObject *unused) {
    int64_t h = front_handle(self);
    char *err = NULL;
    if (h == 0 || failed(pgn_enter_health_shutdown(h, &err), &err) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* ---- A66 call metrics (go/front/callmetrics.go) --------------------------- */

static PyObject *Front_metrics_enable(PyObject *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"address", "all_methods", "records", NULL};
    PyObject *addr_obj = Py_None;
    int all_methods = 0, records = 0;
    pgn_bytes addr = {NULL, 0};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Opp:_metrics_enable", kwlist, &addr_obj, &all_methods, &records) ||
        (addr_obj != Py_None && str_arg(addr_obj, "address", &addr) < 0)) {
        return NULL;
    }
    int64_t h = front_handle(self);
    if (h == 0) {
        return NULL;
    }
    char *err = NULL;
    int32_t port = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pgn_metrics_enable(h, addr, all_methods, records, &port, &err);
    Py_END_ALLOW_THREADS
    if (failed(rc, &err) < 0) {
        return NULL;
    }
    return PyLong_FromLong(port);
}

static PyObject *Front_metrics_register(PyObject *self, PyObject *arg) {
    int64_t h = front_handle(self);
    pgn_bytes path;
    char *err = NULL;
    if (h == 0 || str_arg(arg, "path", &path) < 0 || failed(pgn_metrics_register(h, path, &err), &err) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Front_metrics_methods(PyObject *self, PyObject *unused) {
    int64_t h = front_handle(self);
    pgn_buffer out = {NULL, 0};
    if (h == 0 || failed(pgn_metrics_methods(h, &out), NULL) < 0) {
        return NULL;
    }
    return decode_and_free(out);
}

/* _metrics_drain(max_records, wait): up to max_records ended calls'
 * pgn_metrics_record structs as bytes, waiting (GIL released) up to wait
 * seconds (None: no limit) for the first; b"" when the wait passed, None
 * once the front has stopped and none is left. */
static PyObject *Front_metrics_drain(PyObject *self, PyObject *args) {
    int max_records;
    PyObject *wait_obj = Py_None;
    if (!PyArg_ParseTuple(args, "i|O:_metrics_drain", &max_records, &wait_obj)) {
        return NULL;
    }
    long long wait_ns = 0;
    int64_t h = front_handle(self);
    if (h == 0 || seconds_to_ns(wait_obj, "wait", -1, &wait_ns) < 0) {
        return NULL;
    }
    if (max_records < 1) {
        PyErr_Format(PyExc_ValueError, "max_records must be positive, got %d", max_records);
        return NULL;
    }
    pgn_metrics_record *recs = PyMem_Malloc((size_t)max_records * sizeof(pgn_metrics_record));
    if (recs == NULL) {
        return PyErr_NoMemory();
    }
    int32_t count = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = pgn_metrics_drain(h, recs, (int32_t)max_records, wait_ns, &count);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (rc == PGN_STOPPED) {
        out = Py_NewRef(Py_None);
    } else if (failed(rc, NULL) == 0) {
        out = PyBytes_FromStringAndSize((const char *)recs, (Py_ssize_t)count * (Py_ssize_t)sizeof(pgn_metrics_record));
    }
    PyMem_Free(recs);
    return out;
}

static PyMethodDef Front_methods[] = {
    {"start", (PyCFunction)Front_start, METH_NOARGS, "start($self, /)\n--\n\nBind the address and start serving."},
    {"stop", (PyCFunction)(void (*)(void))Front_stop, METH_VARARGS | METH_KEYWORDS,
     "stop($self, /, grace=None, wait=True)\n--\n\nRefuse new calls, give calls in flight `grace` seconds, "
     "cancel the rest. Returns once stopped, or with wait=False once new calls are refused (recv_batch() "
     "returns None when the stop is complete)."},
    {"bind", (PyCFunction)(void (*)(void))Front_bind, METH_VARARGS | METH_KEYWORDS,
     "bind($self, /, address=None)\n--\n\nListen on address (default: the one the front was created with) "
     "without serving yet; return the bound port."},
    {"add_method", (PyCFunction)(void (*)(void))Front_add_method, METH_VARARGS | METH_KEYWORDS,
     "add_method($self, path, server_streaming, client_streaming=False)\n--\n\nServe a method natively from now "
     "on; return its method id."},
    {"add_fallback_method", (PyCFunction)Front_add_fallback_method, METH_VARARGS,
     "add_fallback_method($self, path, /)\n--\n\nRelay every call of a method to the fallback server from now on."},
    {"route", (PyCFunction)Front_route, METH_VARARGS,
     "route($self, call_id, method_id, /)\n--\n\nContinue a call that arrived as EVENT_LOOKUP as a method "
     "added with add_method()."},
    {"recv_batch", (PyCFunction)(void (*)(void))Front_recv_batch, METH_FASTCALL | METH_KEYWORDS,
     "recv_batch($self, /, max_events, timeout=None, client_keys=True)\n--\n\nWait for events; return a list of up "
     "to max_events (kind, call_id, method_id, payload, client_key) tuples, [] on timeout, None once stopped and "
     "drained. With client_keys=False the client_key of every event is None (saves building it)."},
    {"respond", (PyCFunction)(void (*)(void))Front_respond, METH_FASTCALL,
     "respond($self, call_id, payload, /)\n--\n\nAnswer a unary call with one message and status OK. "
     "Returns False if the call had already ended."},
    {"send_message", (PyCFunction)(void (*)(void))Front_send_message, METH_FASTCALL,
     "send_message($self, call_id, payload, /)\n--\n\nSend one message of a server-streaming call."},
    {"send_initial_metadata", (PyCFunction)Front_send_initial_metadata, METH_VARARGS,
     "send_initial_metadata($self, call_id, metadata, /)\n--\n\nSend the call's initial metadata."},
    {"finish", (PyCFunction)(void (*)(void))Front_finish, METH_VARARGS | METH_KEYWORDS,
     "finish($self, /, call_id, code=0, details=None, trailing_metadata=None, payload=None)\n--\n\n"
     "End a call with a status, trailing metadata and an optional last message."},
    {"event_fd", (PyCFunction)Front_event_fd, METH_NOARGS,
     "event_fd($self, /)\n--\n\nA file descriptor that is readable exactly while recv_batch() has events to "
     "return (or the front has stopped): for event loops, which then call recv_batch(n, 0). Owned by the "
     "front; don't close it."},
    {"watch", (PyCFunction)Front_watch, METH_O,
     "watch($self, call_id, /)\n--\n\nSend the call's EVENT_CANCEL, if it ends without being finished, to "
     "recv_watched() instead of recv_batch(). False if the call has already ended."},
    {"recv_watched", (PyCFunction)(void (*)(void))Front_recv_watched, METH_FASTCALL | METH_KEYWORDS,
     "recv_watched($self, /, max_events, timeout=None)\n--\n\nrecv_batch() for the EVENT_CANCEL events of "
     "watched calls."},
    {"set_compression", (PyCFunction)Front_set_compression, METH_VARARGS,
     "set_compression($self, call_id, name, /)\n--\n\nCompress the call's responses with name (\"\", "
     "\"deflate\" or \"gzip\"); no effect once its initial metadata is sent."},
    {"disable_next_message_compression", (PyCFunction)Front_disable_next_message_compression, METH_O,
     "disable_next_message_compression($self, call_id, /)\n--\n\nSend the call's next message uncompressed."},
    {"request_messages", (PyCFunction)Front_request_messages, METH_VARARGS,
     "request_messages($self, call_id, n=1, /)\n--\n\nLet Go read n more request messages of a client-streaming call, "
     "delivered as EVENT_MESSAGE events, then EVENT_HALF_CLOSE."},
    {"read_message", (PyCFunction)Front_read_message, METH_O,
     "read_message($self, call_id, /)\n--\n\nThe next request message of a client-streaming call (waits for it): "
     "bytes, None after the client's last message, False once the call has ended."},
    {"handler_done", (PyCFunction)Front_handler_done, METH_O,
     "handler_done($self, call_id, /)\n--\n\nOn a front with hold_slots=True: the call's handler returned, so its "
     "maximum_concurrent_rpcs place is free once the call has ended."},
    {"wait_room", (PyCFunction)Front_wait_room, METH_O,
     "wait_room($self, call_id, /)\n--\n\nWait until the call's buffer has room (True), or the call ended (False)."},
    {"notify_room", (PyCFunction)Front_notify_room, METH_O,
     "notify_room($self, call_id, /)\n--\n\nQueue one EVENT_ROOM for the call once its buffer has room."},
    {"cancel", (PyCFunction)Front_cancel, METH_O, "cancel($self, call_id, /)\n--\n\nEnd a call with CANCELLED."},
    {"is_active", (PyCFunction)Front_is_active, METH_O,
     "is_active($self, call_id, /)\n--\n\nWhether the call is still live."},
    {"time_remaining", (PyCFunction)Front_time_remaining, METH_O,
     "time_remaining($self, call_id, /)\n--\n\nSeconds left before the call's deadline, or None without one."},
    {"call_details", (PyCFunction)Front_call_details, METH_O,
     "call_details($self, call_id, /)\n--\n\nA dict describing a live call."},
    {"enable_health", (PyCFunction)(void (*)(void))Front_enable_health, METH_VARARGS | METH_KEYWORDS,
     "enable_health($self, /, changes_only=False, *, check=True, watch=True)\n--\n\nAnswer grpc.health.v1.Health's "
     "Check and Watch (those of the two given True, added to those already answered) in Go, "
     "from the front's status table (\"\" starts SERVING), from now on. Watch streams send each "
     "set_health() of their service, or with changes_only=True, the latest status when it differs from the "
     "last one sent."},
    {"set_health", (PyCFunction)Front_set_health, METH_VARARGS,
     "set_health($self, service, status, /)\n--\n\nSet a service's health status (a HealthCheckResponse."
     "ServingStatus value); Watch streams of that service get it at once. Ignored after "
     "enter_health_shutdown()."},
    {"enter_health_shutdown", (PyCFunction)Front_enter_health_shutdown, METH_NOARGS,
     "enter_health_shutdown($self, /)\n--\n\nSet every service NOT_SERVING and ignore later set_health() "
     "calls, as grpcio-health-checking's enter_graceful_shutdown()."},
    {"metrics", (PyCFunction)Front_metrics, METH_NOARGS, "metrics($self, /)\n--\n\nThe front's counters."},
    {"_metrics_enable", (PyCFunction)(void (*)(void))Front_metrics_enable, METH_VARARGS | METH_KEYWORDS,
     "_metrics_enable($self, /, address=None, all_methods=False, records=False)\n--\n\nMeasure gRFC A66's metrics "
     "from start() on; serve them for Prometheus on address; the endpoint's port (internal)."},
    {"_metrics_register", (PyCFunction)Front_metrics_register, METH_O,
     "_metrics_register($self, path, /)\n--\n\nName a method's calls in the metrics (internal)."},
    {"_metrics_methods", (PyCFunction)Front_metrics_methods, METH_NOARGS,
     "_metrics_methods($self, /)\n--\n\n(name, calls started) by method slot (internal)."},
    {"_metrics_drain", (PyCFunction)Front_metrics_drain, METH_VARARGS,
     "_metrics_drain($self, max_records, wait=None, /)\n--\n\nEnded calls' records as bytes; None once "
     "stopped (internal)."},
    {"_hold_writes", (PyCFunction)Front_hold_writes, METH_O,
     "_hold_writes($self, call_soon, /)\n--\n\nOn an event loop's thread: hold the frames of its respond() and "
     "finish() until the loop's next turn, flushed once by _flush_writes() through call_soon; None: stop holding "
     "(internal)."},
    {"_flush_writes", (PyCFunction)Front_flush_writes, METH_NOARGS,
     "_flush_writes($self, /)\n--\n\nWrite out the frames of held sends (internal)."},
    {"_set_tls", (PyCFunction)Front_set_tls, METH_O,
     "_set_tls($self, tls_json, /)\n--\n\nReplace the TLS credentials before start() (internal)."},
    {"_update_tls", (PyCFunction)Front_update_tls, METH_O,
     "_update_tls($self, material_json, /)\n--\n\nReplace the TLS key material while serving (internal)."},
    {NULL, NULL, 0, NULL},
};

static PyObject *Front_get_blocking(PyObject *self, void *closure) {
    return PyBool_FromLong(((FrontObject *)self)->blocking);
}

static int Front_set_blocking(PyObject *self, PyObject *value, void *closure) {
    if (value == NULL || !PyBool_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "blocking must be True or False");
        return -1;
    }
    int64_t h = front_handle(self);
    if (h == 0) {
        return -1;
    }
    /* A front that doesn't block is an event loop's: Go leaves its sends'
     * socket writes to the connection, so that the loop goes on at once. */
    if (failed(pgn_set_loop_senders(h, value == Py_False), NULL) < 0) {
        return -1;
    }
    ((FrontObject *)self)->blocking = value == Py_True;
    return 0;
}

static PyGetSetDef Front_getset[] = {
    {"port", Front_get_port, NULL, "The bound TCP port; 0 before start().", NULL},
    {"blocking", Front_get_blocking, Front_set_blocking,
     "Whether respond/send_message/send_initial_metadata/finish wait (GIL released) when a call's buffer is "
     "full. When False they return None instead, for callers that must not block (an event loop).",
     NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Front_slots[] = {
    {Py_tp_doc, "The Go gRPC front; use pygrpc_native.NativeGrpcFront."},
    {Py_tp_new, PyType_GenericNew},
    {Py_tp_init, Front_init},
    {Py_tp_dealloc, Front_dealloc},
    {Py_tp_methods, Front_methods},
    {Py_tp_getset, Front_getset},
    {0, NULL},
};

static PyType_Spec Front_spec = {
    "pygrpc_native._native.Front",
    sizeof(FrontObject),
    0,
    Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    Front_slots,
};

/* check_tls(tls_json) checks TLS credentials in Go (the PEM parses, the key
 * matches the certificate): ValueError with Go's reason if not. */
static PyObject *native_check_tls(PyObject *module, PyObject *arg) {
    pgn_bytes doc;
    char *err = NULL;
    if (check_not_forked() < 0 || str_arg(arg, "tls_json", &doc) < 0 || failed(pgn_check_tls(doc, &err), &err) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* tls_next_fetch(wait_ms) waits (GIL released) for a handshake that asks a
 * Python fetcher for TLS key material: (request id, fetcher number), or
 * None when none came within wait_ms. pygrpc_native's fetch thread serves
 * it (_tls_fetch.py). */
static PyObject *native_tls_next_fetch(PyObject *module, PyObject *arg) {
    long wait_ms = PyLong_AsLong(arg);
    if (wait_ms == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (check_not_forked() < 0) {
        return NULL;
    }
    uint64_t id = 0;
    int64_t fetcher = 0;
    int got;
    Py_BEGIN_ALLOW_THREADS
    got = pgn_tls_next_fetch((int32_t)wait_ms, &id, &fetcher);
    Py_END_ALLOW_THREADS
    if (!got) {
        Py_RETURN_NONE;
    }
    return Py_BuildValue("(KL)", (unsigned long long)id, (long long)fetcher);
}

/* tls_fetch_done(id, material_json) answers a fetch: the JSON of the new key
 * material, or None to keep the current configuration. */
static PyObject *native_tls_fetch_done(PyObject *module, PyObject *args) {
    unsigned long long id;
    PyObject *material;
    if (!PyArg_ParseTuple(args, "KO:tls_fetch_done", &id, &material)) {
        return NULL;
    }
    pgn_bytes doc = {NULL, 0};
    if (material != Py_None && str_arg(material, "material_json", &doc) < 0) {
        return NULL;
    }
    pgn_tls_fetch_done((uint64_t)id, doc, material == Py_None);
    Py_RETURN_NONE;
}

static PyMethodDef native_functions[] = {
    {"check_tls", (PyCFunction)native_check_tls, METH_O,
     "check_tls(tls_json, /)\n--\n\nCheck TLS credentials; ValueError if they can't be served."},
    {"tls_next_fetch", (PyCFunction)native_tls_next_fetch, METH_O,
     "tls_next_fetch(wait_ms, /)\n--\n\nWait for a TLS fetch request (internal)."},
    {"tls_fetch_done", (PyCFunction)native_tls_fetch_done, METH_VARARGS,
     "tls_fetch_done(id, material_json, /)\n--\n\nAnswer a TLS fetch request (internal)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "pygrpc_native._native",
    "The compiled core of pygrpc_native (Go gRPC server + CPython glue).",
    -1,
    native_functions,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&native_module);
    if (m == NULL) {
        return NULL;
    }
    if (pthread_atfork(NULL, NULL, mark_forked_child) != 0) {
        Py_DECREF(m);
        PyErr_SetString(PyExc_RuntimeError, "pygrpc_native: pthread_atfork failed");
        return NULL;
    }
    PyObject *type = PyType_FromSpec(&Front_spec);
    if (type == NULL || PyModule_AddObject(m, "Front", type) < 0) {
        Py_XDECREF(type);
        Py_DECREF(m);
        return NULL;
    }
    if (PyModule_AddIntConstant(m, "EVENT_CALL", PGN_EVENT_CALL) < 0 ||
        PyModule_AddIntConstant(m, "EVENT_CANCEL", PGN_EVENT_CANCEL) < 0 ||
        PyModule_AddIntConstant(m, "EVENT_LOOKUP", PGN_EVENT_LOOKUP) < 0 ||
        PyModule_AddIntConstant(m, "EVENT_MESSAGE", PGN_EVENT_MESSAGE) < 0 ||
        PyModule_AddIntConstant(m, "EVENT_HALF_CLOSE", PGN_EVENT_HALF_CLOSE) < 0 ||
        PyModule_AddIntConstant(m, "EVENT_ROOM", PGN_EVENT_ROOM) < 0 ||
        PyModule_AddIntConstant(m, "FALLBACK", PGN_FALLBACK) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    PyObject *errors = PyImport_ImportModule("pygrpc_native._errors");
    send_limit_error = errors == NULL ? NULL : PyObject_GetAttrString(errors, "SendLimitError");
    Py_XDECREF(errors);
    if (send_limit_error == NULL) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
