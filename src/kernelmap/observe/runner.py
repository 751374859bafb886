"""The debuggee's side of a capture: run what the user asked for (a script,
code, `module:function`, or an operator or Python name with example inputs)
under the debugger, and tell the agent (kernelmap.observe.agent) where the
calls of interest begin and end.

Run as `python runner.py SPEC.json` by the debugger; it imports only the
standard library before torch, so that it runs in any environment that has
torch. SPEC: {"mode": "script"|"code"|"function"|"call"|"batch", "target": ...,
"argv": [...], "info": path, "repeat_s": seconds, "threads": n}. `info` receives
one JSON object: the process's torch version, commit and CPU capability, the
windows (what each called), and how the run ended.
"""

import ctypes
import json
import os
import runpy
import signal
import sys
import time
import traceback

MAGIC = 0x4B4D0000
READY, END, BEGIN = MAGIC, MAGIC + 1, MAGIC + 2

_libc = ctypes.CDLL(None)
_marker = _libc.sched_get_priority_max
_marker.argtypes = [ctypes.c_int]


def marker(code):
    _marker(code)


def die_with_parent():
    """SIGKILL when the debugger dies, so that nothing is left running."""
    try:
        _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class Info:
    def __init__(self, path):
        self.path = path
        self.data = {"pid": os.getpid(), "windows": [], "status": "running"}
        self.flush()

    def flush(self):
        if not self.path:
            return
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f)
        os.replace(tmp, self.path)


def torch_facts(info):
    import torch

    info.data["torch"] = torch.__version__
    info.data["git_version"] = torch.version.git_version
    try:
        info.data["capability"] = torch.backends.cpu.get_cpu_capability()
    except Exception:
        info.data["capability"] = None
    info.data["threads"] = torch.get_num_threads()
    return torch


def user_frame_error(exc):
    """The last line of the traceback that is the user's, not the runner's."""
    tb = traceback.extract_tb(exc.__traceback__)
    mine = os.path.abspath(__file__)
    frames = [f for f in tb if os.path.abspath(f.filename) != mine]
    where = "%s:%s" % (frames[-1].filename, frames[-1].lineno) if frames else ""
    return {"type": type(exc).__name__, "message": str(exc).splitlines()[0][:300] if str(exc) else "", "where": where}


def call_window(info, index, what, fn):
    info.data["windows"].append(what)
    marker(BEGIN + index)
    try:
        return fn()
    finally:
        marker(END)


def load(name):
    """The function `module:name` names."""
    import importlib

    module, _, attr = name.partition(":")
    return getattr(importlib.import_module(module), attr)


def run_batch(spec, info, torch):
    """Run prepared calls, one window each: the golden set's recording."""
    calls = load(spec["prepare"])(spec, torch)
    info.data["prepared"] = len(calls)
    info.flush()
    marker(READY)
    for i, (what, fn) in enumerate(calls):
        try:
            call_window(info, i, what, fn)
        except Exception as e:  # the sample input fails: the window is kept, its error noted
            what["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")
    info.flush()


def main():
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    die_with_parent()
    info = Info(spec.get("info"))
    if spec.get("path"):
        sys.path[:0] = spec["path"]
    torch = torch_facts(info)
    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    info.flush()
    mode, target = spec["mode"], spec.get("target")
    status = "ok"
    try:
        if mode == "batch":
            run_batch(spec, info, torch)
        else:
            marker(READY)
            if mode == "script":
                sys.argv = [target] + list(spec.get("argv") or [])
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
                call_window(info, 0, {"script": target}, lambda: runpy.run_path(target, run_name="__main__"))
            elif mode == "code":
                sys.argv = ["-c"] + list(spec.get("argv") or [])
                code = compile(target, "<string>", "exec")
                call_window(info, 0, {"code": target}, lambda: exec(code, {"__name__": "__main__"}))
            elif mode == "function":
                import importlib

                module, _, name = target.partition(":")
                sys.path.insert(0, os.getcwd())
                fn = importlib.import_module(module)
                for part in name.split("."):
                    fn = getattr(fn, part)
                call_window(info, 0, {"function": target}, fn)
            elif mode == "call":
                what, fn = load(spec.get("prepare") or "kernelmap.observe.examples:example_call")(target, torch, spec)
                deadline = time.monotonic() + float(spec.get("repeat_s") or 0)
                i = 0
                while True:
                    call_window(info, i, dict(what, repeat=i), fn)
                    i += 1
                    if time.monotonic() >= deadline or i >= int(spec.get("max_repeat") or 100000):
                        break
            else:
                raise SystemExit("unknown mode %r" % mode)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        status = "exit %d" % code
        info.data["exit_code"] = code
    except KeyboardInterrupt:
        status = "interrupted"
    except BaseException as e:
        status = "no example" if type(e).__name__ == "NoExample" else "raised"
        info.data["error"] = user_frame_error(e)
    info.data["status"] = status
    info.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if status in ("ok", "exit 0") else 3)


if __name__ == "__main__":
    main()
