"""Finding, building and loading libgorun.so (the C ABI, ../../capi)."""
import ctypes
import fcntl
import os
import re
import subprocess
import sys

# include/gorun.h's GORUN_ABI_VERSION, the version of the C ABI this
# package's calls (load's sig, the torch extension) were written for: a
# library whose gorun_abi_version() differs is refused.
ABI_VERSION = 1

_HERE = os.path.dirname(os.path.abspath(__file__))
_REPO = os.path.dirname(os.path.dirname(_HERE))


def _newest_source(root):
    newest = 0.0
    for d, dirs, files in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("python", "build")]
        for f in files:
            if f.endswith((".go", ".c", ".h")) or f in ("go.mod", "go.sum"):
                newest = max(newest, os.path.getmtime(os.path.join(d, f)))
    return newest


def _build_dir():
    d = os.environ.get("GORUN_BUILD_DIR") or os.path.join(_REPO, "build")
    try:
        os.makedirs(d, exist_ok=True)
        if os.access(d, os.W_OK):
            return d
    except OSError:
        pass
    d = os.path.join(os.path.expanduser("~"), ".cache", "gorun")
    os.makedirs(d, exist_ok=True)
    return d


def library_path():
    """The shared library to load: $GORUN_LIB, or one built from this checkout
    (rebuilt with the go tool when a source file is newer)."""
    explicit = os.environ.get("GORUN_LIB")
    if explicit:
        return explicit
    if not os.path.exists(os.path.join(_REPO, "capi")):
        raise ImportError("gorun: set GORUN_LIB to libgorun.so (no checkout found beside the package)")
    out = os.path.join(_build_dir(), "libgorun.so")
    if _stale(out):
        # Every rank of a job may get here at once: one builds, the others
        # wait and then find it fresh (and never load a half-replaced file).
        with open(out + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if _stale(out):
                _build(out)
    return out


def _stale(out):
    return not os.path.exists(out) or os.path.getmtime(out) < _newest_source(_REPO)


def _build(out):
    go = os.environ.get("GO", "go")
    tmp = out + ".%d.tmp" % os.getpid()
    print("gorun: building %s with go build -buildmode=c-shared ./capi..." % out, file=sys.stderr, flush=True)
    try:
        subprocess.run([go, "build", "-buildmode=c-shared", "-o", tmp, "./capi"],
                       cwd=_REPO, check=True, capture_output=True, text=True)
    except FileNotFoundError:
        raise ImportError("gorun: libgorun.so is missing and the go tool is not on PATH")
    except subprocess.CalledProcessError as e:
        raise ImportError("gorun: building libgorun.so failed:\n" + e.stderr)
    os.replace(tmp, out)  # atomic, so concurrent ranks never load a half-written file
    for extra in (tmp[:-3] + "h", os.path.splitext(tmp)[0] + ".h"):
        if os.path.exists(extra):
            os.remove(extra)


def _abi_functions(sig):
    """The functions a libgorun.so must have for this package: every one
    include/gorun.h declares (the torch extension calls some the package
    does not), or, without the header beside the package, those in sig."""
    try:
        with open(os.path.join(_REPO, "include", "gorun.h")) as f:
            text = f.read()
    except OSError:
        text = ""
    text = re.sub(r"/\*.*?\*/|//[^\n]*", "", text, flags=re.S)
    declared = re.findall(r"^[A-Za-z][\w \t*]*?\b(gorun_\w+)\s*\(", text, flags=re.M)
    return declared or list(sig) + ["gorun_strerror", "gorun_last_error"]


def _unusable(path, why):
    """ImportError for a libgorun.so this package cannot use: which, why,
    and how to get one it can."""
    if not os.environ.get("GORUN_LIB"):
        return ImportError("gorun: cannot use %s: %s; delete it, and the package builds it again from %s"
                           % (path, why, _REPO))
    if os.path.exists(os.path.join(_REPO, "capi")):
        fix = ("build it from this checkout (cd %s && go build -buildmode=c-shared -o %s ./capi), "
               "or unset GORUN_LIB to have the package build its own" % (_REPO, path))
    else:
        fix = "build it from the gorun source this package came from (go build -buildmode=c-shared -o %s ./capi)" % path
    return ImportError("gorun: cannot use GORUN_LIB=%s: %s; %s" % (path, why, fix))


def load():
    path = library_path()
    # RTLD_GLOBAL: the torch backend's extension binds its gorun_* symbols
    # to this very copy (one Go runtime, one table of handles per process).
    try:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError as e:
        raise _unusable(path, str(e)) from None
    i64, c_int, vp, sz = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t
    p_i64, p_int = ctypes.POINTER(i64), ctypes.POINTER(c_int)
    sig = {
        "gorun_abi_version": [],
        "gorun_init": [p_i64],
        "gorun_launched": [],
        "gorun_finalize": [i64],
        "gorun_abort": [i64, ctypes.c_char_p],
        "gorun_rank": [i64, p_int],
        "gorun_size": [i64, p_int],
        "gorun_local_rank": [i64, p_int],
        "gorun_local_size": [i64, p_int],
        "gorun_barrier": [i64],
        "gorun_allreduce": [i64, vp, vp, sz, c_int, c_int],
        "gorun_broadcast": [i64, vp, sz, c_int, c_int],
        "gorun_allgather": [i64, vp, vp, sz, c_int],
        "gorun_reduce_scatter": [i64, vp, vp, sz, c_int, c_int],
        "gorun_iallreduce": [i64, vp, vp, sz, c_int, c_int, p_i64],
        "gorun_ibroadcast": [i64, vp, sz, c_int, c_int, p_i64],
        "gorun_iallgather": [i64, vp, vp, sz, c_int, p_i64],
        "gorun_ireduce_scatter": [i64, vp, vp, sz, c_int, c_int, p_i64],
        "gorun_reduce": [i64, vp, vp, sz, c_int, c_int, c_int],
        "gorun_gather": [i64, vp, vp, sz, c_int, c_int],
        "gorun_scatter": [i64, vp, vp, sz, c_int, c_int],
        "gorun_alltoall": [i64, vp, vp, sz, c_int],
        "gorun_scan": [i64, vp, vp, sz, c_int, c_int],
        "gorun_exscan": [i64, vp, vp, sz, c_int, c_int],
        "gorun_send": [i64, vp, sz, c_int, c_int, c_int],
        "gorun_recv": [i64, vp, sz, c_int, c_int, c_int],
        "gorun_isend": [i64, vp, sz, c_int, c_int, c_int, p_i64],
        "gorun_irecv": [i64, vp, sz, c_int, c_int, c_int, p_i64],
        "gorun_ibarrier": [i64, p_i64],
        "gorun_allgatherv": [i64, vp, sz, vp, vp, vp, c_int],
        "gorun_alltoallv": [i64, vp, vp, vp, vp, vp, vp, c_int],
        "gorun_wait": [i64],
        "gorun_test": [i64, p_int],
        "gorun_shrink": [i64, p_i64],
        "gorun_grow": [i64, p_i64],
        "gorun_joiners": [i64, p_int],
        "gorun_comm_create_group": [i64, vp, c_int, c_int, p_i64],
        "gorun_refuse": [i64, ctypes.c_char_p, ctypes.c_char_p],
    }
    # A library of another ABI version may declare the same functions with
    # other arguments: refuse it before any call, naming both versions.
    if hasattr(lib, "gorun_abi_version"):
        lib.gorun_abi_version.argtypes = []
        lib.gorun_abi_version.restype = c_int
        version = lib.gorun_abi_version()
        if version != ABI_VERSION:
            raise _unusable(path, "it has gorun's C ABI version %d (gorun_abi_version()), and this package was "
                                  "written for version %d (GORUN_ABI_VERSION in include/gorun.h), so it was built "
                                  "from %s gorun than this package"
                                  % (version, ABI_VERSION, "an older" if version < ABI_VERSION else "a newer"))
    # A library built before a function was added to the C ABI loads, and
    # then fails at the first call of it (or the torch extension's load),
    # naming one symbol and not why: name every one missing, and the fix.
    missing = [name for name in _abi_functions(sig) if not hasattr(lib, name)]
    if missing:
        shown = ", ".join(missing[:8]) + (" and %d more" % (len(missing) - 8) if len(missing) > 8 else "")
        raise _unusable(path, "it lacks %s (declared in include/gorun.h), so it was built from an older gorun "
                              "than this package" % shown)
    for name, args in sig.items():
        f = getattr(lib, name)
        f.argtypes = args
        f.restype = c_int
    lib.gorun_strerror.argtypes = [c_int]
    lib.gorun_strerror.restype = ctypes.c_char_p
    lib.gorun_last_error.argtypes = []
    lib.gorun_last_error.restype = ctypes.c_char_p
    return lib
