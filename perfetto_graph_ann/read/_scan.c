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

typedef struct {
    long long start, end;
} Span;

static int
span_cmp(const void *a, const void *b)
{
    long long x = ((const Span *)a)->start, y = ((const Span *)b)->start;
    return (x > y) - (x < y);
}

/* runs_of(offsets, indices, gap) -> [(start, end), ...]: the file's pieces to read for the events
 * ``indices`` (each from its offset to the next one's), in file order, merged where less than ``gap``
 * bytes lie between them: scan.EventSource._pieces' reads. */
static PyObject *
runs_of(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Py_buffer b;
    Py_ssize_t k, n;
    long long gap;
    Span *sp;
    PyObject *out = NULL;
    (void)self;
    if (argc != 3 || !PyList_CheckExact(argv[1]) || PyList_GET_SIZE(argv[1]) == 0 || !PyLong_CheckExact(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "runs_of(offsets: array, indices: non-empty list, gap: int)");
        return NULL;
    }
    gap = PyLong_AsLongLong(argv[2]);
    if (gap == -1 && PyErr_Occurred())
        return NULL;
    if (take_buffer(argv[0], &b, "q", 0) < 0)
        return NULL;
    n = PyList_GET_SIZE(argv[1]);
    sp = PyMem_Malloc((size_t)n * sizeof(Span));
    if (sp == NULL) {
        PyBuffer_Release(&b);
        return PyErr_NoMemory();
    }
    for (k = 0; k < n; k++)
        if (offsets_at(&b, argv[1], k, &sp[k].start, &sp[k].end) < 0)
            goto done;
    qsort(sp, (size_t)n, sizeof(Span), span_cmp);
    out = PyList_New(0);
    for (k = 0; out != NULL && k < n;) {
        long long start = sp[k].start, end = sp[k].end;
        PyObject *run;
        for (k++; k < n && sp[k].start - end <= gap; k++)
            if (sp[k].end > end)
                end = sp[k].end;
        run = Py_BuildValue("(LL)", start, end);
        if (run == NULL || PyList_Append(out, run) < 0)
            Py_CLEAR(out);
        Py_XDECREF(run);
    }
done:
    PyMem_Free(sp);
    PyBuffer_Release(&b);
    return out;
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

/* ---- fast_run: a run's usual events read straight from their text ----
 *
 * What decode (the light typed decoder), finish_run and keep_loop make of a run, for runs whose
 * every event is written as Kineto writes the usual ones: made from the text without msgspec's
 * objects for the keys the first pass drops. It accepts only text that is valid JSON and that the
 * typed decode reads (a strict subset: plain keys and strings, integers, Kineto's times, args
 * whose decoded keys hold integers or lists of three); for any other run it answers None with no
 * event made, and the caller decodes the run as before (which also words every error). Tokens
 * (phases, categories, names, pids, tids) are found by their text in a table of the memo's objects
 * (tokens()), so an event makes no str of its own. */

#include <stdint.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define TOKENS_CAPSULE "perfetto_graph_ann.read._scan.tokens"

typedef struct {
    uint64_t hash;
    PyObject *key;   /* bytes: a kind byte, then the token's text */
    PyObject *value; /* the memo's object */
} TokEntry;

typedef struct {
    TokEntry *slots;
    size_t cap, used;
} TokTable;

static void
tokens_free(PyObject *capsule)
{
    TokTable *t = PyCapsule_GetPointer(capsule, TOKENS_CAPSULE);
    size_t i;
    if (t == NULL) {
        PyErr_Clear();
        return;
    }
    for (i = 0; i < t->cap; i++) {
        Py_XDECREF(t->slots[i].key);
        Py_XDECREF(t->slots[i].value);
    }
    PyMem_Free(t->slots);
    PyMem_Free(t);
}

/* tokens(): an empty table for fast_run (held by the caller with the memo it is of). */
static PyObject *
tokens(PyObject *self, PyObject *unused)
{
    TokTable *t;
    PyObject *capsule;
    (void)self;
    (void)unused;
    t = PyMem_Calloc(1, sizeof(TokTable));
    if (t == NULL)
        return PyErr_NoMemory();
    t->cap = 1024;
    t->slots = PyMem_Calloc(t->cap, sizeof(TokEntry));
    if (t->slots == NULL) {
        PyMem_Free(t);
        return PyErr_NoMemory();
    }
    capsule = PyCapsule_New(t, TOKENS_CAPSULE, tokens_free);
    if (capsule == NULL) {
        PyMem_Free(t->slots);
        PyMem_Free(t);
    }
    return capsule;
}

static inline uint64_t
tok_hash(char kind, const char *s, Py_ssize_t n)
{
    uint64_t h = UINT64_C(0x9E3779B97F4A7C15) ^ (uint64_t)n ^ ((uint64_t)(unsigned char)kind << 56), w;
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, s + i, 8);
        h = (h ^ w) * UINT64_C(0xFF51AFD7ED558CCD);
        h ^= h >> 32;
    }
    w = 0;
    memcpy(&w, s + i, (size_t)(n - i));
    h = (h ^ w) * UINT64_C(0xC4CEB9FE1A85EC53);
    return h ^ (h >> 29);
}

static int
tokens_grow(TokTable *t)
{
    size_t cap = t->cap * 2, i;
    TokEntry *slots = PyMem_Calloc(cap, sizeof(TokEntry));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (i = 0; i < t->cap; i++) {
        size_t j;
        if (t->slots[i].key == NULL)
            continue;
        for (j = t->slots[i].hash & (cap - 1); slots[j].key != NULL; j = (j + 1) & (cap - 1))
            ;
        slots[j] = t->slots[i];
    }
    PyMem_Free(t->slots);
    t->slots = slots;
    t->cap = cap;
    return 0;
}

/* The memo's object for the token ``s[0:n]`` of ``kind`` ('s': a str of that text, 'i': the int
 * ``v``), as memo.setdefault(obj, obj) keeps it: borrowed (the table holds it), or NULL with an
 * exception. */
static PyObject *
tok_get(TokTable *t, PyObject *memo, char kind, const char *s, Py_ssize_t n, long long v)
{
    uint64_t h = tok_hash(kind, s, n);
    size_t mask = t->cap - 1, i = h & mask;
    PyObject *obj, *kept, *key;
    for (; t->slots[i].key != NULL; i = (i + 1) & mask) {
        const char *k = PyBytes_AS_STRING(t->slots[i].key);
        if (t->slots[i].hash == h && PyBytes_GET_SIZE(t->slots[i].key) == n + 1 && k[0] == kind &&
            memcmp(k + 1, s, (size_t)n) == 0)
            return t->slots[i].value;
    }
    obj = kind == 'i' ? PyLong_FromLongLong(v) : PyUnicode_DecodeUTF8(s, n, "strict");
    if (obj == NULL)
        return NULL;
    kept = PyDict_SetDefault(memo, obj, obj);
    Py_DECREF(obj);
    if (kept == NULL)
        return NULL;
    key = PyBytes_FromStringAndSize(NULL, n + 1);
    if (key == NULL)
        return NULL;
    PyBytes_AS_STRING(key)[0] = kind;
    memcpy(PyBytes_AS_STRING(key) + 1, s, (size_t)n);
    if ((t->used + 1) * 2 > t->cap) {
        if (tokens_grow(t) < 0) {
            Py_DECREF(key);
            return NULL;
        }
        mask = t->cap - 1;
        for (i = h & mask; t->slots[i].key != NULL; i = (i + 1) & mask)
            ;
    }
    t->slots[i].hash = h;
    t->slots[i].key = key;
    t->slots[i].value = Py_NewRef(kept);
    t->used++;
    return kept;
}

/* The strict JSON readers: each returns the position past what it read, or NULL where the text is
 * not what it reads (then the run is left to the decoder). */

static inline const char *
j_ws(const char *p, const char *e)
{
    while (p < e && is_space(*p))
        p++;
    return p;
}

/* Whether the 16 bytes at p hold none that ends a string, escapes or is out of ASCII's printable
 * range (SSE2, on every x86-64; elsewhere two 8-byte words); then the string goes on past them. */
static inline int
j_plain16(const char *p)
{
#if defined(__SSE2__)
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    __m128i stop = _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\')));
    /* bytes below 0x20 or from 0x80: signed, below 0x20 */
    stop = _mm_or_si128(stop, _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)));
    return _mm_movemask_epi8(stop) == 0;
#else
    const uint64_t ones = UINT64_C(0x0101010101010101), highs = ones << 7;
    uint64_t w[2], z = 0;
    int k;
    memcpy(w, p, 16);
    for (k = 0; k < 2; k++) {
        uint64_t q = w[k] ^ (ones * '"'), b = w[k] ^ (ones * '\\');
        z |= ((q - ones) & ~q) | ((b - ones) & ~b) | ((w[k] - ones * 0x20) & ~w[k]) | w[k];
    }
    return (z & highs) == 0;
#endif
}

/* A string opened at p, of ASCII characters (other bytes: the decoder's, which checks their UTF-8).
 * ``plain``: no escapes; otherwise the one-character escapes (not \u). */
static inline const char *
j_string(const char *p, const char *e, int plain)
{
    for (p++;;) {
        unsigned char c;
        while (e - p >= 16 && j_plain16(p))
            p += 16;
        if (p >= e)
            return NULL;
        c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c < 0x20 || c >= 0x80)
            return NULL;
        if (c == '\\') {
            if (plain || p + 1 >= e || p[1] == '\0' || strchr("\"\\/bfnrt", p[1]) == NULL)
                return NULL;
            p++;
        }
        p++;
    }
}

static inline int
j_digit(const char *p, const char *e)
{
    return p < e && *p >= '0' && *p <= '9';
}

/* After a member or an item: 1 (*p past the comma and spaces) where another follows, 0 (*p past
 * ``close``) where the object or array ends, -1 for anything else. */
static inline int
j_next(const char **p, const char *e, char close)
{
    const char *q = j_ws(*p, e);
    if (q >= e || (*q != ',' && *q != close))
        return -1;
    *p = *q == ',' ? j_ws(q + 1, e) : q + 1;
    return *q == ',';
}

/* A member's key opened at p (``plain``: no escapes), then its colon: past them (the value), *k
 * and *n the key's text. */
static inline const char *
j_key(const char *p, const char *e, int plain, const char **k, Py_ssize_t *n)
{
    const char *q;
    if (p >= e || *p != '"' || (q = j_string(p, e, plain)) == NULL)
        return NULL;
    *k = p + 1;
    *n = q - p - 2;
    q = j_ws(q, e);
    return q < e && *q == ':' ? j_ws(q + 1, e) : NULL;
}

/* null. */
static inline const char *
j_null(const char *p, const char *e)
{
    return e - p >= 4 && memcmp(p, "null", 4) == 0 ? p + 4 : NULL;
}

/* An integer of at most 18 digits (no fraction, no exponent): *v. */
static const char *
j_int(const char *p, const char *e, long long *v)
{
    long long x = 0;
    int neg = 0;
    const char *s;
    if (p < e && *p == '-') {
        neg = 1;
        p++;
    }
    s = p;
    if (!j_digit(p, e))
        return NULL;
    if (*p == '0') {
        p++;
    } else {
        for (; j_digit(p, e); p++) {
            if (p - s >= 18)
                return NULL;
            x = x * 10 + (*p - '0');
        }
    }
    if (j_digit(p, e) || (p < e && (*p == '.' || *p == 'e' || *p == 'E')))
        return NULL;
    *v = neg ? -x : x;
    return p;
}

/* A number (JSON's grammar: msgspec skips any, whatever its size). */
static const char *
j_number(const char *p, const char *e)
{
    if (p < e && *p == '-')
        p++;
    if (!j_digit(p, e))
        return NULL;
    if (*p == '0')
        p++;
    else
        while (j_digit(p, e))
            p++;
    if (p < e && *p == '.') {
        p++;
        if (!j_digit(p, e))
            return NULL;
        while (j_digit(p, e))
            p++;
    }
    if (p < e && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < e && (*p == '+' || *p == '-'))
            p++;
        if (!j_digit(p, e))
            return NULL;
        while (j_digit(p, e))
            p++;
    }
    return j_digit(p, e) ? NULL : p;
}

/* Any value, read to its end and dropped (nesting at most 16 deep). */
static const char *
j_skip(const char *p, const char *e, int depth)
{
    char close;
    int obj;
    if (p >= e)
        return NULL;
    switch (*p) {
    case '"':
        return j_string(p, e, 0);
    case 't':
        return e - p >= 4 && memcmp(p, "true", 4) == 0 ? p + 4 : NULL;
    case 'f':
        return e - p >= 5 && memcmp(p, "false", 5) == 0 ? p + 5 : NULL;
    case 'n':
        return j_null(p, e);
    case '{':
    case '[':
        break;
    default:
        return j_number(p, e);
    }
    if (depth >= 16)
        return NULL;
    obj = *p == '{';
    close = obj ? '}' : ']';
    p = j_ws(p + 1, e);
    if (p < e && *p == close)
        return p + 1;
    for (;;) {
        const char *k;
        Py_ssize_t n;
        int more;
        if (obj && (p = j_key(p, e, 0, &k, &n)) == NULL)
            return NULL;
        if ((p = j_skip(p, e, depth + 1)) == NULL || (more = j_next(&p, e, close)) < 0)
            return NULL;
        if (more == 0)
            return p;
    }
}

/* A time as Kineto writes it (events.py's _KINETO_TIMES: 1 to 15 digits, a point, 3 decimals): *ns. */
static const char *
j_time(const char *p, const char *e, long long *ns)
{
    const char *s = p;
    long long v = 0;
    for (; j_digit(p, e); p++) {
        if (p - s >= 15)
            return NULL;
        v = v * 10 + (*p - '0');
    }
    if (p == s || (p - s > 1 && *s == '0') || e - p < 4 || p[0] != '.' || !j_digit(p + 1, e) ||
        !j_digit(p + 2, e) || !j_digit(p + 3, e))
        return NULL;
    v = v * 1000 + (p[1] - '0') * 100 + (p[2] - '0') * 10 + (p[3] - '0');
    p += 4;
    if (j_digit(p, e) || (p < e && (*p == 'e' || *p == 'E')))
        return NULL;
    *ns = v;
    return p;
}

/* An event's keys the typed decode knows (events._KinetoEvent), by bit. */
enum { K_PH, K_CAT, K_NAME, K_PID, K_TID, K_TS, K_DUR, K_ARGS, K_ID, K_BP, K_S };

typedef struct {
    const char *s;
    Py_ssize_t n;
} Tok;

/* What fast_run reads of one event. */
typedef struct {
    unsigned seen, aseen; /* the event's keys (K_ bits) and its args' decoded keys (A_ bits) met */
    Tok ph, cat, name, pid_s, tid_s, id_s;
    int pid_int, tid_int, id_kind; /* id_kind: 0 none or null, 1 an int, 2 a str */
    long long pid, tid, id, ts, dur;
    long long a[A_SIZE]; /* the ints of the args' decoded keys (grid and block below) */
    long long grid[3], block[3];
} FastEv;

static int
top_key(const char *s, Py_ssize_t n)
{
#define IS(lit) (memcmp(s, lit, n) == 0)
    switch (n) {
    case 1:
        return s[0] == 's' ? K_S : -1;
    case 2:
        return IS("ph") ? K_PH : IS("ts") ? K_TS : IS("id") ? K_ID : IS("bp") ? K_BP : -1;
    case 3:
        return IS("cat") ? K_CAT : IS("pid") ? K_PID : IS("tid") ? K_TID : IS("dur") ? K_DUR : -1;
    case 4:
        return IS("name") ? K_NAME : IS("args") ? K_ARGS : -1;
    default:
        return -1;
    }
}

/* The args key ``s[0:n]`` as an A_ index where the light args type decodes it (device and stream;
 * with the join all seven), else -1. */
static int
args_key(const char *s, Py_ssize_t n, int join)
{
    switch (n) {
    case 6:
        return IS("device") ? A_DEVICE : IS("stream") ? A_STREAM : -1;
    case 11:
        return join && IS("correlation") ? A_CORRELATION : -1;
    case 4:
        return join && IS("grid") ? A_GRID : -1;
    case 5:
        return join && IS("block") ? A_BLOCK : -1;
    case 8:
        return join && IS("graph id") ? A_GRAPH_ID : -1;
    case 13:
        return join && IS("graph node id") ? A_GRAPH_NODE_ID : -1;
    default:
        return -1;
    }
#undef IS
}

/* A list of exactly three integers. */
static const char *
j_three(const char *p, const char *e, long long *out)
{
    int k;
    if (p >= e || *p != '[')
        return NULL;
    for (k = 0; k < 3; k++) {
        p = j_ws(p + 1, e);
        if ((p = j_int(p, e, &out[k])) == NULL)
            return NULL;
        p = j_ws(p, e);
        if (p >= e || *p != (k < 2 ? ',' : ']'))
            return NULL;
    }
    return p + 1;
}

static const char *
j_args(const char *p, const char *e, FastEv *ev, int join)
{
    if (p >= e || *p != '{')
        return NULL;
    p = j_ws(p + 1, e);
    if (p < e && *p == '}')
        return p + 1;
    for (;;) {
        const char *k;
        Py_ssize_t n;
        int a, more;
        if ((p = j_key(p, e, 1, &k, &n)) == NULL)
            return NULL;
        a = args_key(k, n, join);
        if (a < 0) {
            p = j_skip(p, e, 1);
        } else {
            if (ev->aseen & (1u << a))
                return NULL;
            ev->aseen |= 1u << a;
            if (a == A_GRID || a == A_BLOCK)
                p = j_three(p, e, a == A_GRID ? ev->grid : ev->block);
            else
                p = j_int(p, e, &ev->a[a]);
        }
        if (p == NULL || (more = j_next(&p, e, '}')) < 0)
            return NULL;
        if (more == 0)
            return p;
    }
}

/* A plain string's token: past it, *t its text. */
static const char *
j_tok(const char *p, const char *e, Tok *t)
{
    const char *q;
    if (p >= e || *p != '"' || (q = j_string(p, e, 1)) == NULL)
        return NULL;
    t->s = p + 1;
    t->n = q - p - 2;
    return q;
}

/* An event's object opened at p. */
static const char *
j_event(const char *p, const char *e, FastEv *ev, int join)
{
    memset(ev, 0, sizeof *ev);
    p = j_ws(p + 1, e);
    if (p < e && *p == '}')
        return NULL; /* no ph: the decoder's refusal */
    for (;;) {
        const char *k;
        Py_ssize_t n;
        int key, more;
        if ((p = j_key(p, e, 1, &k, &n)) == NULL)
            return NULL;
        key = top_key(k, n);
        if (key < 0 || (ev->seen & (1u << key)))
            return NULL;
        ev->seen |= 1u << key;
        switch (key) {
        case K_PH:
            p = j_tok(p, e, &ev->ph);
            break;
        case K_CAT:
            p = j_tok(p, e, &ev->cat);
            break;
        case K_NAME:
            p = j_tok(p, e, &ev->name);
            break;
        case K_PID:
        case K_TID: {
            Tok *t = key == K_PID ? &ev->pid_s : &ev->tid_s;
            if (p < e && *p == '"') {
                p = j_tok(p, e, t);
            } else {
                t->s = p;
                p = j_int(p, e, key == K_PID ? &ev->pid : &ev->tid);
                if (p != NULL) {
                    t->n = p - t->s;
                    *(key == K_PID ? &ev->pid_int : &ev->tid_int) = 1;
                }
            }
            break;
        }
        case K_TS:
        case K_DUR:
            p = j_time(p, e, key == K_TS ? &ev->ts : &ev->dur);
            break;
        case K_ARGS:
            p = j_args(p, e, ev, join);
            break;
        case K_ID:
            if (p < e && *p == '"') {
                p = j_tok(p, e, &ev->id_s);
                ev->id_kind = 2;
            } else if (p < e && *p == 'n') {
                p = j_null(p, e);
            } else {
                p = j_int(p, e, &ev->id);
                ev->id_kind = 1;
            }
            break;
        default: /* bp, s: a str or null, dropped */
            if (p < e && *p == 'n')
                p = j_null(p, e);
            else
                p = p < e && *p == '"' ? j_string(p, e, 1) : NULL;
        }
        if (p == NULL || (more = j_next(&p, e, '}')) < 0)
            return NULL;
        if (more == 0)
            break;
    }
    if (!(ev->seen & (1u << K_PH)) || (ev->ph.n == 1 && (ev->ph.s[0] == 'M' || ev->ph.s[0] == 'C')))
        return NULL; /* the tracks and counters read these events whole: the decoder's */
    if (ev->ph.n == 1 && ev->ph.s[0] == 'X' && (ev->seen & ((1u << K_TS) | (1u << K_DUR))) !=
                                                   ((1u << K_TS) | (1u << K_DUR)))
        return NULL;
    return p;
}

#define LAUNCH_NAMES_MAX 8

/* The context and tables of one fast_run. */
typedef struct {
    PyObject **ctx;
    TokTable *tok;
    Py_ssize_t join_limit;
    PyObject *no_type; /* type(the absent marker) */
    int nlaunch;       /* the graph launches' names as text (-1: more, or not ASCII str: asked of the set) */
    const char *launch[LAUNCH_NAMES_MAX];
    Py_ssize_t nlaunch_len[LAUNCH_NAMES_MAX];
} Fast;

/* F's launch names from the context's collection of str. 0, or -1 with an exception. */
static int
launch_names(Fast *F)
{
    PyObject *it = PyObject_GetIter(F->ctx[C_LAUNCH_NAMES]), *s;
    F->nlaunch = 0;
    if (it == NULL)
        return -1;
    while ((s = PyIter_Next(it)) != NULL) {
        if (F->nlaunch >= 0 && F->nlaunch < LAUNCH_NAMES_MAX && PyUnicode_CheckExact(s) && PyUnicode_IS_ASCII(s)) {
            F->launch[F->nlaunch] = (const char *)PyUnicode_DATA(s); /* the collection holds the str */
            F->nlaunch_len[F->nlaunch++] = PyUnicode_GET_LENGTH(s);
        } else {
            F->nlaunch = -1;
        }
        Py_DECREF(s);
    }
    Py_DECREF(it);
    return PyErr_Occurred() ? -1 : 0;
}

/* Whether the name ``t`` is a graph launch's (1, 0, or -1 with an exception): its text compared
 * with theirs, no str made for the names of events the first pass drops. */
static int
is_launch(const Fast *F, const Tok *t)
{
    PyObject *nm;
    int k;
    if (F->nlaunch >= 0) {
        for (k = 0; k < F->nlaunch; k++)
            if (F->nlaunch_len[k] == t->n && memcmp(F->launch[k], t->s ? t->s : "", (size_t)t->n) == 0)
                return 1;
        return 0;
    }
    nm = PyUnicode_DecodeUTF8(t->s ? t->s : "", t->n, "strict");
    k = nm ? PySequence_Contains(F->ctx[C_LAUNCH_NAMES], nm) : -1;
    Py_XDECREF(nm);
    return k;
}

/* An int arg's (A_ index) value: a new reference (the absent marker where absent). */
static PyObject *
arg_value(const Fast *F, const FastEv *ev, int a)
{
    if (!(ev->aseen & (1u << a)))
        return Py_NewRef(F->ctx[C_NO_ARG]);
    return PyLong_FromLongLong(ev->a[a]);
}

/* A list of three ints: a new reference. */
static PyObject *
list3(const long long *v)
{
    PyObject *l = PyList_New(3);
    int k;
    if (l == NULL)
        return NULL;
    for (k = 0; k < 3; k++) {
        PyObject *x = PyLong_FromLongLong(v[k]);
        if (x == NULL) {
            Py_DECREF(l);
            return NULL;
        }
        PyList_SET_ITEM(l, k, x);
    }
    return l;
}

/* The light args (scan._Scan._light, keep_loop's light_args) of an event: a new reference. */
static PyObject *
fast_light(const Fast *F, const FastEv *ev)
{
    PyObject *d, *s, *key, *out;
    if (!(ev->aseen & ((1u << A_DEVICE) | (1u << A_STREAM))))
        return Py_NewRef(F->ctx[C_NONE]);
    d = arg_value(F, ev, A_DEVICE);
    s = arg_value(F, ev, A_STREAM);
    key = d && s ? PyTuple_Pack(5, F->ctx[C_ARGS], (PyObject *)Py_TYPE(d), d, (PyObject *)Py_TYPE(s), s) : NULL;
    out = key ? PyDict_GetItemWithError(F->ctx[C_MEMO], key) : NULL;
    if (out != NULL) {
        Py_INCREF(out);
    } else if (key != NULL && !PyErr_Occurred() && (out = PyDict_New()) != NULL) { /* scan._light_args */
        if (((ev->aseen & (1u << A_DEVICE)) && PyDict_SetItemString(out, "device", d) < 0) ||
            ((ev->aseen & (1u << A_STREAM)) && PyDict_SetItemString(out, "stream", s) < 0) ||
            PyDict_SetItem(F->ctx[C_MEMO], key, out) < 0)
            Py_CLEAR(out);
    }
    Py_XDECREF(key);
    Py_XDECREF(d);
    Py_XDECREF(s);
    return out;
}

/* An arg of the join's key (scan._Scan._join_args' general key), in its order: for device, stream and
 * correlation its type then its value; for grid and block the value then its type, or for a list its
 * items' tuple then their types' tuple; 0 or -1. */
static int
key_pair(const Fast *F, const FastEv *ev, int a, PyObject *key, Py_ssize_t at)
{
    PyObject *v, *t;
    if (!(ev->aseen & (1u << a))) {
        v = Py_NewRef(F->ctx[C_NO_ARG]);
        t = Py_NewRef(F->no_type);
    } else if (a == A_GRID || a == A_BLOCK) {
        const long long *x = a == A_GRID ? ev->grid : ev->block;
        int k;
        v = PyTuple_New(3);
        t = PyTuple_New(3);
        for (k = 0; v && t && k < 3; k++) {
            PyObject *item = PyLong_FromLongLong(x[k]);
            if (item == NULL)
                break;
            PyTuple_SET_ITEM(v, k, item);
            PyTuple_SET_ITEM(t, k, Py_NewRef((PyObject *)&PyLong_Type));
        }
        if (v == NULL || t == NULL || k < 3) {
            Py_XDECREF(v);
            Py_XDECREF(t);
            return -1;
        }
    } else {
        v = PyLong_FromLongLong(ev->a[a]);
        t = Py_NewRef((PyObject *)&PyLong_Type);
        if (v == NULL) {
            Py_DECREF(t);
            return -1;
        }
    }
    if (a == A_GRID || a == A_BLOCK) {
        PyTuple_SET_ITEM(key, at, v);
        PyTuple_SET_ITEM(key, at + 1, t);
    } else {
        PyTuple_SET_ITEM(key, at, t);
        PyTuple_SET_ITEM(key, at + 1, v);
    }
    return 0;
}

/* The join's args (scan._Scan._join_args) of a GPU work event or graph launch: a new reference. */
static PyObject *
fast_join_args(const Fast *F, const FastEv *ev)
{
    static const char *const keys[A_SIZE] = {"device", "stream", "correlation", "grid", "block", "graph id",
                                             "graph node id"};
    const unsigned usual = (1u << A_DEVICE) | (1u << A_STREAM) | (1u << A_CORRELATION) | (1u << A_GRID) |
                           (1u << A_BLOCK);
    PyObject *key = NULL, *out, *memo = F->ctx[C_JOIN_MEMO];
    int k;
    if (!(ev->aseen & ((1u << A_GRAPH_ID) | (1u << A_GRAPH_NODE_ID)))) { /* shared: found by its key */
        if (ev->aseen == usual) {
            key = PyTuple_New(12);
            for (k = 0; key && k < 3; k++) {
                PyObject *g = PyLong_FromLongLong(ev->grid[k]), *b = PyLong_FromLongLong(ev->block[k]);
                PyObject *x = PyLong_FromLongLong(ev->a[k]); /* device, stream, correlation */
                PyTuple_SET_ITEM(key, 3 + k, g);
                PyTuple_SET_ITEM(key, 6 + k, b);
                PyTuple_SET_ITEM(key, k, x);
                PyTuple_SET_ITEM(key, 9 + k, Py_NewRef(Py_None));
                if (g == NULL || b == NULL || x == NULL)
                    Py_CLEAR(key);
            }
        } else {
            key = PyTuple_New(10);
            for (k = 0; key && k < 5; k++)
                if (key_pair(F, ev, k, key, 2 * k) < 0)
                    Py_CLEAR(key);
        }
        if (key == NULL)
            return NULL;
        out = PyDict_GetItemWithError(memo, key);
        if (out != NULL || PyErr_Occurred()) {
            Py_DECREF(key);
            Py_XINCREF(out);
            return out;
        }
    }
    out = PyDict_New();
    for (k = 0; out && k < A_SIZE; k++) {
        PyObject *v;
        if (!(ev->aseen & (1u << k)))
            continue;
        v = k == A_GRID ? list3(ev->grid) : k == A_BLOCK ? list3(ev->block) : PyLong_FromLongLong(ev->a[k]);
        if (v == NULL || PyDict_SetItemString(out, keys[k], v) < 0)
            Py_CLEAR(out);
        Py_XDECREF(v);
    }
    if (out != NULL && key != NULL) {
        if (PyDict_GET_SIZE(memo) >= F->join_limit)
            PyDict_Clear(memo);
        if (PyDict_SetItem(memo, key, out) < 0)
            Py_CLEAR(out);
    }
    Py_XDECREF(key);
    return out;
}

/* A str or int token of the memo (borrowed); "" where absent. */
static PyObject *
fast_token(const Fast *F, const Tok *t, int is_int, long long v)
{
    return tok_get(F->tok, F->ctx[C_MEMO], is_int ? 'i' : 's', t->s ? t->s : "", t->n, v);
}

/* The event made of ``ev``, as keep_loop leaves it: a new reference. */
static PyObject *
fast_make(const Fast *F, const FastEv *ev, PyObject *cls, Py_ssize_t index, PyObject **last, long long *last_ts)
{
    PyObject *f[11] = {NULL}; /* TraceEvent's fields, in order (scan.py checks them) */
    PyObject *out = NULL, *name = s_empty, *args = NULL;
    int k, join = F->ctx[C_JOIN] == Py_True;
    if ((f[1] = fast_token(F, &ev->ph, 0, 0)) == NULL || (f[2] = fast_token(F, &ev->cat, 0, 0)) == NULL ||
        (f[4] = fast_token(F, &ev->pid_s, ev->pid_int, ev->pid)) == NULL ||
        (f[5] = fast_token(F, &ev->tid_s, ev->tid_int, ev->tid)) == NULL)
        return NULL;
    for (k = 1; k < 6; k++)
        if (k != 3)
            Py_INCREF(f[k]);
    if (join && ev->ph.n == 1 && ev->ph.s[0] == 'X') { /* keep_joined */
        PyObject *gpu = PyDict_GetItemWithError(F->ctx[C_JOINED], f[2]);
        int is_gpu, kept;
        if (gpu == NULL) {
            if (PyErr_Occurred() || (gpu = PyObject_CallOneArg(F->ctx[C_GPU_OF], f[2])) == NULL)
                goto done;
            is_gpu = PyObject_IsTrue(gpu);
            Py_DECREF(gpu);
        } else {
            is_gpu = PyObject_IsTrue(gpu);
        }
        kept = is_gpu ? is_gpu : is_launch(F, &ev->name);
        if (kept < 0)
            goto done;
        if (kept) { /* what the join reads: its name (interned, as keep_joined does) and its args */
            if ((name = fast_token(F, &ev->name, 0, 0)) == NULL || (args = fast_join_args(F, ev)) == NULL)
                goto done;
        }
    }
    if (args == NULL && (args = fast_light(F, ev)) == NULL)
        goto done;
    f[3] = Py_NewRef(name);
    f[8] = args;
    args = NULL;
    if (!(ev->seen & (1u << K_TS))) {
        f[6] = Py_NewRef(Py_None);
    } else if (*last != NULL && *last != Py_None && *last_ts == ev->ts) { /* one int object for equal times */
        f[6] = Py_NewRef(*last);
    } else if ((f[6] = PyLong_FromLongLong(ev->ts)) == NULL) {
        goto done;
    }
    Py_XSETREF(*last, Py_NewRef(f[6]));
    *last_ts = ev->ts;
    f[7] = ev->seen & (1u << K_DUR) ? PyLong_FromLongLong(ev->dur) : Py_NewRef(Py_None);
    f[9] = ev->id_kind == 1 ? PyLong_FromLongLong(ev->id)
           : ev->id_kind == 2 ? PyUnicode_DecodeUTF8(ev->id_s.s, ev->id_s.n, "strict") : Py_NewRef(Py_None);
    f[0] = PyLong_FromSsize_t(index);
    f[10] = Py_NewRef(Py_None);
    if (f[0] == NULL || f[7] == NULL || f[9] == NULL)
        goto done;
    out = PyObject_Vectorcall(cls, f, 11, NULL);
done:
    for (k = 0; k < 11; k++)
        Py_XDECREF(f[k]);
    return out;
}

/* fast_run(buf, end, start, at, context, cls, join_limit, tokens): the events of a run as the first
 * pass keeps them (decode, finish_run and keep_loop in one), with the offsets keep appends, for runs
 * whose every event this reads. ``buf[:end]``: the run's events, the items of a JSON array without its
 * brackets; ``at``: where buf starts in the file's text; ``start``: the trace's index of the first.
 * (events, starts as int64 bytes, end of the last event), starts and end in the file's text; None for
 * any other run (nothing made: the caller decodes it). ``context``: keep_loop's. */
static PyObject *
fast_run(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Fast F;
    Py_buffer buf;
    PyObject *events = NULL, *starts = NULL, *out = NULL, *last = NULL;
    const char *text, *p, *e, *end = NULL;
    long long base, last_ts = 0, *sp = NULL;
    Py_ssize_t start, size, n = 0, cap = 256;
    (void)self;
    if (argc != 8 || !PyLong_CheckExact(argv[1]) || !PyLong_CheckExact(argv[2]) || !PyLong_CheckExact(argv[3]) ||
        !PyTuple_CheckExact(argv[4]) || PyTuple_GET_SIZE(argv[4]) != C_SIZE || !PyType_Check(argv[5]) ||
        !PyLong_CheckExact(argv[6]) || !PyCapsule_IsValid(argv[7], TOKENS_CAPSULE)) {
        PyErr_SetString(PyExc_TypeError, "fast_run(buf, end: int, start: int, at: int, context: tuple, cls: type, "
                                         "join_limit: int, tokens)");
        return NULL;
    }
    F.ctx = &PyTuple_GET_ITEM(argv[4], 0);
    if (!PyDict_CheckExact(F.ctx[C_MEMO]) || !PyDict_CheckExact(F.ctx[C_JOINED]) ||
        !PyDict_CheckExact(F.ctx[C_JOIN_MEMO])) {
        PyErr_SetString(PyExc_TypeError, "fast_run: a context of the wrong shape");
        return NULL;
    }
    F.tok = PyCapsule_GetPointer(argv[7], TOKENS_CAPSULE);
    F.no_type = (PyObject *)Py_TYPE(F.ctx[C_NO_ARG]);
    if (launch_names(&F) < 0)
        return NULL;
    size = PyLong_AsSsize_t(argv[1]);
    start = PyLong_AsSsize_t(argv[2]);
    base = PyLong_AsLongLong(argv[3]);
    F.join_limit = PyLong_AsSsize_t(argv[6]);
    if (PyErr_Occurred())
        return NULL;
    if (PyObject_GetBuffer(argv[0], &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    if (size < 0 || size > buf.len) {
        PyBuffer_Release(&buf);
        PyErr_SetString(PyExc_ValueError, "fast_run: end beyond the buffer");
        return NULL;
    }
    text = (const char *)buf.buf;
    e = text + size;
    p = j_ws(text, e);
    if (p >= e || *p != '{') /* empty, or not objects */
        goto none;
    sp = PyMem_Malloc((size_t)cap * sizeof(long long));
    events = PyList_New(0);
    if (sp == NULL || events == NULL) {
        if (sp == NULL)
            PyErr_NoMemory();
        goto done;
    }
    for (;;) {
        FastEv ev;
        PyObject *o;
        const char *q;
        if (p >= e || *p != '{' || (q = j_event(p, e, &ev, F.ctx[C_JOIN] == Py_True)) == NULL)
            goto none;
        if (n == cap) {
            long long *more = PyMem_Realloc(sp, (size_t)(cap *= 2) * sizeof(long long));
            if (more == NULL) {
                PyErr_NoMemory();
                goto done;
            }
            sp = more;
        }
        sp[n] = base + (p - text);
        o = fast_make(&F, &ev, argv[5], start + n, &last, &last_ts);
        if (o == NULL || PyList_Append(events, o) < 0) {
            Py_XDECREF(o);
            goto done;
        }
        Py_DECREF(o);
        n++;
        end = q;
        p = j_ws(q, e);
        if (p >= e)
            break;
        if (*p != ',')
            goto none;
        p = j_ws(p + 1, e);
    }
    starts = PyBytes_FromStringAndSize((const char *)sp, n * (Py_ssize_t)sizeof(long long));
    if (starts != NULL)
        out = Py_BuildValue("(OOL)", events, starts, base + (long long)(end - text));
    goto done;
none:
    out = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&buf);
    PyMem_Free(sp);
    Py_XDECREF(events);
    Py_XDECREF(starts);
    Py_XDECREF(last);
    return out;
}

static PyMethodDef methods[] = {
    {"span_of", (PyCFunction)(void (*)(void))span_of, METH_FASTCALL,
     "span_of(offsets, indices) -> (lo, hi): where the events start and end in the file"},
    {"runs_of", (PyCFunction)(void (*)(void))runs_of, METH_FASTCALL,
     "runs_of(offsets, indices, gap) -> [(start, end)]: the file's pieces holding the events, nearby ones merged"},
    {"gather", (PyCFunction)(void (*)(void))gather, METH_FASTCALL,
     "gather(block, lo, offsets, indices) -> bytes: the events' texts in block as one JSON array"},
    {"finish_run", (PyCFunction)(void (*)(void))finish_run, METH_FASTCALL,
     "finish_run(events, start, cls, extras): a run's Kineto times, indices, extras and class set (True), or None"},
    {"whole_events", (PyCFunction)(void (*)(void))whole_events, METH_FASTCALL,
     "whole_events(run, light_type): the positions of the metadata and counter events with light args"},
    {"event_spans", (PyCFunction)(void (*)(void))event_spans, METH_FASTCALL,
     "event_spans(text, n, at): each object's start in the JSON array text (int64 bytes) and the last one's end, plus at"},
    {"fast_run", (PyCFunction)(void (*)(void))fast_run, METH_FASTCALL,
     "fast_run(buf, end, start, at, context, cls, join_limit, tokens): a run's events kept from their text, or None"},
    {"tokens", tokens, METH_NOARGS, "tokens(): an empty token table for fast_run"},
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
