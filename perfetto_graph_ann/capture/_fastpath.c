/*
 * perfetto_graph_ann.capture._fastpath: the capture's critical path, compiled.
 *
 * Optional: capture/fastpath.py falls back to the pure-Python code (scopes.ScopeRecorder,
 * the ctypes calls in backends/driver.py) when this module is not built. Same behaviour either way;
 * the CPU tests run both against the same expectations.
 *
 * Why C: scope edges and the per-capture driver calls run between torch's kernel launches,
 * where Python runs with cold caches and costs several times the driver calls it makes
 * (BENCHMARKS.md, "capture").
 *
 * No CUDA headers and no link to libcuda: Python hands over the addresses of the driver
 * functions (from its ctypes handles), and tests hand over ctypes callbacks that play the
 * driver. Only the signatures below are assumed (cuda.h, cupti_activity.h):
 *   CUresult cuGraphGetNodes(CUgraph, CUgraphNode *nodes, size_t *numNodes)
 *   CUresult cuStreamGetCaptureInfo_v2(CUstream, CUstreamCaptureStatus *, cuuint64_t *id,
 *                                      CUgraph *, const CUgraphNode **deps, size_t *numDeps)
 *   CUresult cuGraphClone(CUgraph *out, CUgraph)
 *   CUresult cuGraphAddEmptyNode(CUgraphNode *out, CUgraph, const CUgraphNode *deps, size_t numDeps)
 *   CUptiResult cuptiGetGraphId(CUgraph, uint32_t *), cuptiGetGraphExecId(CUgraphExec, uint32_t *)
 *   CUptiResult cuptiGetGraphNodeId(CUgraphNode, uint64_t *)  (low 32 bits: the node's local id)
 *   CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record)
 *     (record fields are read at the byte offsets Python passes: capture/activity.py)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <pythread.h>
#include "_fastpath.h"
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef int (*capture_info_fn)(void *stream, int *status, void *id, void **graph, void *deps, void *ndeps);
typedef int (*out_ptr_fn)(void **out, void *in);
typedef int (*out_u32_fn)(void *in, uint32_t *out);
typedef int (*next_record_fn)(uint8_t *buffer, size_t valid, void **record);

#define CAPTURE_STATUS_ACTIVE 1


/* ---- the per-capture driver calls ------------------------------------------------------- */

/* the (fn, handle) arguments of the driver helpers: 0, or -1 with an exception set */
static int
fn_and_handle(const char *usage, PyObject *const *args, Py_ssize_t nargs, void **fn, void **handle)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    *fn = fp_as_pointer(args[0]);
    *handle = fp_as_pointer(args[1]);
    if (PyErr_Occurred())
        return -1;
    if (*fn == NULL) {
        PyErr_Format(PyExc_ValueError, "%s: fn is NULL", usage);
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(capture_graph_doc,
"capture_graph(fn, stream) -> int | None\n\n"
"The graph under capture on ``stream`` through cuStreamGetCaptureInfo_v2 at address ``fn``;\n"
"None when the stream is not capturing or the call fails.");

static PyObject *
capture_graph(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    void *fn_addr, *stream;
    if (fn_and_handle("capture_graph(fn, stream)", args, nargs, &fn_addr, &stream) < 0)
        return NULL;
    capture_info_fn fn = (capture_info_fn)fn_addr;
    int status = 0;
    void *graph = NULL;
    if (fn(stream, &status, NULL, &graph, NULL, NULL) != 0 || status != CAPTURE_STATUS_ACTIVE || graph == NULL)
        Py_RETURN_NONE;
    return PyLong_FromVoidPtr(graph);
}

PyDoc_STRVAR(out_ptr_doc,
"out_ptr(fn, handle) -> int | None\n\n"
"Calls ``CUresult fn(void **out, handle)`` (e.g. cuGraphClone); the handle written, or None\n"
"when the call fails or writes NULL.");

static PyObject *
out_ptr(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    void *fn_addr, *in;
    if (fn_and_handle("out_ptr(fn, handle)", args, nargs, &fn_addr, &in) < 0)
        return NULL;
    out_ptr_fn fn = (out_ptr_fn)fn_addr;
    void *out = NULL;
    if (fn(&out, in) != 0 || out == NULL)
        Py_RETURN_NONE;
    return PyLong_FromVoidPtr(out);
}

PyDoc_STRVAR(out_u32_doc,
"out_u32(fn, handle) -> int | None\n\n"
"Calls ``int fn(handle, uint32_t *out)`` (e.g. cuptiGetGraphId); the value, or None when the\n"
"call fails.");

static PyObject *
out_u32(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    void *fn_addr, *in;
    if (fn_and_handle("out_u32(fn, handle)", args, nargs, &fn_addr, &in) < 0)
        return NULL;
    out_u32_fn fn = (out_u32_fn)fn_addr;
    uint32_t out = 0;
    if (fn(in, &out) != 0)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(out);
}

PyDoc_STRVAR(activity_records_doc,
"activity_records(next_record, buffer, valid, exec_id, layouts) -> list\n\n"
"Walks a completed CUPTI activity buffer with ``next_record`` (cuptiActivityGetNextRecord's\n"
"address) and returns (graph node id, stream, start, end, kind name) of every record whose\n"
"kind is in ``layouts`` ((kind, name, node, stream, start, end offsets) tuples), whose node id\n"
"is set and, unless ``exec_id`` is -1, whose high 32 bits are ``exec_id``.");

#define MAX_LAYOUTS 8

typedef struct {
    uint32_t kind;
    PyObject *name; /* borrowed from the layouts tuple */
    Py_ssize_t node, stream, start, end;
} layout_t;

static PyObject *
activity_records(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5 || !PyTuple_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "activity_records(next_record, buffer, valid, exec_id, layouts: tuple)");
        return NULL;
    }
    next_record_fn next = (next_record_fn)PyLong_AsVoidPtr(args[0]);
    uint8_t *buffer = (uint8_t *)PyLong_AsVoidPtr(args[1]);
    size_t valid = PyLong_AsSize_t(args[2]);
    long long exec_id = PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (next == NULL || buffer == NULL) {
        PyErr_SetString(PyExc_ValueError, "activity_records: NULL function or buffer");
        return NULL;
    }
    layout_t lay[MAX_LAYOUTS];
    Py_ssize_t n = PyTuple_GET_SIZE(args[4]);
    if (n > MAX_LAYOUTS) {
        PyErr_SetString(PyExc_ValueError, "activity_records: too many layouts");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyTuple_GET_ITEM(args[4], i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 6) {
            PyErr_SetString(PyExc_TypeError, "activity_records: a layout is (kind, name, node, stream, start, end)");
            return NULL;
        }
        lay[i].kind = (uint32_t)PyLong_AsUnsignedLong(PyTuple_GET_ITEM(t, 0));
        lay[i].name = PyTuple_GET_ITEM(t, 1);
        lay[i].node = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
        lay[i].stream = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 3));
        lay[i].start = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 4));
        lay[i].end = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 5));
        if (PyErr_Occurred())
            return NULL;
    }
    PyObject *out = PyList_New(0);
    if (out == NULL)
        return NULL;
    void *rec = NULL;
    while (next(buffer, valid, &rec) == 0 && rec != NULL) {
        const uint8_t *r = (const uint8_t *)rec;
        uint32_t kind;
        memcpy(&kind, r, sizeof kind);
        const layout_t *l = NULL;
        for (Py_ssize_t i = 0; i < n; i++)
            if (lay[i].kind == kind) {
                l = &lay[i];
                break;
            }
        if (l == NULL)
            continue;
        uint64_t node, start, end;
        uint32_t stream;
        memcpy(&node, r + l->node, sizeof node);
        if (node == 0 || (exec_id >= 0 && (long long)(node >> 32) != exec_id))
            continue;
        memcpy(&stream, r + l->stream, sizeof stream);
        memcpy(&start, r + l->start, sizeof start);
        memcpy(&end, r + l->end, sizeof end);
        PyObject *row = Py_BuildValue("(KkKKO)", (unsigned long long)node, (unsigned long)stream,
                                      (unsigned long long)start, (unsigned long long)end, l->name);
        if (row == NULL || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(row);
    }
    return out;
}

PyDoc_STRVAR(read_nodes_doc,
"read_nodes(get_nodes, get_type, get_params, node_id, graph) -> bytes\n\n"
"The node table of ``graph`` in creation order, read with cuGraphGetNodes, cuGraphNodeGetType,\n"
"cuGraphKernelNodeGetParams_v2 (may be 0: no kernel parameters) and cuptiGetGraphNodeId at\n"
"those addresses: one 64-byte row a node in native byte order (fastpath.NODE_ROW, ``=QQiIQQ3I3I``):\n"
"handle, node id, node type, 1 when the kernel parameters were read, CUfunction, CUkernel, grid, block.\n"
"Node ids are read at the listing's ends and every 64th node; where each of those is the first\n"
"id plus its position, every node's id is that, else every node's id is read.\n"
"Raises the capture error type naming the call that failed.");

/* CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA >= 12.0) */
typedef struct {
    void *func;
    unsigned int grid[3], block[3], shared_mem;
    void **kernel_params, **extra;
    void *kern, *ctx;
} kernel_params_t;

typedef int (*node_type_fn)(void *node, int *type);
typedef int (*kernel_params_fn)(void *node, kernel_params_t *params);

#define NODE_ROW 64
/* A graph numbers its nodes as it makes them and lists them in that order, so the ids of a
 * listing run consecutively (so do the scope positions: session.py). One id read costs ~0.17 us
 * on the H200 (BENCHMARKS.md, capture), a third of a decoder's table: ids are sampled at this
 * stride and the ends, and all of them are read only where a sample is off. */
#define ID_STRIDE 64

/* 1 when the sampled ids of ``nodes`` are ``*first`` plus their positions, 0 when one is not,
 * -1 with an exception when a read fails */
static int
ids_run_on(node_id_fn get_id, void **nodes, size_t n, uint64_t *first)
{
    int rc = get_id(nodes[0], first);
    if (rc != 0) {
        fp_node_id_error(rc);
        return -1;
    }
    size_t i = 0;
    while (i < n - 1) {
        i = i + ID_STRIDE < n - 1 ? i + ID_STRIDE : n - 1;
        uint64_t id = 0;
        if ((rc = get_id(nodes[i], &id)) != 0) {
            fp_node_id_error(rc);
            return -1;
        }
        if (id != *first + i)
            return 0;
    }
    return 1;
}

/* Phase 1: the graph's nodes in creation order (cuGraphGetNodes twice: count, then list);
 * NULL with an exception, or with *n == 0 and no exception for an empty graph. */
static void **
list_nodes(get_nodes_fn get_nodes, void *graph, size_t *n)
{
    *n = 0;
    int rc = get_nodes(graph, NULL, n);
    if (rc != 0) {
        fp_driver_error("cuGraphGetNodes", rc);
        return NULL;
    }
    if (*n == 0)
        return NULL;
    void **nodes = PyMem_Malloc(*n * sizeof(void *));
    if (nodes == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    size_t got = *n;
    if ((rc = get_nodes(graph, nodes, &got)) != 0) {
        PyMem_Free(nodes);
        fp_driver_error("cuGraphGetNodes", rc);
        return NULL;
    }
    if (got < *n)
        *n = got;
    return nodes;
}

/* Phase 3: one node's row (layout: read_nodes_doc); -1 with an exception when a read fails.
 * ``id`` is the node's id, or UINT64_MAX to read it. */
static int
write_row(unsigned char *row, void *node, uint64_t id, node_type_fn get_type, kernel_params_fn get_params,
          node_id_fn get_id)
{
    uint64_t handle = (uint64_t)(uintptr_t)node, func = 0, kern = 0;
    uint32_t have = 0, dims[6] = {0, 0, 0, 0, 0, 0};
    int t = 0, rc;
    if ((rc = get_type(node, &t)) != 0) {
        fp_driver_error("cuGraphNodeGetType", rc);
        return -1;
    }
    int32_t type = t;
    if (id == UINT64_MAX && (rc = get_id(node, &id)) != 0) {
        fp_node_id_error(rc);
        return -1;
    }
    if (type == 0 && get_params != NULL) {  /* CU_GRAPH_NODE_TYPE_KERNEL */
        kernel_params_t p;
        memset(&p, 0, sizeof p);
        if (get_params(node, &p) == 0) {
            have = 1;
            func = (uint64_t)(uintptr_t)p.func;
            kern = (uint64_t)(uintptr_t)p.kern;
            memcpy(dims, p.grid, sizeof p.grid);
            memcpy(dims + 3, p.block, sizeof p.block);
        }
    }
    memcpy(row, &handle, 8);
    memcpy(row + 8, &id, 8);
    memcpy(row + 16, &type, 4);
    memcpy(row + 20, &have, 4);
    memcpy(row + 24, &func, 8);
    memcpy(row + 32, &kern, 8);
    memcpy(row + 40, dims, 24);
    return 0;
}

static PyObject *
read_nodes(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "read_nodes(get_nodes, get_type, get_params, node_id, graph)");
        return NULL;
    }
    get_nodes_fn get_nodes = (get_nodes_fn)fp_as_pointer(args[0]);
    node_type_fn get_type = (node_type_fn)fp_as_pointer(args[1]);
    kernel_params_fn get_params = (kernel_params_fn)fp_as_pointer(args[2]);
    node_id_fn get_id = (node_id_fn)fp_as_pointer(args[3]);
    void *graph = fp_as_pointer(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (get_nodes == NULL || get_type == NULL || get_id == NULL) {
        PyErr_SetString(PyExc_ValueError, "read_nodes: NULL function");
        return NULL;
    }
    size_t n = 0;
    void **nodes = list_nodes(get_nodes, graph, &n);  /* phase 1 */
    if (nodes == NULL)
        return PyErr_Occurred() ? NULL : PyBytes_FromStringAndSize(NULL, 0);
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(n * NODE_ROW));
    uint64_t first = 0;
    /* phase 2: whether the ids run on from the first (sampled) */
    int run_on = out == NULL ? -1 : n > 0 ? ids_run_on(get_id, nodes, n, &first) : 0;
    int ok = run_on >= 0;
    for (size_t i = 0; ok && i < n; i++) {  /* phase 3 */
        unsigned char *row = (unsigned char *)PyBytes_AS_STRING(out) + i * NODE_ROW;
        ok = write_row(row, nodes[i], run_on ? first + i : UINT64_MAX, get_type, get_params, get_id) == 0;
    }
    PyMem_Free(nodes);
    if (!ok) {
        Py_XDECREF(out);
        return NULL;
    }
    return out;
}

PyDoc_STRVAR(getenv_doc,
"getenv(name) -> str | None\n\n"
"The process environment's value (C getenv, which os.environ's changes reach through putenv):\n"
"os.environ.get runs five Python frames, cold on the capture's path.");

static PyObject *
py_getenv(PyObject *mod, PyObject *name)
{
    const char *key = PyUnicode_AsUTF8(name);
    if (key == NULL)
        return NULL;
    const char *value = getenv(key);
    if (value == NULL)
        Py_RETURN_NONE;
    return PyUnicode_DecodeFSDefault(value);
}

static PyObject *
set_error(PyObject *mod, PyObject *cls)
{
    fp_set_error_type(cls);
    Py_RETURN_NONE;
}

/* ---- NodeHooks: autograd.py's _NodeHooks (one claimed node's pre- and post-hook) ----------
 * One object registered twice on a node: called with one argument (grad_outputs) it is the
 * pre-hook and opens a scope in the capture in flight, if any; with two (grad_inputs,
 * grad_outputs) the post-hook, closing the scope its pre-hook opened. The capture in flight is
 * session.current() without its lock: this thread's stack (session._local.stack), else the
 * last of session._global (a captured backward runs on autograd's device thread). */

typedef struct {
    PyObject_HEAD
    PyObject *fields;     /* the region's fields plus autograd_phase */
    PyObject *local;      /* session._local */
    PyObject *global;     /* session._global (a list) */
    PyObject *lane;       /* None, or the lane id to label in the capture */
    PyObject *lane_label;
    PyObject *open;       /* list of (recorder, token) the pre-hook opened */
} NodeHooks;

static PyObject *str_stack = NULL; /* "stack": the session local's attribute */
static PyObject *str_recorder = NULL, *str_active = NULL, *str_open = NULL, *str_close = NULL,
                *str_label_lane = NULL;

static PyObject *
NodeHooks_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    PyObject *fields, *local, *global, *lane, *lane_label;
    if (kw != NULL && PyDict_GET_SIZE(kw) != 0) {
        PyErr_SetString(PyExc_TypeError, "NodeHooks takes no keyword arguments");
        return NULL;
    }
    if (!PyArg_UnpackTuple(args, "NodeHooks", 5, 5, &fields, &local, &global, &lane, &lane_label))
        return NULL;
    if (!PyList_Check(global)) {
        PyErr_SetString(PyExc_TypeError, "NodeHooks: the sessions' global stack must be a list");
        return NULL;
    }
    NodeHooks *self = (NodeHooks *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    if ((self->open = PyList_New(0)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    Py_INCREF(fields); self->fields = fields;
    Py_INCREF(local); self->local = local;
    Py_INCREF(global); self->global = global;
    Py_INCREF(lane); self->lane = lane;
    Py_INCREF(lane_label); self->lane_label = lane_label;
    return (PyObject *)self;
}

static int
NodeHooks_traverse(NodeHooks *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fields);
    Py_VISIT(self->local);
    Py_VISIT(self->global);
    Py_VISIT(self->lane);
    Py_VISIT(self->lane_label);
    Py_VISIT(self->open);
    return 0;
}

static int
NodeHooks_clear(NodeHooks *self)
{
    Py_CLEAR(self->fields);
    Py_CLEAR(self->local);
    Py_CLEAR(self->global);
    Py_CLEAR(self->lane);
    Py_CLEAR(self->lane_label);
    Py_CLEAR(self->open);
    return 0;
}

static void
NodeHooks_dealloc(NodeHooks *self)
{
    PyObject_GC_UnTrack(self);
    NodeHooks_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* the capture in flight (new reference), or None */
static PyObject *
current_session(NodeHooks *self)
{
    PyObject *st = PyObject_GetAttr(self->local, str_stack);
    if (st == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError))
            return NULL;
        PyErr_Clear();
    } else {
        if (PyList_Check(st) && PyList_GET_SIZE(st) > 0) {
            PyObject *s = PyList_GET_ITEM(st, PyList_GET_SIZE(st) - 1);
            Py_INCREF(s);
            Py_DECREF(st);
            return s;
        }
        Py_DECREF(st);
    }
    Py_ssize_t n = PyList_GET_SIZE(self->global);
    PyObject *s = n > 0 ? PyList_GET_ITEM(self->global, n - 1) : Py_None;
    Py_INCREF(s);
    return s;
}

static PyObject *
NodeHooks_pre(NodeHooks *self)
{
    PyObject *sess = current_session(self);
    if (sess == NULL)
        return NULL;
    if (sess == Py_None)
        return sess;
    PyObject *rec = PyObject_GetAttr(sess, str_recorder);
    if (rec == NULL)
        goto fail_sess;
    PyObject *active = PyObject_GetAttr(rec, str_active);
    if (active == NULL)
        goto fail_rec;
    int on = PyObject_IsTrue(active);
    Py_DECREF(active);
    if (on < 0)
        goto fail_rec;
    if (on) {
        if (self->lane != Py_None) {
            PyObject *r = PyObject_CallMethodObjArgs(sess, str_label_lane, self->lane, self->lane_label, NULL);
            if (r == NULL)
                goto fail_rec;
            Py_DECREF(r);
        }
        PyObject *tok = PyObject_CallMethodOneArg(rec, str_open, self->fields);
        if (tok == NULL)
            goto fail_rec;
        PyObject *pair = PyTuple_Pack(2, rec, tok);
        Py_DECREF(tok);
        if (pair == NULL)
            goto fail_rec;
        int rc = PyList_Append(self->open, pair);
        Py_DECREF(pair);
        if (rc < 0)
            goto fail_rec;
    }
    Py_DECREF(rec);
    Py_DECREF(sess);
    Py_RETURN_NONE;
fail_rec:
    Py_DECREF(rec);
fail_sess:
    Py_DECREF(sess);
    return NULL;
}

static PyObject *
NodeHooks_post(NodeHooks *self)
{
    Py_ssize_t n = PyList_GET_SIZE(self->open);
    if (n == 0)
        Py_RETURN_NONE;
    PyObject *pair = PyList_GET_ITEM(self->open, n - 1);
    Py_INCREF(pair);
    if (PyList_SetSlice(self->open, n - 1, n, NULL) < 0) {
        Py_DECREF(pair);
        return NULL;
    }
    PyObject *r = PyObject_CallMethodOneArg(PyTuple_GET_ITEM(pair, 0), str_close, PyTuple_GET_ITEM(pair, 1));
    Py_DECREF(pair);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static PyObject *
NodeHooks_call(NodeHooks *self, PyObject *args, PyObject *kw)
{
    Py_ssize_t n = PyTuple_GET_SIZE(args);
    if (n == 1)
        return NodeHooks_pre(self);
    if (n == 2)
        return NodeHooks_post(self);
    PyErr_SetString(PyExc_TypeError, "NodeHooks(grad_outputs) is the pre-hook, (grad_inputs, grad_outputs) the post-hook");
    return NULL;
}

static PyObject *
NodeHooks_get_open(NodeHooks *self, void *closure)
{
    return PyList_GetSlice(self->open, 0, PyList_GET_SIZE(self->open));
}

static PyGetSetDef NodeHooks_getset[] = {
    {"open", (getter)NodeHooks_get_open, NULL, "a copy of the (recorder, token) pairs still open", NULL},
    {NULL}
};

static PyTypeObject NodeHooksType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "perfetto_graph_ann.capture._fastpath.NodeHooks",
    .tp_doc = PyDoc_STR("NodeHooks(fields, session_local, session_global, lane, lane_label): one claimed "
                        "autograd node's pre-hook (called with 1 argument) and post-hook (2 arguments)."),
    .tp_basicsize = sizeof(NodeHooks),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = NodeHooks_new,
    .tp_call = (ternaryfunc)NodeHooks_call,
    .tp_dealloc = (destructor)NodeHooks_dealloc,
    .tp_traverse = (traverseproc)NodeHooks_traverse,
    .tp_clear = (inquiry)NodeHooks_clear,
    .tp_getset = NodeHooks_getset,
};

static PyMethodDef module_methods[] = {
    {"capture_graph", (PyCFunction)(void (*)(void))capture_graph, METH_FASTCALL, capture_graph_doc},
    {"out_ptr", (PyCFunction)(void (*)(void))out_ptr, METH_FASTCALL, out_ptr_doc},
    {"out_u32", (PyCFunction)(void (*)(void))out_u32, METH_FASTCALL, out_u32_doc},
    {"getenv", (PyCFunction)py_getenv, METH_O, getenv_doc},
    {"activity_records", (PyCFunction)(void (*)(void))activity_records, METH_FASTCALL, activity_records_doc},
    {"read_nodes", (PyCFunction)(void (*)(void))read_nodes, METH_FASTCALL, read_nodes_doc},
    {"set_error", (PyCFunction)set_error, METH_O, "set_error(cls): the exception type of driver failures"},
    {NULL}
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_fastpath",
    "The capture's critical path in C (optional; see capture/fastpath.py).", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__fastpath(void)
{
    if (fp_recorder_ready() < 0 || PyType_Ready(&NodeHooksType) < 0 || fp_mark_ready() < 0 ||
        fp_replays_ready() < 0 || fp_modcall_ready() < 0)
        return NULL;
    if (str_stack == NULL && (str_stack = PyUnicode_InternFromString("stack")) == NULL)
        return NULL;
    if ((str_recorder == NULL && (str_recorder = PyUnicode_InternFromString("recorder")) == NULL) ||
        (str_active == NULL && (str_active = PyUnicode_InternFromString("active")) == NULL) ||
        (str_open == NULL && (str_open = PyUnicode_InternFromString("open")) == NULL) ||
        (str_close == NULL && (str_close = PyUnicode_InternFromString("close")) == NULL) ||
        (str_label_lane == NULL && (str_label_lane = PyUnicode_InternFromString("label_lane")) == NULL))
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    if (fp_recorder_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&NodeHooksType);
    if (PyModule_AddObject(m, "NodeHooks", (PyObject *)&NodeHooksType) < 0) {
        Py_DECREF(&NodeHooksType);
        Py_DECREF(m);
        return NULL;
    }
    if (fp_mark_add(m) < 0 || fp_replays_add(m) < 0 || fp_watch_add(m) < 0 || fp_modcall_add(m) < 0 ||
        fp_owners_add(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
