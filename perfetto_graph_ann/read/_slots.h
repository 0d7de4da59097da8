/*
 * Reading and writing the fields of the events' msgspec structs from C, and the few helpers the
 * compiled loops share: the reader's (read/_scan.c), the writer's plan loop
 * (write/perfetto/_plan.c) and the join's (join/_rows.c).
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
#include <string.h>

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

/* The one-dimensional C-contiguous buffer of ``o``, an array of ``format`` items (writable when
 * asked), in *b; None gives b->obj NULL. 0, or -1 with an exception. */
static inline int
take_buffer(PyObject *o, Py_buffer *b, const char *format, int writable)
{
    b->obj = NULL;
    if (o == Py_None)
        return 0;
    if (PyObject_GetBuffer(o, b, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (b->format == NULL || strcmp(b->format, format) != 0 || b->ndim != 1) {
        PyBuffer_Release(b);
        b->obj = NULL;
        PyErr_Format(PyExc_TypeError, "an array of '%s' expected", format);
        return -1;
    }
    return 0;
}

/* a.get(key) as a new reference (None where absent): an event's arg. NULL on error. */
static inline PyObject *
arg_of(PyObject *a, PyObject *key)
{
    if (PyDict_CheckExact(a)) {
        PyObject *v = PyDict_GetItemWithError(a, key);
        if (v == NULL)
            return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
        return Py_NewRef(v);
    }
    return PyObject_CallMethod(a, "get", "O", key);
}

/* 1 when o is an int within a C long long (its value in *v), else 0 with no exception set. */
static inline int
int64_of(PyObject *o, long long *v)
{
    int overflow;
    if (!PyLong_Check(o))
        return 0;
    *v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (*v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

/* The n bytes at buf appended to arr: a bytearray grown in place, else arr.frombytes (an array).
 * 0, or -1 with an exception. */
static inline int
append_raw(PyObject *arr, const void *buf, Py_ssize_t n)
{
    PyObject *view, *r;
    if (n == 0)
        return 0;
    if (PyByteArray_CheckExact(arr)) {
        Py_ssize_t size = PyByteArray_GET_SIZE(arr);
        if (PyByteArray_Resize(arr, size + n) < 0)
            return -1;
        memcpy(PyByteArray_AS_STRING(arr) + size, buf, (size_t)n);
        return 0;
    }
    view = PyMemoryView_FromMemory((char *)buf, n, PyBUF_READ);
    if (view == NULL)
        return -1;
    r = PyObject_CallMethod(arr, "frombytes", "O", view);
    Py_DECREF(view);
    Py_XDECREF(r);
    return r == NULL ? -1 : 0;
}

#endif
