/*
 * The exception type of driver failures (perfetto_graph_ann.errors.CaptureError, handed over by
 * _fastpath.set_error) and the helper that raises it: a leaf the other units call.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_fastpath.h"

static PyObject *error_type = NULL;

PyObject *
fp_error_type(void)
{
    return error_type ? error_type : PyExc_RuntimeError;
}

void
fp_set_error_type(PyObject *cls)
{
    Py_INCREF(cls);
    Py_XSETREF(error_type, cls);
}

PyObject *
fp_driver_error(const char *what, int rc)
{
    PyErr_Format(fp_error_type(), "%s failed with CUresult %d", what, rc);
    return NULL;
}

PyObject *
fp_node_id_error(int rc)
{
    PyErr_Format(fp_error_type(), "cuptiGetGraphNodeId failed with CUPTI error %d", rc);
    return NULL;
}
