"""The streaming contract of mapagg programs, spoken for a mapper, a reducer and a combiner.

The worker starts the program with MAPAGG_ROLE set:

* ``map``: the input records (lines) on stdin; ``mapper(record)`` yields (key, value) pairs.
* ``combine``: key<TAB>value lines sorted by key; ``combiner(key, values)`` returns one value.
* ``reduce``: key<TAB>value lines sorted by key; ``reducer(key, values)`` returns a value (the
  record key<TAB>value), or yields (key, value) records, or returns None (no record).
* ``describe``: prints what the program can do, as JSON.

Keys are strings. Values are any JSON value: they travel as JSON text, so a reducer gets back
the ints, lists and dicts its mapper emitted. In a field, tab, newline, CR and backslash are
written \\t \\n \\r \\\\.
"""

import inspect
import json
import os
import sys
import traceback

__all__ = ["run", "params", "task", "escape", "unescape", "ProtocolError"]


class ProtocolError(Exception):
    """Input that does not follow the contract: a line without a TAB, say."""


_ESC = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\\": "\\\\"}
_UNESC = {"t": "\t", "n": "\n", "r": "\r", "\\": "\\"}


def escape(s):
    """Escapes tab, newline, CR and backslash in a field."""
    if "\\" in s or "\t" in s or "\n" in s or "\r" in s:
        return "".join(_ESC.get(c, c) for c in s)
    return s


def unescape(s):
    """Decodes \\t \\n \\r \\\\ in a field; any other backslash stays as it is."""
    if "\\" not in s:
        return s
    out, i, n = [], 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n and s[i + 1] in _UNESC:
            out.append(_UNESC[s[i + 1]])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def params():
    """The job's parameters (MAPAGG_PARAMS), as a dict."""
    return json.loads(os.environ.get("MAPAGG_PARAMS") or "{}")


def task():
    """What runs: role, job id, and the shard (map, combine) or partition (reduce) index."""
    e = os.environ
    idx = e.get("MAPAGG_SHARD", e.get("MAPAGG_PARTITION", ""))
    return {"role": e.get("MAPAGG_ROLE", ""), "job": e.get("MAPAGG_JOB_ID", ""), "index": int(idx) if idx else None}


def _key_text(key):
    return key if isinstance(key, str) else json.dumps(key, separators=(",", ":"))


def _value_text(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _value(text):
    """A value from its text: JSON if it is JSON (as the Python side writes), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


class _Out:
    """Buffered key<TAB>value lines on stdout."""

    def __init__(self, stream):
        self.stream = stream
        self.lines = []

    def write(self, key, value_text):
        self.lines.append(escape(_key_text(key)) + "\t" + escape(value_text) + "\n")
        if len(self.lines) >= 8192:
            self.flush()

    def flush(self):
        if self.lines:
            self.stream.write("".join(self.lines).encode("utf-8", "surrogateescape"))
            self.lines = []
        self.stream.flush()


def _lines(stream):
    for raw in stream:
        yield raw.decode("utf-8", "surrogateescape").rstrip("\n")


def _pairs(stream):
    """(key, value text) of each key<TAB>value line."""
    for n, line in enumerate(_lines(stream), 1):
        k, sep, v = line.partition("\t")
        if not sep:
            raise ProtocolError(f"input line {n} has no TAB between key and value: {line[:80]!r}")
        yield unescape(k), unescape(v.rstrip("\r"))


def _groups(stream):
    """(key, values iterator) for each run of equal keys."""
    pairs = _pairs(stream)
    pending = next(pairs, None)
    while pending is not None:
        key = pending[0]
        state = {"next": pending}

        def values():
            while state["next"] is not None and state["next"][0] == key:
                v = state["next"][1]
                state["next"] = next(pairs, None)
                yield _value(v)

        vals = values()
        yield key, vals
        for _ in vals:  # what the reducer did not read
            pass
        pending = state["next"]


# In-mapper combining: values buffered per key before they are combined and written.
_COMBINE_ITEMS = 1 << 20


def _map(mapper, combiner, out, stream):
    if combiner is None:
        for record in _lines(stream):
            for k, v in mapper(record) or ():
                out.write(k, _value_text(v))
        return
    buf, n = {}, 0
    for record in _lines(stream):
        for k, v in mapper(record) or ():
            values = buf.get(k)
            if values is None:
                buf[k] = [v]
            else:
                values.append(v)
            n += 1
        if n >= _COMBINE_ITEMS:
            _flush_combined(buf, combiner, out)
            buf, n = {}, 0
    _flush_combined(buf, combiner, out)


def _flush_combined(buf, combiner, out):
    for k, values in buf.items():
        out.write(k, _value_text(values[0] if len(values) == 1 else combiner(k, values)))


def _combine(combiner, out, stream):
    for key, values in _groups(stream):
        out.write(key, _value_text(combiner(key, list(values))))


def _reduce(reducer, out, stream):
    for key, values in _groups(stream):
        result = reducer(key, values)
        if inspect.isgenerator(result):
            for k, v in result:
                out.write(k, _value_text(v))
        elif result is not None:
            out.write(key, _value_text(result))


def _caller_functions(depth=2):
    frame = inspect.stack()[depth].frame
    g = frame.f_globals
    return g.get("mapper"), g.get("combiner"), g.get("reducer")


def run(mapper=None, reducer=None, combiner=None, argv=None, stdin=None, stdout=None, environ=None):
    """Speaks the contract with the functions given, or those named mapper, reducer and combiner
    in the calling module. Exits the process: 0 on success, 1 when a function raised (its
    traceback and a one-line summary on stderr, which the job's error quotes), 2 on misuse.

    Without MAPAGG_ROLE it runs the whole job locally over the files in argv (or stdin) and
    prints the output records sorted by key: a way to try a job before a cluster runs it.
    """
    if mapper is None and reducer is None and combiner is None:
        mapper, combiner, reducer = _caller_functions()
    environ = os.environ if environ is None else environ
    stdin = sys.stdin.buffer if stdin is None else stdin
    stdout = sys.stdout.buffer if stdout is None else stdout
    argv = sys.argv[1:] if argv is None else argv
    role = environ.get("MAPAGG_ROLE", "")
    out = _Out(stdout)
    try:
        if role == "describe":
            # In-mapper combining replaces a combine pass: the worker need not run one.
            out.stream.write(json.dumps({"combine": False, "language": "python"}).encode() + b"\n")
        elif role == "map":
            _need(mapper, "mapper", role)
            _map(mapper, combiner, out, stdin)
        elif role == "combine":
            _need(combiner, "combiner", role)
            _combine(combiner, out, stdin)
        elif role == "reduce":
            _need(reducer, "reducer", role)
            _reduce(reducer, out, stdin)
        elif role == "":
            _local(mapper, combiner, reducer, argv, stdin, out)
        else:
            raise _Usage(f"MAPAGG_ROLE={role!r}: want map, combine, reduce or describe")
        out.flush()
    except _Usage as e:
        print(f"mapagg: {e}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:
        sys.exit(0)  # the worker stopped reading: it says why
    except Exception as e:  # noqa: BLE001 - the job's code: report and fail the task
        traceback.print_exc()
        print(f"mapagg: {role or 'local run'} failed: {type(e).__name__}: {e}", file=sys.stderr)
        sys.stderr.flush()
        sys.exit(1)
    sys.exit(0)


class _Usage(Exception):
    pass


def _need(fn, name, role):
    if fn is None:
        raise _Usage(f"MAPAGG_ROLE={role}: this program defines no {name}")


def _local(mapper, combiner, reducer, argv, stdin, out):
    """A whole job in this process: map every line of the files, group, reduce in key order."""
    _need(mapper, "mapper", "map")
    _need(reducer, "reducer", "reduce")
    streams = [open(path, "rb") for path in argv] if argv else [stdin]
    groups = {}
    for s in streams:
        for record in _lines(s):
            for k, v in mapper(record) or ():
                groups.setdefault(_key_text(k), []).append(json.loads(_value_text(v)))
    for key in sorted(groups, key=lambda k: k.encode("utf-8", "surrogateescape")):
        values = groups[key]
        if combiner is not None and len(values) > 1:
            values = [combiner(key, values)]
        result = reducer(key, iter(values))
        if inspect.isgenerator(result):
            for k, v in result:
                out.write(k, _value_text(v))
        elif result is not None:
            out.write(key, _value_text(result))
