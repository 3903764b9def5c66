/* One pass over the wire bytes of an ExportMetricsServiceRequest that the receiver has already parsed
 * (so the bytes are valid protobuf): count the data points, check them as kct.receiver.sanitize does, and
 * collect the attribute keys the privacy filter decides on.
 *
 *   scan(data: bytes, point_attributes: bool, check_points: bool) -> (data_points, keys) | None
 *
 * `keys` is a set of the distinct attribute keys (bytes) of resources, scopes and, when `point_attributes`,
 * data points. None means "not certain that nothing must be dropped": a metric without data or name, a
 * number point without a value, a histogram whose bucket counts do not fit its bounds, a data oneof set
 * more than once, or wire data this walk does not follow. The caller then runs the Python walk, which
 * produces the exact partial-success answer. Only the fast answer "nothing to drop, N points" is given
 * here, so a mistake can cost speed, never correctness, as long as every answer it gives is exact.
 *
 * Field numbers: opentelemetry/proto/{collector/metrics,metrics,common,resource}/v1.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} span;

/* Distinct keys are few (a fleet uses a few dozen) while occurrences are many (every point repeats its
 * keys): occurrences are compared against the distinct ones seen so far and only those become Python
 * objects. Past SEEN_MAX distinct keys every occurrence goes to the set (correct, only slower). */
#define SEEN_MAX 64

typedef struct {
    PyObject *keys;
    int point_attributes;
    int check_points;
    long long points;
    int nseen;
    span seen[SEEN_MAX];
} scan_state;

/* 1 ok, 0 end of data, -1 malformed */
static int next_field(span *s, uint32_t *field, int *wire, span *value, uint64_t *scalar) {
    if (s->p >= s->end)
        return 0;
    uint64_t tag = 0;
    int shift = 0;
    while (1) {
        if (s->p >= s->end || shift > 63)
            return -1;
        uint8_t b = *s->p++;
        tag |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    *field = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    switch (*wire) {
    case 0: {
        uint64_t v = 0;
        shift = 0;
        while (1) {
            if (s->p >= s->end || shift > 63)
                return -1;
            uint8_t b = *s->p++;
            v |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80))
                break;
            shift += 7;
        }
        *scalar = v;
        return 1;
    }
    case 1:
        if (s->end - s->p < 8)
            return -1;
        s->p += 8;
        return 1;
    case 5:
        if (s->end - s->p < 4)
            return -1;
        s->p += 4;
        return 1;
    case 2: {
        uint64_t len = 0;
        shift = 0;
        while (1) {
            if (s->p >= s->end || shift > 63)
                return -1;
            uint8_t b = *s->p++;
            len |= (uint64_t)(b & 0x7f) << shift;
            if (!(b & 0x80))
                break;
            shift += 7;
        }
        if ((uint64_t)(s->end - s->p) < len)
            return -1;
        value->p = s->p;
        value->end = s->p + len;
        s->p += len;
        return 1;
    }
    default:
        return -1; /* groups: not in OTLP */
    }
}

/* KeyValue: key = 1. Adds the key (last occurrence wins, as protobuf's). 0 ok, -1 bail/error. */
static int add_key(scan_state *st, span kv) {
    uint32_t f;
    int w, r;
    span v, key = {NULL, NULL};
    uint64_t x;
    while ((r = next_field(&kv, &f, &w, &v, &x)) == 1)
        if (f == 1 && w == 2)
            key = v;
    if (r < 0)
        return -1;
    Py_ssize_t len = key.p ? key.end - key.p : 0;
    for (int i = 0; i < st->nseen; i++)
        if (st->seen[i].end - st->seen[i].p == len && (len == 0 || memcmp(st->seen[i].p, key.p, len) == 0))
            return 0;
    if (st->nseen < SEEN_MAX) {
        st->seen[st->nseen].p = key.p;
        st->seen[st->nseen].end = key.p ? key.end : NULL;
        st->nseen++;
    }
    PyObject *k = PyBytes_FromStringAndSize((const char *)(key.p ? key.p : (const uint8_t *)""), len);
    if (k == NULL)
        return -1;
    int rc = PySet_Add(st->keys, k);
    Py_DECREF(k);
    return rc;
}

/* Attributes (repeated KeyValue = `attr_field`) of one message. */
static int scan_attributes(scan_state *st, span m, uint32_t attr_field) {
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    while ((r = next_field(&m, &f, &w, &v, &x)) == 1)
        if (f == attr_field && w == 2 && add_key(st, v) < 0)
            return -1;
    return r < 0 ? -1 : 0;
}

/* packed (wire 2, fixed 8-byte elements) or not (wire 1) */
static int64_t count_fixed64(int wire, span v) {
    if (wire == 1)
        return 1;
    if (wire == 2)
        return (v.end - v.p) % 8 ? -1 : (v.end - v.p) / 8;
    return 0;
}

/* kind: 5 gauge, 7 sum (NumberDataPoint), 9 histogram, 10 exponential histogram, 11 summary */
static int scan_point(scan_state *st, span pt, uint32_t kind) {
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    int has_value = 0;
    int64_t buckets = 0, bounds = 0, n;
    uint32_t attr_field = kind == 10 ? 1 : kind == 9 ? 9 : 7;
    while ((r = next_field(&pt, &f, &w, &v, &x)) == 1) {
        if (f == attr_field && w == 2) {
            if (st->point_attributes && add_key(st, v) < 0)
                return -1;
        } else if ((kind == 5 || kind == 7) && (f == 4 || f == 6) && w == 1) {
            has_value = 1;
        } else if (kind == 9 && (f == 6 || f == 7)) {
            n = count_fixed64(w, v);
            if (n < 0)
                return -1;
            if (f == 6)
                buckets += n;
            else
                bounds += n;
        }
    }
    if (r < 0)
        return -1;
    if (st->check_points) {
        if ((kind == 5 || kind == 7) && !has_value)
            return -1;
        if (kind == 9 && buckets && buckets != bounds + 1)
            return -1;
    }
    st->points++;
    return 0;
}

static int scan_metric(scan_state *st, span m) {
    uint32_t f;
    int w, r;
    span v, data = {NULL, NULL};
    uint64_t x;
    uint32_t kind = 0;
    Py_ssize_t name_len = 0;
    while ((r = next_field(&m, &f, &w, &v, &x)) == 1) {
        if (f == 1 && w == 2) {
            name_len = v.end - v.p;
        } else if ((f == 5 || f == 7 || f == 9 || f == 10 || f == 11) && w == 2) {
            if (kind)
                return -1; /* set twice: merged or replaced by protobuf, left to the Python walk */
            kind = f;
            data = v;
        }
    }
    if (r < 0 || !kind || !name_len)
        return -1;
    while ((r = next_field(&data, &f, &w, &v, &x)) == 1)
        if (f == 1 && w == 2 && scan_point(st, v, kind) < 0)
            return -1;
    return r < 0 ? -1 : 0;
}

static int scan_scope_metrics(scan_state *st, span sm) {
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    while ((r = next_field(&sm, &f, &w, &v, &x)) == 1) {
        if (w != 2)
            continue;
        if (f == 1 && scan_attributes(st, v, 3) < 0) /* InstrumentationScope.attributes = 3 */
            return -1;
        if (f == 2 && scan_metric(st, v) < 0)
            return -1;
    }
    return r < 0 ? -1 : 0;
}

static int scan_resource_metrics(scan_state *st, span rm) {
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    while ((r = next_field(&rm, &f, &w, &v, &x)) == 1) {
        if (w != 2)
            continue;
        if (f == 1 && scan_attributes(st, v, 1) < 0) /* Resource.attributes = 1 */
            return -1;
        if (f == 2 && scan_scope_metrics(st, v) < 0)
            return -1;
    }
    return r < 0 ? -1 : 0;
}

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int point_attributes, check_points;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*pp", &buf, &point_attributes, &check_points))
        return NULL;
    scan_state st;
    st.keys = PySet_New(NULL);
    st.point_attributes = point_attributes;
    st.check_points = check_points;
    st.points = 0;
    st.nseen = 0;
    if (st.keys == NULL) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    span req = {(const uint8_t *)buf.buf, (const uint8_t *)buf.buf + buf.len};
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    int failed = 0;
    r = 0;
    while (!failed && (r = next_field(&req, &f, &w, &v, &x)) == 1)
        if (f == 1 && w == 2 && scan_resource_metrics(&st, v) < 0)
            failed = 1;
    PyBuffer_Release(&buf);
    if (failed || r < 0) {
        Py_DECREF(st.keys);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *out = Py_BuildValue("(LN)", st.points, st.keys);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, point_attributes, check_points) -> (data_points, keys) | None: see the module source."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlpscan",
                                    "One pass over OTLP metrics wire bytes (kct receiver).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__otlpscan(void) { return PyModule_Create(&module); }
