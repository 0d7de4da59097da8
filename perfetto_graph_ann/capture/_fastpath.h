/*
 * What the translation units of perfetto_graph_ann.capture._fastpath share: _fastpath.c (the
 * module, the driver helpers, autograd node hooks), _recorder.c (the scope recorder), _marks.c
 * (mark_kernels' enter / exit), _replays.c (the replay log's wrapper of CUDAGraph.replay),
 * _nodewatch.c (node counts from CUPTI's node-created callback), _modcall.c (module scopes'
 * nn.Module.__call__), _owners.c (who holds which module: owners.py's pass over the collector's
 * objects) and _errors.c (the exception of driver failures). Calls go one way:
 * _fastpath.c -> the others, _marks.c and _modcall.c -> _recorder.c -> _nodewatch.c, and every
 * unit -> _errors.c (tests/test_import_graph.py checks it).
 */
#ifndef PGA_FASTPATH_H
#define PGA_FASTPATH_H

#include <Python.h>
#include <stdint.h>

/* The driver functions whose addresses Python hands over (signatures: _fastpath.c). */
typedef int (*get_nodes_fn)(void *graph, void *nodes, size_t *num);
typedef int (*add_empty_fn)(void **node, void *graph, void *deps, size_t ndeps);
typedef int (*node_id_fn)(void *node, uint64_t *id);

/* An address from Python: an int, or None for NULL. */
static inline void *
fp_as_pointer(PyObject *o)
{
    if (o == Py_None)
        return NULL;
    return PyLong_AsVoidPtr(o);
}

/* args[0..n) as function addresses into out; 0, or -1 with an exception set when one does not
 * convert or is NULL (a ValueError naming ``who``). */
static inline int
fp_functions(PyObject *const *args, Py_ssize_t n, void **out, const char *who)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        out[i] = fp_as_pointer(args[i]);
        if (PyErr_Occurred())
            return -1;
        if (out[i] == NULL) {
            PyErr_Format(PyExc_ValueError, "%s(): a function address is NULL", who);
            return -1;
        }
    }
    return 0;
}

/* _errors.c: the exception type of driver failures (CaptureError once set_error ran) */
PyObject *fp_error_type(void);                                 /* borrowed reference */
void fp_set_error_type(PyObject *cls);
PyObject *fp_driver_error(const char *what, int rc);           /* sets the error; NULL */
PyObject *fp_node_id_error(int rc);                            /* likewise, for cuptiGetGraphNodeId */

/* _nodewatch.c: per-graph node counters bumped by CUPTI's GRAPHNODE_CREATED callback */
long long fp_watch_count(int slot);                            /* -1: no such slot */
int fp_watch_add(PyObject *module);

/* _recorder.c: the scope recorder (scopes.ScopeRecorder's hot half) */
int fp_recorder_ready(void);
int fp_recorder_add(PyObject *module);
int fp_is_recorder(PyObject *o);
int fp_recorder_active(PyObject *rec);
PyObject *fp_recorder_open(PyObject *rec, PyObject *fields);   /* new reference: the token */
PyObject *fp_recorder_close(PyObject *rec, PyObject *tok);     /* new reference: None */

/* _marks.c: the Mark type */
int fp_mark_ready(void);
int fp_mark_add(PyObject *module);

/* _modcall.c: the ModuleCall type (nn.Module.__call__ while a capture runs) */
int fp_modcall_ready(void);
int fp_modcall_add(PyObject *module);

/* _owners.c: module_index(), owners.py's pass */
int fp_owners_add(PyObject *module);

/* _replays.c: the replay log's ReplayLogger type */
int fp_replays_ready(void);
int fp_replays_add(PyObject *module);

#endif
