/* One pass over the wire bytes of an ExportMetricsServiceRequest that the receiver has already parsed
 * (so the bytes are valid protobuf): count the data points, decide what is invalid, and collect the
 * attribute keys the privacy filter decides on. This is the one place where the receiver's validity rules
 * live (OTLP "partial success": what is dropped, and how many points it rejects); kct.receiver.sanitize
 * only deletes what this reports and words the reasons.
 *
 *   scan(data: bytes, point_attributes: bool, check_points: bool) -> (data_points, keys, drops) | None
 *
 * `data_points` counts the points that stay. `keys` is a set of the distinct attribute keys (bytes) of
 * resources, scopes and, when `point_attributes`, data points. `drops` is a tuple, in message order, of
 * (resource index, scope index, metric index, reason, rejected points, point indices):
 *   NO_DATA              the metric has no data (rejects 0 points): drop the metric
 *   NO_NAME              the metric has data but no name (rejects all its points): drop the metric
 *   NUMBER_WITHOUT_VALUE gauge/sum points without as_double/as_int (when `check_points`): drop those points
 *   HISTOGRAM_BUCKETS    histogram points whose bucket_counts (when present) are not len(explicit_bounds)+1
 *                        (when `check_points`): drop those points
 * The indices are those of the decoded message: the n-th occurrence of a repeated message field is its n-th
 * element. None means the walk does not follow these bytes: a metric's data oneof set more than once (merged
 * or replaced by protobuf) or wire data it does not read (groups among unknown fields). The caller then asks
 * again about the message's canonical serialization, which has neither.
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

enum reason { R_NO_DATA = 1, R_NO_NAME, R_NUMBER_WITHOUT_VALUE, R_HISTOGRAM_BUCKETS };

/* Distinct keys are few (a fleet uses a few dozen) while occurrences are many (every point repeats its
 * keys): occurrences are compared against the distinct ones seen so far and only those become Python
 * objects. Past SEEN_MAX distinct keys every occurrence goes to the set (correct, only slower). */
#define SEEN_MAX 64

typedef struct {
    PyObject *keys;
    PyObject *drops; /* list, created on the first drop: a clean push builds none */
    int point_attributes;
    int check_points;
    long long points;
    Py_ssize_t resource, scope, metric; /* position of the metric being scanned */
    int nseen;
    span seen[SEEN_MAX];
} scan_state;
/* 1 ok, 0 end of data, -1 malformed */
static int next_field(span *s, uint32_t *field, int *wire, span *value, uint64_t *scalar) {
    if (s->p >= s->end)
        return 0;
    uint64_t tag = 0;
    int shift = 0;
    while (1) { /* a tag is a varint of at most 5 bytes holding 32 bits, as upb requires */
        if (s->p >= s->end || shift > 28)
            return -1;
        uint8_t b = *s->p++;
        tag |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    if (tag >> 32 || (tag >> 3) == 0)
        return -1;
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
            if (shift == 63 && b > 1)
                return -1; /* more than 64 bits */
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
            if (shift == 63 && b > 1)
                return -1;
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

/* Appends (resource, scope, metric, reason, rejected, bad) to the drops; steals `bad` (a tuple). */
static int add_drop(scan_state *st, int reason, Py_ssize_t rejected, PyObject *bad) {
    if (st->drops == NULL && (st->drops = PyList_New(0)) == NULL) {
        Py_XDECREF(bad);
        return -1;
    }
    if (bad == NULL && (bad = PyTuple_New(0)) == NULL)
        return -1;
    PyObject *drop = Py_BuildValue("(nnninN)", st->resource, st->scope, st->metric, reason, rejected, bad);
    if (drop == NULL)
        return -1;
    int rc = PyList_Append(st->drops, drop);
    Py_DECREF(drop);
    return rc;
}

/* kind: 5 gauge, 7 sum (NumberDataPoint), 9 histogram, 10 exponential histogram, 11 summary.
 * 0 valid, a reason when invalid, -1 bail/error. */
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
            has_value = 1; /* as_double, as_int: the `value` oneof */
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
            return R_NUMBER_WITHOUT_VALUE;
        if (kind == 9 && buckets && buckets != bounds + 1)
            return R_HISTOGRAM_BUCKETS;
    }
    return 0;
}

/* The points (field 1 of Gauge, Sum, Histogram, ExponentialHistogram, Summary) of one metric's data. */
static int scan_points(scan_state *st, span data, uint32_t kind) {
    uint32_t f;
    int w, r, reason = 0, bad_reason = 0;
    span v;
    uint64_t x;
    Py_ssize_t index = 0;
    PyObject *bad = NULL; /* indices of the invalid points, created on the first */
    while ((r = next_field(&data, &f, &w, &v, &x)) == 1) {
        if (f != 1 || w != 2)
            continue;
        if ((reason = scan_point(st, v, kind)) < 0)
            break;
        if (reason) {
            PyObject *i = PyLong_FromSsize_t(index);
            if (i == NULL || (bad == NULL && (bad = PyList_New(0)) == NULL) || PyList_Append(bad, i) < 0) {
                Py_XDECREF(i);
                reason = -1;
                break;
            }
            Py_DECREF(i);
            bad_reason = reason; /* one kind per metric: one reason */
        }
        index++;
    }
    if (r < 0 || reason < 0) {
        Py_XDECREF(bad);
        return -1;
    }
    Py_ssize_t nbad = bad ? PyList_GET_SIZE(bad) : 0;
    st->points += index - nbad;
    if (bad == NULL)
        return 0;
    PyObject *indices = PyList_AsTuple(bad);
    Py_DECREF(bad);
    return indices == NULL ? -1 : add_drop(st, bad_reason, nbad, indices);
}

/* Points of a metric dropped whole: counted (they are rejected), not checked, their keys not collected
 * (they never reach the privacy filter). */
static Py_ssize_t count_points(span data) {
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    Py_ssize_t n = 0;
    while ((r = next_field(&data, &f, &w, &v, &x)) == 1)
        n += f == 1 && w == 2;
    return r < 0 ? -1 : n;
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
            name_len = v.end - v.p; /* the last occurrence wins, as protobuf's */
        } else if ((f == 5 || f == 7 || f == 9 || f == 10 || f == 11) && w == 2) {
            if (kind)
                return -1; /* set twice: merged or replaced by protobuf, asked again canonically */
            kind = f;
            data = v;
        }
    }
    if (r < 0)
        return -1;
    if (!kind)
        return add_drop(st, R_NO_DATA, 0, NULL);
    if (!name_len) {
        Py_ssize_t n = count_points(data);
        return n < 0 ? -1 : add_drop(st, R_NO_NAME, n, NULL);
    }
    return scan_points(st, data, kind);
}

static int scan_scope_metrics(scan_state *st, span sm) {
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    st->metric = 0;
    while ((r = next_field(&sm, &f, &w, &v, &x)) == 1) {
        if (w != 2)
            continue;
        if (f == 1 && scan_attributes(st, v, 3) < 0) /* InstrumentationScope.attributes = 3 */
            return -1;
        if (f == 2) {
            if (scan_metric(st, v) < 0)
                return -1;
            st->metric++;
        }
    }
    return r < 0 ? -1 : 0;
}

static int scan_resource_metrics(scan_state *st, span rm) {
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    st->scope = 0;
    while ((r = next_field(&rm, &f, &w, &v, &x)) == 1) {
        if (w != 2)
            continue;
        if (f == 1 && scan_attributes(st, v, 1) < 0) /* Resource.attributes = 1 */
            return -1;
        if (f == 2) {
            if (scan_scope_metrics(st, v) < 0)
                return -1;
            st->scope++;
        }
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
    st.drops = NULL;
    st.point_attributes = point_attributes;
    st.check_points = check_points;
    st.points = 0;
    st.resource = st.scope = st.metric = 0;
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
        if (f == 1 && w == 2) {
            if (scan_resource_metrics(&st, v) < 0)
                failed = 1;
            st.resource++;
        }
    PyBuffer_Release(&buf);
    if (failed || r < 0) {
        Py_DECREF(st.keys);
        Py_XDECREF(st.drops);
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE;
    }
    PyObject *drops = st.drops ? PyList_AsTuple(st.drops) : PyTuple_New(0);
    Py_XDECREF(st.drops);
    if (drops == NULL) {
        Py_DECREF(st.keys);
        return NULL;
    }
    return Py_BuildValue("(LNN)", st.points, st.keys, drops);
}


/* ---- validation: accept only what the Python protobuf runtime (upb) parses into this schema ----------
 *
 *   valid(data: bytes) -> bool
 *
 * True only when every field of every message is one this table knows with its declared wire type, every
 * string is strict UTF-8, packed arrays are whole, and nesting stays within MAX_DEPTH: then upb parses the
 * bytes too (it rejects less: unknown fields and mismatched wire types it keeps as unknown fields). False
 * means "not proven": the receiver decodes with upb, which gives the exact error. With `valid`, a push
 * that needs no change (scan) is stored without being decoded at all. The table mirrors the descriptors
 * of the installed opentelemetry-proto; a unit test compares the two (`schema()`).
 */
#define MAX_DEPTH 64

enum kind { K_STR = 1, K_BYTES, K_VARINT, K_F64, K_F32, K_MSG };
enum msg {
    M_REQUEST, M_RESOURCE_METRICS, M_RESOURCE, M_KEY_VALUE, M_ANY_VALUE, M_ARRAY_VALUE, M_KEY_VALUE_LIST,
    M_ENTITY_REF, M_SCOPE_METRICS, M_SCOPE, M_METRIC, M_GAUGE, M_NUMBER_POINT, M_EXEMPLAR, M_SUM, M_HISTOGRAM,
    M_HISTOGRAM_POINT, M_EXP_HISTOGRAM, M_EXP_HISTOGRAM_POINT, M_BUCKETS, M_SUMMARY, M_SUMMARY_POINT,
    M_QUANTILE, M_COUNT
};

typedef struct {
    uint32_t number;
    uint8_t kind;
    uint8_t repeated;
    uint8_t msg; /* for K_MSG */
} field_def;

typedef struct {
    const char *name;
    const field_def *fields;
    int nfields;
} msg_def;

#define F(n, k, r, m) {n, k, r, m}
static const field_def f_request[] = {F(1, K_MSG, 1, M_RESOURCE_METRICS)};
static const field_def f_resource_metrics[] = {F(1, K_MSG, 0, M_RESOURCE), F(2, K_MSG, 1, M_SCOPE_METRICS),
                                               F(3, K_STR, 0, 0)};
static const field_def f_resource[] = {F(1, K_MSG, 1, M_KEY_VALUE), F(2, K_VARINT, 0, 0),
                                       F(3, K_MSG, 1, M_ENTITY_REF)};
static const field_def f_key_value[] = {F(1, K_STR, 0, 0), F(2, K_MSG, 0, M_ANY_VALUE), F(3, K_VARINT, 0, 0)};
static const field_def f_any_value[] = {F(1, K_STR, 0, 0),  F(2, K_VARINT, 0, 0), F(3, K_VARINT, 0, 0),
                                        F(4, K_F64, 0, 0),  F(5, K_MSG, 0, M_ARRAY_VALUE),
                                        F(6, K_MSG, 0, M_KEY_VALUE_LIST), F(7, K_BYTES, 0, 0),
                                        F(8, K_VARINT, 0, 0)};
static const field_def f_array_value[] = {F(1, K_MSG, 1, M_ANY_VALUE)};
static const field_def f_key_value_list[] = {F(1, K_MSG, 1, M_KEY_VALUE)};
static const field_def f_entity_ref[] = {F(1, K_STR, 0, 0), F(2, K_STR, 0, 0), F(3, K_STR, 1, 0), F(4, K_STR, 1, 0)};
static const field_def f_scope_metrics[] = {F(1, K_MSG, 0, M_SCOPE), F(2, K_MSG, 1, M_METRIC), F(3, K_STR, 0, 0)};
static const field_def f_scope[] = {F(1, K_STR, 0, 0), F(2, K_STR, 0, 0), F(3, K_MSG, 1, M_KEY_VALUE),
                                    F(4, K_VARINT, 0, 0)};
static const field_def f_metric[] = {F(1, K_STR, 0, 0), F(2, K_STR, 0, 0), F(3, K_STR, 0, 0),
                                     F(5, K_MSG, 0, M_GAUGE), F(7, K_MSG, 0, M_SUM), F(9, K_MSG, 0, M_HISTOGRAM),
                                     F(10, K_MSG, 0, M_EXP_HISTOGRAM), F(11, K_MSG, 0, M_SUMMARY),
                                     F(12, K_MSG, 1, M_KEY_VALUE)};
static const field_def f_gauge[] = {F(1, K_MSG, 1, M_NUMBER_POINT)};
static const field_def f_number_point[] = {F(7, K_MSG, 1, M_KEY_VALUE), F(2, K_F64, 0, 0), F(3, K_F64, 0, 0),
                                           F(4, K_F64, 0, 0), F(6, K_F64, 0, 0), F(5, K_MSG, 1, M_EXEMPLAR),
                                           F(8, K_VARINT, 0, 0)};
static const field_def f_exemplar[] = {F(7, K_MSG, 1, M_KEY_VALUE), F(2, K_F64, 0, 0), F(3, K_F64, 0, 0),
                                       F(6, K_F64, 0, 0), F(4, K_BYTES, 0, 0), F(5, K_BYTES, 0, 0)};
static const field_def f_sum[] = {F(1, K_MSG, 1, M_NUMBER_POINT), F(2, K_VARINT, 0, 0), F(3, K_VARINT, 0, 0)};
static const field_def f_histogram[] = {F(1, K_MSG, 1, M_HISTOGRAM_POINT), F(2, K_VARINT, 0, 0)};
static const field_def f_histogram_point[] = {
    F(9, K_MSG, 1, M_KEY_VALUE), F(2, K_F64, 0, 0), F(3, K_F64, 0, 0), F(4, K_F64, 0, 0), F(5, K_F64, 0, 0),
    F(6, K_F64, 1, 0), F(7, K_F64, 1, 0), F(8, K_MSG, 1, M_EXEMPLAR), F(10, K_VARINT, 0, 0), F(11, K_F64, 0, 0),
    F(12, K_F64, 0, 0)};
static const field_def f_exp_histogram[] = {F(1, K_MSG, 1, M_EXP_HISTOGRAM_POINT), F(2, K_VARINT, 0, 0)};
static const field_def f_exp_histogram_point[] = {
    F(1, K_MSG, 1, M_KEY_VALUE), F(2, K_F64, 0, 0), F(3, K_F64, 0, 0), F(4, K_F64, 0, 0), F(5, K_F64, 0, 0),
    F(6, K_VARINT, 0, 0), F(7, K_F64, 0, 0), F(8, K_MSG, 0, M_BUCKETS), F(9, K_MSG, 0, M_BUCKETS),
    F(10, K_VARINT, 0, 0), F(11, K_MSG, 1, M_EXEMPLAR), F(12, K_F64, 0, 0), F(13, K_F64, 0, 0), F(14, K_F64, 0, 0)};
static const field_def f_buckets[] = {F(1, K_VARINT, 0, 0), F(2, K_VARINT, 1, 0)};
static const field_def f_summary[] = {F(1, K_MSG, 1, M_SUMMARY_POINT)};
static const field_def f_summary_point[] = {F(7, K_MSG, 1, M_KEY_VALUE), F(2, K_F64, 0, 0), F(3, K_F64, 0, 0),
                                            F(4, K_F64, 0, 0), F(5, K_F64, 0, 0), F(6, K_MSG, 1, M_QUANTILE),
                                            F(8, K_VARINT, 0, 0)};
static const field_def f_quantile[] = {F(1, K_F64, 0, 0), F(2, K_F64, 0, 0)};
#undef F

#define MSG(name, fields) {name, fields, (int)(sizeof(fields) / sizeof(fields[0]))}
static const msg_def messages[M_COUNT] = {
    MSG("opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest", f_request),
    MSG("opentelemetry.proto.metrics.v1.ResourceMetrics", f_resource_metrics),
    MSG("opentelemetry.proto.resource.v1.Resource", f_resource),
    MSG("opentelemetry.proto.common.v1.KeyValue", f_key_value),
    MSG("opentelemetry.proto.common.v1.AnyValue", f_any_value),
    MSG("opentelemetry.proto.common.v1.ArrayValue", f_array_value),
    MSG("opentelemetry.proto.common.v1.KeyValueList", f_key_value_list),
    MSG("opentelemetry.proto.common.v1.EntityRef", f_entity_ref),
    MSG("opentelemetry.proto.metrics.v1.ScopeMetrics", f_scope_metrics),
    MSG("opentelemetry.proto.common.v1.InstrumentationScope", f_scope),
    MSG("opentelemetry.proto.metrics.v1.Metric", f_metric),
    MSG("opentelemetry.proto.metrics.v1.Gauge", f_gauge),
    MSG("opentelemetry.proto.metrics.v1.NumberDataPoint", f_number_point),
    MSG("opentelemetry.proto.metrics.v1.Exemplar", f_exemplar),
    MSG("opentelemetry.proto.metrics.v1.Sum", f_sum),
    MSG("opentelemetry.proto.metrics.v1.Histogram", f_histogram),
    MSG("opentelemetry.proto.metrics.v1.HistogramDataPoint", f_histogram_point),
    MSG("opentelemetry.proto.metrics.v1.ExponentialHistogram", f_exp_histogram),
    MSG("opentelemetry.proto.metrics.v1.ExponentialHistogramDataPoint", f_exp_histogram_point),
    MSG("opentelemetry.proto.metrics.v1.ExponentialHistogramDataPoint.Buckets", f_buckets),
    MSG("opentelemetry.proto.metrics.v1.Summary", f_summary),
    MSG("opentelemetry.proto.metrics.v1.SummaryDataPoint", f_summary_point),
    MSG("opentelemetry.proto.metrics.v1.SummaryDataPoint.ValueAtQuantile", f_quantile),
};
#undef MSG

/* Strict UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF), as upb checks proto3 strings. */
static int utf8_ok(const uint8_t *p, const uint8_t *end) {
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        int n;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF)
            n = 1;
        else if (c == 0xE0)
            n = 2, lo = 0xA0;
        else if (c == 0xED)
            n = 2, hi = 0x9F;
        else if (c >= 0xE1 && c <= 0xEF)
            n = 2;
        else if (c == 0xF0)
            n = 3, lo = 0x90;
        else if (c >= 0xF1 && c <= 0xF3)
            n = 3;
        else if (c == 0xF4)
            n = 3, hi = 0x8F;
        else
            return 0;
        if (end - p <= n)
            return 0;
        if (p[1] < lo || p[1] > hi)
            return 0;
        for (int i = 2; i <= n; i++)
            if (p[i] < 0x80 || p[i] > 0xBF)
                return 0;
        p += n + 1;
    }
    return 1;
}

static int packed_varints_ok(span v) {
    while (v.p < v.end) {
        int i = 0;
        while (1) {
            if (v.p >= v.end || i >= 10)
                return 0;
            uint8_t b = *v.p++;
            if (i == 9 && b > 1)
                return 0;
            if (!(b & 0x80))
                break;
            i++;
        }
    }
    return 1;
}

static int valid_message(span m, int type, int depth) {
    if (depth > MAX_DEPTH)
        return 0;
    const msg_def *def = &messages[type];
    uint32_t f;
    int w, r;
    span v;
    uint64_t x;
    while ((r = next_field(&m, &f, &w, &v, &x)) == 1) {
        const field_def *fd = NULL;
        for (int i = 0; i < def->nfields; i++)
            if (def->fields[i].number == f) {
                fd = &def->fields[i];
                break;
            }
        if (fd == NULL)
            return 0; /* unknown here: not proven */
        switch (fd->kind) {
        case K_STR:
            if (w != 2 || !utf8_ok(v.p, v.end))
                return 0;
            break;
        case K_BYTES:
            if (w != 2)
                return 0;
            break;
        case K_VARINT:
            if (!(w == 0 || (fd->repeated && w == 2 && packed_varints_ok(v))))
                return 0;
            break;
        case K_F64:
            if (!(w == 1 || (fd->repeated && w == 2 && (v.end - v.p) % 8 == 0)))
                return 0;
            break;
        case K_F32:
            if (!(w == 5 || (fd->repeated && w == 2 && (v.end - v.p) % 4 == 0)))
                return 0;
            break;
        case K_MSG:
            if (w != 2 || !valid_message(v, fd->msg, depth + 1))
                return 0;
            break;
        default:
            return 0;
        }
    }
    return r == 0;
}

static PyObject *valid(PyObject *self, PyObject *args) {
    Py_buffer buf;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*", &buf))
        return NULL;
    span req = {(const uint8_t *)buf.buf, (const uint8_t *)buf.buf + buf.len};
    int ok = valid_message(req, M_REQUEST, 0);
    PyBuffer_Release(&buf);
    return PyBool_FromLong(ok);
}

static PyObject *schema(PyObject *self, PyObject *unused) {
    (void)self;
    (void)unused;
    PyObject *out = PyDict_New();
    if (out == NULL)
        return NULL;
    for (int m = 0; m < M_COUNT; m++) {
        PyObject *fields = PyDict_New();
        if (fields == NULL || PyDict_SetItemString(out, messages[m].name, fields) < 0) {
            Py_XDECREF(fields);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(fields);
        for (int i = 0; i < messages[m].nfields; i++) {
            const field_def *fd = &messages[m].fields[i];
            PyObject *v = Py_BuildValue("(iis)", fd->kind, fd->repeated,
                                        fd->kind == K_MSG ? messages[fd->msg].name : "");
            PyObject *k = PyLong_FromUnsignedLong(fd->number);
            if (v == NULL || k == NULL || PyDict_SetItem(fields, k, v) < 0) {
                Py_XDECREF(v);
                Py_XDECREF(k);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(v);
            Py_DECREF(k);
        }
    }
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(data, point_attributes, check_points) -> (data_points, keys, drops) | None: see the module source."},
    {"valid", valid, METH_VARARGS, "valid(data) -> bool: True when upb certainly parses these bytes."},
    {"schema", schema, METH_NOARGS, "schema() -> {message: {field: (kind, repeated, message)}}: the table."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_otlpscan",
                                    "One pass over OTLP metrics wire bytes (kct receiver).", -1, methods,
                                    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__otlpscan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "NO_DATA", R_NO_DATA) < 0 || PyModule_AddIntConstant(m, "NO_NAME", R_NO_NAME) < 0
        || PyModule_AddIntConstant(m, "NUMBER_WITHOUT_VALUE", R_NUMBER_WITHOUT_VALUE) < 0
        || PyModule_AddIntConstant(m, "HISTOGRAM_BUCKETS", R_HISTOGRAM_BUCKETS) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
