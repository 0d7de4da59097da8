/*
 * Reading and writing the fields of the events' msgspec structs from C: shared by the reader's
 * first-pass loop (read/_scan.c) and the writer's plan loop (write/perfetto/_plan.c).
 *
 * msgspec structs keep their fields in slots, as member descriptors: a field is read and written
 * there directly, as the interpreter's specialised attribute access does; any other object, or a
 * field not in a slot, goes through getattr / setattr.
 */
#ifndef PGA_SLOTS_H
#define PGA_SLOTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#define FIELDS_MAX 12

/* Where a type's fields are, by index into the caller's names. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t offset[FIELDS_MAX];
} Fields;

/* The slot offsets of ``names`` (n at most FIELDS_MAX) in ``type``, -1 for a name that is not an
 * object slot. 0, or -1 with an exception. */
static int
fields_of(PyTypeObject *type, PyObject *const *names, int n, Fields *out)
{
    int k;
    if (n > FIELDS_MAX) {
        PyErr_SetString(PyExc_SystemError, "fields_of: too many fields");
        return -1;
    }
    out->type = type;
    for (k = 0; k < n; k++) {
        PyObject *d = PyObject_GetAttr((PyObject *)type, names[k]);
        out->offset[k] = -1;
        if (d == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError))
                return -1;
            PyErr_Clear();
            continue;
        }
        if (Py_IS_TYPE(d, &PyMemberDescr_Type)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if ((m->type == T_OBJECT_EX || m->type == T_OBJECT) && !(m->flags & READONLY))
                out->offset[k] = m->offset;
        }
        Py_DECREF(d);
    }
    return 0;
}

/* o.<names[k]>: a new reference, or NULL with an exception. */
static inline PyObject *
get_field(PyObject *o, const Fields *f, PyObject *const *names, int k)
{
    if (Py_TYPE(o) == f->type && f->offset[k] >= 0) {
        PyObject *v = *(PyObject **)((char *)o + f->offset[k]);
        if (v != NULL)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(o, names[k]);
}

/* o.<names[k]> = v; 0, or -1 with an exception. */
static inline int
set_field(PyObject *o, const Fields *f, PyObject *const *names, int k, PyObject *v)
{
    if (Py_TYPE(o) == f->type && f->offset[k] >= 0) {
        PyObject **slot = (PyObject **)((char *)o + f->offset[k]);
        PyObject *old = *slot;
        *slot = Py_NewRef(v);
        Py_XDECREF(old);
        return 0;
    }
    return PyObject_SetAttr(o, names[k], v);
}

/* Interned str objects for ``names`` (n of them) into ``out``, once. 0, or -1 with an exception. */
static int
intern_names(const char *const *names, int n, PyObject **out)
{
    int k;
    for (k = 0; k < n; k++)
        if (out[k] == NULL && (out[k] = PyUnicode_InternFromString(names[k])) == NULL)
            return -1;
    return 0;
}

/* A one-character str equal to c. */
static inline int
is_char(PyObject *s, Py_UCS4 c)
{
    return PyUnicode_Check(s) && PyUnicode_GET_LENGTH(s) == 1 && PyUnicode_READ_CHAR(s, 0) == c;
}

#endif
