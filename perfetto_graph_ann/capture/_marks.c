/*
 * perfetto_graph_ann.capture._fastpath.Mark: mark_kernels' enter and exit on the common path.
 *
 * capture/marks.py subclasses Mark (mark_kernels) and keeps the whole behaviour in Python
 * (_enter_py, _exit_py, _exit_region): this file does the common case of a scope inside our
 * capture without a Python frame, and hands everything else to those methods:
 *   enter: the thread's capture in flight (session._local.stack[-1]) with a compiled recorder,
 *          not inside a backward node, the torch module the setup saw, the compiled path
 *          enabled (fastpath.ENABLED); then the recorder's token and, with backward=True, the
 *          region's start (autograd._peek()), grad mode and its push on the thread's open
 *          regions (autograd._tls.table.open), as autograd.enter_region does.
 *   exit:  the region's end; a region in which no node was made is only popped (one with
 *          nodes goes to _exit_region); then the token is closed.
 * Setup (marks.py, once; again whenever sys.modules["torch"] changes): mark_setup(session
 * local, autograd module, fastpath module, normalize) and mark_torch(torch,
 * current_autograd_node, is_grad_enabled[, peek, grad_mode]): the last two are addresses of
 * the C++ functions behind autograd's counter reader and grad mode (at::sequence_number::peek,
 * c10::GradMode::is_enabled), 0 where not found or where they did not agree with torch's
 * Python functions (marks.py checks): each saves a call into torch's Python bindings (pybind11
 * for the counter) at a scope edge, whose code runs cold there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdbool.h>
#include <stdint.h>
#include "_fastpath.h"

typedef struct {
    PyObject_HEAD
    PyObject *fields;     /* normalized annotation */
    PyObject *annotation; /* as given */
    PyObject *sess;       /* capture session the token belongs to */
    PyObject *tok;        /* recorder token */
    PyObject *native;     /* torch's own mark_kernels context, if used */
    PyObject *range;      /* autograd.Range, built on demand (Python) */
    PyObject *start;      /* first node number of the region (int) */
    PyObject *rec;        /* the compiled recorder the C enter opened the token on (to close it) */
    PyObject *open;       /* the thread's open regions the C enter appended this region to */
    char backward;
    char region;          /* a region is open */
    char grad;            /* grad mode at entry */
} Mark;

static PyObject *session_local = NULL;  /* session._local */
static PyObject *autograd_dict = NULL;  /* vars(autograd) */
static PyObject *autograd_tls = NULL;   /* autograd._tls */
static PyObject *fastpath_dict = NULL;  /* vars(capture.fastpath) */
static PyObject *normalize = NULL;      /* scopes.normalize_annotation */
static PyObject *cfg_torch = NULL;      /* the torch module of mark_torch */
static PyObject *current_node = NULL;   /* torch._C._current_autograd_node */
static PyObject *is_grad_enabled = NULL;
typedef uint64_t (*peek_c_fn)(void);
typedef bool (*grad_c_fn)(void);
static peek_c_fn c_peek = NULL;         /* at::sequence_number::peek, or NULL */
static grad_c_fn c_grad = NULL;         /* c10::GradMode::is_enabled, or NULL */

static PyObject *s_stack, *s_recorder, *s_torch, *s_ENABLED, *s_peek, *s_peek_owner, *s_uses, *s_orig,
                *s_table, *s_open, *s_close, *s_enter_region, *s_table_fn, *s_enter_py, *s_exit_py,
                *s_exit_region, *s_name, *s_stream, *s_backward;

/* ---- setup ------------------------------------------------------------------------------ */

static PyObject *
mark_setup(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "mark_setup(session_local, autograd, fastpath, normalize)");
        return NULL;
    }
    PyObject *d = PyModule_GetDict(args[1]);
    if (d == NULL)
        return NULL;
    PyObject *tls = PyDict_GetItemString(d, "_tls");
    if (tls == NULL) {
        PyErr_SetString(PyExc_AttributeError, "mark_setup: autograd has no _tls");
        return NULL;
    }
    Py_INCREF(args[0]);
    Py_XSETREF(session_local, args[0]);
    Py_INCREF(d);
    Py_XSETREF(autograd_dict, d);
    Py_INCREF(tls);
    Py_XSETREF(autograd_tls, tls);
    PyObject *fd = PyModule_GetDict(args[2]);
    if (fd == NULL)
        return NULL;
    Py_INCREF(fd);
    Py_XSETREF(fastpath_dict, fd);
    Py_INCREF(args[3]);
    Py_XSETREF(normalize, args[3]);
    Py_RETURN_NONE;
}

static PyObject *
mark_torch(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 && nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "mark_torch(torch, current_autograd_node, is_grad_enabled[, peek, grad_mode])");
        return NULL;
    }
    void *addr[2] = {NULL, NULL};
    for (Py_ssize_t i = 3; i < nargs; i++) {
        addr[i - 3] = PyLong_AsVoidPtr(args[i]);
        if (addr[i - 3] == NULL && PyErr_Occurred())
            return NULL;
    }
    for (int i = 0; i < 3; i++)
        Py_INCREF(args[i]);
    Py_XSETREF(cfg_torch, args[0]);
    Py_XSETREF(current_node, args[1]);
    Py_XSETREF(is_grad_enabled, args[2]);
    c_peek = (peek_c_fn)addr[0];
    c_grad = (grad_c_fn)addr[1];
    Py_RETURN_NONE;
}

/* ---- the type --------------------------------------------------------------------------- */

/* scopes.normalize_annotation for an exact dict whose keys are all str and whose "stream" is
 * None or an int (not a bool): its copy (new reference). NULL without an exception for
 * anything else (the Python function then copies it or raises its error). */
static PyObject *
plain_dict_copy(PyObject *annotation)
{
    if (!PyDict_CheckExact(annotation))
        return NULL;
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(annotation, &pos, &k, &v)) {
        if (!PyUnicode_Check(k))
            return NULL;
    }
    PyObject *lane = PyDict_GetItemWithError(annotation, s_stream);
    if (lane == NULL && PyErr_Occurred())
        return NULL;
    if (lane != NULL && lane != Py_None && (!PyLong_Check(lane) || PyBool_Check(lane)))
        return NULL;
    return PyDict_Copy(annotation);
}

static int
Mark_init(Mark *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"annotation", "backward", NULL};
    PyObject *annotation, *bw = NULL;
    int backward = 1;
    /* (annotation) or (annotation, backward=x) without the general parser; anything else, and
     * its errors, through it */
    if (PyTuple_GET_SIZE(args) == 1 &&
        (kw == NULL || (PyDict_GET_SIZE(kw) == 1 && (bw = PyDict_GetItemWithError(kw, s_backward)) != NULL))) {
        annotation = PyTuple_GET_ITEM(args, 0);
        if (bw != NULL && (backward = PyObject_IsTrue(bw)) < 0)
            return -1;
    } else if (PyErr_Occurred() ||
               !PyArg_ParseTupleAndKeywords(args, kw, "O|$p:mark_kernels", kwlist, &annotation, &backward)) {
        return -1;
    }
    PyObject *fields;
    if (PyUnicode_CheckExact(annotation)) {
        fields = PyDict_New();
        if (fields == NULL || PyDict_SetItem(fields, s_name, annotation) < 0) {
            Py_XDECREF(fields);
            return -1;
        }
    } else if ((fields = plain_dict_copy(annotation)) != NULL) {
        ;
    } else if (PyErr_Occurred()) {
        return -1;
    } else {
        if (normalize == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "mark_kernels: _fastpath.mark_setup was not called");
            return -1;
        }
        fields = PyObject_CallOneArg(normalize, annotation);
        if (fields == NULL)
            return -1;
    }
    Py_XSETREF(self->fields, fields);
    Py_INCREF(annotation);
    Py_XSETREF(self->annotation, annotation);
    Py_CLEAR(self->sess);
    Py_CLEAR(self->tok);
    Py_CLEAR(self->native);
    Py_CLEAR(self->range);
    Py_CLEAR(self->start);
    Py_CLEAR(self->rec);
    Py_CLEAR(self->open);
    self->backward = (char)backward;
    self->region = 0;
    self->grad = 0;
    return 0;
}

static int
Mark_traverse(Mark *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fields);
    Py_VISIT(self->annotation);
    Py_VISIT(self->sess);
    Py_VISIT(self->tok);
    Py_VISIT(self->native);
    Py_VISIT(self->range);
    Py_VISIT(self->start);
    Py_VISIT(self->rec);
    Py_VISIT(self->open);
    return 0;
}

static int
Mark_clear(Mark *self)
{
    Py_CLEAR(self->fields);
    Py_CLEAR(self->annotation);
    Py_CLEAR(self->sess);
    Py_CLEAR(self->tok);
    Py_CLEAR(self->native);
    Py_CLEAR(self->range);
    Py_CLEAR(self->start);
    Py_CLEAR(self->rec);
    Py_CLEAR(self->open);
    return 0;
}

static void
Mark_dealloc(Mark *self)
{
    PyObject_GC_UnTrack(self);
    Mark_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* borrowed item of autograd's globals, NULL without an exception when missing */
static PyObject *
ag(PyObject *name)
{
    return PyDict_GetItemWithError(autograd_dict, name);
}

/* 1: the compiled path may run; 0: hand over to Python; -1: error */
static int
fast_ok(void)
{
    if (autograd_dict == NULL || cfg_torch == NULL)
        return 0;
    PyObject *en = PyDict_GetItemWithError(fastpath_dict, s_ENABLED);
    if (en != Py_True)
        return PyErr_Occurred() ? -1 : 0;
    PyObject *torch = PyDict_GetItemWithError(PyImport_GetModuleDict(), s_torch);
    if (torch == NULL)
        return PyErr_Occurred() ? -1 : 0;
    return torch == cfg_torch;
}

/* the peek function when the cached one is for this torch, else NULL (borrowed; no exception) */
static PyObject *
peek_fn(void)
{
    PyObject *peek = ag(s_peek), *owner = ag(s_peek_owner);
    if (peek == NULL || peek == Py_None || owner != cfg_torch)
        return NULL;
    return peek;
}

/* read the counter through c_peek: there is one, and autograd's reader (whose numbers the
 * Python side computes with) does not use a number up, so both read the same counter */
static int
native_peek(void)
{
    return c_peek != NULL && ag(s_uses) != Py_True;
}

/* this thread's RangeTable.open list (new reference), or NULL with an exception */
static PyObject *
open_regions(void)
{
    PyObject *table = PyObject_GetAttr(autograd_tls, s_table);
    if (table == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        PyObject *fn = ag(s_table_fn);
        if (fn == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_AttributeError, "autograd._table");
            return NULL;
        }
        if ((table = PyObject_CallNoArgs(fn)) == NULL)
            return NULL;
    }
    PyObject *open = PyObject_GetAttr(table, s_open);
    Py_DECREF(table);
    if (open != NULL && !PyList_Check(open)) {
        Py_DECREF(open);
        PyErr_SetString(PyExc_TypeError, "RangeTable.open must be a list");
        return NULL;
    }
    return open;
}

static int
region_enter(Mark *self)
{
    PyObject *peek = peek_fn();
    PyObject *orig = ag(s_orig);
    if (PyErr_Occurred())
        return -1;
    Py_CLEAR(self->range);
    self->region = 1;
    if (peek == NULL || orig == NULL || orig == Py_None) {  /* first region, or the counter reader is stale */
        PyObject *fn = ag(s_enter_region);
        if (fn == NULL) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_AttributeError, "autograd.enter_region");
            return -1;
        }
        PyObject *r = PyObject_CallOneArg(fn, (PyObject *)self);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    int grad;
    if (c_grad != NULL) {
        grad = c_grad() ? 1 : 0;
    } else {
        PyObject *g = PyObject_CallNoArgs(is_grad_enabled);
        if (g == NULL)
            return -1;
        grad = PyObject_IsTrue(g);
        Py_DECREF(g);
        if (grad < 0)
            return -1;
    }
    PyObject *start = native_peek() ? PyLong_FromUnsignedLongLong(c_peek()) : PyObject_CallNoArgs(peek);
    if (start == NULL)
        return -1;
    Py_XSETREF(self->start, start);
    self->grad = (char)grad;
    PyObject *open = open_regions();
    if (open == NULL)
        return -1;
    if (PyList_Append(open, (PyObject *)self) < 0) {
        Py_DECREF(open);
        return -1;
    }
    Py_XSETREF(self->open, open);  /* the exit pops it from there: a block exits on its thread */
    return 0;
}

static PyObject *
Mark_enter(Mark *self, PyObject *unused)
{
    int ok = fast_ok();
    if (ok < 0)
        return NULL;
    PyObject *st = NULL, *sess = NULL, *rec = NULL, *node = NULL;
    if (!ok)
        goto slow;
    st = PyObject_GetAttr(session_local, s_stack);
    if (st == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
        goto slow;
    }
    if (!PyList_Check(st) || PyList_GET_SIZE(st) == 0)
        goto slow;
    sess = PyList_GET_ITEM(st, PyList_GET_SIZE(st) - 1);
    Py_INCREF(sess);
    if ((rec = PyObject_GetAttr(sess, s_recorder)) == NULL)
        goto fail;
    if (!fp_is_recorder(rec))
        goto slow;
    Py_CLEAR(self->sess);
    Py_CLEAR(self->tok);
    Py_CLEAR(self->native);
    Py_CLEAR(self->rec);
    Py_CLEAR(self->open);
    self->region = 0;
    if (!fp_recorder_active(rec))
        goto done;
    if ((node = PyObject_CallNoArgs(current_node)) == NULL)
        goto fail;
    if (node != Py_None)  /* a forward re-run inside backward: Python adds the phase */
        goto slow;
    PyObject *tok = fp_recorder_open(rec, self->fields);
    if (tok == NULL)
        goto fail;
    self->tok = tok;
    self->sess = sess;
    sess = NULL;
    self->rec = rec;
    rec = NULL;
    if (self->backward && region_enter(self) < 0)
        goto fail;
done:
    Py_XDECREF(node);
    Py_XDECREF(rec);
    Py_XDECREF(sess);
    Py_XDECREF(st);
    Py_INCREF(self);
    return (PyObject *)self;
slow:
    Py_XDECREF(node);
    Py_XDECREF(rec);
    Py_XDECREF(sess);
    Py_XDECREF(st);
    return PyObject_CallMethodNoArgs((PyObject *)self, s_enter_py);
fail:
    Py_XDECREF(node);
    Py_XDECREF(rec);
    Py_XDECREF(sess);
    Py_XDECREF(st);
    return NULL;
}

/* pop ``self`` from this thread's open regions (the innermost, else wherever it is) */
static int
region_pop(Mark *self)
{
    PyObject *open = self->open;
    self->open = NULL;
    if (open == NULL && (open = open_regions()) == NULL)
        return -1;
    Py_ssize_t n = PyList_GET_SIZE(open);
    int rc = 0;
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        if (PyList_GET_ITEM(open, i) == (PyObject *)self) {
            rc = PyList_SetSlice(open, i, i + 1, NULL);
            break;
        }
    }
    Py_DECREF(open);
    return rc;
}

static int
region_exit(Mark *self)
{
    self->region = 0;
    /* entered in C (the list kept): the enter's checks hold; else as the enter would decide */
    PyObject *peek = (self->open != NULL || fast_ok() == 1) ? peek_fn() : NULL;
    if (PyErr_Occurred())
        return -1;
    PyObject *end = peek == NULL || self->start == NULL ? NULL
                    : native_peek() ? PyLong_FromUnsignedLongLong(c_peek()) : PyObject_CallNoArgs(peek);
    if (end == NULL) {
        if (PyErr_Occurred())
            return -1;
        PyObject *r = PyObject_CallMethodOneArg((PyObject *)self, s_exit_region, Py_None);
        Py_XDECREF(r);
        return r == NULL ? -1 : 0;
    }
    PyObject *uses = ag(s_uses);
    long long e = PyLong_AsLongLong(end), s = PyLong_AsLongLong(self->start);
    if (PyErr_Occurred()) {
        Py_DECREF(end);
        return -1;
    }
    long long created = e - s - (uses == Py_True ? 1 : 0);
    int rc;
    if (created > 0) {
        PyObject *r = PyObject_CallMethodOneArg((PyObject *)self, s_exit_region, end);
        Py_XDECREF(r);
        rc = r == NULL ? -1 : 0;
    } else {
        rc = region_pop(self);
    }
    Py_DECREF(end);
    return rc;
}

static PyObject *
Mark_exit(Mark *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (self->native != NULL && self->native != Py_None)
        return PyObject_VectorcallMethod(s_exit_py, (PyObject *[]){(PyObject *)self, nargs > 0 ? args[0] : Py_None,
                                         nargs > 1 ? args[1] : Py_None, nargs > 2 ? args[2] : Py_None},
                                         4, NULL);
    if (self->region && region_exit(self) < 0)
        return NULL;
    Py_CLEAR(self->open);  /* a region handed to Python's exit was popped there */
    if (self->tok != NULL && self->tok != Py_None && self->sess != NULL) {
        PyObject *rec = self->rec;
        self->rec = NULL;
        if (rec == NULL && (rec = PyObject_GetAttr(self->sess, s_recorder)) == NULL)
            return NULL;
        PyObject *r = fp_is_recorder(rec) ? fp_recorder_close(rec, self->tok)
                                          : PyObject_CallMethodOneArg(rec, s_close, self->tok);
        Py_DECREF(rec);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static PyMethodDef Mark_methods[] = {
    {"__enter__", (PyCFunction)Mark_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))Mark_exit, METH_FASTCALL, NULL},
    {NULL}
};

static PyMemberDef Mark_members[] = {
    {"fields", T_OBJECT, offsetof(Mark, fields), 0, "the annotation as a dict"},
    {"annotation", T_OBJECT, offsetof(Mark, annotation), 0, "the annotation as given"},
    {"backward", T_BOOL, offsetof(Mark, backward), 0, "carry the fields to the backward kernels"},
    {"_sess", T_OBJECT, offsetof(Mark, sess), 0, NULL},
    {"_tok", T_OBJECT, offsetof(Mark, tok), 0, NULL},
    {"_native", T_OBJECT, offsetof(Mark, native), 0, NULL},
    {"_range", T_OBJECT, offsetof(Mark, range), 0, NULL},
    {"_region", T_BOOL, offsetof(Mark, region), 0, NULL},
    {"start", T_OBJECT, offsetof(Mark, start), 0, "the region's first node number"},
    {"grad", T_BOOL, offsetof(Mark, grad), 0, "grad mode at entry"},
    {NULL}
};

static PyTypeObject MarkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perfetto_graph_ann.capture._fastpath.Mark",
    .tp_doc = PyDoc_STR("mark_kernels' state and its enter / exit on the common path (marks.py subclasses it)."),
    .tp_basicsize = sizeof(Mark),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Mark_init,
    .tp_dealloc = (destructor)Mark_dealloc,
    .tp_traverse = (traverseproc)Mark_traverse,
    .tp_clear = (inquiry)Mark_clear,
    .tp_methods = Mark_methods,
    .tp_members = Mark_members,
};

static PyMethodDef mark_functions[] = {
    {"mark_setup", (PyCFunction)(void (*)(void))mark_setup, METH_FASTCALL,
     "mark_setup(session_local, autograd, fastpath, normalize): what Mark reads"},
    {"mark_torch", (PyCFunction)(void (*)(void))mark_torch, METH_FASTCALL,
     "mark_torch(torch, current_autograd_node, is_grad_enabled[, peek, grad_mode]): the torch Mark's fast "
     "path serves, and the addresses of its C++ counter reader and grad mode (0: call the Python ones)"},
    {NULL}
};

int
fp_mark_ready(void)
{
    struct { PyObject **p; const char *s; } names[] = {
        {&s_stack, "stack"}, {&s_recorder, "recorder"}, {&s_torch, "torch"}, {&s_ENABLED, "ENABLED"},
        {&s_peek, "_peek"}, {&s_peek_owner, "_peek_owner"}, {&s_uses, "_peek_uses_a_number"},
        {&s_orig, "_orig_run_backward"}, {&s_table, "table"}, {&s_open, "open"}, {&s_close, "close"},
        {&s_enter_region, "enter_region"}, {&s_table_fn, "_table"}, {&s_enter_py, "_enter_py"},
        {&s_exit_py, "_exit_py"}, {&s_exit_region, "_exit_region"}, {&s_name, "name"},
        {&s_stream, "stream"}, {&s_backward, "backward"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (*names[i].p == NULL && (*names[i].p = PyUnicode_InternFromString(names[i].s)) == NULL)
            return -1;
    return PyType_Ready(&MarkType);
}

int
fp_mark_add(PyObject *module)
{
    Py_INCREF(&MarkType);
    if (PyModule_AddObject(module, "Mark", (PyObject *)&MarkType) < 0) {
        Py_DECREF(&MarkType);
        return -1;
    }
    return PyModule_AddFunctions(module, mark_functions);
}
