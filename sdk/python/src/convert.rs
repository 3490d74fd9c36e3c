//! Python values to and from JSON, and borrowed UTF-8 views of Python
//! strings.

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::Value as Json;

/// Nesting accepted when converting a Python value to JSON (a cycle would
/// otherwise recurse forever).
const MAX_DEPTH: usize = 64;

/// The UTF-8 bytes of a Python `str`, borrowed.
///
/// `PyUnicode_AsUTF8AndSize` returns the string's own UTF-8 buffer (for an
/// ASCII string, its data; otherwise a buffer it caches on first use), which
/// lives as long as the string object: no Python object and no Rust
/// allocation per call. The function is in every CPython 3 (in the limited
/// API from 3.10, which is why PyO3's abi3-py39 build does not declare it).
pub(crate) fn utf8<'a>(s: &'a Bound<'_, PyString>) -> PyResult<&'a str> {
    unsafe extern "C" {
        fn PyUnicode_AsUTF8AndSize(
            s: *mut pyo3::ffi::PyObject,
            size: *mut pyo3::ffi::Py_ssize_t,
        ) -> *const std::os::raw::c_char;
    }
    let mut size: pyo3::ffi::Py_ssize_t = 0;
    // SAFETY: `s` is a live str object (the borrow keeps it alive for 'a,
    // and with it the UTF-8 buffer the call returns, which CPython frees
    // only with the object); the GIL is held (a `Bound` proves it).
    let ptr = unsafe { PyUnicode_AsUTF8AndSize(s.as_ptr(), &mut size) };
    if ptr.is_null() {
        return Err(PyErr::fetch(s.py()));
    }
    let len = usize::try_from(size).map_err(|_| PyValueError::new_err("negative string size"))?;
    // SAFETY: CPython returns `size` bytes of valid UTF-8 at `ptr` (it
    // fails, handled above, for strings that are not valid Unicode).
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    // SAFETY: see above: the buffer is UTF-8 by CPython's contract.
    Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
}

/// A Python value (None, bool, int, float, str, list/tuple, dict with str
/// keys) as JSON.
pub(crate) fn to_json(v: &Bound<'_, PyAny>) -> PyResult<Json> {
    to_json_at(v, 0)
}

fn to_json_at(v: &Bound<'_, PyAny>, depth: usize) -> PyResult<Json> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!("value nested deeper than {MAX_DEPTH} levels")));
    }
    if v.is_none() {
        return Ok(Json::Null);
    }
    if let Ok(b) = v.cast::<PyBool>() {
        return Ok(Json::Bool(b.is_true()));
    }
    if let Ok(i) = v.cast::<PyInt>() {
        if let Ok(n) = i.extract::<i64>() {
            return Ok(Json::from(n));
        }
        if let Ok(n) = i.extract::<u64>() {
            return Ok(Json::from(n));
        }
        return Err(PyValueError::new_err(format!("integer {i} does not fit 64 bits")));
    }
    if let Ok(f) = v.cast::<PyFloat>() {
        return serde_json::Number::from_f64(f.value())
            .map(Json::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{} is not a JSON number", f.value())));
    }
    if let Ok(s) = v.cast::<PyString>() {
        return Ok(Json::String(utf8(s)?.to_owned()));
    }
    if let Ok(l) = v.cast::<PyList>() {
        return l.iter().map(|x| to_json_at(&x, depth + 1)).collect::<PyResult<Vec<_>>>().map(Json::Array);
    }
    if let Ok(t) = v.cast::<PyTuple>() {
        return t.iter().map(|x| to_json_at(&x, depth + 1)).collect::<PyResult<Vec<_>>>().map(Json::Array);
    }
    if let Ok(d) = v.cast::<PyDict>() {
        let mut map = serde_json::Map::with_capacity(d.len());
        for (k, x) in d.iter() {
            let k = k
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err(format!("JSON object keys must be str, not {k:?}")))?;
            map.insert(utf8(k)?.to_owned(), to_json_at(&x, depth + 1)?);
        }
        return Ok(Json::Object(map));
    }
    Err(PyTypeError::new_err(format!(
        "{} is not JSON (None, bool, int, float, str, list, tuple or dict)",
        v.get_type().name()?
    )))
}

/// JSON as a Python value (dict, list, str, int, float, bool, None).
pub(crate) fn from_json<'py>(py: Python<'py>, v: &Json) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Json::Null => py.None().into_bound(py),
        Json::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_pyobject(py)?.into_any(),
            (None, Some(u)) => u.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Json::String(s) => PyString::new(py, s).into_any(),
        Json::Array(items) => {
            let list = PyList::empty(py);
            for x in items {
                list.append(from_json(py, x)?)?;
            }
            list.into_any()
        }
        Json::Object(map) => {
            let dict = PyDict::new(py);
            for (k, x) in map {
                dict.set_item(k, from_json(py, x)?)?;
            }
            dict.into_any()
        }
    })
}
