/*
 * Who holds which module, in one pass over the objects the garbage collector tracks: the pass
 * of capture/owners.py (which says why and what) in C. Python reads the same with one scan of
 * a module's referrers per question and one pass of gc.get_objects() in Python, ~25-100 ns an
 * object of the process each; here one pass answers them all at a few ns an object
 * (BENCHMARKS.md, "naming a root in one pass").
 *
 * Two phases, because the collector's lists must not change while they are walked: the walk
 * only reads (types, dict values) and notes pointers in memory of its own; then, with every
 * noted object held and the collector disabled (so that no finalizer of the program runs and
 * changes a dict under us), the answers are built as Python objects.
 */
#include "_fastpath.h"

typedef struct {
    PyObject **items;
    Py_ssize_t n, cap;
} ptr_list;

typedef struct {
    PyTypeObject *module_type;
    ptr_list dicts;   /* dicts that could be a module's _modules: every value None or a module, one a module */
    ptr_list modules; /* instances of module_type */
    int failed;
} scan_state;

static int
ptr_push(ptr_list *l, PyObject *o)
{
    if (l->n == l->cap) {
        Py_ssize_t cap = l->cap ? l->cap * 2 : 1024;
        PyObject **items = PyMem_RawRealloc(l->items, (size_t)cap * sizeof(PyObject *));
        if (items == NULL)
            return -1;
        l->items = items;
        l->cap = cap;
    }
    l->items[l->n++] = o;
    return 0;
}

static void
ptr_release(ptr_list *l, int held)
{
    if (held)
        for (Py_ssize_t i = 0; i < l->n; i++)
            Py_DECREF(l->items[i]);
    PyMem_RawFree(l->items);
    l->items = NULL;
    l->n = l->cap = 0;
}

/* Whether every value of ``d`` is None or a module and one is a module (reads only). */
static int
modules_like(PyObject *d, PyTypeObject *module_type)
{
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int any = 0;
    while (PyDict_Next(d, &pos, &key, &value)) {
        if (value == Py_None)
            continue;
        if (!PyObject_TypeCheck(value, module_type))
            return 0;
        any = 1;
    }
    return any;
}

/* The walk's visitor: notes ``o`` where it is such a dict or a module; allocates no object. */
static int
note_object(PyObject *o, void *arg)
{
    scan_state *s = (scan_state *)arg;
    int rc = 0;
    if (PyDict_Check(o)) {
        if (modules_like(o, s->module_type))
            rc = ptr_push(&s->dicts, o);
    }
    else if (PyObject_TypeCheck(o, s->module_type)) {
        rc = ptr_push(&s->modules, o);
    }
    if (rc < 0) {
        s->failed = 1;
        return 0;
    }
    return 1;
}

/* Every tracked object through note_object: the collector's own walk where Python has one (3.12),
 * else the list gc.get_objects() makes (the same objects). 0, or -1 with an exception set. */
static int
walk_objects(scan_state *s)
{
#if PY_VERSION_HEX >= 0x030C0000
    PyUnstable_GC_VisitObjects(note_object, s);
    return 0;
#else
    PyObject *gc = PyImport_ImportModule("gc");
    if (gc == NULL)
        return -1;
    PyObject *objects = PyObject_CallMethod(gc, "get_objects", NULL);
    Py_DECREF(gc);
    if (objects == NULL)
        return -1;
    if (!PyList_CheckExact(objects)) {
        Py_DECREF(objects);
        PyErr_SetString(PyExc_TypeError, "gc.get_objects() did not return a list");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(objects); i++)
        if (!note_object(PyList_GET_ITEM(objects, i), s))
            break;
    Py_DECREF(objects);  /* the noted objects are tracked by the collector, hence alive: held below */
    return 0;
#endif
}

/* holders[id(child)] += [(owner, name)] for the str-keyed, non-None items of ``owner._modules``
 * (read from the instance's own dict: no code of the program runs). 0, or -1 with an exception. */
static int
add_owner(PyObject *holders, PyObject *owner, PyObject *str_modules)
{
    PyObject *d = PyObject_GenericGetDict(owner, NULL);
    if (d == NULL) {  /* no instance dict: not an owner */
        PyErr_Clear();
        return 0;
    }
    int rc = 0;
    PyObject *mods = PyDict_CheckExact(d) ? PyDict_GetItemWithError(d, str_modules) : NULL;
    if (mods == NULL || !PyDict_Check(mods)) {
        rc = PyErr_Occurred() ? -1 : 0;
        Py_DECREF(d);
        return rc;
    }
    Py_INCREF(mods);
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (rc == 0 && PyDict_Next(mods, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key) || value == Py_None)
            continue;
        PyObject *id = PyLong_FromVoidPtr(value);
        PyObject *item = id != NULL ? Py_BuildValue("(OO)", owner, key) : NULL;
        PyObject *list = item != NULL ? PyDict_GetItemWithError(holders, id) : NULL;
        if (item == NULL || (list == NULL && PyErr_Occurred())) {
            rc = -1;
        }
        else if (list != NULL) {
            rc = PyList_Append(list, item);
        }
        else if ((list = PyList_New(1)) == NULL) {
            rc = -1;
        }
        else {
            Py_INCREF(item);
            PyList_SET_ITEM(list, 0, item);
            rc = PyDict_SetItem(holders, id, list);
            Py_DECREF(list);
        }
        Py_XDECREF(item);
        Py_XDECREF(id);
    }
    Py_DECREF(mods);
    Py_DECREF(d);
    return rc;
}

/* counts[id(module)] += 1 for each module among the values of ``d`` (each once, however many
 * keys it has there). 0, or -1 with an exception set. */
static int
count_dict(PyObject *counts, PyObject *d)
{
    PyObject *seen = PySet_New(NULL);
    if (seen == NULL)
        return -1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int rc = 0;
    while (rc == 0 && PyDict_Next(d, &pos, &key, &value)) {
        if (value == Py_None)
            continue;
        PyObject *id = PyLong_FromVoidPtr(value);
        if (id == NULL) {
            rc = -1;
            break;
        }
        int again = PySet_Contains(seen, id);
        if (again < 0 || (again == 0 && PySet_Add(seen, id) < 0)) {
            rc = -1;
        }
        else if (again == 0) {
            PyObject *n = PyDict_GetItemWithError(counts, id);
            long before = n != NULL ? PyLong_AsLong(n) : 0;
            PyObject *after = (n != NULL || !PyErr_Occurred()) ? PyLong_FromLong(before + 1) : NULL;
            rc = after != NULL ? PyDict_SetItem(counts, id, after) : -1;
            Py_XDECREF(after);
        }
        Py_DECREF(id);
    }
    Py_DECREF(seen);
    return rc;
}

PyDoc_STRVAR(module_index_doc,
"module_index(module_type) -> (holders, dicts)\n\n"
"One pass over the objects the garbage collector tracks. ``holders``: id(module) -> [(a\n"
"module_type instance whose ``_modules`` holds it under a str key, the key), ...];\n"
"``dicts``: id(module) -> how many dicts refer to it among their values while every value of\n"
"theirs is None or a module (dicts that could be a module's ``_modules``). The lists hold the\n"
"owners, so their ids stay theirs while ``holders`` lives.");

static PyObject *
module_index(PyObject *self, PyObject *module_type)
{
    if (!PyType_Check(module_type)) {
        PyErr_SetString(PyExc_TypeError, "module_index(): module_type must be a type");
        return NULL;
    }
    static PyObject *str_modules = NULL;
    if (str_modules == NULL && (str_modules = PyUnicode_InternFromString("_modules")) == NULL)
        return NULL;
    scan_state s = {(PyTypeObject *)module_type, {NULL, 0, 0}, {NULL, 0, 0}, 0};
    int was_enabled = PyGC_Disable();
    int walked = walk_objects(&s);
    /* Hold what was noted before anything is allocated: nothing has run since the walk. */
    for (Py_ssize_t i = 0; i < s.dicts.n; i++)
        Py_INCREF(s.dicts.items[i]);
    for (Py_ssize_t i = 0; i < s.modules.n; i++)
        Py_INCREF(s.modules.items[i]);
    PyObject *holders = NULL, *counts = NULL, *out = NULL;
    if (walked < 0)
        goto done;
    if (s.failed) {
        PyErr_NoMemory();
        goto done;
    }
    if ((holders = PyDict_New()) == NULL || (counts = PyDict_New()) == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < s.modules.n; i++)
        if (add_owner(holders, s.modules.items[i], str_modules) < 0)
            goto done;
    for (Py_ssize_t i = 0; i < s.dicts.n; i++)
        if (count_dict(counts, s.dicts.items[i]) < 0)
            goto done;
    out = PyTuple_Pack(2, holders, counts);
done:
    Py_XDECREF(holders);
    Py_XDECREF(counts);
    ptr_release(&s.dicts, 1);
    ptr_release(&s.modules, 1);
    if (was_enabled)
        PyGC_Enable();
    return out;
}

static PyMethodDef owners_methods[] = {
    {"module_index", (PyCFunction)module_index, METH_O, module_index_doc},
    {NULL}
};

int
fp_owners_add(PyObject *module)
{
    return PyModule_AddFunctions(module, owners_methods);
}
