/*
 * The writer's per-packet hot path in C (perfetto_graph_ann.write.perfetto._encode): a
 * slice begin assembled from a whole-args template hit, a slice end, and a whole-args template
 * built from the per-key caches (a graph node's, at its first replay). An accelerator
 * only: fast_encoder.py builds the same bytes in Python, and does so whenever a function here
 * answers None (a value or size off the common path) or the module is not built / turned
 * off (PERFETTO_GRAPH_ANN_PURE_PYTHON). Compiled by hatch_build.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

/* Unsigned LEB128 of v into out (at most 10 bytes); returns the bytes written. */
static inline Py_ssize_t
put_varint(unsigned char *out, uint64_t v)
{
    Py_ssize_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

static inline Py_ssize_t
varint_size(uint64_t v)
{
    Py_ssize_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* An exact int in int64 into *out; -1 (no error set) where it is not. */
static int
as_int64(PyObject *o, long long *out)
{
    int overflow = 0;
    long long v;
    if (!PyLong_CheckExact(o))
        return -1;
    v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    *out = v;
    return 0;
}

/* A timestamp delta as fast_encoder's varint writes it: a negative int64 as its 64-bit two's
 * complement. -1 (no exception set): outside int64, left to Python. */
static int
as_delta(PyObject *o, uint64_t *out)
{
    long long v;
    if (as_int64(o, &v) < 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

/* An id slot's value: an exact int in [0, 2^63), as the Python fill's inline case takes it. */
static int
as_id(PyObject *o, uint64_t *out)
{
    long long v;
    if (as_int64(o, &v) < 0 || v < 0)
        return -1;
    *out = (uint64_t)v;
    return 0;
}

#define MAX_SLOTS 16

typedef struct {
    const char *data;   /* constant bytes, or the slot's head (name iid and int tag) */
    Py_ssize_t size;
    int slot;           /* 1: an annotation: 0x22, length, head, varint(value); 2 and 3: see put_piece */
    uint64_t value;     /* slot 3: the double's bits */
} piece;

/* A slot piece: the head's bytes (a name's prefix and its value's tag) and the value. */
static inline void
put_slot(piece *pieces, int *n, PyObject *head, int slot, uint64_t value)
{
    pieces[*n].data = PyBytes_AS_STRING(head);
    pieces[*n].size = PyBytes_GET_SIZE(head);
    pieces[*n].slot = slot;
    pieces[*n].value = value;
    (*n)++;
}

/* The template's pieces in order; -1 when any is off the inline path (Python then fills), -2
 * with an exception set when reading args failed. */
static int
add_slot(piece *pieces, int *n, PyObject *key, PyObject *head, PyObject *args)
{
    uint64_t v;
    PyObject *value;
    Py_ssize_t body;
    if (*n >= MAX_SLOTS * 2 + 1 || !PyBytes_CheckExact(head))
        return -1;
    value = PyDict_GetItemWithError(args, key);
    if (value == NULL)
        return PyErr_Occurred() ? -2 : -1;
    if (PyFloat_CheckExact(value) && PyBytes_GET_SIZE(head) >= 1 && PyBytes_GET_SIZE(head) + 8 < 128) {
        double x = PyFloat_AS_DOUBLE(value);  /* a per-event measure (a memset's bandwidth) */
        memcpy(&v, &x, sizeof v);
        put_slot(pieces, n, head, 3, v);
        return 0;
    }
    if (as_id(value, &v) < 0)
        return -1;
    body = PyBytes_GET_SIZE(head) + varint_size(v);
    if (body >= 128)  /* the Python fill writes this length as one byte: leave it the odd case */
        return -1;
    put_slot(pieces, n, head, 1, v);
    return 0;
}

static int
add_bytes(piece *pieces, int *n, PyObject *b)
{
    if (*n >= MAX_SLOTS * 2 + 1 || !PyBytes_CheckExact(b))
        return -1;
    pieces[*n].data = PyBytes_AS_STRING(b);
    pieces[*n].size = PyBytes_GET_SIZE(b);
    pieces[*n].slot = 0;
    (*n)++;
    return 0;
}

static Py_ssize_t
piece_size(const piece *p)
{
    if (p->slot == 3)
        return 2 + p->size + 8;
    if (p->slot == 2)
        return 3 + p->size + varint_size(p->value);
    return p->slot ? 2 + p->size + varint_size(p->value) : p->size;
}

static unsigned char *
put_piece(unsigned char *w, const piece *p)
{
    if (p->slot == 3) {  /* a float in an id slot: the head's name prefix, then the double (fixed64) */
        int j;
        *w++ = 0x22;
        *w++ = (unsigned char)(p->size - 1 + 1 + 8);
        memcpy(w, p->data, p->size - 1);
        w += p->size - 1;
        *w++ = 0x29;
        for (j = 0; j < 8; j++)
            *w++ = (unsigned char)(p->value >> (8 * j));
    } else if (p->slot == 2) {  /* an int annotation from its name's prefix: FastArgs._one's uncached int */
        Py_ssize_t vs = varint_size(p->value);
        *w++ = 0x22;
        *w++ = (unsigned char)(p->size + 1 + vs);
        memcpy(w, p->data, p->size);
        w += p->size;
        *w++ = 0x20;
        w += put_varint(w, p->value);
    } else if (p->slot) {
        Py_ssize_t vs = varint_size(p->value);
        *w++ = 0x22;
        *w++ = (unsigned char)(p->size + vs);
        memcpy(w, p->data, p->size);
        w += p->size;
        w += put_varint(w, p->value);
    } else {
        memcpy(w, p->data, p->size);
        w += p->size;
    }
    return w;
}

/* A slot's piece for (key, head) from ctx: add_slot's (ctx: the args dict), or a text hit's
 * (tx_slot). 0, -1 off the inline path, -2 with an error set. */
typedef int (*slot_fn)(piece *pieces, int *n, PyObject *key, PyObject *head, void *ctx);

static int
args_slot(piece *pieces, int *n, PyObject *key, PyObject *head, void *args)
{
    return add_slot(pieces, n, key, head, (PyObject *)args);
}

/* A whole-args template's pieces (see template_packet), each slot's from slot(ctx); -1: off
 * the inline path, -2: an error set (the slot's). */
static int
add_template_with(piece *pieces, int *np, PyObject *tpl, slot_fn slot, void *ctx)
{
    int i, r;
    if (PyBytes_CheckExact(tpl))
        return add_bytes(pieces, np, tpl);
    if (PyTuple_CheckExact(tpl) && PyTuple_GET_SIZE(tpl) == 4) {
        if (add_bytes(pieces, np, PyTuple_GET_ITEM(tpl, 0)) < 0)
            return -1;
        if ((r = slot(pieces, np, PyTuple_GET_ITEM(tpl, 1), PyTuple_GET_ITEM(tpl, 2), ctx)) < 0)
            return r;
        return add_bytes(pieces, np, PyTuple_GET_ITEM(tpl, 3)) < 0 ? -1 : 0;
    }
    if (!PyList_CheckExact(tpl))
        return -1;
    for (i = 0; i < PyList_GET_SIZE(tpl); i++) {
        PyObject *part = PyList_GET_ITEM(tpl, i);
        if (PyBytes_CheckExact(part)) {
            if (add_bytes(pieces, np, part) < 0)
                return -1;
        } else if (PyTuple_CheckExact(part) && PyTuple_GET_SIZE(part) == 2) {
            if ((r = slot(pieces, np, PyTuple_GET_ITEM(part, 0), PyTuple_GET_ITEM(part, 1), ctx)) < 0)
                return r;
        } else {
            return -1;
        }
    }
    return 0;
}

static int
add_template(piece *pieces, int *np, PyObject *tpl, PyObject *args)
{
    return add_template_with(pieces, np, tpl, args_slot, args);
}

/* The pieces after the template: the head's tail, then the flows' bytes (fn of fbuf) if any. */
static int
add_tail(piece *pieces, int *n, PyObject *tail, const unsigned char *fbuf, Py_ssize_t fn)
{
    if (add_bytes(pieces, n, tail) < 0)
        return -1;
    if (fn) {
        pieces[*n].data = (const char *)fbuf;
        pieces[*n].size = fn;
        pieces[*n].slot = 0;
        (*n)++;
    }
    return 0;
}

/* The packet around the TrackEvent's pieces: 0x0A, length, timestamp (field 8), seq, 0x5A,
 * TrackEvent length, the pieces, sequence flags (0x68 0x02). */
static PyObject *
frame_packet(uint64_t ts, PyObject *seq, const piece *pieces, int n)
{
    Py_ssize_t te = 0, p, total;
    unsigned char *w;
    PyObject *out;
    int i;
    for (i = 0; i < n; i++)
        te += piece_size(&pieces[i]);
    p = 1 + varint_size(ts) + PyBytes_GET_SIZE(seq) + 1 + varint_size((uint64_t)te) + te + 2;
    total = 1 + varint_size((uint64_t)p) + p;
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL)
        return NULL;
    w = (unsigned char *)PyBytes_AS_STRING(out);
    *w++ = 0x0a;
    w += put_varint(w, (uint64_t)p);
    *w++ = 0x40;
    w += put_varint(w, ts);
    memcpy(w, PyBytes_AS_STRING(seq), PyBytes_GET_SIZE(seq));
    w += PyBytes_GET_SIZE(seq);
    *w++ = 0x5a;
    w += put_varint(w, (uint64_t)te);
    for (i = 0; i < n; i++)
        w = put_piece(w, &pieces[i]);
    *w++ = 0x68;
    *w++ = 0x02;
    return out;
}

/*
 * template_packet(ts, seq, head, tpl, args, tail, flows) -> bytes or None
 *
 * FastEncoder.event's packet for a whole-args template hit: TracePacket framing (tag 0x0A and
 * length) of timestamp (field 8), seq (the sequence id field's bytes), TrackEvent (field 11:
 * head, the template filled from args, tail, flows) and sequence flags (no interned data: the
 * caller builds packets that carry some). tpl:
 * bytes (no slot), a tuple (run before, key, head, run after) or a list of bytes runs and
 * (key, head) slots. None where a slot's value is not an int in [0, 2^63) or a size is off the
 * common path: the caller then builds the packet in Python.
 */
static PyObject *
template_packet(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    piece pieces[MAX_SLOTS * 2 + 4];
    int n = 0, r;
    uint64_t ts;
    PyObject *seq, *head, *tpl, *args, *tail, *flows;

    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "template_packet takes 7 arguments");
        return NULL;
    }
    seq = a[1]; head = a[2]; tpl = a[3]; args = a[4]; tail = a[5]; flows = a[6];
    if (as_delta(a[0], &ts) < 0 || !PyDict_CheckExact(args) || !PyBytes_CheckExact(seq)
            || add_bytes(pieces, &n, head) < 0)
        Py_RETURN_NONE;
    r = add_template(pieces, &n, tpl, args);
    if (r == -2)
        return NULL;
    if (r < 0)
        Py_RETURN_NONE;
    if (add_bytes(pieces, &n, tail) < 0 || add_bytes(pieces, &n, flows) < 0)
        Py_RETURN_NONE;
    return frame_packet(ts, seq, pieces, n);
}

/* slice_end's packet (below) for a delta already an int64; None where it is not below 128 bytes. */
static PyObject *
end_bytes(uint64_t ts, PyObject *tail)
{
    Py_ssize_t p = 1 + varint_size(ts) + PyBytes_GET_SIZE(tail);
    PyObject *out;
    unsigned char *w;
    if (p >= 128)
        Py_RETURN_NONE;
    out = PyBytes_FromStringAndSize(NULL, 2 + p);
    if (out == NULL)
        return NULL;
    w = (unsigned char *)PyBytes_AS_STRING(out);
    *w++ = 0x0a;
    *w++ = (unsigned char)p;
    *w++ = 0x40;
    w += put_varint(w, ts);
    memcpy(w, PyBytes_AS_STRING(tail), PyBytes_GET_SIZE(tail));
    return out;
}

/*
 * slice_end(ts, tail) -> bytes or None
 *
 * FastEncoder.slice_end's packet: 0x0A, one length byte, timestamp (field 8), then tail (the
 * track's constant bytes). None when the packet would not be below 128 bytes or ts is not an
 * int64 (Python then builds it).
 */
static PyObject *
slice_end(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    uint64_t ts;

    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "slice_end takes 2 arguments");
        return NULL;
    }
    if (as_delta(a[0], &ts) < 0 || !PyBytes_CheckExact(a[1]))
        Py_RETURN_NONE;
    return end_bytes(ts, a[1]);
}

/* A growing byte buffer for args_key. */
typedef struct {
    char *data;
    Py_ssize_t size, cap;
    char small[1024];
} keybuf;

static int
kb_grow(keybuf *b, Py_ssize_t n)
{
    Py_ssize_t cap = (b->size + n) * 2;
    char *d = b->data == b->small ? PyMem_Malloc(cap) : PyMem_Realloc(b->data, cap);
    if (d == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (b->data == b->small)
        memcpy(d, b->small, b->size);
    b->data = d;
    b->cap = cap;
    return 0;
}

/* Room for n more bytes. */
static inline int
kb_reserve(keybuf *b, Py_ssize_t n)
{
    return b->size + n <= b->cap ? 0 : kb_grow(b, n);
}

static inline int
kb_put(keybuf *b, const void *p, Py_ssize_t n)
{
    if (kb_reserve(b, n) < 0)
        return -1;
    memcpy(b->data + b->size, p, n);
    b->size += n;
    return 0;
}

/* A tag byte and a number (a varint of its 64 bits). */
static inline int
kb_tag(keybuf *b, char tag, uint64_t n)
{
    if (kb_reserve(b, 11) < 0)
        return -1;
    b->data[b->size] = tag;
    b->size += 1 + put_varint((unsigned char *)b->data + b->size + 1, n);
    return 0;
}

#define MAX_BLANK 16

/* The ids to blank: a tuple of at most MAX_BLANK str (the usual case), their hashes taken
 * once (str hashes are cached); else any container, asked with ``in``. */
typedef struct {
    PyObject *container;
    Py_ssize_t n;       /* -1: ask the container */
    Py_ssize_t left;    /* not yet met: once all are, no key is compared */
    PyObject *item[MAX_BLANK];
    Py_hash_t hash[MAX_BLANK];
} blanks;

static int
blanks_init(blanks *bl, PyObject *container)
{
    Py_ssize_t i;
    bl->container = container;
    bl->n = -1;
    bl->left = 0;
    if (!PyTuple_CheckExact(container) || PyTuple_GET_SIZE(container) > MAX_BLANK)
        return 0;
    for (i = 0; i < PyTuple_GET_SIZE(container); i++) {
        PyObject *x = PyTuple_GET_ITEM(container, i);
        if (!PyUnicode_CheckExact(x))
            return 0;
        bl->item[i] = x;
        if ((bl->hash[i] = PyObject_Hash(x)) == -1)
            return -1;
    }
    bl->n = bl->left = PyTuple_GET_SIZE(container);
    return 0;
}

/* Whether str key k is to be blanked; -1: error. */
static int
is_blank(blanks *bl, PyObject *k)
{
    Py_ssize_t i;
    Py_hash_t h;
    if (bl->n < 0)
        return PySequence_Contains(bl->container, k);
    if (bl->left == 0)
        return 0;
    if ((h = PyObject_Hash(k)) == -1)
        return -1;
    for (i = 0; i < bl->n; i++) {
        if (bl->hash[i] == h) {
            int eq = bl->item[i] == k ? 1 : PyObject_RichCompareBool(bl->item[i], k, Py_EQ);
            if (eq != 0) {
                bl->left -= eq > 0;  /* a dict's keys differ: each blank is met once at most */
                return eq;
            }
        }
    }
    return 0;
}

/* A str as its tag, kind, length and code units: equal strings give equal bytes (PEP 393
 * strings are canonical), different ones different bytes. */
static inline int
kb_str(keybuf *b, PyObject *s)
{
    int kind;
    Py_ssize_t n;
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(s) < 0)  /* a legacy string made ready (3.10, 3.11) */
        return -1;
#endif
    kind = PyUnicode_KIND(s);
    n = PyUnicode_GET_LENGTH(s);
    if (kb_reserve(b, 11 + n * kind) < 0)
        return -1;
    b->data[b->size] = (char)('0' + kind);
    b->size += 1 + put_varint((unsigned char *)b->data + b->size + 1, (uint64_t)n);
    memcpy(b->data + b->size, PyUnicode_DATA(s), n * kind);
    b->size += n * kind;
    return 0;
}

#define KEY_DEPTH 32

/* 0: written; 1: a value the key does not take (the caller uses the JSON key); -1: error. */
static int
kb_value(keybuf *b, PyObject *v, int depth)
{
    if (depth > KEY_DEPTH)
        return 1;
    if (PyUnicode_CheckExact(v)) {
        return kb_str(b, v);
    } else if (PyBool_Check(v)) {
        return kb_tag(b, v == Py_True ? 'T' : 'F', 0);
    } else if (PyLong_CheckExact(v)) {
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (overflow)
            return 1;
        if (x == -1 && PyErr_Occurred())
            return -1;
        return kb_tag(b, 'i', (uint64_t)x);  /* two's complement: one varint per int64 */
    } else if (PyFloat_CheckExact(v)) {
        double x = PyFloat_AS_DOUBLE(v);
        if (!isfinite(x))  /* JSON null: such args never get a template */
            return 1;
        return kb_tag(b, 'f', 0) < 0 ? -1 : kb_put(b, &x, sizeof(x));
    } else if (PyList_CheckExact(v) || PyTuple_CheckExact(v)) {
        Py_ssize_t i, n = PySequence_Fast_GET_SIZE(v);
        int r;
        if (kb_tag(b, PyList_CheckExact(v) ? 'L' : 'U', n) < 0)
            return -1;
        for (i = 0; i < n; i++) {
            if ((r = kb_value(b, PySequence_Fast_GET_ITEM(v, i), depth + 1)) != 0)
                return r;
        }
        return 0;
    } else if (PyDict_CheckExact(v)) {
        Py_ssize_t pos = 0;
        PyObject *k, *x;
        int r;
        if (kb_tag(b, 'D', PyDict_GET_SIZE(v)) < 0)
            return -1;
        while (PyDict_Next(v, &pos, &k, &x)) {
            if (!PyUnicode_CheckExact(k))
                return 1;
            if (kb_str(b, k) < 0)
                return -1;
            if ((r = kb_value(b, x, depth + 1)) != 0)
                return r;
        }
        return 0;
    }
    return 1;  /* None (JSON null), Decimal, subclasses, anything else */
}

/*
 * args_key(args, blank) -> bytes or None
 *
 * The whole-args template cache's key of an event's args (fast_args.FastArgs._annotations):
 * every key and value in order, the values of the keys in blank written as int 0, as the JSON
 * key is made of the args with those ids set to 0. Bytes that tell apart whatever the JSON key
 * does (order, 1 / 1.0 / true, nesting) and more (a tuple from a list), starting with a zero
 * byte, which no JSON text does. None where the JSON key is to be used: None / NaN / inf
 * anywhere (JSON null: such args never get a template), an int beyond int64, a Decimal, a
 * subclass, a key that is not a str, nesting deeper than 32.
 */
static PyObject *
make_args_key(PyObject *args, PyObject *blank)
{
    keybuf b;
    blanks bl;
    Py_ssize_t pos = 0;
    PyObject *k, *v, *out = NULL;
    static const char zero[1] = {0};
    int r = 0;

    if (!PyDict_CheckExact(args))
        Py_RETURN_NONE;
    if (blanks_init(&bl, blank) < 0)
        return NULL;
    b.data = b.small;
    b.size = 0;
    b.cap = sizeof(b.small);
    if (kb_put(&b, zero, 1) < 0)
        goto fail;
    while (PyDict_Next(args, &pos, &k, &v)) {
        int blank;
        if (!PyUnicode_CheckExact(k)) {
            r = 1;
            break;
        }
        if (kb_str(&b, k) < 0)
            goto fail;
        blank = is_blank(&bl, k);
        if (blank < 0)
            goto fail;
        if (blank) {
            if (kb_tag(&b, 'i', 0) < 0)
                goto fail;
        } else if ((r = kb_value(&b, v, 0)) != 0) {
            if (r < 0)
                goto fail;
            break;
        }
    }
    if (r == 0)
        out = PyBytes_FromStringAndSize(b.data, b.size);
    else
        out = Py_NewRef(Py_None);
fail:
    if (b.data != b.small)
        PyMem_Free(b.data);
    return out;
}

static PyObject *
args_key(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "args_key takes 2 arguments");
        return NULL;
    }
    return make_args_key(a[0], a[1]);
}

#define MAX_FLOWS 8

/* put_flows for an array('q') of ids (flows.py's outgoing ids), read through the buffer
 * protocol; -1 (no error set) for anything else or a negative id (Python then writes it). */
static Py_ssize_t
put_flow_array(unsigned char *w, PyObject *ids, unsigned char tag0, unsigned char tag1, int *count)
{
    Py_buffer b;
    const long long *v;
    Py_ssize_t i, n;
    unsigned char *start = w;
    int j;
    if (!PyObject_CheckBuffer(ids) || PyObject_GetBuffer(ids, &b, PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return -1;
    }
    n = b.len / 8;
    if (b.itemsize != 8 || b.format == NULL || strcmp(b.format, "q") != 0 || *count + n > MAX_FLOWS) {
        PyBuffer_Release(&b);
        return -1;
    }
    v = (const long long *)b.buf;
    for (i = 0; i < n; i++) {
        if (v[i] < 0) {
            PyBuffer_Release(&b);
            return -1;
        }
        *w++ = tag0;
        *w++ = tag1;
        for (j = 0; j < 8; j++)
            *w++ = (unsigned char)((unsigned long long)v[i] >> (8 * j));
    }
    PyBuffer_Release(&b);
    *count += (int)n;
    return w - start;
}

/* Flow ids as FastEncoder writes them (tag, then the id as fixed64) into w; the bytes
 * written, or -1 (more than MAX_FLOWS, or an id that is not an int in [0, 2^64): Python). */
static Py_ssize_t
put_flows(unsigned char *w, PyObject *ids, unsigned char tag0, unsigned char tag1, int *count)
{
    Py_ssize_t i, n;
    unsigned char *start = w;
    if (!PyTuple_CheckExact(ids) && !PyList_CheckExact(ids))
        return put_flow_array(w, ids, tag0, tag1, count);
    n = PySequence_Fast_GET_SIZE(ids);
    if (*count + n > MAX_FLOWS)
        return -1;
    for (i = 0; i < n; i++) {
        PyObject *f = PySequence_Fast_GET_ITEM(ids, i);
        unsigned long long v;
        int j;
        if (!PyLong_CheckExact(f))
            return -1;
        v = PyLong_AsUnsignedLongLong(f);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        *w++ = tag0;
        *w++ = tag1;
        for (j = 0; j < 8; j++)
            *w++ = (unsigned char)(v >> (8 * j));
    }
    *count += (int)n;
    return w - start;
}

/*
 * event_packet(heads, whole, seq, ts, track, cat, name, args, flow_ids, terminating_flow_ids,
 *              kind) -> bytes or None
 *
 * FastEncoder.event's usual case in one call: the packet's head and tail cached for (cat,
 * name, track, kind) in heads (a list [head, tail, ids to blank]), no args or a whole-args
 * template hit in whole (keyed as args_key does), flows as fixed64 fields. None where any of
 * that is not so (first sight, a miss, odd values): FastEncoder.event then does it in Python.
 * The caller counts the template hit and checks that nothing interned is pending.
 */
static PyObject *
event_packet_impl(PyObject *const *a)
{
    piece pieces[MAX_SLOTS * 2 + 4];
    unsigned char fbuf[MAX_FLOWS * 10];
    int n = 0, flows = 0, r;
    uint64_t ts;
    PyObject *heads, *whole, *seq, *args, *key, *parts, *ck, *tpl;
    Py_ssize_t fn = 0, w;

    heads = a[0]; whole = a[1]; seq = a[2]; args = a[7];
    if (!PyDict_CheckExact(heads) || !PyBytes_CheckExact(seq) || as_delta(a[3], &ts) < 0)
        Py_RETURN_NONE;
    key = PyTuple_Pack(4, a[5], a[6], a[4], a[10]);  /* (cat, name, track, kind) */
    if (key == NULL)
        return NULL;
    parts = PyDict_GetItemWithError(heads, key);  /* borrowed */
    Py_DECREF(key);
    if (parts == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    if (!PyList_CheckExact(parts) || PyList_GET_SIZE(parts) != 3)
        Py_RETURN_NONE;
    if ((w = put_flows(fbuf, a[8], 0xf9, 0x02, &flows)) < 0)
        Py_RETURN_NONE;
    fn = w;
    if ((w = put_flows(fbuf + fn, a[9], 0x81, 0x03, &flows)) < 0)
        Py_RETURN_NONE;
    fn += w;
    if (add_bytes(pieces, &n, PyList_GET_ITEM(parts, 0)) < 0)
        Py_RETURN_NONE;
    if (args != Py_None) {
        if (!PyDict_CheckExact(args))
            Py_RETURN_NONE;
        if (PyDict_GET_SIZE(args) > 0) {
            if (!PyDict_CheckExact(whole))
                Py_RETURN_NONE;
            ck = make_args_key(args, PyList_GET_ITEM(parts, 2));
            if (ck == NULL)
                return NULL;
            if (ck == Py_None) {
                Py_DECREF(ck);
                Py_RETURN_NONE;
            }
            tpl = PyDict_GetItemWithError(whole, ck);  /* borrowed: whole keeps it */
            Py_DECREF(ck);
            if (tpl == NULL) {
                if (PyErr_Occurred())
                    return NULL;
                Py_RETURN_NONE;
            }
            r = add_template(pieces, &n, tpl, args);
            if (r == -2)
                return NULL;
            if (r < 0)
                Py_RETURN_NONE;
        }
    }
    if (add_tail(pieces, &n, PyList_GET_ITEM(parts, 1), fbuf, fn) < 0)
        Py_RETURN_NONE;
    return frame_packet(ts, seq, pieces, n);
}

static PyObject *
event_packet(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    if (nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "event_packet takes 11 arguments");
        return NULL;
    }
    return event_packet_impl(a);
}

/* Attribute names read by stream_records (interned at import). */
static PyObject *int_one, *s_keys, *s_kind, *s_category, *s_interner, *s_pending, *s_heads, *s_whole, *s_seq, *s_whole_hits, *s_cat, *s_name, *s_args;

/* A list item that is an exact int in [0, limit): its value, else -1 (no error set). */
static Py_ssize_t
small_index(PyObject *o, Py_ssize_t limit)
{
    Py_ssize_t v;
    if (!PyLong_CheckExact(o))
        return -1;
    v = PyLong_AsSsize_t(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return v < limit ? v : -1;
}

/* 1 when encoder enc's interner has entries pending (a packet must carry them: the Python
 * path writes it), 0 when not, -1 with an exception set. */
static int
interner_pending(PyObject *enc)
{
    PyObject *interner = PyObject_GetAttr(enc, s_interner), *pending;
    int busy;
    if (interner == NULL)
        return -1;
    pending = PyObject_GetAttr(interner, s_pending);
    Py_DECREF(interner);
    if (pending == NULL)
        return -1;
    busy = PyObject_IsTrue(pending);
    Py_DECREF(pending);
    return busy;
}

/* FastEncoder.event's first branch for encoder enc: its packet from event_packet when nothing
 * interned is pending (the hit counted as event() counts it), else None (new reference). */
static PyObject *
encoder_event(PyObject *enc, PyObject *const *rest)
{
    PyObject *a[11], *packet;
    int busy;
    busy = interner_pending(enc);
    if (busy < 0)
        return NULL;
    if (busy)
        Py_RETURN_NONE;
    a[0] = PyObject_GetAttr(enc, s_heads);
    a[1] = a[0] ? PyObject_GetAttr(enc, s_whole) : NULL;
    a[2] = a[1] ? PyObject_GetAttr(enc, s_seq) : NULL;
    if (a[2] == NULL) {
        Py_XDECREF(a[0]);
        Py_XDECREF(a[1]);
        return NULL;
    }
    memcpy(a + 3, rest, 8 * sizeof(PyObject *));
    packet = event_packet_impl(a);
    Py_DECREF(a[0]);
    Py_DECREF(a[1]);
    Py_DECREF(a[2]);
    if (packet != NULL && packet != Py_None) {
        int has = PyObject_IsTrue(rest[4]);  /* the args */
        if (has < 0) {
            Py_DECREF(packet);
            return NULL;
        }
        if (has) {
            PyObject *hits = PyObject_GetAttr(enc, s_whole_hits), *more;
            if (hits == NULL) {
                Py_DECREF(packet);
                return NULL;
            }
            more = PyNumber_Add(hits, int_one);
            Py_DECREF(hits);
            if (more == NULL || PyObject_SetAttr(enc, s_whole_hits, more) < 0) {
                Py_XDECREF(more);
                Py_DECREF(packet);
                return NULL;
            }
            Py_DECREF(more);
        }
    }
    return packet;
}

/* Plan.args_of's inputs for a rewritten slice (see rewritten_args), read from the tuple rw:
 * (lanes, other, device_of, placements) with placements a dict of Placement, or
 * (lanes, other, device_of, row, node, replay, hw, how, nodes, kept, every, strategies, path): a
 * CompactPlacements' columns (join/model.py). lanes and the int columns are int32 buffers,
 * how a bytes buffer, path None or an int64 buffer (-2: none, -1: on the critical path, else the
 * slack); -2^31 marks no lane / no row value. */
typedef struct {
    Py_buffer bufs[7];
    int nbufs;
    const int32_t *lanes, *row, *node, *replay, *hw;
    const unsigned char *how;
    const long long *path;
    Py_ssize_t nlanes, nrow, ncol, npath;
    PyObject *other, *device_of, *placements, *nodes, *kept, *strategies;
    int compact, every;
} rewrite_ctx;

#define NO_VALUE INT32_MIN

static PyObject *s_replay, *s_join, *s_join_ambiguous, *s_original_stream, *s_annotated_stream, *s_stream,
    *s_device, *s_ph, *s_path_arg, *s_slack_arg;

static void
rw_release(rewrite_ctx *c)
{
    int k;
    for (k = 0; k < c->nbufs; k++)
        PyBuffer_Release(&c->bufs[k]);
    c->nbufs = 0;
}

static int
rw_buffer(rewrite_ctx *c, PyObject *o, Py_ssize_t itemsize, Py_ssize_t *n)
{
    Py_buffer *b = &c->bufs[c->nbufs];
    if (PyObject_GetBuffer(o, b, PyBUF_SIMPLE) < 0)
        return -1;
    c->nbufs++;
    *n = b->len / itemsize;
    return 0;
}

/* 1: c filled from rw; 0: rw is None (args_of for every rewritten slice); -1: error. */
static int
rw_init(rewrite_ctx *c, PyObject *rw)
{
    Py_ssize_t n, size;
    memset(c, 0, sizeof(*c));
    if (rw == Py_None)
        return 0;
    size = PyTuple_CheckExact(rw) ? PyTuple_GET_SIZE(rw) : -1;
    if (size != 4 && size != 13) {
        PyErr_SetString(PyExc_TypeError, "stream_records: rw is not a rewrite tuple");
        return -1;
    }
    c->other = PyTuple_GET_ITEM(rw, 1);
    c->device_of = PyTuple_GET_ITEM(rw, 2);
    if (!PyDict_CheckExact(c->other) || !PyDict_CheckExact(c->device_of))
        goto bad;
    if (rw_buffer(c, PyTuple_GET_ITEM(rw, 0), 4, &c->nlanes) < 0)
        return -1;
    c->lanes = (const int32_t *)c->bufs[0].buf;
    if (size == 4) {
        c->placements = PyTuple_GET_ITEM(rw, 3);
        if (!PyDict_CheckExact(c->placements))
            goto bad;
        return 1;
    }
    c->compact = 1;
    if (rw_buffer(c, PyTuple_GET_ITEM(rw, 3), 4, &c->nrow) < 0
            || rw_buffer(c, PyTuple_GET_ITEM(rw, 4), 4, &c->ncol) < 0)
        goto fail;
    c->row = (const int32_t *)c->bufs[1].buf;
    c->node = (const int32_t *)c->bufs[2].buf;
    if (rw_buffer(c, PyTuple_GET_ITEM(rw, 5), 4, &n) < 0 || n != c->ncol)
        goto fail_size;
    c->replay = (const int32_t *)c->bufs[3].buf;
    if (rw_buffer(c, PyTuple_GET_ITEM(rw, 6), 4, &n) < 0 || n != c->ncol)
        goto fail_size;
    c->hw = (const int32_t *)c->bufs[4].buf;
    if (rw_buffer(c, PyTuple_GET_ITEM(rw, 7), 1, &n) < 0 || n != c->ncol)
        goto fail_size;
    c->how = (const unsigned char *)c->bufs[5].buf;
    c->nodes = PyTuple_GET_ITEM(rw, 8);
    c->kept = PyTuple_GET_ITEM(rw, 9);
    c->every = PyObject_IsTrue(PyTuple_GET_ITEM(rw, 10));
    c->strategies = PyTuple_GET_ITEM(rw, 11);
    if (c->every < 0)
        goto fail;
    if (PyTuple_GET_ITEM(rw, 12) != Py_None) {
        if (rw_buffer(c, PyTuple_GET_ITEM(rw, 12), 8, &c->npath) < 0)
            goto fail;
        c->path = (const long long *)c->bufs[6].buf;
    }
    if (!PyList_CheckExact(c->nodes) || !PyDict_CheckExact(c->kept) || !PyTuple_CheckExact(c->strategies)
            || PyTuple_GET_SIZE(c->strategies) < 1)
        goto bad;
    return 1;
fail_size:
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "stream_records: placement columns of different lengths");
    goto fail;
bad:
    PyErr_SetString(PyExc_TypeError, "stream_records: unexpected rewrite containers");
fail:
    rw_release(c);
    return -1;
}

static int
set_int64(PyObject *d, PyObject *key, long long v)
{
    PyObject *o = PyLong_FromLongLong(v);
    int r;
    if (o == NULL)
        return -1;
    r = PyDict_SetItem(d, key, o);
    Py_DECREF(o);
    return r;
}

/* Plan.args_of(i) for event e: a new reference, NULL on error, or None (a new reference) where
 * something is off the usual path (a placement kept whole, args that are not a dict, a phase
 * that is not a str): the caller then calls args_of itself. */
static PyObject *
rewritten_args(rewrite_ctx *c, PyObject *e, Py_ssize_t i, PyObject *i_o)
{
    PyObject *args, *lane = NULL, *ph;
    int copied = 0;
    args = PyObject_GetAttr(e, s_args);
    if (args == NULL)
        return NULL;
    if (!PyDict_CheckExact(args))
        goto python;
    if (i < c->nlanes && c->lanes[i] != NO_VALUE) {
        lane = PyLong_FromLong(c->lanes[i]);
        if (lane == NULL)
            goto fail;
    } else {
        lane = PyDict_GetItemWithError(c->other, i_o);
        if (lane == NULL && PyErr_Occurred())
            goto fail;
        if (lane == Py_None)
            lane = NULL;
        Py_XINCREF(lane);
    }
    if (lane != NULL) {
        PyObject *copy = PyDict_Copy(args), *d;
        if (copy == NULL)
            goto fail;
        Py_SETREF(args, copy);
        copied = 1;
        if (c->compact) {
            Py_ssize_t r = i < c->nrow ? c->row[i] : -1;
            if (r >= c->ncol)
                goto python;
            if (r < 0) {
                int kept = PyDict_Contains(c->kept, i_o);
                if (kept < 0)
                    goto fail;
                if (kept)
                    goto python;
            } else {
                PyObject *triple, *base, *strategy;
                Py_ssize_t nd = c->node[r], how = c->how[r];
                if (nd < 0 || nd >= PyList_GET_SIZE(c->nodes) || (how & 7) >= PyTuple_GET_SIZE(c->strategies))
                    goto python;
                triple = PyList_GET_ITEM(c->nodes, nd);
                if (!PyTuple_CheckExact(triple) || PyTuple_GET_SIZE(triple) != 3)
                    goto python;
                base = PyTuple_GET_ITEM(triple, 1);
                if (!PyDict_CheckExact(base))
                    goto python;
                strategy = PyTuple_GET_ITEM(c->strategies, how & 7);
                if (PyDict_Update(args, base) < 0
                        || (c->replay[r] != NO_VALUE && set_int64(args, s_replay, c->replay[r]) < 0)
                        || PyDict_SetItem(args, s_join, strategy) < 0
                        || (how >= 8 && PyDict_SetItem(args, s_join_ambiguous, Py_True) < 0))
                    goto fail;
                if (c->every) {
                    if (c->hw[r] != NO_VALUE && set_int64(args, s_original_stream, c->hw[r]) < 0)
                        goto fail;
                } else if (PyDict_SetItem(args, s_annotated_stream, PyTuple_GET_ITEM(triple, 0)) < 0) {
                    goto fail;
                }
                if (c->path != NULL && r < c->npath && c->path[r] != -2) { /* the critical path arg, last */
                    long long v = c->path[r];
                    if (v < -1)
                        goto python;
                    if ((v == -1 ? PyDict_SetItem(args, s_path_arg, Py_True) : set_int64(args, s_slack_arg, v)) < 0)
                        goto fail;
                }
            }
        } else {
            PyObject *p = PyDict_GetItemWithError(c->placements, i_o);
            if (p == NULL && PyErr_Occurred())
                goto fail;
            if (p != NULL) {
                PyObject *pa = PyObject_GetAttr(p, s_args);
                int r;
                if (pa == NULL)
                    goto fail;
                if (!PyDict_CheckExact(pa)) {
                    Py_DECREF(pa);
                    goto python;
                }
                r = PyDict_Update(args, pa);
                Py_DECREF(pa);
                if (r < 0)
                    goto fail;
            }
        }
        if (PyDict_SetItem(args, s_stream, lane) < 0)
            goto fail;
        d = PyDict_GetItemWithError(c->device_of, i_o);
        if (d == NULL && PyErr_Occurred())
            goto fail;
        if (d != NULL && d != Py_None && PyDict_SetItem(args, s_device, d) < 0)
            goto fail;
    }
    ph = PyObject_GetAttr(e, s_ph);
    if (ph == NULL)
        goto fail;
    if (!PyUnicode_CheckExact(ph)) {
        Py_DECREF(ph);
        goto python;
    }
    if (PyUnicode_CompareWithASCIIString(ph, "X") != 0 && PyUnicode_CompareWithASCIIString(ph, "i") != 0
            && PyUnicode_CompareWithASCIIString(ph, "I") != 0) {
        int has = PyDict_Contains(args, s_ph);
        if (has < 0) {
            Py_DECREF(ph);
            goto fail;
        }
        if (!has) {
            if (!copied) {
                PyObject *copy = PyDict_Copy(args);
                if (copy == NULL) {
                    Py_DECREF(ph);
                    goto fail;
                }
                Py_SETREF(args, copy);
            }
            if (PyDict_SetItem(args, s_ph, ph) < 0) {
                Py_DECREF(ph);
                goto fail;
            }
        }
    }
    Py_DECREF(ph);
    Py_XDECREF(lane);
    return args;
python:
    Py_XDECREF(lane);
    Py_DECREF(args);
    Py_RETURN_NONE;
fail:
    Py_XDECREF(lane);
    Py_DECREF(args);
    return NULL;
}

/* Record and plan kinds as plan.py numbers them, and the packet types (packets.py); emit.py
 * uses stream_records only where its constants are these. */
#define R_END 0
#define R_BEGIN 1
#define K_SLICE 1
#define K_SLICE_REWRITTEN 2
#define K_INSTANT 3
#define T_SLICE_BEGIN 1
#define T_INSTANT 3

/* FastArgs._one(k, v) where it needs nothing new: the key seen (its [prefix, cache, as text]),
 * and the value's bytes cached, or an int in [0, 2^63) (encoded here: the bytes _one makes
 * whether or not its cache holds them; the cache is not filled). Adds the piece (none for a key
 * left out); -1 where Python is to encode it (first sight, a string not cached, any other
 * value), with no error set; -2 on error. */
static int
cached_arg(piece *pieces, int *n, PyObject *keys, PyObject *k, PyObject *v)
{
    PyObject *ks, *prefix, *cache, *b;
    ks = PyDict_GetItemWithError(keys, k);
    if (ks == NULL)
        return PyErr_Occurred() ? -2 : -1;
    if (!PyList_CheckExact(ks) || PyList_GET_SIZE(ks) != 3)
        return -1;
    prefix = PyList_GET_ITEM(ks, 0);
    if (prefix == Py_None)
        return 0;  /* a key not kept: written as nothing */
    if (!PyBytes_CheckExact(prefix) || *n >= MAX_SLOTS * 2 + 1)
        return -1;
    cache = PyList_GET_ITEM(ks, 1);
    if (cache != Py_None) {
        if (!PyDict_CheckExact(cache) || !(PyLong_CheckExact(v) || PyUnicode_CheckExact(v)))
            return -1;
        b = PyDict_GetItemWithError(cache, v);
        if (b != NULL)
            return add_bytes(pieces, n, b) < 0 ? -1 : 0;
        if (PyErr_Occurred())
            return -2;
        if (!PyLong_CheckExact(v))
            return -1;  /* a string not cached: Python (it may intern it) */
    }
    {  /* an int: its annotation from the name's prefix, the bytes _one makes with or without its cache */
        uint64_t value;
        if (as_id(v, &value) < 0 || PyBytes_GET_SIZE(prefix) + 1 + varint_size(value) >= 128)
            return -1;
        put_slot(pieces, n, prefix, 2, value);
        return 0;
    }
}

/* FastEncoder.event(ts, track, cat, name, args, (), (), cacheable=False)'s packet where every
 * arg is cached or an int (cached_arg) and the head is: a projected scope range. None (a new reference)
 * where Python is to build it, NULL on error. */
static PyObject *
uncached_event(PyObject *enc, PyObject *ts_o, PyObject *track, PyObject *cat, PyObject *name, PyObject *args)
{
    piece pieces[MAX_SLOTS * 2 + 4];
    int n = 0, busy, r = 0;
    uint64_t ts;
    Py_ssize_t pos = 0;
    PyObject *heads, *keys = NULL, *seq = NULL, *key, *parts, *k, *v, *out = NULL;
    static PyObject *slice_begin = NULL;

    if (as_delta(ts_o, &ts) < 0 || !PyDict_CheckExact(args))
        Py_RETURN_NONE;
    busy = interner_pending(enc);
    if (busy < 0)
        return NULL;
    if (busy)
        Py_RETURN_NONE;
    if (slice_begin == NULL && (slice_begin = PyLong_FromLong(T_SLICE_BEGIN)) == NULL)
        return NULL;
    heads = PyObject_GetAttr(enc, s_heads);
    if (heads == NULL)
        return NULL;
    if (!PyDict_CheckExact(heads)) {
        Py_DECREF(heads);
        Py_RETURN_NONE;
    }
    key = PyTuple_Pack(4, cat, name, track, slice_begin);
    if (key == NULL) {
        Py_DECREF(heads);
        return NULL;
    }
    parts = PyDict_GetItemWithError(heads, key);
    Py_DECREF(key);
    if (parts == NULL || !PyList_CheckExact(parts) || PyList_GET_SIZE(parts) != 3) {
        Py_DECREF(heads);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    Py_INCREF(parts);
    Py_DECREF(heads);
    keys = PyObject_GetAttr(enc, s_keys);
    seq = keys ? PyObject_GetAttr(enc, s_seq) : NULL;
    if (seq == NULL)
        goto done;
    if (!PyDict_CheckExact(keys) || !PyBytes_CheckExact(seq) || add_bytes(pieces, &n, PyList_GET_ITEM(parts, 0)) < 0)
        goto python;
    while (PyDict_Next(args, &pos, &k, &v)) {
        r = cached_arg(pieces, &n, keys, k, v);
        if (r == -2)
            goto done;
        if (r < 0)
            goto python;
    }
    if (add_bytes(pieces, &n, PyList_GET_ITEM(parts, 1)) < 0)
        goto python;
    out = frame_packet(ts, seq, pieces, n);
    goto done;
python:
    out = Py_NewRef(Py_None);
done:
    Py_DECREF(parts);
    Py_XDECREF(keys);
    Py_XDECREF(seq);
    return out;
}


/*
 * A rewritten slice's packet straight from its JSON text (a two-pass read's second pass).
 *
 * A graph replay's kernel repeats the text of the same kernel in every other replay but for
 * its times and its ids (VARYING_KEYS: its launch's correlation, ...). Its packet is made
 * once the usual way (the event decoded, its args rewritten, the whole-args template found);
 * the text with those ids blanked, together with everything else the packet depends on (the
 * sequence, the track, the kind, and the rewrite: lane, placement row's node, strategy,
 * replay and critical path kinds, hardware stream, device), keys that packet's constant
 * parts and where each of its template slots takes its value: an id read from the text, the
 * replay or the critical path slack from the placement's columns, or the node's own value (its
 * graph node id: the node is part of the key). Later events whose key
 * is the same are framed from those parts with their own ids, never decoded: the same bytes,
 * since a text decodes to the same values wherever it is, the encoder's iids never change
 * and every cached part is a function of what the key holds. Anything off the usual path
 * (escapes in a key, an id that is not a plain integer below 2^63, a name repeated, a value
 * that would not be one varint) is decoded and made as before.
 */

#define MAX_TEXT_VARS 8
#define MAX_TEXT_NAMES 16
#define TX_REPLAY 100
#define TX_SLACK 101
#define TX_CONST 102
#define TX_SOURCE 9  /* a slot's source: its code, then (TX_CONST) its value, 8 bytes */
#define TX_ID_WORDS 13
#define TX_CACHE_LIMIT (1 << 16)

typedef struct {
    int on;
    const char *block;          /* the batch's bytes */
    Py_ssize_t nblock;
    long long lo;               /* the file offset of block[0] */
    Py_ssize_t nruns;           /* > 0: the batch's bytes in pieces of the file (runs), in file order: */
    const char **run;           /* each one's bytes, */
    Py_ssize_t *nrun;           /* its length */
    long long *runlo;           /* and its file offset */
    Py_buffer offs;             /* every event's text offset (the first pass's int64 array) */
    const long long *off;
    Py_ssize_t noff;
    PyObject *cache;            /* text key (bytes) -> entry (see tx_store) */
    PyObject *decode_one;       /* index -> the event decoded (a miss) */
    PyObject *names;            /* the varying keys (a tuple of str) */
    const char *name[MAX_TEXT_NAMES];
    Py_ssize_t nname[MAX_TEXT_NAMES];
    int nnames;
} text_ctx;

typedef struct {
    const char *ph, *cat, *name, *args;
    Py_ssize_t nph, ncat, nname, nargs;
    int nv;                              /* varying ids found in args, in text order */
    const char *vat[MAX_TEXT_VARS];      /* each one's digits */
    Py_ssize_t vlen[MAX_TEXT_VARS];
    int vkey[MAX_TEXT_VARS];             /* its key's index in names */
    uint64_t vval[MAX_TEXT_VARS];        /* the int, or the double's bits */
    int vfloat[MAX_TEXT_VARS];           /* 1: a double (a number with a fraction or an exponent) */
} text_event;

static void
tx_release(text_ctx *t)
{
    if (t->off != NULL)
        PyBuffer_Release(&t->offs);
    PyMem_Free((void *)t->run);
    PyMem_Free(t->nrun);
    PyMem_Free(t->runlo);
    t->run = NULL;
    t->nrun = NULL;
    t->runlo = NULL;
    t->nruns = 0;
    t->off = NULL;
    t->on = 0;
}

/* 1: t filled from texts (block, lo, offsets, cache, decode_one, names), block the batch's
 * bytes (lo: their file offset) or a list of pieces of the file in file order (lo: the list of
 * their offsets); 0: texts is None; -1: error. */
static int
tx_init(text_ctx *t, PyObject *texts)
{
    PyObject *block, *lo;
    int k;
    memset(t, 0, sizeof(*t));
    if (texts == Py_None)
        return 0;
    if (!PyTuple_CheckExact(texts) || PyTuple_GET_SIZE(texts) != 6) {
        PyErr_SetString(PyExc_TypeError, "stream_records: texts is not a (block, lo, offsets, cache, decode, names) tuple");
        return -1;
    }
    block = PyTuple_GET_ITEM(texts, 0);
    lo = PyTuple_GET_ITEM(texts, 1);
    t->cache = PyTuple_GET_ITEM(texts, 3);
    t->decode_one = PyTuple_GET_ITEM(texts, 4);
    t->names = PyTuple_GET_ITEM(texts, 5);
    if (!(PyBytes_CheckExact(block) || PyList_CheckExact(block))
            || (!PyList_CheckExact(block) && as_int64(lo, &t->lo) < 0)
            || !PyDict_CheckExact(t->cache)
            || !PyCallable_Check(t->decode_one) || !PyTuple_CheckExact(t->names)
            || PyTuple_GET_SIZE(t->names) > MAX_TEXT_NAMES) {
        PyErr_SetString(PyExc_TypeError, "stream_records: unexpected texts");
        return -1;
    }
    for (k = 0; k < PyTuple_GET_SIZE(t->names); k++) {
        PyObject *s = PyTuple_GET_ITEM(t->names, k);
        if (!PyUnicode_CheckExact(s) || !PyUnicode_IS_ASCII(s)) {
            PyErr_SetString(PyExc_TypeError, "stream_records: the varying keys are not ASCII str");
            return -1;
        }
        t->name[k] = (const char *)PyUnicode_DATA(s);
        t->nname[k] = PyUnicode_GET_LENGTH(s);
    }
    t->nnames = (int)PyTuple_GET_SIZE(t->names);
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(texts, 2), &t->offs, PyBUF_FORMAT) < 0)
        return -1;
    if (t->offs.itemsize != 8 || t->offs.format == NULL || strcmp(t->offs.format, "q") != 0) {
        PyBuffer_Release(&t->offs);
        PyErr_SetString(PyExc_TypeError, "stream_records: the offsets are not an int64 array");
        return -1;
    }
    t->off = (const long long *)t->offs.buf;
    t->noff = t->offs.len / 8;
    if (PyList_CheckExact(block)) {
        Py_ssize_t n = PyList_GET_SIZE(block);
        if (n == 0 || !PyList_CheckExact(lo) || PyList_GET_SIZE(lo) != n) {
            tx_release(t);
            PyErr_SetString(PyExc_TypeError, "stream_records: pieces without their offsets");
            return -1;
        }
        t->run = PyMem_Malloc((size_t)n * sizeof(char *));
        t->nrun = PyMem_Malloc((size_t)n * sizeof(Py_ssize_t));
        t->runlo = PyMem_Malloc((size_t)n * sizeof(long long));
        t->nruns = n;
        if (t->run == NULL || t->nrun == NULL || t->runlo == NULL) {
            tx_release(t);
            PyErr_NoMemory();
            return -1;
        }
        for (k = 0; k < n; k++) {
            PyObject *piece = PyList_GET_ITEM(block, k);
            if (!PyBytes_CheckExact(piece) || as_int64(PyList_GET_ITEM(lo, k), &t->runlo[k]) < 0
                    || (k > 0 && t->runlo[k] < t->runlo[k - 1] + t->nrun[k - 1])) {
                tx_release(t);
                PyErr_SetString(PyExc_TypeError, "stream_records: pieces not bytes in file order");
                return -1;
            }
            t->run[k] = PyBytes_AS_STRING(piece);
            t->nrun[k] = PyBytes_GET_SIZE(piece);
        }
        t->on = 1;
        return 1;
    }
    t->block = PyBytes_AS_STRING(block);
    t->nblock = PyBytes_GET_SIZE(block);
    t->on = 1;
    return 1;
}

static inline const char *
tx_ws(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r'))
        p++;
    return p;
}

/* Past the string opened at p ('"'), or NULL; *esc set where it holds a backslash. */
static const char *
tx_string(const char *p, const char *e, int *esc)
{
    for (p++; p < e; p++) {
        unsigned char c = (unsigned char)*p;
        if (c == '"')
            return p + 1;
        if (c == '\\') {
            *esc = 1;
            p++;
        } else if (c < 0x20) {
            return NULL;
        }
    }
    return NULL;
}

static const char *tx_value(const char *p, const char *e, int depth);

/* After a member or an item: 1 (*p past the comma and spaces) where another follows, 0 (*p past
 * close) where the object or array ends, -1 for anything else. */
static int
tx_next(const char **p, const char *e, char close)
{
    const char *q = tx_ws(*p, e);
    if (q >= e)
        return -1;
    if (*q == ',') {
        *p = tx_ws(q + 1, e);
        return 1;
    }
    if (*q != close)
        return -1;
    *p = q + 1;
    return 0;
}

/* Past the object or array opened at p, or NULL. */
static const char *
tx_container(const char *p, const char *e, int depth)
{
    char close = *p == '{' ? '}' : ']';
    int obj = *p == '{', esc = 0;
    if (depth > 32)
        return NULL;
    p = tx_ws(p + 1, e);
    if (p < e && *p == close)
        return p + 1;
    for (;;) {
        if (obj) {
            if (p >= e || *p != '"' || (p = tx_string(p, e, &esc)) == NULL)
                return NULL;
            p = tx_ws(p, e);
            if (p >= e || *p != ':')
                return NULL;
            p = tx_ws(p + 1, e);
        }
        if ((p = tx_value(p, e, depth + 1)) == NULL)
            return NULL;
        switch (tx_next(&p, e, close)) {
        case 1:
            continue;
        case 0:
            return p;
        default:
            return NULL;
        }
    }
}

/* Past the value at p (the text was read whole by the first pass), or NULL. */
static const char *
tx_value(const char *p, const char *e, int depth)
{
    const char *s = p;
    int esc = 0;
    if (p >= e)
        return NULL;
    if (*p == '"')
        return tx_string(p, e, &esc);
    if (*p == '{' || *p == '[')
        return tx_container(p, e, depth);
    while (p < e && ((*p >= '0' && *p <= '9') || *p == '-' || *p == '+' || *p == '.' || (*p >= 'a' && *p <= 'z')
                     || *p == 'E'))
        p++;
    return p > s ? p : NULL;
}

/* A JSON integer in [0, 2^63) at p (the value whole: what follows is no part of a number). */
static int
tx_uint(const char *p, const char *e, const char **end, uint64_t *v)
{
    const char *s = p;
    uint64_t x = 0;
    if (p >= e || *p < '0' || *p > '9' || (*p == '0' && p + 1 < e && p[1] >= '0' && p[1] <= '9'))
        return -1;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        if (p - s >= 19)
            return -1;
        x = x * 10 + (uint64_t)(*p - '0');
    }
    if (p < e && (*p == '.' || *p == 'e' || *p == 'E' || *p == '-' || *p == '+' || (*p >= 'a' && *p <= 'z')))
        return -1;
    if (x >= (UINT64_C(1) << 63))
        return -1;
    *end = p;
    *v = x;
    return 0;
}

/* A JSON number at p: a plain integer in [0, 2^63) (*is_float 0), or one with a fraction or an
 * exponent whose double is finite (*is_float 1, *v its bits: float() of its text, which is
 * correctly rounded, as msgspec's decode is); -1 for anything else (a negative or larger int
 * decodes to an int no slot takes inline). */
static int
tx_number(const char *p, const char *e, const char **end, uint64_t *v, int *is_float)
{
    const char *s = p, *q = p;
    char buf[64], *stop;
    double d;
    int frac = 0;
    if (tx_uint(p, e, end, v) == 0) {
        *is_float = 0;
        return 0;
    }
    if (q < e && *q == '-')
        q++;
    if (q >= e || *q < '0' || *q > '9' || (*q == '0' && q + 1 < e && q[1] >= '0' && q[1] <= '9'))
        return -1;
    while (q < e && *q >= '0' && *q <= '9')
        q++;
    if (q < e && *q == '.') {
        frac = 1;
        if (++q >= e || *q < '0' || *q > '9')
            return -1;
        while (q < e && *q >= '0' && *q <= '9')
            q++;
    }
    if (q < e && (*q == 'e' || *q == 'E')) {
        frac = 1;
        q++;
        if (q < e && (*q == '+' || *q == '-'))
            q++;
        if (q >= e || *q < '0' || *q > '9')
            return -1;
        while (q < e && *q >= '0' && *q <= '9')
            q++;
    }
    if (!frac || q - s >= (Py_ssize_t)sizeof(buf) || (q < e && (*q == '.' || (*q >= 'a' && *q <= 'z') || *q == 'E')))
        return -1;
    memcpy(buf, s, (size_t)(q - s));
    buf[q - s] = 0;
    d = PyOS_string_to_double(buf, &stop, NULL);
    if (d == -1.0 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    if (stop != buf + (q - s) || !isfinite(d))
        return -1;
    memcpy(v, &d, sizeof d);
    *is_float = 1;
    *end = q;
    return 0;
}

/* The index of key k (n bytes, no escape) among the varying keys, or -1. */
static int
tx_name(const text_ctx *t, const char *k, Py_ssize_t n)
{
    int j;
    for (j = 0; j < t->nnames; j++)
        if (t->nname[j] == n && memcmp(t->name[j], k, (size_t)n) == 0)
            return j;
    return -1;
}

/* The args object at p: its varying ids (each a plain integer, each key once) into ev; past it or NULL. */
static const char *
tx_args(const text_ctx *t, const char *p, const char *e, text_event *ev)
{
    p = tx_ws(p + 1, e);
    if (p < e && *p == '}')
        return p + 1;
    for (;;) {
        const char *k;
        int esc = 0, j, m;
        if (p >= e || *p != '"')
            return NULL;
        k = p + 1;
        if ((p = tx_string(p, e, &esc)) == NULL || esc)
            return NULL;  /* an escaped key could spell a varying one */
        j = tx_name(t, k, p - 1 - k);
        p = tx_ws(p, e);
        if (p >= e || *p != ':')
            return NULL;
        p = tx_ws(p + 1, e);
        if (j >= 0) {
            const char *d = p;
            if (ev->nv >= MAX_TEXT_VARS || tx_number(p, e, &p, &ev->vval[ev->nv], &ev->vfloat[ev->nv]) < 0)
                return NULL;
            for (m = 0; m < ev->nv; m++)
                if (ev->vkey[m] == j)
                    return NULL;  /* a key twice: the decode keeps the last */
            ev->vat[ev->nv] = d;
            ev->vlen[ev->nv] = p - d;
            ev->vkey[ev->nv] = j;
            ev->nv++;
        } else if ((p = tx_value(p, e, 2)) == NULL) {
            return NULL;
        }
        switch (tx_next(&p, e, '}')) {
        case 1:
            continue;
        case 0:
            return p;
        default:
            return NULL;
        }
    }
}

/* The event text [p, e): its ph, cat, name (strings) and args (an object), each once; 0 or -1. */
static int
tx_event(const text_ctx *t, const char *p, const char *e, text_event *ev)
{
    memset(ev, 0, sizeof(*ev));
    p = tx_ws(p, e);
    if (p >= e || *p != '{')
        return -1;
    p = tx_ws(p + 1, e);
    for (;;) {
        const char *k, *v, **at = NULL;
        Py_ssize_t nk, *len = NULL;
        int esc = 0;
        if (p >= e || *p != '"')
            return -1;
        k = p + 1;
        if ((p = tx_string(p, e, &esc)) == NULL || esc)
            return -1;
        nk = p - 1 - k;
        p = tx_ws(p, e);
        if (p >= e || *p != ':')
            return -1;
        v = p = tx_ws(p + 1, e);
        if (nk == 4 && memcmp(k, "args", 4) == 0) {
            if (ev->args != NULL || p >= e || *p != '{' || (p = tx_args(t, p, e, ev)) == NULL)
                return -1;
            ev->args = v;
            ev->nargs = p - v;
        } else {
            if ((p = tx_value(p, e, 1)) == NULL)
                return -1;
            if (nk == 2 && memcmp(k, "ph", 2) == 0) {
                at = &ev->ph;
                len = &ev->nph;
            } else if (nk == 3 && memcmp(k, "cat", 3) == 0) {
                at = &ev->cat;
                len = &ev->ncat;
            } else if (nk == 4 && memcmp(k, "name", 4) == 0) {
                at = &ev->name;
                len = &ev->nname;
            }
            if (at != NULL) {
                if (*at != NULL || *v != '"')
                    return -1;
                *at = v;
                *len = p - v;
            }
        }
        switch (tx_next(&p, e, '}')) {
        case 1:
            continue;
        case 0:
            return tx_ws(p, e) == e && ev->ph && ev->cat && ev->name && ev->args ? 0 : -1;
        default:
            return -1;
        }
    }
}

/* The cache key: the identity words, then ph, cat, name and the args text with each id's
 * number replaced by byte 1; 0 between them (neither is ever raw in JSON text). */
static PyObject *
tx_key(const text_event *ev, const long long *id)
{
    Py_ssize_t size = TX_ID_WORDS * 8 + ev->nph + ev->ncat + ev->nname + ev->nargs + 3, at = 0;
    PyObject *key;
    char *w;
    const char *r;
    int j;
    for (j = 0; j < ev->nv; j++)
        size -= ev->vlen[j] - 1;
    key = PyBytes_FromStringAndSize(NULL, size);
    if (key == NULL)
        return NULL;
    w = PyBytes_AS_STRING(key);
    memcpy(w, id, TX_ID_WORDS * 8);
    w += TX_ID_WORDS * 8;
    memcpy(w, ev->ph, (size_t)ev->nph);
    w += ev->nph;
    *w++ = 0;
    memcpy(w, ev->cat, (size_t)ev->ncat);
    w += ev->ncat;
    *w++ = 0;
    memcpy(w, ev->name, (size_t)ev->nname);
    w += ev->nname;
    *w++ = 0;
    r = ev->args;
    for (j = 0; j < ev->nv; j++) {
        at = ev->vat[j] - r;
        memcpy(w, r, (size_t)at);
        w += at;
        *w++ = 1;  /* an int or a double: each hit fills its slot by its own value's kind, as add_slot does */
        r = ev->vat[j] + ev->vlen[j];
    }
    at = ev->args + ev->nargs - r;
    memcpy(w, r, (size_t)at);
    return key;
}

/* d[key] into id[0] (tag, where d holds a value other than None) and id[1] (the value): 0, -1
 * where that value is not an int64, -2 on error. */
static int
tx_dict_int(PyObject *d, PyObject *key, long long tag, long long *id)
{
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v == NULL)
        return PyErr_Occurred() ? -2 : 0;
    if (v == Py_None)
        return 0;
    if (as_int64(v, &id[1]) < 0)
        return -1;
    id[0] = tag;
    return 0;
}

/* What a rewritten slice's packet depends on besides its text and its slots' values (see
 * rewritten_args), as TX_ID_WORDS words; *row: its placement row (-1: none). 0, -1 where its
 * args are left to Plan.args_of (off the text path), -2 on error. */
static int
tx_identity(rewrite_ctx *c, Py_ssize_t i, PyObject *i_o, long long q, long long track, int kind, long long *id,
            Py_ssize_t *row)
{
    int got;
    memset(id, 0, TX_ID_WORDS * 8);
    *row = -1;
    if (!c->compact)
        return -1;
    id[0] = q;
    id[1] = track;
    id[2] = kind;
    if (i < c->nlanes && c->lanes[i] != NO_VALUE) {
        id[3] = 1;
        id[4] = c->lanes[i];
    } else if ((got = tx_dict_int(c->other, i_o, 2, id + 3)) < 0) {
        return got;
    }
    if (id[3] == 0)
        return 0;  /* no lane: the event's own args (rewritten_args) */
    {
        Py_ssize_t r = i < c->nrow ? c->row[i] : -1;
        if (r >= c->ncol)
            return -1;
        if (r < 0) {
            int kept = PyDict_Contains(c->kept, i_o);
            if (kept < 0)
                return -2;
            if (kept)
                return -1;
        } else {
            PyObject *triple;
            Py_ssize_t nd = c->node[r];
            if (nd < 0 || nd >= PyList_GET_SIZE(c->nodes) || (c->how[r] & 7) >= PyTuple_GET_SIZE(c->strategies))
                return -1;
            triple = PyList_GET_ITEM(c->nodes, nd);
            if (!PyTuple_CheckExact(triple) || PyTuple_GET_SIZE(triple) != 3
                    || !PyDict_CheckExact(PyTuple_GET_ITEM(triple, 1)))
                return -1;
            id[5] = 1;
            id[6] = nd;
            id[7] = c->how[r];
            id[8] = c->replay[r] != NO_VALUE;
            id[9] = c->every ? (c->hw[r] == NO_VALUE ? (long long)1 << 40 : c->hw[r]) : -1;
            if (c->path != NULL && r < c->npath && c->path[r] != -2) {
                if (c->path[r] < -1)
                    return -1;
                id[10] = c->path[r] == -1 ? 1 : 2;
            }
            *row = r;
        }
    }
    return tx_dict_int(c->device_of, i_o, 1, id + 11);
}

/* The text of event i in the batch: [*p, *e) less the separators after it; -1 where not there. */
static int
tx_span(const text_ctx *t, Py_ssize_t i, const char **p, const char **e)
{
    long long a, b, lo = t->lo, nblock = t->nblock;
    const char *block = t->block;
    if (i < 0 || i + 1 >= t->noff)
        return -1;
    if (t->nruns > 0) { /* the last piece starting at or before the event */
        Py_ssize_t l = 0, h = t->nruns;
        while (h - l > 1) {
            Py_ssize_t m = (l + h) / 2;
            if (t->runlo[m] <= t->off[i])
                l = m;
            else
                h = m;
        }
        block = t->run[l];
        nblock = t->nrun[l];
        lo = t->runlo[l];
    }
    a = t->off[i] - lo;
    b = t->off[i + 1] - lo;
    if (a < 0 || b > nblock || a >= b)
        return -1;
    while (b > a && (block[b - 1] == ' ' || block[b - 1] == '\t' || block[b - 1] == '\n'
                     || block[b - 1] == '\r' || block[b - 1] == ','))
        b--;
    *p = block + a;
    *e = block + b;
    return 0;
}

/* Flow ids after the template (event_packet_impl's), a kernel's one flow end read from its
 * int32 column (0: none, then term_more); -1 where Python is to write them. */
static Py_ssize_t
tx_flows(unsigned char *fbuf, PyObject *out, int32_t one, PyObject *more)
{
    int flows = 0, j;
    Py_ssize_t fn = 0, w;
    if (out != NULL) {
        if ((w = put_flows(fbuf, out, 0xf9, 0x02, &flows)) < 0)
            return -1;
        fn = w;
    }
    if (one > 0) {
        if (flows + 1 > MAX_FLOWS)
            return -1;
        fbuf[fn++] = 0x81;
        fbuf[fn++] = 0x03;
        for (j = 0; j < 8; j++)
            fbuf[fn++] = (unsigned char)((uint64_t)one >> (8 * j));
    } else if (more != NULL) {
        if ((w = put_flows(fbuf + fn, more, 0x81, 0x03, &flows)) < 0)
            return -1;
        fn += w;
    }
    return fn;
}

/* A slot's value for a hit: code (tx_store's) read from the placement's columns or the text;
 * -1 where it is off the inline path. */
static int
tx_value_of(const rewrite_ctx *c, Py_ssize_t r, const text_event *ev, const unsigned char *src, uint64_t *v,
            int *is_float)
{
    int code = src[0];
    *is_float = 0;
    if (code == TX_CONST) {
        memcpy(v, src + 1, 8);
    } else if (code == TX_REPLAY) {
        if (r < 0 || c->replay[r] == NO_VALUE || c->replay[r] < 0)
            return -1;
        *v = (uint64_t)c->replay[r];
    } else if (code == TX_SLACK) {
        if (r < 0 || c->path == NULL || r >= c->npath || c->path[r] < 0)
            return -1;
        *v = (uint64_t)c->path[r];
    } else {
        if (code >= ev->nv)
            return -1;
        *v = ev->vval[code];
        *is_float = ev->vfloat[code];
    }
    return 0;
}

/* A text hit's slot values: each slot's source (tx_store's codes), in the template's order. */
typedef struct {
    const rewrite_ctx *c;
    Py_ssize_t r;
    const text_event *ev;
    const unsigned char *code;
    Py_ssize_t ncode;
    int s;  /* the next slot */
} tx_slots;

/* add_slot's piece (a slot_fn) with the value the next source gives (key unused: the sources
 * are in the template's order). */
static int
tx_slot(piece *pieces, int *n, PyObject *key, PyObject *head, void *ctx)
{
    tx_slots *x = (tx_slots *)ctx;
    uint64_t v;
    int is_float;
    (void)key;
    if ((x->s + 1) * TX_SOURCE > x->ncode || *n >= MAX_SLOTS * 2 + 1 || !PyBytes_CheckExact(head)
            || tx_value_of(x->c, x->r, x->ev, x->code + x->s * TX_SOURCE, &v, &is_float) < 0)
        return -1;
    x->s++;
    if (is_float) {  /* add_slot's double: a per-event measure (a memset's bandwidth) */
        if (PyBytes_GET_SIZE(head) < 1 || PyBytes_GET_SIZE(head) + 8 >= 128)
            return -1;
        put_slot(pieces, n, head, 3, v);
        return 0;
    }
    if (PyBytes_GET_SIZE(head) + varint_size(v) >= 128)
        return -1;
    put_slot(pieces, n, head, 1, v);
    return 0;
}

/* The packet of a cache hit (entry: parts0, parts1, tpl or None, sources, seq, counts a hit):
 * event_packet_impl's pieces, each slot's value from its source; None where a value is off
 * the inline path. */
static PyObject *
tx_frame(const rewrite_ctx *c, Py_ssize_t r, const text_event *ev, PyObject *entry, uint64_t ts,
         const unsigned char *fbuf, Py_ssize_t fn)
{
    piece pieces[MAX_SLOTS * 2 + 4];
    int n = 0;
    PyObject *tpl = PyTuple_GET_ITEM(entry, 2), *src = PyTuple_GET_ITEM(entry, 3);
    tx_slots x = {c, r, ev, (const unsigned char *)PyBytes_AS_STRING(src), PyBytes_GET_SIZE(src), 0};

    if (add_bytes(pieces, &n, PyTuple_GET_ITEM(entry, 0)) < 0
            || (tpl != Py_None && add_template_with(pieces, &n, tpl, tx_slot, &x) < 0)
            || add_tail(pieces, &n, PyTuple_GET_ITEM(entry, 1), fbuf, fn) < 0)
        Py_RETURN_NONE;
    return frame_packet(ts, PyTuple_GET_ITEM(entry, 4), pieces, n);
}

/* Counts a whole-args template hit on encoder enc (FastEncoder.event's count). */
static int
tx_count_hit(PyObject *enc)
{
    PyObject *hits = PyObject_GetAttr(enc, s_whole_hits), *more;
    if (hits == NULL)
        return -1;
    more = PyNumber_Add(hits, int_one);
    Py_DECREF(hits);
    if (more == NULL)
        return -1;
    if (PyObject_SetAttr(enc, s_whole_hits, more) < 0) {
        Py_DECREF(more);
        return -1;
    }
    Py_DECREF(more);
    return 0;
}

/*
 * Stores the entry for key once event e's packet is made (its head and whole-args template are
 * then in encoder enc's caches): the head's parts for (cat, name, track, kind), the template of
 * its rewritten args (found as event_packet_impl finds it) and where each slot's value comes
 * from: the placement's replay or slack where the rewrite set them, else the id of that key in
 * the text (a slot any other part set, or whose value is not the one its source gives, stores
 * nothing). 0, or -1 with an error set.
 */
static int
tx_store(text_ctx *t, rewrite_ctx *c, Py_ssize_t r, const text_event *ev, PyObject *key, PyObject *enc,
         PyObject *cat, PyObject *name, PyObject *track, PyObject *kind, PyObject *args)
{
    PyObject *heads = NULL, *whole = NULL, *seq = NULL, *hk, *parts, *tpl = Py_None, *ck = NULL, *entry, *src;
    PyObject *base = NULL;
    unsigned char code[MAX_SLOTS * TX_SOURCE];
    int ns = 0, k, result = -1, counts;
    if (PyDict_GET_SIZE(t->cache) >= TX_CACHE_LIMIT)
        PyDict_Clear(t->cache);
    heads = PyObject_GetAttr(enc, s_heads);
    whole = heads ? PyObject_GetAttr(enc, s_whole) : NULL;
    seq = whole ? PyObject_GetAttr(enc, s_seq) : NULL;
    if (seq == NULL)
        goto done;
    if (!PyDict_CheckExact(heads) || !PyBytes_CheckExact(seq) || !PyDict_CheckExact(args))
        goto skip;
    hk = PyTuple_Pack(4, cat, name, track, kind);
    if (hk == NULL)
        goto done;
    parts = PyDict_GetItemWithError(heads, hk);
    Py_DECREF(hk);
    if (parts == NULL) {
        if (PyErr_Occurred())
            goto done;
        goto skip;
    }
    if (!PyList_CheckExact(parts) || PyList_GET_SIZE(parts) != 3 || !PyBytes_CheckExact(PyList_GET_ITEM(parts, 0))
            || !PyBytes_CheckExact(PyList_GET_ITEM(parts, 1)))
        goto skip;
    counts = PyDict_GET_SIZE(args) > 0;
    if (counts) {
        if (!PyDict_CheckExact(whole))
            goto skip;
        ck = make_args_key(args, PyList_GET_ITEM(parts, 2));
        if (ck == NULL)
            goto done;
        if (ck == Py_None)
            goto skip;
        tpl = PyDict_GetItemWithError(whole, ck);
        if (tpl == NULL) {
            if (PyErr_Occurred())
                goto done;
            goto skip;
        }
        if (r >= 0)
            base = PyTuple_GET_ITEM(PyList_GET_ITEM(c->nodes, c->node[r]), 1);
        if (!PyBytes_CheckExact(tpl)) {
            PyObject *slots[MAX_SLOTS];
            int nslots = 0;
            if (PyTuple_CheckExact(tpl) && PyTuple_GET_SIZE(tpl) == 4) {
                if (!PyBytes_CheckExact(PyTuple_GET_ITEM(tpl, 0)) || !PyBytes_CheckExact(PyTuple_GET_ITEM(tpl, 2))
                        || !PyBytes_CheckExact(PyTuple_GET_ITEM(tpl, 3)))
                    goto skip;
                slots[nslots++] = PyTuple_GET_ITEM(tpl, 1);
            } else if (PyList_CheckExact(tpl)) {
                for (k = 0; k < PyList_GET_SIZE(tpl); k++) {
                    PyObject *part = PyList_GET_ITEM(tpl, k);
                    if (PyBytes_CheckExact(part))
                        continue;
                    if (!PyTuple_CheckExact(part) || PyTuple_GET_SIZE(part) != 2
                            || !PyBytes_CheckExact(PyTuple_GET_ITEM(part, 1)) || nslots >= MAX_SLOTS)
                        goto skip;
                    slots[nslots++] = PyTuple_GET_ITEM(part, 0);
                }
                if (PyList_GET_SIZE(tpl) > MAX_SLOTS * 2 + 1)
                    goto skip;
            } else {
                goto skip;
            }
            for (k = 0; k < nslots; k++) {
                PyObject *sk = slots[k], *have, *from_base;
                long long want = 0, v = 0;
                uint64_t bits = 0;
                int have_float = 0;
                int j, found = -1;
                if (!PyUnicode_CheckExact(sk))
                    goto skip;
                have = PyDict_GetItemWithError(args, sk);
                if (have == NULL) {
                    if (PyErr_Occurred())
                        goto done;
                    goto skip;
                }
                if (PyFloat_CheckExact(have)) {  /* a double slot: only a text's value is one */
                    double d = PyFloat_AS_DOUBLE(have);
                    have_float = 1;
                    memcpy(&bits, &d, sizeof d);
                } else if (as_int64(have, &v) < 0 || v < 0) {
                    goto skip;
                } else {
                    have_float = 0;
                }
                memset(code + ns * TX_SOURCE, 0, TX_SOURCE);
                if (!have_float && r >= 0 && PyUnicode_Compare(sk, s_replay) == 0 && c->replay[r] != NO_VALUE) {
                    code[ns++ * TX_SOURCE] = TX_REPLAY;
                    want = c->replay[r];
                } else if (!have_float && r >= 0 && PyUnicode_Compare(sk, s_slack_arg) == 0 && c->path != NULL
                           && r < c->npath && c->path[r] >= 0) {
                    code[ns++ * TX_SOURCE] = TX_SLACK;
                    want = c->path[r];
                } else if (base != NULL && (from_base = PyDict_GetItemWithError(base, sk)) != NULL) {
                    /* the node's value (the node is part of the key): a constant */
                    if (have_float || as_int64(from_base, &want) < 0 || want < 0)
                        goto skip;
                    code[ns * TX_SOURCE] = TX_CONST;
                    memcpy(code + ns * TX_SOURCE + 1, &want, 8);
                    ns++;
                } else {
                    if (PyErr_Occurred())
                        goto done;
                    for (j = 0; j < ev->nv; j++) {
                        PyObject *nm = PyTuple_GET_ITEM(t->names, ev->vkey[j]);
                        int eq = PyUnicode_Compare(sk, nm);
                        if (eq == -1 && PyErr_Occurred())
                            goto done;
                        if (eq == 0) {
                            found = j;
                            break;
                        }
                    }
                    if (found < 0 || ev->vfloat[found] != have_float)
                        goto skip;
                    code[ns++ * TX_SOURCE] = (unsigned char)found;
                    want = (long long)ev->vval[found];
                }
                if (have_float ? bits != ev->vval[code[(ns - 1) * TX_SOURCE]] : v != want)
                    goto skip;
            }
        }
    }
    src = PyBytes_FromStringAndSize((const char *)code, (Py_ssize_t)ns * TX_SOURCE);
    if (src == NULL)
        goto done;
    entry = PyTuple_Pack(6, PyList_GET_ITEM(parts, 0), PyList_GET_ITEM(parts, 1), tpl, src, seq,
                         counts ? Py_True : Py_False);
    Py_DECREF(src);
    if (entry == NULL)
        goto done;
    k = PyDict_SetItem(t->cache, key, entry);
    Py_DECREF(entry);
    if (k < 0)
        goto done;
skip:
    result = 0;
done:
    Py_XDECREF(ck);
    Py_XDECREF(heads);
    Py_XDECREF(whole);
    Py_XDECREF(seq);
    return result;
}

/* Event i decoded (a miss, or off the text path): decode_one(i, its text, or None where the
 * batch does not hold it). A new reference, NULL on error. */
static PyObject *
tx_decode(const text_ctx *t, Py_ssize_t i, PyObject *i_o)
{
    const char *p, *e;
    PyObject *text, *out;
    int r = tx_span(t, i, &p, &e);
    text = r < 0 ? Py_NewRef(Py_None) : PyBytes_FromStringAndSize(p, e - p);
    if (text == NULL)
        return NULL;
    out = PyObject_CallFunctionObjArgs(t->decode_one, i_o, text, NULL);
    Py_DECREF(text);
    return out;
}

/* A rewritten slice's packet from its text where the cache holds its key (new reference), None
 * where it does not or where something is off the text path, NULL on error. *key: its key (a
 * new reference) where the event is on the text path (the caller stores the entry once its
 * packet is made), else NULL; ev and *row: its parsed text and placement row. */
static PyObject *
tx_record(text_ctx *t, rewrite_ctx *c, PyObject *enc, long long q, Py_ssize_t i, PyObject *i_o, PyObject *uuid,
          int pki, uint64_t ts, PyObject *outgoing, const int32_t *onev, Py_ssize_t none, PyObject *term_more,
          PyObject **key, text_event *ev, Py_ssize_t *row)
{
    const char *p, *e;
    long long id[TX_ID_WORDS], track;
    int r, busy;
    PyObject *entry, *packet, *out, *more = NULL;
    unsigned char fbuf[MAX_FLOWS * 10];
    Py_ssize_t fn;
    int32_t one = 0;

    *key = NULL;
    r = tx_span(t, i, &p, &e);
    if (r < 0 || tx_event(t, p, e, ev) < 0 || as_int64(uuid, &track) < 0)
        Py_RETURN_NONE;
    r = tx_identity(c, i, i_o, q, track, pki, id, row);
    if (r == -2)
        return NULL;
    if (r < 0)
        Py_RETURN_NONE;
    *key = tx_key(ev, id);
    if (*key == NULL)
        return NULL;
    entry = PyDict_GetItemWithError(t->cache, *key);
    if (entry == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    busy = interner_pending(enc);
    if (busy < 0)
        return NULL;
    if (busy)
        Py_RETURN_NONE;
    out = PyDict_GetItemWithError(outgoing, i_o);
    if (out == NULL && PyErr_Occurred())
        return NULL;
    if (onev != NULL && i < none && onev[i] != 0) {
        one = onev[i];
    } else {
        more = PyDict_GetItemWithError(term_more, i_o);
        if (more == NULL && PyErr_Occurred())
            return NULL;
    }
    fn = tx_flows(fbuf, out, one, more);
    if (fn < 0)
        Py_RETURN_NONE;
    Py_INCREF(entry);
    packet = tx_frame(c, *row, ev, entry, ts, fbuf, fn);
    if (packet != NULL && packet != Py_None && PyTuple_GET_ITEM(entry, 5) == Py_True && tx_count_hit(enc) < 0)
        Py_CLEAR(packet);
    Py_DECREF(entry);
    return packet;
}

/*
 * stream_records(ts, kinds, keys, uuids, start, plan_kinds, base, seq_of, prevs, tails, encoders,
 *                events, outgoing, term_one, term_more, args_of, begins, batch, step, rw, ranges,
 *                texts) -> int
 *
 * emit._stream's packet loop for its usual records, from record start of the chunk (the four
 * lists ts, kinds, keys, uuids; events: the plan's list, or a two-pass batch's dict): a slice end from its track's cached tail (end_bytes), and an
 * input event's begin or instant (its own args for a SLICE, args_of(i) for a rewritten slice or
 * an instant) through FastEncoder.event's compiled case (encoder_event), else the sequence's
 * begins[q] (FastEncoder.event) with the very arguments the Python loop passes. Terminating
 * flows: term_one (a FlowEnds' int32 column, or None) then term_more (a dict). Each packet is
 * appended to batch and prevs[q] set as the loop does. rw: what Plan.args_of reads
 * (rewrite_ctx), so a rewritten slice's args are made here as it makes them (None: args_of is
 * called). ranges: the plan's projected ranges (a list, or None):
 * a scope range's begin where every arg is cached (uncached_event). Returns the index of the first record
 * it leaves to Python (untouched: a sequence's first packet, a counter, a projected range, an
 * end without a cached tail, values off the common path), or the next one right after a packet
 * that fills the batch to step (the caller writes it), or len(ts) at the end. texts: None, or
 * (block, lo, offsets, cache, decode_one, varying keys) where the two-pass batch in events
 * leaves its rewritten slices undecoded: each is framed from its text (tx_record), or decoded
 * by decode_one(i) into events and made as before (its cache entry then stored: tx_store).
 */
static PyObject *
stream_records(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    PyObject *ts_l, *kinds_l, *keys_l, *uuids_l, *seq_of, *prevs, *tails, *encoders, *events, *outgoing;
    PyObject *term_more, *args_of, *begins, *batch, *no_flows, *ranges;
    Py_buffer pk = {0}, one = {0};
    Py_ssize_t k, n, start, base, step, nk, none = 0, result = -1;
    const signed char *pkv;
    const int32_t *onev = NULL;
    rewrite_ctx rw;
    text_ctx tx;
    text_event txev;
    Py_ssize_t txrow = -1;
    PyObject *txkey = NULL;
    int have_rw;

    if (nargs != 22) {
        PyErr_SetString(PyExc_TypeError, "stream_records takes 22 arguments");
        return NULL;
    }
    ranges = a[20];
    if (ranges != Py_None && !PyList_CheckExact(ranges)) {
        PyErr_SetString(PyExc_TypeError, "stream_records: ranges is not a list");
        return NULL;
    }
    ts_l = a[0]; kinds_l = a[1]; keys_l = a[2]; uuids_l = a[3];
    seq_of = a[7]; prevs = a[8]; tails = a[9]; encoders = a[10]; events = a[11]; outgoing = a[12];
    term_more = a[14]; args_of = a[15]; begins = a[16]; batch = a[17];
    start = PyLong_AsSsize_t(a[4]);
    base = PyLong_AsSsize_t(a[6]);
    step = PyLong_AsSsize_t(a[18]);
    if ((start == -1 || base == -1 || step == -1) && PyErr_Occurred())
        return NULL;
    if (!PyList_CheckExact(ts_l) || !PyList_CheckExact(kinds_l) || !PyList_CheckExact(keys_l)
            || !PyList_CheckExact(uuids_l) || !PyList_CheckExact(seq_of) || !PyList_CheckExact(prevs)
            || !PyList_CheckExact(tails) || !PyList_CheckExact(encoders) || !PyList_CheckExact(begins)
            || !PyList_CheckExact(batch) || !(PyDict_CheckExact(events) || PyList_CheckExact(events))
            || !PyDict_CheckExact(outgoing)
            || !PyDict_CheckExact(term_more)) {
        PyErr_SetString(PyExc_TypeError, "stream_records: unexpected argument types");
        return NULL;
    }
    n = PyList_GET_SIZE(ts_l);
    if (PyList_GET_SIZE(kinds_l) != n || PyList_GET_SIZE(keys_l) != n || PyList_GET_SIZE(uuids_l) != n
            || PyList_GET_SIZE(tails) != PyList_GET_SIZE(encoders)
            || PyList_GET_SIZE(prevs) != PyList_GET_SIZE(encoders)
            || PyList_GET_SIZE(begins) != PyList_GET_SIZE(encoders)) {
        PyErr_SetString(PyExc_ValueError, "stream_records: lists of different lengths");
        return NULL;
    }
    have_rw = rw_init(&rw, a[19]);
    if (have_rw < 0)
        return NULL;
    if (tx_init(&tx, a[21]) < 0) {
        rw_release(&rw);
        return NULL;
    }
    if (PyObject_GetBuffer(a[5], &pk, PyBUF_SIMPLE) < 0) {
        tx_release(&tx);
        rw_release(&rw);
        return NULL;
    }
    pkv = (const signed char *)pk.buf;
    nk = pk.len;
    if (a[13] != Py_None) {
        if (PyObject_GetBuffer(a[13], &one, PyBUF_SIMPLE) < 0) {
            PyBuffer_Release(&pk);
            tx_release(&tx);
            rw_release(&rw);
            return NULL;
        }
        onev = (const int32_t *)one.buf;
        none = one.len / 4;
    }
    no_flows = PyTuple_New(0);
    if (no_flows == NULL)
        goto done;
    for (k = start < 0 ? 0 : start; k < n; k++) {
        PyObject *uuid = PyList_GET_ITEM(uuids_l, k), *ts_o = PyList_GET_ITEM(ts_l, k);
        PyObject *i_o = PyList_GET_ITEM(keys_l, k), *prev_o, *packet, *delta_o;
        Py_ssize_t u = small_index(uuid, PyList_GET_SIZE(seq_of)), q, i;
        long long ts, prev, kind, delta;
        Py_CLEAR(txkey);
        if (u < 0)
            break;
        q = small_index(PyList_GET_ITEM(seq_of, u), PyList_GET_SIZE(encoders));
        if (q < 0)
            break;
        prev_o = PyList_GET_ITEM(prevs, q);
        if (prev_o == Py_None || as_int64(ts_o, &ts) < 0 || as_int64(prev_o, &prev) < 0
                || as_int64(PyList_GET_ITEM(kinds_l, k), &kind) < 0)
            break;
        /* the delta as Python computes it; outside int64 (2^63 ns apart): left to Python */
        if ((prev > 0 && ts < LLONG_MIN + prev) || (prev < 0 && ts > LLONG_MAX + prev))
            break;
        delta = ts - prev;
        i = small_index(i_o, nk);
        if (i < 0)
            break;
        if (kind == R_END) {
            PyObject *tail, *td = PyList_GET_ITEM(tails, q);
            if (pkv[i] == K_INSTANT)
                continue;  /* instants have no end packet */
            if (!PyDict_CheckExact(td))
                break;
            tail = PyDict_GetItemWithError(td, uuid);
            if (tail == NULL) {
                if (PyErr_Occurred())
                    goto done;
                break;
            }
            if (!PyBytes_CheckExact(tail))
                break;
            packet = end_bytes((uint64_t)delta, tail);
            if (packet == NULL)
                goto done;
            if (packet == Py_None) {
                Py_DECREF(packet);
                break;
            }
        } else if (kind == R_BEGIN && i < base) {
            PyObject *e, *args, *cat, *name, *out, *term, *rest[8], *enc;
            int pki = pkv[i], type;
            if (pki != K_SLICE && pki != K_SLICE_REWRITTEN && pki != K_INSTANT)
                break;
            if (tx.on && pki != K_SLICE && have_rw && PyDict_CheckExact(events)) {
                e = PyDict_GetItemWithError(events, i_o);
                if (e == NULL) {  /* left undecoded: its packet from its text, else decoded now */
                    if (PyErr_Occurred())
                        goto done;
                    packet = tx_record(&tx, &rw, PyList_GET_ITEM(encoders, q), q, i, i_o, uuid, pki, (uint64_t)delta,
                                       outgoing, onev, none, term_more, &txkey, &txev, &txrow);
                    if (packet == NULL)
                        goto done;
                    if (packet != Py_None)
                        goto have_packet;
                    Py_DECREF(packet);
                    e = tx_decode(&tx, i, i_o);
                    if (e == NULL)
                        goto done;
                    if (PyDict_SetItem(events, i_o, e) < 0) {
                        Py_DECREF(e);
                        goto done;
                    }
                    Py_DECREF(e);
                }
            }
            if (PyList_CheckExact(events)) {  /* the in-memory read's list of events */
                if (i >= PyList_GET_SIZE(events))
                    break;
                e = PyList_GET_ITEM(events, i);
            } else {  /* a two-pass read's batch: index -> event */
                e = PyDict_GetItemWithError(events, i_o);
                if (e == NULL) {
                    if (PyErr_Occurred())
                        goto done;
                    break;
                }
            }
            Py_INCREF(e);
            cat = PyObject_GetAttr(e, s_cat);
            name = cat ? PyObject_GetAttr(e, s_name) : NULL;
            if (name == NULL) {
                Py_XDECREF(cat);
                Py_DECREF(e);
                goto done;
            }
            if (pki == K_SLICE) {
                args = PyObject_GetAttr(e, s_args);
                type = T_SLICE_BEGIN;
            } else {
                args = have_rw ? rewritten_args(&rw, e, i, i_o) : Py_NewRef(Py_None);
                if (args == Py_None) {
                    Py_DECREF(args);
                    args = PyObject_CallOneArg(args_of, i_o);
                }
                type = pki == K_INSTANT ? T_INSTANT : T_SLICE_BEGIN;
            }
            Py_DECREF(e);
            if (args == NULL) {
                Py_DECREF(cat);
                Py_DECREF(name);
                goto done;
            }
            out = PyDict_GetItemWithError(outgoing, i_o);
            if (out == NULL && PyErr_Occurred()) {
                Py_DECREF(cat);
                Py_DECREF(name);
                Py_DECREF(args);
                goto done;
            }
            out = out ? out : no_flows;
            Py_INCREF(out);
            term = NULL;
            if (onev != NULL && i < none && onev[i] != 0) {
                PyObject *v = PyLong_FromLong(onev[i]);
                term = v ? PyTuple_Pack(1, v) : NULL;
                Py_XDECREF(v);
                if (term == NULL) {
                    Py_DECREF(cat);
                    Py_DECREF(name);
                    Py_DECREF(args);
                    Py_DECREF(out);
                    goto done;
                }
            } else {
                term = PyDict_GetItemWithError(term_more, i_o);
                if (term == NULL && PyErr_Occurred()) {
                    Py_DECREF(cat);
                    Py_DECREF(name);
                    Py_DECREF(args);
                    Py_DECREF(out);
                    goto done;
                }
                term = term ? term : no_flows;
                Py_INCREF(term);
            }
            delta_o = PyLong_FromLongLong(delta);
            if (delta_o == NULL) {
                Py_DECREF(cat);
                Py_DECREF(name);
                Py_DECREF(args);
                Py_DECREF(out);
                Py_DECREF(term);
                goto done;
            }
            rest[0] = delta_o; rest[1] = uuid; rest[2] = cat; rest[3] = name; rest[4] = args;
            rest[5] = out; rest[6] = term;
            rest[7] = type == T_INSTANT ? PyLong_FromLong(T_INSTANT) : PyLong_FromLong(T_SLICE_BEGIN);
            enc = PyList_GET_ITEM(encoders, q);
            packet = rest[7] ? encoder_event(enc, rest) : NULL;
            if (packet == Py_None) {
                Py_DECREF(packet);
                packet = PyObject_Vectorcall(PyList_GET_ITEM(begins, q), rest, 8, NULL);
            }
            /* the head and template this event's packet was made from (by either path) are
             * in the encoder's caches now: stored for the next text with its key */
            if (packet != NULL && txkey != NULL
                    && tx_store(&tx, &rw, txrow, &txev, txkey, enc, cat, name, uuid, rest[7], args) < 0)
                Py_CLEAR(packet);
            Py_DECREF(delta_o);
            Py_XDECREF(rest[7]);
            Py_DECREF(cat);
            Py_DECREF(name);
            Py_DECREF(args);
            Py_DECREF(out);
            Py_DECREF(term);
            if (packet == NULL)
                goto done;
        } else if (kind == R_BEGIN && ranges != Py_None && i - base < PyList_GET_SIZE(ranges)) {
            /* a projected range: a scope's through uncached_event; a replay's (its name not
             * interned: event_named) and anything uncached left to Python */
            PyObject *r = PyList_GET_ITEM(ranges, i - base), *rk, *cat, *name, *args;
            int replay;
            Py_INCREF(r);
            rk = PyObject_GetAttr(r, s_kind);
            if (rk == NULL) {
                Py_DECREF(r);
                goto done;
            }
            replay = !PyUnicode_CheckExact(rk) || PyUnicode_CompareWithASCIIString(rk, "replay") == 0;
            Py_DECREF(rk);
            if (replay) {
                Py_DECREF(r);
                break;
            }
            cat = PyObject_GetAttr(r, s_category);
            name = cat ? PyObject_GetAttr(r, s_name) : NULL;
            args = name ? PyObject_GetAttr(r, s_args) : NULL;
            Py_DECREF(r);
            if (args == NULL) {
                Py_XDECREF(cat);
                Py_XDECREF(name);
                goto done;
            }
            delta_o = PyLong_FromLongLong(delta);
            packet = delta_o ? uncached_event(PyList_GET_ITEM(encoders, q), delta_o, uuid, cat, name, args) : NULL;
            Py_XDECREF(delta_o);
            Py_DECREF(cat);
            Py_DECREF(name);
            Py_DECREF(args);
            if (packet == NULL)
                goto done;
            if (packet == Py_None) {
                Py_DECREF(packet);
                break;
            }
        } else {
            break;
        }
have_packet:
        if (PyList_Append(batch, packet) < 0) {
            Py_DECREF(packet);
            goto done;
        }
        Py_DECREF(packet);
        Py_INCREF(ts_o);
        PyList_SetItem(prevs, q, ts_o);  /* steals ts_o; the previous time released */
        if (PyList_GET_SIZE(batch) >= step) {
            k++;
            break;
        }
    }
    result = k;
done:
    Py_XDECREF(txkey);
    Py_XDECREF(no_flows);
    tx_release(&tx);
    rw_release(&rw);
    PyBuffer_Release(&pk);
    if (onev != NULL)
        PyBuffer_Release(&one);
    return result < 0 ? NULL : PyLong_FromSsize_t(result);
}

/* b"".join(parts) for a list of bytes objects (checked by the caller); NULL on error. */
static PyObject *
join_bytes(PyObject *parts)
{
    Py_ssize_t i, n = PyList_GET_SIZE(parts), size = 0;
    PyObject *out;
    char *w;
    for (i = 0; i < n; i++)
        size += PyBytes_GET_SIZE(PyList_GET_ITEM(parts, i));
    if ((out = PyBytes_FromStringAndSize(NULL, size)) == NULL)
        return NULL;
    w = PyBytes_AS_STRING(out);
    for (i = 0; i < n; i++) {
        PyObject *b = PyList_GET_ITEM(parts, i);
        memcpy(w, PyBytes_AS_STRING(b), (size_t)PyBytes_GET_SIZE(b));
        w += PyBytes_GET_SIZE(b);
    }
    return out;
}

/* The decimal text of v into out (at most 20 bytes, no terminator); returns its length. */
static Py_ssize_t
put_decimal(char *out, long long v)
{
    char tmp[20];
    Py_ssize_t n = 0, k = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[k++] = '-';
    while (n)
        out[k++] = tmp[--n];
    return k;
}

/* The compact JSON text of a list of exact ints that fit int64 ("[2,1,1]": json_args' and
 * list_text's for such a list), as str (as_text) or bytes; NULL with no error for any other list. */
static PyObject *
int_list_text(PyObject *v, int as_text)
{
    char buf[256];
    Py_ssize_t i, n = PyList_GET_SIZE(v), at = 1;
    buf[0] = '[';
    for (i = 0; i < n; i++) {
        PyObject *x = PyList_GET_ITEM(v, i);
        long long y;
        if (!PyLong_CheckExact(x) || as_int64(x, &y) < 0)
            return NULL;
        if ((size_t)at + 24 > sizeof buf)
            return NULL;
        if (i)
            buf[at++] = ',';
        at += put_decimal(buf + at, y);
    }
    buf[at++] = ']';
    return as_text ? PyUnicode_FromStringAndSize(buf, at) : PyBytes_FromStringAndSize(buf, at);
}

/* An exact int64 not yet in its key's cache (FastArgs._one's miss): its annotation written as
 * put_piece writes an uncached int (slot 2: a negative one as its 64-bit two's complement, as
 * wire.varint writes it), and stored in cache while it holds fewer than limit values (else the
 * key's cache is dropped: ks[1] = None, as _one does). A new reference; NULL with no error where
 * the annotation is 128 bytes or more (left to _one), NULL with an error set on failure. */
static PyObject *
int_miss(PyObject *ks, PyObject *cache, PyObject *v, unsigned long long u, Py_ssize_t limit)
{
    PyObject *b;
    piece p;
    int n = 0;
    put_slot(&p, &n, PyList_GET_ITEM(ks, 0), 2, u);
    if (piece_size(&p) - 2 >= 128)
        return NULL;  /* a long name: _one writes it */
    if ((b = PyBytes_FromStringAndSize(NULL, piece_size(&p))) == NULL)
        return NULL;
    put_piece((unsigned char *)PyBytes_AS_STRING(b), &p);
    if (PyDict_GET_SIZE(cache) >= limit) {
        if (PyList_SetItem(ks, 1, Py_NewRef(Py_None)) < 0) {
            Py_DECREF(b);
            return NULL;
        }
    } else if (PyDict_SetItem(cache, v, b) < 0) {
        Py_DECREF(b);
        return NULL;
    }
    return b;
}

/* One arg's encoded annotation (FastArgs._one) where its key's entry exists and the value is
 * of the usual kinds: from the key's cache where it holds the value (an int, str, bool, float,
 * or a list of ints by its JSON text), or a new int64 encoded and cached. A new reference; NULL
 * with no error where _one must run (no entry yet, no cache, another kind of value), NULL with
 * an error set on failure. *skip: the key is not written. */
static PyObject *
cached_one(PyObject *keys, PyObject *k, PyObject *v, Py_ssize_t limit, int *skip)
{
    PyObject *ks = PyDict_GetItemWithError(keys, k), *cache, *b, *ck;
    *skip = 0;
    if (ks == NULL || !PyList_CheckExact(ks) || PyList_GET_SIZE(ks) != 3)
        return NULL;
    if (PyList_GET_ITEM(ks, 0) == Py_None) {
        *skip = 1;
        return NULL;
    }
    cache = PyList_GET_ITEM(ks, 1);
    if (!PyDict_CheckExact(cache) || !PyBytes_CheckExact(PyList_GET_ITEM(ks, 0)))
        return NULL;
    if (PyLong_CheckExact(v)) {
        long long y;
        b = PyDict_GetItemWithError(cache, v);
        if (b != NULL || PyErr_Occurred())
            return Py_XNewRef(b);
        if (as_int64(v, &y) < 0)
            return NULL;
        return int_miss(ks, cache, v, (unsigned long long)y, limit);
    }
    if (PyUnicode_CheckExact(v))
        return Py_XNewRef(PyDict_GetItemWithError(cache, v));
    if (PyList_CheckExact(v)) {
        int as_text = PyObject_IsTrue(PyList_GET_ITEM(ks, 2));
        if (as_text < 0 || (ck = int_list_text(v, as_text)) == NULL)
            return NULL;
    } else if (PyBool_Check(v) || (PyFloat_CheckExact(v) && PyFloat_AS_DOUBLE(v) == PyFloat_AS_DOUBLE(v))) {
        if ((ck = PyTuple_Pack(2, (PyObject *)Py_TYPE(v), v)) == NULL)
            return NULL;
    } else {
        return NULL;
    }
    b = PyDict_GetItemWithError(cache, ck);
    Py_DECREF(ck);
    return Py_XNewRef(b);
}

/* template_runs(keys, args, varying, one, limit): FastArgs._template's (template, encoded args)
 * for an exact dict of args, each arg by cached_one where it can (limit: KEY_CACHE_LIMIT), else
 * by one(k, v) (FastArgs._one, which fills the cache); None where args is not an exact dict. */
static PyObject *
template_runs(PyObject *self, PyObject *const *a, Py_ssize_t nargs)
{
    PyObject *keys, *args, *varying, *one, *items = NULL, *parts = NULL, *run = NULL, *encoded = NULL;
    PyObject *empty = NULL, *result = NULL, *all = NULL;
    Py_ssize_t i, n, nslots = 0, at = -1, limit;
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError, "template_runs takes 5 arguments");
        return NULL;
    }
    keys = a[0], args = a[1], varying = a[2], one = a[3];
    if ((limit = PyLong_AsSsize_t(a[4])) == -1 && PyErr_Occurred())
        return NULL;
    if (!PyDict_CheckExact(keys) || !PyDict_CheckExact(args) || !PyAnySet_Check(varying))
        Py_RETURN_NONE;
    if ((items = PyDict_Items(args)) == NULL)
        return NULL;
    n = PyList_GET_SIZE(items);
    parts = PyList_New(0);
    run = PyList_New(0);
    encoded = PyList_New(n);
    empty = PyBytes_FromStringAndSize(NULL, 0);
    if (parts == NULL || run == NULL || encoded == NULL || empty == NULL)
        goto done;
    for (i = 0; i < n; i++) {
        PyObject *kv = PyList_GET_ITEM(items, i), *k = PyTuple_GET_ITEM(kv, 0), *v = PyTuple_GET_ITEM(kv, 1);
        PyObject *b;
        int skip, vary;
        b = cached_one(keys, k, v, limit, &skip);
        if (b == NULL) {
            if (PyErr_Occurred())
                goto done;
            b = skip ? Py_NewRef(empty) : PyObject_CallFunctionObjArgs(one, k, v, NULL);
            if (b == NULL)
                goto done;
        }
        if (!PyBytes_CheckExact(b)) {
            Py_DECREF(b);
            PyErr_SetString(PyExc_TypeError, "template_runs: an annotation is not bytes");
            goto done;
        }
        PyList_SET_ITEM(encoded, i, b);  /* steals b */
        vary = PyBytes_GET_SIZE(b) > 0 ? PySet_Contains(varying, k) : 0;
        if (vary < 0)
            goto done;
        if (vary) {
            PyObject *ks = PyDict_GetItemWithError(keys, k), *head, *slot;
            if (ks == NULL || !PyList_CheckExact(ks) || PyList_GET_SIZE(ks) < 1
                    || !PyBytes_CheckExact(PyList_GET_ITEM(ks, 0))) {
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_TypeError, "template_runs: a varying key without its name prefix");
                goto done;
            }
            if (PyList_GET_SIZE(run) > 0) {
                PyObject *joined = join_bytes(run);
                int r = joined == NULL ? -1 : PyList_Append(parts, joined);
                Py_XDECREF(joined);
                if (r < 0 || PyList_SetSlice(run, 0, PyList_GET_SIZE(run), NULL) < 0)
                    goto done;
            }
            head = PyBytes_FromStringAndSize(NULL, PyBytes_GET_SIZE(PyList_GET_ITEM(ks, 0)) + 1);
            if (head == NULL)
                goto done;
            memcpy(PyBytes_AS_STRING(head), PyBytes_AS_STRING(PyList_GET_ITEM(ks, 0)),
                   (size_t)PyBytes_GET_SIZE(PyList_GET_ITEM(ks, 0)));
            PyBytes_AS_STRING(head)[PyBytes_GET_SIZE(head) - 1] = 0x20;
            slot = PyTuple_Pack(2, k, head);
            Py_DECREF(head);
            if (slot == NULL)
                goto done;
            if (nslots++ == 0)
                at = PyList_GET_SIZE(parts);
            if (PyList_Append(parts, slot) < 0) {
                Py_DECREF(slot);
                goto done;
            }
            Py_DECREF(slot);
        } else if (PyList_Append(run, b) < 0) {
            goto done;
        }
    }
    if (PyList_GET_SIZE(run) > 0) {
        PyObject *joined = join_bytes(run);
        int r = joined == NULL ? -1 : PyList_Append(parts, joined);
        Py_XDECREF(joined);
        if (r < 0)
            goto done;
    }
    n = PyList_GET_SIZE(parts);
    if (n == 0) {
        result = PyTuple_Pack(2, empty, empty);
        goto done;
    }
    if (n == 1 && nslots == 0) {
        result = PyTuple_Pack(2, PyList_GET_ITEM(parts, 0), PyList_GET_ITEM(parts, 0));
        goto done;
    }
    if ((all = join_bytes(encoded)) == NULL)
        goto done;
    if (nslots == 1) {  /* (run before, key, head, run after) */
        PyObject *slot = PyList_GET_ITEM(parts, at), *tpl;
        tpl = PyTuple_Pack(4, at == 1 ? PyList_GET_ITEM(parts, 0) : empty, PyTuple_GET_ITEM(slot, 0),
                           PyTuple_GET_ITEM(slot, 1), at + 1 < n ? PyList_GET_ITEM(parts, at + 1) : empty);
        if (tpl != NULL) {
            result = PyTuple_Pack(2, tpl, all);
            Py_DECREF(tpl);
        }
        goto done;
    }
    result = PyTuple_Pack(2, parts, all);
done:
    Py_XDECREF(all);
    Py_XDECREF(items);
    Py_XDECREF(parts);
    Py_XDECREF(run);
    Py_XDECREF(encoded);
    Py_XDECREF(empty);
    return result;
}

static PyMethodDef methods[] = {
    {"template_packet", (PyCFunction)(void (*)(void))template_packet, METH_FASTCALL,
     "A slice begin packet from a whole-args template hit, or None (build it in Python)."},
    {"event_packet", (PyCFunction)(void (*)(void))event_packet, METH_FASTCALL,
     "FastEncoder.event's usual packet (cached head, template hit), or None (build it in Python)."},
    {"args_key", (PyCFunction)(void (*)(void))args_key, METH_FASTCALL,
     "The whole-args template cache's key of an event's args, or None (use the JSON key)."},
    {"slice_end", (PyCFunction)(void (*)(void))slice_end, METH_FASTCALL,
     "A slice end packet, or None (build it in Python)."},
    {"template_runs", (PyCFunction)(void (*)(void))template_runs, METH_FASTCALL,
     "FastArgs._template's (template, encoded args), each arg from its key's cache where it hits."},
    {"stream_records", (PyCFunction)(void (*)(void))stream_records, METH_FASTCALL,
     "emit._stream's usual records (slice ends, input events' begins); the first record left to Python."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_encode",
    "The Perfetto writer's per-packet hot path in C (see fast_encoder.py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC
PyInit__encode(void)
{
#define INTERN(var, text) if ((var = PyUnicode_InternFromString(text)) == NULL) return NULL
    INTERN(s_interner, "interner");
    INTERN(s_pending, "pending");
    INTERN(s_heads, "_heads");
    INTERN(s_whole, "_whole");
    INTERN(s_seq, "_seq");
    INTERN(s_whole_hits, "_whole_hits");
    INTERN(s_cat, "cat");
    INTERN(s_name, "name");
    INTERN(s_args, "args");
    INTERN(s_keys, "_keys");
    INTERN(s_kind, "kind");
    INTERN(s_category, "category");
    INTERN(s_replay, "replay");
    INTERN(s_join, "join");
    INTERN(s_join_ambiguous, "join_ambiguous");
    INTERN(s_original_stream, "original_stream");
    INTERN(s_annotated_stream, "annotated_stream");
    INTERN(s_stream, "stream");
    INTERN(s_device, "device");
    INTERN(s_ph, "ph");
    INTERN(s_path_arg, "critical path");
    INTERN(s_slack_arg, "critical path slack ns");
#undef INTERN
    if ((int_one = PyLong_FromLong(1)) == NULL)
        return NULL;
    return PyModule_Create(&moduledef);
}
