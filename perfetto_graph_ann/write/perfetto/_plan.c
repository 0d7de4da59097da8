/*
 * The writer's plan loop in C (perfetto_graph_ann.write.perfetto._plan): plan._place's walk over
 * every event (its kind, its home and its span, the GPU work whose args are rewritten), for the
 * usual events; the rest goes to the Python callables in the context, which do what the Python
 * loop does (counters, placements kept whole or not in the join's columns, a CPU home met for the
 * first time, a device or stream not in the args). An accelerator only: plan.py runs the same
 * loop in Python where this is not built or is turned off (PERFETTO_GRAPH_ANN_PURE_PYTHON), and
 * the two make the same plan (tests/test_plan_loop.py).
 * Compiled by hatch_build.py.
 */
#include "../../read/_slots.h"

#include <limits.h>
#include <stdint.h>

/* The event fields the loop reads, by index. */
enum { E_INDEX, E_PH, E_ID, E_TS, E_DUR, E_PID, E_TID, E_CAT, E_ARGS, E_SIZE };
static PyObject *event_names[E_SIZE];
static PyObject *s_device, *s_stream, *s_lane, *s_args;

/* plan.py's kinds. */
enum { SLICE = 1, SLICE_REWRITTEN = 2, INSTANT = 3 };

/* The context's items, in the order plan._place passes them. */
enum {
    P_KINDS, P_GPU_PIDS, P_ROW, P_NODE, P_HW, P_NODES, P_EVERY, P_KEPT, P_PLACED, P_LANES, P_REWRITE, P_DEVICE_OF,
    P_FLOWS, P_BY_HOME, P_NEW_SPANS, P_CPU_HOME, P_CATS, P_GPU_WORK, P_COUNTERS, P_SIZE
};

#define NO_LANE INT32_MIN

/* The spans of one home, (ts, -dur, index) after one another, appended to its array at the end. */
typedef struct {
    long long *v;
    Py_ssize_t n, cap;
} Spans;

typedef struct {
    PyObject **ctx;
    Fields ev;
    Py_buffer kinds, row, node, hw, lanes; /* obj NULL: not given */
    PyObject *homes;                        /* list of the homes' arrays, by home number */
    PyObject *home_of;                      /* dict: home -> its number */
    PyObject *gpu_of, *cpu_of;              /* dicts: (device, lane), (pid, tid) -> home number */
    Spans *spans;
    Py_ssize_t n_homes;
    int every; /* the placements' ``every`` (a row's lane is its node's, never its hardware stream) */
    long long slices, instants, untimed;
} Place;

#define GET(P, e, k) get_field((e), &(P)->ev, event_names, (k))

static void
place_release(Place *P)
{
    Py_ssize_t k;
    Py_buffer *bufs[5] = {&P->kinds, &P->row, &P->node, &P->hw, &P->lanes};
    for (k = 0; k < 5; k++)
        if (bufs[k]->obj != NULL)
            PyBuffer_Release(bufs[k]);
    for (k = 0; k < P->n_homes; k++)
        PyMem_Free(P->spans[k].v);
    PyMem_Free(P->spans);
    Py_XDECREF(P->homes);
    Py_XDECREF(P->home_of);
    Py_XDECREF(P->gpu_of);
    Py_XDECREF(P->cpu_of);
}

/* The number of ``home``'s spans (its array made by by_home.setdefault on first sight); -1 on error. */
static Py_ssize_t
home_number(Place *P, PyObject *home)
{
    PyObject *got = PyDict_GetItemWithError(P->home_of, home), *arr, *fresh, *num;
    Py_ssize_t k;
    if (got != NULL)
        return PyLong_AsSsize_t(got);
    if (PyErr_Occurred())
        return -1;
    fresh = PyObject_CallNoArgs(P->ctx[P_NEW_SPANS]);
    if (fresh == NULL)
        return -1;
    arr = PyDict_SetDefault(P->ctx[P_BY_HOME], home, fresh); /* borrowed */
    Py_DECREF(fresh);
    if (arr == NULL || PyList_Append(P->homes, arr) < 0)
        return -1;
    k = P->n_homes;
    if (PyMem_Resize(P->spans, Spans, k + 1) == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    P->spans[k].v = NULL;
    P->spans[k].n = P->spans[k].cap = 0;
    P->n_homes = k + 1;
    num = PyLong_FromSsize_t(k);
    if (num == NULL || PyDict_SetItem(P->home_of, home, num) < 0) {
        Py_XDECREF(num);
        return -1;
    }
    Py_DECREF(num);
    return k;
}

/* The number of ``home``, cached under ``key`` in ``cache``; -1 on error. */
static Py_ssize_t
cached_home(Place *P, PyObject *cache, PyObject *key, PyObject *home)
{
    Py_ssize_t k;
    PyObject *num;
    k = home_number(P, home);
    if (k < 0)
        return -1;
    num = PyLong_FromSsize_t(k);
    if (num == NULL || PyDict_SetItem(cache, key, num) < 0) {
        Py_XDECREF(num);
        return -1;
    }
    Py_DECREF(num);
    return k;
}

static int
add_span(Place *P, Py_ssize_t home, long long ts, long long dur, Py_ssize_t i)
{
    Spans *s = &P->spans[home];
    if (s->n + 3 > s->cap) {
        Py_ssize_t cap = s->cap ? s->cap * 2 : 48;
        if (PyMem_Resize(s->v, long long, cap) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        s->cap = cap;
    }
    s->v[s->n++] = ts;
    s->v[s->n++] = -dur;
    s->v[s->n++] = (long long)i;
    return 0;
}

/* An int32 column's item. */
static inline int32_t
col(const Py_buffer *b, Py_ssize_t r)
{
    return ((const int32_t *)b->buf)[r];
}

/* The join's placement of event i as (lane: new reference, placed args: 0/1) in *lane, *placed;
 * *lane NULL where it has none. 0, or -1 with an exception. */
static int
placement(Place *P, Py_ssize_t i, PyObject *i_o, PyObject **lane, int *placed)
{
    PyObject **ctx = P->ctx;
    *lane = NULL;
    *placed = 0;
    if (P->row.obj != NULL) { /* CompactPlacements.lane_of's work */
        Py_ssize_t rows = P->row.len / 4;
        int32_t r = i < rows ? col(&P->row, i) : -1;
        if (r >= 0) {
            int32_t hw;
            PyObject *triple;
            if (r >= P->node.len / 4 || r >= P->hw.len / 4) {
                PyErr_SetString(PyExc_IndexError, "place_loop: a placement row beyond its columns");
                return -1;
            }
            *placed = 1;
            hw = col(&P->hw, r);
            if (!P->every && hw != NO_LANE) {
                *lane = PyLong_FromLong(hw);
                return *lane == NULL ? -1 : 0;
            }
            triple = PySequence_GetItem(ctx[P_NODES], col(&P->node, r));
            if (triple == NULL)
                return -1;
            *lane = PySequence_GetItem(triple, 0);
            Py_DECREF(triple);
            return *lane == NULL ? -1 : 0;
        }
        if (PyDict_CheckExact(ctx[P_KEPT])) { /* kept whole: its lane and whether its args are not empty */
            PyObject *p = PyDict_GetItemWithError(ctx[P_KEPT], i_o), *a;
            if (p == NULL)
                return PyErr_Occurred() ? -1 : 0;
            a = PyObject_GetAttr(p, s_args);
            if (a == NULL)
                return -1;
            *placed = PyObject_IsTrue(a);
            Py_DECREF(a);
            if (*placed < 0)
                return -1;
            *lane = PyObject_GetAttr(p, s_lane);
            return *lane == NULL ? -1 : 0;
        }
    }
    if (ctx[P_PLACED] != Py_None) { /* placed(i) -> None or (lane, placed args) */
        PyObject *got = PyObject_CallOneArg(ctx[P_PLACED], i_o);
        if (got == NULL)
            return -1;
        if (got != Py_None) {
            if (!PyTuple_Check(got) || PyTuple_GET_SIZE(got) != 2) {
                Py_DECREF(got);
                PyErr_SetString(PyExc_TypeError, "place_loop: placed(i) must answer None or (lane, placed args)");
                return -1;
            }
            *lane = Py_NewRef(PyTuple_GET_ITEM(got, 0));
            *placed = PyObject_IsTrue(PyTuple_GET_ITEM(got, 1));
        }
        Py_DECREF(got);
        return *placed < 0 ? -1 : 0;
    }
    return 0;
}

/* The GPU side of one event on a GPU pid: its home number in *home (-1: none, the CPU rule then),
 * and *kind updated where its args are rewritten. 0, or -1 with an exception. */
static int
place_gpu(Place *P, PyObject *e, Py_ssize_t i, PyObject *i_o, int *kind, Py_ssize_t *home, PyObject **last_key,
          Py_ssize_t *last_home)
{
    PyObject **ctx = P->ctx;
    PyObject *lane = NULL, *a = NULL, *device = NULL, *stream_arg = NULL, *key = NULL, *cat = NULL, *c = NULL;
    int placed, rc = -1, rewrite;
    *home = -1;
    if (placement(P, i, i_o, &lane, &placed) < 0)
        return -1;
    a = GET(P, e, E_ARGS);
    if (a == NULL)
        goto done;
    device = arg_of(a, s_device);
    if (device == NULL)
        goto done;
    stream_arg = arg_of(a, s_stream);
    if (stream_arg == NULL)
        goto done;
    if (!PyLong_CheckExact(device)) { /* the pid's device, written as the device arg if the args are rewritten */
        Py_SETREF(device, PyObject_GetAttr(e, s_device));
        if (device == NULL || PyDict_SetItem(ctx[P_DEVICE_OF], i_o, device) < 0)
            goto done;
        Py_SETREF(stream_arg, Py_NewRef(Py_None)); /* forces that rewrite (GPU work); the lane is e.stream */
    }
    if (lane == NULL) {
        lane = PyLong_CheckExact(stream_arg) ? Py_NewRef(stream_arg) : PyObject_GetAttr(e, s_stream);
        if (lane == NULL)
            goto done;
    }
    if (device == Py_None || lane == Py_None) {
        rc = 0;
        goto done;
    }
    if (*last_key != NULL) { /* the previous GPU event's (device, lane): equal keys, the same home */
        int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(*last_key, 0), device, Py_EQ);
        if (same > 0)
            same = PyObject_RichCompareBool(PyTuple_GET_ITEM(*last_key, 1), lane, Py_EQ);
        if (same < 0)
            goto done;
        if (same)
            *home = *last_home;
    }
    if (*home < 0) {
        PyObject *num, *full;
        key = PyTuple_Pack(2, device, lane);
        if (key == NULL)
            goto done;
        num = PyDict_GetItemWithError(P->gpu_of, key);
        if (num != NULL) {
            *home = PyLong_AsSsize_t(num);
        } else {
            static PyObject *s_gpu = NULL;
            if (PyErr_Occurred())
                goto done;
            if (s_gpu == NULL && (s_gpu = PyUnicode_InternFromString("gpu")) == NULL)
                goto done;
            full = PyTuple_Pack(3, s_gpu, device, lane);
            if (full == NULL)
                goto done;
            *home = cached_home(P, P->gpu_of, key, full);
            Py_DECREF(full);
        }
        if (*home < 0)
            goto done;
        Py_XSETREF(*last_key, Py_NewRef(key));
        *last_home = *home;
    }
    /* GPU work whose args change: placement args, or not already its lane as an int stream arg */
    cat = GET(P, e, E_CAT);
    if (cat == NULL)
        goto done;
    c = PyDict_GetItemWithError(ctx[P_CATS], cat);
    if (c != NULL)
        Py_INCREF(c);
    else if (PyErr_Occurred() || (c = PyObject_GetItem(ctx[P_CATS], cat)) == NULL)
        goto done;
    rewrite = PySet_Contains(ctx[P_GPU_WORK], c);
    if (rewrite > 0 && !placed && PyLong_CheckExact(stream_arg))
        rewrite = PyObject_RichCompareBool(stream_arg, lane, Py_NE);
    if (rewrite < 0)
        goto done;
    if (rewrite) {
        long long v;
        if (P->lanes.obj != NULL && PyLong_CheckExact(lane) && int64_of(lane, &v) && v > NO_LANE && v < ((long long)1 << 31) &&
            i < P->lanes.len / 4) {
            ((int32_t *)P->lanes.buf)[i] = (int32_t)v;
        } else if (PyObject_SetItem(ctx[P_REWRITE], i_o, lane) < 0) {
            goto done;
        }
        if (*kind == SLICE)
            *kind = SLICE_REWRITTEN;
    }
    rc = 0;
done:
    Py_XDECREF(c);
    Py_XDECREF(cat);
    Py_XDECREF(key);
    Py_XDECREF(stream_arg);
    Py_XDECREF(device);
    Py_XDECREF(a);
    Py_XDECREF(lane);
    return rc;
}

/* One event. 0, or -1 with an exception. */
static int
place_one(Place *P, PyObject *e, PyObject **last_key, Py_ssize_t *last_home)
{
    PyObject **ctx = P->ctx;
    PyObject *i_o = NULL, *ph = NULL, *v = NULL, *pid = NULL;
    Py_ssize_t i, home = -1;
    long long ts, dur;
    int kind, rc = -1, k;
    signed char *kinds = (signed char *)P->kinds.buf;
    i_o = GET(P, e, E_INDEX);
    if (i_o == NULL)
        return -1;
    i = PyLong_AsSsize_t(i_o);
    if (i == -1 && PyErr_Occurred())
        goto done;
    if (i < 0 || i >= P->kinds.len) {
        PyErr_SetString(PyExc_IndexError, "place_loop: an event index beyond the plan's kinds");
        goto done;
    }
    if (kinds[i] < 0) { /* TRACK_METADATA, DROPPED */
        rc = 0;
        goto done;
    }
    ph = GET(P, e, E_PH);
    if (ph == NULL)
        goto done;
    if (is_char(ph, 's') || is_char(ph, 't') || is_char(ph, 'f')) {
        v = GET(P, e, E_ID);
        if (v == NULL)
            goto done;
        if (v != Py_None) {
            rc = PyList_Append(ctx[P_FLOWS], i_o);
            goto done;
        }
        Py_CLEAR(v);
    }
    v = GET(P, e, E_TS);
    if (v == NULL)
        goto done;
    if (v == Py_None) {
        P->untimed++;
        rc = 0;
        goto done;
    }
    if (is_char(ph, 'C')) {
        PyObject *r = PyObject_CallOneArg(ctx[P_COUNTERS], e);
        Py_XDECREF(r);
        rc = r == NULL ? -1 : 0;
        goto done;
    }
    ts = PyLong_AsLongLong(v);
    if (ts == -1 && PyErr_Occurred())
        goto done;
    Py_SETREF(v, GET(P, e, E_DUR));
    if (v == NULL)
        goto done;
    if (v == Py_None || (!is_char(ph, 'X') && (is_char(ph, 'i') || is_char(ph, 'I') || is_char(ph, 'M') ||
                                               is_char(ph, 'n') || is_char(ph, 'R') || is_char(ph, 'B') ||
                                               is_char(ph, 'E')))) {
        kind = INSTANT;
        dur = 0;
        P->instants++;
    } else {
        dur = PyLong_AsLongLong(v);
        if (dur == -1 && PyErr_Occurred())
            goto done;
        if (dur == LLONG_MIN) {
            PyErr_SetString(PyExc_OverflowError, "place_loop: a duration out of range");
            goto done;
        }
        kind = is_char(ph, 'X') ? SLICE : SLICE_REWRITTEN; /* another phase: kept as the "ph" arg */
        P->slices++;
    }
    pid = GET(P, e, E_PID);
    if (pid == NULL)
        goto done;
    if (PyLong_CheckExact(pid)) {
        k = PySet_Contains(ctx[P_GPU_PIDS], pid);
        if (k < 0 || (k && place_gpu(P, e, i, i_o, &kind, &home, last_key, last_home) < 0))
            goto done;
    }
    kinds[i] = (signed char)kind;
    if (home < 0) {
        PyObject *tid = GET(P, e, E_TID), *key, *num;
        if (tid == NULL)
            goto done;
        key = PyTuple_Pack(2, pid, tid);
        if (key == NULL) {
            Py_DECREF(tid);
            goto done;
        }
        num = PyDict_GetItemWithError(P->cpu_of, key);
        if (num != NULL) {
            home = PyLong_AsSsize_t(num);
        } else if (!PyErr_Occurred()) {
            PyObject *h = PyObject_CallFunctionObjArgs(ctx[P_CPU_HOME], pid, tid, NULL);
            if (h != NULL) {
                home = cached_home(P, P->cpu_of, key, h);
                Py_DECREF(h);
            }
        }
        Py_DECREF(key);
        Py_DECREF(tid);
        if (home < 0)
            goto done;
    }
    rc = add_span(P, home, ts, dur, i);
done:
    Py_XDECREF(pid);
    Py_XDECREF(v);
    Py_XDECREF(ph);
    Py_XDECREF(i_o);
    return rc;
}

/* place_loop(events, context) -> (slices, instants, untimed): plan._place's loop over ``events``. */
static PyObject *
place_loop(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Place P;
    PyObject *events, **ctx, *last_key = NULL, *out = NULL;
    Py_ssize_t n, j, k;
    Py_ssize_t last_home = -1;
    (void)self;
    if (argc != 2 || !PyList_CheckExact(argv[0]) || !PyTuple_CheckExact(argv[1]) ||
        PyTuple_GET_SIZE(argv[1]) != P_SIZE) {
        PyErr_SetString(PyExc_TypeError, "place_loop(events: list, context: tuple)");
        return NULL;
    }
    memset(&P, 0, sizeof P);
    events = argv[0];
    ctx = P.ctx = &PyTuple_GET_ITEM(argv[1], 0);
    if (!PyDict_Check(ctx[P_BY_HOME]) || !PyDict_Check(ctx[P_DEVICE_OF]) || !PyList_CheckExact(ctx[P_FLOWS]) ||
        !PyAnySet_Check(ctx[P_GPU_PIDS]) || !PyAnySet_Check(ctx[P_GPU_WORK]) || !PyDict_Check(ctx[P_CATS]) ||
        (ctx[P_ROW] != Py_None && (ctx[P_NODE] == Py_None || ctx[P_HW] == Py_None))) {
        PyErr_SetString(PyExc_TypeError, "place_loop: a context of the wrong shape");
        return NULL;
    }
    if (take_buffer(ctx[P_KINDS], &P.kinds, "b", 1) < 0 || P.kinds.obj == NULL ||
        take_buffer(ctx[P_ROW], &P.row, "i", 0) < 0 || take_buffer(ctx[P_NODE], &P.node, "i", 0) < 0 ||
        take_buffer(ctx[P_HW], &P.hw, "i", 0) < 0 || take_buffer(ctx[P_LANES], &P.lanes, "i", 1) < 0)
        goto done;
    if ((P.homes = PyList_New(0)) == NULL || (P.home_of = PyDict_New()) == NULL || (P.gpu_of = PyDict_New()) == NULL ||
        (P.cpu_of = PyDict_New()) == NULL)
        goto done;
    if ((P.every = PyObject_IsTrue(ctx[P_EVERY])) < 0)
        goto done;
    n = PyList_GET_SIZE(events);
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(events, 0)), event_names, E_SIZE, &P.ev) < 0)
        goto done;
    for (j = 0; j < n; j++)
        if (place_one(&P, PyList_GET_ITEM(events, j), &last_key, &last_home) < 0)
            goto done;
    for (k = 0; k < P.n_homes; k++) /* each home's spans, in event order */
        if (append_raw(PyList_GET_ITEM(P.homes, k), P.spans[k].v, P.spans[k].n * (Py_ssize_t)sizeof(long long)) < 0)
            goto done;
    out = Py_BuildValue("(LLL)", P.slices, P.instants, P.untimed);
done:
    Py_XDECREF(last_key);
    place_release(&P);
    return out;
}

/* The normalised category of ``cat`` (``cats``: a dict that makes a missing one): a new reference. */
static PyObject *
category_of(PyObject *cats, PyObject *cat)
{
    PyObject *norm = PyDict_GetItemWithError(cats, cat);
    if (norm != NULL)
        return Py_NewRef(norm);
    return PyErr_Occurred() ? NULL : PyObject_GetItem(cats, cat);
}

/* kinds_loop(events, cats, gpu_categories, flow_ts, marked) -> (gpu_pids, metadata, any marked): plan_events'
 * first walk over ``events``: the int pids of the complete events whose category (normalised by
 * ``cats``, a dict that makes a missing one) is in ``gpu_categories``, the times of the timed flow
 * events appended to the array('q') ``flow_ts``, the metadata events in order (read by the tracks),
 * and whether any event's category is ``marked`` (gpu_user_annotation, which the plan may drop). */
static PyObject *
kinds_loop(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *events, *cats, *gpu_cats, *marked, *pids = NULL, *metadata = NULL, *out = NULL, *last_cat = NULL;
    Fields ev;
    Py_ssize_t n, j, nts = 0, cap = 0;
    long long *ts = NULL;
    int any_marked = 0;
    (void)self;
    if (argc != 5 || !PyList_CheckExact(argv[0]) || !PyDict_Check(argv[1]) || !PyAnySet_Check(argv[2])) {
        PyErr_SetString(PyExc_TypeError,
                        "kinds_loop(events: list, cats: dict, gpu_categories: set, flow_ts, marked)");
        return NULL;
    }
    events = argv[0]; cats = argv[1]; gpu_cats = argv[2]; marked = argv[4];
    n = PyList_GET_SIZE(events);
    if ((pids = PySet_New(NULL)) == NULL || (metadata = PyList_New(0)) == NULL)
        goto done;
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(events, 0)), event_names, E_SIZE, &ev) < 0)
        goto done;
    for (j = 0; j < n; j++) {
        PyObject *e = PyList_GET_ITEM(events, j), *ph, *v;
        Py_UCS4 c;
        int rc = 0;
        if (!any_marked) { /* a run of one category object asks once */
            PyObject *cat = get_field(e, &ev, event_names, E_CAT), *norm;
            if (cat == NULL)
                goto done;
            if (cat != last_cat) {
                if ((norm = category_of(cats, cat)) == NULL) {
                    Py_DECREF(cat);
                    goto done;
                }
                rc = PyObject_RichCompareBool(norm, marked, Py_EQ);
                Py_DECREF(norm);
                Py_XSETREF(last_cat, Py_NewRef(cat));
                if (rc < 0) {
                    Py_DECREF(cat);
                    goto done;
                }
                any_marked = rc;
                rc = 0;
            }
            Py_DECREF(cat);
        }
        if ((ph = get_field(e, &ev, event_names, E_PH)) == NULL)
            goto done;
        c = PyUnicode_Check(ph) && PyUnicode_GET_LENGTH(ph) == 1 ? PyUnicode_READ_CHAR(ph, 0) : 0;
        Py_DECREF(ph);
        if (c == 'X') {
            PyObject *pid, *cat, *norm;
            if ((pid = get_field(e, &ev, event_names, E_PID)) == NULL)
                goto done;
            if (PyLong_CheckExact(pid)) {
                if ((cat = get_field(e, &ev, event_names, E_CAT)) == NULL) {
                    Py_DECREF(pid);
                    goto done;
                }
                norm = category_of(cats, cat);
                Py_DECREF(cat);
                rc = norm == NULL ? -1 : PySet_Contains(gpu_cats, norm);
                Py_XDECREF(norm);
                if (rc > 0)
                    rc = PySet_Add(pids, pid);
            }
            Py_DECREF(pid);
        } else if (c == 's' || c == 'f' || c == 't') {
            if ((v = get_field(e, &ev, event_names, E_TS)) == NULL)
                goto done;
            if (v != Py_None) {
                long long t = PyLong_AsLongLong(v);
                if (t == -1 && PyErr_Occurred())
                    rc = -1;
                else if (nts == cap) {
                    cap = cap ? cap * 2 : 1024;
                    if (PyMem_Resize(ts, long long, cap) == NULL) {
                        PyErr_NoMemory();
                        rc = -1;
                    }
                }
                if (rc == 0)
                    ts[nts++] = t;
            }
            Py_DECREF(v);
        } else if (c == 'M') {
            rc = PyList_Append(metadata, e);
        }
        if (rc < 0)
            goto done;
    }
    if (append_raw(argv[3], ts, nts * (Py_ssize_t)sizeof(long long)) < 0)
        goto done;
    out = Py_BuildValue("(OOO)", pids, metadata, any_marked ? Py_True : Py_False);
done:
    Py_XDECREF(last_cat);
    PyMem_Free(ts);
    Py_XDECREF(pids);
    Py_XDECREF(metadata);
    return out;
}

/* number_flows(targets, sources, outgoing, one, more, terminating, one_max, new_out) -> (count, without_start):
 * plan_flows' numbering of the bound flows, over ``targets`` (key -> list of target indices) in order:
 * each (source, target) pair but a slice to itself gets the next id, appended to the source's array
 * in ``outgoing`` (made by new_out() where it has none, dropped again where it stays empty) and held
 * for the target in the FlowEnds ``terminating``: its int32 column ``one`` where it holds none yet
 * (an id below one_max, no entry in ``more``), else through terminating.get / terminating[t] =. */
static PyObject *
number_flows(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *targets, *sources, *outgoing, *more, *terminating, *new_out, *key, *tgts;
    Py_buffer one;
    long long one_max, next_id = 1, without = 0, *ids = NULL;
    Py_ssize_t pos = 0, size, cap = 0;
    PyObject *out = NULL;
    (void)self;
    if (argc != 8 || !PyDict_CheckExact(argv[0]) || !PyDict_CheckExact(argv[1]) || !PyDict_CheckExact(argv[2]) ||
        !PyDict_CheckExact(argv[4]) || !int64_of(argv[6], &one_max)) {
        PyErr_SetString(PyExc_TypeError,
                        "number_flows(targets, sources, outgoing, one, more, terminating, one_max: int, new_out)");
        return NULL;
    }
    targets = argv[0]; sources = argv[1]; outgoing = argv[2]; more = argv[4]; terminating = argv[5];
    new_out = argv[7];
    if (take_buffer(argv[3], &one, "i", 1) < 0)
        return NULL;
    if (one.obj == NULL) {
        PyErr_SetString(PyExc_TypeError, "number_flows: one is an array('i')");
        return NULL;
    }
    size = one.len / 4;
    while (PyDict_Next(targets, &pos, &key, &tgts)) {
        PyObject *src_o, *arr;
        long long src;
        Py_ssize_t j, n, nids = 0;
        if (!PyList_CheckExact(tgts)) {
            PyErr_SetString(PyExc_TypeError, "number_flows: targets holds something else than lists");
            goto done;
        }
        n = PyList_GET_SIZE(tgts);
        src_o = PyDict_GetItemWithError(sources, key);
        if (src_o == NULL) {
            if (PyErr_Occurred())
                goto done;
            without += n;
            continue;
        }
        if (!int64_of(src_o, &src)) {
            PyErr_SetString(PyExc_TypeError, "number_flows: a source that is not an int");
            goto done;
        }
        arr = PyDict_GetItemWithError(outgoing, src_o);
        if (arr == NULL) {
            if (PyErr_Occurred() || (arr = PyObject_CallNoArgs(new_out)) == NULL)
                goto done;
            if (PyDict_SetItem(outgoing, src_o, arr) < 0) {
                Py_DECREF(arr);
                goto done;
            }
            Py_DECREF(arr); /* outgoing holds it */
        }
        Py_INCREF(arr);
        if (n > cap) {
            cap = n;
            if (PyMem_Resize(ids, long long, cap) == NULL) {
                Py_DECREF(arr);
                PyErr_NoMemory();
                goto done;
            }
        }
        for (j = 0; j < n; j++) {
            PyObject *t_o = PyList_GET_ITEM(tgts, j);
            long long t;
            int held;
            if (!int64_of(t_o, &t)) {
                PyErr_SetString(PyExc_TypeError, "number_flows: a target that is not an int");
                Py_DECREF(arr);
                goto done;
            }
            if (t == src)
                continue;
            ids[nids++] = next_id;
            held = t >= 0 && t < size && ((int32_t *)one.buf)[t] == 0 && next_id < one_max;
            if (held) {
                int in_more = PyDict_Contains(more, t_o);
                if (in_more < 0) {
                    Py_DECREF(arr);
                    goto done;
                }
                held = !in_more;
            }
            if (held) {
                ((int32_t *)one.buf)[t] = (int32_t)next_id;
            } else {
                PyObject *term = PyObject_CallMethod(terminating, "get", "O", t_o), *id_o, *one_id, *now = NULL;
                int rc = -1;
                if (term != NULL && (id_o = PyLong_FromLongLong(next_id)) != NULL) {
                    if ((one_id = PyTuple_Pack(1, id_o)) != NULL) {
                        now = term == Py_None ? Py_NewRef(one_id) : PySequence_Concat(term, one_id);
                        Py_DECREF(one_id);
                    }
                    Py_DECREF(id_o);
                    if (now != NULL)
                        rc = PyObject_SetItem(terminating, t_o, now);
                    Py_XDECREF(now);
                }
                Py_XDECREF(term);
                if (rc < 0) {
                    Py_DECREF(arr);
                    goto done;
                }
            }
            next_id++;
        }
        if (append_raw(arr, ids, nids * (Py_ssize_t)sizeof(long long)) < 0) {
            Py_DECREF(arr);
            goto done;
        }
        n = PyObject_Length(arr);
        Py_DECREF(arr);
        if (n < 0 || (n == 0 && PyDict_DelItem(outgoing, src_o) < 0))
            goto done;
    }
    out = Py_BuildValue("(LL)", next_id - 1, without);
done:
    PyMem_Free(ids);
    PyBuffer_Release(&one);
    return out;
}

/* A growing int64 vector. */
typedef struct {
    long long *v;
    Py_ssize_t n, cap;
} I64s;

static int
i64_push(I64s *x, long long a, long long b)
{
    if (x->n + 2 > x->cap) {
        Py_ssize_t cap = x->cap ? x->cap * 2 : 64;
        if (PyMem_Resize(x->v, long long, cap) == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        x->cap = cap;
    }
    x->v[x->n++] = a;
    x->v[x->n++] = b;
    return 0;
}

/* One nesting track of assign_sorted: its open slices (end, end's code) and its records (ts, code). */
typedef struct {
    I64s open, recs;
    PyObject *uuid;
} Track;

/* The open slices of track t that end by ts, ended (their records written), innermost first. */
static int
close_until(Track *t, long long ts)
{
    while (t->open.n > 0 && t->open.v[t->open.n - 2] <= ts) {
        t->open.n -= 2;
        if (i64_push(&t->recs, t->open.v[t->open.n], t->open.v[t->open.n + 1]) < 0)
            return -1;
    }
    return 0;
}

/* The column ``k`` (0: ts, 1: code) of a track's records appended to the array('q') arr. */
static int
fill_column(PyObject *arr, const Track *t, int k)
{
    Py_ssize_t j, n = t->recs.n / 2;
    long long *w = PyMem_Malloc((n ? n : 1) * sizeof(long long));
    int rc;
    if (w == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (j = 0; j < n; j++)
        w[j] = t->recs.v[2 * j + k];
    rc = append_raw(arr, w, n * (Py_ssize_t)sizeof(long long));
    PyMem_Free(w);
    return rc;
}

/* assign_sorted(spans, track_uuid, records_type) -> list: overlap.assign for spans given as sorted
 * (ts, -dur, key) int64 triples in one buffer: the same tracks, uuids asked in the same order, the
 * same records (records_type(uuid) objects whose ts and codes arrays are filled). */
static PyObject *
assign_sorted(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    Py_buffer b;
    const long long *sp;
    Py_ssize_t n, j, k, ntracks = 0;
    Track *tracks = NULL;
    PyObject *out = NULL;
    (void)self;
    if (argc != 3) {
        PyErr_SetString(PyExc_TypeError, "assign_sorted(spans, track_uuid, records_type)");
        return NULL;
    }
    if (PyObject_GetBuffer(argv[0], &b, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (b.itemsize != 8 || b.format == NULL || (strcmp(b.format, "q") != 0 && strcmp(b.format, "l") != 0 &&
                                                strcmp(b.format, "<q") != 0 && strcmp(b.format, "<l") != 0) ||
        (b.len / 8) % 3 != 0) {
        PyBuffer_Release(&b);
        PyErr_SetString(PyExc_TypeError, "assign_sorted: spans must be int64 triples");
        return NULL;
    }
    sp = (const long long *)b.buf;
    n = b.len / 24;
    for (j = 0; j < n; j++) {
        long long ts = sp[3 * j], end, code;
        Py_ssize_t placed = -1;
        if (__builtin_sub_overflow(ts, sp[3 * j + 1], &end) || __builtin_mul_overflow(sp[3 * j + 2], 2, &code)) {
            PyErr_SetString(PyExc_OverflowError, "assign_sorted: a span out of range");
            goto done;
        }
        for (k = 0; k < ntracks; k++) { /* the first track whose open slices all enclose it */
            Track *t = &tracks[k];
            if (close_until(t, ts) < 0)
                goto done;
            if (t->open.n == 0 || end <= t->open.v[t->open.n - 2]) {
                placed = k;
                break;
            }
        }
        if (placed < 0) {
            PyObject *num = PyLong_FromSsize_t(ntracks), *uuid;
            if (num == NULL)
                goto done;
            uuid = PyObject_CallOneArg(argv[1], num);
            Py_DECREF(num);
            if (uuid == NULL)
                goto done;
            if (PyMem_Resize(tracks, Track, ntracks + 1) == NULL) {
                Py_DECREF(uuid);
                PyErr_NoMemory();
                goto done;
            }
            memset(&tracks[ntracks], 0, sizeof(Track));
            tracks[ntracks].uuid = uuid;
            placed = ntracks++;
        }
        if (i64_push(&tracks[placed].open, end, code) < 0 || i64_push(&tracks[placed].recs, ts, code + 1) < 0)
            goto done;
    }
    for (k = 0; k < ntracks; k++)
        if (close_until(&tracks[k], LLONG_MAX) < 0)
            goto done;
    out = PyList_New(ntracks);
    if (out == NULL)
        goto done;
    for (k = 0; k < ntracks; k++) {
        PyObject *rec = PyObject_CallOneArg(argv[2], tracks[k].uuid), *ts_arr = NULL, *codes = NULL;
        int rc = -1;
        if (rec != NULL && (ts_arr = PyObject_GetAttrString(rec, "ts")) != NULL &&
            (codes = PyObject_GetAttrString(rec, "codes")) != NULL)
            rc = fill_column(ts_arr, &tracks[k], 0) < 0 || fill_column(codes, &tracks[k], 1) < 0 ? -1 : 0;
        Py_XDECREF(ts_arr);
        Py_XDECREF(codes);
        if (rc < 0) {
            Py_XDECREF(rec);
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, k, rec);
    }
done:
    for (k = 0; k < ntracks; k++) {
        PyMem_Free(tracks[k].open.v);
        PyMem_Free(tracks[k].recs.v);
        Py_XDECREF(tracks[k].uuid);
    }
    PyMem_Free(tracks);
    PyBuffer_Release(&b);
    return out;
}

/* bind_flow_events(part, lo, hi, slices, sources, targets, state, pick): flows.plan_flows' binding
 * loop over a chunk of flow events (part[k], the slices starting at its time slices[lo[k]:hi[k]]):
 * each bound to the one slice there on its thread, else to what pick(fe, lo, hi) answers (None:
 * unbound; the Python rule for several slices at once), then a flow start's target index kept per
 * key (the first one) in sources and a flow end's appended to targets[key]. The key is the flow
 * id, with its category where that is not the first flow event's (state[0], set here; state[1]:
 * the unbound count, added to). None, or NULL with an exception. */
static PyObject *
bind_flow_events(PyObject *self, PyObject *const *argv, Py_ssize_t argc)
{
    PyObject *part, *lo, *hi, *slices, *sources, *targets, *state, *pick;
    Py_ssize_t n, k, nslices;
    long long unbound = 0;
    Fields ev, sl;
    int have_sl = 0;
    (void)self;
    if (argc != 8 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1]) || !PyList_CheckExact(argv[2]) ||
        !PyList_CheckExact(argv[3]) || !PyDict_CheckExact(argv[4]) || !PyDict_CheckExact(argv[5]) ||
        !PyList_CheckExact(argv[6]) || PyList_GET_SIZE(argv[6]) != 2) {
        PyErr_SetString(PyExc_TypeError, "bind_flow_events(part, lo, hi, slices, sources, targets, state, pick)");
        return NULL;
    }
    part = argv[0]; lo = argv[1]; hi = argv[2]; slices = argv[3];
    sources = argv[4]; targets = argv[5]; state = argv[6]; pick = argv[7];
    n = PyList_GET_SIZE(part);
    nslices = PyList_GET_SIZE(slices);
    if (PyList_GET_SIZE(lo) != n || PyList_GET_SIZE(hi) != n) {
        PyErr_SetString(PyExc_ValueError, "bind_flow_events: bounds of another length");
        return NULL;
    }
    if (n > 0 && fields_of(Py_TYPE(PyList_GET_ITEM(part, 0)), event_names, E_SIZE, &ev) < 0)
        return NULL;
    for (k = 0; k < n; k++) {
        PyObject *fe = PyList_GET_ITEM(part, k), *ts = NULL, *cat = NULL, *id = NULL, *ph = NULL, *target = NULL,
                 *key = NULL, *index = NULL, *main_cat;
        Py_ssize_t a, b;
        int ok = 0, same;
        a = PyLong_AsSsize_t(PyList_GET_ITEM(lo, k));
        b = PyLong_AsSsize_t(PyList_GET_ITEM(hi, k));
        if ((a == -1 || b == -1) && PyErr_Occurred())
            return NULL;
        if ((ts = get_field(fe, &ev, event_names, E_TS)) == NULL)
            return NULL;
        if (ts == Py_None) {
            Py_DECREF(ts);
            continue;
        }
        Py_DECREF(ts);
        if ((cat = get_field(fe, &ev, event_names, E_CAT)) == NULL)
            return NULL;
        main_cat = PyList_GET_ITEM(state, 0);
        if (main_cat == Py_None) {
            PyList_SetItem(state, 0, Py_NewRef(cat));
            main_cat = cat;
        }
        if (b - a == 1 && a >= 0 && a < nslices) {
            PyObject *c = PyList_GET_ITEM(slices, a), *x = NULL, *y = NULL;
            int eq = 0;
            if (!have_sl || Py_TYPE(c) != sl.type) {
                if (fields_of(Py_TYPE(c), event_names, E_SIZE, &sl) < 0)
                    goto next;
                have_sl = 1;
            }
            if ((x = get_field(c, &sl, event_names, E_PID)) == NULL ||
                (y = get_field(fe, &ev, event_names, E_PID)) == NULL)
                goto pids;
            if ((eq = PyObject_RichCompareBool(x, y, Py_EQ)) < 0)
                goto pids;
            if (eq) {
                Py_SETREF(x, get_field(c, &sl, event_names, E_TID));
                Py_SETREF(y, x == NULL ? NULL : get_field(fe, &ev, event_names, E_TID));
                if (y == NULL || (eq = PyObject_RichCompareBool(x, y, Py_EQ)) < 0) {
                    eq = -1;
                    goto pids;
                }
            }
        pids:
            Py_XDECREF(x);
            Py_XDECREF(y);
            if (eq < 0 || (eq == 0 && PyErr_Occurred()))
                goto next;
            if (!eq) {
                unbound++;
                ok = 1;
                goto next;
            }
            target = Py_NewRef(c);
        } else {
            PyObject *args[3];
            args[0] = fe;
            args[1] = PyList_GET_ITEM(lo, k);
            args[2] = PyList_GET_ITEM(hi, k);
            if ((target = PyObject_Vectorcall(pick, args, 3, NULL)) == NULL)
                goto next;
            if (target == Py_None) {
                unbound++;
                ok = 1;
                goto next;
            }
        }
        if ((id = get_field(fe, &ev, event_names, E_ID)) == NULL ||
            (ph = get_field(fe, &ev, event_names, E_PH)) == NULL)
            goto next;
        if ((same = PyObject_RichCompareBool(cat, main_cat, Py_EQ)) < 0)
            goto next;
        key = same ? Py_NewRef(id) : PyTuple_Pack(2, cat, id);
        if (key == NULL || (index = PyObject_GetAttr(target, event_names[E_INDEX])) == NULL)
            goto next;
        if (PyUnicode_Check(ph) && PyUnicode_GET_LENGTH(ph) == 1 && PyUnicode_READ_CHAR(ph, 0) == 's') {
            if (PyDict_SetDefault(sources, key, index) == NULL)
                goto next;
        } else {
            PyObject *t = PyDict_GetItemWithError(targets, key);
            if (t == NULL) {
                PyObject *l;
                if (PyErr_Occurred() || (l = PyList_New(1)) == NULL)
                    goto next;
                PyList_SET_ITEM(l, 0, Py_NewRef(index));
                if (PyDict_SetItem(targets, key, l) < 0) {
                    Py_DECREF(l);
                    goto next;
                }
                Py_DECREF(l);
            } else if (!PyList_CheckExact(t) || PyList_Append(t, index) < 0) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "bind_flow_events: targets holds something else than lists");
                goto next;
            }
        }
        ok = 1;
    next:
        Py_XDECREF(cat);
        Py_XDECREF(target);
        Py_XDECREF(id);
        Py_XDECREF(ph);
        Py_XDECREF(key);
        Py_XDECREF(index);
        if (!ok)
            return NULL;
    }
    if (unbound) {
        PyObject *was = PyList_GET_ITEM(state, 1), *more = PyLong_FromLongLong(unbound), *sum;
        if (more == NULL)
            return NULL;
        sum = PyNumber_Add(was, more);
        Py_DECREF(more);
        if (sum == NULL)
            return NULL;
        PyList_SetItem(state, 1, sum);
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"bind_flow_events", (PyCFunction)(void (*)(void))bind_flow_events, METH_FASTCALL,
     "bind_flow_events(part, lo, hi, slices, sources, targets, state, pick): flows.plan_flows' binding loop"},
    {"assign_sorted", (PyCFunction)(void (*)(void))assign_sorted, METH_FASTCALL,
     "assign_sorted(spans, track_uuid, records_type): overlap.assign of sorted int64 (ts, -dur, key) triples"},
    {"number_flows", (PyCFunction)(void (*)(void))number_flows, METH_FASTCALL,
     "number_flows(targets, sources, outgoing, one, more, terminating, one_max, new_out) -> (count, without)"},
    {"kinds_loop", (PyCFunction)(void (*)(void))kinds_loop, METH_FASTCALL,
     "kinds_loop(events, cats, gpu_categories, flow_ts, marked) -> (gpu_pids, metadata, any marked)"},
    {"place_loop", (PyCFunction)(void (*)(void))place_loop, METH_FASTCALL,
     "place_loop(events, context) -> (slices, instants, untimed): the writer's plan loop (plan._place)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_plan", "The writer's plan loop (plan._place) in C.", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__plan(void)
{
    static const char *events[E_SIZE] = {"index", "ph", "id", "ts_ns", "dur_ns", "pid", "tid", "cat", "args"};
    static const char *names[4] = {"device", "stream", "lane", "args"};
    PyObject **out[4] = {&s_device, &s_stream, &s_lane, &s_args};
    int k;
    if (intern_names(events, E_SIZE, event_names) < 0)
        return NULL;
    for (k = 0; k < 4; k++)
        if (*out[k] == NULL && (*out[k] = PyUnicode_InternFromString(names[k])) == NULL)
            return NULL;
    return PyModule_Create(&moduledef);
}
