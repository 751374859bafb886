"""The half of kernelmap's capture that runs inside gdb (Note [why gdb]):
read a JSON config, run the debuggee, stop at the breakpoints and samples
it asks for, and write each stop's stack as one JSON line.

This file is executed by gdb's own Python (`gdb -x agent.py`), which is not
the project's interpreter: it imports only the standard library and `gdb`.

Config (the file named by $KERNELMAP_OBSERVE_AGENT), all keys optional but `out`:

    out          where the JSON lines go
    breaks       function names (gdb linespecs: `add_kernel`, `at::_ops::add_Tensor::call`)
    offsets      {library basename: [offsets of function entries]}: one-shot traps (Note [traps])
    hot          names of functions hit all the time (memcpy): armed only inside a window
    one_shot     a breakpoint location records its first hit per window, then rests
    max_hits     stacks recorded per breakpoint location (after that it rests)
    windows      record only between the debuggee's BEGIN and END markers
    sample_hz    interrupt the debuggee this often and record every thread's stack
    helpers      CPython's gdb helpers (python3.X-gdb.py), for the Python frames
    deadline_s   wall-clock bound: the debuggee is killed when it passes
    stop_at      stop a stack's walk at the first frame whose name starts so (and keep it)
    cut_at_python  stop a stack's walk at the interpreter's first frame
    entries      find each native frame's function entry (`info symbol`: slower)
    need         record a break only when a frame's name starts with one of these
    max_depth    frames per stack

The debuggee talks to the agent through `sched_get_priority_max(code)`, a libc
call without side effects that nothing else makes: READY (torch is imported:
place the breakpoints), BEGIN+i (window i starts), END.

Records: {"t": "ready"|"stack"|"exit"|"signal"|"timeout"|"error"|"unplaced", ...}.
A stack's frames run innermost first; a native frame is
{"n": name, "lib": basename, "off": pc offset in the library, "fn": function
entry offset}; a Python frame is {"py": function, "file": path, "line": n}.
"""

import json
import os
import signal
import threading
import time

import gdb  # noqa: F401  (only inside gdb)

# Note [traps]
# The golden set breaks on some 34,000 functions. gdb's own breakpoints cost
# O(n) each to create (it re-sorts its location list per breakpoint), which
# is minutes for that many; so those are traps instead: the agent writes an
# int3 over each function's first byte through gdb's memory API, and on the
# SIGTRAP it raises puts the byte back, moves the pc back onto the entry and
# walks the stack from there. A trap fires once; the agent re-arms the ones
# that fired when the next window begins. A trap hit outside a window (or in
# no operator) is stepped over with the byte restored, then re-armed.
INT3 = b"\xcc"

MAGIC = 0x4B4D0000
READY, END, BEGIN = MAGIC, MAGIC + 1, MAGIC + 2
MARKER = "sched_get_priority_max"
EVALFRAME = "_PyEval_EvalFrameDefault"
SAMPLE_SIGNAL = signal.SIGURG


class Agent:
    def __init__(self, config):
        self.config = config
        self.out = open(config["out"], "a", buffering=1)
        self.window = None if config.get("windows") else -1
        self.by_address = {}  # location address -> [breakpoint, spec, hits]
        self.consumed = []
        self.hot = []
        self.stop_event = None
        self.timed_out = False
        self.sampling = False
        self.helpers = None
        self.pid = 0
        self.bases = {}
        self.traps = {}  # address -> original byte, armed or not
        self.fired = []  # trap addresses that fired in this window

    # -- output ---------------------------------------------------------------
    def write(self, record):
        self.out.write(json.dumps(record) + "\n")

    # -- setup ----------------------------------------------------------------
    def setup(self):
        for command in (
            "set pagination off",
            "set confirm off",
            "set width 0",
            "set print thread-events off",
            "set print inferior-events off",
            "set breakpoint pending on",
            "set auto-load safe-path /",
            "handle all nostop noprint pass",
            "handle SIGSEGV SIGBUS SIGILL SIGFPE SIGABRT stop print pass",
            "handle SIGTRAP stop print nopass",
            "handle %s stop print nopass" % signal.Signals(SAMPLE_SIGNAL).name,
        ):
            gdb.execute(command, to_string=True)
        if self.config.get("helpers"):
            try:
                gdb.execute("source " + self.config["helpers"], to_string=True)
                import __main__

                self.helpers = __main__.Frame if hasattr(__main__, "Frame") else None
            except gdb.error as e:
                self.write({"t": "note", "message": "CPython's gdb helpers did not load: %s" % e})
        self.marker_bp = gdb.Breakpoint(MARKER, internal=True)
        gdb.events.stop.connect(self.on_stop)
        gdb.events.exited.connect(self.on_exit)
        deadline = self.config.get("deadline_s")
        if deadline:
            threading.Thread(target=self.watchdog, args=(float(deadline),), daemon=True).start()

    def watchdog(self, seconds):
        """Stop at the deadline, or as soon as the process that started gdb is gone."""
        parent = os.getppid()
        end = time.monotonic() + seconds
        while time.monotonic() < end and os.getppid() == parent:
            time.sleep(0.2)
        self.timed_out = True
        self.interrupt()

    def interrupt(self):
        if self.pid:
            try:
                os.kill(self.pid, SAMPLE_SIGNAL)
            except OSError:
                pass

    def sampler(self, hz):
        period = 1.0 / hz
        while self.pid and not self.timed_out:
            time.sleep(period)
            if self.window is not None:
                self.interrupt()

    def on_stop(self, event):
        self.stop_event = event

    def on_exit(self, event):
        code = getattr(event, "exit_code", None)
        self.write({"t": "exit", "code": code})
        self.pid = 0

    def library_bases(self):
        """Each loaded library's load address, from the process's own map."""
        bases = {}
        try:
            with open("/proc/%d/maps" % self.pid) as maps:
                for line in maps:
                    parts = line.split()
                    if len(parts) >= 6 and parts[5].startswith("/"):
                        name = os.path.basename(parts[5])
                        start = int(parts[0].split("-")[0], 16) - int(parts[2], 16)
                        bases.setdefault(name, start)
        except OSError:
            pass
        return bases

    def place(self):
        """Place the breakpoints the config asks for, once torch is loaded."""
        self.bases = self.library_bases()
        unplaced = []
        for spec in self.config.get("breaks") or ():
            self.add(spec, spec, unplaced)
        for spec in self.config.get("hot") or ():
            b = self.add(spec, spec, unplaced)
            if b is not None:
                self.hot.append(b)
                if self.window is None:
                    b.enabled = False
        inferior = gdb.selected_inferior()
        for lib, offsets in (self.config.get("offsets") or {}).items():
            base = self.bases.get(lib)
            if base is None:
                unplaced.append(lib)
                continue
            for off in offsets:
                address = base + off
                try:
                    self.traps[address] = bytes(inferior.read_memory(address, 1))
                    inferior.write_memory(address, INT3)
                except gdb.MemoryError:
                    unplaced.append("%s+%#x" % (lib, off))
        if unplaced:
            self.write({"t": "unplaced", "names": unplaced})
        self.write({"t": "ready", "breakpoints": len(self.by_address), "traps": len(self.traps), "bases": {k: v for k, v in self.bases.items() if k.startswith("lib")}})
        hz = self.config.get("sample_hz")
        if hz:
            threading.Thread(target=self.sampler, args=(float(hz),), daemon=True).start()

    def add(self, location, spec, unplaced):
        try:
            b = gdb.Breakpoint(location, internal=True)
        except (gdb.error, RuntimeError):
            unplaced.append(spec or location)
            return None
        if b.pending or not getattr(b, "locations", [None]):
            unplaced.append(spec or location)
            b.delete()
            return None
        locations = getattr(b, "locations", None)
        if locations:
            for loc in locations:
                self.by_address[loc.address] = [b, spec, 0]
        else:
            self.by_address[int(location[1:]) if location.startswith("*") else 0] = [b, spec, 0]
        return b

    # -- stacks ---------------------------------------------------------------
    def lib_of(self, pc):
        name = gdb.solib_name(pc)
        return os.path.basename(name) if name else None

    def entry_of(self, pc):
        """The entry offset of the function holding `pc`, in its library."""
        try:
            text = gdb.execute("info symbol %d" % pc, to_string=True).strip()
        except gdb.error:
            return None
        if " in section " not in text:
            return None
        head = text.split(" in section ", 1)[0]
        within = 0
        if " + " in head:
            head, _, n = head.rpartition(" + ")
            try:
                within = int(n)
            except ValueError:
                return None
        return pc - within

    def python_frames(self, frame):
        out = []
        try:
            f = self.helpers(frame)
            if not f.is_evalframe():
                return out
            interp = f.get_pyop()
            while interp:
                if interp.is_optimized_out():
                    break
                out.append({"py": interp.co_name.proxyval(set()), "file": interp.filename(), "line": interp.current_line_num()})
                if interp.is_entry():
                    break
                interp = interp.previous()
        except Exception as e:  # a frame the helpers cannot read: say so, keep the native frame
            out.append({"py": "?", "file": "", "line": None, "error": str(e)[:200]})
        return out

    def stack(self, frame):
        frames = []
        stop_at = tuple(self.config.get("stop_at") or ())
        depth = int(self.config.get("max_depth") or 400)
        first = True
        while frame is not None and len(frames) < depth:
            try:
                pc = frame.pc()
                name = frame.name()
            except gdb.error:
                break
            lookup = pc if first else pc - 1
            lib = self.lib_of(lookup)
            if name == EVALFRAME and self.helpers is not None:
                frames.extend(self.python_frames(frame))
            elif name == EVALFRAME and self.config.get("cut_at_python"):
                break
            else:
                record = {"n": name, "lib": lib}
                base = self.bases.get(lib) if lib else None
                if base is not None:
                    record["off"] = lookup - base
                    if self.config.get("entries"):
                        entry = self.entry_of(lookup)
                        if entry is not None:
                            record["fn"] = entry - base
                frames.append(record)
                if name and stop_at and name.startswith(stop_at):
                    break
            first = False
            try:
                frame = frame.older()
            except gdb.error:
                break
        return frames

    def thread_stacks(self, all_threads):
        out = []
        selected = gdb.selected_thread()
        threads = gdb.selected_inferior().threads() if all_threads else [selected]
        for t in sorted(threads, key=lambda t: t.num):
            try:
                t.switch()
                out.append((t.num, self.stack(gdb.newest_frame())))
            except gdb.error:
                continue
        if selected is not None and selected.is_valid():
            selected.switch()
        return out

    # -- the loop -------------------------------------------------------------
    def handle(self, event):
        """Handle one stop; False when the run is over."""
        if isinstance(event, gdb.BreakpointEvent):
            pc = gdb.newest_frame().pc()
            if self.marker_bp in event.breakpoints:
                self.marker(int(gdb.parse_and_eval("$rdi")) & 0xFFFFFFFF)
                return True
            entry = self.by_address.get(pc)
            if entry is None:
                return True
            if self.window is None:
                return True
            b, spec, hits = entry
            frames = self.stack(gdb.newest_frame())
            need = self.config.get("need")
            if need and not any(f.get("n") and f["n"].startswith(tuple(need)) for f in frames):
                return True  # not within an operator call (a memcpy of Python's): leave it armed
            entry[2] = hits + 1
            self.write({"t": "stack", "why": "break", "break": spec, "window": self.window, "thread": gdb.selected_thread().num, "frames": frames})
            limit = self.config.get("max_hits")
            if self.config.get("one_shot") or (limit and entry[2] >= limit):
                self.rest(b, pc)
            return True
        if (isinstance(event, gdb.SignalEvent) and event.stop_signal == "SIGTRAP") or type(event) is gdb.StopEvent:
            return self.trap()  # gdb reports an int3 it did not place as a plain stop
        if isinstance(event, gdb.SignalEvent):
            name = event.stop_signal
            if name == signal.Signals(SAMPLE_SIGNAL).name:
                if self.timed_out:
                    self.write({"t": "timeout"})
                    return False
                if self.window is not None and self.config.get("sample_hz"):
                    for num, frames in self.thread_stacks(True):
                        self.write({"t": "stack", "why": "sample", "window": self.window, "thread": num, "frames": frames})
                return True
            stacks = self.thread_stacks(False)
            self.write({"t": "signal", "name": name, "frames": stacks[0][1] if stacks else []})
            return False
        if os.environ.get("KERNELMAP_OBSERVE_DEBUG"):
            self.write({"t": "note", "message": "stop: %s at %#x" % (type(event).__name__, int(gdb.parse_and_eval("$pc")))})
        return True

    def trap(self):
        """A trap fired (Note [traps]): restore the function's byte, record, re-arm later."""
        inferior = gdb.selected_inferior()
        pc = int(gdb.parse_and_eval("$pc")) - 1
        original = self.traps.get(pc)
        if original is None:
            self.write({"t": "note", "message": "a SIGTRAP at %#x that is no trap of kernelmap's" % pc})
            return True
        inferior.write_memory(pc, original)
        gdb.execute("set var $pc = %d" % pc, to_string=True)
        frames = None
        if self.window is not None:
            frames = self.stack(gdb.newest_frame())
            need = self.config.get("need")
            if need and not any(f.get("n") and f["n"].startswith(tuple(need)) for f in frames):
                frames = None
        if frames is None:  # not in a call: step over the entry and keep the trap armed
            gdb.execute("stepi", to_string=True)
            inferior.write_memory(pc, INT3)
            self.stop_event = None
            return True
        self.write({"t": "stack", "why": "break", "break": None, "window": self.window, "thread": gdb.selected_thread().num, "frames": frames})
        self.fired.append(pc)
        return True

    def rest(self, b, pc):
        """Disarm the location at `pc` (or the whole breakpoint) until the next window."""
        locations = getattr(b, "locations", None)
        if locations and len(locations) > 1:
            for loc in locations:
                if loc.address == pc:
                    loc.enabled = False
                    self.consumed.append(loc)
                    return
        b.enabled = False
        self.consumed.append(b)

    def marker(self, code):
        if code == READY:
            self.pid = gdb.selected_inferior().pid
            self.place()
        elif code == END:
            self.window = None if self.config.get("windows") else -1
            for b in self.hot:
                b.enabled = False
        elif code >= BEGIN:
            self.window = code - BEGIN
            inferior = gdb.selected_inferior()
            for address in self.fired:
                inferior.write_memory(address, INT3)
            self.fired = []
            for b in self.consumed:
                b.enabled = True
            self.consumed = []
            for entry in self.by_address.values():
                entry[2] = 0
            for b in self.hot:
                b.enabled = True

    def run(self):
        self.setup()
        gdb.execute("run")  # not to a string: gdb's warnings (ptrace refused) stay in the log the capture reads
        while True:
            event, self.stop_event = self.stop_event, None
            if event is None or not gdb.selected_inferior().pid:
                break
            if not self.handle(event):
                break
            if self.timed_out:
                self.write({"t": "timeout"})
                break
            try:
                gdb.execute("continue", to_string=True)
            except gdb.error as e:
                if gdb.selected_inferior().pid:
                    self.write({"t": "error", "message": str(e)})
                break
        if gdb.selected_inferior().pid:
            try:
                gdb.execute("kill", to_string=True)
            except gdb.error:
                pass
        self.out.close()


def main():
    with open(os.environ["KERNELMAP_OBSERVE_AGENT"]) as f:
        config = json.load(f)
    agent = Agent(config)
    try:
        agent.run()
    except Exception as e:  # reported as a record; the capture turns it into one line
        agent.write({"t": "error", "message": "%s: %s" % (type(e).__name__, e)})
        try:
            gdb.execute("kill", to_string=True)
        except gdb.error:
            pass
    gdb.execute("quit", to_string=True)


main()
