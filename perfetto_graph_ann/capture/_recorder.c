/*
 * perfetto_graph_ann.capture._fastpath.Recorder: scopes.ScopeRecorder's hot half, in C.
 *
 * Its own translation unit so that _marks.c (which opens and closes scopes on a recorder)
 * and the module (_fastpath.c, which adds the type) depend on it, and it on neither.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include "_fastpath.h"
#include <stdint.h>

/* ---- Recorder: scopes.ScopeRecorder's open / close / snapshot ----------------------------
 *
 * Same state and tokens as the Python class: a token is the list [seq, fields, count at
 * entry]; a closed scope is the tuple (seq, fields, start, end) appended to ``closed``.
 * The position of an edge comes from cuGraphGetNodes (``set_fast``: a count), from an empty
 * marker node's local id once the graph is large (``set_fast`` with the marker functions:
 * session.py explains markers), or from a Python callable (``set_counter``; the fallback
 * ``slow`` where the backend has no marker functions), or, cheapest, from a counter that CUPTI's
 * node-created callback bumps (``set_watch``: _nodewatch.c).
 *
 * Each thread has its own stack of open tokens. The stack of the thread that created the
 * recorder (the capturing thread, alive until the capture ends) is held inline; other
 * threads' stacks (autograd's engine threads, user helpers) live in a ``_thread._local``,
 * as in the Python class, so a thread's stack goes with the thread.
 */

typedef struct {
    PyObject_HEAD
    get_nodes_fn get_nodes; /* fast count when non-NULL */
    void *graph;
    Py_ssize_t switch_at;   /* fast count >= this: markers (or ``slow``) from the next edge on; -1: never */
    PyObject *slow;         /* the Python edge used after the switch without marker functions */
    add_empty_fn add_empty; /* marker functions (NULL: none) */
    node_id_fn node_id;
    PyObject *markers;      /* list: the marker nodes' positions are appended here */
    int marking;            /* edges add marker nodes */
    PyObject *counter;      /* the Python counter when there is no fast count */
    int watch;              /* >= 0: edges read this _nodewatch.c slot's counter (no driver call) */
    PyObject *starter;      /* called once at the first edge (it may set_watch): the watch starts late */
    long long seq;
    int active;
    PyObject *closed;       /* list of (seq, fields, start, end) */
    unsigned long owner;    /* thread ident of the inline stack: the creating thread */
    PyObject *owner_stack;  /* list */
    PyObject *local;        /* _thread._local: attribute "stack" for the other threads (made on first use) */
} Recorder;

static PyObject *local_type = NULL; /* _thread._local */
static PyObject *str_stack = NULL;  /* "stack" */

static int
Recorder_init(Recorder *self, PyObject *args, PyObject *kw)
{
    PyObject *counter = Py_None;
    static char *kwlist[] = {"counter", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:Recorder", kwlist, &counter))
        return -1;
    Py_INCREF(counter);
    Py_XSETREF(self->counter, counter);
    self->get_nodes = NULL;
    self->graph = NULL;
    self->switch_at = -1;
    self->add_empty = NULL;
    self->node_id = NULL;
    self->marking = 0;
    self->watch = -1;
    self->seq = 0;
    self->active = 1;
    if (self->closed == NULL && (self->closed = PyList_New(0)) == NULL)
        return -1;
    if (self->owner_stack == NULL && (self->owner_stack = PyList_New(0)) == NULL)
        return -1;
    self->owner = PyThread_get_thread_ident(); /* self->local: made when another thread first comes */
    return 0;
}

static int
Recorder_traverse(Recorder *self, visitproc visit, void *arg)
{
    Py_VISIT(self->slow);
    Py_VISIT(self->starter);
    Py_VISIT(self->markers);
    Py_VISIT(self->counter);
    Py_VISIT(self->closed);
    Py_VISIT(self->owner_stack);
    Py_VISIT(self->local);
    return 0;
}

static int
Recorder_clear(Recorder *self)
{
    Py_CLEAR(self->slow);
    Py_CLEAR(self->starter);
    Py_CLEAR(self->markers);
    Py_CLEAR(self->counter);
    Py_CLEAR(self->closed);
    Py_CLEAR(self->owner_stack);
    Py_CLEAR(self->local);
    return 0;
}

static void
Recorder_dealloc(Recorder *self)
{
    PyObject_GC_UnTrack(self);
    Recorder_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* an empty marker node's position (new reference), NULL with an exception, or NULL without
 * one when the driver would not add the node (then the caller counts) */
static PyObject *
add_marker(Recorder *self)
{
    void *node = NULL;
    if (self->add_empty(&node, self->graph, NULL, 0) != 0 || node == NULL)
        return NULL;
    uint64_t id = 0;
    int rc = self->node_id(node, &id);
    if (rc != 0)
        return fp_node_id_error(rc);
    PyObject *pos = PyLong_FromUnsignedLongLong(id & 0xFFFFFFFFull);
    if (pos == NULL || PyList_Append(self->markers, pos) < 0) {
        Py_XDECREF(pos);
        return NULL;
    }
    return pos;
}

/* the edge's position now: a new reference to an int, None (not capturing), or NULL (error) */
static PyObject *
count_now(Recorder *self)
{
    if (self->starter != NULL) {
        PyObject *start = self->starter;
        self->starter = NULL;
        PyObject *r = PyObject_CallNoArgs(start);
        Py_DECREF(start);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    if (self->watch >= 0)
        return PyLong_FromLongLong(fp_watch_count(self->watch));
    if (self->marking) {
        PyObject *pos = add_marker(self);
        if (pos != NULL || PyErr_Occurred())
            return pos;
        self->marking = 0; /* the driver cannot: count from now on, as session._edge does */
        self->switch_at = -1;
    }
    if (self->get_nodes != NULL) {
        size_t n = 0;
        int rc = self->get_nodes(self->graph, NULL, &n);
        if (rc != 0)
            return fp_driver_error("cuGraphGetNodes", rc);
        if (self->switch_at >= 0 && (Py_ssize_t)n >= self->switch_at) {
            if (self->add_empty != NULL && self->node_id != NULL && self->markers != NULL) {
                self->marking = 1;
            } else if (self->slow != NULL && self->slow != Py_None) {
                self->get_nodes = NULL;
                Py_INCREF(self->slow);
                Py_XSETREF(self->counter, self->slow);
            }
        }
        return PyLong_FromSize_t(n);
    }
    if (self->counter == NULL || self->counter == Py_None)
        Py_RETURN_NONE;
    return PyObject_CallNoArgs(self->counter);
}

/* this thread's stack of open tokens (borrowed), created if ``create`` */
static PyObject *
thread_stack(Recorder *self, int create)
{
    if (self->owner == PyThread_get_thread_ident())
        return self->owner_stack;
    if (self->local == NULL) {
        if (!create)
            return NULL;
        if ((self->local = PyObject_CallNoArgs(local_type)) == NULL)
            return NULL;
    }
    PyObject *st = PyObject_GetAttr(self->local, str_stack);
    if (st != NULL) {
        Py_DECREF(st); /* the thread's local dict holds it */
        return st;
    }
    if (!PyErr_ExceptionMatches(PyExc_AttributeError))
        return NULL;
    PyErr_Clear();
    if (!create)
        return NULL;
    st = PyList_New(0);
    if (st == NULL)
        return NULL;
    int rc = PyObject_SetAttr(self->local, str_stack, st);
    Py_DECREF(st);
    return rc < 0 ? NULL : st;
}

PyDoc_STRVAR(open_doc, "open(fields, before=None) -> token: see scopes.ScopeRecorder.open");

static PyObject *
Recorder_open(Recorder *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    PyObject *fields = NULL, *before = Py_None;
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nargs + nkw < 1 || nargs + nkw > 2 || nargs < 1) {
        PyErr_SetString(PyExc_TypeError, "open(fields, before=None)");
        return NULL;
    }
    fields = args[0];
    if (nargs == 2)
        before = args[1];
    else if (nkw == 1) {
        if (!PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0)) ||
            PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), "before") != 0) {
            PyErr_SetString(PyExc_TypeError, "open(): unexpected keyword argument");
            return NULL;
        }
        before = args[1];
    }
    PyObject *count;
    if (before == Py_None && self->active) {
        count = count_now(self);
        if (count == NULL)
            return NULL;
    } else {
        Py_INCREF(before);
        count = before;
    }
    PyObject *tok = PyList_New(3);
    PyObject *seq = PyLong_FromLongLong(self->seq++);
    if (tok == NULL || seq == NULL) {
        Py_XDECREF(tok);
        Py_XDECREF(seq);
        Py_DECREF(count);
        return NULL;
    }
    Py_INCREF(fields);
    PyList_SET_ITEM(tok, 0, seq);
    PyList_SET_ITEM(tok, 1, fields);
    PyList_SET_ITEM(tok, 2, count);
    PyObject *st = thread_stack(self, 1);
    if (st == NULL || PyList_Append(st, tok) < 0) {
        Py_DECREF(tok);
        return NULL;
    }
    return tok;
}

PyDoc_STRVAR(close_doc, "close(token): see scopes.ScopeRecorder.close");

static PyObject *
Recorder_close(Recorder *self, PyObject *tok)
{
    if (!PyList_CheckExact(tok) || PyList_GET_SIZE(tok) != 3) {
        PyErr_SetString(PyExc_TypeError, "close(): not a token from open()");
        return NULL;
    }
    PyObject *st = thread_stack(self, 0);
    if (st == NULL && PyErr_Occurred())
        return NULL;
    if (st != NULL) {
        Py_ssize_t n = PyList_GET_SIZE(st);
        if (n > 0 && PyList_GET_ITEM(st, n - 1) == tok) {
            if (PyList_SetSlice(st, n - 1, n, NULL) < 0)
                return NULL;
        } else {
            for (Py_ssize_t i = 0; i < n; i++) {
                if (PyList_GET_ITEM(st, i) == tok) {
                    if (PyList_SetSlice(st, i, i + 1, NULL) < 0)
                        return NULL;
                    break;
                }
            }
        }
    }
    PyObject *start = PyList_GET_ITEM(tok, 2);
    if (start == Py_None || !self->active)
        Py_RETURN_NONE;
    PyObject *after = count_now(self);
    if (after == NULL)
        return NULL;
    if (after == Py_None) {
        Py_DECREF(after);
        Py_RETURN_NONE;
    }
    PyObject *rec = PyTuple_Pack(4, PyList_GET_ITEM(tok, 0), PyList_GET_ITEM(tok, 1), start, after);
    Py_DECREF(after);
    if (rec == NULL)
        return NULL;
    int rc = PyList_Append(self->closed, rec);
    Py_DECREF(rec);
    if (rc < 0)
        return NULL;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(snapshot_doc, "snapshot() -> the current node count (None outside capture)");

static PyObject *
Recorder_snapshot(Recorder *self, PyObject *unused)
{
    if (!self->active)
        Py_RETURN_NONE;
    return count_now(self);
}

PyDoc_STRVAR(open_fields_doc, "open_fields(upto=None) -> merged fields of this thread's open scopes (inner\n"
"wins); with ``upto`` (an open token) those of the scopes up to and including it");

static PyObject *
Recorder_open_fields(Recorder *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "open_fields(upto=None)");
        return NULL;
    }
    PyObject *upto = nargs == 1 ? args[0] : Py_None;
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    PyObject *st = thread_stack(self, 0);
    if (st == NULL) {
        if (PyErr_Occurred()) {
            Py_DECREF(out);
            return NULL;
        }
        return out;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(st); i++) {
        PyObject *tok = PyList_GET_ITEM(st, i);
        if (PyDict_Merge(out, PyList_GET_ITEM(tok, 1), 1) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        if (tok == upto)
            break;
    }
    return out;
}

PyDoc_STRVAR(set_counter_doc, "set_counter(counter): count with a Python callable from now on");

static PyObject *
Recorder_set_counter(Recorder *self, PyObject *counter)
{
    self->get_nodes = NULL;
    Py_INCREF(counter);
    Py_XSETREF(self->counter, counter);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_watch_doc, "set_watch(slot): edges read the node counter of _nodewatch.c's ``slot`` (-1: stop)");

static PyObject *
Recorder_set_watch(Recorder *self, PyObject *arg)
{
    long slot = PyLong_AsLong(arg);
    if (slot == -1 && PyErr_Occurred())
        return NULL;
    if (slot >= 0 && fp_watch_count((int)slot) < 0) {
        PyErr_Format(PyExc_ValueError, "set_watch(): no watch slot %ld", slot);
        return NULL;
    }
    self->watch = slot < 0 ? -1 : (int)slot;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_watch_starter_doc, "set_watch_starter(fn): call ``fn()`` once, at the next edge, before it is "
"positioned (None: not)");

static PyObject *
Recorder_set_watch_starter(Recorder *self, PyObject *fn)
{
    if (fn == Py_None) {
        Py_CLEAR(self->starter);
    } else {
        Py_INCREF(fn);
        Py_XSETREF(self->starter, fn);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(set_fast_doc,
"set_fast(get_nodes, graph, switch_at, slow, add_empty=None, node_id=None, markers=None)\n\n"
"Count ``graph``'s nodes with cuGraphGetNodes at address ``get_nodes``. Once a count reaches\n"
"``switch_at`` (>= 0; -1 never), every later edge adds an empty marker node\n"
"(cuGraphAddEmptyNode at ``add_empty``), reads its local id (cuptiGetGraphNodeId at\n"
"``node_id``), appends it to the list ``markers`` and returns it; without marker functions it\n"
"calls ``slow()`` instead. Where the driver will not add a marker, edges count again.");

static PyObject *
Recorder_set_fast(Recorder *self, PyObject *const *args, Py_ssize_t nargs)
{
    static const char usage[] = "set_fast(get_nodes, graph, switch_at, slow, add_empty=None, node_id=None, markers=None)";
    if (nargs != 4 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    get_nodes_fn fn = (get_nodes_fn)fp_as_pointer(args[0]);
    void *graph = fp_as_pointer(args[1]);
    Py_ssize_t switch_at = PyLong_AsSsize_t(args[2]);
    add_empty_fn add_empty = nargs == 7 ? (add_empty_fn)fp_as_pointer(args[4]) : NULL;
    node_id_fn node_id = nargs == 7 ? (node_id_fn)fp_as_pointer(args[5]) : NULL;
    PyObject *markers = nargs == 7 ? args[6] : Py_None;
    if (PyErr_Occurred())
        return NULL;
    if (fn == NULL) {
        PyErr_SetString(PyExc_ValueError, "set_fast(): get_nodes is NULL");
        return NULL;
    }
    if (markers != Py_None && !PyList_Check(markers)) {
        PyErr_SetString(PyExc_TypeError, "set_fast(): markers must be a list or None");
        return NULL;
    }
    self->get_nodes = fn;
    self->graph = graph;
    self->switch_at = switch_at;
    self->add_empty = add_empty;
    self->node_id = node_id;
    /* as session._edge: markers once the previous edge's position (0 before the first) reached switch_at */
    self->marking = switch_at == 0 && add_empty != NULL && node_id != NULL && markers != Py_None;
    Py_INCREF(args[3]);
    Py_XSETREF(self->slow, args[3]);
    if (markers == Py_None) {
        Py_CLEAR(self->markers);
    } else {
        Py_INCREF(markers);
        Py_XSETREF(self->markers, markers);
    }
    Py_RETURN_NONE;
}

static PyObject *
Recorder_get_active(Recorder *self, void *closure)
{
    return PyBool_FromLong(self->active);
}

static int
Recorder_set_active(Recorder *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "cannot delete 'active'");
        return -1;
    }
    int v = PyObject_IsTrue(value);
    if (v < 0)
        return -1;
    self->active = v;
    return 0;
}

static PyObject *
Recorder_get_closed(Recorder *self, void *closure)
{
    Py_INCREF(self->closed);
    return self->closed;
}

static PyObject *
Recorder_get_fast(Recorder *self, void *closure)
{
    return PyBool_FromLong(self->get_nodes != NULL);
}

static PyObject *
Recorder_get_marking(Recorder *self, void *closure)
{
    return PyBool_FromLong(self->marking);
}

static PyMethodDef Recorder_methods[] = {
    {"open", (PyCFunction)(void (*)(void))Recorder_open, METH_FASTCALL | METH_KEYWORDS, open_doc},
    {"close", (PyCFunction)Recorder_close, METH_O, close_doc},
    {"snapshot", (PyCFunction)Recorder_snapshot, METH_NOARGS, snapshot_doc},
    {"open_fields", (PyCFunction)(void (*)(void))Recorder_open_fields, METH_FASTCALL, open_fields_doc},
    {"set_counter", (PyCFunction)Recorder_set_counter, METH_O, set_counter_doc},
    {"set_watch", (PyCFunction)Recorder_set_watch, METH_O, set_watch_doc},
    {"set_watch_starter", (PyCFunction)Recorder_set_watch_starter, METH_O, set_watch_starter_doc},
    {"set_fast", (PyCFunction)(void (*)(void))Recorder_set_fast, METH_FASTCALL, set_fast_doc},
    {NULL}
};

static PyGetSetDef Recorder_getset[] = {
    {"active", (getter)Recorder_get_active, (setter)Recorder_set_active, "False once the capture finished", NULL},
    {"closed", (getter)Recorder_get_closed, NULL, "closed scopes: (seq, fields, start, end) tuples", NULL},
    {"fast", (getter)Recorder_get_fast, NULL, "True while edges are positioned in C (count or marker)", NULL},
    {"marking", (getter)Recorder_get_marking, NULL, "True while edges add marker nodes in C", NULL},
    {NULL}
};

static PyTypeObject RecorderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perfetto_graph_ann.capture._fastpath.Recorder",
    .tp_doc = PyDoc_STR("Scope recorder with open / close in C (scopes.ScopeRecorder's hot half)."),
    .tp_basicsize = sizeof(Recorder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Recorder_init,
    .tp_dealloc = (destructor)Recorder_dealloc,
    .tp_traverse = (traverseproc)Recorder_traverse,
    .tp_clear = (inquiry)Recorder_clear,
    .tp_methods = Recorder_methods,
    .tp_getset = Recorder_getset,
};

/* ---- for the other translation units (_fastpath.h) ------------------------------------ */

int
fp_is_recorder(PyObject *o)
{
    return PyObject_TypeCheck(o, &RecorderType);
}

int
fp_recorder_active(PyObject *rec)
{
    return ((Recorder *)rec)->active;
}

PyObject *
fp_recorder_open(PyObject *rec, PyObject *fields)
{
    return Recorder_open((Recorder *)rec, &fields, 1, NULL);
}

PyObject *
fp_recorder_close(PyObject *rec, PyObject *tok)
{
    return Recorder_close((Recorder *)rec, tok);
}

/* ---- for the module (_fastpath.c) ------------------------------------------------------ */

int
fp_recorder_ready(void)
{
    if (PyType_Ready(&RecorderType) < 0)
        return -1;
    if (local_type == NULL) {
        PyObject *thread = PyImport_ImportModule("_thread");
        if (thread == NULL)
            return -1;
        local_type = PyObject_GetAttrString(thread, "_local");
        Py_DECREF(thread);
        if (local_type == NULL)
            return -1;
    }
    if (str_stack == NULL && (str_stack = PyUnicode_InternFromString("stack")) == NULL)
        return -1;
    return 0;
}

int
fp_recorder_add(PyObject *module)
{
    Py_INCREF(&RecorderType);
    if (PyModule_AddObject(module, "Recorder", (PyObject *)&RecorderType) < 0) {
        Py_DECREF(&RecorderType);
        return -1;
    }
    return 0;
}
