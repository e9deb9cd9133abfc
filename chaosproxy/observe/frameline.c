/* chaosproxy.observe.frameline, native: the frame line of a plain write.
 *
 * The twin of chaosproxy/observe/frameline.py (read its docstring: what the line is,
 * when None is returned); the same bytes, the same None, for the same arguments
 * (tests/observe/test_frameline.py feeds both, and orjson, the same random fields).
 * Built by setup.py next to the mypyc modules where the wheel is compiled; a module of
 * this name shadows the .py source, which CHAOSPROXY_PURE=1 and a pure build run.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

/* Above this many thousandths the float is not rendered here (its text could need
 * more than the digits of the thousandths: orjson's and Python's shortest text). */
#define MAX_THOUSANDTHS 1000000000000000LL /* 1e15: t_ms below 1e12 */

static const char SEQ[] = ",\"seq\":";
static const char OFFSET[] = ",\"offset\":";
static const char SIZE[] = ",\"size\":";
static const char T_MS[] = ",\"t_ms\":";
static const char EVENT_TS[] = ",\"event\":\"frame\",\"ts\":\"";
static const char END[] = "\"}\n";

/* The decimal digits of v at out (at most 20 and a sign); the end. */
static char *put_int(char *out, long long v) {
    char digits[24];
    int n = 0;
    unsigned long long u;
    if (v < 0) {
        *out++ = '-';
        u = 0ULL - (unsigned long long)v;
    } else {
        u = (unsigned long long)v;
    }
    do {
        digits[n++] = (char)('0' + (int)(u % 10ULL));
        u /= 10ULL;
    } while (u);
    while (n) {
        *out++ = digits[--n];
    }
    return out;
}

/* An int argument that fits in 64 bits (an exact int: not a bool, which orjson
 * writes as true or false); 0 when it is not one (no error set). */
static int get_int(PyObject *obj, long long *value) {
    int overflow = 0;
    if (!PyLong_CheckExact(obj)) {
        return 0;
    }
    *value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (*value == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

#define PUT(out, lit) (memcpy((out), (lit), sizeof(lit) - 1), (out) + sizeof(lit) - 1)

static PyObject *frame_line(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    PyObject *prefix, *ts, *result;
    long long seq, offset, size, thousandths;
    double t_ms, scaled;
    char buffer[256];
    char *out;
    Py_ssize_t prefix_len, ts_len;
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "frame_line() takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    prefix = args[0];
    ts = args[5];
    if (!PyBytes_CheckExact(prefix) || !PyBytes_CheckExact(ts) || !PyFloat_CheckExact(args[4])
        || !get_int(args[1], &seq) || !get_int(args[2], &offset) || !get_int(args[3], &size)) {
        Py_RETURN_NONE;
    }
    t_ms = PyFloat_AS_DOUBLE(args[4]);
    scaled = t_ms * 1000.0;
    /* (NaN fails both comparisons; -0.0 is 0.0 to them but orjson writes "-0.0") */
    if (!(scaled >= 0.0 && scaled < (double)MAX_THOUSANDTHS) || signbit(t_ms)) {
        Py_RETURN_NONE;
    }
    thousandths = (long long)nearbyint(scaled); /* (half to even, as Python's round) */
    if ((double)thousandths / 1000.0 != t_ms) {
        Py_RETURN_NONE; /* not a whole number of thousandths: not rendered here */
    }
    prefix_len = PyBytes_GET_SIZE(prefix);
    ts_len = PyBytes_GET_SIZE(ts);
    if (ts_len > 48) {
        Py_RETURN_NONE;
    }
    /* The fixed part: at most 60 bytes of keys, 3 x 20 digits and
     * signs, 17 for the float, 48 for the stamp: 185, within the buffer. */
    out = buffer;
    out = PUT(out, SEQ);
    out = put_int(out, seq);
    out = PUT(out, OFFSET);
    out = put_int(out, offset);
    out = PUT(out, SIZE);
    out = put_int(out, size);
    out = PUT(out, T_MS);
    out = put_int(out, thousandths / 1000);
    *out++ = '.';
    {
        int frac = (int)(thousandths % 1000);
        if (frac == 0) {
            *out++ = '0';
        } else {
            *out++ = (char)('0' + frac / 100);
            if (frac % 100) {
                *out++ = (char)('0' + frac / 10 % 10);
                if (frac % 10) {
                    *out++ = (char)('0' + frac % 10);
                }
            }
        }
    }
    out = PUT(out, EVENT_TS);
    memcpy(out, PyBytes_AS_STRING(ts), (size_t)ts_len);
    out += ts_len;
    out = PUT(out, END);
    result = PyBytes_FromStringAndSize(NULL, prefix_len + (out - buffer));
    if (result == NULL) {
        return NULL;
    }
    memcpy(PyBytes_AS_STRING(result), PyBytes_AS_STRING(prefix), (size_t)prefix_len);
    memcpy(PyBytes_AS_STRING(result) + prefix_len, buffer, (size_t)(out - buffer));
    return result;
}

static PyMethodDef methods[] = {
    {"frame_line", (PyCFunction)(void (*)(void))frame_line, METH_FASTCALL,
     "frame_line(prefix, seq, offset, size, t_ms, ts): the frame line's bytes, or None "
     "(see chaosproxy/observe/frameline.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef frameline_module = {
    PyModuleDef_HEAD_INIT, "chaosproxy.observe.frameline",
    "The frame line of a plain write, native (the twin of frameline.py).", -1, methods,
};

PyMODINIT_FUNC PyInit_frameline(void) {
    PyObject *module = PyModule_Create(&frameline_module);
    if (module != NULL && PyModule_AddStringConstant(module, "KIND", "native") < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
