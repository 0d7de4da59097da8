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

#include <limits.h>
#include <string.h>

/* An event's fields the loop reads or writes, and those of its light args, by index. */
enum { E_TS, E_CAT, E_PID, E_TID, E_PH, E_EXTRA, E_NAME, E_ARGS, E_SIZE };
enum { A_DEVICE, A_STREAM, A_CORRELATION, A_GRID, A_BLOCK, A_GRAPH_ID, A_GRAPH_NODE_ID, A_SIZE };
static PyObject *event_names[E_SIZE], *args_names[A_SIZE];
static PyObject *s_empty;
/* The fields finish_run writes, by index. */
enum { F_INDEX, F_TS, F_DUR, F_EXTRA, F_PH, F_ARGS, F_SIZE };
static PyObject *finish_names[F_SIZE], *s_class;

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
            if (c == '"') { /* to the closing quote: the next one after an even run of backslashes */
                for (;;) {
                    const char *q = memchr(p + at + 1, '"', (size_t)(size - at - 1));
                    Py_ssize_t back;
                    if (q == NULL) {
                        at = size;
                        break;
                    }
                    at = q - p;
                    for (back = at - 1; p[back] == '\\'; back--) /* the opening quote stops it */
                        ;
                    if ((at - 1 - back) % 2 == 0)
                        break;
                }
                if (at >= size)
                    break;
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

/* A time as Kineto writes it, 1 to 15 digits, a point and exactly 3 decimals (events.py's
 * _KINETO_TIMES), in the msgspec.Raw ``raw``: its ns in *ns and 1; 0 for any other text or object. */
static int
kineto_ns(PyObject *raw, long long *ns)
{
    Py_buffer b;
    const char *p;
    Py_ssize_t k, n;
    long long v = 0;
    int ok = 0;
    if (PyObject_GetBuffer(raw, &b, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return 0;
    }
    p = (const char *)b.buf;
    n = b.len;
    if (n >= 5 && n <= 19 && p[n - 4] == '.') {
        ok = 1;
        for (k = 0; k < n && ok; k++) {
            if (k == n - 4)
                continue;
            if (p[k] < '0' || p[k] > '9')
                ok = 0;
            else
                v = v * 10 + (p[k] - '0');
        }
    }
    PyBuffer_Release(&b);
    *ns = v;
    return ok;
}

/* The dict events.py's _finish makes of an event's "s" (sv) and "bp" (bp), NULL for none: a new
 * reference, or NULL with an exception. */
static PyObject *
extra_of(PyObject *sv, PyObject *bp, int *failed)
{
    PyObject *d;
    *failed = 0;
    if (sv == Py_None && bp == Py_None)
        return NULL;
    d = PyDict_New();
    if (d == NULL || (bp != Py_None && PyDict_SetItemString(d, "bp", bp) < 0) ||
        (sv != Py_None && PyDict_SetItemString(d, "s", sv) < 0)) {
        Py_XDECREF(d);
        *failed = 1;
        return NULL;
    }
    return d;
}

/* finish_run(events, start, cls, extras): events.py's _bulk_ns and _finish_light (extras false)
 * or _finish (extras true) on a run decoded by the typed path, where every time is written as
 * Kineto writes it and every complete event has both: each event's index (from start), its times
 * as int ns, its extra (None, or with extras the dict of its "bp" and "s") and its class made cls;
 * True. None, with nothing changed, for any other run (the Python path then gives the times or the
 * error). */
static PyObject *
finish_run(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *events, *cls, *src = NULL;
    Py_ssize_t n, k, start;
    long long *times = NULL;
    unsigned char *has = NULL;
    Fields f;
    PyObject *out = NULL;
    (void)self;
    int extras;
    if (argc != 4 || !PyList_CheckExact(argv[0]) || !PyLong_CheckExact(argv[1]) || !PyType_Check(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "finish_run(events: list, start: int, cls: type, extras: bool)");
        return NULL;
    }
    events = argv[0];
    cls = argv[2];
    extras = PyObject_IsTrue(argv[3]);
    if (extras < 0)
        return NULL;
    start = PyLong_AsSsize_t(argv[1]);
    if (start == -1 && PyErr_Occurred())
        return NULL;
    n = PyList_GET_SIZE(events);
    if (n == 0)
        Py_RETURN_TRUE;
    src = (PyObject *)Py_TYPE(PyList_GET_ITEM(events, 0));
    if (fields_of((PyTypeObject *)src, finish_names, F_SIZE, &f) < 0)
        return NULL;
    for (k = 0; k < F_SIZE; k++)
        if (f.offset[k] < 0)
            Py_RETURN_NONE;
    times = PyMem_Malloc(2 * n * sizeof(long long));
    has = PyMem_Malloc(2 * n);
    if (times == NULL || has == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (k = 0; k < n; k++) { /* every time read first: a run left to Python is left unchanged */
        PyObject *e = PyList_GET_ITEM(events, k), *ts, *dur, *ph;
        if ((PyObject *)Py_TYPE(e) != src)
            goto python;
        ts = *(PyObject **)((char *)e + f.offset[F_TS]);
        dur = *(PyObject **)((char *)e + f.offset[F_DUR]);
        ph = *(PyObject **)((char *)e + f.offset[F_PH]);
        if (ts == NULL || dur == NULL || ph == NULL)
            goto python;
        has[2 * k] = ts != Py_None;
        has[2 * k + 1] = dur != Py_None;
        if ((has[2 * k] && !kineto_ns(ts, &times[2 * k])) || (has[2 * k + 1] && !kineto_ns(dur, &times[2 * k + 1])))
            goto python;
        if ((!has[2 * k] || !has[2 * k + 1]) && is_char(ph, 'X')) /* a complete event needs both: Python's error */
            goto python;
    }
    for (k = 0; k < n; k++) {
        PyObject *e = PyList_GET_ITEM(events, k), *v;
        int rc, j;
        for (j = 0; j < 2; j++) {
            if (has[2 * k + j]) {
                v = PyLong_FromLongLong(times[2 * k + j]);
                if (v == NULL)
                    goto done;
            } else {
                v = Py_NewRef(Py_None);
            }
            rc = set_field(e, &f, finish_names, j == 0 ? F_TS : F_DUR, v);
            Py_DECREF(v);
            if (rc < 0)
                goto done;
        }
        if (extras) { /* the JSON's "s" and "bp", held in index and extra (events._KinetoEvent) */
            PyObject *sv = *(PyObject **)((char *)e + f.offset[F_INDEX]);
            PyObject *bp = *(PyObject **)((char *)e + f.offset[F_EXTRA]);
            int failed;
            PyObject *d = extra_of(sv, bp, &failed);
            if (failed)
                goto done;
            rc = set_field(e, &f, finish_names, F_EXTRA, d != NULL ? d : Py_None);
            Py_XDECREF(d);
            if (rc < 0)
                goto done;
        } else if (set_field(e, &f, finish_names, F_EXTRA, Py_None) < 0) {
            goto done;
        }
        v = PyLong_FromSsize_t(start + k);
        if (v == NULL)
            goto done;
        rc = set_field(e, &f, finish_names, F_INDEX, v);
        Py_DECREF(v);
        if (rc < 0)
            goto done;
        if (k == 0) { /* the first through __class__'s checks (the layouts agree); the rest the same way, directly */
            if (PyObject_SetAttr(e, s_class, cls) < 0)
                goto done;
        } else if ((PyObject *)Py_TYPE(e) == src) {
            Py_INCREF(cls);
            Py_SET_TYPE(e, (PyTypeObject *)cls);
            Py_DECREF(src);
        }
    }
    out = Py_NewRef(Py_True);
    goto done;
python:
    out = Py_NewRef(Py_None);
done:
    PyMem_Free(times);
    PyMem_Free(has);
    return out;
}

/* whole_events(run, light_type): the positions of the run's metadata and counter events whose args
 * are light_type (scan._Scan.keep decodes them again whole). */
static PyObject *
whole_events(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *run, *out;
    Py_ssize_t n, k;
    Fields f;
    (void)self;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyType_Check(argv[1])) {
        PyErr_SetString(PyExc_TypeError, "whole_events(run: list, light_type: type)");
        return NULL;
    }
    run = argv[0];
    n = PyList_GET_SIZE(run);
    out = PyList_New(0);
    if (out == NULL || n == 0)
        return out;
    if (fields_of(Py_TYPE(PyList_GET_ITEM(run, 0)), finish_names, F_SIZE, &f) < 0)
        goto error;
    for (k = 0; k < n; k++) {
        PyObject *e = PyList_GET_ITEM(run, k), *ph, *a;
        int whole;
        ph = get_field(e, &f, finish_names, F_PH);
        if (ph == NULL)
            goto error;
        whole = is_char(ph, 'M') || is_char(ph, 'C');
        Py_DECREF(ph);
        if (!whole)
            continue;
        a = get_field(e, &f, finish_names, F_ARGS);
        if (a == NULL)
            goto error;
        whole = (PyObject *)Py_TYPE(a) == argv[1];
        Py_DECREF(a);
        if (whole) {
            PyObject *pos = PyLong_FromSsize_t(k);
            if (pos == NULL || PyList_Append(out, pos) < 0) {
                Py_XDECREF(pos);
                goto error;
            }
            Py_DECREF(pos);
        }
    }
    return out;
error:
    Py_DECREF(out);
    return NULL;
}

/* The int64 items of ``offsets`` (an array('q')) at positions i and i + 1 of each index i in the list
 * ``indices``, checked: 0, or -1 with an exception. */
static int
offsets_at(const Py_buffer *b, PyObject *indices, Py_ssize_t k, long long *start, long long *end)
{
    Py_ssize_t i = PyLong_AsSsize_t(PyList_GET_ITEM(indices, k)), n = b->len / (Py_ssize_t)sizeof(long long);
    if (i == -1 && PyErr_Occurred())
        return -1;
    if (i < 0 || i + 1 >= n) {
        PyErr_SetString(PyExc_IndexError, "an event index beyond the scanned offsets");
        return -1;
    }
    *start = ((const long long *)b->buf)[i];
    *end = ((const long long *)b->buf)[i + 1];
    return 0;
}

/* span_of(offsets, indices) -> (lo, hi): where the first of the events ``indices`` starts and the
 * last ends in the file (scan.EventSource.fetch's min and max). */
static PyObject *
span_of(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Py_buffer b;
    Py_ssize_t k, n;
    long long lo = LLONG_MAX, hi = LLONG_MIN, start, end;
    (void)self;
    if (argc != 2 || !PyList_CheckExact(argv[1]) || PyList_GET_SIZE(argv[1]) == 0) {
        PyErr_SetString(PyExc_TypeError, "span_of(offsets: array, indices: non-empty list)");
        return NULL;
    }
    if (take_buffer(argv[0], &b, "q", 0) < 0)
        return NULL;
    n = PyList_GET_SIZE(argv[1]);
    for (k = 0; k < n; k++) {
        if (offsets_at(&b, argv[1], k, &start, &end) < 0) {
            PyBuffer_Release(&b);
            return NULL;
        }
        if (start < lo)
            lo = start;
        if (end > hi)
            hi = end;
    }
    PyBuffer_Release(&b);
    return Py_BuildValue("(LL)", lo, hi);
}

/* gather(block, lo, offsets, indices) -> bytes: the JSON array of the events ``indices`` whose texts
 * lie in ``block`` (the file's bytes from ``lo``), each event's text up to the next one's start less
 * the separator (spaces and commas), joined by commas: scan.EventSource.fetch's pieces, joined. */
static PyObject *
gather(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Py_buffer b, blk;
    Py_ssize_t k, n, size = 2, at = 0;
    long long lo, start, end;
    PyObject *out = NULL;
    char *w;
    (void)self;
    if (argc != 4 || !PyLong_CheckExact(argv[1]) || !PyList_CheckExact(argv[3])) {
        PyErr_SetString(PyExc_TypeError, "gather(block: bytes, lo: int, offsets: array, indices: list)");
        return NULL;
    }
    lo = PyLong_AsLongLong(argv[1]);
    if (lo == -1 && PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(argv[0], &blk, PyBUF_SIMPLE) < 0)
        return NULL;
    if (take_buffer(argv[2], &b, "q", 0) < 0) {
        PyBuffer_Release(&blk);
        return NULL;
    }
    n = PyList_GET_SIZE(argv[3]);
    for (k = 0; k < n; k++) { /* the size first, every span checked against the block */
        if (offsets_at(&b, argv[3], k, &start, &end) < 0)
            goto done;
        if (start < lo || end < start || end - lo > blk.len) {
            PyErr_SetString(PyExc_ValueError, "gather: an event outside the block");
            goto done;
        }
        size += (Py_ssize_t)(end - start) + 1;
    }
    out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL)
        goto done;
    w = PyBytes_AS_STRING(out);
    w[at++] = '[';
    for (k = 0; k < n; k++) {
        const char *p;
        Py_ssize_t len;
        offsets_at(&b, argv[3], k, &start, &end);
        p = (const char *)blk.buf + (start - lo);
        len = (Py_ssize_t)(end - start);
        while (len > 0 && (is_space(p[len - 1]) || p[len - 1] == ','))
            len--;
        if (k > 0)
            w[at++] = ',';
        memcpy(w + at, p, len);
        at += len;
    }
    w[at++] = ']';
    if (_PyBytes_Resize(&out, at) < 0)
        out = NULL;
done:
    PyBuffer_Release(&b);
    PyBuffer_Release(&blk);
    return out;
}

static PyMethodDef methods[] = {
    {"span_of", (PyCFunction)(void (*)(void))span_of, METH_FASTCALL,
     "span_of(offsets, indices) -> (lo, hi): where the events start and end in the file"},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "gather(block, lo, offsets, indices) -> bytes: the events' texts in block as one JSON array"},
    {"finish_run", (PyCFunction)(void (*)(void))finish_run, METH_FASTCALL,
     "finish_run(events, start, cls, extras): a run's Kineto times, indices, extras and class set (True), or None"},
    {"whole_events", (PyCFunction)(void (*)(void))whole_events, METH_FASTCALL,
     "whole_events(run, light_type): the positions of the metadata and counter events with light args"},
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
    static const char *finish[F_SIZE] = {"index", "ts_ns", "dur_ns", "extra", "ph", "args"};
    if (intern_names(events, E_SIZE, event_names) < 0 || intern_names(args, A_SIZE, args_names) < 0 ||
        intern_names(finish, F_SIZE, finish_names) < 0)
        return NULL;
    if (s_class == NULL && (s_class = PyUnicode_InternFromString("__class__")) == NULL)
        return NULL;
    if (s_empty == NULL && (s_empty = PyUnicode_InternFromString("")) == NULL)
        return NULL;
    return PyModule_Create(&moduledef);
}
