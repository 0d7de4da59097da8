/*
 * The first pass's per-event work in C (perfetto_graph_ann.read._scan): what scan._Scan.keep
 * does to each decoded event of a run, for the usual events (keep_loop; every other case is
 * handed to the Python callables in the context, which do what the Python loop does), and where
 * each event of a run starts (event_spans). An accelerator only: scan.py does the same in Python
 * where this is not built or is turned off (PERFETTO_GRAPH_ANN_PURE_PYTHON), and the two keep the
 * same events and offsets (tests/test_convert_two_pass_join.py).
 * Compiled by hatch_build.py.
 */
#include "_slots.h"

/* An event's fields the loop reads or writes, and those of its light args, by index. */
enum { E_TS, E_CAT, E_PID, E_TID, E_PH, E_EXTRA, E_NAME, E_ARGS, E_SIZE };
enum { A_DEVICE, A_STREAM, A_CORRELATION, A_GRID, A_BLOCK, A_GRAPH_ID, A_GRAPH_NODE_ID, A_SIZE };
static PyObject *event_names[E_SIZE], *args_names[A_SIZE];
static PyObject *s_empty;

/* The context's items, in the order scan._Scan.keep passes them. */
enum {
    C_MEMO, C_NONE, C_LIGHT_TYPE, C_ARGS, C_NO_ARG, C_JOIN, C_JOINED, C_JOIN_MEMO, C_LAUNCH_NAMES,
    C_GPU_OF, C_JOIN_ARGS, C_LIGHT_OF, C_SIZE
};

/* The loop's state for one run: its context's items, and where the events' and args' fields are. */
typedef struct {
    PyObject *ctx[C_SIZE];
    Fields ev, args;
} Loop;

#define GET_E(L, e, k) get_field((e), &(L)->ev, event_names, (k))
#define SET_E(L, e, k, v) set_field((e), &(L)->ev, event_names, (k), (v))
#define GET_A(L, a, k) get_field((a), &(L)->args, args_names, (k))

/* e.<k> = memo.setdefault(v, v) where v is e.<k>; *out (borrowed, as kept by the memo) if asked. 0 or -1. */
static int
intern_field(Loop *L, PyObject *e, int k, PyObject **out)
{
    PyObject *v = GET_E(L, e, k);
    PyObject *kept;
    if (v == NULL)
        return -1;
    kept = PyDict_SetDefault(L->ctx[C_MEMO], v, v); /* borrowed */
    Py_DECREF(v);
    if (kept == NULL)
        return -1;
    if (out != NULL)
        *out = kept;
    return SET_E(L, e, k, kept);
}

/* Kineto's usual join args (graph ids absent; int device, stream and correlation; grid and block
 * lists of three ints) found in the join memo under scan._Scan._join_args' key: a new reference, or
 * NULL with no exception (left to Python) or with one. */
static PyObject *
join_hit(Loop *L, PyObject *a)
{
    PyObject *v[A_SIZE] = {NULL};
    PyObject *key = NULL, *hit = NULL, *no_arg = L->ctx[C_NO_ARG];
    int k;
    if (Py_TYPE(a) != (PyTypeObject *)L->ctx[C_LIGHT_TYPE])
        return NULL;
    for (k = 0; k < A_SIZE; k++) {
        v[k] = GET_A(L, a, k);
        if (v[k] == NULL)
            goto done;
    }
    if (v[A_GRAPH_ID] != no_arg || v[A_GRAPH_NODE_ID] != no_arg || !PyLong_CheckExact(v[A_DEVICE]) ||
        !PyLong_CheckExact(v[A_STREAM]) || !PyLong_CheckExact(v[A_CORRELATION]) || !PyList_CheckExact(v[A_GRID]) ||
        !PyList_CheckExact(v[A_BLOCK]) || PyList_GET_SIZE(v[A_GRID]) != 3 || PyList_GET_SIZE(v[A_BLOCK]) != 3)
        goto done;
    key = PyTuple_New(12);
    if (key == NULL)
        goto done;
    for (k = 0; k < 3; k++) {
        PyObject *g = PyList_GET_ITEM(v[A_GRID], k), *b = PyList_GET_ITEM(v[A_BLOCK], k);
        if (!PyLong_CheckExact(g) || !PyLong_CheckExact(b))
            goto done;
        PyTuple_SET_ITEM(key, 3 + k, Py_NewRef(g));
        PyTuple_SET_ITEM(key, 6 + k, Py_NewRef(b));
        PyTuple_SET_ITEM(key, k, Py_NewRef(v[k])); /* device, stream, correlation */
        PyTuple_SET_ITEM(key, 9 + k, Py_NewRef(Py_None));
    }
    hit = PyDict_GetItemWithError(L->ctx[C_JOIN_MEMO], key);
    Py_XINCREF(hit);
done:
    Py_XDECREF(key);
    for (k = 0; k < A_SIZE; k++)
        Py_XDECREF(v[k]);
    return hit;
}

/* The light args of a non-joined event's args ``a``: the shared ``none`` where it has neither device
 * nor stream, the memo's where its key is there, else light_of(a). A new reference, or NULL. */
static PyObject *
light_args(Loop *L, PyObject *a)
{
    PyObject *d = NULL, *s = NULL, *key = NULL, *out = NULL, **ctx = L->ctx;
    if (Py_TYPE(a) != (PyTypeObject *)ctx[C_LIGHT_TYPE])
        return PyObject_CallOneArg(ctx[C_LIGHT_OF], a);
    d = GET_A(L, a, A_DEVICE);
    if (d == NULL)
        return NULL;
    s = GET_A(L, a, A_STREAM);
    if (s == NULL)
        goto done;
    if (d == ctx[C_NO_ARG] && s == ctx[C_NO_ARG]) { /* the usual flow event */
        out = Py_NewRef(ctx[C_NONE]);
        goto done;
    }
    key = PyTuple_Pack(5, ctx[C_ARGS], (PyObject *)Py_TYPE(d), d, (PyObject *)Py_TYPE(s), s);
    if (key == NULL)
        goto done;
    out = PyDict_GetItemWithError(ctx[C_MEMO], key);
    if (out != NULL) {
        Py_INCREF(out);
        goto done;
    }
    if (PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError)) /* TypeError: a list or dict value, Python's case */
            goto done;
        PyErr_Clear();
    }
    out = PyObject_CallOneArg(ctx[C_LIGHT_OF], a);
done:
    Py_XDECREF(key);
    Py_XDECREF(s);
    Py_XDECREF(d);
    return out;
}

/* A joined X event: GPU work or a graph launch keeps its name and the join's args. 1 if kept so,
 * 0 if not, -1 with an exception. */
static int
keep_joined(Loop *L, PyObject *e, PyObject *cat)
{
    PyObject **ctx = L->ctx;
    PyObject *gpu = PyDict_GetItemWithError(ctx[C_JOINED], cat); /* borrowed */
    PyObject *name, *kept, *a, *args;
    int is_gpu, rc;
    if (gpu == NULL) {
        if (PyErr_Occurred())
            return -1;
        gpu = PyObject_CallOneArg(ctx[C_GPU_OF], cat);
        if (gpu == NULL)
            return -1;
        is_gpu = PyObject_IsTrue(gpu);
        Py_DECREF(gpu);
    } else {
        is_gpu = PyObject_IsTrue(gpu);
    }
    if (is_gpu < 0)
        return -1;
    name = GET_E(L, e, E_NAME);
    if (name == NULL)
        return -1;
    if (!is_gpu) {
        rc = PySequence_Contains(ctx[C_LAUNCH_NAMES], name);
        if (rc <= 0) {
            Py_DECREF(name);
            return rc;
        }
    }
    kept = PyDict_SetDefault(ctx[C_MEMO], name, name); /* borrowed */
    rc = kept == NULL ? -1 : SET_E(L, e, E_NAME, kept);
    Py_DECREF(name);
    if (rc < 0)
        return -1;
    a = GET_E(L, e, E_ARGS);
    if (a == NULL)
        return -1;
    args = join_hit(L, a);
    if (args == NULL && !PyErr_Occurred())
        args = PyObject_CallOneArg(ctx[C_JOIN_ARGS], a);
    Py_DECREF(a);
    if (args == NULL)
        return -1;
    rc = SET_E(L, e, E_ARGS, args);
    Py_DECREF(args);
    return rc < 0 ? -1 : 1;
}

/* One event of the run; ``last``: the previous event's time (a new reference), replaced. 0 or -1. */
static int
keep_one(Loop *L, PyObject *e, int join, PyObject **last)
{
    PyObject *ts, *cat, *ph, *a, *light;
    int eq, rc;
    /* a flow event's time is its slice's: one int object for both */
    ts = GET_E(L, e, E_TS);
    if (ts == NULL)
        return -1;
    eq = ts == *last ? 1 : PyObject_RichCompareBool(ts, *last, Py_EQ);
    if (eq < 0) {
        Py_DECREF(ts);
        return -1;
    }
    if (eq) {
        Py_DECREF(ts);
        if (SET_E(L, e, E_TS, *last) < 0)
            return -1;
    } else {
        Py_SETREF(*last, ts);
    }
    if (intern_field(L, e, E_CAT, &cat) < 0 || intern_field(L, e, E_PID, NULL) < 0 ||
        intern_field(L, e, E_TID, NULL) < 0 || intern_field(L, e, E_PH, &ph) < 0)
        return -1;
    if (is_char(ph, 'M') || is_char(ph, 'C')) /* the tracks and counters read their names and args */
        return 0;
    if (SET_E(L, e, E_EXTRA, Py_None) < 0)
        return -1;
    if (join && is_char(ph, 'X')) {
        rc = keep_joined(L, e, cat);
        if (rc != 0)
            return rc < 0 ? -1 : 0;
    }
    if (SET_E(L, e, E_NAME, s_empty) < 0)
        return -1;
    a = GET_E(L, e, E_ARGS);
    if (a == NULL)
        return -1;
    light = light_args(L, a);
    Py_DECREF(a);
    if (light == NULL)
        return -1;
    rc = SET_E(L, e, E_ARGS, light);
    Py_DECREF(light);
    return rc;
}

/* keep_loop(run, context): scan._Scan.keep's loop over the decoded events of ``run``, in place. */
static PyObject *
keep_loop(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Loop L;
    PyObject *run, *last;
    Py_ssize_t i, n;
    int k, join;
    (void)self;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyTuple_CheckExact(argv[1]) ||
        PyTuple_GET_SIZE(argv[1]) != C_SIZE) {
        PyErr_SetString(PyExc_TypeError, "keep_loop(run: list, context: tuple)");
        return NULL;
    }
    run = argv[0];
    for (k = 0; k < C_SIZE; k++)
        L.ctx[k] = PyTuple_GET_ITEM(argv[1], k);
    if (!PyDict_CheckExact(L.ctx[C_MEMO]) || !PyDict_CheckExact(L.ctx[C_JOINED]) ||
        !PyDict_CheckExact(L.ctx[C_JOIN_MEMO]) || !PyType_Check(L.ctx[C_LIGHT_TYPE])) {
        PyErr_SetString(PyExc_TypeError, "keep_loop: a context of the wrong shape");
        return NULL;
    }
    join = PyObject_IsTrue(L.ctx[C_JOIN]);
    if (join < 0)
        return NULL;
    n = PyList_GET_SIZE(run);
    if (n == 0)
        Py_RETURN_NONE;
    if (fields_of(Py_TYPE(PyList_GET_ITEM(run, 0)), event_names, E_SIZE, &L.ev) < 0 ||
        fields_of((PyTypeObject *)L.ctx[C_LIGHT_TYPE], args_names, A_SIZE, &L.args) < 0)
        return NULL;
    last = Py_NewRef(Py_None);
    for (i = 0; i < n; i++) {
        if (keep_one(&L, PyList_GET_ITEM(run, i), join, &last) < 0) {
            Py_DECREF(last);
            return NULL;
        }
    }
    Py_DECREF(last);
    Py_RETURN_NONE;
}

/* JSON's white space. */
static inline int
is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* event_spans(text, n, at): where each of the ``n`` objects of the JSON array ``text`` starts
 * (bytes of n native int64) and where the last one ends, both plus ``at``: what scan._Scan.keep
 * finds from the run decoded as List[msgspec.Raw]. ``text`` was decoded whole already, so it is valid JSON; None
 * where it is not an array of exactly n objects (the caller then finds them from Raw). */
static PyObject *
event_spans(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    const char *p;
    Py_ssize_t size, n, i = 0, at = 0, last_end = 0;
    long long base;
    PyObject *out;
    long long *spans;
    (void)self;
    if (argc != 3 || !PyLong_CheckExact(argv[1]) || !PyLong_CheckExact(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "event_spans(text: bytes, n: int, at: int)");
        return NULL;
    }
    if (!PyBytes_CheckExact(argv[0]))
        Py_RETURN_NONE;
    n = PyLong_AsSsize_t(argv[1]);
    if (n < 1)
        return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
    base = PyLong_AsLongLong(argv[2]);
    if (base == -1 && PyErr_Occurred())
        return NULL;
    p = PyBytes_AS_STRING(argv[0]);
    size = PyBytes_GET_SIZE(argv[0]);
    out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(long long));
    if (out == NULL)
        return NULL;
    spans = (long long *)PyBytes_AS_STRING(out);
    while (at < size && is_space(p[at]))
        at++;
    if (at >= size || p[at++] != '[')
        goto unsure;
    for (;;) {
        Py_ssize_t depth = 0;
        while (at < size && (is_space(p[at]) || (i > 0 && p[at] == ',')))
            at++;
        if (at >= size)
            goto unsure;
        if (p[at] == ']')
            break;
        if (p[at] != '{' || i == n)
            goto unsure;
        spans[i++] = base + at;
        for (; at < size; at++) {  /* to the object's closing brace, strings skipped */
            char c = p[at];
            if (c == '"') {
                for (at++; at < size && p[at] != '"'; at++)
                    if (p[at] == '\\')
                        at++;
            } else if (c == '{' || c == '[') {
                depth++;
            } else if (c == '}' || c == ']') {
                if (--depth == 0)
                    break;
            }
        }
        if (at >= size)
            goto unsure;
        last_end = ++at;
    }
    if (i != n)
        goto unsure;
    return Py_BuildValue("(NL)", out, base + (long long)last_end);
unsure:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"event_spans", (PyCFunction)(void (*)(void))event_spans, METH_FASTCALL,
     "event_spans(text, n, at): each object's start in the JSON array text (int64 bytes) and the last one's end, plus at"},
    {"keep_loop", (PyCFunction)(void (*)(void))keep_loop, METH_FASTCALL,
     "keep_loop(run, context): the first pass's loop over a run's decoded events (scan._Scan.keep)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_scan", "The first pass's per-event loop (scan._Scan.keep) in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__scan(void)
{
    static const char *events[E_SIZE] = {"ts_ns", "cat", "pid", "tid", "ph", "extra", "name", "args"};
    static const char *args[A_SIZE] = {"device", "stream", "correlation", "grid", "block", "graph_id",
                                       "graph_node_id"};
    if (intern_names(events, E_SIZE, event_names) < 0 || intern_names(args, A_SIZE, args_names) < 0)
        return NULL;
    if (s_empty == NULL && (s_empty = PyUnicode_InternFromString("")) == NULL)
        return NULL;
    return PyModule_Create(&moduledef);
}
