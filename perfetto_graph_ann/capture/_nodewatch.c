/*
 * perfetto_graph_ann.capture._fastpath watch_*: scope edges positioned by CUPTI's resource
 * callback GRAPHNODE_CREATED instead of a driver call.
 *
 * While subscribed, the callback runs on the thread creating a node (a stream-captured launch
 * included) and bumps the counter of the node's graph when that graph is watched. A scope edge
 * then reads its graph's counter: the number of nodes created so far, which is the position a
 * cuGraphGetNodes count gives (nodes are only appended during capture), at the cost of a load.
 * Slots are fixed (no allocation in the callback); the callback takes no lock and no GIL.
 * Python hands over the CUPTI functions' addresses, as for the driver's (no CUPTI headers).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_fastpath.h"
#include <stdatomic.h>
#include <stdint.h>

typedef int (*subscribe_fn)(void **subscriber, void *callback, void *userdata);
typedef int (*enable_fn)(uint32_t enable, void *subscriber, int domain, int cbid);
typedef int (*unsubscribe_fn)(void *subscriber);
typedef int (*enable_domain_fn)(uint32_t enable, void *subscriber, int domain);
typedef int (*finalize_fn)(void);
typedef int (*trigger_fn)(void **out);

#define NW_SLOTS 64

static _Atomic(void *) slot_graph[NW_SLOTS];
static _Atomic long long slot_count[NW_SLOTS];
static _Atomic int slot_hi = 0; /* slots [0, slot_hi) may be in use */
static void *subscriber = NULL;
static int want_cbid = -1;

/* CUpti_ResourceData: context, resourceHandle, resourceDescriptor (-> CUpti_GraphData: graph,
 * originalGraph, node, ...) */
static void
nw_callback(void *userdata, int domain, int cbid, const void *data)
{
    (void)userdata;
    (void)domain;
    if (cbid != want_cbid || data == NULL)
        return;
    void *const *resource = (void *const *)data;
    void *const *graph_data = (void *const *)resource[2];
    if (graph_data == NULL || graph_data[0] == NULL)
        return;
    int hi = atomic_load_explicit(&slot_hi, memory_order_acquire);
    for (int i = 0; i < hi; i++) {
        if (atomic_load_explicit(&slot_graph[i], memory_order_acquire) == graph_data[0]) {
            atomic_fetch_add_explicit(&slot_count[i], 1, memory_order_relaxed);
            return;
        }
    }
}

long long
fp_watch_count(int slot)
{
    if (slot < 0 || slot >= NW_SLOTS)
        return -1;
    return atomic_load_explicit(&slot_count[slot], memory_order_relaxed);
}

PyDoc_STRVAR(watch_subscribe_doc,
"watch_subscribe(subscribe, enable, domain, cbid) -> int\n\n"
"cuptiSubscribe (at address ``subscribe``) with the counting callback, then cuptiEnableCallback\n"
"(``enable``) for ``domain`` / ``cbid``. Returns 0, or the CUPTI result that refused it (then\n"
"nothing stays subscribed). Subscribed already: 0.");

static PyObject *
watch_subscribe(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "watch_subscribe(subscribe, enable, domain, cbid)");
        return NULL;
    }
    void *fns[2];
    if (fp_functions(args, 2, fns, "watch_subscribe") < 0)
        return NULL;
    subscribe_fn sub = (subscribe_fn)fns[0];
    enable_fn en = (enable_fn)fns[1];
    int domain = (int)PyLong_AsLong(args[2]);
    int cbid = (int)PyLong_AsLong(args[3]);
    if (PyErr_Occurred())
        return NULL;
    if (subscriber != NULL)
        return PyLong_FromLong(0);
    want_cbid = cbid;
    void *s = NULL;
    int rc;
    /* CUPTI's first subscription in a process initialises it (~20 ms on the H200): other
     * threads run meanwhile. Callers serialise on nodewatch.WATCH's lock. */
    Py_BEGIN_ALLOW_THREADS
    rc = sub(&s, (void *)nw_callback, NULL);
    if (rc == 0 && s != NULL)
        rc = en(1, s, domain, cbid);
    Py_END_ALLOW_THREADS
    if (s == NULL)
        return PyLong_FromLong(rc != 0 ? rc : -1);
    subscriber = s;
    return PyLong_FromLong(rc);
}

PyDoc_STRVAR(watch_unsubscribe_doc,
"watch_unsubscribe(unsubscribe) -> int: cuptiUnsubscribe (at address ``unsubscribe``) of the\n"
"counting callback; 0, or CUPTI's result. Not subscribed: 0.");

static PyObject *
watch_unsubscribe(PyObject *mod, PyObject *arg)
{
    unsubscribe_fn unsub = (unsubscribe_fn)fp_as_pointer(arg);
    if (PyErr_Occurred())
        return NULL;
    if (subscriber == NULL)
        return PyLong_FromLong(0);
    if (unsub == NULL) {
        PyErr_SetString(PyExc_ValueError, "watch_unsubscribe(): the function address is NULL");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = unsub(subscriber);
    Py_END_ALLOW_THREADS
    if (rc == 0)
        subscriber = NULL;
    return PyLong_FromLong(rc);
}

/* Detaching CUPTI (cuptiFinalize) the way its documentation recommends: from the exit call site
 * of a driver API call, reached through a callback subscribed for the driver API domain. The
 * first API exit after arming, on whichever thread, finalizes; the others return at once. */
static finalize_fn detach_finalize = NULL;
static _Atomic int detach_armed = 0;
static _Atomic int detach_rc = 0;
static _Atomic int detach_done = 0;

static void
detach_callback(void *userdata, int domain, int cbid, const void *data)
{
    (void)userdata;
    (void)domain;
    (void)cbid;
    /* CUpti_CallbackData begins with its CUpti_ApiCallbackSite: 0 enter, 1 exit */
    if (data == NULL || *(const int *)data != 1)
        return;
    int armed = 1;
    if (!atomic_compare_exchange_strong(&detach_armed, &armed, 0))
        return;
    atomic_store(&detach_rc, detach_finalize());
    atomic_store(&detach_done, 1);
}

PyDoc_STRVAR(watch_detach_doc,
"watch_detach(subscribe, enable_domain, unsubscribe, finalize, trigger, domain) -> int\n\n"
"Detach CUPTI from the process: cuptiSubscribe a callback, cuptiEnableDomain(1, ..., ``domain``)\n"
"(the driver API's), then call ``trigger`` (a driver function taking one out pointer, e.g.\n"
"cuCtxGetCurrent): the first API exit call site then calls cuptiFinalize, which ends every\n"
"subscription and CUPTI's state. Returns cuptiFinalize's result (0: detached), the result that\n"
"refused the subscription or the domain, or -2 when no API exit reached the callback (then the\n"
"callback is unsubscribed and CUPTI stays attached). The counting callback must not be subscribed.");

static PyObject *
watch_detach(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "watch_detach(subscribe, enable_domain, unsubscribe, finalize, trigger, domain)");
        return NULL;
    }
    void *fns[5];
    if (fp_functions(args, 5, fns, "watch_detach") < 0)
        return NULL;
    subscribe_fn sub = (subscribe_fn)fns[0];
    enable_domain_fn en = (enable_domain_fn)fns[1];
    unsubscribe_fn unsub = (unsubscribe_fn)fns[2];
    finalize_fn fin = (finalize_fn)fns[3];
    trigger_fn trig = (trigger_fn)fns[4];
    int domain = (int)PyLong_AsLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (subscriber != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "watch_detach(): the counting callback is subscribed");
        return NULL;
    }
    void *s = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    detach_finalize = fin;
    atomic_store(&detach_done, 0);
    rc = sub(&s, (void *)detach_callback, NULL);
    if (rc == 0 && s == NULL)
        rc = -1;
    if (rc == 0) {
        atomic_store(&detach_armed, 1);
        rc = en(1, s, domain);
        if (rc == 0) {
            void *out = NULL;
            trig(&out);
        }
        int armed = 1;
        if (atomic_compare_exchange_strong(&detach_armed, &armed, 0)) {
            /* nothing finalized: leave CUPTI as it was */
            if (rc == 0) {
                en(0, s, domain);
                rc = -2;
            }
            unsub(s);
        } else {
            while (!atomic_load(&detach_done)) /* another thread's exit call site is finalizing */
                ;
            rc = atomic_load(&detach_rc);
        }
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(rc);
}

PyDoc_STRVAR(watch_add_doc,
"watch_add(graph, base) -> int: count ``graph``'s node creations from ``base`` on; the slot,\n"
"or -1 when every slot is taken.");

static PyObject *
watch_add(PyObject *mod, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "watch_add(graph, base)");
        return NULL;
    }
    void *graph = fp_as_pointer(args[0]);
    long long base = PyLong_AsLongLong(args[1]);
    if (PyErr_Occurred())
        return NULL;
    if (graph == NULL) {
        PyErr_SetString(PyExc_ValueError, "watch_add(): graph is NULL");
        return NULL;
    }
    for (int i = 0; i < NW_SLOTS; i++) {
        if (atomic_load(&slot_graph[i]) == NULL) {
            atomic_store(&slot_count[i], base);
            atomic_store(&slot_graph[i], graph);
            if (atomic_load(&slot_hi) < i + 1)
                atomic_store(&slot_hi, i + 1);
            return PyLong_FromLong(i);
        }
    }
    return PyLong_FromLong(-1);
}

static int
slot_arg(PyObject *arg)
{
    long slot = PyLong_AsLong(arg);
    if (slot == -1 && PyErr_Occurred())
        return -1;
    if (slot < 0 || slot >= NW_SLOTS) {
        PyErr_Format(PyExc_ValueError, "no watch slot %ld", slot);
        return -1;
    }
    return (int)slot;
}

PyDoc_STRVAR(watch_remove_doc, "watch_remove(slot): stop counting the slot's graph");

static PyObject *
watch_remove(PyObject *mod, PyObject *arg)
{
    int slot = slot_arg(arg);
    if (slot < 0)
        return NULL;
    atomic_store(&slot_graph[slot], NULL);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(watch_count_doc, "watch_count(slot) -> int: the nodes the slot's graph has now");

static PyObject *
watch_count(PyObject *mod, PyObject *arg)
{
    int slot = slot_arg(arg);
    if (slot < 0)
        return NULL;
    return PyLong_FromLongLong(fp_watch_count(slot));
}

PyDoc_STRVAR(watch_subscribed_doc, "watch_subscribed() -> bool: the counting callback is subscribed");

static PyObject *
watch_subscribed(PyObject *mod, PyObject *unused)
{
    return PyBool_FromLong(subscriber != NULL);
}

static PyMethodDef watch_methods[] = {
    {"watch_subscribe", (PyCFunction)(void (*)(void))watch_subscribe, METH_FASTCALL, watch_subscribe_doc},
    {"watch_unsubscribe", (PyCFunction)watch_unsubscribe, METH_O, watch_unsubscribe_doc},
    {"watch_detach", (PyCFunction)(void (*)(void))watch_detach, METH_FASTCALL, watch_detach_doc},
    {"watch_add", (PyCFunction)(void (*)(void))watch_add, METH_FASTCALL, watch_add_doc},
    {"watch_remove", (PyCFunction)watch_remove, METH_O, watch_remove_doc},
    {"watch_count", (PyCFunction)watch_count, METH_O, watch_count_doc},
    {"watch_subscribed", (PyCFunction)watch_subscribed, METH_NOARGS, watch_subscribed_doc},
    {NULL}
};

int
fp_watch_add(PyObject *module)
{
    return PyModule_AddFunctions(module, watch_methods);
}
