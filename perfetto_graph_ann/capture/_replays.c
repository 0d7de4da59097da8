/*
 * The replay log's class-level wrapper of torch's CUDAGraph.replay, in C (see replay_log.py).
 *
 * ReplayLogger(orig, entries) is a callable descriptor: set on a class, `g.replay()` calls
 * `orig(g)` and appends (thread ident, native thread id, exec id, start ns, end ns) to the
 * bytearray `entries` (see Entry), the times on CLOCK_MONOTONIC (what time.perf_counter_ns
 * reads on Linux).
 * The exec id is `g._pga_session._exec_id` (else the session's `exec_id` property; 0 without
 * a session: a graph this package did not annotate; -1 when the replay raised or the id
 * could not be read). It exists so that a replay under a profiler costs a few hundred ns,
 * not the microsecond and more of a Python wrapper frame (BENCHMARKS.md, "replay record").
 */
#include "_fastpath.h"

#include <pythread.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

typedef struct {
    PyObject_HEAD
    PyObject *orig;     /* torch's replay */
    PyObject *entries;  /* a bytearray of Entry */
    vectorcallfunc vectorcall;
} ReplayLogger;

static PyObject *str_session = NULL;   /* "_pga_session" */
static PyObject *str_exec_id_ = NULL;  /* "_exec_id" */
static PyObject *str_exec_id = NULL;   /* "exec_id" */

static long long
mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* 1: *out set (new reference), 0: no such attribute (no error), -1: error */
static int
optional_attr(PyObject *o, PyObject *name, PyObject **out)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(o, name, out);
#else
    return _PyObject_LookupAttr(o, name, out);
#endif
}

/* The exec id a replay of `graph` launched; never raises (0: no session, -1: unreadable). */
static long long
exec_id_of(PyObject *graph)
{
    PyObject *sess = NULL, *eid = NULL;
    long long out = 0;
    if (optional_attr(graph, str_session, &sess) < 0)
        goto error;
    if (sess == NULL || sess == Py_None)
        goto done;
    if (optional_attr(sess, str_exec_id_, &eid) < 0)
        goto error;
    if (eid == NULL || eid == Py_None) {
        Py_XDECREF(eid);
        eid = PyObject_GetAttr(sess, str_exec_id);
        if (eid == NULL)
            goto error;
    }
    if (eid != Py_None) {
        out = PyLong_AsLongLong(eid);
        if (out == -1 && PyErr_Occurred())
            goto error;
    }
    goto done;
error:
    PyErr_Clear();
    out = -1;
done:
    Py_XDECREF(sess);
    Py_XDECREF(eid);
    return out;
}

/* One entry: ident (u64), native id (i64, -1: unknown), exec id, start ns, end ns (i64), native
 * byte order: what replay_log.ENTRY unpacks. Written into a bytearray, so that a replay allocates
 * no Python object (the bytearray over-allocates as it grows). */
typedef struct {
    uint64_t ident;
    int64_t native, eid, t0, t1;
} Entry;

static int
append_entry(ReplayLogger *self, long long eid, long long t0, long long t1)
{
    Entry e;
    e.ident = (uint64_t)PyThread_get_thread_ident();
#ifdef PY_HAVE_THREAD_NATIVE_ID
    static _Thread_local int64_t native = -1;  /* gettid is a system call: once per thread */
    if (native < 0)
        native = (int64_t)PyThread_get_thread_native_id();
    e.native = native;
#else
    e.native = -1;
#endif
    e.eid = eid;
    e.t0 = t0;
    e.t1 = t1;
    Py_ssize_t n = PyByteArray_GET_SIZE(self->entries);
    if (PyByteArray_Resize(self->entries, n + (Py_ssize_t)sizeof(Entry)) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(self->entries) + n, &e, sizeof(Entry));
    return 0;
}

static PyObject *
ReplayLogger_vectorcall(ReplayLogger *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    long long t0 = mono_ns();
    PyObject *res = PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    long long t1 = mono_ns();
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (res == NULL) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (append_entry(self, -1, t0, t1) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    long long eid = n >= 1 ? exec_id_of(args[0]) : -1;
    if (append_entry(self, eid, t0, t1) < 0)
        PyErr_Clear();  /* never fail the user's replay for the log */
    return res;
}

static PyObject *
ReplayLogger_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *orig, *entries;
    if (!PyArg_ParseTuple(args, "OO!:ReplayLogger", &orig, &PyByteArray_Type, &entries))
        return NULL;
    if (!PyCallable_Check(orig)) {
        PyErr_SetString(PyExc_TypeError, "ReplayLogger: orig must be callable");
        return NULL;
    }
    ReplayLogger *self = (ReplayLogger *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    Py_INCREF(orig);
    Py_INCREF(entries);
    self->orig = orig;
    self->entries = entries;
    self->vectorcall = (vectorcallfunc)ReplayLogger_vectorcall;
    return (PyObject *)self;
}

static PyObject *
ReplayLogger_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static int
ReplayLogger_traverse(ReplayLogger *self, visitproc visit, void *arg)
{
    Py_VISIT(self->orig);
    Py_VISIT(self->entries);
    return 0;
}

static int
ReplayLogger_clear(ReplayLogger *self)
{
    Py_CLEAR(self->orig);
    Py_CLEAR(self->entries);
    return 0;
}

static void
ReplayLogger_dealloc(ReplayLogger *self)
{
    PyObject_GC_UnTrack(self);
    ReplayLogger_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
ReplayLogger_get_original(ReplayLogger *self, void *closure)
{
    Py_INCREF(self->orig);
    return self->orig;
}

static PyGetSetDef ReplayLogger_getset[] = {
    {"_pga_original", (getter)ReplayLogger_get_original, NULL, "torch's own replay", NULL},
    {NULL}
};

static PyTypeObject ReplayLoggerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perfetto_graph_ann.capture._fastpath.ReplayLogger",
    .tp_doc = PyDoc_STR("ReplayLogger(orig, entries): CUDAGraph.replay that appends (ident, native id, exec id, "
                        "start ns, end ns) to the bytearray entries, packed as replay_log.ENTRY."),
    .tp_basicsize = sizeof(ReplayLogger),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(ReplayLogger, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = ReplayLogger_new,
    .tp_descr_get = ReplayLogger_get,
    .tp_dealloc = (destructor)ReplayLogger_dealloc,
    .tp_traverse = (traverseproc)ReplayLogger_traverse,
    .tp_clear = (inquiry)ReplayLogger_clear,
    .tp_getset = ReplayLogger_getset,
};

int
fp_replays_ready(void)
{
    if ((str_session == NULL && (str_session = PyUnicode_InternFromString("_pga_session")) == NULL) ||
        (str_exec_id_ == NULL && (str_exec_id_ = PyUnicode_InternFromString("_exec_id")) == NULL) ||
        (str_exec_id == NULL && (str_exec_id = PyUnicode_InternFromString("exec_id")) == NULL))
        return -1;
    return PyType_Ready(&ReplayLoggerType);
}

int
fp_replays_add(PyObject *module)
{
    Py_INCREF(&ReplayLoggerType);
    if (PyModule_AddObject(module, "ReplayLogger", (PyObject *)&ReplayLoggerType) < 0) {
        Py_DECREF(&ReplayLoggerType);
        return -1;
    }
    return 0;
}
