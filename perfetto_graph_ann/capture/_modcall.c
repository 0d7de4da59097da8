/*
 * perfetto_graph_ann.capture._fastpath.ModuleCall: ``nn.Module._call_impl`` while a capture runs,
 * its common case in C (modules.py's ``ModuleHooks._wrap`` is the Python one it stands for).
 *
 * ModuleCall(orig, prepared, prepare, opened, session_local, current, grad, node, fallback), set
 * on ``nn.Module`` as ``_call_impl`` (``__call__`` on layouts without it): ``module(*args)``
 * finds the module's entry in ``prepared`` (id -> (weak reference, scope)), or asks
 * ``prepare(module)``; with no scope, or no capture for this thread, it is
 * ``orig(module, *args)``; with grad off and no autograd node running it opens the scope on the
 * session's recorder around ``orig`` (the token on this thread's list in ``opened``, so that
 * ``close_open`` can close it); anything else goes to ``fallback``, the Python wrapper
 * (``mark_kernels``' path). A scoped module call costs ~0.6 us here against ~7 us in Python on
 * the H200 (BENCHMARKS.md, "module scopes at capture").
 */
#include "_fastpath.h"

#include <pythread.h>
#include <stddef.h>

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *orig;      /* nn.Module's own _call_impl (or __call__) */
    PyObject *prepared;  /* dict: id(module) -> (weakref, scope or None) */
    PyObject *prepare;   /* prepare(module) -> such an entry */
    PyObject *opened;    /* dict: thread ident -> list of open items */
    PyObject *slocal;    /* session._local (attribute "stack": the thread's sessions) */
    PyObject *current;   /* session.current() */
    PyObject *grad;      /* torch.is_grad_enabled */
    PyObject *node;      /* torch._C._current_autograd_node, or None */
    PyObject *fallback;  /* the Python wrapper */
} ModuleCall;

static PyObject *str_stack_mc = NULL;     /* "stack" */
static PyObject *str_recorder_mc = NULL;  /* "recorder" */
static PyObject *str_open_mc = NULL;      /* "open" */
static PyObject *str_close_mc = NULL;     /* "close" */

static int
lookup_attr(PyObject *o, PyObject *name, PyObject **out)
{
#if PY_VERSION_HEX >= 0x030D0000
    return PyObject_GetOptionalAttr(o, name, out);
#else
    return _PyObject_LookupAttr(o, name, out);
#endif
}

/* whether the weak reference ``ref`` still points at ``o`` */
static int
referent_is(PyObject *ref, PyObject *o)
{
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *target = NULL;
    if (PyWeakref_GetRef(ref, &target) < 0) {
        PyErr_Clear();
        return 0;
    }
    Py_XDECREF(target);  /* o is alive (the caller holds it), so the comparison stays valid */
    return target == o;
#else
    return PyWeakref_GetObject(ref) == o;
#endif
}

/* the module's entry (new reference), from the cache or prepare(); NULL with an error */
static PyObject *
entry_of(ModuleCall *self, PyObject *module)
{
    PyObject *key = PyLong_FromVoidPtr(module);
    if (key == NULL)
        return NULL;
    PyObject *entry = PyDict_GetItemWithError(self->prepared, key);
    Py_DECREF(key);
    if (entry == NULL && PyErr_Occurred())
        return NULL;
    if (entry != NULL && PyTuple_CheckExact(entry) && PyTuple_GET_SIZE(entry) == 2 &&
        PyWeakref_CheckRef(PyTuple_GET_ITEM(entry, 0)) && referent_is(PyTuple_GET_ITEM(entry, 0), module)) {
        Py_INCREF(entry);
        return entry;
    }
    entry = PyObject_CallOneArg(self->prepare, module);
    if (entry != NULL && (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2)) {
        Py_DECREF(entry);
        PyErr_SetString(PyExc_TypeError, "ModuleCall: prepare() must return a 2-tuple");
        return NULL;
    }
    return entry;
}

/* the capture session of this thread (new reference; None: none), NULL with an error */
static PyObject *
session_now(ModuleCall *self)
{
    PyObject *st = NULL;
    if (lookup_attr(self->slocal, str_stack_mc, &st) < 0)
        return NULL;
    if (st != NULL && PyList_Check(st) && PyList_GET_SIZE(st) > 0) {
        PyObject *sess = PyList_GET_ITEM(st, PyList_GET_SIZE(st) - 1);
        Py_INCREF(sess);
        Py_DECREF(st);
        return sess;
    }
    Py_XDECREF(st);
    return PyObject_CallNoArgs(self->current);
}

/* 1: the scope needs mark_kernels' path (grad on, or inside an autograd node), 0: not, -1: error */
static int
needs_mark(ModuleCall *self)
{
    PyObject *g = PyObject_CallNoArgs(self->grad);
    if (g == NULL)
        return -1;
    int on = PyObject_IsTrue(g);
    Py_DECREF(g);
    if (on != 0 || self->node == Py_None)
        return on;
    PyObject *n = PyObject_CallNoArgs(self->node);
    if (n == NULL)
        return -1;
    int inside = n != Py_None;
    Py_DECREF(n);
    return inside;
}

/* this thread's list of open items (new reference), created if missing */
static PyObject *
open_list(ModuleCall *self)
{
    PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    if (ident == NULL)
        return NULL;
    PyObject *st = PyDict_GetItemWithError(self->opened, ident);
    if (st != NULL) {
        Py_INCREF(st);
    } else if (!PyErr_Occurred()) {
        st = PyList_New(0);
        if (st != NULL && PyDict_SetItem(self->opened, ident, st) < 0)
            Py_CLEAR(st);
    }
    Py_DECREF(ident);
    return st;
}

/* take ``item`` off ``st``: 1 if it was there, 0 if not (close_open took it), -1 on error */
static int
take_item(PyObject *st, PyObject *item)
{
    Py_ssize_t n = PyList_GET_SIZE(st);
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        if (PyList_GET_ITEM(st, i) == item)
            return PyList_SetSlice(st, i, i + 1, NULL) < 0 ? -1 : 1;
    }
    return 0;
}

static PyObject *
scoped_call(ModuleCall *self, PyObject *sess, PyObject *fields, PyObject *const *args, size_t nargsf,
            PyObject *kwnames)
{
    PyObject *rec = PyObject_GetAttr(sess, str_recorder_mc);
    if (rec == NULL)
        return NULL;
    int fast = fp_is_recorder(rec);
    PyObject *tok = fast ? fp_recorder_open(rec, fields) : PyObject_CallMethodOneArg(rec, str_open_mc, fields);
    if (tok == NULL) {
        Py_DECREF(rec);
        return NULL;
    }
    PyObject *item = PyTuple_Pack(2, rec, tok);
    PyObject *st = item != NULL ? open_list(self) : NULL;
    if (st == NULL || PyList_Append(st, item) < 0) {
        PyObject *r = fast ? fp_recorder_close(rec, tok) : PyObject_CallMethodOneArg(rec, str_close_mc, tok);
        Py_XDECREF(r);
        Py_XDECREF(st);
        Py_XDECREF(item);
        Py_DECREF(tok);
        Py_DECREF(rec);
        return NULL;
    }
    PyObject *res = PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    PyObject *et = NULL, *ev = NULL, *etb = NULL;
    if (res == NULL)
        PyErr_Fetch(&et, &ev, &etb);
    int failed = 0;
    int was_open = take_item(st, item);
    if (was_open < 0) {
        failed = 1;
    } else if (was_open) {
        PyObject *r = fast ? fp_recorder_close(rec, tok) : PyObject_CallMethodOneArg(rec, str_close_mc, tok);
        if (r == NULL)
            failed = 1;
        Py_XDECREF(r);
    }
    Py_DECREF(st);
    Py_DECREF(item);
    Py_DECREF(tok);
    Py_DECREF(rec);
    if (failed) {  /* as a Python finally: the closing error replaces the call's outcome */
        Py_XDECREF(res);
        Py_XDECREF(et);
        Py_XDECREF(ev);
        Py_XDECREF(etb);
        return NULL;
    }
    if (res == NULL)
        PyErr_Restore(et, ev, etb);
    return res;
}

static PyObject *
ModuleCall_vectorcall(ModuleCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    if (PyVectorcall_NARGS(nargsf) < 1)
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *entry = entry_of(self, args[0]);
    if (entry == NULL)
        return NULL;
    PyObject *scope = PyTuple_GET_ITEM(entry, 1);
    if (scope == Py_None) {
        Py_DECREF(entry);
        return PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    }
    PyObject *sess = session_now(self);
    if (sess == NULL) {
        Py_DECREF(entry);
        return NULL;
    }
    if (sess == Py_None) {  /* another thread's eager call while a capture runs elsewhere */
        Py_DECREF(sess);
        Py_DECREF(entry);
        return PyObject_Vectorcall(self->orig, args, nargsf, kwnames);
    }
    int mark = needs_mark(self);
    if (mark != 0 || !PyTuple_Check(scope) || PyTuple_GET_SIZE(scope) < 1) {
        Py_DECREF(sess);
        Py_DECREF(entry);
        return mark < 0 ? NULL : PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    }
    PyObject *res = scoped_call(self, sess, PyTuple_GET_ITEM(scope, 0), args, nargsf, kwnames);
    Py_DECREF(sess);
    Py_DECREF(entry);
    return res;
}

static PyObject *
ModuleCall_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *a[9];
    if (!PyArg_ParseTuple(args, "OO!OO!OOOOO:ModuleCall", &a[0], &PyDict_Type, &a[1], &a[2], &PyDict_Type, &a[3],
                          &a[4], &a[5], &a[6], &a[7], &a[8]))
        return NULL;
    if (!PyCallable_Check(a[0]) || !PyCallable_Check(a[2]) || !PyCallable_Check(a[5]) ||
        !PyCallable_Check(a[6]) || (a[7] != Py_None && !PyCallable_Check(a[7])) || !PyCallable_Check(a[8])) {
        PyErr_SetString(PyExc_TypeError, "ModuleCall: orig, prepare, current, grad, node (or None) and fallback "
                                         "must be callable");
        return NULL;
    }
    ModuleCall *self = (ModuleCall *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    PyObject **slots[9] = {&self->orig, &self->prepared, &self->prepare, &self->opened, &self->slocal,
                           &self->current, &self->grad, &self->node, &self->fallback};
    for (int i = 0; i < 9; i++) {
        Py_INCREF(a[i]);
        *slots[i] = a[i];
    }
    self->vectorcall = (vectorcallfunc)ModuleCall_vectorcall;
    return (PyObject *)self;
}

static PyObject *
ModuleCall_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

static int
ModuleCall_traverse(ModuleCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->orig);
    Py_VISIT(self->prepared);
    Py_VISIT(self->prepare);
    Py_VISIT(self->opened);
    Py_VISIT(self->slocal);
    Py_VISIT(self->current);
    Py_VISIT(self->grad);
    Py_VISIT(self->node);
    Py_VISIT(self->fallback);
    return 0;
}

static int
ModuleCall_clear(ModuleCall *self)
{
    Py_CLEAR(self->orig);
    Py_CLEAR(self->prepared);
    Py_CLEAR(self->prepare);
    Py_CLEAR(self->opened);
    Py_CLEAR(self->slocal);
    Py_CLEAR(self->current);
    Py_CLEAR(self->grad);
    Py_CLEAR(self->node);
    Py_CLEAR(self->fallback);
    return 0;
}

static void
ModuleCall_dealloc(ModuleCall *self)
{
    PyObject_GC_UnTrack(self);
    ModuleCall_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
ModuleCall_get_wrapped(ModuleCall *self, void *closure)
{
    Py_INCREF(self->orig);
    return self->orig;
}

static PyGetSetDef ModuleCall_getset[] = {
    {"__wrapped__", (getter)ModuleCall_get_wrapped, NULL, "nn.Module's own _call_impl (or __call__)", NULL},
    {NULL}
};

static PyTypeObject ModuleCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perfetto_graph_ann.capture._fastpath.ModuleCall",
    .tp_doc = PyDoc_STR("ModuleCall(orig, prepared, prepare, opened, session_local, current, grad, node, "
                        "fallback): nn.Module._call_impl with module scopes while a capture runs (modules.py)."),
    .tp_basicsize = sizeof(ModuleCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(ModuleCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = ModuleCall_new,
    .tp_descr_get = ModuleCall_get,
    .tp_dealloc = (destructor)ModuleCall_dealloc,
    .tp_traverse = (traverseproc)ModuleCall_traverse,
    .tp_clear = (inquiry)ModuleCall_clear,
    .tp_getset = ModuleCall_getset,
};

int
fp_modcall_ready(void)
{
    if ((str_stack_mc == NULL && (str_stack_mc = PyUnicode_InternFromString("stack")) == NULL) ||
        (str_recorder_mc == NULL && (str_recorder_mc = PyUnicode_InternFromString("recorder")) == NULL) ||
        (str_open_mc == NULL && (str_open_mc = PyUnicode_InternFromString("open")) == NULL) ||
        (str_close_mc == NULL && (str_close_mc = PyUnicode_InternFromString("close")) == NULL))
        return -1;
    return PyType_Ready(&ModuleCallType);
}

int
fp_modcall_add(PyObject *module)
{
    Py_INCREF(&ModuleCallType);
    if (PyModule_AddObject(module, "ModuleCall", (PyObject *)&ModuleCallType) < 0) {
        Py_DECREF(&ModuleCallType);
        return -1;
    }
    return 0;
}
