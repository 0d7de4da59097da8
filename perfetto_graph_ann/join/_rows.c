/*
 * The join's per-event loops over a replay in C (perfetto_graph_ann.join._rows), for placements
 * held in a CompactPlacements' columns: place_rows is join._place_compact's inner loop (each
 * matched event a row of the columns, the report's counts), lane_keys is join._lane_names' (each
 * event's (device, lane) and the graphs on it), collect_work is projection._collect_work's (each
 * timed event's interval, per scope instance too) and busy_ns projection.busy_ns. The rest goes to the Python callables in the
 * context, which do what the Python loops do (an event left unmatched or shared by several graphs,
 * a node met for the first time, a row beyond the int32 columns, a placement kept whole, a device
 * or stream not in the args). An accelerator only: join.py runs the same loops in Python where this
 * is not built or is turned off (PERFETTO_GRAPH_ANN_PURE_PYTHON), and the two give the same
 * placements, counts and lane names (tests/test_join_rows.py).
 * Compiled by hatch_build.py.
 */
#include "../read/_slots.h"

#include <stdlib.h>

#include <stdint.h>

enum { E_INDEX, E_ARGS, E_SIZE };
static PyObject *event_names[E_SIZE];
static PyObject *s_shared_by, *s_node, *s_key, *s_strategy, *s_ambiguous, *s_stream, *s_device, *s_graph_id,
    *s_category, *int_zero, *int_one;

#define NO_VALUE INT32_MIN

/* A growing buffer of fixed-size items, appended to an array at a flush. */
typedef struct {
    char *v;
    Py_ssize_t n, cap, item;
} Column;

static int
col_push(Column *c, const void *item)
{
    if (c->n == c->cap) {
        Py_ssize_t cap = c->cap ? c->cap * 2 : 1024;
        char *v = PyMem_Realloc(c->v, cap * c->item);
        if (v == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        c->v = v;
        c->cap = cap;
    }
    memcpy(c->v + c->n * c->item, item, c->item);
    c->n++;
    return 0;
}

/* The buffered items appended to arr (a bytearray, else arr.frombytes); emptied. 0, or -1 with an
 * exception. */
static int
col_flush(Column *c, PyObject *arr)
{
    if (append_raw(arr, c->v, c->n * c->item) < 0)
        return -1;
    c->n = 0;
    return 0;
}

/* The event's int arg ``key`` (an exact int), else its property of the same name (TraceEvent.stream
 * / .device): a new reference, NULL on error. */
static PyObject *
int_arg_or_property(PyObject *e, PyObject *a, PyObject *key)
{
    PyObject *v = arg_of(a, key);
    if (v == NULL || PyLong_CheckExact(v))
        return v;
    Py_DECREF(v);
    return PyObject_GetAttr(e, key);
}

/* 1 when o is an int strictly between INT32_MIN and 2^31 (its value in *v), else 0. */
static int
int32_of(PyObject *o, int32_t *v)
{
    long long x;
    if (!int64_of(o, &x) || x <= NO_VALUE || x >= ((long long)1 << 31))
        return 0;
    *v = (int32_t)x;
    return 1;
}

/* d[key] += 1 (d[key] as the dict gives it: a missing key is the dict's error). */
static int
count_in(PyObject *d, PyObject *key)
{
    PyObject *v = PyDict_CheckExact(d) ? Py_XNewRef(PyDict_GetItemWithError(d, key)) : NULL;
    PyObject *one;
    int rc;
    if (v == NULL && (PyErr_Occurred() || (v = PyObject_GetItem(d, key)) == NULL))
        return -1;
    one = PyNumber_Add(v, int_one);
    Py_DECREF(v);
    if (one == NULL)
        return -1;
    rc = PyObject_SetItem(d, key, one);
    Py_DECREF(one);
    return rc;
}

/* place_rows' context, in join._place_compact's order. */
enum {
    R_MATCHES, R_NODES, R_ROW, R_KEPT, R_ORDER, R_NODE, R_REPLAY, R_HW, R_HOW, R_HOW_OF, R_MATCHED, R_ORIGINS,
    R_REPLAY_COL, R_SMALL, R_INDEX, R_SLOW, R_HIT_OF, R_ADD, R_SIZE
};

typedef struct {
    PyObject **ctx;
    Fields ev;
    Py_buffer row;
    Column order, node, replay, hw, how; /* the columns' items: int64, int32 (three), a byte */
    Py_ssize_t rows; /* rows written: the node column's length and what is buffered */
    int32_t replay_col;
    int small;
    long long ambiguous;
} Rows;

static int
rows_flush(Rows *R)
{
    PyObject **ctx = R->ctx;
    return col_flush(&R->order, ctx[R_ORDER]) < 0 || col_flush(&R->node, ctx[R_NODE]) < 0 ||
                   col_flush(&R->replay, ctx[R_REPLAY]) < 0 || col_flush(&R->hw, ctx[R_HW]) < 0 ||
                   col_flush(&R->how, ctx[R_HOW]) < 0
               ? -1
               : 0;
}

/* Call fn(args...) with the buffered rows flushed first (it may append to the columns), and the
 * row count read again after it. 0, or -1 with an exception. */
static int
rows_call(Rows *R, PyObject *fn, PyObject *const *args, Py_ssize_t n)
{
    PyObject *r;
    Py_ssize_t len;
    if (rows_flush(R) < 0)
        return -1;
    r = PyObject_Vectorcall(fn, args, n, NULL);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    len = PyObject_Length(R->ctx[R_NODE]);
    if (len < 0)
        return -1;
    R->rows = len;
    return 0;
}

/* One event of the replay. 0, or -1 with an exception. */
static int
place_one(Rows *R, PyObject *e)
{
    PyObject **ctx = R->ctx;
    PyObject *i_o = NULL, *m, *v = NULL, *node = NULL, *key = NULL, *hit = NULL, *a = NULL, *hw = NULL,
             *strategy = NULL, *how = NULL;
    Py_ssize_t i;
    int rc = -1, amb, shared = 0;
    int32_t hw32 = NO_VALUE;
    i_o = get_field(e, &R->ev, event_names, E_INDEX);
    if (i_o == NULL)
        return -1;
    m = PyDict_GetItemWithError(ctx[R_MATCHES], i_o); /* borrowed */
    if (m == NULL && PyErr_Occurred())
        goto done;
    if (m != NULL) {
        v = PyObject_GetAttr(m, s_shared_by);
        if (v == NULL || (shared = PyObject_IsTrue(v)) < 0)
            goto done;
        Py_CLEAR(v);
    }
    if (m == NULL || shared) { /* unmatched, or shared by several graphs: placement()'s rule */
        PyObject *args[2] = {e, m != NULL ? m : Py_None};
        rc = rows_call(R, ctx[R_SLOW], args, 2);
        goto done;
    }
    i = PyLong_AsSsize_t(i_o);
    if (i == -1 && PyErr_Occurred())
        goto done;
    if ((node = PyObject_GetAttr(m, s_node)) == NULL || (key = PyObject_GetAttr(node, s_key)) == NULL)
        goto done;
    hit = Py_XNewRef(PyDict_GetItemWithError(ctx[R_NODES], key));
    if (hit == NULL) {
        if (PyErr_Occurred() || (hit = PyObject_CallOneArg(ctx[R_HIT_OF], m)) == NULL)
            goto done;
    }
    if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 3) {
        PyErr_SetString(PyExc_TypeError, "place_rows: a node's entry must be (number, origin, triple)");
        goto done;
    }
    if ((a = get_field(e, &R->ev, event_names, E_ARGS)) == NULL ||
        (hw = int_arg_or_property(e, a, s_stream)) == NULL || (strategy = PyObject_GetAttr(m, s_strategy)) == NULL ||
        (v = PyObject_GetAttr(m, s_ambiguous)) == NULL || (amb = PyObject_IsTrue(v)) < 0)
        goto done;
    if (R->small && (hw == Py_None || int32_of(hw, &hw32)) && i >= 0 && i < R->row.len / 4) {
        int32_t *row = (int32_t *)R->row.buf, n32;
        unsigned char how8;
        long long i64 = i;
        long code;
        int kept = 0;
        if (row[i] < 0 && (kept = PyDict_Contains(ctx[R_KEPT], i_o)) < 0)
            goto done;
        if (row[i] < 0 && !kept && col_push(&R->order, &i64) < 0)
            goto done;
        if (R->rows >= INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "place_rows: more rows than an int32 column holds");
            goto done;
        }
        n32 = (int32_t)PyLong_AsLong(PyTuple_GET_ITEM(hit, 0));
        if (n32 == -1 && PyErr_Occurred())
            goto done;
        how = PyObject_GetItem(ctx[R_HOW_OF], strategy);
        if (how == NULL || ((code = PyLong_AsLong(how)) == -1 && PyErr_Occurred()))
            goto done;
        how8 = (unsigned char)(code + (amb ? 8 : 0));
        row[i] = (int32_t)R->rows++;
        if (col_push(&R->node, &n32) < 0 || col_push(&R->replay, &R->replay_col) < 0 ||
            col_push(&R->hw, &hw32) < 0 || col_push(&R->how, &how8) < 0)
            goto done;
    } else {
        PyObject *args[7] = {i_o, key, PyTuple_GET_ITEM(hit, 2), ctx[R_INDEX], strategy, v, hw};
        if (rows_call(R, ctx[R_ADD], args, 7) < 0)
            goto done;
    }
    if (count_in(ctx[R_MATCHED], strategy) < 0)
        goto done;
    R->ambiguous += amb;
    if (PyTuple_GET_ITEM(hit, 1) != Py_None && count_in(ctx[R_ORIGINS], PyTuple_GET_ITEM(hit, 1)) < 0) {
        /* origins.get(origin, 0) + 1: a first origin counts from 0 */
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            goto done;
        PyErr_Clear();
        if (PyObject_SetItem(ctx[R_ORIGINS], PyTuple_GET_ITEM(hit, 1), int_one) < 0)
            goto done;
    }
    rc = 0;
done:
    Py_XDECREF(how);
    Py_XDECREF(v);
    Py_XDECREF(strategy);
    Py_XDECREF(hw);
    Py_XDECREF(a);
    Py_XDECREF(hit);
    Py_XDECREF(key);
    Py_XDECREF(node);
    Py_XDECREF(i_o);
    return rc;
}

/* place_rows(events, context) -> ambiguous: join._place_compact's loop over one replay's events. */
static PyObject *
place_rows(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Rows R;
    PyObject *events, *out = NULL;
    Py_ssize_t n, j, len;
    long replay_col;
    (void)self;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyTuple_CheckExact(argv[1]) ||
        PyTuple_GET_SIZE(argv[1]) != R_SIZE) {
        PyErr_SetString(PyExc_TypeError, "place_rows(events: list, context: tuple)");
        return NULL;
    }
    memset(&R, 0, sizeof R);
    R.ctx = &PyTuple_GET_ITEM(argv[1], 0);
    if (!PyDict_CheckExact(R.ctx[R_MATCHES]) || !PyDict_CheckExact(R.ctx[R_NODES]) || !PyDict_Check(R.ctx[R_KEPT])) {
        PyErr_SetString(PyExc_TypeError, "place_rows: a context of the wrong shape");
        return NULL;
    }
    R.order.item = 8;
    R.node.item = R.replay.item = R.hw.item = 4;
    R.how.item = 1; /* a bytearray: a byte a row */
    replay_col = PyLong_AsLong(R.ctx[R_REPLAY_COL]);
    if (replay_col == -1 && PyErr_Occurred())
        return NULL;
    R.replay_col = (int32_t)replay_col;
    if ((R.small = PyObject_IsTrue(R.ctx[R_SMALL])) < 0 || (len = PyObject_Length(R.ctx[R_NODE])) < 0)
        return NULL;
    R.rows = len;
    if (take_buffer(R.ctx[R_ROW], &R.row, "i", 1) < 0)
        return NULL;
    events = argv[0];
    n = PyList_GET_SIZE(events);
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(events, 0)), event_names, E_SIZE, &R.ev) < 0)
        goto done;
    for (j = 0; j < n; j++)
        if (place_one(&R, PyList_GET_ITEM(events, j)) < 0)
            goto done;
    PyBuffer_Release(&R.row);
    R.row.obj = NULL;
    if (rows_flush(&R) < 0)
        goto done;
    out = PyLong_FromLongLong(R.ambiguous);
done:
    if (R.row.obj != NULL)
        PyBuffer_Release(&R.row);
    PyMem_Free(R.order.v);
    PyMem_Free(R.node.v);
    PyMem_Free(R.replay.v);
    PyMem_Free(R.hw.v);
    PyMem_Free(R.how.v);
    return out;
}

/* lane_keys' context, in join._lane_names' order. */
enum { L_ROW, L_NODE, L_HW, L_NODES, L_EVERY, L_LANE_AND_ARGS, L_SHARED, L_LANES, L_GRAPHS_ON, L_SIZE };

/* lane_keys(events, context): join._lane_names' loop over one replay's events: each event's
 * (device, lane) in first-seen order in ``lanes`` (key -> lane), the graphs on it in ``graphs_on``
 * (key -> set of graph ids). */
static PyObject *
lane_keys(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject **ctx, *events;
    Py_buffer row = {0}, node = {0}, hw = {0};
    Fields ev;
    Py_ssize_t n, j, rows;
    int every;
    PyObject *out = NULL;
    (void)self;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyTuple_CheckExact(argv[1]) ||
        PyTuple_GET_SIZE(argv[1]) != L_SIZE) {
        PyErr_SetString(PyExc_TypeError, "lane_keys(events: list, context: tuple)");
        return NULL;
    }
    ctx = &PyTuple_GET_ITEM(argv[1], 0);
    if (!PyDict_CheckExact(ctx[L_LANES]) || !PyDict_CheckExact(ctx[L_GRAPHS_ON]) || !PyDict_Check(ctx[L_SHARED])) {
        PyErr_SetString(PyExc_TypeError, "lane_keys: a context of the wrong shape");
        return NULL;
    }
    if ((every = PyObject_IsTrue(ctx[L_EVERY])) < 0)
        return NULL;
    if (take_buffer(ctx[L_ROW], &row, "i", 0) < 0)
        return NULL;
    if (take_buffer(ctx[L_NODE], &node, "i", 0) < 0)
        goto done;
    if (take_buffer(ctx[L_HW], &hw, "i", 0) < 0)
        goto done;
    rows = row.len / 4;
    events = argv[0];
    n = PyList_GET_SIZE(events);
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(events, 0)), event_names, E_SIZE, &ev) < 0)
        goto done;
    for (j = 0; j < n; j++) {
        PyObject *e = PyList_GET_ITEM(events, j), *i_o, *lane = NULL, *pa = NULL, *a = NULL, *d = NULL, *key = NULL,
                 *ids = NULL;
        Py_ssize_t i;
        int32_t at;
        int ok = 0, has;
        i_o = get_field(e, &ev, event_names, E_INDEX);
        if (i_o == NULL)
            goto done;
        i = PyLong_AsSsize_t(i_o);
        if (i == -1 && PyErr_Occurred()) {
            Py_DECREF(i_o);
            goto done;
        }
        at = (i >= 0 && i < rows) ? ((const int32_t *)row.buf)[i] : -1;
        if (at < 0) { /* kept whole (or no row): CompactPlacements.lane_and_args */
            PyObject *got = PyObject_CallOneArg(ctx[L_LANE_AND_ARGS], i_o);
            if (got == NULL)
                goto next;
            if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
                Py_DECREF(got);
                PyErr_SetString(PyExc_TypeError, "lane_keys: lane_and_args must answer (lane, args)");
                goto next;
            }
            lane = Py_NewRef(PyTuple_GET_ITEM(got, 0));
            pa = Py_NewRef(PyTuple_GET_ITEM(got, 1));
            Py_DECREF(got);
        } else {
            PyObject *triple;
            if (at >= node.len / 4 || at >= hw.len / 4) {
                PyErr_SetString(PyExc_IndexError, "lane_keys: a placement row beyond its columns");
                goto next;
            }
            triple = PySequence_GetItem(ctx[L_NODES], ((const int32_t *)node.buf)[at]);
            if (triple == NULL)
                goto next;
            if (!PyTuple_Check(triple) || PyTuple_GET_SIZE(triple) != 3) {
                Py_DECREF(triple);
                PyErr_SetString(PyExc_TypeError, "lane_keys: a node must be (lane, args, annotation)");
                goto next;
            }
            lane = Py_NewRef(PyTuple_GET_ITEM(triple, 0));
            pa = Py_NewRef(PyTuple_GET_ITEM(triple, 1));
            Py_DECREF(triple);
            if (!every && ((const int32_t *)hw.buf)[at] != NO_VALUE) {
                Py_SETREF(lane, PyLong_FromLong(((const int32_t *)hw.buf)[at]));
                if (lane == NULL)
                    goto next;
            }
        }
        if ((a = get_field(e, &ev, event_names, E_ARGS)) == NULL || (d = int_arg_or_property(e, a, s_device)) == NULL)
            goto next;
        key = PyTuple_Pack(2, d != Py_None ? d : int_zero, lane);
        if (key == NULL || PyDict_SetDefault(ctx[L_LANES], key, lane) == NULL)
            goto next;
        if (PyDict_CheckExact(pa)) {
            PyObject *gid = PyDict_GetItemWithError(pa, s_graph_id);
            if (gid == NULL && PyErr_Occurred())
                goto next;
            if (gid != NULL)
                ids = PyTuple_Pack(1, gid);
        } else if ((has = PySequence_Contains(pa, s_graph_id)) < 0) {
            goto next;
        } else if (has) {
            PyObject *gid = PyObject_GetItem(pa, s_graph_id);
            if (gid == NULL)
                goto next;
            ids = PyTuple_Pack(1, gid);
            Py_DECREF(gid);
        }
        if (ids == NULL) {
            if (PyErr_Occurred())
                goto next;
            ids = Py_XNewRef(PyDict_GetItemWithError(ctx[L_SHARED], i_o));
            if (ids == NULL && PyErr_Occurred())
                goto next;
            if (ids != NULL && !PyTuple_Check(ids)) {
                Py_SETREF(ids, PySequence_Tuple(ids));
                if (ids == NULL)
                    goto next;
            }
        }
        if (ids != NULL && lane != Py_None && (has = PyObject_IsTrue(ids)) != 0) {
            PyObject *on;
            if (has < 0)
                goto next;
            on = PyDict_GetItemWithError(ctx[L_GRAPHS_ON], key);
            if (on == NULL) {
                if (PyErr_Occurred() || (on = PySet_New(NULL)) == NULL)
                    goto next;
                if (PyDict_SetItem(ctx[L_GRAPHS_ON], key, on) < 0) {
                    Py_DECREF(on);
                    goto next;
                }
                Py_DECREF(on);
            }
            for (has = 0; has < PyTuple_GET_SIZE(ids); has++)
                if (PySet_Add(on, PyTuple_GET_ITEM(ids, has)) < 0)
                    goto next;
        }
        ok = 1;
    next:
        Py_XDECREF(ids);
        Py_XDECREF(key);
        Py_XDECREF(d);
        Py_XDECREF(a);
        Py_XDECREF(pa);
        Py_XDECREF(lane);
        Py_DECREF(i_o);
        if (!ok)
            goto done;
    }
    out = Py_NewRef(Py_None);
done:
    if (row.obj != NULL)
        PyBuffer_Release(&row);
    if (node.obj != NULL)
        PyBuffer_Release(&node);
    if (hw.obj != NULL)
        PyBuffer_Release(&hw);
    return out;
}

enum { W_INTERVALS, W_PER_SCOPE, W_AMBIGUOUS, W_SEEN, W_SIZE };
enum { T_INDEX, T_TS, T_DUR, T_SIZE };
static PyObject *timed_names[T_SIZE];

/* collect_work(timed, matches, per_node, (intervals, per_scope, ambiguous, seen)) -> matched:
 * projection._collect_work's loop over a replay's timed events: each event's (start, end) in
 * intervals and in the list of each scope instance around its node, the ambiguous ones, the node
 * keys matched; how many are matched. */
static PyObject *
collect_work(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *timed, *matches, *per_node, **w;
    Fields ev;
    Py_ssize_t n, j;
    long long matched = 0;
    (void)self;
    if (argc != 4 || !PyList_CheckExact(argv[0]) || !PyDict_Check(argv[1]) || !PyDict_Check(argv[2]) ||
        !PyTuple_CheckExact(argv[3]) || PyTuple_GET_SIZE(argv[3]) != W_SIZE) {
        PyErr_SetString(PyExc_TypeError, "collect_work(timed: list, matches: dict, per_node: dict, work: tuple)");
        return NULL;
    }
    timed = argv[0];
    matches = argv[1];
    per_node = argv[2];
    w = &PyTuple_GET_ITEM(argv[3], 0);
    if (!PyList_CheckExact(w[W_INTERVALS]) || !PyDict_CheckExact(w[W_PER_SCOPE]) || !PyList_CheckExact(w[W_AMBIGUOUS]) ||
        !PySet_Check(w[W_SEEN])) {
        PyErr_SetString(PyExc_TypeError, "collect_work: a work of the wrong shape");
        return NULL;
    }
    n = PyList_GET_SIZE(timed);
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(timed, 0)), timed_names, T_SIZE, &ev) < 0)
        return NULL;
    for (j = 0; j < n; j++) {
        PyObject *e = PyList_GET_ITEM(timed, j), *t0 = NULL, *dur = NULL, *end = NULL, *iv = NULL, *i_o = NULL,
                 *m, *node = NULL, *key = NULL, *amb = NULL, *iids = NULL;
        int ok = 0, truth;
        Py_ssize_t k;
        if ((t0 = get_field(e, &ev, timed_names, T_TS)) == NULL || (dur = get_field(e, &ev, timed_names, T_DUR)) == NULL)
            goto next;
        truth = dur == Py_None ? 0 : PyObject_IsTrue(dur); /* e.dur_ns or 0 */
        if (truth < 0)
            goto next;
        end = PyNumber_Add(t0, truth ? dur : int_zero);
        if (end == NULL || (iv = PyTuple_Pack(2, t0, end)) == NULL || PyList_Append(w[W_INTERVALS], iv) < 0)
            goto next;
        if ((i_o = get_field(e, &ev, timed_names, T_INDEX)) == NULL)
            goto next;
        m = PyDict_GetItemWithError(matches, i_o); /* borrowed */
        if (m == NULL) {
            ok = !PyErr_Occurred();
            goto next;
        }
        matched++;
        if ((node = PyObject_GetAttr(m, s_node)) == NULL || (key = PyObject_GetAttr(node, s_key)) == NULL ||
            PySet_Add(w[W_SEEN], key) < 0 || (amb = PyObject_GetAttr(m, s_ambiguous)) == NULL ||
            (truth = PyObject_IsTrue(amb)) < 0 || (truth && PyList_Append(w[W_AMBIGUOUS], e) < 0))
            goto next;
        iids = Py_XNewRef(PyDict_GetItemWithError(per_node, key));
        if (iids == NULL) {
            ok = !PyErr_Occurred();
            goto next;
        }
        if (!PyTuple_Check(iids)) {
            Py_SETREF(iids, PySequence_Tuple(iids));
            if (iids == NULL)
                goto next;
        }
        for (k = 0; k < PyTuple_GET_SIZE(iids); k++) {
            PyObject *iid = PyTuple_GET_ITEM(iids, k), *lst = PyDict_GetItemWithError(w[W_PER_SCOPE], iid);
            if (lst != NULL) {
                if (PyList_Append(lst, iv) < 0)
                    goto next;
            } else {
                int rc;
                if (PyErr_Occurred() || (lst = PyList_New(1)) == NULL)
                    goto next;
                PyList_SET_ITEM(lst, 0, Py_NewRef(iv));
                rc = PyDict_SetItem(w[W_PER_SCOPE], iid, lst);
                Py_DECREF(lst);
                if (rc < 0)
                    goto next;
            }
        }
        ok = 1;
    next:
        Py_XDECREF(iids);
        Py_XDECREF(amb);
        Py_XDECREF(key);
        Py_XDECREF(node);
        Py_XDECREF(i_o);
        Py_XDECREF(iv);
        Py_XDECREF(end);
        Py_XDECREF(dur);
        Py_XDECREF(t0);
        if (!ok)
            return NULL;
    }
    return PyLong_FromLongLong(matched);
}

/* busy_ns(intervals) -> int: projection.busy_ns for a list of (start, end) tuples of ints within
 * int64 given sorted by start; None for anything else (the Python loop then). */
static PyObject *
busy_ns(PyObject *self, PyObject *arg)
{
    Py_ssize_t n, j;
    long long total = 0, cur_s = 0, cur_e = 0;
    int have = 0;
    (void)self;
    if (!PyList_CheckExact(arg))
        Py_RETURN_NONE;
    n = PyList_GET_SIZE(arg);
    for (j = 0; j < n; j++) {
        PyObject *iv = PyList_GET_ITEM(arg, j);
        long long s, e;
        int o1, o2;
        if (!PyTuple_CheckExact(iv) || PyTuple_GET_SIZE(iv) != 2 || !PyLong_CheckExact(PyTuple_GET_ITEM(iv, 0)) ||
            !PyLong_CheckExact(PyTuple_GET_ITEM(iv, 1)))
            Py_RETURN_NONE;
        s = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(iv, 0), &o1);
        e = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(iv, 1), &o2);
        if (o1 || o2 || ((s == -1 || e == -1) && PyErr_Occurred())) {
            PyErr_Clear();
            Py_RETURN_NONE;
        }
        if (!have || s > cur_e) {
            if (have && __builtin_sub_overflow(cur_e, cur_s, &cur_e))
                Py_RETURN_NONE;
            if (have && __builtin_add_overflow(total, cur_e, &total))
                Py_RETURN_NONE;
            cur_s = s;
            cur_e = e;
            have = 1;
        } else if (e > cur_e) {
            cur_e = e;
        }
    }
    if (have && (__builtin_sub_overflow(cur_e, cur_s, &cur_e) || __builtin_add_overflow(total, cur_e, &total)))
        Py_RETURN_NONE;
    return PyLong_FromLongLong(total);
}

/* The int64 values of a sequence of ints into out (n of them); 0, or 1 where one is not an int
 * within int64 (no error set), or -1 with an exception. */
static int
int64s(PyObject *seq, Py_ssize_t n, long long *out)
{
    PyObject *fast = PySequence_Fast(seq, "a sequence of ints");
    Py_ssize_t j;
    int rc = 0;
    if (fast == NULL)
        return -1;
    if (PySequence_Fast_GET_SIZE(fast) != n) {
        Py_DECREF(fast);
        return 1;
    }
    for (j = 0; j < n && rc == 0; j++) {
        PyObject *v = PySequence_Fast_GET_ITEM(fast, j);
        int overflow;
        if (!PyLong_CheckExact(v)) {
            rc = 1;
            break;
        }
        out[j] = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow || (out[j] == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            rc = 1;
        }
    }
    Py_DECREF(fast);
    return rc;
}

typedef struct {
    const long long *starts, *ends, *index, *rank;
} Times;

/* critical_path's later(a, b): the later-ending position (ties: the earlier start, the lower index). */
static inline Py_ssize_t
later(const Times *t, Py_ssize_t a, Py_ssize_t b)
{
    if (t->ends[a] != t->ends[b])
        return t->ends[a] > t->ends[b] ? a : b;
    if (t->starts[a] != t->starts[b])
        return t->starts[a] < t->starts[b] ? a : b;
    return t->index[a] <= t->index[b] ? a : b;
}

static const Times *sort_times; /* the slack order's keys (qsort has no context argument) */

static int
by_end_rank_desc(const void *x, const void *y)
{
    Py_ssize_t a = *(const Py_ssize_t *)x, b = *(const Py_ssize_t *)y;
    const Times *t = sort_times;
    if (t->ends[a] != t->ends[b])
        return t->ends[a] > t->ends[b] ? -1 : 1;
    if (t->rank[a] != t->rank[b])
        return t->rank[a] > t->rank[b] ? -1 : 1;
    return a < b ? -1 : (a > b); /* sorted(reverse=True) keeps equal keys in their order */
}

/* The path over n items (t: their times, indices and ranks; item i's gating predecessors, those
 * ending no later than it, at gating[gstart[i]..gstart[i + 1])): critical_path.critical_path's
 * computation. The chain's positions last to first, each with its release, in chain and rel
 * (*nchain of them), every item's slack in slack. 0; 1 where the chain does not end (predecessors
 * that loop: Python's loop then); -1 with an exception. */
static int
path_core(const Times *t, Py_ssize_t n, const Py_ssize_t *gstart, const Py_ssize_t *gating, long long start,
          Py_ssize_t *chain, long long *rel, Py_ssize_t *nchain, long long *slack)
{
    Py_ssize_t i, j, k, sink, cur, steps, ng = gstart[n], *order = NULL, *sstart = NULL, *succ = NULL, *fill = NULL;
    long long *release = NULL;
    unsigned char *has_release = NULL;
    int rc = -1;
    sink = 0;
    for (i = 1; i < n; i++)
        sink = later(t, sink, i);
    *nchain = 0;
    for (cur = sink, steps = 0;; steps++) {
        Py_ssize_t p;
        if (steps >= n)
            return 1;
        chain[*nchain] = cur;
        if (gstart[cur] == gstart[cur + 1]) {
            rel[(*nchain)++] = start;
            break;
        }
        p = gating[gstart[cur]];
        for (j = gstart[cur] + 1; j < gstart[cur + 1]; j++)
            p = later(t, p, gating[j]);
        rel[(*nchain)++] = t->ends[p];
        cur = p;
    }
    release = PyMem_Malloc(n * sizeof(long long));
    has_release = PyMem_Calloc(n, 1);
    order = PyMem_Malloc(n * sizeof(Py_ssize_t));
    sstart = PyMem_Calloc(n + 1, sizeof(Py_ssize_t));
    succ = PyMem_Malloc((ng + 1) * sizeof(Py_ssize_t));
    fill = PyMem_Malloc((n + 1) * sizeof(Py_ssize_t));
    if (release == NULL || has_release == NULL || order == NULL || sstart == NULL || succ == NULL || fill == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        for (j = gstart[i]; j < gstart[i + 1]; j++) {
            Py_ssize_t p = gating[j];
            if (!has_release[i] || t->ends[p] > release[i])
                release[i] = t->ends[p];
            has_release[i] = 1;
            sstart[p + 1]++;
        }
    }
    for (i = 0; i < n; i++) /* successors of each item, by item (counting sort: i ascending within each) */
        sstart[i + 1] += sstart[i];
    memcpy(fill, sstart, (n + 1) * sizeof(Py_ssize_t));
    for (i = 0; i < n; i++)
        for (j = gstart[i]; j < gstart[i + 1]; j++)
            succ[fill[gating[j]]++] = i;
    for (i = 0; i < n; i++)
        order[i] = i;
    sort_times = t;
    qsort(order, (size_t)n, sizeof(Py_ssize_t), by_end_rank_desc);
    for (k = 0; k < n; k++) {
        Py_ssize_t x = order[k];
        if (sstart[x] == sstart[x + 1]) {
            slack[x] = t->ends[sink] - t->ends[x];
        } else {
            long long best = 0;
            for (j = sstart[x]; j < sstart[x + 1]; j++) {
                Py_ssize_t y = succ[j];
                long long v = release[y] - t->ends[x] + slack[y];
                if (j == sstart[x] || v < best)
                    best = v;
            }
            slack[x] = best;
        }
    }
    rc = 0;
done:
    PyMem_Free(release);
    PyMem_Free(has_release);
    PyMem_Free(order);
    PyMem_Free(sstart);
    PyMem_Free(succ);
    PyMem_Free(fill);
    return rc;
}

/* path_and_slack(starts, ends, indices, preds, rank, start) -> (chain, releases, slack):
 * critical_path.critical_path's computation over n items given as int lists (preds: per item a
 * tuple of positions of its predecessors): the path's positions first to last with each one's
 * release, and every item's slack in ns. None where an input is not ints within int64 or the
 * chain does not end (Python's loop then). */
static PyObject *
path_and_slack(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Py_ssize_t n, i, j, k, *gstart = NULL, *gating = NULL, ng = 0, *chain = NULL, nchain = 0;
    long long *buf = NULL, start, *slack = NULL, *rel = NULL;
    PyObject *preds, *out = NULL, *fast = NULL;
    Times t;
    int rc;
    (void)self;
    if (argc != 6 || !PyList_CheckExact(argv[0])) {
        PyErr_SetString(PyExc_TypeError, "path_and_slack(starts, ends, indices, preds, rank, start)");
        return NULL;
    }
    n = PyList_GET_SIZE(argv[0]);
    if (n == 0 || !PyLong_CheckExact(argv[5]))
        Py_RETURN_NONE;
    start = PyLong_AsLongLong(argv[5]);
    if (start == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    buf = PyMem_Malloc(4 * n * sizeof(long long));
    if (buf == NULL)
        return PyErr_NoMemory();
    t.starts = buf;
    t.ends = buf + n;
    t.index = buf + 2 * n;
    t.rank = buf + 3 * n;
    for (k = 0; k < 4; k++) {
        rc = int64s(argv[k == 3 ? 4 : k], n, buf + k * n);
        if (rc != 0) {
            PyMem_Free(buf);
            if (rc < 0)
                return NULL;
            Py_RETURN_NONE;
        }
    }
    preds = argv[3];
    fast = PySequence_Fast(preds, "preds");
    if (fast == NULL || PySequence_Fast_GET_SIZE(fast) != n)
        goto python;
    gstart = PyMem_Malloc((n + 1) * sizeof(Py_ssize_t));
    if (gstart == NULL)
        goto nomem;
    for (i = 0; i < n; i++) { /* gating predecessors: those ending no later than the item, in order */
        PyObject *pi = PySequence_Fast_GET_ITEM(fast, i);
        Py_ssize_t m;
        if (!PyTuple_CheckExact(pi))
            goto python;
        m = PyTuple_GET_SIZE(pi);
        if (PyMem_Resize(gating, Py_ssize_t, ng + m + 1) == NULL)
            goto nomem;
        gstart[i] = ng;
        for (j = 0; j < m; j++) {
            PyObject *po = PyTuple_GET_ITEM(pi, j);
            Py_ssize_t p;
            if (!PyLong_CheckExact(po))
                goto python;
            p = PyLong_AsSsize_t(po);
            if (p < 0 || p >= n) {
                PyErr_Clear();
                goto python;
            }
            if (t.ends[p] <= t.ends[i])
                gating[ng++] = p;
        }
    }
    gstart[n] = ng;
    chain = PyMem_Malloc(n * sizeof(Py_ssize_t));
    rel = PyMem_Malloc(n * sizeof(long long));
    slack = PyMem_Malloc(n * sizeof(long long));
    if (chain == NULL || rel == NULL || slack == NULL)
        goto nomem;
    rc = path_core(&t, n, gstart, gating, start, chain, rel, &nchain, slack);
    if (rc < 0)
        goto done;
    if (rc > 0)
        goto python;
    {
        PyObject *c = PyList_New(nchain), *r = PyList_New(nchain), *sl = PyList_New(n);
        if (c == NULL || r == NULL || sl == NULL) {
            Py_XDECREF(c);
            Py_XDECREF(r);
            Py_XDECREF(sl);
            goto done;
        }
        for (k = 0; k < nchain; k++) { /* first to last */
            PyObject *a = PyLong_FromSsize_t(chain[nchain - 1 - k]), *b = PyLong_FromLongLong(rel[nchain - 1 - k]);
            if (a == NULL || b == NULL) {
                Py_XDECREF(a);
                Py_XDECREF(b);
                Py_DECREF(c);
                Py_DECREF(r);
                Py_DECREF(sl);
                goto done;
            }
            PyList_SET_ITEM(c, k, a);
            PyList_SET_ITEM(r, k, b);
        }
        for (i = 0; i < n; i++) {
            PyObject *v = PyLong_FromLongLong(slack[i]);
            if (v == NULL) {
                Py_DECREF(c);
                Py_DECREF(r);
                Py_DECREF(sl);
                goto done;
            }
            PyList_SET_ITEM(sl, i, v);
        }
        out = PyTuple_Pack(3, c, r, sl);
        Py_DECREF(c);
        Py_DECREF(r);
        Py_DECREF(sl);
    }
    goto done;
nomem:
    PyErr_NoMemory();
    goto done;
python:
    if (!PyErr_Occurred())
        out = Py_NewRef(Py_None);
done:
    Py_XDECREF(fast);
    PyMem_Free(buf);
    PyMem_Free(gstart);
    PyMem_Free(gating);
    PyMem_Free(chain);
    PyMem_Free(rel);
    PyMem_Free(slack);
    return out;
}

enum { RP_PYTHON = 1, RP_AMBIGUOUS = 2 };

/* replay_path's first loop, one event: its index, times and node's local id (a new reference in
 * *local) as critical_path.annotate_replays makes its Item. 0; RP_AMBIGUOUS (no match, a guess,
 * no time, no node); RP_PYTHON (a value of another type); -1 with an exception. */
static int
path_item(PyObject *e, const Fields *ev, PyObject *matches, long long *index, long long *ts, long long *end,
          PyObject **local)
{
    PyObject *i_o, *m, *v = NULL, *node = NULL;
    long long dur = 0, key;
    int rc = RP_PYTHON, truth;
    if ((i_o = get_field(e, ev, timed_names, T_INDEX)) == NULL)
        return -1;
    m = PyDict_GetItemWithError(matches, i_o); /* borrowed: matches holds it */
    if (m == NULL) {
        rc = PyErr_Occurred() ? -1 : RP_AMBIGUOUS;
        goto done;
    }
    if (!int64_of(i_o, index))
        goto done;
    if ((v = PyObject_GetAttr(m, s_ambiguous)) == NULL || (truth = PyObject_IsTrue(v)) < 0) {
        rc = -1;
        goto done;
    }
    Py_CLEAR(v);
    if (truth) {
        rc = RP_AMBIGUOUS;
        goto done;
    }
    if ((v = get_field(e, ev, timed_names, T_TS)) == NULL) {
        rc = -1;
        goto done;
    }
    if (v == Py_None) {
        rc = RP_AMBIGUOUS;
        goto done;
    }
    if (!int64_of(v, ts))
        goto done;
    Py_CLEAR(v);
    if ((v = get_field(e, ev, timed_names, T_DUR)) == NULL) {
        rc = -1;
        goto done;
    }
    if (v != Py_None && !int64_of(v, &dur))
        goto done;
    if (__builtin_add_overflow(*ts, dur, end))
        goto done;
    Py_CLEAR(v);
    if ((node = PyObject_GetAttr(m, s_node)) == NULL || (v = PyObject_GetAttr(node, s_key)) == NULL) {
        rc = -1;
        goto done;
    }
    if (!int64_of(v, &key) || key < 0) /* NodeRecord.local_id: the key's low 32 bits */
        goto done;
    if ((*local = PyLong_FromLongLong(key & 0xFFFFFFFFLL)) == NULL) {
        rc = -1;
        goto done;
    }
    rc = 0;
done:
    Py_DECREF(i_o);
    Py_XDECREF(v);
    Py_XDECREF(node);
    return rc;
}

/* replay_path(events, matches, work_preds, rank, start_ns) -> (indices, values, nodes) | False | None:
 * critical_path.annotate_replays' work on one replay with recorded edges, for edges_path: each
 * event's item (critical_path.Item: its match's node, not ambiguous, a time), the predecessors
 * among them, the path and every slack. indices: the events' trace indices in order, values: -1
 * on the path, else the slack in ns, nodes: their nodes' local ids (int64 bytes each). False:
 * the replay's events cannot be told apart (annotate_replays' ambiguous: a missing or ambiguous
 * match, an untimed event, a node missing, seen twice or not GPU work of the graph). None:
 * Python's loop (another type, a chain that does not end). */
static PyObject *
replay_path(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *events, *matches, *wp, *rankd, *pos = NULL, **local = NULL, *out = NULL;
    Py_ssize_t n, j, k, *gstart = NULL, *gating = NULL, ng = 0, *chain = NULL, nchain = 0;
    long long *buf = NULL, *slack = NULL, *rel = NULL, start;
    Fields ev;
    Times t;
    int rc = RP_PYTHON;
    (void)self;
    if (argc != 5) {
        PyErr_SetString(PyExc_TypeError, "replay_path(events, matches, work_preds, rank, start_ns)");
        return NULL;
    }
    events = argv[0];
    matches = argv[1];
    wp = argv[2];
    rankd = argv[3];
    if (!PyList_CheckExact(events) || !PyDict_CheckExact(matches) || !PyDict_CheckExact(wp) ||
        !PyDict_CheckExact(rankd) || (argv[4] != Py_None && !PyLong_CheckExact(argv[4])))
        Py_RETURN_NONE;
    n = PyList_GET_SIZE(events);
    if (n == 0)
        Py_RETURN_FALSE;
    buf = PyMem_Malloc(4 * n * sizeof(long long));
    local = PyMem_Calloc(n, sizeof(PyObject *));
    gstart = PyMem_Malloc((n + 1) * sizeof(Py_ssize_t));
    if (buf == NULL || local == NULL || gstart == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    t.starts = buf;
    t.ends = buf + n;
    t.index = buf + 2 * n;
    t.rank = buf + 3 * n;
    if (fields_of(Py_TYPE(PyList_GET_ITEM(events, 0)), timed_names, T_SIZE, &ev) < 0)
        goto done;
    for (j = 0; j < n; j++) { /* annotate_replays' items */
        rc = path_item(PyList_GET_ITEM(events, j), &ev, matches, buf + 2 * n + j, buf + j, buf + n + j, &local[j]);
        if (rc != 0)
            goto done;
    }
    rc = -1;
    if ((pos = PyDict_New()) == NULL)
        goto done;
    for (j = 0; j < n; j++) { /* edges_path's checks: each node once, GPU work of the graph */
        PyObject *pj, *r;
        int seen = PyDict_Contains(pos, local[j]), work;
        if (seen < 0 || (!seen && (work = PyDict_Contains(wp, local[j])) < 0))
            goto done;
        if (seen || !work) {
            rc = RP_AMBIGUOUS;
            goto done;
        }
        if ((pj = PyLong_FromSsize_t(j)) == NULL)
            goto done;
        k = PyDict_SetItem(pos, local[j], pj);
        Py_DECREF(pj);
        if (k < 0)
            goto done;
        r = PyDict_GetItemWithError(rankd, local[j]);
        if (r == NULL && PyErr_Occurred())
            goto done;
        if (r == NULL || !int64_of(r, buf + 3 * n + j)) {
            rc = RP_PYTHON;
            goto done;
        }
    }
    for (j = 0; j < n; j++) { /* each item's gating predecessors, in the order the graph gives them */
        PyObject *preds = PyDict_GetItemWithError(wp, local[j]);
        Py_ssize_t m, q;
        if (preds == NULL || !PyTuple_CheckExact(preds)) {
            rc = PyErr_Occurred() ? -1 : RP_PYTHON;
            goto done;
        }
        m = PyTuple_GET_SIZE(preds);
        if (PyMem_Resize(gating, Py_ssize_t, ng + m + 1) == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        gstart[j] = ng;
        for (q = 0; q < m; q++) {
            PyObject *po = PyDict_GetItemWithError(pos, PyTuple_GET_ITEM(preds, q));
            Py_ssize_t p;
            if (po == NULL) {
                if (PyErr_Occurred())
                    goto done;
                continue;
            }
            p = PyLong_AsSsize_t(po);
            if (t.ends[p] <= t.ends[j])
                gating[ng++] = p;
        }
    }
    gstart[n] = ng;
    if (argv[4] == Py_None) {
        start = t.starts[0];
        for (j = 1; j < n; j++)
            if (t.starts[j] < start)
                start = t.starts[j];
    } else if (!int64_of(argv[4], &start)) {
        rc = RP_PYTHON;
        goto done;
    }
    chain = PyMem_Malloc(n * sizeof(Py_ssize_t));
    rel = PyMem_Malloc(n * sizeof(long long));
    slack = PyMem_Malloc(n * sizeof(long long));
    if (chain == NULL || rel == NULL || slack == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    rc = path_core(&t, n, gstart, gating, start, chain, rel, &nchain, slack);
    if (rc != 0)
        goto done;
    for (k = 0; k < nchain; k++)
        slack[chain[k]] = -1;
    for (j = 0; j < n; j++) /* the nodes' local ids, over the starts no longer needed */
        buf[j] = PyLong_AsLongLong(local[j]);
    {
        PyObject *a = PyBytes_FromStringAndSize((const char *)t.index, n * sizeof(long long));
        PyObject *b = a == NULL ? NULL : PyBytes_FromStringAndSize((const char *)slack, n * sizeof(long long));
        PyObject *c = b == NULL ? NULL : PyBytes_FromStringAndSize((const char *)buf, n * sizeof(long long));
        if (c != NULL)
            out = PyTuple_Pack(3, a, b, c);
        Py_XDECREF(a);
        Py_XDECREF(b);
        Py_XDECREF(c);
    }
done:
    if (out == NULL && !PyErr_Occurred()) {
        if (rc == RP_AMBIGUOUS)
            out = Py_NewRef(Py_False);
        else if (rc != -1)
            out = Py_NewRef(Py_None);
    }
    if (local != NULL)
        for (j = 0; j < n; j++)
            Py_XDECREF(local[j]);
    Py_XDECREF(pos);
    PyMem_Free(local);
    PyMem_Free(buf);
    PyMem_Free(gstart);
    PyMem_Free(gating);
    PyMem_Free(chain);
    PyMem_Free(rel);
    PyMem_Free(slack);
    return out;
}

/* A list of three exact ints as a tuple (a new reference), else NULL with no exception. */
static PyObject *
dim3_fast(PyObject *v)
{
    if (!PyList_CheckExact(v) || PyList_GET_SIZE(v) != 3 || !PyLong_CheckExact(PyList_GET_ITEM(v, 0)) ||
        !PyLong_CheckExact(PyList_GET_ITEM(v, 1)) || !PyLong_CheckExact(PyList_GET_ITEM(v, 2)))
        return NULL;
    return PyTuple_Pack(3, PyList_GET_ITEM(v, 0), PyList_GET_ITEM(v, 1), PyList_GET_ITEM(v, 2));
}

enum { S_SIGS, S_TYPES, S_SHARED, S_TYPE_OF, S_BASE_NAME, S_DIM3, S_SIZE };
enum { G_INDEX, G_CAT, G_NAME, G_ARGS, G_SIZE };
static PyObject *sig_names[G_SIZE], *s_grid, *s_block, *s_kernel;

/* One signature made in a loose_signatures call, by the objects it was made from. */
typedef struct {
    PyObject *cat, *name, *args; /* borrowed: the events hold them for the call */
    PyObject *sig;               /* borrowed: shared and sigs hold it */
} SigMemo;

static inline size_t
sig_slot(PyObject *cat, PyObject *name, PyObject *args, size_t mask)
{
    uint64_t h = (uint64_t)(uintptr_t)cat * 0x9E3779B97F4A7C15ull;
    h ^= ((uint64_t)(uintptr_t)name >> 4) * 0xC2B2AE3D27D4EB4Full;
    h ^= ((uint64_t)(uintptr_t)args >> 4) * 0x165667B19E3779F9ull;
    return (size_t)(h ^ (h >> 29)) & mask;
}

/* loose_signatures(events, (sigs, types, shared, type_of, base_name, dim3)): match.replay_signatures'
 * loop over a replay's events (match._loose): sigs[e.index] = shared.setdefault(sig, sig) with sig
 * (node type, base name of a kernel, grid, block); a category met first goes to type_of(e), a grid
 * or block other than three ints to dim3(e, key). The events of a two-pass read share their cat,
 * name and args objects across a replay's repeats of one kernel: a signature is made once per
 * (cat, name, args) objects (match._memo_signatures' rule, by identity), found again by them. */
static PyObject *
loose_signatures(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject **ctx;
    Fields ev;
    Py_ssize_t n, j;
    SigMemo *memo = NULL;
    size_t mask = 0;
    (void)self;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyTuple_CheckExact(argv[1]) ||
        PyTuple_GET_SIZE(argv[1]) != S_SIZE) {
        PyErr_SetString(PyExc_TypeError, "loose_signatures(events: list, context: tuple)");
        return NULL;
    }
    ctx = &PyTuple_GET_ITEM(argv[1], 0);
    if (!PyDict_CheckExact(ctx[S_SIGS]) || !PyDict_CheckExact(ctx[S_TYPES]) || !PyDict_CheckExact(ctx[S_SHARED])) {
        PyErr_SetString(PyExc_TypeError, "loose_signatures: a context of the wrong shape");
        return NULL;
    }
    n = PyList_GET_SIZE(argv[0]);
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(argv[0], 0)), sig_names, G_SIZE, &ev) < 0)
        return NULL;
    if (n > 0) {
        size_t cap = 16;
        while (cap < (size_t)n * 2)
            cap <<= 1;
        if ((memo = PyMem_Calloc(cap, sizeof(SigMemo))) == NULL)
            return PyErr_NoMemory();
        mask = cap - 1;
    }
    for (j = 0; j < n; j++) {
        PyObject *e = PyList_GET_ITEM(argv[0], j), *cat = NULL, *t = NULL, *a = NULL, *dims[2] = {NULL, NULL},
                 *name = NULL, *sig = NULL, *i_o = NULL, *kept, *raw = NULL;
        SigMemo *m = NULL;
        int ok = 0, k, kernel;
        if ((cat = get_field(e, &ev, sig_names, G_CAT)) == NULL ||
            (raw = get_field(e, &ev, sig_names, G_NAME)) == NULL || (a = get_field(e, &ev, sig_names, G_ARGS)) == NULL)
            goto next;
        for (m = &memo[sig_slot(cat, raw, a, mask)]; m->sig != NULL; m = m == &memo[mask] ? memo : m + 1)
            if (m->cat == cat && m->name == raw && m->args == a)
                break;
        if (m->sig != NULL) {
            if ((i_o = get_field(e, &ev, sig_names, G_INDEX)) == NULL || PyDict_SetItem(ctx[S_SIGS], i_o, m->sig) < 0)
                goto next;
            ok = 1;
            goto next;
        }
        t = Py_XNewRef(PyDict_GetItemWithError(ctx[S_TYPES], cat));
        if (t == NULL) {
            if (PyErr_Occurred() || (t = PyObject_CallOneArg(ctx[S_TYPE_OF], e)) == NULL ||
                PyDict_SetItem(ctx[S_TYPES], cat, t) < 0)
                goto next;
        }
        for (k = 0; k < 2; k++) {
            PyObject *key = k == 0 ? s_grid : s_block, *v = arg_of(a, key);
            if (v == NULL)
                goto next;
            dims[k] = dim3_fast(v);
            Py_DECREF(v);
            if (dims[k] == NULL) {
                if (PyErr_Occurred() || (dims[k] = PyObject_CallFunctionObjArgs(ctx[S_DIM3], e, key, NULL)) == NULL)
                    goto next;
            }
        }
        kernel = PyObject_RichCompareBool(t, s_kernel, Py_EQ);
        if (kernel < 0)
            goto next;
        if (kernel) {
            if ((name = PyObject_CallOneArg(ctx[S_BASE_NAME], raw)) == NULL)
                goto next;
        } else {
            name = Py_NewRef(Py_None);
        }
        if ((sig = PyTuple_Pack(4, t, name, dims[0], dims[1])) == NULL ||
            (kept = PyDict_SetDefault(ctx[S_SHARED], sig, sig)) == NULL ||
            (i_o = get_field(e, &ev, sig_names, G_INDEX)) == NULL || PyDict_SetItem(ctx[S_SIGS], i_o, kept) < 0)
            goto next;
        m->cat = cat;
        m->name = raw;
        m->args = a;
        m->sig = kept;
        ok = 1;
    next:
        Py_XDECREF(i_o);
        Py_XDECREF(sig);
        Py_XDECREF(name);
        Py_XDECREF(raw);
        Py_XDECREF(dims[0]);
        Py_XDECREF(dims[1]);
        Py_XDECREF(a);
        Py_XDECREF(t);
        Py_XDECREF(cat);
        if (!ok) {
            PyMem_Free(memo);
            return NULL;
        }
    }
    PyMem_Free(memo);
    Py_RETURN_NONE;
}

enum { K_PH, K_NAME, K_CAT, K_ARGS, K_SIZE };
static PyObject *work_names[K_SIZE], *s_correlation, *s_graph_node_id;

/* set_path_rows(path, row, indices, values, on_path, start) -> stop: CompactPlacements.set_paths' loop
 * over int64 arrays from position ``start``: path[row[i]] = v for each (i, v) in order whose row is
 * one (row[i] >= 0, within path) and whose v is on_path (-1) or a slack (>= 0); it stops at the first
 * other one and returns its position (set_path's, then the loop again after it), n at the end. */
static PyObject *
set_path_rows(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Py_buffer b[4] = {{0}};
    static const char *formats[4] = {"q", "i", "q", "q"};
    long long on_path, start;
    Py_ssize_t n = 0, k = 0, rows, paths, j;
    PyObject *out = NULL;
    (void)self;
    if (argc != 6 || !int64_of(argv[4], &on_path) || !int64_of(argv[5], &start)) {
        PyErr_SetString(PyExc_TypeError, "set_path_rows(path, row, indices, values, on_path: int, start: int)");
        return NULL;
    }
    for (j = 0; j < 4; j++)
        if (take_buffer(argv[j], &b[j], formats[j], j == 0) < 0 || b[j].obj == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "set_path_rows: arrays expected");
            goto done;
        }
    n = b[2].len / 8;
    if (b[3].len / 8 != n || start < 0) {
        PyErr_SetString(PyExc_ValueError, "set_path_rows: indices and values of other lengths");
        goto done;
    }
    paths = b[0].len / 8;
    rows = b[1].len / 4;
    for (k = (Py_ssize_t)start; k < n; k++) {
        long long i = ((const long long *)b[2].buf)[k], v = ((const long long *)b[3].buf)[k];
        int32_t r = i >= 0 && i < rows ? ((const int32_t *)b[1].buf)[i] : -1;
        if (r < 0 || r >= paths || v < on_path)
            break;
        ((long long *)b[0].buf)[r] = v;
    }
    out = PyLong_FromSsize_t(k);
done:
    for (j = 0; j < 4; j++)
        if (b[j].obj != NULL)
            PyBuffer_Release(&b[j]);
    return out;
}

/* in_start_order(events) -> bool: whether ``events`` are already in replays._by_start's order, by
 * (ts_ns, index) with every time and index an int of 64 bits; False where an event has no time or
 * another one (the sort decides). A graph replay's events, grouped in file order, mostly are. */
static PyObject *
in_start_order(PyObject *self, PyObject *events)
{
    Fields ev;
    Py_ssize_t n, j;
    long long ts0 = 0, i0 = 0;
    (void)self;
    if (!PyList_CheckExact(events)) {
        PyErr_SetString(PyExc_TypeError, "in_start_order(events: list)");
        return NULL;
    }
    n = PyList_GET_SIZE(events);
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(events, 0)), timed_names, T_SIZE, &ev) < 0)
        return NULL;
    for (j = 0; j < n; j++) {
        PyObject *e = PyList_GET_ITEM(events, j), *ts, *i_o;
        long long t, i;
        int ok;
        if ((ts = get_field(e, &ev, timed_names, T_TS)) == NULL)
            return NULL;
        if ((i_o = get_field(e, &ev, timed_names, T_INDEX)) == NULL) {
            Py_DECREF(ts);
            return NULL;
        }
        ok = int64_of(ts, &t) && int64_of(i_o, &i);
        Py_DECREF(ts);
        Py_DECREF(i_o);
        if (!ok || (j > 0 && (t < ts0 || (t == ts0 && i < i0))))
            Py_RETURN_FALSE;
        ts0 = t;
        i0 = i;
    }
    Py_RETURN_TRUE;
}

/* group_work(events, (launch_names, is_work, gpu_work_of, launches, work, graph_ids, every_launch))
 * -> total: replays.gpu_work_and_replays' pass over a trace's events: graph launches by
 * correlation (the first of each), GPU work grouped by correlation in file order, the correlations
 * with graph ids; every graph launch in file order appended to every_launch (None: not asked); the
 * number of GPU work events. A category met first goes to gpu_work_of(e) (kept in is_work). */
static PyObject *
group_work(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject **ctx;
    Fields ev;
    Py_ssize_t n, j;
    long long total = 0;
    (void)self;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyTuple_CheckExact(argv[1]) || PyTuple_GET_SIZE(argv[1]) != 7) {
        PyErr_SetString(PyExc_TypeError, "group_work(events: list, context: tuple)");
        return NULL;
    }
    ctx = &PyTuple_GET_ITEM(argv[1], 0);
    if (!PyDict_CheckExact(ctx[1]) || !PyDict_CheckExact(ctx[3]) || !PyDict_CheckExact(ctx[4]) ||
        !PySet_Check(ctx[5]) ||
        (ctx[6] != Py_None && !PyList_CheckExact(ctx[6]))) {
        PyErr_SetString(PyExc_TypeError, "group_work: a context of the wrong shape");
        return NULL;
    }
    n = PyList_GET_SIZE(argv[0]);
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(argv[0], 0)), work_names, K_SIZE, &ev) < 0)
        return NULL;
    for (j = 0; j < n; j++) {
        PyObject *e = PyList_GET_ITEM(argv[0], j), *ph = NULL, *name = NULL, *cat = NULL, *w = NULL, *a = NULL,
                 *c = NULL;
        int ok = 0, truth;
        if ((ph = get_field(e, &ev, work_names, K_PH)) == NULL)
            goto next;
        if (!is_char(ph, 'X')) { /* both a launch and GPU work are complete events */
            ok = 1;
            goto next;
        }
        if ((name = get_field(e, &ev, work_names, K_NAME)) == NULL || (truth = PySequence_Contains(ctx[0], name)) < 0)
            goto next;
        if (truth) { /* a graph launch: the first of its correlation */
            PyObject *lc;
            if (ctx[6] != Py_None && PyList_Append(ctx[6], e) < 0)
                goto next;
            if ((lc = PyObject_GetAttr(e, s_correlation)) == NULL)
                goto next;
            if (lc != Py_None && PyDict_SetDefault(ctx[3], lc, e) == NULL) {
                Py_DECREF(lc);
                goto next;
            }
            Py_DECREF(lc);
        }
        if ((cat = get_field(e, &ev, work_names, K_CAT)) == NULL)
            goto next;
        w = Py_XNewRef(PyDict_GetItemWithError(ctx[1], cat));
        if (w == NULL) {
            if (PyErr_Occurred() || (w = PyObject_CallOneArg(ctx[2], e)) == NULL || PyDict_SetItem(ctx[1], cat, w) < 0)
                goto next;
        }
        if ((truth = PyObject_IsTrue(w)) <= 0) {
            ok = truth == 0;
            goto next;
        }
        total++;
        if ((a = get_field(e, &ev, work_names, K_ARGS)) == NULL || (c = arg_of(a, s_correlation)) == NULL)
            goto next;
        if (!PyLong_CheckExact(c)) {
            Py_SETREF(c, PyObject_GetAttr(e, s_correlation));
            if (c == NULL)
                goto next;
            if (c == Py_None) {
                ok = 1;
                goto next;
            }
        }
        {
            PyObject *lst = PyDict_GetItemWithError(ctx[4], c);
            int has;
            if (lst == NULL) {
                if (PyErr_Occurred() || (lst = PyList_New(0)) == NULL)
                    goto next;
                if (PyDict_SetItem(ctx[4], c, lst) < 0) {
                    Py_DECREF(lst);
                    goto next;
                }
                Py_DECREF(lst);
            }
            if (PyList_Append(lst, e) < 0)
                goto next;
            has = PySequence_Contains(a, s_graph_node_id);
            if (has == 0)
                has = PySequence_Contains(a, s_graph_id);
            if (has < 0 || (has && PySet_Add(ctx[5], c) < 0))
                goto next;
        }
        ok = 1;
    next:
        Py_XDECREF(c);
        Py_XDECREF(a);
        Py_XDECREF(w);
        Py_XDECREF(cat);
        Py_XDECREF(name);
        Py_XDECREF(ph);
        if (!ok)
            return NULL;
    }
    return PyLong_FromLongLong(total);
}

/* One event's place on its stream, for calibrated_rows. */
typedef struct {
    PyObject *index; /* a new reference */
    long long stream, ordinal;
} Place;

/* calibrated_rows(events, kernels_only, table, expected, pending, signatures, compatible) -> found:
 * calibrated.match_calibrated's match_graph over one replay: each event's (stream, ordinal on it)
 * as Replay.ordinals counts them (kernels alone where kernels_only), the streams whose count is
 * the calibration's (expected) trusted, and each pending event of a trusted stream whose place is
 * in the table, with a signature equal or compatible (compatible(sig, node's)) to the node's,
 * found[index] = the table's match. None where an input is of another type (Python's loop). */
static PyObject *
calibrated_rows(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *events, *table, *expected, *pending, *sigs, *compatible, *found = NULL;
    Place *places = NULL;
    long long *streams = NULL, *counts = NULL;
    unsigned char *trusted = NULL;
    Py_ssize_t n, j, np = 0, ns = 0, q;
    int kernels_only, python = 0;
    Fields ev;
    (void)self;
    if (argc != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "calibrated_rows(events, kernels_only, table, expected, pending, signatures, compatible)");
        return NULL;
    }
    events = argv[0];
    table = argv[2];
    expected = argv[3];
    pending = argv[4];
    sigs = argv[5];
    compatible = argv[6];
    if (!PyList_CheckExact(events) || !PyDict_CheckExact(table) || !PyDict_Check(expected) ||
        !PyAnySet_CheckExact(pending) || !PyDict_CheckExact(sigs))
        Py_RETURN_NONE;
    if ((kernels_only = PyObject_IsTrue(argv[1])) < 0)
        return NULL;
    n = PyList_GET_SIZE(events);
    places = PyMem_Calloc(n + 1, sizeof(Place));
    streams = PyMem_Malloc((n + 1) * sizeof(long long));
    counts = PyMem_Calloc(n + 1, sizeof(long long));
    if (places == NULL || streams == NULL || counts == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(events, 0)), work_names, K_SIZE, &ev) < 0)
        goto done;
    for (j = 0; j < n; j++) { /* Replay.ordinals */
        PyObject *e = PyList_GET_ITEM(events, j), *a, *s;
        long long sv;
        if (kernels_only) {
            PyObject *cat = get_field(e, &ev, work_names, K_CAT);
            int is_kernel;
            if (cat == NULL)
                goto done;
            is_kernel = PyUnicode_Check(cat) && PyUnicode_CompareWithASCIIString(cat, "kernel") == 0;
            Py_DECREF(cat);
            if (!is_kernel) {
                PyObject *c = PyObject_GetAttr(e, s_category);
                if (c == NULL)
                    goto done;
                is_kernel = PyUnicode_Check(c) && PyUnicode_CompareWithASCIIString(c, "kernel") == 0;
                Py_DECREF(c);
                if (!is_kernel)
                    continue;
            }
        }
        if ((a = get_field(e, &ev, work_names, K_ARGS)) == NULL)
            goto done;
        s = arg_of(a, s_stream);
        Py_DECREF(a);
        if (s == NULL)
            goto done;
        if (!PyLong_CheckExact(s)) { /* else the property's rule (a bool, the tid) */
            Py_SETREF(s, PyObject_GetAttr(e, s_stream));
            if (s == NULL)
                goto done;
            if (s == Py_None) {
                Py_DECREF(s);
                continue;
            }
        }
        if (!PyLong_CheckExact(s) || !int64_of(s, &sv)) {
            Py_DECREF(s);
            python = 1;
            goto done;
        }
        Py_DECREF(s);
        for (q = 0; q < ns && streams[q] != sv; q++)
            ;
        if (q == ns)
            streams[ns++] = sv;
        places[np].stream = q;
        places[np].ordinal = counts[q]++;
        if ((places[np].index = PyObject_GetAttr(e, timed_names[T_INDEX])) == NULL)
            goto done;
        np++;
    }
    if ((trusted = PyMem_Calloc(ns + 1, 1)) == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (q = 0; q < ns; q++) { /* the streams counted as the calibration did */
        PyObject *key = PyLong_FromLongLong(streams[q]), *want;
        long long w;
        if (key == NULL)
            goto done;
        want = PyDict_GetItemWithError(expected, key);
        Py_DECREF(key);
        if (want == NULL && PyErr_Occurred())
            goto done;
        if (want != NULL) {
            if (!PyLong_CheckExact(want) || !int64_of(want, &w)) {
                python = 1;
                goto done;
            }
            trusted[q] = w == counts[q];
        }
    }
    if ((found = PyDict_New()) == NULL)
        goto done;
    for (j = 0; j < np; j++) {
        Place *p = &places[j];
        PyObject *pos, *hit, *sig;
        int in, same;
        if (!trusted[p->stream])
            continue;
        if ((in = PySet_Contains(pending, p->index)) < 0)
            goto fail;
        if (!in)
            continue;
        pos = Py_BuildValue("(LL)", streams[p->stream], p->ordinal);
        if (pos == NULL)
            goto fail;
        hit = PyDict_GetItemWithError(table, pos);
        Py_DECREF(pos);
        if (hit == NULL) {
            if (PyErr_Occurred())
                goto fail;
            continue;
        }
        if (!PyTuple_CheckExact(hit) || PyTuple_GET_SIZE(hit) != 3) {
            python = 1;
            goto fail;
        }
        sig = PyDict_GetItemWithError(sigs, p->index);
        if (sig == NULL) {
            if (!PyErr_Occurred())
                python = 1;
            goto fail;
        }
        if ((same = PyObject_RichCompareBool(sig, PyTuple_GET_ITEM(hit, 1), Py_EQ)) < 0)
            goto fail;
        if (!same) {
            PyObject *r = PyObject_CallFunctionObjArgs(compatible, sig, PyTuple_GET_ITEM(hit, 1), NULL);
            if (r == NULL || (same = PyObject_IsTrue(r)) < 0) {
                Py_XDECREF(r);
                goto fail;
            }
            Py_DECREF(r);
        }
        if (same && PyDict_SetItem(found, p->index, PyTuple_GET_ITEM(hit, 2)) < 0)
            goto fail;
    }
    goto done;
fail:
    Py_CLEAR(found);
done:
    if (places != NULL)
        for (j = 0; j < np; j++)
            Py_XDECREF(places[j].index);
    PyMem_Free(places);
    PyMem_Free(streams);
    PyMem_Free(counts);
    PyMem_Free(trusted);
    if (found == NULL && python && !PyErr_Occurred())
        Py_RETURN_NONE;
    return found;
}

static PyMethodDef methods[] = {
    {"calibrated_rows", (PyCFunction)(void (*)(void))calibrated_rows, METH_FASTCALL,
     "calibrated_rows(events, kernels_only, table, expected, pending, signatures, compatible): match_graph's loop"},
    {"set_path_rows", (PyCFunction)(void (*)(void))set_path_rows, METH_FASTCALL,
     "set_path_rows(path, row, indices, values, on_path, start) -> stop: CompactPlacements.set_paths' loop"},
    {"in_start_order", (PyCFunction)in_start_order, METH_O,
     "in_start_order(events) -> bool: whether events are already by (ts_ns, index) (replays._by_start)"},
    {"group_work", (PyCFunction)(void (*)(void))group_work, METH_FASTCALL,
     "group_work(events, context) -> total: replays.gpu_work_and_replays' pass over a trace's events"},
    {"loose_signatures", (PyCFunction)(void (*)(void))loose_signatures, METH_FASTCALL,
     "loose_signatures(events, context): match.replay_signatures' loop (match._loose) over a replay's events"},
    {"replay_path", (PyCFunction)(void (*)(void))replay_path, METH_FASTCALL,
     "replay_path(events, matches, work_preds, rank, start_ns): annotate_replays' work on one replay"},
    {"path_and_slack", (PyCFunction)(void (*)(void))path_and_slack, METH_FASTCALL,
     "path_and_slack(starts, ends, indices, preds, rank, start): critical_path's chain, releases and slack"},
    {"collect_work", (PyCFunction)(void (*)(void))collect_work, METH_FASTCALL,
     "collect_work(timed, matches, per_node, work) -> matched: projection._collect_work's loop"},
    {"busy_ns", (PyCFunction)busy_ns, METH_O, "busy_ns(intervals): the union's length, or None (Python's loop)"},
    {"place_rows", (PyCFunction)(void (*)(void))place_rows, METH_FASTCALL,
     "place_rows(events, context) -> ambiguous: join._place_compact's loop over one replay's events"},
    {"lane_keys", (PyCFunction)(void (*)(void))lane_keys, METH_FASTCALL,
     "lane_keys(events, context): join._lane_names' loop over one replay's events"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_rows",
    "The join's per-event loops over a replay (join._place_compact, _lane_names, projection._collect_work) in C.",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__rows(void)
{
    static const char *events[E_SIZE] = {"index", "args"};
    static const char *names[9] = {"shared_by", "node", "key", "strategy", "ambiguous", "stream", "device",
                                   "graph id", "category"};
    PyObject **out[9] = {&s_shared_by, &s_node, &s_key, &s_strategy, &s_ambiguous, &s_stream, &s_device, &s_graph_id,
                         &s_category};
    int k;
    static const char *timed[T_SIZE] = {"index", "ts_ns", "dur_ns"};
    static const char *sig[G_SIZE] = {"index", "cat", "name", "args"};
    static const char *work[K_SIZE] = {"ph", "name", "cat", "args"};
    static const char *more[3] = {"grid", "block", "kernel"};
    PyObject **more_out[3] = {&s_grid, &s_block, &s_kernel};
    if (intern_names(events, E_SIZE, event_names) < 0 || intern_names(timed, T_SIZE, timed_names) < 0 ||
        intern_names(sig, G_SIZE, sig_names) < 0 || intern_names(work, K_SIZE, work_names) < 0)
        return NULL;
    if ((s_correlation == NULL && (s_correlation = PyUnicode_InternFromString("correlation")) == NULL) ||
        (s_graph_node_id == NULL && (s_graph_node_id = PyUnicode_InternFromString("graph node id")) == NULL))
        return NULL;
    for (k = 0; k < 3; k++)
        if (*more_out[k] == NULL && (*more_out[k] = PyUnicode_InternFromString(more[k])) == NULL)
            return NULL;
    for (k = 0; k < 9; k++)
        if (*out[k] == NULL && (*out[k] = PyUnicode_InternFromString(names[k])) == NULL)
            return NULL;
    if ((int_zero == NULL && (int_zero = PyLong_FromLong(0)) == NULL) ||
        (int_one == NULL && (int_one = PyLong_FromLong(1)) == NULL))
        return NULL;
    return PyModule_Create(&moduledef);
}
