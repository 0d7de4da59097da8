/*
 * What the translation units of perfetto_graph_ann.capture._fastpath share: _fastpath.c (the
 * module, the scope recorder, the driver helpers, autograd node hooks), _marks.c
 * (mark_kernels' enter / exit) and _replays.c (the replay log's wrapper of CUDAGraph.replay).
 */
#ifndef PGA_FASTPATH_H
#define PGA_FASTPATH_H

#include <Python.h>

/* _fastpath.c: the scope recorder (scopes.ScopeRecorder's hot half) */
int fp_is_recorder(PyObject *o);
int fp_recorder_active(PyObject *rec);
PyObject *fp_recorder_open(PyObject *rec, PyObject *fields);   /* new reference: the token */
PyObject *fp_recorder_close(PyObject *rec, PyObject *tok);     /* new reference: None */

/* _marks.c: the Mark type */
int fp_mark_ready(void);
int fp_mark_add(PyObject *module);

/* _replays.c: the replay log's ReplayLogger type */
int fp_replays_ready(void);
int fp_replays_add(PyObject *module);

#endif
